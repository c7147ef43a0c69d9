// The element-wise operations (binary_op: TENSOR_ADD, ELEMENT_MUL; unary_op: SILU, RELU2,
// GELU), without bindings: concatenated before elementwise.wgsl, and before act_mul.wgsl so
// that the fused activation-and-multiply epilogue computes exactly the same float operations.

// 0: add, 1: mul.
override BINARY_OP: u32 = 0u;
// 0: silu, 1: relu2, 2: gelu (tanh form).
override UNARY_OP: u32 = 0u;

fn binary_op(x: f32, y: f32) -> f32 {
    if (BINARY_OP == 0u) {
        return x + y;
    }
    return x * y;
}

// e^y to about one ulp. WGSL lets `exp` be off by 3 + 2·|y| ulp (measured on lavapipe: SILU up
// to 13 ulp from the correctly rounded value), and every ulp of SILU's output moves BITLINEAR's
// int8 rounding of the next instruction closer to a flip. So: y = n·ln2 + r with n = round(y·log2 e)
// and r reduced by a two-part ln2 (Cody–Waite: n·LN2_HI is exact for |n| < 2^9, since LN2_HI
// has 15 significant bits), e^r from its Taylor series to degree 7 (|r| ≤ ln2/2: truncation
// below 2^-27), then scaled by 2^n exactly (ldexp).
const LN2_HI: f32 = 0.693145751953125;
const LN2_LO: f32 = 1.428606765330187e-6;

fn exp_accurate(y: f32) -> f32 {
    if (y > 88.7) {
        // Through a `let`: a bitcast of a constant is a constant expression, and Chrome's WGSL
        // compiler (Tint) rejects a constant NaN or infinity.
        let inf_bits = 0x7f800000u;
        return bitcast<f32>(inf_bits); // +inf, as the reference's exp overflows to
    }
    if (y < -103.0) {
        return 0.0;
    }
    let n = round(y * 1.4426950408889634);
    let r = (y - n * LN2_HI) - n * LN2_LO;
    var q = 1.0 / 5040.0;
    q = q * r + 1.0 / 720.0;
    q = q * r + 1.0 / 120.0;
    q = q * r + 1.0 / 24.0;
    q = q * r + 1.0 / 6.0;
    q = q * r + 0.5;
    q = q * r + 1.0;
    q = q * r + 1.0;
    // 2^n in two steps keeps subnormal results (n down to −149) representable.
    let half = i32(n) / 2;
    return ldexp(ldexp(q, half), i32(n) - half);
}

fn unary_op(x: f32) -> f32 {
    if (UNARY_OP == 0u) {
        return x / (1.0 + exp_accurate(-x));
    }
    if (UNARY_OP == 1u) {
        let r = max(x, 0.0);
        return r * r;
    }
    // tanh saturates to ±1 in f32 beyond |t| ≈ 9; clamping keeps exp-based tanh finite.
    let t = clamp(0.7978845608028654 * (x + 0.044715 * x * x * x), -10.0, 10.0);
    return 0.5 * x * (1.0 + tanh(t));
}
