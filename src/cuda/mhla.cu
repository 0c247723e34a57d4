/* MHLA (SPEC §5) on CUDA through the linear-family engine (linfam.cu):
 * non-causal over 1-D/2-D/3-D block grids with shared or per-head mixing and
 * the three normalize modes; causal chunkwise (§5.4). Views validated by
 * src/ops/mhla.c; family "mhla" (lf_select). Causal: family "mhla_causal",
 * "mma" (mhla_causal_tc.cu: bf16 / fp16 tensor cores, any lower-triangular W;
 * "mma_split": its fp32-accurate mixing; "mma_bf16s": bf16 block states,
 * bf16 inputs only; "mma_f16s": scaled fp16 block states, fp16 inputs on
 * sm_90)
 * where it takes the views, else "portable" (the engine, as "mhla" picks).
 * The decoding state is mhla_decode.cu. */
#include "core/variant.h"
#include "cuda_ops.h"
#include "linfam.cuh"
#include "mhla_causal_tc.cuh"
#include "select.cuh"

static la_cu_view mixing_view(const la_tensor *W) {
    la_cu_view m = la_cu_view_of(W);
    if (W->ndim == 2) { /* shared: no head stride */
        m.nb[2] = W->nb[1];
        m.nb[1] = W->nb[0];
        m.nb[0] = 0;
    }
    return m;
}

static void fill_common(lf_problem *P, const la_tensor *q, const la_tensor *k,
                        const la_tensor *v, const la_tensor *mixing, la_tensor *out) {
    lf_set_qkvo(P, q, k, v, out);
    P->use_w = 1;
    P->W = mixing_view(mixing);
    P->den_scale = 1.f;
}

extern "C" la_status la_mhla_forward_cuda(const la_mhla_params *p, const la_tensor *q,
                                          const la_tensor *k, const la_tensor *v,
                                          const la_tensor *mixing, la_tensor *out,
                                          la_context *ctx) {
    lf_problem P = {};
    fill_common(&P, q, k, v, mixing, out);
    P.fq = {(int)p->feature, 1.f, p->scale_q, 0.f, nullptr, nullptr, nullptr};
    P.fk = {(int)p->feature, 1.f, 1.f, 0.f, nullptr, nullptr, nullptr};
    const int nd = p->grid_ndim;
    for (int a = 0; a < 3; a++) P.n[a] = P.g[a] = 1;
    for (int a = 0; a < nd; a++) {
        P.n[3 - nd + a] = p->grid[a];
        P.g[3 - nd + a] = p->blocks[a];
    }
    if (nd == 1 && p->grid[0] == 0) P.n[2] = P.N;
    if (P.n[0] * P.n[1] * P.n[2] != P.N)
        return la_err(LA_ERR_SHAPE, "mhla: token grid has %lld tokens, but q has N=%lld",
                      (long long)(P.n[0] * P.n[1] * P.n[2]), (long long)P.N);
    P.chunk = 0;
    P.norm = p->normalize == LA_MHLA_NORM_NONE              ? LF_NORM_NONE
             : p->normalize == LA_MHLA_NORM_RELEASED_VISION ? LF_NORM_RELEASED_VISION
                                                            : LF_NORM_PER_QUERY;
    if (P.norm == LF_NORM_RELEASED_VISION)
        for (int a = 0; a < 3; a++)
            if (P.n[a] % P.g[a] != 0)
                return la_err(LA_ERR_ARG,
                              "normalize=released_vision needs equal blocks: grid axis of %lld "
                              "tokens is not divisible by %lld blocks",
                              (long long)P.n[a], (long long)P.g[a]);
    P.eps = p->eps;
    return lf_run(&P, ctx, "mhla", la_context_variant(ctx, "mhla"), la_cu_stream(ctx));
}

extern "C" la_status la_mhla_causal_forward_cuda(const la_mhla_causal_params *p,
                                                 const la_tensor *q, const la_tensor *k,
                                                 const la_tensor *v_, const la_tensor *mixing,
                                                 la_tensor *out, la_context *ctx) {
    lf_problem P = {};
    fill_common(&P, q, k, v_, mixing, out);
    const float sq = p->scale_q != 0.f ? p->scale_q : 1.f / sqrtf((float)P.D);
    P.fq = {(int)p->feature, 1.f, sq, 0.f, nullptr, nullptr, nullptr};
    P.fk = {(int)p->feature, 1.f, 1.f, 0.f, nullptr, nullptr, nullptr};
    P.n[0] = P.n[1] = 1;
    P.n[2] = P.N;
    P.g[0] = P.g[1] = P.g[2] = 1;
    P.chunk = p->chunk;
    if (p->normalize == LA_MHLA_NORM_RELEASED_VISION)
        return la_err(LA_ERR_ARG, "normalize: released_vision is not defined for causal MHLA");
    P.norm = p->normalize == LA_MHLA_NORM_PER_QUERY ? LF_NORM_PER_QUERY : LF_NORM_NONE;
    P.eps = p->eps;
    /* family "mhla_causal": "mma" (mhla_causal_tc.cu) where it takes the views, else the
     * portable engine (lf_select, with the variant forced for "mhla" if any) */
    const char *v = la_context_variant(ctx, "mhla_causal");
    /* the mixing when no variant is forced (mct_default_kind): bf16 block
     * states for bf16 inputs (mma keeps them in fp32); fp16 inputs: fp16
     * block states scaled per block (mma_f16s) on sm_90, else mma (fp32
     * block states, the fp16 mixing GEMM with power-of-two scales) */
    const int kind = !v                         ? mct_default_kind(q, ctx)
                     : !strcmp(v, "mma_split") ? MCT_MIX_SPLIT
                     : !strcmp(v, "mma_bf16s") ? MCT_MIX_BF16S
                     : !strcmp(v, "mma_f16s")  ? MCT_MIX_F16S
                                               : MCT_MIX_MMA;
    if (v && strcmp(v, "portable") && strcmp(v, "mma") && kind == MCT_MIX_MMA)
        return la_cu_unknown_variant("mhla_causal", v, "mma, mma_split, mma_bf16s, mma_f16s, portable");
    const int ok = mct_eligible(p, q, k, v_, out);
    if (v && strcmp(v, "portable") && !ok) return la_cu_variant_unsupported("mhla_causal", v, MCT_NEEDS);
    if (ok && kind == MCT_MIX_BF16S && q->dtype != LA_BF16)
        return la_cu_variant_unsupported("mhla_causal", v, "bf16 q, k, v, out (bf16 block states)");
    if (ok && kind == MCT_MIX_F16S && (q->dtype != LA_F16 || !la_cu_hopper(ctx)))
        return la_cu_variant_unsupported("mhla_causal", v, "f16 q, k, v, out on an sm_90 GPU (fp16 wgmma)");
    if (ok && !(v && !strcmp(v, "portable")))
        return mct_forward(p, sq, q, k, v_, mixing, out, kind, ctx, la_cu_stream(ctx));
    la_cu_report(ctx, "mhla_causal", "portable", "%s", v ? "forced" : MCT_NEEDS);
    return lf_run(&P, ctx, "mhla", la_context_variant(ctx, "mhla"), la_cu_stream(ctx));
}
