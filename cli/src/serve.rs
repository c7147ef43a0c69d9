//! `purebee-rs serve`: the OpenAI-compatible server of `purebee-server` on a model given by
//! path or name (flag names as llama-server's; `-np` and `-ub` are read as `--parallel` and
//! `--ubatch-size`, see `main.rs`).
//!
//! Every busy slot advances in one batched pass over the weights. `-ub` (default 128)
//! bounds a pass's tokens: every decoding slot's next token first, then prompt chunks in the
//! rows left. On a CPU a pass's time grows with its tokens, and every decoding slot waits
//! for it: 128 keeps the time between tokens of the others within a few decode steps while
//! a long prompt prefills, at most a few per cent below the prefill speed of larger passes.
//! `-b` (default 2048, llama-server's) caps a pass too.

use std::path::PathBuf;

use clap::Args;
use purebee_server::ServerConfig;

use crate::engine_choice::EngineArgs;
use crate::spec_args::SpecArgs;
use crate::{models, CliError};

/// Arguments of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The GGUF model: a path, a pulled name (`purebee-rs list`), or an hf:// or http(s)
    /// source (pulled on first use).
    pub model: PathBuf,
    /// The address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub host: String,
    /// The port; 0 takes a free one (the address is said on stderr).
    #[arg(long, default_value_t = 8080)]
    pub port: u16,
    /// Slots: requests generated at once, all advancing in one batched pass (`-np` also
    /// works).
    #[arg(long, default_value_t = 4)]
    pub parallel: usize,
    /// The KV cache all slots share, in tokens: the positions of every running request
    /// together; one request may use all of it (default: the model's training context).
    #[arg(short = 'c', long = "ctx-size", default_value_t = 0)]
    pub ctx_size: usize,
    /// The most tokens one batched pass runs (`-ub` also works): every decoding slot's next
    /// token, then prompt chunks. Smaller keeps other slots' tokens coming while a prompt
    /// prefills; larger prefills faster.
    #[arg(long = "ubatch-size", default_value_t = 128)]
    pub ubatch_size: usize,
    /// The logical batch, as llama-server's: a pass never runs more tokens than this either.
    #[arg(short = 'b', long = "batch-size", default_value_t = 2048)]
    pub batch_size: usize,
    /// Clients must send this key (`Authorization: Bearer KEY`); default: the
    /// `PUREBEE_API_KEY` variable, else none.
    #[arg(long, env = "PUREBEE_API_KEY", hide_env_values = true)]
    pub api_key: Option<String>,
    /// The model's name in /v1/models and in responses (default: the file's name).
    #[arg(long)]
    pub alias: Option<String>,
    /// Requests that may wait for a free slot; one more is answered 503.
    #[arg(long, default_value_t = 64)]
    pub max_queue: usize,
    /// The largest request body, in bytes (413 past it).
    #[arg(long, default_value_t = 8 << 20)]
    pub max_body_bytes: usize,
    /// Skip the warm-up pass before the first request (as llama-server's `--no-warmup`).
    #[arg(long)]
    pub no_warmup: bool,
    /// The engine and its threads.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Speculative decoding for every request.
    #[command(flatten)]
    pub spec: SpecArgs,
}

/// Runs `serve` until SIGTERM or Ctrl-C.
pub fn run(args: &ServeArgs) -> Result<(), CliError> {
    if args.parallel == 0 {
        return Err("--parallel 0: the server needs at least one slot".into());
    }
    if args.ubatch_size == 0 {
        return Err("--ubatch-size 0: a pass needs at least one token".into());
    }
    if args.batch_size == 0 {
        return Err("--batch-size 0: a pass needs at least one token".into());
    }
    let model_path = models::resolve(&args.model)?;
    let draft_ctx = (args.ctx_size > 0).then_some(args.ctx_size);
    let speculation = args.spec.config(&model_path, None, &args.engine, draft_ctx)?;
    let config = ServerConfig {
        model_path,
        host: args.host.clone(),
        port: args.port,
        parallel: args.parallel,
        n_ctx: args.ctx_size,
        engine: args.engine.spec(),
        api_key: args.api_key.clone(),
        alias: args.alias.clone(),
        max_queue: args.max_queue,
        ubatch: args.ubatch_size,
        batch: args.batch_size,
        max_body_bytes: args.max_body_bytes,
        warmup: !args.no_warmup,
        speculation,
    };
    purebee_server::run(config)?;
    Ok(())
}
