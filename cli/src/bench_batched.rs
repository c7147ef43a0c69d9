//! `purebee-rs bench MODEL -npl 1,2,4,8`: several sequences advanced together, in the manner
//! of llama.cpp's `llama-batched-bench` (`-npp`/`-ntg` are `-p`/`-n`, 32 each by default here).
//!
//! For each batch size B of `-npl`, each repetition clears a KV cache that the B sequences
//! share (`runtime::batch::SharedCache`, room for p + n positions each) and runs:
//! - **prompt**: every sequence's `p` random ids (seeded, different per sequence), packed
//!   into batched passes of at most `-ub` tokens (a sequence's prompt split across passes
//!   when it is longer), each reading back its sequences' greedy tokens;
//! - **generation**: `n` passes of B rows, one per sequence, each fed its own greedy token.
//!
//! One warm-up repetition (which also builds the programs) is not counted. The report gives
//! per B the medians of the prompt tokens/s (B · p over the prompt time), the aggregate
//! generation tokens/s (B · n over the generation time) and per sequence (that over B), as
//! llama-batched-bench's S_PP and S_TG; the JSON output adds every repetition's seconds.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use purebee_isa::Engine;
use purebee_rng::SplitMix64;
use purebee_runtime::batch::{BatchRows, RowOutput, RowRead, SharedCache, PAGE_SIZE};
use purebee_runtime::{Model, ModelError};
use serde_json::{json, Value};

use crate::bench::{median, BenchError, Output};
use crate::CliError;

/// What a batched bench is asked to run.
pub struct Batched<'a> {
    /// The batch sizes.
    pub npl: &'a [usize],
    /// Prompt ids per sequence.
    pub n_prompt: usize,
    /// Generated tokens per sequence.
    pub n_gen: usize,
    /// The most tokens of one pass.
    pub ubatch: usize,
    /// Timed repetitions.
    pub repetitions: usize,
    /// Seed of the prompts.
    pub seed: u64,
}

/// One batch size's timings over the repetitions.
struct Row {
    npl: usize,
    prompt_seconds: Vec<f64>,
    gen_seconds: Vec<f64>,
}

/// Runs every batch size of `b` on `model` and writes the report.
pub fn run<E: Engine>(
    model: &mut Model<E>,
    file: &Path,
    b: &Batched,
    output: Output,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    if b.npl.contains(&0) {
        return Err(BenchError::Flag { flag: "-npl", value: 0, reason: "a batch needs a sequence".into() }.into());
    }
    if b.n_gen == 0 {
        return Err(BenchError::Flag { flag: "-n", value: 0, reason: "-npl measures generation".into() }.into());
    }
    let vocab = model.config().n_vocab as u64;
    let mut rows = Vec::new();
    for &npl in b.npl {
        let mut cache = model
            .new_shared_cache(npl * (b.n_prompt.max(1) + b.n_gen).div_ceil(PAGE_SIZE) * PAGE_SIZE, npl)
            .map_err(|e| BenchError::Load { file: file.to_path_buf(), source: Box::new(e) })?;
        let mut rng = SplitMix64::new(b.seed);
        let prompts: Vec<Vec<u32>> =
            (0..npl).map(|_| (0..b.n_prompt.max(1)).map(|_| rng.below(vocab) as u32).collect()).collect();
        let mut row = Row { npl, prompt_seconds: Vec::new(), gen_seconds: Vec::new() };
        for r in 0..=b.repetitions {
            let fail = |phase, source: Box<ModelError>| BenchError::Forward {
                file: file.to_path_buf(),
                phase,
                repetition: r,
                source,
            };
            for s in 0..npl {
                cache.clear(s);
            }
            let start = Instant::now();
            let mut next = prefill(model, &mut cache, &prompts, b.ubatch).map_err(|e| fail("prefill", e))?;
            let prompt_time = start.elapsed().as_secs_f64();
            let start = Instant::now();
            for step in 0..b.n_gen {
                let ids: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
                let pass: Vec<BatchRows> = (0..npl)
                    .map(|s| BatchRows {
                        seq: s,
                        ids: &ids[s],
                        pos: prompts[s].len() + step,
                        read: Some(RowRead::Greedy),
                        read_rows: 1,
                    })
                    .collect();
                let outputs = model.forward_batch(&mut cache, &pass).map_err(|e| fail("decode", Box::new(e)))?;
                next = greedy_tokens(outputs);
            }
            let gen_time = start.elapsed().as_secs_f64();
            eprintln!(
                "purebee-rs: -npl {npl} {}: prompt {:.2} t/s, generation {:.2} t/s",
                if r == 0 { "warm-up".to_string() } else { format!("repetition {r}/{}", b.repetitions) },
                (npl * b.n_prompt.max(1)) as f64 / prompt_time,
                (npl * b.n_gen) as f64 / gen_time,
            );
            if r > 0 {
                row.prompt_seconds.push(prompt_time);
                row.gen_seconds.push(gen_time);
            }
        }
        model
            .free_shared_cache(cache)
            .map_err(|e| BenchError::Load { file: file.to_path_buf(), source: Box::new(e) })?;
        rows.push(row);
    }
    report(model, file, b, &rows, output, out)
}

