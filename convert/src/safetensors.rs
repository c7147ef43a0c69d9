//! Reading safetensors files without copying them: a checkpoint's `model.safetensors`, or the
//! shards a `model.safetensors.index.json` lists.
//!
//! The format: a u64 little-endian header length N, N bytes of JSON
//! (`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}}`), then
//! the data; offsets count from the data's start. Each file is mapped (its pages are read as
//! the conversion reaches them, and count as the page cache's, not the process's), and
//! everything is checked at open: the header's size and JSON, each tensor's dtype, the byte
//! count of its shape, and its range inside the file.

use std::collections::HashMap;
use std::ops::Range;
use std::path::{Path, PathBuf};

use purebee_memory::gguf::{map_path, GuardedMap};
use serde_json::Value;

use crate::ConvertError;

/// The largest header accepted (the safetensors library's own limit is 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100 << 20;

/// The element types a checkpoint's tensors may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    BF16,
    /// Bytes (the packed ternary weights of BitNet's released checkpoint).
    U8,
}

impl StDtype {
    fn parse(name: &str) -> Option<StDtype> {
        Some(match name {
            "F32" => StDtype::F32,
            "F16" => StDtype::F16,
            "BF16" => StDtype::BF16,
            "U8" => StDtype::U8,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            StDtype::F32 => 4,
            StDtype::F16 | StDtype::BF16 => 2,
            StDtype::U8 => 1,
        }
    }

    /// Element `i` of `bytes` as f32 (exact for every float type; a byte as its value).
    pub fn get(self, bytes: &[u8], i: usize) -> f32 {
        let b = |k: usize| bytes[i * self.size() + k];
        match self {
            StDtype::F32 => f32::from_le_bytes([b(0), b(1), b(2), b(3)]),
            StDtype::F16 => half::f16::from_le_bytes([b(0), b(1)]).to_f32(),
            StDtype::BF16 => half::bf16::from_le_bytes([b(0), b(1)]).to_f32(),
            StDtype::U8 => f32::from(b(0)),
        }
    }

    /// `v` rounded to this type (to nearest, ties to even) and back: the value the
    /// checkpoint's own dtype holds. The identity for F32 and U8.
    pub fn round(self, v: f32) -> f32 {
        match self {
            StDtype::F16 => half::f16::from_f32(v).to_f32(),
            StDtype::BF16 => half::bf16::from_f32(v).to_f32(),
            StDtype::F32 | StDtype::U8 => v,
        }
    }
}

/// One tensor of a safetensors file.
#[derive(Clone, Debug)]
pub struct StTensor {
    /// Its name in the checkpoint.
    pub name: String,
    /// Its element type.
    pub dtype: StDtype,
    /// Its dims, outermost first (a weight is `[out, in]`).
    pub shape: Vec<usize>,
    /// Its bytes in the file.
    range: Range<usize>,
}

impl StTensor {
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
}

/// One mapped safetensors file and its tensors.
pub struct SafetensorsFile {
    path: PathBuf,
    map: GuardedMap,
    tensors: Vec<StTensor>,
}

impl SafetensorsFile {
    /// Maps and checks the file at `path`.
    pub fn open(path: &Path) -> Result<SafetensorsFile, ConvertError> {
        let map = map_path(path).map_err(|source| ConvertError::Io { path: path.to_path_buf(), source })?;
        let bad = |reason: String| ConvertError::Safetensors { path: path.to_path_buf(), reason };
        let Some(len_bytes) = map.get(..8) else {
            return Err(bad(format!("{} bytes: too short for a header length", map.len())));
        };
        let header_len = u64::from_le_bytes(len_bytes.try_into().unwrap_or([0; 8]));
        if header_len > MAX_HEADER_BYTES {
            return Err(bad(format!("the header claims {header_len} bytes (at most {MAX_HEADER_BYTES})")));
        }
        let data_start = 8 + header_len as usize;
        let Some(header) = map.get(8..data_start) else {
            return Err(bad(format!("the header claims {header_len} bytes but the file has {}", map.len())));
        };
        let json: Value = serde_json::from_slice(header).map_err(|e| bad(format!("the header is not JSON: {e}")))?;
        let Value::Object(entries) = json else { return Err(bad("the header is not a JSON object".to_string())) };
        let data_len = map.len() - data_start;
        let mut tensors = Vec::with_capacity(entries.len());
        for (name, entry) in entries {
            if name == "__metadata__" {
                continue;
            }
            tensors
                .push(tensor(&name, &entry, data_start, data_len).map_err(|r| bad(format!("tensor '{name}': {r}")))?);
        }
        tensors.sort_by_key(|t| t.range.start);
        for pair in tensors.windows(2) {
            if pair[1].range.start < pair[0].range.end {
                return Err(bad(format!("tensors '{}' and '{}' overlap", pair[0].name, pair[1].name)));
            }
        }
        Ok(SafetensorsFile { path: path.to_path_buf(), map, tensors })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Its tensors, in file order.
    pub fn tensors(&self) -> &[StTensor] {
        &self.tensors
    }

    /// A tensor's bytes.
    pub fn bytes(&self, t: &StTensor) -> &[u8] {
        &self.map[t.range.clone()]
    }
}

/// Parses and checks one header entry.
fn tensor(name: &str, entry: &Value, data_start: usize, data_len: usize) -> Result<StTensor, String> {
    let dtype_name = entry.get("dtype").and_then(Value::as_str).ok_or("no \"dtype\" string")?;
    let dtype =
        StDtype::parse(dtype_name).ok_or(format!("dtype {dtype_name} is not supported (F32, F16, BF16, U8)"))?;
    let shape = entry.get("shape").and_then(Value::as_array).ok_or("no \"shape\" array")?;
    let shape: Vec<usize> = shape
        .iter()
        .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
        .collect::<Option<_>>()
        .ok_or("a dim is not a count")?;
    let offsets = entry.get("data_offsets").and_then(Value::as_array).ok_or("no \"data_offsets\" array")?;
    let [begin, end] = offsets.as_slice() else { return Err("\"data_offsets\" is not [begin, end]".to_string()) };
    let (Some(begin), Some(end)) = (begin.as_u64(), end.as_u64()) else {
        return Err("an offset is not a count".to_string());
    };
    let numel = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d)).ok_or("its shape overflows")?;
    let want = numel.checked_mul(dtype.size()).ok_or("its shape overflows")? as u64;
    if end < begin || end - begin != want {
        return Err(format!(
            "offsets {begin}..{end} hold {} bytes but shape {shape:?} of {dtype_name} needs {want}",
            end.saturating_sub(begin)
        ));
    }
    if end > data_len as u64 {
        return Err(format!(
            "its bytes {begin}..{end} run past the data's end ({data_len} bytes): the file is truncated"
        ));
    }
    Ok(StTensor { name: name.to_string(), dtype, shape, range: data_start + begin as usize..data_start + end as usize })
}

