#!/bin/bash
# Host emulation of the causal linear backward's tensor-core kernels
# (src/cuda/linear_causal_bwd_tc.cu, no GPU needed): the CUDA backward
# sources of the linear family compiled with g++ -DLA_BWD_EMU (bwd_emu.cuh:
# one std::thread per CUDA thread, ldmatrix and mma.sync by their fragment
# layouts; cp.async a plain copy), linked with dev/emu_linear_causal_bwd.cpp
# and a CPU-only liblongattn.a. Cases: N 1..1000, D 64/128, every feature
# map, normalize on/off, states, permuted views (about a minute on 2 cores).
#   bash dev/emu_linear_causal_bwd.sh [BUILD_DIR] [CASE]   (default build-emu-lcb; CASE: one index)
set -e
O=${1:-build-emu-lcb}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O/obj"
make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" > /dev/null
objs=()
for f in linear_causal_bwd_tc mhla_causal_bwd_tc linear_bwd linblock_bwd linblock_bwd_tc linblock_bwd_mix; do
  g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$CUDA_INC" \
      -c "src/cuda/$f.cu" -o "$O/obj/$f.o"
  objs+=("$O/obj/$f.o")
done
g++ -std=c++20 -O2 -w -Iinclude -Isrc -I"$CUDA_INC" dev/emu_linear_causal_bwd.cpp "${objs[@]}" \
    "$O/lib/liblongattn.a" -o "$O/emu_linear_causal_bwd" -fopenmp -lopenblas -llapack -lm \
    -lpthread -ldl -lstdc++
"$O/emu_linear_causal_bwd" ${2:-}
