#!/bin/bash
# One device call for the linear-family backward (dev/cuda/linear_bwd.cu):
# the driver carried from the build machine if it runs here, else the
# library and the driver built here; then validation of both variants (the
# mma one also under compute-sanitizer memcheck / racecheck on the small
# cases) and the timing of the mma (default) path. Logs go to $OUT.
#   bash dev/cuda/gpu_linear_bwd.sh
set -o pipefail
OUT=${OUT:-/tmp/la_gpu_out}
B=${BUILD:-build-gpu}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1)"
BIN=$B/dev/linear_bwd
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
link() {
    "$NVCC" -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/cuda/linear_bwd.cu \
        "$B/liblongattn.a" -o "$BIN" -Xcompiler -fopenmp -lopenblas -llapack -lgomp -lm -ldl -lpthread \
        >> "$OUT/build.log" 2>&1
}
runs() { "$BIN" 9 > /dev/null 2>&1; [ $? -eq 2 ]; }
mkdir -p "$B/dev"
if ! runs; then
    echo "# carried driver does not run here: linking it against the carried library ($(el) s)"
    if ! { [ -f "$B/liblongattn.a" ] && link && runs; }; then
        echo "# building the library here ($(el) s)"
        rm -f "$B/liblongattn.a"
        if ! timeout 240 make -j16 SKIP_DEPS=1 BUILD="$B" "$B/liblongattn.a" >> "$OUT/build.log" 2>&1; then
            grep -E "error" "$OUT/build.log" | head -10; tail -5 "$OUT/build.log"; echo "BUILD FAILED"; exit 1
        fi
        link || { tail -20 "$OUT/build.log"; echo "DRIVER BUILD FAILED"; exit 1; }
    fi
fi
echo "# driver ready ($(el) s)"
timeout 60 "$BIN" 1 ${LA_REPS:-10} > "$OUT/mma.log" 2>&1
echo "# mma: rc=$? ($(el) s)"
grep -E "FAIL|VALIDATE|BENCH" "$OUT/mma.log" | head -30
timeout 30 "$BIN" 0 0 > "$OUT/portable.log" 2>&1
echo "# portable: rc=$? ($(el) s)"
grep -E "FAIL|VALIDATE" "$OUT/portable.log" | head -10
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for tool in memcheck racecheck; do
    timeout ${LA_SAN_S:-45} "$CS" --tool "$tool" --error-exitcode 9 "$BIN" 1 0 small > "$OUT/san_$tool.log" 2>&1
    echo "# $tool: rc=$? ($(el) s)"
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|VALIDATE|Device not supported" "$OUT/san_$tool.log" | tail -3
done
if [ -n "${LA_NCU:-1}" ]; then
    NCU=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
    timeout 60 "$NCU" --clock-control none --kernel-name regex:lt_ --launch-count 60 \
        --metrics gpu__time_duration.sum --csv "$BIN" 1 1 bench > "$OUT/ncu.csv" 2>&1
    echo "# ncu: rc=$? ($(el) s)"
    grep -E '"gpu__time_duration.sum"' "$OUT/ncu.csv" | awk -F'","' '{print $5, $(NF)}' | \
        sed 's/(anonymous namespace):://' | cut -c1-110 | head -60
fi
