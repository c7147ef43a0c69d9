//! # purebee-engine-cpu: the native CPU engine
//!
//! Every ISA instruction on the host's cores, fast: weights read in place from the mapped
//! GGUF file, BITLINEAR as int8 activations × 2-bit codes with exact integer sums, LINEAR
//! decoding block-quantized rows on the fly, SIMD kernels chosen at run time from the CPU's
//! features ([`SimdLevel`]), and a persistent thread pool that spreads one instruction
//! over the cores in about a microsecond. It is checked against the reference engine,
//! instruction by instruction, in `tests/`.
//!
//! It must not know about models (what a weight or a tensor is for), nor anything
//! about GPUs. `unsafe` is confined to [`kernels`].

#![deny(unsafe_code)]

mod engine;
#[allow(unsafe_code)]
pub mod kernels;
mod ops;
mod profile;
mod store;

pub use engine::{logical_cpus, physical_cores, CpuEngine, CpuError, CpuOptions};
pub use kernels::{Simd, SimdLevel};
