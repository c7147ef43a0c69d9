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
///
/// **Log-sum-exp** (optional output `lse`: F32 with one element per row, `[n]` or `[n, 1]`;
/// distinct from the other three): `lse[r] = ln Σ_j e^(x[r, j])` over the whole row, so that
/// `values[r, j] − lse[r]` is the log-probability of `ids[r, j]` under the row's softmax.
/// Exactly:
///
/// 1. a row holding a NaN gives NaN (any NaN; engines write the quiet NaN `0x7fc0_0000`);
/// 2. otherwise a row holding `+∞` gives `+∞`;
/// 3. otherwise a row of only `−∞` gives `−∞` (the logarithm of an empty sum);
/// 4. otherwise, with `M` the row's largest value (finite), `lse[r] = M + ln Σ_j e^(x[r, j] − M)`
///    (max-subtracted, so no term overflows: each is in `[0, 1]`, the largest is 1, `−∞`
///    elements add 0), rounded to F32 (a result beyond F32's range is `+∞`).
///
/// The reference engine computes case 4 in f64 from the F32 inputs and rounds once. Other
/// engines accumulate in f32 or wider, in an order fixed by the row's length alone (a row's
/// bits never depend on the other rows); they are checked against the reference within
/// `(3·m + 64)·2⁻²⁴ + 2⁻²³·|lse|` (`tests/tests/top_k.rs` gives the derivation: the
/// exponentials' and the sum's rounding errors, relative to a sum ≥ 1, become an absolute
/// error on its logarithm). Cases 1 to 3 are exact on every engine.
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
    /// Each row's log-sum-exp, F32 `[n]` or `[n, 1]`, when wanted.
    pub lse: Option<TensorId>,
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
        c.distinct(self.ids, &[self.x])?;
        if let Some(lse) = self.lse {
            let d = c.f32("lse", lse)?;
            let fits = match d.shape.dims() {
                [n] => *n == rows,
                [n, 1] => *n == rows,
                _ => false,
            };
            if !fits {
                return Err(c.shape_error("lse", d, format!("one element per row of x ([{rows}] or [{rows}, 1])")));
            }
            c.distinct(lse, &[self.x, self.values, self.ids])?;
        }
        Ok(())
    }
}
