/* Linear attention backward (TRAINING.md §1): public entry point. Validates
 * parameters, the forward's views, d_out, the state tensors and the gradient
 * buffers, then dispatches to the backend of the tensors' device. */
#include "core/internal.h"
#include "cpu/backward_cpu.h"
#include "cpu/linear_cpu.h"
#include "ops/backward_check.h"
#include "ops/linear_check.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_bwd.h"
#endif


la_status la_linear_backward(const la_linear_params *p, const la_tensor *q, const la_tensor *k,
                             const la_tensor *v, const la_tensor *out, const la_tensor *S_in,
                             const la_tensor *z_in, const la_tensor *d_out,
                             const la_tensor *d_S_out, const la_tensor *d_z_out, la_tensor *dq,
                             la_tensor *dk, la_tensor *dv, la_tensor *d_S_in, la_tensor *d_z_in,
                             la_context *ctx) {
    LA_TRY(la_linear_check_views("linear backward", p, q, k, v, NULL, false));
    const la_device dev = q->device;
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    /* out (optional) must be the forward's output: the backward then reads
     * o instead of forming it. */
    if (out) {
        LA_TRY(la_check_tensor(out, "out", 4, LA_DT_FLOAT, dev, false));
        LA_TRY(la_check_dim(out, "out", 0, B, "(batch of q)"));
        LA_TRY(la_check_dim(out, "out", 1, N, "(tokens of q)"));
        LA_TRY(la_check_dim(out, "out", 2, H, "(heads of q)"));
        LA_TRY(la_check_dim(out, "out", 3, Dv, "(head dim of v)"));
    }
    LA_TRY(la_check_tensor(d_out, "d_out", 4, LA_DT_FLOAT, dev, false));
    LA_TRY(la_check_dim(d_out, "d_out", 0, B, "(batch of out)"));
    LA_TRY(la_check_dim(d_out, "d_out", 1, N, "(tokens of out)"));
    LA_TRY(la_check_dim(d_out, "d_out", 2, H, "(heads of out)"));
    LA_TRY(la_check_dim(d_out, "d_out", 3, Dv, "(head dim of out)"));
    if (dq) LA_TRY(la_bwd_check_grad(dq, "dq", q, "q"));
    if (dk) LA_TRY(la_bwd_check_grad(dk, "dk", k, "k"));
    if (dv) LA_TRY(la_bwd_check_grad(dv, "dv", v, "v"));

    const bool any_state = S_in || z_in || d_S_out || d_z_out || d_S_in || d_z_in;
    if (any_state && !p->causal)
        return la_err(LA_ERR_ARG, "state: a recurrent state (or its gradient) needs causal = 1");
    const int64_t wS[4] = {B, H, D, Dv}, wz[3] = {B, H, D};
    if (S_in) LA_TRY(la_linear_check_state(S_in, "S_in", dev, 4, wS));
    if (z_in) LA_TRY(la_linear_check_state(z_in, "z_in", dev, 3, wz));
    if (d_S_out) LA_TRY(la_linear_check_state(d_S_out, "d_S_out", dev, 4, wS));
    if (d_z_out) LA_TRY(la_linear_check_state(d_z_out, "d_z_out", dev, 3, wz));
    if (d_S_in) LA_TRY(la_linear_check_state(d_S_in, "d_S_in", dev, 4, wS));
    if (d_z_in) LA_TRY(la_linear_check_state(d_z_in, "d_z_in", dev, 3, wz));
    if (z_in && !S_in) return la_err(LA_ERR_ARG, "S_in: NULL while z_in is given (pass both or neither)");
    if (S_in && !z_in && p->normalize)
        return la_err(LA_ERR_ARG, "z_in: NULL while S_in is given and normalize is on (pass both)");

    const la_tensor *outs[5] = {dq, dk, dv, d_S_in, d_z_in};
    const char *out_names[5] = {"dq", "dk", "dv", "d_S_in", "d_z_in"};
    const la_tensor *ins[8] = {q, k, v, out, S_in, z_in, d_out, d_S_out};
    const char *in_names[8] = {"q", "k", "v", "out", "S_in", "z_in", "d_out", "d_S_out"};
    LA_TRY(la_bwd_check_overlaps(outs, out_names, 5, ins, in_names, 8));
    if (d_z_out) {
        const la_tensor *in1[1] = {d_z_out};
        const char *n1[1] = {"d_z_out"};
        LA_TRY(la_bwd_check_overlaps(outs, out_names, 5, in1, n1, 1));
    }

    if (dev == LA_DEVICE_CUDA) {
#ifdef LA_WITH_CUDA
        la_status s = la_linear_backward_cuda(p, q, k, v, out, S_in, z_in, d_out, d_S_out,
                                              d_z_out, dq, dk, dv, d_S_in, d_z_in, ctx);
        if (s == LA_OK) la_err_clear();
        return s;
#else
        return la_err(LA_ERR_UNSUPPORTED,
                      "linear backward: no CUDA implementation in this build (q is on cuda)");
#endif
    }
    la_status s = la_linear_backward_cpu(p, q, k, v, out, S_in, z_in, d_out, d_S_out, d_z_out, dq, dk,
                                         dv, d_S_in, d_z_in, ctx);
    if (s == LA_OK) la_err_clear();
    return s;
}
