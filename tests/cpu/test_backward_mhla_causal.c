/* Causal MHLA backward (TRAINING.md §1) on the CPU against a float64
 * reference written token by token (itself checked by central differences
 * of the float64 forward): normalize none / per_query, every feature map,
 * chunk sizes (1, 7, 64, > N), short last chunk, mixing larger than the
 * chunk count, shared and per-head mixing (upper triangle and rows past the
 * last chunk get zero gradient), odd sizes, Dv != D, strided views, f64,
 * poisoned / NULL gradients, determinism and bad input. */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct mc_dims {
    int64_t B, N, H, D, Dv, C, M;
    la_feature f;
    int pq, per_head;
    double eps, sq;
} mc_dims;

#define IX4(b, t, h, d, N, H, D) ((((b) * (N) + (t)) * (H) + (h)) * (D) + (d))

static double dfeat(la_feature f, double x) {
    if (f == LA_FEATURE_IDENTITY) return 1;
    if (f == LA_FEATURE_ELU1) return x >= 0 ? 1 : exp(x);
    return x > 0 ? 1 : 0;
}

/* Forward (loss Σ dO∘O) and, when dq != NULL, the gradients. W [Hw,M,M]. */
static double ref(const mc_dims *m, const double *q, const double *k, const double *v,
                  const double *W, const double *dO, double *dq, double *dk, double *dv,
                  double *dW) {
    const int64_t N = m->N, H = m->H, D = m->D, Dv = m->Dv, C = m->C, M = m->M;
    const int64_t nc = (N + C - 1) / C, Hw = m->per_head ? H : 1;
    double *S = malloc(nc * D * Dv * 8), *z = malloc(nc * D * 8), *St = malloc(D * Dv * 8);
    double *zt = malloc(D * 8), *P = malloc(D * Dv * 8), *pz = malloc(D * 8), *qt = malloc(D * 8);
    double *g = malloc(Dv * 8), *dS = malloc(nc * D * Dv * 8), *dz = malloc(nc * D * 8);
    double *dkt = malloc(N * D * 8), loss = 0;
    if (dW) memset(dW, 0, Hw * M * M * 8);
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *Wh = W + (m->per_head ? h : 0) * M * M;
            double *dWh = dW ? dW + (m->per_head ? h : 0) * M * M : NULL;
            memset(S, 0, nc * D * Dv * 8), memset(z, 0, nc * D * 8);
            memset(dS, 0, nc * D * Dv * 8), memset(dz, 0, nc * D * 8), memset(dkt, 0, N * D * 8);
            for (int64_t t = 0; t < N; t++)
                for (int64_t d = 0; d < D; d++) {
                    const double kd = la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                    z[(t / C) * D + d] += kd;
                    for (int64_t e = 0; e < Dv; e++) S[((t / C) * D + d) * Dv + e] += kd * v[IX4(b, t, h, e, N, H, Dv)];
                }
            if (dv)
                for (int64_t t = 0; t < N; t++)
                    for (int64_t e = 0; e < Dv; e++) dv[IX4(b, t, h, e, N, H, Dv)] = 0;
            for (int64_t t = 0; t < N; t++) {
                const int64_t i = t / C, c0 = i * C;
                const double wii = Wh[i * M + i];
                memset(P, 0, D * Dv * 8), memset(pz, 0, D * 8);
                for (int64_t jt = c0; jt <= t; jt++)
                    for (int64_t d = 0; d < D; d++) {
                        const double kd = la_ref_feature(m->f, k[IX4(b, jt, h, d, N, H, D)]);
                        pz[d] += kd;
                        for (int64_t e = 0; e < Dv; e++) P[d * Dv + e] += kd * v[IX4(b, jt, h, e, N, H, Dv)];
                    }
                for (int64_t d = 0; d < D; d++) {
                    zt[d] = wii * pz[d];
                    for (int64_t e = 0; e < Dv; e++) St[d * Dv + e] = wii * P[d * Dv + e];
                    for (int64_t c = 0; c < i; c++) {
                        zt[d] += Wh[i * M + c] * z[c * D + d];
                        for (int64_t e = 0; e < Dv; e++) St[d * Dv + e] += Wh[i * M + c] * S[(c * D + d) * Dv + e];
                    }
                    qt[d] = m->sq * la_ref_feature(m->f, q[IX4(b, t, h, d, N, H, D)]);
                }
                double den = 1, go = 0;
                if (m->pq) {
                    den = m->eps;
                    for (int64_t d = 0; d < D; d++) den += qt[d] * zt[d];
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double num = 0;
                    for (int64_t d = 0; d < D; d++) num += qt[d] * St[d * Dv + e];
                    const double gg = dO[IX4(b, t, h, e, N, H, Dv)];
                    loss += num / den * gg;
                    go += gg * num / den;
                    g[e] = gg / den;
                }
                if (!dq) continue;
                const double dden = m->pq ? -go / den : 0;
                for (int64_t d = 0; d < D; d++) {
                    double a = dden * zt[d];
                    for (int64_t e = 0; e < Dv; e++) a += St[d * Dv + e] * g[e];
                    dq[IX4(b, t, h, d, N, H, D)] = a * m->sq * dfeat(m->f, q[IX4(b, t, h, d, N, H, D)]);
                }
                /* through the mixture of finished chunks */
                for (int64_t c = 0; c < i; c++) {
                    const double w = Wh[i * M + c];
                    double dw = 0;
                    for (int64_t d = 0; d < D; d++) {
                        dz[c * D + d] += w * dden * qt[d];
                        dw += dden * qt[d] * z[c * D + d];
                        for (int64_t e = 0; e < Dv; e++) {
                            dS[(c * D + d) * Dv + e] += w * qt[d] * g[e];
                            dw += qt[d] * g[e] * S[(c * D + d) * Dv + e];
                        }
                    }
                    if (dWh) dWh[i * M + c] += dw;
                }
                /* through the running part of the own chunk */
                double dw = 0;
                for (int64_t d = 0; d < D; d++) {
                    dw += dden * qt[d] * pz[d];
                    for (int64_t e = 0; e < Dv; e++) dw += qt[d] * g[e] * P[d * Dv + e];
                }
                if (dWh) dWh[i * M + i] += dw;
                for (int64_t jt = c0; jt <= t; jt++) {
                    double gv = 0, qk = 0;
                    for (int64_t e = 0; e < Dv; e++) gv += g[e] * v[IX4(b, jt, h, e, N, H, Dv)];
                    for (int64_t d = 0; d < D; d++) {
                        qk += qt[d] * la_ref_feature(m->f, k[IX4(b, jt, h, d, N, H, D)]);
                        dkt[jt * D + d] += wii * qt[d] * (gv + dden);
                    }
                    for (int64_t e = 0; e < Dv; e++) dv[IX4(b, jt, h, e, N, H, Dv)] += wii * qk * g[e];
                }
            }
            if (!dq) continue;
            for (int64_t t = 0; t < N; t++) {
                const int64_t c = t / C;
                for (int64_t d = 0; d < D; d++) {
                    const double x = k[IX4(b, t, h, d, N, H, D)], kd = la_ref_feature(m->f, x);
                    double a = dkt[t * D + d] + dz[c * D + d];
                    for (int64_t e = 0; e < Dv; e++) {
                        a += dS[(c * D + d) * Dv + e] * v[IX4(b, t, h, e, N, H, Dv)];
                        dv[IX4(b, t, h, e, N, H, Dv)] += dS[(c * D + d) * Dv + e] * kd;
                    }
                    dk[IX4(b, t, h, d, N, H, D)] = a * dfeat(m->f, x);
                }
            }
        }
    free(S), free(z), free(St), free(zt), free(P), free(pz), free(qt), free(g), free(dS), free(dz), free(dkt);
    return loss;
}

