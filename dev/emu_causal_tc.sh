#!/bin/bash
# Host emulation of the causal tensor-core kernels (no GPU needed): cuts the
# kernel text out of src/cuda/linear_causal_scan.cu and linear_causal_tc.cu,
# compiles it with dev/emu_causal_tc.cpp (with dev/emu_causal_tc_wgmma.h,
# emu_causal_tc_mix.h and emu_causal_tc_f16s.h; g++ -std=c++20, CUDA headers
# only) and runs the cases.
#   bash dev/emu_causal_tc.sh [BUILD_DIR [wide|f16|mhla|mhla_bf16s|mhla_mix]]   (the wide and the walking
#   scan, then the fp16 cases; "wide": wide only; "f16": the fp16 cases only;
#   "mhla": the causal MHLA forward, mhla_causal_tc.cu;
#   "mhla_bf16s": its variant mma_bf16s only (mixing v1 and v2); "mhla_v2": mixing v2 only;
#   "mhla_f16": its fp16 cases only; "mhla_f16s": variant mma_f16s only (fp16 block
#   states: pass 1, the A' preparation, the fp16 wgmma GEMM, pass 3; and the last two alone);
#   "mhla_f16cmp": fp16 mma and mma_f16s on the same inputs;
#   "mhla_mix": the bf16 mixing GEMMs alone, mct_mix2_kernel against float64 and
#   mct_mix_bf16_kernel, both cp.async schedules)
set -e
O=${1:-build-emu}
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p "$O"
python3 - "$O" <<'PY'
import re, sys
sc = open("src/cuda/linear_causal_scan.cu").read()
s = open("src/cuda/linear_causal_tc.cu").read()
# the bodies of both files' anonymous namespaces (the .cpp opens and closes it)
k = sc[sc.index("namespace {") + len("namespace {"):sc.index("}  // namespace")]
k += s[s.index("namespace {") + len("namespace {"):s.index("/* fp16 rows on the tensor-core path")]
# pass 3 lives in linear_causal_tc_out.cuh, included inside the namespace
inc = '#include "linear_causal_tc_out.cuh"'
k = k[:k.index(inc)] + open("src/cuda/linear_causal_tc_out.cuh").read() + k[k.index(inc):].split("\n", 1)[1]
# the cp.async / ldmatrix / mma helpers live in src/cuda/ptx.cuh (outside
# the cut); dev/emu_causal_tc.cpp defines the same names for the host
for n in ("lct_sm1", "lct_sm2", "lct_sm3", "lct_sm4"):
    k = k.replace(f"extern __shared__ __align__(128) unsigned char {n}[];", f"unsigned char *{n} = emu_smem();")
k = k.replace("threadIdx.x", "emu_tid()").replace("blockIdx.x", "emu_bx()").replace("blockIdx.y", "emu_by()")
k = k.replace("threadIdx.y", "emu_tidy()").replace("blockDim.x", "emu_bdx()").replace("blockDim.y", "emu_bdy()")
# the wide scan's static shared array: one per CTA, not one per thread
k = k.replace("__shared__ float4 tot[NT];", "float4 *tot = (float4 *)emu_smem();")
k = re.sub(r"__launch_bounds__\([^)]*\)", "", k)
open(sys.argv[1] + "/kern.inc", "w").write(k)
# the causal MHLA mixing GEMM (src/cuda/mhla_causal_tc.cu): its static
# shared arrays become views of the CTA's shared memory, blockIdx.z a global
m = open("src/cuda/mhla_causal_tc.cu").read()
m = m[m.index("constexpr int MX_BM"):m.index("struct mct_mix_ctx")]
m = m.replace('#include "cuda/mhla_causal_mix2.cuh"', "").replace('#include "cuda/mhla_causal_mix_wg.cuh"', "")  # appended below
m = m.replace("__shared__ __align__(16) E sA[2][MX_BM * MX_LA];",
              "auto sA = (E (*)[MX_BM * MX_LA])emu_smem();")
