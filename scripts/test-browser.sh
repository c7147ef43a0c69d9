#!/usr/bin/env bash
# Runs the browser tests in Debian's headless Chromium driven by Playwright, both installed
# first when missing (scripts/browser-env.sh):
# - the chat page that `purebee-rs serve` serves at / (tests/browser/serve_page.py), against
#   target/debug/purebee-rs, built here when it is missing or older than the server's
#   sources (the page is compiled into it); `--screenshot PATH` saves the page
#   mid-conversation;
# - every WGSL module of the GPU engine compiled by Chromium's own compiler
#   (tests/browser/wgsl_compile.py);
# - built into web/dist first (scripts/build-web.sh): the engine check page against the
#   reference engine, on WebGPU and on the wasm CPU engine
#   (tests/browser/engine_check_page.py), and the demo page, which must write the command
#   line's greedy text for the tiny fixtures on both engines and under `engine=auto`
#   (tests/browser/wasm_page.py).
set -euo pipefail
cd "$(dirname "$0")/.."
python=$(./scripts/browser-env.sh)
binary=target/debug/purebee-rs
if [ ! -x "$binary" ] || [ -n "$(find server/src -newer "$binary" -print -quit)" ]; then
  cargo build -p purebee-cli --locked
fi
"$python" tests/browser/serve_page.py "$@"
"$python" tests/browser/wgsl_compile.py
./scripts/build-web.sh
"$python" tests/browser/engine_check_page.py
"$python" tests/browser/wasm_page.py --engines cpu
# WebGPU on SwiftShader takes about a second a token on two cores: fewer tokens there.
"$python" tests/browser/wasm_page.py --engines webgpu --tokens 10
"$python" tests/browser/wasm_page.py --engines auto --tokens 10 --models tiny_b158_i2_s
