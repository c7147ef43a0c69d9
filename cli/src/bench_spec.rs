//! What speculative decoding costs and gains, measured:
//!
//! - `bench --verify-rows 1,2,4,8,16`: the time of one pass of k rows whose every row's
//!   logits are read (a verify pass of k − 1 drafted tokens) against one decode step, at
//!   position `-p` of a random prompt;
//! - `bench --spec-type ngram-simple -f PROMPTS`: greedy decode speed with and without
//!   speculation over a file of prompts (separated by lines of `---`; each in the model's
//!   chat template when it has one, as a chat client would send it), the two runs of each
//!   prompt alternated, the decode rate taken after the first token (prefill excluded), and
//!   whether the two texts are the same.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use purebee_isa::Engine;
use purebee_rng::SplitMix64;
use purebee_runtime::batch::RowRead;
use purebee_runtime::chat::{tokenize_prompt, ChatMessage, ChatTemplate};
use purebee_runtime::sampler::SamplerConfig;
use purebee_runtime::speculative::SpecConfig;
use purebee_runtime::tokenizer::Tokenizer;
use purebee_runtime::{generate, GenerateOptions, Model, Session};
use serde_json::{json, Value};

use crate::bench::{median, Output};
use crate::CliError;

/// `--verify-rows`: the median time of a pass of each row count, and of a decode step.
pub fn verify_rows<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    (rows, n_prompt, repetitions, seed, profile): (&[usize], usize, usize, u64, bool),
    output: Output,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let vocab = model.config().n_vocab as u64;
    let mut rng = SplitMix64::new(seed);
    let prompt: Vec<u32> = (0..n_prompt.max(1)).map(|_| rng.below(vocab) as u32).collect();
    let ids: Vec<u32> = (0..rows.iter().copied().max().unwrap_or(1)).map(|_| rng.below(vocab) as u32).collect();
    model.forward_greedy(session, &prompt, 0)?;
    let pos = prompt.len();
    let mut decode = Vec::new();
    let mut passes: Vec<Vec<f64>> = vec![Vec::new(); rows.len()];
    for r in 0..=repetitions {
        let start = Instant::now();
        model.forward_greedy(session, &ids[..1], pos)?;
        let step = start.elapsed().as_secs_f64();
        for (i, &k) in rows.iter().enumerate() {
            let start = Instant::now();
            model.forward_rows(session, &ids[..k], pos, RowRead::Greedy)?;
            // The first run records and allocates the pass's programs: a warm-up.
            if r > 0 {
                passes[i].push(start.elapsed().as_secs_f64());
            }
        }
        if r > 0 {
            decode.push(step);
        }
    }
    let step = median(&decode);
    if profile {
        // One more pass of the most rows with the engine's per-kernel profile, on stderr.
        let k = rows.iter().copied().max().unwrap_or(1);
        model.set_profiling(true);
        model.forward_rows(session, &ids[..k], pos, RowRead::Greedy)?;
        let profile = model.take_profile();
        model.set_profiling(false);
        eprintln!("purebee-rs: profile of a verify pass of {k} rows:");
        for f in profile {
            let ms = f.seconds.map_or("-".to_string(), |s| format!("{:.3} ms", 1e3 * s));
            eprintln!("purebee-rs:   {:<36} {:>5} dispatches  {ms}", f.family, f.dispatches);
        }
    }
    let results: Vec<Value> = rows
        .iter()
        .zip(&passes)
        .map(|(&k, t)| json!({ "rows": k, "ms": 1e3 * median(t), "decode_steps": median(t) / step, "seconds": t }))
        .collect();
    match output {
        Output::Json => {
            writeln!(out, "{}", json!({ "position": pos, "decode_step_ms": 1e3 * step, "passes": results }))?
        }
        Output::Text => {
            writeln!(
                out,
                "verify passes at position {pos} (medians of {repetitions}); a decode step: {:.2} ms",
                1e3 * step
            )?;
            writeln!(out, "| rows | ms | decode steps |\n|---:|---:|---:|")?;
            for r in &results {
                writeln!(
                    out,
                    "| {} | {:.2} | {:.2} |",
                    r["rows"],
                    r["ms"].as_f64().unwrap_or(0.0),
                    r["decode_steps"].as_f64().unwrap_or(0.0)
                )?;
            }
        }
    }
    Ok(())
}

