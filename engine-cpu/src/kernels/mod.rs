//! The engine's only unsafe code: SIMD kernels (`std::arch` intrinsics behind run-time
//! feature detection) and the thread pool that lends a closure to its workers. Every
//! `unsafe` block says why it is sound in a `// SAFETY:` comment; the code outside this
//! module is safe Rust (`tests/tests/architecture.rs` checks both).

pub mod attention;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub mod cross_check;
pub mod f16;
#[cfg(target_arch = "x86_64")]
mod hsum;
pub mod linear;
pub mod linear_int8;
pub(crate) mod math;
#[cfg(target_arch = "aarch64")]
pub(crate) mod neon;
pub mod norm;
pub mod pool;
mod rounding;
pub mod silu;
pub mod simd;
pub mod ternary;
pub mod ternary_tokens;

pub use simd::{Simd, SimdLevel};
