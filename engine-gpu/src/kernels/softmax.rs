//! SOFTMAX over each row (`softmax.wgsl`): the maximum, the sum of `e^(x − max)` in f32, then
//! the quotients; rows holding NaN or +inf (or only -inf) become NaN, as the ISA says.
//!
//! One workgroup per row ([`super::row_reduce`]): 64 threads for rows up to 1024 elements,
//! 256 beyond (a 128256-entry vocabulary row is one workgroup of 256, ~500 elements each).
//! The `_inplace` entry point serves `out == x`.
//!
//! Bytes per call, for `rows × d`: reads x three times (`12·rows·d`; the second and third
//! passes usually hit the cache for rows that fit in it) and writes `4·rows·d`.

use purebee_isa::ops::Softmax;

use super::{row_reduce, KernelCall, RecordCtx, Shader, Storage};
use crate::GpuError;

/// Mirrors `Params` in `softmax.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    pub rows: u32,
    pub cols: u32,
    pub _pad: [u32; 2],
}

/// The dispatch of one SOFTMAX.
pub(crate) fn record(ctx: &RecordCtx, s: &Softmax) -> Result<Vec<KernelCall>, GpuError> {
    let shape = &ctx.desc(s.x)?.shape;
    let (rows, cols) = (shape.rows(), shape.cols());
    if rows == 0 || cols == 0 {
        return Ok(vec![]);
    }
    let (r, c) = row_reduce::dims_u32("SOFTMAX", rows, cols)?;
    let t = |id| Storage::Tensor(id, 0);
    let (entry, storage) = if s.out == s.x {
        ("softmax_inplace", vec![(2, t(s.out))])
    } else {
        ("softmax", vec![(1, t(s.x)), (2, t(s.out))])
    };
    let params = Params { rows: r, cols: c, _pad: [0; 2] };
    let shaders = (Shader::Softmax, Shader::SoftmaxSubgroup);
    Ok(vec![row_reduce::call(ctx, shaders, entry, (rows, cols), &params, storage)])
}
