#!/bin/bash
# Builds and runs mix_bench (the tc_bf16s mixing kernel alone) on the GPU
# machine: the kernel text of src/cuda/linfam_tc_bf16s.cu (as cut by
# dev/emu_mhla_fwd.sh, without the emulator's substitutions) and this driver.
#   bash dev/cuda/mhla_mix/run.sh [BUILD_DIR]
set -e
O=${1:-build-mix}
mkdir -p "$O"
python3 - "$O" <<'PY'
import sys
s = open("src/cuda/linfam_tc_bf16s.cu").read()
open(sys.argv[1] + "/kern_b16.inc", "w").write(s[s.index("namespace {") + len("namespace {"):s.index("/* 16-byte aligned bytes")])
PY
"${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}" -O3 -std=c++17 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc -I"$O" dev/cuda/mhla_mix/mix_bench.cu \
  -o "$O/mix_bench"
"$O/mix_bench"
