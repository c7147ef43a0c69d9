//! How each dtype is laid out on the GPU.
//!
//! Buffers are read as `array<u32>`, so every part is padded to a multiple of 4 bytes (and
//! to at least 4, the smallest binding). Nothing is expanded to f32.
//!
//! Every part is laid out in rows ([`part_row_bytes`]: row `r` of the tensor at bytes
//! `r·b .. (r+1)·b` of the part), except I2_S's one scale. A part larger than the largest
//! buffer is stored as several buffers of whole rows (shards, `tensors.rs`) and read by
//! kernels in row windows (`RecordCtx::row_windows`) that each lie inside one shard.
//!
//! **Float and Q4_0 / Q4_1 / Q8_0 tensors: the file's bytes, unchanged.** F32 as words, F16
//! and BF16 as packed halves (element `i` in the low half of word `i / 2` when `i` is even,
//! the high half when odd), Q4_0 / Q4_1 / Q8_0 as their 18 / 20 / 34-byte blocks, back to
//! back. Those block sizes are even, so every f16 field and every run of code bytes starts
//! on a 2-byte boundary: kernels read a half at byte offset `o` as
//! `(w[o / 4] >> 8·(o % 4)) & 0xffff` and eight code bytes at an even offset from two words
//! or three (`linear.wgsl`'s `words_at`, without a branch). Keeping the file's layout costs
//! one extra word read per misaligned run (from cache) and no extra memory.
//!
//! **Ternary tensors (TQ1_0, TQ2_0, I2_S): repacked once, at upload, into one layout** in
//! two parts, so that BITLINEAR and LINEAR have one ternary kernel, not three:
//!
//! ```text
//! part 0, codes: u32 words, 16 codes (2 bits each) per word, rows·cols/16 words.
//!   Row r, element e lives in word  r·cols/16 + e/16,
//!   and inside that word, with e % 16 = 4j + b (j, b in 0..4), at bits 8b + 2j:
//!
//!      bit 31                                                              bit 0
//!      | byte 3            | byte 2            | byte 1            | byte 0            |
//!      | 15  11   7   3    | 14  10   6   2    | 13   9   5   1    | 12   8   4   0    |
//!        j=3 j=2 j=1 j=0     (element e % 16 of each 2-bit field, j = field in the byte)
//!
//!   so `(word >> 2j) & 0x03030303` is the four codes of elements 4j .. 4j+3 as four bytes,
//!   in the byte order of four int8 activations packed in one u32: one `dot4I8Packed`.
//!   A code c means the trit t = c − 1: 0 → −1, 1 → 0, 2 → +1, 3 → +2 (TQ2_0 and I2_S code
//!   3, which no converter writes, decodes as +2 in `memory::quant`; kept, so every bit
//!   pattern means the same here).
//!
//! part 1, scales: f32.
//!   TQ1_0 / TQ2_0: one per 256-element block, row-major: row r, block b at r·cols/256 + b
//!                  (the block's f16 d, widened exactly).
//!   I2_S:          one f32, the tensor's scale (the first f32 of its trailer).
//! ```
//!
//! Element `e` of row `r` decodes to `t · scale`, bit for bit what
//! `QuantMatrix::dequantize_row` gives (a trit times the f32 scale, one exact multiply).
//! TQ2_0 and I2_S are regrouped word by word (2-bit fields move, values do not: ~1 ns per
//! 16 weights); TQ1_0 goes through `QuantMatrix::ternary_row`, the reference decoder. The
//! unit tests below check every element of random tensors against `dequantize_row`. Sizes: 2 bits per weight plus 4 bytes per 256 weights (TQ types)
//! or 4 bytes in all (I2_S): TQ2_0's 66 bytes per block become 68, TQ1_0's 54 become 68
//! (base-3 packing does not survive), I2_S loses its 28 bytes of trailer padding.
//!
//! GRID_WRITE of a ternary tensor repacks the written bytes the same way; GRID_READ returns
//! a canonical image in the file layout (same codes and scales: TQ2_0 and I2_S codes bit
//! for bit, TQ1_0 bytes re-encoded as ggml encodes them, the I2_S scale repeated 8 times
//! in its trailer as the converters write it).

