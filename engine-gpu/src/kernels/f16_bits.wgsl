// Shared by the kernels that write F16 KV caches (kv_write.wgsl, rope_kv.wgsl,
// rope_qkv.wgsl), placed before them: one rounding rule, the ISA's.

// The bits of the f16 nearest the f32 with bits `b`, ties to even: overflow to ±inf, NaN to
// the quiet NaN with its sign and top ten payload bits (isa::ops::f16_bits).
fn f16_bits(b: u32) -> u32 {
    let sign = (b >> 16u) & 0x8000u;
    let e = (b >> 23u) & 0xffu;
    let man = b & 0x7fffffu;
    if (e == 0xffu) {
        return sign | select(0x7e00u | (man >> 13u), 0x7c00u, man == 0u);
    }
    // Past f16's largest exponent (15, biased 142).
    if (e > 142u) {
        return sign | 0x7c00u;
    }
    let sig = select(man | 0x800000u, man, e == 0u);
    var kept = 0u;
    var shift = 0u;
    if (e >= 113u) {
        // A normal f16: its exponent field above the top ten mantissa bits (a carry on
        // rounding goes into the exponent, up to inf).
        kept = ((e - 112u) << 10u) | (man >> 13u);
        shift = 13u;
    } else {
        // Subnormal or zero: sig · 2^(e − 150) in units of 2^-24.
        shift = 126u - e;
        if (shift > 25u) {
            return sign;
        }
        kept = sig >> shift;
    }
    let rest = sig & ((1u << shift) - 1u);
    let half = 1u << (shift - 1u);
    let up = rest > half || (rest == half && (kept & 1u) == 1u);
    return sign | (kept + select(0u, 1u, up));
}
