//! Request options checked and turned into a generation's settings: options the server
//! does not support are refused by name, values out of range name their field, and nothing
//! a client sends reaches the engine unchecked.

use std::hash::BuildHasher;

use purebee_runtime::sampler::SamplerConfig;
use serde_json::{Map, Value};

use crate::api_error::ApiError;
use crate::body::{fields, json_kind};
use crate::protocol::request::Sampling;

/// The most top log-probabilities `/v1/completions` reports per token (`logprobs`).
pub const MAX_COMPLETION_LOGPROBS: u64 = 5;
/// The most top log-probabilities `/v1/chat/completions` reports per token (`top_logprobs`).
pub const MAX_CHAT_TOP_LOGPROBS: u64 = 20;

/// The most stop strings a request may give.
pub const MAX_STOP_STRINGS: usize = 16;

/// A generation's settings, checked.
#[derive(Clone, Debug)]
pub struct Params {
    /// How to pick tokens.
    pub sampler: SamplerConfig,
    /// The most tokens to generate (`None`: until the context is full).
    pub max_tokens: Option<usize>,
    /// Stop strings.
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Answer as server-sent events.
    pub stream: bool,
    /// Send a usage chunk before `[DONE]`.
    pub include_usage: bool,
    /// Report log-probabilities, with this many top alternatives per token (`None`: none).
    /// Set by the route ([`completion_logprobs`], [`chat_logprobs`]).
    pub logprobs: Option<usize>,
}

/// Refuses options that would change the answer's shape or meaning in ways the server does
/// not implement, naming each; their default values are accepted.
pub fn reject_unsupported(body: &Map<String, Value>) -> Result<(), ApiError> {
    for (name, value) in body {
        let accepted = match name.as_str() {
            "n" | "best_of" => value.is_null() || value.as_u64() == Some(1),
            "echo" => value.is_null() || value == &Value::Bool(false),
            "logit_bias" => value.is_null() || value.as_object().is_some_and(Map::is_empty),
            "tools" | "functions" => value.is_null() || value.as_array().is_some_and(Vec::is_empty),
            "tool_choice" | "function_call" => value.is_null() || value.as_str() == Some("none"),
            "response_format" => value.is_null() || value.get("type").and_then(Value::as_str) == Some("text"),
            "suffix" => value.is_null() || value.as_str() == Some(""),
            "modalities" => value.is_null() || value == &Value::Array(vec![Value::String("text".into())]),
            "audio" | "prediction" => value.is_null(),
            _ => true,
        };
        if !accepted {
            let only = match name.as_str() {
                "n" | "best_of" => " (only 1 is supported)",
                "tools" | "functions" | "tool_choice" | "function_call" => " (tool calls are not supported)",
                "response_format" => " (only {\"type\": \"text\"} is supported)",
                _ => "",
            };
            return Err(ApiError::invalid(format!("{name}: {value} is not supported{only}")));
        }
    }
    Ok(())
}

