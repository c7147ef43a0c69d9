//! RMS_NORM: `out_i = x_i / sqrt(mean(x²) + eps) · weight_i` per row (`rms_norm.wgsl`).
//!
//! One workgroup per row ([`super::row_reduce`]): 64 threads for rows up to 1024 elements,
//! 256 beyond; the sum of squares is accumulated in f32 (each thread's strided partial sum,
//! then the workgroup reduction, a tree in workgroup memory or subgroup adds). The `_inplace`
//! entry point serves `out == x`.
//!
//! Bytes per call, for `rows × d`: reads x twice (`8·rows·d`; the second pass re-reads the
//! row the workgroup just summed, usually from cache) and the weight once per row
//! (`4·rows·d` loads, `4·d` from memory when cached); writes `4·rows·d`.

use purebee_isa::ops::RmsNorm;

use super::{row_reduce, KernelCall, RecordCtx, Shader, Storage};
use crate::GpuError;

/// Mirrors `Params` in `rms_norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub rows: u32,
    pub cols: u32,
    pub eps: f32,
    pub _pad: u32,
}

/// The dispatch of one RMS_NORM.
pub(crate) fn record(ctx: &RecordCtx, n: &RmsNorm) -> Result<Vec<KernelCall>, GpuError> {
    let shape = &ctx.desc(n.x)?.shape;
    let (rows, cols) = (shape.rows(), shape.cols());
    if rows == 0 || cols == 0 {
        return Ok(vec![]);
    }
    let (r, c) = row_reduce::dims_u32("RMS_NORM", rows, cols)?;
    let t = |id| Storage::Tensor(id, 0);
    let (entry, storage) = if n.out == n.x {
        // The weight stands in at binding 1 (read-only, unread: the shared helpers name `x`).
        ("rms_norm_inplace", vec![(1, t(n.weight)), (2, t(n.weight)), (3, t(n.out))])
    } else {
        ("rms_norm", vec![(1, t(n.x)), (2, t(n.weight)), (3, t(n.out))])
    };
    let params = Params { rows: r, cols: c, eps: n.eps, _pad: 0 };
    let shaders = (Shader::RmsNorm, Shader::RmsNormSubgroup);
    Ok(vec![row_reduce::call(ctx, shaders, entry, (rows, cols), &params, storage)])
}
