#!/bin/bash
# Diagnostics for HISA's stage-2 top-k (dev/probe_topk_rows.cu), <= 60 s:
# la_topk on DSA score rows and on random rows at L = 8K and 64K, and 16-row
# dumps (DSA rows, HISA candidate rows) under $OUT for offline analysis.
# Assumes build-gpu is built (tests/cuda/gpu_round.sh probetopk:60).
. tests/cuda/gpu_common.sh gpu_probetopk
gpu_build_driver probe_topk_rows 40
wait $bpid
[ -x $B/probe_topk_rows ] || { say "probe build failed"; tail -5 "$OUT/probe_topk_rows_build.log"; exit 1; }
timeout 30 $B/probe_topk_rows "$OUT" 2>&1 | tee "$OUT/probe.log"
ls -la "$OUT"/*.bin
