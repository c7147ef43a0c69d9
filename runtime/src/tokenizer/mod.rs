//! The byte-level BPE tokenizer of GGUF files whose `tokenizer.ggml.model` is `gpt2`
//! (Llama 3, BitNet b1.58 2B-4T, SmolLM2, the tiny fixtures), matching llama.cpp's ids.
//!
//! A tour of the types:
//! - [`Tokenizer`] is built from a GGUF file ([`Tokenizer::from_gguf`]) or from its parts
//!   ([`TokenizerParts`], [`Tokenizer::from_parts`]). It encodes text to ids and decodes
//!   ids to bytes or text; neither can fail once it is built.
//! - [`StreamDecoder`] turns ids into text as they are generated, holding back UTF-8
//!   characters split across tokens.
//! - [`PreTokenizer`] / [`PreTokenizerKind`]: the regex splits chosen by
//!   `tokenizer.ggml.pre` (`llama-bpe`, `smollm`, `gpt-2`, `default`).
//! - [`TokenType`]: `tokenizer.ggml.token_type` values; [`TokenizerError`]: why a
//!   tokenizer could not be built, naming the key, token or merge.
//! - [`bytes`]: GPT-2's byte ↔ character alphabet.
//!
//! Encoding (llama.cpp's `llama_vocab::tokenize` for BPE vocabularies):
//! 1. BOS first when the caller asks for special tokens and `add_bos_token` is set;
//! 2. special-token texts are cut out of the input ([`Tokenizer::encode`] explains which);
//! 3. each remaining piece of text is split into words by the pre-tokenizer;
//! 4. each word becomes bytes, one initial symbol per byte, merged by rank. With the
//!    `llama-bpe` pre-tokenizer a word that is itself a token maps to it directly
//!    (llama.cpp's `ignore_merges`).
//!
//! Decoding undoes the byte-level alphabet for normal tokens; control, unknown and
//! user-defined tokens render as their text. What llama.cpp adds on top of its
//! detokenizer (`clean_spaces`, which removes a space before `?!.,`) is not done.
//!
//! So the bytes of `decode(encode(text))` are the bytes of `text` less those that have no
//! token of their own (no token whose text is the byte's one-character spelling): such a
//! byte cannot start a merge and is dropped, as llama.cpp drops it. SmolLM2's vocabulary
//! (and so the tiny fixtures') lacks 21 of them: the controls 0x04, 0x06, 0x13, 0x14, 0x16,
//! 0x1D; 0xC0, 0xC1 and 0xF5..=0xFF, which UTF-8 never holds; and 0xF1, 0xF2, the lead
//! bytes of planes 4 to 11 (U+40000..=U+BFFFF, unassigned), whose characters therefore
//! decode to U+FFFD. For every other text, `decode(encode(text)) == text`.

mod bpe;
pub mod bytes;
mod end_of_generation;
mod error;
mod pretokenize;
mod special;
mod stream;
mod vocab;

use std::fmt;

use purebee_memory::gguf::GgufFile;

use bpe::MergeTable;
use special::{Fragment, SpecialToken};
use vocab::Vocab;

pub use error::TokenizerError;
pub use pretokenize::{PreTokenizer, PreTokenizerKind};
pub use stream::{StreamDecoder, Utf8Stream};

/// The values of `tokenizer.ggml.model` this module implements.
const SUPPORTED_MODELS: &str = "gpt2";

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";

/// The kind of a token (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: undefined; treated as normal.
    Undefined,
    /// 1: an ordinary BPE token, spelled in the byte-level alphabet.
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token such as `<|im_start|>` or BOS.
    Control,
    /// 4: a user-defined (added) token, spelled as plain text.
    UserDefined,
    /// 5: an unused slot; treated as normal.
    Unused,
    /// 6: a byte token; `<0xHH>` stands for the byte HH, anything else is treated as normal.
    Byte,
}

