// LINEAR: out[t, j] = Σ_i x[t, i] · W[j, i], weights decoded from their GPU layout
// (kernels/layout.rs) exactly as memory::quant decodes them, products summed in f32.
//
// Preceded by reduce_portable.wgsl or reduce_subgroup.wgsl (Ids, Grid, reduce_add_f32), then
// act_quant.wgsl (abs_bits, act_scale_bits, quantize1, dequantize1) and rms_sum.wgsl
// (sum_squares, inv_rms_of); followed by the file that
// says which weight the decoders read (wword, wscale, weight_rows): linear_weight.wgsl (the
// one at bindings 2 and 3), or linear_multi.wgsl (several, one dispatch for several LINEARs);
// and by the file that defines store_out(i, v), what the products do with output element i:
// product_store.wgsl (write it to `out`), or a fused epilogue (residual_add.wgsl,
// act_mul.wgsl).
//
// Entry points:
// - quantize_blocks (Int8Blocks activations, before gemv, gemv_rows, tiled or tiled_int8):
//   one invocation per block of 32 elements of a row of x (the row's last block shorter when
//   k is not a multiple of 32). It rounds the block exactly as the ISA does (a = max |x_i| over the
//   block, s = 127 / max(a, 1e-5) correctly rounded, q_i = clamp(round(x_i · s), −128, 127))
//   and writes x̂_i = q_i / s, correctly rounded to f32, into a scratch buffer [n, k] (binding
//   5) that the product kernel then reads as its x. So x̂ is the reference's q_i / s_b up to
//   one rounding (relative error ≤ 2⁻²⁴ per element, well inside the product's summation
//   error); the q_i themselves are exact. With the codes and scales it writes (the INT8
//   products' x), x̂ only when a product reads it (WRITE_XHAT, act_quant.wgsl).
// - gemv: one workgroup of WG invocations per output row and token (z); the invocations
//   stride over the row in chunks of 8 elements (consecutive invocations, consecutive
//   chunks: coalesced), then reduce. Each weight byte is read once. For n = 1 (decode).
// - tiled: 64 rows × 32 tokens per workgroup of 256; each 32-column step decodes a 64 × 32
//   weight tile and a 32 × 32 activation tile into workgroup memory, and each invocation
//   accumulates 4 consecutive rows × 2 consecutive tokens (one vec4 and one vec2 load per
//   column: a quarter of the workgroup-memory reads of one scalar load per operand). Each
//   weight tile is read once per 32 tokens (prefill).
// - tiled_int8: the same tiles for int8-block activations against Q4_0, Q4_1 and Q8_0
//   weights, as integer block sums (dot_blocks' arithmetic); see its own comment below.
//
// The dtype is the override DTYPE, so each dtype is its own pipeline without a branch per
// element. Decoding is exact (f16/bf16 widening; code · d with small integer codes and f16
// d; Q4_1's code · d + m, whose product is exact so one rounding either way, fused or not),
// so the weights equal the reference's f32 weights bit for bit; only the summation differs.

