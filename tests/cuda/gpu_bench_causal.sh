#!/bin/bash
# Benchmark step of the causal family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_causal (validates, then causal
# linear attention bf16 D = 128 at N = 4K, 32K, 128K) and flash-linear-attention
# (bench/gpu_linear.py --fla, when installed).
#   bash tests/cuda/gpu_bench_causal.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_causal
rc=0
gpu_bench bench_gpu_causal "${LA_BENCH_S:-90}" || rc=1
grep -E " ms " "$OUT/bench_gpu_causal.log" | cut -c1-120 | head -12 | tee -a "$S"
gpu_peer gpu_linear "${LA_PEER_S:-120}" --fla || rc=1
say "# bench_causal total $(el) s, rc=$rc"
exit $rc
