//! Log-probabilities through batched passes (`Generator::logprobs`, `RowRead::TopKLse`): the
//! tokens are those generated without them; with greedy decoding the chosen token is the
//! top candidate and its log-probability the top one; every log-probability is at most 0
//! and the top ones come in rank order; they agree with the ones computed on the host from
//! the whole row (`Generator::full_rows`: bit for bit on the reference engine, whose TOP_K
//! computes the log-sum-exp the same way, and within TOP_K's log-sum-exp tolerance on the
//! CPU and GPU engines); a sampled token's log-probability is known (it is drawn from the
//! candidates); and a sequence's log-probabilities are bit-identical alone and batched with
//! other sequences (on the reference and CPU engines).

use purebee_engine_cpu::{CpuEngine, CpuOptions};
use purebee_engine_gpu::GpuOptions;
use purebee_engine_ref::RefEngine;
use purebee_isa::Engine;
use purebee_memory::gguf::GgufFile;
use purebee_runtime::batch::{BatchRows, SharedCache, PAGE_SIZE};
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::{Generator, Model, TokenLogprobs};
use purebee_tests::differential::{gpu_tests_skipped, new_gpu_engine};
use purebee_tests::{case_ids, tiny};

const MODEL: &str = "tiny_b158_tq2_0";
const STEPS: usize = 6;

/// One generation of a schedule: its sequence, prompt, sampler, top log-probabilities
/// wanted (None: none), and whether it reads whole rows.
struct Gen {
    seq: usize,
    prompt: Vec<u32>,
    sampler: SamplerConfig,
    logprobs: Option<usize>,
    full_rows: bool,
}

/// Runs every generation together in batched passes for `STEPS` tokens each; returns each
/// one's tokens and their log-probabilities.
fn run<E: Engine>(
    model: &mut Model<E>,
    cache: &mut SharedCache,
    gens: &[Gen],
) -> Vec<Vec<(u32, Option<TokenLogprobs>)>> {
    let mut generators: Vec<Generator> = gens
        .iter()
        .map(|g| {
            cache.clear(g.seq);
            Generator::in_shared_cache(cache, g.seq, &g.prompt, g.sampler.clone())
                .expect("generator")
                .logprobs(g.logprobs)
                .full_rows(g.full_rows)
        })
        .collect();
    let mut out: Vec<Vec<(u32, Option<TokenLogprobs>)>> = gens.iter().map(|_| Vec::new()).collect();
    loop {
        let active: Vec<usize> = (0..gens.len()).filter(|&i| out[i].len() < STEPS).collect();
        if active.is_empty() {
            return out;
        }
        let next: Vec<_> = active.iter().map(|&i| generators[i].next_rows(model, 64)).collect();
        let rows: Vec<BatchRows> = active
            .iter()
            .zip(&next)
            .map(|(&i, r)| BatchRows { seq: gens[i].seq, ids: r.ids, pos: r.pos, read: r.read, read_rows: r.read_rows })
            .collect();
        let counts: Vec<usize> = next.iter().map(|r| r.ids.len()).collect();
        let outputs = model.forward_batch(cache, &rows).expect("batched pass");
        drop(rows);
        drop(next);
        for ((&i, n), output) in active.iter().zip(counts).zip(outputs) {
            if let Some(token) = generators[i].finish_rows(n, output) {
                out[i].push((token, generators[i].last_logprobs().cloned()));
            }
        }
    }
}

fn greedy() -> SamplerConfig {
    SamplerConfig { temperature: 0.0, repeat_penalty: 1.0, ..SamplerConfig::default() }
}

fn sampled(seed: u64) -> SamplerConfig {
    SamplerConfig { seed, ..SamplerConfig::default() }
}

/// TOP_K's log-sum-exp tolerance (tests/top_k.rs), plus one rounding of `value − lse`.
fn tolerance(n_vocab: usize, logprob: f32) -> f64 {
    let u = 2f64.powi(-24);
    (3.0 * n_vocab as f64 + 64.0) * u + 4.0 * u * (f64::from(logprob).abs() + 64.0)
}