struct Params {
    // Weight rows bound in binding 2 (outputs per token of this dispatch).
    m: u32,
    // Columns (elements per row).
    k: u32,
    // Tokens (rows of x).
    n: u32,
    // Bytes per weight row in the file layout (Q4_0, Q4_1, Q8_0).
    row_bytes: u32,
    // Ternary: scales per row in binding 3 (0 for I2_S's one scale).
    scale_stride: u32,
    // Ternary: elements per scale block.
    scale_block: u32,
    // The first bound weight row in the whole weight: a weight larger than one binding is
    // bound as several row windows, one dispatch each (`linear.rs`); 0 otherwise.
    row0: u32,
    // Outputs per token in `out` (the whole weight's rows).
    out_stride: u32,
    // linear_multi.wgsl only (0 elsewhere): the rows of weights 1 and 2, and the first
    // workgroup of each in gemv_multi's grid (weight 0's rows are `m`).
    m1: u32,
    m2: u32,
    wg1: u32,
    wg2: u32,
    // linear_multi.wgsl's *_multi_rope only (rope_qkv.wgsl; 0 elsewhere): the rotation and
    // the caches.
    rope_head_dim: u32,
    rope_k_ctx: u32,
    rope_v_ctx: u32,
    rope_pad: u32,
    rope_pos_value: u32,
    rope_pos_param: u32,
    rope_base_value: u32,
    rope_base_param: u32,
    // ROUND = 2 only: the RMS_NORM's eps (0 elsewhere).
    norm_eps: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// x [n, k] as f32 bits, or the int8-block scratch buffer (act_quant.wgsl's layout: x̂ first).
@group(0) @binding(1) var<storage, read> x: array<u32>;
@group(0) @binding(2) var<storage, read> w: array<u32>;
// Ternary scales (part 1 of the ternary layout); other dtypes bind part 0 here, unread, or
// (ROUND = 2, weights without ternary scales) the RMS_NORM's weight.
@group(0) @binding(3) var<storage, read> ws: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
// quantize_blocks: the int8-block scratch buffer (x̂, the codes and the scales), the x of
// the product kernel that follows.
@group(0) @binding(5) var<storage, read_write> xq: array<u32>;

// Invocations per workgroup of gemv and quantize_blocks (a power of two, ≤ 256).
override WG: u32 = 64u;
// The weight dtype: one of the DT_* below.
override DTYPE: u32 = 0u;
// 1 when x is the int8-block scratch buffer and the weight is Q4_0, Q4_1 or Q8_0: the
// one-token products multiply the codes as integers, a block at a time (dot_blocks).
override INT8: u32 = 0u;
// Where the INT8 products' int8 blocks of x come from (x_block): 0, the scratch buffer
// (x is it) that quantize_blocks or a fused norm filled; 1, rounded by the product itself
// from the LINEAR's f32 x (x is it); 2, the same from RMS_NORM(x) (x is the norm's input,
// its weight at binding 3), its scale computed first (round_prologue). With f32
// activations (INT8 = 0) only 0 (x as it is) or 2 (each element normed as RMS_NORM does,
// in dot_chunks: nothing to round).
override ROUND: u32 = 0u;

const DT_F32: u32 = 0u;
const DT_F16: u32 = 1u;
const DT_BF16: u32 = 2u;
const DT_Q4_0: u32 = 3u;
const DT_Q4_1: u32 = 4u;
const DT_Q8_0: u32 = 5u;
const DT_TERNARY: u32 = 6u;

// The 16 bits at byte offset `off` (even) of the weight buffer.
fn half_at(off: u32) -> u32 {
    return (wword(off >> 2u) >> ((off & 2u) * 8u)) & 0xffffu;
}

// The f16 at byte offset `off` (even), widened.
fn f16_at(off: u32) -> f32 {
    return unpack2x16float(half_at(off)).x;
}

// The 8 bytes at byte offset `off` (even; blocks of 18, 20 and 34 bytes keep their fields on
// 2-byte boundaries) as two words, from two words (aligned) or three, without a branch:
// neighbouring Q8_0 and Q4_0 blocks alternate between the two cases, so the invocations of
// one subgroup would otherwise take both paths one after the other.
fn words_at(off: u32) -> vec2<u32> {
    let i = off >> 2u;
    let aligned = (off & 2u) == 0u;
    let w0 = wword(i);
    let w1 = wword(i + 1u);
    // Aligned, the third word is not needed (and may lie past the buffer): w1 again.
    let w2 = wword(select(i + 2u, i + 1u, aligned));
    let shifted = vec2<u32>((w0 >> 16u) | (w1 << 16u), (w1 >> 16u) | (w2 << 16u));
    return select(shifted, vec2<u32>(w0, w1), aligned);
}

// Element `idx` of the flattened tensor, for the plain dtypes.
fn plain_at(idx: u32) -> f32 {
    if (DTYPE == DT_F32) {
        return bitcast<f32>(wword(idx));
    }
    let h = (wword(idx >> 1u) >> ((idx & 1u) * 16u)) & 0xffffu;
    if (DTYPE == DT_F16) {
        return unpack2x16float(h).x;
    }
    return bitcast<f32>(h << 16u);
}

// Byte offset of block `blk` of weight row `row` (Q4_0: f16 d and 16 code bytes, 18 bytes;
// Q4_1: f16 d, f16 m and 16 code bytes, 20; Q8_0: f16 d and 32 code bytes, 34), and of the
// block's first code byte.
fn block_at(row: u32, blk: u32) -> u32 {
    let bytes = select(select(34u, 20u, DTYPE == DT_Q4_1), 18u, DTYPE == DT_Q4_0);
    return row * p.row_bytes + blk * bytes;
}

fn codes_at(block: u32) -> u32 {
    return block + select(2u, 4u, DTYPE == DT_Q4_1);
}

// Elements e0 .. e0 + 8 of weight row `row` (e0 a multiple of 8), decoded; elements at or
// past k (plain dtypes, whose rows need not be whole chunks) are 0.
fn load8(row: u32, e0: u32) -> array<f32, 8> {
    var v = array<f32, 8>();
    if (DTYPE <= DT_BF16) {
        let base = row * p.k + e0;
        if (e0 + 8u <= p.k && (base & 7u) == 0u) {
            // Whole, aligned chunk: 8 words (f32) or 4 words (halves).
            if (DTYPE == DT_F32) {
                for (var i = 0u; i < 8u; i = i + 1u) {
                    v[i] = bitcast<f32>(wword(base + i));
                }
            } else {
                for (var i = 0u; i < 4u; i = i + 1u) {
                    let h = wword(base / 2u + i);
                    if (DTYPE == DT_F16) {
                        let f = unpack2x16float(h);
                        v[2u * i] = f.x;
                        v[2u * i + 1u] = f.y;
                    } else {
                        v[2u * i] = bitcast<f32>(h << 16u);
                        v[2u * i + 1u] = bitcast<f32>(h & 0xffff0000u);
                    }
                }
            }
        } else {
            for (var i = 0u; i < 8u; i = i + 1u) {
                if (e0 + i < p.k) {
                    v[i] = plain_at(base + i);
                }
            }
        }
        return v;
    }
    if (DTYPE == DT_TERNARY) {
        // Word (row·k + e0) / 16; e0 % 16 is 0 or 8: fields j = 0, 1 or 2, 3 (shift 4).
        let cw = wword((row * p.k + e0) / 16u) >> ((e0 & 8u) / 2u);
        let d = wscale(row * p.scale_stride + e0 / p.scale_block);
        for (var i = 0u; i < 8u; i = i + 1u) {
            let c = (cw >> (8u * (i & 3u) + 2u * (i / 4u))) & 3u;
            v[i] = f32(i32(c) - 1) * d;
        }
        return v;
    }
    let blk = e0 / 32u;
    let j = e0 % 32u;
    if (DTYPE == DT_Q8_0) {
        let off = block_at(row, blk);
        let d = f16_at(off);
        let ab = bitcast<vec2<i32>>(words_at(codes_at(off) + j));
        let a = ab.x;
        let b = ab.y;
        for (var i = 0u; i < 4u; i = i + 1u) {
            v[i] = f32(extractBits(a, 8u * i, 8u)) * d;
            v[i + 4u] = f32(extractBits(b, 8u * i, 8u)) * d;
        }
        return v;
    }
    // Q4_0 (f16 d, 16 bytes) and Q4_1 (f16 d, f16 m, 16 bytes): element i < 16 is the low
    // nibble of byte i, element i + 16 the high nibble.
    let off = block_at(row, blk);
    let d = f16_at(off);
    var mn = 0.0;
    if (DTYPE == DT_Q4_1) {
        mn = f16_at(off + 2u);
    }
    let ab = words_at(codes_at(off) + (j & 15u));
    let a = ab.x;
    let b = ab.y;
    let shift = select(0u, 4u, j >= 16u);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let ca = (a >> (8u * i + shift)) & 15u;
        let cb = (b >> (8u * i + shift)) & 15u;
        if (DTYPE == DT_Q4_0) {
            v[i] = f32(i32(ca) - 8) * d;
            v[i + 4u] = f32(i32(cb) - 8) * d;
        } else {
            v[i] = f32(ca) * d + mn;
            v[i + 4u] = f32(cb) * d + mn;
        }
    }
    return v;
}


