// RMS_NORM followed by the int8 activation rounding of its output, in one kernel (fuse/,
// pattern NormQuantization): one workgroup per row.
//
//     RMS_NORM(h, x, w, eps) ; BITLINEAR(·, h, ·) ...               (norm_quant)
//     RMS_NORM(h, x, w, eps) ; LINEAR(·, h, ·, Int8Blocks) ...      (norm_quant_blocks)
//
// Preceded by reduce_portable.wgsl or reduce_subgroup.wgsl (Ids, Grid, reduce_*), act_quant.wgsl
// (abs_bits, act_scale_bits, quantize1) and rms_norm.wgsl (its bindings, WG and inv_rms).
// The float arithmetic is that of rms_norm.wgsl, operation for operation, with the same
// workgroup size (the dispatcher takes rms_norm's), so every h_i = x_i · inv · w_i is
// bit-identical to the unfused RMS_NORM's output; the quantization is bitlinear.wgsl's
// `quantize` applied to those values (the absolute maximum is an exact integer maximum,
// whatever the workgroup size). The normed values never leave registers: h is written to
// memory only when a later instruction reads it (WRITE_OUT = 1).
//
// Passes over the row: (1) Σ x² (rms_sum.wgsl's sum_squares); (2) max |h_i|;
// (3) per word of four elements, h, its int8 codes, and (WRITE_OUT) h itself. Pass 3 reads
// and writes only its own four elements, and nothing is read after it, so the in-place entry
// point (h == x) is safe.
//
// norm_quant_blocks does the same with LINEAR's blocks of 32 (linear.wgsl's quantize_blocks,
// bit for bit): pass 2 takes each block's max |h_i| into workgroup memory (an exact integer
// atomicMax, so the order does not matter), one invocation per block turns it into the
// block's scale (act_scale_bits, a 26-step division: once per block, not once per element),
// and pass 3, a word of four elements per step, writes x̂_i = q_i / s_b (when a product
// reads it: WRITE_XHAT), the codes q_i and the scales into `xq`, the scratch buffer the
// LINEAR products read as their x.
//
// HELD = 1 (`GpuOptions::held_norm`, a variant to compare on a GPU): rows of up to 32 · WG
// elements take norm_quant_held / norm_quant_blocks_held, the same passes with each
// invocation's share loaded at once and held in registers; the same bits as the loops.

// Params, x, weight, out, WG and inv_rms are rms_norm.wgsl's (concatenated before this file).
@group(0) @binding(5) var<storage, read_write> acts: array<u32>;
@group(0) @binding(6) var<storage, read_write> act_scales: array<f32>;
// norm_quant_blocks: the int8-block scratch buffer of an x [rows, cols] (linear.wgsl's xq;
// act_quant.wgsl's layout: x̂, the codes, the scales).
@group(0) @binding(7) var<storage, read_write> xq: array<u32>;

// 1 when the normed row must be written to `out`.
override WRITE_OUT: u32 = 1u;
// 1: short enough rows take the held passes (see the top of this file).
override HELD: u32 = 0u;

// The row source is rms_norm.wgsl's `load`: `out` in place (h == x), else `x`. (The in-place
// entry point binds a read-only stand-in at binding 1, unread.)

// Element i of the row source, and of the weight, or 0 past the row: the load is always made
// (at a clamped index), so a run of them has no branch to keep the compiler from issuing
// them all before the first is used.
fn held_src(inplace: bool, base: u32, i: u32) -> f32 {
    return select(0.0, load(inplace, base + min(i, p.cols - 1u)), i < p.cols);
}

fn held_weight(i: u32) -> f32 {
    return select(0.0, weight[min(i, p.cols - 1u)], i < p.cols);
}

// Elements i, i + WG, i + 2·WG, i + 3·WG (0 past the row): sum_squares' order.
fn held4(inplace: bool, base: u32, i: u32) -> vec4<f32> {
    return vec4<f32>(held_src(inplace, base, i), held_src(inplace, base, i + WG),
                     held_src(inplace, base, i + 2u * WG), held_src(inplace, base, i + 3u * WG));
}

fn held_weight4(i: u32) -> vec4<f32> {
    return vec4<f32>(held_weight(i), held_weight(i + WG), held_weight(i + 2u * WG), held_weight(i + 3u * WG));
}

