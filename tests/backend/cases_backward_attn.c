/* Backward case table: softmax and sparse MLA attention against float64
 * references written out from P = exp(S - lse) (the forward's out and lse
 * are computed here in float64 too). From the former
 * tests/cuda/test_cuda_backward_attn.h; staging, bounds and what each
 * backend checks: bo_bwd.h. Besides those checks, each CUDA sparse case
 * forces variant portable_rowchunk (one query row per chunk of the per-slot
 * workspace) inside the case: bit-identical to its first call. */
#include "bo_bwd.h"

static void free_all(double **p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
}
static double *dz(int64_t n) { return (double *)calloc((size_t)(n ? n : 1), sizeof(double)); }
/* logical element (i0,i1,i2,i3) of a rank-4 / rank-3 test tensor */
static float at4(const tt *x, int64_t a, int64_t b, int64_t c, int64_t d) {
    return x->h[((a * x->ne[1] + b) * x->ne[2] + c) * x->ne[3] + d];
}
static float at3(const tt *x, int64_t a, int64_t b, int64_t c) {
    return x->h[(a * x->ne[1] + b) * x->ne[2] + c];
}

/* ---- softmax ------------------------------------------------------------------------ */
typedef struct sm_case {
    int cuda; /* set by bwd_add */
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal;
    la_dtype dt;
    int perm;
} sm_case;

