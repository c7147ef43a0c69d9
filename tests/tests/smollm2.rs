//! SmolLM2-135M-Instruct (arch `llama`, Q4_1 weights, Q8_0 tied embedding) against
//! llama.cpp's outputs in `fixtures/smollm2` (fixture README §7), on both engines.
//!
//! Asserted: prompt ids exact; `chat_nosys` reproduces llama.cpp's greedy ids including the
//! end-of-turn token at step 7, where generation stops; teacher-forced logits (prompt plus
//! llama.cpp's ids in one prefill) within the bounds below, with llama.cpp's argmax wherever
//! its top1−top2 margin exceeds 1; and the GPU and CPU engines (the CPU engine on every
//! SIMD path this machine runs; the GPU engine also with a GPU's kernel choices on any
//! adapter) within 5e-3 of the reference engine. All of it twice: with
//! the f32 activations (`QuantizedActivations::F32`, LINEAR's exact semantics: the tight
//! engine-vs-engine check) and with the int8-block activations that `run` uses by default
//! (as llama.cpp rounds; see `MAX_ABS_VS_LLAMA_CPP_INT8` for its bounds).
//!
//! Why the bounds vs llama.cpp are 2.0 (max abs) and 0.3 (mean abs), not 0.2: llama.cpp does
//! not compute these logits exactly. It rounds every activation entering a Q4_1 or Q8_0 dot
//! product to 8 bits per 32 values (Q8_1 / Q8_0, fp16 scales); our engines use the f32
//! activations (LINEAR's `F32` semantics). SmolLM2 carries activations up to ~10⁴ in a few
//! channels, so any rounding difference grows through 30 layers. Measured with a numpy
//! emulation of llama.cpp's own activation rounding (it matches llama.cpp's layer-0 tensors
//! of the `once` prompt's first positions; `docs/accuracy.md`): it still differs from
//! llama.cpp by max 1.17 / mean 0.17 (`once`) and max 1.55 / mean 0.21 (`chat_nosys`), and
//! llama.cpp's own default setting (F16 KV cache, flash attention) moves its top-5 logits by
//! up to 1.32 from these goldens (checked from the fixtures alone by the first test below).
//! No engine that is not llama.cpp's CPU backend can be held to 0.2. The same data put the
//! `once` case's step 4 (llama.cpp margin 0.151) inside the noise: its free-running path is
//! not compared past step 3 (llama.cpp's F16 KV run moved that margin to 0.061).

use purebee_engine_cpu::{CpuEngine, CpuOptions, SimdLevel};
use purebee_engine_gpu::GpuOptions;
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{generate, GenerateOptions, KvCacheTypes, LogitsRows, Model, QuantizedActivations, StopReason};
use purebee_tests::differential::{gpu_tests_skipped, new_gpu_engine};
use purebee_tests::{fixtures_dir, read_npy, smollm2_gguf};

/// Bounds of teacher-forced logits vs llama.cpp (see the module doc for why).
const MAX_ABS_VS_LLAMA_CPP: f32 = 2.0;
/// The max-abs bound with int8-block activations (LINEAR's `Int8Blocks`, as llama.cpp
/// rounds): then two engines of the same semantics differ by up to 1.51 (measured: the CPU
/// and GPU engines against the reference engine, both cases), since an activation near a
/// rounding boundary lands on either side with a last-bit change of its input and moves the
/// next layers; llama.cpp differs from itself by up to 1.32 (the first test below). Their
/// sum, 2.83, is what an engine rounding as llama.cpp does may differ from its goldens by;
/// the mean bound and the argmax rule stay as they are.
const MAX_ABS_VS_LLAMA_CPP_INT8: f32 = 3.0;
const MEAN_ABS_VS_LLAMA_CPP: f64 = 0.3;
/// llama.cpp's margins above which its argmax must be ours (fixture README §3's rule for
/// another engine's rounding).
const DECISIVE_MARGIN: f32 = 1.0;
/// GPU or CPU engine vs reference engine: the same f32 semantics summed in another order (tree reductions
/// vs the reference's f64 sums); measured ~1e-4 after 30 layers with activations up to ~10⁴.
const ENGINE_VS_REF: f32 = 5e-3;

