#!/bin/bash
# Sparse MLA backward on the GPU machine (issue 14, variant "mma" of
# sparse_attn_bwd): the sm_90a build (B, default build-gpu: a tree built on
# the host and carried is used as it is when its binaries run, else rebuilt
# here), the harness's sparse backward cases on CUDA (every variant against
# float64 and the CPU backward, bit-identical repeats), the C-level timing at
# T 4096, Hq 128, k 2048, L 4096 for mma, mma_atomic and portable
# (bench/gpu_backward_driver.cu), then the same row through the Python
# package (bench/gpu_backward.py's ours_py peer: fwd + autograd, CUDA events,
# kernel time beside).
#   [LA_PREBUILT=bins.tgz] bash dev/gpu_sparse_bwd.sh   (logs under $OUT; summary in $OUT/summary.txt)
. tests/cuda/gpu_common.sh sparse_bwd
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
OPTS='OPT=-O3 -march=x86-64-v3 -ffp-contract=fast'
# LA_PREBUILT: a tar.gz of binaries built on the host (liblongattn.so,
# gpu_backward_driver, tests/backend/test_backend_ops), unpacked into $B and
# used when they run here
if [ -n "${LA_PREBUILT:-}" ] && [ -f "$LA_PREBUILT" ]; then
  mkdir -p "$B" && tar -xzf "$LA_PREBUILT" -C "$B"
fi
"$B/gpu_backward_driver" none > /dev/null 2>&1
drc=$? # 2: it runs (an unknown workload)
if [ $drc -ne 2 ] || ! "$B/tests/backend/test_backend_ops" --list > /dev/null 2>&1; then
  say "# building here (prebuilt: driver rc=$drc)"
  rm -f "$B/tests/backend/test_backend_ops" "$B/liblongattn.so" "$B/gpu_backward_driver"
  timeout "${LA_BUILD_S:-200}" make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$OPTS" \
      "$B/liblongattn.a" "$B/liblongattn.so" "$B/tests/backend/test_backend_ops" \
      > "$OUT/build.log" 2>&1 \
    || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
  timeout 120 "$NVCC" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr \
      -Iinclude -Isrc bench/gpu_backward_driver.cu "$B/liblongattn.a" -o "$B/gpu_backward_driver" \
      -Xcompiler -fopenmp -lopenblas -llapack -lgomp -lm -ldl > "$OUT/driver_build.log" 2>&1 \
    || { say "driver build FAILED ($(el) s)"; tail -20 "$OUT/driver_build.log" | tee -a "$S"; exit 1; }
fi
say "# build: $(el) s"
rc=0
timeout "${LA_HARNESS_S:-90}" "$B/tests/backend/test_backend_ops" -b cuda -o sparse_attn_backward \
    ${LA_HARNESS_ARGS:-} > "$OUT/harness.log" 2>&1 || rc=1
say "# harness ($(el) s)"
grep -E "^FAIL|^# cases|passed,|^ *FAIL" "$OUT/harness.log" | cut -c1-220 | head -20 | tee -a "$S"
for w in sparse4k sparse4k_atomic sparse4k_portable; do
  timeout 40 "$B/gpu_backward_driver" "$w" 5 2>&1 | tail -1 | tee -a "$S" || rc=1
done
say "# driver ($(el) s)"
[ "${LA_BENCH_S:-60}" = 0 ] && exit $rc
LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1 LA_OURS_PY="sparse MLA" \
  timeout "${LA_BENCH_S:-60}" python3 bench/gpu_backward.py --ours "" --peers ours_py --timeout 55 \
    > "$OUT/bench.log" 2>&1 || rc=1
say "# bench ($(el) s)"
grep -E " ms|skipped|failed|timeout|Error" "$OUT/bench.log" | cut -c1-220 | head -8 | tee -a "$S"
exit $rc