static void run_softmax(const void *arg) {
    const sm_case *c = arg;
    const int cu = c->cuda;
    const int64_t B = c->B, Nq = c->Nq, Nk = c->Nk, H = c->H, Hk = c->Hk, D = c->D, Dv = c->Dv;
    const int causal = c->causal, perm = c->perm;
    const la_dtype dt = c->dt;
    la_rng *r = &bo_rng;
    la_context *ctx = bo_ctx();
    char what[160];
    snprintf(what, sizeof what, "softmax B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld%s %s%s",
             (long long)B, (long long)Nq, (long long)Nk, (long long)H, (long long)Hk, (long long)D,
             (long long)Dv, causal ? " causal" : "", dt == LA_BF16 ? "bf16" : "f32",
             perm ? " perm" : "");
    int64_t nq[4] = {B, Nq, H, D}, nk[4] = {B, Nk, Hk, D}, nv[4] = {B, Nk, Hk, Dv},
            no[4] = {B, Nq, H, Dv}, nl[3] = {B, Nq, H};
    tt q = tt_rand(cu, r, 4, nq, dt, perm, 1.0), k = tt_rand(cu, r, 4, nk, dt, perm, 1.0);
    tt v = tt_rand(cu, r, 4, nv, dt, perm, 1.0), go = tt_rand(cu, r, 4, no, dt, perm, 1.0);
    tt o = tt_new(cu, 4, no, dt, perm), l = tt_new(cu, 3, nl, LA_F32, 0);
    tt dq = tt_poison(cu, 4, nq, dt, perm), dk = tt_poison(cu, 4, nk, dt, perm),
       dv = tt_poison(cu, 4, nv, dt, perm);
    const double scale = 1.0 / sqrt((double)D);
    const int64_t rep = H / Hk;
    /* forward in float64: lse and O (stored in the dtype) */
    double *S = dz(Nk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < Nq; t++) {
                const int64_t last = causal ? t + Nk - Nq : Nk - 1;
                double m = -INFINITY;
                for (int64_t s = 0; s <= last && s < Nk; s++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++) a += (double)at4(&q, b, t, h, d) * at4(&k, b, s, h / rep, d);
                    S[s] = a * scale;
                    if (S[s] > m) m = S[s];
                }
                double sum = 0;
                for (int64_t s = 0; s <= last && s < Nk; s++) sum += exp(S[s] - m);
                const double lse = last < 0 ? -INFINITY : m + log(sum);
                l.h[(b * Nq + t) * H + h] = (float)lse;
                for (int64_t c = 0; c < Dv; c++) {
                    double acc = 0;
                    for (int64_t s = 0; s <= last && s < Nk; s++)
                        acc += exp(S[s] - lse) * at4(&v, b, s, h / rep, c);
                    const float f = (float)acc;
                    o.h[((b * Nq + t) * H + h) * Dv + c] = dt == LA_BF16 ? la_round_bf16(f) : f;
                }
            }
    tt_upload(&o);
    tt_upload(&l);
    const int nref = dt == LA_BF16 ? 2 : 1;
    double *ref[2][3] = {{0}};
    for (int rr = 0; rr < nref; rr++) {
        ref[rr][0] = dz(q.n), ref[rr][1] = dz(k.n), ref[rr][2] = dz(v.n);
#define R_(x) (rr ? rb16(x) : (x))
        for (int64_t b = 0; b < B; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < Nq; t++) {
                    const double lse = l.h[(b * Nq + t) * H + h];
                    if (isinf(lse)) continue;
                    const int64_t last = causal ? t + Nk - Nq : Nk - 1;
                    double Dd = 0;
                    for (int64_t c = 0; c < Dv; c++)
                        Dd += (double)at4(&go, b, t, h, c) * o.h[((b * Nq + t) * H + h) * Dv + c];
                    Dd = R_(Dd);
                    for (int64_t s = 0; s <= last && s < Nk; s++) {
                        double a = 0, dp = 0;
                        for (int64_t d = 0; d < D; d++) a += (double)at4(&q, b, t, h, d) * at4(&k, b, s, h / rep, d);
                        for (int64_t c = 0; c < Dv; c++) dp += (double)at4(&go, b, t, h, c) * at4(&v, b, s, h / rep, c);
                        const double P = R_(exp(R_(a * scale) - lse));
                        const double dS = R_(P * (R_(dp) - Dd)) * scale;
                        for (int64_t d = 0; d < D; d++) {
                            ref[rr][0][((b * Nq + t) * H + h) * D + d] += dS * at4(&k, b, s, h / rep, d);
                            ref[rr][1][((b * Nk + s) * Hk + h / rep) * D + d] += dS * at4(&q, b, t, h, d);
                        }
                        for (int64_t c = 0; c < Dv; c++)
                            ref[rr][2][((b * Nk + s) * Hk + h / rep) * Dv + c] += P * at4(&go, b, t, h, c);
                    }
                }
        if (rr)
            for (int i = 0; i < 3; i++) {
                const int64_t n = i == 0 ? q.n : (i == 1 ? k.n : v.n);
                for (int64_t j = 0; j < n; j++) ref[rr][i][j] = rb16(ref[rr][i][j]);
            }
#undef R_
    }
    float *saved[3] = {NULL, NULL, NULL};
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    for (int call = 0; call < 2; call++) {
        la_status st = (call ? la_softmax_backward : BWD_FIRST(cu, la_softmax_backward, la_softmax_backward_cuda))(&p, &q.t, &k.t, &v.t, &o.t, &l.t, &go.t, &dq.t,
                                                &dk.t, &dv.t, ctx);
        if (!bwd_ok(cu, st, what)) break;
        if (call == 0) {
            check_grad(what, "dq", &dq, ref[0][0], ref[1][0]);
            check_grad(what, "dk", &dk, ref[0][1], ref[1][1]);
            check_grad(what, "dv", &dv, ref[0][2], ref[1][2]);
            saved[0] = tt_copy_host(&dq), saved[1] = tt_copy_host(&dk), saved[2] = tt_copy_host(&dv);
            tt_repoison(&dq), tt_repoison(&dk), tt_repoison(&dv);
        } else {
            check_same(what, "dq", &dq, saved[0]);
            check_same(what, "dk", &dk, saved[1]);
            check_same(what, "dv", &dv, saved[2]);
        }
    }
    if (cu && saved[2]) {
        ct cq = ct_of(&q, 0), ck = ct_of(&k, 0), cv = ct_of(&v, 0), co = ct_of(&o, 0);
        ct cl = ct_of(&l, 0), cg = ct_of(&go, 0), cdq = ct_of(&q, 1), cdk = ct_of(&k, 1),
           cdv = ct_of(&v, 1);
        la_status sc = la_softmax_backward(&p, &cq.t, &ck.t, &cv.t, &co.t, &cl.t, &cg.t, &cdq.t,
                                           &cdk.t, &cdv.t, NULL);
        CHECK(sc == LA_OK, "%s CPU: %s %s", what, la_status_string(sc), la_last_error());
        if (sc == LA_OK) {
            check_cpu(what, "dq", saved[0], &cdq, dt);
            check_cpu(what, "dk", saved[1], &cdk, dt);
            check_cpu(what, "dv", saved[2], &cdv, dt);
        }
        ct_free(&cq), ct_free(&ck), ct_free(&cv), ct_free(&co), ct_free(&cl), ct_free(&cg);
        ct_free(&cdq), ct_free(&cdk), ct_free(&cdv);
    }
    for (int i = 0; i < 3; i++) free(saved[i]);
    for (int rr = 0; rr < nref; rr++) free_all(ref[rr], 3);
    free(S);
    tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&go), tt_free(&o), tt_free(&l);
    tt_free(&dq), tt_free(&dk), tt_free(&dv);
}
/* ---- sparse MLA -------------------------------------------------------------------- */
typedef struct sp_case {
    int cuda; /* set by bwd_add */
    int64_t T, Hq, Hkv, L, K, Dqk, dv; /* Hkv 0: kv is [L,Dqk] */
    la_dtype dt;
    int perm;
} sp_case;

