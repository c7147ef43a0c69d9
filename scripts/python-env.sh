#!/usr/bin/env bash
# Prepares a Python virtual environment for tests, with the packages pinned in one
# requirements file, installed from PyPI with pip, and prints the path of its python:
#   scripts/python-env.sh           the server's client test: the official `openai` package
#                                   (server/tests/openai/requirements.txt), what
#                                   PUREBEE_TEST_PYTHON wants;
#   scripts/python-env.sh convert   the converter's tests: numpy, safetensors, tokenizers and
#                                   gguf-py (tests/convert/requirements.txt), what
#                                   PUREBEE_CONVERT_PYTHON wants;
#   scripts/python-env.sh browser   Playwright's client (tests/browser/requirements.txt;
#                                   scripts/browser-env.sh adds the browser).
# Each lives in target/python-NAME (ignored by git, removed by `cargo clean`); made once, made
# again when its pins change.
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-openai}
case "$name" in
  openai) requirements=server/tests/openai/requirements.txt ;;
  convert) requirements=tests/convert/requirements.txt ;;
  browser) requirements=tests/browser/requirements.txt ;;
  *) echo "error: scripts/python-env.sh: unknown environment '$name' (openai, convert or browser)" >&2; exit 2 ;;
esac
venv=target/python-$name
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements.txt"; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ] || ! "$python" -m venv --help >/dev/null 2>&1; then
  echo "error: the $name tests need Python 3 with venv (python3 -m venv)" >&2
  exit 1
fi
rm -rf "$venv"
mkdir -p target
echo "purebee: installing the packages pinned in $requirements into $venv" >&2
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
cp "$requirements" "$venv/requirements.txt"
echo "$PWD/$venv/bin/python"