struct Case {
    name: &'static str,
    prompt: String,
    prompt_ids: Vec<u32>,
    generated: Vec<u32>,
    first_eog_step: Option<usize>,
    /// Steps whose free-running greedy ids must equal llama.cpp's.
    greedy_steps: usize,
}

fn case(name: &'static str, greedy_steps: usize) -> Case {
    let text = std::fs::read_to_string(fixtures_dir().join("smollm2").join(format!("{name}.json"))).expect("case json");
    let j: serde_json::Value = serde_json::from_str(&text).expect("json");
    let ids = |k: &str| j[k].as_array().expect(k).iter().map(|v| v.as_u64().expect("id") as u32).collect::<Vec<_>>();
    Case {
        name,
        prompt: j["prompt"].as_str().expect("prompt").to_string(),
        prompt_ids: ids("prompt_token_ids"),
        generated: ids("generated_token_ids"),
        first_eog_step: j["first_eog_step"].as_u64().map(|v| v as usize),
        greedy_steps,
    }
}

/// `once` up to its step 4 (see the module doc); `chat_nosys` through its end of turn.
fn cases() -> [Case; 2] {
    [case("once", 4), case("chat_nosys", 8)]
}

/// The prompt plus llama.cpp's generated ids (but the last), whose logits line up with the
/// prompt rows and then the step rows of llama.cpp's `.npy` files.
fn teacher_forced_ids(c: &Case) -> Vec<u32> {
    c.prompt_ids.iter().chain(&c.generated[..c.generated.len() - 1]).copied().collect()
}

/// llama.cpp's logits of row `r` of the teacher-forced sequence.
fn llama_cpp_rows(c: &Case) -> Vec<Vec<f32>> {
    let dir = fixtures_dir().join("smollm2");
    let prompt = read_npy(&dir.join(format!("{}.prompt_logits.npy", c.name)));
    let steps = read_npy(&dir.join(format!("{}.step_logits.npy", c.name)));
    let n = c.prompt_ids.len();
    (0..teacher_forced_ids(c).len())
        .map(|r| if r < n { prompt.row(r).to_vec() } else { steps.row(r + 1 - n).to_vec() })
        .collect()
}

fn argmax_and_margin(row: &[f32]) -> (usize, f32) {
    let (mut best, mut top, mut second) = (0, f32::NEG_INFINITY, f32::NEG_INFINITY);
    for (i, &v) in row.iter().enumerate() {
        if v > top {
            (second, top, best) = (top, v, i);
        } else if v > second {
            second = v;
        }
    }
    (best, top - second)
}

