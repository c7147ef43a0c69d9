//! `purebee-rs convert DIR --outtype i2_s|tq2_0|tq1_0|f16|bf16|f32 [--outfile FILE]
//! [--embedding f16|q8_0]`: a Hugging Face checkpoint folder (safetensors, config.json,
//! tokenizer.json) to one GGUF file ([`purebee_convert`]).
//!
//! Without `--outfile` the file is written beside the folder as `DIR-OUTTYPE.gguf`.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use purebee_convert::{Options, OutType};
use purebee_memory::DType;

use crate::synth::Bytes;
use crate::CliError;

/// `convert`'s arguments.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The checkpoint folder: config.json, model.safetensors (or
    /// model.safetensors.index.json and its shards), tokenizer.json, tokenizer_config.json.
    pub dir: PathBuf,
    /// The type of the projections. BitNet's are ternarized as the model was trained
    /// (absmean scale, round, clip) whatever the type; a Llama model's only when they are
    /// ternary already (or with --force-ternary).
    #[arg(long, value_enum)]
    pub outtype: OutArg,
    /// The output file (default: DIR-OUTTYPE.gguf beside the folder).
    #[arg(long)]
    pub outfile: Option<PathBuf>,
    /// The token embedding's type (default: f16 for ternary outtypes, else the outtype).
    #[arg(long, value_enum)]
    pub embedding: Option<EmbeddingArg>,
    /// Ternarize a Llama model's projections even though they are not ternary.
    #[arg(long)]
    pub force_ternary: bool,
}

/// `--outtype`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum OutArg {
    /// bitnet.cpp's I2_S (2 bits, one scale per tensor).
    #[value(name = "i2_s")]
    I2S,
    /// llama.cpp's TQ2_0 (2 bits, an f16 scale per 256).
    #[value(name = "tq2_0")]
    Tq2_0,
    /// llama.cpp's TQ1_0 (1.6 bits, an f16 scale per 256).
    #[value(name = "tq1_0")]
    Tq1_0,
    /// IEEE half.
    F16,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
}

/// `--embedding`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EmbeddingArg {
    /// IEEE half.
    F16,
    /// ggml's Q8_0.
    #[value(name = "q8_0")]
    Q8_0,
}

impl OutArg {
    fn outtype(self) -> OutType {
        match self {
            OutArg::I2S => OutType::I2S,
            OutArg::Tq2_0 => OutType::Tq2_0,
            OutArg::Tq1_0 => OutType::Tq1_0,
            OutArg::F16 => OutType::F16,
            OutArg::Bf16 => OutType::Bf16,
            OutArg::F32 => OutType::F32,
        }
    }

    fn name(self) -> &'static str {
        match self {
            OutArg::I2S => "i2_s",
            OutArg::Tq2_0 => "tq2_0",
            OutArg::Tq1_0 => "tq1_0",
            OutArg::F16 => "f16",
            OutArg::Bf16 => "bf16",
            OutArg::F32 => "f32",
        }
    }
}

/// Runs `convert`, with a one-line summary on `out`.
pub fn run(args: &ConvertArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let output = match &args.outfile {
        Some(f) => f.clone(),
        None => {
            let dir = args.dir.canonicalize().unwrap_or_else(|_| args.dir.clone());
            let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "model".into());
            dir.with_file_name(format!("{name}-{}.gguf", args.outtype.name()))
        }
    };
    let options = Options {
        outtype: args.outtype.outtype(),
        embedding: args.embedding.map(|e| match e {
            EmbeddingArg::F16 => DType::F16,
            EmbeddingArg::Q8_0 => DType::Q8_0,
        }),
        force_ternary: args.force_ternary,
    };
    let s = purebee_convert::convert(&args.dir, &output, &options)?;
    writeln!(
        out,
        "wrote {}: {}, {} tensors ({} ternary), {}",
        s.output.display(),
        s.arch,
        s.tensors,
        s.ternary,
        Bytes(s.file_len)
    )?;
    Ok(())
}
