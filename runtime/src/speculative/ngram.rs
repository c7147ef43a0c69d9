//! The n-gram drafter (`ngram-simple`): the tokens that followed an earlier occurrence of
//! the history's final n-gram. No model: it guesses well where the output copies its input
//! or itself (code edits, quoted text, records of the same shape).
//!
//! Of several occurrences it takes the one whose preceding tokens agree longest with the
//! history's (the most recent among equals): in records of one shape a short key such as
//! `": "` occurs in every field, and the tokens before it say which field is being written.

use super::{Draft, Drafter};
use crate::ModelError;

/// How many tokens before a match are compared with the history's, at most.
const MAX_AGREEMENT: usize = 64;

/// Looks up the last `size_n` tokens of the history in the history before them and drafts
/// the at most `size_m` tokens that followed the best match (see the module docs).
#[derive(Clone, Debug)]
pub struct NgramDrafter {
    size_n: usize,
    size_m: usize,
}

impl NgramDrafter {
    /// A drafter with a lookup key of `size_n` tokens and drafts of at most `size_m`
    /// (each at least 1).
    pub fn new(size_n: usize, size_m: usize) -> NgramDrafter {
        NgramDrafter { size_n: size_n.max(1), size_m: size_m.max(1) }
    }

    /// The draft for `history`, at most `max` tokens: empty when the history is shorter
    /// than the key plus one or the key occurs nowhere before its own place.
    pub fn lookup(&self, history: &[u32], max: usize) -> Vec<u32> {
        let n = self.size_n;
        let max = max.min(self.size_m);
        if max == 0 || history.len() <= n {
            return Vec::new();
        }
        let end = history.len();
        let key = &history[end - n..];
        // How far before a match at `start` the history still agrees with its own end.
        let agreement = |start: usize| {
            (1..=start.min(MAX_AGREEMENT)).take_while(|&back| history[start - back] == history[end - n - back]).count()
        };
        let mut best: Option<(usize, usize)> = None; // (agreement, start)
        for start in (0..end - n).rev().filter(|&start| &history[start..start + n] == key) {
            let a = agreement(start);
            if best.is_none_or(|(b, _)| a > b) {
                best = Some((a, start));
                if a == MAX_AGREEMENT {
                    break;
                }
            }
        }
        best.map(|(_, start)| history[start + n..(start + n + max).min(end)].to_vec()).unwrap_or_default()
    }
}

impl Drafter for NgramDrafter {
    fn draft(&mut self, history: &[u32], max: usize) -> Result<Draft, ModelError> {
        Ok(Draft { tokens: self.lookup(history, max), dists: None })
    }
}

#[cfg(test)]
mod tests {
    use super::NgramDrafter;

    #[test]
    fn drafts_what_followed_the_most_recent_match() {
        let d = NgramDrafter::new(2, 3);
        // key [1, 2]: at 0 (followed by 3 4 5) and at 5 (followed by 9 1 2); the latest wins.
        assert_eq!(d.lookup(&[1, 2, 3, 4, 5, 1, 2, 9, 1, 2], 8), vec![9, 1, 2]);
        assert_eq!(d.lookup(&[1, 2, 3, 4, 5, 1, 2, 9, 1, 2], 2), vec![9, 1]);
        // No earlier occurrence, or too short a history.
        assert!(d.lookup(&[1, 2, 3, 4], 8).is_empty());
        assert!(d.lookup(&[1, 2], 8).is_empty());
        // A match right before the key drafts what overlaps it.
        assert_eq!(d.lookup(&[7, 7, 7], 8), vec![7]);
        // Of two matches, the one preceded by the history's own tokens: [5, 1, 2] at 4
        // agrees one token further back than [1, 2] at 7.
        assert_eq!(d.lookup(&[9, 9, 9, 5, 1, 2, 4, 8, 1, 2, 6, 5, 1, 2], 2), vec![4, 8]);
        assert!(d.lookup(&[1, 2, 1, 2], 0).is_empty());
    }
}
