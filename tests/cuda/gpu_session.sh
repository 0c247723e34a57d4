#!/bin/bash
# One device call for the linear family: build, correctness, benchmarks.
#   bash tests/cuda/gpu_session.sh [tests|bench|all] [quick]
# Writes logs under $OUT (the device tool's output folder) and prints a short
# table last.
MODE=${1:-all}
Q=${2:-}
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "# $(date -u +%FT%TZ) $(cat $OUT/gpu.txt)"
t0=$(date +%s)
make BUILD=$B SKIP_DEPS=1 -j16 cuda-tests > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -20; tail -5 "$OUT/build.log"; exit 1; }
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_linear.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_linear >> "$OUT/build.log" 2>&1 || { echo "BENCH BUILD FAILED"; tail -20 "$OUT/build.log"; }
echo "# build: $(( $(date +%s) - t0 )) s"
rc=0
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  bash tests/cuda/run_gpu_tests.sh $B "$OUT" || rc=1
  echo "# tests done at $(( $(date +%s) - t0 )) s"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  timeout 200 $B/bench_gpu_linear $Q > "$OUT/bench_ours.log" 2>&1
  echo "# ours done at $(( $(date +%s) - t0 )) s"
  timeout 150 python3 bench/gpu_linear.py ${Q:+--quick} > "$OUT/bench_peers.log" 2>&1
  echo "# peers done at $(( $(date +%s) - t0 )) s"
  if [ "${LA_BENCH_FLA:-0}" = 1 ]; then
    timeout 120 python3 bench/gpu_linear.py --fla >> "$OUT/bench_peers.log" 2>&1
    echo "# fla done at $(( $(date +%s) - t0 )) s"
  fi
  cat "$OUT/bench_ours.log"
  cat "$OUT/bench_peers.log"
fi
exit $rc
