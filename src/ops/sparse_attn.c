/* Sparse attention over selected keys (SPEC §8, MQA mode of MLA): public
 * entry point. Views are validated (src/ops/sparse_validate.c) before
 * dispatch. */
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

la_status la_sparse_attention(const la_sparse_attn_params *p, const la_tensor *q,
                              const la_tensor *kv, const la_tensor *idx, la_tensor *out,
                              la_tensor *lse, la_context *ctx) {
    LA_TRY(la_sparse_attn_check_call(p, q, kv, idx, out, lse));
#ifdef LA_WITH_CUDA
    if (q->device == LA_DEVICE_CUDA) return la_sparse_attention_cuda(p, q, kv, idx, out, lse, ctx);
#endif
    const int64_t Dqk = q->ne[2];
    const float scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)Dqk);
    la_status s = la_sparse_attn_cpu(q, kv, idx, p->dv, scale, out, lse, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
