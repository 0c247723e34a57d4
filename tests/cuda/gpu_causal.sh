#!/bin/bash
# One device call for the tensor-core causal linear attention
# (src/cuda/linear_causal_tc.cu): build, correctness against the CPU path,
# timings of the default (ldmatrix/mma.sync) path, the WMMA path
# (LA_CUDA_CAUSAL_PATH=wmma) and the portable one (old), per-kernel times at
# 32K, flash-linear-attention's chunk_linear_attn on the same shapes in the
# same run (60 s for Triton's compiles; 32K first), fla/ours ratios;
# memcheck/racecheck on the small cases while time is left.
#   bash tests/cuda/gpu_causal.sh            (from the repository root, ≤ 130 s)
# Logs under $OUT (the device tool's output folder); a short summary last.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${LA_GPU_BUILD:-build-gpu}
T=$B/tests/cuda/test_cuda_causal
DEADLINE=${LA_GPU_DEADLINE:-128}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( DEADLINE - $(el) )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"

# 1. build (a no-op when the tree is built already) and the timing driver
timeout 70 make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 \
  || { echo "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20; tail -5 "$OUT/build.log"; exit 1; }
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
timeout 40 nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_causal.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_causal >> "$OUT/build.log" 2>&1 || echo "BENCH BUILD FAILED"
echo "# build: $(el) s"

# 2. correctness: every case vs the CPU path; the path of each call on stderr
LA_CUDA_CAUSAL_VERBOSE=1 timeout 60 $T > "$OUT/test.log" 2> "$OUT/test_paths.log"
rc=$?
echo "test_cuda_causal: rc=$rc  $(tail -1 "$OUT/test.log")  tc calls: $(grep -c 'path=tc' "$OUT/test_paths.log")  ($(el) s)"
grep -E "^# worst" "$OUT/test.log"
grep -E "FAIL" "$OUT/test.log" "$OUT/test_paths.log" | head -12
grep -v '^linear-causal:' "$OUT/test_paths.log" | grep -v FAIL | head -5
grep 'path=tc' "$OUT/test_paths.log" | grep 'N=32768' | head -2
echo "# test calls by path: $(grep -o 'path=tc[-a-z]*' "$OUT/test_paths.log" | sort | uniq -c | tr '\n' ' ')"
if [ $rc -ne 0 ]; then  # is it the default (mma.sync) path? the small cases once more on WMMA
  LA_CUDA_CAUSAL_PATH=wmma LA_CUDA_SMALL=1 timeout 20 $T > "$OUT/test_wmma.log" 2>&1
  echo "  same test (N <= 1000) with LA_CUDA_CAUSAL_PATH=wmma: rc=$?  $(tail -1 "$OUT/test_wmma.log")"
fi

# 3. timings: ours (new = mma.sync, wmma, old), then fla on the same shapes
timeout 30 $B/bench_gpu_causal > "$OUT/bench.log" 2> "$OUT/bench_timing.log"
echo "# bench rc=$? ($(el) s)"
fla_t=$(( $(left) - 6 ))
[ $fla_t -gt 60 ] && fla_t=60
if [ -d peers/fla ] && [ $fla_t -gt 10 ]; then
  PYTHONPATH=peers/fla PYTHONUNBUFFERED=1 timeout $fla_t python3 - > "$OUT/fla.log" 2>&1 <<'EOF'
import torch, triton
from fla.ops.linear_attn import chunk_linear_attn
for N in (32768, 4096, 131072):   # 32K (norm 0, then 1) first: the numbers that matter if time runs out
    q = torch.randn(1, N, 12, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    for norm in (False, True):
        ms = triton.testing.do_bench(lambda: chunk_linear_attn(q, k, v, normalize=norm),
                                     warmup=10, rep=50, return_mode="median")
        print(f"FLA norm={int(norm)} N={N} ms={ms:.5f}", flush=True)
EOF
  echo "# fla rc=$? ($(el) s)"
else
  echo "# fla skipped (peers/fla missing or no time)"
fi

echo "==== causal linear, B=1 H=12 D=Dv=128 bf16 (ms; floor = Q,K,V read + O written at 4.2 TB/s) ===="
awk '/^RESULT/ { split($0, f, " "); for (i in f) { split(f[i], kv, "="); r[kv[1]] = kv[2] }
                 key = r["norm"] " " r["N"]; ms[r["path"], key] = r["ms"]; fl[key] = r["floor"]; if (!(key in seen)) { seen[key] = 1; ord[++n] = key } }
     /^FLA/ { split($0, f, " "); for (i in f) { split(f[i], kv, "="); r[kv[1]] = kv[2] }
              fla[r["norm"] " " r["N"]] = r["ms"] }
     END { printf "%-5s %-7s %8s %8s %8s %8s %8s %8s %8s\n", "norm", "N", "new", "wmma", "old", "fla", "floor", "xfloor", "fla/new";
           for (i = 1; i <= n; i++) { k = ord[i]; split(k, a, " ");
             g = (k in fla) ? fla[k] : 0;
             printf "%-5s %-7s %8.4f %8.4f %8.4f %8s %8.4f %8.2f %8s\n", a[1], a[2], ms["new", k], ms["wmma", k], ms["old", k],
                    g ? sprintf("%.4f", g) : "-", fl[k], ms["new", k] / fl[k], g ? sprintf("%.2f", g / ms["new", k]) : "-" } }' \
  "$OUT/bench.log" "$OUT/fla.log" 2>/dev/null
echo "# per kernel at 32K (ms, second call of each):"
grep '^linear-causal timing' "$OUT/bench_timing.log" | awk 'NR % 2 == 0' | sed 's/^linear-causal timing: /  /'
grep -E "identity|state i/o" "$OUT/bench.log"
grep -E "Error|error|failed" "$OUT/bench.log" "$OUT/bench_timing.log" "$OUT/fla.log" 2>/dev/null | head -4

# 4. sanitizers on the small cases, while time is left
# (racecheck first: the default output kernel has 2 barriers per tile instead of 4;
#  LA_CUDA_SMALL=2 = N ≤ 65 plus the fixed cases when less than 40 s are left)
for tool in racecheck memcheck; do
  l=$(( $(left) - 2 ))
  if [ $l -lt 8 ] || ! command -v compute-sanitizer >/dev/null; then echo "compute-sanitizer $tool: skipped (time)"; continue; fi
  small=1; [ $l -lt 40 ] && small=2
  LA_CUDA_SMALL=$small timeout $l compute-sanitizer --tool $tool --error-exitcode 3 $T > "$OUT/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool (LA_CUDA_SMALL=$small): rc=$?  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)  $(grep -E 'passed, ' "$OUT/sanitizer_$tool.log" | tail -1)  ($(el) s)"
done
echo "# total $(el) s"
exit $rc
