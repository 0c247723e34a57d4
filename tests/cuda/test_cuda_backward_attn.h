/* Part of test_cuda_backward.c: softmax and sparse MLA attention (float64
 * references written out from P = exp(S − lse)), focused attention (central
 * finite differences of a float64 forward, which checks the gradient
 * without restating its derivation). */

static void free_all(double **p, int n) {
    for (int i = 0; i < n; i++) free(p[i]);
}
static double *dz(int64_t n) { return (double *)calloc((size_t)n, sizeof(double)); }
/* logical element (i0,i1,i2,i3) of a rank-4 / rank-3 test tensor */
static float at4(const tt *x, int64_t a, int64_t b, int64_t c, int64_t d) {
    return x->h[((a * x->ne[1] + b) * x->ne[2] + c) * x->ne[3] + d];
}
static float at3(const tt *x, int64_t a, int64_t b, int64_t c) {
    return x->h[(a * x->ne[1] + b) * x->ne[2] + c];
}

/* ---- softmax ------------------------------------------------------------------------ */
static void t_softmax_v(la_rng *r, la_context *ctx, int64_t B, int64_t Nq, int64_t Nk, int64_t H,
                        int64_t Hk, int64_t D, int64_t Dv, int causal, la_dtype dt, int perm,
                        const char *variant) {
    char what[160];
    snprintf(what, sizeof what, "softmax[%s] B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld%s %s%s",
             variant ? variant : "default", (long long)B, (long long)Nq, (long long)Nk,
             (long long)H, (long long)Hk, (long long)D, (long long)Dv, causal ? " causal" : "",
             dt == LA_BF16 ? "bf16" : "f32", perm ? " perm" : "");
    la_context_set_variant(ctx, "softmax_bwd", variant);
    int64_t nq[4] = {B, Nq, H, D}, nk[4] = {B, Nk, Hk, D}, nv[4] = {B, Nk, Hk, Dv},
            no[4] = {B, Nq, H, Dv}, nl[3] = {B, Nq, H};
    tt q = tt_rand(r, 4, nq, dt, perm, 1.0), k = tt_rand(r, 4, nk, dt, perm, 1.0);
    tt v = tt_rand(r, 4, nv, dt, perm, 1.0), go = tt_rand(r, 4, no, dt, perm, 1.0);
    tt o = tt_new(4, no, dt, perm), l = tt_new(3, nl, LA_F32, 0);
    tt dq = tt_poison(4, nq, dt, perm), dk = tt_poison(4, nk, dt, perm),
       dv = tt_poison(4, nv, dt, perm);
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
        la_status st = (call ? la_softmax_backward : la_softmax_backward_cuda)(&p, &q.t, &k.t, &v.t, &o.t, &l.t, &go.t, &dq.t,
                                                &dk.t, &dv.t, ctx);
        CHECK(st == LA_OK, "%s: %s %s", what, la_status_string(st), la_last_error());
        if (st != LA_OK) break;
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
    if (saved[2]) {
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
    la_context_set_variant(ctx, "softmax_bwd", NULL);
}
/* the default choice and, where it differs (bf16, D = Dv = 128: the
 * tensor-core kernels), the portable engine forced through the context */
static void t_softmax(la_rng *r, la_context *ctx, int64_t B, int64_t Nq, int64_t Nk, int64_t H,
                      int64_t Hk, int64_t D, int64_t Dv, int causal, la_dtype dt, int perm) {
    t_softmax_v(r, ctx, B, Nq, Nk, H, Hk, D, Dv, causal, dt, perm, NULL);
    if (dt == LA_BF16 && D == Dv && (D == 32 || D == 64 || D == 128))
        t_softmax_v(r, ctx, B, Nq, Nk, H, Hk, D, Dv, causal, dt, perm, "portable");
}

/* ---- sparse MLA -------------------------------------------------------------------- */
static void t_sparse(la_rng *r, la_context *ctx, int64_t T, int64_t Hq, int64_t Hkv, int64_t L,
                     int64_t K, int64_t Dqk, int64_t dvv, la_dtype dt, int perm) {
    char what[160];
    snprintf(what, sizeof what, "sparse T%lld Hq%lld Hkv%lld L%lld k%lld Dqk%lld dv%lld %s%s",
             (long long)T, (long long)Hq, (long long)Hkv, (long long)L, (long long)K,
             (long long)Dqk, (long long)dvv, dt == LA_BF16 ? "bf16" : "f32", perm ? " perm" : "");
    const int kv3 = Hkv > 0;
    const int64_t G = kv3 ? Hkv : 1;
    int64_t nq[3] = {T, Hq, Dqk}, nkv3[3] = {L, G, Dqk}, nkv2[2] = {L, Dqk}, no[3] = {T, Hq, dvv},
            nl[2] = {T, Hq}, ni[2] = {T, K};
    tt q = tt_rand(r, 3, nq, dt, perm, 1.0);
    tt kv = kv3 ? tt_rand(r, 3, nkv3, dt, perm, 1.0) : tt_rand(r, 2, nkv2, dt, perm, 1.0);
    tt go = tt_rand(r, 3, no, dt, perm, 1.0);
    tt o = tt_new(3, no, dt, perm), l = tt_new(2, nl, LA_F32, 0);
    tt dq = tt_poison(3, nq, dt, perm);
    tt dkv = kv3 ? tt_poison(3, nkv3, dt, perm) : tt_poison(2, nkv2, dt, perm);
    /* indices: mostly valid (some repeated, a popular key 0), some −1 / >= L,
     * and the last row (T > 2) entirely invalid */
    tt ix = tt_new(2, ni, LA_F32, 0);
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
    dup_(ix.d, idx, sizeof(int32_t) * (size_t)(T * K));
    la_tensor idx_t;
    la_tensor_init(&idx_t, ix.d, LA_I32, LA_DEVICE_CUDA, 2, ni);
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
        la_status st = (call ? la_sparse_attention_backward : la_sparse_attention_backward_cuda)(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t,
                                                         &go.t, &dq.t, &dkv.t, ctx);
        CHECK(st == LA_OK, "%s: %s %s", what, la_status_string(st), la_last_error());
        if (st != LA_OK) break;
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
    /* one query row per chunk of the per-slot workspace: bit-identical */
    la_context_set_variant(ctx, "sparse_attn_bwd", "portable_rowchunk");
    tt_repoison(&dq), tt_repoison(&dkv);
    la_status st2 = la_sparse_attention_backward_cuda(&p, &q.t, &kv.t, &idx_t, &o.t, &l.t, &go.t,
                                                      &dq.t, &dkv.t, ctx);
    la_context_set_variant(ctx, "sparse_attn_bwd", NULL);
    CHECK(st2 == LA_OK, "%s rowchunk: %s %s", what, la_status_string(st2), la_last_error());
    if (st2 == LA_OK && saved[0]) {
        check_same(what, "dq (row chunks)", &dq, saved[0]);
        check_same(what, "dkv (row chunks)", &dkv, saved[1]);
    }
    if (saved[1]) {
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

/* ---- focused --------------------------------------------------------------------------
 * Forward in float64 of both variants; the reference gradient is the central
 * difference of L = Σ dO·o in every input element. */
typedef struct fo_in {
    int blog;
    int64_t B, N, H, D, Dv, Hm, Wm, ks;
    double p, eps;
    double *q, *k, *v, *conv, *bias, *sp, *focus; /* logical arrays; NULL = absent */
    const double *g;
} fo_in;

static double fo_loss(const fo_in *F) {
    const int64_t B = F->B, N = F->N, H = F->H, D = F->D, Dv = F->Dv, C = H * D, r = F->ks / 2;
    double *qt = dz(N * C), *kt = dz(N * C), *S = dz(D * Dv), *z = dz(D);
    double loss = 0;
    for (int64_t b = 0; b < B; b++) {
        const double *qb = F->q + b * N * C, *kb = F->k + b * N * C, *vb = F->v + b * N * H * Dv;
        if (!F->blog) {
            for (int pass = 0; pass < 2; pass++) {
                const double *x = pass ? kb : qb;
                double *o = pass ? kt : qt;
                for (int64_t n = 0; n < N; n++) {
                    double n1 = 0, ny = 0;
                    for (int64_t c = 0; c < C; c++) {
                        const double s = F->sp ? F->sp[c] : 0.0;
                        const double spv = s > 0 ? s + log1p(exp(-s)) : log1p(exp(s));
                        const double xp = ((x[n * C + c] > 0 ? x[n * C + c] : 0) + 1e-6) / spv;
                        o[n * C + c] = xp;
                        n1 += xp * xp;
                    }
                    for (int64_t c = 0; c < C; c++) ny += pow(o[n * C + c], 2 * F->p);
                    for (int64_t c = 0; c < C; c++)
                        o[n * C + c] = sqrt(n1) * pow(o[n * C + c], F->p) / sqrt(ny);
                }
            }
        } else {
            const double qs = 1.0 / sqrt((double)D);
            for (int64_t e = 0; e < N * C; e++) {
                const double x = qb[e] * qs;
                qt[e] = (x > 0 ? x : 0) + 1;
            }
            for (int64_t n = 0; n < N; n++) {
                const int64_t y = n / F->Wm, xx = n % F->Wm;
                for (int64_t c = 0; c < C; c++) {
                    double acc = 0;
                    if (!F->conv) {
                        acc = (kb[n * C + c] > 0 ? kb[n * C + c] : 0) + 1;
                    } else {
                        for (int64_t a = 0; a < F->ks; a++)
                            for (int64_t cc = 0; cc < F->ks; cc++) {
                                const int64_t yy = y + a - r, x2 = xx + cc - r;
                                if (yy < 0 || yy >= F->Hm || x2 < 0 || x2 >= F->Wm) continue;
                                const double kx = kb[(yy * F->Wm + x2) * C + c];
                                acc += F->conv[(c * F->ks + a) * F->ks + cc] * ((kx > 0 ? kx : 0) + 1);
                            }
                    }
                    kt[n * C + c] = acc * (F->focus ? F->focus[c / D] : 2.0);
                }
            }
        }
        const double red = F->blog ? 1.0 : 1.0 / (double)N;
        for (int64_t h = 0; h < H; h++) {
            memset(S, 0, sizeof(double) * (size_t)(D * Dv));
            memset(z, 0, sizeof(double) * (size_t)D);
            for (int64_t n = 0; n < N; n++)
                for (int64_t d = 0; d < D; d++) {
                    const double kk = kt[n * C + h * D + d] * red;
                    z[d] += kk;
                    for (int64_t c = 0; c < Dv; c++) S[d * Dv + c] += kk * vb[(n * H + h) * Dv + c];
                }
            for (int64_t n = 0; n < N; n++) {
                double den = 0;
                for (int64_t d = 0; d < D; d++) den += qt[n * C + h * D + d] * z[d];
                den += F->eps;
                const int64_t y = n / F->Wm, xx = n % F->Wm;
                for (int64_t c = 0; c < Dv; c++) {
                    double num = 0;
                    for (int64_t d = 0; d < D; d++) num += qt[n * C + h * D + d] * S[d * Dv + c];
                    double o = num / den;
                    if (!F->blog && F->conv) {
                        o += F->bias ? F->bias[c] : 0;
                        for (int64_t a = 0; a < F->ks; a++)
                            for (int64_t cc = 0; cc < F->ks; cc++) {
                                const int64_t yy = y + a - r, x2 = xx + cc - r;
                                if (yy < 0 || yy >= F->Hm || x2 < 0 || x2 >= F->Wm) continue;
                                o += F->conv[(c * F->ks + a) * F->ks + cc] * vb[((yy * F->Wm + x2) * H + h) * Dv + c];
                            }
                    }
                    loss += F->g[((b * N + n) * H + h) * Dv + c] * o;
                }
            }
        }
    }
    free(qt), free(kt), free(S), free(z);
    return loss;
}
static void fo_fd(fo_in *F, double *x, int64_t n, double *grad) {
    for (int64_t i = 0; i < n; i++) {
        const double x0 = x[i], h = 1e-5 * (fabs(x0) > 1 ? fabs(x0) : 1);
        x[i] = x0 + h;
        const double lp = fo_loss(F);
        x[i] = x0 - h;
        const double lm = fo_loss(F);
        x[i] = x0;
        grad[i] = (lp - lm) / (2 * h);
    }
}
static double *to_d(const tt *x) {
    double *d = dz(x->n);
    for (int64_t i = 0; i < x->n; i++) d[i] = x->h[i];
    return d;
}
static void t_focused(la_rng *r, la_context *ctx, int blog, int64_t B, int64_t Hm, int64_t Wm,
                      int64_t H, int64_t D, int64_t Dv, int64_t ks, int with_params, la_dtype dt,
                      int perm) {
    const int64_t N = Hm * Wm, C = H * D;
    char what[160];
    snprintf(what, sizeof what, "focused %s B%lld %lldx%lld H%lld D%lld Dv%lld k%lld%s %s%s",
             blog ? "blog" : "flatten", (long long)B, (long long)Hm, (long long)Wm, (long long)H,
             (long long)D, (long long)Dv, (long long)ks, with_params ? " params" : "",
             dt == LA_BF16 ? "bf16" : "f32", perm ? " perm" : "");
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    tt q = tt_rand(r, 4, nq, dt, perm, 1.0), k = tt_rand(r, 4, nq, dt, perm, 1.0);
    tt v = tt_rand(r, 4, nv, dt, perm, 1.0), go = tt_rand(r, 4, nv, dt, perm, 1.0);
    tt dq = tt_poison(4, nq, dt, perm), dk = tt_poison(4, nq, dt, perm), dv = tt_poison(4, nv, dt, perm);
    const int64_t Cc = blog ? C : D;
    int64_t ncv[3] = {Cc, ks, ks}, nb1[1] = {D}, nsp[1] = {C}, nf[1] = {H};
    tt conv = {0}, bias = {0}, sp = {0}, foc = {0}, dconv = {0}, dbias = {0}, dsp = {0}, dfoc = {0};
    const int has_conv = ks > 0;
    if (has_conv) {
        conv = tt_rand(r, 3, ncv, LA_F32, 0, 0.3), dconv = tt_poison(3, ncv, LA_F32, 0);
        /* blog: positive weights, so that K̂ is a valid (positive) key map and
         * the denominators stay away from 0 (signed K̂ makes q̃·ẑ cancel) */
        if (blog) {
            for (int64_t i = 0; i < conv.n; i++) conv.h[i] = (float)(0.05 + 0.3 * la_rng_uniform(r));
            tt_upload(&conv);
        }
    }
    if (with_params && !blog) {
        bias = tt_rand(r, 1, nb1, LA_F32, 0, 0.5), dbias = tt_poison(1, nb1, LA_F32, 0);
        sp = tt_rand(r, 1, nsp, LA_F32, 0, 0.5), dsp = tt_poison(1, nsp, LA_F32, 0);
    }
    if (with_params && blog) {
        foc = tt_new(1, nf, LA_F32, 0);
        for (int64_t h = 0; h < H; h++) foc.h[h] = (float)(0.5 + la_rng_uniform(r));
        tt_upload(&foc);
        dfoc = tt_poison(1, nf, LA_F32, 0);
    }
    if (!has_conv && !blog && with_params) { /* bias only exists with the conv */
        tt_free(&bias), tt_free(&dbias);
        memset(&bias, 0, sizeof bias), memset(&dbias, 0, sizeof dbias);
    }
    /* float64 reference by central differences */
    fo_in F;
    memset(&F, 0, sizeof F);
    F.blog = blog, F.B = B, F.N = N, F.H = H, F.D = D, F.Dv = Dv, F.Hm = Hm, F.Wm = Wm;
    /* focus cancels between numerator and denominator except against eps, so
     * d_focus is eps-sized: the blog cases with params use an eps comparable
     * to the denominators (N·D) to make it measurable */
    const double eps = (blog && with_params) ? (double)(N * D) : 1e-6;
    F.ks = has_conv ? ks : 1, F.p = 3.0, F.eps = eps;
    F.q = to_d(&q), F.k = to_d(&k), F.v = to_d(&v);
    double *gd = to_d(&go);
    F.g = gd;
    if (has_conv) F.conv = to_d(&conv);
    if (bias.h) F.bias = to_d(&bias);
    if (sp.h) F.sp = to_d(&sp);
    if (foc.h) F.focus = to_d(&foc);
    double *rq = dz(q.n), *rk = dz(k.n), *rv = dz(v.n);
    double *rc = has_conv ? dz(conv.n) : NULL, *rb = bias.h ? dz(bias.n) : NULL;
    double *rs = sp.h ? dz(sp.n) : NULL, *rf = foc.h ? dz(foc.n) : NULL;
    fo_fd(&F, F.q, q.n, rq);
    fo_fd(&F, F.k, k.n, rk);
    fo_fd(&F, F.v, v.n, rv);
    if (rc) fo_fd(&F, F.conv, conv.n, rc);
    if (rb) fo_fd(&F, F.bias, bias.n, rb);
    if (rs) fo_fd(&F, F.sp, sp.n, rs);
    if (rf) fo_fd(&F, F.focus, foc.n, rf);
    /* bf16: twice the error of the float64 gradient rounded to bf16 */
    double *bq = NULL, *bk = NULL, *bv = NULL;
    if (dt == LA_BF16) {
        bq = dz(q.n), bk = dz(k.n), bv = dz(v.n);
        for (int64_t i = 0; i < q.n; i++) bq[i] = rb16(rq[i]), bk[i] = rb16(rk[i]);
        for (int64_t i = 0; i < v.n; i++) bv[i] = rb16(rv[i]);
    }
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
    p.map_h = Hm, p.map_w = Wm;
    p.eps = (float)eps;
    float *saved[3] = {NULL, NULL, NULL};
    for (int call = 0; call < 2; call++) {
        la_status st = (call ? la_focused_backward : la_focused_backward_cuda)(
            &p, &q.t, &k.t, &v.t, has_conv ? &conv.t : NULL, bias.h ? &bias.t : NULL,
            sp.h ? &sp.t : NULL, foc.h ? &foc.t : NULL, NULL, &go.t, &dq.t, &dk.t, &dv.t,
            has_conv ? &dconv.t : NULL, bias.h ? &dbias.t : NULL, sp.h ? &dsp.t : NULL,
            foc.h ? &dfoc.t : NULL, ctx);
        CHECK(st == LA_OK, "%s: %s %s", what, la_status_string(st), la_last_error());
        if (st != LA_OK) break;
        if (call == 0) {
            check_grad(what, "dq", &dq, rq, bq);
            check_grad(what, "dk", &dk, rk, bk);
            check_grad(what, "dv", &dv, rv, bv);
            if (rc) check_grad(what, "d_conv", &dconv, rc, NULL);
            if (rb) check_grad(what, "d_conv_bias", &dbias, rb, NULL);
            if (rs) check_grad(what, "d_softplus_param", &dsp, rs, NULL);
            if (rf) check_grad(what, "d_focus", &dfoc, rf, NULL);
            saved[0] = tt_copy_host(&dq), saved[1] = tt_copy_host(&dk), saved[2] = tt_copy_host(&dv);
            tt_repoison(&dq), tt_repoison(&dk), tt_repoison(&dv);
        } else {
            check_same(what, "dq", &dq, saved[0]);
            check_same(what, "dk", &dk, saved[1]);
            check_same(what, "dv", &dv, saved[2]);
        }
    }
    if (saved[2]) {
        ct cq = ct_of(&q, 0), ck = ct_of(&k, 0), cv = ct_of(&v, 0), cg = ct_of(&go, 0);
        ct cdq = ct_of(&q, 1), cdk = ct_of(&k, 1), cdv = ct_of(&v, 1);
        ct cc = {0}, cb = {0}, cs = {0}, cf = {0}, cdc = {0}, cdb = {0}, cds = {0}, cdf = {0};
        if (has_conv) cc = ct_of(&conv, 0), cdc = ct_of(&conv, 1);
        if (bias.h) cb = ct_of(&bias, 0), cdb = ct_of(&bias, 1);
        if (sp.h) cs = ct_of(&sp, 0), cds = ct_of(&sp, 1);
        if (foc.h) cf = ct_of(&foc, 0), cdf = ct_of(&foc, 1);
        la_status sc = la_focused_backward(
            &p, &cq.t, &ck.t, &cv.t, has_conv ? &cc.t : NULL, bias.h ? &cb.t : NULL,
            sp.h ? &cs.t : NULL, foc.h ? &cf.t : NULL, NULL, &cg.t, &cdq.t, &cdk.t, &cdv.t,
            has_conv ? &cdc.t : NULL, bias.h ? &cdb.t : NULL, sp.h ? &cds.t : NULL,
            foc.h ? &cdf.t : NULL, NULL);
        CHECK(sc == LA_OK, "%s CPU: %s %s", what, la_status_string(sc), la_last_error());
        if (sc == LA_OK) {
            check_cpu(what, "dq", saved[0], &cdq, dt);
            check_cpu(what, "dk", saved[1], &cdk, dt);
            check_cpu(what, "dv", saved[2], &cdv, dt);
        }
        ct_free(&cq), ct_free(&ck), ct_free(&cv), ct_free(&cg), ct_free(&cdq), ct_free(&cdk),
            ct_free(&cdv);
        if (has_conv) ct_free(&cc), ct_free(&cdc);
        if (bias.h) ct_free(&cb), ct_free(&cdb);
        if (sp.h) ct_free(&cs), ct_free(&cds);
        if (foc.h) ct_free(&cf), ct_free(&cdf);
    }
    for (int i = 0; i < 3; i++) free(saved[i]);
    free(F.q), free(F.k), free(F.v), free(gd), free(F.conv), free(F.bias), free(F.sp), free(F.focus);
    free(rq), free(rk), free(rv), free(rc), free(rb), free(rs), free(rf), free(bq), free(bk), free(bv);
    tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&go), tt_free(&dq), tt_free(&dk), tt_free(&dv);
    if (has_conv) tt_free(&conv), tt_free(&dconv);
    if (bias.h) tt_free(&bias), tt_free(&dbias);
    if (sp.h) tt_free(&sp), tt_free(&dsp);
    if (foc.h) tt_free(&foc), tt_free(&dfoc);
}

static void run_attn_tests(la_rng *r, la_context *ctx) {
    /* softmax: B Nq Nk H Hk D Dv causal dtype perm */
    t_softmax(r, ctx, 1, 1, 1, 1, 1, 16, 16, 0, LA_F32, 0);
    t_softmax(r, ctx, 1, 63, 65, 4, 2, 32, 48, 1, LA_F32, 1);
    t_softmax(r, ctx, 2, 65, 63, 2, 1, 63, 17, 1, LA_F32, 0); /* first rows see no key */
    t_softmax(r, ctx, 1, 65, 65, 2, 2, 64, 64, 0, LA_BF16, 1);
    if (!small_only) {
        t_softmax(r, ctx, 1, 200, 300, 2, 1, 128, 64, 0, LA_F32, 1);
        t_softmax(r, ctx, 1, 1000, 1000, 2, 2, 64, 64, 0, LA_BF16, 1);
    }
    /* the tensor-core path at D = Dv = 32 */
    t_softmax(r, ctx, 1, 63, 65, 4, 2, 32, 32, 1, LA_BF16, 1);
    t_softmax(r, ctx, 2, 65, 63, 2, 1, 32, 32, 1, LA_BF16, 0); /* first rows see no key */
    /* the tensor-core path: bf16, D = Dv = 128 */
    t_softmax(r, ctx, 1, 1, 1, 1, 1, 128, 128, 0, LA_BF16, 0);
    t_softmax(r, ctx, 1, 63, 65, 4, 2, 128, 128, 1, LA_BF16, 1);
    t_softmax(r, ctx, 2, 65, 63, 2, 1, 128, 128, 1, LA_BF16, 0); /* first rows see no key */
    if (!small_only) t_softmax(r, ctx, 1, 130, 200, 2, 2, 128, 128, 0, LA_BF16, 1);
#ifndef LA_BWD_EMU
    if (!small_only) {
        t_softmax(r, ctx, 1, 1000, 1000, 2, 1, 128, 128, 1, LA_BF16, 0);
        t_softmax(r, ctx, 2, 1000, 1000, 2, 2, 128, 128, 0, LA_BF16, 1);
    }
#endif
    if (getenv("LA_BWD_SOFTMAX_ONLY")) return;
    /* sparse: T Hq Hkv(0 = [L,Dqk]) L k Dqk dv dtype perm */
    t_sparse(r, ctx, 1, 1, 0, 5, 4, 64, 32, LA_F32, 0);
    t_sparse(r, ctx, 63, 8, 0, 200, 40, 72, 64, LA_F32, 1);
    t_sparse(r, ctx, 65, 4, 2, 100, 17, 40, 24, LA_BF16, 0);
    if (!small_only) t_sparse(r, ctx, 130, 16, 0, 1000, 64, 576, 512, LA_BF16, 1);
    /* focused: blog B Hm Wm H D Dv ks(0 = no conv) params dtype perm */
    t_focused(r, ctx, 0, 1, 3, 3, 1, 16, 16, 3, 1, LA_F32, 0);
    t_focused(r, ctx, 0, 2, 9, 7, 2, 16, 16, 5, 1, LA_F32, 1);
    t_focused(r, ctx, 0, 1, 5, 6, 2, 8, 12, 0, 1, LA_F32, 0);
    t_focused(r, ctx, 0, 1, 8, 8, 2, 16, 16, 3, 0, LA_BF16, 1);
    t_focused(r, ctx, 1, 1, 9, 7, 2, 16, 16, 3, 1, LA_F32, 1);
    t_focused(r, ctx, 1, 2, 4, 5, 2, 8, 12, 0, 0, LA_F32, 0);
    t_focused(r, ctx, 1, 1, 8, 8, 2, 16, 16, 3, 1, LA_BF16, 0);
}
