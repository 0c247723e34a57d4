#!/bin/bash
# HISA stage-2 paths (issue 7), one device call, <= 100 s wall:
#   bash tests/cuda/gpu_hisa.sh
#   1. make lib + test_cuda_sparse in build-gpu (a no-op when built), nvcc the bench
#   2. test_cuda_sparse with LA_CUDA_ONLY_INDEXERS=1: DSA / HISA /
#      block-sparse cases; every HISA case runs under each stage-2 path
#      (default = old = sc_gather_kernel, LA_CUDA_HISA_PATH=block: the
#      block-major wgmma kernel) vs the CPU,
#      vs the default path (indices equal) and == DSA when m*B >= L
#   3. bench_gpu_sparse topkhisa: top-k new/old, DSA and HISA per path at
#      L = 64K, 128K with "indices differ" counts (must be 0)
# Logs under $OUT (default /tmp/la_gpu_out); summary.txt last.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | head -1)"

# only the library and this test (a fresh tree: ~40-60 s at -j16); the
# bench's object compiles alongside
mkdir -p $B
timeout 60 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -c dev/bench_gpu_sparse.cu -o $B/bench_gpu_sparse.o > "$OUT/bench_build.log" 2>&1 &
bpid=$!
timeout 70 make BUILD=$B SKIP_DEPS=1 -j16 $B/liblongattn.a $B/tests/cuda/test_cuda_sparse > "$OUT/build.log" 2>&1 || {
  say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
wait $bpid
NV="nvcc $B/bench_gpu_sparse.o $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
timeout 20 $NV -lopenblas -llapack >> "$OUT/bench_build.log" 2>&1 || timeout 20 $NV >> "$OUT/bench_build.log" 2>&1 || say "BENCH BUILD FAILED (see bench_build.log)"
say "# build done at $(el) s"

rc=0
tl=$(( 85 - $(el) )); [ $tl -lt 25 ] && tl=25
LA_CUDA_ONLY_INDEXERS=1 timeout $tl $B/tests/cuda/test_cuda_sparse > "$OUT/test_hisa.log" 2>&1 || rc=1
say "test_cuda_sparse (indexers, HISA paths default/block): rc=$rc  $(tail -1 $OUT/test_hisa.log)  ($(el) s)"
grep -E "FAIL" "$OUT/test_hisa.log" | head -8 | tee -a "$S"

left=$(( 98 - $(el) ))
if [ -x $B/bench_gpu_sparse ] && [ $left -gt 10 ]; then
  timeout $left $B/bench_gpu_sparse topkhisa > "$OUT/bench_hisa.log" 2>&1
  say "bench topkhisa: rc=$? ($(el) s)"
  grep -E "^(dsa|hisa|topk)" "$OUT/bench_hisa.log" | tee -a "$S"
else
  say "bench: skipped ($(el) s elapsed)"
fi
exit $rc
