//! KV_WRITE: stores rows of keys or values into a cache at their positions.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::{IsaError, U32Arg};

/// KV_WRITE: `cache[pos + r] = src[r]` for every row `r` of `src`.
///
/// - `src`: F32 `[n, w]`; `cache`: F32 `[n_ctx, w]`, distinct from `src`.
/// - `pos + n > n_ctx` is a run-time error naming the cache.
#[derive(Clone, Debug, PartialEq)]
pub struct KvWrite {
    /// The cache, F32 `[n_ctx, w]`.
    pub cache: TensorId,
    /// The rows to store, F32 `[n, w]`.
    pub src: TensorId,
    /// The position of `src`'s row 0.
    pub pos: U32Arg,
}

impl KvWrite {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let src = c.f32("src", self.src)?;
        let (_, w) = c.matrix("src", src)?;
        let cache = c.f32("cache", self.cache)?;
        let (_, cw) = c.matrix("cache", cache)?;
        if cw != w {
            return Err(c.shape_error("cache", cache, format!("[n_ctx, {w}] (columns equal to src's)")));
        }
        c.distinct(self.cache, &[self.src])?;
        c.u32_arg(self.pos)
    }
}
