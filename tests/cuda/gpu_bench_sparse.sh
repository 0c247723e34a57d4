#!/bin/bash
# Benchmark step of the sparse family (GPU machine; the tree built, as by
# tests/cuda/gpu_round.sh): the indexers and top-k: dev/bench_gpu_sparse dsa
# (the flat DSA indexer, bf16 and fp8, L = 8K / 64K / 128K), topk3 (1024 rows of
# 64K / 8K / 128K, k = 2048) and topkhisa, dev/bench_hisa2 (HISA against DSA at
# 64K / 128K keys), then the plain-PyTorch and peer indexers of bench/gpu_sparse.py.
#   bash tests/cuda/gpu_bench_sparse.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_sparse
rc=0
gpu_bench bench_gpu_sparse "${LA_BENCH_S:-90}" dsa || rc=1
gpu_bench bench_gpu_sparse 60 topk3 || rc=1
gpu_bench bench_gpu_sparse 60 topkhisa || rc=1
gpu_bench bench_hisa2 "${LA_BENCH_S:-90}" || rc=1
grep -hE "^(dsa|hisa|topk)" "$OUT"/bench_gpu_sparse_*.log "$OUT/bench_hisa2.log" 2>/dev/null | cut -c1-120 | head -20 | tee -a "$S"
gpu_peer gpu_sparse "${LA_PEER_S:-120}" || rc=1
say "# bench_sparse total $(el) s, rc=$rc"
exit $rc
