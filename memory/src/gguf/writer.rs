//! [`GgufWriter`]: writes GGUF v3 (or v2) files that this reader and llama.cpp accept.
//!
//! Metadata of every type (nested arrays included) and tensors of every storable dtype.
//! The writer refuses what the reader would reject (duplicate keys or names, bad
//! alignment, wrong data sizes, ...), so its output always reads back. Tensors are laid
//! out as gguf-py and llama.cpp lay them out: in the order added, each at the next multiple
//! of the alignment, each followed by zero padding to the alignment, so that every offset
//! equals the padded sum of the sizes before it (llama.cpp checks exactly that).
//!
//! Its output is byte-identical to gguf-py's (0.19.0) for the same entries and tensors.
//! One caveat for files meant for llama.cpp: nested arrays (arrays of arrays) are part of
//! the GGUF spec and gguf-py reads and writes them, but llama.cpp's loader rejects any key
//! whose array elements are arrays. Real models never use them.
//!
//! [`GgufWriter::write_with_layout`] also reports where every field landed ([`GgufLayout`]),
//! so tools and tests can point at bytes (for example to damage them on purpose).
//!
//! **Streaming.** A tensor declared with [`GgufWriter::add_tensor_info`] (name, dtype, dims)
//! has no bytes in the writer: [`GgufWriter::stream_to`] writes the header, metadata and
//! tensor infos (every offset follows from the sizes alone), and the returned
//! [`GgufStreamWriter`] then takes the declared tensors' bytes in order, in pieces of any size
//! ([`GgufStreamWriter::write_tensor_data`]), writing each tensor's padding once it is
//! complete. A file larger than memory (say, a model rewritten tensor by tensor from a mapped
//! input) can be written this way. Tensors added with their bytes ([`GgufWriter::add_tensor`])
//! are written by the stream when it reaches them, so both kinds mix in one file, and
//! [`GgufWriter::write_with_layout`] is the stream of a writer whose tensors all have bytes.

use std::collections::HashSet;
use std::fmt;
use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::ops::Range;
use std::path::Path;

use crate::DType;

use super::file::{ALIGNMENT_KEY, DEFAULT_ALIGNMENT, GGUF_MAGIC, MAX_DIMS};
use super::meta_array::MetaArray;
use super::metadata::{MetaValue, MAX_ARRAY_NESTING};
use super::GgufWriteError;

/// The longest tensor name llama.cpp accepts, in bytes (GGML_MAX_NAME is 64 with the NUL).
pub const MAX_TENSOR_NAME_LEN: usize = 63;

/// A tensor waiting to be written.
#[derive(Clone, Debug)]
struct PendingTensor {
    name: String,
    dtype: DType,
    ne: Vec<u64>,
    /// The data's size, checked against the dtype and dims.
    n_bytes: usize,
    /// The bytes, or `None` for a tensor whose bytes are streamed ([`GgufWriter::add_tensor_info`]).
    data: Option<Vec<u8>>,
}

/// Builds a GGUF file in memory and writes it out. See the module docs.
#[derive(Clone, Debug)]
pub struct GgufWriter {
    version: u32,
    alignment: u64,
    metadata: Vec<(String, MetaValue)>,
    keys: HashSet<String>,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> GgufWriter {
        GgufWriter::new()
    }
}

/// Where one metadata entry landed in a written file (absolute offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvLayout {
    /// The key.
    pub key: String,
    /// The key's u64 length field (the entry's first byte).
    pub start: u64,
    /// The u32 value type.
    pub type_at: u64,
    /// The value's first byte.
    pub value_at: u64,
    /// One past the entry's last byte.
    pub end: u64,
}

/// Where one tensor's info and data landed in a written file (absolute offsets).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfoLayout {
    /// The tensor's name.
    pub name: String,
    /// The name's u64 length field (the info's first byte).
    pub start: u64,
    /// The u32 dim count.
    pub n_dims_at: u64,
    /// The first u64 dim (`ne0`).
    pub dims_at: u64,
    /// The u32 type id.
    pub type_at: u64,
    /// The u64 data offset.
    pub offset_at: u64,
    /// One past the info's last byte.
    pub end: u64,
    /// The tensor's data, absolute (without its padding).
    pub data: Range<u64>,
}

