//! A slot: one sequence of the shared KV cache (what it holds is kept across requests, so a
//! later prompt that shares a prefix reuses it) and the generation running in it. The
//! scheduler asks each busy slot for its next rows, runs every slot's rows in one batched
//! pass, and hands each slot what its rows gave.

use std::time::{Duration, Instant};

use purebee_isa::Engine;
use purebee_runtime::batch::{RowOutput, SharedCache};
use purebee_runtime::speculative::SpecConfig;
use purebee_runtime::tokenizer::{StreamDecoder, Tokenizer};
use purebee_runtime::{Generator, Model, ModelError, NextRows, Prefill};

use super::{Event, Finish, FinishReason, Job, LoggedToken};
use crate::api_error::ApiError;
use crate::metrics::{Metrics, Outcome, Phase};
use crate::stop::StopMatcher;

/// A sequence of the shared cache and what runs in it.
pub struct Slot<'t> {
    /// Its sequence in the shared cache.
    pub seq: usize,
    /// When it was last given a job (for least-recently-used choice).
    pub last_used: u64,
    active: Option<Active<'t>>,
}

/// A generation running in a slot.
struct Active<'t> {
    job: Box<Job>,
    generator: Generator,
    decoder: StreamDecoder<'t>,
    stop: StopMatcher,
    generated: usize,
    prompt_time: Duration,
    decode_time: Duration,
    /// When the last token was sent (for the time between tokens).
    last_token: Option<Instant>,
    /// Log-probabilities of tokens whose text was not released yet, each with the byte
    /// offset where its text begins in the decoded text (see [`LoggedToken`]).
    pending: Vec<(usize, LoggedToken)>,
    /// Bytes the decoder has given so far.
    decoded: usize,
    /// Bytes and characters of text sent so far.
    sent: (usize, usize),
}

