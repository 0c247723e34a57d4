#!/bin/bash
# Host emulation of src/cuda/paged_hisa.cu and paged_hisa_topk.cu (variant
# "fused" of family "paged_hisa"; the rows from the metadata, or derived from
# context_lens: family "paged_meta_overlap") and src/cuda/paged_hisa_cand.cu
# (variant "blockmajor" of family "paged_hisa_cand"), no GPU needed: cuts
# the args structs out of paged_hisa.cuh and the kernel text between the
# markers PH_KERNELS_, PH_TOPK_, PC_KERNELS_BEGIN / END out of the .cu files
# (and dsa_mma.cuh's sc_mma / sc_head_sum, between its SC_MMA markers),
# compiles them with dev/emu_paged_hisa.cpp
# and dev/emu_paged_hisa_cand.cpp (g++ -std=c++20, no CUDA headers;
# -ffp-contract=off so that only the written fmaf are fused) and compares
# the block scores and kept lists with the classic chain (also under
# AddressSanitizer), and the block-major candidate scores with the gather
# kernel's order, bit for bit.
#   bash dev/emu_paged_hisa.sh [BUILD_DIR]
set -e
O=${1:-build-emu}
mkdir -p "$O"
python3 - "$O" <<'PY'
import sys
o = sys.argv[1]
h = open("src/cuda/paged_hisa.cuh").read()
a = h.index("struct ph_blk_args {")
l = h.index("static inline int64_t ph_ldk(")
open(o + "/emu_ph_args.inc", "w").write(h[a:h.index("};", a) + 2] + "\n" + h[l:h.index("\n", l)] + "\n")
s = open("src/cuda/paged_hisa.cu").read()
k = s[s.index("/* PH_KERNELS_BEGIN */"):s.index("/* PH_KERNELS_END */")]
s = open("src/cuda/paged_hisa_topk.cu").read() # the block top-k
k += s[s.index("/* PH_TOPK_BEGIN */"):s.index("/* PH_TOPK_END */")]
assert "__shared__" not in k and "__shfl" not in k and "__ballot" not in k
open(o + "/emu_ph_kern.inc", "w").write(k)
a = h.index("struct pc_args {")
open(o + "/emu_pc_args.inc", "w").write(h[a:h.index("};", a) + 2] + "\n")
m = open("src/cuda/dsa_mma.cuh").read()
m = m[m.index("/* SC_MMA_BEGIN"):m.index("/* SC_MMA_END */")] # the MMA and head sum the candidate kernel shares
s = open("src/cuda/paged_hisa_cand.cu").read()
k = s[s.index("/* PC_KERNELS_BEGIN */"):s.index("/* PC_KERNELS_END */")]
assert "__shared__" not in k
open(o + "/emu_pc_kern.inc", "w").write(m + k)
PY
g++ -std=c++20 -O1 -ffp-contract=off -pthread -Iinclude -I"$O" dev/emu_paged_hisa.cpp -o "$O/emu_paged_hisa"
g++ -std=c++20 -O1 -ffp-contract=off -pthread -Iinclude -I"$O" dev/emu_paged_hisa_cand.cpp -o "$O/emu_paged_hisa_cand"
"$O/emu_paged_hisa_cand"
"$O/emu_paged_hisa"
# again under AddressSanitizer: no read past the pooled sums' max_blocks rows
# (sized to the longest sequence in some cases) or the shared memory
g++ -std=c++20 -O1 -g -fsanitize=address -fno-omit-frame-pointer -ffp-contract=off -pthread -Iinclude -I"$O" \
    dev/emu_paged_hisa.cpp -o "$O/emu_paged_hisa_asan"
if ! ASAN_OPTIONS=detect_leaks=0 "$O/emu_paged_hisa_asan" >"$O/emu_paged_hisa_asan.log" 2>&1; then
    cat "$O/emu_paged_hisa_asan.log"
    exit 1
fi
tail -1 "$O/emu_paged_hisa_asan.log"
