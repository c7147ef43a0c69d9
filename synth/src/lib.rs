//! # purebee-synth: synthetic GGUF models of any shape
//!
//! The one builder of made-up models, used by `purebee-rs synth` (benchmarks of a real shape
//! without a download), the fuzz corpus (small models of every architecture and weight
//! type) and tests that need a model the fixtures do not have (another vocabulary, another
//! shape). A [`ModelSpec`] says the architecture, the hyper-parameters ([`ModelShape`]),
//! the storage type of each kind of tensor and the [`Vocabulary`]; [`build`] draws every
//! value from a seed and returns a [`GgufWriter`](purebee_memory::gguf::GgufWriter).
//!
//! **Determinism.** Every tensor draws from its own SplitMix64 stream seeded from
//! `(seed, tensor index)`. Normal values are Irwin–Hall sums of twelve 21-bit uniforms,
//! exact in f64, and the linear scales need only a correctly rounded `sqrt`: no libm
//! transcendental is involved, so a seed gives the same bytes on every platform and build.
//!
//! It must not know engines, files on disk or front ends: writing the model is the caller's.

#![forbid(unsafe_code)]

mod build;
mod draws;
mod plan;
mod shape;
mod vocabulary;

pub use build::{build, file_type, SynthError};
pub use draws::{tensor_values, SynthDraws};
pub use plan::{plan, PlannedTensor, Role};
pub use shape::{Arch, ModelShape, ModelSpec, BITNET_2B, TINY};
pub use vocabulary::{Vocabulary, BOS, EOS};

#[cfg(test)]
mod tests;
