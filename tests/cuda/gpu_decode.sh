#!/bin/bash
# One device call for the CUDA MHLA decoding state (src/cuda/mhla_decode.cu):
# build the bench driver, run test_cuda_decode (CUDA decode == CPU decode ==
# CPU chunkwise forward), compute-sanitizer memcheck on its small cases, then
# the timing driver (µs per decode token, B = 1 / 32, H = 12, D = Dv = 128,
# bf16, context 4K / 64K). Expects the tree built in build-gpu:
#   make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests && bash tests/cuda/gpu_decode.sh
# Logs under $OUT; at most ~25 lines printed; ends within ~90 s.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${LA_BUILD:-build-gpu}
T=$B/tests/cuda/test_cuda_decode
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)"
[ -x "$T" ] || { echo "missing $T (build with make BUILD=$B all cuda-tests)"; exit 1; }
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
timeout 60 nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_decode.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_decode > "$OUT/decode_build.log" 2>&1 || { echo "BENCH BUILD FAILED"; tail -5 "$OUT/decode_build.log"; }
echo "# bench built ($(el) s)"

timeout 40 $T > "$OUT/decode_test.log" 2>&1
rc=$?
echo "test_cuda_decode: rc=$rc  $(tail -1 "$OUT/decode_test.log")  ($(el) s)"
grep -E "FAIL" "$OUT/decode_test.log" | head -6

if command -v compute-sanitizer >/dev/null; then
  left=$(( 75 - $(el) )); [ $left -gt 30 ] && left=30
  if [ $left -ge 10 ]; then
    LA_CUDA_SMALL=1 timeout $left compute-sanitizer --tool memcheck --error-exitcode 3 $T > "$OUT/decode_memcheck.log" 2>&1
    echo "memcheck: rc=$?  $(grep -E 'ERROR SUMMARY' "$OUT/decode_memcheck.log" | tail -1)  $(grep -E 'passed, ' "$OUT/decode_memcheck.log" | tail -1)  ($(el) s)"
  else
    echo "memcheck: skipped (time)"
  fi
fi

if [ -x $B/bench_gpu_decode ]; then
  left=$(( 88 - $(el) )); [ $left -lt 5 ] && left=5
  timeout $left $B/bench_gpu_decode > "$OUT/decode_bench.log" 2>&1
  echo "bench: rc=$? ($(el) s)"
  cut -c1-230 "$OUT/decode_bench.log" | head -6
fi
echo "# total $(el) s"
exit $rc
