#!/usr/bin/env bash
# Checks the CPU engine's AVX-512 VNNI kernels on any x86_64 machine, AVX-512 or not: builds
# the emulation probe (a shared object of engine-cpu's kernels and kernels/cross_check.rs),
# and runs it inside the Bochs CPU emulator (bochscpu-python, emulating a Sapphire Rapids)
# against the portable kernels, which the differential tests prove against the reference
# engine. Runs the emulator harness's own self-test first. Installs the two Python packages
# it needs with pip when missing. About a minute here. Arguments: [SEEDS] [CASES_PER_SEED].
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(uname -m)" != x86_64 ]; then
  echo "test-avx512-emulated: skipped, not an x86_64 machine" >&2
  exit 0
fi
python=$(command -v python3 || command -v python)
if ! "$python" -c "import elftools" 2>/dev/null || ! "$python" -m pip show -q bochscpu-python >/dev/null 2>&1; then
  "$python" -m pip install --quiet bochscpu-python==0.4.0 pyelftools==0.33
fi
"$python" scripts/emulated-avx512/selftest.py
cargo build --release --locked -p purebee-engine-cpu --example emulation_probe
"$python" scripts/emulated-avx512/check_kernels.py target/release/examples/libemulation_probe.so "$@"
