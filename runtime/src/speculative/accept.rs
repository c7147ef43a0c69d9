//! The acceptance rule of speculative decoding.
//!
//! Under sampling it is the standard rule (Leviathan et al., Chen et al.): drafted token
//! `x`, drawn from the drafter's `q`, is kept with probability `min(1, p(x) / q(x))`, `p`
//! being the model's distribution at that row after the sampler's whole chain; at the first
//! rejection the token is drawn instead from `max(0, p − q)` renormalised, and when every
//! drafted token is kept one more is drawn from the last row's `p`. Each output token is
//! then distributed exactly as `p`. A drafter sure of its tokens has `q(x) = 1`. Greedy
//! sampling is the case where `p` is one token with probability 1: a drafted token is kept
//! exactly when it is the model's own choice.

use crate::batch::RowOutput;
use crate::sampler::Sampler;

use super::Draft;

/// The sampler's distribution of the next token from what a verify pass read of a row:
/// ARGMAX's token with probability 1 (plain greedy), or the chain over the candidates or
/// the whole row.
pub fn row_distribution(sampler: &Sampler, row: &RowOutput) -> Vec<(u32, f64)> {
    match row {
        RowOutput::Greedy(t) => vec![(*t, 1.0)],
        RowOutput::TopK { values, ids, .. } => sampler.distribution_candidates(values, ids),
        RowOutput::Full(logits) => sampler.distribution(logits),
    }
}

/// Checks `draft` against the `draft.tokens.len() + 1` rows a verify pass read (row `i`
/// predicts the token after draft token `i − 1`; row 0 the one after the token before the
/// draft) and returns the tokens to keep: the accepted drafted tokens, then one token of
/// the model's. Every kept token is recorded in `sampler`'s history as it is decided, so a
/// later row's penalties see it, as in plain decoding.
pub fn accept(sampler: &mut Sampler, draft: &Draft, rows: &[RowOutput]) -> Vec<u32> {
    let mut kept = Vec::with_capacity(draft.tokens.len() + 1);
    for (i, row) in rows.iter().enumerate().take(draft.tokens.len() + 1) {
        let p = row_distribution(sampler, row);
        let Some(&x) = draft.tokens.get(i) else {
            // Every drafted token was kept: one more from the last row.
            let t = draw(sampler, &p);
            sampler.accept(t);
            kept.push(t);
            break;
        };
        let q = draft.dists.as_ref().and_then(|d| d.get(i));
        let q_of = |t: u32| q.map_or(if t == x { 1.0 } else { 0.0 }, |q| prob(q, t));
        let p_x = prob(&p, x);
        let keep = if p.len() == 1 {
            // A certain model (greedy): no random number, as in plain greedy decoding.
            p_x == 1.0
        } else {
            let q_x = q_of(x);
            q_x > 0.0 && sampler.uniform() < (p_x / q_x).min(1.0)
        };
        if keep {
            sampler.accept(x);
            kept.push(x);
            continue;
        }
        let residual: Vec<(u32, f64)> =
            p.iter().map(|&(t, pt)| (t, (pt - q_of(t)).max(0.0))).filter(|&(_, r)| r > 0.0).collect();
        let total: f64 = residual.iter().map(|r| r.1).sum();
        let t = if total > 0.0 {
            let residual: Vec<(u32, f64)> = residual.into_iter().map(|(t, r)| (t, r / total)).collect();
            draw(sampler, &residual)
        } else {
            draw(sampler, &p)
        };
        sampler.accept(t);
        kept.push(t);
        break;
    }
    kept
}

/// A token from `dist`: its only token without a random number, else a draw.
fn draw(sampler: &mut Sampler, dist: &[(u32, f64)]) -> u32 {
    match dist {
        [(t, _)] => *t,
        _ => sampler.draw_from(dist),
    }
}

/// The probability of `t` in `dist` (0 when absent).
fn prob(dist: &[(u32, f64)], t: u32) -> f64 {
    dist.iter().find(|d| d.0 == t).map_or(0.0, |d| d.1)
}
