//! ROPE (`rope.wgsl`), rows at consecutive positions or each at its own: one invocation per
//! rotated pair, plus one per copied tail element out of place. The angle and its sine and cosine are computed in f32 with the argument
//! handling the shader's header documents (error ≤ 11u·|θ| + 2u in θ, u = 2^-24).
//!
//! Bytes per call, for `x` of `[n, n_heads·head_dim]`: out of place, reads and writes
//! `4·n·n_heads·head_dim` each; in place, reads and writes only the rotated
//! `4·n·n_heads·rot_dim` (the tail stays where it is). Plus 8 bytes of run-time
//! parameters when position or base is one. Per-row positions (`rope_rows`) read
//! `4·n` bytes of positions instead of a position parameter.

use purebee_isa::ops::{Rope, RopeStyle, RowPositions};

use super::{ArgSlot, KernelCall, RecordCtx, Shader, Storage, ARG_CONST};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

/// Mirrors `Params` in `rope.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    /// Elements per row.
    pub width: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// `rot_dim / 2`.
    pub half_rot: u32,
    /// Invocations per head.
    pub items: u32,
    /// `rows · n_heads · items`.
    pub total: u32,
    /// The position of row 0 (consecutive rows; unused with per-row positions).
    pub pos: ArgSlot,
    /// The frequency base (f32 bits).
    pub base: ArgSlot,
    /// Padding to the WGSL struct's size (a multiple of 16 bytes).
    pub _pad: [u32; 3],
}

/// The invocations per head: one per pair, and out of place one per tail element.
fn items(head_dim: usize, rot_dim: usize, in_place: bool) -> usize {
    rot_dim / 2 + if in_place { 0 } else { head_dim - rot_dim }
}

/// One dispatch over every (row, head, item).
pub(crate) fn record(ctx: &RecordCtx, r: &Rope) -> Result<Vec<KernelCall>, GpuError> {
    let shape = &ctx.desc(r.x)?.shape;
    let (rows, width) = (shape.rows(), shape.cols());
    let (hd, rot) = (r.head_dim as usize, r.rot_dim as usize);
    let in_place = r.out == r.x;
    let items = items(hd, rot, in_place);
    // The ISA checked that head_dim divides the width and rot_dim ≤ head_dim.
    let total = rows.checked_mul(width / hd.max(1)).and_then(|h| h.checked_mul(items));
    let too_big = || GpuError::Unsupported { op: "ROPE", what: format!("a tensor of {rows} × {width} elements") };
    let total = total.ok_or_else(too_big)?;
    let u = |v: usize| u32::try_from(v).map_err(|_| too_big());
    let params = Params {
        width: u(width)?,
        head_dim: r.head_dim,
        half_rot: r.rot_dim / 2,
        items: u(items)?,
        total: u(total)?,
        pos: match r.pos {
            RowPositions::Consecutive(start) => ctx.u32_arg(start),
            RowPositions::PerRow(_) => ArgSlot { value: 0, param: ARG_CONST },
        },
        base: ctx.f32_arg(r.base),
        _pad: [0; 3],
    };
    let neox = match r.style {
        RopeStyle::Neox => 1,
        RopeStyle::Normal => 0,
    };
    let (entry, mut storage) = if in_place {
        ("rope_inplace", vec![(2, Storage::Tensor(r.out, 0)), (3, Storage::RunParams)])
    } else {
        ("rope", vec![(1, Storage::Tensor(r.x, 0)), (2, Storage::Tensor(r.out, 0)), (3, Storage::RunParams)])
    };
    let entry = match r.pos {
        RowPositions::Consecutive(_) => entry,
        RowPositions::PerRow(pos) => {
            storage.push((4, Storage::Tensor(pos, 0)));
            if in_place {
                "rope_rows_inplace"
            } else {
                "rope_rows"
            }
        }
    };
    Ok(vec![KernelCall {
        key: PipelineKey { shader: Shader::Rope, entry, constants: vec![("WG", WG), ("NEOX", neox)] },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: ctx.grid_1d(total, WG),
    }])
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_tail_is_copied_only_out_of_place() {
        assert_eq!(super::items(7, 4, false), 2 + 3);
        assert_eq!(super::items(7, 4, true), 2);
        assert_eq!(super::items(128, 128, false), 64);
    }
}
