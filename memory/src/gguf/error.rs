//! The errors of the GGUF reader ([`GgufError`]) and writer ([`GgufWriteError`]).
//!
//! Every reader error names the file, and where it applies the byte offset at which the
//! problem was found and the metadata key or tensor concerned, so that a message alone is
//! enough to find the bad bytes with a hex dump.

use std::io;
use std::path::PathBuf;

use crate::{DType, MemoryError};

use super::metadata::MetaType;

/// What is wrong with a GGUF file, or with a lookup in one.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{}: cannot read the file: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The file ends before a field, string or section that it declares.
    #[error("{}: truncated at offset {offset} while reading {what}: needs {needed} bytes, {available} left", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Where the missing bytes should start.
        offset: u64,
        /// What was being read (names the key or tensor).
        what: String,
        /// Bytes needed.
        needed: u64,
        /// Bytes left in the file from `offset`.
        available: u64,
    },
    /// The first four bytes are not `GGUF`.
    #[error("{}: not a GGUF file: it starts with \"{}\", expected \"GGUF\"", path.display(), found.escape_ascii())]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The first four bytes.
        found: [u8; 4],
    },
    /// A version other than 2 or 3 (version 1 used 32-bit counts; a big-endian file reads
    /// as a huge version).
    #[error("{}: unsupported GGUF version {version} at offset 4 (this reader supports versions 2 and 3)", path.display())]
    UnsupportedVersion {
        /// The file.
        path: PathBuf,
        /// The version read.
        version: u32,
    },
    /// A count (tensors, metadata entries, array elements) larger than the rest of the file
    /// could hold even if every item had its smallest size.
    #[error("{}: {what} at offset {offset} is {count}, but {count} items of at least {min_bytes_each} bytes each cannot fit in the {available} bytes left (corrupt or truncated file)", path.display())]
    CountTooLarge {
        /// The file.
        path: PathBuf,
        /// Where the count is stored.
        offset: u64,
        /// Which count (names the key for arrays).
        what: String,
        /// The count read.
        count: u64,
        /// The smallest encoded size of one item.
        min_bytes_each: u64,
        /// Bytes left in the file after the count.
        available: u64,
    },
    /// A metadata value type id outside 0..=12.
    #[error("{}: key '{key}' has unknown metadata value type {type_id} at offset {offset}", path.display())]
    UnknownMetaType {
        /// The file.
        path: PathBuf,
        /// Where the type id is stored.
        offset: u64,
        /// The key whose value (or array element type) it is.
        key: String,
        /// The type id read.
        type_id: u32,
    },
    /// Arrays of arrays nested deeper than [`super::MAX_ARRAY_NESTING`].
    #[error("{}: key '{key}' nests arrays deeper than {max} levels at offset {offset}", path.display())]
    NestingTooDeep {
        /// The file.
        path: PathBuf,
        /// Where the too-deep element type is declared.
        offset: u64,
        /// The key.
        key: String,
        /// The nesting limit.
        max: usize,
    },
    /// A boolean stored as a byte other than 0 or 1.
    #[error("{}: key '{key}' holds boolean byte {value} at offset {offset}; only 0 and 1 are valid", path.display())]
    InvalidBool {
        /// The file.
        path: PathBuf,
        /// Where the byte is.
        offset: u64,
        /// The key.
        key: String,
        /// The byte read.
        value: u8,
    },
    /// A string (key, string value or tensor name) that is not UTF-8.
    #[error("{}: {what} is not valid UTF-8 (first bad byte at offset {offset})", path.display())]
    InvalidUtf8 {
        /// The file.
        path: PathBuf,
        /// Where the first invalid byte is.
        offset: u64,
        /// Which string (names the key or tensor).
        what: String,
    },
    /// A metadata key that appears twice.
    #[error("{}: duplicate metadata key '{key}' at offset {offset}", path.display())]
    DuplicateKey {
        /// The file.
        path: PathBuf,
        /// Where the second occurrence starts.
        offset: u64,
        /// The key.
        key: String,
    },
    /// `general.alignment` is 0 or not a power of two.
    #[error("{}: general.alignment is {alignment}; it must be a nonzero power of two", path.display())]
    BadAlignment {
        /// The file.
        path: PathBuf,
        /// The value read.
        alignment: u64,
    },
    /// A tensor with more than [`super::MAX_DIMS`] dims.
    #[error("{}: tensor '{tensor}' has {n_dims} dims at offset {offset}; at most {max} are allowed", path.display())]
    TooManyDims {
        /// The file.
        path: PathBuf,
        /// Where n_dims is stored.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The dim count read.
        n_dims: u32,
        /// The limit.
        max: usize,
    },
    /// A tensor whose dims, element count or byte size exceed what ggml (i64) or this
    /// machine (usize) can address.
    #[error("{}: tensor '{tensor}' (info at offset {offset}) with ne {ne:?} is too large: a dim, its element count or its byte size overflows", path.display())]
    TensorTooLarge {
        /// The file.
        path: PathBuf,
        /// Where the tensor's info starts.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The dims in ggml order.
        ne: Vec<u64>,
    },
    /// A tensor type id that ggml never defined.
    #[error("{}: tensor '{tensor}' has unknown type id {type_id} at offset {offset}", path.display())]
    UnknownTensorType {
        /// The file.
        path: PathBuf,
        /// Where the type id is stored.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The type id read.
        type_id: u32,
    },
    /// A ggml tensor type that purebee does not support (for example Q4_K).
    #[error("{}: tensor '{tensor}' has type {type_name} (id {type_id}) at offset {offset}, which purebee does not support", path.display())]
    UnsupportedTensorType {
        /// The file.
        path: PathBuf,
        /// Where the type id is stored.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// The type id read.
        type_id: u32,
        /// ggml's name for it.
        type_name: &'static str,
    },
    /// A tensor whose innermost dim is not a whole number of blocks of its type.
    #[error("{}: tensor '{tensor}' (info at offset {offset}) of type {dtype} has ne0 = {ne0}, not a multiple of its block length {block_len}", path.display())]
    NotWholeBlocks {
        /// The file.
        path: PathBuf,
        /// Where the tensor's info starts.
        offset: u64,
        /// The tensor.
        tensor: String,
        /// Its type.
        dtype: DType,
        /// Its innermost dim.
        ne0: u64,
        /// The type's block length.
        block_len: usize,
    },
    /// A tensor data offset that is not a multiple of the file's alignment.
    #[error("{}: tensor '{tensor}' has data offset {offset}, not a multiple of the alignment {alignment}", path.display())]
    MisalignedTensor {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its offset, relative to the data section.
        offset: u64,
        /// The file's alignment.
        alignment: u64,
    },
    /// A tensor whose data does not lie inside the file.
    #[error("{}: tensor '{tensor}' lies past the end of the file: its {n_bytes} bytes at data section offset {data_offset} + {offset} do not fit in the file's {file_len} bytes", path.display())]
    TensorOutOfBounds {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Where the data section starts.
        data_offset: u64,
        /// The tensor's offset, relative to the data section.
        offset: u64,
        /// The tensor's size.
        n_bytes: u64,
        /// The file's size.
        file_len: u64,
    },
    /// A tensor name that appears twice.
    #[error("{}: duplicate tensor name '{tensor}' at offset {offset}", path.display())]
    DuplicateTensor {
        /// The file.
        path: PathBuf,
        /// Where the second tensor's info starts.
        offset: u64,
        /// The name.
        tensor: String,
    },
    /// A metadata key the caller needs is absent.
    #[error("{}: missing metadata key '{key}'", path.display())]
    MissingKey {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
    },
    /// A metadata value of another type than the caller needs.
    #[error("{}: metadata key '{key}' is {found}, expected {expected}", path.display())]
    WrongType {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// What the caller accepts.
        expected: String,
        /// The type found.
        found: String,
    },
    /// An integer metadata value that does not fit the type the caller needs.
    #[error("{}: metadata key '{key}' holds {value}, which does not fit in {target}", path.display())]
    OutOfRange {
        /// The file.
        path: PathBuf,
        /// The key.
        key: String,
        /// The value (for arrays, which element and its value).
        value: String,
        /// The type needed.
        target: &'static str,
    },
    /// A tensor name the file does not hold.
    #[error("{}: no tensor named '{tensor}'", path.display())]
    UnknownTensor {
        /// The file.
        path: PathBuf,
        /// The name looked up.
        tensor: String,
    },
    /// Making a host tensor or registering it failed (for example a name already in the
    /// registry).
    #[error("{}: tensor '{tensor}': {source}", path.display())]
    Memory {
        /// The file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the tensor layer said.
        #[source]
        source: MemoryError,
    },
    /// The file was truncated or rewritten after it was mapped: reading its tensors could
    /// raise SIGBUS or see other bytes ([`super::FileWatch`]).
    #[error("{}: the file changed after it was opened: {what}; its tensors are read from a memory map of it, so using them now could crash the process (SIGBUS) or compute with other weights: open it again", path.display())]
    ChangedSinceOpen {
        /// The file.
        path: PathBuf,
        /// What changed.
        what: String,
    },
}

