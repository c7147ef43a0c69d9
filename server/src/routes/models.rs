//! `GET /v1/models`: the one model served, with its sizes.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::AppState;

pub async fn list(State(state): State<Arc<AppState>>) -> Response {
    let ready = match state.ready() {
        Ok(r) => r,
        Err(loading) => return loading.into_response(),
    };
    super::json(&json!({
        "object": "list",
        "data": [{
            "id": state.model_id,
            "object": "model",
            "created": state.started,
            "owned_by": "purebee-rs",
            "meta": {
                "n_vocab": ready.n_vocab,
                "n_ctx_train": ready.n_ctx_train,
                "n_ctx": ready.n_ctx,
                "slots": state.metrics.slots(),
                "engine": ready.engine,
            },
        }],
    }))
}
