//! The API over raw HTTP on the tiny model: every class of bad request answered with its
//! status and error type (and the server still up), the endpoints' shapes, streaming in
//! OpenAI's order, stop strings, the prompt cache, the context limit and the API key.

mod common;

use std::sync::OnceLock;

use common::*;
use serde_json::{json, Value};

/// One server for the tests that do not depend on its counters; a small body limit so the
/// over-the-limit test stays small.
fn shared() -> &'static TestServer {
    static SERVER: OnceLock<TestServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let mut c = tiny_config();
        c.max_body_bytes = 64 * 1024;
        c.n_ctx = 512;
        TestServer::start(c)
    })
}

fn chat(body: Value) -> Response {
    post_json(shared().addr, "/v1/chat/completions", &body)
}

fn completion(body: Value) -> Response {
    post_json(shared().addr, "/v1/completions", &body)
}

fn hello() -> Value {
    json!([{"role": "user", "content": "Hello"}])
}

/// The server still answers after a bad request.
fn still_up() {
    assert_eq!(get(shared().addr, "/health").status, 200);
}

#[test]
fn a_body_that_is_not_json_is_400() {
    post(shared().addr, "/v1/chat/completions", b"{\"messages\": [").expect_error(
        400,
        "invalid_request_error",
        "not valid JSON",
    );
    still_up();
}

#[test]
fn an_empty_body_is_400() {
    post(shared().addr, "/v1/completions", b"").expect_error(400, "invalid_request_error", "empty");
    still_up();
}

#[test]
fn invalid_utf8_is_400() {
    post(shared().addr, "/v1/completions", b"{\"prompt\": \"\xc3\x28\"}").expect_error(
        400,
        "invalid_request_error",
        "UTF-8",
    );
    still_up();
}

#[test]
fn json_that_is_not_an_object_is_400() {
    post(shared().addr, "/v1/completions", b"[1, 2]").expect_error(400, "invalid_request_error", "JSON object");
}

#[test]
fn a_wrong_type_is_400_naming_the_field() {
    chat(json!({"messages": hello(), "temperature": "hot"})).expect_error(400, "invalid_request_error", "temperature");
    chat(json!({"messages": "hi"})).expect_error(400, "invalid_request_error", "messages");
    chat(json!({"messages": [{"role": "user", "content": 5}]})).expect_error(
        400,
        "invalid_request_error",
        "messages[0].content",
    );
    completion(json!({"prompt": "x", "stream_options": {"include_usage": "yes"}})).expect_error(
        400,
        "invalid_request_error",
        "stream_options.include_usage",
    );
    still_up();
}

#[test]
fn a_missing_field_is_400_naming_it() {
    chat(json!({"model": "m"})).expect_error(400, "invalid_request_error", "messages");
    completion(json!({"model": "m"})).expect_error(400, "invalid_request_error", "prompt");
}

#[test]
fn a_body_over_the_limit_is_413() {
    let big = json!({"prompt": "a".repeat(100 * 1024)});
    completion(big).expect_error(413, "invalid_request_error", "limit");
    still_up();
}

#[test]
fn n_above_one_is_refused_by_name() {
    chat(json!({"messages": hello(), "n": 2})).expect_error(400, "invalid_request_error", "n:");
}

#[test]
fn echo_is_refused_by_name() {
    completion(json!({"prompt": "x", "echo": true})).expect_error(400, "invalid_request_error", "echo");
}

#[test]
fn best_of_is_refused_by_name() {
    completion(json!({"prompt": "x", "best_of": 3})).expect_error(400, "invalid_request_error", "best_of");
}

#[test]
fn logprobs_out_of_range_are_400_naming_the_field() {
    // The answers' shapes are checked in logprobs.rs.
    completion(json!({"prompt": "x", "logprobs": 6})).expect_error(400, "invalid_request_error", "logprobs: 6");
    completion(json!({"prompt": "x", "logprobs": true})).expect_error(400, "invalid_request_error", "logprobs:");
    chat(json!({"messages": hello(), "logprobs": 2})).expect_error(400, "invalid_request_error", "logprobs:");
    chat(json!({"messages": hello(), "logprobs": true, "top_logprobs": 21})).expect_error(
        400,
        "invalid_request_error",
        "top_logprobs: 21",
    );
    chat(json!({"messages": hello(), "top_logprobs": 3})).expect_error(400, "invalid_request_error", "top_logprobs");
    still_up();
}

