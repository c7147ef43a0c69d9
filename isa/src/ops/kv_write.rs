//! KV_WRITE: stores rows of keys or values into a cache at their positions.

use purebee_memory::TensorId;

use crate::ops::CacheRows;
use crate::validate::Checker;
use crate::IsaError;
use purebee_memory::DType;

/// The dtypes a KV cache may have: F32, or F16 (KV_WRITE rounds into it, ATTENTION widens
/// it exactly).
pub fn is_cache_dtype(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16)
}

/// The bits of the f16 nearest `x`, ties to even (KV_WRITE's rounding into an F16 cache):
/// overflow to ±∞, NaN to the quiet NaN with its sign and the top ten payload bits.
pub fn f16_bits(x: f32) -> u16 {
    let b = x.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let exp = (b >> 23) & 0xff;
    let man = b & 0x7f_ffff;
    if exp == 0xff {
        return sign | if man == 0 { 0x7c00 } else { 0x7e00 | (man >> 13) as u16 };
    }
    // |x| = sig · 2^(exp − 150) with sig = 1.man as a 24-bit integer (man for subnormals).
    let sig = if exp == 0 { man } else { man | 0x80_0000 };
    // f16 normals: exponents −14 ..= 15, 10 mantissa bits; the f16 subnormals' unit is 2^−24.
    let e = exp as i32 - 127;
    if e > 15 {
        return sign | 0x7c00;
    }
    let (kept, shift) = if e >= -14 {
        // Normal: the exponent field above the mantissa's top 10 bits; a carry out of the
        // mantissa on rounding goes into the exponent (up to ∞), as it should.
        (((e + 15) as u32) << 10 | man >> 13, 13)
    } else {
        // Subnormal (or zero): sig · 2^(exp − 150) in units of 2^−24.
        let shift = 126 - exp; // −1 − e (f32 subnormals: 126, which rounds to zero)
        if shift > 25 {
            return sign;
        }
        (sig >> shift, shift)
    };
    let rest = sig & ((1u32 << shift) - 1);
    let halfway = 1u32 << (shift - 1);
    let up = rest > halfway || (rest == halfway && kept & 1 == 1);
    sign | (kept + up as u32) as u16
}

/// KV_WRITE: stores each row `r` of `src` in the cache row that holds its position.
///
/// - `src`: F32 `[n, w]`; `cache`: F32 or F16 `[n_ctx, w]`, distinct from `src` and from
///   the tensors of `rows`.
/// - Into an F16 cache each value is rounded to the nearest f16, ties to even, exactly
///   (IEEE 754 binary16): a magnitude that rounds past 65504 becomes ±∞, a value below the
///   smallest subnormal rounds to ±0 (the sign kept), and a NaN becomes the quiet NaN with
///   its sign and the top ten bits of its payload (bits `0x7e00 | mantissa >> 13`), so every
///   engine stores the same bits. [`f16_bits`] is this rounding. Into an F32 cache the
///   values are copied.
/// - [`CacheRows::Consecutive`]`(start)`: `cache[start + r] = src[r]`; `start + n > n_ctx`
///   is a run-time error naming the cache.
/// - [`CacheRows::Paged`]: `cache[row of (seq[r], pos[r])] = src[r]`, the cache row as
///   [`crate::ops::PagedRows`] defines it, with its run-time checks. Rows that name the same
///   cache row leave one of them there (which one is not specified): a host gives each
///   position of each sequence its own cache row.
#[derive(Clone, Debug, PartialEq)]
pub struct KvWrite {
    /// The cache, F32 or F16 `[n_ctx, w]`.
    pub cache: TensorId,
    /// The rows to store, F32 `[n, w]`.
    pub src: TensorId,
    /// Where the rows go.
    pub rows: CacheRows,
}

impl KvWrite {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let src = c.f32("src", self.src)?;
        let (n, w) = c.matrix("src", src)?;
        let cache = c.dtype("cache", self.cache, is_cache_dtype, "F32 or F16")?;
        let (_, cw) = c.matrix("cache", cache)?;
        if cw != w {
            return Err(c.shape_error("cache", cache, format!("[n_ctx, {w}] (columns equal to src's)")));
        }
        let mut inputs = self.rows.tensors();
        inputs.push(self.src);
        c.distinct(self.cache, &inputs)?;
        self.rows.validate(c, n)
    }
}

#[cfg(test)]
mod tests {
    use super::f16_bits;

    /// Every f32 in a wide sweep (every 997th bit pattern, plus the edges) against `half`'s
    /// software rounding, which is ties-to-even.
    #[test]
    fn f16_bits_rounds_to_nearest_even() {
        let edges = [
            0.0f32,
            -0.0,
            65504.0,
            65519.99,
            65520.0,
            -65520.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MIN_POSITIVE,
            2.0f32.powi(-24),
            2.0f32.powi(-25),
            2.0f32.powi(-25) * 1.0000001,
            1.5 * 2.0f32.powi(-24),
            6.097555e-5,
            1.0 + 2.0f32.powi(-11),
            1.0 + 3.0 * 2.0f32.powi(-11),
        ];
        let sweep = (0..u32::MAX / 997).map(|i| f32::from_bits(i * 997));
        for x in edges.into_iter().chain(sweep) {
            let want = if x.is_nan() {
                let b = x.to_bits();
                ((b >> 16) & 0x8000) as u16 | 0x7e00 | ((b & 0x7f_ffff) >> 13) as u16
            } else {
                half::f16::from_f32_const(x).to_bits()
            };
            assert_eq!(f16_bits(x), want, "{x:e} ({:#010x})", x.to_bits());
        }
    }
}