static void run_sparse(const void *arg) {
    const sp_case *c = arg;
    const int cu = c->cuda;
    const int64_t T = c->T, Hq = c->Hq, Hkv = c->Hkv, L = c->L, K = c->K, Dqk = c->Dqk, dvv = c->dv;
    const la_dtype dt = c->dt;
    const int perm = c->perm;
    la_rng *r = &bo_rng;
    la_context *ctx = bo_ctx();
    char what[160];
    snprintf(what, sizeof what, "sparse T%lld Hq%lld Hkv%lld L%lld k%lld Dqk%lld dv%lld %s%s",
             (long long)T, (long long)Hq, (long long)Hkv, (long long)L, (long long)K,
             (long long)Dqk, (long long)dvv, dt == LA_BF16 ? "bf16" : "f32", perm ? " perm" : "");
    const int kv3 = Hkv > 0;
    const int64_t G = kv3 ? Hkv : 1;
    int64_t nq[3] = {T, Hq, Dqk}, nkv3[3] = {L, G, Dqk}, nkv2[2] = {L, Dqk}, no[3] = {T, Hq, dvv},
            nl[2] = {T, Hq}, ni[2] = {T, K};
    tt q = tt_rand(cu, r, 3, nq, dt, perm, 1.0);
    tt kv = kv3 ? tt_rand(cu, r, 3, nkv3, dt, perm, 1.0) : tt_rand(cu, r, 2, nkv2, dt, perm, 1.0);
    tt go = tt_rand(cu, r, 3, no, dt, perm, 1.0);
    tt o = tt_new(cu, 3, no, dt, perm), l = tt_new(cu, 2, nl, LA_F32, 0);
    tt dq = tt_poison(cu, 3, nq, dt, perm);
    tt dkv = kv3 ? tt_poison(cu, 3, nkv3, dt, perm) : tt_poison(cu, 2, nkv2, dt, perm);
    /* indices: mostly valid (some repeated, a popular key 0), some −1 / >= L,
     * and the last row (T > 2) entirely invalid */
    tt ix = tt_new(cu, 2, ni, LA_F32, 0);
    int32_t *idx = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T * K));
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++) {
            const double u = la_rng_uniform(r);
            int32_t s = (int32_t)(la_rng_uniform(r) * L);
            if (u < 0.05) s = -1;
            else if (u < 0.08) s = (int32_t)(L + 3);
            else if (u < 0.2) s = 0;
            if (T > 2 && t == T - 1) s = -1;
            idx[t * K + j] = s;
        }
    bwd_put(cu, ix.d, idx, sizeof(int32_t) * (size_t)(T * K));
    la_tensor idx_t;
    la_tensor_init(&idx_t, ix.d, LA_I32, cu ? LA_DEVICE_CUDA : LA_DEVICE_CPU, 2, ni);
    const double scale = 1.0 / sqrt((double)Dqk);