impl TokenType {
    /// The type of a `tokenizer.ggml.token_type` value, if it is one of 0..=6.
    pub fn from_gguf(value: i32) -> Option<TokenType> {
        Some(match value {
            0 => TokenType::Undefined,
            1 => TokenType::Normal,
            2 => TokenType::Unknown,
            3 => TokenType::Control,
            4 => TokenType::UserDefined,
            5 => TokenType::Unused,
            6 => TokenType::Byte,
            _ => return None,
        })
    }
}

/// Everything a [`Tokenizer`] is built from, as stored under `tokenizer.ggml.*`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenizerParts {
    /// The token texts, id = index (byte-level spelling for normal tokens).
    pub tokens: Vec<String>,
    /// The merges, "left right", rank = index.
    pub merges: Vec<String>,
    /// The token types (1 normal, 3 control, 4 user-defined, 6 byte, ...); `None` makes
    /// every token normal.
    pub token_types: Option<Vec<i32>>,
    /// The pre-tokenizer name (`tokenizer.ggml.pre`).
    pub pre: String,
    /// The BOS id.
    pub bos: Option<u32>,
    /// The EOS id (an end-of-generation token).
    pub eos: Option<u32>,
    /// Whether [`Tokenizer::encode`] puts BOS first when asked for special tokens.
    pub add_bos: bool,
    /// Further end-of-generation ids (for example EOT and EOM). Control and user-defined
    /// tokens whose text ends a turn (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, ...)
    /// are added when the tokenizer is built, as llama.cpp does.
    pub eog: Vec<u32>,
}

/// [`TokenizerParts`] less the texts, which [`Tokenizer::build`] borrows.
struct Settings {
    token_types: Option<Vec<i32>>,
    pre: String,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

/// A byte-level BPE tokenizer. See the [module documentation](self).
#[derive(Clone)]
pub struct Tokenizer {
    /// Token texts as stored (id = index), the bytes each decodes to, and text to id (with
    /// duplicate texts the last id wins, as in llama.cpp).
    vocab: Vocab,
    types: Vec<TokenType>,
    /// The token of each single byte, in the byte-level alphabet.
    byte_ids: [Option<u32>; 256],
    merges: MergeTable,
    pre: PreTokenizer,
    /// Control, unknown and user-defined tokens, longest text first.
    specials: Vec<SpecialToken>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tokenizer")
            .field("tokens", &self.vocab.len())
            .field("merges", &self.merges.len())
            .field("pre", &self.pre.kind())
            .field("special_tokens", &self.specials.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish()
    }
}

impl Tokenizer {
    /// Builds a tokenizer from its parts, checking them: a non-empty vocabulary of at most
    /// `u32::MAX` tokens, one known type per token, merges whose parts and results are
    /// tokens, special ids within the vocabulary, a BOS id when `add_bos` is set, and a
    /// supported pre-tokenizer (an unknown `pre` is an error, never a silent fallback).
    pub fn from_parts(parts: TokenizerParts) -> Result<Tokenizer, TokenizerError> {
        let TokenizerParts { tokens, merges, token_types, pre, bos, eos, add_bos, eog } = parts;
        let settings = Settings { token_types, pre, bos, eos, add_bos, eog };
        Tokenizer::build(tokens.iter().map(String::as_str), merges.iter().map(String::as_str), settings)
    }

