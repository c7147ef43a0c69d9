//! # purebee-convert: Hugging Face checkpoints to GGUF
//!
//! Turns a checkpoint folder (`config.json`, `model.safetensors` or its sharded index,
//! `tokenizer.json` or `tokenizer.model`, `tokenizer_config.json`) into one GGUF file the
//! runtime runs:
//! BitNet b1.58 (relu², Microsoft's 2B-4T: `bitnet-b1.58`; SiLU, 1bitLLM's: `bitnet`) and
//! Llama. BitNet's projections are ternarized as the model was trained
//! ([`purebee_memory::quant::ternarize`]) and stored as I2_S, TQ2_0, TQ1_0 or floats;
//! BitNet's packed release (four trits a byte and a scale) is unpacked exactly.
//!
//! **Streaming.** The checkpoint's files are mapped, and each tensor goes from its mapped
//! bytes to the output a row at a time, so memory holds about a row whatever the model's
//! size (a ternary projection is read twice: once for its scale, once to write it). The
//! output is written to a temporary file beside it, synced and renamed: a failed
//! conversion leaves nothing at the output path.
//!
//! It must not know engines or the runtime's model: it writes the file the runtime reads,
//! by the names and keys the GGUF format and llama.cpp's converter use.

#![forbid(unsafe_code)]

mod config;
mod error;
mod json;
mod plan;
mod safetensors;
mod sentencepiece;
mod tensors;
mod tokenizer;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use purebee_memory::gguf::GgufWriter;
use purebee_memory::quant::ternarize::Ternarizer;
use purebee_memory::DType;

pub use config::{Arch, HfConfig};
pub use error::ConvertError;
pub use safetensors::{Checkpoint, SafetensorsFile, StDtype, StTensor, MAX_HEADER_BYTES};

use plan::{Planned, Role, Source};
use tensors::Ternary;

/// The type of the projections (`--outtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutType {
    /// bitnet.cpp's I2_S: 2-bit codes, one f32 scale per tensor.
    I2S,
    /// llama.cpp's TQ2_0: 2-bit codes, an f16 scale per 256.
    Tq2_0,
    /// llama.cpp's TQ1_0: 1.6 bits per weight, an f16 scale per 256.
    Tq1_0,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
}

impl OutType {
    /// The GGUF type.
    pub fn dtype(self) -> DType {
        match self {
            OutType::I2S => DType::I2_S,
            OutType::Tq2_0 => DType::TQ2_0,
            OutType::Tq1_0 => DType::TQ1_0,
            OutType::F16 => DType::F16,
            OutType::Bf16 => DType::BF16,
            OutType::F32 => DType::F32,
        }
    }

    /// Whether it stores trits.
    pub fn is_ternary(self) -> bool {
        matches!(self, OutType::I2S | OutType::Tq2_0 | OutType::Tq1_0)
    }
}

/// How to convert.
#[derive(Clone, Debug)]
pub struct Options {
    /// The projections' type.
    pub outtype: OutType,
    /// The token embedding's (and an untied LM head's) type: F16, BF16, F32 or Q8_0.
    /// `None`: F16 under a ternary outtype (as llama.cpp's converter), else the outtype.
    pub embedding: Option<DType>,
    /// Ternarize a Llama model's projections even though they are not ternary. Without it a
    /// ternary outtype applies only to projections whose weights already are (each tensor's
    /// non-zero weights share one magnitude); the others are stored as F16.
    pub force_ternary: bool,
    /// `general.name` (default: the folder's name).
    pub name: Option<String>,
}

/// What a conversion wrote.
#[derive(Clone, Debug)]
pub struct Summary {
    /// The output file.
    pub output: PathBuf,
    /// The GGUF architecture.
    pub arch: &'static str,
    /// Tensors written.
    pub tensors: usize,
    /// How many of them are ternary.
    pub ternary: usize,
    /// The output's size in bytes.
    pub file_len: u64,
}

/// Converts the checkpoint in `dir` to the GGUF file `output`.
pub fn convert(dir: &Path, output: &Path, options: &Options) -> Result<Summary, ConvertError> {
    if output.is_dir() || output.file_name().is_none() {
        return Err(ConvertError::Output { path: output.to_path_buf(), reason: "is not a file name".to_string() });
    }
    let config = HfConfig::read(dir)?;
    let ckpt = Checkpoint::open(dir)?;
    let planned = plan::plan(&config, &ckpt)?;
    let tokenizer = tokenizer::GgufTokenizer::read(dir, config.vocab, config.bos, config.eos)?;

    // Each tensor's type, and each ternary projection's scale (a first pass over it).
    let mut kinds = Vec::with_capacity(planned.len());
    for p in &planned {
        kinds.push(kind(&config, &ckpt, p, options)?);
    }
    let header = |source| ConvertError::Write { path: output.to_path_buf(), source };
    let mut w = GgufWriter::new();
    let name = options
        .name
        .clone()
        .or_else(|| dir.canonicalize().ok().and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned())));
    metadata(&mut w, &config, name.as_deref().unwrap_or("model"), options).map_err(header)?;
    tokenizer.write(&mut w).map_err(header)?;
    for (p, (dtype, _)) in planned.iter().zip(&kinds) {
        let ne: Vec<u64> = p.shape.iter().rev().map(|&d| d as u64).collect();
        w.add_tensor_info(&p.gguf, *dtype, &ne).map_err(header)?;
    }

    let file_len = purebee_hub::write_atomically(output, |file: &mut File| -> Result<u64, ConvertError> {
        let stream = |source| ConvertError::Write { path: output.to_path_buf(), source };
        let mut buffered = BufWriter::with_capacity(1 << 20, file);
        let mut s = w.stream_to(&mut buffered).map_err(stream)?;
        for (p, (dtype, ternary)) in planned.iter().zip(&kinds) {
            tensors::write(&ckpt, p, *dtype, ternary.as_ref(), &mut |bytes| {
                s.write_tensor_data(bytes).map_err(|source| ConvertError::Write { path: output.to_path_buf(), source })
            })?;
        }
        let (_, layout) = s.finish().map_err(stream)?;
        buffered.flush().map_err(|source| ConvertError::Io { path: output.to_path_buf(), source })?;
        Ok(layout.file_len)
    })?;
    Ok(Summary {
        output: output.to_path_buf(),
        arch: config.arch.gguf_name(),
        tensors: planned.len(),
        ternary: kinds.iter().filter(|(_, t)| t.is_some()).count(),
        file_len,
    })
}

