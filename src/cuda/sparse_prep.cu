/* The indexers' shared host side: see sparse_prep.cuh. */
#include "sparse_prep.cuh"

#include <cuda_fp8.h>
#include <string.h>

/* ---- strided -> contiguous bf16 ------------------------------------------ */
__global__ void sp_pack_kernel(const void *src, int dt, int64_t n1, int64_t n2, int64_t nb0,
                               int64_t nb1, int64_t nb2, __nv_bfloat16 *dst, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t i2 = i % n2, r = i / n2, i1 = r % n1, i0 = r / n1;
        dst[i] = __float2bfloat16_rn(la_cu_ld(src, dt, i0 * nb0 + i1 * nb1 + i2 * nb2));
    }
}
la_status la_sp_pack_bf16(const void *src, int dt, int64_t n0, int64_t n1, int64_t n2,
                          int64_t nb0, int64_t nb1, int64_t nb2, __nv_bfloat16 *dst,
                          cudaStream_t s) {
    const int64_t total = n0 * n1 * n2;
    if (total == 0) return LA_OK;
    int64_t blocks = la_cu_cdiv(total, 256);
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    sp_pack_kernel<<<(unsigned)blocks, 256, 0, s>>>(src, dt, n1, n2, nb0, nb1, nb2, dst, total);
    LA_CU_LAUNCH("pack bf16");
    return LA_OK;
}

/* ---- la_dsa_indexer on CUDA ---------------------------------------------- */
/* Fill the score args from the public views (q, k, w, start, end). */
void la_sp_fill_score_args(la_sp_score_args *a, const la_tensor *q, const la_tensor *k,
                           const la_tensor *w, const la_tensor *start, const la_tensor *end,
                           const la_context *ctx) {
    memset(a, 0, sizeof *a);
    a->hopper = la_cu_hopper(ctx);
    a->ctx = ctx;
    a->q = q->data;
    a->q_dt = q->dtype;
    a->q_nb0 = q->nb[0];
    a->q_nb1 = q->nb[1];
    a->q_nb2 = q->nb[2];
    a->k = k->data;
    a->k_dt = k->dtype;
    a->k_nb0 = k->nb[0];
    a->k_nb1 = k->nb[1];
    a->w = w->data;
    a->w_dt = w->dtype;
    a->w_nb0 = w->nb[0];
    a->w_nb1 = w->nb[1];
    a->T = q->ne[0];
    a->HI = q->ne[1];
    a->dI = q->ne[2];
    a->Lk = k->ne[0];
    a->range.start = start ? (const int32_t *)start->data : nullptr;
    a->range.start_nb = start ? start->nb[0] : 0;
    a->range.end = end ? (const int32_t *)end->data : nullptr;
    a->range.end_nb = end ? end->nb[0] : 0;
    a->range.T = q->ne[0];
    a->range.L = k->ne[0];
    a->range.blk = 1;
}

/* bf16 inputs whose rows the tensor-core kernel can't read directly are
 * packed into contiguous workspace copies. */
la_status la_sp_prepare_bf16(la_sp_score_args *a, la_cu_ws *qw, la_cu_ws *kw, cudaStream_t s) {
    if (a->q_dt != LA_BF16 || a->k_dt != LA_BF16 || !la_sp_scores_fast_shape(a->HI, a->dI))
        return LA_OK;
    const bool q_ok = a->q_nb2 == 1 && a->q_nb1 % 8 == 0 && a->q_nb0 % 8 == 0 &&
                      ((uintptr_t)a->q & 15) == 0;
    const bool k_ok = a->k_nb1 == 1 && a->k_nb0 % 2 == 0 && ((uintptr_t)a->k & 3) == 0;
    if (!q_ok) {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)(a->T * a->HI), (size_t)a->dI * 2, &bytes, "q copy"));
        LA_TRY(la_cu_ws_alloc(qw, bytes, s, "bf16 copy of q"));
        LA_TRY(la_sp_pack_bf16(a->q, a->q_dt, a->T, a->HI, a->dI, a->q_nb0, a->q_nb1, a->q_nb2,
                               (__nv_bfloat16 *)qw->p, s));
        a->q = qw->p;
        a->q_nb0 = a->HI * a->dI;
        a->q_nb1 = a->dI;
        a->q_nb2 = 1;
    }
    if (!k_ok) {
        size_t bytes;
        LA_TRY(la_mul_size((size_t)a->Lk, (size_t)a->dI * 2, &bytes, "k copy"));
        LA_TRY(la_cu_ws_alloc(kw, bytes, s, "bf16 copy of k"));
        LA_TRY(la_sp_pack_bf16(a->k, a->k_dt, 1, a->Lk, a->dI, 0, a->k_nb0, a->k_nb1,
                               (__nv_bfloat16 *)kw->p, s));
        a->k = kw->p;
        a->k_nb0 = a->dI;
        a->k_nb1 = 1;
    }
    return LA_OK;
}

