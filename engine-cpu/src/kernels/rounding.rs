//! The ISA's int8 rounding of activations (`bitlinear_act_scale` and `bitlinear_quantize`:
//! BITLINEAR's rows, LINEAR's int8 blocks) in AVX2 lanes, bit for bit the scalar rule.
//!
//! Compiled with AVX2, the scalar loops still rounded one element at a time (Rust's
//! saturating float-to-int conversion keeps them from vectorizing): `kernel_speed`, Zen 4,
//! a BITLINEAR row of 2560 in 2.47 µs against 0.51 here, of 6912 in 6.65 against 1.38.

#[cfg(target_arch = "x86_64")]
pub(super) mod x86 {
    use std::arch::x86_64::*;

    /// `max |x_i|` as `x.iter().fold(0.0, |a, v| a.max(v.abs()))` gives it: `vmaxps`
    /// returns its second operand, the running maximum, where an element is NaN, as
    /// `f32::max` skips NaN, and the maximum of the rest does not depend on the order.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(in crate::kernels) fn abs_max(x: &[f32]) -> f32 {
        let mut max = _mm256_setzero_ps();
        let mut runs = x.chunks_exact(8);
        for run in &mut runs {
            // SAFETY: `run` holds eight floats; an unaligned load.
            let v = unsafe { _mm256_loadu_ps(run.as_ptr()) };
            max = _mm256_max_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0), v), max);
        }
        let mut lanes = [0f32; 8];
        // SAFETY: `lanes` holds eight floats; an unaligned store.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), max) };
        runs.remainder().iter().chain(&lanes).fold(0f32, |a, &v| a.max(v.abs()))
    }

    /// `q_i = bitlinear_quantize(x_i, s)` for 32 elements: the same product, `vroundps` to
    /// nearest even, NaN to 0, the clamp to [−128, 127].
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(in crate::kernels) fn round_32(x: &[f32; 32], s: f32, q: &mut [i8; 32]) {
        let (scale, low, high) = (_mm256_set1_ps(s), _mm256_set1_ps(-128.0), _mm256_set1_ps(127.0));
        let codes = [0, 8, 16, 24].map(|at| {
            // SAFETY: elements at..at + 8 of the 32; an unaligned load.
            let y = _mm256_mul_ps(unsafe { _mm256_loadu_ps(x.as_ptr().add(at)) }, scale);
            let y = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
            let y = _mm256_and_ps(y, _mm256_cmp_ps::<_CMP_ORD_Q>(y, y)); // NaN → +0
            _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(y, low), high))
        });
        let words = [_mm256_packs_epi32(codes[0], codes[1]), _mm256_packs_epi32(codes[2], codes[3])];
        // After the two packs the dwords are in the order 0L 1L 2L 3L 0H 1H 2H 3H (L, H: a
        // vector's low and high four elements).
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(words[0], words[1]), order);
        // SAFETY: `q` holds 32 bytes; an unaligned store.
        unsafe { _mm256_storeu_si256(q.as_mut_ptr().cast(), bytes) };
    }
}

/// Rows that every rounding kernel must round as the scalar rule does: odd lengths, ties
/// (with a maximum of 127 the scale is 1 and halves stay halves), NaN (also in the lane that
/// holds the maximum, after it), infinities, −0, a tiny maximum, huge values.
#[cfg(test)]
pub(super) fn cases() -> Vec<Vec<f32>> {
    let ramp = |n: usize| -> Vec<f32> { (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect() };
    let ties: Vec<f32> = (0..300).map(|i| (i as f32 - 150.0) * 0.5).chain([127.0, -127.0]).collect();
    let mut special = ramp(259);
    special[3] = f32::NAN;
    special[40] = -0.0;
    special[77] = 1e-30;
    special[258] = -f32::NAN;
    let mut infinite = ramp(64);
    infinite[9] = f32::INFINITY;
    infinite[10] = f32::NEG_INFINITY;
    let mut nan_after_max = vec![1.0; 16];
    nan_after_max[0] = 100.0;
    nan_after_max[8] = f32::NAN;
    // The same in a block of 32 of its own.
    let mut nan_in_block = ramp(64);
    nan_in_block[32] = 100.0;
    nan_in_block[56] = f32::NAN;
    vec![
        ramp(256),
        ramp(0),
        ramp(5),
        ramp(37),
        ramp(2560),
        ties,
        special,
        infinite,
        nan_after_max,
        nan_in_block,
        vec![1e-7; 40],
        vec![-3e38; 33],
    ]
}
