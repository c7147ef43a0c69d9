//! The n-gram drafter (`ngram-simple`): the tokens that followed the last earlier
//! occurrence of the history's final n-gram. No model: it guesses well where the output
//! copies its input or itself (code edits, quoted text, records of the same shape).

use super::{Draft, Drafter};
use crate::ModelError;

/// Looks up the last `size_n` tokens of the history in the history before them and drafts
/// the at most `size_m` tokens that followed the most recent match.
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
        let key = &history[history.len() - n..];
        // The most recent earlier occurrence: it follows the text being written now most
        // closely (a list being repeated, the line above).
        (0..history.len() - n)
            .rev()
            .find(|&start| &history[start..start + n] == key)
            .map(|start| {
                let from = start + n;
                history[from..(from + max).min(history.len())].to_vec()
            })
            .unwrap_or_default()
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
        assert!(d.lookup(&[1, 2, 1, 2], 0).is_empty());
    }
}
