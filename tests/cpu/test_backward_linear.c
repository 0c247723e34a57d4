/* Linear attention backward (TRAINING.md §1) on the CPU against a plain
 * float64 reference (token by token; itself spot-checked by central finite
 * differences of the loss Σ dO∘O + <dS_out, S_N> + <dz_out, z_N>): every
 * feature map, normalize on/off, non-causal and causal (chunk sizes, initial
 * state in, final-state gradient in, initial-state gradient out), odd sizes,
 * Dv != D, strided views, f64, poisoned gradients, NULL gradients,
 * determinism and bad input. */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct lin_dims {
    int64_t B, N, H, D, Dv;
    la_feature f;
    int causal, normalize;
    double eps, sq;
} lin_dims;

static double dfeat(la_feature f, double x) {
    switch (f) {
    case LA_FEATURE_IDENTITY: return 1;
    case LA_FEATURE_ELU1: return x >= 0 ? 1 : exp(x);
    default: return x > 0 ? 1 : 0;
    }
}

#define IX4(b, t, h, d, N, H, D) ((((b) * (N) + (t)) * (H) + (h)) * (D) + (d))

/* Forward + backward in float64 for one call. x = {q, k, v, S0, z0} (S0/z0
 * may be NULL), dO, dSf, dzf (may be NULL). Gradients g = {dq, dk, dv, dS0,
 * dz0} (any may be NULL). Returns the loss. */
static double ref_linear(const lin_dims *m, const double *q, const double *k, const double *v,
                         const double *S0, const double *z0, const double *dO,
                         const double *dSf, const double *dzf, double *dq, double *dk,
                         double *dv, double *dS0, double *dz0) {
    const int64_t N = m->N, H = m->H, D = m->D, Dv = m->Dv;
    double *S = malloc(D * Dv * 8), *z = malloc(D * 8), *qt = malloc(D * 8);
    double *g = malloc(N * Dv * 8), *dd = malloc(N * 8), *dS = malloc(D * Dv * 8), *dz = malloc(D * 8);
    double loss = 0;
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < H; h++) {
            const int64_t sb = (b * H + h) * D;
            for (int64_t d = 0; d < D; d++) {
                z[d] = z0 ? z0[sb + d] : 0;
                for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] = S0 ? S0[(sb + d) * Dv + e] : 0;
            }
            /* non-causal: the totals first */
            for (int64_t t = 0; t < N && !m->causal; t++)
                for (int64_t d = 0; d < D; d++) {
                    double kd = la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                    z[d] += kd;
                    for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] += kd * v[IX4(b, t, h, e, N, H, Dv)];
                }
            for (int64_t t = 0; t < N; t++) {
                if (m->causal)
                    for (int64_t d = 0; d < D; d++) {
                        double kd = la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                        z[d] += kd;
                        for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] += kd * v[IX4(b, t, h, e, N, H, Dv)];
                    }
                double den = m->eps;
                for (int64_t d = 0; d < D; d++) {
                    qt[d] = m->sq * la_ref_feature(m->f, q[IX4(b, t, h, d, N, H, D)]);
                    den += qt[d] * z[d];
                }
                if (!m->normalize) den = 1;
                double go = 0;
                for (int64_t e = 0; e < Dv; e++) {
                    double num = 0;
                    for (int64_t d = 0; d < D; d++) num += qt[d] * S[d * Dv + e];
                    const double o = num / den, gg = dO[IX4(b, t, h, e, N, H, Dv)];
                    loss += o * gg;
                    go += gg * o;
                    g[t * Dv + e] = gg / den;
                }
                dd[t] = m->normalize ? -go / den : 0;
                /* dq̃ = S g + dden z */
                for (int64_t d = 0; d < D && dq; d++) {
                    double acc = dd[t] * z[d];
                    for (int64_t e = 0; e < Dv; e++) acc += S[d * Dv + e] * g[t * Dv + e];
                    const double x = q[IX4(b, t, h, d, N, H, D)];
                    dq[IX4(b, t, h, d, N, H, D)] = acc * m->sq * dfeat(m->f, x);
                }
            }
            for (int64_t d = 0; d < D; d++) {
                loss += dzf ? dzf[sb + d] * z[d] : 0;
                for (int64_t e = 0; e < Dv; e++) loss += dSf ? dSf[(sb + d) * Dv + e] * S[d * Dv + e] : 0;
            }
            /* the reverse accumulation of dS̄, dz̄ (non-causal: totals first) */
            for (int64_t d = 0; d < D; d++) {
                dz[d] = dzf ? dzf[sb + d] : 0;
                for (int64_t e = 0; e < Dv; e++) dS[d * Dv + e] = dSf ? dSf[(sb + d) * Dv + e] : 0;
            }
            for (int pass = m->causal ? 1 : 0; pass < 2; pass++)
                for (int64_t t = N - 1; t >= 0; t--) {
                    if (pass == 0 || m->causal)
                        for (int64_t d = 0; d < D; d++) {
                            const double qd = m->sq * la_ref_feature(m->f, q[IX4(b, t, h, d, N, H, D)]);
                            dz[d] += dd[t] * qd;
                            for (int64_t e = 0; e < Dv; e++) dS[d * Dv + e] += qd * g[t * Dv + e];
                        }
                    if (pass == 0) continue;
                    for (int64_t d = 0; d < D; d++) {
                        const double x = k[IX4(b, t, h, d, N, H, D)], kd = la_ref_feature(m->f, x);
                        double acc = dz[d];
                        for (int64_t e = 0; e < Dv; e++) acc += dS[d * Dv + e] * v[IX4(b, t, h, e, N, H, Dv)];
                        if (dk) dk[IX4(b, t, h, d, N, H, D)] = acc * dfeat(m->f, x);
                        (void)kd;
                    }
                    for (int64_t e = 0; e < Dv && dv; e++) {
                        double acc = 0;
                        for (int64_t d = 0; d < D; d++)
                            acc += dS[d * Dv + e] * la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                        dv[IX4(b, t, h, e, N, H, Dv)] = acc;
                    }
                }
            for (int64_t d = 0; d < D; d++) {
                if (dz0) dz0[sb + d] = dz[d];
                for (int64_t e = 0; e < Dv && dS0; e++) dS0[(sb + d) * Dv + e] = dS[d * Dv + e];
            }
        }
    free(S), free(z), free(qt), free(g), free(dd), free(dS), free(dz);
    return loss;
}

