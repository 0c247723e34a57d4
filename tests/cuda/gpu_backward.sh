#!/bin/bash
# The CUDA backward passes on the GPU machine, in one device call: build
# (make all cuda-tests + the timing driver), test_cuda_backward (every
# backward vs float64 references, fp32/bf16, determinism), compute-sanitizer
# memcheck and racecheck on the small cases, then bench/gpu_backward.py (ours
# beside the peers). Logs go to $OUT.
#   bash tests/cuda/gpu_backward.sh [skip-bench]
# LA_SAN_ENV, LA_SAN_ENV_memcheck, LA_SAN_ENV_racecheck: extra environment of
# the sanitizer runs (LA_BWD_SOFTMAX_ONLY=1: the softmax cases only, e.g. for
# racecheck, the only kernels with shared memory); LA_BENCH_ARGS: bench options.
set -o pipefail
OUT=${OUT:-/tmp/la_gpu_out}
B=${B:-build-gpu}
mkdir -p "$OUT"
T0=$(date +%s)
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/summary.txt"; }
NVCC=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$OUT/summary.txt"
say "build"
if ! make -j16 SKIP_DEPS=1 BUILD="$B" all cuda-tests > "$OUT/build.log" 2>&1; then
    tail -40 "$OUT/build.log"; say "build FAILED"; exit 1
fi
"$NVCC" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc \
    bench/gpu_backward_driver.cu "$B/liblongattn.a" -o "$B/gpu_backward_driver" \
    -Xcompiler -fopenmp -lopenblas -llapack -lgomp -lm -ldl >> "$OUT/build.log" 2>&1 \
    || { tail -20 "$OUT/build.log"; say "driver build FAILED"; }
say "tests"
LA_TEST_VERBOSE=1 "$B/tests/cuda/test_cuda_backward" > "$OUT/test.log" 2>&1
rc=$?
grep -E "FAIL|passed|SEED" "$OUT/test.log" | head -40 | tee -a "$OUT/summary.txt"
say "tests rc=$rc"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
    say "sanitizer $tool"
    senv=LA_SAN_ENV_$tool
    env LA_CUDA_SMALL=1 ${LA_SAN_ENV:-} ${!senv:-} timeout 240 "$CS" --tool "$tool" --error-exitcode 9 \
        "$B/tests/cuda/test_cuda_backward" > "$OUT/san_$tool.log" 2>&1
    src=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|passed" "$OUT/san_$tool.log" | tail -3 | tee -a "$OUT/summary.txt"
    say "sanitizer $tool rc=$src"
done
if [ "$1" != skip-bench ]; then
    say "bench"
    PYTHONUNBUFFERED=1 python3 bench/gpu_backward.py --driver "$B/gpu_backward_driver" \
        ${LA_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | cut -c1-220
    say "bench done"
fi
