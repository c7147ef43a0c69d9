//! `POST /tokenize` and `POST /detokenize`, as llama-server's.

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use serde_json::{json, Value};

use crate::api_error::ApiError;
use crate::body::{fields, JsonObject};
use crate::prompt::checked_id;
use crate::protocol::request::{DetokenizeRequest, TokenizeRequest};
use crate::state::{AppState, Ready};

pub async fn tokenize(State(state): State<Arc<AppState>>, JsonObject(body): JsonObject) -> Result<Response, ApiError> {
    state.ready()?;
    let request: TokenizeRequest = fields(&body)?;
    let tokens = super::off_the_workers(&state, move |ready| Ok(tokens(ready, &request))).await?;
    Ok(super::json(&json!({ "tokens": tokens })))
}

/// The ids of `request.content`, each with its piece when asked for.
fn tokens(ready: &Ready, request: &TokenizeRequest) -> Vec<Value> {
    let ids = ready.tokenizer.encode(&request.content, request.add_special, request.parse_special);
    if request.with_pieces {
        ids.iter()
            .map(|&id| {
                let bytes = ready.tokenizer.decode_token(id);
                // A piece that is not whole UTF-8 (part of a character) is given as its bytes.
                let piece = match std::str::from_utf8(bytes) {
                    Ok(s) => json!(s),
                    Err(_) => json!(bytes),
                };
                json!({"id": id, "piece": piece})
            })
            .collect()
    } else {
        ids.iter().map(|&id| json!(id)).collect()
    }
}

pub async fn detokenize(
    State(state): State<Arc<AppState>>,
    JsonObject(body): JsonObject,
) -> Result<Response, ApiError> {
    let ready = state.ready()?;
    let request: DetokenizeRequest = fields(&body)?;
    let ids = request
        .tokens
        .iter()
        .enumerate()
        .map(|(i, &id)| checked_id(&format!("tokens[{i}]"), id, ready.n_vocab))
        .collect::<Result<Vec<u32>, ApiError>>()?;
    Ok(super::json(&json!({ "content": ready.tokenizer.decode(&ids) })))
}
