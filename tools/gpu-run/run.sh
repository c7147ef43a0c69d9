#!/usr/bin/env bash
# The GPU engine's test suite and benchmarks on the machine this runs on (a GPU, or Mesa's
# lavapipe for a dry run). Builds with cargo, then writes everything under target/gpu-run/
# ($GPU_RUN_DIR to choose another folder): main.log, tests.log, dispatch_floor.txt,
# bench.txt, ab.txt, profile_*.txt. tools/gpu-run/README.md says what each knob does:
#   MODE=all|tests|bench   SMALL=1   AB="PUREBEE_GPU_HELD_NORM=1 --f32-activations ..."
#   LLAMA_BENCH=path/to/llama-bench   PUREBEE_SMOLLM2_GGUF=path   TEST_TIMEOUT=seconds
#   GPU_TESTS="gpu_fusion ..."   POISON_TESTS="..."   (purebee-tests binaries; the default: all)
set -u -o pipefail
R=$(cd "$(dirname "$0")/../.." && pwd)
H="$R/tools/gpu-run"
O=${GPU_RUN_DIR:-$R/target/gpu-run}
MODE=${MODE:-all}
SMALL=${SMALL:-0}
mkdir -p "$O"
: > "$O/main.log"
exec > >(tee -a "$O/main.log") 2>&1
log() { echo "== $(date +%T) $*"; }
cd "$R" || exit 1
command -v cargo > /dev/null || { echo "cargo not found: the script builds what it runs" >&2; exit 1; }
# Test binaries open GPU engines without the CLI's quiet_display_probing: the same switch.
if [ -z "${NODEVICE_SELECT:-}${MESA_VK_DEVICE_SELECT:-}${MESA_VK_DEVICE_SELECT_FORCE_DEFAULT_DEVICE:-}${DRI_PRIME:-}" ]; then
  export NODEVICE_SELECT=1
fi
# SmolLM2: the given file, else the cached download (scripts/fetch-smollm2.sh), else skipped.
if [ -z "${PUREBEE_SMOLLM2_GGUF:-}" ]; then
  PUREBEE_SMOLLM2_GGUF=$(./scripts/fetch-smollm2.sh 2> /dev/null) || PUREBEE_SMOLLM2_GGUF=
fi
if [ -n "$PUREBEE_SMOLLM2_GGUF" ]; then export PUREBEE_SMOLLM2_GGUF; else export PUREBEE_SKIP_SMOLLM2=1; fi
log "start: mode=$MODE small=$SMALL out=$O smollm2=${PUREBEE_SMOLLM2_GGUF:-none}"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader

log build
cargo build --release --locked -q -p purebee-cli || exit 1
cargo build --release --locked -q -p purebee-engine-gpu --example dispatch_floor || exit 1
T=${CARGO_TARGET_DIR:-target}
PB="$T/release/purebee-rs"

# What a dispatch, the barrier between two, a memory round trip and a workgroup barrier cost
# on this adapter, apart from any kernel of ours (a few seconds).
log dispatch floor
timeout 300 "$T/release/examples/dispatch_floor" $([ "$SMALL" = 1 ] && echo --quick) | tee "$O/dispatch_floor.txt"

# The tests that create a GPU engine (each binary's tests on the adapter the engine ranks
# first), then the kernel tests again with workgroup memory poisoned (engine-gpu/src/poison.rs).
ALL="attention batch bitlinear elementwise embed gpu_bitnet_logits gpu_fusion gpu_windows kv_write linear
  linear_int8_gpu logprobs memory paged rope rows run_ahead sampling_candidates smollm2 top_k"
POISON="gpu_fusion attention bitlinear linear linear_int8_gpu rows top_k elementwise embed rope kv_write gpu_windows
  run_ahead paged"
GPU_TESTS=${GPU_TESTS:-$ALL}
POISON_TESTS=${POISON_TESTS:-$POISON}
tests() {
  local name=$1
  shift
  log "tests: $name"
  timeout "${TEST_TIMEOUT:-1800}" cargo test --locked "$@" > "$O/tests_$name.log" 2>&1
  echo "rc=$?" >> "$O/tests_$name.log"
  grep -E '^test result|^rc=' "$O/tests_$name.log" | tr '\n' ' '
  echo
}
if [ "$MODE" != bench ]; then
  tests engine-gpu -p purebee-engine-gpu
  tests cli -p purebee-cli --test gpu_bench
  tests workspace -p purebee-tests $(printf -- '--test %s ' $GPU_TESTS)
  PUREBEE_GPU_POISON_WORKGROUP=1 tests poisoned -p purebee-tests $(printf -- '--test %s ' $POISON_TESTS)
  # Passing tests left out of the summary; a failing binary's log is whole in tests_*.log.
  for f in "$O"/tests_*.log; do
    echo "######## $(basename "$f" .log)"
    grep -v -E '^test .* ok$' "$f"
  done > "$O/tests.log"
fi
[ "$MODE" = tests ] && { log end; exit 0; }

# Models: random weights in the 2B's shapes (speed only, the text is meaningless), the tiny
# shape at the 2B's 30 layers (the 2B's dispatches with almost no work), SmolLM2 if present.
log models
M="$O/models"
mkdir -p "$M"
shape=bitnet-2b
[ "$SMALL" = 1 ] && shape=tiny
"$PB" synth --shape $shape --weights tq2_0 --out "$M/tq2_0.gguf" > /dev/null || exit 1
"$PB" synth --shape $shape --weights i2_s --out "$M/i2_s.gguf" > /dev/null || exit 1
"$PB" quantize --embedding q8_0 "$M/tq2_0.gguf" "$M/tq2_0_q8head.gguf" > /dev/null || exit 1
"$PB" synth --shape tiny --layers 30 --weights tq2_0 --out "$M/tiny30.gguf" > /dev/null || exit 1
MODELS="tq2_0 i2_s tq2_0_q8head tiny30"
if [ -n "${PUREBEE_SMOLLM2_GGUF:-}" ]; then
  ln -sf "$PUREBEE_SMOLLM2_GGUF" "$M/smol.gguf"
  MODELS="$MODELS smol"
