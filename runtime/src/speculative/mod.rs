//! Speculative decoding: a drafter guesses the next tokens cheaply, the model checks them
//! all in one pass of several rows (which reads the weights once, as one decode step
//! does), and every drafted token up to the first wrong one is kept, plus the model's own
//! token after it. Under greedy sampling the output is the plain decode's, token for token;
//! under sampling the acceptance rule ([`accept`]) keeps the model's distribution exactly.
//!
//! The [`Generator`](crate::Generator) runs it ([`Generator::speculate`](crate::Generator::speculate));
//! a [`DraftPacer`] chooses how much to draft from the recent acceptance.

mod accept;
mod draft_model;
mod ngram;
mod pacer;

pub use accept::{accept, row_distribution};
pub use draft_model::DraftModel;
pub use ngram::NgramDrafter;
pub use pacer::{DraftPacer, MAX_PAUSE};

use std::sync::{Arc, Mutex};

use crate::ModelError;

/// Tokens a drafter guesses, with the distribution it drew each from when it sampled.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Draft {
    /// The drafted tokens, in order.
    pub tokens: Vec<u32>,
    /// For each drafted token, the drafter's distribution ((id, probability) pairs) it was
    /// drawn from; `None` when each token was certain (a lookup, a greedy draft).
    pub dists: Option<Vec<Vec<(u32, f64)>>>,
}

/// Something that guesses how a token sequence goes on.
pub trait Drafter: Send {
    /// At most `max` tokens likely to follow `history` (the prompt and every token
    /// generated so far, the last one included); empty when it has no guess.
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Draft, ModelError>;
}

/// How many tokens were drafted and kept, for `-v`, `bench` and `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SpecStats {
    /// Drafted tokens that a verify pass checked.
    pub drafted: u64,
    /// Drafted tokens that were kept.
    pub accepted: u64,
    /// Verify passes run.
    pub passes: u64,
}

impl SpecStats {
    /// The share of drafted tokens that were kept (0 when none were drafted).
    pub fn acceptance(&self) -> f64 {
        if self.drafted == 0 {
            0.0
        } else {
            self.accepted as f64 / self.drafted as f64
        }
    }

    /// Adds another generation's counts.
    pub fn add(&mut self, other: SpecStats) {
        self.drafted += other.drafted;
        self.accepted += other.accepted;
        self.passes += other.passes;
    }
}

/// The settings of speculative decoding (`--spec-type` and its flags), from which each
/// generation makes its own [`Speculation`].
#[derive(Clone, Debug)]
pub struct SpecConfig {
    /// The fewest drafted tokens worth a verify pass (`--spec-draft-n-min`).
    pub draft_min: usize,
    /// The most drafted tokens one pass checks (`--spec-draft-n-max`).
    pub draft_max: usize,
    /// Where drafts come from.
    pub source: DraftSource,
    /// The cost of one more row in a pass, in decode steps, for the pacer.
    pub row_cost: f64,
}

/// Where drafts come from.
#[derive(Clone)]
pub enum DraftSource {
    /// N-gram lookup in the prompt and the output (`ngram-simple`): the key's length
    /// (`--spec-ngram-simple-size-n`) and the longest draft of one lookup (`-size-m`).
    Ngram {
        /// The lookup key's length, in tokens.
        size_n: usize,
        /// The most tokens one lookup drafts.
        size_m: usize,
    },
    /// A draft model (`draft-simple`, `-md`), shared by every generation: drafts are made
    /// one at a time, as generations take turns.
    Model(Arc<Mutex<dyn Drafter>>),
}

impl std::fmt::Debug for DraftSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DraftSource::Ngram { size_n, size_m } => write!(f, "Ngram {{ size_n: {size_n}, size_m: {size_m} }}"),
            DraftSource::Model(_) => write!(f, "Model"),
        }
    }
}

/// A drafter shared behind a lock.
struct Shared(Arc<Mutex<dyn Drafter>>);

impl Drafter for Shared {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Draft, ModelError> {
        // A drafter that panicked mid-draft left its state to be resynchronised from the
        // history anyway: the lock's poison carries nothing to fear.
        let mut d = self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        d.draft(history, max)
    }
}

impl SpecConfig {
    /// A new generation's speculation.
    pub fn speculation(&self) -> Speculation {
        let drafter: Box<dyn Drafter> = match &self.source {
            DraftSource::Ngram { size_n, size_m } => Box::new(NgramDrafter::new(*size_n, *size_m)),
            DraftSource::Model(shared) => Box::new(Shared(Arc::clone(shared))),
        };
        Speculation::new(drafter, self.draft_min, self.draft_max, self.row_cost)
    }
}

/// Speculation for one generation: the drafter, the pacer and the limits.
pub struct Speculation {
    drafter: Box<dyn Drafter>,
    pacer: DraftPacer,
    /// The fewest tokens worth a verify pass: shorter drafts are dropped.
    pub(crate) draft_min: usize,
    /// The most tokens one pass checks.
    pub(crate) draft_max: usize,
    pub(crate) stats: SpecStats,
    /// The prompt and every token taken so far (what the drafter continues).
    pub(crate) history: Vec<u32>,
}

impl std::fmt::Debug for Speculation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Speculation")
            .field("pacer", &self.pacer)
            .field("draft_min", &self.draft_min)
            .field("draft_max", &self.draft_max)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Speculation {
    /// Speculation with `drafter`, checking between `draft_min` (at least 1) and `draft_max`
    /// tokens a pass, paced for extra rows that cost `row_cost` decode steps each.
    pub fn new(drafter: Box<dyn Drafter>, draft_min: usize, draft_max: usize, row_cost: f64) -> Speculation {
        Speculation {
            drafter,
            pacer: DraftPacer::new(row_cost),
            draft_min: draft_min.max(1),
            draft_max,
            stats: SpecStats::default(),
            history: Vec::new(),
        }
    }

    /// The next draft, at most `room` tokens (what the context and the token limit leave):
    /// empty when the pacer pauses, the drafter has no guess or it is shorter than
    /// `draft_min`.
    pub(crate) fn next_draft(&mut self, room: usize) -> Result<Draft, ModelError> {
        let want = self.pacer.draft_len(self.draft_max.min(room));
        if want == 0 {
            return Ok(Draft::default());
        }
        let mut draft = self.drafter.draft(&self.history, want)?;
        draft.tokens.truncate(want);
        if let Some(d) = draft.dists.as_mut() {
            d.truncate(want);
        }
        if draft.tokens.len() < self.draft_min.min(want) {
            return Ok(Draft::default());
        }
        Ok(draft)
    }

    /// Takes the outcome of a verify pass of `drafted` tokens, `accepted` of them kept.
    pub(crate) fn record(&mut self, drafted: usize, accepted: usize) {
        self.pacer.record(drafted, accepted);
        self.stats.drafted += drafted as u64;
        self.stats.accepted += accepted as u64;
        self.stats.passes += 1;
    }
}
