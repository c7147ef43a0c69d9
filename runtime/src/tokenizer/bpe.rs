//! Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): the merge table, the merge loop, and
//! [`BpeModel`], which splits text into words and merges each.
//!
//! The loop is llama.cpp's `llm_tokenizer_bpe_session::tokenize`: a word starts as one
//! symbol per byte; every adjacent pair that has a merge goes into a priority queue ordered
//! by merge rank, then by the position of its left symbol; the best pair is merged, stale
//! queue entries (a side already merged elsewhere) are skipped, and the new symbol's pairs
//! with its neighbours are queued. Symbols are token ids here rather than strings, so a
//! merge is one hash lookup of `(left id, right id)`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::bytes;
use super::error::TokenizerError;
use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

/// The parts of a byte-level BPE tokenizer that SentencePiece does not have.
#[derive(Debug, Clone)]
pub(crate) struct BpeModel {
    /// The token of each single byte, in the byte-level alphabet.
    byte_ids: [Option<u32>; 256],
    merges: MergeTable,
    pre: PreTokenizer,
}

impl BpeModel {
    /// The model of `vocab` with `merges` ("left right", rank = index) and the
    /// pre-tokenizer `pre`.
    pub(crate) fn new<'a>(
        vocab: &Vocab,
        merges: impl Iterator<Item = &'a str>,
        pre: PreTokenizer,
    ) -> Result<BpeModel, TokenizerError> {
        let mut byte_ids = [None; 256];
        let mut spelled = String::new();
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            spelled.clear();
            spelled.push(bytes::byte_to_char(b));
            *slot = vocab.id(&spelled);
        }
        Ok(BpeModel { byte_ids, merges: MergeTable::new(merges, vocab)?, pre })
    }

    /// The pre-tokenizer.
    pub(crate) fn pre(&self) -> &PreTokenizer {
        &self.pre
    }

    /// How many distinct pairs can merge.
    pub(crate) fn merge_count(&self) -> usize {
        self.merges.len()
    }

    /// Encodes a fragment of text (no special tokens in it), appending ids to `out`: split
    /// into words by the pre-tokenizer, each word merged on its own. With `ignore_merges`
    /// (`llama-bpe`) a word that is itself a token maps to it directly.
    pub(crate) fn encode_text(&self, vocab: &Vocab, text: &str, out: &mut Vec<u32>) {
        let mut initial = Vec::new();
        let mut spelled = String::new();
        for word in self.pre.split(text) {
            if self.pre.kind().ignores_merges() {
                spelled.clear();
                bytes::encode_into(word.as_bytes(), &mut spelled);
                if let Some(id) = vocab.id(&spelled) {
                    out.push(id);
                    continue;
                }
            }
            initial.clear();
            initial.extend(word.bytes().map(|b| self.byte_ids[usize::from(b)]));
            self.merges.encode_word(&initial, out);
        }
    }
}

/// What merging a pair of tokens gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Merge {
    /// The merge's index in `tokenizer.ggml.merges` (lower merges first).
    rank: u32,
    /// The token the pair becomes.
    id: u32,
}

/// The merges of a vocabulary, keyed by the pair of token ids they join.
#[derive(Debug, Clone, Default)]
pub(crate) struct MergeTable {
    pairs: HashMap<(u32, u32), Merge>,
}

