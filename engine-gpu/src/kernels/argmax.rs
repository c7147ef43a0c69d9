//! ARGMAX over each row (`argmax.wgsl`): the lowest index of the maximum, NaN never chosen,
//! 0 for a row of only NaN. Exact: values are compared as order-preserving integer keys.
//!
//! One dispatch, one workgroup per row ([`super::row_reduce`]): 64 threads for rows up to
//! 1024 elements, 256 beyond (a 128256-entry vocabulary row is one workgroup, ~500 elements
//! per thread), so greedy decoding reads back its 4 bytes after a single dispatch.
//!
//! Bytes per call, for `rows × m`: reads `4·rows·m`, writes `4·rows`.
//!
//! Fused after a one-token LINEAR (`fuse/`, pattern `ArgmaxPartials`), the LINEAR's kernel
//! does the first pass (`linear_argmax.wgsl`: one (key, index) slot per 8 rows) and
//! [`partials`] the second: a 128256-entry vocabulary is 16032 slots for its one workgroup,
//! not 128256 elements.

use purebee_isa::ops::Argmax;

use purebee_memory::TensorId;

use super::{row_reduce, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::GpuError;

/// Mirrors `Params` in `argmax.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub rows: u32,
    pub cols: u32,
    pub _pad: [u32; 2],
}

/// The dispatch of one ARGMAX.
pub(crate) fn record(ctx: &RecordCtx, a: &Argmax) -> Result<Vec<KernelCall>, GpuError> {
    let shape = &ctx.desc(a.x)?.shape;
    let (rows, cols) = (shape.rows(), shape.cols());
    if rows == 0 {
        return Ok(vec![]);
    }
    let (r, c) = row_reduce::dims_u32("ARGMAX", rows, cols)?;
    let t = |id| Storage::Tensor(id, 0);
    let params = Params { rows: r, cols: c, _pad: [0; 2] };
    let shaders = (Shader::Argmax, Shader::ArgmaxSubgroup);
    Ok(vec![row_reduce::call(ctx, shaders, "argmax", (rows, cols), &params, vec![(1, t(a.x)), (2, t(a.out))])])
}

/// The second pass of an ARGMAX fused into the LINEAR before it (`fuse/`,
/// `linear_argmax.wgsl`): one workgroup reduces the LINEAR's `slots` (key, index) pairs in
/// the scratch buffer [`ScratchKey::ArgmaxPartials`] to `ids[0]` (`argmax_partials`). Reads
/// `8·slots` bytes.
pub(crate) fn partials(ctx: &RecordCtx, ids: TensorId, slots: u64) -> Result<KernelCall, GpuError> {
    let (_, c) = row_reduce::dims_u32("ARGMAX", 2, slots as usize)?;
    let params = Params { rows: 1, cols: c, _pad: [0; 2] };
    let storage = vec![(1, Storage::Scratch(ScratchKey::ArgmaxPartials, 8 * slots)), (2, Storage::Tensor(ids, 0))];
    let shaders = (Shader::Argmax, Shader::ArgmaxSubgroup);
    Ok(row_reduce::call(ctx, shaders, "argmax_partials", (1, c as usize), &params, storage))
}
