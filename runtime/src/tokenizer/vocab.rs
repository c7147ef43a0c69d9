//! The vocabulary: each token's text and the bytes it decodes to, stored end to end, and
//! a text → id index that holds ids, not texts.
//!
//! A tokenizer once kept a `String` and a boxed byte slice per token and a hash map keyed
//! by another copy of every text: for SmolLM2's 49,152 tokens about 150,000 small
//! allocations and several MB of heap in every `run` and `serve`.

use std::hash::{BuildHasher, RandomState};
use std::ops::Range;

use hashbrown::HashTable;

use super::{bytes, TokenType};

/// How the texts of normal tokens spell their bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spelling {
    /// GPT-2's byte-level alphabet ([`bytes`]): `Ġ` is a space.
    ByteLevel,
    /// SentencePiece: the text itself, with U+2581 (`▁`) for a space.
    SentencePiece,
}

#[derive(Clone)]
pub(crate) struct Vocab {
    /// The token texts end to end; token `i`'s ends at `text_ends[i]`.
    text: String,
    text_ends: Vec<usize>,
    /// The bytes each token decodes to ([`piece_of`]), likewise.
    pieces: Vec<u8>,
    piece_ends: Vec<usize>,
    /// The ids of the non-empty texts, hashed by their text with `hasher`. Of tokens with
    /// the same text only the last is kept, as in llama.cpp's map.
    index: HashTable<u32>,
    hasher: RandomState,
}

impl Vocab {
    /// The vocabulary of `texts`, whose token `i` has type `types[i]` (the caller checked
    /// that the counts agree and fit u32), normal tokens spelled as `spelling` says.
    pub(crate) fn new<'a>(texts: impl Iterator<Item = &'a str>, types: &[TokenType], spelling: Spelling) -> Vocab {
        let n = types.len();
        let mut v = Vocab {
            text: String::new(),
            text_ends: Vec::with_capacity(n),
            pieces: Vec::new(),
            piece_ends: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            hasher: RandomState::new(),
        };
        for (t, &ty) in texts.zip(types) {
            v.text.push_str(t);
            v.text_ends.push(v.text.len());
            piece_of(t, ty, spelling, &mut v.pieces);
            v.piece_ends.push(v.pieces.len());
        }
        v.text.shrink_to_fit();
        v.pieces.shrink_to_fit();
        let Vocab { text, text_ends, index, hasher, .. } = &mut v;
        for id in (0u32..).take(text_ends.len()) {
            let t = text_at(text, text_ends, id);
            if t.is_empty() {
                continue;
            }
            let hash = hasher.hash_one(t);
            match index.find_mut(hash, |&other| text_at(text, text_ends, other) == t) {
                Some(kept) => *kept = id,
                None => {
                    index.insert_unique(hash, id, |&other| hasher.hash_one(text_at(text, text_ends, other)));
                }
            }
        }
        v
    }

    /// The number of tokens.
    pub(crate) fn len(&self) -> usize {
        self.text_ends.len()
    }

    /// Token `id`'s text, or `None` past the vocabulary.
    pub(crate) fn text(&self, id: u32) -> Option<&str> {
        ((id as usize) < self.len()).then(|| self.text_of(id))
    }

    /// Every token's text, in id order.
    pub(crate) fn texts(&self) -> impl Iterator<Item = &str> + '_ {
        (0u32..).take(self.len()).map(|id| self.text_of(id))
    }

    /// The bytes token `id` decodes to; none past the vocabulary.
    pub(crate) fn piece(&self, id: u32) -> &[u8] {
        self.pieces.get(span(&self.piece_ends, id)).unwrap_or_default()
    }

    /// The id of the token whose text is `text` (the last such token).
    pub(crate) fn id(&self, text: &str) -> Option<u32> {
        self.index.find(self.hasher.hash_one(text), |&id| self.text_of(id) == text).copied()
    }

    fn text_of(&self, id: u32) -> &str {
        text_at(&self.text, &self.text_ends, id)
    }
}

/// Where row `id` of rows stored end to end lies (row `i` ends at `ends[i]`); empty past
/// the last row.
fn span(ends: &[usize], id: u32) -> Range<usize> {
    let id = id as usize;
    let end = ends.get(id).copied().unwrap_or(0);
    let start = id.checked_sub(1).and_then(|i| ends.get(i).copied()).unwrap_or(0);
    start.min(end)..end
}

/// Text `id` of texts stored end to end.
fn text_at<'a>(text: &'a str, ends: &[usize], id: u32) -> &'a str {
    text.get(span(ends, id)).unwrap_or_default()
}

