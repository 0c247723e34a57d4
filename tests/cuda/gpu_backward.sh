#!/bin/bash
# Benchmark step of the backward passes (GPU machine): builds the tree unless
# LA_SKIP_BUILD=1 (as under tests/cuda/gpu_round.sh: `gpu_round.sh check:300
# backward:200`) and bench/gpu_backward_driver.cu, then bench/gpu_backward.py
# (ours beside the peers; LA_BENCH_ARGS: its options). Correctness is the
# harness's (tests/backend/cases_backward_*.c, run by gpu_check.sh:
# test_backend_ops -o softmax_backward -o linear_backward ...).
#   bash tests/cuda/gpu_backward.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh backward
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_BUILD_S:-200}" make -j16 SKIP_DEPS=1 BUILD="$B" all > "$OUT/build.log" 2>&1 \
    || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
fi
"$B/gpu_backward_driver" none > /dev/null 2>&1
# rc 2 (an unknown workload): a driver carried with the tree runs here
[ $? = 2 ] || timeout 120 "$NVCC" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc \
    bench/gpu_backward_driver.cu "$B/liblongattn.a" -o "$B/gpu_backward_driver" \
    -Xcompiler -fopenmp -lopenblas -llapack -lgomp -lm -ldl >> "$OUT/driver_build.log" 2>&1 \
  || { say "driver build FAILED ($(el) s)"; tail -20 "$OUT/driver_build.log" | tee -a "$S"; exit 1; }
say "# build: $(el) s"
PYTHONUNBUFFERED=1 timeout "${LA_BENCH_S:-300}" python3 bench/gpu_backward.py \
    --driver "$B/gpu_backward_driver" ${LA_BENCH_ARGS:-} > "$OUT/bench.log" 2>&1
rc=$?
cut -c1-220 "$OUT/bench.log" | tail -40 | tee -a "$S"
W=${LA_WARM_LOG:-/tmp/la_warm_peers.log}
[ -f "$W" ] && { cp "$W" "$OUT/warm_peers.log"; say "# warm-up of the peers (tests/cuda/gpu_warm.sh): $(grep -c '^peer' "$W") lines in its log"; }
say "# backward bench rc=$rc, total $(el) s"
exit $rc
