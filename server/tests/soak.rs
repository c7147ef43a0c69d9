//! A soak of 1,000 short requests (chat and completions, streamed and not, prompts of many
//! lengths) on the tiny model with the CPU engine: none fails, and the process's resident memory at the end is
//! within 10% of where it was after the first 100. Its own test binary, so that no other
//! test's allocations move the measure.

mod common;

use common::*;
use purebee_loader::{EngineChoice, EngineSpec};
use serde_json::{json, Value};

/// Resident memory of this process (the server runs in it), in KiB.
fn resident_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

fn request(i: usize) -> (&'static str, Value) {
    let stream = i % 2 == 1;
    if i.is_multiple_of(3) {
        let content = format!("Request {i}: {}", "tell me more ".repeat(i % 7));
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": content}], "max_tokens": 2, "stream": stream}),
        )
    } else {
        // Prompt lengths 1..=48: prefill chunks of every power of two up to 32.
        let ids: Vec<u32> = (0..1 + i % 48).map(|k| (100 + 7 * k + i) as u32 % 8000).collect();
        ("/v1/completions", json!({"prompt": ids, "max_tokens": 2, "stream": stream, "seed": i}))
    }
}

#[test]
fn a_thousand_short_requests_succeed_and_memory_stays_flat() {
    let mut c = tiny_config();
    c.parallel = 2;
    c.n_ctx = 1024;
    // The native engine: ten times the reference engine's speed keeps the soak short.
    c.engine = EngineSpec { choice: EngineChoice::Cpu, threads: Some(1), ..EngineSpec::default() };
    let s = TestServer::start(c);
    let mut after_100 = 0;
    for i in 0..1000 {
        let (path, body) = request(i);
        let r = post_json(s.addr, path, &body);
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        if body["stream"] == json!(true) {
            assert_eq!(r.events().last().map(String::as_str), Some("[DONE]"), "request {i}");
        } else {
            assert!(r.json()["usage"]["completion_tokens"].as_u64().is_some_and(|n| n >= 1), "request {i}");
        }
        if i == 99 {
            after_100 = resident_kib();
        }
    }
    let end = resident_kib();
    assert!(
        (end as f64) <= after_100 as f64 * 1.10,
        "resident memory grew from {after_100} KiB after 100 requests to {end} KiB after 1000"
    );
    let m =
        s.metric("purebee_requests_total{outcome=\"stop\"}") + s.metric("purebee_requests_total{outcome=\"length\"}");
    assert_eq!(m, 1000.0);
    eprintln!("resident memory: {after_100} KiB after 100 requests, {end} KiB after 1000");
}