// Element slots per invocation of quantize_blocks: one word of codes.
const SLOTS: u32 = 4u;

// The largest |x| bits of each 32-element block of the workgroup (WG · SLOTS / ACT_BLOCK
// blocks; WG ≤ 256).
var<workgroup> block_max: array<atomic<u32>, 32>;

// Element j of row `row` of x, or 0 past the row (or past the rows).
fn x_slot(row: u32, j: u32) -> f32 {
    if (row < p.n && j < p.k) {
        return bitcast<f32>(x[row * p.k + j]);
    }
    return 0.0;
}

// Four element slots (one word of codes) per invocation: the block's invocations
// (ACT_BLOCK / SLOTS consecutive ones, within one workgroup) take the maximum of their |x|
// bits (exact: an integer maximum), then each rounds its own four elements and writes x̂
// (WRITE_XHAT), their codes (one word) and, for a block's first word, the block's scale.
@compute @workgroup_size(WG)
fn quantize_blocks(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
                   @builtin(num_workgroups) nwg: vec3<u32>) {
    let blocks = int8_blocks(p.k);
    // Element slot i: block i / ACT_BLOCK (row-major over rows of `blocks` blocks), element
    // i % ACT_BLOCK of it; past the row's end (its last block short) nothing is read.
    let i = ((wid.y * nwg.x + wid.x) * WG + lidx) * SLOTS;
    let row = i / (blocks * ACT_BLOCK);
    let blk = (i / ACT_BLOCK) % blocks;
    let j = blk * ACT_BLOCK + i % ACT_BLOCK;
    let local_block = lidx * SLOTS / ACT_BLOCK;
    if (lidx < WG * SLOTS / ACT_BLOCK) {
        atomicStore(&block_max[lidx], 0u);
    }
    workgroupBarrier();
    let v = vec4<f32>(x_slot(row, j), x_slot(row, j + 1u), x_slot(row, j + 2u), x_slot(row, j + 3u));
    atomicMax(&block_max[local_block], max(max(abs_bits(v.x), abs_bits(v.y)), max(abs_bits(v.z), abs_bits(v.w))));
    workgroupBarrier();
    let s_bits = act_scale_bits(atomicLoad(&block_max[local_block]));
    let q = quantize4(v, s_bits);
    if (row < p.n) {
        for (var c = 0u; c < SLOTS; c = c + 1u) {
            if (WRITE_XHAT == 1u && j + c < p.k) {
                xq[row * p.k + j + c] = bitcast<u32>(dequantize1(q[c], s_bits));
            }
        }
        xq[int8_code_word(p.n, p.k, row, blk, (j % ACT_BLOCK) / 4u)] = pack4xI8(q);
        if (j % ACT_BLOCK == 0u) {
            xq[int8_scale_word(p.n, p.k, row, blk)] = s_bits;
        }
    }
}

