#!/usr/bin/env bash
# Prepares the Python environment of the server's client test: a virtual environment with
# the official `openai` package and its dependencies at the versions pinned in
# server/tests/openai/requirements.txt, installed from PyPI with pip. Prints the path of its
# python (what PUREBEE_TEST_PYTHON wants). Made once; made again when the pins change.
# The environment lives in target/python-openai (ignored by git, removed by `cargo clean`).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/python-openai
requirements=server/tests/openai/requirements.txt
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements.txt"; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ] || ! "$python" -m venv --help >/dev/null 2>&1; then
  echo "error: the server's client test needs Python 3 with venv (python3 -m venv)" >&2
  exit 1
fi
rm -rf "$venv"
mkdir -p target
echo "purebee: installing the pinned openai client into $venv" >&2
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
cp "$requirements" "$venv/requirements.txt"
echo "$PWD/$venv/bin/python"
