//! Speculative decoding: greedy output is the plain decode's token for token (bit for bit
//! on the CPU engine, whose short passes attend row by row as decode steps do); sampled
//! output keeps the model's distribution exactly (a chi-square test of the acceptance rule
//! at a fixed seed); drafts never reach past the token limit or the context; the batched
//! path (the server's) speculates as the session path does.

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_memory::DType;
use purebee_rng::SplitMix64;
use purebee_runtime::batch::{BatchRows, RowRead};
use purebee_runtime::sampler::{Sampler, SamplerConfig};
use purebee_runtime::speculative::{Draft, DraftSource, Drafter, SpecConfig, Speculation};
use purebee_runtime::{generate, GenerateOptions, Generator, LogitsRows, Model, ModelError};
use purebee_synth::{Arch, ModelShape, ModelSpec, Vocabulary};
use purebee_tests::{case_ids, smollm2_gguf, tiny};

fn greedy() -> SamplerConfig {
    SamplerConfig { temperature: 0.0, ..SamplerConfig::default() }
}

/// n-gram speculation that always drafts (an extra row costs nothing to the pacer).
fn ngram(draft_max: usize) -> SpecConfig {
    SpecConfig { draft_min: 0, draft_max, source: DraftSource::Ngram { size_n: 2, size_m: 16 }, row_cost: 0.0 }
}

fn options(n: usize, speculation: Option<SpecConfig>) -> GenerateOptions {
    GenerateOptions { max_new_tokens: n, ignore_eos: true, sampler: greedy(), stop: None, speculation }
}

fn cpu() -> CpuEngine {
    CpuEngine::new(&CpuOptions { threads: Some(2), simd: None }).expect("cpu engine")
}

/// A prompt that repeats itself, so that lookups find drafts from the start.
fn repeating_prompt(model: &str) -> Vec<u32> {
    let p = case_ids(model, "p16", "prompt_token_ids");
    [&p[..], &p[1..], &p[1..]].concat()
}

/// Greedy generation with and without speculation on `model`: the same tokens, and drafts
/// were checked and some kept (so the verify path ran).
fn check_greedy<E: Engine>(model: &mut Model<E>, prompt: &[u32], n: usize, what: &str) {
    let mut session = model.new_session(prompt.len() + n + 1).expect("session");
    let plain = generate(model, &mut session, prompt, &options(n, None), |_| false, |_| {}).expect("plain");
    let spec = generate(model, &mut session, prompt, &options(n, Some(ngram(6))), |_| false, |_| {}).expect("spec");
    assert_eq!(spec.generated, plain.generated, "{what}: speculative greedy tokens");
    let s = spec.speculation;
    assert!(s.passes > 0 && s.accepted > 0, "{what}: drafts were checked and kept: {s:?}");
}

#[test]
fn greedy_speculation_gives_the_plain_tokens_on_the_tiny_models() {
    for name in ["tiny_b158_i2_s", "tiny_bitnet_f32"] {
        let file = GgufFile::open(tiny(&format!("{name}.gguf"))).expect("fixture opens");
        let prompt = repeating_prompt(name);
        let mut model = Model::load(RefEngine::new(), &file).expect("loads");
        check_greedy(&mut model, &prompt, 40, &format!("ref {name}"));
        let mut model = Model::load(cpu(), &file).expect("loads");
        check_greedy(&mut model, &prompt, 40, &format!("cpu {name}"));
    }
}

#[test]
fn greedy_speculation_gives_the_plain_tokens_on_smollm2() {
    let Some(path) = smollm2_gguf() else { return };
    let file = GgufFile::open(&path).expect("SmolLM2 opens");
    let tokenizer = purebee_runtime::tokenizer::Tokenizer::from_gguf(&file).expect("tokenizer");
    let text = "Repeat exactly: the fox, the dog and the owl meet by the river every evening.\n\
                Repeat exactly: the fox, the dog and the owl meet by the river every evening.\n\
                Repeat exactly:";
    let prompt = tokenizer.encode(text, true, true);
    let mut model = Model::load(cpu(), &file).expect("loads");
    check_greedy(&mut model, &prompt, 48, "cpu SmolLM2");
}

