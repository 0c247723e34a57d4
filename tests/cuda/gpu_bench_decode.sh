#!/bin/bash
# Benchmark step of the decode family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_decode (microseconds per decoded
# token of the causal MHLA state, B = 1 / 32, H = 12, D = Dv = 128, bf16,
# context 4K / 64K).
#   bash tests/cuda/gpu_bench_decode.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_decode
rc=0
gpu_bench bench_gpu_decode "${LA_BENCH_S:-60}" || rc=1
cut -c1-160 "$OUT/bench_gpu_decode.log" | head -8 | tee -a "$S"
say "# bench_decode total $(el) s, rc=$rc"
exit $rc
