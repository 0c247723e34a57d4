/* Internal pieces of the causal tensor-core path shared by its two files
 * (linear_causal_tc.cu: passes 1 and 3, the host side; linear_causal_scan.cu:
 * pass 2): the tile constants, the launch arguments, the scan launch. */
#ifndef LA_CUDA_LINEAR_CAUSAL_ARGS_CUH
#define LA_CUDA_LINEAR_CAUSAL_ARGS_CUH

#include "common.cuh"

namespace {
constexpr int T = 64;           /* tokens per tile                         */
constexpr int NT = 256;         /* threads per CTA                         */
}  // namespace

struct lct_args {
    const void *q, *k, *v; /* 16-bit rows of the kernels' element type (bf16 or fp16) */
    void *o;
    int64_t qs[3], ks[3], vs[3], os[3]; /* strides of b, n, h (elements; inner 1) */
    int64_t N, H, L, nch;
    int64_t D, LS; /* D = Dv (32, 64, 128); floats of one chunk state (S, then z): D·D + D */
    int feat, normalize, split;
    float scale_q, eps;
    float *ws; /* [B·H][nch][LS]: ΔS_c, then (in place) P_c */
    la_cu_view S_in, z_in, S_out, z_out;
    /* causal MHLA (L = 64: a chunk is a block, mhla_causal_tc.cu): pass 3
     * scales the block's own part by W[c,c] at mixw[h·mix_hs + c·(mix_ld + 1)]
     * (NULL: 1) */
    const float *mixw;
    int64_t mix_hs, mix_ld;
    /* causal MHLA, variants mma_bf16s / mma_f16s: the block states in the
     * inputs' 16-bit type ([B·H][nch][LS] bf16 or fp16 elements, pass 1
     * writes S_b here, pass 3 reads H_c from here; the kernels' BS
     * instantiations), in place of the fp32 ws */
    void *wsh;
    /* mma_f16s (fp16 BS): pass 1 writes S_b·2^sexp[bh·nch + c] (the block's
     * max |[S_b | z_b]| in [2^14, 2^15)), pass 3 reads H_c·2^hexp[bh·nch + c]
     * (mhla_causal_mix_f16s.cuh) */
    int *sexp;
    const int *hexp;
    /* causal MHLA with fp16 inputs (non-NULL there, zeroed before pass 1):
     * pass 1 raises smax[bh] to max |[S_b | z_b]| over the head's blocks
     * (atomicMax on the float bits), the scale of the fp16 mixing GEMM's
     * state operand (mhla_causal_tc.cu) */
    float *smax;
};

/* Pass 2 over nd chunk states: the wide scan (every load up front; nd <= 255)
 * or the walking one. */
la_status lct_launch_scan(const lct_args &a, int64_t BH, int64_t nd, bool wide, cudaStream_t st);

#endif