/// Where every part of a written file landed. The header is fixed: magic at 0, version at
/// 4, tensor count at 8, metadata count at 16, first entry at 24.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufLayout {
    /// The metadata entries, in file order.
    pub kv: Vec<KvLayout>,
    /// The tensor infos, in file order.
    pub tensors: Vec<TensorInfoLayout>,
    /// The start of the data section.
    pub data_offset: u64,
    /// The file's total length.
    pub file_len: u64,
}

/// Counts the bytes written through it.
struct Counting<W> {
    inner: W,
    pos: u64,
}

impl<W: Write> Counting<W> {
    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.inner.write_all(bytes)?;
        self.pos += bytes.len() as u64;
        Ok(())
    }

    fn put_str(&mut self, s: &str) -> io::Result<()> {
        self.put(&(s.len() as u64).to_le_bytes())?;
        self.put(s.as_bytes())
    }

    fn pad_to(&mut self, alignment: u64) -> io::Result<()> {
        const ZEROS: [u8; 256] = [0; 256];
        let mut n = self.pos.next_multiple_of(alignment) - self.pos;
        while n > 0 {
            let k = n.min(ZEROS.len() as u64);
            self.put(&ZEROS[..k as usize])?;
            n -= k;
        }
        Ok(())
    }
}

impl GgufWriter {
    /// An empty GGUF v3 file with the default alignment (32).
    pub fn new() -> GgufWriter {
        GgufWriter {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            metadata: Vec::new(),
            keys: HashSet::new(),
            tensors: Vec::new(),
            names: HashSet::new(),
        }
    }

    /// Writes GGUF `version` (2 or 3; the two layouts are identical for little-endian files).
    pub fn set_version(&mut self, version: u32) -> Result<&mut GgufWriter, GgufWriteError> {
        if !(2..=3).contains(&version) {
            return Err(GgufWriteError::BadVersion { version });
        }
        self.version = version;
        Ok(self)
    }

    /// The version that will be written.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The alignment that will be used (set through `general.alignment`).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Adds a metadata entry. `general.alignment` must be a [`MetaValue::U32`] nonzero power
    /// of two and sets the alignment; arrays must nest at most [`MAX_ARRAY_NESTING`] deep.
    pub fn add(&mut self, key: &str, value: impl Into<MetaValue>) -> Result<&mut GgufWriter, GgufWriteError> {
        let value = value.into();
        if self.keys.contains(key) {
            return Err(GgufWriteError::DuplicateKey { key: key.to_string() });
        }
        if let MetaValue::Array(a) = &value {
            if a.nesting_depth() > MAX_ARRAY_NESTING {
                return Err(GgufWriteError::NestingTooDeep { key: key.to_string(), max: MAX_ARRAY_NESTING });
            }
        }
        if key == ALIGNMENT_KEY {
            match value {
                MetaValue::U32(a) if a.is_power_of_two() => self.alignment = a.into(),
                ref v => return Err(GgufWriteError::BadAlignment { value: format!("{} {v}", v.type_description()) }),
            }
        }
        self.keys.insert(key.to_string());
        self.metadata.push((key.to_string(), value));
        Ok(self)
    }

    /// Adds a string entry.
    pub fn add_str(&mut self, key: &str, value: &str) -> Result<&mut GgufWriter, GgufWriteError> {
        self.add(key, MetaValue::String(value.to_string()))
    }

    /// Adds a u32 entry.
    pub fn add_u32(&mut self, key: &str, value: u32) -> Result<&mut GgufWriter, GgufWriteError> {
        self.add(key, MetaValue::U32(value))
    }

    /// Adds an f32 entry.
    pub fn add_f32(&mut self, key: &str, value: f32) -> Result<&mut GgufWriter, GgufWriteError> {
        self.add(key, MetaValue::F32(value))
    }

    /// Adds a bool entry.
    pub fn add_bool(&mut self, key: &str, value: bool) -> Result<&mut GgufWriter, GgufWriteError> {
        self.add(key, MetaValue::Bool(value))
    }

    /// Adds an array of strings.
    pub fn add_str_array<S: Into<String>>(
        &mut self,
        key: &str,
        values: impl IntoIterator<Item = S>,
    ) -> Result<&mut GgufWriter, GgufWriteError> {
        self.add(key, MetaArray::of_strings(values))
    }

