#!/usr/bin/env bash
# Prepares the browser tests of the served chat page (tests/browser/): Debian's Chromium at
# /usr/bin/chromium (installed with apt-get when missing) and a virtual environment with
# Playwright's Python client at the versions pinned in tests/browser/requirements.txt,
# installed from PyPI with pip. Prints the path of its python. Playwright drives the
# system's Chromium: `playwright install`, which downloads browser builds of its own, is
# never run. The environment lives in target/python-browser (ignored by git, removed by
# `cargo clean`); made once, made again when the pins change.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  echo "purebee: installing Debian's chromium package" >&2
  $sudo_cmd apt-get update -q >&2
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2
fi
venv=target/python-browser
requirements=tests/browser/requirements.txt
if [ -x "$venv/bin/python" ] && cmp -s "$requirements" "$venv/requirements.txt"; then
  echo "$PWD/$venv/bin/python"
  exit 0
fi
python=$(command -v python3 || command -v python || true)
if [ -z "$python" ] || ! "$python" -m venv --help >/dev/null 2>&1; then
  echo "error: the browser tests need Python 3 with venv (python3 -m venv)" >&2
  exit 1
fi
rm -rf "$venv"
mkdir -p target
echo "purebee: installing the pinned Playwright client into $venv" >&2
"$python" -m venv "$venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements" >&2
cp "$requirements" "$venv/requirements.txt"
echo "$PWD/$venv/bin/python"