/// A tensor's output type and, for a ternary projection, how it is made ternary.
fn kind(
    c: &HfConfig,
    ckpt: &Checkpoint,
    p: &Planned,
    options: &Options,
) -> Result<(DType, Option<Ternary>), ConvertError> {
    let embedding =
        options.embedding.unwrap_or(if options.outtype.is_ternary() { DType::F16 } else { options.outtype.dtype() });
    match p.role {
        Role::Norm => Ok((DType::F32, None)),
        Role::Embedding | Role::LmHead => Ok((embedding, None)),
        Role::Projection => {
            let ternary = match &p.source {
                Source::Packed { scale, .. } => {
                    let (file, t) = ckpt.get(scale).ok_or_else(|| missing(ckpt, scale))?;
                    // transformers' BitLinear divides by weight_scale: the weight is t / scale.
                    let s = t.dtype.get(file.bytes(t), 0);
                    if !(s.is_finite() && s > 0.0) {
                        return Err(ConvertError::Tensor {
                            path: file.path().to_path_buf(),
                            tensor: scale.clone(),
                            reason: format!("{s} is not a positive scale"),
                        });
                    }
                    Some(Ternary::Packed { magnitude: 1.0 / s })
                }
                // A float projection is read once here for its scale, when it may go ternary.
                Source::Float(_) if !c.arch.is_ternary() && !options.outtype.is_ternary() => None,
                Source::Float(name) => {
                    let (file, t) = ckpt.get(name).ok_or_else(|| missing(ckpt, name))?;
                    let bytes = file.bytes(t);
                    let tz = Ternarizer::absmean((0..t.numel()).map(|i| t.dtype.get(bytes, i)));
                    let wanted = c.arch.is_ternary() || options.force_ternary || tz.kept.is_some();
                    wanted.then_some(Ternary::Absmean(tz, t.dtype))
                }
            };
            let dtype = match (&ternary, options.outtype.is_ternary()) {
                (None, true) => DType::F16,
                _ => options.outtype.dtype(),
            };
            Ok((dtype, ternary))
        }
    }
}

fn missing(ckpt: &Checkpoint, name: &str) -> ConvertError {
    ConvertError::Tensor { path: ckpt.path_of(name), tensor: name.to_string(), reason: "vanished".to_string() }
}

/// The `general.*` and architecture keys (as llama.cpp's converter writes them).
fn metadata(
    w: &mut GgufWriter,
    c: &HfConfig,
    name: &str,
    options: &Options,
) -> Result<(), purebee_memory::gguf::GgufWriteError> {
    let a = c.arch.gguf_name();
    let key = |k: &str| format!("{a}.{k}");
    w.add_str("general.architecture", a)?;
    w.add_str("general.type", "model")?;
    w.add_str("general.name", name)?;
    if let Some(ft) = options.outtype.dtype().llama_file_type() {
        w.add_u32("general.file_type", ft)?;
    }
    if options.outtype.is_ternary() || options.embedding == Some(DType::Q8_0) {
        w.add_u32("general.quantization_version", 2)?;
    }
    let u = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    w.add_u32(&key("context_length"), u(c.context))?;
    w.add_u32(&key("embedding_length"), u(c.hidden))?;
    w.add_u32(&key("block_count"), u(c.layers))?;
    w.add_u32(&key("feed_forward_length"), u(c.ff))?;
    w.add_u32(&key("attention.head_count"), u(c.heads))?;
    w.add_u32(&key("attention.head_count_kv"), u(c.kv_heads))?;
    w.add_u32(&key("rope.dimension_count"), u(c.head_dim()))?;
    w.add_f32(&key("rope.freq_base"), c.rope_theta)?;
    w.add_f32(&key("attention.layer_norm_rms_epsilon"), c.rms_eps)?;
    w.add_u32(&key("vocab_size"), u(c.vocab))?;
    if c.arch.is_ternary() {
        // llama.cpp's BitNet converter writes a linear scaling of 1 (no scaling).
        w.add_str(&key("rope.scaling.type"), "linear")?;
        w.add_f32(&key("rope.scaling.factor"), 1.0)?;
    }
    Ok(())
}
