#!/bin/bash
# Paged serving path on the GPU machine: builds the tree unless
# LA_SKIP_BUILD=1 (as under tests/cuda/gpu_round.sh; CUDA_ARCH passes to
# make), with LA_PAGED_CHECK=1 first the tensor-core cases of the paged
# harness table (tests/backend/cases_paged.c, "paged tc": the small ones in
# one process, each 128K-context case in its own, all at once), then
# bench/gpu_paged.py: decode (64 sequences, 32K-128K and 32K/64K/128K,
# next_n 1, HI 64, dI 128, k 2048) and prefill (4K queries at 128K): DSA
# paged vs the byte floor, HISA paged vs DSA paged, and the plain-PyTorch
# gather-and-score peer (LA_PAGED_COMPILE=1: and its torch.compile);
# LA_PAGED_DEV=1: before the Python bench, dev/bench_gpu_paged.cu times
# paged DSA decode under the family's variants (mma, wgmma), and
# dev/bench_gpu_paged_hisa.cu paged HISA's variants against it. The
# whole paged table runs under gpu_check.sh (test_backend_ops -o paged).
# Results under $OUT: build.log, check*.log, paged_bench.log,
# paged_bench.json, summary.txt.
#   CUDA_ARCH=sm90a LA_PAGED_CHECK=1 bash tests/cuda/gpu_paged.sh
. tests/cuda/gpu_common.sh paged
H=$B/tests/backend/test_backend_ops
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_BUILD_S:-200}" make -j16 SKIP_DEPS=1 BUILD="$B" ${CUDA_ARCH:+CUDA_ARCH=$CUDA_ARCH} all "$H" \
    > "$OUT/build.log" 2>&1 \
    || { say "build FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
  say "# build: $(el) s"
fi
rc=0
if [ "${LA_PAGED_CHECK:-0}" = 1 ]; then
  cs=${LA_CHECK_S:-60}
  timeout "$cs" "$H" -o paged -n "tc fp8_e4m3 128K" > "$OUT/check_big_fp8.log" 2>&1 &
  p1=$!
  timeout "$cs" "$H" -o paged -n "tc bf16 128K" > "$OUT/check_big_bf16.log" 2>&1 &
  p2=$!
  timeout "$cs" "$H" -o paged -n "paged tc" -x 128K > "$OUT/check_small.log" 2>&1
  r0=$?
  wait $p1; r1=$?
  wait $p2; r2=$?
  for f in check_small check_big_fp8 check_big_bf16; do
    grep -E "^FAIL|failed|differ|tensor cores:|rows equal" "$OUT/$f.log" | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
    tail -2 "$OUT/$f.log" | tee -a "$S"
  done
  say "# paged tc harness rc=$r0/$r1/$r2 ($(el) s)"
  [ $r0 = 0 ] && [ $r1 = 0 ] && [ $r2 = 0 ] || rc=1
fi
if [ "${LA_PAGED_DEV:-0}" = 1 ]; then # the paged family's variants (mma, wgmma) in C: dev/bench_gpu_paged.cu
  gpu_bench bench_gpu_paged "${LA_DEV_S:-60}" || rc=1
  cat "$OUT/bench_gpu_paged.log" | tee -a "$S"
  # paged HISA's variants (fused / classic block stage, blockmajor / gather candidates) against DSA
  if [ -f dev/bench_gpu_paged_hisa.cu ]; then
    gpu_bench bench_gpu_paged_hisa "${LA_DEV_S:-60}" --decode-only || rc=1
    gpu_bench bench_gpu_paged_hisa "${LA_DEV_S:-60}" --prefill-only || rc=1
    tail -n 25 "$OUT/bench_gpu_paged_hisa_--decode-only.log" "$OUT/bench_gpu_paged_hisa_--prefill-only.log" | tee -a "$S"
  fi
fi
LONGATTN_LIB=$PWD/$B/liblongattn.so PYTHONPATH=$PWD/python:$PWD/bench PYTHONUNBUFFERED=1 \
  timeout "${LA_BENCH_S:-110}" python3 bench/gpu_paged.py --json "$OUT/paged_bench.json" \
  $([ "${LA_PAGED_COMPILE:-0}" = 1 ] && echo --compile) > "$OUT/paged_bench.log" 2>&1
b=$?
tail -30 "$OUT/paged_bench.log" | tee -a "$S"
say "# paged bench rc=$b, total $(el) s"
[ $b = 0 ] || rc=1
exit $rc
