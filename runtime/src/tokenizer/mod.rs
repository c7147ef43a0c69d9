//! The tokenizers of GGUF files, matching llama.cpp's ids: byte-level BPE
//! (`tokenizer.ggml.model = "gpt2"`: Llama 3, BitNet b1.58 2B-4T, SmolLM2, the tiny
//! fixtures) and SentencePiece (`"llama"`: Llama 1 and 2, Mistral, TinyLlama and their
//! kin). Both are one [`Tokenizer`] type, so every caller gets either without knowing which.
//!
//! A tour of the types:
//! - [`Tokenizer`] is built from a GGUF file ([`Tokenizer::from_gguf`]) or from its parts
//!   ([`TokenizerParts`] and [`Tokenizer::from_parts`] for BPE, [`SpmParts`] and
//!   [`Tokenizer::from_spm_parts`] for SentencePiece). It encodes text to ids and decodes
//!   ids to bytes or text; neither can fail once it is built. [`TokenizerKind`] says which
//!   algorithm it runs.
//! - [`StreamDecoder`] turns ids into text as they are generated, holding back UTF-8
//!   characters split across tokens.
//! - [`PreTokenizer`] / [`PreTokenizerKind`]: the regex splits chosen by
//!   `tokenizer.ggml.pre` (`llama-bpe`, `smollm`, `gpt-2`, `default`) for BPE.
//! - [`TokenType`]: `tokenizer.ggml.token_type` values; [`TokenizerError`]: why a
//!   tokenizer could not be built, naming the key, token or merge.
//! - [`bytes`]: GPT-2's byte ↔ character alphabet.
//!
//! Encoding (llama.cpp's `llama_vocab::tokenize`):
//! 1. BOS first when the caller asks for special tokens and `add_bos_token` is set;
//! 2. special-token texts are cut out of the input ([`Tokenizer::encode`] explains which);
//! 3. BPE (`bpe.rs`): each remaining piece of text is split into words by the
//!    pre-tokenizer, and each word becomes bytes, one initial symbol per byte, merged by
//!    rank. With the `llama-bpe` pre-tokenizer a word that is itself a token maps to it
//!    directly (llama.cpp's `ignore_merges`).
//! 4. SentencePiece (`spm.rs`): each remaining piece, with a space in front when it is the
//!    first or follows a special token (`add_space_prefix`) and its spaces written `▁`,
//!    starts as one symbol per character; pairs merge by the score of the token they form;
//!    characters the vocabulary lacks become byte tokens `<0xHH>`. EOS goes last when the
//!    caller asks for special tokens and `add_eos_token` is set.
//!
//! Decoding undoes the byte-level alphabet (BPE) or turns `▁` back into spaces and byte
//! tokens into their bytes (SentencePiece); control, unknown and user-defined tokens
//! render as their text. [`Tokenizer::decode`] of a SentencePiece sequence drops the space
//! that `add_space_prefix` put in front of the first piece, as llama.cpp's `detokenize`
//! does; [`Tokenizer::decode_token`] and [`StreamDecoder`] give each piece whole, as
//! llama.cpp's `token_to_piece` does for generated tokens. What llama.cpp adds on top of
//! its BPE detokenizer (`clean_spaces`, which removes a space before `?!.,`) is not done.
//!
//! So for BPE the bytes of `decode(encode(text))` are the bytes of `text` less those that
//! have no token of their own (no token whose text is the byte's one-character spelling):
//! such a byte cannot start a merge and is dropped, as llama.cpp drops it. SmolLM2's
//! vocabulary (and so the tiny fixtures') lacks 21 of them: the controls 0x04, 0x06, 0x13,
//! 0x14, 0x16, 0x1D; 0xC0, 0xC1 and 0xF5..=0xFF, which UTF-8 never holds; and 0xF1, 0xF2,
//! the lead bytes of planes 4 to 11 (U+40000..=U+BFFFF, unassigned), whose characters
//! therefore decode to U+FFFD. For every other text, `decode(encode(text)) == text`. A
//! SentencePiece vocabulary must have a token for every byte, so there
//! `decode(encode(text)) == text` always (special-token texts aside).

mod bpe;
pub mod bytes;
mod end_of_generation;
mod error;
mod pretokenize;
mod special;
mod spm;
mod stream;
mod vocab;

use std::fmt;

use purebee_memory::gguf::GgufFile;

use bpe::BpeModel;
use special::SpecialToken;
use spm::SpmModel;
use vocab::{Spelling, Vocab};

pub use error::TokenizerError;
pub use pretokenize::{PreTokenizer, PreTokenizerKind};
pub use stream::{StreamDecoder, Utf8Stream};

