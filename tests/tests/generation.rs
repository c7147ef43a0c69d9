//! The generation loop on the reference engine: greedy paths equal llama.cpp's on the float
//! models (fixture README §2: the reference's free-running paths equal llama.cpp's there),
//! sampling is reproducible from a seed, and the context limit stops cleanly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::{generate, generate_after_cached_prefix, GenerateOptions, Model, ModelError, StopReason};
use purebee_tests::tiny;

fn load(model: &str, n_ctx: usize) -> Model<RefEngine> {
    let file = GgufFile::open(tiny(&format!("{model}.gguf"))).expect("fixture opens");
    Model::load(RefEngine::new(), &file, n_ctx).expect("model loads")
}

fn ids(model: &str, case: &str, key: &str) -> Vec<u32> {
    let text = std::fs::read_to_string(tiny(&format!("{model}.{case}.json"))).expect("case json");
    let j: serde_json::Value = serde_json::from_str(&text).expect("valid json");
    j[key].as_array().expect(key).iter().map(|v| v.as_u64().expect("id") as u32).collect()
}

fn greedy(n: usize) -> GenerateOptions {
    GenerateOptions {
        max_new_tokens: n,
        ignore_eos: true,
        sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
        stop: None,
    }
}

#[test]
fn greedy_generation_reproduces_llama_cpp_on_the_float_models() {
    for model_name in ["tiny_b158_f32", "tiny_bitnet_f32"] {
        let mut model = load(model_name, 256);
        for case in ["p16", "ids16"] {
            let prompt = ids(model_name, case, "prompt_token_ids");
            let want = ids(model_name, case, "llamacpp_greedy_ids");
            let mut streamed = Vec::new();
            let g = generate(&mut model, &prompt, &greedy(32), |_| false, |t| streamed.push(t)).expect("generates");
            assert_eq!(g.generated, want, "{model_name} {case}");
            assert_eq!(streamed, want, "{model_name} {case}: streamed ids");
            assert_eq!(g.stop, StopReason::MaxTokens);
        }
    }
}

#[test]
fn greedy_generation_follows_the_f64_reference_on_a_ternary_model() {
    // The reference's own free-running path (fixture README: ref_free_running_greedy_ids).
    let mut model = load("tiny_b158_i2_s", 256);
    let prompt = ids("tiny_b158_i2_s", "p16", "prompt_token_ids");
    let want = ids("tiny_b158_i2_s", "p16", "ref_free_running_greedy_ids");
    let g = generate(&mut model, &prompt, &greedy(32), |_| false, |_| {}).expect("generates");
    assert_eq!(g.generated, want);
}

#[test]
fn sampling_is_reproducible_from_a_seed() {
    let mut model = load("tiny_b158_tq2_0", 128);
    let prompt = ids("tiny_b158_tq2_0", "p16", "prompt_token_ids");
    let opts = |seed| GenerateOptions {
        max_new_tokens: 12,
        ignore_eos: true,
        sampler: SamplerConfig {
            temperature: 1.0,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.0,
            repeat_penalty: 1.1,
            repeat_last_n: 64,
            seed,
        },
        stop: None,
    };
    let a = generate(&mut model, &prompt, &opts(42), |_| false, |_| {}).expect("generates").generated;
    let b = generate(&mut model, &prompt, &opts(42), |_| false, |_| {}).expect("generates").generated;
    let c = generate(&mut model, &prompt, &opts(43), |_| false, |_| {}).expect("generates").generated;
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed should give another path on a random model");
}

#[test]
fn end_of_generation_and_the_context_limit_stop_cleanly() {
    let mut model = load("tiny_b158_f32", 20);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let first = ids("tiny_b158_f32", "p16", "llamacpp_greedy_ids")[0];
    let stop_at_eog = GenerateOptions { ignore_eos: false, ..greedy(10) };
    let g = generate(&mut model, &prompt, &stop_at_eog, |t| t == first, |_| {}).expect("generates");
    assert_eq!((g.generated.clone(), g.stop), (vec![first], StopReason::EndOfGeneration));
    // 16 prompt tokens in a context of 20: positions 16..19 give 5 tokens, then it is full.
    let g = generate(&mut model, &prompt, &greedy(10), |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.len(), g.stop), (5, StopReason::ContextFull));
    let long: Vec<u32> = (0..21).collect();
    assert!(matches!(
        generate(&mut model, &long, &greedy(1), |_| false, |_| {}),
        Err(ModelError::ContextFull { tokens: 21, .. })
    ));
    assert!(matches!(
        model.forward(&[8192], 0, purebee_runtime::LogitsRows::Last),
        Err(ModelError::TokenOutOfRange { id: 8192, vocab: 8192 })
    ));
}

#[test]
fn generating_after_a_cached_prefix_equals_generating_from_scratch() {
    let mut model = load("tiny_b158_f32", 64);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let want = generate(&mut model, &prompt, &greedy(8), |_| false, |_| {}).expect("generates").generated;
    // A fresh cache holding the first 10 ids (as an earlier turn leaves it); then only the
    // last 6 are prefilled, at position 10.
    let mut model = load("tiny_b158_f32", 64);
    model.forward(&prompt[..10], 0, purebee_runtime::LogitsRows::Last).expect("prefix prefill");
    let g = generate_after_cached_prefix(&mut model, &prompt, 10, &greedy(8), |_| false, |_| {}).expect("generates");
    assert_eq!(g.generated, want);
    assert!(matches!(
        generate_after_cached_prefix(&mut model, &prompt, prompt.len(), &greedy(8), |_| false, |_| {}),
        Err(ModelError::NoTokens)
    ));
}

/// The stop flag ends generation between two decode steps: set before the call, after the
/// first token (the prefill is not cut); set by the token callback, right after that token.
/// What was generated is the greedy path's prefix, and the model goes on from it.
#[test]
fn a_stop_flag_ends_generation_between_two_steps() {
    let mut model = load("tiny_b158_f32", 256);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let want = ids("tiny_b158_f32", "p16", "llamacpp_greedy_ids");
    let flag = Arc::new(AtomicBool::new(true));
    let opts = GenerateOptions { stop: Some(Arc::clone(&flag)), ..greedy(32) };
    let g = generate(&mut model, &prompt, &opts, |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.as_slice(), g.stop), (&want[..1], StopReason::Interrupted));
    flag.store(false, Ordering::Relaxed);
    let mut seen = 0;
    let stop_after_five = |_| {
        seen += 1;
        flag.store(seen == 5, Ordering::Relaxed);
    };
    let g = generate(&mut model, &prompt, &opts, |_| false, stop_after_five).expect("generates");
    assert_eq!((g.generated.as_slice(), g.stop), (&want[..5], StopReason::Interrupted));
}
