//! SentencePiece tokenization (`tokenizer.ggml.model = "llama"`): scored merges over UTF-8
//! characters with byte fallback, as llama.cpp's `llm_tokenizer_spm_session` does it.
//!
//! A fragment of text (what special-token parsing leaves between special tokens) is
//! encoded in four steps:
//! 1. a space goes in front when `add_space_prefix` is set and the fragment is the first
//!    one or follows a special token (llama.cpp's `is_prev_special`);
//! 2. every space (U+0020 only; tabs and newlines stay) becomes U+2581 `▁`, the way
//!    SentencePiece spells it in the vocabulary;
//! 3. the text starts as one symbol per character; every adjacent pair whose concatenation
//!    is a token is queued with that token's score, and the pair with the highest score
//!    (then the leftmost) merges, until no queued pair is left. Unlike byte-level BPE
//!    there is no merge list: any token of the vocabulary, of any type, can be formed;
//! 4. each final symbol that is a token is emitted; any other symbol (a character the
//!    vocabulary lacks) is emitted as the byte tokens `<0xHH>` of its UTF-8 bytes.
//!
//! llama.cpp's `resegment` also looks a symbol up in the pairs that formed it, but only
//! for symbols that are not tokens, and only tokens ever enter that map: the look-up never
//! succeeds, so step 4 is all it does.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::error::TokenizerError;
use super::special::Fragment;
use super::vocab::{parse_byte_token, Vocab, SPACE_MARK};
use super::TokenType;

/// The parts of a SentencePiece tokenizer that byte-level BPE does not have.
#[derive(Debug, Clone)]
pub(crate) struct SpmModel {
    /// The score of each token (id = index), `-0.0` stored as `0.0` and never NaN, so that
    /// `f32::total_cmp` orders them as llama.cpp's `<` does.
    scores: Vec<f32>,
    /// The token of each byte for byte fallback (llama.cpp's `byte_to_token`).
    byte_ids: [u32; 256],
    /// Whether a space goes in front of the first fragment and of every fragment that
    /// follows a special token (`tokenizer.ggml.add_space_prefix`).
    add_space_prefix: bool,
    /// Whether [`super::Tokenizer::encode`] puts EOS last when asked for special tokens
    /// (`tokenizer.ggml.add_eos_token`).
    add_eos: bool,
}