/// The values of `tokenizer.ggml.model` this module implements.
const SUPPORTED_MODELS: &str = "gpt2, llama";

const KEY_MODEL: &str = "tokenizer.ggml.model";
const KEY_TOKENS: &str = "tokenizer.ggml.tokens";
const KEY_MERGES: &str = "tokenizer.ggml.merges";
const KEY_SCORES: &str = "tokenizer.ggml.scores";
const KEY_TOKEN_TYPE: &str = "tokenizer.ggml.token_type";
const KEY_PRE: &str = "tokenizer.ggml.pre";
const KEY_BOS: &str = "tokenizer.ggml.bos_token_id";
const KEY_EOS: &str = "tokenizer.ggml.eos_token_id";
const KEY_EOT: &str = "tokenizer.ggml.eot_token_id";
const KEY_EOM: &str = "tokenizer.ggml.eom_token_id";
const KEY_ADD_BOS: &str = "tokenizer.ggml.add_bos_token";
const KEY_ADD_EOS: &str = "tokenizer.ggml.add_eos_token";
const KEY_ADD_SPACE_PREFIX: &str = "tokenizer.ggml.add_space_prefix";

/// Which tokenizer algorithm a vocabulary uses (`tokenizer.ggml.model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenizerKind {
    /// `gpt2`: byte-level BPE, ranked merges after a regex pre-tokenizer.
    BytePair,
    /// `llama`: SentencePiece, scored merges over characters with byte fallback.
    SentencePiece,
}

impl TokenizerKind {
    /// The kind for a `tokenizer.ggml.model` value, or `None` when it is not supported.
    pub fn from_gguf_name(name: &str) -> Option<TokenizerKind> {
        match name {
            "gpt2" => Some(TokenizerKind::BytePair),
            "llama" => Some(TokenizerKind::SentencePiece),
            _ => None,
        }
    }

    /// The `tokenizer.ggml.model` value of this kind.
    pub fn gguf_name(self) -> &'static str {
        match self {
            TokenizerKind::BytePair => "gpt2",
            TokenizerKind::SentencePiece => "llama",
        }
    }
}

/// The kind of a token (`tokenizer.ggml.token_type`, llama.cpp's `llama_token_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenType {
    /// 0: undefined; treated as normal by BPE, decodes to nothing in SentencePiece (as in
    /// llama.cpp).
    Undefined,
    /// 1: an ordinary token, spelled in the byte-level alphabet (BPE) or with `▁` for
    /// spaces (SentencePiece).
    Normal,
    /// 2: the unknown token.
    Unknown,
    /// 3: a control token such as `<|im_start|>` or BOS.
    Control,
    /// 4: a user-defined (added) token, spelled as plain text.
    UserDefined,
    /// 5: an unused slot; treated as normal by BPE, decodes to nothing in SentencePiece.
    Unused,
    /// 6: a byte token; `<0xHH>` stands for the byte HH. BPE treats any other text as
    /// normal; SentencePiece refuses it.
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

/// Everything a byte-level BPE [`Tokenizer`] is built from, as stored under
/// `tokenizer.ggml.*`.
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

/// Everything a SentencePiece [`Tokenizer`] is built from, as stored under
/// `tokenizer.ggml.*` (`model = "llama"`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpmParts {
    /// The token texts, id = index (`▁` for a space in normal tokens; `<0xHH>` for byte
    /// tokens, one for each of the 256 bytes).
    pub tokens: Vec<String>,
    /// The score of each token (`tokenizer.ggml.scores`): of two pairs that could merge,
    /// the one forming the higher-scored token merges first.
    pub scores: Vec<f32>,
    /// The token types; `None` makes every token normal.
    pub token_types: Option<Vec<i32>>,
    /// The BOS id.
    pub bos: Option<u32>,
    /// The EOS id (an end-of-generation token).
    pub eos: Option<u32>,
    /// Whether [`Tokenizer::encode`] puts BOS first when asked for special tokens.
    pub add_bos: bool,
    /// Whether [`Tokenizer::encode`] puts EOS last when asked for special tokens.
    pub add_eos: bool,
    /// Whether a space goes in front of the text and after each special token
    /// (`tokenizer.ggml.add_space_prefix`; true for Llama).
    pub add_space_prefix: bool,
    /// Further end-of-generation ids, as in [`TokenizerParts::eog`].
    pub eog: Vec<u32>,
}