/// The prompts of a `-f` file: separated by lines of `---`, blank ones dropped.
pub fn read_prompts(path: &Path) -> Result<Vec<String>, CliError> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("-f {}: {e}", path.display()))?;
    let mut prompts = Vec::new();
    let mut current = String::new();
    for line in text.lines().chain(std::iter::once("---")) {
        if line.trim_end() == "---" {
            if !current.trim().is_empty() {
                prompts.push(current.trim_end().to_string());
            }
            current.clear();
        } else {
            current.push_str(line);
            current.push('\n');
        }
    }
    if prompts.is_empty() {
        return Err(format!("-f {}: no prompts (separate them with lines of ---)", path.display()).into());
    }
    Ok(prompts)
}

/// One prompt's runs: decode rates (tokens/s) plain and speculating, and what was drafted.
struct PromptRuns {
    plain: Vec<f64>,
    spec: Vec<f64>,
    tokens: usize,
    drafted: u64,
    accepted: u64,
    identical: bool,
}

/// `--spec-type ... -f PROMPTS`: each prompt generated plainly and with speculation,
/// alternated, `repetitions` times each (after one warm-up of each).
#[allow(clippy::too_many_arguments)]
pub fn prompts<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    (tokenizer, template): (&Tokenizer, Option<&ChatTemplate>),
    prompts: &[String],
    spec: &SpecConfig,
    (n_gen, repetitions): (usize, usize),
    output: Output,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let sampler = SamplerConfig { temperature: 0.0, ..SamplerConfig::default() };
    let opts = |speculation: Option<SpecConfig>| GenerateOptions {
        max_new_tokens: n_gen,
        ignore_eos: false,
        sampler: sampler.clone(),
        stop: None,
        speculation,
    };
    let (plain_opts, spec_opts) = (opts(None), opts(Some(spec.clone())));
    let mut runs = Vec::new();
    for (i, text) in prompts.iter().enumerate() {
        let ids = match template {
            Some(t) => tokenize_prompt(tokenizer, &t.render(&[ChatMessage::new("user", text)], true)?),
            None => tokenizer.encode(text, true, true),
        };
        let eog = |t: u32| tokenizer.is_eog(t);
        let mut run = PromptRuns { plain: vec![], spec: vec![], tokens: 0, drafted: 0, accepted: 0, identical: true };
        for r in 0..=repetitions {
            let plain = generate(model, session, &ids, &plain_opts, eog, |_| {})?;
            let fast = generate(model, session, &ids, &spec_opts, eog, |_| {})?;
            run.identical &= plain.generated == fast.generated;
            if r > 0 {
                run.plain.push(plain.decode_tokens_per_s());
                run.spec.push(fast.decode_tokens_per_s());
                run.tokens = fast.generated.len();
                run.drafted += fast.speculation.drafted;
                run.accepted += fast.speculation.accepted;
            }
        }
        eprintln!(
            "purebee-rs: prompt {}: {} tokens, plain {:.1} t/s, speculating {:.1} t/s",
            i + 1,
            run.tokens,
            median(&run.plain),
            median(&run.spec)
        );
        runs.push(run);
    }
    let rows: Vec<Value> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| {
            json!({
                "prompt": i + 1,
                "tokens": r.tokens,
                "plain_tokens_per_s": median(&r.plain),
                "spec_tokens_per_s": median(&r.spec),
                "speedup": median(&r.spec) / median(&r.plain),
                "draft_tokens": r.drafted,
                "draft_tokens_accepted": r.accepted,
                "acceptance": if r.drafted == 0 { 0.0 } else { r.accepted as f64 / r.drafted as f64 },
                "identical": r.identical,
                "plain": r.plain,
                "spec": r.spec,
            })
        })
        .collect();
    let speedups: Vec<f64> = runs.iter().map(|r| median(&r.spec) / median(&r.plain)).collect();
    match output {
        Output::Json => writeln!(
            out,
            "{}",
            json!({ "spec": format!("{spec:?}"), "prompts": rows, "median_speedup": median(&speedups) })
        )?,
        Output::Text => {
            writeln!(
                out,
                "| prompt | tokens | plain t/s | speculating t/s | speedup | accepted / drafted | same text |"
            )?;
            writeln!(out, "|---:|---:|---:|---:|---:|---:|:---:|")?;
            for (r, j) in runs.iter().zip(&rows) {
                writeln!(
                    out,
                    "| {} | {} | {:.1} | {:.1} | {:.2}x | {} / {} | {} |",
                    j["prompt"],
                    r.tokens,
                    median(&r.plain),
                    median(&r.spec),
                    median(&r.spec) / median(&r.plain),
                    r.accepted,
                    r.drafted,
                    if r.identical { "yes" } else { "NO" }
                )?;
            }
            writeln!(out, "median speedup {:.2}x over {} prompts", median(&speedups), runs.len())?;
        }
    }
    Ok(())
}
