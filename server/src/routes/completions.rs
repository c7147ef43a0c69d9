//! `POST /v1/completions`: a raw prompt, text or token ids.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;

use crate::api_error::ApiError;
use crate::body::{fields, JsonObject};
use crate::protocol::request::CompletionFields;
use crate::protocol::response::{Api, Meta};
use crate::state::AppState;
use crate::{prompt, validate};

pub async fn handle(State(state): State<Arc<AppState>>, JsonObject(body): JsonObject) -> Result<Response, ApiError> {
    let ready = state.ready()?;
    let mut params = validate::params(&body, ready.n_vocab, ready.n_ctx)?;
    params.logprobs = validate::completion_logprobs(&body)?;
    let completion: CompletionFields = fields(&body)?;
    let ids = super::off_the_workers(&state, move |ready| prompt::completion(ready, &completion.prompt)).await?;
    super::generate::answer(ready, Meta::new(Api::Completion, &state.model_id), ids, params).await
}
