//! `purebee-rs quantize IN OUT --embedding q8_0`: rewrites a GGUF file with its token
//! embedding stored as Q8_0, as llama.cpp's `llama-quantize --token-embedding-type q8_0`
//! stores it.
//!
//! `token_embd.weight` (also the LM head of a model without `output.weight`) is the one
//! tensor that changes: an F32, F16 or BF16 embedding is quantized row by row with
//! [`encode_q8_0_row`] (ggml's `quantize_row_q8_0_ref`, bit for bit); one already Q8_0 is
//! copied as is; any other type (ternary, Q4_x) is refused, as is a row length that is not a
//! multiple of 32. Everything else is kept: the GGUF version, every metadata entry in its
//! order (so `general.alignment` and the alignment it sets), the tensor order, names, dims and
//! every other tensor's bytes. Offsets are recomputed by [`GgufWriter`] (each tensor at the
//! padded end of the last, as llama.cpp and gguf-py lay them out).
//!
//! **Streaming.** Only the header is built in memory: the tensors are declared with
//! [`GgufWriter::add_tensor_info`], and their bytes go to a [`GgufStreamWriter`] one tensor
//! at a time (the embedding one row at a time) straight from the memory-mapped input, through
//! a 1 MiB buffer. The output is written to `OUT.partial-<pid>` beside `OUT`, synced and
//! renamed onto `OUT`; on any error the temporary file is removed, so `OUT` is either the
//! complete new file or untouched. Writing over the input is refused.

use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use purebee_hub::{write_atomically, AtomicWriteError};
use purebee_memory::gguf::{GgufError, GgufFile, GgufStreamWriter, GgufWriteError, GgufWriter, TensorInfo};
use purebee_memory::quant::encode::{encode_q8_0_row, EncodeError};
use purebee_memory::quant::{QuantError, QuantMatrix};
use purebee_memory::DType;

use crate::synth::Bytes;
use crate::CliError;

/// The token embedding's name.
pub const EMBEDDING: &str = "token_embd.weight";

/// The LM head's name; without it the embedding is the (tied) LM head.
const LM_HEAD: &str = "output.weight";

/// The output buffer's size.
const BUFFER_BYTES: usize = 1 << 20;

/// The storage type asked for the token embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmbeddingType {
    /// ggml's Q8_0: 32 values in 34 bytes (one f16 scale, 32 signed 8-bit codes).
    #[value(name = "q8_0")]
    Q8_0,
}

impl EmbeddingType {
    /// The dtype it stands for.
    pub fn dtype(self) -> DType {
        match self {
            EmbeddingType::Q8_0 => DType::Q8_0,
        }
    }
}

/// Arguments of `quantize`.
#[derive(Debug, Args)]
pub struct QuantizeArgs {
    /// The GGUF file to read.
    pub input: PathBuf,
    /// The GGUF file to write (replaced if it exists; it must not be the input).
    pub output: PathBuf,
    /// The storage type of token_embd.weight (also the LM head when there is no output.weight).
    #[arg(long, value_enum)]
    pub embedding: EmbeddingType,
}