    /// Adds a tensor of `dtype` with dims `ne` (ggml order, `ne0` innermost) and its raw
    /// bytes, which must be exactly the size the dtype and dims need.
    pub fn add_tensor(
        &mut self,
        name: &str,
        dtype: DType,
        ne: &[u64],
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut GgufWriter, GgufWriteError> {
        let data = data.into();
        let n_bytes = self.check_tensor(name, dtype, ne)?;
        if data.len() != n_bytes {
            return Err(GgufWriteError::SizeMismatch { name: name.to_string(), expected: n_bytes, got: data.len() });
        }
        self.push_tensor(name, dtype, ne, n_bytes, Some(data));
        Ok(self)
    }

    /// Declares a tensor of `dtype` with dims `ne` whose bytes will be streamed through
    /// [`GgufWriter::stream_to`], with the same checks as [`GgufWriter::add_tensor`]. Returns
    /// the number of bytes the stream will expect for it.
    ///
    /// A writer holding such a tensor has no complete in-memory image:
    /// [`GgufWriter::write_with_layout`] and [`GgufWriter::write_file`] fail when they reach
    /// it, and [`GgufWriter::to_bytes`] gives an empty vector.
    pub fn add_tensor_info(&mut self, name: &str, dtype: DType, ne: &[u64]) -> Result<usize, GgufWriteError> {
        let n_bytes = self.check_tensor(name, dtype, ne)?;
        self.push_tensor(name, dtype, ne, n_bytes, None);
        Ok(n_bytes)
    }

    fn push_tensor(&mut self, name: &str, dtype: DType, ne: &[u64], n_bytes: usize, data: Option<Vec<u8>>) {
        self.names.insert(name.to_string());
        self.tensors.push(PendingTensor { name: name.to_string(), dtype, ne: ne.to_vec(), n_bytes, data });
    }

    /// Checks a tensor's name, dtype and dims as the reader would, and returns its size in bytes.
    fn check_tensor(&self, name: &str, dtype: DType, ne: &[u64]) -> Result<usize, GgufWriteError> {
        let name_s = || name.to_string();
        if self.names.contains(name) {
            return Err(GgufWriteError::DuplicateTensor { name: name_s() });
        }
        if name.len() > MAX_TENSOR_NAME_LEN {
            return Err(GgufWriteError::NameTooLong { name: name_s(), len: name.len(), max: MAX_TENSOR_NAME_LEN });
        }
        if ne.is_empty() || ne.len() > MAX_DIMS {
            return Err(GgufWriteError::BadDims { name: name_s(), n_dims: ne.len(), max: MAX_DIMS });
        }
        if dtype.gguf_type_id().is_none() {
            return Err(GgufWriteError::UnstorableDType { name: name_s(), dtype });
        }
        let ne0 = ne.first().copied().unwrap_or(1);
        if ne0 % dtype.block_len() as u64 != 0 {
            return Err(GgufWriteError::NotWholeBlocks { name: name_s(), dtype, ne0, block_len: dtype.block_len() });
        }
        let too_large = || GgufWriteError::TooLarge { name: name_s(), ne: ne.to_vec() };
        let numel = ne.iter().try_fold(1u64, |n, &d| n.checked_mul(d)).ok_or_else(too_large)?;
        if numel > i64::MAX as u64 {
            return Err(too_large());
        }
        let cols = usize::try_from(ne0).map_err(|_| too_large())?;
        let rows = usize::try_from(numel / ne0.max(1)).map_err(|_| too_large())?;
        dtype.tensor_bytes(rows, cols).ok_or_else(too_large)
    }

    /// Adds an F32 tensor from its values.
    pub fn add_f32_tensor(
        &mut self,
        name: &str,
        ne: &[u64],
        values: &[f32],
    ) -> Result<&mut GgufWriter, GgufWriteError> {
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        self.add_tensor(name, DType::F32, ne, bytes)
    }

    /// Writes the file to `w` and reports where every part landed.
    ///
    /// Fails with [`io::ErrorKind::InvalidInput`] (wrapping [`GgufWriteError::TensorDataMissing`])
    /// on reaching a tensor declared with [`GgufWriter::add_tensor_info`], whose bytes only a
    /// stream can take; what was written up to there stays written.
    pub fn write_with_layout(&self, w: impl Write) -> io::Result<GgufLayout> {
        let to_io = |e: GgufWriteError| match e {
            GgufWriteError::Stream { source } => source,
            other => io::Error::new(io::ErrorKind::InvalidInput, other),
        };
        self.stream_to(w).and_then(GgufStreamWriter::finish).map(|(_, layout)| layout).map_err(to_io)
    }

    /// Writes the header, the metadata and the tensor infos to `w`, and the bytes of the
    /// leading tensors added with their bytes, then returns the stream that takes the bytes
    /// of the tensors declared with [`GgufWriter::add_tensor_info`], in the order they were
    /// added. Nothing is buffered here: wrap a file in a [`BufWriter`].
    pub fn stream_to<W: Write>(&self, w: W) -> Result<GgufStreamWriter<'_, W>, GgufWriteError> {
        let stream = |source| GgufWriteError::Stream { source };
        let mut w = Counting { inner: w, pos: 0 };
        let (kv, infos) = self.write_header(&mut w).map_err(stream)?;
        w.pad_to(self.alignment).map_err(stream)?;
        let data_offset = w.pos;
        let mut s = GgufStreamWriter {
            tensors: &self.tensors,
            alignment: self.alignment,
            w,
            kv,
            infos,
            data_offset,
            current: 0,
            written: 0,
            broken: false,
        };
        if let Some(info) = s.infos.first_mut() {
            info.data = data_offset..data_offset;
        }
        s.advance()?;
        Ok(s)
    }

