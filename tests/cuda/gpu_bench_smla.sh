#!/bin/bash
# Benchmark step of the smla family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_smla (sparse MLA attention: validates
# the default against the portable kernel, then times it: TFLOP/s at k = 2048).
#   bash tests/cuda/gpu_bench_smla.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_smla
rc=0
gpu_bench bench_gpu_smla "${LA_BENCH_S:-60}" 10 || rc=1
head -12 "$OUT/bench_gpu_smla_10.log" | tee -a "$S"
say "# bench_smla total $(el) s, rc=$rc"
exit $rc
