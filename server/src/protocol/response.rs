//! What the server writes: completions, stream chunks and usage in OpenAI's shapes, plus
//! llama-server's `timings`.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::engine::{Finish, LoggedToken};
use crate::protocol::logprobs;

/// Which API a response belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    /// `/v1/chat/completions`.
    Chat,
    /// `/v1/completions`.
    Completion,
}

/// What every response and chunk of one request repeats.
#[derive(Clone, Debug)]
pub struct Meta {
    /// `chatcmpl-...` or `cmpl-...`.
    pub id: String,
    /// Unix time of the request.
    pub created: u64,
    /// The model's name.
    pub model: String,
    /// The API.
    pub api: Api,
    /// Whether the request asked for log-probabilities (`logprobs` is then an object).
    pub logprobs: bool,
}

/// Tells the server's build apart, as OpenAI's `system_fingerprint` does.
const FINGERPRINT: &str = concat!("purebee-rs-", env!("CARGO_PKG_VERSION"));

impl Meta {
    /// A new request's metadata, with a fresh id.
    pub fn new(api: Api, model: &str) -> Meta {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        // RandomState is seeded randomly per process: ids do not repeat across restarts.
        let n = std::hash::RandomState::new().hash_one(COUNTER.fetch_add(1, Ordering::Relaxed));
        let prefix = match api {
            Api::Chat => "chatcmpl",
            Api::Completion => "cmpl",
        };
        Meta { id: format!("{prefix}-{n:016x}"), created: unix_time(), model: model.to_string(), api, logprobs: false }
    }

