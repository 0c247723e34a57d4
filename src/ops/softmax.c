/* Softmax attention (SPEC §1): public entry point. Validates the views and
 * dispatches to the backend of the tensors' device. */
#include <float.h>

#include "core/internal.h"
#include "cpu/softmax_cpu.h"
#include "ops/softmax_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif


la_status la_softmax_params_init(la_softmax_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_softmax_params_init: p is NULL");
    p->causal = 0;
    p->scale = 0.f;
    return LA_OK;
}

la_status la_softmax_attention(const la_softmax_params *p, const la_tensor *q,
                               const la_tensor *k, const la_tensor *v, la_tensor *out,
                               la_tensor *lse, la_context *ctx) {
    if (!p) return la_err(LA_ERR_ARG, "softmax: params is NULL");
    if (!q) return la_err(LA_ERR_ARG, "softmax: q is NULL");
    const la_device dev = q->device;
    if (dev != LA_DEVICE_CPU && dev != LA_DEVICE_CUDA)
        return la_err(LA_ERR_DEVICE, "q: unknown device %d", (int)dev);
    /* f16 on CUDA only (the CPU path loads f32, f64 and bf16) */
    const unsigned dts = LA_DT_FLOAT | (dev == LA_DEVICE_CUDA ? LA_DT(LA_F16) : 0u);
    LA_TRY(la_check_tensor(q, "q", 4, dts, dev, false));
    LA_TRY(la_check_tensor(k, "k", 4, dts, dev, false));
    LA_TRY(la_check_tensor(v, "v", 4, dts, dev, false));
    LA_TRY(la_check_tensor(out, "out", 4, dts, dev, false));
    if (lse) LA_TRY(la_check_tensor(lse, "lse", 3, dts, dev, false));

    LA_TRY(la_softmax_check_shapes("softmax", q, k, v, out, lse));
    const int64_t D = q->ne[3];
    if (!isfinite(p->scale))
        return la_err(LA_ERR_ARG, "scale: %g is not finite (0 = default D^-1/2)", (double)p->scale);
    const float scale = p->scale != 0.f ? p->scale : 1.f / sqrtf((float)D);

    const la_tensor *ins[3] = {q, k, v};
    const char *names[3] = {"q", "k", "v"};
    for (int i = 0; i < 3; i++) {
        if (la_tensors_overlap(out, ins[i]))
            return la_err(LA_ERR_ARG, "out: overlaps input %s in memory (outputs must not alias inputs)", names[i]);
        if (lse && la_tensors_overlap(lse, ins[i]))
            return la_err(LA_ERR_ARG, "lse: overlaps input %s in memory (outputs must not alias inputs)", names[i]);
    }
    if (lse && la_tensors_overlap(lse, out))
        return la_err(LA_ERR_ARG, "lse: overlaps out in memory");

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_softmax_attention_cuda(p, q, k, v, out, lse, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED, "softmax: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    la_status s = la_softmax_cpu(p->causal != 0, scale, q, k, v, out, lse, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
