//! # purebee-loader: from a model file and an engine choice to a loaded model
//!
//! The one way the command line and the server open a model: the GGUF file from a path or
//! from bytes in memory ([`ModelSource`]), its tokenizer and chat template, the engine
//! (`ref`, `cpu`, `gpu`, or `auto`: a real GPU when there is one, else the CPU engine), the
//! weights loaded on it and the KV cache the front end asks for ([`ContextRequest`]), all
//! in one [`LoadedModel`]. Engines come back as `Box<dyn Engine + Send>`, so a server can
//! move one onto the thread that runs it.
//!
//! In two steps, [`ModelFile::open`] then [`ModelFile::load`], a front end can check the
//! file and encode its prompt before the weights load, and say which engine runs before
//! they do; [`open`] does both at once.
//!
//! It must not know terminals, HTTP or model names in a store: callers resolve a name to a
//! path and say on stderr (or in a log) what the engine reports.

#![forbid(unsafe_code)]

mod context;
mod engine_choice;
mod error;
mod model_file;

pub use context::{ContextRequest, NoContext, SessionContext, SharedContext, SESSION_CONTEXT_CAP};
pub use engine_choice::{CreatedEngine, DynEngine, EngineChoice, EngineSpec};
pub use error::LoadError;
pub use model_file::{open, LoadedModel, ModelFile, ModelSource, ModelText};
/// Called first in a front end's `main`: see the GPU engine's documentation.
pub use purebee_engine_gpu::quiet_display_probing;
