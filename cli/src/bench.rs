//! `purebee-rs bench MODEL`: prefill and decode speed of a model on an engine, in the manner
//! of llama.cpp's `llama-bench` (`-p 512 -n 128 -r 5` by default); with `--npl 1,2,4`,
//! several sequences together as llama-batched-bench (`bench_batched.rs`).
//!
//! Each repetition runs, at position 0 of the KV cache:
//! - **prefill**: one batched forward pass over `-p N` random token ids (seeded by `--seed`,
//!   all below the vocabulary size), reading back the greedy next token
//!   ([`Model::forward_greedy`]);
//! - **decode**: `-n N` single-token forward passes at positions `p, p + 1, …`, each fed the
//!   greedy token of the one before (the first fed the prefill's; with `-p 0`, a random id).
//!
//! Every pass ends with the 4-byte read-back of its ARGMAX, so the time of each phase includes
//! the engine finishing its work. One warm-up repetition (which also builds the programs) runs
//! first and is not counted; `--repetitions R` are then timed. Per phase the report gives the
//! median tokens/s, its min–max spread over the repetitions and the median ms/token, and the
//! JSON output adds every repetition's raw numbers. The KV cache holds `-c` positions
//! (default: exactly `p + n`).
//!
//! For an engine that dispatches kernels ([`Engine::counters`]: the GPU and CPU engines), each phase
//! also reports `dispatches_per_token` and `submits_per_token` over the timed repetitions
//! (a prefill's counts are divided by its `-p` tokens; they include the setup and teardown
//! of its tensors and the read-back). `--profile` then runs one more repetition with the
//! engine's per-kernel profile on (`Engine::set_profiling`; slower, so not timed) and
//! reports per phase and kernel family the dispatches, device milliseconds, bytes read and
//! GB/s. An engine without device timestamps reports the dispatches and bytes without times
//! (saying so in one line on stderr); one without kernels, nothing.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use purebee_isa::{DispatchCounters, Engine, KernelProfile, ProfileSupport};
use purebee_loader::{LoadedModel, NoContext, SessionContext};
use purebee_rng::SplitMix64;
use purebee_runtime::{Model, ModelError, Session};
use serde_json::{json, Value};

use crate::engine_choice::EngineArgs;
use crate::spec_args::SpecArgs;
use crate::synth::Bytes;
use crate::{loading, models, CliError};

/// What `bench` prints on stdout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// A table for people.
    Text,
    /// One JSON object with every figure and the raw per-repetition numbers.
    Json,
}

/// Arguments of `bench` (flag names as in llama-bench).
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// The GGUF model: a path, a pulled name, or an hf:// or http(s) source (pulled on
    /// first use).
    pub model: PathBuf,
    /// The engine and its threads.
    #[command(flatten)]
    pub engine: EngineArgs,
    /// Prompt tokens of the prefill phase (0: no prefill phase; default 512, or 32 per
    /// sequence with --npl).
    #[arg(short = 'p', long = "n-prompt")]
    pub n_prompt: Option<usize>,
    /// Tokens of the decode phase (0: no decode phase; default 128, or 32 per sequence with
    /// --npl).
    #[arg(short = 'n', long = "n-gen")]
    pub n_gen: Option<usize>,
    /// Batch sizes, as llama-batched-bench's `-npl` (which also works): for each, that many
    /// sequences prefilled and decoded together in shared passes.
    #[arg(long = "npl", value_delimiter = ',')]
    pub npl: Vec<usize>,
    /// With --npl: the most tokens of one pass (`-ub` also works).
    #[arg(long = "ubatch-size", default_value_t = 512)]
    pub ubatch_size: usize,
    /// Timed repetitions, after one warm-up.
    #[arg(short = 'r', long, default_value_t = 5)]
    pub repetitions: usize,
    /// KV cache size in tokens (default: the prompt plus the decode tokens).
    #[arg(short = 'c', long = "ctx-size")]
    pub ctx_size: Option<usize>,
    /// Seed of the random prompt ids.
    #[arg(long, default_value_t = 1234)]
    pub seed: u64,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub output: Output,
    /// After the timed repetitions, one more with the engine's per-kernel profile: time,
    /// bytes read and GB/s per kernel family (GPU engine: times where the adapter has
    /// timestamp queries; CPU engine: wall time per instruction family).
    #[arg(long)]
    pub profile: bool,
    /// Row counts of verify passes to time against a decode step (each row's logits read,
    /// as when k − 1 drafted tokens are checked), at position -p.
    #[arg(long = "verify-rows", value_delimiter = ',')]
    pub verify_rows: Vec<usize>,
    /// With --spec-type: prompts (separated by lines of `---`) to generate -n tokens from,
    /// greedily, with and without speculation.
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Speculative decoding (with -f).
    #[command(flatten)]
    pub spec: SpecArgs,
}