// sum_squares' additions for four more of the invocation's elements (zeros past the row add
// +0, which leaves the non-negative sum unchanged: the same bits as sum_squares).
// The invocation's strided share of a held row: eight words of four elements, as named
// fields (an array indexed in a loop may live in memory).
struct HeldShare {
    x0: vec4<f32>,
    x1: vec4<f32>,
    x2: vec4<f32>,
    x3: vec4<f32>,
    x4: vec4<f32>,
    x5: vec4<f32>,
    x6: vec4<f32>,
    x7: vec4<f32>,
}

fn held_share(inplace: bool, base: u32, i: u32) -> HeldShare {
    return HeldShare(held4(inplace, base, i), held4(inplace, base, i + 4u * WG), held4(inplace, base, i + 8u * WG),
                     held4(inplace, base, i + 12u * WG), held4(inplace, base, i + 16u * WG),
                     held4(inplace, base, i + 20u * WG), held4(inplace, base, i + 24u * WG),
                     held4(inplace, base, i + 28u * WG));
}

// The share's sum of squares, in the loops' order.
fn share_squares(sh: HeldShare) -> f32 {
    var acc = 0.0;
    acc = add_squares(acc, sh.x0);
    acc = add_squares(acc, sh.x1);
    acc = add_squares(acc, sh.x2);
    acc = add_squares(acc, sh.x3);
    acc = add_squares(acc, sh.x4);
    acc = add_squares(acc, sh.x5);
    acc = add_squares(acc, sh.x6);
    acc = add_squares(acc, sh.x7);
    return acc;
}

fn add_squares(acc: f32, v: vec4<f32>) -> f32 {
    var a = acc;
    a = a + v.x * v.x;
    a = a + v.y * v.y;
    a = a + v.z * v.z;
    a = a + v.w * v.w;
    return a;
}

fn abs_max4(mx: u32, h: vec4<f32>) -> u32 {
    return max(mx, max(max(abs_bits(h.x), abs_bits(h.y)), max(abs_bits(h.z), abs_bits(h.w))));
}

// Word wd of the normed row (elements 4·wd .. 4·wd + 3; zeros past the row's words).
fn held_word(inplace: bool, base: u32, wd: u32, inv: f32) -> vec4<f32> {
    let words = p.cols / 4u;
    let e = 4u * min(wd, words - 1u);
    let v = vec4<f32>(load(inplace, base + e), load(inplace, base + e + 1u), load(inplace, base + e + 2u),
                      load(inplace, base + e + 3u));
    let w = vec4<f32>(weight[e], weight[e + 1u], weight[e + 2u], weight[e + 3u]);
    return select(vec4<f32>(0.0), v * inv * w, wd < words);
}

// Word wd's stores: h (WRITE_OUT) and its codes; nothing past the row's words.
fn store_held_word(row: u32, base: u32, wd: u32, h: vec4<f32>, s_bits: u32) {
    if (wd < p.cols / 4u) {
        if (WRITE_OUT == 1u) {
            out[base + 4u * wd] = h.x;
            out[base + 4u * wd + 1u] = h.y;
            out[base + 4u * wd + 2u] = h.z;
            out[base + 4u * wd + 3u] = h.w;
        }
        acts[row * (p.cols / 4u) + wd] = pack4xI8(quantize4(h, s_bits));
    }
}

// Rows the held path takes: up to HELD_GROUPS · 4 elements per invocation.
const HELD_GROUPS: u32 = 8u;