// ROUND = 2: RMS_NORM's 1 / sqrt(mean(x²) + eps) of the token's row, set by round_prologue.
var<private> norm_inv: f32;

// rms_sum.wgsl's row source: x's f32 bits.
fn norm_src(inplace: bool, i: u32) -> f32 {
    return bitcast<f32>(x[i]);
}

// The start of every one-token product entry point (the whole workgroup, in uniform control
// flow): with ROUND = 2, the norm's scale of the row, exactly as rms_norm.wgsl computes it
// (the dispatcher picks a norm whose workgroup size is WG and the same reductions).
fn round_prologue(ids: Ids) {
    if (ROUND == 2u) {
        norm_inv = inv_rms_of(reduce_add_f32(sum_squares(false, 0u, ids.lidx, p.k), ids), p.k, p.norm_eps);
    }
}

// Block `b` of token `tok`'s x as int8 codes (8 words, element 4j + i in byte i of word j)
// and its scale s_b.
struct XBlock {
    codes: array<u32, 8>,
    s: f32,
}

// ROUND = 1, 2: the (block, token) this invocation rounded last (none yet: no block has
// that index), and its rounding.
var<private> last_block: vec2<u32> = vec2<u32>(0xffffffffu, 0xffffffffu);
var<private> last_rounded: XBlock;

// ROUND = 0: read from the scratch buffer. ROUND = 1, 2: the block's values (normed, as
// rms_norm.wgsl's `v · inv · w`, for ROUND = 2; 0 past the row), their maximum as an exact
// integer maximum of |v|'s bits, the scale and the codes by act_quant.wgsl's rules: bit for
// bit what quantize_blocks or norm_quant_blocks would have written to the scratch buffer.
// Every product workgroup rounds the blocks it multiplies, so x's row is read once per
// output row instead of once: linear.rs allows it only where those reads are few.
fn x_block(tok: u32, b: u32) -> XBlock {
    var r = XBlock();
    if (ROUND == 0u) {
        for (var j = 0u; j < BLOCK_WORDS; j = j + 1u) {
            r.codes[j] = x[int8_code_word(p.n, p.k, tok, b, j)];
        }
        r.s = bitcast<f32>(x[int8_scale_word(p.n, p.k, tok, b)]);
        return r;
    }
    // gemv_multi_rope and gemv_gated compute two rows per workgroup, each invocation the same
    // blocks for both: the second row takes the first's rounding (short rows: one block).
    if (tok == last_block.y && b == last_block.x) {
        return last_rounded;
    }
    var v = array<vec4<f32>, 8>();
    var mx = 0u;
    for (var j = 0u; j < BLOCK_WORDS; j = j + 1u) {
        for (var c = 0u; c < 4u; c = c + 1u) {
            let e = b * ACT_BLOCK + 4u * j + c;
            var h = 0.0;
            if (e < p.k) {
                h = bitcast<f32>(x[tok * p.k + e]);
                if (ROUND == 2u) {
                    h = h * norm_inv * ws[e];
                }
            }
            v[j][c] = h;
        }
        mx = max(mx, max(max(abs_bits(v[j].x), abs_bits(v[j].y)), max(abs_bits(v[j].z), abs_bits(v[j].w))));
    }
    let s_bits = act_scale_bits(mx);
    for (var j = 0u; j < BLOCK_WORDS; j = j + 1u) {
        r.codes[j] = pack4xI8(quantize4(v[j], s_bits));
    }
    r.s = bitcast<f32>(s_bits);
    last_block = vec2<u32>(b, tok);
    last_rounded = r;
    return r;
}

