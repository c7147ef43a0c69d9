#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ for SECONDS_PER_TARGET seconds of one core (default 60) on a
# copy of its committed corpus (fuzz/corpus/<target>, left unchanged), all targets at once for
# the wall time that gives each that share of the cores, and
# fails on any crash, timeout (-timeout=10 per input) or out-of-memory report
# (-rss_limit_mb=2048), printing the reproducer's path. CI runs it; so can anyone:
#
#   ./scripts/fuzz.sh [SECONDS_PER_TARGET]
#
# Needs rustup's stable toolchain and a C++ compiler (libFuzzer is built from source). It
# installs cargo-fuzz when missing and builds with RUSTC_BOOTSTRAP=1, which lets the stable
# compiler take the instrumentation flags cargo-fuzz passes, so no nightly is needed. The
# `tokenizer` target also fuzzes SmolLM2's full vocabulary when PUREBEE_SMOLLM2_GGUF names
# its GGUF (set here from scripts/fetch-smollm2.sh's cache when that succeeds; set
# PUREBEE_SKIP_SMOLLM2=1 to fuzz only the tiny fixtures' vocabulary).
#
# Reproduce a failure: fuzz/target/x86_64-unknown-linux-gnu/release/<target> <reproducer>
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
targets=(gguf model_load tokenizer chat_template program)

if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
if [ -z "${PUREBEE_SMOLLM2_GGUF:-}" ] && [ "${PUREBEE_SKIP_SMOLLM2:-}" != 1 ]; then
  if PUREBEE_SMOLLM2_GGUF=$(./scripts/fetch-smollm2.sh); then
    export PUREBEE_SMOLLM2_GGUF
  else
    echo "fuzz.sh: SmolLM2 could not be fetched; the tokenizer target fuzzes the tiny vocabulary only" >&2
    unset PUREBEE_SMOLLM2_GGUF
  fi
fi

# No sanitizer: the code under test is safe Rust (memory's one unsafe call maps the file,
# and the targets read from memory), so AddressSanitizer would find nothing but cost half
# the executions. Panics, aborts, timeouts and out-of-memory are what is looked for.
export RUSTC_BOOTSTRAP=1
cargo fuzz build --sanitizer none
bin=fuzz/target/x86_64-unknown-linux-gnu/release

run_dir=$(mktemp -d "${TMPDIR:-/tmp}/purebee-fuzz.XXXXXX")
# Each target is single-threaded: all at once for `seconds · targets / cores` of wall time
# keep every core busy to the end (one per core at a time left a core idle in the last
# round when the targets do not divide evenly).
cores=$(nproc 2>/dev/null || echo 1)
wall=$(((seconds * ${#targets[@]} + cores - 1) / cores))
fuzz_one() {
  local t=$1 dict=()
  case $t in
    gguf | model_load) dict=(-dict=fuzz/gguf.dict) ;;
    chat_template) dict=(-dict=fuzz/jinja.dict) ;;
  esac
  mkdir -p "$run_dir/$t/corpus" "$run_dir/$t/artifacts"
  cp fuzz/corpus/"$t"/* "$run_dir/$t/corpus/" 2>/dev/null || true
  if "$bin/$t" "${dict[@]}" -max_total_time="$wall" -rss_limit_mb=2048 -timeout=10 \
    -print_final_stats=1 -artifact_prefix="$run_dir/$t/artifacts/" "$run_dir/$t/corpus" \
    >"$run_dir/$t/log" 2>&1; then
    touch "$run_dir/$t/passed"
  fi
}
echo "== ${#targets[@]} targets at once for ${wall}s on $cores cores: ${targets[*]}"
for t in "${targets[@]}"; do
  fuzz_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  if [ -e "$run_dir/$t/passed" ]; then
    echo "$t: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$run_dir/$t/log" | tail -n 1 || true)"
  else
    failed=1
    tail -n 60 "$run_dir/$t/log"
    for f in "$run_dir/$t/artifacts"/*; do
      [ -e "$f" ] && echo "fuzz.sh: $t failed; reproducer: $f (run: $bin/$t $f)"
    done
    echo "fuzz.sh: $t failed; full log: $run_dir/$t/log"
  fi
done
if [ "$failed" = 0 ]; then
  rm -rf "$run_dir"
  echo "fuzz.sh: no crash, timeout or out-of-memory in ${#targets[@]} targets"
fi
exit "$failed"
