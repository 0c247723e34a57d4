#!/bin/bash
# Host emulation of the focused flatten backward's fast path
# (src/cuda/focused_bwd_mma.cu and the tensor-core core it calls,
# linblock_bwd_tc.cu; no GPU needed): compiled with g++ -DLA_BWD_EMU
# (src/cuda/bwd_emu.cuh), linked with dev/emu_focused_bwd.cpp and a CPU-only
# liblongattn.a. Cases: maps of 64-85 tokens, D 64/128, conv k 0-9, p 3 and
# 2.5, permuted views, a dv + d_conv only call (a few minutes on 2 cores).
#   bash dev/emu_focused_bwd.sh [BUILD_DIR] [CASE]   (default build-emu-fb)
set -e
O=${1:-build-emu-fb}
inc=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O/obj"
make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" > /dev/null
objs=()
for f in focused_bwd_mma linblock_bwd_tc linblock_bwd_mix linblock_bwd_mix2; do
  g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$inc" \
      -c "src/cuda/$f.cu" -o "$O/obj/$f.o"
  objs+=("$O/obj/$f.o")
done
g++ -std=c++20 -O2 -w -DLA_BWD_EMU -Iinclude -Isrc -I"$inc" dev/emu_focused_bwd.cpp "${objs[@]}" \
    "$O/lib/liblongattn.a" -o "$O/emu_focused_bwd" -fopenmp -lopenblas -llapack -lm -lpthread -ldl -lstdc++
"$O/emu_focused_bwd" ${2:-}