/// Reads and checks the sampling settings, limits and streaming options of `body`.
/// `n_vocab` stands for "every token" (`top_k` 0), `n_ctx` for `repeat_last_n` -1.
pub fn params(body: &Map<String, Value>, n_vocab: usize, n_ctx: usize) -> Result<Params, ApiError> {
    reject_unsupported(body)?;
    let s: Sampling = fields(body)?;
    let d = SamplerConfig::default();
    let mut sampler = SamplerConfig {
        temperature: number(
            "temperature",
            s.temperature,
            d.temperature,
            |t| t >= 0.0,
            "a finite number >= 0 (0 is greedy)",
        )?,
        top_p: number("top_p", s.top_p, d.top_p, |p| p > 0.0 && p <= 1.0, "in (0, 1]")?,
        min_p: number("min_p", s.min_p, d.min_p, |p| (0.0..=1.0).contains(&p), "in [0, 1]")?,
        repeat_penalty: number(
            "repeat_penalty",
            s.repeat_penalty,
            d.repeat_penalty,
            |p| p > 0.0,
            "a finite number > 0 (1 is off)",
        )?,
        presence_penalty: number(
            "presence_penalty",
            s.presence_penalty,
            d.presence_penalty,
            |p| (-2.0..=2.0).contains(&p),
            "in [-2, 2]",
        )?,
        frequency_penalty: number(
            "frequency_penalty",
            s.frequency_penalty,
            d.frequency_penalty,
            |p| (-2.0..=2.0).contains(&p),
            "in [-2, 2]",
        )?,
        top_k: match s.top_k {
            None => d.top_k,
            Some(0) => n_vocab,
            Some(k) if k > 0 => usize::try_from(k).unwrap_or(usize::MAX).min(n_vocab),
            Some(k) => return Err(ApiError::invalid(format!("top_k: {k} is invalid: must be >= 0 (0: every token)"))),
        },
        repeat_last_n: match s.repeat_last_n {
            None => d.repeat_last_n,
            Some(-1) => n_ctx,
            Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX).min(n_ctx),
            Some(n) => {
                return Err(ApiError::invalid(format!("repeat_last_n: {n} is invalid: must be >= 0 (-1: the context)")))
            }
        },
        seed: match s.seed {
            None | Some(-1) => std::hash::RandomState::new().hash_one(std::time::Instant::now()),
            Some(n) => u64::try_from(n).map_err(|_| {
                ApiError::invalid(format!("seed: {n} is invalid: must be >= 0 (or -1 for a random seed)"))
            })?,
        },
    };
    // The runtime's own check backs ours up (it names command-line flags, so it is wrapped).
    if let Err(e) = sampler.validate() {
        return Err(ApiError::invalid(format!("invalid sampling settings: {e}")));
    }
    if sampler.temperature == 0.0 {
        // Greedy ignores the seed; one fixed value keeps greedy requests identical.
        sampler.seed = 0;
    }
    let (name, limit) = match (s.max_completion_tokens, s.max_tokens) {
        (Some(n), _) => ("max_completion_tokens", Some(n)),
        (None, n) => ("max_tokens", n),
    };
    let max_tokens = match limit {
        None => None,
        Some(n) if n >= 1 => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => return Err(ApiError::invalid(format!("{name}: {n} is invalid: must be >= 1"))),
    };
    let stream = s.stream.unwrap_or(false);
    Ok(Params {
        sampler,
        max_tokens,
        stop: stop_strings(s.stop.as_ref())?,
        ignore_eos: s.ignore_eos.unwrap_or(false),
        stream,
        include_usage: stream && s.stream_options.and_then(|o| o.include_usage).unwrap_or(false),
        logprobs: None,
    })
}

/// `/v1/completions`' `logprobs`: null or absent (none), or an integer in
/// `0..=`[`MAX_COMPLETION_LOGPROBS`]: each token's log-probability and that many top ones'.
/// `top_logprobs` is chat's field: only null is accepted here.
pub fn completion_logprobs(body: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    if let Some(v) = body.get("top_logprobs").filter(|v| !v.is_null()) {
        return Err(ApiError::invalid(format!(
            "top_logprobs: {v} is not supported by /v1/completions (use logprobs: 0 to {MAX_COMPLETION_LOGPROBS})"
        )));
    }
    match body.get("logprobs") {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_COMPLETION_LOGPROBS => Ok(Some(n as usize)),
            _ => Err(ApiError::invalid(format!(
                "logprobs: {v} is invalid: must be an integer in 0..={MAX_COMPLETION_LOGPROBS} (or null)"
            ))),
        },
    }
}

/// `/v1/chat/completions`' `logprobs` (a boolean; absent or null: false) and `top_logprobs`
/// (an integer in `0..=`[`MAX_CHAT_TOP_LOGPROBS`], only with `logprobs: true`; absent or
/// null: 0).
pub fn chat_logprobs(body: &Map<String, Value>) -> Result<Option<usize>, ApiError> {
    let on = match body.get("logprobs") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(ApiError::invalid(format!("logprobs: expected a boolean, got {}", json_kind(v)))),
    };
    let top = match body.get("top_logprobs") {
        None | Some(Value::Null) => None,
        Some(v) => match v.as_u64() {
            Some(n) if n <= MAX_CHAT_TOP_LOGPROBS => Some(n as usize),
            _ => {
                return Err(ApiError::invalid(format!(
                    "top_logprobs: {v} is invalid: must be an integer in 0..={MAX_CHAT_TOP_LOGPROBS} (or null)"
                )))
            }
        },
    };
    match (on, top) {
        (false, Some(n)) => {
            Err(ApiError::invalid(format!("top_logprobs: {n} needs logprobs: true (log-probabilities are off)")))
        }
        (false, None) => Ok(None),
        (true, top) => Ok(Some(top.unwrap_or(0))),
    }
}

