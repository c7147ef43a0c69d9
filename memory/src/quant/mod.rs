//! Block layouts and their dequantize routines: the executable spec of every [`DType`]'s bytes.
//!
//! One file per layout, each opening with its byte picture and its sources (`docs/formats.md`, ggml's `ggml-common.h` / `ggml-quants.c`, bitnet.cpp for I2_S):
//!
//! | dtype | elements / bytes per block | scale | module |
//! |---|---|---|---|
//! | F32, F16, BF16, I8, I16, I32, U32 | 1 / 4, 2, 2, 1, 2, 4, 4 | none | [`float`] |
//! | Q4_0 | 32 / 18 | f16 `d` per block | [`q4_0`] |
//! | Q4_1 | 32 / 20 | f16 `d` and `m` per block | [`q4_1`] |
//! | Q8_0 | 32 / 34 | f16 `d` per block | [`q8_0`] |
//! | TQ1_0 | 256 / 54, base-3 | f16 `d` per block | [`tq1_0`] |
//! | TQ2_0 | 256 / 66, 2-bit | f16 `d` per block | [`tq2_0`] |
//! | I2_S | 128 / 32, 2-bit | one f32 per tensor, in a 32-byte trailer | [`i2_s`] |
//!
//! [`QuantMatrix`] views a tensor's bytes as `rows × cols` in any dtype, checks the size once
//! in [`QuantMatrix::new`], and then decodes a row at a time: [`QuantMatrix::dequantize_row`]
//! to f32 for every dtype, [`QuantMatrix::ternary_row`] to integer trits plus scales for the
//! ternary ones (what a BITLINEAR kernel consumes). [`dequantize`] decodes a whole
//! [`HostTensor`].
//!
//! The code is plain scalar Rust, written for clarity: it is the reference the fast kernels are
//! tested against, not a kernel. Decoding cannot fail once the sizes agree: every bit pattern
//! of every layout means some value (TQ2_0 and I2_S code 3 decodes as the trit +2, exactly as
//! ggml's and bitnet.cpp's arithmetic treats it), and floats are passed through as stored
//! (a NaN scale decodes to NaN, as in ggml).
//!
//! Every quantized value is `code · d` (Q4_1: `code · d + m`) with the code converted to f32
//! and the f16 scale widened to f32 first. The codes have at most 8 significant bits and an
//! f16 at most 11, so every product is exact in f32: any engine that widens the scale before
//! multiplying gets the same bits, and only Q4_1's add rounds (once).

pub mod encode;
mod error;
pub mod float;
pub mod i2_s;
pub mod q4_0;
pub mod q4_1;
pub mod q8_0;
pub mod ternarize;
pub mod tq1_0;
pub mod tq2_0;

#[cfg(test)]
mod layout_tests;
#[cfg(test)]
mod test_vectors;

pub use error::{QuantError, RowBuffer};

use std::fmt;

use crate::{DType, HostTensor};

/// A `rows × cols` view of a tensor's bytes in any [`DType`].
///
/// Row `r` of a blocked dtype is the `row_bytes(cols)` bytes starting at `r · row_bytes(cols)`.
/// For I2_S the same holds (its blocks run through the flattened tensor and `cols` is a
/// multiple of 128, so rows start on block boundaries), and the 32-byte scale trailer follows
/// the last row.
#[derive(Clone, Copy)]
pub struct QuantMatrix<'a> {
    dtype: DType,
    bytes: &'a [u8],
    rows: usize,
    cols: usize,
    /// `dtype.row_bytes(cols)`, checked in [`QuantMatrix::new`].
    row_bytes: usize,
    /// I2_S: the per-tensor scale read from the trailer in `new`; 0 and unused otherwise.
    i2s_scale: f32,
}

impl<'a> QuantMatrix<'a> {
    /// A view of `bytes` as `rows` rows of `cols` elements of `dtype`.
    ///
    /// Fails unless `cols` is a whole number of `dtype` blocks and `bytes.len()` is exactly
    /// `dtype.tensor_bytes(rows, cols)` (for I2_S: the packed rows plus the 32-byte trailer).
    /// Every later row access relies on this check.
    pub fn new(dtype: DType, bytes: &'a [u8], rows: usize, cols: usize) -> Result<Self, QuantError> {
        let block_len = dtype.block_len();
        if !cols.is_multiple_of(block_len) {
            return Err(QuantError::NotWholeBlocks { dtype, cols, block_len });
        }
        let (Some(row_bytes), Some(expected)) = (dtype.row_bytes(cols), dtype.tensor_bytes(rows, cols)) else {
            return Err(QuantError::TooLarge { dtype, rows, cols });
        };
        if bytes.len() != expected {
            return Err(QuantError::SizeMismatch { dtype, rows, cols, expected, actual: bytes.len() });
        }
        let mut i2s_scale = 0.0;
        if dtype == DType::I2_S {
            // The trailer is the last 32 bytes (`expected` = rows·row_bytes + 32 was just
            // checked, so the `else` cannot happen; it is an error rather than a panic anyway).
            let Some(trailer) = bytes.last_chunk::<{ i2_s::TRAILER_BYTES }>() else {
                return Err(QuantError::SizeMismatch { dtype, rows, cols, expected, actual: bytes.len() });
            };
            i2s_scale = i2_s::scale(trailer);
        }
        Ok(QuantMatrix { dtype, bytes, rows, cols, row_bytes, i2s_scale })
    }

