/* DSA indexer (SPEC §6): public entry point, and the validation shared by the
 * three indexers (DSA, HISA, block-sparse) and the decode cache. */
#include <stdint.h>
#include <stdlib.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

la_status la_index_params_init(la_index_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_index_params_init: p is NULL");
    p->topk = 2048;
    p->block = 128;
    p->block_topk = 64;
    p->k_scale = NULL;
    p->q_scale = NULL;
    return LA_OK;
}

void la_idx_problem_free(la_idx_problem *P) {
    if (!P) return;
    free((void *)P->start);
    P->start = NULL;
    P->end = NULL;
}

static int on_cuda(const la_tensor *t) { return t && t->device == LA_DEVICE_CUDA; }

la_status la_idx_check_args(const char *op, const la_index_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *w, const la_tensor *idx) {
    if (!p) return la_err(LA_ERR_ARG, "%s: params is NULL", op);
    if (!q) return la_err(LA_ERR_ARG, "%s: q is NULL", op);
    if (!k) return la_err(LA_ERR_ARG, "%s: k is NULL", op);
    if (!w) return la_err(LA_ERR_ARG, "%s: w is NULL", op);
    if (!idx) return la_err(LA_ERR_ARG, "%s: idx (output) is NULL", op);
    return LA_OK;
}

la_status la_idx_check_views(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                             const la_tensor *w, const la_tensor *start, const la_tensor *end,
                             const la_tensor *idx, la_device dev, unsigned float_mask) {
    char sq[96], sk[96], sw[96];
    LA_TRY(la_check_tensor(q, "q", 3, float_mask, dev, false));
    LA_TRY(la_check_tensor(k, "k", 2, float_mask, dev, false));
    LA_TRY(la_check_tensor(w, "w", 2, float_mask, dev, false));
    LA_TRY(la_check_tensor(idx, "idx", 2, LA_DT(LA_I32), dev, false));
    const int64_t T = q->ne[0], HI = q->ne[1], dI = q->ne[2], L = k->ne[0];
    la_shape_str(q, sq, sizeof sq);
    la_shape_str(k, sk, sizeof sk);
    la_shape_str(w, sw, sizeof sw);
    if (k->ne[1] != dI)
        return la_err(LA_ERR_SHAPE, "k: [L,dI] = %s has dI=%lld, but q [T,HI,dI] = %s has dI=%lld", sk,
                      (long long)k->ne[1], sq, (long long)dI);
    if (w->ne[0] != T || w->ne[1] != HI)
        return la_err(LA_ERR_SHAPE, "w: shape %s, expected [T,HI] = [%lld, %lld] from q [T,HI,dI] = %s", sw,
                      (long long)T, (long long)HI, sq);
    if (p->topk <= 0)
        return la_err(LA_ERR_ARG, "topk: %lld, must be > 0", (long long)p->topk);
    if (L > INT32_MAX)
        return la_err(LA_ERR_SHAPE, "k: %lld keys in %s exceed the int32 index range", (long long)L, sk);
    if (HI > 65536 || dI > 65536)
        return la_err(LA_ERR_SHAPE, "q: %s has HI or dI above 65536", sq);
    LA_TRY(la_check_dim(idx, "idx", 0, T, "(queries of q)"));
    LA_TRY(la_check_dim(idx, "idx", 1, p->topk, "(topk)"));
    const la_tensor *rng[2] = {start, end};
    const char *rname[2] = {"start", "end"};
    for (int i = 0; i < 2; i++) {
        if (!rng[i]) continue;
        LA_TRY(la_check_tensor(rng[i], rname[i], 1, LA_DT(LA_I32), dev, false));
        LA_TRY(la_check_dim(rng[i], rname[i], 0, T, "(queries of q)"));
    }
    const la_tensor *ins[5] = {q, k, w, start, end};
    const char *names[5] = {"q", "k", "w", "start", "end"};
    for (int i = 0; i < 5; i++)
        if (ins[i] && la_tensors_overlap(idx, ins[i]))
            return la_err(LA_ERR_ARG, "idx: overlaps input %s in memory (outputs must not alias inputs)", names[i]);
    return LA_OK;
}

