//! Generation: [`Generator`] runs one generation in one session a step at a time (a prefill
//! chunk, or one token), so a caller can interleave sessions and stop between any two
//! steps; [`generate`] and [`generate_reusing_cache`] run it to the end: until an
//! end-of-generation token, the token limit, the end of the context or a stop request
//! ([`GenerateOptions::stop`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

// std's `Instant::now` panics on wasm32-unknown-unknown; this one reads the browser's clock
// there and is std's elsewhere.
use web_time::Instant;

use purebee_isa::Engine;

use crate::batch::{RowOutput, RowRead, SharedCache};
use crate::in_flight::{ForwardInFlight, Received, Want};
use crate::sampler::{Sampler, SamplerConfig};
use crate::speculative::{accept, Draft, SpecConfig, SpecStats, Speculation};
use crate::{LogitsRows, Model, ModelError, PendingToken, Session};

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
    /// Speculative decoding (n-gram lookup or a draft model); `None`: plain decoding.
    pub speculation: Option<SpecConfig>,
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
    /// Prompt ids whose KV entries the session already held (not prefilled again).
    pub reused_tokens: usize,
    /// Time of the prompt's prefill (which also yields the first token).
    pub prefill_time: Duration,
    /// Time of the decode steps (every token after the first).
    pub decode_time: Duration,
    /// Drafted and accepted tokens, when speculating.
    pub speculation: SpecStats,
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

/// How a [`Generator`] runs the prompt ids its session does not hold yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefill {
    /// All in one batch (one step): the fastest.
    Whole,
    /// In chunks of at most this many ids (rounded down to a power of two), one per step,
    /// each chunk's size a power of two: a caller can stop between chunks, and a session
    /// records at most one program per power of two however varied its prompts are.
    Chunks(usize),
}

/// One generation in one session, a step at a time. The prompt's ids that the session's
/// KV cache already holds are reused (its longest common prefix with the prompt, leaving at
/// least the last id to run: its logits give the first token).
///
/// Plain greedy decoding on an engine whose reads overlap its work (a GPU) runs one step
/// ahead: each step queues the next one, which reads its input token where the previous
/// step left it on the engine, before waiting for the previous token to come back, so the
/// device never waits for the host. The step queued after the last token the caller takes
/// runs that token too: its greedy successor is never read, but its KV entry is valid, so
/// the session then holds every generated id (the plain loop leaves out the last).
#[derive(Debug)]
pub struct Generator {
    sampler: Sampler,
    prompt: Vec<u32>,
    prefill: Prefill,
    reused: usize,
    /// Prompt ids in the KV cache so far.
    prefilled: usize,
    /// The last sampled token, not run yet, and the position it will be run at.
    last: Option<(u32, usize)>,
    /// The last sampled token's step, already queued from the engine's copy of it (greedy
    /// decoding that runs ahead).
    ahead: Option<PendingToken>,
    /// Read whole logits rows even when TOP_K's candidates would do.
    full_rows: bool,
    /// `last`'s token as a slice, for [`Generator::next_rows`].
    last_token: [u32; 1],
    /// How many top log-probabilities each step reports, when log-probabilities are wanted.
    logprobs: Option<usize>,
    /// The log-probabilities of the last sampled token's step.
    last_logprobs: Option<TokenLogprobs>,
    /// Speculative decoding, when on.
    spec: Option<Speculation>,
    /// The draft the next verify pass checks, and that pass's ids: the last sampled token,
    /// then the draft (empty: the next step is a plain one).
    draft: Draft,
    verify_ids: Vec<u32>,
    /// Tokens a verify pass decided that the caller has not taken yet, in order.
    ready: VecDeque<u32>,
    /// The most tokens the caller will take (drafts never go past it), and how many it took.
    max_tokens: Option<usize>,
    taken: usize,
}

/// The log-probabilities of one generated token under the model's raw distribution (the
/// softmax of the raw logits, before penalties and temperature, as OpenAI's API reports
/// them): `logit − ln Σ e^logits`, where the log-sum-exp comes from TOP_K's `lse` on the
/// engine (or the host, for a step that reads the whole row anyway).
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprobs {
    /// The chosen token.
    pub token: u32,
    /// Its log-probability (at most 0; NaN when the row held NaN).
    pub logprob: f32,
    /// The most likely tokens and their log-probabilities, in TOP_K's rank order (larger
    /// first, ties by lower id): as many as asked ([`Generator::logprobs`]).
    pub top: Vec<(u32, f32)>,
}

