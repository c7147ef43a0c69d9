//! `GET /health`: 503 while the model loads, then 200 with the slots' state.

use std::sync::Arc;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::state::AppState;

pub async fn health(State(state): State<Arc<AppState>>) -> Response {
    if let Err(loading) = state.ready() {
        return loading.into_response();
    }
    let m = &state.metrics;
    super::json(&json!({
        "status": "ok",
        "slots_idle": m.slots().saturating_sub(m.busy()),
        "slots_processing": m.busy(),
        "queue_length": m.queued(),
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use super::*;
    use crate::metrics::Metrics;

    #[test]
    fn health_is_503_while_the_model_loads() {
        let state = Arc::new(AppState {
            model_id: "m".to_string(),
            api_key: None,
            metrics: Arc::new(Metrics::default()),
            ready: OnceLock::new(),
            started: 0,
        });
        let runtime = tokio::runtime::Builder::new_current_thread().build().expect("a runtime");
        let response = runtime.block_on(health(State(state)));
        assert_eq!(response.status(), axum::http::StatusCode::SERVICE_UNAVAILABLE);
    }
}
