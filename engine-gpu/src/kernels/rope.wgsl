// ROPE: rotates pair i of every head of row r by θ_i = p_r · base^(−2i/rot_dim), where
// p_r = pos + r (consecutive rows: `rope`, `rope_inplace`) or p_r = row_pos[r] (per-row
// positions: `rope_rows`, `rope_rows_inplace`, which read the U32 tensor of positions).
//
// One invocation per (row, head, item): items 0 .. rot_dim/2 rotate one pair each; the
// items after them copy one element of the tail (rot_dim .. head_dim) each, which only the
// out-of-place entry point needs (in place, the tail is already where it belongs). In place
// (out == x) is its own entry point because one buffer cannot be bound read-only and
// read-write in one dispatch; each invocation reads its pair before writing it, and no other
// invocation touches that pair, so it is race-free.
//
// Accuracy, in f32 (u = 2^-24), written out because WGSL's built-ins do not give it:
// - base^(−2i/rot_dim) is computed as 2^(−q) · 2^(−y) with base = m · 2^k, m in [√½, √2):
//   q + frac = i·k / (rot_dim/2) split exactly in integers, y = frac + (2i/rot_dim)·log2(m),
//   |y| < 1.5, so no rounding of a large exponent is ever amplified. log2 and exp2 are the
//   series below (not WGSL's log2/exp2, which allow 3 ULP and 3 + 2|x| ULP); relative error
//   of the frequency ≤ 8u.
// - θ = p · freq is rounded once more (≤ u|θ|; p itself is exact below 2^24).
// - sin/cos: θ is reduced by a three-part Cody-Waite π/2 (j·P1 exact for |θ| < 2^16·π/2,
//   j·P2 exact for |θ| < 2^13·π/2; error ≤ 2u there, plus ≤ u|θ| beyond), then Cephes'
//   sinf/cosf polynomials on [−π/4, π/4] (≤ 2u each). WGSL's own sin/cos are specified
//   only on [−π, π] and only to 2^-11 absolute, far from enough.
// So |θ_gpu − θ| ≤ 11u·|θ| + 2u and each rotated value is within
// (|a| + |b|)·(11u·|θ| + 6u) + u·|result| of the f64 result (the test's bound). An f32
// emulation of these functions (numpy, without fused multiply-adds) measured at most 2.3u
// for the frequency over bases 1 .. 3·10^6, and 1.6u for sin/cos of |θ| < 12868.
// Each invocation computes its own angle: a few dozen flops against 16 bytes of traffic.
//
// Preceded by rope_math.wgsl (inv_freq, sin_cos, Item, rope_item).

struct Params {
    // Elements per row: n_heads · head_dim.
    width: u32,
    head_dim: u32,
    // rot_dim / 2: the pairs per head.
    half_rot: u32,
    // Invocations per head: half_rot, plus head_dim − rot_dim tail copies out of place.
    items: u32,
    // rows · n_heads · items.
    total: u32,
    // The position of row 0 and the frequency base (f32 bits): each a constant, or the
    // run-time parameter `*_param`.
    pos_value: u32,
    pos_param: u32,
    base_value: u32,
    base_param: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> out: array<f32>;
@group(0) @binding(3) var<storage, read> run: array<u32>;
// Per-row positions (the rope_rows entry points only): row r at position row_pos[r].
@group(0) @binding(4) var<storage, read> row_pos: array<u32>;

override WG: u32 = 256u;

fn index(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid.x;
}

fn base() -> f32 {
    return bitcast<f32>(select(p.base_value, run[p.base_param], p.base_param != 0xffffffffu));
}

// Item g of consecutive rows: row 0 at the position `pos`.
fn item(g: u32) -> Item {
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    return rope_item(g, p.width, p.head_dim, p.half_rot, p.items, pos, base());
}

// Item g of rows at their own positions.
fn item_of_rows(g: u32) -> Item {
    let row = (g / p.items) / (p.width / p.head_dim);
    return rope_item_at(g, p.head_dim, p.half_rot, p.items, f32(row_pos[row]), base());
}

// Out of place: the pair rotated from x into out, or the tail element copied.
fn rotate(it: Item) {
    if (!it.rotate) {
        out[it.a] = x[it.a];
        return;
    }
    let xa = x[it.a];
    let xb = x[it.b];
    out[it.a] = xa * it.sc.y - xb * it.sc.x;
    out[it.b] = xa * it.sc.x + xb * it.sc.y;
}

// In place (out was x): the pair rotated where it is; the tail stays.
fn rotate_inplace(it: Item) {
    if (!it.rotate) {
        return;
    }
    let xa = out[it.a];
    let xb = out[it.b];
    out[it.a] = xa * it.sc.y - xb * it.sc.x;
    out[it.b] = xa * it.sc.x + xb * it.sc.y;
}

@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = index(wid, lid, nwg);
    if (g < p.total) {
        rotate(item(g));
    }
}

// out = rope(out) (out was x)
@compute @workgroup_size(WG)
fn rope_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = index(wid, lid, nwg);
    if (g < p.total) {
        rotate_inplace(item(g));
    }
}

@compute @workgroup_size(WG)
fn rope_rows(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = index(wid, lid, nwg);
    if (g < p.total) {
        rotate(item_of_rows(g));
    }
}

@compute @workgroup_size(WG)
fn rope_rows_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                     @builtin(num_workgroups) nwg: vec3<u32>) {
    let g = index(wid, lid, nwg);
    if (g < p.total) {
        rotate_inplace(item_of_rows(g));
    }
}