impl TokenLogprobs {
    /// From a row's candidates in rank order (`values[j]` is the logit of `ids[j]`) and its
    /// log-sum-exp: `top` of them, and `token`'s (which must be among them; else NaN).
    pub fn from_candidates(token: u32, values: &[f32], ids: &[u32], lse: f32, top: usize) -> TokenLogprobs {
        let logprob = ids.iter().position(|&t| t == token).map_or(f32::NAN, |j| logprob_of(values[j], lse));
        let top = ids.iter().zip(values).take(top).map(|(&t, &v)| (t, logprob_of(v, lse))).collect();
        TokenLogprobs { token, logprob, top }
    }

    /// From a whole row of logits: the log-sum-exp as the reference engine's TOP_K computes
    /// it (f64), the top candidates in TOP_K's rank order.
    pub fn from_row(token: u32, logits: &[f32], top: usize) -> TokenLogprobs {
        let lse = log_sum_exp(logits);
        let mut order: Vec<u32> = (0..logits.len() as u32).collect();
        let key = |i: u32| logits[i as usize];
        order.sort_by(|&a, &b| match (key(a).is_nan(), key(b).is_nan()) {
            (false, true) => std::cmp::Ordering::Less,
            (true, false) => std::cmp::Ordering::Greater,
            _ => key(b).partial_cmp(&key(a)).unwrap_or(std::cmp::Ordering::Equal).then(a.cmp(&b)),
        });
        order.truncate(top);
        let logprob = logits.get(token as usize).map_or(f32::NAN, |&v| logprob_of(v, lse));
        TokenLogprobs { token, logprob, top: order.iter().map(|&t| (t, logprob_of(logits[t as usize], lse))).collect() }
    }
}

/// `value − lse` in f64, rounded, never above 0 (a value within rounding of the
/// log-sum-exp is the whole distribution); NaN stays NaN.
fn logprob_of(value: f32, lse: f32) -> f32 {
    let d = (f64::from(value) - f64::from(lse)) as f32;
    if d > 0.0 {
        0.0
    } else {
        d
    }
}

/// A row's log-sum-exp as TOP_K's rustdoc defines it (NaN, then +∞, then an all-−∞ row;
/// otherwise `M + ln Σ e^(x − M)` in f64).
fn log_sum_exp(row: &[f32]) -> f32 {
    if row.iter().any(|v| v.is_nan()) {
        return f32::NAN;
    }
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max.is_infinite() {
        return max;
    }
    let m = f64::from(max);
    (m + row.iter().map(|&v| (f64::from(v) - m).exp()).sum::<f64>().ln()) as f32
}

/// The rows a [`Generator`] runs next in a batched pass ([`Generator::next_rows`]).
#[derive(Clone, Copy, Debug)]
pub struct NextRows<'a> {
    /// The ids, at positions `pos..`.
    pub ids: &'a [u32],
    /// The position of the first.
    pub pos: usize,
    /// What the sampler needs of the last rows' logits; `None` for a prefill chunk that is
    /// not the prompt's last.
    pub read: Option<RowRead>,
    /// How many of the last rows are read: 1, or a verify pass's every row.
    pub read_rows: usize,
}

impl Generator {
    /// A generation after `prompt` in `session`, prefilled whole (see
    /// [`Generator::prefill`]).
    ///
    /// Errors: an empty prompt ([`ModelError::NoTokens`]), one longer than the session's
    /// context ([`ModelError::ContextFull`]), invalid sampler settings.
    pub fn new(session: &Session, prompt: &[u32], sampler: SamplerConfig) -> Result<Generator, ModelError> {
        let contexts = (session.n_ctx(), session.n_ctx_train());
        Generator::with_prefix(prompt, sampler, session.common_prefix(prompt), contexts)
    }

    /// A generation after `prompt` in sequence `seq` of a shared cache, for batched passes
    /// ([`Generator::next_rows`], [`Generator::finish_rows`]); the prompt may use the whole
    /// cache. Errors as [`Generator::new`].
    pub fn in_shared_cache(
        cache: &SharedCache,
        seq: usize,
        prompt: &[u32],
        sampler: SamplerConfig,
    ) -> Result<Generator, ModelError> {
        let contexts = (cache.n_ctx(), cache.n_ctx_train());
        Generator::with_prefix(prompt, sampler, cache.common_prefix(seq, prompt), contexts)
    }

