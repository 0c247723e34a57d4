#!/bin/bash
# Peers of the CUDA linear family on the GPU machine, for the same device call
# as our own timings (tests/cuda/gpu_round.sh linear2 peers): SDPA (flash),
# plain-PyTorch einsum MHLA / linear attention, the official MHLA4DiT attention
# core, flash-bidirectional-linear-attention (peers/fbla, ignored folder:
# git clone https://github.com/fla-org/flash-bidirectional-linear-attention peers/fbla).
# Each peer runs in its own process under its own timeout: FBLA's Triton
# autotuning alone can take minutes.
#   bash tests/cuda/gpu_peers.sh      (≤ ~110 s)
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
run() { # name timeout sizes
  PYTHONUNBUFFERED=1 timeout "$2" python3 bench/gpu_linear.py --peer "$1" --ns "$3" > "$OUT/peer_$1.log" 2>&1
  echo "# $1: rc=$?"
  grep -E " ms |failed" "$OUT/peer_$1.log" | cut -c1-110
}
# SDPA is timed by tests/cuda/gpu_softmax.sh (same shapes); here only when asked: LA_PEERS_SDPA=1
[ "${LA_PEERS_SDPA:-0}" = 1 ] && run sdpa 30 4096,16384,32768
run einsum 20 4096,16384,32768
run official 15 16384
run video 15 4096
run fbla 40 32768,4096