/// Rows of a verify pass are the bits of decode steps on the CPU engine.
#[test]
fn a_short_pass_gives_the_bits_of_decode_steps_on_the_cpu_engine() {
    let name = "tiny_b158_tq2_0";
    let file = GgufFile::open(tiny(&format!("{name}.gguf"))).expect("fixture opens");
    let ids = repeating_prompt(name);
    let (head, tail) = ids.split_at(10);
    let mut model = Model::load(cpu(), &file).expect("loads");
    let mut a = model.new_session(64).expect("session");
    let mut b = model.new_session(64).expect("session");
    model.forward(&mut a, head, 0, LogitsRows::Last).expect("prefill");
    model.forward(&mut b, head, 0, LogitsRows::Last).expect("prefill");
    let all = model.forward(&mut a, &tail[..9], head.len(), LogitsRows::All).expect("a pass of 9 rows");
    for (r, &t) in tail[..9].iter().enumerate() {
        let step = model.forward(&mut b, &[t], head.len() + r, LogitsRows::Last).expect("a decode step");
        let row = &all[r * step.len()..(r + 1) * step.len()];
        assert!(row.iter().zip(&step).all(|(x, y)| x.to_bits() == y.to_bits()), "row {r}");
    }
}

/// A drafter that always offers `len` tokens drawn from `q` (its own random stream), with
/// `q` as their distribution, or the fixed `q[0]` token as a certain guess.
struct FixedDrafter {
    q: Vec<(u32, f64)>,
    len: usize,
    certain: bool,
    rng: SplitMix64,
}

impl Drafter for FixedDrafter {
    fn draft(&mut self, _history: &[u32], max: usize) -> Result<Draft, ModelError> {
        let n = self.len.min(max);
        if self.certain {
            return Ok(Draft { tokens: vec![self.q[0].0; n], dists: None });
        }
        let mut tokens = Vec::new();
        for _ in 0..n {
            let r = self.rng.uniform();
            let mut cum = 0.0;
            let t = self.q.iter().find(|(_, p)| {
                cum += p;
                r < cum
            });
            tokens.push(t.unwrap_or(&self.q[self.q.len() - 1]).0);
        }
        Ok(Draft { tokens, dists: Some(vec![self.q.clone(); n]) })
    }
}

/// A small random Llama model (F32, one layer) whose next-token distributions under top-k
/// 4 are spread out.
fn small_model() -> Model<RefEngine> {
    let shape = ModelShape {
        name: "spec-test".into(),
        n_vocab: 300,
        n_embd: 32,
        n_layer: 1,
        n_head: 2,
        n_kv_head: 1,
        n_ff: 64,
        n_ctx: 64,
        rope_base: 10000.0,
        rms_eps: 1e-5,
    };
    let spec = ModelSpec {
        arch: Arch::Llama,
        shape,
        weights: DType::F32,
        embedding: DType::F32,
        output: Some(DType::F32),
        vocabulary: Vocabulary::bytes(300),
    };
    let bytes = purebee_synth::build(&spec, 5).expect("builds").to_bytes();
    let file = GgufFile::from_bytes("spec-test", &bytes).expect("reads back");
    Model::load(RefEngine::new(), &file).expect("loads")
}

fn sampled(seed: u64) -> SamplerConfig {
    SamplerConfig { temperature: 1.0, top_k: 4, top_p: 1.0, min_p: 0.0, seed, ..SamplerConfig::default() }
}

