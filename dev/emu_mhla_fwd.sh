#!/bin/bash
# Host emulation of MHLA variant tc_bf16s and of the fp16 instantiation of
# variant tc (no GPU needed): cuts the kernel
# text out of src/cuda/linfam_tc.cu (the summary and output kernels),
# src/cuda/linfam_tc_bf16s.cu (weights, mixing GEMM, the launch plan) and
# src/cuda/linfam_tc_mix.cu (the M = 1 mix of linear attention) and
# src/cuda/focused.cu (flatten's φ pass and depthwise conv),
# compiles it with dev/emu_mhla_fwd.cpp (g++ -std=c++20, CUDA headers only;
# the CTA primitives of src/cuda/bwd_emu.cuh) and runs the cases.
#   bash dev/emu_mhla_fwd.sh [BUILD_DIR [CASE]]
set -e
O=${1:-build-emu}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O"
python3 - "$O" <<'PY'
import re, sys
def cut(path, start, end, smem):
    s = open(path).read()
    return cut_text(s[s.index(start) + len(start):s.index(end)], path, smem)
def cut_text(k, path, smem):
    for n in smem:
        k = k.replace(f"extern __shared__ __align__(128) unsigned char {n}[];",
                      f"unsigned char *{n} = bt_smem();")
    k = k.replace("threadIdx.x", "bt_tid()").replace("blockIdx.x", "bt_bx()").replace("blockIdx.y", "bt_by()")
    k = k.replace("blockIdx.z", "emu_bz()").replace("blockDim.x", "NT")
    k = re.sub(r"__launch_bounds__\([^)]*\)", "", k)
    assert "__shared__" not in k, path
    return k
o = sys.argv[1]
# the output pass lives in linfam_tc_out.cuh, included inside the namespace
s = open("src/cuda/linfam_tc.cu").read()
s = s.replace('#include "linfam_tc_out.cuh"', open("src/cuda/linfam_tc_out.cuh").read())
open(o + "/kern_tc.inc", "w").write(
    cut_text(s[s.index("namespace {") + len("namespace {"):s.index("/* The summary and output launches")],
             "src/cuda/linfam_tc.cu", ["lf_tc_sm"]))
open(o + "/kern_b16.inc", "w").write(
    cut("src/cuda/linfam_tc_bf16s.cu", "namespace {", "/* 16-byte aligned bytes", ["lfb_sm"]))
# the mix of linear attention (M = 1, lf_tc_mix_kernel): its static shared
# weights become the emulated CTA's shared memory
s = open("src/cuda/linfam_tc_mix.cu").read()
k = s[s.index("namespace {") + len("namespace {"):s.index("/* M ≥ 2: the mix as a tensor-core GEMM")]
k = k.replace("__shared__ float ws[MK][RI];", "float (*ws)[RI] = (float (*)[RI])bt_smem();")
open(o + "/kern_mix.inc", "w").write(
    cut_text(k, "src/cuda/linfam_tc_mix.cu", []))
# focused flatten's fast path around the engine: the φ pass and the conv
s = open("src/cuda/focused.cu").read()
k = s[s.index("/* ---- flatten, 16-bit fast path"):s.index("/* dtype dt (bf16, or fp16 while fo_f16_tc)")]
for a, b in (("__shared__ __align__(16) float isp[PHI_MAXC];", "float *isp = (float *)bt_smem();"),
             ("__shared__ __align__(16) float ws[KS * KS * Dv];", "float *ws = (float *)bt_smem();"),
             ("__shared__ __align__(16) float bs[Dv];", "float *bs = (float *)bt_smem() + KS * KS * Dv;"),
             ("gridDim.x", "emu_gdx()")):
    assert a in k, a
    k = k.replace(a, b)
open(o + "/kern_fo.inc", "w").write(cut_text(k, "src/cuda/focused.cu", []))
PY
g++ -std=c++20 -O2 -fno-strict-aliasing -w -Iinclude -Isrc -I"$CUDA_INC" -I"$O" dev/emu_mhla_fwd.cpp \
    -o "$O/emu_mhla_fwd" -lpthread
"$O/emu_mhla_fwd" ${2:+"$2"}
