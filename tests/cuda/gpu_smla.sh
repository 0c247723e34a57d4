#!/bin/bash
# Device script for sparse MLA v2/v3 (issue 7): correctness of every path
# (wg, wgpv, mma, old, exact), then validation vs exact and old/mma/wg/wgpv timing. Assumes `make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests`
# was run (build-gpu/liblongattn.a, build-gpu/tests/cuda/test_cuda_{smla,sparse}).
#   bash tests/cuda/gpu_smla.sh        (wall ~60-80 s; logs under $OUT)
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
echo "# gpu_smla $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>/dev/null)"
# the driver builds on the CPU while the tests use the GPU
NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_smla.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_smla"
( timeout 80 $NV -lopenblas -llapack > "$OUT/smla_build.log" 2>&1 || timeout 80 $NV >> "$OUT/smla_build.log" 2>&1 ) &
bpid=$!
rc=0
timeout 40 $B/tests/cuda/test_cuda_smla > "$OUT/test_cuda_smla.log" 2>&1 || rc=1
echo "test_cuda_smla (paths wg/wgpv/mma/old/exact): rc=$rc  $(tail -1 $OUT/test_cuda_smla.log)"
grep -E "FAIL|error" "$OUT/test_cuda_smla.log" | head -8
timeout 45 $B/tests/cuda/test_cuda_sparse > "$OUT/test_cuda_sparse.log" 2>&1 || rc=1
echo "test_cuda_sparse (default path): $(tail -1 $OUT/test_cuda_sparse.log)  [$(( $(date +%s) - t0 )) s]"
grep -E "FAIL" "$OUT/test_cuda_sparse.log" | head -5
grep -E "sparse attn" "$OUT/test_cuda_sparse.log" | head -5
wait $bpid
if [ -x $B/bench_gpu_smla ] && [ $B/bench_gpu_smla -nt dev/bench_gpu_smla.cu ]; then
  timeout 40 $B/bench_gpu_smla 10 > "$OUT/bench_smla.log" 2>&1
  brc=$?
  cat "$OUT/bench_smla.log" | head -12
  [ $brc -ne 0 ] && { echo "bench rc=$brc"; rc=1; }
else
  echo "BENCH BUILD FAILED"; tail -5 "$OUT/smla_build.log"; rc=1
fi
echo "# bench done [$(( $(date +%s) - t0 )) s]"
# memcheck on the small cases, only while the 90 s wall allows it
if command -v compute-sanitizer >/dev/null && [ $(( $(date +%s) - t0 )) -lt 62 ]; then
  LA_CUDA_SMALL=1 timeout $(( 88 - ($(date +%s) - t0) )) compute-sanitizer --tool memcheck --error-exitcode 3 \
    $B/tests/cuda/test_cuda_smla > "$OUT/smla_memcheck.log" 2>&1
  echo "memcheck test_cuda_smla small: rc=$? $(grep -E 'ERROR SUMMARY' $OUT/smla_memcheck.log | tail -1)"
fi
echo "# total $(( $(date +%s) - t0 )) s, rc=$rc"
exit $rc