/// A float field: its default when absent, else checked by `ok` (and finite as an f32).
fn number(
    name: &str,
    value: Option<f64>,
    default: f32,
    ok: impl Fn(f32) -> bool,
    expected: &str,
) -> Result<f32, ApiError> {
    let Some(v) = value else { return Ok(default) };
    let f = v as f32;
    if f.is_finite() && ok(f) {
        Ok(f)
    } else {
        Err(ApiError::invalid(format!("{name}: {v} is invalid: must be {expected}")))
    }
}

/// `stop`: null, a string, or an array of at most [`MAX_STOP_STRINGS`] strings; none may
/// be empty.
fn stop_strings(stop: Option<&Value>) -> Result<Vec<String>, ApiError> {
    let (items, array): (Vec<&Value>, bool) = match stop {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(v @ Value::String(_)) => (vec![v], false),
        Some(Value::Array(a)) if a.len() > MAX_STOP_STRINGS => {
            return Err(ApiError::invalid(format!(
                "stop: {} strings given, at most {MAX_STOP_STRINGS} are allowed",
                a.len()
            )))
        }
        Some(Value::Array(a)) => (a.iter().collect(), true),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "stop: expected a string or an array of strings, got {}",
                json_kind(other)
            )))
        }
    };
    let name = |i: usize| if array { format!("stop[{i}]") } else { "stop".to_string() };
    items
        .into_iter()
        .enumerate()
        .map(|(i, v)| match v {
            Value::String(s) if s.is_empty() => Err(ApiError::invalid(format!("{}: must not be empty", name(i)))),
            Value::String(s) => Ok(s.clone()),
            other => Err(ApiError::invalid(format!("{}: expected a string, got {}", name(i), json_kind(other)))),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(body: Value) -> Result<Params, String> {
        let Value::Object(map) = body else { return Err("not an object".into()) };
        params(&map, 1000, 512).map_err(|e| e.to_string())
    }

    fn error(body: Value) -> String {
        match check(body) {
            Err(m) => m,
            Ok(p) => format!("accepted: {p:?}"),
        }
    }

    #[test]
    fn defaults_are_llama_servers() {
        let p = check(json!({"model": "x"})).expect("valid");
        assert_eq!(p.sampler.temperature, SamplerConfig::default().temperature);
        assert_eq!((p.max_tokens, p.stream, p.include_usage, p.ignore_eos), (None, false, false, false));
        assert!(p.stop.is_empty());
    }

    #[test]
    fn values_out_of_range_name_their_field() {
        assert!(error(json!({"temperature": -0.5})).contains("temperature: -0.5 is invalid"));
        assert!(error(json!({"temperature": 1e300})).contains("temperature:"));
        assert!(error(json!({"top_p": 0})).contains("top_p: 0 is invalid: must be in (0, 1]"));
        assert!(error(json!({"top_p": 1.5})).contains("top_p:"));
        assert!(error(json!({"min_p": 2})).contains("min_p:"));
        assert!(error(json!({"top_k": -1})).contains("top_k: -1"));
        assert!(error(json!({"repeat_penalty": 0})).contains("repeat_penalty:"));
        assert!(error(json!({"presence_penalty": 3})).contains("presence_penalty:"));
        assert!(error(json!({"frequency_penalty": -2.5})).contains("frequency_penalty:"));
        assert!(error(json!({"max_tokens": -1})).contains("max_tokens: -1 is invalid"));
        assert!(error(json!({"max_completion_tokens": 0})).contains("max_completion_tokens: 0"));
        assert!(error(json!({"seed": -2})).contains("seed: -2"));
        assert!(error(json!({"repeat_last_n": -3})).contains("repeat_last_n: -3"));
    }

    #[test]
    fn wrong_types_name_their_field() {
        assert!(error(json!({"temperature": "hot"})).contains("temperature: invalid type: string"));
        assert!(error(json!({"max_tokens": 1.5})).contains("max_tokens: invalid type"));
        assert!(error(json!({"stream": "yes"})).contains("stream: invalid type"));
        assert!(error(json!({"stop": 5})).contains("stop: expected a string or an array of strings, got a number"));
        assert!(error(json!({"stop": ["a", 1]})).contains("stop[1]: expected a string, got a number"));
        assert!(error(json!({"stop": ""})).contains("stop: must not be empty"));
        assert!(error(json!({"stop": vec!["x"; 17]})).contains("at most 16"));
    }

    #[test]
    fn unsupported_options_are_refused_by_name_and_their_defaults_accepted() {
        assert!(error(json!({"n": 2})).contains("n: 2 is not supported (only 1 is supported)"));
        assert!(error(json!({"best_of": 3})).contains("best_of:"));
        assert!(error(json!({"echo": true})).contains("echo:"));
        assert!(error(json!({"tools": [{"type": "function"}]})).contains("tools:"));
        assert!(error(json!({"response_format": {"type": "json_object"}})).contains("response_format:"));
        let ok = json!({"n": 1, "best_of": 1, "echo": false, "logit_bias": {},
                        "tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "user": "u"});
        assert!(check(ok).is_ok());
    }

    fn map(body: Value) -> Map<String, Value> {
        let Value::Object(map) = body else { panic!("not an object") };
        map
    }

    #[test]
    fn completion_logprobs_are_0_to_5() {
        let lp = |b: Value| completion_logprobs(&map(b)).map_err(|e| e.to_string());
        assert_eq!(lp(json!({})), Ok(None));
        assert_eq!(lp(json!({"logprobs": null})), Ok(None));
        assert_eq!(lp(json!({"logprobs": 0})), Ok(Some(0)));
        assert_eq!(lp(json!({"logprobs": 5})), Ok(Some(5)));
        for bad in [json!(6), json!(-1), json!(true), json!(1.5), json!("2")] {
            let e = lp(json!({ "logprobs": bad })).expect_err("refused");
            assert!(e.contains("logprobs:") && e.contains("0..=5"), "{e}");
        }
        assert!(lp(json!({"top_logprobs": 2})).expect_err("chat's field").contains("top_logprobs:"));
    }

    #[test]
    fn chat_logprobs_are_a_flag_and_0_to_20_top_ones() {
        let lp = |b: Value| chat_logprobs(&map(b)).map_err(|e| e.to_string());
        assert_eq!(lp(json!({})), Ok(None));
        assert_eq!(lp(json!({"logprobs": false})), Ok(None));
        assert_eq!(lp(json!({"logprobs": true})), Ok(Some(0)));
        assert_eq!(lp(json!({"logprobs": true, "top_logprobs": 20})), Ok(Some(20)));
        assert_eq!(lp(json!({"logprobs": false, "top_logprobs": null})), Ok(None));
        assert!(lp(json!({"logprobs": 3})).expect_err("a boolean").contains("logprobs: expected a boolean"));
        let e = lp(json!({"logprobs": true, "top_logprobs": 21})).expect_err("too many");
        assert!(e.contains("top_logprobs: 21 is invalid"), "{e}");
        assert!(lp(json!({"logprobs": true, "top_logprobs": -1})).expect_err("negative").contains("top_logprobs:"));
        let e = lp(json!({"top_logprobs": 2})).expect_err("needs logprobs");
        assert!(e.contains("top_logprobs: 2 needs logprobs: true"), "{e}");
    }

    #[test]
    fn limits_stop_strings_and_streaming_are_read() {
        let p = check(json!({"max_tokens": 5, "max_completion_tokens": 7, "stop": ["a", "bc"], "stream": true,
                             "stream_options": {"include_usage": true}, "temperature": 0, "seed": 9, "top_k": 0,
                             "repeat_last_n": -1, "ignore_eos": true}))
        .expect("valid");
        assert_eq!(p.max_tokens, Some(7));
        assert_eq!(p.stop, vec!["a".to_string(), "bc".to_string()]);
        assert!(p.stream && p.include_usage && p.ignore_eos);
        assert_eq!((p.sampler.top_k, p.sampler.repeat_last_n, p.sampler.seed), (1000, 512, 0));
        let p = check(json!({"stream_options": {"include_usage": true}, "seed": 9, "stop": "x"})).expect("valid");
        assert!(!p.include_usage, "usage chunks only exist in a stream");
        assert_eq!((p.sampler.seed, p.stop), (9, vec!["x".to_string()]));
    }
}