fi
if [ "$SMALL" = 1 ]; then A="-p 32 -n 8 -r 1"; else A="-p 512 -n 128 -r 3"; fi

# Copy bandwidth, the roofline of a decode token (PyTorch on CUDA, where present).
python3 -c 'import torch; assert torch.cuda.is_available()' 2> /dev/null && python3 - << 'PY'
import torch, time
n = 1 << 30
x = torch.ones(n // 4, dtype=torch.float32, device='cuda'); y = torch.empty_like(x)
def t(f, k=20):
    for _ in range(3): f()
    torch.cuda.synchronize(); s = time.perf_counter()
    for _ in range(k): f()
    torch.cuda.synchronize(); return (time.perf_counter() - s) / k
c = t(lambda: y.copy_(x)); r = t(lambda: x.sum())
print(f"copy 1 GiB: {2*n/c/1e9:.0f} GB/s read+write; sum 1 GiB: {n/r/1e9:.0f} GB/s read")
PY

# bench on every file; with LLAMA_BENCH, llama.cpp's llama-bench on the same files,
# alternated (order swapped each round). llama.cpp knows BitNet only as `bitnet`: the 2B
# files are copied under that name (rearch.py), the same tensors.
ours() { "$PB" bench "$1" --engine gpu $A --output json 2> /dev/null | tr -d '\n'; echo; }
theirs() { "$LLAMA_BENCH" -m "$1" -ngl 99 $A -o jsonl 2> /dev/null; }
: > "$O/bench.txt"
for r in 1 2; do
  for m in $MODELS; do
    lm=$M/$m.gguf
    case $m in tq2_0 | tq2_0_q8head) lm=$M/${m}_bn.gguf ;; i2_s | tiny30) lm= ;; esac
    if [ -n "${LLAMA_BENCH:-}" ] && [ -n "$lm" ] && [ ! -f "$lm" ]; then python3 "$H/rearch.py" "$M/$m.gguf" "$lm"; fi
    log "bench $m round $r"
    [ $r = 2 ] && [ -n "${LLAMA_BENCH:-}" ] && [ -n "$lm" ] && theirs "$lm" | sed "s/^/llama $m $r /" >> "$O/bench.txt"
    echo "ours $m $r $(ours "$M/$m.gguf")" >> "$O/bench.txt"
    [ $r = 1 ] && [ -n "${LLAMA_BENCH:-}" ] && [ -n "$lm" ] && theirs "$lm" | sed "s/^/llama $m $r /" >> "$O/bench.txt"
  done
done
python3 "$H/summ.py" "$O/bench.txt"
for m in $MODELS; do
  [ $m = i2_s ] && continue
  log "profile $m"
  "$PB" bench "$M/$m.gguf" --engine gpu $A --profile > "$O/profile_$m.txt" 2>&1
  grep -A16 "profile of the decode" "$O/profile_$m.txt"
done

# AB: each entry a variant of the engine, benched alternately with the default (order
# reversed each round), then its profile and its greedy text's hash (a variant that only
# reorders work must give the default's). An entry is environment settings
# (PUREBEE_GPU_HELD_NORM=1) or bench/run flags (--f32-activations); join several with commas.
if [ -n "${AB:-}" ]; then
  VARIANTS=(default $AB)
  # `variant NAME CMD...`: CMD under that variant's settings.
  variant() {
    local v=$1 envs=() flags=()
    shift
    if [ "$v" != default ]; then
      for s in ${v//,/ }; do case $s in --*) flags+=("$s") ;; *) envs+=("$s") ;; esac; done
    fi
    env "${envs[@]}" "$@" "${flags[@]}"
  }
  # A file name for a variant.
  tag() { echo "$1" | sed 's/^-*//' | tr -c 'A-Za-z0-9_\n-' '_'; }
  : > "$O/ab.txt"
  : > "$O/ab_agree.txt"
  for r in 1 2; do
    ORDER=("${VARIANTS[@]}")
    [ $r = 2 ] && ORDER=($(printf '%s\n' "${VARIANTS[@]}" | tac))
    for m in $MODELS; do
      for v in "${ORDER[@]}"; do
        log "ab $v $m round $r"
        j=$(variant "$v" "$PB" bench "$M/$m.gguf" --engine gpu $A --output json 2> /dev/null | tr -d '\n')
        echo "$(tag "$v") $m $r $j" >> "$O/ab.txt"
      done
    done
  done
  python3 "$H/summ.py" "$O/ab.txt"
  for v in "${VARIANTS[@]}"; do
    for m in $MODELS; do
      [ $m = i2_s ] && continue
      t=$(variant "$v" "$PB" run "$M/$m.gguf" --engine gpu --tokens 1,2,3 -n 48 --temp 0 --ignore-eos 2> /dev/null |
        md5sum | cut -c1-12)
      echo "agree $m $(tag "$v") $t" | tee -a "$O/ab_agree.txt"
      variant "$v" "$PB" bench "$M/$m.gguf" --engine gpu $A --profile > "$O/ab_profile_$(tag "$v")_$m.txt" 2>&1
    done
  done
fi
log end
