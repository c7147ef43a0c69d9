//! Reading a request body as a JSON object, every failure a 400 (413 past the size limit)
//! that says what is wrong: an empty body, invalid UTF-8, text that is not JSON, JSON that
//! is not an object; then typed fields read from the object, a wrong type naming the field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::api_error::{ApiError, ErrorKind};

/// A request body that is a JSON object.
#[derive(Clone, Debug)]
pub struct JsonObject(pub Map<String, Value>);

impl<S: Send + Sync> FromRequest<S> for JsonObject {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<JsonObject, ApiError> {
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(ErrorKind::TooLarge, "the request body is larger than the server's limit")
            } else {
                ApiError::invalid(format!("the request body could not be read: {rejection}"))
            }
        })?;
        parse_object(&bytes).map(JsonObject)
    }
}

/// The JSON object in `bytes`.
pub fn parse_object(bytes: &[u8]) -> Result<Map<String, Value>, ApiError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(ApiError::invalid("the request body is empty: expected a JSON object"));
    }
    let text = std::str::from_utf8(bytes)
        .map_err(|e| ApiError::invalid(format!("the request body is not valid UTF-8 (at byte {})", e.valid_up_to())))?;
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(other) => {
            Err(ApiError::invalid(format!("the request body must be a JSON object, not {}", json_kind(&other))))
        }
        Err(e) => Err(ApiError::invalid(format!("the request body is not valid JSON: {e}"))),
    }
}

/// Reads the fields `T` declares from `object` (others are ignored); a missing field or a
/// wrong type is a 400 naming the field's path (`stream_options.include_usage`).
pub fn fields<T: DeserializeOwned>(object: &Map<String, Value>) -> Result<T, ApiError> {
    // The object is borrowed as a deserializer: no copy of the request.
    let de: serde::de::value::MapDeserializer<'_, _, serde_json::Error> =
        serde::de::value::MapDeserializer::new(object.iter().map(|(k, v)| (k.as_str(), v)));
    serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path.is_empty() || path == "." {
            ApiError::invalid(inner.to_string())
        } else {
            ApiError::invalid(format!("{path}: {inner}"))
        }
    })
}

/// How a JSON value's kind is named in messages.
pub fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug)]
    struct Fields {
        temperature: Option<f64>,
        #[allow(dead_code)]
        stream_options: Option<Inner>,
    }

    #[derive(serde::Deserialize, Debug)]
    struct Inner {
        #[allow(dead_code)]
        include_usage: Option<bool>,
    }

    fn message(r: Result<impl std::fmt::Debug, ApiError>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(v) => format!("accepted: {v:?}"),
        }
    }

    #[test]
    fn each_malformed_body_says_why() {
        assert!(message(parse_object(b"  ")).contains("empty"));
        assert!(message(parse_object(b"{\"a\": \"\xff\"}")).contains("not valid UTF-8 (at byte 7)"));
        assert!(message(parse_object(b"{\"a\": ")).contains("not valid JSON"));
        assert!(message(parse_object(b"{\"temperature\": NaN}")).contains("not valid JSON"));
        assert!(message(parse_object(b"[1]")).contains("must be a JSON object, not an array"));
    }

    #[test]
    fn a_wrong_type_names_the_field_path() {
        let obj = parse_object(br#"{"temperature": "hot"}"#).expect("an object");
        let m = message(fields::<Fields>(&obj));
        assert!(m.starts_with("400 (invalid_request_error): temperature: invalid type: string"), "{m}");
        let obj = parse_object(br#"{"stream_options": {"include_usage": 1}}"#).expect("an object");
        assert!(message(fields::<Fields>(&obj)).contains("stream_options.include_usage: invalid type"));
        let obj = parse_object(br#"{"temperature": 0.5, "unknown": [1]}"#).expect("an object");
        assert_eq!(fields::<Fields>(&obj).ok().and_then(|f| f.temperature), Some(0.5));
    }
}