    /// A generation whose cache already holds `held` leading ids of `prompt`, in a context of
    /// `n_ctx` positions (`n_ctx_train`: the model's, for messages).
    fn with_prefix(
        prompt: &[u32],
        sampler: SamplerConfig,
        held: usize,
        (n_ctx, n_ctx_train): (usize, usize),
    ) -> Result<Generator, ModelError> {
        let mut sampler = Sampler::new(sampler)?;
        if prompt.is_empty() {
            return Err(ModelError::NoTokens);
        }
        if prompt.len() > n_ctx {
            return Err(ModelError::ContextFull { tokens: prompt.len(), pos: 0, n_ctx, n_ctx_train });
        }
        for &t in prompt {
            sampler.accept(t);
        }
        let reused = held.min(prompt.len() - 1);
        Ok(Generator {
            sampler,
            prompt: prompt.to_vec(),
            prefill: Prefill::Whole,
            reused,
            prefilled: reused,
            last: None,
            ahead: None,
            full_rows: false,
            last_token: [0],
            logprobs: None,
            last_logprobs: None,
            spec: None,
            draft: Draft::default(),
            verify_ids: Vec::new(),
            ready: VecDeque::new(),
            max_tokens: None,
            taken: 0,
        })
    }

    /// Decodes speculatively with `spec` (module [`crate::speculative`]): each step may give
    /// several tokens, which [`Generator::step`] then hands out one at a time (and a batched
    /// pass through [`Generator::finish_rows`] and [`Generator::next_ready`]). Under greedy
    /// sampling the tokens are those of plain decoding; under sampling they follow the
    /// same distribution. Log-probabilities are not reported for speculated tokens.
    pub fn speculate(mut self, mut spec: Speculation) -> Generator {
        spec.history = self.prompt.clone();
        self.spec = Some(spec);
        self
    }

    /// The most tokens the caller will take: no draft reaches past them.
    pub fn max_tokens(mut self, max: Option<usize>) -> Generator {
        self.max_tokens = max;
        self
    }

    /// Drafted and accepted tokens so far (zero when not speculating).
    pub fn spec_stats(&self) -> SpecStats {
        self.spec.as_ref().map_or_else(SpecStats::default, |s| s.stats)
    }

    /// How the prompt is prefilled.
    pub fn prefill(mut self, prefill: Prefill) -> Generator {
        self.prefill = prefill;
        self
    }

    /// Reads every sampled step's whole row of logits back, as the sampler would need for a
    /// feature that looks past its candidates; by default a sampled step reads only the
    /// TOP_K candidates that decide its token ([`SamplerConfig::candidates`]). The tokens are
    /// the same either way.
    pub fn full_rows(mut self, full: bool) -> Generator {
        self.full_rows = full;
        self
    }

    /// Reports each generated token's log-probability and the `top` most likely tokens'
    /// ([`Generator::last_logprobs`]); `None` (the default): none. A step then reads
    /// TOP_K's `max(what the sampler needs, top, 1)` candidates and the row's log-sum-exp
    /// (plain greedy too, instead of ARGMAX: its top candidate is ARGMAX's token); a step
    /// whose sampler needs the whole row computes them from it. The tokens are the same.
    pub fn logprobs(mut self, top: Option<usize>) -> Generator {
        self.logprobs = top;
        self
    }

    /// The log-probabilities of the token the last step returned, when asked for
    /// ([`Generator::logprobs`]).
    pub fn last_logprobs(&self) -> Option<&TokenLogprobs> {
        self.last_logprobs.as_ref()
    }

    /// Prompt ids reused from the session's KV cache.
    pub fn reused(&self) -> usize {
        self.reused
    }

    /// The prompt.
    pub fn prompt(&self) -> &[u32] {
        &self.prompt
    }

    /// Whether the whole prompt is in the KV cache (tokens are being generated).
    pub fn prompt_done(&self) -> bool {
        self.last.is_some()
    }

    /// Whether the context has room to run the last sampled token, i.e. for another
    /// [`Generator::step`] (false: stop, the context is full).
    pub fn has_room(&self, session: &Session) -> bool {
        self.has_room_for(session.n_ctx())
    }

