//! ROPE of q and k with KV_WRITE of k and v as the epilogue of the one-token q/k/v products
//! (`rope_qkv.wgsl`; the fusion pass's `RopeEpilogue` pattern in `fuse/`).
//!
//! Why: after `gemv_multi` wrote q, k and v, `rope_kv.wgsl` read them back to rotate q and
//! k and append k and v to the caches: a dispatch of trivial work that every attention
//! block paid for (6.4 µs per call on an H200; a decode token made 30 such calls). Here
//! the product kernel computes both rows of a rotation pair in one workgroup and writes the
//! rotated values straight to q, the k cache and (unless dead) k; v's rows go to v (unless
//! dead) and the v cache. The multi-product dispatchers (`bitlinear::multi_product`,
//! `linear::multi_product`) add what this module gives them: the `rope_*` parameters,
//! three bindings (22..=24) and three override constants.
//!
//! Bytes: the products' as before; it writes `4·(d_q + 2·d_kv)` to q, k, v (less the dead
//! ones) and `4·2·d_kv` to the caches (half that to F16 caches: each element rounded to
//! nearest even on its bits and stored into its half of a word with two atomics), and
//! reads nothing back.

use purebee_isa::ops::{KvWrite, Rope, RopeStyle};

use super::{ArgSlot, RecordCtx, Storage};
use crate::GpuError;

/// Mirrors the `rope_*` fields at the end of `Params` in `bitlinear.wgsl` and `linear.wgsl`
/// (zero for every other entry point).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct RopeArgs {
    pub head_dim: u32,
    pub k_ctx: u32,
    pub v_ctx: u32,
    pub _pad: u32,
    pub pos: ArgSlot,
    pub base: ArgSlot,
}

/// Storage buffers the epilogue adds to a product's: the two caches and the run-time
/// parameters.
pub(crate) const STORAGE_BUFFERS: u32 = 3;

/// ROPE(q, q) ; ROPE(k, k) ; KV_WRITE(k_cache, k) ; KV_WRITE(v_cache, v) after the products
/// writing q, k and v, the preconditions checked by the fusion pass: `RopeKvWrite`'s (one
/// position, base, style, head_dim = rot_dim; q, k, v and the caches distinct) and the
/// caches none of the products' inputs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RopeEpilogue<'a> {
    pub rope_q: &'a Rope,
    pub cache_k: &'a KvWrite,
    pub cache_v: &'a KvWrite,
    /// Whether the rotated k and v are written to their tensors (else only to the caches).
    pub write_k: bool,
    pub write_v: bool,
    /// Whether the k and v caches are F16 (each element rounded as KV_WRITE rounds).
    pub k_f16: bool,
    pub v_f16: bool,
}

impl RopeEpilogue<'_> {
    /// The `rope_*` parameters.
    pub fn args(&self, ctx: &RecordCtx) -> Result<RopeArgs, GpuError> {
        let rows = |id| -> Result<u32, GpuError> {
            u32::try_from(ctx.desc(id)?.shape.rows()).map_err(|_| GpuError::Unsupported {
                op: "KV_WRITE",
                what: "a cache beyond 32-bit indexing".to_string(),
            })
        };
        Ok(RopeArgs {
            head_dim: self.rope_q.head_dim,
            k_ctx: rows(self.cache_k.cache)?,
            v_ctx: rows(self.cache_v.cache)?,
            _pad: 0,
            pos: ctx.consecutive("ROPE", self.rope_q.pos.consecutive())?,
            base: ctx.f32_arg(self.rope_q.base),
        })
    }

    /// The override constants of `rope_math.wgsl` and `rope_qkv.wgsl`.
    pub fn constants(&self) -> [(&'static str, u32); 5] {
        let neox = match self.rope_q.style {
            RopeStyle::Neox => 1,
            RopeStyle::Normal => 0,
        };
        [
            ("NEOX", neox),
            ("WRITE_K", u32::from(self.write_k)),
            ("WRITE_V", u32::from(self.write_v)),
            ("K_F16", u32::from(self.k_f16)),
            ("V_F16", u32::from(self.v_f16)),
        ]
    }

    /// The epilogue's bindings.
    pub fn storage(&self) -> [(u32, Storage); 3] {
        [
            (22, Storage::Tensor(self.cache_k.cache, 0)),
            (23, Storage::Tensor(self.cache_v.cache, 0)),
            (24, Storage::RunParams),
        ]
    }
}

/// The items of a `*_multi_rope` grid (`rope_qkv.wgsl`'s `qkv_item`): q's and k's rotation
/// pairs, then v's rows.
pub(crate) fn items(m_q: u32, m_k: u32, m_v: u32) -> usize {
    (m_q / 2) as usize + (m_k / 2) as usize + m_v as usize
}

#[cfg(test)]
mod tests {
    #[test]
    fn items_are_the_rotation_pairs_then_the_v_rows() {
        assert_eq!(super::items(6, 4, 4), 3 + 2 + 4);
    }
}
