/* Validation of the sparse family (SPEC §6–§8): the indexers (DSA, HISA,
 * block-sparse, the decode cache), row top-k and sparse attention. The
 * public entry points in src/ops call these before dispatching to a
 * backend, so one set of rules and messages holds on every device; the
 * backends check only their own kernels' limits. */
#include "ops/sparse_validate.h"

#include <stdint.h>
#include <stdlib.h>

/* Float dtypes a view may have (f32, f64, bf16, f16 on either device). */
static unsigned float_mask_of(la_device dev) {
    (void)dev;
    return LA_DT_FLOAT;
}

la_status la_sparse_check_device(const char *op, const char *name, la_device dev) {
#ifdef LA_WITH_CUDA
    (void)op, (void)name, (void)dev;
    return LA_OK;
#else
    if (dev == LA_DEVICE_CUDA)
        return la_err(LA_ERR_UNSUPPORTED, "%s: no CUDA implementation in this build (%s is on cuda)",
                      op, name);
    return LA_OK;
#endif
}

void la_idx_problem_free(la_idx_problem *P) {
    if (!P) return;
    free((void *)P->start);
    P->start = NULL;
    P->end = NULL;
}

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
    /* shapes are formatted only into an error's message (snprintf per call is
     * a measurable part of a small call's host time) */
    if (k->ne[1] != dI)
        return la_err(LA_ERR_SHAPE, "k: [L,dI] = %s has dI=%lld, but q [T,HI,dI] = %s has dI=%lld",
                      la_shape_str(k, sk, sizeof sk), (long long)k->ne[1],
                      la_shape_str(q, sq, sizeof sq), (long long)dI);
    if (w->ne[0] != T || w->ne[1] != HI)
        return la_err(LA_ERR_SHAPE, "w: shape %s, expected [T,HI] = [%lld, %lld] from q [T,HI,dI] = %s",
                      la_shape_str(w, sw, sizeof sw), (long long)T, (long long)HI,
                      la_shape_str(q, sq, sizeof sq));
    if (p->topk <= 0)
        return la_err(LA_ERR_ARG, "topk: %lld, must be > 0", (long long)p->topk);
    if (L > INT32_MAX)
        return la_err(LA_ERR_SHAPE, "k: %lld keys in %s exceed the int32 index range", (long long)L,
                      la_shape_str(k, sk, sizeof sk));
    if (HI > 65536 || dI > 65536)
        return la_err(LA_ERR_SHAPE, "q: %s has HI or dI above 65536", la_shape_str(q, sq, sizeof sq));
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

la_status la_idx_check_call(const char *op, const la_index_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *w, const la_tensor *start,
                            const la_tensor *end, const la_tensor *idx) {
    LA_TRY(la_idx_check_args(op, p, q, k, w, idx));
    const la_device dev = q->device;
    LA_TRY(la_sparse_check_device(op, "q", dev));
    unsigned mask = float_mask_of(dev);
    if (dev == LA_DEVICE_CPU && (p->k_scale || p->q_scale))
        return la_err(LA_ERR_UNSUPPORTED, "%s: k_scale/q_scale (fp8 inputs) are GPU-only; the CPU takes f32/f64/bf16",
                      op);
    /* fp8 e4m3 q/k on CUDA: the backend checks the dtype pairing and the scales */
    if (dev == LA_DEVICE_CUDA &&
        (p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3))
        mask |= LA_DT(LA_FP8_E4M3);
    return la_idx_check_views(p, q, k, w, start, end, idx, dev, mask);
}