/// The sampler's distribution after `context` (its penalties see `context`).
fn distribution(model: &mut Model<RefEngine>, context: &[u32]) -> Vec<(u32, f64)> {
    let mut session = model.new_session(16).expect("session");
    let logits = model.forward(&mut session, context, 0, LogitsRows::Last).expect("forward");
    model.free_session(session).expect("frees");
    Sampler::new(sampled(0)).expect("sampler").distribution(&logits)
}

/// The chi-square statistic of `counts` against `expected` probabilities over `n` samples,
/// cells expected below 5 pooled; and its degrees of freedom.
fn chi_square(counts: &[(u64, f64)], n: u64) -> (f64, usize) {
    let (mut stat, mut cells, mut pooled) = (0.0, 0, (0u64, 0.0f64));
    for &(c, p) in counts {
        let e = p * n as f64;
        if e < 5.0 {
            pooled = (pooled.0 + c, pooled.1 + e);
        } else {
            stat += (c as f64 - e).powi(2) / e;
            cells += 1;
        }
    }
    if pooled.1 > 0.0 {
        stat += (pooled.0 as f64 - pooled.1).powi(2) / pooled.1;
        cells += 1;
    }
    (stat, cells - 1)
}

/// The chi-square distribution's 0.999 quantile (α = 0.001) for `df` degrees of freedom,
/// by Wilson and Hilferty's approximation (within 1 % for df ≥ 3).
fn critical(df: usize) -> f64 {
    let (k, z) = (df as f64, 3.090_232);
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

/// Samples `(first, second)` generated tokens with speculation from `drafter` `n` times and
/// checks their joint frequencies against the model's exact distribution: the first token
/// is drawn plainly, the second by the acceptance rule over a pass that checks drafts.
fn check_distribution(drafter: impl Fn(u64) -> FixedDrafter, what: &str) {
    const N: u64 = 4000;
    let mut model = small_model();
    let prompt = [72u32, 105, 32];
    let first = distribution(&mut model, &prompt);
    let mut expected = Vec::new();
    for &(t1, p1) in &first {
        for (t2, p2) in distribution(&mut model, &[&prompt[..], &[t1]].concat()) {
            expected.push(((t1, t2), p1 * p2));
        }
    }
    let mut session = model.new_session(16).expect("session");
    let mut counts = vec![0u64; expected.len()];
    let mut outside = 0;
    let mut accepted = 0;
    for trial in 0..N {
        let spec = Speculation::new(Box::new(drafter(trial)), 1, 3, 0.0);
        let mut g = Generator::new(&session, &prompt, sampled(trial)).expect("generator").speculate(spec);
        let t1 = g.step(&mut model, &mut session).expect("step").expect("first token");
        let t2 = g.step(&mut model, &mut session).expect("step").expect("second token");
        accepted += g.spec_stats().accepted;
        match expected.iter().position(|&(pair, _)| pair == (t1, t2)) {
            Some(i) => counts[i] += 1,
            None => outside += 1,
        }
    }
    assert_eq!(outside, 0, "{what}: pairs the model cannot give");
    assert!(accepted > N / 50 && accepted < 2 * N, "{what}: drafts were kept and rejected ({accepted} kept)");
    let cells: Vec<(u64, f64)> = counts.iter().zip(&expected).map(|(&c, &(_, p))| (c, p)).collect();
    let (stat, df) = chi_square(&cells, N);
    eprintln!(
        "{what}: chi-square {stat:.1}, {df} degrees of freedom, bound {:.1}, {accepted} drafts kept",
        critical(df)
    );
    assert!(
        stat < critical(df),
        "{what}: chi-square {stat:.1} with {df} degrees of freedom (bound {:.1})",
        critical(df)
    );
}

/// The drafter's own random stream, independent of the sampler's (seeded with `seed`), as
/// the acceptance rule requires.
fn drafter_rng(seed: u64) -> SplitMix64 {
    SplitMix64::stream(seed, 1)
}

#[test]
fn sampled_speculation_keeps_the_models_distribution_with_a_sampling_drafter() {
    let mut model = small_model();
    // The drafter's q: the model's own top tokens after the prompt, reweighted, so drafts
    // are often but not always kept.
    let first = distribution(&mut model, &[72, 105, 32]);
    let q: Vec<(u32, f64)> = first.iter().map(|&(t, _)| (t, 1.0 / first.len() as f64)).collect();
    check_distribution(|seed| FixedDrafter { q: q.clone(), len: 2, certain: false, rng: drafter_rng(seed) }, "q");
}

#[test]
fn sampled_speculation_keeps_the_models_distribution_with_a_certain_drafter() {
    let mut model = small_model();
    let top = distribution(&mut model, &[72, 105, 32])[0].0;
    check_distribution(
        |seed| FixedDrafter { q: vec![(top, 1.0)], len: 2, certain: true, rng: drafter_rng(seed) },
        "lookup",
    );
}

/// Drafts stop at the token limit and at the end of the context.
#[test]
fn drafts_never_pass_the_token_limit_or_the_context() {
    let mut model = small_model();
    let prompt = [1u32, 2, 3, 1, 2, 3, 1, 2];
    for (n_ctx, max_tokens) in [(12, None), (64, Some(3)), (10, Some(5))] {
        let mut session = model.new_session(n_ctx).expect("session");
        let drafter = FixedDrafter { q: vec![(3, 1.0)], len: 50, certain: true, rng: SplitMix64::new(0) };
        let spec = Speculation::new(Box::new(drafter), 1, 50, 0.0);
        let mut g =
            Generator::new(&session, &prompt, greedy()).expect("generator").speculate(spec).max_tokens(max_tokens);
        let mut taken = 0;
        while g.has_room(&session) && max_tokens.is_none_or(|m| taken < m) {
            g.prepare_draft(n_ctx, true).expect("drafts");
            let rows = g.next_rows(&model, 64);
            assert!(rows.pos + rows.ids.len() <= n_ctx, "rows past the context of {n_ctx}");
            if let Some(m) = max_tokens {
                assert!(taken + rows.read_rows <= m.max(1), "a pass deciding more than the limit");
            }
            g.step(&mut model, &mut session).expect("step").expect("a token");
            taken += 1;
        }
    }
}

/// The batched path (the server's) with speculation: a sequence alone in its passes gets
/// the tokens of plain batched decoding.
#[test]
fn the_batched_path_speculates_with_the_plain_tokens() {
    let name = "tiny_b158_i2_s";
    let file = GgufFile::open(tiny(&format!("{name}.gguf"))).expect("fixture opens");
    let prompt = repeating_prompt(name);
    let mut model = Model::load(cpu(), &file).expect("loads");
    let mut cache = model.new_shared_cache(256, 1).expect("cache");
    let mut run = |spec: Option<SpecConfig>| {
        cache.clear(0);
        let mut g = Generator::in_shared_cache(&cache, 0, &prompt, greedy()).expect("generator").max_tokens(Some(40));
        if let Some(s) = &spec {
            g = g.speculate(s.speculation());
        }
        let mut out = Vec::new();
        while out.len() < 40 {
            g.prepare_draft(cache.n_ctx(), true).expect("drafts");
            let r = g.next_rows(&model, 512);
            let n = r.ids.len();
            let rows = [BatchRows { seq: 0, ids: r.ids, pos: r.pos, read: r.read, read_rows: r.read_rows }];
            let mut outputs = model.forward_batch(&mut cache, &rows).expect("pass");
            if let Some(t) = g.finish_rows(n, outputs.remove(0)) {
                out.push(t);
                while let Some(t) = g.next_ready() {
                    out.push(t);
                }
            }
        }
        out.truncate(40);
        (out, g.spec_stats())
    };
    let (plain, _) = run(None);
    let (spec, stats) = run(Some(ngram(6)));
    assert_eq!(spec, plain);
    assert!(stats.accepted > 0, "{stats:?}");
    let _ = RowRead::Greedy;
}
