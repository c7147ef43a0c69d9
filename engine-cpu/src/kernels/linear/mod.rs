//! LINEAR's kernels: f32 activations against float or block-quantized weight rows, read
//! in their file layout (memory's `quant` modules give each layout).
//!
//! - [`dot_row`]: one weight row against one activation row, decoding on the fly (decode:
//!   each weight byte is read once per token, so this is the memory-bound path).
//! - [`decode_row`] + [`dot_tile`]: a tile of weight rows decoded to f32 once, then
//!   applied to many tokens (prefill: weight-stationary, the decode cost is shared).
//!
//! Values are decoded exactly as memory's `QuantMatrix::dequantize_row` decodes them (the
//! tests check it bit for bit): `code · d` (exact in f32), Q4_1's `code · d + m` rounded
//! once (an FMA, since `code · d` is exact). Sums are accumulated in f32 in an order that
//! differs from the reference engine's f64 sum, which LINEAR allows. Q8_0 and Q4_0 sum
//! `Σ x·code` per block and scale the block sum by `d` once: the same value as
//! `Σ x·(code·d)` in exact arithmetic, with the same error bound in f32.
//!
//! The portable kernels and the exact decoders are in `portable`, which the x86 kernels
//! (`x86`: AVX2, and AVX-512 for the float rows of several tokens) and the aarch64 ones
//! (`neon`) also call for what they do not vectorize.

use purebee_memory::DType;

use super::Simd;
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
use super::SimdLevel;
use portable::{dot_row_portable, dot_tile_portable};

#[cfg(target_arch = "aarch64")]
mod neon;
mod portable;
#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

pub use portable::decode_row;

/// The dtypes these kernels read directly; others are decoded by the caller.
pub fn supports(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Q4_0 | DType::Q4_1 | DType::Q8_0)
}

/// `Σ x_i · w_i` for one row `row` (its bytes, `x.len()` elements) of a [`supports`] dtype.
pub fn dot_row(level: Simd, dtype: DType, row: &[u8], x: &[f32]) -> f32 {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` or `Avx512Vnni` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::dot_row(dtype, row, x) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: a `Simd` of level `Neon` or `NeonDot` exists only where the CPU has NEON (and dotprod).
        SimdLevel::Neon | SimdLevel::NeonDot => unsafe { neon::dot_row(dtype, row, x) },
        _ => dot_row_portable(dtype, row, x),
    }
}

/// The most tokens one call of [`dot_rows_tokens`] takes.
pub const MAX_TOKENS: usize = 4;

/// Whether [`dot_rows_tokens`] reads `dtype`.
pub fn supports_tokens(dtype: DType) -> bool {
    matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// `out[t · rows + r]` = [`dot_row`] of row `r` of `rows` (rows of `row_bytes`, a
/// [`supports_tokens`] dtype) against token `t` of `x` (1 to [`MAX_TOKENS`] tokens), bit
/// for bit: the x86 levels load and widen each weight once for every token.
pub fn dot_rows_tokens(level: Simd, dtype: DType, rows: &[u8], row_bytes: usize, x: &[&[f32]], out: &mut [f32]) {
    assert!(
        (1..=MAX_TOKENS).contains(&x.len()) && supports_tokens(dtype),
        "dot_rows_tokens: 1 to 4 tokens, float rows"
    );
    let n_rows = out.len() / x.len();
    assert!(out.len() == n_rows * x.len() && rows.len() >= n_rows * row_bytes, "dot_rows_tokens: fewer rows than sums");
    let size = if dtype == DType::F32 { 4 } else { 2 };
    assert!(x.iter().all(|xt| size * xt.len() <= row_bytes), "dot_rows_tokens: activations longer than a row");
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx2` exists only where the CPU has AVX2/FMA/F16C.
        SimdLevel::Avx2 => unsafe { x86::dot_rows_tokens(dtype, rows, row_bytes, x, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a `Simd` of level `Avx512Vnni` exists only where the CPU has AVX-512 F and
        // VL, and AVX2/FMA/F16C.
        SimdLevel::Avx512Vnni => unsafe { x86::dot_rows_tokens_avx512(dtype, rows, row_bytes, x, out) },
        _ => {
            for (t, xt) in x.iter().enumerate() {
                for r in 0..n_rows {
                    out[t * n_rows + r] = dot_row(level, dtype, &rows[r * row_bytes..(r + 1) * row_bytes], xt);
                }
            }
        }
    }
}

/// `Σ a_i · b_i` in f32 (the one-row, one-token case of [`dot_tile`]).
pub fn dot(level: Simd, a: &[f32], b: &[f32]) -> f32 {
    let mut y = 0f32;
    dot_tile(level, a, b, a.len(), std::slice::from_mut(&mut y));
    y
}

/// A tile product: `out[t · rows + r] = Σ_i w[r·k + i] · x[t·k + i]` for `rows` decoded
/// weight rows and `tokens` activation rows of `k` elements.
pub fn dot_tile(level: Simd, w: &[f32], x: &[f32], k: usize, out: &mut [f32]) {
    match level.get() {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `dot_row`.
        SimdLevel::Avx2 | SimdLevel::Avx512Vnni => unsafe { x86::dot_tile(w, x, k, out) },
        _ => dot_tile_portable(w, x, k, out),
    }
}
