#!/bin/bash
# One device call on nvidia-h200-x2 for context parallelism (issue 20): build,
# NCCL correctness of every longattn.distributed op against the single-GPU
# result (fp32 and bf16, forward and backward; the indexers exactly), then
# scaling on 1 and 2 GPUs (bench/dist_scaling.py). Results under $OUT:
# dist_check.json, dist_scale.json, summary.md, and the logs.
#   bash tests/cuda/gpu_distributed.sh              # the device call
#   bash tests/cuda/gpu_distributed.sh --cpu-smoke  # the same steps on CPU (gloo, tiny sizes)
#   WORLD=1 bash tests/cuda/gpu_distributed.sh      # one H200: a one-rank NCCL group, the
#                                                   # CUDA code paths only (no scaling)
# LA_SKIP_BUILD=1: the tree is built already. Each step has its own timeout so
# that the whole script ends within ~9 minutes.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
SMOKE=
[ "${1:-}" = "--cpu-smoke" ] && SMOKE=--cpu-smoke
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
PY=${PY:-python3}
$PY -c 'import torch' 2>/dev/null || PY=/usr/bin/python3
if [ -n "$SMOKE" ]; then
  B=${LA_BUILD:-build}
  say "# distributed (cpu smoke) $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null)"
  [ -f "$B/liblongattn.so" ] || timeout 300 make -j2 SKIP_DEPS=1 CUDA=0 BUILD=$B "$B/liblongattn.so" > "$OUT/build.log" 2>&1
else
  B=build-gpu
  say "# distributed $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | head -2 | tr '\n' ' ')"
  ngpu=$($PY -c 'import torch; print(torch.cuda.device_count())' 2>&1 | tail -1)
  say "torch.cuda.device_count() = $ngpu"
  if [ "${ngpu:-0}" -lt "${WORLD:-2}" ] 2>/dev/null || ! [ "${ngpu:-0}" -ge 1 ] 2>/dev/null; then
    say "BLOCKED: this script needs ${WORLD:-2} GPUs (nvidia-h200-x2), torch sees $ngpu"; exit 3
  fi
  if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
    timeout 200 make -j16 BUILD=$B SKIP_DEPS=1 "$B/liblongattn.so" > "$OUT/build.log" 2>&1 \
      || { say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20; exit 1; }
  fi
fi
say "# build: $(el) s"
export LA_BUILD=$B LONGATTN_LIB=$PWD/$B/liblongattn.so

# 1. correctness over NCCL (gloo with --cpu-smoke)
W="--world ${WORLD:-2}"
timeout 240 $PY bench/dist_scaling.py $SMOKE $W --check --out "$OUT/check" > "$OUT/check.log" 2>&1
rc=$?
[ -f "$OUT/check/summary.md" ] && grep -E "^check" "$OUT/check/summary.md" | tee -a "$S"
nfail=$(grep -E "^check" "$OUT/check/summary.md" 2>/dev/null | grep -c FAIL)
say "# check: rc=$rc, $nfail failed ($(el) s)"
[ $rc -ne 0 ] && tail -20 "$OUT/check.log"

# 2. scaling on 1 and 2 GPUs (bf16; fp32 with --cpu-smoke)
[ "${WORLD:-2}" = 1 ] && { say "# done, one rank: no scaling ($(el) s)"; exit 0; }
timeout 300 $PY bench/dist_scaling.py $SMOKE $W --scale --reps 3 --out "$OUT/scale" > "$OUT/scale.log" 2>&1
rc=$?
[ -f "$OUT/scale/summary.md" ] && grep -E "^\|" "$OUT/scale/summary.md" | tee -a "$S"
say "# scale: rc=$rc ($(el) s)"
[ $rc -ne 0 ] && tail -20 "$OUT/scale.log"
say "# done ($(el) s)"