impl SpmModel {
    /// Checks the SentencePiece parts against the vocabulary: one score per token, none of
    /// them NaN; every byte token spelled `<0xHH>`; a byte-fallback token for each of the
    /// 256 bytes.
    pub(crate) fn new(
        vocab: &Vocab,
        types: &[TokenType],
        scores: Vec<f32>,
        add_space_prefix: bool,
        add_eos: bool,
    ) -> Result<SpmModel, TokenizerError> {
        if scores.len() != vocab.len() {
            return Err(TokenizerError::ScoreCount { scores: scores.len(), tokens: vocab.len() });
        }
        let token = |id: u32| vocab.text(id).unwrap_or_default().to_string();
        let mut scores = scores;
        for (score, id) in scores.iter_mut().zip(0u32..) {
            if score.is_nan() {
                return Err(TokenizerError::ScoreNotANumber { id, token: token(id) });
            }
            // -0.0 == 0.0 for llama.cpp's comparison but not for total_cmp.
            if *score == 0.0 {
                *score = 0.0;
            }
        }
        for (&ty, id) in types.iter().zip(0u32..) {
            if ty == TokenType::Byte && vocab.text(id).and_then(parse_byte_token).is_none() {
                return Err(TokenizerError::MalformedByteToken { id, token: token(id) });
            }
        }
        let mut byte_ids = [0u32; 256];
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            *slot = byte_token(vocab, b)?;
        }
        Ok(SpmModel { scores, byte_ids, add_space_prefix, add_eos })
    }

    /// Whether a space goes in front of the text (and comes off the first piece when a
    /// whole sequence is decoded).
    pub(crate) fn add_space_prefix(&self) -> bool {
        self.add_space_prefix
    }

    /// Whether EOS goes last when the caller asks for special tokens.
    pub(crate) fn add_eos(&self) -> bool {
        self.add_eos
    }

    /// Encodes the fragments that special-token parsing left, appending ids to `out`.
    pub(crate) fn encode_fragments(&self, vocab: &Vocab, fragments: &[Fragment<'_>], out: &mut Vec<u32>) {
        // llama.cpp starts as if a special token came before the text.
        let mut after_special = true;
        let mut work = Work::default();
        for fragment in fragments {
            match *fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(text) => {
                    self.encode_text(vocab, text, self.add_space_prefix && after_special, &mut work, out);
                    after_special = false;
                }
            }
        }
    }

    /// Encodes one fragment (steps 1 to 4 of the [module documentation](self)).
    fn encode_text(&self, vocab: &Vocab, text: &str, space_prefix: bool, work: &mut Work, out: &mut Vec<u32>) {
        let Work { escaped, symbols, queue } = work;
        escaped.clear();
        if space_prefix {
            escaped.push(SPACE_MARK);
        }
        escaped.extend(text.chars().map(|c| if c == ' ' { SPACE_MARK } else { c }));
        let escaped = escaped.as_str();

        symbols.clear();
        symbols.extend(escaped.char_indices().map(|(start, c)| Symbol {
            start,
            len: c.len_utf8(),
            prev: None,
            next: None,
        }));
        let n = symbols.len();
        for (i, s) in symbols.iter_mut().enumerate() {
            s.prev = i.checked_sub(1);
            s.next = (i + 1 < n).then_some(i + 1);
        }

        queue.clear();
        for right in 1..n {
            self.push_pair(vocab, escaped, symbols, right - 1, right, queue);
        }
        while let Some(pair) = queue.pop() {
            let (Some(&l), Some(&r)) = (symbols.get(pair.left), symbols.get(pair.right)) else { continue };
            // Stale: a side has merged into another symbol, or grown, since the pair was
            // queued (symbols only grow, so equal sizes mean an unchanged pair).
            if l.len == 0 || r.len == 0 || l.len + r.len != pair.size {
                continue;
            }
            symbols[pair.left].len += r.len;
            symbols[pair.left].next = r.next;
            symbols[pair.right].len = 0;
            if let Some(next) = r.next {
                symbols[next].prev = Some(pair.left);
            }
            if let Some(prev) = l.prev {
                self.push_pair(vocab, escaped, symbols, prev, pair.left, queue);
            }
            if let Some(next) = r.next {
                self.push_pair(vocab, escaped, symbols, pair.left, next, queue);
            }
        }

        // Symbol 0 never merges into a left neighbour, so the chain starts there.
        let mut at = (n > 0).then_some(0);
        while let Some(i) = at {
            let Some(s) = symbols.get(i) else { break };
            let piece = escaped.get(s.start..s.start + s.len).unwrap_or_default();
            match vocab.id(piece) {
                Some(id) => out.push(id),
                None => out.extend(piece.bytes().map(|b| self.byte_ids[usize::from(b)])),
            }
            at = s.next;
        }
    }

    /// Queues the pair of symbols `left` and `right` (adjacent) if their text is a token.
    fn push_pair(
        &self,
        vocab: &Vocab,
        text: &str,
        symbols: &[Symbol],
        left: usize,
        right: usize,
        queue: &mut BinaryHeap<Pair>,
    ) {
        let (Some(l), Some(r)) = (symbols.get(left), symbols.get(right)) else { return };
        let size = l.len + r.len;
        let Some(id) = text.get(l.start..l.start + size).and_then(|t| vocab.id(t)) else { return };
        let score = self.scores.get(id as usize).copied().unwrap_or(f32::NEG_INFINITY);
        queue.push(Pair { score, left, right, size });
    }
}

/// The token llama.cpp's `byte_to_token` gives byte `b`: `<0xHH>` (upper-case hex), else
/// the byte itself as a one-character token (possible for ASCII only, since token texts
/// are UTF-8).
fn byte_token(vocab: &Vocab, b: u8) -> Result<u32, TokenizerError> {
    let spelled = format!("<0x{b:02X}>");
    vocab
        .id(&spelled)
        .or_else(|| b.is_ascii().then(|| vocab.id(char::from(b).encode_utf8(&mut [0u8; 4]))).flatten())
        .ok_or(TokenizerError::MissingByteToken { byte: b, token: spelled })
}

