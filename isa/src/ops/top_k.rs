//! TOP_K over the last dim.

use purebee_memory::{DType, TensorId};

use crate::validate::Checker;
use crate::IsaError;

/// TOP_K: for every row of `x`, its `k` first elements in the row's *rank order*, as their
/// values and their indices.
///
/// `x`: F32 `[n, m]` (or `[m]`, one row); `values`: F32 and `ids`: U32, each with `n` rows
/// of `k` columns (`[n, k]`, or `[k]` for one row). `1 ≤ k ≤ m`, checked when the program
/// is built (`k` is a constant). The three tensors are distinct.
///
/// The rank order of a row is a total order on its indices:
///
/// 1. every non-NaN element comes before every NaN element;
/// 2. among non-NaN elements, a larger value comes first, values compared as IEEE numbers
///    (so `−0 == +0`, `−∞` is an ordinary value below every other);
/// 3. equal values (and NaNs among themselves) come in increasing index order.
///
/// `ids[r, j]` is the index of the `j`-th element of row `r` in that order, and
/// `values[r, j] = x[r, ids[r, j]]`, its bits copied unchanged. NaN is thus never chosen
/// ahead of a number; it appears only when row `r` holds fewer than `k` non-NaN elements, in
/// the trailing slots, in index order. TOP_K with `k = 1` gives ARGMAX's index (the lowest
/// index of the maximum; 0 for a row of only NaN). A selection, no arithmetic: every engine
/// gives the same bits.
#[derive(Clone, Debug, PartialEq)]
pub struct TopK {
    /// The chosen values, F32 `[n, k]`.
    pub values: TensorId,
    /// Their indices in the row, U32 `[n, k]`.
    pub ids: TensorId,
    /// The rows.
    pub x: TensorId,
    /// How many elements of each row to keep, `1 ≤ k ≤ m`.
    pub k: u32,
}

impl TopK {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let x = c.f32("x", self.x)?;
        let values = c.f32("values", self.values)?;
        let ids = c.dtype("ids", self.ids, |d| d == DType::U32, "U32")?;
        let (rows, m) = (x.shape.rows(), x.shape.cols());
        let k = self.k as usize;
        if k == 0 || k > m {
            return Err(c.field("k", k, format!("must be in 1..={m} (1 to the length of a row of x)")));
        }
        for (operand, d) in [("values", values), ("ids", ids)] {
            if d.shape.rows() != rows || d.shape.cols() != k {
                return Err(c.shape_error(operand, d, format!("{rows} rows of k = {k} columns ([{rows}, {k}])")));
            }
        }
        c.distinct(self.values, &[self.x, self.ids])?;
        c.distinct(self.ids, &[self.x])
    }
}
