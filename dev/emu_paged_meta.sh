#!/bin/bash
# Host emulation of src/cuda/paged_meta.cu: cuts the pg_meta struct out of
# paged_meta.cuh and the kernel text between the PG_META_BEGIN / END
# markers out of paged_meta.cu, compiles them with dev/emu_paged_meta.cpp
# (g++ -std=c++20, no CUDA headers; also under AddressSanitizer) and
# compares pg_meta_packed_kernel's outputs and flags with pg_meta_kernel's
# (rows without q_seq), bit for bit.
#   bash dev/emu_paged_meta.sh [BUILD_DIR]
set -e
O=${1:-build-emu}
mkdir -p "$O"
python3 - "$O" <<'PY'
import sys
o = sys.argv[1]
h = open("src/cuda/paged_meta.cuh").read()
a = h.index("struct pg_meta {")
open(o + "/emu_pg_args.inc", "w").write(h[a:h.index("};", a) + 2] + "\n")
s = open("src/cuda/paged_meta.cu").read()
e = s[s.index("enum { PG_META_THREADS"):]
e = e[:e.index("\n") + 1]
k = s[s.index("/* PG_META_BEGIN */"):s.index("/* PG_META_END */")]
open(o + "/emu_pg_kern.inc", "w").write(e + k)
PY
g++ -std=c++20 -O1 -pthread -Iinclude -Isrc -I"$O" dev/emu_paged_meta.cpp -o "$O/emu_paged_meta"
"$O/emu_paged_meta"
g++ -std=c++20 -O1 -g -fsanitize=address -fno-omit-frame-pointer -pthread -Iinclude -Isrc -I"$O" \
    dev/emu_paged_meta.cpp -o "$O/emu_paged_meta_asan"
ASAN_OPTIONS=detect_leaks=0 "$O/emu_paged_meta_asan" | tail -1