/// A checkpoint's tensors across its files.
pub struct Checkpoint {
    files: Vec<SafetensorsFile>,
    /// Name → (file, tensor in that file).
    by_name: HashMap<String, (usize, usize)>,
}

impl Checkpoint {
    /// Opens `dir/model.safetensors`, or the shards `dir/model.safetensors.index.json` lists.
    pub fn open(dir: &Path) -> Result<Checkpoint, ConvertError> {
        let single = dir.join("model.safetensors");
        let index = dir.join("model.safetensors.index.json");
        let (files, expected) = if index.exists() {
            let (names, map) = read_index(&index)?;
            let mut files = Vec::with_capacity(names.len());
            for n in &names {
                let path = dir.join(n);
                if !path.exists() {
                    return Err(ConvertError::Missing { path, why: format!("a shard {} lists", index.display()) });
                }
                files.push(SafetensorsFile::open(&path)?);
            }
            (files, Some((index, map)))
        } else if single.exists() {
            (vec![SafetensorsFile::open(&single)?], None)
        } else {
            return Err(ConvertError::Missing {
                path: single,
                why: "no model.safetensors nor model.safetensors.index.json in the folder".to_string(),
            });
        };
        let mut by_name = HashMap::new();
        for (f, file) in files.iter().enumerate() {
            for (t, tensor) in file.tensors.iter().enumerate() {
                if by_name.insert(tensor.name.clone(), (f, t)).is_some() {
                    return Err(ConvertError::Tensor {
                        path: file.path.clone(),
                        tensor: tensor.name.clone(),
                        reason: "stored twice".to_string(),
                    });
                }
            }
        }
        if let Some((index, map)) = expected {
            for (name, file) in &map {
                let Some(&(f, _)) = by_name.get(name) else {
                    return Err(ConvertError::Tensor {
                        path: dir.join(file),
                        tensor: name.clone(),
                        reason: format!("{} lists it in this shard, which does not hold it", index.display()),
                    });
                };
                if files[f].path != dir.join(file) {
                    return Err(ConvertError::Tensor {
                        path: files[f].path.clone(),
                        tensor: name.clone(),
                        reason: format!("{} says it is in {file}", index.display()),
                    });
                }
            }
        }
        Ok(Checkpoint { files, by_name })
    }

    /// The tensor named `name`, with the file that holds it.
    pub fn get(&self, name: &str) -> Option<(&SafetensorsFile, &StTensor)> {
        self.by_name.get(name).map(|&(f, t)| (&self.files[f], &self.files[f].tensors[t]))
    }

    /// Every tensor's name.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }

    /// The file holding `name`, or the first file (for errors about the checkpoint).
    pub fn path_of(&self, name: &str) -> PathBuf {
        match self.get(name) {
            Some((f, _)) => f.path.clone(),
            None => self.files.first().map(|f| f.path.clone()).unwrap_or_default(),
        }
    }
}

/// The shard files (in order of first appearance) and the name → file map of an index.
fn read_index(index: &Path) -> Result<(Vec<String>, HashMap<String, String>), ConvertError> {
    let json = crate::json::read(index)?;
    let bad = |reason: &str| ConvertError::Json { path: index.to_path_buf(), reason: reason.to_string() };
    let map = json.get("weight_map").and_then(Value::as_object).ok_or_else(|| bad("no \"weight_map\" object"))?;
    let mut names: Vec<String> = Vec::new();
    let mut by_tensor = HashMap::with_capacity(map.len());
    for (tensor, file) in map {
        let file = file.as_str().ok_or_else(|| bad(&format!("weight_map.{tensor} is not a file name")))?;
        if file.contains('/') || file.contains('\\') || file == ".." {
            return Err(bad(&format!("weight_map.{tensor}: '{file}' is not a file in the folder")));
        }
        if !names.iter().any(|n| n == file) {
            names.push(file.to_string());
        }
        by_tensor.insert(tensor.clone(), file.to_string());
    }
    Ok((names, by_tensor))
}
