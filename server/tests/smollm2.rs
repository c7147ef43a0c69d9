//! On SmolLM2-135M-Instruct (`PUREBEE_SMOLLM2_GGUF`; without it these tests fail saying so,
//! unless `PUREBEE_SKIP_SMOLLM2=1`), with the CPU engine: the model's own chat template
//! gives a sensible greedy answer, and four times more concurrent streaming clients than
//! slots each get the reply they get alone (their slots advancing in shared passes), or a
//! 503.

mod common;

use std::path::PathBuf;

use common::*;
use purebee_loader::{EngineChoice, EngineSpec};
use purebee_server::ServerConfig;
use serde_json::json;

fn smollm2() -> Option<PathBuf> {
    purebee_testenv::smollm2_gguf("the server's SmolLM2 checks")
}

fn config(model: PathBuf, parallel: usize, max_queue: usize) -> ServerConfig {
    let mut c = ServerConfig::new(model);
    c.port = 0;
    c.parallel = parallel;
    c.n_ctx = 1024 * parallel;
    c.max_queue = max_queue;
    c.engine = EngineSpec { choice: EngineChoice::Cpu, ..EngineSpec::default() };
    c
}

#[test]
fn the_chat_template_gives_a_sensible_answer() {
    let Some(model) = smollm2() else { return };
    let s = TestServer::start(config(model, 1, 4));
    let question = json!({"role": "user", "content": "What is the capital of France?"});
    let body =
        json!({"messages": [{"role": "system", "content": "Be brief."}, question], "temperature": 0, "max_tokens": 32});
    let v = post_json(s.addr, "/v1/chat/completions", &body).json();
    assert_eq!(v["choices"][0]["message"]["content"], "The capital of France is Paris.", "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "stop", "at <|im_end|>, which is not text: {v}");
    // Without a system message the template adds SmolLM2's own: llama.cpp's 37-id prompt
    // (fixtures/smollm2/chat.json).
    let v = post_json(s.addr, "/v1/chat/completions", &json!({"messages": [question], "max_tokens": 1})).json();
    assert_eq!(v["usage"]["prompt_tokens"], 37, "{v}");
}

#[test]
fn four_times_more_streaming_clients_than_slots_get_their_own_replies_or_503() {
    let Some(model) = smollm2() else { return };
    let starts = [
        "Paris is",
        "The ocean",
        "Once upon a time",
        "My favourite food",
        "Rust is a language",
        "In 1969",
        "Cats and dogs",
        "Quantum physics",
    ];
    // Prompts with different first ids share no cached prefix, so every request is prefilled
    // the same way alone and together, and the greedy replies must be equal.
    let request = |p: &str, stream: bool| json!({"prompt": p, "temperature": 0, "max_tokens": 24, "stream": stream});
    let alone: Vec<String> = {
        let s = TestServer::start(config(model.clone(), 2, 8));
        starts
            .iter()
            .map(|p| {
                let v = post_json(s.addr, "/v1/completions", &request(p, false)).json();
                v["choices"][0]["text"].as_str().unwrap_or_default().to_string()
            })
            .collect()
    };
    let s = TestServer::start(config(model, 2, 2));
    let addr = s.addr;
    let together: Vec<(u16, Vec<String>)> = std::thread::scope(|scope| {
        let clients: Vec<_> = starts
            .iter()
            .map(|p| {
                let body = request(p, true);
                scope.spawn(move || {
                    let r = post_json(addr, "/v1/completions", &body);
                    (r.status, r.events())
                })
            })
            .collect();
        clients.into_iter().map(|c| c.join().expect("a client thread")).collect()
    });
    let mut completed = 0;
    for ((status, events), want) in together.iter().zip(&alone) {
        match status {
            200 => {
                assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
                assert_eq!(&streamed_text(events), want);
                completed += 1;
            }
            503 => {}
            other => panic!("status {other}: {events:?}"),
        }
    }
    assert!(completed >= 4, "two slots and a queue of two take at least four of eight: {together:?}");
    assert!(wait_until(|| s.metric("purebee_slots_busy") == 0.0));
    let rejected = s.metric("purebee_requests_rejected_total");
    assert_eq!(completed as f64 + rejected, 8.0);
    // The busy slots advanced together: some passes ran more than one token.
    let (passes, single) = (s.metric("purebee_batch_tokens_count"), s.metric("purebee_batch_tokens_bucket{le=\"1\"}"));
    assert!(passes > single, "{passes} passes, {single} of one token");
}
