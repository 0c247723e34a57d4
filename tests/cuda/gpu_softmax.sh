#!/bin/bash
# One device call for the tensor-core softmax attention (issue 6), ≤ 90 s:
# build (incremental: the library and test binaries are expected in
# $BUILD, default build-gpu), test_cuda_softmax (CUDA vs CPU, both paths),
# dev/bench_gpu_softmax (tc vs old-kernel validation, then B=1 H=12 D=128 bf16
# N = 4K..32K causal and not, every tiling), torch SDPA on the same shapes,
# a side-by-side table ours / SDPA, then compute-sanitizer memcheck on the
# small cases while time is left.
#   bash tests/cuda/gpu_softmax.sh
# Logs under $OUT (the device tool's output folder); a short summary last.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
T=$B/tests/cuda/test_cuda_softmax
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
# timeout of a step: its own cap, or what is left of the 88 s budget if less
tmo() { local left=$(( 88 - $(el) )); [ $left -lt 1 ] && left=1; echo $(( $1 < left ? $1 : left )); }
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader 2>&1)"

# 1. build: a no-op when the lead's build is current (full build from scratch ~20 s on 16 cores)
timeout $(tmo 45) make -j16 BUILD=$B SKIP_DEPS=1 $B/liblongattn.a $T > "$OUT/sm_build.log" 2>&1 \
  || { echo "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/sm_build.log" | head -20; tail -5 "$OUT/sm_build.log"; exit 1; }
LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
timeout $(tmo 30) nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc dev/bench_gpu_softmax.cu \
  $B/liblongattn.a -Xcompiler -fopenmp $LIBS -ldl -o $B/bench_gpu_softmax >> "$OUT/sm_build.log" 2>&1 \
  || { echo "BENCH BUILD FAILED"; tail -10 "$OUT/sm_build.log"; }
echo "# build: $(el) s"

# 2. correctness: CUDA vs CPU, every case (path checked, outputs poisoned)
timeout $(tmo 30) $T > "$OUT/sm_test.log" 2>&1
test_rc=$?
echo "test_cuda_softmax: rc=$test_rc  $(tail -1 "$OUT/sm_test.log")  ($(el) s)"
grep -E "FAIL" "$OUT/sm_test.log" | head -8
awk '/^  tc /{n++; r=$(NF-3)+0; if (r>m) m=r} END{if (n) printf "  tc cases %d, max out rel %.2e\n", n, m}' "$OUT/sm_test.log"

# 3. our timings: validation vs the old kernel, default tiling, other tilings, old kernel at 4K
bench_rc=1
if [ -x $B/bench_gpu_softmax ]; then
  timeout $(tmo 25) $B/bench_gpu_softmax cfgs old > "$OUT/sm_bench.log" 2>&1
  bench_rc=$?
fi
echo "bench_gpu_softmax: rc=$bench_rc  $(grep -c '^validate.* ok$' "$OUT/sm_bench.log" 2>/dev/null) validations ok, $(grep -c '^validate.*FAIL$' "$OUT/sm_bench.log" 2>/dev/null) failed  ($(el) s)"
grep -E "FAIL$|failed" "$OUT/sm_bench.log" | head -6
[ $bench_rc -ne 0 ] && tail -3 "$OUT/sm_bench.log"

# 4. torch SDPA on the same shapes ([B,H,N,D] bf16, default backend)
PYTHONUNBUFFERED=1 timeout $(tmo 25) python3 - > "$OUT/sm_sdpa.log" 2>&1 <<'EOF'
import torch, torch.nn.functional as F
def med(f, reps):
    for _ in range(3): f()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); f(); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]
print("# torch", torch.__version__, torch.cuda.get_device_name())
H, D = 12, 128
for causal in (0, 1):
    for N in (4096, 8192, 16384, 32768):
        q, k, v = (torch.randn(1, H, N, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        ms = med(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal)), 10 if N >= 16384 else 20)
        fl = 4.0 * N * N * H * D * (0.5 if causal else 1.0)
        print(f"sdpa N={N} causal={causal} {ms:9.4f} ms {fl / ms / 1e9:7.1f} TFLOP/s")
EOF
sdpa_rc=$?
echo "sdpa: rc=$sdpa_rc  ($(el) s)"
[ $sdpa_rc -ne 0 ] && tail -3 "$OUT/sm_sdpa.log"

echo "==== softmax B=1 H=12 D=128 bf16: ours (default tiling) vs SDPA ===="
awk '/^softmax tc cfg=0 /{split($4,a,"="); split($5,c,"="); k=a[2]" "c[2]; om[k]=$6; ot[k]=$8; ord[++n]=k}
     /^sdpa /{split($2,a,"="); split($3,c,"="); k=a[2]" "c[2]; sm[k]=$4; st[k]=$6}
     END {printf "%-6s %-6s %10s %8s %10s %8s %7s\n","N","causal","ours ms","TFLOP/s","sdpa ms","TFLOP/s","ratio";
          for (i=1;i<=n;i++){k=ord[i]; split(k,x," "); printf "%-6s %-6s %10.4f %8.1f %10.4f %8.1f %7.3f\n",x[1],x[2],om[k],ot[k],sm[k],st[k],(st[k]>0?ot[k]/st[k]:0)}}' \
  "$OUT/sm_bench.log" "$OUT/sm_sdpa.log"
echo "==== TFLOP/s by tiling (LA_CUDA_SOFTMAX_TC_CFG; N = 4K 8K 16K 32K) ===="
awk '/^softmax tc cfg=/{split($3,c,"="); split($5,z,"="); k=c[2]" causal="z[2]; v[k]=v[k] sprintf(" %7.1f",$8); if (!(k in seen)) {seen[k]=1; ord[++n]=k}}
     END {for (i=1;i<=n;i++) printf "cfg=%s %s\n", ord[i], v[ord[i]]}' "$OUT/sm_bench.log"
grep -E "^softmax old" "$OUT/sm_bench.log"
grep -E "^# torch" "$OUT/sm_sdpa.log"
# 5. while time is left (90 s in all): compute-sanitizer memcheck on the small cases
left=$(( 86 - $(el) ))
if ! command -v compute-sanitizer >/dev/null; then
  echo "compute-sanitizer memcheck: skipped (not installed)"
elif [ $left -ge 20 ]; then
  LA_CUDA_SMALL=1 timeout $left compute-sanitizer --tool memcheck --error-exitcode 3 $T > "$OUT/sm_memcheck.log" 2>&1
  echo "compute-sanitizer memcheck (small cases): rc=$?  $(grep -E 'ERROR SUMMARY' "$OUT/sm_memcheck.log" | tail -1)  $(tail -1 "$OUT/sm_memcheck.log")"
else
  echo "compute-sanitizer memcheck: skipped (time)"
fi
echo "# total $(el) s"
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]