/// Runs every case on `engine`: the checks of the module doc; returns each case's
/// teacher-forced logits.
fn check<E: Engine>(path: &std::path::Path, engine: E, acts: QuantizedActivations) -> Vec<Vec<f32>> {
    let file = GgufFile::open(path).expect("SmolLM2 opens");
    let tokenizer = Tokenizer::from_gguf(&file).expect("tokenizer");
    let mut model = Model::load_with(engine, &file, acts).expect("model loads");
    // F32 caches: the bounds and goldens here are F32 references'.
    model.set_kv_cache_types(KvCacheTypes::F32);
    let mut session = model.new_session(256).expect("session allocates");
    let name = format!("{} ({acts:?} activations)", model.engine().name());
    let vocab = model.config().n_vocab;
    let mut all = Vec::new();
    for c in cases() {
        let cn = c.name;
        assert_eq!(tokenizer.encode(&c.prompt, true, true), c.prompt_ids, "{name} {cn}: prompt ids");

        let seq = teacher_forced_ids(&c);
        let ours = model.forward(&mut session, &seq, 0, LogitsRows::All).expect("prefill");
        let (mut max, mut sum) = (0f32, 0f64);
        for (r, want) in llama_cpp_rows(&c).iter().enumerate() {
            let got = &ours[r * vocab..(r + 1) * vocab];
            for (a, b) in got.iter().zip(want) {
                max = max.max((a - b).abs());
                sum += (a - b).abs() as f64;
            }
            let (want_id, margin) = argmax_and_margin(want);
            if margin > DECISIVE_MARGIN {
                assert_eq!(argmax_and_margin(got).0, want_id, "{name} {cn} row {r}: llama.cpp's margin {margin}");
            }
        }
        let mean = sum / (seq.len() * vocab) as f64;
        eprintln!("{name} {cn}: teacher-forced logits vs llama.cpp: max abs {max:.3}, mean abs {mean:.4}");
        let bound = match acts {
            QuantizedActivations::F32 => MAX_ABS_VS_LLAMA_CPP,
            QuantizedActivations::Int8 => MAX_ABS_VS_LLAMA_CPP_INT8,
        };
        assert!(max <= bound, "{name} {cn}: max abs {max} vs llama.cpp");
        assert!(mean <= MEAN_ABS_VS_LLAMA_CPP, "{name} {cn}: mean abs {mean} vs llama.cpp");
        all.push(ours);

        // Free-running greedy generation, stopping at an end of turn as a run would.
        let opts = GenerateOptions {
            max_new_tokens: c.greedy_steps,
            ignore_eos: false,
            sampler: SamplerConfig { temperature: 0.0, ..SamplerConfig::default() },
            stop: None,
            speculation: None,
        };
        let g = generate(&mut model, &mut session, &c.prompt_ids, &opts, |t| tokenizer.is_eog(t), |_| {})
            .expect("generates");
        let want = &c.generated[..c.first_eog_step.map_or(c.greedy_steps, |e| e + 1).min(c.greedy_steps)];
        assert_eq!(g.generated, want, "{name} {cn}: greedy ids");
        if let Some(eog) = c.first_eog_step {
            assert_eq!(g.stop, StopReason::EndOfGeneration, "{name} {cn}: stops at the end of turn");
            assert_eq!(tokenizer.decode(&g.generated[..eog]), "The capital of France is Paris.");
        }
    }
    all
}

/// The top-5 logits of each step of llama.cpp's own two runs of a case (F32 KV cache, and
/// its default F16 KV cache with flash attention), while their greedy ids agree: the
/// largest difference of a token's logit between the two.
fn llama_cpp_self_spread(name: &str) -> f64 {
    let load = |file: String| -> serde_json::Value {
        let text = std::fs::read_to_string(fixtures_dir().join("smollm2").join(file)).expect("case json");
        serde_json::from_str(&text).expect("json")
    };
    let (a, b) = (load(format!("{name}.json")), load(format!("{name}.kvf16_fa.json")));
    let top = |step: &serde_json::Value| -> Vec<(u64, f64)> {
        let pairs = step["top"].as_array().expect("top");
        pairs.iter().map(|p| (p[0].as_u64().expect("id"), p[1].as_f64().expect("logit"))).collect()
    };
    let (steps_a, steps_b) = (a["steps_top5"].as_array().expect("steps"), b["steps_top5"].as_array().expect("steps"));
    let (ids_a, ids_b) =
        (a["generated_token_ids"].as_array().expect("ids"), b["generated_token_ids"].as_array().expect("ids"));
    let mut spread = 0f64;
    for ((sa, sb), (ia, ib)) in steps_a.iter().zip(steps_b).zip(ids_a.iter().zip(ids_b)) {
        if ia != ib {
            break;
        }
        for (id, la) in top(sa) {
            if let Some((_, lb)) = top(sb).into_iter().find(|&(i, _)| i == id) {
                spread = spread.max((la - lb).abs());
            }
        }
    }
    spread
}

