#!/bin/bash
# compute-sanitizer racecheck then memcheck on the small causal cases of the
# default (v3) path (LA_CUDA_SMALL=3), as a tests/cuda/gpu_round.sh step
# (the tree is built). Caps: LA_SAN_RACE_S (90), LA_SAN_MEM_S (60).
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
T=build-gpu/tests/cuda/test_cuda_causal
command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; exit 0; }
rc=0
for tool in racecheck memcheck; do
  cap=${LA_SAN_RACE_S:-90}; [ $tool = memcheck ] && cap=${LA_SAN_MEM_S:-60}
  LA_CUDA_SMALL=3 timeout $cap compute-sanitizer --tool $tool --error-exitcode 3 $T > "$OUT/causal_$tool.log" 2>&1
  r=$?
  echo "compute-sanitizer $tool (causal, LA_CUDA_SMALL=3): rc=$r  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/causal_$tool.log" | tail -1)  $(grep -E 'passed, ' "$OUT/causal_$tool.log" | tail -1)"
  [ $r -ne 0 ] && rc=1
done
exit $rc
