#!/bin/bash
# HISA's stage 2 (hb2_kernel) and stage 1 (dev/NOTES_hisa_speed.md), one
# device call, <= 100 s wall:
#   make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests && bash tests/cuda/gpu_hisa2.sh
#   bash tests/cuda/gpu_round.sh hisa2:100          (built by the round)
# Switches (read per call by src/cuda/hisa.cu):
#   LA_CUDA_HISA_FAST1=0  hs_pool_bf16_kernel and the mma.sync block scores
#                         instead of hs_pool2_kernel and hb2_kernel<2,true>
#   LA_CUDA_HISA_PATH=old stage 2 on the gather kernels instead of hb2_kernel
#   1. bench driver dev/bench_hisa2.cu compiled against build-gpu/liblongattn.a
#      (background, while the tests run);
#   2. in parallel, on the defaults:
#      test_cuda_sparse with LA_CUDA_ONLY_INDEXERS=1 (every DSA / HISA /
#      block-sparse case: HISA vs the CPU, == DSA when m*B >= L, the test's
#      HISA variants vs the default: the same indices),
#      test_cuda_dsa_fp8 (fp8 HISA vs the CPU; wg_force == DSA fp8 indices; the
#      stage-2 hook, hb2_kernel<1,false>, bit for bit vs the DSA fp8 scores);
#   3. bench_hisa2: T = 1024, L = 64K and 128K, bf16 B = 128, m = 64, k = 2048:
#      default / prev1 (FAST1=0) / old (times, back-to-back batch times,
#      positions differing from the default: must be 0), fp8 default / prev1,
#      then LA_CUDA_HISA_TIMING=1 per-stage lines of each and the token top-k
#      probe;
#   4. summary (also $OUT/summary.txt).
. tests/cuda/gpu_common.sh gpu_hisa2
for t in test_cuda_sparse test_cuda_dsa_fp8; do
  [ -x $B/tests/cuda/$t ] || { say "MISSING $B/tests/cuda/$t: run make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests first"; exit 1; }
done

# 1. bench driver (background)
gpu_build_driver bench_hisa2

# 2. tests on the defaults (lean stage 2, fast stage 1; the sparse test also
#    runs LA_CUDA_HISA_PATH=pipe and LA_CUDA_HISA_FAST1=0 per case), in parallel
unset LA_CUDA_HISA_PATH LA_CUDA_HISA_FAST1
LA_CUDA_ONLY_INDEXERS=1 timeout 50 $B/tests/cuda/test_cuda_sparse > "$OUT/test_sparse.log" 2>&1 &
p1=$!
timeout 50 $B/tests/cuda/test_cuda_dsa_fp8 > "$OUT/test_dsa_fp8.log" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
rc=0
[ $r1 -ne 0 ] && rc=1
[ $r2 -ne 0 ] && rc=1
say "test_cuda_sparse (indexers): rc=$r1 $(tail -1 "$OUT/test_sparse.log")  ($(el) s)"
grep -E "FAIL" "$OUT/test_sparse.log" | head -6 | tee -a "$S"
say "test_cuda_dsa_fp8: rc=$r2 $(tail -1 "$OUT/test_dsa_fp8.log")  ($(el) s)"
grep -E "FAIL" "$OUT/test_dsa_fp8.log" | head -6 | tee -a "$S"
awk '/hisa fp8 wg_force .*vs DSA: / { d=$0; sub(/.*vs DSA: /,"",d); sub(/ .*/,"",d); f++; fd+=d }
     /hisa fp8 stage2 .*differ bitwise/ { d=$0; sub(/.*vs DSA v2 scores: /,"",d); n=d; sub(/ .*/,"",d); sub(/^[0-9]+ of /,"",n); sub(/ .*/,"",n); h++; hd+=d; hn+=n }
     END { printf "  fp8 wg_force (every block kept) vs GPU DSA: %d cases, %d positions differ\n", f, fd;
           printf "  fp8 stage-2 scores (hook, hb2_kernel<1,false>) vs DSA v2 fp8 scores: %d cases, %d of %d differ bitwise\n", h, hd, hn }' \
  "$OUT/test_dsa_fp8.log" | tee -a "$S"

# 3. bench
wait $bpid
left=$(( 97 - $(el) ))
if [ -x $B/bench_hisa2 ] && [ $left -gt 8 ]; then
  timeout $left $B/bench_hisa2 > "$OUT/bench_hisa2.log" 2> "$OUT/bench_hisa2.err"
  brc=$?
  say "bench_hisa2: rc=$brc ($(el) s)"
  grep -E "^(dsa|hisa2)" "$OUT/bench_hisa2.log" | tee -a "$S"
  grep -E "timing:|topk probe" "$OUT/bench_hisa2.err" | sed 's/ T=1024//' | tee -a "$S"
  grep -vE "timing:|topk probe" "$OUT/bench_hisa2.err" | head -3 | tee -a "$S"
else
  say "bench: skipped (built: $([ -x $B/bench_hisa2 ] && echo yes || echo no), $(el) s elapsed; see $OUT/bench_hisa2_build.log)"
  tail -3 "$OUT/bench_hisa2_build.log" | tee -a "$S"
fi
say "# done at $(el) s, rc=$rc"
exit $rc