    /// Whether a context of `n_ctx` positions has room to run the last sampled token.
    pub fn has_room_for(&self, n_ctx: usize) -> bool {
        !self.ready.is_empty() || self.last.is_none_or(|(_, pos)| pos < n_ctx)
    }

    /// A token a verify pass decided that the caller has not taken yet (after
    /// [`Generator::finish_rows`] gave the first).
    pub fn next_ready(&mut self) -> Option<u32> {
        let t = self.ready.pop_front()?;
        self.taken += 1;
        Some(t)
    }

    /// Drafts the tokens the next pass verifies, when speculating, decoding, with no
    /// decided token left to hand out, and `allowed` (a batched pass may forbid it while
    /// other sequences decode). The draft never reaches past the context of `n_ctx`
    /// positions or the token limit. Errors: the drafter's.
    pub fn prepare_draft(&mut self, n_ctx: usize, allowed: bool) -> Result<(), ModelError> {
        self.draft = Draft::default();
        self.verify_ids.clear();
        let (Some(spec), Some((token, pos))) = (self.spec.as_mut(), self.last) else { return Ok(()) };
        if !allowed || !self.ready.is_empty() || self.logprobs.is_some() {
            return Ok(());
        }
        // Rows pos..=pos+k must fit the context; k + 1 tokens must fit the limit.
        let context_room = n_ctx.saturating_sub(pos + 1);
        let limit_room = self.max_tokens.map_or(usize::MAX, |m| m.saturating_sub(self.taken + 1));
        let draft = spec.next_draft(context_room.min(limit_room))?;
        if !draft.tokens.is_empty() {
            self.verify_ids.push(token);
            self.verify_ids.extend_from_slice(&draft.tokens);
            self.draft = draft;
        }
        Ok(())
    }

    /// Takes what a verify pass read of its rows: keeps the accepted drafted tokens and the
    /// model's next one (the first is returned, the rest wait in `ready`).
    fn finish_verify(&mut self, rows: &[RowOutput]) -> Option<u32> {
        let (_, pos) = self.last?;
        let draft = std::mem::take(&mut self.draft);
        self.verify_ids.clear();
        let kept = accept(&mut self.sampler, &draft, rows);
        let last = *kept.last()?;
        if let Some(spec) = self.spec.as_mut() {
            spec.record(draft.tokens.len(), kept.len() - 1);
            spec.history.extend_from_slice(&kept);
        }
        self.last_logprobs = None;
        self.last = Some((last, pos + kept.len()));
        self.last_token = [last];
        self.ready.extend(&kept);
        self.next_ready()
    }

