#!/bin/bash
# Host emulation of the sparse MLA backward's tensor-core path
# (src/cuda/sparse_attn_bwd_tc.cu, no GPU needed): the CUDA sparse backward
# sources compiled with g++ -DLA_BWD_EMU (bwd_emu.cuh), linked with
# dev/emu_sparse_bwd.cpp and a CPU-only liblongattn.a. Cases: T 1..5,
# Hq 16..128, L 5..4100, k 1..100, padded rows, [L,1,576] kv.
#   bash dev/emu_sparse_bwd.sh [BUILD_DIR] [CASE] [VARIANT]   (default build-emu-sp)
set -e
O=${1:-build-emu-sp}
inc=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O/obj"
make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" > /dev/null
objs=()
for f in sparse_attn_bwd sparse_attn_bwd_tc; do
  g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$inc" \
      -c "src/cuda/$f.cu" -o "$O/obj/$f.o"
  objs+=("$O/obj/$f.o")
done
g++ -std=c++20 -O2 -w -Iinclude -Isrc -I"$inc" dev/emu_sparse_bwd.cpp "${objs[@]}" \
    "$O/lib/liblongattn.a" -o "$O/emu_sparse_bwd" -fopenmp -lopenblas -llapack -lm \
    -lpthread -ldl -lstdc++
"$O/emu_sparse_bwd" ${2:-} ${3:-}