/// Why `quantize` could not write its output. Errors of the input file itself are
/// [`GgufError`]s, which name the file.
#[derive(Debug, thiserror::Error)]
pub enum QuantizeError {
    /// The output path is (or resolves to) the input file.
    #[error("{}: the output is the input file ({}); write the result to another path", output.display(), input.display())]
    SameFile {
        /// The input path.
        input: PathBuf,
        /// The output path.
        output: PathBuf,
    },
    /// The output path is a directory or has no file name.
    #[error("{}: the output must be a file path, not a directory", path.display())]
    NotAFile {
        /// The output path.
        path: PathBuf,
    },
    /// The input has no token embedding.
    #[error("{}: no tensor named '{tensor}' to quantize", path.display())]
    MissingTensor {
        /// The input file.
        path: PathBuf,
        /// The tensor looked for.
        tensor: &'static str,
    },
    /// The embedding's type cannot be quantized to the target.
    #[error("{}: tensor '{tensor}' is {dtype}, which cannot be quantized to {target}: only F32, F16 and BF16 can (a {target} tensor is copied as is)", path.display())]
    UnsupportedType {
        /// The input file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its type.
        dtype: DType,
        /// The type asked for.
        target: DType,
    },
    /// The embedding's rows are not whole blocks of the target type.
    #[error("{}: tensor '{tensor}' has rows of {ne0} values, not a multiple of {target}'s block of {block_len}", path.display())]
    NotWholeBlocks {
        /// The input file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// Its row length.
        ne0: usize,
        /// The type asked for.
        target: DType,
        /// That type's block length.
        block_len: usize,
    },
    /// The writer refused the input's metadata or a tensor info (for example a
    /// `general.alignment` stored as another type than u32).
    #[error("{}: cannot be rewritten: {source}", path.display())]
    Header {
        /// The input file.
        path: PathBuf,
        /// The writer's error.
        #[source]
        source: GgufWriteError,
    },
    /// Decoding or encoding the embedding failed.
    #[error("{}: tensor '{tensor}': {reason}", path.display())]
    Convert {
        /// The input file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// What the decoder or encoder said.
        reason: String,
    },
    /// Writing the GGUF stream failed.
    #[error("{}: {source}", path.display())]
    Stream {
        /// The output file.
        path: PathBuf,
        /// The writer's error.
        #[source]
        source: GgufWriteError,
    },
    /// A file operation on the output failed.
    #[error("{}: cannot {action}: {source}", path.display())]
    Io {
        /// The output file.
        path: PathBuf,
        /// What was being done (names the temporary file where it applies).
        action: String,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

/// What `quantize` did, printed as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The output file.
    pub output: PathBuf,
    /// The embedding's type in the input.
    pub from: DType,
    /// Its type in the output.
    pub to: DType,
    /// Its bytes in the input.
    pub bytes_before: usize,
    /// Its bytes in the output.
    pub bytes_after: usize,
    /// True when the model has no `output.weight`, so the embedding is also the LM head.
    pub tied: bool,
    /// The output file's size.
    pub file_len: u64,
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{EMBEDDING}")?;
        if self.tied {
            write!(f, " (also the tied LM head)")?;
        }
        write!(f, ": {} → {}", self.from, self.to)?;
        if self.from == self.to {
            write!(f, " (already {}, copied as is)", self.to)?;
        }
        write!(
            f,
            ", {} → {} bytes; wrote {}: {}",
            self.bytes_before,
            self.bytes_after,
            self.output.display(),
            Bytes(self.file_len)
        )
    }
}

/// Runs `quantize`, with the summary on `out`.
pub fn run(args: &QuantizeArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let summary = quantize(&args.input, &args.output, args.embedding)?;
    writeln!(out, "{summary}")?;
    Ok(())
}

/// What happens to the embedding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plan {
    /// Already the target type: copied.
    Copy,
    /// A float type: quantized row by row.
    Quantize,
}

/// Rewrites `input` into `output` with the embedding stored as `target`. See the module docs.
pub fn quantize(input: &Path, output: &Path, target: EmbeddingType) -> Result<Summary, CliError> {
    if same_file(input, output) {
        return Err(QuantizeError::SameFile { input: input.to_path_buf(), output: output.to_path_buf() }.into());
    }
    if output.is_dir() || output.file_name().is_none() {
        return Err(QuantizeError::NotAFile { path: output.to_path_buf() }.into());
    }
    let g = GgufFile::open(input)?;
    let target = target.dtype();
    let path = || g.path().to_path_buf();
    let embd = match g.tensor_info(EMBEDDING) {
        Ok(info) => info,
        Err(GgufError::UnknownTensor { .. }) => {
            return Err(QuantizeError::MissingTensor { path: path(), tensor: EMBEDDING }.into())
        }
        Err(e) => return Err(e.into()),
    };
    let plan = match embd.dtype {
        d if d == target => Plan::Copy,
        DType::F32 | DType::F16 | DType::BF16 => Plan::Quantize,
        dtype => {
            return Err(QuantizeError::UnsupportedType { path: path(), tensor: embd.name.clone(), dtype, target }.into())
        }
    };
    let (ne0, block_len) = (embd.shape.cols(), target.block_len());
    if plan == Plan::Quantize && ne0 % block_len != 0 {
        return Err(
            QuantizeError::NotWholeBlocks { path: path(), tensor: embd.name.clone(), ne0, target, block_len }.into()
        );
    }

    let header = |source| QuantizeError::Header { path: path(), source };
    let mut w = GgufWriter::new();
    w.set_version(g.version()).map_err(header)?;
    for (key, value) in g.metadata() {
        w.add(key, value.clone()).map_err(header)?;
    }
    let mut bytes_after = embd.n_bytes;
    for t in g.tensors() {
        let dtype = if t.name == EMBEDDING { target } else { t.dtype };
        let n_bytes = w.add_tensor_info(&t.name, dtype, &t.ne).map_err(header)?;
        if t.name == EMBEDDING {
            bytes_after = n_bytes;
        }
    }

    let file_len = write_atomically(output, |file| write_data(&g, &w, embd, plan, file, output))?;
    Ok(Summary {
        output: output.to_path_buf(),
        from: embd.dtype,
        to: target,
        bytes_before: embd.n_bytes,
        bytes_after,
        tied: g.tensor_info(LM_HEAD).is_err(),
        file_len,
    })
}

