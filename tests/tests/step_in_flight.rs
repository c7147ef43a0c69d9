//! A generation step in two halves (`Generator::begin_step`, `StepInFlight::is_ready`,
//! `Generator::finish_step`), as a caller that must not block drives it (a browser tab
//! yields to its event loop between the halves): the same ids as `Generator::step`, for
//! every way a step reads its result (greedy, running ahead, TOP_K candidates, whole rows
//! with log-probabilities) and through prefill chunks, on every engine.

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_gpu::GpuOptions;
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::{Generator, Model, Prefill, Session};
use purebee_tests::differential::{cpu_test_threads, gpu_tests_skipped, new_gpu_engine};
use purebee_tests::watched::WatchedRef;
use purebee_tests::{case_ids, tiny};

const MODEL: &str = "tiny_b158_f32";
const TOKENS: usize = 12;

/// The sampler settings under test, with whether log-probabilities are asked for.
fn configs() -> Vec<(&'static str, SamplerConfig, Option<usize>)> {
    let greedy = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    let sampled = SamplerConfig { seed: 7, temperature: 1.0, top_k: 8, ..SamplerConfig::default() };
    // A negative penalty needs every logit: whole rows.
    let whole = SamplerConfig { seed: 9, temperature: 0.8, presence_penalty: -0.5, ..SamplerConfig::default() };
    vec![
        ("greedy", greedy.clone(), None),
        ("greedy with log-probabilities", greedy, Some(3)),
        ("top-k candidates", sampled, None),
        ("whole rows", whole.clone(), None),
        ("whole rows with log-probabilities", whole, Some(2)),
    ]
}

fn load<E: Engine>(engine: E) -> (Model<E>, Session) {
    let file = GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens");
    let mut model = Model::load(engine, &file).expect("model loads");
    let session = model.new_session(128).expect("session allocates");
    (model, session)
}

fn generator(session: &Session, config: &SamplerConfig, logprobs: Option<usize>) -> Generator {
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    // Chunks of 4: the prompt's first chunks are steps that yield no token.
    Generator::new(session, &prompt, config.clone()).expect("valid").prefill(Prefill::Chunks(4)).logprobs(logprobs)
}

/// `TOKENS` ids with `Generator::step`.
fn stepped<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    config: &SamplerConfig,
    lp: Option<usize>,
) -> Vec<u32> {
    session.clear();
    let mut g = generator(session, config, lp);
    let mut ids = Vec::new();
    while ids.len() < TOKENS {
        ids.extend(g.step(model, session).expect("step"));
    }
    ids
}

/// `TOKENS` ids in two halves, asking `is_ready` until it says yes (an engine may take a
/// while; it must say yes in the end without being waited on).
fn in_halves<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    config: &SamplerConfig,
    lp: Option<usize>,
) -> Vec<u32> {
    session.clear();
    let mut g = generator(session, config, lp);
    let mut ids = Vec::new();
    while ids.len() < TOKENS {
        let step = g.begin_step(model, session).expect("begin");
        let start = std::time::Instant::now();
        while !step.is_ready(model) {
            assert!(start.elapsed().as_secs() < 60, "a step's result never became ready");
            std::thread::yield_now();
        }
        ids.extend(g.finish_step(model, session, step).expect("finish"));
    }
    ids
}

fn check<E: Engine>(engine: E) {
    let (mut model, mut session) = load(engine);
    for (name, config, lp) in configs() {
        let want = stepped(&mut model, &mut session, &config, lp);
        let got = in_halves(&mut model, &mut session, &config, lp);
        assert_eq!(got, want, "{name} on {}", model.engine().name());
    }
}

#[test]
fn halves_give_the_steps_ids_on_the_reference_engine() {
    check(RefEngine::new());
}

#[test]
fn halves_give_the_steps_ids_when_steps_run_ahead() {
    // Claims overlapping reads: plain greedy decoding runs ahead.
    check(WatchedRef::new(true));
}

#[test]
fn halves_give_the_steps_ids_on_the_cpu() {
    check(CpuEngine::new(&CpuOptions { threads: Some(cpu_test_threads()), simd: None }).expect("cpu engine"));
}

#[test]
fn halves_give_the_steps_ids_on_the_gpu() {
    if gpu_tests_skipped() {
        return;
    }
    check(new_gpu_engine(&GpuOptions::default()));
}
