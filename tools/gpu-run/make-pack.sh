#!/usr/bin/env bash
# Builds what a GPU machine without a Rust toolchain needs to run the GPU test suite and the
# speed runs (run.sh): the GPU test binaries (test profile, stripped), a release purebee-rs,
# the dispatch-cost probe (engine-gpu/examples/dispatch_floor.rs),
# the tiny fixtures those tests open, and SmolLM2's skeleton (skeleton.py), into
# .dev/pack.tar.xz (about 25 MB). The working tree that travels must stay under 64 MiB, so
# take fixtures/ out of the index for the call (`git rm -r --cached -q fixtures` and an
# exclude line; `git reset -q` after) and carry .dev/pack.tar.xz.
# llama.cpp with its Vulkan backend goes in .dev/llama.tar.xz (llama/llama-bench and
# llama/libgomp.so.1): build-llama-cpp.sh's sources with -DGGML_VULKAN=ON
# -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF, and a glslc new enough
# for cooperative matrices and integer dot products (Debian trixie's shaderc 2025.2 did).
#
# AB="rev1 rev2 ...": also a release purebee-rs of each git revision (a branch with a kernel
# change not yet measured on a GPU), or of HEAD with a patch (path/NAME.patch, packed as
# ab/NAME; several joined by `+` stack on one binary), built in a temporary worktree,
# packed as ab/<rev>/;
# run.sh then benches them alternated with this tree's (MODE=ab runs only that).
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .dev
cargo build --release --locked -p purebee-cli
cargo build --release --locked -p purebee-engine-gpu --example dispatch_floor
cargo test --locked --no-run -p purebee-tests -p purebee-engine-gpu -p purebee-cli --message-format=json \
  2>/dev/null > .dev/tests.json
P=$(mktemp -d)
mkdir -p "$P/tests" "$P/fixtures"
python3 - .dev/tests.json "$P/tests" <<'PY'
import json, shutil, sys
gpu = {'attention', 'bitlinear', 'elementwise', 'embed', 'gpu_fusion', 'gpu_windows', 'kv_write', 'linear',
       'linear_int8_gpu', 'rope', 'rows', 'run_ahead', 'sampling_candidates', 'top_k', 'program_cache', 'gpu_bench'}
for line in open(sys.argv[1]):
    j = json.loads(line)
    if j.get('reason') != 'compiler-artifact' or not j.get('executable'):
        continue
    t = j['target']
    if (t['name'] in gpu and 'test' in t['kind']) or (t['name'] == 'purebee_engine_gpu' and j['profile']['test']):
        shutil.copy(j['executable'], f"{sys.argv[2]}/{t['name']}")
PY
strip "$P"/tests/*
cp target/release/purebee-rs "$P/" && strip "$P/purebee-rs"
cp target/release/examples/dispatch_floor "$P/" && strip "$P/dispatch_floor"
for rev in ${AB:-}; do
  W=$(mktemp -d)
  case "$rev" in
    *.patch)
      # A kernel branch kept as a patch on this tree's HEAD (branches do not survive into
      # a fresh workspace): tools/gpu-run/branches/NAME.patch is packed as ab/NAME;
      # A.patch+B.patch applies both, in order, packed as ab/A+B (changes to different
      # kernel families share one binary, and its per-family profile tells them apart).
      git worktree add -q --detach "$W" HEAD
      name=
      for one in ${rev//+/ }; do
        patch=$(realpath "$one")
        (cd "$W" && git apply "$patch") || { git worktree remove --force "$W"; exit 1; }
        name="${name:+$name+}$(basename "$one" .patch)"
      done
      rev=$name
      ;;
    *) git worktree add -q --detach "$W" "$rev" ;;
  esac
  # One target directory for every revision: each build is incremental on the last.
  (cd "$W" && CARGO_TARGET_DIR="$OLDPWD/target/ab" cargo build --release --locked -q -p purebee-cli) ||
    { git worktree remove --force "$W"; exit 1; }
  git worktree remove --force "$W"
  mkdir -p "$P/ab/$rev"
  cp target/ab/release/purebee-rs "$P/ab/$rev/" && strip "$P/ab/$rev/purebee-rs"
done
cp fixtures/bitnet-tiny/*.json fixtures/bitnet-tiny/tiny_b158_i2_s.gguf fixtures/bitnet-tiny/tiny_b158_tq2_0.gguf \
  fixtures/bitnet-tiny/tiny_b158_f32.gguf fixtures/bitnet-tiny/tiny_bitnet_tq2_0.gguf "$P/fixtures/"
SMOL=${PUREBEE_SMOLLM2_GGUF:-$(./scripts/fetch-smollm2.sh)}
python3 tools/gpu-run/skeleton.py pack "$SMOL" "$P/smol.skel"
tar -C "$P" -c . | xz -T0 -9 > .dev/pack.tar.xz
rm -rf "$P"
ls -la .dev/pack.tar.xz
