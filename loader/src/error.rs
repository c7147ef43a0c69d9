//! Why an engine could not be created or a model not loaded; each names the flag, variable
//! or file at fault.

use purebee_engine_cpu::CpuError;
use purebee_engine_gpu::GpuError;
use purebee_memory::gguf::GgufError;
use purebee_runtime::tokenizer::TokenizerError;
use purebee_runtime::ModelError;

/// What went wrong choosing an engine or loading a model.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A thread count of 0.
    #[error("--threads 0: the CPU engine needs at least one thread")]
    ZeroThreads,
    /// `PUREBEE_CPU_SIMD` names no SIMD level.
    #[error("PUREBEE_CPU_SIMD={value}: expected one of {expected}")]
    SimdVariable {
        /// The value found.
        value: String,
        /// The levels allowed, comma separated.
        expected: String,
    },
    /// The CPU engine could not start (a forced SIMD level this CPU lacks, ...).
    #[error(transparent)]
    Cpu(#[from] CpuError),
    /// The GPU engine could not start.
    #[error(transparent)]
    Gpu(#[from] GpuError),
    /// The file is not a readable GGUF.
    #[error(transparent)]
    Gguf(Box<GgufError>),
    /// The model in the file cannot be loaded.
    #[error(transparent)]
    Model(Box<ModelError>),
    /// The KV cache asked for cannot be opened.
    #[error("creating a KV cache of {n_ctx} positions: {source}")]
    Cache {
        /// Its positions.
        n_ctx: usize,
        /// The runtime's error.
        source: Box<ModelError>,
    },
    /// The file's tokenizer cannot be built (the error names the file).
    #[error(transparent)]
    Tokenizer(Box<TokenizerError>),
}

// Boxed: they are large, and every result of this crate carries the enum.
impl From<GgufError> for LoadError {
    fn from(e: GgufError) -> LoadError {
        LoadError::Gguf(Box::new(e))
    }
}

impl From<TokenizerError> for LoadError {
    fn from(e: TokenizerError) -> LoadError {
        LoadError::Tokenizer(Box::new(e))
    }
}

impl From<ModelError> for LoadError {
    fn from(e: ModelError) -> LoadError {
        LoadError::Model(Box::new(e))
    }
}