/// Buffers reused across the fragments of one [`SpmModel::encode_fragments`] call.
#[derive(Default)]
struct Work {
    /// The fragment with its space prefix and its spaces as `▁`.
    escaped: String,
    symbols: Vec<Symbol>,
    queue: BinaryHeap<Pair>,
}

/// A run of `escaped` (a doubly linked list over the initial characters). A symbol that
/// has merged into its left neighbour has `len` 0.
#[derive(Debug, Clone, Copy)]
struct Symbol {
    /// Byte offset in the escaped text.
    start: usize,
    /// Length in bytes.
    len: usize,
    prev: Option<usize>,
    next: Option<usize>,
}

/// A queued pair of adjacent symbols whose concatenation is a token.
#[derive(Debug, Clone, Copy)]
struct Pair {
    /// The score of the token the pair forms.
    score: f32,
    left: usize,
    right: usize,
    /// The pair's length in bytes when queued.
    size: usize,
}

/// The queue's order (it pops the greatest): highest score, then leftmost. `right` and
/// `size` only make the order total; of two entries that tie on score and `left`, at
/// most one is still valid when popped.
impl Ord for Pair {
    fn cmp(&self, other: &Pair) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.left.cmp(&self.left))
            .then_with(|| other.right.cmp(&self.right))
            .then_with(|| self.size.cmp(&other.size))
    }
}