static hview make_mix(const float *x, int ndim, const int64_t *ne) {
    hview h;
    const int64_t n = ne[0] * ne[1] * (ndim == 3 ? ne[2] : 1);
    h.buf = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) ((float *)h.buf)[i] = x ? x[i] : NAN;
    la_tensor_init(&h.t, h.buf, LA_F32, LA_DEVICE_CPU, ndim, ne);
    return h;
}

static void test_reference_fd(la_rng *rng, la_feature f, int pq, int per_head) {
    mc_dims m = {1, 11, 2, 3, 2, 4, 4, f, pq, per_head, 1e-6, 0.7};
    const int64_t Hw = per_head ? m.H : 1;
    const int64_t n[4] = {m.N * m.H * m.D, m.N * m.H * m.D, m.N * m.H * m.Dv, Hw * m.M * m.M};
    double *x[4], *g[4], *fd[4], *dO = malloc(n[2] * 8);
    for (int a = 0; a < 4; a++) {
        x[a] = malloc(n[a] * 8), g[a] = malloc(n[a] * 8), fd[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) {
            x[a][i] = a == 3 ? 0.1 + la_rng_uniform(rng) : la_rng_normal(rng);
            if (a < 2 && fabs(x[a][i]) < 0.05) x[a][i] += 0.1;
            if (a < 2 && f == LA_FEATURE_IDENTITY && pq) x[a][i] = fabs(x[a][i]) + 0.2;
        }
    }
    for (int64_t i = 0; i < n[2]; i++) dO[i] = la_rng_normal(rng);
    ref(&m, x[0], x[1], x[2], x[3], dO, g[0], g[1], g[2], g[3]);
    const double hs = 1e-6;
    for (int a = 0; a < 4; a++) {
        for (int64_t i = 0; i < n[a]; i++) {
            const double keep = x[a][i];
            x[a][i] = keep + hs;
            const double lp = ref(&m, x[0], x[1], x[2], x[3], dO, NULL, NULL, NULL, NULL);
            x[a][i] = keep - hs;
            const double lm = ref(&m, x[0], x[1], x[2], x[3], dO, NULL, NULL, NULL, NULL);
            x[a][i] = keep;
            fd[a][i] = (lp - lm) / (2 * hs);
        }
        const double e = frob_rel_err_d(g[a], fd[a], n[a]);
        CHECK(e < 1e-6, "mhla causal reference %s pq=%d per_head=%d: grad %d vs finite differences %.3g",
              la_feature_name(f), pq, per_head, a, e);
    }
    for (int a = 0; a < 4; a++) free(x[a]), free(g[a]), free(fd[a]);
    free(dO);
}

