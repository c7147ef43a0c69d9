//! LINEAR: a float matrix product with float or block-quantized weights.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// LINEAR: `out[r][j] = Σ_i x[r][i] · W[j][i]`, i.e. `out = x · Wᵀ`.
///
/// - `x`: F32 `[n, k]`.
/// - `weight`: `[m, k]` (GGUF `ne = [k, m]`), F32, F16, BF16 or any block-quantized type,
///   ternary included; its elements are decoded exactly as the layout defines. The
///   activations are not quantized (that is BITLINEAR).
/// - `out`: F32 `[n, m]`, distinct from `x` and `weight`.
/// - Products are accumulated in f32 or wider, in any order (the reference engine: f64, in
///   index order); each result is rounded to f32 once.
#[derive(Clone, Debug, PartialEq)]
pub struct Linear {
    /// The output, F32 `[n, m]`.
    pub out: TensorId,
    /// The activations, F32 `[n, k]`.
    pub x: TensorId,
    /// The weight, `[m, k]`.
    pub weight: TensorId,
}

impl Linear {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let (n, k) = c.matrix("x", x)?;
        let w = c.dtype("weight", self.weight, |d| d.is_float_like(), "a float or block-quantized type")?;
        let (m, wk) = c.matrix("weight", w)?;
        if wk != k {
            return Err(c.shape_error("weight", w, format!("[m, {k}] (columns equal to x's)")));
        }
        let out = c.f32("out", self.out)?;
        c.shape("out", out, &[n, m])?;
        c.distinct(self.out, &[self.x, self.weight])
    }
}
