#!/bin/bash
# One device call for the focused flatten bf16 fast path (src/cuda/focused.cu):
# builds the timing driver (the library and tests are built already:
# make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests), runs test_cuda_focused
# (CUDA vs CPU, path trace), then bench_gpu_focused (old vs new, with and
# without the 5x5 conv, N = 4K, 32K, 128K), then memcheck on the small cases
# while time is left. Wall <= 70 s; logs under $OUT, <= 20 summary lines.
#   bash tests/cuda/gpu_focused.sh
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${LA_BUILD:-build-gpu}
T=$B/tests/cuda/test_cuda_focused
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
timeout 40 nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_focused.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_focused > "$OUT/focused_build.log" 2>&1 || echo "BENCH BUILD FAILED: $(head -3 "$OUT/focused_build.log")"
LA_CUDA_FOCUSED_VERBOSE=1 timeout 30 $T > "$OUT/focused_test.log" 2> "$OUT/focused_paths.log"
rc=$?
echo "test_cuda_focused: rc=$rc  $(tail -1 "$OUT/focused_test.log")  calls: fast=$(grep -c 'path=fast' "$OUT/focused_paths.log") old=$(grep -c 'path=old' "$OUT/focused_paths.log")  ($(el) s)"
grep -E "FAIL" "$OUT/focused_test.log" "$OUT/focused_paths.log" | head -5
[ -x $B/bench_gpu_focused ] && timeout 30 $B/bench_gpu_focused > "$OUT/focused_bench.log" 2>&1
echo "bench: rc=$? ($(el) s)"; grep -v '^#   ' "$OUT/focused_bench.log" | head -5; grep '^#   N=32768' "$OUT/focused_bench.log"
left=$(( 66 - $(el) ))
if command -v compute-sanitizer >/dev/null && [ $left -gt 8 ]; then
  LA_CUDA_SMALL=1 timeout $left compute-sanitizer --tool memcheck --error-exitcode 3 $T > "$OUT/focused_memcheck.log" 2>&1
  echo "memcheck (small): rc=$?  $(grep 'ERROR SUMMARY' "$OUT/focused_memcheck.log" | tail -1)  $(tail -1 "$OUT/focused_memcheck.log")  ($(el) s)"
fi
echo "# total $(el) s"
exit $rc