    /// `logprobs` of these tokens in this API's shape, or `null` when none were asked for.
    fn logprobs(&self, tokens: &[LoggedToken]) -> Option<Value> {
        if !self.logprobs {
            return None;
        }
        Some(match self.api {
            Api::Chat => logprobs::chat(tokens),
            Api::Completion => logprobs::completion(tokens),
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.api, chunk) {
            (Api::Chat, false) => "chat.completion",
            (Api::Chat, true) => "chat.completion.chunk",
            (Api::Completion, _) => "text_completion",
        }
    }
}

/// Seconds since the Unix epoch (0 on a clock set before it).
pub fn unix_time() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Token counts.
#[derive(Clone, Debug, Serialize)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub completion_tokens: usize,
    /// Both.
    pub total_tokens: usize,
    /// Of the prompt: what the slot's cache already held.
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details`.
#[derive(Clone, Debug, Serialize)]
pub struct PromptTokensDetails {
    /// Prompt tokens reused from the slot's KV cache (not prefilled again).
    pub cached_tokens: usize,
}

/// llama-server's `timings`: the engine time this request's steps took.
#[derive(Clone, Debug, Serialize)]
pub struct Timings {
    /// Prompt ids reused from the cache.
    pub cache_n: usize,
    /// Prompt ids prefilled.
    pub prompt_n: usize,
    /// Prefill time.
    pub prompt_ms: f64,
    /// Prefill speed.
    pub prompt_per_second: f64,
    /// Tokens generated.
    pub predicted_n: usize,
    /// Time of the tokens after the first (the first comes from the prefill).
    pub predicted_ms: f64,
    /// Generation speed.
    pub predicted_per_second: f64,
}

impl From<&Finish> for Usage {
    fn from(f: &Finish) -> Usage {
        Usage {
            prompt_tokens: f.prompt_tokens,
            completion_tokens: f.completion_tokens,
            total_tokens: f.prompt_tokens + f.completion_tokens,
            prompt_tokens_details: PromptTokensDetails { cached_tokens: f.cached_tokens },
        }
    }
}

impl From<&Finish> for Timings {
    fn from(f: &Finish) -> Timings {
        let per_s = |n: usize, ms: f64| if ms > 0.0 { n as f64 * 1000.0 / ms } else { 0.0 };
        let prompt_n = f.prompt_tokens - f.cached_tokens;
        let prompt_ms = f.prompt_time.as_secs_f64() * 1000.0;
        let predicted_ms = f.decode_time.as_secs_f64() * 1000.0;
        Timings {
            cache_n: f.cached_tokens,
            prompt_n,
            prompt_ms,
            prompt_per_second: per_s(prompt_n, prompt_ms),
            predicted_n: f.completion_tokens,
            predicted_ms,
            predicted_per_second: per_s(f.completion_tokens.saturating_sub(1), predicted_ms),
        }
    }
}

/// A whole (non-streamed) answer.
#[derive(Debug, Serialize)]
pub struct Completion {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    system_fingerprint: &'static str,
    choices: [Choice; 1],
    usage: Usage,
    timings: Timings,
}

/// The one choice of an answer.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum Choice {
    Chat { index: u32, message: AssistantMessage, logprobs: Option<Value>, finish_reason: &'static str },
    Text { index: u32, text: String, logprobs: Option<Value>, finish_reason: &'static str },
}

#[derive(Debug, Serialize)]
struct AssistantMessage {
    role: &'static str,
    content: String,
}

impl Completion {
    /// The answer `text`, ended by `finish`, with its tokens' log-probabilities when asked.
    pub fn new(meta: &Meta, text: String, tokens: &[LoggedToken], finish: &Finish) -> Completion {
        let finish_reason = finish.reason.as_str();
        let logprobs = meta.logprobs(tokens);
        let choice = match meta.api {
            Api::Chat => Choice::Chat {
                index: 0,
                message: AssistantMessage { role: "assistant", content: text },
                logprobs,
                finish_reason,
            },
            Api::Completion => Choice::Text { index: 0, text, logprobs, finish_reason },
        };
        Completion {
            id: meta.id.clone(),
            object: meta.object(false),
            created: meta.created,
            model: meta.model.clone(),
            system_fingerprint: FINGERPRINT,
            choices: [choice],
            usage: finish.into(),
            timings: finish.into(),
        }
    }
}

/// One chunk of a stream.
#[derive(Debug, Serialize)]
pub struct Chunk {
    id: String,
    object: &'static str,
    created: u64,
    model: String,
    system_fingerprint: &'static str,
    choices: Vec<ChunkChoice>,
    /// With `include_usage`: `null` in every chunk but the last, which has it (OpenAI's
    /// shape); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<Option<Usage>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    timings: Option<Timings>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ChunkChoice {
    Chat { index: u32, delta: Delta, logprobs: Option<Value>, finish_reason: Option<&'static str> },
    Text { index: u32, text: String, logprobs: Option<Value>, finish_reason: Option<&'static str> },
}

#[derive(Debug, Default, Serialize)]
struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    role: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
}

impl Chunk {
    fn new(meta: &Meta, choices: Vec<ChunkChoice>, include_usage: bool) -> Chunk {
        Chunk {
            id: meta.id.clone(),
            object: meta.object(true),
            created: meta.created,
            model: meta.model.clone(),
            system_fingerprint: FINGERPRINT,
            choices,
            usage: include_usage.then_some(None),
            timings: None,
        }
    }

    fn choice(
        meta: &Meta,
        delta: Delta,
        text: String,
        logprobs: Option<Value>,
        finish_reason: Option<&'static str>,
    ) -> ChunkChoice {
        match meta.api {
            Api::Chat => ChunkChoice::Chat { index: 0, delta, logprobs, finish_reason },
            Api::Completion => ChunkChoice::Text { index: 0, text, logprobs, finish_reason },
        }
    }

    /// The first chat chunk: the assistant's role, empty content.
    pub fn role(meta: &Meta, include_usage: bool) -> Chunk {
        let delta = Delta { role: Some("assistant"), content: Some(String::new()) };
        Chunk::new(meta, vec![Chunk::choice(meta, delta, String::new(), None, None)], include_usage)
    }

    /// A piece of text, with the log-probabilities of the tokens it releases when asked.
    pub fn content(meta: &Meta, text: &str, tokens: &[LoggedToken], include_usage: bool) -> Chunk {
        let delta = Delta { role: None, content: Some(text.to_string()) };
        let logprobs = meta.logprobs(tokens);
        Chunk::new(meta, vec![Chunk::choice(meta, delta, text.to_string(), logprobs, None)], include_usage)
    }

    /// The chunk that carries `finish_reason` (and, without a usage chunk to follow, the
    /// timings).
    pub fn finish(meta: &Meta, finish: &Finish, include_usage: bool) -> Chunk {
        let choice = Chunk::choice(meta, Delta::default(), String::new(), None, Some(finish.reason.as_str()));
        let mut chunk = Chunk::new(meta, vec![choice], include_usage);
        if !include_usage {
            chunk.timings = Some(finish.into());
        }
        chunk
    }

    /// The usage chunk: `"choices": []`, `usage` and the timings.
    pub fn usage(meta: &Meta, finish: &Finish) -> Chunk {
        let mut chunk = Chunk::new(meta, Vec::new(), false);
        chunk.usage = Some(Some(finish.into()));
        chunk.timings = Some(finish.into());
        chunk
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::{json, Value};

    use super::*;
    use crate::engine::FinishReason;

    fn finish() -> Finish {
        Finish {
            reason: FinishReason::Stop,
            prompt_tokens: 10,
            cached_tokens: 4,
            completion_tokens: 3,
            prompt_time: Duration::from_millis(6),
            decode_time: Duration::from_millis(20),
        }
    }

    fn json_of(v: &impl Serialize) -> Value {
        serde_json::to_value(v).expect("serializable")
    }

    #[test]
    fn a_chat_answer_has_openais_fields() {
        let meta = Meta::new(Api::Chat, "m");
        let v = json_of(&Completion::new(&meta, "hi".to_string(), &[], &finish()));
        assert_eq!(v["object"], "chat.completion");
        assert!(v["id"].as_str().is_some_and(|id| id.starts_with("chatcmpl-")));
        assert_eq!(
            v["choices"][0],
            json!({"index": 0, "message": {"role": "assistant", "content": "hi"}, "logprobs": null, "finish_reason": "stop"})
        );
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13, "prompt_tokens_details": {"cached_tokens": 4}})
        );
        assert_eq!(v["timings"]["prompt_n"], 6);
        assert_eq!(v["timings"]["prompt_per_second"], 1000.0);
        assert_eq!(v["timings"]["predicted_per_second"], 100.0);
    }

    #[test]
    fn chunks_follow_openais_order_and_shapes() {
        let meta = Meta::new(Api::Chat, "m");
        let role = json_of(&Chunk::role(&meta, true));
        assert_eq!(role["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
        assert_eq!(role["usage"], Value::Null);
        assert!(role.as_object().is_some_and(|o| o.contains_key("usage")));
        let text = json_of(&Chunk::content(&meta, "é", &[], false));
        assert_eq!(text["choices"][0]["delta"], json!({"content": "é"}));
        assert!(text.get("usage").is_none());
        let fin = json_of(&Chunk::finish(&meta, &finish(), true));
        assert_eq!(fin["choices"][0]["finish_reason"], "stop");
        assert_eq!(fin["choices"][0]["delta"], json!({}));
        let usage = json_of(&Chunk::usage(&meta, &finish()));
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 13);
    }

    #[test]
    fn completion_chunks_carry_text() {
        let meta = Meta::new(Api::Completion, "m");
        let v = json_of(&Chunk::content(&meta, "abc", &[], false));
        assert_eq!(v["object"], "text_completion");
        assert_eq!(v["choices"][0], json!({"index": 0, "text": "abc", "logprobs": null, "finish_reason": null}));
    }
}