impl<'t> Slot<'t> {
    /// An idle slot over sequence `seq`.
    pub fn new(seq: usize) -> Slot<'t> {
        Slot { seq, last_used: 0, active: None }
    }

    /// Whether a generation runs here.
    pub fn is_busy(&self) -> bool {
        self.active.is_some()
    }

    /// Whether a generation runs here and its prompt is not all in the cache yet.
    pub fn is_prefilling(&self) -> bool {
        self.active.as_ref().is_some_and(|a| !a.generator.prompt_done())
    }

    /// Starts `job` here: its prompt's common prefix with what the sequence holds is
    /// reused; prefill runs in chunks of at most `prefill_chunk` ids (fewer when the pass has
    /// fewer rows left), one per pass.
    pub fn start(
        &mut self,
        job: Box<Job>,
        cache: &SharedCache,
        tokenizer: &'t Tokenizer,
        metrics: &Metrics,
        prefill_chunk: usize,
        speculation: Option<&SpecConfig>,
    ) {
        let generator = match Generator::in_shared_cache(cache, self.seq, &job.prompt, job.sampler.clone()) {
            Ok(g) => {
                let g = g.prefill(Prefill::Chunks(prefill_chunk)).logprobs(job.logprobs).max_tokens(job.max_tokens);
                // Log-probabilities are reported for plainly decoded tokens only.
                match speculation {
                    Some(spec) if job.logprobs.is_none() => g.speculate(spec.speculation()),
                    _ => g,
                }
            }
            Err(e) => {
                // The handler checked the prompt and settings; this is a last line of defence.
                let error = match e {
                    ModelError::ContextFull { tokens, n_ctx, .. } => ApiError::exceeds_context(tokens, n_ctx),
                    e => ApiError::invalid(e.to_string()),
                };
                metrics.finished(Outcome::Error);
                metrics.release();
                let _ = job.events.send(Event::Failed(error));
                return;
            }
        };
        metrics.reused(generator.reused());
        metrics.slot_taken();
        // A send to a client that already left fails; its next step notices and stops.
        let _ = job.events.send(Event::Started);
        self.active = Some(Active {
            stop: StopMatcher::new(job.stop.clone()),
            job,
            generator,
            decoder: tokenizer.stream_decoder().skip_control(true),
            generated: 0,
            prompt_time: Duration::ZERO,
            decode_time: Duration::ZERO,
            last_token: None,
            pending: Vec::new(),
            decoded: 0,
            sent: (0, 0),
        });
    }

    /// Ends the generation here if its client went away; true if it did.
    pub fn drop_if_cancelled(&mut self, metrics: &Metrics) -> bool {
        let Some(a) = self.active.as_ref() else { return false };
        if !a.job.events.is_closed() {
            return false;
        }
        metrics.cancelled(if a.generator.prompt_done() { Phase::Decode } else { Phase::Prefill });
        self.end(metrics, None);
        true
    }

    /// The rows of this slot's next pass (at most `max_rows` prompt ids while it prefills),
    /// if a generation runs here.
    pub fn next_rows<E: Engine>(&self, model: &Model<E>, max_rows: usize) -> Option<NextRows<'_>> {
        self.active.as_ref().map(|a| a.generator.next_rows(model, max_rows))
    }

    /// Drafts the tokens this slot's next pass verifies, when it speculates and decodes;
    /// `allowed` is false while other slots decode, so that speculation never costs them.
    /// A drafter's failure ends the request with a server error.
    pub fn prepare_draft(&mut self, n_ctx: usize, allowed: bool, metrics: &Metrics) {
        let Some(a) = self.active.as_mut() else { return };
        if let Err(e) = a.generator.prepare_draft(n_ctx, allowed) {
            eprintln!("purebee-rs: error: drafting failed: {e}");
            self.fail(metrics);
        }
    }

    /// Takes what a pass that took `took` gave this slot's `n` rows (`outputs`: what they
    /// asked to read), and sends the text of each new token: one, or several after a verify
    /// pass of drafted tokens.
    pub fn complete(&mut self, n: usize, outputs: Vec<RowOutput>, took: Duration, cx: &Context<'_, 't>, n_ctx: usize) {
        let Some(a) = self.active.as_mut() else { return };
        let prefilling = !a.generator.prompt_done();
        let before = a.generator.spec_stats();
        let Some(mut token) = a.generator.finish_rows(n, outputs) else {
            a.prompt_time += took;
            return;
        };
        let after = a.generator.spec_stats();
        cx.metrics.speculated(after.drafted - before.drafted, after.accepted - before.accepted);
        let now = Instant::now();
        if prefilling {
            a.prompt_time += took;
            cx.metrics.prefilled(a.job.prompt.len() - a.generator.reused(), a.prompt_time);
            cx.metrics.first_token(now.duration_since(a.job.received));
            cx.metrics.generated(Duration::ZERO);
        } else {
            a.decode_time += took;
            cx.metrics.generated(took);
            if let Some(last) = a.last_token {
                cx.metrics.between_tokens(now.duration_since(last));
            }
        }
        a.last_token = Some(now);
        loop {
            if !self.take_token(token, cx, n_ctx) {
                return;
            }
            let Some(a) = self.active.as_mut() else { return };
            match a.generator.next_ready() {
                Some(next) => {
                    // Decided by the same pass: no time of its own.
                    cx.metrics.generated(Duration::ZERO);
                    cx.metrics.between_tokens(Duration::ZERO);
                    token = next;
                }
                None => return,
            }
        }
    }

    /// Sends the text of one new token; false when the generation ended with it.
    fn take_token(&mut self, token: u32, cx: &Context<'_, 't>, n_ctx: usize) -> bool {
        let Some(a) = self.active.as_mut() else { return false };
        a.generated += 1;
        if !a.job.ignore_eos && cx.tokenizer.is_eog(token) {
            self.finish(FinishReason::Stop, cx.metrics);
            return false;
        }
        let decoded = a.decoder.push(token);
        if let Some(lp) = a.generator.last_logprobs() {
            let bytes = |t: u32| cx.tokenizer.decode_token(t).to_vec();
            let top = lp.top.iter().map(|&(t, l)| (bytes(t), l)).collect();
            a.pending.push((a.decoded, LoggedToken { bytes: bytes(token), logprob: lp.logprob, top, offset: 0 }));
        }
        a.decoded += decoded.len();
        let pushed = a.stop.push(&decoded);
        a.send(pushed.text);
        if pushed.stopped {
            // Whatever follows the stop string, held bytes included, is never sent.
            self.done(FinishReason::Stop, cx.metrics);
            return false;
        }
        if a.job.max_tokens.is_some_and(|m| a.generated >= m) || !a.generator.has_room_for(n_ctx) {
            self.finish(FinishReason::Length, cx.metrics);
            return false;
        }
        true
    }

    /// The pass with this slot's rows failed: the request ends with a server error.
    pub fn fail(&mut self, metrics: &Metrics) {
        let message = "the engine failed on this request (the server's log has the cause)";
        self.refuse(ApiError::server(message), metrics);
    }

    /// Ends the request running here with `error`.
    pub fn refuse(&mut self, error: ApiError, metrics: &Metrics) {
        if self.active.is_none() {
            return;
        }
        metrics.finished(Outcome::Error);
        self.end(metrics, Some(Event::Failed(error)));
    }

    /// Ends the generation running here, not at a stop string: the text held back (bytes
    /// of an unfinished character, a tail that might have begun a stop string) is sent,
    /// then `Done`.
    pub fn finish(&mut self, reason: FinishReason, metrics: &Metrics) {
        let Some(a) = self.active.as_mut() else { return };
        let tail = a.decoder.finish();
        a.decoded += tail.len();
        let pushed = a.stop.push(&tail);
        let mut text = pushed.text;
        if !pushed.stopped {
            text.push_str(&a.stop.finish());
        }
        a.send(text);
        self.done(if pushed.stopped { FinishReason::Stop } else { reason }, metrics);
    }

    /// Sends `Done` and frees the slot.
    fn done(&mut self, reason: FinishReason, metrics: &Metrics) {
        let Some(a) = self.active.as_mut() else { return };
        let finish = Finish {
            reason,
            prompt_tokens: a.job.prompt.len(),
            cached_tokens: a.generator.reused(),
            completion_tokens: a.generated,
            prompt_time: a.prompt_time,
            decode_time: a.decode_time,
        };
        metrics.finished(if reason == FinishReason::Stop { Outcome::Stop } else { Outcome::Length });
        self.end(metrics, Some(Event::Done(finish)));
    }

    /// Frees the slot, then sends the job's last event, if any: the counters a client reads
    /// after its answer already count it.
    fn end(&mut self, metrics: &Metrics, last: Option<Event>) {
        if let Some(a) = self.active.take() {
            metrics.release();
            metrics.slot_freed();
            if let Some(event) = last {
                // A client that left cannot be told; nothing else to do.
                let _ = a.job.events.send(event);
            }
        }
    }
}

impl Active<'_> {
    /// Sends `text` (if any) with the log-probabilities of the tokens it releases: those
    /// whose text begins before its end ([`LoggedToken`]).
    fn send(&mut self, text: String) {
        if text.is_empty() {
            return;
        }
        let (bytes_before, chars_before) = self.sent;
        let end = bytes_before + text.len();
        let released = self.pending.iter().take_while(|(start, _)| *start < end).count();
        let tokens = self
            .pending
            .drain(..released)
            .map(|(start, mut t)| {
                let within = start.saturating_sub(bytes_before).min(text.len());
                let chars = text.get(..within).map_or(within, |s| s.chars().count());
                t.offset = chars_before + chars;
                t
            })
            .collect();
        self.sent = (end, chars_before + text.chars().count());
        let _ = self.job.events.send(Event::Text(text, tokens));
    }
}

/// What the engine thread shares with every slot.
pub struct Context<'a, 't> {
    /// Its tokenizer.
    pub tokenizer: &'t Tokenizer,
    /// Counters.
    pub metrics: &'a Metrics,
}
