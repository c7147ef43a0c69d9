// ROPE of q and k, and KV_WRITE of k and v, in one kernel (fuse/, pattern RopeKvWrite):
//
//     ROPE(q, q) ; ROPE(k, k) ; KV_WRITE(k_cache, k) ; KV_WRITE(v_cache, v)
//
// with one position, base, style, head_dim and rot_dim = head_dim for both ROPEs and both
// KV_WRITEs at that position. Preceded by rope_math.wgsl. One invocation per item of a 1-D
// grid: first q's pairs (rotated in place), then k's pairs (rotated, written to k unless
// that write is dead, WRITE_K = 0, and to the k cache's row pos + r), then v's words
// (copied to the v cache as u32 words, as kv_write.wgsl does, so every bit pattern
// arrives). Each rotated value is computed by rope_item and the same two expressions as
// rope.wgsl's rope_inplace, so q, k and the k cache are bit-identical to the unfused
// instructions; each pair is read and written by one invocation only. As kv_write.wgsl,
// the kernel checks pos + n ≤ n_ctx again (the host checked it before the run) so that it
// never writes out of bounds.
//
// The caches are words: F32 elements (K_F16 / V_F16 = 0, stored as their bits), or F16
// elements two to a word (element i in the low half of word i / 2 when i is even), each
// rounded to nearest even on its bits (f16_bits, as kv_write.wgsl: the ISA's rounding) and
// stored into its half with an atomicAnd and an atomicOr, since the word's other half is
// another invocation's element.

struct Params {
    // Elements per row of q and k.
    q_width: u32,
    k_width: u32,
    head_dim: u32,
    // rot_dim / 2 = head_dim / 2: the pairs per head (the items per head).
    half_rot: u32,
    // Items of q (rows · q heads · half_rot) and of k, words of v.
    q_total: u32,
    k_total: u32,
    v_words: u32,
    // Words per row of v.
    v_width: u32,
    // Rows of q, k and v.
    n_rows: u32,
    // Rows of the caches.
    k_ctx: u32,
    v_ctx: u32,
    _pad0: u32,
    // The position of row 0 and the frequency base (f32 bits): each a constant, or the
    // run-time parameter `*_param`.
    pos_value: u32,
    pos_param: u32,
    base_value: u32,
    base_param: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> q: array<f32>;
@group(0) @binding(2) var<storage, read_write> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<u32>;
@group(0) @binding(4) var<storage, read_write> k_cache: array<atomic<u32>>;
@group(0) @binding(5) var<storage, read_write> v_cache: array<atomic<u32>>;
@group(0) @binding(6) var<storage, read> run: array<u32>;

override WG: u32 = 256u;
// 1 when the rotated k must be written back to k.
override WRITE_K: u32 = 1u;
// 1 when the k (v) cache is F16.
override K_F16: u32 = 0u;
override V_F16: u32 = 0u;

// Element i of the k cache = the f32 with bits `b`.
fn store_k(i: u32, b: u32) {
    if (K_F16 == 0u) {
        atomicStore(&k_cache[i], b);
        return;
    }
    let shift = 16u * (i & 1u);
    atomicAnd(&k_cache[i >> 1u], ~(0xffffu << shift));
    atomicOr(&k_cache[i >> 1u], f16_bits(b) << shift);
}

// Element i of the v cache = the f32 with bits `b`.
fn store_v(i: u32, b: u32) {
    if (V_F16 == 0u) {
        atomicStore(&v_cache[i], b);
        return;
    }
    let shift = 16u * (i & 1u);
    atomicAnd(&v_cache[i >> 1u], ~(0xffffu << shift));
    atomicOr(&v_cache[i >> 1u], f16_bits(b) << shift);
}

// pos + n ≤ n_ctx, written so that nothing wraps.
fn fits(pos: u32, n_ctx: u32) -> bool {
    return pos <= n_ctx && p.n_rows <= n_ctx - pos;
}

@compute @workgroup_size(WG)
fn rope_kv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = (wid.y * nwg.x + wid.x) * WG + lid.x;
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    let base = bitcast<f32>(select(p.base_value, run[p.base_param], p.base_param != 0xffffffffu));
    if (g < p.q_total) {
        let it = rope_item(g, p.q_width, p.head_dim, p.half_rot, p.half_rot, pos, base);
        let xa = q[it.a];
        let xb = q[it.b];
        q[it.a] = xa * it.sc.y - xb * it.sc.x;
        q[it.b] = xa * it.sc.x + xb * it.sc.y;
        return;
    }
    if (g < p.q_total + p.k_total) {
        let it = rope_item(g - p.q_total, p.k_width, p.head_dim, p.half_rot, p.half_rot, pos, base);
        let xa = k[it.a];
        let xb = k[it.b];
        let ya = xa * it.sc.y - xb * it.sc.x;
        let yb = xa * it.sc.x + xb * it.sc.y;
        if (WRITE_K == 1u) {
            k[it.a] = ya;
            k[it.b] = yb;
        }
        if (fits(pos, p.k_ctx)) {
            store_k(pos * p.k_width + it.a, bitcast<u32>(ya));
            store_k(pos * p.k_width + it.b, bitcast<u32>(yb));
        }
        return;
    }
    let i = g - p.q_total - p.k_total;
    if (i < p.v_words && fits(pos, p.v_ctx)) {
        store_v(pos * p.v_width + i, v[i]);
    }
}
