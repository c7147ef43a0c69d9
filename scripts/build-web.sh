#!/usr/bin/env bash
# Builds the browser demo into web/dist: the wasm module (purebee-web, release, for
# wasm32-unknown-unknown with SIMD128), its JavaScript glue (wasm-bindgen, at the version
# Cargo.lock pins) and the page (web/www). Installs the wasm32 target and wasm-bindgen-cli
# when missing. Serve web/dist over http://localhost (WebGPU and the Cache API need a secure
# context) and open index.html.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
  echo "purebee: installing the wasm32-unknown-unknown target" >&2
  rustup target add wasm32-unknown-unknown >&2
fi
# The CLI must be the exact version of the wasm-bindgen crate the module links.
version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' Cargo.lock)
if [ -z "$version" ]; then
  echo "error: no wasm-bindgen in Cargo.lock" >&2
  exit 1
fi
if ! wasm-bindgen --version 2>/dev/null | grep -qx "wasm-bindgen $version"; then
  echo "purebee: installing wasm-bindgen-cli $version (a few minutes, once)" >&2
  cargo install wasm-bindgen-cli --version "$version" >&2
fi

# Every browser with WebGPU, and every current one, runs SIMD128.
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="-C target-feature=+simd128"
cargo build --release --locked --target wasm32-unknown-unknown -p purebee-web
rm -rf web/dist
mkdir -p web/dist
wasm-bindgen --target web --no-typescript --out-dir web/dist/pkg \
  "${CARGO_TARGET_DIR:-target}/wasm32-unknown-unknown/release/purebee_web.wasm"
cp web/www/* web/dist/
echo "purebee: built web/dist ($(du -sh web/dist | cut -f1)); serve it on localhost and open index.html" >&2