// norm_quant_row for rows of up to 32 · WG elements, in two rounds of loads where the loops
// take about eleven (on an H100 a 2560-wide row took 11 µs, a 6912-wide one 14): every
// element and weight of the invocation's strided share at once (passes 1 and 2 from
// registers, the same values and order of operations as the loops), then its words of four
// consecutive elements at once (pass 3). Named vectors, not arrays: an array indexed in a
// loop may live in memory (a held row in an array was slower on an H100).
fn norm_quant_held(ids: Ids, inplace: bool, row: u32, base: u32) {
    let i = ids.lidx;
    let sh = held_share(inplace, base, i);
    let acc = share_squares(sh);
    let inv = inv_rms(reduce_add_f32(acc, ids));
    var mx = abs_max4(0u, sh.x0 * inv * held_weight4(i));
    mx = abs_max4(mx, sh.x1 * inv * held_weight4(i + 4u * WG));
    mx = abs_max4(mx, sh.x2 * inv * held_weight4(i + 8u * WG));
    mx = abs_max4(mx, sh.x3 * inv * held_weight4(i + 12u * WG));
    mx = abs_max4(mx, sh.x4 * inv * held_weight4(i + 16u * WG));
    mx = abs_max4(mx, sh.x5 * inv * held_weight4(i + 20u * WG));
    mx = abs_max4(mx, sh.x6 * inv * held_weight4(i + 24u * WG));
    mx = abs_max4(mx, sh.x7 * inv * held_weight4(i + 28u * WG));
    let s_bits = act_scale_bits(reduce_max_u32(mx, ids));
    let h0 = held_word(inplace, base, i, inv);
    let h1 = held_word(inplace, base, i + WG, inv);
    let h2 = held_word(inplace, base, i + 2u * WG, inv);
    let h3 = held_word(inplace, base, i + 3u * WG, inv);
    let h4 = held_word(inplace, base, i + 4u * WG, inv);
    let h5 = held_word(inplace, base, i + 5u * WG, inv);
    let h6 = held_word(inplace, base, i + 6u * WG, inv);
    let h7 = held_word(inplace, base, i + 7u * WG, inv);
    store_held_word(row, base, i, h0, s_bits);
    store_held_word(row, base, i + WG, h1, s_bits);
    store_held_word(row, base, i + 2u * WG, h2, s_bits);
    store_held_word(row, base, i + 3u * WG, h3, s_bits);
    store_held_word(row, base, i + 4u * WG, h4, s_bits);
    store_held_word(row, base, i + 5u * WG, h5, s_bits);
    store_held_word(row, base, i + 6u * WG, h6, s_bits);
    store_held_word(row, base, i + 7u * WG, h7, s_bits);
    if (i == 0u) {
        act_scales[row] = bitcast<f32>(s_bits);
    }
}

fn norm_quant_row(ids: Ids, grid: Grid, inplace: bool) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    if (HELD == 1u && p.cols <= 4u * HELD_GROUPS * WG) {
        norm_quant_held(ids, inplace, row, base);
        return;
    }
    let inv = inv_rms(reduce_add_f32(sum_squares(inplace, base, ids.lidx, p.cols), ids));
    var mx = 0u;
    var i = ids.lidx;
    // Four elements per step, loaded together (rms_norm.wgsl's load4).
    for (; i + 3u * WG < p.cols; i = i + 4u * WG) {
        let v = load4(inplace, base, i);
        let w = weight4(i);
        mx = max(mx, max(max(abs_bits(v.x * inv * w.x), abs_bits(v.y * inv * w.y)),
                         max(abs_bits(v.z * inv * w.z), abs_bits(v.w * inv * w.w))));
    }
    for (; i < p.cols; i = i + WG) {
        mx = max(mx, abs_bits(load(inplace, base + i) * inv * weight[i]));
    }
    let s_bits = act_scale_bits(reduce_max_u32(mx, ids));
    let s = bitcast<f32>(s_bits);
    for (var wd = ids.lidx; wd < p.cols / 4u; wd = wd + WG) {
        var h = vec4<f32>();
        for (var b = 0u; b < 4u; b = b + 1u) {
            let e = 4u * wd + b;
            h[b] = load(inplace, base + e) * inv * weight[e];
            if (WRITE_OUT == 1u) {
                out[base + e] = h[b];
            }
        }
        acts[row * (p.cols / 4u) + wd] = pack4xI8(quantize4(h, s_bits));
    }
    if (ids.lidx == 0u) {
        act_scales[row] = s;
    }
}

// h = rms_norm(x), quantized.
@compute @workgroup_size(WG)
fn norm_quant(ids: Ids, grid: Grid) {
    norm_quant_row(ids, grid, false);
}

// out = rms_norm(out), quantized.
@compute @workgroup_size(WG)
fn norm_quant_inplace(ids: Ids, grid: Grid) {
    norm_quant_row(ids, grid, true);
}

// Blocks per row norm_quant_blocks can hold (norm_quant.rs: MAX_BLOCK_ROW).
const MAX_BLOCKS: u32 = 512u;
// The largest |h| bits of each block of the row.
var<workgroup> block_max: array<atomic<u32>, MAX_BLOCKS>;
// Each block's scale bits (act_scale_bits of its maximum).
var<workgroup> block_scale: array<u32, MAX_BLOCKS>;