#define KV(s, g, d) (kv3 ? at3(&kv, s, g, d) : kv.h[(s) * Dqk + (d)])
    double *Sc = dz(K);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            const int64_t g = h * G / Hq;
            double m = -INFINITY;
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = idx[t * K + j];
                if (s < 0 || s >= L) continue;
                double a = 0;
                for (int64_t d = 0; d < Dqk; d++) a += (double)at3(&q, t, h, d) * KV(s, g, d);
                Sc[j] = a * scale;
                if (Sc[j] > m) m = Sc[j];
            }
            double sum = 0;
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = idx[t * K + j];
                if (s >= 0 && s < L) sum += exp(Sc[j] - m);
            }
            const double lse = sum > 0 ? m + log(sum) : -INFINITY;
            l.h[t * Hq + h] = (float)lse;
            for (int64_t c = 0; c < dvv; c++) {
                double acc = 0;
                for (int64_t j = 0; j < K; j++) {
                    const int32_t s = idx[t * K + j];
                    if (s >= 0 && s < L) acc += exp(Sc[j] - lse) * KV(s, g, c);
                }
                const float f = (float)acc;
                o.h[(t * Hq + h) * dvv + c] = dt == LA_BF16 ? la_round_bf16(f) : f;
            }
        }
    tt_upload(&o);
    tt_upload(&l);
    const int nref = dt == LA_BF16 ? 2 : 1;
    double *ref[2][2] = {{0}};
    for (int rr = 0; rr < nref; rr++) {
        ref[rr][0] = dz(q.n), ref[rr][1] = dz(kv.n);
#define R_(x) (rr ? rb16(x) : (x))
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < Hq; h++) {
                const double lse = l.h[t * Hq + h];
                if (isinf(lse)) continue;
                const int64_t g = h * G / Hq;
                double Dd = 0;
                for (int64_t c = 0; c < dvv; c++) Dd += (double)at3(&go, t, h, c) * o.h[(t * Hq + h) * dvv + c];
                Dd = R_(Dd);
                for (int64_t j = 0; j < K; j++) {
                    const int32_t s = idx[t * K + j];
                    if (s < 0 || s >= L) continue;
                    double a = 0, dp = 0;
                    for (int64_t d = 0; d < Dqk; d++) a += (double)at3(&q, t, h, d) * KV(s, g, d);
                    for (int64_t c = 0; c < dvv; c++) dp += (double)at3(&go, t, h, c) * KV(s, g, c);
                    const double P = R_(exp(R_(a * scale) - lse));
                    const double dS = R_(P * (R_(dp) - Dd)) * scale;
                    for (int64_t d = 0; d < Dqk; d++) {
                        ref[rr][0][(t * Hq + h) * Dqk + d] += dS * KV(s, g, d);
                        ref[rr][1][(s * G + g) * Dqk + d] += dS * at3(&q, t, h, d);
                    }
                    for (int64_t c = 0; c < dvv; c++) ref[rr][1][(s * G + g) * Dqk + c] += P * at3(&go, t, h, c);
                }
            }
        if (rr) {
            for (int64_t j = 0; j < q.n; j++) ref[rr][0][j] = rb16(ref[rr][0][j]);
            for (int64_t j = 0; j < kv.n; j++) ref[rr][1][j] = rb16(ref[rr][1][j]);
        }
#undef R_
    }