/// What a tokenizer is built from besides its texts and its model's own parts.
struct Settings {
    token_types: Option<Vec<i32>>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

/// The model's own parts, before they are checked against the vocabulary.
enum ModelParts<M> {
    BytePair { merges: M, pre: PreTokenizerKind },
    SentencePiece { scores: Vec<f32>, add_space_prefix: bool, add_eos: bool },
}

/// The pre-tokenizer named `name`; an unknown name is an error, never a silent fallback.
fn pre_kind(name: &str) -> Result<PreTokenizerKind, TokenizerError> {
    PreTokenizerKind::from_name(name).ok_or_else(|| TokenizerError::UnsupportedPre {
        value: name.to_string(),
        supported: PreTokenizerKind::supported_names(),
    })
}

/// The algorithm that turns a fragment of text into ids. Boxed: each holds a 256-entry
/// byte table, and they differ in size.
#[derive(Debug, Clone)]
enum Model {
    BytePair(Box<BpeModel>),
    SentencePiece(Box<SpmModel>),
}

/// A GGUF tokenizer, byte-level BPE or SentencePiece. See the [module documentation](self).
#[derive(Clone)]
pub struct Tokenizer {
    /// Token texts as stored (id = index), the bytes each decodes to, and text to id (with
    /// duplicate texts the last id wins, as in llama.cpp).
    vocab: Vocab,
    types: Vec<TokenType>,
    model: Model,
    /// Control, unknown and user-defined tokens, longest text first.
    specials: Vec<SpecialToken>,
    bos: Option<u32>,
    eos: Option<u32>,
    add_bos: bool,
    eog: Vec<u32>,
}

impl fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Tokenizer");
        d.field("kind", &self.kind()).field("tokens", &self.vocab.len());
        match &self.model {
            Model::BytePair(m) => d.field("merges", &m.merge_count()).field("pre", &m.pre().kind()),
            Model::SentencePiece(m) => {
                d.field("add_space_prefix", &m.add_space_prefix()).field("add_eos", &m.add_eos())
            }
        };
        d.field("special_tokens", &self.specials.len())
            .field("bos", &self.bos)
            .field("eos", &self.eos)
            .field("add_bos", &self.add_bos)
            .field("eog", &self.eog)
            .finish()
    }
}

impl Tokenizer {
    /// Builds a byte-level BPE tokenizer from its parts, checking them: a non-empty
    /// vocabulary of at most `u32::MAX` tokens, one known type per token, merges whose
    /// parts and results are tokens, special ids within the vocabulary, a BOS id when
    /// `add_bos` is set, and a supported pre-tokenizer (an unknown `pre` is an error, never
    /// a silent fallback).
    pub fn from_parts(parts: TokenizerParts) -> Result<Tokenizer, TokenizerError> {
        let TokenizerParts { tokens, merges, token_types, pre, bos, eos, add_bos, eog } = parts;
        let settings = Settings { token_types, bos, eos, add_bos, eog };
        let model = ModelParts::BytePair { merges: merges.iter().map(String::as_str), pre: pre_kind(&pre)? };
        Tokenizer::build(tokens.iter().map(String::as_str), model, settings)
    }

    /// Builds a SentencePiece tokenizer from its parts, checking them as
    /// [`Tokenizer::from_parts`] does, and: one score per token, none NaN; every byte token
    /// spelled `<0xHH>`; a token for each of the 256 bytes (`<0xHH>`, or for an ASCII byte
    /// the one-character token), which byte fallback needs; an EOS id when `add_eos` is set.
    pub fn from_spm_parts(parts: SpmParts) -> Result<Tokenizer, TokenizerError> {
        let SpmParts { tokens, scores, token_types, bos, eos, add_bos, add_eos, add_space_prefix, eog } = parts;
        let settings = Settings { token_types, bos, eos, add_bos, eog };
        let model = ModelParts::<std::iter::Empty<&str>>::SentencePiece { scores, add_space_prefix, add_eos };
        Tokenizer::build(tokens.iter().map(String::as_str), model, settings)
    }

