//! RMS_NORM fused with the int8 activation quantization of the BITLINEARs that read its
//! output, or with the int8-block rounding of the LINEARs (`Int8Blocks` activations) that
//! read it (`norm_quant.wgsl`; the fusion pass's `NormQuantization` pattern in `fuse/`).
//!
//! Why: in a program of ternary projections an RMS_NORM (also in place, a norm just
//! before a projection) is often read only by BITLINEARs, which start by quantizing it.
//! Unfused that is two dispatches and a round trip of the normed rows through memory
//! (written, then read back by `quantize`);
//! fused it is one dispatch that keeps the normed values in registers, writes the int8
//! activations and scales into the same scratch buffers `bitlinear::quantize` fills (or the
//! rounded activations into the buffer `linear.wgsl`'s `quantize_blocks` fills), and
//! writes the normed tensor itself only when a later instruction reads it.
//!
//! One workgroup per row, of RMS_NORM's own size ([`row_reduce::workgroup_size`]), so the
//! sum of squares is reduced in the same order as the unfused kernel and the outputs are
//! bit-identical to RMS_NORM then `quantize`. Reads x twice or three times (`8–12·rows·d`
//! bytes, the later passes usually from cache), writes `rows·d + 4·rows` (+ `4·rows·d` when
//! the normed tensor is live).

use purebee_isa::ops::{RmsNorm, LINEAR_ACT_BLOCK};

use super::{bitlinear, linear, row_reduce, KernelCall, RecordCtx, ScratchKey, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// The longest row `norm_quant_blocks` takes: its workgroup holds one maximum per block
/// (`MAX_BLOCKS` in norm_quant.wgsl, 2 KiB).
pub(crate) const MAX_BLOCK_ROW: usize = 512 * LINEAR_ACT_BLOCK;

/// Which int8 rounding follows the norm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rounding {
    /// BITLINEAR's: a scale per row, int8 codes and scales in `bitlinear::scratch`.
    Rows,
    /// LINEAR's `Int8Blocks`: a scale per block of 32, the codes, the scales and (when
    /// `xhat`: a product reads it, [`linear::reads_xhat`]) `x̂ = q / s_b` in
    /// [`ScratchKey::LinearActivations`]. Rows of at most [`MAX_BLOCK_ROW`] elements.
    Blocks { xhat: bool },
}

/// The dispatch of RMS_NORM `n` rounded as `rounding` says; the normed output is written to
/// `n.out` only when `write_out`. The caller checks the row length: a multiple of 4 for
/// [`Rounding::Rows`] (BITLINEAR's `k` always is), at most [`MAX_BLOCK_ROW`] for
/// [`Rounding::Blocks`].
pub(crate) fn record(
    ctx: &RecordCtx,
    n: &RmsNorm,
    rounding: Rounding,
    write_out: bool,
) -> Result<Option<KernelCall>, GpuError> {
    let shape = &ctx.desc(n.x)?.shape;
    let (rows, cols) = (shape.rows(), shape.cols());
    if rows == 0 || cols == 0 {
        return Ok(None);
    }
    let (r, c) = row_reduce::dims_u32("RMS_NORM", rows, cols)?;
    let t = |id| Storage::Tensor(id, 0);
    let inplace = n.out == n.x;
    // In place, the weight stands in at binding 1 (read-only, unread).
    let source = if inplace { t(n.weight) } else { t(n.x) };
    let mut storage = vec![(1, source), (2, t(n.weight)), (3, t(n.out))];
    let entry = match rounding {
        Rounding::Rows => {
            let (acts, act_scales) = bitlinear::scratch(rows, cols);
            storage.extend([(5, acts), (6, act_scales)]);
            if inplace {
                "norm_quant_inplace"
            } else {
                "norm_quant"
            }
        }
        Rounding::Blocks { .. } => {
            storage.push((7, Storage::Scratch(ScratchKey::LinearActivations, linear::int8_scratch_bytes(rows, cols))));
            if inplace {
                "norm_quant_blocks_inplace"
            } else {
                "norm_quant_blocks"
            }
        }
    };
    let params = super::rms_norm::Params { rows: r, cols: c, eps: n.eps, _pad: 0 };
    let shader = if row_reduce::use_subgroups(ctx) { Shader::NormQuantSubgroup } else { Shader::NormQuant };
    let mut constants = vec![("WG", row_reduce::workgroup_size(cols)), ("WRITE_OUT", u32::from(write_out))];
    if let Rounding::Blocks { xhat } = rounding {
        constants.push(("WRITE_XHAT", u32::from(xhat)));
    }
    // Set only when on, so that the default pipelines are unchanged.
    if ctx.caps.held_norm {
        constants.push(("HELD", 1));
    }
    Ok(Some(KernelCall {
        key: PipelineKey { shader, entry, constants },
        params: bytemuck::bytes_of(&params).to_vec(),
        storage,
        workgroups: row_reduce::grid(ctx, rows),
    }))
}
