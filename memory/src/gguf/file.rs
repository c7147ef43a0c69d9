//! [`GgufFile`]: one GGUF v2/v3 file, memory-mapped, parsed and validated once at open.
//!
//! Opening checks everything the rest of the engine relies on, so that later accessors
//! cannot fail on file contents: every count against the bytes left, every string's UTF-8,
//! unique keys and tensor names, the alignment, each tensor's type, dims, block
//! divisibility, alignment and extent inside the file. Tensor data is never copied: a
//! [`HostTensor`] made from the file is a view into the shared map.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
#[cfg(not(target_family = "wasm"))]
use memmap2::MmapMut;

use crate::{ggml_type_name, DType, HostTensor, Registry, Shape, TensorId};

use super::cursor::Cursor;
use super::map_guard::GuardedMap;
use super::meta_array::{MetaArray, Strs};
use super::metadata::{read_type, read_value, MetaType, MetaValue, Mismatch};
use super::watch::FileWatch;
use super::GgufError;

/// The alignment of the data section and of every tensor when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// The most dims a tensor may have (ggml's GGML_MAX_DIMS).
pub const MAX_DIMS: usize = 4;

/// The metadata key that sets the alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// The magic at the start of every GGUF file.
pub const GGUF_MAGIC: [u8; 4] = *b"GGUF";

/// The smallest metadata entry: an empty key (8), a type id (4) and a one-byte value.
const MIN_KV_BYTES: u64 = 8 + 4 + 1;

/// The smallest tensor info: an empty name (8), n_dims (4), no dims, type (4), offset (8).
const MIN_TENSOR_INFO_BYTES: u64 = 8 + 4 + 4 + 8;

/// One tensor's description, as validated at open.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The unique name.
    pub name: String,
    /// The element type.
    pub dtype: DType,
    /// The dims in ggml order, innermost (`ne0`, contiguous) first, as stored in the file.
    /// Empty for a 0-dim tensor, which ggml treats as one element.
    pub ne: Vec<u64>,
    /// The row-major shape (`ne` reversed; `[1]` for a 0-dim tensor).
    pub shape: Shape,
    /// The data's offset relative to the start of the data section.
    pub offset: u64,
    /// The data's size in bytes (for I2_S including the 32-byte scale trailer).
    pub n_bytes: usize,
    /// Where this tensor's info starts in the file (for messages).
    pub info_offset: u64,
}

impl TensorInfo {
    /// The number of elements.
    pub fn n_elements(&self) -> usize {
        self.shape.numel()
    }
}

/// A GGUF file, memory-mapped and validated. See the module docs for what is checked.
pub struct GgufFile {
    path: PathBuf,
    map: Arc<GuardedMap>,
    version: u32,
    alignment: u64,
    data_offset: u64,
    metadata: Vec<(String, MetaValue)>,
    key_index: HashMap<String, usize>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    /// The open file behind the map, to tell whether it changed since.
    watch: FileWatch,
}

impl fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.version)
            .field("file_len", &self.map.len())
            .field("alignment", &self.alignment)
            .field("data_offset", &self.data_offset)
            .field("metadata_keys", &self.metadata.len())
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

/// Maps the file at `path` read-only, as a model file is mapped: guarded while the map lives
/// (a SIGBUS from a truncation inside it exits naming the file, `map_guard.rs`). For other
/// formats' readers (a checkpoint's safetensors), which parse the bytes themselves.
#[cfg(not(target_family = "wasm"))]
pub fn map_path(path: &Path) -> std::io::Result<GuardedMap> {
    let file = File::open(path)?;
    Ok(GuardedMap::file(map_file(&file)?, path))
}

/// Maps `file` read-only.
#[allow(unsafe_code)] // The reader's one unsafe operation (map_guard.rs has the SIGBUS handler's).
fn map_file(file: &File) -> std::io::Result<Mmap> {
    // SAFETY: `Mmap::map` is unsafe because the mapped bytes can change or disappear while
    // the map lives if another process writes to or truncates the file. We map read-only
    // and never hand out a mutable view. Every size is checked against the
    // length the map had at open, so reads stay inside the map; but if another process
    // truncates the file afterwards, touching the lost pages raises SIGBUS, which no safe
    // wrapper can prevent: `watch.rs` catches a change between two passes, `map_guard.rs`
    // turns a SIGBUS in the map into an exit naming the file. Callers must not modify model
    // files while they are open.
    unsafe { Mmap::map(file) }
}