impl MergeTable {
    /// Parses `merges` ("left right", rank = index) against the vocabulary. Each part and the joined result must be tokens. As in llama.cpp, the
    /// separator is the first space after the first byte, and when a pair appears twice the
    /// lower rank wins.
    pub(crate) fn new<'a>(merges: impl Iterator<Item = &'a str>, vocab: &Vocab) -> Result<MergeTable, TokenizerError> {
        let mut pairs = HashMap::with_capacity(merges.size_hint().0);
        let mut joined = String::new();
        for (rank, merge) in merges.enumerate() {
            // A space is ASCII, so its byte index is a char boundary.
            let sep = merge
                .bytes()
                .skip(1)
                .position(|b| b == b' ')
                .map(|i| i + 1)
                .ok_or_else(|| TokenizerError::MalformedMerge { rank, merge: merge.to_string() })?;
            let (left, right) = (&merge[..sep], &merge[sep + 1..]);
            let lookup = |token: &str| {
                vocab.id(token).ok_or_else(|| TokenizerError::MergeTokenNotInVocab {
                    rank,
                    merge: merge.to_string(),
                    token: token.to_string(),
                })
            };
            let (l, r) = (lookup(left)?, lookup(right)?);
            joined.clear();
            joined.push_str(left);
            joined.push_str(right);
            let id = lookup(&joined)?;
            let rank =
                u32::try_from(rank).map_err(|_| TokenizerError::MalformedMerge { rank, merge: merge.to_string() })?;
            pairs.entry((l, r)).or_insert(Merge { rank, id });
        }
        Ok(MergeTable { pairs })
    }

    /// How many distinct pairs can merge.
    pub(crate) fn len(&self) -> usize {
        self.pairs.len()
    }

    fn get(&self, left: Option<u32>, right: Option<u32>) -> Option<Merge> {
        self.pairs.get(&(left?, right?)).copied()
    }

    /// Encodes one word given as one initial symbol per byte (`None` for a byte that has
    /// no token), appending the ids to `out`.
    ///
    /// A symbol without a token is dropped. llama.cpp does the same: it retries such a
    /// symbol byte by byte, but its byte strings are the single bytes of the symbol's
    /// byte-level spelling, which are never tokens when the whole symbol is not one.
    pub(crate) fn encode_word(&self, initial: &[Option<u32>], out: &mut Vec<u32>) {
        let mut symbols: Vec<Symbol> = initial
            .iter()
            .enumerate()
            .map(|(i, &id)| Symbol { id, next: i + 1, prev: i.checked_sub(1), alive: true })
            .collect();
        let mut queue = BinaryHeap::new();
        for left in 1..symbols.len() {
            self.push_pair(&symbols, left - 1, left, &mut queue);
        }
        while let Some(Reverse(c)) = queue.pop() {
            let (l, r) = (c.left, c.right);
            let (Some(ls), Some(rs)) = (symbols.get(l), symbols.get(r)) else { continue };
            if !ls.alive || !rs.alive || ls.next != r || ls.id != Some(c.left_id) || rs.id != Some(c.right_id) {
                continue; // stale: one side has merged since this pair was queued
            }
            let (prev, next) = (ls.prev, rs.next);
            symbols[r].alive = false;
            symbols[l].id = Some(c.merged);
            symbols[l].next = next;
            if let Some(n) = symbols.get_mut(next) {
                n.prev = Some(l);
            }
            if let Some(p) = prev {
                self.push_pair(&symbols, p, l, &mut queue);
            }
            if next < symbols.len() {
                self.push_pair(&symbols, l, next, &mut queue);
            }
        }
        out.extend(symbols.iter().filter(|s| s.alive).filter_map(|s| s.id));
    }

    fn push_pair(&self, symbols: &[Symbol], left: usize, right: usize, queue: &mut BinaryHeap<Reverse<Candidate>>) {
        let (Some(ls), Some(rs)) = (symbols.get(left), symbols.get(right)) else { return };
        if let (Some(m), Some(left_id), Some(right_id)) = (self.get(ls.id, rs.id), ls.id, rs.id) {
            queue.push(Reverse(Candidate { rank: m.rank, left, right, left_id, right_id, merged: m.id }));
        }
    }
}

/// One symbol of a word being merged: a doubly linked list over the initial bytes.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    id: Option<u32>,
    /// Index of the next live symbol (`len` at the end).
    next: usize,
    /// Index of the previous live symbol.
    prev: Option<usize>,
    alive: bool,
}