use std::borrow::Cow;

use half::f16;
use purebee_memory::quant::QuantMatrix;
use purebee_memory::{DType, HostTensor, TensorDesc};

use crate::GpuError;

/// Codes per u32 word in the ternary layout.
pub(crate) const CODES_PER_WORD: usize = 16;

/// Elements per scale block of TQ1_0 / TQ2_0.
const TQ_BLOCK: usize = 256;
/// Bytes per TQ2_0 block.
const TQ2_0_BLOCK_BYTES: usize = 66;
/// Elements and bytes per I2_S block.
const I2_S_BLOCK: usize = 128;
const I2_S_BLOCK_BYTES: usize = 32;

/// The initial contents of one part of a tensor.
pub(crate) enum Part<'a> {
    /// Upload these bytes, followed by zeros up to [`Part::size`] (float and Q4/Q8 tensors
    /// borrow the host's bytes as they are: a weight is never copied on the host).
    Data(Cow<'a, [u8]>),
    /// A zero-filled buffer of this many bytes (a multiple of 4).
    Zeroed(u64),
}

impl Part<'_> {
    /// The part's size on the GPU: its bytes padded to whole words, at least one.
    pub fn size(&self) -> u64 {
        match self {
            Part::Data(b) => padded(b.len()) as u64,
            Part::Zeroed(n) => *n,
        }
    }
}

/// Bytes per tensor row of each part of a tensor's GPU layout: the file's row of blocks
/// (float and Q4/Q8), or the ternary codes (`cols / 4`) and TQ scales (`cols / 256 · 4`);
/// 0 for a part not laid out in rows (I2_S's one scale), which is never cut. Row windows
/// and shards are cut at the same rows in every part.
pub(crate) fn part_row_bytes(desc: &TensorDesc) -> Vec<u64> {
    let cols = desc.shape.cols();
    match ternary_scales(desc.dtype, cols) {
        Some(sc) => vec![(cols / CODES_PER_WORD * 4) as u64, (sc.row_stride * 4) as u64],
        None => vec![desc.dtype.row_bytes(cols).unwrap_or(0) as u64],
    }
}

/// Where a ternary matrix's scales are: element `e` of row `r` uses
/// `scales[r·row_stride + e / block]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TernaryScales {
    /// Scales per row in part 1 (0 for I2_S: one scale for all rows).
    pub row_stride: usize,
    /// Elements per scale block (256, or the row length for I2_S).
    pub block: usize,
}

/// The scale geometry of a ternary dtype with rows of `cols` elements; `None` for other
/// dtypes.
pub(crate) fn ternary_scales(dtype: DType, cols: usize) -> Option<TernaryScales> {
    match dtype {
        DType::TQ1_0 | DType::TQ2_0 => Some(TernaryScales { row_stride: cols / TQ_BLOCK, block: TQ_BLOCK }),
        DType::I2_S => Some(TernaryScales { row_stride: 0, block: cols.max(1) }),
        _ => None,
    }
}

/// Bytes rounded up to whole words, at least one word.
fn padded(bytes: usize) -> usize {
    bytes.div_ceil(4).max(1) * 4
}

fn pad(mut data: Vec<u8>) -> Vec<u8> {
    data.resize(padded(data.len()), 0);
    data
}

/// The byte sizes of a ternary tensor's two parts (before padding).
fn ternary_sizes(dtype: DType, rows: usize, cols: usize) -> (usize, usize) {
    let codes = rows * cols / CODES_PER_WORD * 4;
    let scales = match dtype {
        DType::I2_S => 4,
        _ => rows * (cols / TQ_BLOCK) * 4,
    };
    (codes, scales)
}

