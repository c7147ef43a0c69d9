// Int8 activation rounding shared by BITLINEAR (a scale per row) and LINEAR's Int8Blocks
// activations (a scale per block of 32): the rule of the ISA's `bitlinear_act_scale` and
// `bitlinear_quantize`, bit for bit. Concatenated before bitlinear.wgsl, linear.wgsl,
// norm_quant.wgsl and attention.wgsl (see `Shader::source`); it declares no bindings, only
// these functions.
//
// - abs_bits(v): |v|'s bits for the maximum, NaN as 0 (f32::max ignores NaN). The maximum of
//   the bit patterns of non-negative floats is their float maximum, exactly.
// - act_scale_bits(a_bits): s = 127 / max(a, 1e-5), correctly rounded (WGSL's `/` may be off
//   by 2.5 ulp, so it is an exact integer long division, div_bits).
// - quantize1(v, s, s_bits): clamp(round_half_to_even(v · s), −128, 127), NaN → 0.
// - quantize4(v, s_bits): quantize1 of the four values of one word of codes.
// - dequantize1(q, s_bits): q / s correctly rounded (div_bits again), NaN when s = 0.

// 1e-5 as f32 bits (0x3727c5ac = 9.99999974738e-6, the f32 nearest 1e-5).
const EPS_BITS: u32 = 0x3727c5acu;

// The bits of |v|, or 0 when v is NaN.
fn abs_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v) & 0x7fffffffu;
    return select(b, 0u, b > 0x7f800000u);
}

// The bits of the correctly rounded f32 quotient n / d of two positive normal f32s (bits
// `n_bits`, `d_bits`) whose quotient does not underflow; +inf when it overflows. Long
// division of the 24-bit significands: n = mn · 2^(en − 150), d = md · 2^(ed − 150), so
// n / d = (mn / md) · 2^(en − ed) with mn / md in (1/2, 2); 26 quotient bits plus the
// remainder give the 24-bit significand, a round bit and a sticky bit; ties go to even.
fn div_bits(n_bits: u32, d_bits: u32) -> u32 {
    let en = n_bits >> 23u;
    let ed = d_bits >> 23u;
    let md = (d_bits & 0x7fffffu) | 0x800000u;
    var r = (n_bits & 0x7fffffu) | 0x800000u;
    var q = 0u;
    for (var i = 0u; i < 26u; i = i + 1u) {
        q = q << 1u;
        if (r >= md) {
            r = r - md;
            q = q | 1u;
        }
        r = r << 1u;
    }
    // q = floor(2^25 · mn / md), in [2^24, 2^26); r ≠ 0 when inexact. Biased exponent of the
    // result: en − ed + 127 when mn ≥ md (q ≥ 2^25), one less otherwise.
    var mant = 0u;
    var rnd = 0u;
    var sticky = 0u;
    var e = 0u;
    if (q >= 0x2000000u) {
        mant = q >> 2u;
        rnd = (q >> 1u) & 1u;
        sticky = (q & 1u) | select(0u, 1u, r != 0u);
        e = en + 127u - ed;
    } else {
        mant = q >> 1u;
        rnd = q & 1u;
        sticky = select(0u, 1u, r != 0u);
        e = en + 126u - ed;
    }
    if (rnd == 1u && (sticky == 1u || (mant & 1u) == 1u)) {
        mant = mant + 1u;
        if (mant == 0x1000000u) {
            mant = 0x800000u;
            e = e + 1u;
        }
    }
    if (e >= 255u) {
        return 0x7f800000u;
    }
    return (e << 23u) | (mant & 0x7fffffu);
}

// The bits of s = 127 / max(a, 1e-5), correctly rounded, `a_bits` the bits of a non-negative
// f32 (+inf included; NaN excluded by abs_bits). Always normal, or +0 for a = +inf: the
// divisor lies in [1e-5, 2^128).
fn act_scale_bits(a_bits: u32) -> u32 {
    let d = max(a_bits, EPS_BITS);
    if (d >= 0x7f800000u) {
        return 0u; // 127 / inf = +0
    }
    return div_bits(0x42fe0000u, d); // 0x42fe0000 = 127.0
}

