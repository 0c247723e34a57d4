#!/bin/bash
# HISA stage-2 paths (issue 7), one device call, <= 110 s wall:
#   bash tests/cuda/gpu_hisa.sh                    (standalone: quick build)
#   bash tests/cuda/gpu_round.sh hisa:110          (LA_SKIP_BUILD=1: built by the round)
#   1. build: lib + test_cuda_sparse in build-gpu (skipped with LA_SKIP_BUILD=1),
#      nvcc the bench against build-gpu/liblongattn.a (always: ~10 s)
#   2. test_cuda_sparse with LA_CUDA_ONLY_INDEXERS=1: DSA / HISA /
#      block-sparse cases; every HISA case runs under each stage-2 path
#      (default = block = hb_kernel<false>, old = the gather kernels,
#      pipe = hb_kernel<true> + slices longest first, pipe_grid / block_lpt =
#      one change each; opt-in) vs the CPU, vs the default path
#      (indices equal, outputs poisoned before each call) and == DSA when
#      m*B >= L
#   3. bench_gpu_sparse topkhisa: top-k new/old, DSA and HISA per path at
#      L = 64K, 128K (old, block, pipe, block, pipe, pipe_grid, block_lpt:
#      20 timed calls each)
#      with "indices differ" counts (must be 0), then the per-stage
#      breakdown of each path (LA_CUDA_HISA_TIMING=1: "hisa timing:" lines)
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

mkdir -p $B
# the bench's object compiles alongside the library build
timeout 60 nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -c dev/bench_gpu_sparse.cu -o $B/bench_gpu_sparse.o > "$OUT/bench_build.log" 2>&1 &
bpid=$!
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  # only the library and this test (a fresh tree: ~40-60 s at -j16)
  timeout 70 make BUILD=$B SKIP_DEPS=1 -j16 $B/liblongattn.a $B/tests/cuda/test_cuda_sparse > "$OUT/build.log" 2>&1 || {
    say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
fi
wait $bpid
NV="nvcc $B/bench_gpu_sparse.o $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
timeout 20 $NV -lopenblas -llapack >> "$OUT/bench_build.log" 2>&1 || timeout 20 $NV >> "$OUT/bench_build.log" 2>&1 || say "BENCH BUILD FAILED (see bench_build.log)"
say "# build done at $(el) s"

rc=0
tl=$(( 75 - $(el) )); [ $tl -lt 25 ] && tl=25
LA_CUDA_ONLY_INDEXERS=1 timeout $tl $B/tests/cuda/test_cuda_sparse > "$OUT/test_hisa.log" 2>&1 || rc=1
say "test_cuda_sparse (indexers, HISA paths default/old/pipe/pipe_grid/block_lpt): rc=$rc  $(tail -1 $OUT/test_hisa.log)  ($(el) s)"
grep -E "FAIL" "$OUT/test_hisa.log" | head -8 | tee -a "$S"

left=$(( 108 - $(el) ))
if [ -x $B/bench_gpu_sparse ] && [ $left -gt 10 ]; then
  timeout $left $B/bench_gpu_sparse topkhisa > "$OUT/bench_hisa.log" 2>&1
  say "bench topkhisa: rc=$? ($(el) s)"
  grep -E "^(dsa|hisa|topk|blocksp)" "$OUT/bench_hisa.log" | tee -a "$S"
  grep -E "timing:" "$OUT/bench_hisa.log" | sed 's/ T=1024//' | tee -a "$S"
else
  say "bench: skipped ($(el) s elapsed)"
fi
exit $rc
