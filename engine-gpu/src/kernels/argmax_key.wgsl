// ARGMAX's comparison, shared by argmax.wgsl, linear_argmax.wgsl (ARGMAX fused into a LINEAR) and
// top_k.wgsl, so that all order values by the same rule.
//
// Values are compared as raw bits: each non-NaN value maps to an order-preserving u32 key
// (-0 first folded onto +0, since -0 == +0), so subnormals, infinities and signed zeros
// compare exactly as IEEE `>` does, whatever the device's float modes. Key 0 is below every
// real key (the smallest, -inf, maps to 0x007fffff) and is NaN's: NaN never wins, and
// (0, NONE) means "no candidate".

const NONE: u32 = 0xffffffffu;

// The order-preserving key of an f32's bits; 0 for NaN.
fn argmax_key(bits: u32) -> u32 {
    if ((bits & 0x7fffffffu) > 0x7f800000u) {
        return 0u;
    }
    let b = select(bits, 0u, bits == 0x80000000u);
    if ((b & 0x80000000u) != 0u) {
        return ~b;
    }
    return b | 0x80000000u;
}
