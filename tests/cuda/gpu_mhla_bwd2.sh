#!/bin/bash
# Non-causal linear / MHLA backward on the GPU machine (issue 14, variants
# "mma" and "mma2" of linear_bwd and mhla_bwd): the sm_90a build, the dev
# driver dev/cuda/linear_bwd (validation of every variant against the CPU
# backward, bit-identical repeat, then C-level timing of the shapes
# under the forced variant), the harness's linear / MHLA backward cases on
# CUDA (every variant against float64 and the CPU backward), the driver
# under mma, per-kernel times of mma2 (ncu), the MHLA rows through the
# Python package (the default variant; bench/gpu_backward.py's ours_py peer),
# then compute-sanitizer memcheck / racecheck of mma2 on the small cases.
#   bash tests/cuda/gpu_mhla_bwd2.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh mhla_bwd2
timeout "${LA_BUILD_S:-150}" make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$B/liblongattn.a" \
    "$B/liblongattn.so" "$B/tests/backend/test_backend_ops" "$B/dev/cuda/linear_bwd" \
    > "$OUT/build.log" 2>&1 \
  || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
say "# build: $(el) s"
rc=0
D=$B/dev/cuda/linear_bwd
drv() {
  timeout "${LA_DRIVER_S:-40}" "$D" "$1" 10 > "$OUT/driver$1.log" 2>&1 || rc=1
  say "# driver variant $1 rc=$? ($(el) s)"
  grep -E "FAIL|VALIDATE|BENCH" "$OUT/driver$1.log" | cut -c1-200 | head -12 | tee -a "$S"
}
drv 2
timeout "${LA_HARNESS_S:-50}" "$B/tests/backend/test_backend_ops" -b cuda -o linear_backward \
    -o mhla_backward > "$OUT/harness.log" 2>&1 || rc=1
say "# harness ($(el) s)"
grep -E "^FAIL|^# cases|passed," "$OUT/harness.log" | cut -c1-200 | head -16 | tee -a "$S"
grep -cE "SKIP" "$OUT/harness.log" | sed 's/^/# lines with SKIP: /' | tee -a "$S"
drv 1
NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
timeout "${LA_NCU_S:-40}" "$NCU" --clock-control none --kernel-name regex:"lt_|l2_" --launch-count 30 \
    --metrics gpu__time_duration.sum --csv "$D" 2 1 bench > "$OUT/ncu.csv" 2>&1
say "# ncu rc=$? ($(el) s)"
grep -E '"gpu__time_duration.sum"' "$OUT/ncu.csv" | awk -F'","' '{print $5, $(NF)}' | \
    sed 's/(anonymous namespace):://g; s/"//g' | cut -c1-90 | head -30 | tee -a "$S"
if [ "${LA_BENCH_S:-45}" != 0 ]; then
  LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1 LA_OURS_PY="mhla wan,mhla 1-D" \
    timeout "${LA_BENCH_S:-45}" python3 bench/gpu_backward.py --ours "" --peers ours_py --timeout 40 \
    > "$OUT/bench.log" 2>&1 || rc=1
  say "# bench ($(el) s)"
  grep -E " ms|skipped|failed|timeout" "$OUT/bench.log" | cut -c1-200 | head -8 | tee -a "$S"
fi
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in ${LA_SAN_TOOLS:-memcheck racecheck}; do
  timeout "${LA_SAN_S:-20}" "$CS" --tool "$tool" --error-exitcode 9 "$D" 2 0 small > "$OUT/san_$tool.log" 2>&1
  say "# $tool rc=$? ($(el) s)"
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY|VALIDATE" "$OUT/san_$tool.log" | tail -2 | tee -a "$S"
done
exit $rc
