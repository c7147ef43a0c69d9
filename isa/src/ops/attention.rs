//! ATTENTION: causal, grouped-query attention over a KV cache.

use purebee_memory::TensorId;

use crate::ops::kv_write::is_cache_dtype;
use crate::ops::CacheRows;
use crate::validate::Checker;
use crate::IsaError;

/// ATTENTION: causal grouped-query softmax attention of query rows over cached positions.
///
/// - `q`: F32 `[n, n_head · head_dim]`; `k_cache`, `v_cache`: F32 or F16 (each on its own)
///   `[n_ctx, n_kv_head · head_dim]`, an F16 cache's values widened exactly; `out`: F32 `[n, n_head · head_dim]`, distinct from
///   the inputs. `n_kv_head` divides `n_head`.
/// - Query row `r` is at position `p` of its sequence and attends to that sequence's
///   positions `t = 0 ..= p` (which earlier KV_WRITEs must have filled):
///   - [`CacheRows::Consecutive`]`(start)`: one sequence, `p = start + r`, position `t` in
///     cache row `t`; `start + n > n_ctx` is a run-time error;
///   - [`CacheRows::Paged`]: `p = pos[r]` of sequence `seq[r]`, position `t` in the cache row
///     [`crate::ops::PagedRows`] gives, with its run-time checks.
/// - Query head `h` reads kv head `h / (n_head / n_kv_head)`.
/// - `score_t = (q_h · k_t,kvh) / sqrt(head_dim)`; `w = softmax(score)` (max-subtracted);
///   `out_h = Σ_t w_t · v_t,kvh`.
/// - Engines accumulate in f32 or wider, in any order (the reference engine: f64), and
///   round once. With [`CacheRows::Paged`] a row's result depends only on its own query,
///   its sequence's cached positions `0 ..= p` and `p`, never on the other rows of the
///   instruction: each row is computed in the same order however many rows share the
///   instruction, so a batched step gives every sequence the bits it would get alone.
#[derive(Clone, Debug, PartialEq)]
pub struct Attention {
    /// The output.
    pub out: TensorId,
    /// The queries (after RoPE).
    pub q: TensorId,
    /// The key cache (after RoPE).
    pub k_cache: TensorId,
    /// The value cache.
    pub v_cache: TensorId,
    /// Elements per head.
    pub head_dim: u32,
    /// Where the query rows sit.
    pub rows: CacheRows,
}

impl Attention {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let q = c.f32("q", self.q)?;
        let (n, qw) = c.matrix("q", q)?;
        let k = c.dtype("k_cache", self.k_cache, is_cache_dtype, "F32 or F16")?;
        let (n_ctx, kw) = c.matrix("k_cache", k)?;
        let v = c.dtype("v_cache", self.v_cache, is_cache_dtype, "F32 or F16")?;
        c.shape("v_cache", v, &[n_ctx, kw])?;
        let out = c.f32("out", self.out)?;
        c.shape("out", out, &[n, qw])?;
        let hd = self.head_dim as usize;
        if hd == 0 || qw % hd != 0 || kw % hd != 0 {
            return Err(c.invalid(format!("head_dim {hd} must divide q's {qw} and the caches' {kw} columns")));
        }
        let (n_head, n_kv) = (qw / hd, kw / hd);
        if n_kv == 0 || n_head % n_kv != 0 {
            return Err(c.invalid(format!("{n_kv} kv heads do not divide {n_head} query heads")));
        }
        let mut inputs = vec![self.q, self.k_cache, self.v_cache];
        inputs.extend(self.rows.tensors());
        c.distinct(self.out, &inputs)?;
        self.rows.validate(c, n)
    }
}
