#!/bin/bash
# Causal MHLA forward on the GPU machine (issue 15, family "mhla_causal",
# src/cuda/mhla_causal_tc.cu): the sm_90a build, the harness's causal MHLA
# forward cases on CUDA (tests/backend/cases_linear.c: mma, mma_split, mma_bf16s,
# portable and the default against the CPU path), dev/bench_gpu_mhla_causal
# (check against portable, then B1 H12 D128 bf16 at N = 32K and 128K with
# causal linear attention in the same run) and the plain-PyTorch peers
# (dev/bench_mhla_causal_torch.py: the chunk loop and the batched form under
# torch.compile) at N = 32K.
# (LA_HARNESS_ARGS, default --small: set it empty, with LA_HARNESS_S=120, for the N = 16K / 32K
# cases too)
#   bash tests/cuda/gpu_mhla_causal.sh      (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh mhla_causal
timeout "${LA_BUILD_S:-90}" make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$B/liblongattn.a" \
    "$B/tests/backend/test_backend_ops" "$B/dev/bench_gpu_mhla_causal" > "$OUT/build.log" 2>&1 \
  || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
say "# build: $(el) s"
rc=0
timeout "${LA_HARNESS_S:-50}" "$B/tests/backend/test_backend_ops" -b cuda -o mhla_causal -o mhla_decode ${LA_HARNESS_ARGS---small} --perf \
    > "$OUT/harness.log" 2>&1 || rc=1
say "# harness rc=$rc ($(el) s)"
grep -E "^FAIL|^# cases|passed,|SKIP" "$OUT/harness.log" | cut -c1-200 | head -20 | tee -a "$S"
timeout "${LA_DRIVER_S:-40}" "$B/dev/bench_gpu_mhla_causal" > "$OUT/bench.log" 2>&1 || rc=1
say "# bench rc=$rc ($(el) s)"
cut -c1-200 "$OUT/bench.log" | tee -a "$S"
PYTHONUNBUFFERED=1 timeout "${LA_TORCH_S:-60}" python3 dev/bench_mhla_causal_torch.py --ns 32768 \
    > "$OUT/torch.log" 2>&1 || rc=1
say "# torch rc=$rc ($(el) s)"
tail -8 "$OUT/torch.log" | cut -c1-200 | tee -a "$S"
say "# mhla_causal total $(el) s, rc=$rc"
exit $rc
