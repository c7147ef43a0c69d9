//! An error answered to a client: `{"error": {"code", "message", "type"}}` with its HTTP
//! status, as OpenAI and llama-server write it.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The error classes (llama-server's `error_type`): each has its status and `type` text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request is malformed or out of range.
    InvalidRequest,
    /// 400: the prompt does not fit in a slot's context.
    ExceedContextSize,
    /// 401: a missing or wrong API key.
    Authentication,
    /// 404: no such endpoint.
    NotFound,
    /// 405: the endpoint exists for another method.
    MethodNotAllowed,
    /// 413: the body is over the size limit.
    TooLarge,
    /// 500: the server failed (an engine error, a bug).
    Server,
    /// 501: something the model or server cannot do (no chat template).
    NotSupported,
    /// 503: loading, busy (the queue is full) or shutting down.
    Unavailable,
}

impl ErrorKind {
    fn status(self) -> StatusCode {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::ExceedContextSize => StatusCode::BAD_REQUEST,
            ErrorKind::Authentication => StatusCode::UNAUTHORIZED,
            ErrorKind::NotFound => StatusCode::NOT_FOUND,
            ErrorKind::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorKind::TooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorKind::Server => StatusCode::INTERNAL_SERVER_ERROR,
            ErrorKind::NotSupported => StatusCode::NOT_IMPLEMENTED,
            ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    fn type_name(self) -> &'static str {
        match self {
            ErrorKind::InvalidRequest | ErrorKind::MethodNotAllowed | ErrorKind::TooLarge => "invalid_request_error",
            ErrorKind::ExceedContextSize => "exceed_context_size_error",
            ErrorKind::Authentication => "authentication_error",
            ErrorKind::NotFound => "not_found_error",
            ErrorKind::Server => "server_error",
            ErrorKind::NotSupported => "not_supported_error",
            ErrorKind::Unavailable => "unavailable_error",
        }
    }
}

/// An error for one request.
#[derive(Clone, Debug, PartialEq)]
pub struct ApiError {
    kind: ErrorKind,
    message: String,
    /// The prompt's size and the slot's context, for [`ErrorKind::ExceedContextSize`].
    sizes: Option<(usize, usize)>,
}

impl ApiError {
    /// An error of `kind` saying `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> ApiError {
        ApiError { kind, message: message.into(), sizes: None }
    }

    /// 400 `invalid_request_error`: `message` should name the field at fault.
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::InvalidRequest, message)
    }

    /// 400 `exceed_context_size_error`, naming both sizes.
    pub fn exceeds_context(prompt_tokens: usize, n_ctx: usize) -> ApiError {
        ApiError {
            kind: ErrorKind::ExceedContextSize,
            message: format!(
                "the request exceeds the available context size: the prompt is {prompt_tokens} tokens, the KV \
                 cache holds {n_ctx} (start the server with a larger -c)"
            ),
            sizes: Some((prompt_tokens, n_ctx)),
        }
    }

    /// 500 `server_error`.
    pub fn server(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Server, message)
    }

    /// 503 `unavailable_error`.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorKind::Unavailable, message)
    }

    /// The HTTP status.
    pub fn status(&self) -> StatusCode {
        self.kind.status()
    }

    /// `{"error": {...}}` as JSON text (also what a stream sends after it started).
    pub fn to_json(&self) -> String {
        #[derive(Serialize)]
        struct Body<'a> {
            error: Inner<'a>,
        }
        #[derive(Serialize)]
        struct Inner<'a> {
            code: u16,
            message: &'a str,
            #[serde(rename = "type")]
            kind: &'static str,
            #[serde(skip_serializing_if = "Option::is_none")]
            n_prompt_tokens: Option<usize>,
            #[serde(skip_serializing_if = "Option::is_none")]
            n_ctx: Option<usize>,
        }
        let body = Body {
            error: Inner {
                code: self.status().as_u16(),
                message: &self.message,
                kind: self.kind.type_name(),
                n_prompt_tokens: self.sizes.map(|s| s.0),
                n_ctx: self.sizes.map(|s| s.1),
            },
        };
        // Serializing plain strings and integers cannot fail; the fallback keeps the shape.
        serde_json::to_string(&body).unwrap_or_else(|_| {
            format!(r#"{{"error":{{"code":500,"message":"error","type":"{}"}}}}"#, self.kind.type_name())
        })
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({}): {}", self.status().as_u16(), self.kind.type_name(), self.message)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), self.to_json()).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if self.kind == ErrorKind::Unavailable {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        if self.kind == ErrorKind::Authentication {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_has_code_message_and_type() {
        let v: serde_json::Value =
            serde_json::from_str(&ApiError::invalid("temperature: must be >= 0").to_json()).expect("valid JSON");
        assert_eq!(v["error"]["code"], 400);
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert_eq!(v["error"]["message"], "temperature: must be >= 0");
        assert!(v["error"].get("n_ctx").is_none());
    }

    #[test]
    fn exceeding_the_context_names_both_sizes() {
        let e = ApiError::exceeds_context(5000, 4096);
        assert_eq!(e.status(), StatusCode::BAD_REQUEST);
        let v: serde_json::Value = serde_json::from_str(&e.to_json()).expect("valid JSON");
        assert_eq!(v["error"]["type"], "exceed_context_size_error");
        assert_eq!(v["error"]["n_prompt_tokens"], 5000);
        assert_eq!(v["error"]["n_ctx"], 4096);
        let m = v["error"]["message"].as_str().unwrap_or_default();
        assert!(m.contains("5000") && m.contains("4096"), "{m}");
    }
}