#undef KV
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = dvv;
    float *saved[2] = {NULL, NULL};
    for (int call = 0; call < 2; call++) {
        la_status st = (call ? la_sparse_attention_backward : BWD_FIRST(cu, la_sparse_attention_backward, la_sparse_attention_backward_cuda))(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t,
                                                         &go.t, &dq.t, &dkv.t, ctx);
        if (!bwd_ok(cu, st, what)) break;
        if (call == 0) {
            check_grad(what, "dq", &dq, ref[0][0], ref[1][0]);
            check_grad(what, "dkv", &dkv, ref[0][1], ref[1][1]);
            saved[0] = tt_copy_host(&dq), saved[1] = tt_copy_host(&dkv);
            tt_repoison(&dq), tt_repoison(&dkv);
        } else {
            check_same(what, "dq", &dq, saved[0]);
            check_same(what, "dkv", &dkv, saved[1]);
        }
    }
    /* CUDA: the portable engine one query row per chunk of its per-slot
     * workspace (variant portable_rowchunk) equals the portable engine bit
     * for bit */
    float *port[2] = {NULL, NULL};
    if (cu && saved[0] && bo_use_variant("sparse_attn_bwd", "portable")) {
        tt_repoison(&dq), tt_repoison(&dkv);
        la_status st2 = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                     &dq.t, &dkv.t, ctx);
        if (bo_check_dev(st2, "sparse backward, portable")) {
            tt_download(&dq), tt_download(&dkv); /* this call's values, not the last checked */
            port[0] = tt_copy_host(&dq), port[1] = tt_copy_host(&dkv);
        }
        bo_use_variant("sparse_attn_bwd", NULL);
    }
    if (port[0] && bo_use_variant("sparse_attn_bwd", "portable_rowchunk")) {
        tt_repoison(&dq), tt_repoison(&dkv);
        la_status st2 = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                     &dq.t, &dkv.t, ctx);
        if (bo_check_dev(st2, "sparse backward, row chunks")) {
            check_same(what, "dq (row chunks)", &dq, port[0]);
            check_same(what, "dkv (row chunks)", &dkv, port[1]);
        }
        bo_use_variant("sparse_attn_bwd", NULL);
    }
    free(port[0]), free(port[1]);
    /* CUDA: the tensor-core path one token per workspace chunk (variant
     * mma_rowchunk) equals variant mma bit for bit */
    float *tc[2] = {NULL, NULL};
    if (cu && saved[0] && bo_use_variant("sparse_attn_bwd", "mma")) {
        tt_repoison(&dq), tt_repoison(&dkv);
        la_status st2 = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                     &dq.t, &dkv.t, ctx);
        if (bo_check_dev(st2, "sparse backward, mma")) {
            tt_download(&dq), tt_download(&dkv);
            tc[0] = tt_copy_host(&dq), tc[1] = tt_copy_host(&dkv);
        }
        bo_use_variant("sparse_attn_bwd", NULL);
    }
    if (tc[0] && bo_use_variant("sparse_attn_bwd", "mma_rowchunk")) {
        tt_repoison(&dq), tt_repoison(&dkv);
        la_status st2 = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                     &dq.t, &dkv.t, ctx);
        if (bo_check_dev(st2, "sparse backward, mma row chunks")) {
            check_same(what, "dq (mma row chunks)", &dq, tc[0]);
            check_same(what, "dkv (mma row chunks)", &dkv, tc[1]);
        }
        bo_use_variant("sparse_attn_bwd", NULL);
    }
    free(tc[0]), free(tc[1]);
    /* CUDA: the tensor-core path with fp32 atomics into dkv (variant
     * mma_atomic, not deterministic: the bound only) */
    if (cu && saved[0] && bo_use_variant("sparse_attn_bwd", "mma_atomic")) {
        tt_repoison(&dq), tt_repoison(&dkv);
        la_status st2 = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                     &dq.t, &dkv.t, ctx);
        if (bo_check_dev(st2, "sparse backward, mma_atomic")) {
            check_grad(what, "dq (mma_atomic)", &dq, ref[0][0], ref[1][0]);
            check_grad(what, "dkv (mma_atomic)", &dkv, ref[0][1], ref[1][1]);
        }
        bo_use_variant("sparse_attn_bwd", NULL);
    }
    if (cu && saved[1]) {
        ct cq = ct_of(&q, 0), ckv = ct_of(&kv, 0), co = ct_of(&o, 0), cl = ct_of(&l, 0),
           cg = ct_of(&go, 0), cdq = ct_of(&q, 1), cdkv = ct_of(&kv, 1);
        la_tensor ci;
        la_tensor_init(&ci, idx, LA_I32, LA_DEVICE_CPU, 2, ni);
        la_status sc = la_sparse_attention_backward(&p, &cq.t, &ckv.t, &ci, &co.t, &cl.t, &cg.t,
                                                    &cdq.t, &cdkv.t, NULL);
        CHECK(sc == LA_OK, "%s CPU: %s %s", what, la_status_string(sc), la_last_error());
        if (sc == LA_OK) {
            check_cpu(what, "dq", saved[0], &cdq, dt);
            check_cpu(what, "dkv", saved[1], &cdkv, dt);
        }
        ct_free(&cq), ct_free(&ckv), ct_free(&co), ct_free(&cl), ct_free(&cg), ct_free(&cdq),
            ct_free(&cdkv);
    }
    free(saved[0]), free(saved[1]);
    for (int rr = 0; rr < nref; rr++) free_all(ref[rr], 2);
    free(Sc), free(idx);
    tt_free(&q), tt_free(&kv), tt_free(&go), tt_free(&o), tt_free(&l), tt_free(&dq),
        tt_free(&dkv), tt_free(&ix);
}

