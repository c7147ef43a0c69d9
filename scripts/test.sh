#!/usr/bin/env bash
# Builds and runs every test of the workspace (the README's test command; .ci/run calls it).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --workspace --locked --all-targets
cargo test --workspace --locked
