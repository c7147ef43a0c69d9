//! RMS_NORM fused with the int8 activation quantization of the BITLINEARs that read its
//! output (`norm_quant.wgsl`; the fusion pass's `NormQuantization` pattern in `fuse.rs`).
//!
//! Why: in a program of ternary projections an RMS_NORM (also in place, a norm just
//! before a projection) is often read only by BITLINEARs, which start by quantizing it.
//! Unfused that is two dispatches and a round trip of the normed rows through memory
//! (written, then read back by `quantize`);
//! fused it is one dispatch that keeps the normed values in registers, writes the int8
//! activations and scales into the same scratch buffers `bitlinear::quantize` fills, and
//! writes the normed tensor itself only when a later instruction reads it.
//!
//! One workgroup per row, of RMS_NORM's own size ([`row_reduce::workgroup_size`]), so the
//! sum of squares is reduced in the same order as the unfused kernel and the outputs are
//! bit-identical to RMS_NORM then `quantize`. Reads x twice or three times (`8–12·rows·d`
//! bytes, the later passes usually from cache), writes `rows·d + 4·rows` (+ `4·rows·d` when
//! the normed tensor is live).

use purebee_isa::ops::RmsNorm;

use super::{bitlinear, row_reduce, KernelCall, RecordCtx, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// The dispatch of RMS_NORM `n` quantized for BITLINEAR; the normed output is written to
/// `n.out` only when `write_out`. The caller checks that the row length is a multiple of 4
/// (BITLINEAR's `k` always is).
pub(crate) fn record(ctx: &RecordCtx, n: &RmsNorm, write_out: bool) -> Result<Option<KernelCall>, GpuError> {
    let shape = &ctx.desc(n.x)?.shape;
    let (rows, cols) = (shape.rows(), shape.cols());
    if rows == 0 || cols == 0 {
        return Ok(None);
    }
    let (r, c) = row_reduce::dims_u32("RMS_NORM", rows, cols)?;
    let t = |id| Storage::Tensor(id, 0);
    let (acts, act_scales) = bitlinear::scratch(rows, cols);
    let (entry, source) = if n.out == n.x {
        // In place: the weight stands in at binding 1 (read-only, unread).
        ("norm_quant_inplace", t(n.weight))
    } else {
        ("norm_quant", t(n.x))
    };
    let storage = vec![(1, source), (2, t(n.weight)), (3, t(n.out)), (5, acts), (6, act_scales)];
    let params = super::rms_norm::Params { rows: r, cols: c, eps: n.eps, _pad: 0 };
    let shader = if row_reduce::use_subgroups(ctx) { Shader::NormQuantSubgroup } else { Shader::NormQuant };
    Ok(Some(KernelCall {
        key: PipelineKey {
            shader,
            entry,
            constants: vec![("WG", row_reduce::workgroup_size(cols)), ("WRITE_OUT", u32::from(write_out))],
        },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: row_reduce::grid(ctx, rows),
    }))
}
