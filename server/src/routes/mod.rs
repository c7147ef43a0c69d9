//! The HTTP routes and the layers around them: the API key check (all but `/health`,
//! `/v1/models` and the chat page: `/`, `/page.css`, `/page.js`, which holds no secret and
//! reaches everything else through the protected endpoints), the body size limit, JSON
//! answers for unknown paths and methods, and a panic caught as a 500 (a last defence:
//! nothing a client sends should panic).

mod chat;
mod completions;
mod generate;
mod health;
mod metrics;
mod models;
mod page;
mod tokenize;

use std::any::Any;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{middleware, Router};
use tower_http::catch_panic::CatchPanicLayer;

use crate::api_error::{ApiError, ErrorKind};
use crate::auth::require_key;
use crate::state::{AppState, Ready};

/// Runs a request's CPU-bound work (rendering the chat template, tokenizing) on tokio's
/// blocking pool, so that a long prompt or a slow template never holds up the worker
/// threads that serve every other connection.
async fn off_the_workers<T: Send + 'static>(
    state: &Arc<AppState>,
    work: impl FnOnce(&Ready) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    let state = Arc::clone(state);
    tokio::task::spawn_blocking(move || work(state.ready()?))
        .await
        .map_err(|e| ApiError::server(format!("preparing the request failed: {e}")))?
}

/// The server's routes over `state`, with bodies limited to `max_body_bytes`.
pub fn router(state: Arc<AppState>, max_body_bytes: usize) -> Router {
    let open = Router::new()
        .route("/health", get(health::health))
        .route("/v1/health", get(health::health))
        .route("/models", get(models::list))
        .route("/v1/models", get(models::list))
        .route("/", get(page::index))
        .route("/page.css", get(page::style))
        .route("/page.js", get(page::script));
    let protected = Router::new()
        .route("/v1/chat/completions", post(chat::handle))
        .route("/chat/completions", post(chat::handle))
        .route("/v1/completions", post(completions::handle))
        .route("/completions", post(completions::handle))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/metrics", get(metrics::metrics))
        .route_layer(middleware::from_fn_with_state(Arc::clone(&state), require_key));
    open.merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .layer(CatchPanicLayer::custom(panicked))
        .with_state(state)
}

async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::new(ErrorKind::NotFound, format!("no endpoint at {}", uri.path()))
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::new(ErrorKind::MethodNotAllowed, format!("{} does not take {method}", uri.path()))
}

fn panicked(_: Box<dyn Any + Send + 'static>) -> Response {
    ApiError::server("the server failed on this request (a bug: please report it)").into_response()
}

/// A 200 JSON answer.
fn json(value: &impl serde::Serialize) -> Response {
    match serde_json::to_string(value) {
        Ok(text) => ([(axum::http::header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => ApiError::server(format!("writing the answer: {e}")).into_response(),
    }
}
