//! ATTENTION: causal, grouped-query attention over a KV cache.

use purebee_memory::TensorId;

use crate::validate::Checker;
use crate::{IsaError, U32Arg};

/// ATTENTION: causal grouped-query softmax attention of query rows over cached positions.
///
/// - `q`: F32 `[n, n_head · head_dim]`; `k_cache`, `v_cache`: F32
///   `[n_ctx, n_kv_head · head_dim]`; `out`: F32 `[n, n_head · head_dim]`, distinct from
///   the inputs. `n_kv_head` divides `n_head`.
/// - Query row `r` is at position `p = pos + r` and attends to cache rows `0 ..= p`
///   (which earlier KV_WRITEs must have filled); `pos + n > n_ctx` is a run-time error.
/// - Query head `h` reads kv head `h / (n_head / n_kv_head)`.
/// - `score_t = (q_h · k_t,kvh) / sqrt(head_dim)`; `w = softmax(score)` (max-subtracted);
///   `out_h = Σ_t w_t · v_t,kvh`.
/// - Engines accumulate in f32 or wider, in any order (the reference engine: f64), and
///   round once.
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
    /// The position of query row 0.
    pub pos: U32Arg,
}

impl Attention {
    pub(crate) fn validate(&self, c: &Checker) -> Result<(), IsaError> {
        let q = c.f32("q", self.q)?;
        let (n, qw) = c.matrix("q", q)?;
        let k = c.f32("k_cache", self.k_cache)?;
        let (n_ctx, kw) = c.matrix("k_cache", k)?;
        let v = c.f32("v_cache", self.v_cache)?;
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
        c.distinct(self.out, &[self.q, self.k_cache, self.v_cache])?;
        c.u32_arg(self.pos)
    }
}