/// A queued pair. Field order gives the queue order: lowest rank, then leftmost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Candidate {
    rank: u32,
    left: usize,
    right: usize,
    left_id: u32,
    right_id: u32,
    merged: u32,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::vocab::Spelling;
    use crate::tokenizer::TokenType;

    /// A vocabulary of single letters `a`..=`e` (ids 0..=4) plus the given merged tokens.
    fn table(merges: &[&str], extra: &[&str]) -> (MergeTable, Vocab) {
        let texts: Vec<&str> = ["a", "b", "c", "d", "e"].iter().chain(extra).copied().collect();
        let vocab = Vocab::new(texts.iter().copied(), &vec![TokenType::Normal; texts.len()], Spelling::ByteLevel);
        match MergeTable::new(merges.iter().copied(), &vocab) {
            Ok(t) => (t, vocab),
            Err(e) => panic!("{e}"),
        }
    }

    fn encode(t: &MergeTable, vocab: &Vocab, word: &str) -> Vec<String> {
        let initial: Vec<Option<u32>> = word.chars().map(|c| vocab.id(&c.to_string())).collect();
        let mut out = Vec::new();
        t.encode_word(&initial, &mut out);
        out.iter().map(|&i| vocab.text(i).unwrap_or_default().to_string()).collect()
    }

    #[test]
    fn lowest_rank_merges_first() {
        // "b c" outranks "a b", so "abc" becomes a + bc, not ab + c.
        let (t, ids) = table(&["b c", "a b", "a bc"], &["bc", "ab", "abc"]);
        assert_eq!(encode(&t, &ids, "abc"), ["abc"]);
        let (t, ids) = table(&["b c", "a b"], &["bc", "ab"]);
        assert_eq!(encode(&t, &ids, "abc"), ["a", "bc"]);
        let (t, ids) = table(&["a b", "b c"], &["ab", "bc"]);
        assert_eq!(encode(&t, &ids, "abc"), ["ab", "c"]);
    }

    #[test]
    fn equal_ranks_merge_leftmost_first() {
        let (t, ids) = table(&["a a"], &["aa"]);
        assert_eq!(encode(&t, &ids, "aaa"), ["aa", "a"]);
        assert_eq!(encode(&t, &ids, "aaaa"), ["aa", "aa"]);
        let (t, ids) = table(&["a a", "aa aa"], &["aa", "aaaa"]);
        assert_eq!(encode(&t, &ids, "aaaaa"), ["aaaa", "a"]);
    }

    #[test]
    fn merged_symbols_merge_again_with_new_neighbours() {
        let (t, ids) = table(&["c d", "b cd", "a bcd", "d e"], &["cd", "bcd", "abcd", "de"]);
        assert_eq!(encode(&t, &ids, "abcde"), ["abcd", "e"]);
        assert_eq!(encode(&t, &ids, "bde"), ["b", "de"]);
    }

    #[test]
    fn a_stale_pair_is_not_merged() {
        // "b c" is queued, then "c d" (rank 0) takes the c; "b c" must not fire on "b cd".
        let (t, ids) = table(&["c d", "b c"], &["cd", "bc"]);
        assert_eq!(encode(&t, &ids, "bcd"), ["b", "cd"]);
    }

    #[test]
    fn bytes_without_tokens_are_dropped() {
        let (t, ids) = table(&["a b"], &["ab"]);
        assert_eq!(encode(&t, &ids, "axb"), ["a", "b"]);
        assert_eq!(encode(&t, &ids, ""), Vec::<String>::new());
    }

    #[test]
    fn duplicate_pairs_keep_the_first_rank() {
        let (t, _) = table(&["a b", "c d", "a b"], &["ab", "cd"]);
        assert_eq!(t.len(), 2);
        assert_eq!(t.get(Some(0), Some(1)).map(|m| m.rank), Some(0));
    }

    #[test]
    fn malformed_and_unknown_merges_are_named() {
        let vocab = |texts: &[&str]| {
            Vocab::new(texts.iter().copied(), &vec![TokenType::Normal; texts.len()], Spelling::ByteLevel)
        };
        let ids = vocab(&["a", "b"]);
        let err = MergeTable::new(["ab"].into_iter(), &ids).err().map(|e| e.to_string());
        assert_eq!(err.as_deref(), Some("tokenizer.ggml.merges[0] = 'ab' is not of the form 'left right'"));
        let err = MergeTable::new(["a b"].into_iter(), &ids).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("tokenizer.ggml.merges[0] = 'a b' names 'ab', which is not in tokenizer.ggml.tokens")
        );
        let err = MergeTable::new(["a x"].into_iter(), &ids).err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("tokenizer.ggml.merges[0] = 'a x' names 'x', which is not in tokenizer.ggml.tokens")
        );
        let err = MergeTable::new([" a"].into_iter(), &ids).err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("merges[0]")));
        // A multi-byte first character is fine (the separator search works on bytes).
        assert!(MergeTable::new(["é b"].into_iter(), &vocab(&["é", "b", "éb"])).is_ok());
    }
}
