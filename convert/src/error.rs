//! Why a conversion failed: each error names the file, and the tensor or key, at fault.

use std::path::PathBuf;

use purebee_memory::gguf::GgufWriteError;
use purebee_memory::quant::encode::EncodeError;

/// Why a checkpoint could not be converted. Nothing is left at the output path.
#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    /// A file could not be read, mapped or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The system's error.
        source: std::io::Error,
    },
    /// A file the checkpoint needs is not in its folder.
    #[error("{path}: missing ({why})")]
    Missing {
        /// The file looked for.
        path: PathBuf,
        /// Why it is needed.
        why: String,
    },
    /// A JSON file is not valid JSON, or lacks a key, or has a key of the wrong kind.
    #[error("{path}: {reason}")]
    Json {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// A safetensors file is damaged: its header, a tensor's dtype, shape or byte range.
    #[error("{path}: {reason}")]
    Safetensors {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the tensor.
        reason: String,
    },
    /// `config.json` names an architecture this converter does not know.
    #[error("{path}: architecture '{name}' is not supported (supported: {supported})")]
    Architecture {
        /// config.json.
        path: PathBuf,
        /// The architecture named.
        name: String,
        /// Those supported.
        supported: &'static str,
    },
    /// A tensor does not belong to the architecture, is missing, or has the wrong shape or
    /// dtype for the configuration.
    #[error("{path}: tensor '{tensor}': {reason}")]
    Tensor {
        /// The checkpoint file holding it (or the folder, for a missing tensor).
        path: PathBuf,
        /// The checkpoint's tensor name.
        tensor: String,
        /// What is wrong.
        reason: String,
    },
    /// The tokenizer cannot be carried into GGUF.
    #[error("{path}: {reason}")]
    Tokenizer {
        /// tokenizer.json or tokenizer_config.json.
        path: PathBuf,
        /// What is wrong, naming the key or token.
        reason: String,
    },
    /// The output type cannot store a tensor (its rows are not whole blocks).
    #[error("tensor '{tensor}': {source}")]
    Encode {
        /// The GGUF tensor name.
        tensor: String,
        /// The encoder's error.
        source: EncodeError,
    },
    /// The GGUF writer refused an entry or a tensor.
    #[error("{path}: {source}")]
    Write {
        /// The output file.
        path: PathBuf,
        /// The writer's error.
        source: GgufWriteError,
    },
    /// The output path is the input, a folder, or has no file name.
    #[error("{path}: {reason}")]
    Output {
        /// The output path.
        path: PathBuf,
        /// Why it cannot be written.
        reason: String,
    },
    /// Creating, syncing or renaming the output's temporary file failed.
    #[error(transparent)]
    Atomic(#[from] purebee_hub::AtomicWriteError),
}