    /// Writes the header, the metadata and the tensor infos (data ranges left empty).
    fn write_header<W: Write>(&self, w: &mut Counting<W>) -> io::Result<(Vec<KvLayout>, Vec<TensorInfoLayout>)> {
        w.put(&GGUF_MAGIC)?;
        w.put(&self.version.to_le_bytes())?;
        w.put(&(self.tensors.len() as u64).to_le_bytes())?;
        w.put(&(self.metadata.len() as u64).to_le_bytes())?;

        let mut kv = Vec::with_capacity(self.metadata.len());
        for (key, value) in &self.metadata {
            let start = w.pos;
            w.put_str(key)?;
            let type_at = w.pos;
            w.put(&value.meta_type().id().to_le_bytes())?;
            let value_at = w.pos;
            write_value(w, value)?;
            kv.push(KvLayout { key: key.clone(), start, type_at, value_at, end: w.pos });
        }

        // Offsets relative to the data section: each tensor at the padded end of the last.
        let mut rel = 0u64;
        let mut offsets = Vec::with_capacity(self.tensors.len());
        for t in &self.tensors {
            offsets.push(rel);
            rel = (rel + t.n_bytes as u64).next_multiple_of(self.alignment);
        }

        let mut infos = Vec::with_capacity(self.tensors.len());
        for (t, &offset) in self.tensors.iter().zip(&offsets) {
            let start = w.pos;
            w.put_str(&t.name)?;
            let n_dims_at = w.pos;
            w.put(&(t.ne.len() as u32).to_le_bytes())?;
            let dims_at = w.pos;
            for d in &t.ne {
                w.put(&d.to_le_bytes())?;
            }
            let type_at = w.pos;
            // `check_tensor` refused dtypes without an id.
            w.put(&t.dtype.gguf_type_id().unwrap_or(u32::MAX).to_le_bytes())?;
            let offset_at = w.pos;
            w.put(&offset.to_le_bytes())?;
            infos.push(TensorInfoLayout {
                name: t.name.clone(),
                start,
                n_dims_at,
                dims_at,
                type_at,
                offset_at,
                end: w.pos,
                data: 0..0,
            });
        }
        Ok((kv, infos))
    }

    /// Writes the file to `w`.
    pub fn write_to(&self, w: impl Write) -> io::Result<()> {
        self.write_with_layout(w).map(|_| ())
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.to_bytes_with_layout().0
    }

    /// The whole file as bytes, and where every part landed (empty, with an empty layout,
    /// when a tensor was declared with [`GgufWriter::add_tensor_info`]).
    pub fn to_bytes_with_layout(&self) -> (Vec<u8>, GgufLayout) {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail: only a tensor without bytes can stop the writing.
        match self.write_with_layout(&mut out) {
            Ok(layout) => (out, layout),
            Err(_) => (Vec::new(), GgufLayout { kv: Vec::new(), tensors: Vec::new(), data_offset: 0, file_len: 0 }),
        }
    }

