/* Causal MHLA forward on bf16 tensor cores (SPEC §5.4; family "mhla_causal",
 * variant "mma"): the causal linear passes of linear_causal_tc.cu with one
 * 64-token chunk per block and the prefix scan replaced by the mixing:
 *   1. S_b = K̃_bᵀ V_b, z_b = Σ k̃ per block (lct_state_mma_kernel, fp32);
 *   2. H_i = Σ_{b<i} W[i,b] S_b over the flattened [S | z] states, one
 *      batched GEMM per head (mcb_combine, the split-bf16 products of the
 *      backward's mixing: fp32 to about 16 bits, mhla_causal_mix.cuh);
 *   3. per block: o = q̃ H_i + W[i,i]·tril(q̃ k̃ᵀ) v, den = q̃·z̃_i +
 *      W[i,i]·rowsum(tril(q̃ k̃ᵀ)) (lct_output_mma_kernel with lct_args.mixw).
 * Rounding as the causal linear path: φ(q), φ(k), V, A and the bf16 copy of
 * H_i in the products, everything else fp32. Cost per head: 2·N·D·Dv (pass
 * 1), 2·M²·(D·Dv + D) for the full M × M GEMM (the strict triangle is half of
 * it; three split passes), 4·N·D·Dv + 2·N·64·D (pass 3); bytes: the states
 * (4·M·(D·Dv + D)) written, read, mixed, written and read again, beyond q, k,
 * v and out (docs/PERF.md). */
#include "cuda/linear_causal_tc.cuh"
#include "cuda/mhla_causal_mix.cuh"
#include "cuda/mhla_causal_tc.cuh"
#include "cuda/bwd_common.cuh"

namespace {
bool mct_view_ok(const la_tensor *t, int64_t D) {
    return t->dtype == LA_BF16 && t->ndim == 4 && t->ne[3] == D && t->nb[3] == 1 &&
           t->nb[0] % 8 == 0 && t->nb[1] % 8 == 0 && t->nb[2] % 8 == 0 &&
           ((uintptr_t)t->data % 16) == 0;
}
} // namespace

int mct_eligible(const la_mhla_causal_params *p, const la_tensor *q, const la_tensor *k,
                 const la_tensor *v, const la_tensor *out) {
    if (p->chunk != 64) return 0;
    if (p->normalize != LA_MHLA_NORM_NONE && p->normalize != LA_MHLA_NORM_PER_QUERY) return 0;
    const int64_t D = q->ne[3];
    if (D != 32 && D != 64 && D != 128) return 0;
    if (q->ne[1] < 1 || q->ne[0] * q->ne[2] > 65535) return 0;
    return mct_view_ok(q, D) && mct_view_ok(k, D) && mct_view_ok(v, D) && mct_view_ok(out, D);
}

la_status mct_forward(const la_mhla_causal_params *p, float scale_q, const la_tensor *q,
                      const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
                      la_tensor *out, const la_context *ctx, cudaStream_t s) {
    const int64_t N = q->ne[1], M = la_cu_cdiv(N, 64);
    const int64_t WM = mixing->ne[mixing->ndim - 1], Hw = mixing->ndim == 3 ? mixing->ne[0] : 1;
    bwd_ws ws;
    float *W, *Ws;
    ws.want(&W, Hw, WM, WM);
    ws.want(&Ws, Hw, M, M);
    LA_TRY(ws.alloc(s, "causal mhla mixing"));
    lcb_mixing mx;
    LA_TRY(mcb_mixing_prepare(mixing, M, W, Ws, &mx, s));
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.causal = 1;
    lp.feature = p->feature;
    lp.normalize = p->normalize == LA_MHLA_NORM_PER_QUERY;
    lp.scale_q = scale_q;
    lp.eps = p->eps;
    lp.chunk = 64;
    lct_choice c;
    c.kernel = LCT_TC, c.walk = false, c.L = 64;
    return lct_run(c, &lp, q, k, v, out, nullptr, nullptr, nullptr, nullptr, ctx, s, &mx);
}
