#!/bin/bash
# One device call for the sparse family (issue 7): build, correctness
# (test_cuda_sparse + compute-sanitizer on the small cases), benchmarks (ours
# and the plain-PyTorch peers in the same run).
#   bash tests/cuda/gpu_sparse_session.sh [tests|bench|all] [quick]
# Logs under $OUT; a short summary is printed last.
MODE=${1:-all}
Q=${2:-}
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader > "$OUT/gpu.txt" 2>&1
echo "# $(date -u +%FT%TZ) $(cat $OUT/gpu.txt)"
t0=$(date +%s)
make BUILD=$B SKIP_DEPS=1 -j16 cuda-tests > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -20; tail -5 "$OUT/build.log"; exit 1; }
# link the bench with BLAS/LAPACK when the library was built with them
NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_sparse.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
$NV -lopenblas -llapack >> "$OUT/build.log" 2>&1 || $NV >> "$OUT/build.log" 2>&1 || { echo "BENCH BUILD FAILED"; tail -20 "$OUT/build.log"; }
echo "# build: $(( $(date +%s) - t0 )) s"
rc=0
T=$B/tests/cuda/test_cuda_sparse
if [ "$MODE" = tests ] || [ "$MODE" = all ]; then
  timeout 200 $T > "$OUT/test_cuda_sparse.log" 2>&1 || rc=1
  echo "test_cuda_sparse: rc=$rc  $(tail -1 $OUT/test_cuda_sparse.log)"
  grep -E "FAIL|recall|sparse attn" "$OUT/test_cuda_sparse.log" | head -30
  if [ "${LA_SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
    for tool in memcheck racecheck; do
      LA_CUDA_SMALL=1 timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 $T > "$OUT/sanitizer_$tool.log" 2>&1
      src=$?
      echo "compute-sanitizer $tool: rc=$src $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' $OUT/sanitizer_$tool.log | tail -1) $(tail -1 $OUT/sanitizer_$tool.log)"
      [ $src -ne 0 ] && rc=1
    done
  fi
  echo "# tests done at $(( $(date +%s) - t0 )) s"
fi
if [ "$MODE" = bench ] || [ "$MODE" = all ]; then
  timeout 180 $B/bench_gpu_sparse $Q > "$OUT/bench_ours.log" 2>&1
  echo "# ours done at $(( $(date +%s) - t0 )) s"
  PYTHONUNBUFFERED=1 timeout 150 python3 bench/gpu_sparse.py ${Q:+--quick} > "$OUT/bench_peers.log" 2>&1
  echo "# peers done at $(( $(date +%s) - t0 )) s"
  cat "$OUT/bench_ours.log" "$OUT/bench_peers.log"
fi
exit $rc