impl BenchArgs {
    /// The prompt tokens (per sequence with --npl).
    pub fn prompt_len(&self) -> usize {
        self.n_prompt.unwrap_or(if self.npl.is_empty() { 512 } else { 32 })
    }

    /// The generated tokens (per sequence with --npl).
    pub fn gen_len(&self) -> usize {
        self.n_gen.unwrap_or(if self.npl.is_empty() { 128 } else { 32 })
    }
}

/// What went wrong benchmarking.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// A flag whose value cannot work.
    #[error("{flag} {value}: {reason}")]
    Flag {
        /// The flag.
        flag: &'static str,
        /// Its value.
        value: usize,
        /// Why it cannot work.
        reason: String,
    },
    /// Loading the model failed.
    #[error("{file}: loading the model: {source}")]
    Load {
        /// The model file.
        file: PathBuf,
        /// The runtime's error.
        source: Box<ModelError>,
    },
    /// A forward pass failed.
    #[error("{file}: {phase} of repetition {repetition}: {source}")]
    Forward {
        /// The model file.
        file: PathBuf,
        /// `prefill` or `decode`.
        phase: &'static str,
        /// The repetition (0 is the warm-up).
        repetition: usize,
        /// The runtime's error.
        source: Box<ModelError>,
    },
}

/// The timings of one phase over the timed repetitions.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseStats {
    /// Tokens per repetition.
    pub tokens: usize,
    /// Seconds of each repetition.
    pub seconds: Vec<f64>,
    /// Dispatches and submits over all timed repetitions, for an engine that counts them.
    pub counts: Option<DispatchCounters>,
    /// The per-kernel profile of the profiled repetition (`--profile`).
    pub profile: Vec<KernelProfile>,
}

impl PhaseStats {
    /// Tokens/s of each repetition.
    pub fn tokens_per_s(&self) -> Vec<f64> {
        self.seconds.iter().map(|&s| self.tokens as f64 / s.max(f64::MIN_POSITIVE)).collect()
    }

    /// Milliseconds per token of each repetition.
    pub fn ms_per_token(&self) -> Vec<f64> {
        self.seconds.iter().map(|&s| 1000.0 * s / self.tokens as f64).collect()
    }

    /// (median, min, max) tokens/s.
    pub fn tokens_per_s_summary(&self) -> (f64, f64, f64) {
        let tps = self.tokens_per_s();
        let min = tps.iter().copied().fold(f64::INFINITY, f64::min);
        let max = tps.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (median(&tps), min, max)
    }

    /// (dispatches, submits) per token over the timed repetitions, for an engine that
    /// counts them.
    pub fn per_token(&self) -> Option<(f64, f64)> {
        let c = self.counts?;
        let tokens = (self.tokens * self.seconds.len()).max(1) as f64;
        Some((c.dispatches as f64 / tokens, c.submits as f64 / tokens))
    }

    fn to_json(&self) -> Value {
        let (med, min, max) = self.tokens_per_s_summary();
        let per_token = self.per_token();
        let mut j = json!({
            "tokens": self.tokens,
            "tokens_per_s_median": med,
            "tokens_per_s_min": min,
            "tokens_per_s_max": max,
            "ms_per_token_median": median(&self.ms_per_token()),
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s(),
            "dispatches_per_token": per_token.map(|p| p.0),
            "submits_per_token": per_token.map(|p| p.1),
        });
        if !self.profile.is_empty() {
            j["profile"] = self.profile.iter().map(|k| profile_json(k, self.tokens)).collect();
        }
        j
    }
}

