#!/bin/bash
# One device call for MHLA variant tc_bf16s (GPU machine): build (sm_90a), the
# dev driver's check (tc_bf16s and tc against the CPU path), the backend
# harness's MHLA rows (the --small table and the 3-D video grids), the Wan-2.1
# timing of each variant at the C level, per-kernel times (nsys when present,
# else ncu), then the Wan row through the package beside plain PyTorch.
#   [B=build-gpu] [HARNESS_S=45] [COMPILE=1] [PKG_S=70] [KERNELS="tc tc_bf16s"] bash dev/cuda/mhla_fwd_run.sh
# Logs under $OUT (summary.log; build, check, harness, kernels, package logs).
set -o pipefail
B=${B:-build-gpu}
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
L="$OUT/summary.log"
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 )) s"; }
{ nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader; date -u; } 2>&1 | tee "$L"
timeout 150 make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD=$B PYTHON=python3 "$B/dev/cuda/mhla_fwd" \
  "$B/tests/backend/test_backend_ops" "$B/liblongattn.so" pyext > "$OUT/build.log" 2>&1
rc=$?
echo "# build rc=$rc ($(el))" | tee -a "$L"
if [ $rc != 0 ]; then grep -E "error" "$OUT/build.log" | head -20 | tee -a "$L"; exit 1; fi
timeout 40 "$B/dev/cuda/mhla_fwd" check > "$OUT/check.log" 2>&1
echo "# check rc=$? ($(el))" | tee -a "$L"
grep -E "^FAIL|# check" "$OUT/check.log" | head -20 | tee -a "$L"
timeout 30 "$B/dev/cuda/mhla_fwd" wan 2>&1 | tee -a "$L"
echo "# wan ($(el))" | tee -a "$L"
timeout "${HARNESS_S:-45}" "$B/tests/backend/test_backend_ops" -b cuda -o mhla --small > "$OUT/harness.log" 2>&1
echo "# harness --small -o mhla rc=$? ($(el))" | tee -a "$L"
grep -E "FAIL|passed|failed" "$OUT/harness.log" | tail -12 | tee -a "$L"
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
timeout ${PKG_S:-70} python3 bench/gpu_linear.py --peer wan --dtypes bf16 $([ "${COMPILE:-1}" = 1 ] || echo --no-compile) 2>&1 \
  | grep -v Warning | tail -8 | tee -a "$L"
if command -v nsys > /dev/null; then
  for v in ${KERNELS:-tc tc_bf16s}; do
    timeout 40 nsys profile -o "/tmp/mf_$v" --force-overwrite true -t cuda "$B/dev/cuda/mhla_fwd" wan1 $v \
      > /dev/null 2>&1
    nsys stats -q -r cuda_gpu_kern_sum -f csv "/tmp/mf_$v.nsys-rep" 2>/dev/null > "$OUT/kern_$v.csv"
    echo "# kernels $v (nsys, one call: instances, total ns, name)" | tee -a "$L"
    python3 -c "import csv,sys
for r in list(csv.DictReader(open(sys.argv[1])))[:8]: print(r.get('Instances'), r.get('Total Time (ns)'), r.get('Name','')[:70])" \
      "$OUT/kern_$v.csv" 2>&1 | tee -a "$L"
  done
elif command -v ncu > /dev/null; then
  for v in ${KERNELS:-tc tc_bf16s}; do
    echo "# kernels $v (ncu gpu__time_duration, locked clocks)" | tee -a "$L"
    timeout 40 ncu --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
      "$B/dev/cuda/mhla_fwd" wan1 $v 2>&1 | grep -E "^  [a-z_]+.*\(|gpu__time|dram__" | tee -a "$L"
  done
fi
echo "# kernels ($(el))" | tee -a "$L"
timeout 40 "$B/tests/backend/test_backend_ops" -b cuda -o mhla -n 21x30x50 -x "mhla f32" -x "mhla f16" \
  > "$OUT/harness_long.log" 2>&1
echo "# harness long rows rc=$? ($(el))" | tee -a "$L"
grep -E "FAIL|passed|failed" "$OUT/harness_long.log" | tail -8 | tee -a "$L"
echo "# done ($(el))" | tee -a "$L"
