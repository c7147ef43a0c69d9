//! SIGTERM: the server stops accepting, ends an open stream with its final chunks and
//! `[DONE]`, answers 503 to a queued request, and `run`'s wait returns Ok. Its own test
//! binary: the signal goes to this whole process.

mod common;

use std::process::Command;
use std::sync::mpsc;

use common::*;
use serde_json::{json, Value};

#[test]
fn sigterm_ends_open_streams_cleanly_and_the_server_returns_ok() {
    let mut c = tiny_config();
    c.max_queue = 2;
    let server = purebee_server::Server::start(c).expect("the server starts");
    server.shutdown_on_signals().expect("signal handlers");
    let addr = server.local_addr();
    assert!(wait_until(|| get(addr, "/health").status == 200));
    let request = json!({"messages": [{"role": "user", "content": "Tell me a story"}], "temperature": 0,
                         "ignore_eos": true, "stream": true, "stream_options": {"include_usage": true}});
    let mut open = EventStream::open(addr, "/v1/chat/completions", &request);
    assert_eq!(open.status, 200);
    let role = open.next_event().unwrap_or_default();
    assert!(role.contains("\"role\":\"assistant\""), "{role}");
    let mut queued = EventStream::send(addr, "/v1/chat/completions", &request);
    assert!(wait_until(|| metric(addr, "purebee_queue_length") == 1.0));

    let (done, finished) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(server.wait());
    });
    let status = Command::new("kill").args(["-TERM", &std::process::id().to_string()]).status().expect("kill runs");
    assert!(status.success());

    let rest = open.rest();
    assert_eq!(rest.last().map(String::as_str), Some("[DONE]"), "{rest:#?}");
    let chunks: Vec<Value> = rest[..rest.len() - 1].iter().map(|e| serde_json::from_str(e).expect("JSON")).collect();
    let n = chunks.len();
    assert!(n >= 2, "{rest:#?}");
    assert_eq!(chunks[n - 2]["choices"][0]["finish_reason"], "length", "the cut answer says so: {rest:#?}");
    assert_eq!(chunks[n - 1]["choices"], json!([]));
    assert!(chunks[n - 1]["usage"]["completion_tokens"].is_u64(), "{rest:#?}");

    queued.read_head();
    assert_eq!(queued.status, 503);

    let result = finished.recv_timeout(TIMEOUT).expect("the server stops within the timeout");
    assert!(result.is_ok(), "{result:?}");
    assert!(std::net::TcpStream::connect(addr).is_err(), "no longer accepting");
}