/// A read-only anonymous map of `len` bytes that `fill` wrote, advised for transparent huge
/// pages on Linux (advice only: without THP it stays in 4 KiB pages).
#[cfg(not(target_family = "wasm"))]
fn anonymous_map(len: usize, fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>) -> std::io::Result<GuardedMap> {
    let mut map = MmapMut::map_anon(len)?;
    #[cfg(target_os = "linux")]
    {
        let _ = map.advise(memmap2::Advice::HugePage);
    }
    fill(&mut map)?;
    Ok(GuardedMap::anonymous(map.make_read_only()?))
}

/// WebAssembly has no maps: the bytes go on the heap.
#[cfg(target_family = "wasm")]
fn anonymous_map(len: usize, fill: impl FnOnce(&mut [u8]) -> std::io::Result<()>) -> std::io::Result<GuardedMap> {
    let mut bytes = vec![0u8; len].into_boxed_slice();
    fill(&mut bytes)?;
    Ok(GuardedMap::heap(bytes))
}

impl GgufFile {
    /// Opens, maps (read-only) and validates the file at `path`.
    ///
    /// The map is only as stable as the file: if another process truncates or rewrites the
    /// file while it is open, reading tensor bytes can raise SIGBUS or see new contents.
    /// Every check here uses the length the file had when it was mapped;
    /// [`GgufFile::check_unchanged`] tells whether the file changed since.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io { path: path.clone(), source };
        let file = File::open(&path).map_err(io)?;
        let modified = file.metadata().map_err(io)?.modified().ok();
        let map = GuardedMap::file(map_file(&file).map_err(io)?, &path);
        let watch = FileWatch::new(path.clone(), file, map.len() as u64, modified);
        GgufFile::parse(path, Arc::new(map), watch)
    }

    /// Reads the file at `path` into anonymous memory (instead of mapping it) and validates
    /// it, as llama.cpp's `--no-mmap` does. On Linux the memory is advised for transparent
    /// huge pages (`MADV_HUGEPAGE`; it takes effect when the kernel's THP mode is `madvise`
    /// or `always`), so the weights sit in 2 MiB pages instead of a file map's 4 KiB ones.
    /// Measured on the 2B CPU decode (docs/benchmarks.md): no faster than the map, with the
    /// huge pages in place. It costs one read of the file at open and the file's size in
    /// anonymous memory rather than in the page cache. The copy is immune to later changes
    /// of the file (no SIGBUS, nothing to watch).
    pub fn read(path: impl AsRef<Path>) -> Result<GgufFile, GgufError> {
        let path = path.as_ref().to_path_buf();
        let io = |source| GgufError::Io { path: path.clone(), source };
        let mut file = File::open(&path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let len = usize::try_from(len).map_err(|_| io(std::io::Error::other("the file is larger than memory")))?;
        let map = anonymous_map(len, |m| std::io::Read::read_exact(&mut file, m)).map_err(io)?;
        GgufFile::parse(path, Arc::new(map), FileWatch::none())
    }

    /// Validates a GGUF image held in memory, copying it into an anonymous map so that host
    /// tensors made from it are zero-copy views like those of a file. `label` stands in for
    /// the path in errors. Meant for tests, fuzzing and files received over a network.
    pub fn from_bytes(label: impl Into<PathBuf>, bytes: &[u8]) -> Result<GgufFile, GgufError> {
        let path = label.into();
        let io = |source| GgufError::Io { path: path.clone(), source };
        let map = anonymous_map(bytes.len(), |m| {
            m.copy_from_slice(bytes);
            Ok(())
        })
        .map_err(io)?;
        GgufFile::parse(path, Arc::new(map), FileWatch::none())
    }

    /// Validates a GGUF image the caller hands over, keeping it as it is (no copy): what a
    /// browser does with a file it fetched. `label` stands in for the path in errors.
    pub fn from_vec(label: impl Into<PathBuf>, bytes: Vec<u8>) -> Result<GgufFile, GgufError> {
        GgufFile::parse(label.into(), Arc::new(GuardedMap::heap(bytes.into_boxed_slice())), FileWatch::none())
    }

    fn parse(path: PathBuf, map: Arc<GuardedMap>, watch: FileWatch) -> Result<GgufFile, GgufError> {
        let mut cur = Cursor::new(&map, &path);

        let magic: [u8; 4] = cur.array(&|| "the magic".to_string())?;
        if magic != GGUF_MAGIC {
            return Err(GgufError::BadMagic { path: path.clone(), found: magic });
        }
        let version = cur.u32(&|| "the version".to_string())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion { path: path.clone(), version });
        }
        let tensor_count_offset = cur.offset();
        let tensor_count = cur.u64(&|| "the tensor count".to_string())?;
        let kv_count_offset = cur.offset();
        let kv_count = cur.u64(&|| "the metadata entry count".to_string())?;
        let kv_count =
            cur.check_count(kv_count, MIN_KV_BYTES, kv_count_offset, &|| "the metadata entry count".to_string())?;

        let (metadata, key_index) = read_metadata(&mut cur, kv_count)?;
        let alignment = alignment(&path, &metadata, &key_index)?;

        // The tensor infos follow the metadata: check their count against what is left then.
        let tensor_count = cur.check_count(tensor_count, MIN_TENSOR_INFO_BYTES, tensor_count_offset, &|| {
            "the tensor count".to_string()
        })?;
        let mut tensors = Vec::with_capacity(tensor_count);
        let mut tensor_index = HashMap::with_capacity(tensor_count);
        for i in 0..tensor_count {
            let info = read_tensor_info(&mut cur, i, alignment)?;
            if tensor_index.contains_key(&info.name) {
                return Err(GgufError::DuplicateTensor {
                    path: path.clone(),
                    offset: info.info_offset,
                    tensor: info.name,
                });
            }
            tensor_index.insert(info.name.clone(), tensors.len());
            tensors.push(info);
        }

        // The data section starts at the next multiple of the alignment.
        let infos_end = cur.offset();
        let file_len = map.len() as u64;
        let data_offset =
            infos_end.checked_next_multiple_of(alignment).filter(|&d| d <= file_len).ok_or_else(|| {
                GgufError::Truncated {
                    path: path.clone(),
                    offset: infos_end,
                    what: "the padding before the data section".to_string(),
                    needed: infos_end.checked_next_multiple_of(alignment).map_or(u64::MAX, |d| d - infos_end),
                    available: cur.remaining(),
                }
            })?;
        for t in &tensors {
            let n_bytes = t.n_bytes as u64;
            let fits = data_offset
                .checked_add(t.offset)
                .and_then(|s| s.checked_add(n_bytes))
                .is_some_and(|end| end <= file_len);
            if !fits {
                return Err(GgufError::TensorOutOfBounds {
                    path: path.clone(),
                    tensor: t.name.clone(),
                    data_offset,
                    offset: t.offset,
                    n_bytes,
                    file_len,
                });
            }
        }

        Ok(GgufFile { path, map, version, alignment, data_offset, metadata, key_index, tensors, tensor_index, watch })
    }

    /// `Ok` if the file still has the length and modification time it had when it was
    /// mapped, else [`GgufError::ChangedSinceOpen`] naming it and what changed (see
    /// [`FileWatch`]). Always `Ok` for [`GgufFile::from_bytes`] images.
    pub fn check_unchanged(&self) -> Result<(), GgufError> {
        self.watch.check()
    }

    /// A handle that checks the file later, as [`GgufFile::check_unchanged`] does, without
    /// holding the `GgufFile` (a loaded model keeps one).
    pub fn watch(&self) -> FileWatch {
        self.watch.clone()
    }

    /// The path the file was opened from (or the label given to [`GgufFile::from_bytes`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The file's length in bytes when it was mapped.
    pub fn file_len(&self) -> u64 {
        self.map.len() as u64
    }

    /// The alignment of the data section and of every tensor offset.
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// The absolute offset of the data section; tensor offsets are relative to it.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Every metadata entry, in file order.
    pub fn metadata(&self) -> &[(String, MetaValue)] {
        &self.metadata
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.key_index.get(key).and_then(|&i| self.metadata.get(i)).map(|(_, v)| v)
    }

    fn require(&self, key: &str) -> Result<&MetaValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey { path: self.path.clone(), key: key.to_string() })
    }

    fn mismatch(&self, key: &str, m: Mismatch) -> GgufError {
        match m {
            Mismatch::WrongType { expected, found } => {
                GgufError::WrongType { path: self.path.clone(), key: key.to_string(), expected, found }
            }
            Mismatch::OutOfRange { value, target } => {
                GgufError::OutOfRange { path: self.path.clone(), key: key.to_string(), value, target }
            }
        }
    }

    fn wrong_type(&self, key: &str, expected: &str, found: &MetaValue) -> GgufError {
        self.mismatch(key, Mismatch::WrongType { expected: expected.to_string(), found: found.type_description() })
    }

    fn get_int<T: TryFrom<i128>>(&self, key: &str, target: &'static str) -> Result<T, GgufError> {
        self.require(key)?.to_int(target).map_err(|m| self.mismatch(key, m))
    }

    /// A string value.
    pub fn get_str(&self, key: &str) -> Result<&str, GgufError> {
        let v = self.require(key)?;
        v.as_str().ok_or_else(|| self.wrong_type(key, "string", v))
    }

    /// An integer value of any integer type that fits in u32.
    pub fn get_u32(&self, key: &str) -> Result<u32, GgufError> {
        self.get_int(key, "u32")
    }

    /// An integer value of any integer type that fits in u64.
    pub fn get_u64(&self, key: &str) -> Result<u64, GgufError> {
        self.get_int(key, "u64")
    }

    /// An integer value of any integer type that fits in i32.
    pub fn get_i32(&self, key: &str) -> Result<i32, GgufError> {
        self.get_int(key, "i32")
    }

    /// An integer value of any integer type that fits in i64.
    pub fn get_i64(&self, key: &str) -> Result<i64, GgufError> {
        self.get_int(key, "i64")
    }

    /// An integer value of any integer type that fits in usize (counts and sizes).
    pub fn get_usize(&self, key: &str) -> Result<usize, GgufError> {
        self.get_int(key, "usize")
    }

    /// An F32 value, or an F64 value within f32's range (rounded to nearest).
    pub fn get_f32(&self, key: &str) -> Result<f32, GgufError> {
        self.require(key)?.to_f32().map_err(|m| self.mismatch(key, m))
    }

    /// An F32 or F64 value as f64.
    pub fn get_f64(&self, key: &str) -> Result<f64, GgufError> {
        let v = self.require(key)?;
        v.as_f64().ok_or_else(|| self.wrong_type(key, "f32 or f64", v))
    }

    /// A bool value.
    pub fn get_bool(&self, key: &str) -> Result<bool, GgufError> {
        let v = self.require(key)?;
        v.as_bool().ok_or_else(|| self.wrong_type(key, "bool", v))
    }

    /// An array value.
    pub fn get_array(&self, key: &str) -> Result<&MetaArray, GgufError> {
        let v = self.require(key)?;
        v.as_array().ok_or_else(|| self.wrong_type(key, "array", v))
    }

    /// An array of `elem` values, with a message naming `expected` otherwise.
    fn typed_array(&self, key: &str, elem: &[MetaType], expected: &str) -> Result<&MetaArray, GgufError> {
        let a = self.get_array(key)?;
        if !elem.contains(&a.elem_type()) {
            return Err(self.mismatch(
                key,
                Mismatch::WrongType { expected: expected.to_string(), found: format!("array of {}", a.elem_type()) },
            ));
        }
        Ok(a)
    }

    /// An array of strings (for example `tokenizer.ggml.tokens`).
    pub fn get_str_array(&self, key: &str) -> Result<Vec<&str>, GgufError> {
        Ok(self.get_strs(key)?.collect())
    }

    /// The strings of an array of strings, borrowed one at a time: a tokenizer's 128K
    /// tokens need no vector of their own.
    pub fn get_strs(&self, key: &str) -> Result<Strs<'_>, GgufError> {
        let a = self.typed_array(key, &[MetaType::String], "array of string")?;
        let found = || format!("array of {}", a.elem_type());
        a.strs().ok_or_else(|| {
            self.mismatch(key, Mismatch::WrongType { expected: "array of string".into(), found: found() })
        })
    }

    fn int_array<T: TryFrom<i128>>(&self, key: &str, target: &'static str) -> Result<Vec<T>, GgufError> {
        let expected = format!("array of integers that fit in {target}");
        let a = self.get_array(key)?;
        if !a.elem_type().is_integer() {
            return Err(
                self.mismatch(key, Mismatch::WrongType { expected, found: format!("array of {}", a.elem_type()) })
            );
        }
        a.iter()
            .enumerate()
            .map(|(i, v)| {
                v.to_int(target).map_err(|m| match m {
                    Mismatch::OutOfRange { value, target } => {
                        self.mismatch(key, Mismatch::OutOfRange { value: format!("element {i} = {value}"), target })
                    }
                    other => self.mismatch(key, other),
                })
            })
            .collect()
    }

    /// An array of integers of any integer type whose every element fits in i32 (for
    /// example `tokenizer.ggml.token_type`).
    pub fn get_i32_array(&self, key: &str) -> Result<Vec<i32>, GgufError> {
        self.int_array(key, "i32")
    }

    /// An array of integers of any integer type whose every element fits in u32.
    pub fn get_u32_array(&self, key: &str) -> Result<Vec<u32>, GgufError> {
        self.int_array(key, "u32")
    }

    /// An array of F32 or F64 values as f32 (for example `tokenizer.ggml.scores`).
    pub fn get_f32_array(&self, key: &str) -> Result<Vec<f32>, GgufError> {
        let a = self.typed_array(key, &[MetaType::F32, MetaType::F64], "array of f32 or f64")?;
        a.iter()
            .enumerate()
            .map(|(i, v)| {
                v.to_f32().map_err(|m| match m {
                    Mismatch::OutOfRange { value, target } => {
                        self.mismatch(key, Mismatch::OutOfRange { value: format!("element {i} = {value}"), target })
                    }
                    other => self.mismatch(key, other),
                })
            })
            .collect()
    }

    /// `general.architecture`.
    pub fn architecture(&self) -> Result<&str, GgufError> {
        self.get_str("general.architecture")
    }

    /// Every tensor's info, in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The info of the tensor named `name`.
    pub fn tensor_info(&self, name: &str) -> Result<&TensorInfo, GgufError> {
        self.tensor_index
            .get(name)
            .and_then(|&i| self.tensors.get(i))
            .ok_or_else(|| GgufError::UnknownTensor { path: self.path.clone(), tensor: name.to_string() })
    }

    /// The byte range of a tensor's data in the file (checked at open).
    fn data_range(&self, info: &TensorInfo) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(self.data_offset.checked_add(info.offset)?).ok()?;
        let end = start.checked_add(info.n_bytes)?;
        (end <= self.map.len()).then_some(start..end)
    }

    /// The tensor's bytes: a view into the map. Empty for an info that does not come from
    /// this file and does not fit in it.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        self.data_range(info).and_then(|r| self.map.get(r)).unwrap_or(&[])
    }

    /// The tensor named `name` as a zero-copy [`HostTensor`] viewing the map.
    pub fn host_tensor(&self, name: &str) -> Result<HostTensor, GgufError> {
        let info = self.tensor_info(name)?;
        self.make_host_tensor(info)
    }

    fn make_host_tensor(&self, info: &TensorInfo) -> Result<HostTensor, GgufError> {
        let memory = |source| GgufError::Memory { path: self.path.clone(), tensor: info.name.clone(), source };
        let range = self.data_range(info).ok_or_else(|| GgufError::TensorOutOfBounds {
            path: self.path.clone(),
            tensor: info.name.clone(),
            data_offset: self.data_offset,
            offset: info.offset,
            n_bytes: info.n_bytes as u64,
            file_len: self.file_len(),
        })?;
        HostTensor::mapped(&info.name, info.dtype, info.shape.clone(), Arc::clone(&self.map), range).map_err(memory)
    }

    /// Registers every tensor under its GGUF name, zero-copy, and returns the handles in
    /// file order. Fails (naming the tensor) if a name is already in `registry`; tensors
    /// registered before the failure stay registered.
    pub fn load_into(&self, registry: &mut Registry) -> Result<Vec<TensorId>, GgufError> {
        self.tensors
            .iter()
            .map(|info| {
                let t = self.make_host_tensor(info)?;
                registry.insert(&info.name, t).map_err(|source| GgufError::Memory {
                    path: self.path.clone(),
                    tensor: info.name.clone(),
                    source,
                })
            })
            .collect()
    }

    /// The memory map shared by every host tensor made from this file.
    pub fn map(&self) -> &Arc<GuardedMap> {
        &self.map
    }
}

