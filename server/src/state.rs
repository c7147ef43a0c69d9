//! What the handlers share: settings known at start, and what the model's loading adds
//! ([`Ready`]); until it is set, model endpoints answer 503.

use std::sync::{Arc, OnceLock};

use purebee_runtime::chat::ChatTemplate;
use purebee_runtime::tokenizer::Tokenizer;

use crate::api_error::ApiError;
use crate::auth::ApiKey;
use crate::engine::Submitter;
use crate::metrics::Metrics;

/// The handlers' shared state.
#[derive(Debug)]
pub struct AppState {
    /// The model's name as clients see it.
    pub model_id: String,
    /// The key clients must send, if any.
    pub api_key: Option<ApiKey>,
    /// Counters.
    pub metrics: Arc<Metrics>,
    /// Set once the model is loaded.
    pub ready: OnceLock<Ready>,
    /// Unix time the server started (`created` of `/v1/models`).
    pub started: u64,
}

/// The loaded model, as the handlers see it (the model itself lives on the engine thread).
#[derive(Debug)]
pub struct Ready {
    /// The model's tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template, or why there is none.
    pub template: Result<ChatTemplate, String>,
    /// Hands jobs to the engine thread.
    pub submitter: Submitter,
    /// The KV cache all slots share, in positions (`-c`): the most one request may use.
    pub n_ctx: usize,
    /// The model's training context.
    pub n_ctx_train: usize,
    /// The model's vocabulary size.
    pub n_vocab: usize,
    /// Which engine runs the model.
    pub engine: String,
}

impl AppState {
    /// The loaded model, or 503 while it loads.
    pub fn ready(&self) -> Result<&Ready, ApiError> {
        self.ready.get().ok_or_else(|| ApiError::unavailable("Loading model"))
    }
}
