#!/bin/bash
# One device call for the tensor-core path of the linear family (non-causal,
# bf16, D = Dv = 128): build, correctness of its versions (default = v4, v3,
# old = v2, wg = v4 with the wgmma output kernel, wgs = wg with the wgmma summary
# kernel too (LA_CUDA_LINFAM_SUMMARY=wg); both opt-in) against the CPU path, timings of each (and of the default with the
# device's default memory pool / the fp32 mix), the per-head read pattern
# (rowread), ncu per-kernel times, sanitizers on the small cases.
# LA_SKIP_BUILD=1: the tree is built already (a combined session script).
#   bash tests/cuda/gpu_linear2.sh
# Logs under $OUT (the device tool's output folder); a short summary last.
# Each step has its own timeout so that the whole script ends within ~260 s.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
T=$B/tests/cuda/test_cuda_linear
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1)"
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
timeout 100 make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 \
  || { echo "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20; tail -5 "$OUT/build.log"; exit 1; }
fi
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_linear.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_linear >> "$OUT/build.log" 2>&1 || echo "BENCH BUILD FAILED"
echo "# build: $(el) s"

# 1. tensor-core cases, every version (long ones: v4, wg, wgs), small and long (N up to 128K), path trace on stderr
LA_CUDA_TC_ONLY=1 LA_CUDA_LINFAM_VERBOSE=1 timeout 170 $T > "$OUT/tc.log" 2> "$OUT/tc_paths.log"
tc_rc=$?
echo "tc cases: rc=$tc_rc  $(tail -1 "$OUT/tc.log")  calls: v4=$(grep -c 'path=v4' "$OUT/tc_paths.log") v3=$(grep -c 'path=v3' "$OUT/tc_paths.log") old=$(grep -c 'path=old' "$OUT/tc_paths.log") wg=$(grep -c 'path=wg' "$OUT/tc_paths.log") sum_wg=$(grep -c 'sum=wg' "$OUT/tc_paths.log") portable=$(grep -c 'path=portable' "$OUT/tc_paths.log")  ($(el) s)"
grep -E "FAIL" "$OUT/tc.log" | head -20
grep -v '^linfam:' "$OUT/tc_paths.log" | head -10
grep 'path=v4\|path=wg' "$OUT/tc_paths.log" | sort -u | grep 'maxcnt=32768\|maxcnt=131072\|M=150' | head -8
grep 'summary kernel' "$OUT/tc_paths.log" | sort | uniq -c | head -2

# 2. timings: v4 (default), v3, v2, v4 with the device's default pool, v4 with the fp32 mix, v4 again, wg, wgs
for p in new v3 old pool mix new2 wg wgs; do
  case $p in
    wgs) LA_CUDA_LINFAM_PATH=wg LA_CUDA_LINFAM_SUMMARY=wg timeout 20 $B/bench_gpu_linear noncausal > "$OUT/bench_$p.log" 2>&1 ;;
    pool) LA_CUDA_POOL=default timeout 20 $B/bench_gpu_linear noncausal > "$OUT/bench_$p.log" 2>&1 ;;
    mix) LA_CUDA_LINFAM_MIX=fp32 timeout 20 $B/bench_gpu_linear noncausal > "$OUT/bench_$p.log" 2>&1 ;;
    *) LA_CUDA_LINFAM_PATH=${p%2} timeout 20 $B/bench_gpu_linear noncausal > "$OUT/bench_$p.log" 2>&1 ;;
  esac
done
timeout 40 $B/bench_gpu_linear scaling > "$OUT/scaling.log" 2>&1; cut -c1-110 "$OUT/scaling.log"
echo "# bench done ($(el) s)"

# 3. every small case of the suite (the D = 128 bf16 ones outside t_tc_paths take the default path)
LA_CUDA_SMALL=1 timeout 45 $T > "$OUT/small.log" 2>&1
echo "small suite: rc=$?  $(tail -1 "$OUT/small.log")  ($(el) s)"
grep -E "FAIL" "$OUT/small.log" | head -10