    /// Builds a tokenizer over borrowed texts: a GGUF file's arrays are read in place.
    fn build<'a>(
        tokens: impl ExactSizeIterator<Item = &'a str> + Clone,
        model: ModelParts<impl Iterator<Item = &'a str>>,
        settings: Settings,
    ) -> Result<Tokenizer, TokenizerError> {
        let Settings { token_types, bos, eos, add_bos, eog } = settings;
        let n = tokens.len();
        if n == 0 {
            return Err(TokenizerError::EmptyVocabulary);
        }
        if u32::try_from(n).is_err() {
            return Err(TokenizerError::TooManyTokens { count: n });
        }
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

        let (vocab, model) = match model {
            ModelParts::BytePair { merges, pre } => {
                let vocab = Vocab::new(tokens, &types, Spelling::ByteLevel);
                let model = BpeModel::new(&vocab, merges, PreTokenizer::new(pre)?)?;
                (vocab, Model::BytePair(Box::new(model)))
            }
            ModelParts::SentencePiece { scores, add_space_prefix, add_eos } => {
                if add_eos && eos.is_none() {
                    return Err(TokenizerError::AddEosWithoutEos);
                }
                let vocab = Vocab::new(tokens, &types, Spelling::SentencePiece);
                let model = SpmModel::new(&vocab, &types, scores, add_space_prefix, add_eos)?;
                (vocab, Model::SentencePiece(Box::new(model)))
            }
        };
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

        Ok(Tokenizer { vocab, types, model, specials, bos, eos, add_bos, eog })
    }

    /// Builds the tokenizer of a GGUF file from its `tokenizer.ggml.*` keys.
    ///
    /// Required: `model` (`gpt2` or `llama`) and `tokens`; for `gpt2` also `merges`, for
    /// `llama` also `scores` (f32 or integers; llama.cpp would take 0 for every score
    /// without it, which leaves merging to chance, so it is required here). Optional:
    /// `token_type` (all normal without it), `bos_token_id`, `eos_token_id`,
    /// `eot_token_id` and `eom_token_id` (both end generation).
    ///
    /// For `gpt2`: `pre` (llama.cpp's `default` without it, as llama.cpp does for old
    /// files), `add_bos_token` (without it: true for `llama-bpe`, false otherwise, as in
    /// llama.cpp).
    ///
    /// For `llama`, llama.cpp's defaults: BOS 1 and EOS 2 when the file names none (and the
    /// vocabulary is large enough), `add_bos_token` true, `add_eos_token` false,
    /// `add_space_prefix` true; `pre` is ignored, as llama.cpp ignores it.
    ///
    /// A key that is present with the wrong type is an error. Every error names the file:
    /// [`TokenizerError::Gguf`] does already, every other one comes inside
    /// [`TokenizerError::InFile`].
    pub fn from_gguf(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        Tokenizer::from_gguf_keys(file).map_err(|e| match e {
            e @ TokenizerError::Gguf(_) => e,
            e => TokenizerError::InFile { file: file.path().display().to_string(), source: Box::new(e) },
        })
    }

    fn from_gguf_keys(file: &GgufFile) -> Result<Tokenizer, TokenizerError> {
        let model = file.get_str(KEY_MODEL)?;
        let kind = TokenizerKind::from_gguf_name(model).ok_or_else(|| TokenizerError::UnsupportedModel {
            value: model.to_string(),
            supported: SUPPORTED_MODELS.to_string(),
        })?;
        let tokens = file.get_strs(KEY_TOKENS)?;
        let present = |key: &str| file.get(key).is_some();
        let token_types = if present(KEY_TOKEN_TYPE) { Some(file.get_i32_array(KEY_TOKEN_TYPE)?) } else { None };
        let optional_id = |key: &str| if present(key) { file.get_u32(key).map(Some) } else { Ok(None) };
        let optional_bool = |key: &str| if present(key) { file.get_bool(key).map(Some) } else { Ok(None) };
        let eog = [optional_id(KEY_EOT)?, optional_id(KEY_EOM)?].into_iter().flatten().collect();
        match kind {
            TokenizerKind::BytePair => {
                let merges = file.get_strs(KEY_MERGES)?;
                let pre = if present(KEY_PRE) { file.get_str(KEY_PRE)?.to_string() } else { "default".to_string() };
                let add_bos = match optional_bool(KEY_ADD_BOS)? {
                    Some(b) => b,
                    None => PreTokenizerKind::from_name(&pre).is_some_and(PreTokenizerKind::adds_bos_by_default),
                };
                let settings =
                    Settings { token_types, bos: optional_id(KEY_BOS)?, eos: optional_id(KEY_EOS)?, add_bos, eog };
                Tokenizer::build(tokens, ModelParts::BytePair { merges, pre: pre_kind(&pre)? }, settings)
            }
            TokenizerKind::SentencePiece => {
                let scores = if file.get_array(KEY_SCORES)?.elem_type().is_integer() {
                    file.get_i32_array(KEY_SCORES)?.into_iter().map(|s| s as f32).collect()
                } else {
                    file.get_f32_array(KEY_SCORES)?
                };
                // llama.cpp's defaults for "llama", dropped when past the vocabulary.
                let default_id = |id: u32| ((id as usize) < tokens.len()).then_some(id);
                let settings = Settings {
                    token_types,
                    bos: optional_id(KEY_BOS)?.or(default_id(1)),
                    eos: optional_id(KEY_EOS)?.or(default_id(2)),
                    add_bos: optional_bool(KEY_ADD_BOS)?.unwrap_or(true),
                    eog,
                };
                let model = ModelParts::<std::iter::Empty<&str>>::SentencePiece {
                    scores,
                    add_space_prefix: optional_bool(KEY_ADD_SPACE_PREFIX)?.unwrap_or(true),
                    add_eos: optional_bool(KEY_ADD_EOS)?.unwrap_or(false),
                };
                Tokenizer::build(tokens, model, settings)
            }
        }
    }

    /// Encodes `text` to token ids.
    ///
    /// With `add_special`, BOS comes first when the vocabulary's `add_bos_token` is set
    /// (and, for SentencePiece, EOS last when `add_eos_token` is). With `parse_special`,
    /// the texts of control (and unknown) tokens written in `text`, such as `<|im_start|>`
    /// or `<s>`, become those tokens; without it they are encoded as plain text.
    /// User-defined tokens are matched in either case, as llama.cpp does.
    pub fn encode(&self, text: &str, add_special: bool, parse_special: bool) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 2);
        if add_special && self.add_bos {
            out.extend(self.bos);
        }
        let fragments = special::partition(text, &self.specials, parse_special);
        match &self.model {
            Model::BytePair(m) => {
                for fragment in fragments {
                    match fragment {
                        special::Fragment::Token(id) => out.push(id),
                        special::Fragment::Text(t) => m.encode_text(&self.vocab, t, &mut out),
                    }
                }
            }
            Model::SentencePiece(m) => {
                m.encode_fragments(&self.vocab, &fragments, &mut out);
                if add_special && m.add_eos() {
                    out.extend(self.eos);
                }
            }
        }
        out
    }

    /// The bytes token `id` stands for, alone: the byte-level alphabet undone (BPE) or `▁`
    /// as a space and byte tokens as their byte (SentencePiece) for normal tokens; the
    /// stored text for control, unknown and user-defined tokens (callers that want control
    /// tokens to produce nothing check [`Tokenizer::is_control`], or use
    /// [`StreamDecoder::skip_control`]). A SentencePiece piece keeps its leading space, as
    /// llama.cpp's `token_to_piece` does for generated tokens. An id past the vocabulary
    /// gives no bytes.
    pub fn decode_token(&self, id: u32) -> &[u8] {
        self.vocab.piece(id)
    }

    /// Decodes a whole sequence of ids to text; invalid UTF-8 (an incomplete character at
    /// either end) becomes U+FFFD. With SentencePiece's `add_space_prefix`, one space comes
    /// off the front of the first piece, the one [`Tokenizer::encode`] put there (llama.cpp's
    /// `detokenize`; when the first id is BOS, its text has no space and the next piece
    /// keeps its own).
    pub fn decode(&self, ids: &[u32]) -> String {
        let strip = matches!(&self.model, Model::SentencePiece(m) if m.add_space_prefix());
        let mut bytes = Vec::new();
        for (i, &id) in ids.iter().enumerate() {
            let piece = self.decode_token(id);
            let piece = if i == 0 && strip { piece.strip_prefix(b" ").unwrap_or(piece) } else { piece };
            bytes.extend_from_slice(piece);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// A streaming decoder over this tokenizer.
    pub fn stream_decoder(&self) -> StreamDecoder<'_> {
        StreamDecoder::new(self)
    }

    /// Which algorithm this tokenizer runs.
    pub fn kind(&self) -> TokenizerKind {
        match self.model {
            Model::BytePair(_) => TokenizerKind::BytePair,
            Model::SentencePiece(_) => TokenizerKind::SentencePiece,
        }
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
    /// whose text ends a turn (`<|im_end|>`, `<|eot_id|>`, `<|endoftext|>`, `</s>`, ...).
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

    /// The stored text of token `id` (byte-level spelling, or `▁` for spaces, for normal
    /// tokens).
    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.vocab.text(id)
    }

    /// The id of the token whose stored text is `text`.
    pub fn token_id(&self, text: &str) -> Option<u32> {
        self.vocab.id(text)
    }

    /// The pre-tokenizer in use. SentencePiece splits no words and reports `default`, as
    /// llama.cpp's `pre_type` does for it.
    pub fn pre_tokenizer(&self) -> PreTokenizerKind {
        match &self.model {
            Model::BytePair(m) => m.pre().kind(),
            Model::SentencePiece(_) => PreTokenizerKind::Default,
        }
    }
}