/// Prefills every prompt in passes of at most `ubatch` tokens; the greedy token after each.
fn prefill<E: Engine>(
    model: &mut Model<E>,
    cache: &mut SharedCache,
    prompts: &[Vec<u32>],
    ubatch: usize,
) -> Result<Vec<u32>, Box<ModelError>> {
    let mut fed = vec![0usize; prompts.len()];
    let mut next = vec![0u32; prompts.len()];
    while fed.iter().zip(prompts).any(|(&f, p)| f < p.len()) {
        let mut budget = ubatch.max(1);
        let mut pass = Vec::new();
        for (s, p) in prompts.iter().enumerate() {
            if budget == 0 || fed[s] == p.len() {
                continue;
            }
            let n = budget.min(p.len() - fed[s]);
            let last = fed[s] + n == p.len();
            pass.push(BatchRows {
                seq: s,
                ids: &p[fed[s]..fed[s] + n],
                pos: fed[s],
                read: last.then_some(RowRead::Greedy),
                read_rows: 1,
            });
            budget -= n;
        }
        let outputs = model.forward_batch(cache, &pass).map_err(Box::new)?;
        for (r, out) in pass.iter().zip(outputs) {
            fed[r.seq] += r.ids.len();
            if let Some(RowOutput::Greedy(t)) = out.last() {
                next[r.seq] = *t;
            }
        }
    }
    Ok(next)
}

fn greedy_tokens(outputs: Vec<Vec<RowOutput>>) -> Vec<u32> {
    outputs.iter().map(|o| if let Some(RowOutput::Greedy(t)) = o.last() { *t } else { 0 }).collect()
}

fn report<E: Engine>(
    model: &Model<E>,
    file: &Path,
    b: &Batched,
    rows: &[Row],
    output: Output,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let p = b.n_prompt.max(1);
    let rate = |tokens: usize, seconds: &[f64]| tokens as f64 / median(seconds).max(f64::MIN_POSITIVE);
    match output {
        Output::Json => {
            let results: Vec<Value> = rows
                .iter()
                .map(|r| {
                    let tg = rate(r.npl * b.n_gen, &r.gen_seconds);
                    json!({
                        "npl": r.npl,
                        "n_kv": r.npl * (p + b.n_gen),
                        "prompt_tokens_per_s": rate(r.npl * p, &r.prompt_seconds),
                        "gen_tokens_per_s": tg,
                        "gen_tokens_per_s_per_sequence": tg / r.npl as f64,
                        "prompt_seconds": r.prompt_seconds,
                        "gen_seconds": r.gen_seconds,
                    })
                })
                .collect();
            let report = json!({
                "model": file.display().to_string(),
                "engine": model.engine().name(),
                "arch": model.config().arch.name(),
                "n_prompt": p,
                "n_gen": b.n_gen,
                "ubatch": b.ubatch,
                "repetitions": b.repetitions,
                "seed": b.seed,
                "batched": results,
            });
            writeln!(out, "{report}")?;
        }
        Output::Text => {
            writeln!(out, "model:   {} on the {} engine", file.display(), model.engine().name())?;
            writeln!(
                out,
                "prompt {p} and generation {} tokens per sequence, passes of up to {}, medians of {}",
                b.n_gen, b.ubatch, b.repetitions
            )?;
            writeln!(out, "{:>5} {:>7} {:>12} {:>12} {:>16}", "B", "N_KV", "S_PP t/s", "S_TG t/s", "S_TG/seq t/s")?;
            for r in rows {
                let tg = rate(r.npl * b.n_gen, &r.gen_seconds);
                writeln!(
                    out,
                    "{:>5} {:>7} {:>12.2} {:>12.2} {:>16.2}",
                    r.npl,
                    r.npl * (p + b.n_gen),
                    rate(r.npl * p, &r.prompt_seconds),
                    tg,
                    tg / r.npl as f64
                )?;
            }
        }
    }
    Ok(())
}
