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
. "$(dirname "$0")/emu_bwd_common.sh"
emu_build mhla_causal_bwd "$O"
"$O/emu_mhla_causal_bwd" ${2:-} ${3:-}
