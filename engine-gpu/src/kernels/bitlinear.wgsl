// BITLINEAR: per-row int8 activations × ternary weights, exact integer sums, then the float
// scaling y = Σ_b d_b · isum_b / s (× scale[0]); see isa/src/ops/bitlinear.rs.
//
// Preceded by reduce_portable.wgsl or reduce_subgroup.wgsl (Ids, Grid, reduce_*), then
// act_quant.wgsl (abs_bits, act_scale_bits, quantize1); followed by the file that defines
// store_out(i, v), what the products do with output element i: product_store.wgsl (write
// it to `out`) or residual_add.wgsl (the fused residual TENSOR_ADD epilogue).
//
// Entry points (one BITLINEAR is `quantize`, then `gemv` or `tiled`):
// - quantize: one workgroup per row of x. The row's absolute maximum as an integer maximum of
//   f32 bit patterns (exact; NaN ignored as f32::max does), s = 127 / max(a, 1e-5) by an exact
//   integer division that yields the correctly rounded f32 quotient (WGSL's `/` may be off
//   by 2.5 ulp), then q = clamp(round(x · s), −128, 127) (one correctly rounded f32 multiply;
//   WGSL's round() is round-half-to-even) packed four per word, and s, into scratch buffers.
// - gemv: one workgroup per (weight row, token): each invocation takes 16-element code words
//   (one per step, consecutive invocations on consecutive words) and computes their exact
//   integer dot product with dot4I8Packed. TQ1_0/TQ2_0: d_b · isum of each word is an exact
//   f32 product (d_b is an f16 widened: 11 significant bits; |isum| ≤ 16 · 128 · 2 = 2^12),
//   so summing those products in f32 only rounds like the final scaling may. I2_S: the whole
//   row is one block, summed as an exact i32 and multiplied by d once.
// - tiled: 64 rows × 32 tokens per workgroup of 256, in steps of 256 columns (one TQ scale
//   block): codes and activations staged in workgroup memory, exact i32 block sums, then
//   d_b · isum_b in f32 (TQ) or an i32 row sum (I2_S).

