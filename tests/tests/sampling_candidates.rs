//! Sampling from TOP_K's candidates is exact: a `Generator` that reads back only the
//! `SamplerConfig::candidates` largest logits of each step draws the same tokens, from the
//! same seed, as one that reads every step's whole row (`Generator::full_rows`), with and
//! without penalties, for greedy with penalties, and where the runtime must fall back to
//! the whole row (a penalty that can raise a logit, a `k` past the engine's TOP_K limit).
//! On the reference engine (which also counts the bytes each step reads back) and on the
//! GPU engine (lavapipe in CI).

use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::{Generator, Model, Session};
use purebee_tests::differential::gpu_tests_skipped;
use purebee_tests::watched::WatchedRef;
use purebee_tests::{case_ids, tiny};

const MODEL: &str = "tiny_b158_tq2_0";
const TOKENS: usize = 24;

/// Sampler settings that read candidates (`Some` from `candidates`) and some that cannot.
fn configs() -> Vec<(&'static str, SamplerConfig)> {
    let base = SamplerConfig { seed: 42, temperature: 1.0, ..SamplerConfig::default() };
    let with = |f: fn(&mut SamplerConfig)| {
        let mut c = base.clone();
        f(&mut c);
        c
    };
    vec![
        ("default", base.clone()),
        ("hot, top-k 5, no top-p or min-p", with(|c| (c.temperature, c.top_k, c.top_p, c.min_p) = (1.7, 5, 1.0, 0.0))),
        (
            "penalties over 8 tokens",
            with(|c| {
                (c.repeat_penalty, c.frequency_penalty, c.presence_penalty, c.repeat_last_n) = (1.3, 0.4, 0.3, 8);
                c.temperature = 1.4;
            }),
        ),
        ("strong repeat penalty over 64", with(|c| (c.repeat_penalty, c.temperature, c.top_k) = (3.0, 0.9, 3))),
        ("greedy with penalties", with(|c| (c.temperature, c.repeat_penalty, c.presence_penalty) = (0.0, 1.5, 0.5))),
        ("k past the GPU's limit", with(|c| (c.top_k, c.top_p, c.min_p, c.temperature) = (300, 1.0, 0.0, 2.0))),
        ("a negative penalty (whole rows)", with(|c| (c.presence_penalty, c.temperature) = (-0.5, 1.2))),
    ]
}

/// `TOKENS` tokens generated after the prompt, reading whole rows or candidates.
fn tokens<E: Engine>(model: &mut Model<E>, session: &mut Session, config: &SamplerConfig, full: bool) -> Vec<u32> {
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    session.clear();
    let mut g = Generator::new(session, &prompt, config.clone()).expect("valid").full_rows(full);
    (0..TOKENS).map(|_| g.step(model, session).expect("step").expect("a token")).collect()
}

fn load<E: Engine>(engine: E) -> (Model<E>, Session) {
    let file = GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens");
    let mut model = Model::load(engine, &file).expect("model loads");
    let session = model.new_session(128).expect("session allocates");
    (model, session)
}

#[test]
fn candidates_draw_the_tokens_of_whole_rows_on_the_reference_engine() {
    let engine = WatchedRef::new(false);
    let read = engine.bytes_read();
    let (mut model, mut session) = load(engine);
    let vocab = model.config().n_vocab;
    for (what, config) in configs() {
        read.set(0);
        let whole = tokens(&mut model, &mut session, &config, true);
        let whole_bytes = read.get();
        read.set(0);
        let candidates = tokens(&mut model, &mut session, &config, false);
        let candidate_bytes = read.get();
        assert_eq!(candidates, whole, "{what}: candidates vs whole rows");
        assert_eq!(whole_bytes, TOKENS * 4 * vocab, "{what}: a whole row per token");
        let per_token = match config.candidates(vocab) {
            Some(k) => 8 * k,
            None => 4 * vocab,
        };
        assert_eq!(candidate_bytes, TOKENS * per_token, "{what}: bytes read back");
        eprintln!("{what}: {} bytes per token instead of {}", per_token, 4 * vocab);
    }
}

#[test]
fn candidates_draw_the_tokens_of_whole_rows_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    let engine = GpuEngine::new(&GpuOptions::default()).expect("a wgpu adapter");
    let (mut model, mut session) = load(engine);
    for (what, config) in configs() {
        let whole = tokens(&mut model, &mut session, &config, true);
        let candidates = tokens(&mut model, &mut session, &config, false);
        assert_eq!(candidates, whole, "{what}: candidates vs whole rows on the GPU");
    }
    // A sampled decode step is one submit: the pass, TOP_K and the reads of the values and
    // the ids together (programs without queue writes join the pending commands, and
    // `read_later_all` copies both in one command buffer).
    let config = configs().into_iter().next().expect("a config").1;
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    session.clear();
    let mut g = Generator::new(&session, &prompt, config).expect("valid");
    g.step(&mut model, &mut session).expect("prefill").expect("a token");
    g.step(&mut model, &mut session).expect("step").expect("a token");
    let counters = |m: &Model<GpuEngine>| m.engine().counters().expect("the GPU engine counts");
    let before = counters(&model);
    let steps = 8;
    for _ in 0..steps {
        g.step(&mut model, &mut session).expect("step").expect("a token");
    }
    assert_eq!(counters(&model).since(before).submits, steps as u64, "submits per sampled decode step");
}