#[test]
fn llama_cpp_moves_its_own_logits_by_more_than_0_2_and_less_than_our_bound() {
    // The premise of MAX_ABS_VS_LLAMA_CPP, from llama.cpp's outputs alone (no model needed):
    // its default settings already move its top-5 logits by more than 0.2 from the F32-KV
    // goldens, and the bound must not be tighter than llama.cpp is with itself.
    for (name, at_least) in [("once", 0.5), ("chat_nosys", 0.5), ("chat", 1.3)] {
        let spread = llama_cpp_self_spread(name);
        eprintln!("{name}: llama.cpp F16 KV + flash attention vs F32 KV, top-5 logits: max abs {spread:.3}");
        assert!(spread >= at_least, "{name}: llama.cpp's own spread {spread}");
        assert!(spread <= MAX_ABS_VS_LLAMA_CPP as f64, "{name}: llama.cpp's own spread {spread} exceeds our bound");
    }
}

#[test]
fn smollm2_on_the_reference_engine_matches_llama_cpp() {
    let Some(path) = smollm2_gguf() else { return };
    for acts in ACTIVATIONS {
        reference_logits(&path, acts);
    }
}

const ACTIVATIONS: [QuantizedActivations; 2] = [QuantizedActivations::Int8, QuantizedActivations::F32];

/// The reference engine's checks and teacher-forced logits, run once per test binary and
/// activation rounding (every test needs them; a panic inside poisons the cell and fails
/// them all).
fn reference_logits(path: &std::path::Path, acts: QuantizedActivations) -> &'static [Vec<f32>] {
    static LOGITS: [std::sync::OnceLock<Vec<Vec<f32>>>; 2] = [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    LOGITS[acts as usize].get_or_init(|| check(path, RefEngine::new(), acts))
}

/// `engine`'s checks in both activation roundings, and its logits against the reference
/// engine's: see the module doc.
fn check_against_reference<E: Engine>(path: &std::path::Path, what: &str, engine: impl Fn() -> E) {
    for acts in ACTIVATIONS {
        let logits = check(path, engine(), acts);
        for ((c, g), r) in cases().iter().zip(&logits).zip(reference_logits(path, acts)) {
            let max = g.iter().zip(r).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
            let mean = g.iter().zip(r).map(|(a, b)| (a - b).abs() as f64).sum::<f64>() / g.len() as f64;
            eprintln!(
                "{}: {what} vs reference engine, {acts:?} activations: max abs {max:.2e}, mean {mean:.2e}",
                c.name
            );
            let bound = match acts {
                QuantizedActivations::F32 => ENGINE_VS_REF,
                // Same semantics, but rounding boundaries make it chaotic (MAX_ABS_VS_LLAMA_CPP_INT8).
                QuantizedActivations::Int8 => MAX_ABS_VS_LLAMA_CPP,
            };
            assert!(max <= bound, "{}: {what} vs reference engine, {acts:?}: max abs {max}", c.name);
            assert!(mean <= MEAN_ABS_VS_LLAMA_CPP, "{}: {what} vs reference engine, {acts:?}: mean abs {mean}", c.name);
        }
    }
}

#[test]
fn smollm2_on_the_gpu_engine_matches_llama_cpp_and_the_reference_engine() {
    let Some(path) = smollm2_gguf() else { return };
    if gpu_tests_skipped() {
        return;
    }
    check_against_reference(&path, "GPU", || new_gpu_engine(&GpuOptions::default()));
}

/// The same with the kernels a GPU chooses (`GpuOptions::gpu_kernels`), whatever the adapter:
/// on lavapipe, where the test above takes a CPU adapter's forms, this runs the one-token
/// products that round their own x after the norm (`gemv`, `gemv_multi_rope`, `gemv_gated`
/// with `ROUND`) through the whole model.
#[test]
fn smollm2_with_a_gpus_kernels_matches_llama_cpp_and_the_reference_engine() {
    let Some(path) = smollm2_gguf() else { return };
    if gpu_tests_skipped() {
        return;
    }
    check_against_reference(&path, "GPU (a GPU's kernels)", || {
        new_gpu_engine(&GpuOptions { gpu_kernels: true, ..GpuOptions::default() })
    });
}

