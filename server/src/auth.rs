//! The API key check: `Authorization: Bearer KEY` or `X-Api-Key: KEY`, compared in constant
//! time (the digests of both keys, so neither the content nor the length leaks through
//! timing). `/health` and `/v1/models` stay open, as llama-server leaves them.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use crate::api_error::{ApiError, ErrorKind};
use crate::state::AppState;

/// The digest of the key clients must send.
#[derive(Clone)]
pub struct ApiKey([u8; 32]);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(..)")
    }
}

impl ApiKey {
    /// The expected key.
    pub fn new(key: &str) -> ApiKey {
        ApiKey(Sha256::digest(key.as_bytes()).into())
    }

    /// Whether `given` is the key, in time independent of where they differ.
    pub fn matches(&self, given: &str) -> bool {
        let given: [u8; 32] = Sha256::digest(given.as_bytes()).into();
        given.iter().zip(&self.0).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

/// The key a request carries, if any.
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if let Some(key) = v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")) {
            return Some(key.trim());
        }
    }
    headers.get("x-api-key").and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Middleware: 401 unless the request carries the key (when one is set).
pub async fn require_key(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if let Some(key) = &state.api_key {
        match presented(request.headers()) {
            None => {
                return ApiError::new(
                    ErrorKind::Authentication,
                    "missing API key: send 'Authorization: Bearer KEY' or 'X-Api-Key: KEY'",
                )
                .into_response()
            }
            Some(given) if !key.matches(given) => {
                return ApiError::new(ErrorKind::Authentication, "invalid API key").into_response()
            }
            Some(_) => {}
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_key_matches() {
        let key = ApiKey::new("sk-secret");
        assert!(key.matches("sk-secret"));
        assert!(!key.matches("sk-secreT"));
        assert!(!key.matches("sk-secret "));
        assert!(!key.matches(""));
    }

    #[test]
    fn the_key_comes_from_either_header() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert("x-api-key", "k1".parse().expect("header value"));
        assert_eq!(presented(&h), Some("k1"));
        h.insert("authorization", "Bearer k2".parse().expect("header value"));
        assert_eq!(presented(&h), Some("k2"));
    }
}