struct Params {
    // Weight rows.
    m: u32,
    // Columns (a multiple of 128).
    k: u32,
    // Tokens.
    n: u32,
    // Weight scales per row in binding 3 (k / 256 for TQ1_0 / TQ2_0; 0 for I2_S).
    scale_stride: u32,
    // Code words per weight row: k / 16.
    words: u32,
    // bitlinear_multi.wgsl's gemv_multi: the first output row of weights 1 and 2 (m is the
    // total); unused elsewhere.
    split1: u32,
    split2: u32,
    _pad0: u32,
    // gemv_multi_rope only (rope_qkv.wgsl; 0 elsewhere): the rotation and the caches.
    rope_head_dim: u32,
    rope_k_ctx: u32,
    rope_v_ctx: u32,
    rope_pad: u32,
    rope_pos_value: u32,
    rope_pos_param: u32,
    rope_base_value: u32,
    rope_base_param: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
// quantize: the activations, f32 [n, k].
@group(0) @binding(1) var<storage, read> x: array<f32>;
// The weight's codes and scales (kernels/layout.rs, ternary layout).
@group(0) @binding(2) var<storage, read> codes: array<u32>;
@group(0) @binding(3) var<storage, read> wscales: array<f32>;
// The optional output scale (when HAS_SCALE is 0, another read-only buffer stands in, unread).
@group(0) @binding(4) var<storage, read> out_scale: array<f32>;
// Scratch: int8 activations [n, k / 4] words, and s [n].
@group(0) @binding(5) var<storage, read_write> acts: array<u32>;
@group(0) @binding(6) var<storage, read_write> act_scales: array<f32>;
@group(0) @binding(7) var<storage, read_write> out: array<f32>;

// Invocations per workgroup of quantize and gemv (a power of two, ≤ 256).
override WG: u32 = 64u;
// 1 for I2_S (one scale per tensor: the row is one block), 0 for TQ1_0 / TQ2_0.
override ROW_SCALE: u32 = 0u;
// 1 when the instruction has an output scale.
override HAS_SCALE: u32 = 0u;

@compute @workgroup_size(WG)
fn quantize(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    var mx = 0u;
    if (row < p.n) {
        for (var e = ids.lidx; e < p.k; e = e + WG) {
            mx = max(mx, abs_bits(x[row * p.k + e]));
        }
    }
    let s_bits = act_scale_bits(reduce_max_u32(mx, ids));
    let s = bitcast<f32>(s_bits);
    if (row < p.n) {
        let base = row * p.k;
        for (var wd = ids.lidx; wd < p.k / 4u; wd = wd + WG) {
            let e = base + 4u * wd;
            acts[row * (p.k / 4u) + wd] = pack4xI8(quantize4(vec4<f32>(x[e], x[e + 1u], x[e + 2u], x[e + 3u]), s_bits));
        }
        if (ids.lidx == 0u) {
            act_scales[row] = s;
        }
    }
}

// Σ q·t over the 16 elements of code word `c` and activation words a0..a3 (elements 4j..4j+3
// in word aj): Σ q·code − Σ q, since t = code − 1. Exact (|result| ≤ 16 · 128 · 2).
fn dot16(c: u32, a0: u32, a1: u32, a2: u32, a3: u32) -> i32 {
    let ones = 0x01010101u;
    let m = 0x03030303u;
    let qc = dot4I8Packed(a0, c & m) + dot4I8Packed(a1, (c >> 2u) & m) + dot4I8Packed(a2, (c >> 4u) & m)
        + dot4I8Packed(a3, (c >> 6u) & m);
    let sq = dot4I8Packed(a0, ones) + dot4I8Packed(a1, ones) + dot4I8Packed(a2, ones) + dot4I8Packed(a3, ones);
    return qc - sq;
}

// y / s, times the output scale when there is one.
fn finish(y: f32, tok: u32) -> f32 {
    var r = y / act_scales[tok];
    if (HAS_SCALE == 1u) {
        r = r * out_scale[0];
    }
    return r;
}

@compute @workgroup_size(WG)
fn gemv(ids: Ids, grid: Grid) {
    let row = grid_index(grid);
    let tok = grid.wid.z;
    var facc = 0.0;
    var iacc = 0i;
    if (row < p.m) {
        let cb = row * p.words;
        let ab = tok * (p.k / 4u);
        for (var wi = ids.lidx; wi < p.words; wi = wi + WG) {
            let a = ab + 4u * wi;
            let part = dot16(codes[cb + wi], acts[a], acts[a + 1u], acts[a + 2u], acts[a + 3u]);
            if (ROW_SCALE == 1u) {
                iacc = iacc + part;
            } else {
                // Word wi lies in scale block wi / 16 (256 elements); the product is exact.
                facc = facc + wscales[row * p.scale_stride + wi / 16u] * f32(part);
            }
        }
    }
    var y = 0.0;
    if (ROW_SCALE == 1u) {
        y = f32(reduce_add_i32(iacc, ids)) * wscales[0];
    } else {
        y = reduce_add_f32(facc, ids);
    }
    if (row < p.m && ids.lidx == 0u) {
        store_out(tok * p.m + row, finish(y, tok));
    }
}

const TM: u32 = 64u;
const TN: u32 = 32u;
// Code words per step (256 columns).
const TKW: u32 = 16u;

// Code tile, transposed: ct[w · TM + r]; activation tile, transposed: at[aw · TN + t].
var<workgroup> ct: array<u32, 1024>;
var<workgroup> at: array<u32, 2048>;

@compute @workgroup_size(256)
fn tiled(@builtin(local_invocation_index) lidx: u32, @builtin(workgroup_id) wid: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>) {
    let row0 = (wid.y * nwg.x + wid.x) * TM;
    let tok0 = wid.z * TN;
    // Outputs: rows row0 + tr + 16i (i < 4), tokens tok0 + tt + 16j (j < 2).
    let tr = lidx % 16u;
    let tt = lidx / 16u;
    let kw = p.k / 4u; // activation words per token
    var facc = array<f32, 8>();
    var iacc = array<i32, 8>();
    for (var w0 = 0u; w0 < p.words; w0 = w0 + TKW) {
        // Stage 64 rows × 16 code words and 32 tokens × 64 activation words; past the edges,
        // zeros (activation 0 contributes 0 whatever the code).
        for (var q = 0u; q < 4u; q = q + 1u) {
            let idx = lidx + 256u * q;
            let r = idx / TKW;
            let cw = idx % TKW;
            var c = 0u;
            if (row0 + r < p.m && w0 + cw < p.words) {
                c = codes[(row0 + r) * p.words + w0 + cw];
            }
            ct[cw * TM + r] = c;
        }
        for (var q = 0u; q < 8u; q = q + 1u) {
            let idx = lidx + 256u * q;
            let t = idx / 64u;
            let aw = idx % 64u;
            var a = 0u;
            if (tok0 + t < p.n && 4u * w0 + aw < kw) {
                a = acts[(tok0 + t) * kw + 4u * w0 + aw];
            }
            at[aw * TN + t] = a;
        }
        workgroupBarrier();
        // Σ q·code per (row, token), and Σ q per token once for all four rows (dot16's
        // second half, which does not depend on the row): t = code − 1, so the block's sum
        // is Σ q·code − Σ q, exactly. Each token's four activation words are read once per
        // code word for the four rows.
        var isum = array<i32, 8>();
        var qsum0 = 0i;
        var qsum1 = 0i;
        let ones = 0x01010101u;
        let mask = 0x03030303u;
        for (var cw = 0u; cw < TKW; cw = cw + 1u) {
            let a = 4u * cw * TN + tt;
            let x0 = vec4<u32>(at[a], at[a + TN], at[a + 2u * TN], at[a + 3u * TN]);
            let b = a + 16u;
            let x1 = vec4<u32>(at[b], at[b + TN], at[b + 2u * TN], at[b + 3u * TN]);
            qsum0 = qsum0 + dot4I8Packed(x0.x, ones) + dot4I8Packed(x0.y, ones) + dot4I8Packed(x0.z, ones)
                + dot4I8Packed(x0.w, ones);
            qsum1 = qsum1 + dot4I8Packed(x1.x, ones) + dot4I8Packed(x1.y, ones) + dot4I8Packed(x1.z, ones)
                + dot4I8Packed(x1.w, ones);
            for (var i = 0u; i < 4u; i = i + 1u) {
                let c = ct[cw * TM + tr + 16u * i];
                let c0 = c & mask;
                let c1 = (c >> 2u) & mask;
                let c2 = (c >> 4u) & mask;
                let c3 = (c >> 6u) & mask;
                isum[2u * i] = isum[2u * i] + dot4I8Packed(x0.x, c0) + dot4I8Packed(x0.y, c1)
                    + dot4I8Packed(x0.z, c2) + dot4I8Packed(x0.w, c3);
                isum[2u * i + 1u] = isum[2u * i + 1u] + dot4I8Packed(x1.x, c0) + dot4I8Packed(x1.y, c1)
                    + dot4I8Packed(x1.z, c2) + dot4I8Packed(x1.w, c3);
            }
        }
        for (var i = 0u; i < 4u; i = i + 1u) {
            isum[2u * i] = isum[2u * i] - qsum0;
            isum[2u * i + 1u] = isum[2u * i + 1u] - qsum1;
        }
        for (var i = 0u; i < 4u; i = i + 1u) {
            let r = min(row0 + tr + 16u * i, p.m - 1u);
            for (var j = 0u; j < 2u; j = j + 1u) {
                if (ROW_SCALE == 1u) {
                    iacc[2u * i + j] = iacc[2u * i + j] + isum[2u * i + j];
                } else {
                    let d = wscales[r * p.scale_stride + w0 / TKW];
                    facc[2u * i + j] = facc[2u * i + j] + d * f32(isum[2u * i + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 2u; j = j + 1u) {
            let r = row0 + tr + 16u * i;
            let t = tok0 + tt + 16u * j;
            if (r < p.m && t < p.n) {
                var y = 0.0;
                if (ROW_SCALE == 1u) {
                    y = f32(iacc[2u * i + j]) * wscales[0];
                } else {
                    y = facc[2u * i + j];
                }
                store_out(t * p.m + r, finish(y, t));
            }
        }
    }
}