// The 32 code bytes at byte offset `off` (even) of the weight buffer as 8 words: 8 aligned
// words, or 9 words shifted by two bytes (Q8_0's blocks alternate), all loaded before any
// is used and without a branch.
fn words32_at(off: u32) -> array<u32, 8> {
    let i = off >> 2u;
    let aligned = (off & 2u) == 0u;
    var w = array<u32, 9>();
    for (var j = 0u; j < 8u; j = j + 1u) {
        w[j] = wword(i + j);
    }
    // Aligned, the ninth word is not needed (and may lie past the buffer): the eighth again.
    w[8] = wword(select(i + 8u, i + 7u, aligned));
    var c = array<u32, 8>();
    for (var j = 0u; j < 8u; j = j + 1u) {
        c[j] = select((w[j] >> 16u) | (w[j + 1u] << 16u), w[j], aligned);
    }
    return c;
}

// A block's term before the division by s_b, from its exact integer sums Σ q·c (qc) and
// Σ q (sq): Q8_0 d·qc, Q4_0 d·(qc − 8·sq), Q4_1 d·qc + m·sq (dm = (d, m)).
fn block_term(qc: i32, sq: i32, dm: vec2<f32>) -> f32 {
    if (DTYPE == DT_Q8_0) {
        return f32(qc) * dm.x;
    }
    if (DTYPE == DT_Q4_0) {
        return f32(qc - 8 * sq) * dm.x;
    }
    return f32(qc) * dm.x + f32(sq) * dm.y;
}

// Σ_i x̂[tok, i] · W[row, i] over the 32-element blocks first, first + stride, ... of the
// row (INT8: Q4_0, Q4_1 or Q8_0 weights, x the int8-block scratch buffer). Per block the
// codes of x and of W are multiplied as integers with dot4I8Packed, exactly (|Σ q·c| ≤
// 32 · 128 · 128), then scaled once: Q8_0 d · Σ q·c, Q4_0 d · (Σ q·c − 8 Σ q), Q4_1
// d · Σ q·c + m · Σ q, each divided by the block's s_b. That is Σ x̂_i · W_i with
// x̂_i = q_i / s_b (the ISA's Int8Blocks product, what the CPU engine computes), with a few
// roundings per block where the f32 path has one per element.
fn dot_blocks(row: u32, tok: u32, first: u32, stride: u32) -> f32 {
    let ones = 0x01010101u;
    let nibbles = 0x0f0f0f0fu;
    var acc = 0.0;
    for (var b = first; b < int8_blocks(p.k); b = b + stride) {
        // The weight block's words and scales first, x's block after: the weight's loads are
        // in flight while x's are (and, when the product rounds x itself, while it rounds).
        let off = block_at(row, b);
        var c = array<u32, 8>();
        if (DTYPE == DT_Q8_0) {
            c = words32_at(codes_at(off));
        } else {
            // Q4_0 and Q4_1: 16 code bytes, element i < 16 the low nibble of byte i, element
            // i + 16 the high nibble.
            let lo = words_at(codes_at(off));
            let hi = words_at(codes_at(off) + 8u);
            c = array<u32, 8>(lo.x, lo.y, hi.x, hi.y, 0u, 0u, 0u, 0u);
        }
        let d = f16_at(off);
        var mn = 0.0;
        if (DTYPE == DT_Q4_1) {
            mn = f16_at(off + 2u);
        }
        let xb = x_block(tok, b);
        var a = xb.codes;
        let s = xb.s;
        var qc = 0;
        var sq = 0;
        if (DTYPE == DT_Q8_0) {
            for (var j = 0u; j < 8u; j = j + 1u) {
                qc = qc + dot4I8Packed(a[j], c[j]);
            }
        } else {
            for (var j = 0u; j < 4u; j = j + 1u) {
                qc = qc + dot4I8Packed(a[j], c[j] & nibbles) + dot4I8Packed(a[j + 4u], (c[j] >> 4u) & nibbles);
                sq = sq + dot4I8Packed(a[j], ones) + dot4I8Packed(a[j + 4u], ones);
            }
        }
        acc = acc + block_term(qc, sq, vec2<f32>(d, mn)) / s;
    }
    return acc;
}

