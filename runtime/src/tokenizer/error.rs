//! The errors of building a tokenizer ([`TokenizerError`]); each names the GGUF key, the
//! token or the merge at fault.

use purebee_memory::gguf::GgufError;

/// Why a tokenizer could not be built from a GGUF file or from its parts. Encoding and
/// decoding never fail once a [`super::Tokenizer`] exists.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A required `tokenizer.ggml.*` key is missing, or a key has the wrong type (the
    /// GGUF error names the file and the key).
    #[error("tokenizer: {0}")]
    Gguf(#[from] GgufError),
    /// `tokenizer.ggml.model` names a tokenizer this crate does not implement.
    #[error("tokenizer.ggml.model is '{value}', which is not supported (supported: {supported})")]
    UnsupportedModel {
        /// The value found.
        value: String,
        /// The supported values, comma separated.
        supported: String,
    },
    /// `tokenizer.ggml.pre` names a pre-tokenizer this crate does not implement.
    #[error("tokenizer.ggml.pre is '{value}', which is not supported (supported: {supported})")]
    UnsupportedPre {
        /// The value found.
        value: String,
        /// The supported values, comma separated.
        supported: String,
    },
    /// `tokenizer.ggml.tokens` is empty.
    #[error("tokenizer.ggml.tokens is empty")]
    EmptyVocabulary,
    /// More tokens than a `u32` id can address.
    #[error("tokenizer.ggml.tokens has {count} tokens; ids are u32, so at most {} are allowed", u32::MAX)]
    TooManyTokens {
        /// The token count.
        count: usize,
    },
    /// `tokenizer.ggml.token_type` has another length than `tokenizer.ggml.tokens`.
    #[error("tokenizer.ggml.token_type has {types} entries but tokenizer.ggml.tokens has {tokens}")]
    TokenTypeCount {
        /// Entries in the type array.
        types: usize,
        /// Entries in the token array.
        tokens: usize,
    },
    /// A token type outside llama.cpp's `llama_token_type` (0..=6).
    #[error("tokenizer.ggml.token_type: token {id} ('{token}') has type {value}; known types are 0..=6 (1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)")]
    UnknownTokenType {
        /// The token id.
        id: u32,
        /// The token's text.
        token: String,
        /// The type value found.
        value: i32,
    },
    /// A merge that is not two parts separated by a space.
    #[error("tokenizer.ggml.merges[{rank}] = '{merge}' is not of the form 'left right'")]
    MalformedMerge {
        /// The merge's index (its rank).
        rank: usize,
        /// The merge text.
        merge: String,
    },
    /// A merge whose left part, right part or result is not a token of the vocabulary.
    #[error("tokenizer.ggml.merges[{rank}] = '{merge}' names '{token}', which is not in tokenizer.ggml.tokens")]
    MergeTokenNotInVocab {
        /// The merge's index (its rank).
        rank: usize,
        /// The merge text.
        merge: String,
        /// The missing token (a part, or the two parts joined).
        token: String,
    },
    /// A special token id (bos, eos, an end-of-generation id) past the vocabulary.
    #[error("{which} = {id} is out of range: the vocabulary has {n_tokens} tokens")]
    SpecialIdOutOfRange {
        /// Which id (the GGUF key or field name).
        which: String,
        /// The id.
        id: u32,
        /// The vocabulary size.
        n_tokens: usize,
    },
    /// BOS must be added but no BOS id is set.
    #[error("tokenizer.ggml.add_bos_token is true but tokenizer.ggml.bos_token_id is not set")]
    AddBosWithoutBos,
    /// EOS must be added but no EOS id is set.
    #[error("tokenizer.ggml.add_eos_token is true but tokenizer.ggml.eos_token_id is not set")]
    AddEosWithoutEos,
    /// `tokenizer.ggml.scores` has another length than `tokenizer.ggml.tokens`.
    #[error("tokenizer.ggml.scores has {scores} entries but tokenizer.ggml.tokens has {tokens}")]
    ScoreCount {
        /// Entries in the score array.
        scores: usize,
        /// Entries in the token array.
        tokens: usize,
    },
    /// A SentencePiece score that is NaN, which cannot be ranked against the others.
    #[error("tokenizer.ggml.scores: token {id} ('{token}') has a score that is not a number")]
    ScoreNotANumber {
        /// The token id.
        id: u32,
        /// The token's text.
        token: String,
    },
    /// A SentencePiece token of type 6 (byte) whose text is not `<0xHH>`.
    #[error("tokenizer.ggml.token_type: token {id} ('{token}') has type 6 (byte) but is not spelled '<0xHH>'")]
    MalformedByteToken {
        /// The token id.
        id: u32,
        /// The token's text.
        token: String,
    },
    /// A SentencePiece vocabulary without a token for one of the 256 bytes, which byte
    /// fallback needs for characters the vocabulary lacks.
    #[error("tokenizer.ggml.tokens has no token '{token}' for byte fallback of byte {byte:#04x}")]
    MissingByteToken {
        /// The byte.
        byte: u8,
        /// The token text looked for (`<0xHH>`).
        token: String,
    },
    /// The tokenizer of a GGUF file could not be built: the file, and what is wrong with its
    /// `tokenizer.ggml.*` keys ([`super::Tokenizer::from_gguf`] wraps every error but
    /// [`TokenizerError::Gguf`], which names the file already). [`TokenizerError::cause`]
    /// gives the inner error.
    #[error("{file}: {source}")]
    InFile {
        /// The file.
        file: String,
        /// What is wrong.
        #[source]
        source: Box<TokenizerError>,
    },
    /// A built-in pre-tokenizer regex failed to compile (a bug in this crate).
    #[error("pre-tokenizer regex '{pattern}' does not compile: {source}")]
    Regex {
        /// The pattern.
        pattern: &'static str,
        /// The regex crate's error.
        #[source]
        source: Box<regex::Error>,
    },
}

impl TokenizerError {
    /// What is wrong, without the file: the error inside [`TokenizerError::InFile`], or
    /// this error itself.
    pub fn cause(&self) -> &TokenizerError {
        match self {
            TokenizerError::InFile { source, .. } => source.cause(),
            other => other,
        }
    }
}
