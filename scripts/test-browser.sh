#!/usr/bin/env bash
# Runs the browser tests of the chat page that `purebee-rs serve` serves at /
# (tests/browser/serve_page.py): Debian's headless Chromium driven by Playwright, both
# installed first when missing (scripts/browser-env.sh). Tests target/debug/purebee-rs, built
# here when it is missing or older than the server's sources (the page is compiled into it).
# Arguments go to the test script: `--screenshot PATH` saves the page mid-conversation.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(./scripts/browser-env.sh)
binary=target/debug/purebee-rs
if [ ! -x "$binary" ] || [ -n "$(find server/src -newer "$binary" -print -quit)" ]; then
  cargo build -p purebee-cli --locked
fi
"$python" tests/browser/serve_page.py "$@"
