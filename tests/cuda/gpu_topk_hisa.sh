#!/bin/bash
# One device call for the top-k v2 / HISA stage-2 / eval-index --device cuda
# work (issue 7). Wall time <= 150 s when build-gpu is already built (the
# make below is then a no-op), about 40 s more on a fresh tree.
#   bash tests/cuda/gpu_topk_hisa.sh
# Steps (each under `timeout`; later optional steps are skipped when the
# elapsed time says they would not fit):
#   1. make all cuda-tests in build-gpu; nvcc the bench (dev/bench_gpu_sparse.cu)
#   2. build-gpu/tests/cuda/test_cuda_sparse: top-k, DSA, HISA, block-sparse,
#      sparse attention vs the CPU (must pass)
#   3. compute-sanitizer memcheck on the small cases (LA_CUDA_SMALL=1)
#   4. bench 'topkhisa': top-k 1024x64K (and 1024x8K) new vs LA_CUDA_TOPK_PATH=old
#      with index agreement; DSA, HISA new/old, block-sparse at L = 64K, 128K
#   5. torch.topk 1024x64K and 1024x8K k=2048 in the same call (python3)
#   6. longattn eval-index --device cuda (bf16, L 8K..256K if it fits) and the
#      same study with --precision f32 at 8K..32K; wall times printed
# Logs under $OUT (default /tmp/la_gpu_out); a summary of <= 40 lines last.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader > "$OUT/gpu.txt" 2>&1
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "# $(date -u +%FT%TZ) $(head -1 $OUT/gpu.txt)"

# 1. build
timeout 120 make BUILD=$B SKIP_DEPS=1 -j16 all cuda-tests > "$OUT/build.log" 2>&1 || {
  say "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_sparse.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
timeout 90 $NV -lopenblas -llapack >> "$OUT/build.log" 2>&1 || timeout 90 $NV >> "$OUT/build.log" 2>&1 || say "BENCH BUILD FAILED (see build.log)"
say "# build done at $(el) s"

# 2. correctness
rc=0
timeout 110 $B/tests/cuda/test_cuda_sparse > "$OUT/test_cuda_sparse.log" 2>&1 || rc=1
say "test_cuda_sparse: rc=$rc  $(tail -1 $OUT/test_cuda_sparse.log)  ($(el) s)"
grep -E "FAIL" "$OUT/test_cuda_sparse.log" | head -8 | tee -a "$S"

# 3. memcheck on the small cases, if there is time
if [ $(el) -lt 70 ] && command -v compute-sanitizer > /dev/null; then
  LA_CUDA_SMALL=1 timeout 35 compute-sanitizer --tool memcheck --error-exitcode 3 $B/tests/cuda/test_cuda_sparse > "$OUT/memcheck.log" 2>&1
  src=$?
  say "memcheck (small cases): rc=$src $(grep -E 'ERROR SUMMARY' $OUT/memcheck.log | tail -1) ($(el) s)"
  [ $src -ne 0 ] && [ $src -ne 124 ] && rc=1
else
  say "memcheck: skipped (elapsed $(el) s)"
fi

# 4. bench (ours)
if [ -x $B/bench_gpu_sparse ]; then
  timeout 60 $B/bench_gpu_sparse topkhisa > "$OUT/bench_topkhisa.log" 2>&1
  say "bench rc=$? ($(el) s):"
  grep -E "^(topk|dsa|hisa|blocksp)" "$OUT/bench_topkhisa.log" | tee -a "$S"
fi

# 5. torch.topk in the same call
timeout 45 python3 - > "$OUT/torch_topk.log" 2>&1 <<'EOF'
import torch
def med(fn, warm=3, iters=20):
    for _ in range(warm): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a = torch.cuda.Event(enable_timing=True); b = torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
for L in (65536, 8192):
    g = torch.Generator(device="cuda").manual_seed(7)
    x = (torch.rand(1024, L, device="cuda", generator=g) * 2 - 1) * 1.7320508
    print(f"torch.topk 1024x{L} k=2048: {med(lambda: torch.topk(x, 2048, dim=1)):.3f} ms")
EOF
grep "torch.topk" "$OUT/torch_topk.log" | tee -a "$S" || say "torch.topk: failed (see torch_topk.log)"

# 6. eval-index on the GPU
LMAX=262144
[ $(el) -gt 110 ] && LMAX=65536
ts=$(date +%s)
timeout 60 $B/longattn eval-index --device cuda --lmin 8192 --lmax $LMAX --reps 4 \
  --json-out "$OUT/eval_index_cuda_bf16.json" > "$OUT/eval_index_cuda_bf16.log" 2>&1
erc=$?
say "eval-index --device cuda (bf16, L 8K..$((LMAX / 1024))K): rc=$erc, wall $(( $(date +%s) - ts )) s"
grep -E "^(65536|131072|262144) +(dsa|hisa B=128) " "$OUT/eval_index_cuda_bf16.log" | tee -a "$S"
if [ $(el) -lt 135 ]; then
  ts=$(date +%s)
  timeout 20 $B/longattn eval-index --device cuda --precision f32 --lmin 8192 --lmax 32768 --reps 4 \
    --json-out "$OUT/eval_index_cuda_f32.json" > "$OUT/eval_index_cuda_f32.log" 2>&1
  say "eval-index --device cuda --precision f32 (8K..32K): rc=$?, wall $(( $(date +%s) - ts )) s"
fi
say "# total $(el) s; logs in $OUT"
exit $rc