/// Metadata entries in file order.
type Entries = Vec<(String, MetaValue)>;

/// Reads `count` metadata entries, rejecting duplicate keys, and indexes them by key.
fn read_metadata(cur: &mut Cursor<'_>, count: usize) -> Result<(Entries, HashMap<String, usize>), GgufError> {
    let mut metadata = Vec::with_capacity(count);
    let mut key_index = HashMap::with_capacity(count);
    for i in 0..count {
        let key_offset = cur.offset();
        let key = cur.string(&|| format!("the key of metadata entry {i}"))?.to_string();
        if key_index.contains_key(&key) {
            return Err(GgufError::DuplicateKey { path: cur.path().to_path_buf(), offset: key_offset, key });
        }
        let ty = read_type(cur, &key, "value type")?;
        let value = read_value(cur, ty, &key, 0)?;
        key_index.insert(key.clone(), metadata.len());
        metadata.push((key, value));
    }
    Ok((metadata, key_index))
}

/// The file's alignment: `general.alignment` (any integer type whose value fits in u32), or
/// [`DEFAULT_ALIGNMENT`]. It must be a nonzero power of two.
fn alignment(
    path: &Path,
    metadata: &[(String, MetaValue)],
    key_index: &HashMap<String, usize>,
) -> Result<u64, GgufError> {
    let Some((_, v)) = key_index.get(ALIGNMENT_KEY).and_then(|&i| metadata.get(i)) else {
        return Ok(DEFAULT_ALIGNMENT);
    };
    let key = ALIGNMENT_KEY.to_string();
    match v.as_i128() {
        None => Err(GgufError::WrongType {
            path: path.to_path_buf(),
            key,
            expected: "u32".to_string(),
            found: v.type_description(),
        }),
        Some(a) => match u32::try_from(a) {
            Ok(a) if a.is_power_of_two() => Ok(a.into()),
            Ok(a) => Err(GgufError::BadAlignment { path: path.to_path_buf(), alignment: a.into() }),
            Err(_) => Err(GgufError::OutOfRange { path: path.to_path_buf(), key, value: a.to_string(), target: "u32" }),
        },
    }
}

