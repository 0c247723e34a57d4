#!/bin/bash
# GPU correctness for every CUDA operator family (run on the GPU machine):
#   bash tests/cuda/run_gpu_tests.sh BUILD_DIR OUT_DIR
# 1. every tests/cuda/test_* binary (each CUDA op vs the CPU path or a float64
#    reference; each prints "N passed, N failed" last), 2. compute-sanitizer
#    memcheck and racecheck on the linear family's small cases (LA_CUDA_SMALL=1).
# The per-family scripts tests/cuda/gpu_*.sh add benchmarks; this one is the
# plain correctness pass. Logs in OUT_DIR; prints a summary line per binary.
# LA_GPU_TESTS="softmax smla" runs only those binaries (test_cuda_NAME).
BUILD=${1:-build-gpu}
OUT=${2:-/tmp/la_gpu_out}
mkdir -p "$OUT"
rc=0
for T in "$BUILD"/tests/cuda/test_*; do
  [ -x "$T" ] || continue
  name=$(basename "$T")
  if [ -n "${LA_GPU_TESTS:-}" ]; then
    case " $LA_GPU_TESTS " in *" ${name#test_cuda_} "*) ;; *) continue ;; esac
  fi
  timeout 400 "$T" > "$OUT/$name.log" 2>&1 || rc=1
  echo "$name: $(tail -1 "$OUT/$name.log")"
  grep -E "FAIL" "$OUT/$name.log" | head -10
done
T=$BUILD/tests/cuda/test_cuda_linear
if [ "${LA_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null && [ -x "$T" ]; then
  for tool in memcheck racecheck; do
    LA_CUDA_SMALL=1 timeout 240 compute-sanitizer --tool $tool --error-exitcode 3 $T \
      > "$OUT/sanitizer_$tool.log" 2>&1
    src=$?
    echo "compute-sanitizer $tool (test_cuda_linear small): rc=$src  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)"
    [ $src -ne 0 ] && rc=1
  done
fi
exit $rc