#[test]
fn a_nan_temperature_is_400() {
    // JSON has no NaN: the literal makes the body invalid JSON.
    post(
        shared().addr,
        "/v1/chat/completions",
        br#"{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}"#,
    )
    .expect_error(400, "invalid_request_error", "JSON");
}

#[test]
fn a_negative_temperature_is_400() {
    chat(json!({"messages": hello(), "temperature": -1})).expect_error(400, "invalid_request_error", "temperature");
}

#[test]
fn top_p_outside_zero_to_one_is_400() {
    chat(json!({"messages": hello(), "top_p": 0})).expect_error(400, "invalid_request_error", "top_p");
    chat(json!({"messages": hello(), "top_p": 1.01})).expect_error(400, "invalid_request_error", "top_p");
}

#[test]
fn a_negative_max_tokens_is_400() {
    completion(json!({"prompt": "x", "max_tokens": -5})).expect_error(400, "invalid_request_error", "max_tokens");
}

#[test]
fn token_ids_past_the_vocabulary_are_400() {
    completion(json!({"prompt": [1, 2, 8192]})).expect_error(400, "invalid_request_error", "prompt[2]: token id 8192");
    completion(json!({"prompt": [1, -1]})).expect_error(400, "invalid_request_error", "prompt[1]");
    post_json(shared().addr, "/detokenize", &json!({"tokens": [1, 9000]})).expect_error(
        400,
        "invalid_request_error",
        "tokens[1]",
    );
    still_up();
}

#[test]
fn a_prompt_longer_than_the_context_is_400_naming_both_sizes_before_any_stream() {
    let ids: Vec<u32> = (0..600).map(|i| 100 + i % 50).collect();
    for stream in [false, true] {
        let r = completion(json!({"prompt": ids, "stream": stream}));
        assert_eq!(r.header("content-type"), Some("application/json"));
        let e = r.expect_error(400, "exceed_context_size_error", "600");
        assert_eq!((e["n_prompt_tokens"].as_u64(), e["n_ctx"].as_u64()), (Some(600), Some(512)));
        assert!(e["message"].as_str().unwrap_or_default().contains("512"));
    }
}

#[test]
fn unknown_paths_are_404_and_wrong_methods_405() {
    get(shared().addr, "/v1/nothing").expect_error(404, "not_found_error", "/v1/nothing");
    get(shared().addr, "/v1/chat/completions").expect_error(405, "invalid_request_error", "GET");
}

#[test]
fn unsupported_content_parts_are_400() {
    let messages = json!([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]);
    chat(json!({"messages": messages})).expect_error(400, "invalid_request_error", "messages[0].content[0].type");
}

#[test]
fn models_lists_the_one_model() {
    let v = get(shared().addr, "/v1/models").json();
    assert_eq!(v["object"], "list");
    assert_eq!(v["data"][0]["id"], "tiny_b158_i2_s.gguf");
    assert_eq!(v["data"][0]["meta"]["n_ctx"], 512);
}

#[test]
fn tokenize_and_detokenize_round_trip() {
    let r = post_json(shared().addr, "/tokenize", &json!({"content": "Hello world", "add_special": true}));
    let ids = r.json()["tokens"].clone();
    assert_eq!(ids[0], 0, "BOS first: {ids}");
    let back = post_json(shared().addr, "/detokenize", &json!({"tokens": ids}));
    assert_eq!(back.json()["content"], "<|endoftext|>Hello world");
    let pieces = post_json(shared().addr, "/tokenize", &json!({"content": "Hello", "with_pieces": true})).json();
    let text: String = pieces["tokens"].as_array().into_iter().flatten().filter_map(|t| t["piece"].as_str()).collect();
    assert_eq!(text, "Hello", "{pieces}");
}

