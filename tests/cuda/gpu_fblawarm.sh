#!/bin/bash
# Start flash-bidirectional-linear-attention's Triton autotuning in the
# background (for tests/cuda/gpu_round.sh: `fblawarm` first, `fbla` last).
# Its two kernels have 144 autotune configs each; compiling them takes minutes,
# longer than any one timed slot. This first process fills a Triton cache while
# the correctness steps run (its own timings are discarded: the GPU is shared
# then); tests/cuda/gpu_fbla.sh times it afterwards in a fresh process on an
# idle GPU, where every config is a cache hit and the autotune re-measures all
# of them. peers/fbla: git clone https://github.com/fla-org/flash-bidirectional-linear-attention
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
export TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/la_triton_fbla}
[ -d peers/fbla ] || { echo "peers/fbla missing: FBLA not timed"; exit 0; }
# own session and no inherited stdout: gpu_round.sh's `| tail` must not wait for it
setsid bash -c '
  PYTHONUNBUFFERED=1 timeout "${LA_FBLA_WARM_S:-420}" python3 bench/gpu_linear.py --peer fbla --ns "${LA_FBLA_NS:-32768}" \
    > /tmp/la_fbla_warm.log 2>&1; echo "rc=$? at $(date +%s)" >> /tmp/la_fbla_warm.log' < /dev/null > /dev/null 2>&1 &
echo $! > /tmp/la_fbla_warm.pid
echo "fbla warm-up started (pid $(cat /tmp/la_fbla_warm.pid), cache $TRITON_CACHE_DIR) at $(date +%s)"
