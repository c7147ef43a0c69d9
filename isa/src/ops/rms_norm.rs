//! RMS_NORM: root-mean-square normalisation with a learned weight.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// RMS_NORM: for every row `v` of `x` (length `d`):
/// `out_i = v_i / sqrt(mean(v²) + eps) · weight_i`.
///
/// - `x`, `out`: F32, same shape `[.., d]`; `out` may be `x` (in place).
/// - `weight`: F32 `[d]`.
/// - The mean of squares is accumulated in f32 or wider (the reference engine: f64); the
///   result is rounded to f32 once per element.
#[derive(Clone, Debug, PartialEq)]
pub struct RmsNorm {
    /// The output, shape of `x`.
    pub out: TensorId,
    /// The input rows.
    pub x: TensorId,
    /// The per-column weight, `[d]`.
    pub weight: TensorId,
    /// Added to the mean of squares (`layer_norm_rms_epsilon`).
    pub eps: f32,
}

impl RmsNorm {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, x.shape.dims())?;
        let w = c.f32("weight", self.weight)?;
        c.shape("weight", w, &[x.shape.cols()])?;
        if !(self.eps.is_finite() && self.eps >= 0.0) {
            return Err(c.invalid(format!("eps must be finite and >= 0, got {}", self.eps)));
        }
        c.distinct(self.out, &[self.weight])
    }
}
