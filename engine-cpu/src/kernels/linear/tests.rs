//! LINEAR's kernels on every level this CPU supports, against one another and the portable ones.

use super::*;

/// Several tokens at once give each token [`dot_row`]'s bits on every level, for every
/// float dtype, rows with a partial last group, and sums of zero of either sign.
#[test]
fn several_tokens_sum_as_one_token_does() {
    let mut seed = 0x9e37_79b9u64;
    let mut next = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) as u32
    };
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        let size = if dtype == DType::F32 { 4 } else { 2 };
        for k in [7usize, 32, 96, 131, 2560] {
            let rows = 5;
            let row_bytes = size * k;
            // Finite values: F16 and BF16 bits with the top exponent bit cleared.
            let mut w: Vec<u8> = (0..rows * row_bytes).map(|_| next() as u8).collect();
            for (i, b) in w.iter_mut().enumerate() {
                if i % size == size - 1 {
                    *b &= 0xbf;
                }
            }
            // Row 3 is all zeros: a sum of -0.0 products for negative activations.
            w[3 * row_bytes..4 * row_bytes].fill(0);
            let x: Vec<f32> = (0..4 * k).map(|i| (next() % 2001) as f32 / 1000.0 - 1.0 - (i % 2) as f32).collect();
            let xs: Vec<&[f32]> = x.chunks_exact(k).collect();
            for level in Simd::all_supported() {
                for tokens in 1..=MAX_TOKENS {
                    let mut got = vec![0f32; rows * tokens];
                    dot_rows_tokens(level, dtype, &w, row_bytes, &xs[..tokens], &mut got);
                    for (i, &y) in got.iter().enumerate() {
                        let (t, r) = (i / rows, i % rows);
                        let want = dot_row(level, dtype, &w[r * row_bytes..(r + 1) * row_bytes], xs[t]);
                        assert_eq!(y.to_bits(), want.to_bits(), "{level} {dtype:?} k {k}, {tokens} tokens, row {r}");
                    }
                }
            }
        }
    }
}

/// The aarch64 NEON kernels against the portable ones.
#[cfg(target_arch = "aarch64")]
mod neon {
    use purebee_memory::DType;

    use crate::kernels::linear::{self, neon::dot_row};
    use crate::kernels::neon::tests::Rng;
    use crate::kernels::Simd;

    /// A row of `dtype` for `k` elements: random weights, or (`exact`) small integers whose
    /// every partial sum against small integer activations is exact in f32.
    fn weight_row(rng: &mut Rng, dtype: DType, k: usize, exact: bool) -> Vec<u8> {
        let mut w = || if exact { (rng.next() % 17) as f32 - 8.0 } else { rng.unit() };
        match dtype {
            DType::F32 => (0..k).flat_map(|_| w().to_le_bytes()).collect(),
            DType::F16 => (0..k).flat_map(|_| half::f16::from_f32(w()).to_le_bytes()).collect(),
            DType::BF16 => (0..k).flat_map(|_| half::bf16::from_f32(w()).to_le_bytes()).collect(),
            _ => {
                let (bytes, scales) = match dtype {
                    DType::Q8_0 => (34, 1),
                    DType::Q4_0 => (18, 1),
                    _ => (20, 2),
                };
                let mut row = rng.bytes(k / 32 * bytes);
                for b in row.chunks_exact_mut(bytes) {
                    for s in 0..scales {
                        // d (then Q4_1's m): 1 and −8 when exact (Q4_1: code − 8).
                        let v = if exact { [1.0, -8.0][s] } else { rng.unit() / 8.0 };
                        b[2 * s..2 * s + 2].copy_from_slice(&half::f16::from_f32(v).to_le_bytes());
                    }
                    if exact && dtype == DType::Q8_0 {
                        // Codes in −16..16: sums stay far below 2²⁴.
                        b[2..].iter_mut().for_each(|c| *c = ((*c as i8) >> 3) as u8);
                    }
                }
                row
            }
        }
    }

    /// Float sums in another order than the portable one's, so compared within a bound:
    /// each of the two results is within γ ≈ (k + 2)·2⁻²⁴ · Σ|x·w| of the exact sum (one
    /// rounding per product, per addition along a chain of at most k, and per block scale),
    /// so they differ by at most (k + 2)·2⁻²³ · Σ|x·w|; the decoded weights, which must be
    /// exact, are checked bit for bit by the `exact` rows, whose sums do not round at all.
    #[test]
    fn dot_rows_match_the_portable_ones() {
        let mut rng = Rng(0x2545_f491);
        let float_lens = [1usize, 3, 15, 16, 17, 33, 100, 257];
        let block_lens = [32usize, 64, 96, 288, 544];
        let cases = [
            (DType::F32, &float_lens[..]),
            (DType::F16, &float_lens[..]),
            (DType::BF16, &float_lens[..]),
            (DType::Q8_0, &block_lens[..]),
            (DType::Q4_0, &block_lens[..]),
            (DType::Q4_1, &block_lens[..]),
        ];
        for (dtype, lens) in cases {
            for &k in lens {
                for exact in [false, true] {
                    let row = weight_row(&mut rng, dtype, k, exact);
                    let x: Vec<f32> =
                        (0..k).map(|_| if exact { (rng.next() % 9) as f32 - 4.0 } else { rng.unit() }).collect();
                    let want = linear::dot_row(Simd::PORTABLE, dtype, &row, &x);
                    let mut w = vec![0f32; k];
                    linear::decode_row(dtype, &row, &mut w);
                    let abs: f64 = x.iter().zip(&w).map(|(&a, &b)| (a as f64 * b as f64).abs()).sum();
                    let bound = (k as f64 + 2.0) * 2f64.powi(-23) * abs;
                    // SAFETY: NEON is the aarch64 baseline.
                    let got = unsafe { dot_row(dtype, &row, &x) };
                    let ok =
                        if exact { got.to_bits() == want.to_bits() } else { (got as f64 - want as f64).abs() <= bound };
                    assert!(ok, "{dtype:?} k {k} exact {exact}: {got} vs {want} (bound {bound})");
                }
            }
        }
    }
}