    /// Writes the file to `path` (created or truncated).
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<GgufLayout, GgufWriteError> {
        let path = path.as_ref();
        let io = |source| GgufWriteError::Io { path: path.to_path_buf(), source };
        let file = File::create(path).map_err(io)?;
        let mut w = BufWriter::new(file);
        let layout = self.write_with_layout(&mut w).map_err(io)?;
        w.into_inner().map_err(|e| io(e.into_error()))?.sync_all().map_err(io)?;
        Ok(layout)
    }
}

/// Takes the bytes of the tensors declared with [`GgufWriter::add_tensor_info`], in order,
/// after [`GgufWriter::stream_to`] wrote everything before them. See the module docs.
///
/// Each tensor must receive exactly its size ([`GgufStreamWriter::pending`] says which tensor
/// and how many bytes are still due); tensors added with their bytes are written as the
/// stream reaches them. After an I/O error the stream refuses every further call.
pub struct GgufStreamWriter<'a, W: Write> {
    tensors: &'a [PendingTensor],
    alignment: u64,
    w: Counting<W>,
    kv: Vec<KvLayout>,
    infos: Vec<TensorInfoLayout>,
    data_offset: u64,
    /// The tensor being written (`tensors.len()` once all are complete).
    current: usize,
    /// Bytes of the current tensor written so far.
    written: usize,
    /// An I/O error happened: the output is incomplete and the position unknown.
    broken: bool,
}

impl<W: Write> fmt::Debug for GgufStreamWriter<'_, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GgufStreamWriter")
            .field("tensors", &self.tensors.len())
            .field("pending", &self.pending())
            .field("position", &self.w.pos)
            .field("broken", &self.broken)
            .finish()
    }
}

impl<W: Write> GgufStreamWriter<'_, W> {
    /// The tensor whose bytes the stream expects next and how many of them are still due;
    /// `None` once every tensor is complete.
    pub fn pending(&self) -> Option<(&str, usize)> {
        self.tensors.get(self.current).map(|t| (t.name.as_str(), t.n_bytes - self.written))
    }

    /// Appends `bytes` to the pending tensor's data (any number of calls per tensor). Once
    /// the tensor has all its bytes, its padding follows, then the bytes of any tensors added
    /// with their bytes that come next.
    ///
    /// Bytes beyond the pending tensor's size are refused before anything is written
    /// ([`GgufWriteError::TensorDataOverrun`], or [`GgufWriteError::NoTensorPending`] when
    /// every tensor is complete): a call never spans two tensors.
    pub fn write_tensor_data(&mut self, bytes: &[u8]) -> Result<(), GgufWriteError> {
        self.check_not_broken()?;
        let Some(t) = self.tensors.get(self.current) else {
            if bytes.is_empty() {
                return Ok(());
            }
            return Err(GgufWriteError::NoTensorPending { got: bytes.len() });
        };
        if bytes.len() > t.n_bytes - self.written {
            return Err(GgufWriteError::TensorDataOverrun {
                name: t.name.clone(),
                expected: t.n_bytes,
                got: self.written.saturating_add(bytes.len()),
            });
        }
        if let Err(source) = self.w.put(bytes) {
            self.broken = true;
            return Err(GgufWriteError::Stream { source });
        }
        self.written += bytes.len();
        self.advance()
    }

    /// Checks that every tensor is complete, flushes, and returns the writer and where every
    /// part of the file landed.
    pub fn finish(mut self) -> Result<(W, GgufLayout), GgufWriteError> {
        self.check_not_broken()?;
        if let Some(t) = self.tensors.get(self.current) {
            return Err(GgufWriteError::TensorDataMissing {
                name: t.name.clone(),
                expected: t.n_bytes,
                got: self.written,
            });
        }
        self.w.inner.flush().map_err(|source| GgufWriteError::Stream { source })?;
        let layout =
            GgufLayout { kv: self.kv, tensors: self.infos, data_offset: self.data_offset, file_len: self.w.pos };
        Ok((self.w.inner, layout))
    }

    fn check_not_broken(&self) -> Result<(), GgufWriteError> {
        if self.broken {
            return Err(GgufWriteError::Stream {
                source: io::Error::other("an earlier write to this GGUF stream failed"),
            });
        }
        Ok(())
    }

    /// Closes every complete tensor (its data range and padding) and writes the bytes of
    /// in-memory tensors, until a streamed tensor still lacks bytes or every tensor is done.
    fn advance(&mut self) -> Result<(), GgufWriteError> {
        self.advance_io().map_err(|source| {
            self.broken = true;
            GgufWriteError::Stream { source }
        })
    }

    fn advance_io(&mut self) -> io::Result<()> {
        while let Some(t) = self.tensors.get(self.current) {
            if self.written < t.n_bytes {
                let Some(data) = &t.data else { return Ok(()) };
                self.w.put(data)?;
                self.written = t.n_bytes;
            }
            if let Some(info) = self.infos.get_mut(self.current) {
                info.data.end = self.w.pos;
            }
            self.w.pad_to(self.alignment)?;
            self.current += 1;
            self.written = 0;
            if let Some(info) = self.infos.get_mut(self.current) {
                info.data = self.w.pos..self.w.pos;
            }
        }
        Ok(())
    }
}

