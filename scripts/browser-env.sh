#!/usr/bin/env bash
# Prepares the browser tests of the served chat page (tests/browser/): Debian's Chromium at
# /usr/bin/chromium (installed with apt-get when missing) and a virtual environment with
# Playwright's Python client at the versions pinned in tests/browser/requirements.txt,
# installed from PyPI with pip (scripts/python-env.sh browser). Prints the path of its python.
# Playwright drives the system's Chromium: `playwright install`, which downloads browser
# builds of its own, is never run.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  sudo_cmd=""
  if [ "$(id -u)" != 0 ]; then sudo_cmd="sudo"; fi
  echo "purebee: installing Debian's chromium package" >&2
  $sudo_cmd apt-get update -q >&2
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium >&2
fi
./scripts/python-env.sh browser