    /// A view of a host tensor: `rows = shape.rows()` (the product of every dim but the last),
    /// `cols = shape.cols()`.
    pub fn from_tensor(t: &'a HostTensor) -> Result<Self, QuantError> {
        QuantMatrix::new(t.dtype(), t.bytes(), t.shape().rows(), t.shape().cols())
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Elements per row.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// Decodes row `row` to f32 into `out` (`out.len()` must equal [`QuantMatrix::cols`]).
    ///
    /// Works for every dtype. Quantized values are computed as ggml computes them: the integer
    /// code converted to f32, times the scale widened from f16 (I2_S: the f32 tensor scale),
    /// plus Q4_1's minimum; see each format's module for the exact formula.
    pub fn dequantize_row(&self, row: usize, out: &mut [f32]) -> Result<(), QuantError> {
        let bytes = self.row(row)?;
        self.check_len(row, RowBuffer::Values, self.cols, out.len())?;
        match self.dtype {
            DType::F32 => decode_elements(bytes, out, float::f32_from_le),
            DType::F16 => decode_elements(bytes, out, float::f16_from_le),
            DType::BF16 => decode_elements(bytes, out, float::bf16_from_le),
            DType::I8 => decode_elements(bytes, out, float::i8_from_le),
            DType::I16 => decode_elements(bytes, out, float::i16_from_le),
            DType::I32 => decode_elements(bytes, out, float::i32_from_le),
            DType::U32 => decode_elements(bytes, out, float::u32_from_le),
            DType::Q4_0 => decode_blocks(bytes, out, q4_0::dequantize_block),
            DType::Q4_1 => decode_blocks(bytes, out, q4_1::dequantize_block),
            DType::Q8_0 => decode_blocks(bytes, out, q8_0::dequantize_block),
            DType::TQ1_0 => decode_blocks(bytes, out, tq1_0::dequantize_block),
            DType::TQ2_0 => decode_blocks(bytes, out, tq2_0::dequantize_block),
            DType::I2_S => {
                for (block, o) in blocks::<{ i2_s::BLOCK_BYTES }>(bytes).zip(blocks_mut::<{ i2_s::BLOCK_LEN }, _>(out))
                {
                    i2_s::dequantize_block(block, self.i2s_scale, o);
                }
            }
        }
        Ok(())
    }

    /// Ternary types only: row `row` as integer codes t = q − 1 (so −1, 0, +1; a 2-bit code 3,
    /// which no converter writes, decodes as +2, exactly as ggml's and bitnet.cpp's arithmetic
    /// would treat it) and the scale of each scale block.
    ///
    /// `trits.len()` must equal [`QuantMatrix::cols`] and `block_scales.len()` must equal
    /// [`QuantMatrix::ternary_scales_per_row`]: `cols / 256` for TQ1_0 and TQ2_0 (the f16 `d` of
    /// each block, widened to f32), 1 for I2_S (the tensor's f32 scale). Element `i` of the row
    /// dequantizes to `trits[i] as f32 * block_scales[i / block]` with `block` from
    /// [`QuantMatrix::ternary_scale_block`], bit for bit what [`QuantMatrix::dequantize_row`]
    /// returns.
    pub fn ternary_row(&self, row: usize, trits: &mut [i8], block_scales: &mut [f32]) -> Result<(), QuantError> {
        let scales_per_row = self.ternary_scales_per_row().ok_or(QuantError::NotTernary { dtype: self.dtype })?;
        let bytes = self.row(row)?;
        self.check_len(row, RowBuffer::Trits, self.cols, trits.len())?;
        self.check_len(row, RowBuffer::BlockScales, scales_per_row, block_scales.len())?;
        match self.dtype {
            DType::TQ1_0 => {
                let pairs = blocks::<{ tq1_0::BLOCK_BYTES }>(bytes).zip(blocks_mut::<{ tq1_0::BLOCK_LEN }, _>(trits));
                for ((block, t), s) in pairs.zip(block_scales) {
                    *s = tq1_0::trits_block(block, t);
                }
            }
            DType::TQ2_0 => {
                let pairs = blocks::<{ tq2_0::BLOCK_BYTES }>(bytes).zip(blocks_mut::<{ tq2_0::BLOCK_LEN }, _>(trits));
                for ((block, t), s) in pairs.zip(block_scales) {
                    *s = tq2_0::trits_block(block, t);
                }
            }
            DType::I2_S => {
                for (block, t) in
                    blocks::<{ i2_s::BLOCK_BYTES }>(bytes).zip(blocks_mut::<{ i2_s::BLOCK_LEN }, _>(trits))
                {
                    i2_s::trits_block(block, t);
                }
                block_scales.fill(self.i2s_scale);
            }
            // `ternary_scales_per_row` returned None for every other dtype above.
            _ => return Err(QuantError::NotTernary { dtype: self.dtype }),
        }
        Ok(())
    }

    /// Elements per scale block of a ternary type: 256 for TQ1_0/TQ2_0 (one f16 `d` per block),
    /// `cols` for I2_S (one f32 scale per tensor, so one block per row); `None` for other types.
    pub fn ternary_scale_block(&self) -> Option<usize> {
        match self.dtype {
            DType::TQ1_0 | DType::TQ2_0 => Some(self.dtype.block_len()),
            DType::I2_S => Some(self.cols),
            _ => None,
        }
    }

    /// Scale blocks per row of a ternary type (the length [`QuantMatrix::ternary_row`] wants for
    /// `block_scales`): `cols / 256` for TQ1_0/TQ2_0, 1 for I2_S (also when `cols` is 0);
    /// `None` for other types.
    pub fn ternary_scales_per_row(&self) -> Option<usize> {
        match self.dtype {
            DType::TQ1_0 | DType::TQ2_0 => Some(self.cols / self.dtype.block_len()),
            DType::I2_S => Some(1),
            _ => None,
        }
    }

    /// The bytes of row `row`, or [`QuantError::RowOutOfRange`].
    fn row(&self, row: usize) -> Result<&'a [u8], QuantError> {
        if row >= self.rows {
            return Err(QuantError::RowOutOfRange { dtype: self.dtype, row, rows: self.rows });
        }
        // Cannot go out of bounds or overflow: `new` checked that `bytes.len()` is
        // `rows · row_bytes` (+ the I2_S trailer) without overflow, and `row < rows`.
        let start = row * self.row_bytes;
        Ok(&self.bytes[start..start + self.row_bytes])
    }

