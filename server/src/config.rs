//! What `purebee-rs serve` is asked to do: the model, the address, the slots and their
//! context, the engine, the API key and the limits.

use std::path::PathBuf;

use purebee_loader::EngineSpec;
use purebee_runtime::speculative::SpecConfig;

/// The server's settings (flag names as llama-server's).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The GGUF file (a path: the caller resolves model names).
    pub model_path: PathBuf,
    /// The address to listen on (`--host`).
    pub host: String,
    /// The port (`--port`); 0 takes a free one, said on stderr.
    pub port: u16,
    /// Slots (`-np/--parallel`): generations run at once, each a sequence of the shared KV
    /// cache.
    pub parallel: usize,
    /// The KV cache all slots share (`-c`), as llama-server's unified cache: the positions of
    /// every running request together; one request may use all of it. 0: the model's
    /// training context.
    pub n_ctx: usize,
    /// The engine and its settings.
    pub engine: EngineSpec,
    /// Clients must send this key (`Authorization: Bearer KEY` or `X-Api-Key: KEY`).
    pub api_key: Option<String>,
    /// The model's name in `/v1/models` and responses (default: the file's name).
    pub alias: Option<String>,
    /// Requests that may wait for a slot (`--max-queue`); one more is answered 503.
    pub max_queue: usize,
    /// The most tokens one batched pass runs (`-ub/--ubatch-size`): every decoding slot's
    /// next token, then prompt chunks in the rows left. Smaller keeps the time between
    /// tokens short while prompts prefill; larger prefills faster.
    pub ubatch: usize,
    /// The logical batch (`-b/--batch-size`), as llama-server's: a pass never runs more
    /// tokens than this either.
    pub batch: usize,
    /// The largest request body accepted, in bytes (413 past it).
    pub max_body_bytes: usize,
    /// One pass over the weights before the server says it is ready (`--no-warmup` turns it
    /// off), as llama-server's warm-up: the model file's pages are read in and the first
    /// programs built before any client waits on them.
    pub warmup: bool,
    /// Speculative decoding by n-gram lookup for every request (`--spec-type
    /// ngram-simple`); clients see the same API. A slot speculates only while it is the
    /// one busy slot, so that drafts never cost other clients' passes.
    pub speculation: Option<SpecConfig>,
}

impl ServerConfig {
    /// Settings for `model_path` with llama-server's defaults: `127.0.0.1:8080`, 4 slots,
    /// the model's training context, the `auto` engine, no API key.
    pub fn new(model_path: impl Into<PathBuf>) -> ServerConfig {
        ServerConfig {
            model_path: model_path.into(),
            host: "127.0.0.1".to_string(),
            port: 8080,
            parallel: 4,
            n_ctx: 0,
            engine: EngineSpec::default(),
            api_key: None,
            alias: None,
            max_queue: 64,
            ubatch: 128,
            batch: 2048,
            max_body_bytes: 8 << 20,
            warmup: true,
            speculation: None,
        }
    }

    /// The most tokens one pass runs: `-ub`, at most `-b`.
    pub fn pass_rows(&self) -> usize {
        self.ubatch.min(self.batch).max(1)
    }

    /// The model's name as clients see it: the alias, else the file's name.
    pub fn model_id(&self) -> String {
        match &self.alias {
            Some(a) => a.clone(),
            None => self
                .model_path
                .file_name()
                .map_or_else(|| self.model_path.display().to_string(), |n| n.to_string_lossy().into_owned()),
        }
    }
}
