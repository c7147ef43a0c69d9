//! `purebee-rs logits`: the logits of every position of a token sequence, as `.npy`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use purebee_loader::{LoadedModel, SessionContext};
use purebee_runtime::LogitsRows;

use crate::engine_choice::EngineArgs;
use crate::{loading, npy, CliError};

/// How the sequence goes through the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    /// One batched run of the whole sequence.
    Prefill,
    /// One token at a time through the KV cache.
    Decode,
}

/// Arguments of `logits`.
#[derive(Debug, Args)]
pub struct LogitsArgs {
    /// The GGUF model.
    pub model: PathBuf,
    /// Token ids, comma separated.
    #[arg(long, value_delimiter = ',', required = true)]
    pub tokens: Vec<u32>,
    /// The engine and its threads.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Prefill (batched) or decode (token by token).
    #[arg(long, value_enum, default_value = "prefill")]
    pub mode: Mode,
    /// Where to write the float32 `.npy` of shape [n_tokens, n_vocab].
    #[arg(long)]
    pub out: PathBuf,
    /// KV cache size in tokens (default: the number of tokens).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
}

/// Runs `logits`.
pub fn run(args: &LogitsArgs) -> Result<(), CliError> {
    let file = loading::open(&args.model, &args.engine)?;
    let n_ctx = args.ctx_size.unwrap_or(args.tokens.len()).max(1);
    let LoadedModel { mut model, cache: mut session, .. } =
        loading::load(file, &args.engine, SessionContext { n_ctx: Some(n_ctx) })?;
    let vocab = model.config().n_vocab;
    let data = match args.mode {
        Mode::Prefill => model.forward(&mut session, &args.tokens, 0, LogitsRows::All)?,
        Mode::Decode => {
            let mut data = Vec::with_capacity(args.tokens.len() * vocab);
            for (pos, &t) in args.tokens.iter().enumerate() {
                data.extend(model.forward(&mut session, &[t], pos, LogitsRows::Last)?);
            }
            data
        }
    };
    npy::write_f32(&args.out, args.tokens.len(), vocab, &data).map_err(|e| format!("{}: {e}", args.out.display()))?;
    Ok(())
}