    /// The rows of this generation's next step in a batched pass: the last sampled token,
    /// or the next prefill chunk of at most `max_rows` ids (a power of two, at most the
    /// generator's own chunk size, unless it is the prompt's rest and fits).
    pub fn next_rows<E: Engine>(&self, model: &Model<E>, max_rows: usize) -> NextRows<'_> {
        if let Some((_, pos)) = self.last {
            if !self.verify_ids.is_empty() {
                let read_rows = self.verify_ids.len();
                return NextRows { ids: &self.verify_ids, pos, read: Some(self.read_kind(model)), read_rows };
            }
            return NextRows { ids: &self.last_token, pos, read: Some(self.read_kind(model)), read_rows: 1 };
        }
        let remaining = self.prompt.len() - self.prefilled;
        let chunk = match self.prefill {
            Prefill::Whole => remaining,
            Prefill::Chunks(max) => max.max(1),
        };
        let n = if remaining <= chunk.min(max_rows) {
            remaining
        } else {
            largest_power_of_two_at_most(remaining.min(chunk).min(max_rows).max(1))
        };
        let read = (n == remaining).then(|| self.read_kind(model));
        NextRows { ids: &self.prompt[self.prefilled..self.prefilled + n], pos: self.prefilled, read, read_rows: 1 }
    }

    /// Takes the result of a batched pass that ran [`Generator::next_rows`]'s `n` rows:
    /// the sampled token when those rows ended the prompt or were a decode step (`outputs`
    /// is then what they asked to read of their last `read_rows` rows), else `None`. A
    /// verify pass may decide several tokens: the first is returned,
    /// [`Generator::next_ready`] gives the others.
    pub fn finish_rows(&mut self, n: usize, outputs: Vec<RowOutput>) -> Option<u32> {
        if self.last.is_none() && self.prefilled + n < self.prompt.len() {
            self.prefilled += n;
            return None;
        }
        if !self.verify_ids.is_empty() {
            return self.finish_verify(&outputs);
        }
        let output = outputs.into_iter().last();
        let pos = self.last.map_or(self.prefilled, |(_, pos)| pos);
        let top = self.logprobs;
        let (token, logprobs) = match output? {
            RowOutput::Greedy(t) => (t, None),
            RowOutput::TopK { values, ids, lse } => {
                let token = if self.sampler.config().is_plain_greedy() {
                    // TOP_K's first candidate is ARGMAX's token.
                    ids.first().copied().unwrap_or(0)
                } else {
                    self.sampler.sample_candidates(&values, &ids)
                };
                let logprobs =
                    top.zip(lse).map(|(n, lse)| TokenLogprobs::from_candidates(token, &values, &ids, lse, n));
                (token, logprobs)
            }
            RowOutput::Full(logits) => {
                let token = if self.sampler.config().is_plain_greedy() {
                    TokenLogprobs::from_row(0, &logits, 1).top.first().map_or(0, |t| t.0)
                } else {
                    self.sampler.sample(&logits)
                };
                (token, top.map(|n| TokenLogprobs::from_row(token, &logits, n)))
            }
        };
        self.last_logprobs = logprobs;
        self.took(token, pos + n);
        Some(token)
    }

    /// What the sampler (and the log-probabilities, when asked for) need of a row's logits
    /// on `model`'s engine.
    fn read_kind<E: Engine>(&self, model: &Model<E>) -> RowRead {
        let plain = self.sampler.config().is_plain_greedy();
        let read = if plain {
            RowRead::Greedy
        } else if let Some(k) = self.candidates(model) {
            RowRead::TopK(k)
        } else {
            RowRead::Full
        };
        let Some(top) = self.logprobs else { return read };
        let k = match read {
            RowRead::Greedy => top.max(1),
            RowRead::TopK(k) => k.max(top).max(1),
            _ => return RowRead::Full,
        };
        let limit = model.engine().top_k_limit().map_or(usize::MAX, |l| l as usize);
        if k <= limit && !self.full_rows {
            RowRead::TopKLse(k)
        } else {
            RowRead::Full
        }
    }

    /// `token` was sampled; it runs next at `pos`.
    fn took(&mut self, token: u32, pos: usize) {
        self.prefilled = self.prompt.len();
        self.taken += 1;
        if let Some(spec) = self.spec.as_mut() {
            spec.history.push(token);
        }
        self.sampler.accept(token);
        self.last = Some((token, pos));
        self.last_token = [token];
    }

    /// One step: while prompt ids remain, prefills the next chunk (`Ok(None)`, except for
    /// the last chunk, which yields the first token); after that runs the last sampled token
    /// and returns the next one. Past the end of the context it is
    /// [`ModelError::ContextFull`] (check [`Generator::has_room`] first).
    /// [`Generator::begin_step`] then [`Generator::finish_step`], waiting in between.
    pub fn step<E: Engine>(&mut self, model: &mut Model<E>, session: &mut Session) -> Result<Option<u32>, ModelError> {
        let step = self.begin_step(model, session)?;
        self.finish_step(model, session, step)
    }

    /// The first half of [`Generator::step`] for a caller that must not block (a browser
    /// tab): runs the step's pass and begins reading its result. The caller yields to its
    /// event loop until [`StepInFlight::is_ready`], then calls [`Generator::finish_step`].
    /// A speculative verify pass is done at once (it reads while it runs).
    pub fn begin_step<E: Engine>(
        &mut self,
        model: &mut Model<E>,
        session: &mut Session,
    ) -> Result<StepInFlight, ModelError> {
        // The ids to run borrow the prompt or this one-token buffer: nothing is allocated
        // per step.
        if let Some(token) = self.next_ready() {
            return Ok(StepInFlight(StepState::Done(Some(token))));
        }
        if let Some((token, pos)) = self.last {
            // Speculation verifies from the host's tokens; running ahead on the engine's
            // greedy token is for plain decoding.
            if self.spec.is_some() {
                self.prepare_draft(session.n_ctx(), true)?;
                if !self.verify_ids.is_empty() {
                    let ids = std::mem::take(&mut self.verify_ids);
                    let rows = model.forward_rows(session, &ids, pos, self.read_kind(model));
                    self.verify_ids = ids;
                    return Ok(StepInFlight(StepState::Done(self.finish_verify(&rows?))));
                }
            } else if self.sampler.config().is_plain_greedy() && model.engine().reads_overlap() {
                return self.begin_ahead(model, session, token, pos);
            }
        }
        let last_token;
        let (ids, pos): (&[u32], usize) = match self.last {
            Some((token, pos)) => {
                last_token = [token];
                (&last_token, pos)
            }
            None => {
                let remaining = self.prompt.len() - self.prefilled;
                let n = match self.prefill {
                    Prefill::Whole => remaining,
                    Prefill::Chunks(max) => largest_power_of_two_at_most(remaining.min(max.max(1))),
                };
                let pos = self.prefilled;
                let chunk = &self.prompt[pos..pos + n];
                if n < remaining {
                    // Only the KV entries matter; the 4-byte ARGMAX is the cheapest read.
                    let flight = model.submit_forward(session, chunk, pos, Want::Argmax)?;
                    return Ok(StepInFlight(StepState::Chunk { flight, n }));
                }
                (chunk, pos)
            }
        };
        self.last_logprobs = None;
        let want = match self.read_kind(model) {
            RowRead::Greedy => Want::Argmax,
            RowRead::TopK(k) => Want::TopK(k.clamp(1, model.config().n_vocab)),
            // A session's steps have no engine log-sum-exp: with log-probabilities asked
            // for, they read the whole row.
            RowRead::Full | RowRead::TopKLse(_) => Want::Logits(LogitsRows::Last),
        };
        let flight = model.submit_forward(session, ids, pos, want)?;
        Ok(StepInFlight(StepState::Forward { flight, next_pos: pos + ids.len() }))
    }

    /// The second half of [`Generator::step`]: takes the result of
    /// [`Generator::begin_step`]'s pass (waiting for it where the engine can) and returns
    /// what `step` returns.
    pub fn finish_step<E: Engine>(
        &mut self,
        model: &mut Model<E>,
        session: &mut Session,
        step: StepInFlight,
    ) -> Result<Option<u32>, ModelError> {
        let (flight, next_pos) = match step.0 {
            StepState::Done(token) => return Ok(token),
            StepState::Chunk { flight, n } => {
                model.receive_forward(session, flight)?;
                self.prefilled += n;
                return Ok(None);
            }
            StepState::Ahead(pending) => {
                let pos = pending.pos();
                let next = model.receive_greedy(session, pending)?;
                self.took(next, pos + 1);
                return Ok(Some(next));
            }
            StepState::Forward { flight, next_pos } => (flight, next_pos),
        };
        let token = match model.receive_forward(session, flight)? {
            Received::Argmax(token) => token,
            Received::TopK { values, ids } => self.sampler.sample_candidates(&values, &ids),
            Received::Logits(logits) => {
                let token = if self.sampler.config().is_plain_greedy() {
                    TokenLogprobs::from_row(0, &logits, 1).top.first().map_or(0, |t| t.0)
                } else {
                    self.sampler.sample(&logits)
                };
                self.last_logprobs = self.logprobs.map(|n| TokenLogprobs::from_row(token, &logits, n));
                token
            }
        };
        self.took(token, next_pos);
        Ok(Some(token))
    }

    /// How many of the largest logits to read back instead of the whole row
    /// ([`SamplerConfig::candidates`]), when the engine's TOP_K takes that many and
    /// [`Generator::full_rows`] was not asked for.
    fn candidates<E: Engine>(&self, model: &Model<E>) -> Option<usize> {
        if self.full_rows {
            return None;
        }
        let k = self.sampler.config().candidates(model.config().n_vocab)?;
        let limit = model.engine().top_k_limit().map_or(usize::MAX, |l| l as usize);
        (k <= limit).then_some(k)
    }

    /// A greedy decode step that runs ahead (see the type's documentation): `token` is to run
    /// at `pos`, unless its step is already queued (`self.ahead`).
    fn begin_ahead<E: Engine>(
        &mut self,
        model: &mut Model<E>,
        session: &mut Session,
        token: u32,
        pos: usize,
    ) -> Result<StepInFlight, ModelError> {
        let pending = match self.ahead.take() {
            Some(p) => p,
            None => model.submit_greedy(session, Some(token), pos)?,
        };
        if pos + 1 < session.n_ctx() {
            self.ahead = Some(model.submit_greedy(session, None, pos + 1)?);
        }
        Ok(StepInFlight(StepState::Ahead(pending)))
    }
}

