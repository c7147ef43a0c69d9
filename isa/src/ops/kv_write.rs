//! KV_WRITE: stores rows of keys or values into a cache at their positions.

use purebee_memory::TensorId;

use crate::ops::CacheRows;
use crate::validate::Checker;
use crate::IsaError;

/// KV_WRITE: stores each row `r` of `src` in the cache row that holds its position.
///
/// - `src`: F32 `[n, w]`; `cache`: F32 `[n_ctx, w]`, distinct from `src` and from the
///   tensors of `rows`.
/// - [`CacheRows::Consecutive`]`(start)`: `cache[start + r] = src[r]`; `start + n > n_ctx`
///   is a run-time error naming the cache.
/// - [`CacheRows::Paged`]: `cache[row of (seq[r], pos[r])] = src[r]`, the cache row as
///   [`crate::ops::PagedRows`] defines it, with its run-time checks. Rows that name the same
///   cache row leave one of them there (which one is not specified): a host gives each
///   position of each sequence its own cache row.
#[derive(Clone, Debug, PartialEq)]
pub struct KvWrite {
    /// The cache, F32 `[n_ctx, w]`.
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
        let cache = c.f32("cache", self.cache)?;
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