/// One kernel family of a phase's profile (`tokens`: the phase's tokens).
fn profile_json(k: &KernelProfile, tokens: usize) -> Value {
    let ms = k.seconds.map(|s| s * 1e3);
    json!({
        "family": k.family,
        "dispatches": k.dispatches,
        "dispatches_per_token": k.dispatches as f64 / tokens.max(1) as f64,
        "ms": ms,
        "ms_per_token": ms.map(|ms| ms / tokens.max(1) as f64),
        "bytes": k.bytes_read,
        "gb_per_s": gb_per_s(k),
    })
}

/// The bytes a family read over its device time, in GB/s (`None` without a time).
fn gb_per_s(k: &KernelProfile) -> Option<f64> {
    k.seconds.filter(|&s| s > 0.0).map(|s| k.bytes_read as f64 / s / 1e9)
}

/// Adds `b` to `a` (`None` stays `None`).
fn add_counts(a: Option<DispatchCounters>, b: Option<DispatchCounters>) -> Option<DispatchCounters> {
    let (a, b) = (a?, b?);
    Some(DispatchCounters { dispatches: a.dispatches + b.dispatches, submits: a.submits + b.submits })
}

/// What one repetition measured per phase (`None` durations for a phase of 0 tokens).
#[derive(Default)]
struct Measured {
    prefill: Option<Duration>,
    decode: Option<Duration>,
    prefill_counts: Option<DispatchCounters>,
    decode_counts: Option<DispatchCounters>,
    prefill_profile: Vec<KernelProfile>,
    decode_profile: Vec<KernelProfile>,
}

/// The median (the mean of the two middle values for an even count; NaN for none).
pub fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// Checks the flags against each other and the model: returns the KV cache size.
fn check_flags(args: &BenchArgs) -> Result<usize, BenchError> {
    if args.repetitions == 0 {
        return Err(BenchError::Flag { flag: "--repetitions", value: 0, reason: "must be at least 1".into() });
    }
    if args.prompt_len() == 0 && args.gen_len() == 0 {
        return Err(BenchError::Flag { flag: "-n", value: 0, reason: "with -p 0 there is nothing to measure".into() });
    }
    let needed = args.prompt_len().saturating_add(args.gen_len());
    match args.ctx_size {
        None => Ok(needed),
        Some(c) if c < needed => Err(BenchError::Flag {
            flag: "-c",
            value: c,
            reason: format!(
                "the context must hold -p {} plus -n {} = {needed} tokens",
                args.prompt_len(),
                args.gen_len()
            ),
        }),
        Some(c) => Ok(c),
    }
}

/// One repetition: each phase's duration and dispatch counts, and with `profiled` (the
/// engine's profile on), each phase's kernel profile.
#[allow(clippy::too_many_arguments)]
fn repetition<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    prompt: &[u32],
    first_decode_token: u32,
    n_gen: usize,
    repetition: usize,
    file: &std::path::Path,
    profiled: bool,
) -> Result<Measured, BenchError> {
    let fail =
        |phase, source| BenchError::Forward { file: file.to_path_buf(), phase, repetition, source: Box::new(source) };
    let mut m = Measured::default();
    let mut token = first_decode_token;
    if !prompt.is_empty() {
        let before = model.engine().counters();
        let start = Instant::now();
        token = model.forward_greedy(session, prompt, 0).map_err(|e| fail("prefill", e))?;
        m.prefill = Some(start.elapsed());
        m.prefill_counts = model.engine().counters().zip(before).map(|(now, before)| now.since(before));
        if profiled {
            m.prefill_profile = model.take_profile();
        }
    }
    if n_gen == 0 {
        return Ok(m);
    }
    let before = model.engine().counters();
    let start = Instant::now();
    for pos in prompt.len()..prompt.len() + n_gen {
        token = model.forward_greedy(session, &[token], pos).map_err(|e| fail("decode", e))?;
    }
    m.decode = Some(start.elapsed());
    m.decode_counts = model.engine().counters().zip(before).map(|(now, before)| now.since(before));
    if profiled {
        m.decode_profile = model.take_profile();
    }
    Ok(m)
}

