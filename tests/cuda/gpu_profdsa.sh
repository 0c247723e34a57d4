#!/bin/bash
# Where the DSA wgmma score kernel (sc_wgmma_kernel, dsa.cu) loses its time:
# ncu --set full on one bf16 launch at L = 64K (Tq = 1024,
# HI = 64, dI = 128), printing throughput, pipe utilization and the warp-stall
# breakdown. A step of tests/cuda/gpu_round.sh (the tree is built); <= 90 s.
#   bash tests/cuda/gpu_profdsa.sh
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
if [ ! -x $B/bench_gpu_sparse ]; then
  NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_sparse.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
  timeout 60 $NV -lopenblas -llapack > "$OUT/build.log" 2>&1 || timeout 60 $NV >> "$OUT/build.log" 2>&1 \
    || { echo "BENCH BUILD FAILED"; tail -5 "$OUT/build.log"; exit 1; }
fi
command -v ncu >/dev/null || { echo "no ncu"; exit 0; }
# bench "one" runs every op once at 64K, the bf16 DSA first (its score kernel
# is the first sc_wgmma launch)
for lc in "bf16 0"; do
  set -- $lc
  timeout 40 ncu --clock-control none --set full --import-source no \
    --kernel-name regex:'sc_wgmma' --launch-skip $2 --launch-count 1 \
    $B/bench_gpu_sparse one > "$OUT/ncu_dsa_$1.txt" 2>&1
  echo "== ncu DSA $1: rc=$? ($(el) s)"
  grep -E "sc_wgmma|Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Compute \(SM\) Throughput|Executed Ipc|Issue Slots Busy|Warp Cycles Per Issued|Achieved Occupancy|Registers Per|Shared Memory Per|pipe|Pipe|stall|Stall|Tensor" \
    "$OUT/ncu_dsa_$1.txt" | cut -c1-170 | head -40
done
# the raw stall counters of the bf16 launch (cycles per issued instruction, by reason)
timeout 30 ncu --clock-control none --kernel-name regex:'sc_wgmma' --launch-count 1 \
  --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_tensor_op_gmma.sum,smsp__inst_executed.sum \
  $B/bench_gpu_sparse one > "$OUT/ncu_dsa_stalls.txt" 2>&1
echo "== stall reasons (bf16): rc=$? ($(el) s)"
grep -E "stalled|gmma|inst_executed" "$OUT/ncu_dsa_stalls.txt" | awk '{v=$NF; n=$1; if (v+0 > 0.05 || n ~ /gmma|inst_exec/) print "  " n, v}' | sort -k2 -g -r | head -24
