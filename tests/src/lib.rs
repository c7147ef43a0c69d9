//! # purebee-tests: cross-crate tests
//!
//! Shared helpers for the tests under `tests/tests/`: where the committed fixtures are, and
//! a reader for the `.npy` golden logits. The tests themselves check what no single crate
//! can: real GGUF files through every layer, the architecture's invariants, and (with the
//! GPU engine) differential tests against the reference engine.
//!
//! It must not be a dependency of any other crate.

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The repository's `fixtures/` folder.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// A file of `fixtures/bitnet-tiny/`.
pub fn tiny(name: &str) -> PathBuf {
    fixtures_dir().join("bitnet-tiny").join(name)
}

/// The tiny BitNet models committed in `fixtures/bitnet-tiny`, without `.gguf`.
pub const TINY_MODELS: [&str; 7] = [
    "tiny_b158_i2_s",
    "tiny_b158_tq2_0",
    "tiny_b158_tq1_0",
    "tiny_b158_f32",
    "tiny_bitnet_tq2_0",
    "tiny_bitnet_f32",
    "tiny_bitnet_tq2_0_scaletensors",
];
