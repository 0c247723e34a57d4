#!/bin/bash
# Host emulation of the many-CTA top-k (src/cuda/topk_rows.cuh; no GPU):
# the kernel text compiled with g++ -DLA_TR_EMU (dev/emu_topk_rows.cpp: one
# std::thread per CUDA thread), twice: with the CUDA block scan (warp
# shuffles emulated, -DLA_TR_EMU_SHFL) and with the shared-memory scan; each
# runs rows of every kind (~1 minute each on 2 cores).
#   bash dev/emu_topk_rows.sh [BUILD_DIR]   (default build-emu-tr)
set -e
O=${1:-build-emu-tr}
mkdir -p "$O"
for v in shfl smem; do
  g++ -std=c++20 -O2 -Wall -Wno-unused-function -Wno-unknown-pragmas $([ $v = shfl ] && echo -DLA_TR_EMU_SHFL) \
      -Iinclude -Isrc dev/emu_topk_rows.cpp -o "$O/emu_topk_rows_$v" -lpthread
  echo "# block scan: $v"
  "$O/emu_topk_rows_$v"
done
