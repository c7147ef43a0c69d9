//! # purebee-web: purebee-rs in a browser tab
//!
//! The engines compiled to `wasm32-unknown-unknown` and driven from JavaScript: a GGUF file
//! fetched into memory ([`WebModel::load`] takes its bytes without a copy), the GPU engine
//! on the browser's WebGPU or the CPU engine's portable kernels on one thread, the
//! tokenizer, chat template and sampler. A browser cannot block on its GPU (a read's
//! `mapAsync` resolves only when the page's event loop runs), so generation goes a step at
//! a time in two halves with the page's event loop in between ([`session`]).
//!
//! The JavaScript API (`bindings`, wasm32 only) is what `web/www/app.js` uses; the page
//! and how to build it are in `web/README.md`. It must not know the page: no DOM here.

#![forbid(unsafe_code)]

pub mod engine_check;
pub mod session;

#[cfg(target_arch = "wasm32")]
mod bindings;

pub use session::{Finish, GenerateRequest, WebModel};

/// What fails in the tab, said as the page shows it.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    /// The file is no GGUF, or a damaged one.
    #[error(transparent)]
    Gguf(#[from] purebee_memory::gguf::GgufError),
    /// The file's vocabulary cannot be read.
    #[error(transparent)]
    Tokenizer(#[from] purebee_runtime::tokenizer::TokenizerError),
    /// The chat template failed on these messages.
    #[error(transparent)]
    Chat(#[from] purebee_runtime::chat::ChatError),
    /// Loading or running the model failed.
    #[error("{0}")]
    Model(String),
    /// The engine asked for cannot run here.
    #[error("{0}")]
    Engine(String),
    /// A chat was asked of a model whose file has no usable chat template.
    #[error("this model has no chat template: use a text completion")]
    NoChatTemplate,
    /// A step was asked with no generation running, or out of order.
    #[error("no generation is running, or its step was already begun")]
    NotGenerating,
}
