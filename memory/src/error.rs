//! Errors of the tensor registry and host tensors.

use crate::DType;

/// What went wrong with a tensor; every variant names the tensor.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MemoryError {
    /// A name that was never registered.
    #[error("unknown tensor '{name}'")]
    UnknownTensor {
        /// The name looked up.
        name: String,
    },
    /// A handle that this registry never issued.
    #[error("tensor id {id} does not belong to this registry (it holds {count} tensors)")]
    ForeignId {
        /// The raw id.
        id: u32,
        /// How many tensors the registry holds.
        count: usize,
    },
    /// A second tensor under a name already taken.
    #[error("tensor '{name}' is already registered")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// Use of a tensor after FREE.
    #[error("tensor '{name}' was freed")]
    Freed {
        /// The name.
        name: String,
    },
    /// Use of a tensor that is declared but holds no data yet (no GRID_ALLOC or write).
    #[error("tensor '{name}' is declared but not allocated")]
    NotAllocated {
        /// The name.
        name: String,
    },
    /// A tensor of another dtype than the operation needs.
    #[error("tensor '{name}' is {got}, expected {expected}")]
    WrongDType {
        /// The name.
        name: String,
        /// The dtype needed.
        expected: DType,
        /// The dtype found.
        got: DType,
    },
    /// Data of the wrong size for a tensor.
    #[error("tensor '{name}' needs {expected} bytes, got {got}")]
    SizeMismatch {
        /// The name.
        name: String,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// A shape other than the declared one.
    #[error("tensor '{name}' is declared {expected}, got {got}")]
    ShapeMismatch {
        /// The name.
        name: String,
        /// The declared shape, formatted.
        expected: String,
        /// The shape given, formatted.
        got: String,
    },
    /// A row length that is not a whole number of blocks of the dtype.
    #[error(
        "tensor '{name}' of type {dtype} has rows of {cols} elements, not a multiple of its block length {block_len}"
    )]
    NotWholeBlocks {
        /// The name.
        name: String,
        /// The dtype.
        dtype: DType,
        /// The row length.
        cols: usize,
        /// The dtype's block length.
        block_len: usize,
    },
    /// A byte range outside the mapped file.
    #[error("tensor '{name}' bytes {start}..{end} lie outside the mapped file of {len} bytes")]
    OutOfBounds {
        /// The name.
        name: String,
        /// Range start.
        start: usize,
        /// Range end.
        end: usize,
        /// The map's length.
        len: usize,
    },
}