    /// [`Tokenizer::from_parts`] over borrowed texts: a GGUF file's arrays are read in place.
    fn build<'a>(
        tokens: impl ExactSizeIterator<Item = &'a str> + Clone,
        merges: impl Iterator<Item = &'a str>,
        settings: Settings,
    ) -> Result<Tokenizer, TokenizerError> {
        let Settings { token_types, pre, bos, eos, add_bos, eog } = settings;
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::TooManyTokens { count: n });
        }
        let kind = PreTokenizerKind::from_name(&pre).ok_or_else(|| TokenizerError::UnsupportedPre {
            value: pre.clone(),
            supported: PreTokenizerKind::supported_names(),
        })?;
        let types = match token_types {
            None => vec![TokenType::Normal; n],
            Some(values) => {
                if values.len() != n {
                    return Err(TokenizerError::TokenTypeCount { types: values.len(), tokens: n });
                }
                values
                    .iter()
                    .zip(0u32..)
                    .map(|(&value, id)| {
                        TokenType::from_gguf(value).ok_or_else(|| TokenizerError::UnknownTokenType {
                            id,
                            token: tokens.clone().nth(id as usize).unwrap_or_default().to_string(),
                            value,
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        let check = |which: String, id: u32| {
            if (id as usize) < n {
                Ok(())
            } else {
                Err(TokenizerError::SpecialIdOutOfRange { which, id, n_tokens: n })
            }
        };
        if let Some(id) = bos {
            check(KEY_BOS.to_string(), id)?;
        }
        if let Some(id) = eos {
            check(KEY_EOS.to_string(), id)?;
        }
        for (i, &id) in eog.iter().enumerate() {
            check(format!("end-of-generation id #{i}"), id)?;
        }
        if add_bos && bos.is_none() {
            return Err(TokenizerError::AddBosWithoutBos);
        }

        let vocab = Vocab::new(tokens, &types);
        let mut byte_ids = [None; 256];
        let mut spelled = String::new();
        for (b, slot) in (0..=255u8).zip(byte_ids.iter_mut()) {
            spelled.clear();
            spelled.push(bytes::byte_to_char(b));
            *slot = vocab.id(&spelled);
        }
        let merges = MergeTable::new(merges, &vocab)?;
        let mut specials: Vec<SpecialToken> = vocab
            .texts()
            .zip(&types)
            .zip(0u32..)
            .filter(|((text, ty), _)| {
                !text.is_empty() && matches!(ty, TokenType::Control | TokenType::Unknown | TokenType::UserDefined)
            })
            .map(|((text, &ty), id)| SpecialToken { id, text: text.to_string(), always: ty == TokenType::UserDefined })
            .collect();
        special::sort_for_matching(&mut specials);
        let mut eog = eog;
        eog.extend(end_of_generation::ids_by_text(vocab.texts(), &types));
        eog.sort_unstable();
        eog.dedup();

        Ok(Tokenizer {
            vocab,
            types,
            byte_ids,
            merges,
            pre: PreTokenizer::new(kind)?,
            specials,
            bos,
            eos,
            add_bos,
            eog,
        })
    }

    /// Builds the tokenizer of a GGUF file from its `tokenizer.ggml.*` keys.
    ///
    /// Required: `model` (must be `gpt2`), `tokens`, `merges`. Optional: `token_type` (all
    /// normal without it), `pre` (llama.cpp's `default` without it, as llama.cpp does for
    /// old files), `bos_token_id`, `eos_token_id`, `eot_token_id` and `eom_token_id` (both
    /// end generation), `add_bos_token` (without it: true for `llama-bpe`, false
    /// otherwise, as in llama.cpp). A key that is present with the wrong type is an error.
    /// Every error names the file: [`TokenizerError::Gguf`] does already, every other one
    /// comes inside [`TokenizerError::InFile`].
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_gguf_keys(file).map_err(|e| match e {
            e @ TokenizerError::Gguf(_) => e,
            e => TokenizerError::InFile { file: file.path().display().to_string(), source: Box::new(e) },
        })
    }

    fn from_gguf_keys(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let model = file.get_str(KEY_MODEL)?;
        if model != "gpt2" {
            return Err(TokenizerError::UnsupportedModel {
                value: model.to_string(),
                supported: SUPPORTED_MODELS.to_string(),
            });
        }
        let tokens = file.get_strs(KEY_TOKENS)?;
        let merges = file.get_strs(KEY_MERGES)?;
        let present = |key: &str| file.get(key).is_some();
        let token_types = if present(KEY_TOKEN_TYPE) { Some(file.get_i32_array(KEY_TOKEN_TYPE)?) } else { None };
        let pre = if present(KEY_PRE) { file.get_str(KEY_PRE)?.to_string() } else { "default".to_string() };
        let optional_id = |key: &str| if present(key) { file.get_u32(key).map(Some) } else { Ok(None) };
        let bos = optional_id(KEY_BOS)?;
        let eos = optional_id(KEY_EOS)?;
        let eog = [optional_id(KEY_EOT)?, optional_id(KEY_EOM)?].into_iter().flatten().collect();
        let add_bos = if present(KEY_ADD_BOS) {
            file.get_bool(KEY_ADD_BOS)?
        } else {
            PreTokenizerKind::from_name(&pre).is_some_and(PreTokenizerKind::adds_bos_by_default)
        };
        Tokenizer::build(tokens, merges, Settings { token_types, pre, bos, eos, add_bos, eog })
    }

    /// Encodes `text` to token ids.
    ///
    /// With `add_special`, BOS comes first when the vocabulary's `add_bos_token` is set.
    /// With `parse_special`, the texts of control (and unknown) tokens written in `text`,
    /// such as `<|im_start|>`, become those tokens; without it they are encoded as plain
    /// text. User-defined tokens are matched in either case, as llama.cpp does.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let mut initial = Vec::new();
        let mut spelled = String::new();
        for fragment in special::partition(text, &self.specials, parse_special) {
            match fragment {
                Fragment::Token(id) => out.push(id),
                Fragment::Text(t) => {
                    for word in self.pre.split(t) {
                        self.encode_word(word, &mut initial, &mut spelled, &mut out);
                    }
                }
            }
        }
        out
    }

    fn encode_word(&self, word: &str, initial: &mut Vec<Option<u32>>, spelled: &mut String, out: &mut Vec<u32>) {
        if self.pre.kind().ignores_merges() {
            spelled.clear();
            bytes::encode_into(word.as_bytes(), spelled);
            if let Some(id) = self.vocab.id(spelled) {
                out.push(id);
                return;
            }
        }
        initial.clear();
        initial.extend(word.bytes().map(|b| self.byte_ids[usize::from(b)]));
        self.merges.encode_word(initial, out);
    }

    /// The bytes token `id` stands for: the byte-level alphabet undone for normal tokens;
    /// the stored text for control, unknown and user-defined tokens (callers that want
    /// control tokens to produce nothing check [`Tokenizer::is_control`], or use
    /// [`StreamDecoder::skip_control`]). An id past the vocabulary gives no bytes.
    pub fn decode_token(&self, id: u32) -> &[u8] {
        self.vocab.piece(id)
    }

    /// Decodes ids to text; invalid UTF-8 (an incomplete character at either end)
    /// becomes U+FFFD.
    pub fn decode(&self, ids: &[u32]) -> String {
        let bytes: Vec<u8> = ids.iter().flat_map(|&id| self.decode_token(id)).copied().collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A streaming decoder over this tokenizer.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// The vocabulary size.
    pub fn token_count(&self) -> usize {
        self.vocab.len()
    }

    /// The BOS id, if the vocabulary has one.
    pub fn bos(&self) -> Option<u32> {
        self.bos
    }

    /// The EOS id, if the vocabulary has one.
    pub fn eos(&self) -> Option<u32> {
        self.eos
    }

    /// Whether [`Tokenizer::encode`] adds BOS when asked for special tokens.
    pub fn add_bos(&self) -> bool {
        self.add_bos
    }

    /// Whether `id` ends generation: EOS, EOT, EOM, or a control or user-defined token
    /// whose text ends a turn (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, ...).
    pub fn is_eog(&self, id: u32) -> bool {
        self.eos == Some(id) || self.eog.binary_search(&id).is_ok()
    }

    /// Whether `id` is a control token (type 3), such as BOS or `<|im_start|>`.
    pub fn is_control(&self, id: u32) -> bool {
        self.token_type(id) == Some(TokenType::Control)
    }

    /// The type of token `id`, or `None` past the vocabulary.
    pub fn token_type(&self, id: u32) -> Option<TokenType> {
        self.types.get(id as usize).copied()
    }

    /// The stored text of token `id` (byte-level spelling for normal tokens).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The id of the token whose stored text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// The pre-tokenizer in use.
    pub fn pre_tokenizer(&self) -> PreTokenizerKind {
        self.pre.kind()
    }
}
