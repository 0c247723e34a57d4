#!/bin/bash
# Host emulation of the causal MHLA backward's tensor-core path
# (src/cuda/mhla_causal_bwd_tc.cu on the kernels of linear_causal_bwd_tc.cu,
# no GPU needed): the CUDA backward sources compiled with g++ -DLA_BWD_EMU
# (bwd_emu.cuh), linked with dev/emu_mhla_causal_bwd.cpp and a CPU-only
# liblongattn.a. Cases: N 1..1000, D 64/128, shared and per-head W, normalize
# none / per_query, permuted views.
#   bash dev/emu_mhla_causal_bwd.sh [BUILD_DIR] [CASE] [VARIANT]   (default build-emu-mcb)
set -e
O=${1:-build-emu-mcb}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O/obj"
make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" > /dev/null
objs=()
for f in mhla_causal_bwd_tc linear_causal_bwd_tc mhla_bwd linblock_bwd linblock_bwd_tc linblock_bwd_mix; do
  g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$CUDA_INC" \
      -c "src/cuda/$f.cu" -o "$O/obj/$f.o"
  objs+=("$O/obj/$f.o")
done
g++ -std=c++20 -O2 -w -Iinclude -Isrc -I"$CUDA_INC" dev/emu_mhla_causal_bwd.cpp "${objs[@]}" \
    "$O/lib/liblongattn.a" -o "$O/emu_mhla_causal_bwd" -fopenmp -lopenblas -llapack -lm \
    -lpthread -ldl -lstdc++
"$O/emu_mhla_causal_bwd" ${2:-} ${3:-}
