//! The values of a synthetic tensor, drawn from one SplitMix64 stream.

use half::{bf16, f16};
use purebee_memory::quant::encode::{encode_i2_s, encode_q8_0_row, encode_tq1_0_row, encode_tq2_0_row};
use purebee_memory::DType;
use purebee_rng::SplitMix64;

use crate::{PlannedTensor, Role, SynthError};

/// Draws of the synthetic weights' distributions.
pub trait SynthDraws {
    /// An approximately standard normal value (see the implementation).
    fn normal(&mut self) -> f64;
    /// `n` trits with P(−1) = 0.3, P(0) = 0.4, P(+1) = 0.3.
    fn trits(&mut self, n: usize) -> Vec<i8>;
}

impl SynthDraws for SplitMix64 {
    /// An approximately standard normal value: the Irwin–Hall sum of twelve uniforms minus 6
    /// (mean 0, variance 1, |z| < 6). Each uniform is `(k + 0.5) / 2^21` for a 21-bit `k`,
    /// three per 64-bit draw, so the sum is exact in f64 and the result is the same on every
    /// platform.
    fn normal(&mut self) -> f64 {
        const MASK: u64 = (1 << 21) - 1;
        let mut sum = 0u64;
        for _ in 0..4 {
            let r = self.next_u64();
            sum += (r & MASK) + ((r >> 21) & MASK) + ((r >> 42) & MASK);
        }
        (sum as f64 + 6.0) / f64::from(1u32 << 21) - 6.0
    }

    /// `n` trits with P(−1) = 0.3, P(0) = 0.4, P(+1) = 0.3: each is a uniform decimal digit
    /// (0..=2 → −1, 3..=6 → 0, 7..=9 → +1), eight digits per 64-bit draw taken as the leading
    /// decimal digits of `r / 2^64` (bias below 10^8 / 2^64).
    fn trits(&mut self, n: usize) -> Vec<i8> {
        const TRIT_OF_DIGIT: [i8; 10] = [-1, -1, -1, 0, 0, 0, 0, 1, 1, 1];
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let mut r = self.next_u64();
            for _ in 0..(n - out.len()).min(8) {
                let wide = u128::from(r) * 10;
                out.push(TRIT_OF_DIGIT[(wide >> 64) as usize]);
                r = wide as u64;
            }
        }
        out
    }
}

/// The per-tensor scale of a ternary weight with `n_in` inputs: `(0.9 + 0.2·U) / sqrt(0.6·n_in)`
/// rounded to f16 (0.6 is the fraction of nonzero trits), so I2_S's f32 scale and the TQ
/// blocks' f16 `d` hold the same value exactly. With inputs of unit RMS (every linear follows
/// an RMSNorm), outputs then have a standard deviation near 1, so attention scores and logits
/// are spread as in a trained model, not degenerate.
pub(crate) fn ternary_scale(rng: &mut SplitMix64, n_in: usize) -> f16 {
    f16::from_f64((0.9 + 0.2 * rng.uniform()) / (0.6 * n_in as f64).sqrt())
}

/// The bytes of a planned tensor, drawn from `rng`:
/// - a norm: F32 `1 + 0.1·N(0, 1)`;
/// - a ternary linear (I2_S, TQ2_0, TQ1_0): trits −1/0/+1 with probabilities 0.3/0.4/0.3 and
///   one per-tensor scale (see [`ternary_scale`]);
/// - F32, F16, BF16 and Q8_0: `σ·N(0, 1)` encoded, σ = 0.25 for the embedding and
///   `1/sqrt(n_in)` for a linear;
/// - any other type: [`random_codes`].
pub fn tensor_values(t: &PlannedTensor, rng: &mut SplitMix64) -> Result<Vec<u8>, SynthError> {
    let n = t.n_elements();
    let encode_error = |source| SynthError::Encode { tensor: t.name.clone(), source };
    if t.role == Role::Norm {
        return Ok((0..n).flat_map(|_| ((1.0 + 0.1 * rng.normal()) as f32).to_le_bytes()).collect());
    }
    if t.dtype.is_ternary() {
        let d = ternary_scale(rng, t.cols());
        let trits = rng.trits(n);
        return match t.dtype {
            DType::TQ2_0 => encode_tq2_0_row(&trits, d),
            DType::TQ1_0 => encode_tq1_0_row(&trits, d),
            _ => encode_i2_s(&trits, d.to_f32()),
        }
        .map_err(encode_error);
    }
    let sigma = match t.role {
        Role::Embedding => 0.25,
        _ => 1.0 / (t.cols() as f64).sqrt(),
    };
    let mut normal = || sigma * rng.normal();
    Ok(match t.dtype {
        DType::F32 => (0..n).flat_map(|_| (normal() as f32).to_le_bytes()).collect(),
        DType::F16 => (0..n).flat_map(|_| f16::from_f64(normal()).to_le_bytes()).collect(),
        DType::BF16 => (0..n).flat_map(|_| bf16::from_f64(normal()).to_le_bytes()).collect(),
        DType::Q8_0 => encode_q8_0_row(&(0..n).map(|_| normal() as f32).collect::<Vec<_>>()).map_err(encode_error)?,
        dtype => random_codes(rng, dtype, t.rows(), t.cols()),
    })
}

/// `rows × cols` elements of a type this builder has no encoder for, as random codes with
/// sane block scales where the type has them (Q4_0's `d`, Q4_1's `d` and `m`: magnitude
/// 2^-5 .. 2^-4, random sign); random bytes otherwise. An unaddressable size gives no bytes.
fn random_codes(rng: &mut SplitMix64, dtype: DType, rows: usize, cols: usize) -> Vec<u8> {
    let Some(n) = dtype.tensor_bytes(rows, cols) else { return Vec::new() };
    let mut b: Vec<u8> = (0..n).map(|_| rng.byte()).collect();
    let scales = match dtype {
        DType::Q4_0 => 1,
        DType::Q4_1 => 2,
        _ => return b,
    };
    for block in b.chunks_mut(dtype.block_bytes()) {
        for scale in block[..2 * scales].chunks_mut(2) {
            let r = rng.next_u64();
            scale.copy_from_slice(&((0x2800 | (r & 0x3ff) | ((r >> 10) & 1) << 15) as u16).to_le_bytes());
        }
    }
    b
}
