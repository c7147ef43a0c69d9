//! `serve` with speculative decoding: clients get the plain greedy text (with a stop string
//! and a token limit cutting it where plain decoding would), and /metrics counts the drafts.
//! N-gram lookups rarely match the tiny model's gibberish; the model as its own draft
//! (every draft kept) makes each pass decide several tokens.

mod common;

use common::*;
use std::sync::{Arc, Mutex};

use purebee_loader::{ModelSource, SessionContext};
use purebee_runtime::speculative::{DraftModel, DraftSource, SpecConfig};
use serde_json::{json, Value};

/// A prompt that repeats itself, so that lookups find drafts.
const PROMPT: &str = "one two three four five six. one two three four five six. one two three";

fn completion(addr: std::net::SocketAddr, body: &Value) -> (String, String) {
    let v = post_json(addr, "/v1/completions", body).json();
    let choice = &v["choices"][0];
    (choice["text"].as_str().expect("text").to_string(), choice["finish_reason"].as_str().expect("reason").to_string())
}

/// The tiny model as its own draft, on the reference engine.
fn own_draft() -> DraftSource {
    let spec = tiny_config().engine;
    let file = purebee_loader::ModelFile::open(ModelSource::Path(&tiny_model()), &spec).expect("opens");
    let loaded = file.load(&spec, SessionContext { n_ctx: Some(256) }, |_| {}).expect("loads");
    DraftSource::Model(Arc::new(Mutex::new(DraftModel::new(loaded.model, loaded.cache, 0.0))))
}

#[test]
fn clients_get_the_plain_text_and_metrics_count_the_drafts() {
    let requests = [
        json!({"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": true}),
        json!({"prompt": PROMPT, "max_tokens": 7, "temperature": 0, "ignore_eos": true}),
    ];
    let plain = TestServer::start(tiny_config());
    let want: Vec<(String, String)> = requests.iter().map(|r| completion(plain.addr, r)).collect();
    drop(plain);

    let mut config = tiny_config();
    let source = DraftSource::Ngram { size_n: 1, size_m: 16 };
    config.speculation = Some(SpecConfig { draft_min: 0, draft_max: 8, source, row_cost: 0.0 });
    let s = TestServer::start(config);
    for (r, w) in requests.iter().zip(&want) {
        assert_eq!(&completion(s.addr, r), w, "{r}");
    }
    assert!(s.metric("purebee_draft_tokens_total") > 0.0, "lookups drafted");
    drop(s);

    let mut config = tiny_config();
    config.speculation = Some(SpecConfig { draft_min: 0, draft_max: 8, source: own_draft(), row_cost: 0.0 });
    let s = TestServer::start(config);
    for (r, w) in requests.iter().zip(&want) {
        assert_eq!(&completion(s.addr, r), w, "{r}");
    }
    // A stop string inside the text: cut at the same place.
    let cut: String = want[0].0.chars().skip(10).take(3).collect();
    let stopped = json!({"prompt": PROMPT, "max_tokens": 40, "temperature": 0, "ignore_eos": true, "stop": [cut]});
    let (text, reason) = completion(s.addr, &stopped);
    assert!(want[0].0.starts_with(&text) && text.len() < want[0].0.len(), "{text:?} against {:?}", want[0].0);
    assert_eq!(reason, "stop");
    let drafted = s.metric("purebee_draft_tokens_total");
    let accepted = s.metric("purebee_draft_tokens_accepted_total");
    assert!(drafted > 0.0 && accepted == drafted, "its own drafts are all kept: {accepted} of {drafted}");
}