#[test]
fn smollm2_on_the_cpu_engine_matches_llama_cpp_and_the_reference_engine() {
    let Some(path) = smollm2_gguf() else { return };
    for level in SimdLevel::ALL {
        if !level.is_supported() {
            eprintln!("this CPU lacks the {level} path: NOT tested here");
            continue;
        }
        let threads = Some(2.min(purebee_engine_cpu::logical_cpus()));
        check_against_reference(&path, &format!("CPU ({level})"), || {
            CpuEngine::new(&CpuOptions { threads, simd: Some(level) }).expect("CPU engine")
        });
    }
}

/// With the F16 KV cache every command uses by default, next to llama.cpp's own run with its
/// default F16 cache (`*.kvf16_fa.json`: its ids and the top-5 logits of each step):
/// teacher-forced on llama.cpp's ids, on the CPU engine with int8-block activations (as
/// `run`), every one of its top-5 logits within `MAX_ABS_VS_LLAMA_CPP_INT8`, and our greedy
/// id equal to its top-1 wherever its margin exceeds `DECISIVE_MARGIN`.
#[test]
fn smollm2_with_f16_caches_stays_within_bounds_of_llama_cpps_f16_cache_run() {
    let Some(path) = smollm2_gguf() else { return };
    let file = GgufFile::open(&path).expect("SmolLM2 opens");
    let threads = Some(2.min(purebee_engine_cpu::logical_cpus()));
    let engine = CpuEngine::new(&CpuOptions { threads, simd: None }).expect("CPU engine");
    let mut model = Model::load(engine, &file).expect("model loads");
    assert_eq!(model.kv_cache_types(), KvCacheTypes::default(), "F16 caches by default");
    for name in ["once", "chat_nosys"] {
        let text = std::fs::read_to_string(fixtures_dir().join("smollm2").join(format!("{name}.kvf16_fa.json")))
            .expect("case json");
        let j: serde_json::Value = serde_json::from_str(&text).expect("json");
        let ids =
            |k: &str| j[k].as_array().expect(k).iter().map(|v| v.as_u64().expect("id") as u32).collect::<Vec<_>>();
        let (prompt, generated) = (ids("prompt_token_ids"), ids("generated_token_ids"));
        let forced: Vec<u32> = prompt.iter().chain(&generated[..generated.len() - 1]).copied().collect();
        let mut session = model.new_session(1024).expect("session");
        let logits = model.forward(&mut session, &forced, 0, LogitsRows::All).expect("prefill");
        let vocab = model.config().n_vocab;
        let mut worst = 0f32;
        for (s, step) in j["steps_top5"].as_array().expect("steps").iter().enumerate() {
            let row = &logits[(prompt.len() - 1 + s) * vocab..][..vocab];
            for pair in step["top"].as_array().expect("top") {
                let (id, want) = (pair[0].as_u64().expect("id") as usize, pair[1].as_f64().expect("logit") as f32);
                let diff = (row[id] - want).abs();
                worst = worst.max(diff);
                assert!(diff <= MAX_ABS_VS_LLAMA_CPP_INT8, "{name} step {s}: token {id}: {} vs {want}", row[id]);
            }
            let margin = step["margin_top1_top2"].as_f64().expect("margin") as f32;
            if margin > DECISIVE_MARGIN {
                let top1 = step["top"][0][0].as_u64().expect("id") as usize;
                assert_eq!(argmax_and_margin(row).0, top1, "{name} step {s}: greedy id (llama.cpp margin {margin})");
            }
        }
        eprintln!("{name}: F16 caches vs llama.cpp's F16-cache run, top-5 logits: max abs {worst:.3}");
        model.free_session(session).expect("frees");
    }
}
