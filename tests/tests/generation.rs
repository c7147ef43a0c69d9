//! The generation loop on the reference engine: greedy paths equal llama.cpp's on the float
//! models (fixture README §2: the reference's free-running paths equal llama.cpp's there),
//! sampling is reproducible from a seed, and the context limit stops cleanly.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use purebee_engine_ref::RefEngine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::{
    generate, generate_reusing_cache, GenerateOptions, Generator, KvCacheTypes, LogitsRows, Model, ModelError, Prefill,
    Session, StopReason,
};
use purebee_tests::{case_ids as ids, greedy_ignoring_eos as greedy, tiny};

fn load(model: &str, n_ctx: usize) -> (Model<RefEngine>, Session) {
    let file = GgufFile::open(tiny(&format!("{model}.gguf"))).expect("fixture opens");
    let mut model = Model::load(RefEngine::new(), &file).expect("model loads");
    // F32 caches: the bounds and goldens here are F32 references'.
    model.set_kv_cache_types(KvCacheTypes::F32);
    let session = model.new_session(n_ctx).expect("session allocates");
    (model, session)
}

#[test]
fn greedy_generation_reproduces_llama_cpp_on_the_float_models() {
    for model_name in ["tiny_b158_f32", "tiny_bitnet_f32"] {
        let (mut model, mut session) = load(model_name, 256);
        for case in ["p16", "ids16"] {
            let prompt = ids(model_name, case, "prompt_token_ids");
            let want = ids(model_name, case, "llamacpp_greedy_ids");
            let mut streamed = Vec::new();
            let g = generate(&mut model, &mut session, &prompt, &greedy(32), |_| false, |t| streamed.push(t))
                .expect("generates");
            assert_eq!(g.generated, want, "{model_name} {case}");
            assert_eq!(streamed, want, "{model_name} {case}: streamed ids");
            assert_eq!(g.stop, StopReason::MaxTokens);
        }
    }
}

#[test]
fn greedy_generation_follows_the_f64_reference_on_a_ternary_model() {
    // The reference's own free-running path (fixture README: ref_free_running_greedy_ids).
    let (mut model, mut session) = load("tiny_b158_i2_s", 256);
    let prompt = ids("tiny_b158_i2_s", "p16", "prompt_token_ids");
    let want = ids("tiny_b158_i2_s", "p16", "ref_free_running_greedy_ids");
    let g = generate(&mut model, &mut session, &prompt, &greedy(32), |_| false, |_| {}).expect("generates");
    assert_eq!(g.generated, want);
}

#[test]
fn sampling_is_reproducible_from_a_seed() {
    let (mut model, mut session) = load("tiny_b158_tq2_0", 128);
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
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            repeat_last_n: 64,
            seed,
        },
        stop: None,
        speculation: None,
    };
    let a = generate(&mut model, &mut session, &prompt, &opts(42), |_| false, |_| {}).expect("generates").generated;
    let b = generate(&mut model, &mut session, &prompt, &opts(42), |_| false, |_| {}).expect("generates").generated;
    let c = generate(&mut model, &mut session, &prompt, &opts(43), |_| false, |_| {}).expect("generates").generated;
    assert_eq!(a, b);
    assert_ne!(a, c, "another seed should give another path on a random model");
}

#[test]
fn end_of_generation_and_the_context_limit_stop_cleanly() {
    let (mut model, mut session) = load("tiny_b158_f32", 20);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let first = ids("tiny_b158_f32", "p16", "llamacpp_greedy_ids")[0];
    let stop_at_eog = GenerateOptions { ignore_eos: false, ..greedy(10) };
    let g = generate(&mut model, &mut session, &prompt, &stop_at_eog, |t| t == first, |_| {}).expect("generates");
    assert_eq!((g.generated.clone(), g.stop), (vec![first], StopReason::EndOfGeneration));
    // 16 prompt tokens in a context of 20: positions 16..19 give 5 tokens, then it is full.
    let g = generate(&mut model, &mut session, &prompt, &greedy(10), |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.len(), g.stop), (5, StopReason::ContextFull));
    let long: Vec<u32> = (0..21).collect();
    assert!(matches!(
        generate(&mut model, &mut session, &long, &greedy(1), |_| false, |_| {}),
        Err(ModelError::ContextFull { tokens: 21, .. })
    ));
    assert!(matches!(
        model.forward(&mut session, &[8192], 0, LogitsRows::Last),
        Err(ModelError::TokenOutOfRange { id: 8192, vocab: 8192 })
    ));
}