typedef struct mc_case {
    mc_dims m;
    la_dtype dt;
    int layout, threads;
} mc_case;

static void run_case(la_rng *rng, mc_case c) {
    const mc_dims m = c.m;
    const int64_t Hw = m.per_head ? m.H : 1;
    const int64_t n[4] = {m.B * m.N * m.H * m.D, m.B * m.N * m.H * m.D, m.B * m.N * m.H * m.Dv, Hw * m.M * m.M};
    float *x[4], *g = malloc(n[2] * 4);
    for (int a = 0; a < 4; a++) {
        x[a] = malloc(n[a] * 4);
        la_fill_normal(rng, x[a], n[a], 1.0);
    }
    for (int64_t i = 0; i < n[3]; i++) x[3][i] = (float)(0.05 + la_rng_uniform(rng));
    /* per_query: the first tokens' denominators see few keys (relu features
     * may be orthogonal: a denominator near eps is ill-conditioned), so q, k > 0 */
    if (m.pq)
        for (int a = 0; a < 2; a++)
            for (int64_t i = 0; i < n[a]; i++) x[a][i] = fabsf(x[a][i]) + 0.1f;
    la_fill_normal(rng, g, n[2], 1.0);
    const int64_t eq[4] = {m.B, m.N, m.H, m.D}, ev[4] = {m.B, m.N, m.H, m.Dv}, ew[3] = {m.H, m.M, m.M};
    hview Q = make_view(x[0], 4, eq, c.dt, c.layout), K = make_view(x[1], 4, eq, c.dt, c.layout);
    hview V = make_view(x[2], 4, ev, c.dt, c.layout), G = make_view(g, 4, ev, c.dt, c.layout);
    hview Wv = make_mix(x[3], m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    hview dQ = make_view(NULL, 4, eq, c.dt, c.layout), dK = make_view(NULL, 4, eq, c.dt, c.layout);
    hview dV = make_view(NULL, 4, ev, c.dt, c.layout), dW = make_mix(NULL, m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    read_view(&Q, x[0]), read_view(&K, x[1]), read_view(&V, x[2]), read_view(&G, g);
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = m.C, p.feature = m.f, p.normalize = m.pq ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
    p.eps = (float)m.eps, p.scale_q = (float)m.sq;
    CHECK_OK(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, &dQ.t, &dK.t, &dV.t, &dW.t, ctx));
    double *xd[4], *r[4], *gd = malloc(n[2] * 8);
    for (int a = 0; a < 4; a++) {
        xd[a] = malloc(n[a] * 8), r[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) xd[a][i] = x[a][i];
    }
    for (int64_t i = 0; i < n[2]; i++) gd[i] = g[i];
    ref(&m, xd[0], xd[1], xd[2], xd[3], gd, r[0], r[1], r[2], r[3]);
    const hview *views[3] = {&dQ, &dK, &dV};
    const char *nm[4] = {"dq", "dk", "dv", "d_mixing"};
    float *a = malloc((n[0] > n[2] ? n[0] : n[2]) * 4 + n[3] * 4);
    for (int i = 0; i < 4; i++) {
        if (i < 3) read_view(views[i], a);
        else memcpy(a, dW.buf, (size_t)n[3] * 4);
        if (i == 3 && m.pq) {
            /* per_query: chunk 0 sees only W[0,0], which cancels between numerator
             * and denominator but for eps, so its exact gradient is eps-sized and
             * the float32 one is rounding: checked in absolute terms, the rest
             * relatively */
            double nr = 0, worst = 0;
            for (int64_t x = 0; x < n[3]; x++) nr += r[3][x] * r[3][x];
            for (int64_t hw = 0; hw < Hw; hw++) {
                const int64_t o0 = hw * m.M * m.M;
                const double d = fabs((double)a[o0] - r[3][o0]);
                if (d > worst || !isfinite(a[o0])) worst = isfinite(a[o0]) ? d : INFINITY;
                a[o0] = 0.f, r[3][o0] = 0.0;
            }
            CHECK(worst <= 1e-3 * sqrt(nr), "mhla causal bwd: d_mixing[0,0] off by %.3g (|dW| %.3g)", worst, sqrt(nr));
        }
        const double e = frob_rel_err(a, r[i], n[i]);
        CHECK(e <= 1e-4, "mhla causal bwd B%lld N%lld H%lld D%lld Dv%lld C%lld M%lld %s pq=%d per_head=%d %s %s: %s rel err %.3g",
              (long long)m.B, (long long)m.N, (long long)m.H, (long long)m.D, (long long)m.Dv,
              (long long)m.C, (long long)m.M, la_feature_name(m.f), m.pq, m.per_head,
              la_dtype_name(c.dt), layout_name[c.layout], nm[i], e);
    }
    int zero_upper = 1;
    for (int64_t hw = 0; hw < Hw; hw++)
        for (int64_t i = 0; i < m.M; i++)
            for (int64_t j = i + 1; j < m.M; j++) zero_upper &= ((float *)dW.buf)[(hw * m.M + i) * m.M + j] == 0.f;
    CHECK(zero_upper, "mhla causal bwd: the upper triangle of d_mixing is not zero");
    hview dQ2 = make_view(NULL, 4, eq, c.dt, c.layout), dW2 = make_mix(NULL, m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    hview dK2 = make_view(NULL, 4, eq, c.dt, c.layout), dV2 = make_view(NULL, 4, ev, c.dt, c.layout);
    CHECK_OK(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, &dQ2.t, NULL, NULL, &dW2.t, ctx));
    CHECK_OK(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, NULL, &dK2.t, &dV2.t, NULL, ctx));
    CHECK(views_identical(&dQ, &dQ2) && views_identical(&dW, &dW2) && views_identical(&dK, &dK2) &&
              views_identical(&dV, &dV2),
          "mhla causal bwd: repeated / partial calls are not bit-identical");
    la_context_destroy(ctx);
    for (int i = 0; i < 4; i++) free(x[i]), free(xd[i]), free(r[i]);
    free(g), free(gd), free(a);
    hview *all[13] = {&Q, &K, &V, &G, &Wv, &dQ, &dK, &dV, &dW, &dQ2, &dW2, &dK2, &dV2};
    for (int i = 0; i < 13; i++) free(all[i]->buf);
}

