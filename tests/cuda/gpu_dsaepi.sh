#!/bin/bash
# The DSA score kernel's opt-in lean variant (LA_CUDA_DSA_EPI=lean, dsa.cu
# sc_wgmma_lean_kernel; dev/NOTES_dsa_epilogue.md) on the GPU machine, <= 90 s:
#  1. tests/cuda/test_cuda_dsa_epi: default and lean vs a float64 reference,
#     idx = exact top-k of the returned scores, lean == default bit for bit,
#     and the timing of both at T = 1024, L = 64K (bf16, fp8 with scales);
#  2. if ncu exists: warp instructions and warp-level wgmma of one bf16 and
#     one fp8 launch of each variant at 64K (instructions per wgmma: the
#     default measured 67 on the H200; the lean variant's static count
#     predicts ~37), and the kernel durations.
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
grep -cE "== default bit for bit" "$OUT/dsaepi_test.log" | sed 's/^/   lean == default bit for bit in runs: /'
if command -v ncu >/dev/null; then
  for v in default lean; do
    if [ $v = lean ]; then export LA_CUDA_DSA_EPI=lean; re='sc_wgmma_lean'; else unset LA_CUDA_DSA_EPI; re='sc_wgmma_kernel'; fi
    timeout 17 ncu --clock-control none --kernel-name regex:$re --launch-count 2 \
      --metrics smsp__inst_executed.sum,sm__inst_executed_pipe_tensor_op_gmma.sum,gpu__time_duration.sum,launch__registers_per_thread,smsp__issue_active.avg.pct_of_peak_sustained_active \
      "$T" one > "$OUT/dsaepi_ncu_$v.txt" 2>&1
    echo "== ncu $v: rc=$? ($(el) s)"
    # per launch (bf16 first, then fp8): instructions, wgmma, their ratio, duration
    awk -v v=$v '
      /sc_wgmma/ && !/==PROF==/ && /\(/ { n++; name = ($0 ~ /<2>|ILi2E/ ? "bf16" : "fp8") }
      /smsp__inst_executed.sum/ { gsub(",", "", $NF); ins[n] = $NF }
      /sm__inst_executed_pipe_tensor_op_gmma.sum/ { gsub(",", "", $NF); g[n] = $NF }
      /gpu__time_duration.sum/ { gsub(",", "", $NF); d[n] = $NF " " $(NF-1) }
      { nm[n] = name }
      /launch__registers_per_thread/ { r[n] = $NF }
      /issue_active/ { ia[n] = $NF }
      END { for (i = 1; i <= n; i++) printf "   %-7s %-4s: %s warp instructions, %s warp wgmma, %.1f per wgmma, %s, %s regs, issue active %s%%\n", v, nm[i], ins[i], g[i], (g[i] > 0 ? ins[i] / g[i] : 0), d[i], r[i], ia[i] }' \
      "$OUT/dsaepi_ncu_$v.txt"
  done
  unset LA_CUDA_DSA_EPI
else
  echo "== no ncu: instruction counts skipped"
fi
echo "== summary ($(el) s): test rc=$trc; see $OUT/dsaepi_test.log, $OUT/dsaepi_ncu_*.txt"
exit $trc