fn check<E: Engine>(mut model: Model<E>, what: &str, exact_host: bool, batch_invariant: bool) {
    let n_vocab = model.config().n_vocab;
    let mut cache = model.new_shared_cache(8 * PAGE_SIZE, 4).expect("shared cache");
    let prompt = case_ids(MODEL, "p16", "prompt_token_ids");
    let other: Vec<u32> = prompt.iter().rev().copied().collect();
    let gen = |seq, prompt: &[u32], sampler, logprobs, full_rows| Gen {
        seq,
        prompt: prompt.to_vec(),
        sampler,
        logprobs,
        full_rows,
    };

    // Greedy with the top 5: the tokens of plain greedy; the chosen one is the top one.
    let plain = run(&mut model, &mut cache, &[gen(0, &prompt, greedy(), None, false)]).remove(0);
    let alone = run(&mut model, &mut cache, &[gen(0, &prompt, greedy(), Some(5), false)]).remove(0);
    assert_eq!(plain.iter().map(|t| t.0).collect::<Vec<_>>(), alone.iter().map(|t| t.0).collect::<Vec<_>>(), "{what}");
    for (token, lp) in &alone {
        let lp = lp.as_ref().unwrap_or_else(|| panic!("{what}: log-probabilities asked for"));
        assert_eq!(lp.token, *token);
        assert_eq!(lp.top.len(), 5);
        assert_eq!(lp.top[0], (*token, lp.logprob), "{what}: greedy picks the top candidate");
        assert!(lp.top.iter().all(|t| t.1 <= 0.0) && lp.logprob <= 0.0, "{what}: {lp:?}");
        assert!(lp.top.windows(2).all(|w| w[0].1 >= w[1].1), "{what}: rank order {lp:?}");
    }

    // The same from whole rows on the host.
    let host = run(&mut model, &mut cache, &[gen(0, &prompt, greedy(), Some(5), true)]).remove(0);
    for ((t, engine), (h, host)) in alone.iter().zip(&host) {
        let (engine, host) = (engine.as_ref().expect("engine"), host.as_ref().expect("host"));
        assert_eq!(t, h, "{what}");
        let ids = |l: &TokenLogprobs| l.top.iter().map(|t| t.0).collect::<Vec<_>>();
        assert_eq!(ids(engine), ids(host), "{what}");
        for (&(_, e), &(_, h)) in engine.top.iter().zip(&host.top) {
            if exact_host {
                assert_eq!(e.to_bits(), h.to_bits(), "{what}: engine {engine:?}, host {host:?}");
            } else {
                assert!(f64::from(e - h).abs() <= tolerance(n_vocab, h), "{what}: engine {engine:?}, host {host:?}");
            }
        }
    }

    // Sampled: the chosen token's log-probability is known, and among the top ones when
    // it is one of them.
    let drawn = run(&mut model, &mut cache, &[gen(1, &other, sampled(7), Some(3), false)]).remove(0);
    for (token, lp) in &drawn {
        let lp = lp.as_ref().expect("sampled log-probabilities");
        assert!(lp.logprob.is_finite() && lp.logprob <= 0.0, "{what}: token {token}: {lp:?}");
        if let Some(t) = lp.top.iter().find(|t| t.0 == *token) {
            assert_eq!(t.1.to_bits(), lp.logprob.to_bits());
        }
    }

    if !batch_invariant {
        return;
    }
    // Batch invariance: sequence 0's log-probabilities alone and with three others.
    let together = run(
        &mut model,
        &mut cache,
        &[
            gen(2, &other, sampled(3), Some(2), false),
            gen(0, &prompt, greedy(), Some(5), false),
            gen(1, &prompt[..9], sampled(4), None, false),
            gen(3, &other[..5], greedy(), Some(20), false),
        ],
    )
    .remove(1);
    assert_eq!(alone, together, "{what}: alone and batched");
}

#[test]
fn logprobs_on_the_reference_engine() {
    let file = GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens");
    check(Model::load(RefEngine::new(), &file).expect("model loads"), "ref", true, true);
}

#[test]
fn logprobs_on_the_cpu_engine() {
    let file = GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens");
    let engine = CpuEngine::new(&CpuOptions { threads: Some(2), simd: None }).expect("cpu");
    check(Model::load(engine, &file).expect("model loads"), "cpu", false, true);
}

#[test]
fn logprobs_on_the_gpu_engine() {
    // Its one-row and several-row kernels reduce in different orders, so batches are not
    // compared bit for bit here (tests/batch.rs bounds them).
    if gpu_tests_skipped() {
        return;
    }
    let file = GgufFile::open(tiny(&format!("{MODEL}.gguf"))).expect("fixture opens");
    check(Model::load(new_gpu_engine(&GpuOptions::default()), &file).expect("model loads"), "gpu", false, false);
}
