#!/bin/bash
# One device call for the paged serving path (issue 18), under 4 minutes:
#   1. build the library with CUDA and tests/cuda/test_cuda_paged (build-gpu),
#   2. test_cuda_paged: the CUDA paged cache and paged DSA/HISA vs the CPU path
#      (page bytes, pooled means, selections; contexts up to 128K),
#   3. compute-sanitizer memcheck on its small cases (LA_CUDA_SMALL=1),
#   4. bench/gpu_paged.py: decode (64 sequences, 32K-128K, next_n 1, HI 64,
#      dI 128, k 2048) and prefill (4K queries at 128K): DSA paged vs the byte
#      floor, HISA paged vs DSA paged, and a plain-PyTorch gather-and-score peer.
# Stops at the first failure with a line saying which step failed.
# Results under $OUT (default /tmp/la_gpu_out): paged_*.log, paged_bench.json.
#   bash tests/cuda/gpu_paged.sh
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
fail() { echo "FAILED at step $1 ($(el) s): $2"; exit 1; }
echo "# gpu_paged $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | head -1)"

# 1. build
timeout 150 make BUILD=$B SKIP_DEPS=1 -j"$(nproc)" all $B/tests/cuda/test_cuda_paged > "$OUT/paged_build.log" 2>&1 \
  || { grep -E "error" "$OUT/paged_build.log" | head -10; fail 1 "build (log paged_build.log)"; }
echo "build: ok ($(el) s)"

# 2. correctness vs the CPU path
timeout 90 $B/tests/cuda/test_cuda_paged > "$OUT/paged_test.log" 2>&1
rc=$?
grep -E "^FAIL" "$OUT/paged_test.log" | head -8
echo "test_cuda_paged: rc=$rc $(grep -E '^# rows' "$OUT/paged_test.log") | $(tail -1 "$OUT/paged_test.log") ($(el) s)"
[ $rc -eq 0 ] || fail 2 "test_cuda_paged (log paged_test.log)"

# 3. sanitizer on the small cases
if command -v compute-sanitizer > /dev/null; then
  LA_CUDA_SMALL=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/cuda/test_cuda_paged \
    > "$OUT/paged_memcheck.log" 2>&1
  rc=$?
  echo "compute-sanitizer memcheck: rc=$rc $(grep -E 'ERROR SUMMARY' "$OUT/paged_memcheck.log" | tail -1) | $(grep -E 'passed, ' "$OUT/paged_memcheck.log" | tail -1) ($(el) s)"
  [ $rc -eq 0 ] || fail 3 "compute-sanitizer memcheck (log paged_memcheck.log)"
else
  echo "compute-sanitizer: not found, skipped"
fi

# 4. benchmark
LONGATTN_LIB=$PWD/$B/liblongattn.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
  timeout 110 python3 bench/gpu_paged.py --json "$OUT/paged_bench.json" > "$OUT/paged_bench.log" 2>&1
rc=$?
cat "$OUT/paged_bench.log" | tail -30
[ $rc -eq 0 ] || fail 4 "bench/gpu_paged.py rc=$rc (log paged_bench.log)"
echo "# gpu_paged done ($(el) s)"
