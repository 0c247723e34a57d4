#!/bin/bash
# One device call for the tensor-core causal linear attention
# (src/cuda/linear_causal_tc.cu): correctness against the CPU path and the
# default path, timings of the default ("new": ldmatrix/mma.sync kernels, walk
# scan), v3 (LA_CUDA_CAUSAL_PATH=v3: the wide scan) and
# v3k3 (v3 with LA_CUDA_CAUSAL_KS=3: pass 1 on 2 (4K, 32K) or 3 (128K)
# sub-chunks per state chunk) and v3L512 (v3 with 512-token state chunks) at
# 4K/32K/128K,
# per-kernel times at 32K, flash-linear-attention's chunk_linear_attn on the
# same shapes (alone on the GPU: its autotuning must not share it with our
# kernels), then racecheck/memcheck on the small cases of v3 while time is
# left. A short summary last (≤ 60 lines: gpu_round.sh shows the tail).
#   bash tests/cuda/gpu_causal.sh        (from the repository root, ≤ 150 s)
#   LA_SKIP_BUILD=1: the tree is built (gpu_round.sh); only the bench driver is built here
# Logs under $OUT (the device tool's output folder).
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${LA_GPU_BUILD:-build-gpu}
T=$B/tests/cuda/test_cuda_causal
DEADLINE=${LA_GPU_DEADLINE:-145}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { echo $(( DEADLINE - $(el) )); }
cap() { local l=$(( $(left) - $2 )); [ $l -gt $1 ] && l=$1; [ $l -lt 1 ] && l=1; echo $l; }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader 2>&1)"

