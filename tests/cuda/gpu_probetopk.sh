#!/bin/bash
# Diagnostics for HISA's stage-2 top-k (dev/probe_topk_rows.cu), <= 60 s:
# la_topk on DSA score rows and on random rows at L = 8K and 64K, and 16-row
# dumps (DSA rows, HISA candidate rows) under $OUT for offline analysis.
# Assumes build-gpu is built (tests/cuda/gpu_round.sh probetopk:60).
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/probe_topk_rows.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/probe_topk_rows"
timeout 40 $NV -lopenblas -llapack > "$OUT/probe_build.log" 2>&1 || timeout 40 $NV >> "$OUT/probe_build.log" 2>&1 \
  || { echo "probe build failed"; tail -5 "$OUT/probe_build.log"; exit 1; }
timeout 30 $B/probe_topk_rows "$OUT" 2>&1 | tee "$OUT/probe.log"
ls -la "$OUT"/*.bin
