#!/bin/bash
# Host emulation of the short-row top-k (src/cuda/topk_short.cuh; no GPU):
# the kernel text compiled with g++ -DLA_TS_EMU (dev/emu_topk_short.cpp: one
# std::thread per CUDA thread), checked against a plain CPU top-k on rows of
# every kind, length (1 .. 16384), k (1 .. 2048, k > L) and layout.
#   bash dev/emu_topk_short.sh [BUILD_DIR] [quick]   (default build-emu-ts)
set -e
O=${1:-build-emu-ts}
mkdir -p "$O"
# topk_common.cuh's key definitions, as the kernel text sees them
sed -n '/TK_KEYS_BEGIN/,/TK_KEYS_END/p' src/cuda/topk_common.cuh > "$O/emu_tk_keys.inc"
g++ -std=c++20 -O2 -Wall -Wno-unused-function -Wno-unknown-pragmas -Iinclude -Isrc -I"$O" \
    dev/emu_topk_short.cpp -o "$O/emu_topk_short" -lpthread
"$O/emu_topk_short" $2
