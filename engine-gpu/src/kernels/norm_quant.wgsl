// RMS_NORM followed by the int8 activation rounding of its output, in one kernel (fuse/,
// pattern NormQuantization): one workgroup per row.
//
//     RMS_NORM(h, x, w, eps) ; BITLINEAR(·, h, ·) ...               (norm_quant)
//     RMS_NORM(h, x, w, eps) ; LINEAR(·, h, ·, Int8Blocks) ...      (norm_quant_blocks)
//
// Preceded by reduce_portable.wgsl or reduce_subgroup.wgsl (Ids, reduce_*), act_quant.wgsl
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

// Params, x, weight, out, WG and inv_rms are rms_norm.wgsl's (concatenated before this file).
@group(0) @binding(5) var<storage, read_write> acts: array<u32>;
@group(0) @binding(6) var<storage, read_write> act_scales: array<f32>;
// norm_quant_blocks: the int8-block scratch buffer of an x [rows, cols] (linear.wgsl's xq;
// act_quant.wgsl's layout: x̂, the codes, the scales).
@group(0) @binding(7) var<storage, read_write> xq: array<u32>;

// 1 when the normed row must be written to `out`.
override WRITE_OUT: u32 = 1u;

// The row source is rms_norm.wgsl's `load`: `out` in place (h == x), else `x`. (The in-place
// entry point binds a read-only stand-in at binding 1, unread.)

fn norm_quant_row(ids: Ids, inplace: bool) {
    let row = ids.wid.y * ids.nwg.x + ids.wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
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
        var h: vec4<f32>;
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
fn norm_quant(ids: Ids) {
    norm_quant_row(ids, false);
}

// out = rms_norm(out), quantized.
@compute @workgroup_size(WG)
fn norm_quant_inplace(ids: Ids) {
    norm_quant_row(ids, true);
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
    let blk = wd / BLOCK_WORDS;
    let s_bits = block_scale[blk];
    // The word's normed values (0 past the row: code 0).
    var h = vec4<f32>(0.0);
    for (var b = 0u; b < 4u; b = b + 1u) {
        let e = 4u * wd + b;
        if (e < p.cols) {
            h[b] = load(inplace, base + e) * inv * weight[e];
            if (WRITE_OUT == 1u) {
                out[base + e] = h[b];
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
fn norm_quant_blocks_row(ids: Ids, inplace: bool) {
    let row = ids.wid.y * ids.nwg.x + ids.wid.x;
    if (row >= p.rows) {
        return;
    }
    let base = row * p.cols;
    for (var b = ids.lidx; b < int8_blocks(p.cols); b = b + WG) {
        atomicStore(&block_max[b], 0u);
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
fn norm_quant_blocks(ids: Ids) {
    norm_quant_blocks_row(ids, false);
}

// out = rms_norm(out), rounded to int8 blocks.
@compute @workgroup_size(WG)
fn norm_quant_blocks_inplace(ids: Ids) {
    norm_quant_blocks_row(ids, true);
}
