//! EMBED: row gather from a table of any supported dtype.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::IsaError;

/// EMBED: `out[r] = decode(table[ids[r]])`.
///
/// - `table`: `[vocab, d]`, F32, F16, BF16 or any block-quantized type; each row is decoded
///   exactly as its layout defines (dequantize; no other rounding).
/// - `ids`: U32, any shape with `n` elements (read in row-major order).
/// - `out`: F32 `[n, d]`.
///
/// An id `>= vocab` is a run-time error naming the ids tensor, the row and the id.
#[derive(Clone, Debug, PartialEq)]
pub struct Embed {
    /// The output rows, F32 `[n, d]`.
    pub out: TensorId,
    /// The table, `[vocab, d]`.
    pub table: TensorId,
    /// The row indices, U32 with `n` elements.
    pub ids: TensorId,
}

impl Embed {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let table = c.dtype("table", self.table, |d| d.is_float_like(), "a float or block-quantized type")?;
        let (_, d) = c.matrix("table", table)?;
        let ids = c.dtype("ids", self.ids, |d| d == purebee_memory::DType::U32, "U32")?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, &[ids.shape.numel(), d])?;
        c.distinct(self.out, &[self.table, self.ids])
    }
}
