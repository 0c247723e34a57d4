#!/bin/bash
# Benchmark step of the focused family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_focused (validates, then focused
# linear attention, flatten, bf16 D = 128, against its byte floor).
#   bash tests/cuda/gpu_bench_focused.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_focused
rc=0
gpu_bench bench_gpu_focused "${LA_BENCH_S:-60}" || rc=1
grep -E " ms " "$OUT/bench_gpu_focused.log" | cut -c1-120 | head -12 | tee -a "$S"
say "# bench_focused total $(el) s, rc=$rc"
exit $rc
