// ROPE(q, q) ; ROPE(k, k) ; KV_WRITE(k_cache, k) ; KV_WRITE(v_cache, v) as the epilogue of the
// one-token q/k/v products that write q, k and v (fuse/, pattern RopeEpilogue): the
// product kernel computes both rows of a rotation pair in one workgroup (or one row group of
// gemv_rows), rotates them in registers and writes the results where the four instructions
// would have: q, k (unless that write is dead: WRITE_K = 0), the k cache's row `pos`, v
// (WRITE_V) and the v cache's row `pos`. Nothing is read back: the rope_kv dispatch and the
// products' stores of the unrotated q and k are gone.
//
// After rope_math.wgsl (rope_item, the rotation's arithmetic) and a multi-product file
// (bitlinear_multi.wgsl or linear_multi.wgsl) whose `Params` carry the rope_* fields and
// which defines `qkv_out(w, row, value)` (write element `row` of output w: 0 q, 1 k, 2 v).
// The products' entry points (gemv_multi_rope, gemv_rows_multi_rope) take their items from
// qkv_item: first q's pairs, then k's, then v's rows. Each rotated value is rope.wgsl's two
// expressions on the product's own f32 value, so q, k and the caches are bit-identical to
// the unfused instructions where the driver rounds as written. As rope_kv.wgsl, the kernel
// checks pos < n_ctx again (the host checked it) so that it never writes out of bounds.

// The caches as words: F32 elements (K_F16 / V_F16 = 0, stored as their bits), or F16
// elements two to a word (element i in the low half of word i / 2 when i is even), each
// rounded to nearest even on its bits (f16_bits, as kv_write.wgsl: the ISA's rounding) and
// stored into its half with an atomicAnd and an atomicOr, since the word's other half is
// another workgroup's element.
@group(0) @binding(22) var<storage, read_write> k_cache: array<atomic<u32>>;
@group(0) @binding(23) var<storage, read_write> v_cache: array<atomic<u32>>;
@group(0) @binding(24) var<storage, read> run: array<u32>;

// 1 when the rotated k (WRITE_K) or v (WRITE_V) must be written to its tensor.
override WRITE_K: u32 = 1u;
override WRITE_V: u32 = 1u;
// 1 when the k (v) cache is F16.
override K_F16: u32 = 0u;
override V_F16: u32 = 0u;

// Element i of the k cache = x.
fn store_k(i: u32, x: f32) {
    if (K_F16 == 0u) {
        atomicStore(&k_cache[i], bitcast<u32>(x));
        return;
    }
    let shift = 16u * (i & 1u);
    atomicAnd(&k_cache[i >> 1u], ~(0xffffu << shift));
    atomicOr(&k_cache[i >> 1u], f16_bits(bitcast<u32>(x)) << shift);
}

// Element i of the v cache = x.
fn store_v(i: u32, x: f32) {
    if (V_F16 == 0u) {
        atomicStore(&v_cache[i], bitcast<u32>(x));
        return;
    }
    let shift = 16u * (i & 1u);
    atomicAnd(&v_cache[i >> 1u], ~(0xffffu << shift));
    atomicOr(&v_cache[i >> 1u], f16_bits(bitcast<u32>(x)) << shift);
}

// What one workgroup (or row group) computes: output w's rows a and b (a rotation pair of q
// or k, the angle's sin and cos in sc), or v's row a (w = 2); w = 3 past the last item.
struct QkvItem {
    w: u32,
    a: u32,
    b: u32,
    sc: vec2<f32>,
}

// A row index no weight has: the products compute nothing for it.
const NO_ROW: u32 = 0xffffffffu;

fn rope_pos() -> u32 {
    return select(p.rope_pos_value, run[p.rope_pos_param], p.rope_pos_param != 0xffffffffu);
}

// Item g of a grid over q's m_q / 2 pairs, k's m_k / 2 pairs and v's m_v rows.
fn qkv_item(g: u32, m_q: u32, m_k: u32, m_v: u32) -> QkvItem {
    let hd = p.rope_head_dim;
    let half = hd / 2u;
    let base = bitcast<f32>(select(p.rope_base_value, run[p.rope_base_param], p.rope_base_param != 0xffffffffu));
    let q_pairs = m_q / 2u;
    let k_pairs = m_k / 2u;
    if (g < q_pairs) {
        let it = rope_item(g, m_q, hd, half, half, rope_pos(), base);
        return QkvItem(0u, it.a, it.b, it.sc);
    }
    if (g < q_pairs + k_pairs) {
        let it = rope_item(g - q_pairs, m_k, hd, half, half, rope_pos(), base);
        return QkvItem(1u, it.a, it.b, it.sc);
    }
    let row = g - q_pairs - k_pairs;
    if (row < m_v) {
        return QkvItem(2u, row, NO_ROW, vec2<f32>(0.0));
    }
    return QkvItem(3u, NO_ROW, NO_ROW, vec2<f32>(0.0));
}

// Writes item `it`'s results from its rows' products ya (row a) and yb (row b); the caches'
// rows are m_k and m_v wide.
fn qkv_store(it: QkvItem, ya: f32, yb: f32, m_k: u32, m_v: u32) {
    let pos = rope_pos();
    if (it.w == 2u) {
        if (WRITE_V == 1u) {
            qkv_out(2u, it.a, ya);
        }
        if (pos < p.rope_v_ctx) {
            store_v(pos * m_v + it.a, ya);
        }
        return;
    }
    if (it.w > 2u) {
        return;
    }
    // rope.wgsl's rotation of the pair (xa, xb) = (ya, yb).
    let ra = ya * it.sc.y - yb * it.sc.x;
    let rb = ya * it.sc.x + yb * it.sc.y;
    if (it.w == 0u || WRITE_K == 1u) {
        qkv_out(it.w, it.a, ra);
        qkv_out(it.w, it.b, rb);
    }
    if (it.w == 1u && pos < p.rope_k_ctx) {
        store_k(pos * m_k + it.a, ra);
        store_k(pos * m_k + it.b, rb);
    }
}