# 1. build (skipped under gpu_round.sh) and the timing driver
if [ -z "$LA_SKIP_BUILD" ]; then
  timeout 90 make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 \
    || { echo "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20; tail -5 "$OUT/build.log"; exit 1; }
fi
BLAS_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
timeout 40 nvcc -O2 -std=c++17 -Iinclude -Isrc dev/bench_gpu_causal.cu $B/liblongattn.a -Xcompiler -fopenmp \
  $BLAS_LIBS -ldl -o $B/bench_gpu_causal >> "$OUT/build.log" 2>&1 || echo "BENCH BUILD FAILED"
echo "# build: $(el) s"

# 2. correctness: every case vs the CPU path, v3 also vs the default; the path of each call on stderr
LA_CUDA_CAUSAL_VERBOSE=1 timeout $(cap 65 80) $T > "$OUT/test.log" 2> "$OUT/test_paths.log"
rc=$?
echo "test_cuda_causal: rc=$rc  $(tail -1 "$OUT/test.log")  ($(el) s)"
grep -E "^# worst" "$OUT/test.log"
grep -E "FAIL" "$OUT/test.log" "$OUT/test_paths.log" | head -10
grep -v '^linear-causal:' "$OUT/test_paths.log" | grep -v FAIL | head -4
echo "# calls by path: $(grep -o 'path=tc[-a-z0-9]*' "$OUT/test_paths.log" | sort | uniq -c | tr '\n' ' ')"
echo "# v3 calls by ks/scan: $(grep 'path=tc-v3' "$OUT/test_paths.log" | grep -o 'ks=[0-9]* scan=[a-z]*' | sort | uniq -c | tr '\n' ' ')"
echo "# v3 vs default: $(grep -c 'vs default.* ok' "$OUT/test.log") ok, $(grep -c 'vs default.*FAIL' "$OUT/test.log") FAIL"

# 3. timings: new (default), v3, v3k3, v3L512 at 4K, 32K, 128K
timeout $(cap 25 55) $B/bench_gpu_causal > "$OUT/bench.log" 2> "$OUT/bench_timing.log"
echo "# bench rc=$? ($(el) s)"

# 4. fla (Triton compiles on the first call of each mode; 32K first)
if [ -d peers/fla ]; then
  fla_t=$(cap 60 4)
  PYTHONPATH=peers/fla PYTHONUNBUFFERED=1 timeout $fla_t python3 - > "$OUT/fla.log" 2>&1 <<'EOF'
import torch, triton
from fla.ops.linear_attn import chunk_linear_attn
for N in (32768, 4096, 131072):   # 32K first: the numbers that matter if time runs out
    q = torch.randn(1, N, 12, 128, device="cuda", dtype=torch.bfloat16)
    k, v = torch.randn_like(q), torch.randn_like(q)
    for norm in (False, True):
        ms = triton.testing.do_bench(lambda: chunk_linear_attn(q, k, v, normalize=norm),
                                     warmup=10, rep=50, return_mode="median")
        print(f"FLA norm={int(norm)} N={N} ms={ms:.5f}", flush=True)
EOF
  echo "# fla rc=$? ($(el) s)"
else
  echo "# fla skipped (peers/fla missing)"
fi

echo "==== causal linear, B=1 H=12 D=Dv=128 bf16, relu (ms; floor = Q,K,V read + O written at 4.2 TB/s) ===="
awk '/^RESULT/ { split($0, f, " "); for (i in f) { split(f[i], kv, "="); r[kv[1]] = kv[2] }
                 key = r["norm"] " " r["N"]; ms[r["path"], key] = r["ms"]; fl[key] = r["floor"]; if (!(key in seen)) { seen[key] = 1; ord[++n] = key } }
     /^FLA/ { split($0, f, " "); for (i in f) { split(f[i], kv, "="); r[kv[1]] = kv[2] }
              fla[r["norm"] " " r["N"]] = r["ms"] }
     END { printf "%-4s %-6s %7s %7s %7s %7s %7s %7s %6s %6s %6s\n", "norm", "N", "new", "v3", "v3k3", "v3L512", "fla", "floor", "v3/flr", "fla/v3", "new/v3";
           for (i = 1; i <= n; i++) { k = ord[i]; split(k, a, " "); g = (k in fla) ? fla[k] : 0; v = ms["v3", k];
             printf "%-4s %-6s %7.4f %7.4f %7.4f %7.4f %7s %7.4f %6.2f %6s %6.2f\n", a[1], a[2], ms["new", k], v, ms["v3k3", k], ms["v3L512", k],
                    g ? sprintf("%.4f", g) : "-", fl[k], v ? v / fl[k] : 0, (g && v) ? sprintf("%.2f", g / v) : "-", v ? ms["new", k] / v : 0 } }' \
  "$OUT/bench.log" "$OUT/fla.log" 2>/dev/null
echo "# per kernel at 32K (ms, second call of each):"
grep '^linear-causal timing' "$OUT/bench_timing.log" | awk 'NR % 2 == 0' | sed 's/^linear-causal timing: /  /'
grep -E "identity|state i/o" "$OUT/bench.log"
grep -E "Error|error|failed" "$OUT/bench.log" "$OUT/bench_timing.log" "$OUT/fla.log" 2>/dev/null | head -4

# 5. sanitizers on the small cases of the new path (LA_CUDA_SMALL=3: v3 only, N ≤ 65 +
#    forced cases up to N = 333 + a split sequence), while time is left; racecheck first
#    (the default path had its racecheck/memcheck in earlier rounds)
for tool in racecheck memcheck; do
  l=$(( $(left) - 2 ))
  if [ $l -lt 10 ] || ! command -v compute-sanitizer >/dev/null; then echo "compute-sanitizer $tool: skipped (time)"; continue; fi
  LA_CUDA_SMALL=3 timeout $l compute-sanitizer --tool $tool --error-exitcode 3 $T > "$OUT/sanitizer_$tool.log" 2>&1
  echo "compute-sanitizer $tool (v3): rc=$?  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/sanitizer_$tool.log" | tail -1)  $(grep -E 'passed, ' "$OUT/sanitizer_$tool.log" | tail -1)  ($(el) s)"
done
echo "# total $(el) s"
exit $rc