/// Reads and validates tensor info `i` (everything but its extent, which needs the data
/// offset).
fn read_tensor_info(cur: &mut Cursor<'_>, i: usize, alignment: u64) -> Result<TensorInfo, GgufError> {
    let path = cur.path();
    let info_offset = cur.offset();
    let name = cur.string(&|| format!("the name of tensor {i}"))?.to_string();

    let n_dims_offset = cur.offset();
    let n_dims = cur.u32(&|| format!("the dim count of tensor '{name}'"))?;
    let n_dims_usize = usize::try_from(n_dims).unwrap_or(usize::MAX);
    if n_dims_usize > MAX_DIMS {
        return Err(GgufError::TooManyDims {
            path: path.to_path_buf(),
            offset: n_dims_offset,
            tensor: name,
            n_dims,
            max: MAX_DIMS,
        });
    }
    let mut ne = Vec::with_capacity(n_dims_usize);
    for d in 0..n_dims_usize {
        ne.push(cur.u64(&|| format!("dim ne{d} of tensor '{name}'"))?);
    }
    let type_offset = cur.offset();
    let type_id = cur.u32(&|| format!("the type of tensor '{name}'"))?;
    let offset = cur.u64(&|| format!("the data offset of tensor '{name}'"))?;

    let dtype = DType::from_gguf_type_id(type_id).ok_or_else(|| match ggml_type_name(type_id) {
        Some(type_name) => GgufError::UnsupportedTensorType {
            path: path.to_path_buf(),
            offset: type_offset,
            tensor: name.clone(),
            type_id,
            type_name,
        },
        None => GgufError::UnknownTensorType {
            path: path.to_path_buf(),
            offset: type_offset,
            tensor: name.clone(),
            type_id,
        },
    })?;

    let too_large = || GgufError::TensorTooLarge {
        path: path.to_path_buf(),
        offset: info_offset,
        tensor: name.clone(),
        ne: ne.clone(),
    };
    // ggml stores dims and element counts as i64; this machine addresses them as usize.
    let i64_max = i64::MAX as u64;
    let numel = ne.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).filter(|&n| n <= i64_max);
    if numel.is_none() || ne.iter().any(|&d| d > i64_max) {
        return Err(too_large());
    }
    let dims: Vec<usize> = ne.iter().map(|&d| usize::try_from(d)).collect::<Result<_, _>>().map_err(|_| too_large())?;
    let shape =
        if dims.is_empty() { Some(Shape::vector(1)) } else { Shape::from_ggml_ne(&dims) }.ok_or_else(too_large)?;

    let ne0 = ne.first().copied().unwrap_or(1);
    let block_len = dtype.block_len();
    if ne0 % block_len as u64 != 0 {
        return Err(GgufError::NotWholeBlocks {
            path: path.to_path_buf(),
            offset: info_offset,
            tensor: name,
            dtype,
            ne0,
            block_len,
        });
    }
    let n_bytes = dtype.tensor_bytes(shape.rows(), shape.cols()).ok_or_else(too_large)?;
    if offset % alignment != 0 {
        return Err(GgufError::MisalignedTensor { path: path.to_path_buf(), tensor: name, offset, alignment });
    }
    Ok(TensorInfo { name, dtype, ne, shape, offset, n_bytes, info_offset })
}