// Σ_i x[tok, i] · W[row, i] over the 8-element chunks first, first + stride, ... of the row.
fn dot_chunks(row: u32, tok: u32, first: u32, stride: u32) -> f32 {
    if (INT8 == 1u) {
        // The same invocations take blocks of 32 instead of chunks of 8.
        return dot_blocks(row, tok, first, stride);
    }
    let xb = tok * p.k;
    let chunks = (p.k + 7u) / 8u;
    var acc = 0.0;
    for (var c = first; c < chunks; c = c + stride) {
        let e0 = c * 8u;
        let v = load8(row, e0);
        for (var i = 0u; i < 8u; i = i + 1u) {
            if (e0 + i < p.k) {
                var xi = bitcast<f32>(x[xb + e0 + i]);
                if (ROUND == 2u) {
                    // f32 activations after a norm: RMS_NORM's own h_i = x_i · inv · w_i.
                    xi = xi * norm_inv * ws[e0 + i];
                }
                acc = acc + xi * v[i];
            }
        }
    }
    return acc;
}

// Output `row` of token `tok` as gemv computes it. Called by the whole workgroup in uniform
// control flow (the reduction), rows at or past m included; the sum in every invocation.
fn gemv_total(row: u32, tok: u32, ids: Ids) -> f32 {
    var acc = 0.0;
    if (row < weight_rows()) {
        acc = dot_chunks(row, tok, ids.lidx, WG);
    }
    return reduce_add_f32(acc, ids);
}

@compute @workgroup_size(WG)
fn gemv(ids: Ids, grid: Grid) {
    round_prologue(ids);
    let row = grid_index(grid);
    let tok = grid.wid.z;
    let total = gemv_total(row, tok, ids);
    if (row < p.m && ids.lidx == 0u) {
        store_out(tok * p.out_stride + p.row0 + row, total);
    }
}

// Invocations per row of gemv_rows (a power of two dividing WG).
override LANES: u32 = 8u;
// gemv_rows' partial sums, one per invocation.
var<workgroup> row_partials: array<f32, 256>;

// Output `row` of token `tok` as gemv_rows computes it, LANES invocations per row (this one
// is invocation `lidx`): partial sums, one barrier (so the whole workgroup calls it, in
// uniform control flow), then the row's first invocation adds its row's LANES partials in
// order. The sum in that invocation (lane 0); 0 in the others.
fn rows_total(row: u32, tok: u32, lidx: u32) -> f32 {
    let lane = lidx % LANES;
    var acc = 0.0;
    if (row < weight_rows()) {
        acc = dot_chunks(row, tok, lane, LANES);
    }
    row_partials[lidx] = acc;
    workgroupBarrier();
    var total = 0.0;
    if (lane == 0u) {
        for (var i = 0u; i < LANES; i = i + 1u) {
            total = total + row_partials[lidx + i];
        }
    }
    return total;
}

// WG / LANES rows per workgroup, LANES invocations per row, for short rows.
@compute @workgroup_size(WG)
fn gemv_rows(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let row = (wid.y * nwg.x + wid.x) * (WG / LANES) + lidx / LANES;
    let tok = wid.z;
    let total = rows_total(row, tok, lidx);
    if (row < p.m && lidx % LANES == 0u) {
        store_out(tok * p.out_stride + p.row0 + row, total);
    }
}

const TM: u32 = 64u;
const TN: u32 = 32u;
const TK: u32 = 32u;

// The weight tile, transposed: element (kk, r) in wt[kk · TM/4 + r/4][r % 4], so an
// invocation's four consecutive rows are one vec4 load.
var<workgroup> wt: array<vec4<f32>, 512>;
// The activation tile, transposed: element (kk, t) in xt[kk · TN/2 + t/2][t % 2].
var<workgroup> xt: array<vec2<f32>, 512>;

@compute @workgroup_size(256)
fn tiled(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let row0 = (wid.y * nwg.x + wid.x) * TM;
    let tok0 = wid.z * TN;
    // This invocation's outputs: rows row0 + 4·tr + i (i < 4), tokens tok0 + 2·tt + j
    // (j < 2). Per step of the k loop it reads one vec4 of weights and one vec2 of
    // activations from workgroup memory for its eight multiply-adds.
    let tr = lidx % 16u;
    let tt = lidx / 16u;
    // Its share of the weight tile: row lr, columns lc .. lc + 8.
    let lr = lidx / 4u;
    let lc = (lidx % 4u) * 8u;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < p.k; k0 = k0 + TK) {
        var v = array<f32, 8>();
        if (row0 + lr < p.m) {
            v = load8(row0 + lr, k0 + lc);
        }
        for (var i = 0u; i < 8u; i = i + 1u) {
            wt[(lc + i) * (TM / 4u) + lr / 4u][lr % 4u] = v[i];
        }
        for (var q = 0u; q < 4u; q = q + 1u) {
            let idx = lidx + 256u * q;
            let t = idx / TK;
            let kk = idx % TK;
            var xv = 0.0;
            if (tok0 + t < p.n && k0 + kk < p.k) {
                xv = bitcast<f32>(x[(tok0 + t) * p.k + k0 + kk]);
            }
            xt[kk * (TN / 2u) + t / 2u][t % 2u] = xv;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            let w = wt[kk * (TM / 4u) + tr];
            let b = xt[kk * (TN / 2u) + tt];
            acc0 = acc0 + w * b.x;
            acc1 = acc1 + w * b.y;
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + 4u * tr + i;
        let t = tok0 + 2u * tt;
        if (r < p.m && t < p.n) {
            store_out(t * p.out_stride + p.row0 + r, acc0[i]);
        }
        if (r < p.m && t + 1u < p.n) {
            store_out((t + 1u) * p.out_stride + p.row0 + r, acc1[i]);
        }
    }
}

