/* Linear attention (SPEC §3) on CUDA: one block, all weights 1, through the
 * linear-family engine (linfam.cu). Non-causal: summary, sum, output.
 * Causal: chunk summaries, prefix scan with the state in/out, output with
 * the masked intra-chunk term. Views validated by src/ops/linear.c.
 * Causal with D = Dv ∈ {32, 64, 128} and bf16 or fp16 rows goes to the tensor-core kernels of
 * linear_causal_tc.cu instead (family "linear_causal": lct_select; the
 * non-causal kernels are family "linear": lf_select). */
#include "core/variant.h"
#include "cuda_ops.h"
#include "linear_causal_tc.cuh"
#include "linfam.cuh"

extern "C" la_status la_linear_attention_cuda(const la_linear_params *p, const la_tensor *q,
                                              const la_tensor *k, const la_tensor *v,
                                              la_tensor *out, const la_tensor *S_in,
                                              const la_tensor *z_in, la_tensor *S_out,
                                              la_tensor *z_out, la_context *ctx) {
    const char *family = p->causal ? "linear_causal" : "linear";
    const char *forced = la_context_variant(ctx, family);
    if (p->causal) {
        lct_choice c;
        LA_TRY(lct_select(p, q, k, v, out, forced, &c));
        if (c.kernel == LCT_TC)
            return lct_run(c, p, q, k, v, out, S_in, z_in, S_out, z_out, ctx, la_cu_stream(ctx));
        /* the portable engine: forced is NULL or "portable" here (lct_select
         * refuses a forced tensor-core variant it cannot run), and the engine
         * has no causal tensor-core path of its own */
    }
    lf_problem P = {};
    lf_set_qkvo(&P, q, k, v, out);
    P.fq = {(int)p->feature, 1.f, p->scale_q, 0.f, nullptr, nullptr, nullptr};
    P.fk = {(int)p->feature, 1.f, 1.f, 0.f, nullptr, nullptr, nullptr};
    P.n[0] = P.n[1] = 1;
    P.n[2] = P.N;
    P.g[0] = P.g[1] = P.g[2] = 1;
    P.chunk = p->causal ? p->chunk : 0;
    P.use_w = 0;
    P.norm = p->normalize ? LF_NORM_PER_QUERY : LF_NORM_NONE;
    P.eps = p->eps;
    P.den_scale = 1.f;
    P.S_in = la_cu_view_of(S_in);
    P.z_in = la_cu_view_of(z_in);
    P.S_out = la_cu_view_of(S_out);
    P.z_out = la_cu_view_of(z_out);
    return lf_run(&P, ctx, family, forced, la_cu_stream(ctx));
}