#[test]
fn a_chat_answer_has_openais_shape_and_usage() {
    let r = chat(json!({"messages": hello(), "max_tokens": 5, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert!(v["choices"][0]["message"]["content"].is_string());
    let reason = v["choices"][0]["finish_reason"].as_str().unwrap_or_default();
    assert!(reason == "stop" || reason == "length", "{v}");
    let u = &v["usage"];
    assert_eq!(
        u["total_tokens"],
        u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0)
    );
    assert!(u["completion_tokens"].as_u64().is_some_and(|n| (1..=5).contains(&n)), "{u}");
}

#[test]
fn a_chat_stream_comes_in_openais_order_and_matches_the_whole_answer() {
    let request = json!({"messages": hello(), "max_tokens": 12, "temperature": 0, "ignore_eos": true});
    let whole = chat(request.clone()).json();
    let mut streamed = request;
    streamed["stream"] = json!(true);
    streamed["stream_options"] = json!({"include_usage": true});
    let r = chat(streamed);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    let parsed: Vec<Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).expect("JSON")).collect();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    assert_eq!(parsed[0]["choices"][0]["delta"], json!({"role": "assistant", "content": ""}));
    let n = parsed.len();
    for chunk in &parsed[1..n - 2] {
        assert!(chunk["choices"][0]["delta"]["content"].is_string(), "{chunk}");
        assert!(chunk["choices"][0]["finish_reason"].is_null(), "{chunk}");
        assert!(chunk["usage"].is_null(), "{chunk}");
    }
    assert_eq!(parsed[n - 2]["choices"][0]["finish_reason"], "length");
    assert_eq!(parsed[n - 1]["choices"], json!([]));
    assert_eq!(parsed[n - 1]["usage"]["completion_tokens"], 12);
    assert_eq!(parsed[n - 1]["usage"]["prompt_tokens"], whole["usage"]["prompt_tokens"]);
    assert_eq!(streamed_text(&events), whole["choices"][0]["message"]["content"].as_str().unwrap_or_default());
}

#[test]
fn a_completion_stream_without_usage_ends_with_finish_and_done() {
    let r = completion(
        json!({"prompt": "Once upon", "max_tokens": 4, "temperature": 0, "stream": true, "ignore_eos": true}),
    );
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let last: Value = serde_json::from_str(&events[events.len() - 2]).expect("JSON");
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert!(events.iter().all(|e| !e.contains("\"usage\"")), "{events:#?}");
}

#[test]
fn stop_strings_end_the_text_before_them_and_are_never_sent() {
    let base = json!({"prompt": "The quick brown fox", "max_tokens": 40, "temperature": 0, "ignore_eos": true});
    let full = completion(base.clone()).json()["choices"][0]["text"].as_str().unwrap_or_default().to_string();
    // A stop string from the middle of the greedy text, spanning several characters.
    let chars: Vec<char> = full.chars().collect();
    assert!(chars.len() >= 12, "the greedy text is too short for this test: {full:?}");
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 3].iter().collect();
    let expected = &full[..full.find(&stop).unwrap_or(0)];
    for stream in [false, true] {
        let mut req = base.clone();
        req["stop"] = json!(["never-in-this-text", stop]);
        req["stream"] = json!(stream);
        let r = completion(req);
        let (text, reason) = if stream {
            let events = r.events();
            let finish: Value = serde_json::from_str(&events[events.len() - 2]).expect("JSON");
            (streamed_text(&events), finish["choices"][0]["finish_reason"].clone())
        } else {
            let v = r.json();
            (v["choices"][0]["text"].as_str().unwrap_or_default().to_string(), v["choices"][0]["finish_reason"].clone())
        };
        assert_eq!(text, expected, "stream={stream}, stop={stop:?}, full={full:?}");
        assert_eq!(reason, "stop");
    }
}

#[test]
fn a_generation_that_fills_the_context_ends_with_length() {
    // 500 prompt ids in a 512-position slot: the tokens run at positions 500..=511 each
    // give one more, plus the first from the prompt.
    let ids: Vec<u32> = (0..500).map(|i| 200 + i % 300).collect();
    let v = completion(json!({"prompt": ids, "temperature": 0, "ignore_eos": true})).json();
    assert_eq!(v["choices"][0]["finish_reason"], "length", "{v}");
    assert_eq!(v["usage"]["completion_tokens"], 13, "{v}");
}

#[test]
fn api_key_is_required_when_set_and_health_stays_open() {
    let mut c = tiny_config();
    c.api_key = Some("sk-test".to_string());
    let s = TestServer::start(c);
    let body = json!({"prompt": "x", "max_tokens": 1}).to_string();
    let path = "/v1/completions";
    request(s.addr, "POST", path, &[], body.as_bytes()).expect_error(401, "authentication_error", "missing API key");
    request(s.addr, "POST", path, &[("Authorization", "Bearer sk-tesT")], body.as_bytes()).expect_error(
        401,
        "authentication_error",
        "invalid API key",
    );
    assert_eq!(request(s.addr, "GET", "/metrics", &[("X-Api-Key", "nope")], b"").status, 401);
    assert_eq!(request(s.addr, "POST", path, &[("Authorization", "Bearer sk-test")], body.as_bytes()).status, 200);
    assert_eq!(request(s.addr, "GET", "/metrics", &[("X-Api-Key", "sk-test")], b"").status, 200);
    assert_eq!(get(s.addr, "/health").status, 200);
    assert_eq!(get(s.addr, "/v1/models").status, 200);
}

