//! `logprobs` on both endpoints over HTTP (tiny model, CPU engine): OpenAI's shapes, whole
//! and streamed (a stream's chunks together carry what the whole answer does); every
//! log-probability at most 0; with temperature 0 the chosen token is the top one, with its
//! log-probability; and a request's log-probabilities are identical alone and while three
//! other requests share its batched passes.

mod common;

use std::sync::OnceLock;

use common::*;
use purebee_loader::{EngineChoice, EngineSpec};
use serde_json::{json, Value};

/// A CPU-engine server with four slots.
fn shared() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let mut c = tiny_config();
        c.engine = EngineSpec { choice: EngineChoice::Cpu, ..EngineSpec::default() };
        c.parallel = 4;
        c.n_ctx = 8192;
        TestServer::start(c)
    })
}

fn post(path: &str, body: &Value) -> Value {
    let r = post_json(shared().addr, path, body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.json()
}

/// The parsed chunks of a stream (without `[DONE]`).
fn chunks(path: &str, body: &Value) -> Vec<Value> {
    let mut body = body.clone();
    body["stream"] = json!(true);
    let r = post_json(shared().addr, path, &body);
    assert_eq!(r.status, 200, "{}", r.text());
    r.events().iter().filter(|e| e.as_str() != "[DONE]").map(|e| serde_json::from_str(e).expect("JSON")).collect()
}

fn completion_request(n: u64) -> Value {
    json!({"prompt": "Once upon a time", "max_tokens": 10, "temperature": 0, "ignore_eos": true, "logprobs": n})
}

fn chat_request(top: u64) -> Value {
    json!({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 10, "temperature": 0,
           "ignore_eos": true, "logprobs": true, "top_logprobs": top})
}

fn numbers(v: &Value) -> Vec<f64> {
    v.as_array().into_iter().flatten().map(|x| x.as_f64().expect("a number")).collect()
}

#[test]
fn completions_report_the_legacy_shape() {
    let v = post("/v1/completions", &completion_request(3));
    let lp = &v["choices"][0]["logprobs"];
    let tokens = lp["tokens"].as_array().expect("tokens");
    let token_logprobs = numbers(&lp["token_logprobs"]);
    let top = lp["top_logprobs"].as_array().expect("top_logprobs");
    let offsets: Vec<u64> = lp["text_offset"].as_array().expect("offsets").iter().filter_map(Value::as_u64).collect();
    assert!(!tokens.is_empty(), "{v}");
    assert_eq!((token_logprobs.len(), top.len(), offsets.len()), (tokens.len(), tokens.len(), tokens.len()), "{lp}");
    assert_eq!(offsets[0], 0);
    assert!(offsets.windows(2).all(|w| w[0] <= w[1]), "{lp}");
    for (i, t) in top.iter().enumerate() {
        let map = t.as_object().expect("a dict");
        assert!(!map.is_empty() && map.len() <= 3, "{t}");
        let best = map.values().filter_map(Value::as_f64).fold(f64::NEG_INFINITY, f64::max);
        assert!(best <= 0.0 && token_logprobs[i] <= 0.0, "{lp}");
        // Greedy: the chosen token is the most likely one.
        assert_eq!(token_logprobs[i], best, "token {i}: {lp}");
        assert_eq!(map.get(tokens[i].as_str().expect("a string")).and_then(Value::as_f64), Some(best), "{lp}");
    }
    // Without logprobs the field is null, and the text is the same.
    let mut plain = completion_request(0);
    plain.as_object_mut().expect("object").remove("logprobs");
    let p = post("/v1/completions", &plain);
    assert_eq!(p["choices"][0]["logprobs"], Value::Null);
    assert_eq!(p["choices"][0]["text"], v["choices"][0]["text"]);
}

#[test]
fn chat_reports_content_entries_and_the_chosen_token_is_the_top_one() {
    let v = post("/v1/chat/completions", &chat_request(4));
    let lp = &v["choices"][0]["logprobs"];
    assert_eq!(lp["refusal"], Value::Null);
    let content = lp["content"].as_array().expect("content");
    assert!(!content.is_empty(), "{v}");
    let mut bytes = Vec::new();
    for e in content {
        let logprob = e["logprob"].as_f64().expect("logprob");
        assert!(logprob <= 0.0, "{e}");
        assert!(e["token"].is_string(), "{e}");
        bytes.extend(e["bytes"].as_array().expect("bytes").iter().map(|b| b.as_u64().expect("a byte") as u8));
        let top = e["top_logprobs"].as_array().expect("top_logprobs");
        assert_eq!(top.len(), 4, "{e}");
        assert_eq!((&top[0]["token"], top[0]["logprob"].as_f64()), (&e["token"], Some(logprob)), "greedy: {e}");
        assert_eq!(top[0]["bytes"], e["bytes"]);
        let values: Vec<f64> = top.iter().map(|t| t["logprob"].as_f64().expect("logprob")).collect();
        assert!(values.windows(2).all(|w| w[0] >= w[1]) && values.iter().all(|&l| l <= 0.0), "{e}");
    }
    // The reported tokens' bytes are the answer's text (it ended by length, so every
    // token's text was released).
    if let Ok(text) = String::from_utf8(bytes) {
        assert_eq!(v["choices"][0]["message"]["content"].as_str(), Some(text.as_str()), "{v}");
    }
    // top_logprobs 0: the chosen tokens only.
    let v = post("/v1/chat/completions", &chat_request(0));
    let first = &v["choices"][0]["logprobs"]["content"][0];
    assert_eq!(first["top_logprobs"], json!([]), "{v}");
    assert!(first["logprob"].as_f64().is_some_and(|l| l <= 0.0));
}

#[test]
fn a_stream_carries_the_whole_answers_logprobs_chunk_by_chunk() {
    let whole = post("/v1/chat/completions", &chat_request(2));
    let streamed: Vec<Value> = chunks("/v1/chat/completions", &chat_request(2))
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].as_str().is_some_and(|t| !t.is_empty()))
        .flat_map(|c| {
            let entries = c["choices"][0]["logprobs"]["content"].as_array().cloned();
            entries.unwrap_or_else(|| panic!("a text chunk without logprobs: {c}"))
        })
        .collect();
    assert_eq!(Some(&streamed), whole["choices"][0]["logprobs"]["content"].as_array());

    let whole = post("/v1/completions", &completion_request(2));
    let mut joined = json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    for c in chunks("/v1/completions", &completion_request(2)) {
        let lp = &c["choices"][0]["logprobs"];
        if lp.is_null() {
            assert!(c["choices"][0]["finish_reason"].is_string(), "only the last chunk has none: {c}");
            continue;
        }
        for key in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
            let more = lp[key].as_array().cloned().unwrap_or_default();
            joined[key].as_array_mut().expect("array").extend(more);
        }
    }
    assert_eq!(joined, whole["choices"][0]["logprobs"]);
}

