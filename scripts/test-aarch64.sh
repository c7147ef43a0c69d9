#!/usr/bin/env bash
# Cross-builds the CPU engine for aarch64 Linux and runs its tests under qemu-user, twice:
# on qemu's `max` CPU (NEON and dotprod: levels neon and neon-dot) and on a Cortex-A72
# (NEON without dotprod: neon only, and neon-dot falls back); then, on `max`, the
# per-instruction differential tests of the CPU engine against the reference engine (the
# tests named `cpu`; GPU tests are not run: qemu has no GPU). The end-to-end model checks
# are left to native runs: emulated, one took over ten minutes. Installs the cross linker,
# the aarch64 C library and qemu-user first when missing (Debian/Ubuntu: as root or with
# sudo), and the Rust target. Extra arguments go to `cargo test` (a test filter: `-- neon`).
#
# The build goes to $CARGO_TARGET_DIR, by default target/aarch64-qemu: its own directory,
# so that it neither waits for nor disturbs builds for the host.
set -euo pipefail
cd "$(dirname "$0")/.."

target=aarch64-unknown-linux-gnu
missing=()
for pkg in gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  sudo=$([ "$(id -u)" = 0 ] || echo sudo)
  $sudo apt-get update
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y "${missing[@]}"
fi
rustup target list --installed | grep -qx "$target" || rustup target add "$target"

# Set here rather than in .cargo/config.toml, which would also apply to native aarch64 builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target/aarch64-qemu}"
export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
for cpu in max cortex-a72; do
  echo "== engine-cpu tests on qemu-aarch64 -cpu $cpu"
  CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu $cpu -L /usr/aarch64-linux-gnu" \
    cargo test --release -p purebee-engine-cpu --target "$target" "$@"
done
echo "== CPU engine vs reference engine on qemu-aarch64 -cpu max"
# The tests crate links the GPU engine, whose tests are skipped here: its stack (wgpu, naga,
# their drivers' bindings) is built unoptimised, which takes a fraction of the time.
gpu_stack=()
for pkg in purebee-engine-gpu wgpu wgpu-core wgpu-hal wgpu-types naga ash glow gpu-allocator khronos-egl spirv; do
  gpu_stack+=(--config "profile.release.package.$pkg.opt-level = 0")
done
# The model-shape cases are skipped: they run the same NEON kernels as the random shapes, on
# longer rows, and took most of this stage's time under emulation (the reference engine's
# share of them is the same on every architecture). The largest property tests run a
# quarter of their cases (PUREBEE_EMULATED=1, purebee_testenv::proptest_cases).
CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="qemu-aarch64 -cpu max -L /usr/aarch64-linux-gnu" \
  PUREBEE_SKIP_GPU_TESTS=1 PUREBEE_SKIP_SMOLLM2=1 PUREBEE_EMULATED=1 \
  cargo test "${gpu_stack[@]}" --release -p purebee-tests --target "$target" \
  --test attention --test bitlinear --test elementwise --test embed --test kv_write --test linear \
  --test memory --test rope --test rows -- cpu \
  --skip whole_context --skip smollm2_decode --skip prefill_of_512_rows --skip lm_head_shape --skip a_long_prompt