// After pass 2: every block's scale, one invocation per block (whole workgroup, uniform
// control flow: its barriers order pass 2's maxima before, and the scales before pass 3).
fn block_scales(lidx: u32) {
    workgroupBarrier();
    for (var b = lidx; b < int8_blocks(p.cols); b = b + WG) {
        block_scale[b] = act_scale_bits(atomicLoad(&block_max[b]));
    }
    workgroupBarrier();
}

// Word `wd` of the row's codes (elements 4·wd .. 4·wd + 3, in one block): h (WRITE_OUT),
// x̂ = q / s_b (WRITE_XHAT), the packed codes and, for a block's first word, its scale.
fn store_rounded_word(row: u32, base: u32, wd: u32, inplace: bool, inv: f32) {
    // The word's normed values (0 past the row: code 0).
    var h = vec4<f32>(0.0);
    for (var b = 0u; b < 4u; b = b + 1u) {
        let e = 4u * wd + b;
        if (e < p.cols) {
            h[b] = load(inplace, base + e) * inv * weight[e];
        }
    }
    store_block_word(row, base, wd, h);
}

// Word `wd`'s stores, given its normed values h (0 past the row): h (WRITE_OUT), x̂
// (WRITE_XHAT), the packed codes and, for a block's first word, its scale.
fn store_block_word(row: u32, base: u32, wd: u32, h: vec4<f32>) {
    let blk = wd / BLOCK_WORDS;
    let s_bits = block_scale[blk];
    if (WRITE_OUT == 1u) {
        for (var b = 0u; b < 4u; b = b + 1u) {
            if (4u * wd + b < p.cols) {
                out[base + 4u * wd + b] = h[b];
            }
        }
    }
    let q = quantize4(h, s_bits);
    for (var b = 0u; b < 4u; b = b + 1u) {
        if (WRITE_XHAT == 1u && 4u * wd + b < p.cols) {
            xq[base + 4u * wd + b] = bitcast<u32>(dequantize1(q[b], s_bits));
        }
    }
    xq[int8_code_word(p.rows, p.cols, row, blk, wd % BLOCK_WORDS)] = pack4xI8(q);
    if (wd % BLOCK_WORDS == 0u) {
        xq[int8_scale_word(p.rows, p.cols, row, blk)] = s_bits;
    }
}

// h = rms_norm(x) (or of `out`, in place), rounded to int8 blocks into xq.
// Word wd of the normed row, element by element (0 past the row: its last word may be
// partial), every load made (at a clamped index) as in held_src.
fn held_word_blocks(inplace: bool, base: u32, wd: u32, inv: f32) -> vec4<f32> {
    let e = 4u * wd;
    let v = vec4<f32>(held_src(inplace, base, e), held_src(inplace, base, e + 1u), held_src(inplace, base, e + 2u),
                      held_src(inplace, base, e + 3u));
    let w = vec4<f32>(held_weight(e), held_weight(e + 1u), held_weight(e + 2u), held_weight(e + 3u));
    return v * inv * w;
}

// Pass 2's block maxima for four of the invocation's elements (i, i + WG, ...: held4's).
fn held_block_max4(i: u32, h: vec4<f32>) {
    if (i < p.cols) {
        atomicMax(&block_max[i / ACT_BLOCK], abs_bits(h.x));
    }
    if (i + WG < p.cols) {
        atomicMax(&block_max[(i + WG) / ACT_BLOCK], abs_bits(h.y));
    }
    if (i + 2u * WG < p.cols) {
        atomicMax(&block_max[(i + 2u * WG) / ACT_BLOCK], abs_bits(h.z));
    }
    if (i + 3u * WG < p.cols) {
        atomicMax(&block_max[(i + 3u * WG) / ACT_BLOCK], abs_bits(h.w));
    }
}

// Word wd's stores, when it is one of the row's blocks' words.
fn store_held_block_word(row: u32, base: u32, wd: u32, h: vec4<f32>) {
    if (wd < int8_blocks(p.cols) * BLOCK_WORDS) {
        store_block_word(row, base, wd, h);
    }
}

