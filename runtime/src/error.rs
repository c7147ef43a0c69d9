//! Errors of loading and running a model; each names the file, key, tensor or value at fault.

use purebee_isa::{ExecError, IsaError};
use purebee_memory::gguf::GgufError;
use purebee_memory::DType;

use crate::sampler::SamplerError;

/// What went wrong loading or running a model.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The GGUF file could not be read, or a key is missing or mistyped.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// `general.architecture` names an architecture purebee does not run.
    #[error("{file}: architecture '{arch}' is not supported (supported: {supported})")]
    UnsupportedArchitecture {
        /// The file.
        file: String,
        /// The architecture found.
        arch: String,
        /// The supported architectures, comma separated.
        supported: String,
    },
    /// Metadata values that contradict each other or the tensors.
    #[error("{file}: {key}: {reason}")]
    Inconsistent {
        /// The file.
        file: String,
        /// The key (or tensor) at fault.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A tensor with the wrong shape for its role.
    #[error("{file}: tensor '{tensor}' has ne {got:?}, expected {expected:?}")]
    TensorShape {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// The expected dims, ggml order.
        expected: Vec<usize>,
        /// The dims found, ggml order.
        got: Vec<usize>,
    },
    /// A tensor with the wrong type for its role.
    #[error("{file}: tensor '{tensor}' is {got}, expected {expected}")]
    TensorType {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// The type found.
        got: DType,
        /// The types allowed.
        expected: String,
    },
    /// A request longer than the context.
    #[error("{tokens} tokens at position {pos} do not fit the context of {n_ctx} tokens (use -c to enlarge it, up to the model's {n_ctx_train})")]
    ContextFull {
        /// Tokens requested.
        tokens: usize,
        /// Position of the first.
        pos: usize,
        /// The context size.
        n_ctx: usize,
        /// The model's training context.
        n_ctx_train: usize,
    },
    /// A token id outside the vocabulary.
    #[error("token id {id} is outside the vocabulary of {vocab} tokens")]
    TokenOutOfRange {
        /// The id.
        id: u32,
        /// The vocabulary size.
        vocab: usize,
    },
    /// A shared KV cache without the free pages a sequence's new positions need.
    #[error("{tokens} tokens at position {pos} of sequence {seq}: the shared KV cache of {n_ctx} positions has no free page left (other sequences hold them)")]
    CacheFull {
        /// Tokens requested.
        tokens: usize,
        /// Position of the first.
        pos: usize,
        /// The sequence.
        seq: usize,
        /// The cache's positions in all.
        n_ctx: usize,
    },
    /// A batched pass asked for something the cache cannot do (a sequence outside it, named
    /// twice, or starting past what it holds).
    #[error("batched pass: {reason}")]
    BadBatch {
        /// What is wrong.
        reason: String,
    },
    /// An empty request.
    #[error("no tokens to process")]
    NoTokens,
    /// A session run on a model other than the one that opened it.
    #[error("session '{session}' belongs to another model")]
    ForeignSession {
        /// The session's name.
        session: String,
    },
    /// [`crate::Model::submit_greedy`] asked to run the token a decode step left on the
    /// device, but the session's last step was not a decode step just before `pos`.
    #[error("session '{session}': no greedy token for position {pos} is waiting on the engine")]
    NoTokenOnEngine {
        /// The session's name.
        session: String,
        /// The position asked for.
        pos: usize,
    },
    /// A program could not be built (a bug in a model script, reported with its cause).
    #[error("building the model's program: {0}")]
    Isa(#[from] IsaError),
    /// The engine failed while running.
    #[error("engine: {0}")]
    Exec(#[from] ExecError),
    /// Invalid sampler settings.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// A tokenizer that cannot be built from the file.
    #[error(transparent)]
    Tokenizer(#[from] crate::tokenizer::TokenizerError),
}
