//! ARGMAX over the last dim.

use purebee_memory::{DType, TensorId};

use crate::validate::Checker;
use crate::IsaError;

/// ARGMAX: for every row of `x`, the index of its largest element; ties go to the lowest
/// index; NaN elements are never chosen (a row of only NaN gives 0). The same index as
/// the first of [`crate::ops::TopK`]'s rank order (TOP_K with `k = 1`).
///
/// `x`: F32 `[n, m]` (or `[m]`, one row); `out`: U32 with `n` elements.
#[derive(Clone, Debug, PartialEq)]
pub struct Argmax {
    /// The indices, U32 with one element per row.
    pub out: TensorId,
    /// The rows.
    pub x: TensorId,
}

impl Argmax {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let out = c.dtype("out", self.out, |d| d == DType::U32, "U32")?;
        if out.shape.numel() != x.shape.rows() {
            return Err(c.shape_error("out", out, format!("{} elements (one per row of x)", x.shape.rows())));
        }
        Ok(())
    }
}