la_status la_idx_resolve(const char *op, const la_tensor *q, const la_tensor *k,
                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                         la_idx_problem *P) {
    char sk[96];
    memset(P, 0, sizeof *P);
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

la_status la_idx_check_blocks(const char *op, const la_index_params *p, int need_m) {
    if (p->block <= 0)
        return la_err(LA_ERR_ARG, "block: block size %lld, must be > 0", (long long)p->block);
    if (p->block > INT32_MAX)
        return la_err(LA_ERR_ARG, "block: block size %lld exceeds the int32 index range", (long long)p->block);
    if (need_m && p->block_topk <= 0)
        return la_err(LA_ERR_ARG, "block_topk: m = %lld blocks kept, must be > 0", (long long)p->block_topk);
    if (!need_m && p->topk > 0 && p->topk < p->block)
        return la_err(LA_ERR_ARG,
                      "%s: topk = %lld is smaller than the block size %lld, so topk/block = 0 blocks would be kept",
                      op, (long long)p->topk, (long long)p->block);
    return LA_OK;
}

la_status la_dsa_check_scores(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *w, const la_tensor *start, const la_tensor *end,
                              const la_tensor *idx, const la_tensor *scores) {
    const la_tensor *ins[8] = {q, k, w, start, end, idx, p->k_scale, p->q_scale};
    const char *names[8] = {"q", "k", "w", "start", "end", "idx", "k_scale", "q_scale"};
    LA_TRY(la_check_tensor(scores, "scores", 2, float_mask_of(q->device), q->device, false));
    LA_TRY(la_check_dim(scores, "scores", 0, q->ne[0], "(queries of q)"));
    LA_TRY(la_check_dim(scores, "scores", 1, k->ne[0], "(keys of k)"));
    for (int i = 0; i < 8; i++)
        if (ins[i] && la_tensors_overlap(scores, ins[i]))
            return la_err(LA_ERR_ARG, "scores: overlaps %s in memory (outputs must not alias)", names[i]);
    return LA_OK;
}

la_status la_topk_check_call(const la_tensor *scores, const la_tensor *idx) {
    if (!scores) return la_err(LA_ERR_ARG, "topk: scores is NULL");
    if (!idx) return la_err(LA_ERR_ARG, "topk: idx (output) is NULL");
    const la_device dev = scores->device;
    LA_TRY(la_sparse_check_device("topk", "scores", dev));
    LA_TRY(la_check_tensor(scores, "scores", 2, float_mask_of(dev), dev, false));
    LA_TRY(la_check_tensor(idx, "idx", 2, LA_DT(LA_I32), dev, false));
    LA_TRY(la_check_dim(idx, "idx", 0, scores->ne[0], "(rows of scores)"));
    if (scores->ne[1] > INT32_MAX) {
        char sb[96];
        return la_err(LA_ERR_SHAPE, "scores: %s has more columns than the int32 index range",
                      la_shape_str(scores, sb, sizeof sb));
    }
    if (la_tensors_overlap(idx, scores))
        return la_err(LA_ERR_ARG, "idx: overlaps scores in memory (outputs must not alias inputs)");
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
    if (Dkv != Dqk)
        return la_err(LA_ERR_SHAPE, "kv: %s has Dqk=%lld, but q [T,Hq,Dqk] = %s has Dqk=%lld",
                      la_shape_str(kv, sk, sizeof sk), (long long)Dkv,
                      la_shape_str(q, sq, sizeof sq), (long long)Dqk);
    if (Hkv > Hq)
        return la_err(LA_ERR_SHAPE, "kv: %s has %lld kv heads, more than the %lld query heads of q %s",
                      la_shape_str(kv, sk, sizeof sk), (long long)Hkv, (long long)Hq,
                      la_shape_str(q, sq, sizeof sq));
    if (dev == LA_DEVICE_CPU && Dqk > 65536) /* the CPU kernel's row buffers */
        return la_err(LA_ERR_SHAPE, "q: %s has Dqk above 65536", la_shape_str(q, sq, sizeof sq));
    if (kv->ne[0] > INT32_MAX)
        return la_err(LA_ERR_SHAPE, "kv: %s has more keys than the int32 index range",
                      la_shape_str(kv, sk, sizeof sk));
    if (p->dv <= 0 || p->dv > Dqk)
        return la_err(LA_ERR_ARG, "dv: %lld, must be in 1..Dqk = %lld (values are the first dv columns of kv %s)",
                      (long long)p->dv, (long long)Dqk, la_shape_str(kv, sk, sizeof sk));
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

la_status la_sparse_attn_check_call(const la_sparse_attn_params *p, const la_tensor *q,
                                    const la_tensor *kv, const la_tensor *idx,
                                    const la_tensor *out, const la_tensor *lse) {
    if (!p) return la_err(LA_ERR_ARG, "sparse-attn: params is NULL");
    if (!q) return la_err(LA_ERR_ARG, "sparse-attn: q is NULL");
    if (!kv) return la_err(LA_ERR_ARG, "sparse-attn: kv is NULL");
    if (!idx) return la_err(LA_ERR_ARG, "sparse-attn: idx is NULL");
    if (!out) return la_err(LA_ERR_ARG, "sparse-attn: out is NULL");
    const la_device dev = q->device;
    LA_TRY(la_sparse_check_device("sparse-attn", "q", dev));
    return la_sparse_attn_check_views(p, q, kv, idx, out, lse, dev, float_mask_of(dev));
}