la_status la_idx_validate(const char *op, const la_index_params *p, const la_tensor *q,
                          const la_tensor *k, const la_tensor *w, const la_tensor *start,
                          const la_tensor *end, const la_tensor *idx, la_idx_problem *P) {
    char sk[96];
    memset(P, 0, sizeof *P);
    LA_TRY(la_idx_check_args(op, p, q, k, w, idx));
    const la_tensor *all[6] = {q, k, w, start, end, idx};
    const char *names[6] = {"q", "k", "w", "start", "end", "idx"};
    for (int i = 0; i < 6; i++)
        if (on_cuda(all[i]))
            /* the public entry points dispatch CUDA calls before validating */
            return la_err(LA_ERR_UNSUPPORTED, "%s: no CUDA implementation in this build (%s is on cuda)",
                          op, names[i]);
    if (p->k_scale || p->q_scale)
        return la_err(LA_ERR_UNSUPPORTED, "%s: k_scale/q_scale (fp8 inputs) are GPU-only; the CPU takes f32/f64/bf16",
                      op);
    LA_TRY(la_idx_check_views(p, q, k, w, start, end, idx, LA_DEVICE_CPU, LA_DT_FLOAT));
    const int64_t T = q->ne[0], HI = q->ne[1], dI = q->ne[2], L = k->ne[0];
    la_shape_str(k, sk, sizeof sk);

    size_t bytes;
    LA_TRY(la_mul_size((size_t)T, 2 * sizeof(int64_t), &bytes, "ranges"));
    int64_t *r = malloc(bytes);
    if (!r) return la_err(LA_ERR_NOMEM, "%s: could not allocate the ranges of %lld queries", op, (long long)T);
    int64_t *rs = r, *re = r + T;
    for (int64_t t = 0; t < T; t++) {
        int64_t s0 = 0, s1 = L - T + t + 1; /* causal, bottom-right aligned */
        if (s1 < 0) s1 = 0;
        if (s1 > L) s1 = L;
        if (start) s0 = ((const int32_t *)start->data)[t * start->nb[0]];
        if (end) s1 = ((const int32_t *)end->data)[t * end->nb[0]];
        la_status st = LA_OK;
        if (s0 < 0)
            st = la_err(LA_ERR_ARG, "start: start[%lld] = %lld is negative", (long long)t, (long long)s0);
        else if (s1 > L)
            st = la_err(LA_ERR_ARG, "end: end[%lld] = %lld exceeds L = %lld (keys of k %s)", (long long)t,
                        (long long)s1, (long long)L, sk);
        else if (s0 > s1)
            st = la_err(LA_ERR_ARG, "start: start[%lld] = %lld > end[%lld] = %lld%s", (long long)t,
                        (long long)s0, (long long)t, (long long)s1,
                        end ? "" : " (default causal end L-T+t+1)");
        if (st != LA_OK) {
            free(r);
            return st;
        }
        rs[t] = s0;
        re[t] = s1;
    }
    P->q = q;
    P->k = k;
    P->w = w;
    P->T = T;
    P->HI = HI;
    P->dI = dI;
    P->L = L;
    P->start = rs;
    P->end = re;
    return LA_OK;
}

la_status la_dsa_indexer(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                         la_tensor *idx, la_tensor *scores, la_context *ctx) {
    la_idx_problem P;
    if ((q && q->device == LA_DEVICE_CUDA) || (scores && scores->device == LA_DEVICE_CUDA)) {
#ifdef LA_WITH_CUDA
        return la_dsa_indexer_cuda(p, q, k, w, start, end, idx, scores, ctx); /* validates CUDA views */
#else
        return la_err(LA_ERR_UNSUPPORTED, "dsa: no CUDA implementation in this build (%s is on cuda)",
                      q && q->device == LA_DEVICE_CUDA ? "q" : "scores");
#endif
    }
    LA_TRY(la_idx_validate("dsa", p, q, k, w, start, end, idx, &P));
    la_status s = LA_OK;
    if (scores) {
        const la_tensor *ins[6] = {q, k, w, start, end, idx};
        const char *names[6] = {"q", "k", "w", "start", "end", "idx"};
        s = la_check_tensor(scores, "scores", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false);
        if (s == LA_OK) s = la_check_dim(scores, "scores", 0, P.T, "(queries of q)");
        if (s == LA_OK) s = la_check_dim(scores, "scores", 1, P.L, "(keys of k)");
        for (int i = 0; i < 6 && s == LA_OK; i++)
            if (ins[i] && la_tensors_overlap(scores, ins[i]))
                s = la_err(LA_ERR_ARG, "scores: overlaps %s in memory (outputs must not alias)", names[i]);
    }
    if (s == LA_OK) s = la_dsa_cpu(&P, p->topk, idx, scores, ctx);
    la_idx_problem_free(&P);
    if (s == LA_OK) la_err_clear();
    return s;
}
