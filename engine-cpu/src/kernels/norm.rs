//! RMS_NORM's row: the mean of squares in f64 (eight partial sums), each result computed in
//! f64 and rounded once, as the reference does. The AVX2 level compiles the same loops for
//! four f64 lanes (the baseline x86_64 target has two): the same operations in the same
//! order, so the same bits (Rust never fuses a product and a sum on its own).

use super::Simd;
#[cfg(target_arch = "x86_64")]
use super::SimdLevel;

/// `out_i = x_i / sqrt(mean(x²) + eps) · w_i` for one row `x` (`w` and `out` as long).
pub fn rms_norm_row(level: Simd, x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { rms_norm_row_avx2(x, w, eps, out) },
        _ => rms_norm_row_lanes(x, w, eps, out),
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
fn rms_norm_row_avx2(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    rms_norm_row_lanes(x, w, eps, out)
}

#[inline(always)]
fn rms_norm_row_lanes(x: &[f32], w: &[f32], eps: f32, out: &mut [f32]) {
    let mut acc = [0f64; 8];
    let chunks = x.chunks_exact(8);
    let tail: f64 = chunks.remainder().iter().map(|&v| v as f64 * v as f64).sum();
    for c in chunks {
        for (a, &v) in acc.iter_mut().zip(c) {
            *a += v as f64 * v as f64;
        }
    }
    let mean_sq = (acc.iter().sum::<f64>() + tail) / x.len() as f64;
    let inv = 1.0 / (mean_sq + eps as f64).sqrt();
    for ((o, &v), &wi) in out.iter_mut().zip(x).zip(w) {
        *o = (v as f64 * inv * wi as f64) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_gives_the_portable_bits() {
        for d in [1usize, 7, 8, 9, 64, 576, 2560, 2563] {
            let mut x: Vec<f32> = (0..d).map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.173).collect();
            let w: Vec<f32> = (0..d).map(|i| 0.5 + (i % 13) as f32 * 0.1).collect();
            if d > 8 {
                x[d - 2] = 1e30;
                x[3] = -1e-30;
            }
            let mut want = vec![0f32; d];
            rms_norm_row_lanes(&x, &w, 1e-6, &mut want);
            for level in Simd::all_supported() {
                let mut got = vec![0f32; d];
                rms_norm_row(level, &x, &w, 1e-6, &mut got);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&got), bits(&want), "{level}, a row of {d}");
            }
        }
    }
}
