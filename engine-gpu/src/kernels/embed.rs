//! EMBED: `out[r] = decode(table[ids[r]])` (`embed.wgsl`), one invocation per output element,
//! for tables of F32, F16, BF16, Q4_0, Q4_1, Q8_0, TQ1_0, TQ2_0 and I2_S.
//!
//! The table stays in its file layout on the GPU (`layout.rs`: the GGUF bytes, padded to
//! whole words); the kernel decodes each element as `memory/src/quant/*` does, bit for bit.
//! The ternary paths read the raw packed formats: TQ1_0 as 54-byte blocks (`qs[48]`, `qh[4]`,
//! f16 `d`), TQ2_0 as 66-byte blocks (`qs[64]`, f16 `d`), I2_S as 32-byte blocks of 128
//! two-bit codes running through the tensor followed by the f32 scale trailer. If
//! `layout.rs` ever repacks a ternary type, this kernel must follow it.
//!
//! An id `>= vocab` writes zeros for its row (the reference engine returns an error; the GPU
//! cannot, so the host must validate ids before GRID_WRITE, as the runtime does).
//!
//! Bytes per call, for `n` ids of a `[vocab, d]` table: reads `4·n` (ids; each is re-read by
//! the `d` invocations of its row, from cache) plus `n·row_bytes(d)` of table rows (F32 `4d`,
//! F16/BF16 `2d`, Q4_0 `18d/32`, Q4_1 `20d/32`, Q8_0 `34d/32`, ternary (repacked) `d/4` + 4
//! bytes per 256 (TQ) or once (I2_S) of scales); writes `4·n·d`.

use purebee_isa::ops::Embed;
use purebee_memory::DType;

use super::{layout, KernelCall, RecordCtx, Shader, Storage};
use crate::pipelines::PipelineKey;
use crate::GpuError;

/// Threads per workgroup.
pub(crate) const WG: u32 = 256;

/// Mirrors `Params` in `embed.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, bytemuck::Pod, bytemuck::Zeroable)]
pub(crate) struct Params {
    /// Output elements, `n · d`.
    pub total: u32,
    pub cols: u32,
    pub vocab: u32,
    pub row_bytes: u32,
    /// I2_S: the word index of the scale (0 otherwise).
    pub scale_block: u32,
    pub row0: u32,
    pub window_rows: u32,
    pub _pad: u32,
}

/// The `DTYPE` override constant of `embed.wgsl` for a table dtype, or `None` for a dtype
/// the kernel does not decode (the ISA only lets F32, F16, BF16 and the quantized types in).
pub(crate) fn dtype_code(dtype: DType) -> Option<u32> {
    Some(match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::BF16 => 2,
        DType::Q4_0 => 3,
        DType::Q4_1 => 4,
        DType::Q8_0 => 5,
        DType::TQ1_0 | DType::TQ2_0 | DType::I2_S => 6,
        DType::I8 | DType::I16 | DType::I32 | DType::U32 => return None,
    })
}

/// The dispatch of one EMBED.
pub(crate) fn record(ctx: &RecordCtx, e: &Embed) -> Result<Vec<KernelCall>, GpuError> {
    const OP: &str = "EMBED";
    let table = ctx.desc(e.table)?;
    let code = dtype_code(table.dtype)
        .ok_or_else(|| GpuError::Unsupported { op: OP, what: format!("a {} table", table.dtype.name()) })?;
    let (vocab, cols) = (table.shape.rows(), table.shape.cols());
    let n = ctx.desc(e.ids)?.shape.numel();
    let too_large = |what: &str| GpuError::Unsupported { op: OP, what: format!("{what} beyond 2^32 (u32 indexing)") };
    let table_bytes = table.dtype.tensor_bytes(vocab, cols).ok_or_else(|| too_large("a table size"))?;
    let row_bytes = table.dtype.row_bytes(cols).ok_or_else(|| too_large("a row size"))?;
    let u32_of = |v: usize, what: &str| u32::try_from(v).map_err(|_| too_large(what));
    let total = n.checked_mul(cols).ok_or_else(|| too_large("an output size"))?;
    if total == 0 {
        return Ok(vec![]);
    }
    u32_of(table_bytes, "a table of bytes")?;
    // Bytes per table row of each part: the file's blocks, or (ternary) the codes and the TQ
    // scales (I2_S's one scale is bound whole).
    let ternary = table.dtype.is_ternary();
    let tq = matches!(table.dtype, DType::TQ1_0 | DType::TQ2_0);
    let part_rows = layout::part_row_bytes(table);
    let (part0_row, part1_row) = (part_rows[0], part_rows.get(1).copied().unwrap_or(0));
    let windows = ctx.row_windows(table)?;
    let split = windows.len() > 1;
    let mut calls = Vec::with_capacity(windows.len());
    for rows in windows {
        let params = Params {
            total: u32_of(total, "an output of elements")?,
            cols: u32_of(cols, "a row")?,
            vocab: u32_of(vocab, "a vocabulary")?,
            row_bytes: u32_of(row_bytes, "a row of bytes")?,
            scale_block: if tq { 256 } else { 0 },
            row0: u32_of(rows.start, "a vocabulary")?,
            window_rows: u32_of(rows.len(), "a vocabulary")?,
            _pad: 0,
        };
        let window = |part: usize, bytes_per_row: u64| {
            if split {
                // A binding's size must be a multiple of 4: the last window of rows of an
                // odd byte count (Q8_0's 34 per block) is rounded up into the buffer's
                // padding (buffers are padded to whole words), as in `linear.rs`.
                let offset = rows.start as u64 * bytes_per_row;
                let size = (rows.len() as u64 * bytes_per_row).next_multiple_of(4);
                Storage::TensorRange(e.table, part, offset, size)
            } else {
                Storage::Tensor(e.table, part)
            }
        };
        // Ternary tables have their scales in part 1; other dtypes bind the table again there.
        let scales = match (ternary, tq) {
            (true, true) => window(1, part1_row),
            (true, false) => Storage::Tensor(e.table, 1),
            (false, _) => window(0, part0_row),
        };
        calls.push(KernelCall {
            key: PipelineKey { shader: Shader::Embed, entry: "embed", constants: vec![("WG", WG), ("DTYPE", code)] },
            params: bytemuck::bytes_of(&params).to_vec(),
            storage: vec![
                (1, window(0, part0_row)),
                (2, Storage::Tensor(e.ids, 0)),
                (3, Storage::Tensor(e.out, 0)),
                (4, scales),
            ],
            workgroups: ctx.grid_1d(total, WG),
        });
    }
    Ok(calls)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_float_like_dtype_has_a_kernel_path() {
        for d in purebee_memory::ALL_DTYPES {
            assert_eq!(dtype_code(d).is_some(), d.is_float_like(), "{}", d.name());
        }
    }
}
