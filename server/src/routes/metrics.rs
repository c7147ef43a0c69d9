//! `GET /metrics`: the Prometheus text exposition.

use std::sync::Arc;

use axum::extract::State;
use axum::response::IntoResponse;

use crate::state::AppState;

pub async fn metrics(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], state.metrics.render())
}
