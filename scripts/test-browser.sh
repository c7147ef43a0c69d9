#!/usr/bin/env bash
# Runs the browser tests in Debian's headless Chromium driven by Playwright, both installed
# first when missing (scripts/browser-env.sh):
# - the chat page that `purebee-rs serve` serves at / (tests/browser/serve_page.py), against
#   target/debug/purebee-rs, built here when it is missing or older than the server's
#   sources (the page is compiled into it); `--screenshot PATH` saves the page
#   mid-conversation;
# - the wasm demo page (tests/browser/wasm_page.py): built into web/dist first
#   (scripts/build-web.sh), it must write the command line's greedy text for the tiny
#   fixtures on the wasm CPU engine, and under `engine=auto`.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(./scripts/browser-env.sh)
binary=target/debug/purebee-rs
if [ ! -x "$binary" ] || [ -n "$(find server/src -newer "$binary" -print -quit)" ]; then
  cargo build -p purebee-cli --locked
fi
"$python" tests/browser/serve_page.py "$@"
./scripts/build-web.sh
"$python" tests/browser/wasm_page.py --engines cpu,auto
