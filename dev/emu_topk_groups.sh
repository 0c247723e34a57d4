#!/bin/bash
# Host emulation of the group-maxima top-k (src/cuda/topk_groups.cuh, variant
# "wgmma2g"; no GPU): tg_kernel's text compiled with g++ -DLA_TR_EMU
# (dev/emu_topk_groups.cpp: one std::thread per CUDA thread, group maxima
# from a host model of pw2_kernel's epilogue), twice: with the CUDA block
# scan (warp shuffles emulated, -DLA_TR_EMU_SHFL) and with the shared-memory
# scan; each runs rows of every kind against a sort on the host.
#   bash dev/emu_topk_groups.sh [BUILD_DIR]   (default build-emu-tg)
set -e
O=${1:-build-emu-tg}
mkdir -p "$O"
for v in shfl smem; do
  g++ -std=c++20 -O2 -Wall -Wno-unused-function -Wno-unknown-pragmas $([ $v = shfl ] && echo -DLA_TR_EMU_SHFL) \
      -Iinclude -Isrc dev/emu_topk_groups.cpp -o "$O/emu_topk_groups_$v" -lpthread
  echo "# block scan: $v"
  "$O/emu_topk_groups_$v"
done
