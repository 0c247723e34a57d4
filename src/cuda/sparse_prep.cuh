/* The indexers' shared host side (sparse_prep.cu): score arguments from the
 * public views, contiguous bf16 copies, the checks of the CUDA views, and the
 * fp8 e4m3 scale checks and dequantization; the DSA v2 kernel's entry points.
 * Used by dsa.cu, dsa_v2.cu and hisa.cu.
 * Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_SPARSE_PREP_CUH
#define LA_CUDA_SPARSE_PREP_CUH

#include "sparse_common.cuh"

/* fp8 scales as the score kernels read them (NULL: 1). */
struct sc_scales {
    const float *ks;
    int64_t ks_nb;
    const float *qs;
    int64_t qs_nb0, qs_nb1;
};
sc_scales sc_scales_of(const la_index_params *p);

/* The head weight the score kernels use: w[t,h], times q_scale[t,h] for fp8. */
__device__ __forceinline__ float sc_wq(const la_sp_score_args &a, const sc_scales &sc, int64_t t,
                                       int64_t h) {
    float wv = la_cu_ld(a.w, a.w_dt, t * a.w_nb0 + h * a.w_nb1);
    if (sc.qs) wv *= sc.qs[t * sc.qs_nb0 + h * sc.qs_nb1];
    return wv;
}

/* The DSA v2 score kernel (dsa_v2.cu: wgmma, producer warpgroup; EB = 2
 * bf16, 1 e4m3): whether it takes the dense views (HI = 64, dI = 128, rows
 * contiguous and 16-byte aligned), and its launch (qg > 0: queries per CTA,
 * else chosen from the grid). */
bool dsa_v2_ok(const la_sp_score_args &a, int EB);
la_status dsa_v2_launch(const la_sp_score_args &a, const sc_scales &sc, int EB, int qg,
                        cudaStream_t s);

/* The CUDA views of an indexer call (as src/ops/sparse_validate.h checks them). */
la_status la_sp_validate_idx_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx);
/* fp8 views and scales of an indexer call (dsa_validate_fp8 under the op's name). */
la_status dsa_validate_fp8(const char *op, const la_index_params *p, const la_tensor *q,
                           const la_tensor *k, const la_tensor *w, const la_tensor *start,
                           const la_tensor *end, const la_tensor *idx);
la_status la_sp_validate_fp8_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx);
/* The scale values: finite and > 0 (one small kernel, one synchronization;
 * skipped while the stream is captured). */
la_status dsa_check_scale_values(const sc_scales &sc, int64_t L, int64_t T, int64_t HI, cudaStream_t s);
la_status la_sp_fp8_check_scales(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                                 cudaStream_t s);
/* e4m3 [n0, n1, n2] view times its scales -> contiguous f32 in *out. */
la_status dsa_dequant(const void *src, int64_t n0, int64_t n1, int64_t n2, int64_t nb0,
                      int64_t nb1, int64_t nb2, const float *scale, int64_t sc_nb0, int64_t sc_nb1,
                      la_cu_ws *out, cudaStream_t s, const char *what);
/* q and k dequantized into f32 copies (qf, kf) and tensors over them. */
la_status la_sp_fp8_to_f32(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                           la_cu_ws *qf, la_cu_ws *kf, la_tensor *tq, la_tensor *tk, cudaStream_t s);

#endif