/// Appends the bytes a token decodes to (see [`super::Tokenizer::decode_token`]).
fn piece_of(text: &str, ty: TokenType, spelling: Spelling, out: &mut Vec<u8>) {
    match (ty, spelling) {
        (TokenType::Control | TokenType::Unknown | TokenType::UserDefined, _) => out.extend_from_slice(text.as_bytes()),
        (TokenType::Byte, _) => match parse_byte_token(text) {
            Some(b) => out.push(b),
            None => out.extend(bytes::decode_text(text)),
        },
        (TokenType::Normal | TokenType::Undefined | TokenType::Unused, Spelling::ByteLevel) => {
            out.extend(bytes::decode_text(text))
        }
        (TokenType::Normal, Spelling::SentencePiece) => {
            let mut buf = [0u8; 4];
            for c in text.chars() {
                let c = if c == SPACE_MARK { ' ' } else { c };
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
        // llama.cpp's `token_to_piece` gives nothing for a SentencePiece token that is
        // neither normal, byte nor special.
        (TokenType::Undefined | TokenType::Unused, Spelling::SentencePiece) => {}
    }
}

/// SentencePiece's stand-in for a space in token texts (U+2581, LOWER ONE EIGHTH BLOCK).
pub(crate) const SPACE_MARK: char = '\u{2581}';

/// The byte of a `<0xHH>` token text.
pub(crate) fn parse_byte_token(text: &str) -> Option<u8> {
    let hex = text.strip_prefix("<0x")?.strip_suffix('>')?;
    if hex.len() != 2 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u8::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_tokens_parse() {
        assert_eq!(parse_byte_token("<0x0A>"), Some(10));
        assert_eq!(parse_byte_token("<0xff>"), Some(255));
        assert_eq!(parse_byte_token("<0x1>"), None);
        assert_eq!(parse_byte_token("<0x+1>"), None);
        assert_eq!(parse_byte_token("0x0A"), None);
    }

    #[test]
    fn pieces_follow_the_token_type() {
        let piece = |text: &str, ty| {
            let mut out = Vec::new();
            piece_of(text, ty, Spelling::ByteLevel, &mut out);
            out
        };
        assert_eq!(piece("Ġhi", TokenType::Normal), b" hi");
        assert_eq!(piece("<|im_end|>", TokenType::Control), b"<|im_end|>");
        assert_eq!(piece("ĠĠ", TokenType::UserDefined), "ĠĠ".as_bytes());
        assert_eq!(piece("<0x0A>", TokenType::Byte), b"\n");
        assert_eq!(piece("Ċ", TokenType::Byte), b"\n");
    }

    #[test]
    fn sentencepiece_pieces_follow_llama_cpp() {
        let piece = |text: &str, ty| {
            let mut out = Vec::new();
            piece_of(text, ty, Spelling::SentencePiece, &mut out);
            out
        };
        // Only U+2581 becomes a space; `Ġ` is an ordinary letter here.
        assert_eq!(piece("▁hi▁▁x", TokenType::Normal), b" hi  x");
        assert_eq!(piece("Ġé", TokenType::Normal), "Ġé".as_bytes());
        assert_eq!(piece("▁<s>", TokenType::Control), "▁<s>".as_bytes());
        assert_eq!(piece("▁x", TokenType::UserDefined), "▁x".as_bytes());
        assert_eq!(piece("<0xE2>", TokenType::Byte), [0xE2]);
        // llama.cpp's token_to_piece renders nothing for these in a SentencePiece vocabulary.
        assert_eq!(piece("▁x", TokenType::Unused), b"");
        assert_eq!(piece("▁x", TokenType::Undefined), b"");
    }

    #[test]
    fn texts_pieces_and_ids_read_back() {
        let texts = ["a", "", "Ġb", "a", "<s>", "ü"];
        let types = [
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Normal,
            TokenType::Control,
            TokenType::Normal,
        ];
        let v = Vocab::new(texts.into_iter(), &types, Spelling::ByteLevel);
        assert_eq!(v.len(), 6);
        assert_eq!(v.texts().collect::<Vec<_>>(), texts);
        assert_eq!((v.text(5), v.text(6)), (Some("ü"), None));
        assert_eq!((v.piece(2), v.piece(4), v.piece(1), v.piece(6)), (&b" b"[..], &b"<s>"[..], &b""[..], &b""[..]));
        // The later of two equal texts wins; an empty text is no key.
        assert_eq!((v.id("a"), v.id("Ġb"), v.id(""), v.id("b")), (Some(3), Some(2), None, None));
    }
}