#[test]
fn logprobs_are_the_same_alone_and_batched_with_three_other_requests() {
    let request = json!({"prompt": "The quick brown fox", "max_tokens": 12, "temperature": 0, "ignore_eos": true,
                         "logprobs": 5});
    let alone = post("/v1/completions", &request)["choices"][0]["logprobs"].clone();
    // Three long streams hold three slots (each stream's head comes once it has a slot);
    // the request then runs in their passes.
    let others: Vec<EventStream> = (0..3)
        .map(|i| {
            let body = json!({"prompt": format!("Other request {i}"), "max_tokens": 1500, "ignore_eos": true,
                              "seed": i, "stream": true, "logprobs": i});
            let mut s = EventStream::open(shared().addr, "/v1/completions", &body);
            assert_eq!(s.status, 200);
            assert!(s.next_event().is_some(), "a first chunk");
            s
        })
        .collect();
    let batched = post("/v1/completions", &request)["choices"][0]["logprobs"].clone();
    // The others were running before it started and still are: it ran in their passes.
    for mut s in others {
        let next: Value = serde_json::from_str(&s.next_event().expect("still streaming")).expect("JSON");
        assert!(next["choices"][0]["finish_reason"].is_null(), "still running: {next}");
    }
    assert_eq!(alone, batched);
}

#[test]
fn a_stop_string_keeps_the_tokens_whose_text_was_sent() {
    // The greedy text, then the same request stopped at a piece of its middle: the reported
    // tokens are those whose text begins before the stop string; their text covers the
    // answer and at most runs into the stop string.
    let full = post("/v1/completions", &completion_request(1));
    let text = full["choices"][0]["text"].as_str().expect("text").to_string();
    let chars: Vec<char> = text.chars().collect();
    let Some(at) = (chars.len() / 2..chars.len()).find(|&i| !chars[i].is_whitespace()) else { return };
    let stop: String = chars[at..(at + 2).min(chars.len())].iter().collect();
    let expected = &text[..text.find(&stop).expect("the stop string is in the text")];
    let mut request = completion_request(1);
    request["stop"] = json!([stop]);
    let whole = post("/v1/completions", &request);
    assert_eq!(whole["choices"][0]["text"].as_str(), Some(expected), "{whole}");
    assert_eq!(whole["choices"][0]["finish_reason"], "stop");
    let lp = &whole["choices"][0]["logprobs"];
    let joined: String = lp["tokens"].as_array().expect("tokens").iter().filter_map(Value::as_str).collect();
    assert!(joined.starts_with(expected) && text.starts_with(&joined), "{joined:?} vs {expected:?} in {text:?}");
    let offsets: Vec<u64> = lp["text_offset"].as_array().expect("offsets").iter().filter_map(Value::as_u64).collect();
    assert!(offsets.iter().all(|&o| (o as usize) < expected.chars().count().max(1)), "{lp}");
    // Streamed: the same tokens.
    let streamed: Vec<Value> = chunks("/v1/completions", &request)
        .iter()
        .filter_map(|c| c["choices"][0]["logprobs"]["tokens"].as_array().cloned())
        .flatten()
        .collect();
    assert_eq!(Some(&streamed), lp["tokens"].as_array());
}
