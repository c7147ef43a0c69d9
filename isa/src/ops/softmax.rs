//! SOFTMAX over the last dim.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// SOFTMAX: for every row `v` of `x`, `out_i = e^(v_i − max v) / Σ_j e^(v_j − max v)`.
///
/// `x`, `out`: F32 of one shape; `out` may be `x`. Subtracting the maximum keeps the
/// exponentials finite; sums are accumulated in f32 or wider (the reference engine: f64).
/// A row containing +∞ or NaN yields NaN in that row.
#[derive(Clone, Debug, PartialEq)]
pub struct Softmax {
    /// The output.
    pub out: TensorId,
    /// The input rows.
    pub x: TensorId,
}

impl Softmax {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, x.shape.dims())
    }
}