/* The reference gradients against central differences (every input entry). */
static void test_reference_fd(la_rng *rng, la_feature f, int causal, int normalize) {
    lin_dims m = {1, 7, 2, 3, 4, f, causal, normalize, 1e-6, 0.7};
    const int64_t nq = m.B * m.N * m.H * m.D, nv = m.B * m.N * m.H * m.Dv;
    const int64_t nS = m.B * m.H * m.D * m.Dv, nz = m.B * m.H * m.D;
    const int64_t n[5] = {nq, nq, nv, nS, nz};
    double *x[5], *g[5], *fd[5];
    for (int a = 0; a < 5; a++) {
        x[a] = malloc(n[a] * 8), g[a] = malloc(n[a] * 8), fd[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) {
            x[a][i] = la_rng_normal(rng);
            /* keep entries away from the kinks of the relu family */
            if (fabs(x[a][i]) < 0.05) x[a][i] += 0.1;
            if (a == 4) x[a][i] = 3 + la_rng_uniform(rng); /* z: a positive denominator */
            if (f == LA_FEATURE_IDENTITY && normalize && a < 2) x[a][i] = fabs(x[a][i]) + 0.2;
        }
    }
    double *dO = malloc(nv * 8), *dSf = malloc(nS * 8), *dzf = malloc(nz * 8);
    for (int64_t i = 0; i < nv; i++) dO[i] = la_rng_normal(rng);
    for (int64_t i = 0; i < nS; i++) dSf[i] = la_rng_normal(rng);
    for (int64_t i = 0; i < nz; i++) dzf[i] = la_rng_normal(rng);
    const int na = causal ? 5 : 3;
    double *S0 = causal ? x[3] : NULL, *z0 = causal ? x[4] : NULL;
    ref_linear(&m, x[0], x[1], x[2], S0, z0, dO, causal ? dSf : NULL, causal ? dzf : NULL, g[0],
               g[1], g[2], g[3], g[4]);
    const double hs = 1e-6;
    for (int a = 0; a < na; a++) {
        for (int64_t i = 0; i < n[a]; i++) {
            const double keep = x[a][i];
            x[a][i] = keep + hs;
            double lp = ref_linear(&m, x[0], x[1], x[2], S0, z0, dO, causal ? dSf : NULL,
                                   causal ? dzf : NULL, NULL, NULL, NULL, NULL, NULL);
            x[a][i] = keep - hs;
            double lm = ref_linear(&m, x[0], x[1], x[2], S0, z0, dO, causal ? dSf : NULL,
                                   causal ? dzf : NULL, NULL, NULL, NULL, NULL, NULL);
            x[a][i] = keep;
            fd[a][i] = (lp - lm) / (2 * hs);
        }
        double e = frob_rel_err_d(g[a], fd[a], n[a]);
        CHECK(e < 1e-6, "linear reference %s causal=%d norm=%d: grad %d vs finite differences %.3g",
              la_feature_name(f), causal, normalize, a, e);
    }
    for (int a = 0; a < 5; a++) free(x[a]), free(g[a]), free(fd[a]);
    free(dO), free(dSf), free(dzf);
}