/// The parts of a tensor: its host bytes when it has them (a weight), zeros otherwise.
pub(crate) fn gpu_parts<'a>(desc: &TensorDesc, host: Option<&'a HostTensor>) -> Result<Vec<Part<'a>>, GpuError> {
    match host {
        Some(h) => parts_from_bytes(desc, h.bytes()),
        None if desc.dtype.is_ternary() => {
            let (codes, scales) = ternary_sizes(desc.dtype, desc.shape.rows(), desc.shape.cols());
            Ok(vec![Part::Zeroed(padded(codes) as u64), Part::Zeroed(padded(scales) as u64)])
        }
        None => {
            let bytes = desc.dtype.tensor_bytes(desc.shape.rows(), desc.shape.cols()).unwrap_or(0);
            Ok(vec![Part::Zeroed(padded(bytes) as u64)])
        }
    }
}

/// The parts holding `bytes`, a tensor's exact byte image in its file layout (GRID_WRITE
/// data, or a weight's host bytes): borrowed as they are, or repacked (ternary).
pub(crate) fn parts_from_bytes<'a>(desc: &TensorDesc, bytes: &'a [u8]) -> Result<Vec<Part<'a>>, GpuError> {
    if !desc.dtype.is_ternary() {
        return Ok(vec![Part::Data(Cow::Borrowed(bytes))]);
    }
    let (rows, cols) = (desc.shape.rows(), desc.shape.cols());
    let bad = |e: purebee_memory::quant::QuantError| GpuError::Wgpu(format!("'{}': {e}", desc.name));
    // Checks the size once (rows of whole blocks, I2_S trailer included); the loops below
    // rely on it.
    QuantMatrix::new(desc.dtype, bytes, rows, cols).map_err(bad)?;
    let (codes_len, scales_len) = ternary_sizes(desc.dtype, rows, cols);
    let mut codes = vec![0u32; codes_len / 4];
    let mut scales: Vec<f32> = Vec::with_capacity(scales_len / 4);
    match desc.dtype {
        DType::TQ2_0 => {
            // Byte 32c + m of a block holds elements 128c + 32n + m at shift 2n: the 16
            // elements 128c + 32n + 16h + (0..16) are field n of bytes 32c + 16h + (0..16).
            let blocks = bytes.chunks_exact(TQ2_0_BLOCK_BYTES);
            for (block, out) in blocks.zip(codes.chunks_exact_mut(TQ_BLOCK / CODES_PER_WORD)) {
                for (i, word) in out.iter_mut().enumerate() {
                    let (c, n, h) = (i / 8, (i / 2) % 4, i % 2);
                    *word = gather16(&block[32 * c + 16 * h..32 * c + 16 * h + 16], 2 * n as u32);
                }
                scales.push(f16::from_le_bytes([block[64], block[65]]).to_f32());
            }
        }
        DType::I2_S => {
            // Blocks of 128 through the flattened tensor (rows are whole blocks): byte m holds
            // elements 32g + m at shift 6 − 2g, so the 16 elements 32g + 16h + (0..16) are
            // the field at 6 − 2g of bytes 16h + (0..16).
            let blocks = bytes[..codes_len].chunks_exact(I2_S_BLOCK_BYTES);
            for (block, out) in blocks.zip(codes.chunks_exact_mut(I2_S_BLOCK / CODES_PER_WORD)) {
                for (i, word) in out.iter_mut().enumerate() {
                    let (g, h) = (i / 2, i % 2);
                    *word = gather16(&block[16 * h..16 * h + 16], 6 - 2 * g as u32);
                }
            }
            // The tensor's one scale, the first f32 of the trailer.
            let t = &bytes[codes_len..];
            scales.push(f32::from_le_bytes([t[0], t[1], t[2], t[3]]));
        }
        _ => {
            // TQ1_0 (base 3): through the reference decoder.
            let m = QuantMatrix::new(desc.dtype, bytes, rows, cols).map_err(bad)?;
            let mut trits = vec![0i8; cols];
            let mut row_scales = vec![0f32; m.ternary_scales_per_row().unwrap_or(1)];
            let words_per_row = cols / CODES_PER_WORD;
            for r in 0..rows {
                m.ternary_row(r, &mut trits, &mut row_scales).map_err(bad)?;
                let row_words = &mut codes[r * words_per_row..(r + 1) * words_per_row];
                for (e, &t) in trits.iter().enumerate() {
                    row_words[e / CODES_PER_WORD] |= (((t + 1) as u32) & 3) << code_shift(e % CODES_PER_WORD);
                }
                scales.extend_from_slice(&row_scales);
            }
        }
    }
    let codes = pad(bytemuck::cast_slice(&codes).to_vec());
    Ok(vec![Part::Data(Cow::Owned(codes)), Part::Data(Cow::Owned(pad(f32_bytes(&scales))))])
}

