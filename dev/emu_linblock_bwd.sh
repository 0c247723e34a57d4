#!/bin/bash
# Host emulation of the non-causal linear / MHLA backward's tensor-core
# variants mma and mma2 (src/cuda/linblock_bwd_tc.cu, linblock_bwd_mix.cu,
# linblock_bwd_mix2.cu; no GPU needed): compiled with g++ -DLA_BWD_EMU
# (bwd_emu.cuh), linked with dev/emu_linblock_bwd.cpp and a CPU-only
# liblongattn.a. Cases: N 1..1000, D 64/128, 1-/2-/3-D grids, M up to 70,
# shared / per-head W, none / per_query, permuted views.
#   bash dev/emu_linblock_bwd.sh [BUILD_DIR] [CASE [VARIANT ...]]   (default build-emu-lbt)
set -e
O=${1:-build-emu-lbt}
. "$(dirname "$0")/emu_bwd_common.sh"
emu_build linblock_bwd "$O"
shift || true
"$O/emu_linblock_bwd" "$@"