// norm_quant_blocks_row for rows of up to 32 · WG elements, as norm_quant_held: two rounds
// of loads (the strided share for passes 1 and 2, then the invocation's words).
fn norm_quant_blocks_held(ids: Ids, inplace: bool, row: u32, base: u32) {
    let i = ids.lidx;
    let sh = held_share(inplace, base, i);
    let acc = share_squares(sh);
    // (The reduction's barriers also order the caller's block_max stores before pass 2.)
    let inv = inv_rms(reduce_add_f32(acc, ids));
    held_block_max4(i, sh.x0 * inv * held_weight4(i));
    held_block_max4(i + 4u * WG, sh.x1 * inv * held_weight4(i + 4u * WG));
    held_block_max4(i + 8u * WG, sh.x2 * inv * held_weight4(i + 8u * WG));
    held_block_max4(i + 12u * WG, sh.x3 * inv * held_weight4(i + 12u * WG));
    held_block_max4(i + 16u * WG, sh.x4 * inv * held_weight4(i + 16u * WG));
    held_block_max4(i + 20u * WG, sh.x5 * inv * held_weight4(i + 20u * WG));
    held_block_max4(i + 24u * WG, sh.x6 * inv * held_weight4(i + 24u * WG));
    held_block_max4(i + 28u * WG, sh.x7 * inv * held_weight4(i + 28u * WG));
    block_scales(i);
    let h0 = held_word_blocks(inplace, base, i, inv);
    let h1 = held_word_blocks(inplace, base, i + WG, inv);
    let h2 = held_word_blocks(inplace, base, i + 2u * WG, inv);
    let h3 = held_word_blocks(inplace, base, i + 3u * WG, inv);
    let h4 = held_word_blocks(inplace, base, i + 4u * WG, inv);
    let h5 = held_word_blocks(inplace, base, i + 5u * WG, inv);
    let h6 = held_word_blocks(inplace, base, i + 6u * WG, inv);
    let h7 = held_word_blocks(inplace, base, i + 7u * WG, inv);
    store_held_block_word(row, base, i, h0);
    store_held_block_word(row, base, i + WG, h1);
    store_held_block_word(row, base, i + 2u * WG, h2);
    store_held_block_word(row, base, i + 3u * WG, h3);
    store_held_block_word(row, base, i + 4u * WG, h4);
    store_held_block_word(row, base, i + 5u * WG, h5);
    store_held_block_word(row, base, i + 6u * WG, h6);
    store_held_block_word(row, base, i + 7u * WG, h7);
}

fn norm_quant_blocks_row(ids: Ids, grid: Grid, inplace: bool) {
    let row = grid_index(grid);
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    for (var b = ids.lidx; b < int8_blocks(p.cols); b = b + WG) {
        atomicStore(&block_max[b], 0u);
    }
    if (HELD == 1u && p.cols <= 4u * HELD_GROUPS * WG) {
        norm_quant_blocks_held(ids, inplace, row, base);
        return;
    }
    // (The reduction's barriers also order the stores above before pass 2.)
    let inv = inv_rms(reduce_add_f32(sum_squares(inplace, base, ids.lidx, p.cols), ids));
    var i = ids.lidx;
    for (; i + 3u * WG < p.cols; i = i + 4u * WG) {
        let h = load4(inplace, base, i) * inv * weight4(i);
        atomicMax(&block_max[i / ACT_BLOCK], abs_bits(h.x));
        atomicMax(&block_max[(i + WG) / ACT_BLOCK], abs_bits(h.y));
        atomicMax(&block_max[(i + 2u * WG) / ACT_BLOCK], abs_bits(h.z));
        atomicMax(&block_max[(i + 3u * WG) / ACT_BLOCK], abs_bits(h.w));
    }
    for (; i < p.cols; i = i + WG) {
        atomicMax(&block_max[i / ACT_BLOCK], abs_bits(load(inplace, base + i) * inv * weight[i]));
    }
    block_scales(ids.lidx);
    // Each invocation reads and writes only its own words' elements: in place is safe.
    for (var wd = ids.lidx; wd < int8_blocks(p.cols) * BLOCK_WORDS; wd = wd + WG) {
        store_rounded_word(row, base, wd, inplace, inv);
    }
}

// h = rms_norm(x), rounded to int8 blocks.
@compute @workgroup_size(WG)
fn norm_quant_blocks(ids: Ids, grid: Grid) {
    norm_quant_blocks_row(ids, grid, false);
}

// out = rms_norm(out), rounded to int8 blocks.
@compute @workgroup_size(WG)
fn norm_quant_blocks_inplace(ids: Ids, grid: Grid) {
    norm_quant_blocks_row(ids, grid, true);
}
