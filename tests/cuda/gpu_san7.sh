#!/bin/bash
# compute-sanitizer memcheck + racecheck on the small cases of the sparse-family
# CUDA tests (issue 7: DSA v2, HISA stage 1 / 2, top-k, fp8 routes), the four
# runs in parallel, <= 150 s. Assumes build-gpu is built
# (tests/cuda/gpu_round.sh san7:150).
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
command -v compute-sanitizer >/dev/null || { echo "no compute-sanitizer"; exit 0; }
pids=()
for t in test_cuda_sparse test_cuda_dsa_fp8; do
  for tool in memcheck racecheck; do
    ( LA_CUDA_SMALL=1 timeout 140 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/cuda/$t \
        > "$OUT/san_${t}_$tool.log" 2>&1; echo $? > "$OUT/san_${t}_$tool.rc" ) &
    pids+=($!)
  done
done
wait "${pids[@]}"
rc=0
for t in test_cuda_sparse test_cuda_dsa_fp8; do
  for tool in memcheck racecheck; do
    r=$(cat "$OUT/san_${t}_$tool.rc")
    [ "$r" != 0 ] && rc=1
    echo "$t $tool: rc=$r; $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/san_${t}_$tool.log" | tail -1); $(grep -E 'passed, ' "$OUT/san_${t}_$tool.log" | tail -1)"
  done
done
exit $rc