typedef struct lin_case {
    lin_dims m;
    int64_t chunk;
    la_dtype dt;
    int layout, threads, state;
} lin_case;

static double *to_d(const float *x, int64_t n) {
    double *r = malloc((size_t)n * 8);
    for (int64_t i = 0; i < n; i++) r[i] = x[i];
    return r;
}

static void run_case(la_rng *rng, lin_case c) {
    const lin_dims m = c.m;
    const int64_t nq = m.B * m.N * m.H * m.D, nv = m.B * m.N * m.H * m.Dv;
    const int64_t nS = m.B * m.H * m.D * m.Dv, nz = m.B * m.H * m.D;
    float *q = malloc(nq * 4), *k = malloc(nq * 4), *v = malloc(nv * 4), *g = malloc(nv * 4);
    float *S0 = malloc(nS * 4), *z0 = malloc(nz * 4), *gS = malloc(nS * 4), *gz = malloc(nz * 4);
    la_fill_normal(rng, q, nq, 1.0);
    la_fill_normal(rng, k, nq, 1.0);
    /* identity, or causal without a state: a denominator near eps (the first
     * tokens see few keys) is ill-conditioned, so q, k > 0 there */
    if ((m.f == LA_FEATURE_IDENTITY || (m.causal && !c.state)) && m.normalize)
        for (int64_t i = 0; i < nq; i++) q[i] = fabsf(q[i]) + 0.1f, k[i] = fabsf(k[i]) + 0.1f;
    la_fill_normal(rng, v, nv, 1.0);
    la_fill_normal(rng, g, nv, 1.0);
    la_fill_normal(rng, S0, nS, 2.0);
    la_fill_normal(rng, gS, nS, 1.0);
    la_fill_normal(rng, gz, nz, 1.0);
    for (int64_t i = 0; i < nz; i++) z0[i] = (float)(5 + 5 * la_rng_uniform(rng));
    const int64_t eq[4] = {m.B, m.N, m.H, m.D}, ev[4] = {m.B, m.N, m.H, m.Dv};
    const int64_t eS[4] = {m.B, m.H, m.D, m.Dv}, ez[3] = {m.B, m.H, m.D};
    hview Q = make_view(q, 4, eq, c.dt, c.layout), K = make_view(k, 4, eq, c.dt, c.layout);
    hview V = make_view(v, 4, ev, c.dt, c.layout), G = make_view(g, 4, ev, c.dt, c.layout);
    hview dQ = make_view(NULL, 4, eq, c.dt, c.layout), dK = make_view(NULL, 4, eq, c.dt, c.layout);
    hview dV = make_view(NULL, 4, ev, c.dt, c.layout);
    hview Si = make_view(S0, 4, eS, LA_F32, L_CONTIG), zi = make_view(z0, 3, ez, LA_F32, L_CONTIG);
    hview dSo = make_view(gS, 4, eS, LA_F32, L_BHND), dzo = make_view(gz, 3, ez, LA_F32, L_CONTIG);
    hview dSi = make_view(NULL, 4, eS, LA_F32, L_CONTIG), dzi = make_view(NULL, 3, ez, LA_F32, L_CONTIG);
    read_view(&Q, q), read_view(&K, k), read_view(&V, v), read_view(&G, g);
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = m.f, p.causal = m.causal, p.normalize = m.normalize, p.chunk = c.chunk;
    p.eps = (float)m.eps, p.scale_q = (float)m.sq;
    const int st = m.causal && c.state;
    CHECK_OK(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, st ? &Si.t : NULL, st ? &zi.t : NULL,
                                &G.t, st ? &dSo.t : NULL, st ? &dzo.t : NULL, &dQ.t, &dK.t, &dV.t,
                                m.causal ? &dSi.t : NULL, m.causal ? &dzi.t : NULL, ctx));
    double *qd = to_d(q, nq), *kd = to_d(k, nq), *vd = to_d(v, nv), *gd = to_d(g, nv);
    double *S0d = to_d(S0, nS), *z0d = to_d(z0, nz), *gSd = to_d(gS, nS), *gzd = to_d(gz, nz);
    double *rq = malloc(nq * 8), *rk = malloc(nq * 8), *rv = malloc(nv * 8);
    double *rS = malloc(nS * 8), *rz = malloc(nz * 8);
    ref_linear(&m, qd, kd, vd, st ? S0d : NULL, st ? z0d : NULL, gd, st ? gSd : NULL,
               st ? gzd : NULL, rq, rk, rv, rS, rz);
    float *a = malloc((nq > nv ? nq : nv) * 4 + (nS + nz) * 4);
    const hview *views[5] = {&dQ, &dK, &dV, &dSi, &dzi};
    double *refs[5] = {rq, rk, rv, rS, rz};
    const int64_t ns[5] = {nq, nq, nv, nS, nz};
    const char *nm[5] = {"dq", "dk", "dv", "d_S_in", "d_z_in"};
    for (int i = 0; i < (m.causal ? 5 : 3); i++) {
        read_view(views[i], a);
        double e = frob_rel_err(a, refs[i], ns[i]);
        CHECK(e <= 1e-4,
              "linear bwd B%lld N%lld H%lld D%lld Dv%lld %s causal=%d norm=%d chunk=%lld state=%d %s %s: %s rel err %.3g",
              (long long)m.B, (long long)m.N, (long long)m.H, (long long)m.D, (long long)m.Dv,
              la_feature_name(m.f), m.causal, m.normalize, (long long)c.chunk, st,
              la_dtype_name(c.dt), layout_name[c.layout], nm[i], e);
    }
    /* With the forward's out given (the backward reads o instead of forming it). */
    {
        hview O = make_view(NULL, 4, ev, c.dt, c.layout), dQo = make_view(NULL, 4, eq, c.dt, c.layout);
        hview dKo = make_view(NULL, 4, eq, c.dt, c.layout), dVo = make_view(NULL, 4, ev, c.dt, c.layout);
        CHECK_OK(la_linear_attention(&p, &Q.t, &K.t, &V.t, &O.t, st ? &Si.t : NULL, st ? &zi.t : NULL,
                                     NULL, NULL, ctx));
        CHECK_OK(la_linear_backward(&p, &Q.t, &K.t, &V.t, &O.t, st ? &Si.t : NULL, st ? &zi.t : NULL,
                                    &G.t, st ? &dSo.t : NULL, st ? &dzo.t : NULL, &dQo.t, &dKo.t,
                                    &dVo.t, NULL, NULL, ctx));
        const hview *vo[3] = {&dQo, &dKo, &dVo};
        for (int i = 0; i < 3; i++) {
            read_view(vo[i], a);
            const double e = frob_rel_err(a, refs[i], ns[i]);
            CHECK(e <= 1e-4, "linear bwd with out, N%lld D%lld %s causal=%d norm=%d: %s rel err %.3g",
                  (long long)m.N, (long long)m.D, la_feature_name(m.f), m.causal, m.normalize, nm[i], e);
        }
        free(O.buf), free(dQo.buf), free(dKo.buf), free(dVo.buf);
    }
    /* Determinism and partial requests. */
    hview dQ2 = make_view(NULL, 4, eq, c.dt, c.layout), dK2 = make_view(NULL, 4, eq, c.dt, c.layout);
    hview dV2 = make_view(NULL, 4, ev, c.dt, c.layout);
    CHECK_OK(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, st ? &Si.t : NULL, st ? &zi.t : NULL,
                                &G.t, st ? &dSo.t : NULL, st ? &dzo.t : NULL, &dQ2.t, NULL, NULL,
                                NULL, NULL, ctx));
    CHECK_OK(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, st ? &Si.t : NULL, st ? &zi.t : NULL,
                                &G.t, st ? &dSo.t : NULL, st ? &dzo.t : NULL, NULL, &dK2.t, &dV2.t,
                                NULL, NULL, ctx));
    CHECK(views_identical(&dQ, &dQ2) && views_identical(&dK, &dK2) && views_identical(&dV, &dV2),
          "linear bwd: repeated / partial calls are not bit-identical");
    /* Another thread count (the non-causal state sums run over fixed token
     * segments, summed in order): the same bits. */
    {
        la_context *ctx2;
        la_context_create(&ctx2);
        la_context_set_threads(ctx2, c.threads == 1 ? 3 : 1);
        CHECK_OK(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, st ? &Si.t : NULL,
                                    st ? &zi.t : NULL, &G.t, st ? &dSo.t : NULL,
                                    st ? &dzo.t : NULL, &dQ2.t, &dK2.t, &dV2.t, NULL, NULL, ctx2));
        CHECK(views_identical(&dQ, &dQ2) && views_identical(&dK, &dK2) && views_identical(&dV, &dV2),
              "linear bwd N%lld causal=%d: %d and %d threads are not bit-identical", (long long)m.N,
              m.causal, c.threads, c.threads == 1 ? 3 : 1);
        la_context_destroy(ctx2);
    }
    la_context_destroy(ctx);
    free(q), free(k), free(v), free(g), free(S0), free(z0), free(gS), free(gz), free(a);
    free(qd), free(kd), free(vd), free(gd), free(S0d), free(z0d), free(gSd), free(gzd);
    free(rq), free(rk), free(rv), free(rS), free(rz);
    hview *all[16] = {&Q, &K, &V, &G, &dQ, &dK, &dV, &Si, &zi, &dSo, &dzo, &dSi, &dzi, &dQ2, &dK2, &dV2};
    for (int i = 0; i < 16; i++) free(all[i]->buf);
}

