#!/bin/bash
# Time flash-bidirectional-linear-attention after tests/cuda/gpu_fblawarm.sh
# filled the Triton cache: wait for the warm-up process (up to the step's cap),
# then a fresh process on the idle GPU (autotune over cached configs, then
# triton.testing.do_bench medians), same shapes as bench/gpu_linear.py.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/la_triton_fbla}
[ -d peers/fbla ] || { echo "peers/fbla missing: FBLA not timed"; exit 0; }
if [ -f /tmp/la_fbla_warm.pid ]; then
  pid=$(cat /tmp/la_fbla_warm.pid)
  while kill -0 "$pid" 2>/dev/null; do sleep 2; done
  echo "warm-up: $(tail -1 /tmp/la_fbla_warm.log) (now $(date +%s)); its lines (GPU shared, not quoted):"
  grep -E " ms |failed" /tmp/la_fbla_warm.log | cut -c1-110
  cp /tmp/la_fbla_warm.log "$OUT/fbla_warm.log"
fi
echo "cached kernels: $(find "$TRITON_CACHE_DIR" -name '*.cubin' 2>/dev/null | wc -l)"
PYTHONUNBUFFERED=1 timeout "${LA_FBLA_TIME_S:-100}" python3 bench/gpu_linear.py --peer fbla --ns "${LA_FBLA_NS:-32768}" \
  > "$OUT/fbla.log" 2>&1
echo "# fbla timed: rc=$?"
grep -E " ms |failed" "$OUT/fbla.log" | cut -c1-110
