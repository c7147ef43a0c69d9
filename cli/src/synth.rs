//! `purebee-rs synth`: writes a synthetic BitNet b1.58 model, for benchmarks and tests that
//! need a model of a real shape without downloading one.
//!
//! `--shape bitnet-2b` is BitNet-b1.58-2B-4T's shape (docs/formats.md § BitNet b1.58),
//! `--shape tiny` the committed tiny fixtures'. The model is [`purebee_synth`]'s
//! [`ModelSpec::bitnet`]: the fixtures' tensor names, order and metadata keys (architecture
//! `bitnet-b1.58`), an F16 embedding tied to the head, I2_S, TQ2_0 or TQ1_0 linear weights
//! (`--weights`), a byte-level vocabulary, plus `general.synthetic = true` and
//! `synthetic.seed`. The same seed gives the same bytes on every platform.
//!
//! **Writing.** The writer holds the tensors in memory (about 1.18 GB for the 2B shape, once)
//! and streams them to a temporary file beside `--out`, which is renamed onto `--out` only
//! once it is complete and synced; on failure the temporary file is removed, so no
//! half-written model is left.

use std::borrow::Cow;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, ValueEnum};
use purebee_hub::{write_atomically, AtomicWriteError};
use purebee_memory::gguf::GgufWriter;
use purebee_memory::DType;
use purebee_synth::{build, plan, ModelShape, ModelSpec, PlannedTensor, BITNET_2B, TINY};

use crate::CliError;

/// Which shape to synthesise.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ShapeChoice {
    /// BitNet-b1.58-2B-4T: vocab 128256, dim 2560, 30 layers, 20/5 heads, ffn 6912.
    #[value(name = "bitnet-2b")]
    Bitnet2b,
    /// The tiny fixtures' shape: vocab 8192, dim 256, 4 layers, 8/2 heads, ffn 512.
    Tiny,
}

impl ShapeChoice {
    /// The shape's hyper-parameters.
    pub fn shape(self) -> &'static ModelShape {
        match self {
            ShapeChoice::Bitnet2b => &BITNET_2B,
            ShapeChoice::Tiny => &TINY,
        }
    }
}

/// The storage type of the linear weights.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum WeightFormat {
    /// bitnet.cpp's I2_S (2 bits per weight, one f32 scale per tensor).
    #[value(name = "i2_s")]
    I2S,
    /// ggml's TQ2_0 (2 bits per weight, an f16 scale per 256).
    #[value(name = "tq2_0")]
    Tq2_0,
    /// ggml's TQ1_0 (1.6875 bits per weight, an f16 scale per 256).
    #[value(name = "tq1_0")]
    Tq1_0,
}

impl WeightFormat {
    /// The dtype of the linear weights.
    pub fn dtype(self) -> DType {
        match self {
            WeightFormat::I2S => DType::I2_S,
            WeightFormat::Tq2_0 => DType::TQ2_0,
            WeightFormat::Tq1_0 => DType::TQ1_0,
        }
    }
}

// ---- The command ------------------------------------------------------------------------------

/// Arguments of `synth`.
#[derive(Debug, Args)]
pub struct SynthArgs {
    /// The model shape.
    #[arg(long, value_enum)]
    pub shape: ShapeChoice,
    /// The storage type of the linear weights.
    #[arg(long, value_enum, default_value = "i2_s")]
    pub weights: WeightFormat,
    /// The seed of every random value; the same seed gives the same file, byte for byte.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// The GGUF file to write (replaced if it exists).
    #[arg(long)]
    pub out: PathBuf,
    /// The number of layers instead of the shape's own. The tiny shape at the 2B's 30
    /// layers has the 2B's dispatches per token with almost none of its work: what an
    /// engine costs per dispatch, apart from the bytes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub layers: Option<u32>,
}

/// What went wrong writing a synthetic model.
#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    /// The builder refused the model (a bug of the spec, not of any input).
    #[error(transparent)]
    Build(#[from] purebee_synth::SynthError),
    /// Writing or renaming the output failed.
    #[error("--out {path}: {reason}")]
    Write {
        /// The `--out` file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
}

/// Writes `w` to `out` through a temporary file renamed onto it; returns the file's length.
fn write_model(w: &GgufWriter, out: &Path) -> Result<u64, SynthError> {
    let fail = |reason: String| SynthError::Write { path: out.to_path_buf(), reason };
    if out.file_name().is_none() {
        return Err(fail("is not a file name".to_string()));
    }
    write_atomically(out, |file| {
        let mut buffered = std::io::BufWriter::new(&mut *file);
        w.write_to(&mut buffered).and_then(|()| buffered.flush()).map_err(|e| fail(e.to_string()))?;
        drop(buffered);
        file.metadata().map(|m| m.len()).map_err(|e| fail(e.to_string()))
    })
}

impl From<AtomicWriteError> for SynthError {
    fn from(e: AtomicWriteError) -> SynthError {
        SynthError::Write { path: e.path, reason: format!("cannot {}: {}", e.action, e.source) }
    }
}

/// A byte count for people: exact, then in MiB or GiB.
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (mib, gib) = (self.0 as f64 / f64::from(1u32 << 20), self.0 as f64 / f64::from(1u32 << 30));
        if gib >= 1.0 {
            write!(f, "{} bytes ({gib:.2} GiB)", self.0)
        } else {
            write!(f, "{} bytes ({mib:.2} MiB)", self.0)
        }
    }
}

/// Runs `synth`: builds the model and writes it, with a summary on `out`.
pub fn run(args: &SynthArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let mut shape = args.shape.shape().clone();
    if let Some(layers) = args.layers {
        shape.n_layer = layers as usize;
        shape.name = Cow::Owned(format!("{}-{layers}-layers", shape.name));
    }
    let shape = &shape;
    // Fail before building (seconds for the 2B shape) when the output cannot be written.
    let dir = match args.out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !dir.is_dir() {
        let reason = format!("the directory {} does not exist", dir.display());
        return Err(SynthError::Write { path: args.out.clone(), reason }.into());
    }
    let start = Instant::now();
    let spec = ModelSpec::bitnet(shape.clone(), args.weights.dtype());
    let w = build(&spec, args.seed).map_err(SynthError::Build)?;
    let file_len = write_model(&w, &args.out)?;
    let planned = plan(&spec);
    let parameters: usize = planned.iter().map(PlannedTensor::n_elements).sum();
    let tensor_bytes: usize = planned.iter().filter_map(PlannedTensor::n_bytes).sum();
    writeln!(
        out,
        "wrote {}: {}, {} layers ({}), {} tensors, {parameters} parameters, {tensor_bytes} bytes of tensor data, file {}, seed {}, in {:.1} s",
        args.out.display(),
        shape.name,
        shape.n_layer,
        args.weights.dtype(),
        planned.len(),
        Bytes(file_len),
        args.seed,
        start.elapsed().as_secs_f64()
    )?;
    Ok(())
}