    fn check_len(&self, row: usize, buffer: RowBuffer, expected: usize, actual: usize) -> Result<(), QuantError> {
        if expected != actual {
            return Err(QuantError::BufferLength { dtype: self.dtype, row, buffer, expected, actual });
        }
        Ok(())
    }
}

impl fmt::Debug for QuantMatrix<'_> {
    /// The dtype, the shape and the byte count; not the bytes, which may be a whole weight.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QuantMatrix")
            .field("dtype", &self.dtype)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Decodes a whole tensor to f32, row after row (`shape.numel()` values in row-major order).
pub fn dequantize(t: &HostTensor) -> Result<Vec<f32>, QuantError> {
    let m = QuantMatrix::from_tensor(t)?;
    // numel = rows · cols, checked not to overflow when the Shape was built.
    let mut out = vec![0f32; t.shape().numel()];
    if m.cols() > 0 {
        for (row, o) in out.chunks_exact_mut(m.cols()).enumerate() {
            m.dequantize_row(row, o)?;
        }
    }
    Ok(out)
}

/// The whole `N`-byte blocks of `bytes`, in order, as arrays (a trailing partial block is not
/// yielded; the callers pass whole rows, which `QuantMatrix::new` checked are whole blocks).
fn blocks<const N: usize>(mut bytes: &[u8]) -> impl Iterator<Item = &[u8; N]> {
    std::iter::from_fn(move || {
        let (block, rest) = bytes.split_first_chunk::<N>()?;
        bytes = rest;
        Some(block)
    })
}

/// The whole `N`-element chunks of `out`, in order, as mutable arrays.
fn blocks_mut<const N: usize, T>(mut out: &mut [T]) -> impl Iterator<Item = &mut [T; N]> {
    std::iter::from_fn(move || {
        let (chunk, rest) = std::mem::take(&mut out).split_first_chunk_mut::<N>()?;
        out = rest;
        Some(chunk)
    })
}

/// Decodes a row of a block type: block `i` of `bytes` fills `out[i·L .. (i+1)·L]`. The row's
/// byte and element counts were checked to agree (`row_bytes(cols)` and `cols`), so the two
/// iterators end together.
fn decode_blocks<const N: usize, const L: usize>(bytes: &[u8], out: &mut [f32], decode: fn(&[u8; N], &mut [f32; L])) {
    for (block, o) in blocks::<N>(bytes).zip(blocks_mut::<L, _>(out)) {
        decode(block, o);
    }
}

/// Decodes a row of a plain type: element `i` is the `N` bytes at `i·N`.
fn decode_elements<const N: usize>(bytes: &[u8], out: &mut [f32], decode: fn(&[u8; N]) -> f32) {
    for (b, o) in blocks::<N>(bytes).zip(out.iter_mut()) {
        *o = decode(b);
    }
}
