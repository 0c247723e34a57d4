#!/bin/bash
# One device call for the linear family's head dims (GPU machine): the dev
# driver dev/cuda/linear_heads (check, then time at N = 32K), the same timing
# from an earlier build for comparison (OLD=path of its linear_heads, when
# given), then the backend harness on the linear, MHLA and focused tables.
#   make -j16 BUILD=build-gpu SKIP_DEPS=1 build-gpu/dev/cuda/linear_heads \
#        build-gpu/tests/backend/test_backend_ops
#   [BIN=build-gpu] [OLD=...] [HARNESS_S=75] [HARNESS_ARGS=--small] bash dev/cuda/linear_heads_run.sh
# Logs under $OUT (heads.log: summary and timings; check.log; harness.log).
set -o pipefail
B=${BIN:-build-gpu}
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
L="$OUT/heads.log"
t0=$(date +%s)
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader; date -u; } 2>&1 | tee "$L"
timeout 60 "$B/dev/cuda/linear_heads" check > "$OUT/check.log" 2>&1
echo "# check rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$L"
grep -E "^FAIL|# check" "$OUT/check.log" | head -30 | tee -a "$L"
echo "# time (this build)" | tee -a "$L"
timeout 60 "$B/dev/cuda/linear_heads" time 2>&1 | tee -a "$L"
if [ -n "$OLD" ] && [ -x "$OLD" ]; then
  echo "# time (OLD build: $OLD)" | tee -a "$L"
  timeout 60 "$OLD" time 2>&1 | tee -a "$L"
fi
timeout "${HARNESS_S:-75}" "$B/tests/backend/test_backend_ops" -b cuda -o linear -o mhla -o focused $HARNESS_ARGS \
  > "$OUT/harness.log" 2>&1
echo "# harness rc=$? ($(( $(date +%s) - t0 )) s)" | tee -a "$L"
grep -E "FAIL|passed|failed" "$OUT/harness.log" | tail -25 | tee -a "$L"