static lin_case mk(int64_t N, int64_t D, int64_t Dv, la_feature f, int causal, int normalize) {
    lin_case c = {{1, N, 2, D, Dv, f, causal, normalize, 1e-6, 1.0}, 64, LA_F32, L_CONTIG, 2, 1};
    return c;
}

static void test_bad_input(void) {
    const int64_t eq[4] = {1, 9, 2, 8}, ev[4] = {1, 9, 2, 6}, bad[4] = {1, 9, 2, 5};
    const int64_t eS[4] = {1, 2, 8, 6}, badS[4] = {1, 2, 6, 8};
    float *zq = calloc(200, 4);
    hview Q = make_view(zq, 4, eq, LA_F32, L_CONTIG), K = make_view(zq, 4, eq, LA_F32, L_CONTIG);
    hview V = make_view(zq, 4, ev, LA_F32, L_CONTIG), G = make_view(zq, 4, ev, LA_F32, L_CONTIG);
    hview Gb = make_view(zq, 4, bad, LA_F32, L_CONTIG), dQ = make_view(NULL, 4, eq, LA_F32, L_CONTIG);
    hview dK = make_view(NULL, 4, eq, LA_BF16, L_CONTIG), dV = make_view(NULL, 4, ev, LA_F32, L_CONTIG);
    hview dSi = make_view(NULL, 4, badS, LA_F32, L_CONTIG), dSo = make_view(zq, 4, eS, LA_F32, L_CONTIG);
    la_linear_params p;
    la_linear_params_init(&p);
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &G.t, NULL, NULL,
                                    &dQ.t, &dK.t, &dV.t, NULL, NULL, NULL), LA_ERR_DTYPE);
    CHECK(strstr(la_last_error(), "dk") != NULL, "message names dk: %s", la_last_error());
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &Gb.t, NULL, NULL,
                                    &dQ.t, NULL, &dV.t, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_out") != NULL, "message names d_out: %s", la_last_error());
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &G.t, &dSo.t, NULL,
                                    &dQ.t, NULL, &dV.t, NULL, NULL, NULL), LA_ERR_ARG); /* state, not causal */
    p.causal = 1;
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &G.t, &dSo.t, NULL,
                                    &dQ.t, NULL, &dV.t, &dSi.t, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_S_in") != NULL, "message names d_S_in: %s", la_last_error());
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &G.t, NULL, NULL,
                                    &dQ.t, NULL, &G.t, NULL, NULL, NULL), LA_ERR_ARG); /* dv aliases d_out */
    p.chunk = 0;
    CHECK_STATUS(la_linear_backward(&p, &Q.t, &K.t, &V.t, NULL, NULL, NULL, &G.t, NULL, NULL,
                                    &dQ.t, NULL, &dV.t, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK(view_untouched(&dQ, view_storage(&dQ)) && view_untouched(&dV, view_storage(&dV)) &&
              view_untouched(&dK, view_storage(&dK)),
          "a rejected linear backward wrote a gradient");
    hview *all[10] = {&Q, &K, &V, &G, &Gb, &dQ, &dK, &dV, &dSi, &dSo};
    for (int i = 0; i < 10; i++) free(all[i]->buf);
    free(zq);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_linear");
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    for (int fi = 0; fi < 5; fi++)
        for (int causal = 0; causal < 2; causal++)
            for (int norm = 0; norm < 2; norm++) test_reference_fd(&rng, feats[fi], causal, norm);
    const int64_t Ns[4] = {1, 63, 65, 1000};
    const int64_t Ds[5][2] = {{16, 24}, {32, 32}, {63, 17}, {64, 48}, {128, 128}};
    for (int ni = 0; ni < 4; ni++)
        for (int di = 0; di < 5; di++)
            for (int causal = 0; causal < 2; causal++) {
                if (Ns[ni] == 1000 && di != 2 && di != 4) continue;
                /* One token, non-causal, normalized: o = v up to eps, so every
                 * q/k gradient is pure cancellation (relative error undefined). */
                const int norm = !(Ns[ni] == 1 && !causal);
                run_case(&rng, mk(Ns[ni], Ds[di][0], Ds[di][1], LA_FEATURE_RELU, causal, norm));
            }
    for (int fi = 0; fi < 5; fi++)
        for (int causal = 0; causal < 2; causal++)
            for (int norm = 0; norm < 2; norm++) {
                lin_case c = mk(130, 20, 12, feats[fi], causal, norm);
                c.m.sq = 0.5;
                c.chunk = 32;
                run_case(&rng, c);
                c.state = 0;
                c.chunk = 7;
                run_case(&rng, c);
            }
    for (int causal = 0; causal < 2; causal++)
        for (int layout = 1; layout < 3; layout++) {
            lin_case c = mk(100, 33, 21, LA_FEATURE_ELU1, causal, 1);
            c.m.B = 2, c.m.H = 3, c.layout = layout;
            run_case(&rng, c);
            c.dt = LA_F64, c.threads = 1, c.layout = L_CONTIG;
            run_case(&rng, c);
        }
    /* Non-causal over several token segments of the state sums (the last one
     * partial), contiguous and strided. */
    for (int layout = 0; layout < 2; layout++) {
        lin_case cs = mk(2500, 63, 17, LA_FEATURE_RELU, 0, 1);
        cs.layout = layout;
        run_case(&rng, cs);
        cs = mk(2049, 64, 48, LA_FEATURE_ELU1, 0, layout);
        cs.layout = layout;
        run_case(&rng, cs);
    }
    lin_case c = mk(600, 16, 16, LA_FEATURE_RELU, 1, 1);
    c.chunk = 1;
    run_case(&rng, c);
    c.chunk = 4096;
    run_case(&rng, c);
    test_bad_input();
    return la_test_finish();
}