# 4. memcheck, then per-kernel times and DRAM bytes (ncu, N = 32K: linear, MHLA M = 16,
#    M = 150, one call each, both versions), then racecheck, while time is left
DEADLINE=${LA_GPU_DEADLINE:-260}
san() {
  local tool=$1
  left=$(( DEADLINE - $(el) ))
  [ $left -lt 15 ] && { echo "compute-sanitizer $tool: skipped (time)"; return; }
  [ $left -gt 45 ] && left=45
  LA_CUDA_SMALL=1 LA_CUDA_TC_ONLY=1 timeout $left compute-sanitizer --tool $tool --error-exitcode 3 $T \
    > "$OUT/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool: rc=$?  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)  $(grep -E 'passed, ' "$OUT/sanitizer_$tool.log" | tail -1)  ($(el) s)"
}
command -v compute-sanitizer >/dev/null && san memcheck
if command -v ncu >/dev/null && [ $(( DEADLINE - $(el) )) -gt 30 ]; then
  for p in new wgs; do # wgs: both wgmma kernels (lf_wg_summary_kernel, lf_wg_output_kernel)
    [ $(( DEADLINE - $(el) )) -gt 30 ] || break
    LA_CUDA_LINFAM_PATH=${p%s} LA_CUDA_LINFAM_SUMMARY=$([ $p = wgs ] && echo wg) timeout 25 ncu --clock-control none --kernel-name regex:'lf_' \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,sm__warps_active.avg.pct_of_peak_sustained_active \
      --csv $B/bench_gpu_linear profile 32768 > "$OUT/ncu_$p.csv" 2> "$OUT/ncu_$p.err"
    echo "ncu $p: rc=$? ($(el) s)"
    grep -E '"(gpu__time_duration.sum|dram__bytes_read.sum|dram__bytes_write.sum)"' "$OUT/ncu_$p.csv" \
      | awk -F'","' '{n=$5; gsub(/\(anonymous namespace\)::/,"",n); sub(/\(.*/,"",n); gsub(/"/,"",$NF); printf "  %-24s %-22s %s %s\n", n, $(NF-2), $NF, $(NF-1)}' | head -40
  done
fi
# stall reasons of one v3 summary and one v3 output launch (linear, N = 32K)
if command -v ncu >/dev/null && [ $(( DEADLINE - $(el) )) -gt 45 ]; then
  LA_CUDA_LINFAM_PATH=new timeout 40 ncu --clock-control none --set full --import-source no \
    --kernel-name regex:'lf_tc_(summary|output)' --launch-count 2 \
    $B/bench_gpu_linear profile 32768 > "$OUT/ncu_full.txt" 2>&1
  echo "ncu --set full: rc=$? ($(el) s)"
  grep -E "lf_tc_|Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Issue Slots Busy|Achieved Occupancy|stall|Stall" \
    "$OUT/ncu_full.txt" | cut -c1-160 | head -24
fi
command -v compute-sanitizer >/dev/null && san racecheck

# 5. what the compiler made of the v2/v3 kernels: instruction counts from the SASS
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass $B/obj/src/cuda/linfam.o > "$OUT/linfam.sass" 2>/dev/null
  awk '/Function :/{f=$3} f ~ /lf_tc_|lf_fast_|lf_wg_/ {for (i=1;i<=NF;i++) if ($i ~ /^(HMMA|HGMMA|LDSM|LDGSTS|LDG|STG|LDL|STL|LDS|STS)/) {split($i,a,"."); c[f" "a[1]]++}} END {for (k in c) print k, c[k]}' \
    "$OUT/linfam.sass" | sed -E 's/^_ZN[0-9]+_GLOBAL__N__[0-9a-f_]+_linfam_cu_[0-9a-f]+[0-9]+(lf_[a-z_]+)[^ ]* / \1 /' | sort > "$OUT/sass_counts.txt"
  echo "sass counts: $OUT/sass_counts.txt"
fi

echo "==== bench, ms (v4 = default; pool = v4 with the device's default pool; mix = v4 with the fp32 mix; wg = wgmma output kernel, wgs = wgmma output + summary kernels, both opt-in) ===="
head -2 "$OUT/bench_new.log"
awk 'FNR==1{f++} / ms / && !/^copy/{k=substr($0,1,49); i=index($0," ms "); v=substr($0,50,i-50)+0; t[k,f]=v; if (f==1) ord[++n]=k;
     if (f==1) { fl[k]=substr($0,index($0,"byte-floor")+11,8)+0 } }
     END {printf "%-49s %7s %7s %7s %7s %7s %7s %7s %7s %7s %6s %6s %6s\n","case","v4","v3","v2","pool","mix","v4b","wg","wgs","floor","xfloor","wg/v4","wgs/v4";
          for (i=1;i<=n;i++){k=ord[i]; m=(t[k,1]<t[k,6]?t[k,1]:t[k,6]); printf "%-49s %7.4f %7.4f %7.4f %7.4f %7.4f %7.4f %7.4f %7.4f %7.4f %6.2f %6.2f %6.2f\n",k,t[k,1],t[k,2],t[k,3],t[k,4],t[k,5],t[k,6],t[k,7],t[k,8],fl[k],m/(fl[k]+1e-12),t[k,7]/(m+1e-12),t[k,8]/(m+1e-12)}}' \
  "$OUT/bench_new.log" "$OUT/bench_v3.log" "$OUT/bench_old.log" "$OUT/bench_pool.log" "$OUT/bench_mix.log" "$OUT/bench_new2.log" "$OUT/bench_wg.log" "$OUT/bench_wgs.log"
( cd "$OUT" && tar czf logs_linear.tgz --exclude='*.tgz' $(ls | grep -v tgz) && find . -maxdepth 1 -type f ! -name '*.tgz' -delete )
echo "# total $(el) s"
exit $tc_rc