/// A step begun with [`Generator::begin_step`]: its pass ran, its result may still be on
/// its way from the engine. Dropping it abandons the step's result.
#[derive(Debug)]
pub struct StepInFlight(StepState);

#[derive(Debug)]
enum StepState {
    /// Decided when it began (a token a verify pass kept, or a verify pass).
    Done(Option<u32>),
    /// A prefill chunk that is not the prompt's last: only its KV entries matter.
    Chunk { flight: ForwardInFlight, n: usize },
    /// A step whose token comes from what it reads; the token runs next at `next_pos`.
    Forward { flight: ForwardInFlight, next_pos: usize },
    /// A greedy step that ran ahead.
    Ahead(PendingToken),
}

impl StepInFlight {
    /// Whether [`Generator::finish_step`] would return without waiting for the engine
    /// (never waits).
    pub fn is_ready<E: Engine>(&self, model: &mut Model<E>) -> bool {
        match &self.0 {
            StepState::Done(_) => true,
            StepState::Chunk { flight, .. } | StepState::Forward { flight, .. } => model.reads_ready(&flight.reads),
            StepState::Ahead(pending) => model.token_ready(pending),
        }
    }
}

fn largest_power_of_two_at_most(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// Generates from `prompt` at position 0 of `session` (whatever it held is overwritten).
/// `on_token` sees each id as it is produced (for streaming); `is_eog` says which ids end
/// generation.
pub fn generate<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    prompt: &[u32],
    opts: &GenerateOptions,
    is_eog: impl Fn(u32) -> bool,
    on_token: impl FnMut(u32),
) -> Result<Generation, ModelError> {
    session.clear();
    generate_reusing_cache(model, session, prompt, opts, is_eog, on_token)
}

