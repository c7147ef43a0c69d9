// ROPE's arithmetic, without bindings: the frequencies, the angle, sin/cos and the pair an
// invocation rotates (rope_item). Concatenated before rope.wgsl and before rope_kv.wgsl (the
// fused ROPE + KV_WRITE kernel), so both compute every rotated value with the same
// operations. The accuracy analysis is in rope.wgsl's header.

// 1: NeoX pairs (i, i + rot_dim/2); 0: adjacent pairs (2i, 2i + 1).
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

// Item `g` (over all rows: (row · n_heads + head) · items + k) of a ROPE over rows of
// `width` elements, at position `pos` of row 0 with frequency base `base`.
fn rope_item(g: u32, width: u32, head_dim: u32, half_rot: u32, items: u32, pos: u32, base: f32) -> Item {
    let row = (g / items) / (width / head_dim);
    return rope_item_at(g, head_dim, half_rot, items, f32(pos) + f32(row), base);
}

// Item `g` (as in rope_item) of a row at position `position` (a whole number in f32: the
// rows' own positions of a per-row ROPE, or rope_item's f32(pos) + f32(row)).
fn rope_item_at(g: u32, head_dim: u32, half_rot: u32, items: u32, position: f32, base: f32) -> Item {
    let head = g / items; // over all rows: row · n_heads + h
    let k = g % items;
    let start = head * head_dim; // row · width + h · head_dim
    if (k >= half_rot) {
        return Item(start + 2u * half_rot + (k - half_rot), 0u, vec2<f32>(0.0), false);
    }
    let theta = position * inv_freq(k, half_rot, base);
    var a = start + 2u * k;
    var b = a + 1u;
    if (NEOX == 1u) {
        a = start + k;
        b = a + half_rot;
    }
    return Item(a, b, sin_cos(theta), true);
}
