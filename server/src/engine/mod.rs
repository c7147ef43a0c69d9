//! The engine side: one thread owns the model and the slots ([`scheduler`]); handlers
//! hand it [`Job`]s through a [`Submitter`] and read [`Event`]s back.
//!
//! A job's event channel is also its cancellation: when the handler's receiver is dropped
//! (the client went away), the engine thread sees the sender closed at the job's next step,
//! in the queue, in prefill or in decode, and frees its slot.

pub mod scheduler;
mod slot;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use purebee_runtime::sampler::SamplerConfig;
use tokio::sync::mpsc::UnboundedSender;

use crate::api_error::ApiError;
use crate::metrics::Metrics;

/// One generation request, as the engine thread runs it.
#[derive(Debug)]
pub struct Job {
    /// The prompt's ids (checked: non-empty, within the vocabulary and the KV cache).
    pub prompt: Vec<u32>,
    /// How to pick tokens (validated).
    pub sampler: SamplerConfig,
    /// The most tokens to generate; `None`: until the context is full.
    pub max_tokens: Option<usize>,
    /// Strings that end the text (not sent).
    pub stop: Vec<String>,
    /// Keep going past end-of-generation tokens.
    pub ignore_eos: bool,
    /// Report each token's log-probability and this many top alternatives' (`None`: no
    /// log-probabilities).
    pub logprobs: Option<usize>,
    /// Where the engine sends what happens; dropped receiver: the client went away.
    pub events: UnboundedSender<Event>,
    /// When the request arrived (for the time to its first token).
    pub received: std::time::Instant,
}

/// What the engine thread tells a job's handler, in this order: `Started`, `Text`s, then
/// `Done`; or `Failed` at any point.
#[derive(Debug)]
pub enum Event {
    /// The job has a slot.
    Started,
    /// Generated text (never splits a character, never holds a stop string), with the
    /// log-probabilities of the tokens it releases when they were asked for (see
    /// [`LoggedToken`] for which tokens a piece of text carries).
    Text(String, Vec<LoggedToken>),
    /// The generation ended.
    Done(Finish),
    /// The job failed; nothing more follows.
    Failed(ApiError),
}

/// A generated token's log-probabilities, as a response reports them.
///
/// Which text carries which token: a token goes with the first text event that releases
/// any byte at or after where its text begins (its `offset`). A token whose bytes end in an
/// unfinished UTF-8 character, or whose text the stop matcher holds back, thus goes with
/// the event that releases that text; a control token (no text) with the next text. Tokens
/// no released text reaches are not reported: an end-of-generation token, the tokens of a
/// stop string (and any text after it), control tokens at the very end.
#[derive(Clone, Debug, PartialEq)]
pub struct LoggedToken {
    /// The token's bytes (its text; a piece of a UTF-8 character possibly).
    pub bytes: Vec<u8>,
    /// Its log-probability under the model's raw distribution (at most 0; NaN if the logits
    /// held NaN).
    pub logprob: f32,
    /// The most likely tokens' bytes and log-probabilities, most likely first.
    pub top: Vec<(Vec<u8>, f32)>,
    /// Where its text begins in the generated text, in characters.
    pub offset: usize,
}

/// Why a generation ended, as `finish_reason` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinishReason {
    /// An end-of-generation token or a stop string.
    Stop,
    /// `max_tokens` or the end of the context.
    Length,
    /// The server is shutting down: the answer is cut. Said as `length`, the reason that
    /// tells a client its text is incomplete (`stop` would claim the model finished).
    Shutdown,
}

impl FinishReason {
    /// The `finish_reason` text.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length | FinishReason::Shutdown => "length",
        }
    }
}

/// The end of a generation: why, and its counts and times.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Finish {
    /// Why it ended.
    pub reason: FinishReason,
    /// Prompt ids.
    pub prompt_tokens: usize,
    /// Prompt ids reused from the slot's cache.
    pub cached_tokens: usize,
    /// Tokens generated (an end-of-generation token included).
    pub completion_tokens: usize,
    /// Engine time of the prefill (which also gives the first token).
    pub prompt_time: Duration,
    /// Engine time of the later tokens.
    pub decode_time: Duration,
}

/// What the engine thread receives.
#[derive(Debug)]
pub enum Command {
    /// Run a job (it is counted in flight already).
    Run(Box<Job>),
    /// End every job (open streams get their final chunks), then exit.
    Shutdown,
}

/// The handlers' side of the engine: submits jobs within the queue's bound.
#[derive(Clone, Debug)]
pub struct Submitter {
    commands: mpsc::Sender<Command>,
    metrics: Arc<Metrics>,
    /// Slots plus queue places.
    capacity: usize,
    max_queue: usize,
}

impl Submitter {
    /// A submitter sending to `commands`; at most `slots + max_queue` jobs in flight.
    pub fn new(commands: mpsc::Sender<Command>, metrics: Arc<Metrics>, slots: usize, max_queue: usize) -> Submitter {
        Submitter { commands, metrics, capacity: slots + max_queue, max_queue }
    }

    /// Queues `job`: 503 when every slot and queue place is taken or the engine has stopped.
    pub fn submit(&self, job: Job) -> Result<(), ApiError> {
        if !self.metrics.try_admit(self.capacity) {
            self.metrics.rejected();
            return Err(ApiError::unavailable(format!(
                "the server is busy: every slot is generating and {} requests are waiting (--max-queue); retry later",
                self.max_queue
            )));
        }
        if self.commands.send(Command::Run(Box::new(job))).is_err() {
            self.metrics.release();
            self.metrics.rejected();
            return Err(ApiError::unavailable("the server is shutting down"));
        }
        Ok(())
    }

    /// Asks the engine thread to end every job and exit.
    pub fn shutdown(&self) {
        // An engine thread that already exited has nothing to end.
        let _ = self.commands.send(Command::Shutdown);
    }
}
