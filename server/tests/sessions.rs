//! Slots and the queue on the tiny model: clients that leave in prefill, in decode or in
//! the queue free what they held (seen on /metrics) without touching other requests; a full
//! queue answers 503; concurrent requests get the answers they get alone.

mod common;

use common::*;
use serde_json::{json, Value};

/// A request that generates until the 4096-position context is full (thousands of steps on
/// the reference engine): it is still running whenever these tests look.
fn long_request() -> Value {
    json!({"prompt": "Once upon a time", "temperature": 0, "ignore_eos": true, "stream": true})
}

fn server(parallel: usize, max_queue: usize) -> TestServer {
    let mut c = tiny_config();
    c.parallel = parallel;
    c.n_ctx = 4096 * parallel;
    c.max_queue = max_queue;
    TestServer::start(c)
}

#[test]
fn a_client_that_leaves_during_decode_frees_its_slot() {
    let s = server(1, 4);
    let mut stream = EventStream::open(s.addr, "/v1/completions", &long_request());
    assert_eq!(stream.status, 200);
    assert!(stream.next_event().is_some_and(|e| e.contains("\"text\"")), "a first piece of text");
    assert_eq!(s.metric("purebee_slots_busy"), 1.0);
    drop(stream);
    assert!(wait_until(|| s.metric("purebee_requests_cancelled_total{phase=\"decode\"}") == 1.0));
    assert!(wait_until(|| s.metric("purebee_slots_busy") == 0.0));
    // The slot serves the next request.
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "Hi", "max_tokens": 2}));
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        s.metric("purebee_requests_total{outcome=\"length\"}") + s.metric("purebee_requests_total{outcome=\"stop\"}"),
        1.0
    );
}

#[test]
fn a_client_that_leaves_during_prefill_frees_its_slot_before_any_token() {
    let mut c = tiny_config();
    // One prompt id per step: the 4000-id prefill takes thousands of steps.
    c.ubatch = 1;
    let s = TestServer::start(c);
    let ids: Vec<u32> = (0..4000).map(|i| 100 + i % 4000).collect();
    let stream = EventStream::send(s.addr, "/v1/completions", &json!({"prompt": ids, "stream": true, "max_tokens": 1}));
    assert!(wait_until(|| s.metric("purebee_slots_busy") == 1.0));
    drop(stream);
    assert!(wait_until(|| s.metric("purebee_requests_cancelled_total{phase=\"prefill\"}") == 1.0));
    assert!(wait_until(|| s.metric("purebee_slots_busy") == 0.0));
    assert_eq!(s.metric("purebee_generated_tokens_total"), 0.0);
}

#[test]
fn a_full_queue_answers_503() {
    let s = server(1, 1);
    let mut running = EventStream::open(s.addr, "/v1/completions", &long_request());
    assert_eq!(running.status, 200);
    let _waiting = EventStream::send(s.addr, "/v1/completions", &long_request());
    assert!(wait_until(|| s.metric("purebee_queue_length") == 1.0));
    let r = post_json(s.addr, "/v1/completions", &json!({"prompt": "x", "max_tokens": 1}));
    r.expect_error(503, "unavailable_error", "busy");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(s.metric("purebee_requests_rejected_total"), 1.0);
    assert!(running.next_event().is_some(), "the running request goes on");
}

#[test]
fn a_queued_client_that_leaves_is_dropped_without_touching_the_running_one() {
    let s = server(1, 2);
    let mut running = EventStream::open(s.addr, "/v1/completions", &long_request());
    let before = streamed_text(&[running.next_event().unwrap_or_default()]);
    let waiting = EventStream::send(s.addr, "/v1/completions", &long_request());
    assert!(wait_until(|| s.metric("purebee_queue_length") == 1.0));
    drop(waiting);
    assert!(wait_until(|| s.metric("purebee_requests_cancelled_total{phase=\"queue\"}") == 1.0));
    assert_eq!(s.metric("purebee_queue_length"), 0.0);
    assert_eq!(s.metric("purebee_slots_busy"), 1.0);
    assert_eq!(s.metric("purebee_requests_cancelled_total{phase=\"decode\"}"), 0.0);
    // The running stream still delivers text.
    let more: Vec<String> = (0..5).filter_map(|_| running.next_event()).collect();
    assert_eq!(more.len(), 5);
    assert!(!before.is_empty() || !streamed_text(&more).is_empty());
}

#[test]
fn concurrent_clients_get_the_answers_they_get_alone() {
    let s = server(2, 6);
    let prompts: Vec<String> = (0..8).map(|i| format!("Story number {i}: once upon a time")).collect();
    let request = |p: &str, stream: bool| json!({"prompt": p, "max_tokens": 16, "temperature": 0, "ignore_eos": true, "stream": stream});
    let alone: Vec<String> = prompts
        .iter()
        .map(|p| {
            let v = post_json(s.addr, "/v1/completions", &request(p, false)).json();
            v["choices"][0]["text"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    let addr = s.addr;
    let together: Vec<(u16, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = prompts
            .iter()
            .map(|p| {
                let body = request(p, true);
                scope.spawn(move || {
                    let r = post_json(addr, "/v1/completions", &body);
                    (r.status, streamed_text(&r.events()))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a client thread")).collect()
    });
    for ((status, text), want) in together.iter().zip(&alone) {
        assert_eq!(*status, 200);
        assert_eq!(text, want);
    }
    assert!(wait_until(|| s.metric("purebee_slots_busy") == 0.0));
    assert_eq!(s.metric("purebee_requests_total{outcome=\"length\"}"), 16.0);
}
