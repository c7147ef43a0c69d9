//! `purebee-rs bench MODEL`: prefill and decode speed of a model on an engine, in the manner
//! of llama.cpp's `llama-bench` (`-p 512 -n 128 -r 5` by default).
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

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use purebee_isa::Engine;
use purebee_runtime::{Model, ModelError, Session};
use serde_json::{json, Value};

use crate::engine_choice::{self, EngineArgs};
use crate::progress::Spinner;
use crate::synth::{Bytes, SplitMix64};
use crate::CliError;

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
    /// Prompt tokens of the prefill phase (0: no prefill phase).
    #[arg(short = 'p', long = "n-prompt", default_value_t = 512)]
    pub n_prompt: usize,
    /// Tokens of the decode phase (0: no decode phase).
    #[arg(short = 'n', long = "n-gen", default_value_t = 128)]
    pub n_gen: usize,
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

    fn to_json(&self) -> Value {
        let (med, min, max) = self.tokens_per_s_summary();
        json!({
            "tokens": self.tokens,
            "tokens_per_s_median": med,
            "tokens_per_s_min": min,
            "tokens_per_s_max": max,
            "ms_per_token_median": median(&self.ms_per_token()),
            "seconds": self.seconds,
            "tokens_per_s": self.tokens_per_s(),
        })
    }
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
    if args.n_prompt == 0 && args.n_gen == 0 {
        return Err(BenchError::Flag { flag: "-n", value: 0, reason: "with -p 0 there is nothing to measure".into() });
    }
    let needed = args.n_prompt.saturating_add(args.n_gen);
    match args.ctx_size {
        None => Ok(needed),
        Some(c) if c < needed => Err(BenchError::Flag {
            flag: "-c",
            value: c,
            reason: format!("the context must hold -p {} plus -n {} = {needed} tokens", args.n_prompt, args.n_gen),
        }),
        Some(c) => Ok(c),
    }
}

/// One repetition: the prefill's and the decode's durations (`None` for a phase of 0 tokens).
fn repetition<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    prompt: &[u32],
    first_decode_token: u32,
    n_gen: usize,
    repetition: usize,
    file: &std::path::Path,
) -> Result<(Option<Duration>, Option<Duration>), BenchError> {
    let fail =
        |phase, source| BenchError::Forward { file: file.to_path_buf(), phase, repetition, source: Box::new(source) };
    let (mut token, prefill) = if prompt.is_empty() {
        (first_decode_token, None)
    } else {
        let start = Instant::now();
        let t = model.forward_greedy(session, prompt, 0).map_err(|e| fail("prefill", e))?;
        (t, Some(start.elapsed()))
    };
    if n_gen == 0 {
        return Ok((prefill, None));
    }
    let start = Instant::now();
    for pos in prompt.len()..prompt.len() + n_gen {
        token = model.forward_greedy(session, &[token], pos).map_err(|e| fail("decode", e))?;
    }
    Ok((prefill, Some(start.elapsed())))
}

/// Runs `bench`.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<(), CliError> {
    let n_ctx = check_flags(args)?;
    let (model_path, file) = crate::loading::open(&args.model, &args.engine)?;
    let spec = args.engine.spec();
    let engine = engine_choice::create(&spec)?;
    let engine_name = engine.name().to_string();
    let load_start = Instant::now();
    let spinner = Spinner::start(format!("loading the model on the {engine_name} engine"));
    let model = Model::load_with(engine, &file, spec.activations);
    spinner.finish();
    let load_error = |source| BenchError::Load { file: model_path.clone(), source: Box::new(source) };
    let mut model = model.map_err(load_error)?;
    let mut session = model.new_session(n_ctx).map_err(load_error)?;
    let load_seconds = load_start.elapsed().as_secs_f64();
    if args.engine.verbose {
        eprintln!("purebee-rs: loaded the model on the {engine_name} engine in {load_seconds:.2} s");
    }
    let config = model.config().clone();

    let mut rng = SplitMix64::new(args.seed);
    let vocab = config.n_vocab as u64;
    let prompt: Vec<u32> = (0..args.n_prompt).map(|_| rng.below(vocab) as u32).collect();
    let first_decode_token = rng.below(vocab) as u32;

    let mut prefill = PhaseStats { tokens: args.n_prompt, seconds: Vec::new() };
    let mut decode = PhaseStats { tokens: args.n_gen, seconds: Vec::new() };
    for r in 0..=args.repetitions {
        let (p, d) = repetition(&mut model, &mut session, &prompt, first_decode_token, args.n_gen, r, &model_path)?;
        let what = if r == 0 { "warm-up".to_string() } else { format!("repetition {r}/{}", args.repetitions) };
        let rate = |t: Option<Duration>, n: usize| {
            t.map_or("-".to_string(), |t| format!("{:.2} t/s", n as f64 / t.as_secs_f64()))
        };
        eprintln!("purebee-rs: {what}: prefill {}, decode {}", rate(p, args.n_prompt), rate(d, args.n_gen));
        if r > 0 {
            prefill.seconds.extend(p.map(|t| t.as_secs_f64()));
            decode.seconds.extend(d.map(|t| t.as_secs_f64()));
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
        "n_prompt": args.n_prompt,
        "n_gen": args.n_gen,
        "repetitions": args.repetitions,
        "warmup_repetitions": 1,
        "n_ctx": n_ctx,
        "seed": args.seed,
        "load_seconds": load_seconds,
        "prefill": phase(&prefill),
        "decode": phase(&decode),
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
        }
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
        let s = PhaseStats { tokens: 8, seconds: vec![2.0, 1.0, 4.0] };
        assert_eq!(s.tokens_per_s(), vec![4.0, 8.0, 2.0]);
        assert_eq!(s.tokens_per_s_summary(), (4.0, 2.0, 8.0));
        assert_eq!(median(&s.ms_per_token()), 250.0);
        let j = s.to_json();
        assert_eq!(j["tokens_per_s_median"], 4.0);
        assert_eq!(j["seconds"], json!([2.0, 1.0, 4.0]));
    }
}
