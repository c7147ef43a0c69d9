//! A slot: one session (its KV cache kept across requests, so a later prompt that shares a
//! prefix reuses it) and the generation running in it, advanced one step at a time.

use std::time::{Duration, Instant};

use purebee_isa::Engine;
use purebee_runtime::tokenizer::{StreamDecoder, Tokenizer};
use purebee_runtime::{Generator, Model, ModelError, Prefill, Session};

use super::{Event, Finish, FinishReason, Job};
use crate::api_error::ApiError;
use crate::metrics::{Metrics, Outcome, Phase};
use crate::stop::StopMatcher;

/// A session and what runs in it.
pub struct Slot<'t> {
    /// The session: its cache outlives requests.
    pub session: Session,
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
}

/// What the engine thread shares with every slot's step.
pub struct Context<'a, 't, E: Engine> {
    /// The model.
    pub model: &'a mut Model<E>,
    /// Its tokenizer.
    pub tokenizer: &'t Tokenizer,
    /// Counters.
    pub metrics: &'a Metrics,
}

impl<'t> Slot<'t> {
    /// An idle slot over `session`.
    pub fn new(session: Session) -> Slot<'t> {
        Slot { session, last_used: 0, active: None }
    }

    /// Whether a generation runs here.
    pub fn is_busy(&self) -> bool {
        self.active.is_some()
    }

    /// Starts `job` here: its prompt's common prefix with the cache is reused; prefill runs
    /// in chunks of at most `prefill_chunk` ids, one per step.
    pub fn start(&mut self, job: Box<Job>, tokenizer: &'t Tokenizer, metrics: &Metrics, prefill_chunk: usize) {
        let generator = match Generator::new(&self.session, &job.prompt, job.sampler.clone()) {
            Ok(g) => g.prefill(Prefill::Chunks(prefill_chunk)),
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
        });
    }

    /// One step of the generation running here (none: nothing to do): stops it if its
    /// client went away, else prefills a chunk or generates a token and sends its text.
    pub fn step<E: Engine>(&mut self, cx: &mut Context<'_, 't, E>) {
        let Some(a) = self.active.as_mut() else { return };
        let prefilling = !a.generator.prompt_done();
        if a.job.events.is_closed() {
            cx.metrics.cancelled(if prefilling { Phase::Prefill } else { Phase::Decode });
            self.end(cx.metrics, None);
            return;
        }
        let started = Instant::now();
        let result = a.generator.step(cx.model, &mut self.session);
        let took = started.elapsed();
        let token = match result {
            Ok(None) => {
                a.prompt_time += took;
                return;
            }
            Ok(Some(token)) => token,
            Err(e) => {
                // What the cache holds after a failed pass is unknown.
                self.session.clear();
                cx.metrics.finished(Outcome::Error);
                // The cause goes to the operator's log only: it can name the model's path
                // and the machine's devices, which are not the client's to see.
                eprintln!("purebee-rs: error: a request failed in the engine: {e}");
                let message = "the engine failed on this request (the server's log has the cause)";
                self.end(cx.metrics, Some(Event::Failed(ApiError::server(message))));
                return;
            }
        };
        if prefilling {
            a.prompt_time += took;
            cx.metrics.prefilled(a.job.prompt.len() - a.generator.reused(), a.prompt_time);
            cx.metrics.generated(Duration::ZERO);
        } else {
            a.decode_time += took;
            cx.metrics.generated(took);
        }
        a.generated += 1;
        if !a.job.ignore_eos && cx.tokenizer.is_eog(token) {
            self.finish(FinishReason::Stop, cx.metrics);
            return;
        }
        let pushed = a.stop.push(&a.decoder.push(token));
        if !pushed.text.is_empty() {
            let _ = a.job.events.send(Event::Text(pushed.text));
        }
        if pushed.stopped {
            // Whatever follows the stop string, held bytes included, is never sent.
            self.done(FinishReason::Stop, cx.metrics);
        } else if a.job.max_tokens.is_some_and(|m| a.generated >= m) || !a.generator.has_room(&self.session) {
            self.finish(FinishReason::Length, cx.metrics);
        }
    }

    /// Ends the generation running here, not at a stop string: the text held back (bytes
    /// of an unfinished character, a tail that might have begun a stop string) is sent,
    /// then `Done`.
    pub fn finish(&mut self, reason: FinishReason, metrics: &Metrics) {
        let Some(a) = self.active.as_mut() else { return };
        let tail = a.decoder.finish();
        let pushed = a.stop.push(&tail);
        let mut text = pushed.text;
        if !pushed.stopped {
            text.push_str(&a.stop.finish());
        }
        if !text.is_empty() {
            let _ = a.job.events.send(Event::Text(text));
        }
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
