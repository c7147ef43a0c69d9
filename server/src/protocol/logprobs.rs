//! `logprobs` in OpenAI's two shapes, from the engine's [`LoggedToken`]s:
//!
//! - chat (`/v1/chat/completions` with `logprobs: true`, `top_logprobs` 0..=20):
//!   `{"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob",
//!   "bytes"}]}], "refusal": null}`;
//! - completions (`/v1/completions` with `logprobs` 0..=5, the legacy shape):
//!   `{"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob}],
//!   "text_offset": [...]}`, offsets in characters of the generated text.
//!
//! A token's text is its bytes as UTF-8, a byte that is not (a piece of a character)
//! replaced by U+FFFD; `bytes` has them exactly. A log-probability JSON cannot hold (NaN,
//! from NaN logits) is written as -9999.0, OpenAI's value for "practically impossible".

use serde_json::{json, Map, Value};

use crate::engine::LoggedToken;

/// A log-probability as JSON.
fn number(logprob: f32) -> Value {
    let v = if logprob.is_finite() { f64::from(logprob) } else { -9999.0 };
    json!(v)
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The chat shape's `content` entries.
pub fn chat_content(tokens: &[LoggedToken]) -> Vec<Value> {
    let entry = |bytes: &[u8], logprob: f32| json!({"token": text(bytes), "logprob": number(logprob), "bytes": bytes});
    tokens
        .iter()
        .map(|t| {
            let mut e = entry(&t.bytes, t.logprob);
            e["top_logprobs"] = Value::Array(t.top.iter().map(|(b, l)| entry(b, *l)).collect());
            e
        })
        .collect()
}

/// The chat shape.
pub fn chat(tokens: &[LoggedToken]) -> Value {
    json!({"content": chat_content(tokens), "refusal": null})
}

/// The completions (legacy) shape.
pub fn completion(tokens: &[LoggedToken]) -> Value {
    let top: Vec<Value> = tokens
        .iter()
        .map(|t| {
            let mut m = Map::new();
            for (b, l) in &t.top {
                m.entry(text(b)).or_insert_with(|| number(*l));
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "tokens": tokens.iter().map(|t| text(&t.bytes)).collect::<Vec<_>>(),
        "token_logprobs": tokens.iter().map(|t| number(t.logprob)).collect::<Vec<_>>(),
        "top_logprobs": top,
        "text_offset": tokens.iter().map(|t| t.offset).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> LoggedToken {
        LoggedToken {
            bytes: b"hi".to_vec(),
            logprob: -0.5,
            top: vec![(b"hi".to_vec(), -0.5), (vec![0xe2, 0x82], f32::NAN)],
            offset: 3,
        }
    }

    #[test]
    fn both_shapes_are_openais() {
        let c = chat(&[token()]);
        assert_eq!(c["refusal"], Value::Null);
        assert_eq!(c["content"][0]["token"], "hi");
        assert_eq!(c["content"][0]["logprob"], -0.5);
        assert_eq!(c["content"][0]["bytes"], json!([104, 105]));
        assert_eq!(
            c["content"][0]["top_logprobs"][1],
            json!({"token": "\u{fffd}", "logprob": -9999.0, "bytes": [0xe2, 0x82]})
        );
        let l = completion(&[token()]);
        assert_eq!(
            l,
            json!({"tokens": ["hi"], "token_logprobs": [-0.5], "top_logprobs": [{"hi": -0.5, "\u{fffd}": -9999.0}], "text_offset": [3]})
        );
    }
}