static mc_case mk(int64_t N, int64_t D, int64_t Dv, int64_t C, la_feature f, int pq) {
    mc_case c = {{1, N, 2, D, Dv, C, (N + C - 1) / C, f, pq, 0, 1e-6, 1.0 / sqrt((double)D)}, LA_F32, L_CONTIG, 2};
    return c;
}

static void test_bad_input(void) {
    const int64_t eq[4] = {1, 8, 2, 4}, ev[4] = {1, 8, 2, 3}, ew[2] = {1, 1}, ew2[2] = {2, 2};
    float *zq = calloc(200, 4);
    hview Q = make_view(zq, 4, eq, LA_F32, L_CONTIG), K = make_view(zq, 4, eq, LA_F32, L_CONTIG);
    hview V = make_view(zq, 4, ev, LA_F32, L_CONTIG), G = make_view(zq, 4, ev, LA_F32, L_CONTIG);
    hview W = make_mix(zq, 2, ew), W2 = make_mix(zq, 2, ew2), dW = make_mix(NULL, 2, ew);
    hview dQ = make_view(NULL, 4, eq, LA_F64, L_CONTIG), dQ32 = make_view(NULL, 4, eq, LA_F32, L_CONTIG);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = 4;
    CHECK_STATUS(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ32.t, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "mixing") != NULL, "message names mixing: %s", la_last_error());
    CHECK_STATUS(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &W2.t, NULL, &G.t, &dQ.t, NULL, NULL, NULL, NULL), LA_ERR_DTYPE);
    CHECK_STATUS(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &W2.t, NULL, &G.t, &dQ32.t, NULL, NULL, &dW.t, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_mixing") != NULL, "message names d_mixing: %s", la_last_error());
    p.normalize = LA_MHLA_NORM_RELEASED_VISION;
    CHECK_STATUS(la_mhla_causal_backward(&p, &Q.t, &K.t, &V.t, &W2.t, NULL, &G.t, &dQ32.t, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK(view_untouched(&dQ32, view_storage(&dQ32)) && isnan(((float *)dW.buf)[0]),
          "a rejected causal mhla backward wrote a gradient");
    hview *all[9] = {&Q, &K, &V, &G, &W, &W2, &dW, &dQ, &dQ32};
    for (int i = 0; i < 9; i++) free(all[i]->buf);
    free(zq);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_mhla_causal");
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    for (int fi = 0; fi < 5; fi++)
        for (int pq = 0; pq < 2; pq++) test_reference_fd(&rng, feats[fi], pq, fi % 2);
    const int64_t Ns[4] = {1, 63, 65, 1000};
    const int64_t Ds[5][2] = {{16, 24}, {32, 32}, {63, 17}, {64, 48}, {128, 128}};
    for (int ni = 0; ni < 4; ni++)
        for (int di = 0; di < 5; di++) {
            if (Ns[ni] == 1000 && di != 0) continue;
            if (Ns[ni] >= 63 && di == 4 && ni != 2) continue;
            run_case(&rng, mk(Ns[ni], Ds[di][0], Ds[di][1], 16, LA_FEATURE_RELU, ni % 2));
        }
    for (int fi = 0; fi < 5; fi++)
        for (int pq = 0; pq < 2; pq++) {
            mc_case c = mk(70, 12, 9, 7, feats[fi], pq);
            c.m.M = 13; /* larger than the 10 chunks: extra rows/columns get zero */
            run_case(&rng, c);
            c.m.per_head = 1, c.m.B = 2, c.m.C = 64, c.m.M = 2;
            run_case(&rng, c);
        }
    for (int layout = 1; layout < 3; layout++) {
        mc_case c = mk(100, 20, 13, 1, LA_FEATURE_RELU, 1);
        c.layout = layout;
        run_case(&rng, c);
        /* one chunk: with per_query, W[0,0] cancels (its gradient is pure
         * rounding), so this one runs unnormalized */
        c.m.C = 200, c.m.M = 1, c.m.pq = 0;
        run_case(&rng, c);
    }
    mc_case c = mk(90, 16, 8, 32, LA_FEATURE_ELU1, 0);
    c.dt = LA_F64, c.threads = 1;
    run_case(&rng, c);
    test_bad_input();
    return la_test_finish();
}
