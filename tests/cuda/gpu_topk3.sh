#!/bin/bash
# Row top-k (topk.cu's t3_kernel, the default), one device call, <= 80 s
# wall. Assumes the library and the CUDA tests are built:
#   bash tests/cuda/gpu_round.sh topk3:80
#   (or make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests && bash tests/cuda/gpu_topk3.sh)
#   1. the bench driver is compiled against build-gpu/liblongattn.a (in the
#      background, while the test runs),
#   2. test_cuda_sparse with LA_CUDA_ONLY_TOPK=1: every top-k case vs the
#      CPU, and on the first kernel (LA_CUDA_TOPK_PATH=old) and with L2
#      prefetch 3 / 16 vs the CPU and vs the default bit for bit; DSA
#      (per-row ranges) and HISA (top-m with ranges, gather-mode token top-k)
#      with the first kernel vs the default,
#   3. bench_gpu_sparse topk3: 1024 x {64K, 8K, 128K}, k = 2048: default, old,
#      prefetch 3 / 6, medians of 20 after warm-up, indices vs default,
#   4. ncu (if present) on two default calls at 1024 x 64K: duration, SOL,
#      occupancy, and the warp stall reasons,
#   5. summary (last lines; also $OUT/summary.txt).
# Logs under $OUT (default /tmp/la_gpu_out).
. tests/cuda/gpu_common.sh gpu_topk3
[ -x $B/tests/cuda/test_cuda_sparse ] || { say "MISSING $B/tests/cuda/test_cuda_sparse: run make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests first"; exit 1; }

# 1. bench driver (background)
gpu_build_driver bench_gpu_sparse

# 2. the test (top-k part; the test sets LA_CUDA_TOPK_PATH per call itself)
rc=0
LA_CUDA_ONLY_TOPK=1 timeout 40 $B/tests/cuda/test_cuda_sparse > "$OUT/test_cuda_sparse_topk.log" 2>&1
trc=$?; [ $trc -ne 0 ] && rc=1
say "test_cuda_sparse (LA_CUDA_ONLY_TOPK=1): rc=$trc $(tail -1 "$OUT/test_cuda_sparse_topk.log")  ($(el) s)"
grep -E "FAIL" "$OUT/test_cuda_sparse_topk.log" | head -8 | tee -a "$S"

# 3. bench
wait $bpid
left=$(( 60 - $(el) ))
if [ -x $B/bench_gpu_sparse ] && [ $left -gt 5 ]; then
  [ $left -gt 25 ] && left=25
  timeout $left $B/bench_gpu_sparse topk3 > "$OUT/bench_topk3.log" 2>&1
  say "bench_gpu_sparse topk3: rc=$? ($(el) s)"
  grep -E "^topk" "$OUT/bench_topk3.log" | sed -e 's/ R=1024//' -e 's/ k=2048//' | tee -a "$S"
  grep -E "^(CUDA|la_|.*->)" "$OUT/bench_topk3.log" | head -3 | tee -a "$S"
else
  say "bench: skipped (built: $([ -x $B/bench_gpu_sparse ] && echo yes || echo no), $(el) s elapsed; see $OUT/bench_gpu_sparse_build.log)"
  tail -3 "$OUT/bench_gpu_sparse_build.log" | tee -a "$S"
fi

# 4. ncu: two default (t3_kernel) calls at 1024 x 64K
left=$(( 77 - $(el) ))
if command -v ncu > /dev/null && [ -x $B/bench_gpu_sparse ] && [ $left -gt 8 ]; then
  timeout $left ncu --clock-control none --section WarpStateStats --section SpeedOfLight --section Occupancy \
      --section LaunchStats --kernel-name regex:"t3_kernel" --launch-count 2 --csv --page raw \
      $B/bench_gpu_sparse topk3 one > "$OUT/ncu_topk3.csv" 2> "$OUT/ncu_topk3.err"
  say "ncu: rc=$? ($(el) s)"
  python3 - "$OUT/ncu_topk3.csv" <<'EOF' 2>&1 | tee -a "$S"
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1])) if r]
hi = next((i for i, r in enumerate(rows) if r[0] == "ID"), None)
if hi is None:
    print("  ncu: no metrics table (see ncu_topk3.err)"); sys.exit(0)
head = rows[hi]
def num(v):
    try: return float(v.replace(",", ""))
    except ValueError: return None
for r in rows[hi + 1:]:
    if not r[0].isdigit(): continue
    m = dict(zip(head, r))
    name = m.get("Kernel Name", "?").split("(")[0]
    g = lambda k: m.get(k, "?")
    print(f"  {name}: {g('gpu__time_duration.sum')} ns, SM {g('sm__throughput.avg.pct_of_peak_sustained_elapsed')}%, "
          f"DRAM {g('gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed')}%, regs {g('launch__registers_per_thread')}, "
          f"CTAs/SM {g('launch__occupancy_limit_shared_mem')} (smem) {g('launch__occupancy_limit_registers')} (regs), "
          f"achieved occ {g('sm__warps_active.avg.pct_of_peak_sustained_active')}%")
    st = []
    for k, v in m.items():
        if "issue_stalled" in k and k.endswith("per_issue_active.ratio"):
            x = num(v)
            if x is not None:
                st.append((x, k.replace("smsp__average_warps_issue_stalled_", "").replace("_per_issue_active.ratio", "")))
    st.sort(reverse=True)
    tot = sum(x for x, _ in st)
    print(f"    stall cycles per issue: total {tot:.2f}; " + ", ".join(f"{n} {x:.2f}" for x, n in st[:8]))
EOF
else
  say "ncu: skipped ($(command -v ncu > /dev/null && echo "$(el) s elapsed" || echo "not installed"))"
fi

# 5. summary
say "# summary: default (no L2 prefetch) / prefetch 3 steps ms per L (goal at 64K: <= 0.2 ms):"
grep -E "^topk(     |_pf .*pf=3)" "$OUT/bench_topk3.log" 2>/dev/null | awk '
  { L=$0; sub(/.*L=/,"",L); sub(/ .*/,"",L); t=$0; sub(/.*: /,"",t); sub(/ ms.*/,"",t);
    if ($1=="topk") d[L]=t; else { v[L]=t; x=$0; sub(/.*; /,"",x); sub(/ indices.*/,"",x); df[L]=x } }
  END { for (L in d) printf "  L=%s: default %s ms, pf 3 %s ms (%.2fx), %s indices differ\n", L, d[L], v[L], (v[L]>0 ? d[L]/v[L] : 0), df[L] }' | tee -a "$S"
say "# done at $(el) s, rc=$rc"
exit $rc
