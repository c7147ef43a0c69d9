//! Each planned tensor's bytes in its output type, produced a row at a time from the mapped
//! checkpoint: memory holds a row (an I2_S projection: its trits, one byte each, since the
//! format's scale trails the whole tensor), never a tensor in f32.

use half::{bf16, f16};
use purebee_memory::quant::encode::{encode_i2_s, encode_q8_0_row, encode_tq1_0_row, encode_tq2_0_row, EncodeError};
use purebee_memory::quant::ternarize::Ternarizer;
use purebee_memory::DType;

use crate::plan::{Planned, Source};
use crate::safetensors::{Checkpoint, StDtype};
use crate::ConvertError;

/// Elements per TQ block, whose scale is the block's largest |value|.
const TQ_BLOCK: usize = 256;

/// How a projection's values are made ternary: from float master weights by absmean, or
/// unpacked from BitNet's packed release.
#[derive(Clone, Copy, Debug)]
pub enum Ternary {
    /// Ternarized with this, then rounded to the checkpoint's dtype.
    Absmean(Ternarizer, StDtype),
    /// Packed trits, each standing for ±`magnitude` (1 / weight_scale).
    Packed { magnitude: f32 },
}

/// A tensor's rows, read from the checkpoint as f32 (Q/K rows in their permuted order),
/// or as trits for a ternary source.
pub struct Rows<'a> {
    ckpt: &'a Checkpoint,
    planned: &'a Planned,
    cols: usize,
}

impl<'a> Rows<'a> {
    pub fn new(ckpt: &'a Checkpoint, planned: &'a Planned) -> Rows<'a> {
        Rows { ckpt, planned, cols: *planned.shape.last().unwrap_or(&1) }
    }

    /// The number of rows (1 for a vector).
    pub fn count(&self) -> usize {
        if self.planned.shape.len() == 2 {
            self.planned.shape[0]
        } else {
            1
        }
    }

    /// The checkpoint row that output row `r` is (llama.cpp's Q/K permutation: within each
    /// head, output row 2b + a is input row a·(head_dim/2) + b).
    fn source_row(&self, r: usize) -> usize {
        match self.planned.permute {
            None => r,
            Some(p) => {
                let hd = self.count() / p.heads;
                let (h, j) = (r / hd, r % hd);
                h * hd + (j % 2) * (hd / 2) + j / 2
            }
        }
    }

    /// Output row `r` of a float source as f32 (exact).
    pub fn floats(&self, r: usize, out: &mut [f32]) -> Result<(), ConvertError> {
        let Source::Float(name) = &self.planned.source else {
            return Err(self.wrong("a packed weight read as floats"));
        };
        let (file, t) = self.ckpt.get(name).ok_or_else(|| self.wrong("vanished"))?;
        let bytes = file.bytes(t);
        let start = self.source_row(r) * self.cols;
        for (c, o) in out.iter_mut().enumerate() {
            *o = t.dtype.get(bytes, start + c);
        }
        Ok(())
    }

    /// Output row `r` of a ternary projection: its trits.
    pub fn trits(&self, r: usize, ternary: &Ternary, out: &mut [i8], row: &mut [f32]) -> Result<(), ConvertError> {
        match (ternary, &self.planned.source) {
            (Ternary::Absmean(tz, _), Source::Float(_)) => {
                self.floats(r, row)?;
                for (t, &w) in out.iter_mut().zip(row.iter()) {
                    *t = tz.trit(w);
                }
            }
            (Ternary::Packed { .. }, Source::Packed { weight, .. }) => {
                let (file, t) = self.ckpt.get(weight).ok_or_else(|| self.wrong("vanished"))?;
                let bytes = file.bytes(t);
                // transformers' `pack_weights`: trit k of byte [p, c] is row k·(rows/4) + p.
                let quarter = self.count() / 4;
                let (k, p) = (r / quarter, r % quarter);
                for (c, o) in out.iter_mut().enumerate() {
                    *o = ((bytes[p * self.cols + c] >> (2 * k)) & 3) as i8 - 1;
                }
                if let Some(c) = out.iter().position(|&t| t > 1) {
                    return Err(self.wrong(&format!("row {r}, column {c}: code 3 is not a trit")));
                }
            }
            _ => return Err(self.wrong("ternary source and plan disagree")),
        }
        Ok(())
    }

    fn wrong(&self, reason: &str) -> ConvertError {
        let name = self.planned.source_name();
        ConvertError::Tensor { path: self.ckpt.path_of(name), tensor: name.to_string(), reason: reason.to_string() }
    }
}