// tiled_int8 (several tokens, int8-block activations, Q4_0 / Q4_1 / Q8_0 weights): dot_blocks'
// integer products for 64 rows × 32 tokens per workgroup of 256, one 32-column block per
// step. Invocation (tr, tg) = (lidx % 32, lidx / 32) computes rows tr and tr + 32 for tokens
// 4·tg .. 4·tg + 3: per block, 64 dot4I8Packed on codes staged in workgroup memory (the 32
// invocations sharing tg read the same activation words, a broadcast, and consecutive rows'
// weight words), then dot_blocks' float terms, each divided by the token's s_b. Σ q per
// token and block (Q4_0, Q4_1) is summed once, by the invocation that stages the token.
// Each step's global loads are issued before the step's arithmetic and stored at the top of
// the next step. Reads the codes and scales of x, never x̂.
const QT_TOKENS: u32 = 32u;
// The weight block's eight code words as int8 words, transposed: words 4h .. 4h + 3 of row
// r at qw[h · QW_STRIDE + r].
const QW_STRIDE: u32 = 64u;
var<workgroup> qw: array<vec4<u32>, 128>;
// Each row's d and (Q4_1) m.
var<workgroup> qdm: array<vec2<f32>, 64>;
// The activation block's eight code words of token t at qa[2t], qa[2t + 1]; its s_b and Σ q.
var<workgroup> qa: array<vec4<u32>, 64>;
var<workgroup> qs_b: array<f32, 32>;
var<workgroup> qsum_b: array<i32, 32>;

// The word at even byte offset `off` of the weight (two words when it straddles one).
fn word_at(off: u32) -> u32 {
    let i = off >> 2u;
    let aligned = (off & 2u) == 0u;
    let w0 = wword(i);
    let w1 = wword(select(i + 1u, i, aligned));
    return select((w0 >> 16u) | (w1 << 16u), w0, aligned);
}

// One step's global loads of an invocation. Weights: row lidx / 4, part lidx % 4 (Q4: code
// word `part`, d for part 0 and m for part 1; Q8_0: code words 2·part and + 1, d for part
// 0). Activations, invocations below QT_TOKENS only: token lidx's eight code words and s_b.
struct QStaged {
    w: vec2<u32>,
    dm: f32,
    a0: vec4<u32>,
    a1: vec4<u32>,
    s: f32,
}

fn qstage_load(lidx: u32, row0: u32, tok0: u32, b: u32) -> QStaged {
    var s = QStaged();
    s.s = 1.0;
    let r = row0 + lidx / 4u;
    let part = lidx % 4u;
    if (r < p.m) {
        let off = block_at(r, b);
        if (DTYPE == DT_Q8_0) {
            s.w = vec2<u32>(word_at(codes_at(off) + 8u * part), word_at(codes_at(off) + 8u * part + 4u));
        } else {
            s.w = vec2<u32>(word_at(codes_at(off) + 4u * part), 0u);
        }
        if (part == 0u) {
            s.dm = f16_at(off);
        } else if (part == 1u && DTYPE == DT_Q4_1) {
            s.dm = f16_at(off + 2u);
        }
    }
    let t = tok0 + lidx;
    if (lidx < QT_TOKENS && t < p.n) {
        let c = int8_code_word(p.n, p.k, t, b, 0u);
        s.a0 = vec4<u32>(x[c], x[c + 1u], x[c + 2u], x[c + 3u]);
        s.a1 = vec4<u32>(x[c + 4u], x[c + 5u], x[c + 6u], x[c + 7u]);
        s.s = bitcast<f32>(x[int8_scale_word(p.n, p.k, t, b)]);
    }
    return s;
}

