//! Streaming detokenization: text out as tokens arrive, with UTF-8 characters that are
//! split across tokens held back until they are complete.

use super::Tokenizer;

/// Turns a stream of token ids into text, one piece per [`StreamDecoder::push`].
///
/// Tokens need not end on a character boundary (an emoji is often four byte-level tokens,
/// or four `<0xHH>` byte tokens in SentencePiece). The decoder keeps the bytes of an
/// unfinished character and emits the character once its last byte arrives, so every
/// character is emitted exactly once and a split character never shows up as U+FFFD on the
/// way ([`Utf8Stream`]).
///
/// Each token gives what [`Tokenizer::decode_token`] gives: the stream continues a text, so
/// a SentencePiece piece keeps its leading space, as in llama.cpp's generation output
/// (where [`Tokenizer::decode`] of a whole sequence drops the prefix space of the first).
///
/// Control tokens render as their text (as [`Tokenizer::decode_token`] gives them) unless
/// [`StreamDecoder::skip_control`] is set.
#[derive(Debug, Clone)]
pub struct StreamDecoder<'a> {
    tokenizer: &'a Tokenizer,
    utf8: Utf8Stream,
    skip_control: bool,
}

impl<'a> StreamDecoder<'a> {
    /// A decoder for ids of `tokenizer`.
    pub fn new(tokenizer: &'a Tokenizer) -> StreamDecoder<'a> {
        StreamDecoder { tokenizer, utf8: Utf8Stream::default(), skip_control: false }
    }

    /// Whether control tokens (such as `<|im_end|>`) produce no text.
    pub fn skip_control(mut self, skip: bool) -> StreamDecoder<'a> {
        self.skip_control = skip;
        self
    }

    /// Adds one token and returns the text that is now complete (possibly empty).
    pub fn push(&mut self, id: u32) -> String {
        if self.skip_control && self.tokenizer.is_control(id) {
            return self.utf8.push(&[]);
        }
        self.utf8.push(self.tokenizer.decode_token(id))
    }

    /// Returns what is left (an unfinished character becomes U+FFFD) and resets the
    /// decoder.
    pub fn finish(&mut self) -> String {
        self.utf8.finish()
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        self.utf8.has_pending()
    }
}

/// Bytes in, complete UTF-8 text out: the bytes of an unfinished character wait for the
/// next push. Bytes that can never become valid UTF-8 are emitted as U+FFFD as soon as that
/// is certain; [`Utf8Stream::finish`] flushes an unfinished character the same way. It
/// holds no tokenizer, so a caller can keep it next to one ([`StreamDecoder`] borrows it).
#[derive(Debug, Clone, Default)]
pub struct Utf8Stream {
    pending: Vec<u8>,
}

impl Utf8Stream {
    /// Adds `bytes` and returns the text that is now complete (possibly empty).
    pub fn push(&mut self, bytes: &[u8]) -> String {
        self.pending.extend_from_slice(bytes);
        let mut out = String::new();
        let mut rest: &[u8] = &self.pending;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    rest = &[];
                    break;
                }
                Err(e) => {
                    let (valid, tail) = rest.split_at(e.valid_up_to());
                    out.push_str(&String::from_utf8_lossy(valid));
                    match e.error_len() {
                        // Invalid bytes: no later byte can repair them.
                        Some(n) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = tail.get(n..).unwrap_or_default();
                        }
                        // A character that may still be completed by the next token.
                        None => {
                            rest = tail;
                            break;
                        }
                    }
                }
            }
        }
        let keep = rest.len();
        let drop = self.pending.len() - keep;
        self.pending.drain(..drop);
        out
    }

    /// Returns what is left (an unfinished character becomes U+FFFD) and resets the
    /// stream.
    pub fn finish(&mut self) -> String {
        let out = String::from_utf8_lossy(&self.pending).into_owned();
        self.pending.clear();
        out
    }

    /// Whether bytes of an unfinished character are held back.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}
