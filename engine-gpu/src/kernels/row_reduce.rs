//! What the one-workgroup-per-row kernels (RMS_NORM, SOFTMAX, ARGMAX) share: the workgroup
//! size chosen from the row length, the grid of one workgroup per row, and the choice between
//! the two forms of their reductions.
//!
//! The reductions are the WGSL preludes every reducing kernel shares, prepended to its source
//! (see [`super::Shader`]): `reduce_portable.wgsl`, a pairwise tree in workgroup memory that
//! runs everywhere, and `reduce_subgroup.wgsl`, subgroup operations (`subgroupAdd`,
//! `subgroupMax`, `subgroupMin`) with one workgroup-memory slot per subgroup, used when the
//! device has the SUBGROUP feature (`Capabilities::subgroups`). Both define the same `Ids`
//! struct and `reduce_*` functions, so a kernel's own source is the same for both.

use super::{KernelCall, RecordCtx, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Rows up to this long use [`SMALL_WG`] threads, longer rows [`LARGE_WG`].
pub(crate) const SMALL_ROW: usize = 1024;
/// Threads per workgroup for short rows (each thread still has up to 16 elements).
pub(crate) const SMALL_WG: u32 = 64;
/// Threads per workgroup for long rows (2560, 6912, a 128256-entry vocabulary).
pub(crate) const LARGE_WG: u32 = 256;

/// The workgroup size (a power of two) for rows of `cols` elements.
pub(crate) fn workgroup_size(cols: usize) -> u32 {
    if cols <= SMALL_ROW {
        SMALL_WG
    } else {
        LARGE_WG
    }
}

/// One workgroup per row: `rows` workgroups, in x up to the device limit and the rest in y
/// (the kernels compute the row as `wid.y · num_workgroups.x + wid.x` and skip rows past the
/// end).
pub(crate) fn grid(ctx: &RecordCtx, rows: usize) -> [u32; 3] {
    ctx.grid_1d(rows, 1)
}

/// The dispatch of a row kernel: `portable` or `subgroup` by the device's capabilities, the
/// workgroup size for rows of `cols`, one workgroup per row.
pub(crate) fn call(
    ctx: &RecordCtx,
    (portable, subgroup): (Shader, Shader),
    entry: &'static str,
    (rows, cols): (usize, usize),
    params: &impl bytemuck::Pod,
    storage: Vec<(u32, Storage)>,
) -> KernelCall {
    KernelCall {
        key: PipelineKey {
            shader: if use_subgroups(ctx) { subgroup } else { portable },
            entry,
            constants: vec![("WG", workgroup_size(cols))],
        },
        params: bytemuck::bytes_of(params).to_vec(),
        storage,
        workgroups: grid(ctx, rows),
    }
}

/// `rows` and `cols` as the kernels' u32s, or an error when the row-major index of an
/// element would not fit in a u32.
pub(crate) fn dims_u32(op: &'static str, rows: usize, cols: usize) -> Result<(u32, u32), GpuError> {
    let fits = rows.checked_mul(cols).is_some_and(|n| u32::try_from(n).is_ok());
    match (u32::try_from(rows), u32::try_from(cols)) {
        (Ok(r), Ok(c)) if fits => Ok((r, c)),
        _ => Err(GpuError::Unsupported { op, what: format!("a {rows} × {cols} tensor (u32 element indexing)") }),
    }
}

/// Whether to use the subgroup form of the reductions.
pub(crate) fn use_subgroups(ctx: &RecordCtx) -> bool {
    ctx.caps.subgroups
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workgroup_sizes_are_powers_of_two_chosen_by_length() {
        assert!(SMALL_WG.is_power_of_two() && LARGE_WG.is_power_of_two());
        assert_eq!(workgroup_size(1), SMALL_WG);
        assert_eq!(workgroup_size(SMALL_ROW), SMALL_WG);
        assert_eq!(workgroup_size(SMALL_ROW + 1), LARGE_WG);
        assert_eq!(workgroup_size(128_256), LARGE_WG);
    }
}