fn qstage_store(lidx: u32, s: QStaged) {
    let r = lidx / 4u;
    let part = lidx % 4u;
    if (DTYPE == DT_Q8_0) {
        // Code words 2·part and 2·part + 1: vector part / 2, components 2·(part % 2) and + 1.
        qw[(part / 2u) * QW_STRIDE + r][2u * (part % 2u)] = s.w.x;
        qw[(part / 2u) * QW_STRIDE + r][2u * (part % 2u) + 1u] = s.w.y;
    } else {
        // Element i < 16 is the low nibble of code byte i, element i + 16 the high one.
        let nibbles = 0x0f0f0f0fu;
        qw[r][part] = s.w.x & nibbles;
        qw[QW_STRIDE + r][part] = (s.w.x >> 4u) & nibbles;
    }
    if (part == 0u) {
        qdm[r].x = s.dm;
    } else if (part == 1u) {
        qdm[r].y = s.dm;
    }
    if (lidx < QT_TOKENS) {
        qa[2u * lidx] = s.a0;
        qa[2u * lidx + 1u] = s.a1;
        qs_b[lidx] = s.s;
        if (DTYPE != DT_Q8_0) {
            let ones = vec4<u32>(0x01010101u);
            qsum_b[lidx] = dot_word(s.a0, ones) + dot_word(s.a1, ones);
        }
    }
}

// Σ of four dot4I8Packed: four activation words against four weight words.
fn dot_word(x4: vec4<u32>, w4: vec4<u32>) -> i32 {
    return dot4I8Packed(x4.x, w4.x) + dot4I8Packed(x4.y, w4.y) + dot4I8Packed(x4.z, w4.z) + dot4I8Packed(x4.w, w4.w);
}

// block_term for four tokens.
fn block_terms(qc: vec4<i32>, sq: vec4<i32>, dm: vec2<f32>) -> vec4<f32> {
    return vec4<f32>(block_term(qc.x, sq.x, dm), block_term(qc.y, sq.y, dm), block_term(qc.z, sq.z, dm),
                     block_term(qc.w, sq.w, dm));
}

// Outputs (r, t .. t + 3) of tiled_int8.
fn qtiled_store4(r: u32, t: u32, y: vec4<f32>) {
    if (r < p.m) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            if (t + j < p.n) {
                store_out((t + j) * p.out_stride + p.row0 + r, y[j]);
            }
        }
    }
}

@compute @workgroup_size(256)
fn tiled_int8(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
              @builtin(num_workgroups) nwg: vec3<u32>) {
    let row0 = (wid.y * nwg.x + wid.x) * 64u;
    let tok0 = wid.z * QT_TOKENS;
    let tr = lidx % 32u;
    let t4 = 4u * (lidx / 32u);
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var staged = qstage_load(lidx, row0, tok0, 0u);
    let blocks = int8_blocks(p.k);
    for (var b = 0u; b < blocks; b = b + 1u) {
        qstage_store(lidx, staged);
        workgroupBarrier();
        if (b + 1u < blocks) {
            staged = qstage_load(lidx, row0, tok0, b + 1u);
        }
        let wa0 = qw[tr];
        let wa1 = qw[QW_STRIDE + tr];
        let wb0 = qw[tr + 32u];
        let wb1 = qw[QW_STRIDE + tr + 32u];
        // The four tokens' activation words (each token's two vectors: elements 0..15, 16..31).
        let a = 2u * t4;
        let x0 = qa[a];
        let x1 = qa[a + 1u];
        let x2 = qa[a + 2u];
        let x3 = qa[a + 3u];
        let x4 = qa[a + 4u];
        let x5 = qa[a + 5u];
        let x6 = qa[a + 6u];
        let x7 = qa[a + 7u];
        let qc0 = vec4<i32>(dot_word(x0, wa0) + dot_word(x1, wa1), dot_word(x2, wa0) + dot_word(x3, wa1),
                            dot_word(x4, wa0) + dot_word(x5, wa1), dot_word(x6, wa0) + dot_word(x7, wa1));
        let qc1 = vec4<i32>(dot_word(x0, wb0) + dot_word(x1, wb1), dot_word(x2, wb0) + dot_word(x3, wb1),
                            dot_word(x4, wb0) + dot_word(x5, wb1), dot_word(x6, wb0) + dot_word(x7, wb1));
        let sq = vec4<i32>(qsum_b[t4], qsum_b[t4 + 1u], qsum_b[t4 + 2u], qsum_b[t4 + 3u]);
        let s = vec4<f32>(qs_b[t4], qs_b[t4 + 1u], qs_b[t4 + 2u], qs_b[t4 + 3u]);
        acc0 = acc0 + block_terms(qc0, sq, qdm[tr]) / s;
        acc1 = acc1 + block_terms(qc1, sq, qdm[tr + 32u]) / s;
        workgroupBarrier();
    }
    qtiled_store4(row0 + tr, tok0 + t4, acc0);
    qtiled_store4(row0 + tr + 32u, tok0 + t4, acc1);
}
