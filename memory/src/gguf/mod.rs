//! GGUF v2/v3, read zero-copy through memmap2, and written.
//!
//! The format (see `docs/formats.md` § GGUF and ggml's `docs/gguf.md`): little-endian; magic `GGUF`,
//! version u32, tensor count u64, metadata count u64; the metadata entries (key string,
//! value type u32, value); the tensor infos (name string, n_dims u32, n_dims × u64 dims in
//! ggml order, type u32, data offset u64 relative to the data section); padding to
//! `general.alignment` (default 32); the data section.
//!
//! A tour of the types:
//! - [`GgufFile`] maps a file and validates it completely at open: afterwards nothing it
//!   returns can fail on file contents, and [`GgufFile::host_tensor`] /
//!   [`GgufFile::load_into`] give zero-copy [`crate::HostTensor`]s viewing the map.
//! - [`TensorInfo`] describes one tensor; [`MetaValue`], [`MetaArray`] and [`MetaType`]
//!   hold metadata, with typed getters on [`GgufFile`] (`get_u32`, `get_str_array`, ...).
//! - [`GgufError`]: every variant names the file and, where it applies, the byte offset,
//!   the key or the tensor.
//! - [`GgufWriter`] writes files (for tests, hostile-file builders and synthetic models),
//!   and [`GgufLayout`] says where each of their fields landed; [`GgufStreamWriter`] takes
//!   tensor bytes piece by piece, for files written without holding their tensors in memory.
//! - [`FileWatch`] tells whether a mapped file was truncated or rewritten since it was
//!   opened (the map would raise SIGBUS or show other bytes); [`GuardedMap`], the map itself,
//!   turns a SIGBUS in it during a read into an exit with a message naming the file.
//!
//! The reader treats the file as hostile: every count, length and offset is checked
//! against the bytes left before it is used, no allocation is sized by an unchecked count,
//! all arithmetic on file values is checked, array nesting is capped at
//! [`MAX_ARRAY_NESTING`], and nothing the file controls can make it panic.

mod cursor;
mod error;
mod file;
mod map_guard;
mod meta_array;
mod metadata;
mod watch;
mod writer;

pub use error::{GgufError, GgufWriteError, MetaArrayTypeMismatch};
#[cfg(not(target_family = "wasm"))]
pub use file::map_path;
pub use file::{GgufFile, TensorInfo, ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
pub use map_guard::GuardedMap;
pub use meta_array::{MetaArray, Strs};
pub use metadata::{MetaType, MetaValue, MAX_ARRAY_NESTING};
pub use watch::FileWatch;
pub use writer::{GgufLayout, GgufStreamWriter, GgufWriter, KvLayout, TensorInfoLayout, MAX_TENSOR_NAME_LEN};
