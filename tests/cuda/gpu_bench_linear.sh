#!/bin/bash
# Benchmark step of the linear family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_linear (validates, then linear
# attention and MHLA, non-causal, bf16 D = 128, N = 4K..128K, and the scaling
# table) and the peers of bench/gpu_linear.py: plain-PyTorch einsum, the official
# MHLA core, flash-bidirectional-linear-attention (peers/fbla, carried when present).
#   bash tests/cuda/gpu_bench_linear.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_linear
rc=0
gpu_bench bench_gpu_linear "${LA_BENCH_S:-90}" || rc=1
grep -E " ms " "$OUT/bench_gpu_linear.log" | cut -c1-120 | head -16 | tee -a "$S"
for peer in einsum official video; do gpu_peer gpu_linear 30 --peer $peer --ns 4096,16384,32768 || rc=1; done
[ -d peers/fbla ] && { gpu_peer gpu_linear "${LA_FBLA_S:-90}" --peer fbla --ns 32768,4096 || rc=1; }
say "# bench_linear total $(el) s, rc=$rc"
exit $rc
