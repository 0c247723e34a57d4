/* Softmax attention backward (TRAINING.md §1): public entry point. Validates
 * the forward's views, lse, d_out and the gradient buffers, then dispatches
 * to the backend of the tensors' device. */
#include "core/internal.h"
#include "cpu/backward_cpu.h"
#include "ops/backward_check.h"
#include "ops/softmax_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif

la_status la_softmax_backward(const la_softmax_params *p, const la_tensor *q,
                              const la_tensor *k, const la_tensor *v, const la_tensor *out,
                              const la_tensor *lse, const la_tensor *d_out, la_tensor *dq,
                              la_tensor *dk, la_tensor *dv, la_context *ctx) {
    if (!p) return la_err(LA_ERR_ARG, "softmax backward: params is NULL");
    if (!q) return la_err(LA_ERR_ARG, "softmax backward: q is NULL");
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "q: unknown device %d", (int)dev);
    /* f16 on CUDA only (the CPU path loads f32, f64 and bf16) */
    const unsigned dts = LA_DT_FLOAT | (dev == LA_DEVICE_CUDA ? LA_DT(LA_F16) : 0u);
    LA_TRY(la_check_tensor(q, "q", 4, dts, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, dts, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, dts, dev, false));
    if (!out) return la_err(LA_ERR_ARG, "out: NULL (the softmax backward reads the forward's output)");
    if (!lse) return la_err(LA_ERR_ARG, "lse: NULL (the softmax backward needs the forward's lse)");
    LA_TRY(la_check_tensor(out, "out", 4, dts, dev, false));
    LA_TRY(la_check_tensor(lse, "lse", 3, dts, dev, false));

    LA_TRY(la_softmax_check_shapes("softmax backward", q, k, v, out, lse));
    LA_TRY(la_bwd_check_like(d_out, "d_out", out, "out", dts));
    if (dq) LA_TRY(la_bwd_check_grad(dq, "dq", q, "q"));
    if (dk) LA_TRY(la_bwd_check_grad(dk, "dk", k, "k"));
    if (dv) LA_TRY(la_bwd_check_grad(dv, "dv", v, "v"));
    if (!isfinite(p->scale))
        return la_err(LA_ERR_ARG, "scale: %g is not finite (0 = default D^-1/2)", (double)p->scale);
    const float scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)q->ne[3]);

    const la_tensor *outs[3] = {dq, dk, dv};
    const char *out_names[3] = {"dq", "dk", "dv"};
    const la_tensor *ins[6] = {q, k, v, out, lse, d_out};
    const char *in_names[6] = {"q", "k", "v", "out", "lse", "d_out"};
    LA_TRY(la_bwd_check_overlaps(outs, out_names, 3, ins, in_names, 6));

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_softmax_backward_cuda(p, q, k, v, out, lse, d_out, dq, dk, dv, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED,
                      "softmax backward: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    if (!dq && !dk && !dv) {
        la_err_clear();
        return LA_OK;
    }
    la_status s = la_softmax_backward_cpu(p->causal != 0, scale, q, k, v, out, lse, d_out, dq,
                                          dk, dv, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