/// Streams the header and every tensor's bytes to `file`; returns the file's length.
fn write_data(
    g: &GgufFile,
    w: &GgufWriter,
    embd: &TensorInfo,
    plan: Plan,
    file: &mut File,
    output: &Path,
) -> Result<u64, QuantizeError> {
    let stream = |source| QuantizeError::Stream { path: output.to_path_buf(), source };
    let mut buffered = BufWriter::with_capacity(BUFFER_BYTES, file);
    let mut s = w.stream_to(&mut buffered).map_err(stream)?;
    for t in g.tensors() {
        if t.name == EMBEDDING && plan == Plan::Quantize {
            quantize_rows(g, embd, &mut s, output)?;
        } else {
            s.write_tensor_data(g.tensor_bytes(t)).map_err(stream)?;
        }
    }
    // `finish` flushes the buffer into the file.
    let (_, layout) = s.finish().map_err(stream)?;
    Ok(layout.file_len)
}

/// Decodes the embedding row by row to f32 and streams each row as Q8_0.
fn quantize_rows<W: Write>(
    g: &GgufFile,
    embd: &TensorInfo,
    s: &mut GgufStreamWriter<'_, W>,
    output: &Path,
) -> Result<(), QuantizeError> {
    let convert =
        |reason: String| QuantizeError::Convert { path: g.path().to_path_buf(), tensor: embd.name.clone(), reason };
    let (rows, cols) = (embd.shape.rows(), embd.shape.cols());
    let m = QuantMatrix::new(embd.dtype, g.tensor_bytes(embd), rows, cols)
        .map_err(|e: QuantError| convert(e.to_string()))?;
    let mut row = vec![0f32; cols];
    for r in 0..rows {
        m.dequantize_row(r, &mut row).map_err(|e| convert(e.to_string()))?;
        let q = encode_q8_0_row(&row).map_err(|e: EncodeError| convert(e.to_string()))?;
        s.write_tensor_data(&q).map_err(|source| QuantizeError::Stream { path: output.to_path_buf(), source })?;
    }
    Ok(())
}

impl From<AtomicWriteError> for QuantizeError {
    fn from(e: AtomicWriteError) -> QuantizeError {
        QuantizeError::Io { path: e.path, action: e.action, source: e.source }
    }
}

/// True when `a` and `b` name the same file: the same path, or the same path once symbolic
/// links, `.` and `..` are resolved (the last component of a path that does not exist yet is
/// taken as is under its resolved directory).
fn same_file(a: &Path, b: &Path) -> bool {
    a == b || matches!((resolve(a), resolve(b)), (Some(x), Some(y)) if x == y)
}

fn resolve(p: &Path) -> Option<PathBuf> {
    if let Ok(c) = fs::canonicalize(p) {
        return Some(c);
    }
    let name = p.file_name()?;
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    fs::canonicalize(dir).ok().map(|d| d.join(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_file_sees_through_spellings_and_links() {
        let dir = tempfile::tempdir().expect("temp dir");
        let a = dir.path().join("a.gguf");
        fs::write(&a, b"x").expect("write");
        assert!(same_file(&a, &a));
        assert!(same_file(&a, &dir.path().join(".").join("a.gguf")));
        fs::create_dir(dir.path().join("sub")).expect("mkdir");
        assert!(same_file(&a, &dir.path().join("sub/../a.gguf")));
        assert!(same_file(&dir.path().join("new.gguf"), &dir.path().join("sub/../new.gguf")));
        assert!(!same_file(&a, &dir.path().join("b.gguf")));
        #[cfg(unix)]
        {
            let link = dir.path().join("link.gguf");
            std::os::unix::fs::symlink(&a, &link).expect("symlink");
            assert!(same_file(&a, &link));
        }
    }

    #[test]
    fn summary_names_the_types_and_sizes() {
        let s = Summary {
            output: PathBuf::from("out.gguf"),
            from: DType::F16,
            to: DType::Q8_0,
            bytes_before: 4096,
            bytes_after: 2176,
            tied: true,
            file_len: 10_000,
        };
        assert_eq!(
            s.to_string(),
            "token_embd.weight (also the tied LM head): F16 → Q8_0, 4096 → 2176 bytes; wrote out.gguf: 10000 bytes (0.01 MiB)"
        );
    }
}
