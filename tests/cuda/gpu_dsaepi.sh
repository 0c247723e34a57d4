#!/bin/bash
# The DSA v2 score kernel (dsa.cu sc_wgmma_kernel; dev/NOTES_dsa_epilogue.md)
# on the GPU machine, <= 90 s:
#  1. tests/cuda/test_cuda_dsa_epi: vs a float64 reference, idx = exact
#     top-k of the returned scores, all query groups equal bit for bit, and
#     the timing at T = 1024, L = 64K (bf16, fp8 with scales) against the
#     mma.sync kernels;
#  2. if ncu exists: warp instructions, warp-level wgmma, issue activity and
#     the stall reasons (warps stalled per issued instruction) of one bf16
#     and one fp8 launch at 64K, and the kernel durations.
# Assumes the tree was built: make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests
#   bash tests/cuda/gpu_dsaepi.sh        (logs in $OUT, default /tmp/la_gpu_out)
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${B:-build-gpu}
T=$B/tests/cuda/test_cuda_dsa_epi
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
[ -x "$T" ] || { echo "no $T (make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests)"; exit 1; }
timeout 52 "$T" > "$OUT/dsaepi_test.log" 2>&1
trc=$?
echo "== test_cuda_dsa_epi: rc=$trc ($(el) s): $(tail -1 "$OUT/dsaepi_test.log")"
grep -E "FAIL" "$OUT/dsaepi_test.log" | head -10
grep -E "^TIME" "$OUT/dsaepi_test.log"
grep -cE "== \[auto\] bit for bit" "$OUT/dsaepi_test.log" | sed 's/^/   == [auto] bit for bit in runs: /'
if command -v ncu >/dev/null; then
  for v in v2; do
    re='sc_wgmma_kernel'
    timeout 20 ncu --clock-control none --kernel-name regex:$re --launch-count 2 \
      --metrics smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,regex:smsp__average_warps_issue_stalled_.*_per_issue_active.ratio \
      "$T" one > "$OUT/dsaepi_ncu_$v.txt" 2>&1
    echo "== ncu $v: rc=$? ($(el) s)"
    # per launch (bf16 first, then fp8): instructions, wgmma, their ratio, duration
    awk -v v=$v '
      /sc_wgmma/ && !/==PROF==/ && /\(/ { n++; name = ($0 ~ /<2[,>]|ILi2E/ ? "bf16" : "fp8") }
      /smsp__inst_executed.sum/ { gsub(",", "", $NF); ins[n] = $NF }
      /sm__inst_executed_pipe_tensor_op_gmma.sum/ { gsub(",", "", $NF); g[n] = $NF }
      /gpu__time_duration.sum/ { gsub(",", "", $NF); d[n] = $NF " " $(NF-1) }
      { nm[n] = name }
      /launch__registers_per_thread/ { r[n] = $NF }
      /issue_active/ { ia[n] = $NF }
      /gmma_cycles_active/ { tp[n] = $NF }
      /average_warps_issue_stalled_/ { m = $1; sub(/.*stalled_/, "", m); sub(/_per_issue.*/, "", m); if ($NF + 0 >= 0.05) st[n] = st[n] " " m "=" $NF }
      END { for (i = 1; i <= n; i++) printf "   %-8s %-4s: %s warp instructions, %s warp wgmma, %.1f per wgmma, %s, %s regs, issue active %s%%, tensor pipe %s%%\n      stalls per issue:%s\n", v, nm[i], ins[i], g[i], (g[i] > 0 ? ins[i] / g[i] : 0), d[i], r[i], ia[i], tp[i], st[i] }' \
      "$OUT/dsaepi_ncu_$v.txt"
  done
else
  echo "== no ncu: instruction counts skipped"
fi
echo "== summary ($(el) s): test rc=$trc; see $OUT/dsaepi_test.log, $OUT/dsaepi_ncu_*.txt"
exit $trc
