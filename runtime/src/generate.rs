//! The generation loop: one batched prefill of the prompt, then one decode step per token,
//! until an end-of-generation token, the token limit, the end of the context or a stop
//! request ([`GenerateOptions::stop`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use purebee_isa::Engine;

use crate::sampler::{Sampler, SamplerConfig};
use crate::{LogitsRows, Model, ModelError};

/// What to generate.
#[derive(Clone, Debug)]
pub struct GenerateOptions {
    /// The most tokens to generate.
    pub max_new_tokens: usize,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// How to pick each token.
    pub sampler: SamplerConfig,
    /// Set from another thread or a signal handler (e.g. `signal_hook::flag::register`) to
    /// stop between two decode steps with [`StopReason::Interrupted`]; the caller clears
    /// it. The prefill is one batched run and is not cut: a flag set during it stops
    /// generation after the first token. What was generated stays valid (the KV cache
    /// holds every id but the last, as after any stop).
    pub stop: Option<Arc<AtomicBool>>,
}

/// Why generation stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// `max_new_tokens` were generated.
    MaxTokens,
    /// An end-of-generation token was generated (it is the last generated id).
    EndOfGeneration,
    /// The KV cache is full.
    ContextFull,
    /// [`GenerateOptions::stop`] was set (a Ctrl-C): generation stopped between two decode
    /// steps, after at least one token.
    Interrupted,
}

/// The outcome of [`generate`].
#[derive(Clone, Debug)]
pub struct Generation {
    /// The generated ids, an end-of-generation token included. The last one was sampled but
    /// never run, so it is not in the KV cache.
    pub generated: Vec<u32>,
    /// Why it stopped.
    pub stop: StopReason,
    /// Time of the prompt's prefill (which also yields the first token).
    pub prefill_time: Duration,
    /// Time of the decode steps (every token after the first).
    pub decode_time: Duration,
}

impl Generation {
    /// Prompt tokens per second of the prefill.
    pub fn prompt_tokens_per_s(&self, n_prompt: usize) -> f64 {
        n_prompt as f64 / self.prefill_time.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Generated tokens per second of the decode steps (the first token comes from prefill).
    pub fn decode_tokens_per_s(&self) -> f64 {
        let steps = self.generated.len().saturating_sub(1);
        if steps == 0 {
            return 0.0;
        }
        steps as f64 / self.decode_time.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// Generates from `prompt` at position 0 of `model`'s context. `on_token` sees each id as
/// it is produced (for streaming); `is_eog` says which ids end generation.
pub fn generate<E: Engine>(
    model: &mut Model<E>,
    prompt: &[u32],
    opts: &GenerateOptions,
    is_eog: impl Fn(u32) -> bool,
    on_token: impl FnMut(u32),
) -> Result<Generation, ModelError> {
    generate_after_cached_prefix(model, prompt, 0, opts, is_eog, on_token)
}

/// Generates after `context`, whose first `cached` ids are already in `model`'s KV cache at
/// positions `0..cached` (an earlier turn of a conversation): only `context[cached..]` is
/// prefilled, at position `cached`. The sampler's repeat history sees the whole `context`,
/// so the result is the same as [`generate`] on `context` from an empty cache.
///
/// At least one id must be new (`cached < context.len()`): the last one's logits give the
/// first generated token.
pub fn generate_after_cached_prefix<E: Engine>(
    model: &mut Model<E>,
    context: &[u32],
    cached: usize,
    opts: &GenerateOptions,
    is_eog: impl Fn(u32) -> bool,
    mut on_token: impl FnMut(u32),
) -> Result<Generation, ModelError> {
    let mut sampler = Sampler::new(opts.sampler.clone())?;
    if cached >= context.len() {
        return Err(ModelError::NoTokens);
    }
    if context.len() > model.n_ctx() {
        return Err(ModelError::ContextFull {
            tokens: context.len() - cached,
            pos: cached,
            n_ctx: model.n_ctx(),
            n_ctx_train: model.config().n_ctx_train,
        });
    }
    for &t in context {
        sampler.accept(t);
    }
    let mut generated = Vec::new();
    if opts.max_new_tokens == 0 {
        return Ok(Generation {
            generated,
            stop: StopReason::MaxTokens,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
        });
    }
    let start = Instant::now();
    let mut token = next(model, &mut sampler, &context[cached..], cached)?;
    let prefill_time = start.elapsed();
    let start = Instant::now();
    let mut pos = context.len();
    let stop = loop {
        generated.push(token);
        sampler.accept(token);
        on_token(token);
        if is_eog(token) && !opts.ignore_eos {
            break StopReason::EndOfGeneration;
        }
        if generated.len() >= opts.max_new_tokens {
            break StopReason::MaxTokens;
        }
        if pos >= model.n_ctx() {
            break StopReason::ContextFull;
        }
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
            break StopReason::Interrupted;
        }
        token = next(model, &mut sampler, &[token], pos)?;
        pos += 1;
    };
    Ok(Generation { generated, stop, prefill_time, decode_time: start.elapsed() })
}

/// Runs `tokens` at `pos` and picks the next token: on the engine (4 bytes read back) for
/// plain greedy decoding, from the full logits otherwise.
fn next<E: Engine>(model: &mut Model<E>, sampler: &mut Sampler, tokens: &[u32], pos: usize) -> Result<u32, ModelError> {
    if sampler.config().is_plain_greedy() {
        model.forward_greedy(tokens, pos)
    } else {
        let logits = model.forward(tokens, pos, LogitsRows::Last)?;
        Ok(sampler.sample(&logits))
    }
}
