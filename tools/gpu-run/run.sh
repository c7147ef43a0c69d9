#!/bin/bash
# One device run for the GPU engine (issue 10), on a machine with a GPU, no Rust and no network:
# the GPU test suite on the real driver, copy bandwidth (PyTorch), then `purebee-rs bench`
# alternated with llama.cpp's `llama-bench -ngl 99` on the same files, then per-kernel profiles.
# Needs .dev/pack.tar.xz (make-pack.sh), optionally .dev/llama.tar.xz, and the Vulkan loader
# unpacked first where the machine lacks it:
#     for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig; bash tools/gpu-run/run.sh
# Everything is written under $OUT as it goes (main.log, tests.log, bench.txt, ab.txt,
# profile_*.txt).
# SMALL=1: the tiny shape and short runs (a dry run on lavapipe).
# MODE=ab: only the A/B of the pack's ab/<rev>/purebee-rs (make-pack.sh's AB) against this
# tree's binary, alternated on the same files, with their profiles: no llama.cpp, and no
# tests unless TESTS=1 (the suite then runs first, beside the models' making).
# (With ab/ binaries in the pack, the full run ends with the same A/B.) AB_LLAMA=1 adds
# llama.cpp's llama-bench on the 2B and SmolLM2 to each A/B round (ab_llama.txt); AB_CTX=N
# gives our binaries an N-row KV cache (bench -c N); AB_MODELS="tq2_0 smol" limits the A/B to
# those files (default: tq2_0 smol tq2_0_q8head tiny30).
# AB_F32=1 adds every binary again with --f32-activations (`<name>-f32`), on SmolLM2 only;
# AB_F32="main rev ..." twins only those.
set -u
R=$PWD
O=${OUT:-/tmp/out}
mkdir -p "$O"
exec > >(tee -a "$O/main.log") 2>&1
log() { echo "== $(date +%T) $*"; }
SMALL=${SMALL:-0}
MODE=${MODE:-full}
H=$(dirname "$0")
log start in "$R", small=$SMALL, mode=$MODE
if [ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] && [ "$SMALL" = 0 ]; then
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2
P=/tmp/gpu-run
# Fresh each run: a binary left from an older pack would join the A/B.
rm -rf $P
mkdir -p $P
xz -dc .dev/pack.tar.xz | tar -x -C $P
[ -f .dev/llama.tar.xz ] && xz -dc .dev/llama.tar.xz | tar -x -C $P
# The test binaries find fixtures and the CLI through the paths they were built with
# (/work/main here); the files are copied in on every call, since a call's tree replaces them.
[ -e /work/main ] || { mkdir -p /work; ln -s "$R" /work/main; }
mkdir -p /work/main/fixtures/bitnet-tiny /work/main/target/debug
cp $P/fixtures/* /work/main/fixtures/bitnet-tiny/
cp $P/purebee-rs /work/main/target/debug/purebee-rs
PB=$P/purebee-rs
LB() { LD_LIBRARY_PATH=$P/llama "$P/llama/llama-bench" "$@"; }

# 0. what a dispatch, a barrier between dispatches, a memory round trip and a workgroup
# barrier cost on this GPU, apart from any kernel of ours (a few seconds; both modes)
log dispatch floor
[ -x $P/dispatch_floor ] && timeout 120 $P/dispatch_floor $([ "$SMALL" = 1 ] && echo --quick) 2>&1 | tee "$O/dispatch_floor.txt"

# 1. the GPU test suite, every binary at once; the models are made on the CPU meanwhile
log tests
T=/tmp/gpu-run-logs; mkdir -p $T
TP=()
RUN_TESTS=1; [ "$MODE" = ab ] && RUN_TESTS=${TESTS:-0}
[ "$RUN_TESTS" = 0 ] || for b in $P/tests/*; do
  n=$(basename "$b")
  # A binary that runs past its limit runs again one test at a time, its output uncaptured,
  # so the log names the test that hangs (program_cache once did, with nothing logged).
  (cd /work/main/tests && timeout "${TEST_TIMEOUT:-240}" "$b" --test-threads=4 > $T/$n.log 2>&1; rc=$?
   echo "rc=$rc" >> $T/$n.log
   if [ $rc = 124 ]; then
     echo "#### again, one test at a time" >> $T/$n.log
     timeout 120 "$b" --test-threads=1 --nocapture >> $T/$n.log 2>&1; echo "rc=$?" >> $T/$n.log
   fi) &
  TP+=($!)
done
M=/tmp/gpu-run-models; mkdir -p $M
(
  if [ "$SMALL" = 1 ]; then shape=tiny; else shape=bitnet-2b; fi
  $PB synth --shape $shape --weights tq2_0 --out $M/tq2_0.gguf &
  $PB synth --shape $shape --weights i2_s --out $M/i2_s.gguf &
  wait
  $PB quantize --embedding q8_0 $M/tq2_0.gguf $M/tq2_0_q8head.gguf
  # llama.cpp at the fixtures' commit knows BitNet only as `bitnet` (SiLU instead of ReLU²):
  # the same tensors under that name, for both programs.
  python3 $H/skeleton.py rearch $M/tq2_0.gguf $M/tq2_0_bn.gguf
  python3 $H/skeleton.py rearch $M/tq2_0_q8head.gguf $M/tq2_0_q8head_bn.gguf
  python3 $H/skeleton.py grow $P/smol.skel $M/smol.gguf
  # The tiny shape at 30 layers: the 2B's dispatches per token with almost no work, so its
  # decode time over its dispatches is what a dispatch costs apart from its bytes.
  $PB synth --shape tiny --layers 30 --weights tq2_0 --out $M/tiny30.gguf
) > $T/models.txt 2>&1 &
MODELS=$!
# (Never a plain `wait`: it would also wait for tee's process substitution, forever.)
[ ${#TP[@]} = 0 ] || wait "${TP[@]}"
log tests done
if [ "$RUN_TESTS" = 1 ]; then
  for f in $T/*.log; do echo "### $(basename "$f" .log): $(grep -E '^test result' "$f" | tr '\n' ' ') $(tail -1 "$f")"; done
  # Passing tests are left out, except in the log of a binary that failed or hung.
  for f in $T/*.log; do
    echo "######## $(basename "$f")"
    if grep -q '^rc=0$' "$f"; then grep -v -E '^test .* ok$' "$f"; else cat "$f"; fi
  done > "$O/tests.log"
fi
wait $MODELS
log models made
cat $T/models.txt; ls -la $M

# 2. copy bandwidth (PyTorch, CUDA): read + write, and read alone (steps 2 to 4: the full
# run only)
if [ "$MODE" != ab ]; then
log bandwidth
python3 - <<'PY' 2>&1 | tail -2
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

# 3. bench next to llama-bench, alternating (order swapped each round)
if [ "$SMALL" = 1 ]; then A="-p 32 -n 8 -r 1"; else A="-p 512 -n 128 -r 3"; fi
ours() { $PB bench "$1" --engine gpu $A --output json 2>/tmp/ours.err | tr -d '\n'; echo; tail -1 /tmp/ours.err >&2; }
theirs() { LB -m "$1" -ngl 99 $A -o jsonl 2>/tmp/llama.err; grep -i -E "ggml_vulkan: 0|error|fail" /tmp/llama.err | head -2 >&2; }
for r in 1 2; do
  for m in tq2_0_bn smol tq2_0_q8head_bn; do
    log bench $m round $r
    if [ $r = 1 ]; then
      echo "ours $m $r $(ours $M/$m.gguf)" >> "$O/bench.txt"; theirs $M/$m.gguf | sed "s/^/llama $m $r /" >> "$O/bench.txt"
    else
      theirs $M/$m.gguf | sed "s/^/llama $m $r /" >> "$O/bench.txt"; echo "ours $m $r $(ours $M/$m.gguf)" >> "$O/bench.txt"
    fi
  done
done
for m in tq2_0 i2_s tiny30; do log bench $m; echo "ours $m 1 $(ours $M/$m.gguf)" >> "$O/bench.txt"; done
python3 $H/summ.py "$O/bench.txt"

# 4. per-kernel profiles
for m in tq2_0 tq2_0_q8head smol; do
  log profile $m
  $PB bench $M/$m.gguf --engine gpu $A --profile > "$O/profile_$m.txt" 2>&1
  grep -A16 "profile of the decode" "$O/profile_$m.txt"
done
fi

# 5. A/B: this tree's binary and each ab/<rev>/purebee-rs, alternated (order reversed each
# round), then each one's profile
if [ -d $P/ab ]; then
  BINS=("main:$PB")
  for d in $P/ab/*/; do BINS+=("$(basename "$d"):$d/purebee-rs"); done
  # AB_F32=1: every binary once more as `<name>-f32`, with --f32-activations (LINEAR
  # without the int8-block rounding of x: SmolLM2's products read f32 activations).
  # AB_F32="name ..." twins only those binaries. The twins run on SmolLM2 only: the 2B's
  # products are BITLINEARs, which the flag does not change.
  if [ -n "${AB_F32:-}" ] && [ "${AB_F32}" != 0 ]; then
    for nb in "${BINS[@]}"; do
      case " $AB_F32 " in " 1 "|*" ${nb%%:*} "*) BINS+=("${nb%%:*}-f32:${nb#*:}") ;; esac
    done
  fi
  # Whether A/B entry $1 runs on model $2.
  runs_on() { case "$1:$2" in *-f32:smol) return 0 ;; *-f32:*) return 1 ;; esac; }
  # The flags an A/B entry adds to bench and run.
  flags() { case "$1" in *-f32) echo --f32-activations ;; esac; }
  if [ "$SMALL" = 1 ]; then AA="-p 32 -n 8 -r 1"; else AA="-p 512 -n 128 -r 2"; fi
  # AB_CTX=N: our binaries' KV cache N rows long (bench's -c), as `run` sizes it (the
  # model's context, at most 4096) rather than the prompt plus the decode.
  AO="$AA"; [ -n "${AB_CTX:-}" ] && AO="$AA -c $AB_CTX"
  for r in 1 2; do
    ORDER=("${BINS[@]}")
    [ $r = 2 ] && ORDER=($(printf '%s\n' "${BINS[@]}" | tac))
    for m in ${AB_MODELS:-tq2_0 smol tq2_0_q8head tiny30}; do
      for nb in "${ORDER[@]}"; do
        runs_on "${nb%%:*}" $m || continue
        log ab ${nb%%:*} $m round $r
        echo "${nb%%:*} $m $r $(${nb#*:} bench $M/$m.gguf --engine gpu $AO $(flags ${nb%%:*}) --output json 2>/dev/null | tr -d '\n')" >> "$O/ab.txt"
      done
      # AB_LLAMA=1: llama.cpp on the same shapes in the same rounds (the 2B under the name
      # `bitnet`, see step 1).
      case "${AB_LLAMA:-0}:$m" in
        1:tq2_0) lm=tq2_0_bn ;; 1:smol) lm=smol ;; *) lm= ;;
      esac
      if [ -n "$lm" ] && [ -x $P/llama/llama-bench ]; then
        log ab llama $lm round $r
        LB -m $M/$lm.gguf -ngl 99 $AA -o jsonl 2>/dev/null | sed "s/^/llama $lm $r /" >> "$O/ab_llama.txt"
      fi
    done
  done
  python3 $H/summ.py "$O/ab.txt"
  # Agreement: each binary's greedy text on the same files (bench checks no output). A change
  # that only reorders work (barriers) must give main's bytes; a kernel change that rounds
  # differently may change a token of these random-weight models, which then says where.
  for m in tq2_0 smol; do
    for nb in "${BINS[@]}"; do
      runs_on "${nb%%:*}" $m || continue
      t=$(${nb#*:} run $M/$m.gguf --engine gpu $(flags ${nb%%:*}) --tokens 1,2,3 -n 48 --temp 0 --ignore-eos 2>/dev/null | md5sum | cut -c1-12)
      echo "agree $m ${nb%%:*} $t" | tee -a "$O/ab_agree.txt"
    done
  done
  for nb in "${BINS[@]}"; do
    for m in tq2_0 smol; do
      runs_on "${nb%%:*}" $m || continue
      log ab profile ${nb%%:*} $m
      ${nb#*:} bench $M/$m.gguf --engine gpu $AO $(flags ${nb%%:*}) --profile > "$O/ab_profile_${nb%%:*}_$m.txt" 2>&1
    done
  done
fi
log end