#[test]
fn generating_after_a_cached_prefix_equals_generating_from_scratch() {
    let (mut model, mut session) = load("tiny_b158_f32", 64);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let want = generate(&mut model, &mut session, &prompt, &greedy(8), |_| false, |_| {}).expect("generates");
    assert_eq!(want.reused_tokens, 0);
    // A fresh cache holding the first 10 ids (as an earlier turn leaves it); then only the
    // last 6 are prefilled, at position 10.
    let (mut model, mut session) = load("tiny_b158_f32", 64);
    model.forward(&mut session, &prompt[..10], 0, LogitsRows::Last).expect("prefix prefill");
    assert_eq!(session.cached_ids(), &prompt[..10]);
    let g =
        generate_reusing_cache(&mut model, &mut session, &prompt, &greedy(8), |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.as_slice(), g.reused_tokens), (want.generated.as_slice(), 10));
    // The whole prompt cached: its last id is run again (its logits give the first token).
    let g =
        generate_reusing_cache(&mut model, &mut session, &prompt, &greedy(8), |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.as_slice(), g.reused_tokens), (want.generated.as_slice(), prompt.len() - 1));
    // What the cache holds afterwards: the prompt and every generated id but the last.
    let ran: Vec<u32> = prompt.iter().chain(&g.generated[..g.generated.len() - 1]).copied().collect();
    assert_eq!(session.cached_ids(), ran.as_slice());
}

/// Sessions on one model do not see each other: two generations stepped in turn (as a
/// server interleaves its slots) give each the ids it gives alone, and a prompt prefilled in
/// power-of-two chunks gives the ids of one whole prefill.
#[test]
fn interleaved_sessions_and_chunked_prefill_give_the_ids_of_one_generation_alone() {
    let file = GgufFile::open(tiny("tiny_b158_f32.gguf")).expect("fixture opens");
    let mut model = Model::load(RefEngine::new(), &file).expect("model loads");
    // F32 caches: the bounds and goldens here are F32 references'.
    model.set_kv_cache_types(KvCacheTypes::F32);
    let mut a = model.new_session(64).expect("session a");
    let mut b = model.new_session(64).expect("session b");
    let prompts = [ids("tiny_b158_f32", "p16", "prompt_token_ids"), ids("tiny_b158_f32", "ids16", "prompt_token_ids")];
    let wants =
        [ids("tiny_b158_f32", "p16", "llamacpp_greedy_ids"), ids("tiny_b158_f32", "ids16", "llamacpp_greedy_ids")];
    let sampler = greedy(0).sampler;
    let mut gens = [
        Generator::new(&a, &prompts[0], sampler.clone()).expect("a starts").prefill(Prefill::Chunks(4)),
        Generator::new(&b, &prompts[1], sampler).expect("b starts"),
    ];
    let mut got = [Vec::new(), Vec::new()];
    let mut steps = [0, 0];
    while got.iter().zip(&wants).any(|(g, w)| g.len() < w.len()) {
        for (i, session) in [&mut a, &mut b].into_iter().enumerate() {
            if got[i].len() < wants[i].len() {
                steps[i] += 1;
                got[i].extend(gens[i].step(&mut model, session).expect("steps"));
            }
        }
    }
    assert_eq!(got, wants);
    // 16 prompt ids in chunks of 4: three steps prefill, the fourth gives the first token.
    assert_eq!(steps, [wants[0].len() + 3, wants[1].len()]);

    // A session belongs to the model that opened it.
    let mut other = Model::load(RefEngine::new(), &file).expect("model loads");
    assert!(matches!(other.forward(&mut a, &[1], 0, LogitsRows::Last), Err(ModelError::ForeignSession { .. })));
    // A freed session's memory goes back; a new one works as the first did.
    model.free_session(a).expect("frees");
    let mut c = model.new_session(64).expect("session c");
    let g = generate(&mut model, &mut c, &prompts[0], &greedy(wants[0].len()), |_| false, |_| {}).expect("generates");
    assert_eq!(g.generated, wants[0]);
}

/// The stop flag ends generation between two decode steps: set before the call, after the
/// first token (the prefill is not cut); set by the token callback, right after that token.
/// What was generated is the greedy path's prefix, and the model goes on from it.
#[test]
fn a_stop_flag_ends_generation_between_two_steps() {
    let (mut model, mut session) = load("tiny_b158_f32", 256);
    let prompt = ids("tiny_b158_f32", "p16", "prompt_token_ids");
    let want = ids("tiny_b158_f32", "p16", "llamacpp_greedy_ids");
    let flag = Arc::new(AtomicBool::new(true));
    let opts = GenerateOptions { stop: Some(Arc::clone(&flag)), ..greedy(32) };
    let g = generate(&mut model, &mut session, &prompt, &opts, |_| false, |_| {}).expect("generates");
    assert_eq!((g.generated.as_slice(), g.stop), (&want[..1], StopReason::Interrupted));
    flag.store(false, Ordering::Relaxed);
    let mut seen = 0;
    let stop_after_five = |_| {
        seen += 1;
        flag.store(seen == 5, Ordering::Relaxed);
    };
    let g = generate(&mut model, &mut session, &prompt, &opts, |_| false, stop_after_five).expect("generates");
    assert_eq!((g.generated.as_slice(), g.stop), (&want[..5], StopReason::Interrupted));
}
