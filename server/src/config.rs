//! What `purebee-rs serve` is asked to do: the model, the address, the slots and their
//! context, the engine, the API key and the limits.

use std::path::PathBuf;

use purebee_loader::EngineSpec;

/// The server's settings (flag names as llama-server's).
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// The GGUF file (a path: the caller resolves model names).
    pub model_path: PathBuf,
    /// The address to listen on (`--host`).
    pub host: String,
    /// The port (`--port`); 0 takes a free one, said on stderr.
    pub port: u16,
    /// Slots (`-np/--parallel`): generations run at once, each in its own session.
    pub parallel: usize,
    /// The context of all slots together (`-c`), as llama-server's: each slot gets
    /// `n_ctx / parallel` positions. 0: the model's training context.
    pub n_ctx: usize,
    /// The engine and its settings.
    pub engine: EngineSpec,
    /// Clients must send this key (`Authorization: Bearer KEY` or `X-Api-Key: KEY`).
    pub api_key: Option<String>,
    /// The model's name in `/v1/models` and responses (default: the file's name).
    pub alias: Option<String>,
    /// Requests that may wait for a slot (`--max-queue`); one more is answered 503.
    pub max_queue: usize,
    /// The most prompt ids one prefill step runs: a smaller chunk lets other slots and a
    /// disconnect be served sooner, a larger one prefills faster. Rounded down to a power
    /// of two by the runtime.
    pub prefill_chunk: usize,
    /// The largest request body accepted, in bytes (413 past it).
    pub max_body_bytes: usize,
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
            prefill_chunk: 128,
            max_body_bytes: 8 << 20,
        }
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
