#!/bin/bash
# One device call for the flat DSA indexer's fp8 path and DSA v2 (wgmma)
# kernel (issue 7), ~60-80 s:
#   1. build (no-op when build-gpu is current) + the bench driver,
#   2. test_cuda_dsa_fp8 (fp8 + bf16, every path vs float64 / own top-k / CPU),
#   3. the small cases of test_cuda_sparse (DSA/HISA/block-sparse/top-k,
#      incl. "HISA == DSA" with DSA now on the v2 kernel),
#   4. bench_gpu_sparse dsa: bf16 v2/old and fp8 v2/old at L = 8K, 64K, 128K
#      incl. top-k, median of 10 CUDA-event timings, ratios to the goals,
#   5. the plain-PyTorch indexer of bench/gpu_sparse.py at the same L.
#   bash tests/cuda/gpu_dsa.sh            (LA_DSA_SANITIZE=1 adds memcheck +
#                                          racecheck on the small test cases)
# Logs under $OUT; the summary printed last is <= 40 lines.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader 2>&1 | head -1)"
rc=0
timeout 120 make BUILD=$B SKIP_DEPS=1 -j16 cuda-tests > "$OUT/dsa_build.log" 2>&1 \
  || { echo "BUILD FAILED"; grep -E "error" "$OUT/dsa_build.log" | head -10; exit 1; }
NV="nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_sparse.cu $B/liblongattn.a -Xcompiler -fopenmp -o $B/bench_gpu_sparse"
timeout 90 $NV -lopenblas -llapack >> "$OUT/dsa_build.log" 2>&1 || timeout 90 $NV >> "$OUT/dsa_build.log" 2>&1 \
  || { echo "BENCH BUILD FAILED"; tail -5 "$OUT/dsa_build.log"; }
echo "# build done at $(el) s"

# 2. fp8 / v2 tests
timeout 60 $B/tests/cuda/test_cuda_dsa_fp8 > "$OUT/test_cuda_dsa_fp8.log" 2>&1
trc=$?; [ $trc -ne 0 ] && rc=1
echo "test_cuda_dsa_fp8: rc=$trc $(tail -1 "$OUT/test_cuda_dsa_fp8.log")  ($(el) s)"
grep -E "^FAIL" "$OUT/test_cuda_dsa_fp8.log" | head -5
# worst score error per (dtype, path) over all cases, and bit-differences vs the v2 path
awk '/score rel err/ { d=$1; p=$0; sub(/.*\[/,"",p); sub(/\].*/,"",p); gsub(/ /,"",p);
       e=$0; sub(/.*score rel err /,"",e); sub(/,.*/,"",e);
       n=$0; sub(/.*scores != new: /,"",n);
       k=d"/"p; if (!(k in m) || e+0 > m[k]+0) m[k]=e; nd[k]+=n; nc[k]++ }
     END { for (k in m) printf "  %-16s max rel err %-9s scores differing from v2: %d (%d cases)\n", k, m[k], nd[k], nc[k] }' \
  "$OUT/test_cuda_dsa_fp8.log" | sort
grep -E "bad input" "$OUT/test_cuda_dsa_fp8.log" | head -2

# 3. existing sparse-family small cases (DSA on v2 by default)
LA_CUDA_SMALL=1 timeout 45 $B/tests/cuda/test_cuda_sparse > "$OUT/test_cuda_sparse_small.log" 2>&1
trc=$?; [ $trc -ne 0 ] && rc=1
echo "test_cuda_sparse (LA_CUDA_SMALL=1): rc=$trc $(tail -1 "$OUT/test_cuda_sparse_small.log")  ($(el) s)"
grep -E "^FAIL" "$OUT/test_cuda_sparse_small.log" | head -4

if [ "${LA_DSA_SANITIZE:-0}" = 1 ] && command -v compute-sanitizer >/dev/null; then
  for tool in memcheck racecheck; do
    LA_CUDA_SMALL=1 timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 $B/tests/cuda/test_cuda_dsa_fp8 \
      > "$OUT/dsa_sanitizer_$tool.log" 2>&1
    echo "compute-sanitizer $tool: rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/dsa_sanitizer_$tool.log" | tail -1)"
  done
fi

# 4. timings
timeout 60 $B/bench_gpu_sparse dsa > "$OUT/bench_dsa.log" 2>&1
brc=$?
echo "# bench done at $(el) s (rc=$brc)"
grep -vE "^# device" "$OUT/bench_dsa.log" | head -26

# 5. plain-PyTorch indexer (chunked einsum + relu + weighted sum + topk), same shapes
PYTHONUNBUFFERED=1 timeout 60 python3 - > "$OUT/bench_dsa_torch.log" 2>&1 <<'EOF'
import sys
sys.path.insert(0, "bench")
import torch
from gpu_sparse import torch_indexer, med
T, HI, dI, K = 1024, 64, 128, 2048
for L in (8192, 65536, 131072):
    q = torch.randn(T, HI, dI, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(L, dI, device="cuda", dtype=torch.bfloat16)
    w = torch.randn(T, HI, device="cuda") / (HI * dI) ** 0.5
    ms = med(lambda: torch_indexer(q, k, w, K), warm=1, iters=10)
    print(f"torch indexer bf16 L={L}: {ms:.3f} ms")
    del q, k, w
    torch.cuda.empty_cache()
EOF
tail -3 "$OUT/bench_dsa_torch.log"
# ours vs torch at each L (v2 rows)
awk '/^torch indexer/ { L=$4; sub(/L=/,"",L); sub(/:/,"",L); t[L]=$5 }
     /^(bf16|fp8)\/v2/ { o[$1" "$2]=$3 }
     END { for (x in o) { split(x, a, " "); if (a[2] in t) printf "  %-8s L=%-7s %.2fx faster than the torch indexer\n", a[1], a[2], t[a[2]]/o[x] } }' \
  "$OUT/bench_dsa_torch.log" "$OUT/bench_dsa.log" | sort
echo "# all done at $(el) s, rc=$rc"
exit $rc
