#!/bin/bash
# Check-and-benchmark step of the softmax family (GPU machine):
#   1. the backend harness's softmax table (tests/backend/test_backend_ops -o softmax -b cuda),
#   2. the CUDA backward test's softmax cases (tests/cuda/test_cuda_backward, LA_BWD_SOFTMAX_ONLY),
#   3. dev/cuda/softmax: bf16 and f16, D 32/64/128 and Dv != D against float64 and the
#      dtype-rounded plain formula, then forward and backward timings (B1, 12x128 channels,
#      N = 8K and 32K, causal and not),
#   4. PyTorch SDPA (flash) on the same shapes (dev/cuda/softmax_sdpa.py).
# The binaries are built here (make BUILD=$B ...) unless LA_PREBUILT names a folder holding
# tests/backend/test_backend_ops, tests/cuda/test_cuda_backward and dev/cuda/softmax.
#   bash tests/cuda/gpu_bench_softmax.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh bench_softmax
rc=0
if [ -n "$LA_PREBUILT" ]; then
  B=$LA_PREBUILT
else
  timeout 400 make -j16 BUILD=$B SKIP_DEPS=1 "$B/tests/backend/test_backend_ops" \
    "$B/tests/cuda/test_cuda_backward" "$B/dev/cuda/softmax" > "$OUT/build.log" 2>&1 \
    || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -5 | tee -a "$S"; exit 1; }
fi
timeout "${LA_HARNESS_S:-90}" "$B/tests/backend/test_backend_ops" -o softmax -b cuda > "$OUT/harness_softmax.log" 2>&1
r=$?; [ $r = 0 ] || rc=1
say "harness softmax: rc=$r ($(el) s) $(grep -E '^# cases' "$OUT/harness_softmax.log")"
grep -E "FAIL" "$OUT/harness_softmax.log" | head -8 | cut -c1-200 | tee -a "$S"
LA_BWD_SOFTMAX_ONLY=1 timeout "${LA_BWD_S:-90}" "$B/tests/cuda/test_cuda_backward" > "$OUT/backward_softmax.log" 2>&1
r=$?; [ $r = 0 ] || rc=1
say "test_cuda_backward softmax: rc=$r ($(el) s) $(tail -1 "$OUT/backward_softmax.log")"
grep -E "FAIL" "$OUT/backward_softmax.log" | head -8 | cut -c1-200 | tee -a "$S"
timeout "${LA_BENCH_S:-120}" "$B/dev/cuda/softmax" > "$OUT/softmax_driver.log" 2>&1
r=$?; [ $r = 0 ] || rc=1
say "dev/cuda/softmax: rc=$r ($(el) s) $(grep -E '^# checks' "$OUT/softmax_driver.log")"
grep -E "FAIL|failed:" "$OUT/softmax_driver.log" | head -8 | cut -c1-220 | tee -a "$S"
grep -E "^softmax-" "$OUT/softmax_driver.log" | tee -a "$S" > /dev/null
PYTHONUNBUFFERED=1 timeout "${LA_PEER_S:-120}" python3 dev/cuda/softmax_sdpa.py > "$OUT/sdpa.log" 2>&1
r=$?; [ $r = 0 ] || rc=1
say "sdpa: rc=$r ($(el) s) $(grep -c '^sdpa' "$OUT/sdpa.log") lines"
grep -E "^sdpa-|Error" "$OUT/sdpa.log" | tee -a "$S" > /dev/null
say "# bench_softmax total $(el) s, rc=$rc"
exit $rc