/// Writes a value without its type id (which the caller wrote, or the enclosing array
/// declared).
fn write_value<W: Write>(w: &mut Counting<W>, value: &MetaValue) -> io::Result<()> {
    match value {
        MetaValue::U8(x) => w.put(&x.to_le_bytes()),
        MetaValue::I8(x) => w.put(&x.to_le_bytes()),
        MetaValue::U16(x) => w.put(&x.to_le_bytes()),
        MetaValue::I16(x) => w.put(&x.to_le_bytes()),
        MetaValue::U32(x) => w.put(&x.to_le_bytes()),
        MetaValue::I32(x) => w.put(&x.to_le_bytes()),
        MetaValue::U64(x) => w.put(&x.to_le_bytes()),
        MetaValue::I64(x) => w.put(&x.to_le_bytes()),
        MetaValue::F32(x) => w.put(&x.to_le_bytes()),
        MetaValue::F64(x) => w.put(&x.to_le_bytes()),
        MetaValue::Bool(x) => w.put(&[u8::from(*x)]),
        MetaValue::String(s) => w.put_str(s),
        MetaValue::Array(a) => write_array(w, a),
    }
}

/// Writes an array's header (element type, count) and its elements.
fn write_array<W: Write>(w: &mut Counting<W>, a: &MetaArray) -> io::Result<()> {
    w.put(&a.elem_type().id().to_le_bytes())?;
    w.put(&(a.len() as u64).to_le_bytes())?;
    if let Some(bytes) = a.scalar_bytes() {
        return w.put(bytes);
    }
    if let Some(mut strings) = a.strs() {
        return strings.try_for_each(|s| w.put_str(s));
    }
    a.arrays().unwrap_or_default().iter().try_for_each(|inner| write_array(w, inner))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gguf::{MetaArrayTypeMismatch, MetaType};

    #[test]
    fn layout_matches_the_bytes() {
        let mut w = GgufWriter::new();
        w.add_str("general.architecture", "llama").expect("new key");
        w.add_f32_tensor("a", &[3], &[1.0, 2.0, 3.0]).expect("valid");
        w.add_f32_tensor("b", &[2, 1], &[4.0, 5.0]).expect("valid");
        let (bytes, layout) = w.to_bytes_with_layout();
        assert_eq!(layout.file_len, bytes.len() as u64);
        assert_eq!(&bytes[..4], b"GGUF");
        assert_eq!(layout.kv[0].start, 24);
        assert_eq!(layout.data_offset % 32, 0);
        assert_eq!(layout.tensors[1].data.start - layout.data_offset, 32);
        let at = layout.tensors[1].data.start as usize;
        assert_eq!(&bytes[at..at + 4], &4.0f32.to_le_bytes());
        assert_eq!(bytes.len() % 32, 0);
    }

    /// Metadata (with a 64-byte alignment) and tensors of sizes that need padding, one empty.
    fn sample(streamed: &[bool]) -> (GgufWriter, Vec<Vec<u8>>) {
        let mut w = GgufWriter::new();
        w.add_str("general.architecture", "llama").expect("new key");
        w.add_u32("general.alignment", 64).expect("power of two");
        w.add("arr", MetaArray::of_i32([1, -2, 3])).expect("new key");
        let tensors: [(&str, DType, Vec<u64>); 4] = [
            ("a", DType::F32, vec![3]),
            ("b", DType::Q8_0, vec![64, 3]),
            ("empty", DType::F16, vec![0]),
            ("c", DType::F16, vec![5, 1, 1]),
        ];
        let mut data = Vec::new();
        for (i, ((name, dtype, ne), &stream)) in tensors.iter().zip(streamed).enumerate() {
            let n = dtype.tensor_bytes((ne.iter().product::<u64>() / ne[0].max(1)) as usize, ne[0] as usize);
            let bytes: Vec<u8> = (0..n.expect("small")).map(|k| (k * 7 + i) as u8).collect();
            if stream {
                let expected = w.add_tensor_info(name, *dtype, ne).expect("valid");
                assert_eq!(expected, bytes.len());
            } else {
                w.add_tensor(name, *dtype, ne, bytes.clone()).expect("valid");
            }
            data.push(bytes);
        }
        (w, data)
    }

    #[test]
    fn streamed_tensors_give_the_same_file_as_in_memory_ones() {
        let (whole, _) = sample(&[false; 4]);
        let (expected, expected_layout) = whole.to_bytes_with_layout();
        assert_eq!(expected_layout.data_offset % 64, 0);
        for streamed in [[true; 4], [true, false, true, false], [false, true, false, true], [false, false, true, true]]
        {
            let (w, data) = sample(&streamed);
            let mut out = Vec::new();
            let mut s = w.stream_to(&mut out).expect("header");
            for (bytes, &stream) in data.iter().zip(&streamed) {
                if stream {
                    // In uneven pieces, with an empty write between.
                    let (head, tail) = bytes.split_at(bytes.len() / 3);
                    s.write_tensor_data(head).expect("fits");
                    s.write_tensor_data(&[]).expect("nothing");
                    s.write_tensor_data(tail).expect("fits");
                }
            }
            assert_eq!(s.pending(), None);
            let (_, layout) = s.finish().expect("complete");
            assert_eq!(out, expected, "{streamed:?}");
            assert_eq!(layout, expected_layout, "{streamed:?}");
        }
    }

    #[test]
    fn streams_refuse_wrong_sizes_and_stay_usable() {
        let (w, data) = sample(&[true; 4]);
        let mut out = Vec::new();
        let mut s = w.stream_to(&mut out).expect("header");
        assert_eq!(s.pending(), Some(("a", 12)));
        s.write_tensor_data(&data[0][..4]).expect("fits");
        let e = s.write_tensor_data(&[0; 9]).expect_err("one byte too many");
        assert!(matches!(e, GgufWriteError::TensorDataOverrun { ref name, expected: 12, got: 13 } if name == "a"));
        assert_eq!(e.to_string(), "tensor 'a' needs 12 bytes, but 13 were streamed to it");
        assert_eq!(s.pending(), Some(("a", 8)), "a refused write writes nothing");
        s.write_tensor_data(&data[0][4..]).expect("fits");
        assert_eq!(s.pending(), Some(("b", 2 * 34 * 3)));
        let e = s.finish().expect_err("b, empty and c are missing");
        assert!(matches!(e, GgufWriteError::TensorDataMissing { ref name, got: 0, .. } if name == "b"));

        let (w, data) = sample(&[true; 4]);
        let mut s = w.stream_to(Vec::new()).expect("header");
        for bytes in &data {
            s.write_tensor_data(bytes).expect("exact");
        }
        assert!(matches!(s.write_tensor_data(&[1]), Err(GgufWriteError::NoTensorPending { got: 1 })));
        s.write_tensor_data(&[]).expect("nothing to write is fine");
        let (bytes, layout) = s.finish().expect("complete");
        assert_eq!(bytes.len() as u64, layout.file_len);

        // The in-memory writers cannot write a tensor that has no bytes.
        let e = w.write_with_layout(Vec::new()).expect_err("a has no bytes");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("tensor 'a' needs 12 bytes, but only 0"), "{e}");
        assert!(w.to_bytes().is_empty());
    }

    /// Accepts `room` bytes, then fails every write.
    struct Full {
        room: usize,
    }

    impl Write for Full {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::other("disk full"));
            }
            let n = buf.len().min(self.room);
            self.room -= n;
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn an_io_error_breaks_the_stream_for_good() {
        let (w, data) = sample(&[true; 4]);
        assert!(matches!(w.stream_to(Full { room: 10 }), Err(GgufWriteError::Stream { .. })));
        assert_eq!(w.to_bytes_with_layout().1.file_len, 0, "no in-memory image");
        let mut s = w.stream_to(Full { room: 400 }).expect("the header fits");
        s.write_tensor_data(&data[0]).expect("fits");
        let e = s.write_tensor_data(&data[1]).expect_err("the disk fills up");
        assert!(e.to_string().contains("disk full"), "{e}");
        let e = s.write_tensor_data(&data[1][..1]).expect_err("broken");
        assert!(e.to_string().contains("an earlier write"), "{e}");
        assert!(matches!(s.finish(), Err(GgufWriteError::Stream { .. })));
    }

    #[test]
    fn refuses_what_the_reader_would_reject() {
        let mut w = GgufWriter::new();
        w.add_u32("k", 1).expect("new key");
        assert!(matches!(w.add_u32("k", 2), Err(GgufWriteError::DuplicateKey { .. })));
        assert!(matches!(w.add("general.alignment", 3u32), Err(GgufWriteError::BadAlignment { .. })));
        assert!(matches!(w.add("general.alignment", 64u64), Err(GgufWriteError::BadAlignment { .. })));
        let bad = MetaArray::new(MetaType::U8, vec![MetaValue::U8(1), MetaValue::I8(2)]);
        let mismatch = MetaArrayTypeMismatch { index: 1, expected: MetaType::U8, found: MetaType::I8 };
        assert_eq!(bad, Err(mismatch));
        let strings = MetaArray::new(MetaType::String, vec!["a".into(), MetaValue::Array(MetaArray::of_u32([1]))]);
        assert_eq!(
            strings.map_err(|e| e.to_string()),
            Err("array element 1 is array, but the array holds string".into())
        );
        assert!(matches!(
            w.add_tensor("t", DType::TQ2_0, &[100, 2], vec![0; 132]),
            Err(GgufWriteError::NotWholeBlocks { ne0: 100, block_len: 256, .. })
        ));
        assert!(matches!(
            w.add_tensor("t", DType::F16, &[4], vec![0; 7]),
            Err(GgufWriteError::SizeMismatch { expected: 8, .. })
        ));
        assert!(matches!(
            w.add_tensor("t", DType::U32, &[4], vec![0; 16]),
            Err(GgufWriteError::UnstorableDType { .. })
        ));
        assert!(matches!(
            w.add_tensor("t", DType::F32, &[1; 5], vec![0; 4]),
            Err(GgufWriteError::BadDims { n_dims: 5, .. })
        ));
        assert!(matches!(
            w.add_tensor(&"x".repeat(64), DType::F32, &[1], vec![0; 4]),
            Err(GgufWriteError::NameTooLong { len: 64, .. })
        ));
        assert!(matches!(
            w.add_tensor("t", DType::F32, &[u64::MAX, 2], Vec::new()),
            Err(GgufWriteError::TooLarge { .. })
        ));
        assert!(matches!(
            w.add_tensor_info("t", DType::TQ2_0, &[100, 2]),
            Err(GgufWriteError::NotWholeBlocks { ne0: 100, block_len: 256, .. })
        ));
        w.add_tensor("t", DType::I2_S, &[128, 2], vec![0; 64 + 32]).expect("I2_S carries a 32-byte trailer");
        assert!(matches!(w.add_tensor_info("t", DType::F32, &[1]), Err(GgufWriteError::DuplicateTensor { .. })));
        assert_eq!(w.add_tensor_info("u", DType::I2_S, &[128, 2]).expect("valid"), 64 + 32);
        assert!(matches!(w.add_tensor("t", DType::F32, &[1], vec![0; 4]), Err(GgufWriteError::DuplicateTensor { .. })));
        assert!(matches!(w.set_version(1), Err(GgufWriteError::BadVersion { version: 1 })));
    }
}
