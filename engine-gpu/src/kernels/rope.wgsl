// ROPE: rotates pair i of every head of row r by θ_i = (pos + r) · base^(−2i/rot_dim).
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

override WG: u32 = 256u;
// 1: NEOX pairs (i, i + rot_dim/2); 0: normal pairs (2i, 2i + 1).
override NEOX: u32 = 1u;

const SQRT_HALF: f32 = 0.70710678118654752;
const SQRT_TWO: f32 = 1.41421356237309505;
const LN2: f32 = 0.69314718055994531;
const LOG2E: f32 = 1.44269504088896341;
const TWO_OVER_PI: f32 = 0.63661977236758134;
// π/2 = P1 + P2 + P3: P1 has 8 significant bits, P2 11, so j·P1 and j·P2 are exact for
// the quadrant counts j that matter.
const P1: f32 = 1.5703125;
const P2: f32 = 4.837512969970703125e-4;
const P3: f32 = 7.54978995489188216e-8;

// log2(m) for m in [√½, √2): 2·atanh(s)/ln 2 with s = (m − 1)/(m + 1), |s| ≤ 0.1716, as its
// series to s^11 (the next term is below 10^-10 relative). m − 1 is exact.
fn log2_near_one(m: f32) -> f32 {
    let s = (m - 1.0) / (m + 1.0);
    let z = s * s;
    let series = 1.0 + z * (1.0 / 3.0 + z * (1.0 / 5.0 + z * (1.0 / 7.0 + z * (1.0 / 9.0 + z * (1.0 / 11.0)))));
    return 2.0 * s * series * LOG2E;
}

// 2^y for |y| < 2: y = n + f with n = round(y), |f| ≤ 1/2 exact; e^(f·ln 2) as its Taylor
// series to t^7 (|t| ≤ 0.347, the next term is below 10^-8 relative); then the exact ldexp.
fn exp2_small(y: f32) -> f32 {
    let n = round(y);
    let t = (y - n) * LN2;
    let e = 1.0 + t * (1.0 + t * (1.0 / 2.0 + t * (1.0 / 6.0 + t * (1.0 / 24.0 + t * (1.0 / 120.0
        + t * (1.0 / 720.0 + t * (1.0 / 5040.0)))))));
    return ldexp(e, i32(n));
}

// base^(−i / half_rot), that is base^(−2i/rot_dim), to 8u relative (see the header).
fn inv_freq(i: u32, half_rot: u32, base: f32) -> f32 {
    if (i == 0u) {
        return 1.0;
    }
    let fe = frexp(base);
    var m = fe.fract * 2.0;
    var k = fe.exp - 1;
    if (m >= SQRT_TWO) {
        m = m * 0.5;
        k = k + 1;
    }
    // i·k / half_rot = q + rem / half_rot exactly, with 0 ≤ rem < half_rot (floor division).
    let hr = i32(half_rot);
    let num = i32(i) * k;
    var q = num / hr;
    var rem = num - q * hr;
    if (rem < 0) {
        rem = rem + hr;
        q = q - 1;
    }
    let y = f32(rem) / f32(half_rot) + (f32(i) / f32(half_rot)) * log2_near_one(m);
    return ldexp(exp2_small(-y), -q);
}

// (sin θ, cos θ), see the header for the error.
fn sin_cos(theta: f32) -> vec2<f32> {
    let jf = round(theta * TWO_OVER_PI);
    let r = ((theta - jf * P1) - jf * P2) - jf * P3;
    let z = r * r;
    // Cephes sinf / cosf on [−π/4, π/4].
    let s = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    let c = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    // sin θ = sin(r + j·π/2) by quadrant (j mod 4, also for negative j).
    let quadrant = u32(i32(jf) & 3);
    switch quadrant {
        case 0u: { return vec2<f32>(s, c); }
        case 1u: { return vec2<f32>(c, -s); }
        case 2u: { return vec2<f32>(-s, -c); }
        default: { return vec2<f32>(-c, s); }
    }
}

struct Item {
    // Element offsets of the pair (a, b), or of the tail element in `a`.
    a: u32,
    b: u32,
    // (sin θ, cos θ) of the pair.
    sc: vec2<f32>,
    // True for a pair, false for a tail copy.
    rotate: bool,
}

fn item(wid: vec3<u32>, lid: vec3<u32>, nwg: vec3<u32>) -> Item {
    let g = (wid.y * nwg.x + wid.x) * WG + lid.x;
    let head = g / p.items; // over all rows: row · n_heads + h
    let k = g % p.items;
    let start = head * p.head_dim; // row · width + h · head_dim
    if (k >= p.half_rot) {
        return Item(start + 2u * p.half_rot + (k - p.half_rot), 0u, vec2<f32>(0.0), false);
    }
    let row = head / (p.width / p.head_dim);
    let pos = select(p.pos_value, run[p.pos_param], p.pos_param != 0xffffffffu);
    let base = bitcast<f32>(select(p.base_value, run[p.base_param], p.base_param != 0xffffffffu));
    let theta = (f32(pos) + f32(row)) * inv_freq(k, p.half_rot, base);
    var a = start + 2u * k;
    var b = a + 1u;
    if (NEOX == 1u) {
        a = start + k;
        b = a + p.half_rot;
    }
    return Item(a, b, sin_cos(theta), true);
}

// out = rope(x)
@compute @workgroup_size(WG)
fn rope(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>) {
    if ((wid.y * nwg.x + wid.x) * WG + lid.x >= p.total) {
        return;
    }
    let it = item(wid, lid, nwg);
    if (!it.rotate) {
        out[it.a] = x[it.a];
        return;
    }
    let xa = x[it.a];
    let xb = x[it.b];
    out[it.a] = xa * it.sc.y - xb * it.sc.x;
    out[it.b] = xa * it.sc.x + xb * it.sc.y;
}

// out = rope(out) (out was x)
@compute @workgroup_size(WG)
fn rope_inplace(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
                @builtin(num_workgroups) nwg: vec3<u32>) {
    if ((wid.y * nwg.x + wid.x) * WG + lid.x >= p.total) {
        return;
    }
    let it = item(wid, lid, nwg);
    if (!it.rotate) {
        return;
    }
    let xa = out[it.a];
    let xb = out[it.b];
    out[it.a] = xa * it.sc.y - xb * it.sc.x;
    out[it.b] = xa * it.sc.x + xb * it.sc.y;
}
