//! The error of [`crate::quant`]: sizes and indices that do not fit a dtype's layout.
//!
//! Every variant names the dtype and the numbers involved, so that a message such as
//! "I2_S matrix of 256 x 256 needs 16416 bytes, got 16384" says what to look at without a
//! debugger. The layouts themselves cannot fail to decode: once the sizes agree, every bit
//! pattern decodes to some value (see the module docs of each format).

use std::fmt;

use crate::DType;

/// Which caller-provided buffer of a row operation had the wrong length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowBuffer {
    /// The `out` slice of [`super::QuantMatrix::dequantize_row`] (one f32 per column).
    Values,
    /// The `trits` slice of [`super::QuantMatrix::ternary_row`] (one i8 per column).
    Trits,
    /// The `block_scales` slice of [`super::QuantMatrix::ternary_row`] (one f32 per scale block).
    BlockScales,
}

impl fmt::Display for RowBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RowBuffer::Values => "values",
            RowBuffer::Trits => "trits",
            RowBuffer::BlockScales => "block scales",
        })
    }
}

/// What went wrong viewing or decoding a quantized matrix.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum QuantError {
    /// A row length that is not a whole number of the dtype's blocks.
    #[error("{dtype} rows of {cols} elements are not whole blocks of {block_len} elements")]
    NotWholeBlocks {
        /// The dtype.
        dtype: DType,
        /// The row length asked for.
        cols: usize,
        /// The dtype's block length.
        block_len: usize,
    },
    /// A matrix whose byte size does not fit in `usize`.
    #[error("{dtype} matrix of {rows} x {cols} is too large to address")]
    TooLarge {
        /// The dtype.
        dtype: DType,
        /// Rows asked for.
        rows: usize,
        /// Columns asked for.
        cols: usize,
    },
    /// Bytes of another length than `dtype.tensor_bytes(rows, cols)`.
    #[error("{dtype} matrix of {rows} x {cols} needs {expected} bytes, got {actual}")]
    SizeMismatch {
        /// The dtype.
        dtype: DType,
        /// Rows.
        rows: usize,
        /// Columns.
        cols: usize,
        /// Bytes the layout needs (I2_S: including its 32-byte scale trailer).
        expected: usize,
        /// Bytes given.
        actual: usize,
    },
    /// A row index past the last row.
    #[error("row {row} is out of range for a {dtype} matrix of {rows} rows")]
    RowOutOfRange {
        /// The dtype.
        dtype: DType,
        /// The row asked for.
        row: usize,
        /// The matrix's row count.
        rows: usize,
    },
    /// A caller-provided output buffer of the wrong length.
    #[error("{buffer} buffer for row {row} of a {dtype} matrix holds {actual} elements, expected {expected}")]
    BufferLength {
        /// The dtype.
        dtype: DType,
        /// The row asked for.
        row: usize,
        /// Which buffer.
        buffer: RowBuffer,
        /// The length it must have.
        expected: usize,
        /// The length it has.
        actual: usize,
    },
    /// A ternary-only operation on a non-ternary dtype.
    #[error("{dtype} is not a ternary type (I2_S, TQ1_0, TQ2_0)")]
    NotTernary {
        /// The dtype.
        dtype: DType,
    },
}
