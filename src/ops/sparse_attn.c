/* Sparse attention over selected keys (SPEC §8, MQA mode of MLA): public
 * entry point. */
#include <stdint.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

la_status la_sparse_attn_params_init(la_sparse_attn_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_sparse_attn_params_init: p is NULL");
    p->dv = 512;
    p->scale = 0.f;
    return LA_OK;
}

la_status la_sparse_attn_check_views(const la_sparse_attn_params *p, const la_tensor *q,
                                     const la_tensor *kv, const la_tensor *idx,
                                     const la_tensor *out, const la_tensor *lse, la_device dev,
                                     unsigned float_mask) {
    char sq[96], sk[96];
    const char *names[3] = {"q", "kv", "idx"};
    LA_TRY(la_check_tensor(q, "q", 3, float_mask, dev, false));
    if (kv->ndim != 2 && kv->ndim != 3)
        return la_err(LA_ERR_SHAPE, "kv: rank %d, expected [L,Dqk] or [L,Hkv,Dqk]", kv->ndim);
    LA_TRY(la_check_tensor(kv, "kv", kv->ndim, float_mask, dev, false));
    LA_TRY(la_check_tensor(idx, "idx", 2, LA_DT(LA_I32), dev, false));
    LA_TRY(la_check_tensor(out, "out", 3, float_mask, dev, false));
    if (lse) LA_TRY(la_check_tensor(lse, "lse", 2, float_mask, dev, false));
    const int64_t T = q->ne[0], Hq = q->ne[1], Dqk = q->ne[2];
    const int64_t Dkv = kv->ne[kv->ndim - 1], Hkv = kv->ndim == 3 ? kv->ne[1] : 1;
    la_shape_str(q, sq, sizeof sq);
    la_shape_str(kv, sk, sizeof sk);
    if (Dkv != Dqk)
        return la_err(LA_ERR_SHAPE, "kv: %s has Dqk=%lld, but q [T,Hq,Dqk] = %s has Dqk=%lld", sk,
                      (long long)Dkv, sq, (long long)Dqk);
    if (Hkv > Hq)
        return la_err(LA_ERR_SHAPE, "kv: %s has %lld kv heads, more than the %lld query heads of q %s", sk,
                      (long long)Hkv, (long long)Hq, sq);
    if (dev == LA_DEVICE_CPU && Dqk > 65536) /* the CPU kernel's row buffers */
        return la_err(LA_ERR_SHAPE, "q: %s has Dqk above 65536", sq);
    if (kv->ne[0] > INT32_MAX)
        return la_err(LA_ERR_SHAPE, "kv: %s has more keys than the int32 index range", sk);
    if (p->dv <= 0 || p->dv > Dqk)
        return la_err(LA_ERR_ARG, "dv: %lld, must be in 1..Dqk = %lld (values are the first dv columns of kv %s)",
                      (long long)p->dv, (long long)Dqk, sk);
    if (!isfinite(p->scale))
        return la_err(LA_ERR_ARG, "scale: %g is not finite (0 = default Dqk^-1/2)", (double)p->scale);
    LA_TRY(la_check_dim(idx, "idx", 0, T, "(queries of q)"));
    LA_TRY(la_check_dim(out, "out", 0, T, "(queries of q)"));
    LA_TRY(la_check_dim(out, "out", 1, Hq, "(heads of q)"));
    LA_TRY(la_check_dim(out, "out", 2, p->dv, "(dv)"));
    if (lse) {
        LA_TRY(la_check_dim(lse, "lse", 0, T, "(queries of q)"));
        LA_TRY(la_check_dim(lse, "lse", 1, Hq, "(heads of q)"));
    }
    const la_tensor *ins[3] = {q, kv, idx};
    for (int i = 0; i < 3; i++) {
        if (la_tensors_overlap(out, ins[i]))
            return la_err(LA_ERR_ARG, "out: overlaps input %s in memory (outputs must not alias inputs)", names[i]);
        if (lse && la_tensors_overlap(lse, ins[i]))
            return la_err(LA_ERR_ARG, "lse: overlaps input %s in memory (outputs must not alias inputs)", names[i]);
    }
    if (lse && la_tensors_overlap(lse, out)) return la_err(LA_ERR_ARG, "lse: overlaps out in memory");
    return LA_OK;
}

la_status la_sparse_attention(const la_sparse_attn_params *p, const la_tensor *q,
                              const la_tensor *kv, const la_tensor *idx, la_tensor *out,
                              la_tensor *lse, la_context *ctx) {
    if (!p) return la_err(LA_ERR_ARG, "sparse-attn: params is NULL");
    if (!q) return la_err(LA_ERR_ARG, "sparse-attn: q is NULL");
    if (!kv) return la_err(LA_ERR_ARG, "sparse-attn: kv is NULL");
    if (!idx) return la_err(LA_ERR_ARG, "sparse-attn: idx is NULL");
    if (!out) return la_err(LA_ERR_ARG, "sparse-attn: out is NULL");
    const la_tensor *all[5] = {q, kv, idx, out, lse};
#ifndef LA_WITH_CUDA
    const char *names[5] = {"q", "kv", "idx", "out", "lse"};
#endif
    for (int i = 0; i < 5; i++)
        if (all[i] && all[i]->device == LA_DEVICE_CUDA)
#ifdef LA_WITH_CUDA
            return la_sparse_attention_cuda(p, q, kv, idx, out, lse, ctx); /* validates CUDA views */
#else
            return la_err(LA_ERR_UNSUPPORTED, "sparse-attn: no CUDA implementation in this build (%s is on cuda)",
                          names[i]);
#endif
    LA_TRY(la_sparse_attn_check_views(p, q, kv, idx, out, lse, LA_DEVICE_CPU, LA_DT_FLOAT));
    const int64_t Dqk = q->ne[2];
    const float scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)Dqk);
    la_status s = la_sparse_attn_cpu(q, kv, idx, p->dv, scale, out, lse, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
