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
. "$(dirname "$0")/emu_bwd_common.sh"
emu_build linear_causal_bwd "$O"
"$O/emu_linear_causal_bwd" ${2:-}
