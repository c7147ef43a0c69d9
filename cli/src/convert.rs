//! `purebee-rs convert DIR --outtype i2_s|tq2_0|tq1_0|f16|bf16|f32 [--outfile FILE]
//! [--embedding f16|q8_0]`: a Hugging Face checkpoint folder (safetensors, config.json,
//! tokenizer.json) to one GGUF file ([`purebee_convert`]).
//!
//! Without `--outfile` the file is written beside the folder as `DIR-OUTTYPE.gguf`.
//!
//! `DIR` may be `hf://OWNER/REPO[@REV]`: the files the conversion reads are pulled into the
//! store first, as `pull` pulls (resumable, sha256-checked), and only those: config.json,
//! tokenizer.json, tokenizer_config.json and generation_config.json when the repository has
//! them, and model.safetensors or model.safetensors.index.json with the shards it lists.
//! The output then goes to `REPO-OUTTYPE.gguf` in the current folder.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use purebee_convert::{Options, OutType};
use purebee_hub::{HubError, PullOptions, Source, Store};
use purebee_memory::DType;

use crate::pull::pull_with_progress;
use crate::synth::Bytes;
use crate::CliError;

/// `convert`'s arguments.
#[derive(Debug, Args)]
pub struct ConvertArgs {
    /// The checkpoint folder: config.json, model.safetensors (or
    /// model.safetensors.index.json and its shards), tokenizer.json, tokenizer_config.json;
    /// or hf://OWNER/REPO[@REV], pulled first.
    pub dir: String,
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
    let (dir, name) = match args.dir.strip_prefix("hf://") {
        Some(repo) => pull_checkpoint(repo)?,
        None => {
            let dir = PathBuf::from(&args.dir);
            let name = dir.canonicalize().ok().and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()));
            (dir, name.unwrap_or_else(|| "model".into()))
        }
    };
    let output = match &args.outfile {
        Some(f) => f.clone(),
        None if args.dir.starts_with("hf://") => PathBuf::from(format!("{name}-{}.gguf", args.outtype.name())),
        None => {
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
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
        name: Some(name),
    };
    let s = purebee_convert::convert(&dir, &output, &options)?;
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

/// Pulls what converting `OWNER/REPO[@REV]` reads; returns its snapshot folder and the
/// repository's name.
fn pull_checkpoint(repo: &str) -> Result<(PathBuf, String), CliError> {
    let (path, rev) = match repo.rsplit_once('@') {
        Some((p, r)) => (p, Some(r)),
        None => (repo, None),
    };
    let name = path.rsplit('/').next().unwrap_or("model").to_string();
    let store = Store::from_env()?;
    let opts = PullOptions::from_env();
    let source = |file: &str| -> Result<Source, HubError> {
        let at = rev.map(|r| format!("@{r}")).unwrap_or_default();
        Source::parse(&format!("hf://{path}/{file}{at}"))
    };
    // Required, then optional (a 404 is fine), then the weights.
    let config = pull_with_progress(&store, &source("config.json")?, &opts)?;
    let dir = config.path.parent().map(PathBuf::from).ok_or("the store gave a file without a folder")?;
    for file in ["tokenizer.json", "tokenizer_config.json", "generation_config.json"] {
        match purebee_hub::pull(&store, &source(file)?, &opts, &mut |_| {}) {
            Ok(_) | Err(HubError::NotFound { .. }) => {}
            Err(e) => return Err(e.into()),
        }
    }
    match pull_with_progress(&store, &source("model.safetensors.index.json")?, &opts) {
        Ok(index) => {
            let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&index.path)?)
                .map_err(|e| format!("{}: not JSON: {e}", index.path.display()))?;
            let mut shards: Vec<&str> = json
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| format!("{}: no \"weight_map\" object", index.path.display()))?
                .values()
                .filter_map(|v| v.as_str())
                .collect();
            shards.sort_unstable();
            shards.dedup();
            for shard in shards {
                pull_with_progress(&store, &source(shard)?, &opts)?;
            }
        }
        Err(e) if matches!(e.downcast_ref::<HubError>(), Some(HubError::NotFound { .. })) => {
            pull_with_progress(&store, &source("model.safetensors")?, &opts)?;
        }
        Err(e) => return Err(e),
    }
    Ok((dir, name))
}
