#!/bin/bash
# Host emulation of the many-CTA top-k (src/cuda/topk_rows.cuh; no GPU):
# the kernel text compiled with g++ -DLA_TR_EMU (dev/emu_topk_rows.cpp: one
# std::thread per CUDA thread) and run on rows of every kind (~1 minute on 2 cores).
#   bash dev/emu_topk_rows.sh [BUILD_DIR]   (default build-emu-tr)
set -e
O=${1:-build-emu-tr}
mkdir -p "$O"
g++ -std=c++20 -O2 -Wall -Wno-unused-function -Wno-unknown-pragmas -Iinclude -Isrc dev/emu_topk_rows.cpp -o "$O/emu_topk_rows" -lpthread
"$O/emu_topk_rows"
