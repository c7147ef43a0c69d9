//! Greedy decoding that runs one step ahead (`Generator` on an engine whose reads overlap
//! its work): each step queues the next one from the token the decode pass left on the
//! engine before the host has it. The ids must be exactly those of the plain loop, the
//! session must hold exactly the ids it ran, and on the GPU a decode step costs one submit.
//!
//! `WatchedRef::new(true)` wraps the reference engine and claims overlapping reads, so the run-ahead
//! path of the runtime is checked deterministically without a GPU; the GPU test runs it on
//! the real asynchronous engine (lavapipe in CI).

use purebee_engine_gpu::{GpuEngine, GpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::{DispatchCounters, Engine};
use purebee_memory::gguf::GgufFile;
use purebee_runtime::{generate, generate_reusing_cache, Generator, Model, ModelError, Session, StopReason};
use purebee_tests::differential::{gpu_tests_skipped, new_gpu_engine};
use purebee_tests::watched::WatchedRef;
use purebee_tests::{case_ids, greedy_ignoring_eos as greedy, tiny};

const MODEL: &str = "tiny_b158_f32";

fn file() -> GgufFile {
    GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens")
}

fn model_and_session<E: Engine>(engine: E, n_ctx: usize) -> (Model<E>, Session) {
    let mut model = Model::load(engine, &file()).expect("model loads");
    let session = model.new_session(n_ctx).expect("session allocates");
    (model, session)
}

#[test]
fn running_ahead_gives_llama_cpps_greedy_ids_and_the_session_holds_what_ran() {
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    let want = case_ids(MODEL, "p16", "llamacpp_greedy_ids");
    let (mut model, mut session) = model_and_session(WatchedRef::new(true), 256);
    let g = generate(&mut model, &mut session, &prompt, &greedy(want.len()), |_| false, |_| {}).expect("generates");
    assert_eq!(g.generated, want);
    // The step queued after the last token ran that token: the session holds the prompt and
    // every generated id (the plain loop never runs the last one).
    let held: Vec<u32> = prompt.iter().chain(&want).copied().collect();
    assert_eq!(session.cached_ids(), &held[..]);

    // Going on from that cache gives what a plain engine gives from scratch.
    let mut longer = held.clone();
    longer.extend([3, 5]);
    let again = generate_reusing_cache(&mut model, &mut session, &longer, &greedy(6), |_| false, |_| {})
        .expect("generates again");
    assert_eq!(again.reused_tokens, held.len());
    let (mut plain, mut fresh) = model_and_session(RefEngine::new(), 256);
    let from_scratch = generate(&mut plain, &mut fresh, &longer, &greedy(6), |_| false, |_| {}).expect("generates");
    assert_eq!(again.generated, from_scratch.generated);
}

#[test]
fn running_ahead_stops_at_the_end_of_the_context_as_the_plain_loop_does() {
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    let n_ctx = prompt.len() + 3;
    let ahead = {
        let (mut model, mut session) = model_and_session(WatchedRef::new(true), n_ctx);
        generate(&mut model, &mut session, &prompt, &greedy(50), |_| false, |_| {}).expect("generates")
    };
    let plain = {
        let (mut model, mut session) = model_and_session(RefEngine::new(), n_ctx);
        generate(&mut model, &mut session, &prompt, &greedy(50), |_| false, |_| {}).expect("generates")
    };
    assert_eq!(ahead.generated, plain.generated);
    assert_eq!((ahead.stop, ahead.generated.len()), (StopReason::ContextFull, 4));
}

#[test]
fn a_token_on_the_engine_is_only_run_right_after_the_decode_step_that_made_it() {
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    let (mut model, mut session) = model_and_session(RefEngine::new(), 64);
    // Nothing has run: no token waits on the engine.
    assert!(matches!(model.submit_greedy(&mut session, None, 0), Err(ModelError::NoTokenOnEngine { pos: 0, .. })));
    let first = model.forward_greedy(&mut session, &prompt, 0).expect("prefill");
    let p = prompt.len();
    // A prefill leaves no token on the engine (its ARGMAX is its own tensor).
    assert!(matches!(model.submit_greedy(&mut session, None, p), Err(ModelError::NoTokenOnEngine { .. })));
    let a = model.submit_greedy(&mut session, Some(first), p).expect("decode step");
    // The next step may run the engine's token, at the next position only.
    assert!(matches!(model.submit_greedy(&mut session, None, p + 2), Err(ModelError::NoTokenOnEngine { .. })));
    let b = model.submit_greedy(&mut session, None, p + 1).expect("runs the engine's token");
    let second = model.receive_greedy(&mut session, a).expect("token");
    let third = model.receive_greedy(&mut session, b).expect("token");
    let want = case_ids(MODEL, "p16", "llamacpp_greedy_ids");
    assert_eq!([first, second, third], want[..3]);
    let held: Vec<u32> = prompt.iter().chain(&want[..2]).copied().collect();
    assert_eq!(session.cached_ids(), &held[..]);
}

#[test]
fn on_the_gpu_a_decode_step_runs_ahead_in_one_submit() {
    if gpu_tests_skipped() {
        return;
    }
    let gpu = new_gpu_engine(&GpuOptions::default());
    assert!(gpu.reads_overlap());
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    let want = case_ids(MODEL, "p16", "llamacpp_greedy_ids");
    let (mut model, mut session) = model_and_session(gpu, 256);
    let mut generator = Generator::new(&session, &prompt, greedy(0).sampler).expect("starts");
    let mut got = vec![generator.step(&mut model, &mut session).expect("prefill").expect("first token")];
    let counters = |m: &Model<GpuEngine>| m.engine().counters().expect("the GPU engine counts");
    // The first decode step also queues the second; from then on each step queues one.
    got.extend(generator.step(&mut model, &mut session).expect("decodes"));
    let before: DispatchCounters = counters(&model);
    let steps = want.len() - got.len();
    for _ in 0..steps {
        got.extend(generator.step(&mut model, &mut session).expect("decodes"));
    }
    let spent = counters(&model).since(before);
    assert_eq!(got, want, "GPU greedy ids, running ahead, against llama.cpp's");
    assert_eq!(spent.submits, steps as u64, "one submit per decode step (the program and its 4-byte read)");
}
