#!/bin/bash
# Benchmark step of the linear family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_linear (validates, then linear
# attention and MHLA, non-causal, bf16 D = 128, N = 4K..128K, and the scaling
# table), dev/cuda/linear_heads (D = 64, 32, Dv != D, causal too: check, then time at the bytes
# of D = 128) and the peers of bench/gpu_linear.py: plain-PyTorch einsum, the official
# MHLA core, flash-bidirectional-linear-attention (peers/fbla, carried when present).
#   bash tests/cuda/gpu_bench_linear.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_linear
rc=0
gpu_bench bench_gpu_linear "${LA_BENCH_S:-90}" || rc=1
grep -E " ms " "$OUT/bench_gpu_linear.log" | cut -c1-120 | head -16 | tee -a "$S"
# head dims 32/64 and Dv != D at the bytes of D = 128 (dev/cuda/linear_heads: check, then time)
if timeout 120 make -j16 BUILD=$B SKIP_DEPS=1 "$B/dev/cuda/linear_heads" > "$OUT/linear_heads_build.log" 2>&1; then
  timeout "${LA_HEADS_S:-60}" "$B/dev/cuda/linear_heads" > "$OUT/linear_heads.log" 2>&1 || rc=1
  say "linear_heads: ($(el) s)"
  grep -E "^FAIL|# check| ms " "$OUT/linear_heads.log" | cut -c1-100 | head -50 | tee -a "$S"
else
  say "linear_heads: BUILD FAILED"; rc=1
fi
for peer in einsum official video; do gpu_peer gpu_linear 30 --peer $peer --ns 4096,16384,32768 || rc=1; done
[ -d peers/fbla ] && { gpu_peer gpu_linear "${LA_FBLA_S:-90}" --peer fbla --ns 32768,4096 || rc=1; }
say "# bench_linear total $(el) s, rc=$rc"
exit $rc