/// `bench --verify-rows` or `bench --spec-type ... -f PROMPTS`.
fn run_spec(args: &BenchArgs, file: purebee_loader::ModelFile, out: &mut dyn Write) -> Result<(), CliError> {
    if let Some(&bad) = args.verify_rows.iter().find(|&&k| k == 0) {
        return Err(BenchError::Flag { flag: "--verify-rows", value: bad, reason: "a pass needs a row".into() }.into());
    }
    if let Some(path) = &args.file {
        args.spec.validate()?;
        if args.spec.spec_type == crate::spec_args::SpecType::None {
            return Err("-f needs --spec-type (ngram-simple or draft-simple) to compare with plain decoding".into());
        }
        let prompts = crate::bench_spec::read_prompts(path)?;
        let LoadedModel { file, tokenizer, template, mut model, cache: mut session, .. } =
            loading::load(file, &args.engine, SessionContext { n_ctx: args.ctx_size })?;
        let spec = args.spec.config(file.path(), Some(&tokenizer), &args.engine, Some(session.n_ctx()))?;
        let spec = spec.ok_or("-f needs --spec-type")?;
        let text = (&tokenizer, template.as_ref().ok());
        let runs = (args.gen_len(), args.repetitions);
        return crate::bench_spec::prompts(&mut model, &mut session, text, &prompts, &spec, runs, args.output, out);
    }
    let most = args.verify_rows.iter().copied().max().unwrap_or(1);
    let n_ctx = args.ctx_size.unwrap_or(args.prompt_len() + most + 1);
    let LoadedModel { mut model, cache: mut session, .. } =
        loading::load(file, &args.engine, SessionContext { n_ctx: Some(n_ctx) })?;
    let plan = (&args.verify_rows[..], args.prompt_len(), args.repetitions, args.seed, args.profile);
    crate::bench_spec::verify_rows(&mut model, &mut session, plan, args.output, out)
}

