#!/bin/bash
# One device call for issue 14's causal linear row (GPU machine): the sm_90a
# build, dev/cuda/linear_causal_bwd (C-level fwd / bwd medians, mma against
# the portable engine, repeat bit-identical), dev/cuda/lincausal_profile.py
# (the package's paths timed and profiled), the harness's causal linear
# backward cases, then fla's chunk_linear_attn from a carried
# .whl/fla_core-*.whl (LA_WHL_DIR: the wheel's folder). Each step under its
# own cap (LA_*_S seconds); on a fresh machine fla's import and Triton
# compilation took more than 40 s before its first result (17:32 UTC call).
#   bash dev/cuda/lincausal_gpu.sh     (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh lincausal
timeout "${LA_BUILD_S:-80}" make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$B/liblongattn.so" \
    "$B/tests/backend/test_backend_ops" "$B/dev/cuda/linear_causal_bwd" > "$OUT/build.log" 2>&1 \
  || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
say "# build: $(el) s"
rc=0
timeout "${LA_DRIVER_S:-25}" "$B/dev/cuda/linear_causal_bwd" 20 > "$OUT/driver.log" 2>&1 || rc=1
say "# driver rc=$rc ($(el) s)"
cut -c1-260 "$OUT/driver.log" | tail -4 | tee -a "$S"
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
timeout "${LA_PROF_S:-45}" python3 dev/cuda/lincausal_profile.py --reps 20 > "$OUT/profile.log" 2>&1 || rc=1
say "# profile ($(el) s)"
timeout "${LA_HARNESS_S:-40}" "$B/tests/backend/test_backend_ops" -b cuda -o linear_backward -o mhla_causal_backward -n causal \
    > "$OUT/harness.log" 2>&1 || rc=1
say "# harness ($(el) s)"
grep -E "^FAIL|^# cases|passed," "$OUT/harness.log" | cut -c1-200 | head -12 | tee -a "$S"
if ls "${LA_WHL_DIR:-.whl}"/fla_core-*.whl > /dev/null 2>&1 &&
   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/la_site \
       "${LA_WHL_DIR:-.whl}"/fla_core-*.whl > "$OUT/wheels.log" 2>&1; then
  PYTHONPATH=python:/tmp/la_site timeout "${LA_FLA_S:-120}" python3 dev/cuda/lincausal_profile.py \
      --reps 10 --only-fla > "$OUT/fla.log" 2>&1 || rc=1
  say "# fla ($(el) s)"
  grep -E "ms|skipped|Error" "$OUT/fla.log" | head -4 | cut -c1-200 | tee -a "$S"
else
  say "# fla: no wheel installed"
fi
exit $rc