/// Why [`super::GgufWriter`] refused metadata or a tensor, or could not write the file.
///
/// The writer refuses anything the reader (or llama.cpp) would reject, so every file it
/// writes can be read back.
#[derive(Debug, thiserror::Error)]
pub enum GgufWriteError {
    /// A GGUF version other than 2 or 3.
    #[error("cannot write GGUF version {version}; only 2 and 3 are supported")]
    BadVersion {
        /// The version asked for.
        version: u32,
    },
    /// A metadata key added twice.
    #[error("metadata key '{key}' is already set")]
    DuplicateKey {
        /// The key.
        key: String,
    },
    /// `general.alignment` that is not a u32 nonzero power of two.
    #[error("general.alignment must be a u32 nonzero power of two, got {value}")]
    BadAlignment {
        /// The value given, formatted with its type.
        value: String,
    },
    /// Arrays nested deeper than [`super::MAX_ARRAY_NESTING`].
    #[error("metadata key '{key}' nests arrays deeper than {max} levels")]
    NestingTooDeep {
        /// The key.
        key: String,
        /// The limit.
        max: usize,
    },
    /// A tensor name added twice.
    #[error("tensor '{name}' is already added")]
    DuplicateTensor {
        /// The name.
        name: String,
    },
    /// A tensor name of [`super::MAX_TENSOR_NAME_LEN`] bytes or more (llama.cpp's
    /// GGML_MAX_NAME, including the terminating NUL, is 64).
    #[error("tensor name '{name}' is {len} bytes; llama.cpp accepts at most {max}")]
    NameTooLong {
        /// The name.
        name: String,
        /// Its length in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A tensor with no dims or more than [`super::MAX_DIMS`].
    #[error("tensor '{name}' has {n_dims} dims; 1 to {max} are allowed")]
    BadDims {
        /// The name.
        name: String,
        /// The number of dims given.
        n_dims: usize,
        /// The limit.
        max: usize,
    },
    /// A dtype GGUF has no type id for ([`DType::U32`]).
    #[error("tensor '{name}' has dtype {dtype}, which GGUF cannot store")]
    UnstorableDType {
        /// The name.
        name: String,
        /// The dtype.
        dtype: DType,
    },
    /// An innermost dim that is not whole blocks of the dtype.
    #[error("tensor '{name}' of type {dtype} has ne0 = {ne0}, not a multiple of its block length {block_len}")]
    NotWholeBlocks {
        /// The name.
        name: String,
        /// The dtype.
        dtype: DType,
        /// The innermost dim.
        ne0: u64,
        /// The block length.
        block_len: usize,
    },
    /// Dims whose element count or byte size overflows.
    #[error("tensor '{name}' with ne {ne:?} is too large")]
    TooLarge {
        /// The name.
        name: String,
        /// The dims in ggml order.
        ne: Vec<u64>,
    },
    /// Data of another size than the dtype and dims need.
    #[error("tensor '{name}' needs {expected} bytes, got {got}")]
    SizeMismatch {
        /// The name.
        name: String,
        /// Bytes needed.
        expected: usize,
        /// Bytes given.
        got: usize,
    },
    /// More bytes streamed to a tensor than its dtype and dims need
    /// ([`super::GgufStreamWriter::write_tensor_data`]; nothing of them was written).
    #[error("tensor '{name}' needs {expected} bytes, but {got} were streamed to it")]
    TensorDataOverrun {
        /// The tensor.
        name: String,
        /// Bytes it needs.
        expected: usize,
        /// Bytes it would have received.
        got: usize,
    },
    /// Bytes streamed when every tensor already has all of its bytes.
    #[error("{got} bytes of tensor data streamed after the last tensor was complete")]
    NoTensorPending {
        /// Bytes given.
        got: usize,
    },
    /// A stream finished (or an in-memory write reached a tensor declared without bytes)
    /// before a tensor had all of its bytes.
    #[error("tensor '{name}' needs {expected} bytes, but only {got} were streamed to it")]
    TensorDataMissing {
        /// The tensor.
        name: String,
        /// Bytes it needs.
        expected: usize,
        /// Bytes it received.
        got: usize,
    },
    /// Writing to a stream failed ([`super::GgufWriter::stream_to`] does not know the
    /// destination's name; callers add it).
    #[error("cannot write the GGUF data: {source}")]
    Stream {
        /// The writer's error.
        #[source]
        source: io::Error,
    },
    /// Writing the file failed.
    #[error("{}: cannot write the file: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

/// A value pushed into a [`super::MetaArray`] whose type is not the array's element type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("array element {index} is {found}, but the array holds {expected}")]
pub struct MetaArrayTypeMismatch {
    /// The element's index.
    pub index: usize,
    /// The array's element type.
    pub expected: MetaType,
    /// The element's type.
    pub found: MetaType,
}