#[test]
fn a_repeated_prompt_reuses_the_slots_cache() {
    let s = TestServer::start(tiny_config());
    let ids: Vec<u32> = (0..40).map(|i| 300 + i).collect();
    let req = json!({"prompt": ids, "max_tokens": 6, "temperature": 0, "ignore_eos": true});
    let first = post_json(s.addr, "/v1/completions", &req).json();
    let second = post_json(s.addr, "/v1/completions", &req).json();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    // Every prompt id but the last (whose logits give the first token) comes from the cache.
    assert_eq!(second["usage"]["prompt_tokens_details"]["cached_tokens"], 39, "{second}");
    assert_eq!(second["choices"][0]["text"], first["choices"][0]["text"]);
    assert_eq!(s.metric("purebee_prompt_tokens_cached_total"), 39.0);
}

#[test]
fn settings_that_cannot_work_and_a_missing_model_fail_at_start() {
    let mut c = tiny_config();
    c.parallel = 0;
    let e = purebee_server::Server::start(c).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("--parallel"), "{e}");
    let mut c = tiny_config();
    c.model_path = "/nonexistent/model.gguf".into();
    let e = purebee_server::Server::start(c).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(e.contains("/nonexistent/model.gguf"), "{e}");
}

#[test]
fn an_engine_error_is_a_500_or_after_the_stream_started_an_error_event() {
    // A model file changed after it was mapped makes every pass fail (the runtime checks it).
    let copy = std::env::temp_dir().join(format!("purebee-server-test-{}.gguf", std::process::id()));
    std::fs::copy(tiny_model(), &copy).expect("copy the fixture");
    let mut c = tiny_config();
    c.model_path = copy.clone();
    let s = TestServer::start(c);
    let file = std::fs::File::options().write(true).open(&copy).expect("open the copy");
    file.set_modified(std::time::SystemTime::UNIX_EPOCH).expect("change its modification time");
    let body = json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2});
    let error = post_json(s.addr, "/v1/chat/completions", &body).expect_error(500, "server_error", "engine failed");
    // The cause (which names the model's path) is for the operator's log, not the client.
    let message = error["message"].as_str().unwrap_or_default();
    assert!(!message.contains(&*copy.to_string_lossy()) && !message.contains("modified"), "{message}");
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let r = post_json(s.addr, "/v1/chat/completions", &streamed);
    assert_eq!(r.status, 200, "the stream started before the engine failed");
    let events = r.events();
    assert_eq!(events.len(), 2, "{events:#?}");
    assert!(events[0].contains("\"role\":\"assistant\""), "{events:#?}");
    let error: Value = serde_json::from_str(&events[1]).expect("JSON");
    assert_eq!(error["error"]["type"], "server_error", "{error}");
    assert_eq!(get(s.addr, "/health").status, 200, "the server stays up");
    assert_eq!(s.metric("purebee_requests_total{outcome=\"error\"}"), 2.0);
    let _ = std::fs::remove_file(&copy);
}

#[test]
fn a_model_that_cannot_load_stops_the_server_with_its_error() {
    let path = std::env::temp_dir().join(format!("purebee-server-test-{}-bad.gguf", std::process::id()));
    let mut w = purebee_memory::gguf::GgufWriter::new();
    w.add_str("general.architecture", "no-such-arch").expect("a key");
    w.write_file(&path).expect("write the file");
    let mut c = tiny_config();
    c.model_path = path.clone();
    // The file maps, so the server starts; loading fails on the engine thread.
    let server = purebee_server::Server::start(c).expect("the server starts");
    let addr = server.local_addr();
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(server.wait().err().map(|e| e.to_string()));
    });
    let error = finished.recv_timeout(TIMEOUT).expect("the server stops by itself").unwrap_or_default();
    assert!(error.contains("no-such-arch"), "{error}");
    assert!(std::net::TcpStream::connect(addr).is_err(), "no longer listening");
    let _ = std::fs::remove_file(&path);
}
