#!/bin/bash
# GPU correctness for the linear family (run on the GPU machine):
#   bash tests/cuda/run_gpu_tests.sh BUILD_DIR OUT_DIR
# 1. test_cuda_linear (every CUDA op vs the CPU path, long sequences, bf16
#    overflow at N = 256K), 2. compute-sanitizer memcheck and racecheck on the
#    small cases (LA_CUDA_SMALL=1). Logs in OUT_DIR; prints a summary.
BUILD=${1:-build-gpu}
OUT=${2:-/tmp/la_gpu_out}
mkdir -p "$OUT"
T=$BUILD/tests/cuda/test_cuda_linear
rc=0
timeout 400 $T > "$OUT/test_cuda_linear.log" 2>&1 || rc=1
echo "test_cuda_linear: rc=$rc  $(tail -1 "$OUT/test_cuda_linear.log")"
grep -E "FAIL" "$OUT/test_cuda_linear.log" | head -20
if [ "${LA_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    LA_CUDA_SMALL=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $T \
      > "$OUT/sanitizer_$tool.log" 2>&1
    src=$?
    echo "compute-sanitizer $tool: rc=$src  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)  $(grep -E 'passed, ' "$OUT/sanitizer_$tool.log" | tail -1)"
    [ $src -ne 0 ] && rc=1
  done
fi
exit $rc
