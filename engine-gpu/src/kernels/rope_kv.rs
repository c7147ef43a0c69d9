//! ROPE of q and k with KV_WRITE of k and v, in one dispatch (`rope_kv.wgsl`; the fusion
//! pass's `RopeKvWrite` pattern in `fuse/`).
//!
//! Why: every attention block rotates q and k in place and appends k and v to the caches:
//! four small dispatches, and k written to memory, then read back and copied. Fused, one
//! grid covers q's pairs, k's pairs (each rotated pair written to k and straight into the
//! k cache) and v's words; k itself is written only when a later instruction reads it.
//! The rotations are rope.wgsl's arithmetic (`rope_math.wgsl`), bit for bit.
//!
//! Reads and writes `4·n·(d_q + 2·d_kv)` bytes of q, k and v, writes `4·n·2·d_kv` of cache
//! (half that into F16 caches, each element rounded as KV_WRITE rounds).

use purebee_isa::ops::{KvWrite, Rope, RopeStyle};
use purebee_memory::DType;

use super::{KernelCall, RecordCtx, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

/// Mirrors `Params` in `rope_kv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub q_width: u32,
    pub k_width: u32,
    pub head_dim: u32,
    pub half_rot: u32,
    pub q_total: u32,
    pub k_total: u32,
    pub v_words: u32,
    pub v_width: u32,
    pub n_rows: u32,
    pub k_ctx: u32,
    pub v_ctx: u32,
    pub _pad0: u32,
    pub pos: super::ArgSlot,
    pub base: super::ArgSlot,
}

/// The dispatch of ROPE(q) ; ROPE(k) ; KV_WRITE(k) ; KV_WRITE(v). The caller (the fusion
/// pass) checked the pattern's preconditions: both ROPEs in place with one position, base,
/// style, head_dim and rot_dim = head_dim, the KV_WRITEs of the rotated k and of v at that
/// position, all tensors distinct and with the same row count.
pub(crate) fn record(
    ctx: &RecordCtx,
    (rq, rk): (&Rope, &Rope),
    (kk, kv): (&KvWrite, &KvWrite),
    write_k: bool,
) -> Result<KernelCall, GpuError> {
    let too_big =
        || GpuError::Unsupported { op: "ROPE", what: "a fused ROPE + KV_WRITE beyond u32 indexing".to_string() };
    let u = |v: usize| u32::try_from(v).map_err(|_| too_big());
    let q = &ctx.desc(rq.x)?.shape;
    let k = &ctx.desc(rk.x)?.shape;
    let v = &ctx.desc(kv.src)?.shape;
    let (hd, half) = (rq.head_dim as usize, rq.rot_dim as usize / 2);
    let items = |rows: usize, width: usize| rows.checked_mul(width / hd.max(1)).and_then(|h| h.checked_mul(half));
    let q_total = items(q.rows(), q.cols()).ok_or_else(too_big)?;
    let k_total = items(k.rows(), k.cols()).ok_or_else(too_big)?;
    let total = q_total.checked_add(k_total).and_then(|t| t.checked_add(v.numel())).ok_or_else(too_big)?;
    let params = Params {
        q_width: u(q.cols())?,
        k_width: u(k.cols())?,
        head_dim: rq.head_dim,
        half_rot: u(half)?,
        q_total: u(q_total)?,
        k_total: u(k_total)?,
        v_words: u(v.numel())?,
        v_width: u(v.cols())?,
        n_rows: u(q.rows())?,
        k_ctx: u(ctx.desc(kk.cache)?.shape.rows())?,
        v_ctx: u(ctx.desc(kv.cache)?.shape.rows())?,
        _pad0: 0,
        pos: ctx.consecutive("ROPE", rq.pos.consecutive())?,
        base: ctx.f32_arg(rq.base),
    };
    u(total)?;
    let neox = match rq.style {
        RopeStyle::Neox => 1,
        RopeStyle::Normal => 0,
    };
    let t = |id| Storage::Tensor(id, 0);
    let f16 = |id| -> Result<bool, GpuError> { Ok(ctx.desc(id)?.dtype == DType::F16) };
    Ok(KernelCall {
        key: PipelineKey {
            shader: Shader::RopeKv,
            entry: "rope_kv",
            constants: vec![
                ("WG", WG),
                ("NEOX", neox),
                ("WRITE_K", u32::from(write_k)),
                ("K_F16", u32::from(f16(kk.cache)?)),
                ("V_F16", u32::from(f16(kv.cache)?)),
            ],
        },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage: vec![
            (1, t(rq.out)),
            (2, t(rk.out)),
            (3, t(kv.src)),
            (4, t(kk.cache)),
            (5, t(kv.cache)),
            (6, Storage::RunParams),
        ],
        workgroups: ctx.grid_1d(total, WG),
    })
}
