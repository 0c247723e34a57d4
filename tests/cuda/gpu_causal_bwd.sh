#!/bin/bash
# Causal linear attention backward on the GPU machine (issue 14, variant
# "mma" of linear_bwd): the sm_90a build, the harness's linear backward cases
# on CUDA (tests/backend/cases_backward_lin.c: every variant against float64
# and the CPU backward), dev/cuda/linear_causal_bwd (mma against the portable
# engine at B1 H12 N32K D128, bit-identical repeat, C-level timing), then the
# same row through the Python package (bench/gpu_backward.py's ours_py peer)
# (LA_HARNESS_ARGS: more harness options, e.g. -n causal; LA_BENCH_S=0: no Python row)
# and, with LA_FLA=1 and a carried .whl/fla_core-*.whl, flash-linear-attention.
#   bash tests/cuda/gpu_causal_bwd.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh causal_bwd
timeout "${LA_BUILD_S:-150}" make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$B/liblongattn.a" \
    "$B/liblongattn.so" "$B/tests/backend/test_backend_ops" "$B/dev/cuda/linear_causal_bwd" \
    > "$OUT/build.log" 2>&1 \
  || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
say "# build: $(el) s"
rc=0
timeout "${LA_DRIVER_S:-40}" "$B/dev/cuda/linear_causal_bwd" 20 > "$OUT/driver.log" 2>&1 || rc=1
say "# driver rc=$rc ($(el) s)"
cut -c1-240 "$OUT/driver.log" | tail -6 | tee -a "$S"
timeout "${LA_HARNESS_S:-60}" "$B/tests/backend/test_backend_ops" -b cuda -o linear_backward ${LA_HARNESS_ARGS:-} \
    > "$OUT/harness.log" 2>&1 || rc=1
say "# harness ($(el) s)"
grep -E "^FAIL|^# cases|passed," "$OUT/harness.log" | cut -c1-200 | head -20 | tee -a "$S"
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1 LA_OURS_PY="linear causal"
peers=ours_py
if [ "${LA_FLA:-0}" = 1 ] && ls .whl/fla_core-*.whl > /dev/null 2>&1 &&
   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/la_site \
       .whl/fla_core-*.whl > "$OUT/wheels.log" 2>&1; then
  export PYTHONPATH=python:/tmp/la_site
  peers=ours_py,fla
fi
[ "${LA_BENCH_S:-60}" = 0 ] && exit $rc
timeout "${LA_BENCH_S:-60}" python3 bench/gpu_backward.py --ours "" --peers "$peers" --timeout 55 \
    > "$OUT/bench.log" 2>&1 || rc=1
say "# bench ($(el) s)"
grep -E " ms|skipped|failed|timeout" "$OUT/bench.log" | cut -c1-200 | head -8 | tee -a "$S"
exit $rc