/// The word of 16 codes whose element `4j + b` is the 2-bit field at `shift` of `bytes[4j + b]`
/// (`bytes` holds 16 bytes): four masked shifts, since byte `b` of the little-endian word
/// `bytes[4j..4j + 4]` already sits in the byte lane where element `4j + b` goes.
fn gather16(bytes: &[u8], shift: u32) -> u32 {
    let mut word = 0;
    for (j, four) in bytes.chunks_exact(4).enumerate() {
        let u = u32::from_le_bytes([four[0], four[1], four[2], four[3]]);
        word |= ((u >> shift) & 0x0303_0303) << (2 * j);
    }
    word
}

/// The bit position of code `i` (0..16) of a word: `8·(i % 4) + 2·(i / 4)`.
pub(crate) fn code_shift(i: usize) -> u32 {
    (8 * (i % 4) + 2 * (i / 4)) as u32
}

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A tensor's byte image in its file layout, from the bytes of its GPU parts (GRID_READ).
/// `parts` holds each part's bytes, padding included.
pub(crate) fn file_bytes(desc: &TensorDesc, parts: &[Vec<u8>]) -> Result<Vec<u8>, GpuError> {
    let len = desc.dtype.tensor_bytes(desc.shape.rows(), desc.shape.cols()).unwrap_or(0);
    let missing = || GpuError::Wgpu(format!("'{}': GPU buffer smaller than the tensor", desc.name));
    if !desc.dtype.is_ternary() {
        return parts.first().and_then(|p| p.get(..len)).map(<[u8]>::to_vec).ok_or_else(missing);
    }
    let (rows, cols) = (desc.shape.rows(), desc.shape.cols());
    let (codes_len, scales_len) = ternary_sizes(desc.dtype, rows, cols);
    let codes = parts.first().and_then(|p| p.get(..codes_len)).ok_or_else(missing)?;
    let scales = parts.get(1).and_then(|p| p.get(..scales_len)).ok_or_else(missing)?;
    let scale = |i: usize| f32::from_le_bytes([scales[4 * i], scales[4 * i + 1], scales[4 * i + 2], scales[4 * i + 3]]);
    let word = |i: usize| u32::from_le_bytes([codes[4 * i], codes[4 * i + 1], codes[4 * i + 2], codes[4 * i + 3]]);
    // The code (0..=3) of element e of row r.
    let code = |r: usize, e: usize| -> u8 {
        let w = word((r * cols + e) / CODES_PER_WORD);
        ((w >> code_shift(e % CODES_PER_WORD)) & 3) as u8
    };
    let mut out = Vec::with_capacity(len);
    match desc.dtype {
        DType::TQ2_0 => {
            for r in 0..rows {
                for b in 0..cols / TQ_BLOCK {
                    let mut qs = [0u8; 64];
                    for e in 0..TQ_BLOCK {
                        qs[32 * (e / 128) + e % 32] |= code(r, b * TQ_BLOCK + e) << (2 * ((e % 128) / 32));
                    }
                    out.extend_from_slice(&qs);
                    out.extend_from_slice(&f16::from_f32(scale(r * (cols / TQ_BLOCK) + b)).to_bits().to_le_bytes());
                }
            }
        }
        DType::TQ1_0 => {
            for r in 0..rows {
                for b in 0..cols / TQ_BLOCK {
                    // The codes of each of the 52 packed bytes, most significant first.
                    let mut digits = [[0u8; 5]; 52];
                    for e in 0..TQ_BLOCK {
                        let (byte, n) = purebee_memory::quant::tq1_0::position(e);
                        digits[byte][n] = code(r, b * TQ_BLOCK + e);
                    }
                    for d in &digits {
                        // ggml's packing: v = Σ c_n·3^(4−n), stored as ceil(v·256 / 243).
                        let v = d.iter().fold(0u16, |v, &c| v * 3 + u16::from(c));
                        out.push((v * 256).div_ceil(243) as u8);
                    }
                    out.extend_from_slice(&f16::from_f32(scale(r * (cols / TQ_BLOCK) + b)).to_bits().to_le_bytes());
                }
            }
        }
        DType::I2_S => {
            // Blocks of 128 through the flattened tensor; byte j of a block holds elements
            // j, 32 + j, 64 + j, 96 + j at shifts 6, 4, 2, 0.
            let n = rows * cols;
            for block in 0..n / 128 {
                for j in 0..32 {
                    let mut byte = 0u8;
                    for g in 0..4 {
                        let flat = block * 128 + 32 * g + j;
                        byte |= code(flat / cols, flat % cols) << (6 - 2 * g);
                    }
                    out.push(byte);
                }
            }
            for _ in 0..8 {
                out.extend_from_slice(&scale(0).to_le_bytes());
            }
        }
        _ => return Err(missing()),
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use purebee_memory::{Registry, Shape};

    fn desc(dtype: DType, rows: usize, cols: usize) -> TensorDesc {
        let mut reg = Registry::new();
        let shape = Shape::matrix(rows, cols).expect("valid");
        let id = reg.declare("w", dtype, shape).expect("declared");
        reg.desc(id).expect("declared").clone()
    }

    /// Pseudo-random bytes (xorshift), the same on every run.
    fn bytes(n: usize, mut seed: u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                (seed >> 24) as u8
            })
            .collect()
    }

    fn parts_bytes(parts: Vec<Part>) -> Vec<Vec<u8>> {
        parts
            .into_iter()
            .map(|p| {
                let size = p.size() as usize;
                let mut b = match p {
                    Part::Data(b) => b.into_owned(),
                    Part::Zeroed(_) => Vec::new(),
                };
                b.resize(size, 0);
                b
            })
            .collect()
    }

    /// Random ternary bytes with finite scales (f16 d = 0.5 or the I2_S scale 0.75).
    fn ternary_bytes(dtype: DType, rows: usize, cols: usize, seed: u64) -> Vec<u8> {
        let len = dtype.tensor_bytes(rows, cols).expect("whole blocks");
        let mut b = bytes(len, seed);
        match dtype {
            DType::I2_S => b[len - 32..len - 28].copy_from_slice(&0.75f32.to_le_bytes()),
            _ => {
                let bb = dtype.block_bytes();
                for blk in 0..len / bb {
                    b[blk * bb + bb - 2..blk * bb + bb].copy_from_slice(&0x3800u16.to_le_bytes());
                }
            }
        }
        b
    }

    #[test]
    fn repacked_codes_and_scales_decode_as_the_reference_does() {
        for (dtype, rows, cols) in [(DType::TQ2_0, 3, 512), (DType::TQ1_0, 2, 768), (DType::I2_S, 5, 384)] {
            let raw = ternary_bytes(dtype, rows, cols, 7 + rows as u64);
            let parts = parts_bytes(parts_from_bytes(&desc(dtype, rows, cols), &raw).expect("repacks"));
            let m = QuantMatrix::new(dtype, &raw, rows, cols).expect("valid");
            let geo = ternary_scales(dtype, cols).expect("ternary");
            let words: &[u32] = bytemuck::cast_slice(&parts[0]);
            let scales: &[f32] = bytemuck::cast_slice(&parts[1]);
            let mut want = vec![0f32; cols];
            for r in 0..rows {
                m.dequantize_row(r, &mut want).expect("decodes");
                for (e, &w) in want.iter().enumerate() {
                    let c = (words[(r * cols + e) / 16] >> code_shift(e % 16)) & 3;
                    let got = (c as i32 - 1) as f32 * scales[r * geo.row_stride + e / geo.block];
                    assert_eq!(got.to_bits(), w.to_bits(), "{dtype} row {r} element {e}");
                }
            }
        }
    }

    #[test]
    fn code_fields_give_four_consecutive_elements_per_byte_lane() {
        // (word >> 2j) & 0x03030303 must hold elements 4j..4j+4 in bytes 0..4.
        for j in 0..4 {
            for b in 0..4 {
                assert_eq!(code_shift(4 * j + b), (8 * b + 2 * j) as u32);
            }
        }
    }

    #[test]
    fn file_bytes_round_trip_tq2_0_and_i2_s_and_decode_equal_for_tq1_0() {
        for (dtype, rows, cols) in [(DType::TQ2_0, 3, 512), (DType::I2_S, 5, 384), (DType::TQ1_0, 2, 768)] {
            let d = desc(dtype, rows, cols);
            let mut raw = ternary_bytes(dtype, rows, cols, 99);
            if dtype == DType::I2_S {
                // Trailer padding is not kept: write the scale 8 times, as converters do.
                let s: [u8; 4] = raw[raw.len() - 32..raw.len() - 28].try_into().expect("4 bytes");
                let n = raw.len();
                for i in 0..8 {
                    raw[n - 32 + 4 * i..n - 28 + 4 * i].copy_from_slice(&s);
                }
            }
            let back = file_bytes(&d, &parts_bytes(parts_from_bytes(&d, &raw).expect("repacks"))).expect("unpacks");
            assert_eq!(back.len(), raw.len());
            if dtype == DType::TQ1_0 {
                // Random bytes are not all canonical base-3 encodings; the values must agree.
                let a = purebee_memory::quant::QuantMatrix::new(dtype, &raw, rows, cols).expect("valid");
                let b = purebee_memory::quant::QuantMatrix::new(dtype, &back, rows, cols).expect("valid");
                let (mut x, mut y) = (vec![0f32; cols], vec![0f32; cols]);
                for r in 0..rows {
                    a.dequantize_row(r, &mut x).expect("decodes");
                    b.dequantize_row(r, &mut y).expect("decodes");
                    assert_eq!(x, y, "row {r}");
                }
            } else {
                assert_eq!(back, raw, "{dtype}");
            }
        }
    }

    #[test]
    fn zeroed_ternary_parts_have_the_repacked_sizes() {
        let parts = gpu_parts(&desc(DType::TQ2_0, 3, 512), None).expect("sizes");
        assert_eq!(parts.iter().map(Part::size).collect::<Vec<_>>(), vec![3 * 512 / 4, 3 * 2 * 4]);
        let parts = gpu_parts(&desc(DType::I2_S, 3, 128), None).expect("sizes");
        assert_eq!(parts.iter().map(Part::size).collect::<Vec<_>>(), vec![3 * 128 / 4, 4]);
        let parts = gpu_parts(&desc(DType::Q8_0, 3, 32), None).expect("sizes");
        assert_eq!(parts.iter().map(Part::size).collect::<Vec<_>>(), vec![3 * 34 + 2]);
    }

    #[test]
    fn every_part_but_the_i2_s_scale_is_rows_of_part_row_bytes() {
        for (dtype, rows, cols) in
            [(DType::TQ2_0, 3, 512), (DType::TQ1_0, 2, 768), (DType::I2_S, 5, 384), (DType::Q8_0, 3, 64)]
        {
            let d = desc(dtype, rows, cols);
            let parts = gpu_parts(&d, None).expect("sizes");
            for (p, (part, row)) in parts.iter().zip(part_row_bytes(&d)).enumerate() {
                if row == 0 {
                    assert_eq!((dtype, p), (DType::I2_S, 1));
                } else {
                    assert_eq!(part.size(), padded(rows * row as usize) as u64, "{dtype} part {p}");
                }
            }
        }
        assert_eq!(part_row_bytes(&desc(DType::F16, 3, 10)), vec![20]);
    }
}
