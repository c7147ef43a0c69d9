//! Fast f32 exponential for SOFTMAX, ATTENTION and SILU (the ISA allows transcendental
//! functions within a few ulp).

/// `e^x` within 2 ulp for `x` in (−87, 88); other inputs (underflow to subnormals,
/// overflow, NaN) go through f64's `exp`, correctly rounded to f32.
///
/// Cephes' `expf`: `x = n·ln 2 + r` with `|r| ≤ ln2/2` (ln 2 split in two so `r` is exact),
/// a degree-7 polynomial for `e^r`, and `2^n` from the exponent bits.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    if !(x > -87.0 && x < 88.0) {
        return (x as f64).exp() as f32;
    }
    exp_in_range(x)
}

/// [`exp`]'s polynomial path, for `x` in [−87, 88) (branch-free, so loops over it
/// vectorize).
#[inline(always)]
pub(crate) fn exp_in_range(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const C1: f32 = 0.693_359_4;
    const C2: f32 = -2.121_944_4e-4;
    let n = (x * LOG2E).round_ties_even();
    let r = x - n * C1 - n * C2;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_2e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5; // Cephes: 5.0000001e-1, which rounds to 0.5 in f32
    let y = p * r * r + r + 1.0;
    // n ∈ [−126, 127] here, so 2^n is a normal f32: its exponent field is n + 127, which
    // adding 2^23 + 127 leaves in the low mantissa bits (exactly: an integer below 2^24), and
    // the shift moves there. (`n as i32` would be the same value, but Rust's saturating
    // conversion keeps the loops that call this from vectorizing.)
    y * f32::from_bits((n + 8_388_735.0).to_bits() << 23)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_two_ulp_of_the_correctly_rounded_value() {
        let mut x = -100.0f32;
        while x < 100.0 {
            let want = (x as f64).exp() as f32;
            let got = exp(x);
            let ulps = (got.to_bits() as i64 - want.to_bits() as i64).abs();
            assert!(ulps <= 2 || (want == 0.0 && got == 0.0), "exp({x}) = {got}, want {want}");
            x += 0.0137;
        }
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
    }
}