// clamp(round_half_to_even(v · s), −128, 127), with NaN (or s = 0, which only an infinite
// maximum gives: inf · 0 is NaN) mapped to 0 as Rust's saturating `as i8` does. One
// correctly rounded f32 multiply, then WGSL's round(), which is round-half-to-even.
fn quantize1(v: f32, s: f32, s_bits: u32) -> i32 {
    if ((bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u || s_bits == 0u) {
        return 0;
    }
    return i32(clamp(round(v * s), -128.0, 127.0));
}

// quantize1 of four values of one block (scale bits `s_bits`), as one word's codes.
fn quantize4(v: vec4<f32>, s_bits: u32) -> vec4<i32> {
    let s = bitcast<f32>(s_bits);
    return vec4<i32>(quantize1(v.x, s, s_bits), quantize1(v.y, s, s_bits), quantize1(v.z, s, s_bits),
                     quantize1(v.w, s, s_bits));
}

// q / s correctly rounded to f32 (`s_bits` from act_scale_bits): ±0 for q = 0, NaN for s = 0
// (the reference's 0 / 0; only an infinite maximum gives s = 0, and then every q is 0).
// The quotient never underflows (|q| ≥ 1 and s ≤ 127e5); it rounds to +inf only for a block
// whose maximum lies within half a step 1/s of f32::MAX, as a correctly rounded division does.
fn dequantize1(q: i32, s_bits: u32) -> f32 {
    if (s_bits == 0u) {
        // Through a `let`: a bitcast of a constant is a constant expression, and Chrome's WGSL
        // compiler (Tint) rejects a constant NaN or infinity.
        let nan_bits = 0x7fc00000u;
        return bitcast<f32>(nan_bits);
    }
    if (q == 0) {
        return 0.0;
    }
    let sign = select(0u, 0x80000000u, q < 0);
    return bitcast<f32>(sign | div_bits(bitcast<u32>(f32(abs(q))), s_bits));
}

// The int8-block scratch buffer (ScratchKey::LinearActivations) of an [n, k] x, in words:
//   0 .. n·k                 x̂ = q / s_b (f32 bits), row-major;
//   then n · blocks · 8      each block's 32 codes q, four int8 per word (element 4j + i in
//                            byte i of word j; BLOCK_WORDS words), zeros past k;
//   then n · blocks          each block's scale s_b (f32 bits).
// blocks = ceil(k / ACT_BLOCK). linear.rs: int8_scratch_bytes.
//
// x̂ is read only by the products with f32 activations (prefill's, and one token's against
// F16, F32 or ternary weights); the one-token Q4_0, Q4_1 and Q8_0 products read the codes and
// scales. Each x̂ costs a correctly rounded division (div_bits, 26 steps), so the rounding
// kernels skip it when no product of the scratch reads it (linear.rs: reads_xhat).

// 1 when the rounding writes x̂ (quantize_blocks, norm_quant_blocks).
override WRITE_XHAT: u32 = 1u;

// Elements per int8 block (the ISA's LINEAR_ACT_BLOCK), and words of codes per block.
const ACT_BLOCK: u32 = 32u;
const BLOCK_WORDS: u32 = ACT_BLOCK / 4u;

// Blocks of a row of k elements (the last one shorter when k is not a multiple of ACT_BLOCK).
fn int8_blocks(k: u32) -> u32 {
    return (k + ACT_BLOCK - 1u) / ACT_BLOCK;
}

// Word j (< BLOCK_WORDS) of the codes of block `blk` of row `row`.
fn int8_code_word(n: u32, k: u32, row: u32, blk: u32, j: u32) -> u32 {
    return n * k + (row * int8_blocks(k) + blk) * BLOCK_WORDS + j;
}

// The scale word of block `blk` of row `row`.
fn int8_scale_word(n: u32, k: u32, row: u32, blk: u32) -> u32 {
    return n * k + n * int8_blocks(k) * BLOCK_WORDS + row * int8_blocks(k) + blk;
}

