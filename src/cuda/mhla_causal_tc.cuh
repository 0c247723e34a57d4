/* Causal MHLA forward on bf16 / fp16 tensor cores (SPEC §5.4; family
 * "mhla_causal", variants "mma", "mma_split", "mma_bf16s", "mma_f16s";
 * mhla_causal_tc.cu). mhla.cu asks
 * mct_eligible() and hands the call over; everything else keeps the
 * portable engine (linfam.cu). Internal; included by the CUDA sources only. */
#ifndef LA_CUDA_MHLA_CAUSAL_TC_CUH
#define LA_CUDA_MHLA_CAUSAL_TC_CUH

#include "cuda/common.cuh"

#define MCT_NEEDS                                                                              \
    "bf16 or f16 q, k, v, out with D = Dv in {32, 64, 128}, unit inner stride, 16-byte aligned " \
    "rows, B*H <= 65535, chunk 64, normalize none or per_query"
int mct_eligible(const la_mhla_causal_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *out);
/* the mixing of the block states: bf16 GEMM on fp32 states ("mma"), the
 * fp32-accurate split-bf16 one ("mma_split"), bf16 GEMM on bf16 states
 * ("mma_bf16s"), fp16 wgmma GEMM on fp16 states scaled per block
 * ("mma_f16s": fp16 inputs, sm_90) */
enum { MCT_MIX_MMA = 0, MCT_MIX_SPLIT = 1, MCT_MIX_BF16S = 2, MCT_MIX_F16S = 3 };
/* the kind when no variant is forced: mma_bf16s for bf16; for fp16
 * mma_f16s on sm_90 where it applies (while mct_f16s_default), else mma */
int mct_default_kind(const la_tensor *q, const la_context *ctx);
/* scale_q resolved (not 0); mixing [WM,WM] or [H,WM,WM], WM >= ceil(N/64);
 * kind: MCT_MIX_* */
la_status mct_forward(const la_mhla_causal_params *p, float scale_q, const la_tensor *q,
                      const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
                      la_tensor *out, int kind, const la_context *ctx, cudaStream_t s);

/* dev drivers only (dev/bench_gpu_mhla_causal.cu, linked with the static
 * library): events recorded on the stream after the W preparation and
 * around the mixing of the following calls, and (mma_f16s, one batch of
 * heads) after the A' preparation inside it (NULL: none; not thread safe) */
void mct_dev_pass_events(cudaEvent_t prep, cudaEvent_t mix0, cudaEvent_t mix1, cudaEvent_t aprep = nullptr);
/* the bf16 mixing GEMM alone ("v1", "v2"): Hs = W_strict·S, Wph the padded
 * bf16 strict triangle [Hw][Mp][Mp], S and Hs [BH][M][SE] */
la_status mct_dev_mix_bf16(const char *impl, const __nv_bfloat16 *Wph, int64_t Mp, int64_t Hw,
                           const __nv_bfloat16 *S, __nv_bfloat16 *Hs, int64_t BH, int64_t H, int64_t M,
                           int64_t SE, cudaStream_t s);

#endif