m = m.replace("__shared__ __align__(16) E sB[2][MX_BK * MX_LB];",
              "auto sB = (E (*)[MX_BK * MX_LB])(emu_smem() + 4 * MX_BM * MX_LA);")
m = m.replace("extern __shared__ __align__(128) unsigned char mct_sm[];", "unsigned char *mct_sm = emu_smem();")
m = m.replace("gridDim.x", "emu_gdx()")
m = m.replace("threadIdx.x", "emu_tid()").replace("blockIdx.x", "emu_bx()").replace("blockIdx.y", "emu_by()")
m = m.replace("blockIdx.z", "emu_bz()")
m = re.sub(r"__launch_bounds__\([^)]*\)", "", m)
# the second bf16 mixing GEMM (src/cuda/mhla_causal_mix2.cuh)
m2 = open("src/cuda/mhla_causal_mix2.cuh").read()
m2 = m2[m2.index("constexpr int MX2_BM"):m2.rindex("#endif")]
m2 = m2.replace("extern __shared__ __align__(128) unsigned char mct_sm2[];", "unsigned char *mct_sm2 = emu_smem();")
m2 = m2.replace("threadIdx.x", "emu_tid()").replace("blockIdx.x", "emu_bx()").replace("blockIdx.y", "emu_by()")
m2 = m2.replace("blockIdx.z", "emu_bz()")
m2 = re.sub(r"__launch_bounds__\([^)]*\)", "", m2)
m += m2
# the wgmma mixing GEMM (src/cuda/mhla_causal_mix_wg.cuh): wgmma by its
# definition on the host (dev/emu_causal_tc.cpp decodes the descriptors),
# its fences and group waits dropped (one legal schedule: each wgmma done
# when issued)
m3 = open("src/cuda/mhla_causal_mix_wg.cuh").read()
m3 = m3[m3.index("constexpr int MXW_BM"):m3.rindex("#endif")]
m3 = m3.replace("#if MXW_HAVE_WGMMA", "#if 1")
m3 = m3.replace("extern __shared__ __align__(1024) unsigned char mct_smw_raw[];", "unsigned char *mct_smw_raw = emu_smem();")
m3 = m3.replace("__cvta_generic_to_shared(mct_smw_raw)", "(uintptr_t)(mct_smw_raw)")
m3, nasm = re.subn(r'asm volatile\("(?:wgmma|fence)[^"]*"\s*:::\s*"memory"\);', ";", m3)
assert nasm == 5, nasm
m3 = m3.replace('asm volatile("" : "+f"(acc[j][e])::"memory");', ";")
m3 = m3.replace("threadIdx.x", "emu_tid()").replace("blockIdx.x", "emu_bx()").replace("blockIdx.y", "emu_by()")
m3 = m3.replace("blockIdx.z", "emu_bz()")
m3 = re.sub(r"__launch_bounds__\([^)]*\)", "", m3)
m += m3
# variant mma_f16s's A' preparation (src/cuda/mhla_causal_mix_f16s.cuh)
m = m.replace('#include "cuda/mhla_causal_mix_f16s.cuh"', "")  # appended here
m4 = open("src/cuda/mhla_causal_mix_f16s.cuh").read()
m4 = m4[m4.index("__global__ void mct_f16s_prep_kernel"):m4.rindex("#endif")]
m4 = m4.replace("threadIdx.x", "emu_tid()").replace("blockIdx.x", "emu_bx()")
m += m4
assert "__shared__" not in m
open(sys.argv[1] + "/kern_mix.inc", "w").write(m)
PY
g++ -std=c++20 -O2 -fno-strict-aliasing -w -Iinclude -Isrc -I"$CUDA_INC" -I"$O" dev/emu_causal_tc.cpp \
    -o "$O/emu_causal_tc" -lpthread
"$O/emu_causal_tc" ${2:+"$2"}
