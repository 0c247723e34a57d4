#!/bin/bash
# Host emulation of src/cuda/paged_hisa.cu (variant "fused" of family
# "paged_hisa", no GPU needed): cuts ph_blk_args out of paged_hisa.cuh and
# the kernel text between PH_KERNELS_BEGIN / PH_KERNELS_END out of the .cu,
# compiles it with dev/emu_paged_hisa.cpp (g++ -std=c++20, no CUDA headers;
# -ffp-contract=off so that only the written fmaf are fused) and compares
# the block scores and kept lists bit for bit with the classic chain.
#   bash dev/emu_paged_hisa.sh [BUILD_DIR]
set -e
O=${1:-build-emu}
mkdir -p "$O"
python3 - "$O" <<'PY'
import sys
o = sys.argv[1]
h = open("src/cuda/paged_hisa.cuh").read()
a = h.index("struct ph_blk_args {")
open(o + "/emu_ph_args.inc", "w").write(h[a:h.index("};", a) + 2] + "\n")
s = open("src/cuda/paged_hisa.cu").read()
k = s[s.index("/* PH_KERNELS_BEGIN */"):s.index("/* PH_KERNELS_END */")]
assert "__shared__" not in k and "__shfl" not in k and "__ballot" not in k
open(o + "/emu_ph_kern.inc", "w").write(k)
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -Iinclude -I"$O" dev/emu_paged_hisa.cpp -o "$O/emu_paged_hisa"
"$O/emu_paged_hisa"