/* ---- the CUDA kernels' own limits (src/ops/sparse_validate.c has checked
 * every view before dispatch; the range values live on the device, so they
 * are clamped by the kernels instead of checked). fp8 e4m3 q/k (with k_scale/q_scale)
 * are validated by dsa_validate_fp8 (la_sp_fp8_to_f32 for HISA and the
 * block-sparse indexer); this one refuses them. ---- */
la_status la_sp_validate_idx_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    if (p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3)
        return la_err(LA_ERR_UNSUPPORTED,
                      "%s: fp8 e4m3 q/k (k_scale/q_scale) are implemented on CUDA for the flat DSA "
                      "indexer only; %s takes f32/f64/bf16/f16 q and k",
                      op, op);
    return LA_OK;
}

/* fp8 DSA views: q and k both e4m3, w a float dtype, optional f32 scales
 * k_scale [L] and q_scale [T,HI] on CUDA (NULL = 1). Scale values are
 * checked on the device afterwards (dsa_check_scale_values). */
la_status dsa_validate_fp8(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    const bool q8 = q->dtype == LA_FP8_E4M3, k8 = k->dtype == LA_FP8_E4M3;
    if (!q8 || !k8) {
        if (q8 || k8)
            return la_err(LA_ERR_DTYPE,
                          "%s: q is %s and k is %s; the fp8 indexer takes both q and k in fp8_e4m3",
                          op, la_dtype_name(q->dtype), la_dtype_name(k->dtype));
        return la_err(LA_ERR_ARG,
                      "%s: %s given but q and k are %s/%s; k_scale/q_scale apply to fp8_e4m3 q/k "
                      "only (fold other scales into w)",
                      op, p->k_scale && p->q_scale ? "k_scale and q_scale" : p->k_scale ? "k_scale" : "q_scale",
                      la_dtype_name(q->dtype), la_dtype_name(k->dtype));
    }
    if (w->dtype == LA_FP8_E4M3)
        return la_err(LA_ERR_DTYPE, "w: dtype fp8_e4m3 not supported here (w is f32/f64/bf16/f16)");
    if (p->k_scale) {
        LA_TRY(la_check_tensor(p->k_scale, "k_scale", 1, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
        LA_TRY(la_check_dim(p->k_scale, "k_scale", 0, k->ne[0], "(keys of k)"));
        if (la_tensors_overlap(idx, p->k_scale))
            return la_err(LA_ERR_ARG, "idx: overlaps input k_scale in memory (outputs must not alias inputs)");
    }
    if (p->q_scale) {
        LA_TRY(la_check_tensor(p->q_scale, "q_scale", 2, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
        LA_TRY(la_check_dim(p->q_scale, "q_scale", 0, q->ne[0], "(queries of q)"));
        LA_TRY(la_check_dim(p->q_scale, "q_scale", 1, q->ne[1], "(heads of q)"));
        if (la_tensors_overlap(idx, p->q_scale))
            return la_err(LA_ERR_ARG, "idx: overlaps input q_scale in memory (outputs must not alias inputs)");
    }
    return LA_OK;
}

/* First scale that is not a positive finite number: (0 << 62 | s) for
 * k_scale[s], (1 << 62 | t*HI + h) for q_scale[t,h]; atomicMin keeps the
 * lowest (k_scale first). */
__global__ void dsa_scale_check_kernel(sc_scales sc, int64_t L, int64_t T, int64_t HI,
                                       unsigned long long *bad) {
    const int64_t nk = sc.ks ? L : 0, nq = sc.qs ? T * HI : 0;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < nk + nq;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v;
        unsigned long long code;
        if (i < nk) {
            v = sc.ks[i * sc.ks_nb];
            code = (unsigned long long)i;
        } else {
            const int64_t j = i - nk, t = j / HI, h = j % HI;
            v = sc.qs[t * sc.qs_nb0 + h * sc.qs_nb1];
            code = (1ull << 62) | (unsigned long long)j;
        }
        if (!(v > 0.f) || isinf(v)) atomicMin(bad, code);
    }
}

/* Rejects a zero, negative, infinite or NaN scale with a message naming it.
 * The values live on the device: one small kernel plus a 8-byte read back
 * (a stream synchronization). Skipped while the stream is being
 * captured into a CUDA graph (no synchronization allowed there). */
la_status dsa_check_scale_values(const sc_scales &sc, int64_t L, int64_t T, int64_t HI,
                                 cudaStream_t s) {
    if (!sc.ks && !sc.qs) return LA_OK;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    LA_CU(cudaStreamIsCapturing(s, &cap));
    if (cap != cudaStreamCaptureStatusNone) return LA_OK;
    la_cu_ws flag;
    LA_TRY(la_cu_ws_alloc(&flag, 8, s, "fp8 scale check"));
    LA_CU(cudaMemsetAsync(flag.p, 0xff, 8, s));
    const int64_t n = (sc.ks ? L : 0) + (sc.qs ? T * HI : 0);
    int64_t blocks = la_cu_cdiv(n, 256);
    if (blocks > 1024) blocks = 1024;
    if (blocks < 1) blocks = 1;
    dsa_scale_check_kernel<<<(unsigned)blocks, 256, 0, s>>>(sc, L, T, HI,
                                                            (unsigned long long *)flag.p);
    LA_CU_LAUNCH("fp8 scale check");
    unsigned long long h = 0;
    LA_CU(cudaMemcpyAsync(&h, flag.p, 8, cudaMemcpyDeviceToHost, s));
    LA_CU(cudaStreamSynchronize(s));
    if (h == ~0ull) return LA_OK;
    const bool is_q = (h >> 62) != 0;
    const int64_t i = (int64_t)(h & ((1ull << 62) - 1));
    float v = 0.f;
    const float *src = is_q ? sc.qs + (i / HI) * sc.qs_nb0 + (i % HI) * sc.qs_nb1 : sc.ks + i * sc.ks_nb;
    LA_CU(cudaMemcpy(&v, src, 4, cudaMemcpyDeviceToHost));
    if (is_q)
        return la_err(LA_ERR_ARG,
                      "q_scale: q_scale[%lld, %lld] = %g; fp8 scales must be finite and > 0 "
                      "(amax/448 with amax clamped away from 0)",
                      (long long)(i / HI), (long long)(i % HI), (double)v);
    return la_err(LA_ERR_ARG,
                  "k_scale: k_scale[%lld] = %g; fp8 scales must be finite and > 0 (amax/448 with "
                  "amax clamped away from 0)",
                  (long long)i, (double)v);
}

/* fp8 [n0, n1, n2] view -> contiguous f32 with the row scale folded in
 * (scale offset i0*s0 + i1*s1; no scale = 1): the generic fallback feeds
 * the exact fp32 kernel with dequantized inputs. */
__global__ void dsa_dequant_kernel(const uint8_t *src, int64_t n1, int64_t n2, int64_t nb0,
                                   int64_t nb1, int64_t nb2, const float *scale, int64_t s0,
                                   int64_t s1, float *dst, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t i2 = i % n2, r = i / n2, i1 = r % n1, i0 = r / n1;
        __nv_fp8_e4m3 v;
        v.__x = src[i0 * nb0 + i1 * nb1 + i2 * nb2];
        float f = (float)v;
        if (scale) f *= scale[i0 * s0 + i1 * s1];
        dst[i] = f;
    }
}
la_status dsa_dequant(const void *src, int64_t n0, int64_t n1, int64_t n2, int64_t nb0,
                             int64_t nb1, int64_t nb2, const float *scale, int64_t s0, int64_t s1,
                             la_cu_ws *ws, cudaStream_t s, const char *what) {
    size_t bytes;
    LA_TRY(la_mul_size((size_t)(n0 * n1), (size_t)n2 * 4, &bytes, what));
    LA_TRY(la_cu_ws_alloc(ws, bytes, s, what));
    const int64_t total = n0 * n1 * n2;
    if (total == 0) return LA_OK;
    int64_t blocks = la_cu_cdiv(total, 256);
    if (blocks > 65535 * 16) blocks = 65535 * 16;
    dsa_dequant_kernel<<<(unsigned)blocks, 256, 0, s>>>((const uint8_t *)src, n1, n2, nb0, nb1, nb2,
                                                        scale, s0, s1, (float *)ws->p, total);
    LA_CU_LAUNCH("fp8 dequantize");
    return LA_OK;
}

/* fp8 inputs of HISA and the block-sparse indexer (hisa.cu): the views are
 * validated as the DSA indexer's (la_sp_validate_fp8_cuda), then
 * la_sp_fp8_to_f32 checks the scale values and dequantizes q and k into
 * contiguous f32 copies with the scales folded in (x8·scale, one correctly
 * rounded fp32 product, as a caller dequantizing on the host gets),
 * described by tq, tk. The workspaces live in the caller's qf, kf (freed in
 * stream order). */
la_status la_sp_validate_fp8_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx) {
    return dsa_validate_fp8(op, p, q, k, w, start, end, idx);
}
sc_scales sc_scales_of(const la_index_params *p) {
    sc_scales sc;
    memset(&sc, 0, sizeof sc);
    if (p->k_scale) {
        sc.ks = (const float *)p->k_scale->data;
        sc.ks_nb = p->k_scale->nb[0];
    }
    if (p->q_scale) {
        sc.qs = (const float *)p->q_scale->data;
        sc.qs_nb0 = p->q_scale->nb[0];
        sc.qs_nb1 = p->q_scale->nb[1];
    }
    return sc;
}
/* The scale values of validated fp8 views: finite and > 0 (the DSA's
 * messages; one stream synchronization). */
la_status la_sp_fp8_check_scales(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                                 cudaStream_t s) {
    return dsa_check_scale_values(sc_scales_of(p), k->ne[0], q->ne[0], q->ne[1], s);
}
la_status la_sp_fp8_to_f32(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                           la_cu_ws *qf, la_cu_ws *kf, la_tensor *tq, la_tensor *tk, cudaStream_t s) {
    const sc_scales sc = sc_scales_of(p);
    const int64_t T = q->ne[0], HI = q->ne[1], dI = q->ne[2], L = k->ne[0];
    LA_TRY(dsa_check_scale_values(sc, L, T, HI, s));
    LA_TRY(dsa_dequant(q->data, T, HI, dI, q->nb[0], q->nb[1], q->nb[2], sc.qs, sc.qs_nb0, sc.qs_nb1,
                       qf, s, "dequantized fp8 q"));
    LA_TRY(dsa_dequant(k->data, 1, L, dI, 0, k->nb[0], k->nb[1], sc.ks, 0, sc.ks_nb, kf, s,
                       "dequantized fp8 k"));
    const int64_t nq[3] = {T, HI, dI}, nk[2] = {L, dI};
    LA_TRY(la_tensor_init(tq, qf->p, LA_F32, LA_DEVICE_CUDA, 3, nq));
    return la_tensor_init(tk, kf->p, LA_F32, LA_DEVICE_CUDA, 2, nk);
}

