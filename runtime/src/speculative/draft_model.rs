//! The draft-model drafter (`draft-simple`): a smaller model with the same vocabulary,
//! in its own session on its own engine, decodes greedily ahead of the target.

use purebee_isa::Engine;

use super::{Draft, Drafter};
use crate::{LogitsRows, Model, ModelError, Session};

/// A draft model and its session: each draft continues the history greedily, reusing what
/// the session already holds of it, and stops early when the model's own top probability
/// falls below `p_min` (`--spec-draft-p-min`, as llama.cpp).
pub struct DraftModel<E: Engine> {
    model: Model<E>,
    session: Session,
    p_min: f32,
}

impl<E: Engine> DraftModel<E> {
    /// Drafts with `model` in `session` (its context bounds the history it can follow).
    pub fn new(model: Model<E>, session: Session, p_min: f32) -> DraftModel<E> {
        DraftModel { model, session, p_min }
    }

    /// The greedy token after `token` at `pos`, and whether it is sure enough to draft.
    fn next(&mut self, token: u32, pos: usize) -> Result<Option<u32>, ModelError> {
        if self.p_min <= 0.0 {
            return self.model.forward_greedy(&mut self.session, &[token], pos).map(Some);
        }
        let logits = self.model.forward(&mut self.session, &[token], pos, LogitsRows::Last)?;
        let (best, max) = logits
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.is_nan())
            .fold((0, f32::NEG_INFINITY), |b, (i, &v)| if v > b.1 { (i, v) } else { b });
        let sum: f64 = logits.iter().filter(|v| !v.is_nan()).map(|&v| f64::from(v - max).exp()).sum();
        Ok((1.0 / sum >= f64::from(self.p_min)).then_some(best as u32))
    }
}

impl<E: Engine + Send> Drafter for DraftModel<E> {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Draft, ModelError> {
        let Some((&last, before)) = history.split_last() else { return Ok(Draft::default()) };
        let n_ctx = self.session.n_ctx();
        if history.len() + max > n_ctx {
            // The history has outgrown the draft's context: no drafts from here on.
            return Ok(Draft::default());
        }
        // Run what the session does not hold yet, but the last token: each draft step runs
        // one token and gives the next.
        let held = self.session.common_prefix(before);
        if held < before.len() {
            self.model.forward_greedy(&mut self.session, &before[held..], held)?;
        }
        let mut tokens = Vec::with_capacity(max);
        let (mut token, mut pos) = (last, before.len());
        while tokens.len() < max {
            let Some(next) = self.next(token, pos)? else { break };
            tokens.push(next);
            (token, pos) = (next, pos + 1);
        }
        Ok(Draft { tokens, dists: None })
    }
}
