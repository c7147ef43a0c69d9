//! # purebee-runtime: models written in ISA calls
//!
//! Models (BitNet b1.58 and Llama) as programs of ISA instructions, with the tokenizer, the
//! sampler, the generation loop, the KV cache, and chat (templates, multi-turn
//! conversations). It builds programs with `purebee_isa::ProgramBuilder` and runs them
//! through the `purebee_isa::Engine` trait.
//!
//! It must not know wgpu or any engine's internals: it depends on `isa` and `memory` only.

#![forbid(unsafe_code)]

pub mod batch;
pub mod chat;
pub mod sampler;
pub mod speculative;
pub mod tokenizer;

mod config;
mod error;
mod forward;
mod generate;
mod in_flight;
mod model;
mod rows;
mod weights;

pub use config::{Architecture, FfnActivation, ModelConfig};
pub use error::ModelError;
pub use forward::LogitsRows;
pub use generate::{
    generate, generate_reusing_cache, GenerateOptions, Generation, Generator, NextRows, Prefill, StepInFlight,
    StopReason, TokenLogprobs,
};
pub use model::{KvCache, KvCacheTypes, Model, PendingToken, QuantizedActivations, Session};
