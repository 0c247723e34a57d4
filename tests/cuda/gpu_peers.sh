#!/bin/bash
# Peers of the CUDA linear family on the GPU machine, for the same device call
# as our own timings (tests/cuda/gpu_round.sh linear2 peers): SDPA (flash),
# plain-PyTorch einsum MHLA / linear attention, the official MHLA4DiT attention
# core, flash-bidirectional-linear-attention (peers/fbla, ignored folder:
# git clone https://github.com/fla-org/flash-bidirectional-linear-attention peers/fbla).
#   bash tests/cuda/gpu_peers.sh      (~2 min; Triton compiles on first call)
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
PYTHONUNBUFFERED=1 timeout 160 python3 bench/gpu_linear.py --quick > "$OUT/peers.log" 2>&1
echo "gpu_linear.py --quick: rc=$?"
grep -v "^#.*Warning" "$OUT/peers.log" | cut -c1-120 | tail -40