static const char *const sm_variants[] = BWD_VARIANTS_SOFTMAX;
static const char *const sp_variants[] = BWD_VARIANTS_SPARSE;
#define NV(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The smallest CUDA call of each family (f32, zeros), through the public
 * entry point: its kernel choice under the variant forced in ctx. */
static la_status probe_softmax(la_context *ctx) {
    int64_t ne[4] = {1, 4, 1, 16}, nl[3] = {1, 4, 1};
    tt q = tt_new(1, 4, ne, LA_F32, 0), g = tt_new(1, 4, ne, LA_F32, 0);
    tt l = tt_new(1, 3, nl, LA_F32, 0);
    la_dev_memset(q.d, 0, (size_t)q.phys * 4);
    la_dev_memset(l.d, 0, (size_t)l.phys * 4);
    la_softmax_params p;
    la_softmax_params_init(&p);
    la_status s = la_softmax_backward(&p, &q.t, &q.t, &q.t, &q.t, &l.t, &q.t, &g.t, NULL, NULL, ctx);
    la_dev_synchronize();
    tt_free(&q), tt_free(&g), tt_free(&l);
    return s;
}
static la_status probe_sparse(la_context *ctx) {
    int64_t nq[3] = {2, 1, 16}, nkv[2] = {4, 16}, nl[2] = {2, 1}, ni[2] = {2, 2};
    /* the forward's output is an input here, but it may not alias q (the
     * forward's view checks apply): its own buffer, as d_out's */
    tt q = tt_new(1, 3, nq, LA_F32, 0), g = tt_new(1, 3, nq, LA_F32, 0);
    tt o = tt_new(1, 3, nq, LA_F32, 0), go = tt_new(1, 3, nq, LA_F32, 0);
    tt kv = tt_new(1, 2, nkv, LA_F32, 0), l = tt_new(1, 2, nl, LA_F32, 0);
    tt ix = tt_new(1, 2, ni, LA_F32, 0);
    la_dev_memset(q.d, 0, (size_t)q.phys * 4);
    la_dev_memset(o.d, 0, (size_t)o.phys * 4);
    la_dev_memset(go.d, 0, (size_t)go.phys * 4);
    la_dev_memset(kv.d, 0, (size_t)kv.phys * 4);
    la_dev_memset(l.d, 0, (size_t)l.phys * 4);
    la_dev_memset(ix.d, 0, (size_t)ix.phys * 4);
    la_tensor idx;
    la_tensor_init(&idx, ix.d, LA_I32, LA_DEVICE_CUDA, 2, ni);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = 16;
    la_status s = la_sparse_attention_backward(&p, &q.t, &kv.t, &idx, &o.t, &l.t, &go.t, &g.t, NULL, ctx);
    la_dev_synchronize();
    tt_free(&q), tt_free(&g), tt_free(&o), tt_free(&go), tt_free(&kv), tt_free(&l), tt_free(&ix);
    return s;
}

