#!/bin/bash
# Benchmark step of the paged serving path (GPU machine): builds the tree
# unless LA_SKIP_BUILD=1 (as under tests/cuda/gpu_round.sh), then
# bench/gpu_paged.py: decode (64 sequences, 32K-128K, next_n 1, HI 64, dI 128,
# k 2048) and prefill (4K queries at 128K): DSA paged vs the byte floor, HISA
# paged vs DSA paged, and a plain-PyTorch gather-and-score peer. Correctness
# is the harness's (tests/backend/cases_paged.c, run by gpu_check.sh:
# test_backend_ops -o paged). Results under $OUT: paged_bench.log,
# paged_bench.json, summary.txt.
#   bash tests/cuda/gpu_paged.sh
. tests/cuda/gpu_common.sh paged
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_BUILD_S:-200}" make -j16 SKIP_DEPS=1 BUILD="$B" all > "$OUT/build.log" 2>&1 \
    || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
  say "# build: $(el) s"
fi
LONGATTN_LIB=$PWD/$B/liblongattn.so PYTHONPATH=$PWD/python PYTHONUNBUFFERED=1 \
  timeout "${LA_BENCH_S:-110}" python3 bench/gpu_paged.py --json "$OUT/paged_bench.json" > "$OUT/paged_bench.log" 2>&1
rc=$?
tail -30 "$OUT/paged_bench.log" | tee -a "$S"
say "# paged bench rc=$rc, total $(el) s"
exit $rc