/// The magnitude every non-zero trit of a ternary projection stores, as the output holds it
/// before the output type's own rounding: for an absmean source, `1 / iscale` rounded to the
/// checkpoint's dtype (llama.cpp casts the ternarized values back to it).
pub fn magnitude(ternary: &Ternary) -> f32 {
    match ternary {
        Ternary::Absmean(tz, dtype) => dtype.round(tz.magnitude()),
        Ternary::Packed { magnitude } => *magnitude,
    }
}

/// Writes `planned` as `dtype` through `put`, a row (or a tensor, for I2_S) at a time.
pub fn write(
    ckpt: &Checkpoint,
    planned: &Planned,
    dtype: DType,
    ternary: Option<&Ternary>,
    put: &mut dyn FnMut(&[u8]) -> Result<(), ConvertError>,
) -> Result<(), ConvertError> {
    let rows = Rows::new(ckpt, planned);
    let cols = rows.cols;
    let encode = |source: EncodeError| ConvertError::Encode { tensor: planned.gguf.clone(), source };
    let mut floats = vec![0f32; cols];
    let mut trits = vec![0i8; cols];
    match ternary {
        Some(t) => {
            let m = magnitude(t);
            // A magnitude the checkpoint's dtype rounds to 0 stores every weight as 0.
            let zero = m == 0.0;
            if dtype == DType::I2_S {
                let mut all = vec![0i8; rows.count() * cols];
                for (r, chunk) in all.chunks_exact_mut(cols).enumerate() {
                    rows.trits(r, t, chunk, &mut floats)?;
                }
                if zero {
                    all.fill(0);
                }
                return put(&encode_i2_s(&all, m).map_err(encode)?);
            }
            for r in 0..rows.count() {
                rows.trits(r, t, &mut trits, &mut floats)?;
                if zero {
                    trits.fill(0);
                }
                let bytes = match dtype {
                    DType::TQ2_0 | DType::TQ1_0 => tq_row(dtype, &trits, m).map_err(encode)?,
                    _ => {
                        // The value each weight is stored as: llama.cpp's `t / iscale` cast to
                        // the checkpoint's dtype (keeping a −0), or `t · magnitude`.
                        for (f, &tr) in floats.iter_mut().zip(&trits) {
                            *f = match t {
                                Ternary::Absmean(tz, ck) if !zero => ck.round(tz.value(*f)),
                                _ => f32::from(tr) * m,
                            };
                        }
                        float_row(dtype, &floats).ok_or_else(|| no_encoder(planned, dtype))?.map_err(encode)?
                    }
                };
                put(&bytes)?;
            }
        }
        None => {
            for r in 0..rows.count() {
                rows.floats(r, &mut floats)?;
                put(&float_row(dtype, &floats).ok_or_else(|| no_encoder(planned, dtype))?.map_err(encode)?)?;
            }
        }
    }
    Ok(())
}

/// A row of trits as TQ1_0 or TQ2_0 blocks, each with gguf-py's scale: the block's largest
/// |value|, so `m` where the block has a non-zero trit and 0 where it has none.
fn tq_row(dtype: DType, trits: &[i8], m: f32) -> Result<Vec<u8>, EncodeError> {
    if !trits.len().is_multiple_of(TQ_BLOCK) {
        return Err(EncodeError::NotWholeBlocks { dtype, len: trits.len(), block_len: TQ_BLOCK });
    }
    let mut out = Vec::with_capacity(trits.len() / TQ_BLOCK * dtype.block_bytes());
    for block in trits.chunks_exact(TQ_BLOCK) {
        let d = if block.iter().any(|&t| t != 0) { f16::from_f32(m) } else { f16::ZERO };
        out.extend(if dtype == DType::TQ1_0 { encode_tq1_0_row(block, d)? } else { encode_tq2_0_row(block, d)? });
    }
    Ok(out)
}

/// A row of f32 values as a float type (rounded to nearest, ties to even) or Q8_0; `None`
/// for a type this converter does not write from floats.
fn float_row(dtype: DType, values: &[f32]) -> Option<Result<Vec<u8>, EncodeError>> {
    Some(Ok(match dtype {
        DType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        DType::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
        DType::BF16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
        DType::Q8_0 => return Some(encode_q8_0_row(values)),
        _ => return None,
    }))
}

fn no_encoder(planned: &Planned, dtype: DType) -> ConvertError {
    ConvertError::Output { path: planned.gguf.clone().into(), reason: format!("no encoder of floats to {dtype}") }
}