/// Runs `bench`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let n_ctx = check_flags(args)?;
    let model_path = models::resolve(&args.model)?;
    let file = loading::open(&model_path, &args.engine)?;
    if !args.npl.is_empty() {
        let mut loaded = loading::load(file, &args.engine, NoContext)?;
        let batched = crate::bench_batched::Batched {
            npl: &args.npl,
            n_prompt: args.prompt_len(),
            n_gen: args.gen_len(),
            ubatch: args.ubatch_size,
            repetitions: args.repetitions,
            seed: args.seed,
        };
        return crate::bench_batched::run(&mut loaded.model, &model_path, &batched, args.output, out);
    }
    if !args.verify_rows.is_empty() || args.file.is_some() {
        return run_spec(args, file, out);
    }
    let LoadedModel { file, mut model, cache: mut session, load_seconds, .. } =
        loading::load(file, &args.engine, SessionContext { n_ctx: Some(n_ctx) })?;
    let config = model.config().clone();

    let mut rng = SplitMix64::new(args.seed);
    let vocab = config.n_vocab as u64;
    let prompt: Vec<u32> = (0..args.prompt_len()).map(|_| rng.below(vocab) as u32).collect();
    let first_decode_token = rng.below(vocab) as u32;

    let counting = model.engine().counters().is_some();
    let zero = counting.then(DispatchCounters::default);
    let mut prefill = PhaseStats { tokens: args.prompt_len(), seconds: Vec::new(), counts: zero, profile: Vec::new() };
    let mut decode = PhaseStats { tokens: args.gen_len(), seconds: Vec::new(), counts: zero, profile: Vec::new() };
    let rate =
        |t: Option<Duration>, n: usize| t.map_or("-".to_string(), |t| format!("{:.2} t/s", n as f64 / t.as_secs_f64()));
    for r in 0..=args.repetitions {
        let m =
            repetition(&mut model, &mut session, &prompt, first_decode_token, args.gen_len(), r, &model_path, false)?;
        let what = if r == 0 { "warm-up".to_string() } else { format!("repetition {r}/{}", args.repetitions) };
        eprintln!(
            "purebee-rs: {what}: prefill {}, decode {}",
            rate(m.prefill, args.prompt_len()),
            rate(m.decode, args.gen_len())
        );
        if r > 0 {
            prefill.seconds.extend(m.prefill.map(|t| t.as_secs_f64()));
            decode.seconds.extend(m.decode.map(|t| t.as_secs_f64()));
            prefill.counts = add_counts(prefill.counts, m.prefill_counts);
            decode.counts = add_counts(decode.counts, m.decode_counts);
        }
    }
    let mut profile_timed = None;
    if args.profile {
        let engine = model.engine().name();
        match model.set_profiling(true) {
            ProfileSupport::Unsupported => {
                eprintln!("purebee-rs: --profile: the {engine} engine has no kernel profile")
            }
            support => {
                let timed = support == ProfileSupport::Timed;
                if let ProfileSupport::Untimed(reason) = &support {
                    eprintln!("purebee-rs: --profile: {reason}: dispatch counts and bytes only, no kernel times");
                }
                profile_timed = Some(timed);
                let r = args.repetitions + 1;
                let m = repetition(
                    &mut model,
                    &mut session,
                    &prompt,
                    first_decode_token,
                    args.gen_len(),
                    r,
                    &model_path,
                    true,
                )?;
                model.set_profiling(false);
                eprintln!(
                    "purebee-rs: profiled repetition: prefill {}, decode {}",
                    rate(m.prefill, args.prompt_len()),
                    rate(m.decode, args.gen_len())
                );
                prefill.profile = m.prefill_profile;
                decode.profile = m.decode_profile;
            }
        }
    }

    let linear = file.tensor_info("blk.0.attn_q.weight").map(|t| t.dtype.name()).unwrap_or("?");
    let parameters: u64 = file.tensors().iter().map(|t| t.n_elements() as u64).sum();
    let phase = |s: &PhaseStats| if s.tokens > 0 { s.to_json() } else { Value::Null };
    let report = json!({
        "model": model_path.display().to_string(),
        "file_bytes": file.file_len(),
        "engine": model.engine().name(),
        "arch": config.arch.name(),
        "shape": {
            "n_vocab": config.n_vocab,
            "n_embd": config.n_embd,
            "n_layer": config.n_layer,
            "n_head": config.n_head,
            "n_kv_head": config.n_kv_head,
            "head_dim": config.head_dim,
            "n_ff": config.n_ff,
            "linear_type": linear,
            "parameters": parameters,
        },
        "n_prompt": args.prompt_len(),
        "n_gen": args.gen_len(),
        "repetitions": args.repetitions,
        "warmup_repetitions": 1,
        "n_ctx": n_ctx,
        "seed": args.seed,
        "load_seconds": load_seconds,
        "prefill": phase(&prefill),
        "decode": phase(&decode),
        "profile_timed": profile_timed,
    });
    match args.output {
        Output::Json => writeln!(out, "{report}")?,
        Output::Text => {
            let params = if parameters >= 1_000_000_000 {
                format!("{:.2} B", parameters as f64 / 1e9)
            } else {
                format!("{:.2} M", parameters as f64 / 1e6)
            };
            writeln!(
                out,
                "model:   {} ({}, {params} parameters, {})",
                model_path.display(),
                config.arch.name(),
                Bytes(file.file_len())
            )?;
            writeln!(
                out,
                "shape:   vocab {}, dim {}, {} layers, {} heads / {} kv heads (head_dim {}), ffn {}, linear {linear}",
                config.n_vocab,
                config.n_embd,
                config.n_layer,
                config.n_head,
                config.n_kv_head,
                config.head_dim,
                config.n_ff
            )?;
            writeln!(
                out,
                "engine:  {}; context {n_ctx}; prompt seed {}; {} repetitions after 1 warm-up; load {load_seconds:.2} s",
                model.engine().name(),
                args.seed,
                args.repetitions
            )?;
            writeln!(out)?;
            writeln!(
                out,
                "{:<8} {:>7} {:>14} {:>23} {:>17}",
                "phase", "tokens", "t/s (median)", "t/s (min-max)", "ms/token (median)"
            )?;
            for (name, s) in [("prefill", &prefill), ("decode", &decode)] {
                if s.tokens == 0 {
                    continue;
                }
                let (med, min, max) = s.tokens_per_s_summary();
                let spread = format!("{min:.3} - {max:.3}");
                let ms = median(&s.ms_per_token());
                writeln!(out, "{name:<8} {:>7} {med:>14.3} {spread:>23} {ms:>17.2}", s.tokens)?;
            }
            for (name, s) in [("prefill", &prefill), ("decode", &decode)] {
                if let (true, Some((d, sub))) = (s.tokens > 0, s.per_token()) {
                    writeln!(out, "{name:<8} {d:.2} dispatches/token, {sub:.2} submits/token")?;
                }
            }
            for (name, s) in [("prefill", &prefill), ("decode", &decode)] {
                if s.profile.is_empty() {
                    continue;
                }
                writeln!(out)?;
                write_profile(out, name, s)?;
            }
        }
    }
    Ok(())
}

