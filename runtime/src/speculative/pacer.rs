//! Adaptive drafting: how many tokens to draft next, from how many of the recent drafts
//! were accepted, so that speculation runs where it pays and pauses where it does not.
//!
//! A verify pass of `k` drafted tokens runs `k + 1` rows. With each drafted token accepted
//! with probability `a` (independently, the usual model), it yields on average
//! `E(k) = 1 + a + … + a^k` tokens, and it costs about `1 + c·(k + ½)` decode steps, `c`
//! being the cost of an extra row against a whole decode step (the weights are read once
//! for every row; each row adds its arithmetic; and a pass of several rows loses some of a
//! one-row pass's streaming, about half a row). The pacer drafts the `k` that maximises
//! `E(k) / (1 + c·(k + ½))` when that beats plain decoding by [`MIN_GAIN`], and otherwise
//! pauses: a draft that
//! gains nothing doubles the number of plain steps before the next try (up to
//! [`MAX_PAUSE`]), so free text, where drafts rarely match, runs at plain speed.

/// The longest pause, in decode steps, after drafts that keep failing.
pub const MAX_PAUSE: u32 = 32;

/// The least expected gain over plain decoding worth a draft: below it, noise in the
/// estimates could as well make drafting a loss.
pub const MIN_GAIN: f64 = 1.05;

/// How much the newest verify pass weighs in the acceptance estimate.
const RATE_WEIGHT: f64 = 0.3;

/// The state of adaptive drafting for one generation.
#[derive(Clone, Debug)]
pub struct DraftPacer {
    /// The estimated probability that a drafted token is accepted.
    rate: f64,
    /// The cost of one more row in a pass, in decode steps.
    row_cost: f64,
    /// Plain decode steps left before the next draft.
    pause: u32,
    /// The pause after the next draft that gains nothing.
    next_pause: u32,
}

impl DraftPacer {
    /// A pacer for passes whose extra rows cost `row_cost` decode steps each, starting from
    /// an optimistic acceptance estimate (the first drafts show what the text is like).
    pub fn new(row_cost: f64) -> DraftPacer {
        DraftPacer { rate: 0.7, row_cost: row_cost.max(0.0), pause: 0, next_pause: 1 }
    }

    /// The number of tokens to draft at this step, at most `max`; 0 to decode plainly.
    pub fn draft_len(&mut self, max: usize) -> usize {
        if self.pause > 0 {
            self.pause -= 1;
            return 0;
        }
        let (mut best, mut best_gain) = (0, MIN_GAIN);
        let (mut expected, mut term) = (1.0, 1.0);
        for k in 1..=max {
            term *= self.rate;
            expected += term;
            let gain = expected / (1.0 + self.row_cost * (k as f64 + 0.5));
            if gain > best_gain {
                (best, best_gain) = (k, gain);
            }
        }
        // While the estimate says drafting does not pay, try one short draft after each
        // pause (which doubles while drafts fail): the text may have turned into something
        // that repeats.
        if best == 0 && max > 0 {
            return 1;
        }
        best
    }

    /// Takes the outcome of a verify pass: `accepted` of `drafted` tokens were right.
    pub fn record(&mut self, drafted: usize, accepted: usize) {
        if drafted == 0 {
            return;
        }
        // A draft cut short by a mismatch says the rate is about accepted / (accepted + 1).
        let observed = if accepted == drafted { 1.0 } else { accepted as f64 / (accepted + 1) as f64 };
        self.rate = (1.0 - RATE_WEIGHT) * self.rate + RATE_WEIGHT * observed;
        if accepted == 0 {
            self.pause = self.next_pause;
            self.next_pause = (self.next_pause * 2).min(MAX_PAUSE);
        } else {
            self.next_pause = 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drafts_long_while_drafts_are_accepted() {
        let mut p = DraftPacer::new(0.1);
        for _ in 0..10 {
            let k = p.draft_len(16);
            p.record(k, k);
        }
        assert_eq!(p.draft_len(16), 16);
    }

    #[test]
    fn pauses_longer_after_each_draft_that_gains_nothing() {
        let mut p = DraftPacer::new(0.1);
        let (mut gaps, mut plain) = (Vec::new(), 0);
        for _ in 0..300 {
            match p.draft_len(8) {
                0 => plain += 1,
                k => {
                    p.record(k, 0);
                    gaps.push(plain);
                    plain = 0;
                }
            }
        }
        assert_eq!(gaps[..7], [0, 1, 2, 4, 8, 16, 32]);
        assert!(gaps.iter().all(|&g| g <= MAX_PAUSE as usize));
    }

    #[test]
    fn a_costly_row_needs_a_high_acceptance() {
        let mut p = DraftPacer::new(1.0);
        // At a full decode step per row, no draft length beats plain decoding: one-token
        // probes only, pausing longer after each that fails.
        assert_eq!(p.draft_len(8), 1, "a probe");
        p.record(1, 0);
        assert_eq!((p.draft_len(8), p.draft_len(8)), (0, 1));
    }
}
