//! # purebee-engine-ref: the reference engine
//!
//! Every ISA instruction in the plainest correct code: scalar loops with a shape comment on
//! every buffer, f64 or exact integer accumulation, one rounding to f32 per result. It is
//! the ISA's semantics made executable, the first engine users can run, and the oracle that
//! every other engine is tested against. Clarity beats speed; the only parallelism is rayon
//! over independent output rows, which keeps every result bit-for-bit deterministic.
//!
//! It must not know about models (what a weight is for) nor anything about GPUs.

#![forbid(unsafe_code)]

mod access;
mod engine;
mod ops;

pub use engine::RefEngine;
