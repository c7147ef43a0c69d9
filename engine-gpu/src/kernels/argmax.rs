//! ARGMAX over each row (`argmax.wgsl`): the lowest index of the maximum, NaN never chosen,
//! 0 for a row of only NaN. Exact: values are compared as order-preserving integer keys.
//!
//! One dispatch, one workgroup per row ([`super::row_reduce`]): 64 threads for rows up to
//! 1024 elements, 256 beyond (a 128256-entry vocabulary row is one workgroup, ~500 elements
//! per thread), so greedy decoding reads back its 4 bytes after a single dispatch.
//!
//! Bytes per call, for `rows × m`: reads `4·rows·m`, writes `4·rows`.

use purebee_isa::ops::Argmax;

use super::{row_reduce, KernelCall, RecordCtx, Shader, Storage};
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

#[cfg(test)]
mod tests {
    #[test]
    fn params_match_the_wgsl_struct_size() {
        // `struct Params { rows: u32, cols: u32, _pad0: u32, _pad1: u32 }`: 16 bytes.
        assert_eq!(std::mem::size_of::<super::Params>(), 16);
    }
}
