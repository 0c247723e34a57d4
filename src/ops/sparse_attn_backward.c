/* Sparse attention backward (TRAINING.md §1): public entry point. Validates
 * the forward's views (la_sparse_attn_check_views, which reads no data),
 * lse, d_out and the gradient buffers, then dispatches to the backend of the
 * tensors' device. */
#include "core/internal.h"
#include "cpu/backward_cpu.h"
#include "ops/backward_check.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif

la_status la_sparse_attention_backward(const la_sparse_attn_params *p, const la_tensor *q,
                                       const la_tensor *kv, const la_tensor *idx,
                                       const la_tensor *out, const la_tensor *lse,
                                       const la_tensor *d_out, la_tensor *dq, la_tensor *dkv,
                                       la_context *ctx) {
    if (!p) return la_err(LA_ERR_ARG, "sparse-attn backward: params is NULL");
    if (!q || !kv || !idx)
        return la_err(LA_ERR_ARG, "sparse-attn backward: %s is NULL", !q ? "q" : !kv ? "kv" : "idx");
    if (!out) return la_err(LA_ERR_ARG, "out: NULL (the sparse attention backward reads the forward's output)");
    if (!lse) return la_err(LA_ERR_ARG, "lse: NULL (the sparse attention backward needs the forward's lse)");
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "q: unknown device %d", (int)dev);
    LA_TRY(la_sparse_attn_check_views(p, q, kv, idx, out, lse, dev, LA_DT_FLOAT));
    LA_TRY(la_bwd_check_like(d_out, "d_out", out, "out", LA_DT_FLOAT));
    if (dq) LA_TRY(la_bwd_check_grad(dq, "dq", q, "q"));
    if (dkv) LA_TRY(la_bwd_check_grad(dkv, "dkv", kv, "kv"));
    const la_tensor *outs[2] = {dq, dkv};
    const char *on[2] = {"dq", "dkv"};
    const la_tensor *ins[6] = {q, kv, idx, out, lse, d_out};
    const char *in[6] = {"q", "kv", "idx", "out", "lse", "d_out"};
    LA_TRY(la_bwd_check_overlaps(outs, on, 2, ins, in, 6));
    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_sparse_attention_backward_cuda(p, q, kv, idx, out, lse, d_out, dq, dkv, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED,
                      "sparse-attn backward: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    const float scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)q->ne[2]);
    la_status s = la_sparse_attention_backward_cpu(q, kv, idx, out, lse, d_out, p->dv, scale, dq,
                                                   dkv, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
