//! The engine's only unsafe code: SIMD kernels (`std::arch` intrinsics behind run-time
//! feature detection) and the thread pool that lends a closure to its workers. Every
//! `unsafe` block says why it is sound in a `// SAFETY:` comment; the code outside this
//! module is safe Rust (`tests/tests/architecture.rs` checks both).
//!
//! Organised by kernel family. The families with several SIMD levels each have a folder
//! (`ternary/`, `linear/`, `linear_int8/`): the public dispatchers in its `mod.rs`, one
//! file per level (`avx2`, `avx512`, `x86`, `neon`), and the family's shared layouts or
//! portable decoders in a file of their own that the levels use; the one-file families
//! (`attention`, `norm`, `silu`) keep their x86 code beside the portable one. What several
//! families share lives in leaf modules that call no kernel: `f16` (scale widening),
//! `hsum` (x86 horizontal sums), `neon` (NEON loads and the int8 dot product), `rounding`
//! (activation rounding in AVX2 lanes), `math` and `simd`. Uses point one way only, down
//! this list: dispatchers, levels, the family's shared file, leaves (a dispatcher may call
//! another family's: `ternary::tokens` the one-token kernel, `attention` LINEAR's `dot`).

pub mod attention;
pub mod cross_check;
pub mod f16;
#[cfg(target_arch = "x86_64")]
mod hsum;
pub mod linear;
pub mod linear_int8;
pub(crate) mod math;
#[cfg(target_arch = "aarch64")]
mod neon;
pub mod norm;
pub mod pool;
mod rounding;
pub mod silu;
pub mod simd;
pub mod ternary;

pub use simd::{Simd, SimdLevel};
