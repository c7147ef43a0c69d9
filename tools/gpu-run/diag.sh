#!/bin/bash
# Where a decode token's time goes on a lent GPU: host CPU time per token (bash `time` of two
# decode lengths, the difference over the extra tokens) against wall time per token, and the
# tiny 30-layer shape's per-kernel profile (its kernels do almost no work, so their times are
# what a dispatch costs). Needs the pack as run.sh does; writes under $OUT.
set -u
O=${OUT:-/tmp/out}; mkdir -p "$O"
exec > >(tee -a "$O/diag.log") 2>&1
[ -f /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json ] &&
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
P=/tmp/gpu-run; rm -rf $P; mkdir -p $P; xz -dc .dev/pack.tar.xz | tar -x -C $P
PB=${PB:-$P/purebee-rs}
nproc; grep -m1 "model name" /proc/cpuinfo
M=/tmp/diag-models; mkdir -p $M
$PB synth --shape tiny --layers 30 --weights tq2_0 --out $M/tiny30.gguf > /dev/null
[ "${SMALL:-0}" = 1 ] || $PB synth --shape bitnet-2b --weights tq2_0 --out $M/b2.gguf > /dev/null
for m in tiny30 b2; do
  [ -f $M/$m.gguf ] || continue
  for n in 64 576 64 576; do
    echo "== $m -n $n"
    ( time $PB bench $M/$m.gguf --engine gpu -p 16 -n $n -r 1 ) 2>&1 | grep -E "decode|real|user|sys"
  done
  $PB bench $M/$m.gguf --engine gpu -p 16 -n 256 -r 1 --profile > "$O/diag_profile_$m.txt" 2>&1
  grep -A16 "profile of the decode" "$O/diag_profile_$m.txt"
done