/// Generates after `context`, reusing what `session`'s KV cache already holds of it (an
/// earlier turn of a conversation): only the ids after the common prefix are prefilled.
/// The sampler's repeat history sees the whole `context`, so the result is the one
/// [`generate`] gives on `context` from an empty cache (up to rounding: the reused positions
/// were computed in other batches).
pub fn generate_reusing_cache<E: Engine>(
    model: &mut Model<E>,
    session: &mut Session,
    context: &[u32],
    opts: &GenerateOptions,
    is_eog: impl Fn(u32) -> bool,
    mut on_token: impl FnMut(u32),
) -> Result<Generation, ModelError> {
    let mut generator = Generator::new(session, context, opts.sampler.clone())?.max_tokens(Some(opts.max_new_tokens));
    if let Some(spec) = &opts.speculation {
        generator = generator.speculate(spec.speculation());
    }
    let reused_tokens = generator.reused();
    let mut generated = Vec::new();
    if opts.max_new_tokens == 0 {
        return Ok(Generation {
            generated,
            stop: StopReason::MaxTokens,
            reused_tokens,
            prefill_time: Duration::ZERO,
            decode_time: Duration::ZERO,
            speculation: SpecStats::default(),
        });
    }
    let start = Instant::now();
    let mut token = loop {
        if let Some(t) = generator.step(model, session)? {
            break t;
        }
    };
    let prefill_time = start.elapsed();
    let start = Instant::now();
    let stop = loop {
        generated.push(token);
        on_token(token);
        if is_eog(token) && !opts.ignore_eos {
            break StopReason::EndOfGeneration;
        }
        if generated.len() >= opts.max_new_tokens {
            break StopReason::MaxTokens;
        }
        if !generator.has_room(session) {
            break StopReason::ContextFull;
        }
        if opts.stop.as_ref().is_some_and(|s| s.load(Ordering::Relaxed)) {
            break StopReason::Interrupted;
        }
        token = generator.step(model, session)?.ok_or(ModelError::NoTokens)?;
    };
    let speculation = generator.spec_stats();
    Ok(Generation { generated, stop, reused_tokens, prefill_time, decode_time: start.elapsed(), speculation })
}

#[cfg(test)]
mod tests {
    use super::largest_power_of_two_at_most;

    #[test]
    fn chunks_are_powers_of_two() {
        let got: Vec<usize> = [0, 1, 2, 3, 5, 8, 255, 256, 257].map(largest_power_of_two_at_most).to_vec();
        assert_eq!(got, vec![0, 1, 2, 2, 4, 8, 128, 256, 256]);
    }
}