/// The text table of a phase's profile, slowest family first (most dispatches first without
/// times).
fn write_profile(out: &mut dyn Write, name: &str, s: &PhaseStats) -> std::io::Result<()> {
    let tokens = s.tokens.max(1) as f64;
    let mut rows: Vec<&KernelProfile> = s.profile.iter().collect();
    rows.sort_by(|a, b| {
        b.seconds.unwrap_or(0.0).total_cmp(&a.seconds.unwrap_or(0.0)).then(b.dispatches.cmp(&a.dispatches))
    });
    let total: f64 = rows.iter().filter_map(|k| k.seconds).sum();
    writeln!(out, "profile of the {name} ({} tokens, one repetition):", s.tokens)?;
    writeln!(
        out,
        "{:<44} {:>10} {:>11} {:>6} {:>12} {:>9}",
        "kernel family", "disp/token", "ms/token", "%", "MB/token", "GB/s"
    )?;
    for k in rows {
        let ms = k.seconds.map_or("-".to_string(), |t| format!("{:.4}", t * 1e3 / tokens));
        let share = k.seconds.filter(|_| total > 0.0).map_or("-".to_string(), |t| format!("{:.1}", 100.0 * t / total));
        let gbs = gb_per_s(k).map_or("-".to_string(), |g| format!("{g:.2}"));
        writeln!(
            out,
            "{:<44} {:>10.2} {ms:>11} {share:>6} {:>12.3} {gbs:>9}",
            k.family,
            k.dispatches as f64 / tokens,
            k.bytes_read as f64 / 1e6 / tokens
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn phase_stats_summarise_the_repetitions() {
        let s = PhaseStats {
            tokens: 8,
            seconds: vec![2.0, 1.0, 4.0],
            counts: Some(DispatchCounters { dispatches: 240, submits: 48 }),
            profile: vec![KernelProfile {
                family: "bitlinear.wgsl:gemv".into(),
                dispatches: 24,
                seconds: Some(0.5),
                bytes_read: 2_000_000_000,
            }],
        };
        assert_eq!(s.tokens_per_s(), vec![4.0, 8.0, 2.0]);
        assert_eq!(s.tokens_per_s_summary(), (4.0, 2.0, 8.0));
        assert_eq!(median(&s.ms_per_token()), 250.0);
        let j = s.to_json();
        assert_eq!(j["tokens_per_s_median"], 4.0);
        assert_eq!(j["seconds"], json!([2.0, 1.0, 4.0]));
        // 240 dispatches and 48 submits over 3 repetitions of 8 tokens.
        assert_eq!(j["dispatches_per_token"], 10.0);
        assert_eq!(j["submits_per_token"], 2.0);
        assert_eq!(j["profile"][0]["family"], "bitlinear.wgsl:gemv");
        assert_eq!(j["profile"][0]["dispatches_per_token"], 3.0);
        assert_eq!(j["profile"][0]["ms"], 500.0);
        assert_eq!(j["profile"][0]["gb_per_s"], 4.0);
        let none = PhaseStats { counts: None, profile: Vec::new(), ..s };
        assert!(none.to_json()["dispatches_per_token"].is_null());
        assert!(none.to_json().get("profile").is_none());
    }
}