impl PartialOrd for Pair {
    fn partial_cmp(&self, other: &Pair) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for Pair {
    fn eq(&self, other: &Pair) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Pair {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::vocab::Spelling;

    /// A vocabulary of `<unk>`, the 256 byte tokens (ids 1..=256), then `(text, score)`.
    fn model(extra: &[(&str, f32)]) -> (SpmModel, Vocab) {
        let mut texts = vec!["<unk>".to_string()];
        texts.extend((0..=255u8).map(|b| format!("<0x{b:02X}>")));
        texts.extend(extra.iter().map(|(t, _)| t.to_string()));
        let mut types = vec![TokenType::Unknown];
        types.extend([TokenType::Byte; 256]);
        types.extend(vec![TokenType::Normal; extra.len()]);
        let mut scores = vec![0.0; 257];
        scores.extend(extra.iter().map(|&(_, s)| s));
        let vocab = Vocab::new(texts.iter().map(String::as_str), &types, Spelling::SentencePiece);
        match SpmModel::new(&vocab, &types, scores, true, false) {
            Ok(m) => (m, vocab),
            Err(e) => panic!("{e}"),
        }
    }

    /// The token texts `text` encodes to, as one fragment with a space prefix.
    fn encode(m: &SpmModel, vocab: &Vocab, text: &str) -> Vec<String> {
        let mut out = Vec::new();
        m.encode_fragments(vocab, &[Fragment::Text(text)], &mut out);
        out.iter().map(|&id| vocab.text(id).unwrap_or_default().to_string()).collect()
    }

    #[test]
    fn the_highest_score_merges_first() {
        // "▁ab" splits as ▁a + b or ▁ + ab: the better-scored first pair decides.
        let (m, v) = model(&[("▁", -1.0), ("a", -1.0), ("b", -1.0), ("▁a", -3.0), ("ab", -2.0)]);
        assert_eq!(encode(&m, &v, "ab"), ["▁", "ab"]);
        let (m, v) = model(&[("▁", -1.0), ("a", -1.0), ("b", -1.0), ("▁a", -2.0), ("ab", -3.0)]);
        assert_eq!(encode(&m, &v, "ab"), ["▁a", "b"]);
        // Merging goes on while any adjacent pair forms a token, whatever its score.
        let (m, v) = model(&[("▁", -1.0), ("a", -1.0), ("b", -1.0), ("ab", -2.0), ("▁ab", -9.0)]);
        assert_eq!(encode(&m, &v, "ab"), ["▁ab"]);
    }

    #[test]
    fn equal_scores_merge_leftmost_first() {
        let (m, v) = model(&[("▁", -1.0), ("a", -1.0), ("aa", -2.0)]);
        assert_eq!(encode(&m, &v, "aaa"), ["▁", "aa", "a"]);
        // -0.0 and 0.0 tie, as they do for llama.cpp's `<`.
        let (m, v) = model(&[("▁", -1.0), ("a", -1.0), ("b", -1.0), ("ab", -0.0), ("ba", 0.0)]);
        assert_eq!(encode(&m, &v, "aba"), ["▁", "ab", "a"]);
    }

    #[test]
    fn missing_characters_fall_back_to_bytes() {
        // "é" is no token, so it becomes the tokens of its two UTF-8 bytes.
        let (m, v) = model(&[("▁", -1.0), ("x", -1.0), ("▁x", -1.5)]);
        assert_eq!(encode(&m, &v, "xé x"), ["▁x", "<0xC3>", "<0xA9>", "▁x"]);
        assert_eq!(encode(&m, &v, "\t"), ["▁", "<0x09>"]);
    }

    #[test]
    fn fragments_after_special_tokens_get_a_space() {
        let (m, v) = model(&[("▁", -1.0), ("x", -1.0), ("▁x", -1.5)]);
        let mut out = Vec::new();
        m.encode_fragments(&v, &[Fragment::Text("x"), Fragment::Token(0), Fragment::Text("x")], &mut out);
        // Ids: 257 "▁", 258 "x", 259 "▁x".
        assert_eq!(out, [259, 0, 259]);
        let no_prefix = SpmModel { add_space_prefix: false, ..m.clone() };
        out.clear();
        no_prefix.encode_fragments(&v, &[Fragment::Text("x x")], &mut out);
        assert_eq!(out, [258, 259]);
    }

    #[test]
    fn bad_parts_are_named() {
        let texts = ["<unk>", "<0x41>", "a"];
        let types = [TokenType::Unknown, TokenType::Byte, TokenType::Normal];
        let vocab = Vocab::new(texts.into_iter(), &types, Spelling::SentencePiece);
        let err = |scores: Vec<f32>, types: &[TokenType]| {
            SpmModel::new(&vocab, types, scores, true, false).err().map(|e| e.to_string()).unwrap_or_default()
        };
        assert_eq!(err(vec![0.0; 2], &types), "tokenizer.ggml.scores has 2 entries but tokenizer.ggml.tokens has 3");
        assert_eq!(
            err(vec![0.0, f32::NAN, 0.0], &types),
            "tokenizer.ggml.scores: token 1 ('<0x41>') has a score that is not a number"
        );
        let bad_byte = [TokenType::Unknown, TokenType::Byte, TokenType::Byte];
        assert_eq!(
            err(vec![0.0; 3], &bad_byte),
            "tokenizer.ggml.token_type: token 2 ('a') has type 6 (byte) but is not spelled '<0xHH>'"
        );
        // Byte 0x41 has <0x41>, 0x00 has nothing.
        assert_eq!(
            err(vec![0.0; 3], &types),
            "tokenizer.ggml.tokens has no token '<0x00>' for byte fallback of byte 0x00"
        );
    }

    #[test]
    fn an_ascii_byte_may_fall_back_to_its_one_character_token() {
        let mut texts: Vec<String> = (0..=255u8).map(|b| format!("<0x{b:02X}>")).collect();
        texts[usize::from(b'z')] = "z".into();
        let types = vec![TokenType::Byte; 256];
        let mut types = types;
        types[usize::from(b'z')] = TokenType::Normal;
        let vocab = Vocab::new(texts.iter().map(String::as_str), &types, Spelling::SentencePiece);
        let m = SpmModel::new(&vocab, &types, vec![0.0; 256], false, false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.byte_ids[usize::from(b'z')], u32::from(b'z'));
        assert_eq!(m.byte_ids[0xFF], 0xFF);
    }
}
