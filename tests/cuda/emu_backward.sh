#!/bin/bash
# Host emulation of the portable CUDA backward kernels (no GPU needed): the
# src/cuda/*_bwd.cu files compiled with g++ -DLA_BWD_EMU (each kernel launch
# becomes a loop over its items, see src/cuda/bwd_common.cuh) and linked
# with test_cuda_backward.c and a CPU-only liblongattn.a.
#   bash tests/cuda/emu_backward.sh [BUILD_DIR]      (default build-emu-bwd)
set -e
O=${1:-build-emu-bwd}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O/obj"
make -s -j2 SKIP_DEPS=1 CUDA=0 BUILD="$O/lib" "$O/lib/liblongattn.a" >/dev/null
objs=()
for f in src/cuda/*_bwd.cu src/cuda/*_bwd_*.cu; do
    b=$(basename "$f" .cu)
    if [ ! -f "$O/obj/$b.o" ] || [ "$f" -nt "$O/obj/$b.o" ] || [ src/cuda/bwd_common.cuh -nt "$O/obj/$b.o" ] || [ src/cuda/bwd_emu.cuh -nt "$O/obj/$b.o" ]; then
        g++ -std=c++20 -O2 -fopenmp -DLA_BWD_EMU -x c++ -w -Iinclude -Isrc -I"$CUDA_INC" -c "$f" -o "$O/obj/$b.o"
    fi
    objs+=("$O/obj/$b.o")
done
# the public entry points of the backward passes, built as the CUDA build
# builds them (dispatching CUDA views to the emulated kernels)
for f in src/ops/*_backward.c; do
    b=$(basename "$f" .c)
    gcc -std=c11 -D_GNU_SOURCE -O2 -w -fopenmp -DLA_WITH_CUDA -Iinclude -Isrc -c "$f" -o "$O/obj/ops_$b.o"
    objs+=("$O/obj/ops_$b.o")
done
gcc -std=c11 -D_GNU_SOURCE -O2 -g -Wall -Wextra -Wno-unused-parameter -DLA_BWD_EMU -Iinclude -Isrc -Itests \
    tests/cuda/test_cuda_backward.c "${objs[@]}" "$O/lib/liblongattn.a" \
    -o "$O/test_cuda_backward" -fopenmp -lopenblas -llapack -lm -lpthread -ldl -lstdc++
"$O/test_cuda_backward"