void cases_backward_attn(bo_list *L) {
    bo_add_probe(L, "softmax_bwd", probe_softmax);
    bo_add_probe(L, "sparse_attn_bwd", probe_sparse);
    /* softmax: cuda B Nq Nk H Hk D Dv causal dtype perm; small */
    const struct { sm_case c; int small; } sm[] = {
        {{0, 1, 1, 1, 1, 1, 16, 16, 0, LA_F32, 0}, 1},
        {{0, 1, 63, 65, 4, 2, 32, 48, 1, LA_F32, 1}, 1},
        {{0, 2, 65, 63, 2, 1, 63, 17, 1, LA_F32, 0}, 1}, /* first rows see no key */
        {{0, 1, 65, 65, 2, 2, 64, 64, 0, LA_BF16, 1}, 1},
        {{0, 1, 200, 300, 2, 1, 128, 64, 0, LA_F32, 1}, 0},
        {{0, 1, 1000, 1000, 2, 2, 64, 64, 0, LA_BF16, 1}, 0},
        /* the tensor-core path at D = Dv = 32 */
        {{0, 1, 63, 65, 4, 2, 32, 32, 1, LA_BF16, 1}, 1},
        {{0, 2, 65, 63, 2, 1, 32, 32, 1, LA_BF16, 0}, 1}, /* first rows see no key */
        /* the tensor-core path: bf16, D = Dv = 128 */
        {{0, 1, 1, 1, 1, 1, 128, 128, 0, LA_BF16, 0}, 1},
        {{0, 1, 63, 65, 4, 2, 128, 128, 1, LA_BF16, 1}, 1},
        {{0, 2, 65, 63, 2, 1, 128, 128, 1, LA_BF16, 0}, 1}, /* first rows see no key */
        {{0, 1, 130, 200, 2, 2, 128, 128, 0, LA_BF16, 1}, 0},
        {{0, 1, 1000, 1000, 2, 1, 128, 128, 1, LA_BF16, 0}, 0},
        {{0, 2, 1000, 1000, 2, 2, 128, 128, 0, LA_BF16, 1}, 0},
    };
    char name[BO_NAME_MAX];
    for (size_t i = 0; i < sizeof sm / sizeof sm[0]; i++) {
        sm_case c = sm[i].c;
        snprintf(name, sizeof name, "softmax B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld%s %s%s",
                 (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H, (long long)c.Hk,
                 (long long)c.D, (long long)c.Dv, c.causal ? " causal" : "", dtn(c.dt),
                 c.perm ? " perm" : "");
        bwd_add(L, "softmax_backward", "softmax_bwd", sm_variants, NV(sm_variants), sm[i].small,
                run_softmax, &c, sizeof c, name);
    }
    /* sparse: cuda T Hq Hkv(0 = [L,Dqk]) L k Dqk dv dtype perm; small */
    const struct { sp_case c; int small; } sp[] = {
        {{0, 1, 1, 0, 5, 4, 64, 32, LA_F32, 0}, 1},
        {{0, 63, 8, 0, 200, 40, 72, 64, LA_F32, 1}, 1},
        {{0, 65, 4, 2, 100, 17, 40, 24, LA_BF16, 0}, 1},
        {{0, 130, 16, 0, 1000, 64, 576, 512, LA_BF16, 1}, 0},
        /* the tensor-core path (variant mma): bf16, Dqk 576, dv 512, one kv
         * head ([L,576] unpadded or [L,1,576], permuted storage) */
        {{0, 1, 16, 1, 5, 1, 576, 512, LA_BF16, 1}, 1},
        {{0, 63, 16, 0, 200, 63, 576, 512, LA_BF16, 0}, 0},
        {{0, 65, 16, 1, 300, 64, 576, 512, LA_BF16, 1}, 0},
        {{0, 200, 16, 1, 4100, 20, 576, 512, LA_BF16, 1}, 0},
        {{0, 5, 128, 1, 4096, 100, 576, 512, LA_BF16, 1}, 0},
        {{0, 2, 16, 0, 4096, 2048, 576, 512, LA_BF16, 0}, 0},
        {{0, 2, 16, 0, 64, 65, 576, 512, LA_BF16, 0}, 0}, /* many repeated keys */
    };
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        sp_case c = sp[i].c;
        snprintf(name, sizeof name, "sparse T%lld Hq%lld Hkv%lld L%lld k%lld Dqk%lld dv%lld %s%s",
                 (long long)c.T, (long long)c.Hq, (long long)c.Hkv, (long long)c.L, (long long)c.K,
                 (long long)c.Dqk, (long long)c.dv, dtn(c.dt), c.perm ? " perm" : "");
        bwd_add(L, "sparse_attn_backward", "sparse_attn_bwd", sp_variants, NV(sp_variants),
                sp[i].small, run_sparse, &c, sizeof c, name);
    }
}
