#!/bin/bash
# Benchmark step of the softmax family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): dev/bench_gpu_softmax (validates the tensor-core
# kernel against the portable one, then B=1 H=12 D=128 bf16 N = 4K..32K, causal
# and not) and PyTorch's SDPA on the same shapes (bench/gpu_linear.py --peer sdpa).
#   bash tests/cuda/gpu_bench_softmax.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_softmax
rc=0
gpu_bench bench_gpu_softmax "${LA_BENCH_S:-60}" || rc=1
grep -E "^softmax" "$OUT/bench_gpu_softmax.log" | head -12 | tee -a "$S"
gpu_peer gpu_linear "${LA_PEER_S:-40}" --peer sdpa --ns 4096,16384,32768 || rc=1
say "# bench_softmax total $(el) s, rc=$rc"
exit $rc
