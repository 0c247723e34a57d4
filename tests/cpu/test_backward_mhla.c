/* MHLA non-causal backward (TRAINING.md §1) on the CPU against float64
 * references: an analytic one (per_query / none, token by token, itself
 * checked by central differences) and central differences of a float64
 * forward (released_vision, small sizes). 1-D/2-D/3-D grids with uneven and
 * empty blocks, shared and per-head mixing, every feature map, odd sizes,
 * Dv != D, strided views, f64, poisoned gradients, NULL gradients,
 * determinism and bad input. */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct mh_dims {
    int64_t B, N, H, D, Dv;
    int nd;
    int64_t grid[3], blocks[3];
    la_feature f;
    int norm; /* la_mhla_normalize */
    int per_head;
    double eps, sq;
} mh_dims;

#define IX4(b, t, h, d, N, H, D) ((((b) * (N) + (t)) * (H) + (h)) * (D) + (d))

static int64_t nblocks(const mh_dims *m) {
    int64_t M = 1;
    for (int a = 0; a < m->nd; a++) M *= m->blocks[a];
    return M;
}

/* Block of token t and its coordinates inside the block (raster, local). */
static int64_t block_of(const mh_dims *m, int64_t t, int64_t *local) {
    int64_t c[3], bidx = 0, lidx = 0;
    for (int a = m->nd - 1, r = (int)t; a >= 0; a--) {
        c[a] = r % m->grid[a];
        r /= m->grid[a];
    }
    for (int a = 0; a < m->nd; a++) {
        const int64_t beta = c[a] * m->blocks[a] / m->grid[a];
        const int64_t lo = (beta * m->grid[a] + m->blocks[a] - 1) / m->blocks[a];
        const int64_t size = m->grid[a] / m->blocks[a]; /* equal blocks (released_vision) */
        bidx = bidx * m->blocks[a] + beta;
        lidx = lidx * (size > 0 ? size : 1) + (c[a] - lo);
    }
    if (local) *local = lidx;
    return bidx;
}

/* Token at local position w of block blk (equal blocks). */
static int64_t token_at(const mh_dims *m, int64_t blk, int64_t w) {
    int64_t c[3];
    for (int a = m->nd - 1; a >= 0; a--) {
        const int64_t size = m->grid[a] / m->blocks[a], beta = blk % m->blocks[a];
        c[a] = beta * size + w % size;
        blk /= m->blocks[a];
        w /= size;
    }
    int64_t t = 0;
    for (int a = 0; a < m->nd; a++) t = t * m->grid[a] + c[a];
    return t;
}

/* Float64 forward; returns Σ dO∘O. W [Hw,M,M]. */
static double ref_fwd(const mh_dims *m, const double *q, const double *k, const double *v,
                      const double *W, const double *dO) {
    const int64_t M = nblocks(m), N = m->N, H = m->H, D = m->D, Dv = m->Dv;
    double *S = calloc(M * D * Dv, 8), *z = calloc(M * D, 8), *St = malloc(D * Dv * 8);
    double *zt = malloc(D * 8), *qt = malloc(D * 8), loss = 0;
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *Wh = W + (m->per_head ? h : 0) * M * M;
            memset(S, 0, M * D * Dv * 8), memset(z, 0, M * D * 8);
            for (int64_t t = 0; t < N; t++) {
                const int64_t blk = block_of(m, t, NULL);
                for (int64_t d = 0; d < D; d++) {
                    const double kd = la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                    z[blk * D + d] += kd;
                    for (int64_t e = 0; e < Dv; e++)
                        S[(blk * D + d) * Dv + e] += kd * v[IX4(b, t, h, e, N, H, Dv)];
                }
            }
            for (int64_t t = 0; t < N; t++) {
                int64_t w;
                const int64_t i = block_of(m, t, &w);
                for (int64_t d = 0; d < D; d++) {
                    qt[d] = m->sq * la_ref_feature(m->f, q[IX4(b, t, h, d, N, H, D)]);
                    zt[d] = 0;
                    for (int64_t e = 0; e < Dv; e++) St[d * Dv + e] = 0;
                    for (int64_t c = 0; c < M; c++) {
                        zt[d] += Wh[i * M + c] * z[c * D + d];
                        for (int64_t e = 0; e < Dv; e++) St[d * Dv + e] += Wh[i * M + c] * S[(c * D + d) * Dv + e];
                    }
                }
                double den = 1;
                if (m->norm == LA_MHLA_NORM_PER_QUERY) {
                    den = m->eps;
                    for (int64_t d = 0; d < D; d++) den += qt[d] * zt[d];
                } else if (m->norm == LA_MHLA_NORM_RELEASED_VISION) {
                    den = m->eps;
                    for (int64_t c = 0; c < M; c++) {
                        const int64_t u = token_at(m, c, w);
                        double r = 0;
                        for (int64_t d = 0; d < D; d++)
                            r += m->sq * la_ref_feature(m->f, q[IX4(b, u, h, d, N, H, D)]) * z[c * D + d];
                        den += Wh[i * M + c] * r;
                    }
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double num = 0;
                    for (int64_t d = 0; d < D; d++) num += qt[d] * St[d * Dv + e];
                    loss += num / den * dO[IX4(b, t, h, e, N, H, Dv)];
                }
            }
        }
    free(S), free(z), free(St), free(zt), free(qt);
    return loss;
}

static double dfeat(la_feature f, double x) {
    if (f == LA_FEATURE_IDENTITY) return 1;
    if (f == LA_FEATURE_ELU1) return x >= 0 ? 1 : exp(x);
    return x > 0 ? 1 : 0;
}

/* Analytic float64 gradients (per_query / none), written per token. */
static void ref_bwd(const mh_dims *m, const double *q, const double *k, const double *v,
                    const double *W, const double *dO, double *dq, double *dk, double *dv,
                    double *dW) {
    const int64_t M = nblocks(m), N = m->N, H = m->H, D = m->D, Dv = m->Dv;
    const int64_t Hw = m->per_head ? H : 1;
    double *S = malloc(M * D * Dv * 8), *z = malloc(M * D * 8);
    double *St = malloc(M * D * Dv * 8), *zt = malloc(M * D * 8);
    double *dSt = malloc(M * D * Dv * 8), *dzt = malloc(M * D * 8), *qt = malloc(D * 8);
    double *g = malloc(Dv * 8);
    memset(dW, 0, Hw * M * M * 8);
    for (int64_t b = 0; b < m->B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *Wh = W + (m->per_head ? h : 0) * M * M;
            double *dWh = dW + (m->per_head ? h : 0) * M * M;
            memset(S, 0, M * D * Dv * 8), memset(z, 0, M * D * 8);
            memset(dSt, 0, M * D * Dv * 8), memset(dzt, 0, M * D * 8);
            for (int64_t t = 0; t < N; t++) {
                const int64_t blk = block_of(m, t, NULL);
                for (int64_t d = 0; d < D; d++) {
                    const double kd = la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                    z[blk * D + d] += kd;
                    for (int64_t e = 0; e < Dv; e++) S[(blk * D + d) * Dv + e] += kd * v[IX4(b, t, h, e, N, H, Dv)];
                }
            }
            for (int64_t i = 0; i < M; i++)
                for (int64_t x = 0; x < D * Dv; x++) {
                    St[i * D * Dv + x] = 0;
                    for (int64_t c = 0; c < M; c++) St[i * D * Dv + x] += Wh[i * M + c] * S[c * D * Dv + x];
                    if (x < D) {
                        zt[i * D + x] = 0;
                        for (int64_t c = 0; c < M; c++) zt[i * D + x] += Wh[i * M + c] * z[c * D + x];
                    }
                }
            for (int64_t t = 0; t < N; t++) {
                const int64_t i = block_of(m, t, NULL);
                double den = 1, go = 0;
                for (int64_t d = 0; d < D; d++) qt[d] = m->sq * la_ref_feature(m->f, q[IX4(b, t, h, d, N, H, D)]);
                if (m->norm == LA_MHLA_NORM_PER_QUERY) {
                    den = m->eps;
                    for (int64_t d = 0; d < D; d++) den += qt[d] * zt[i * D + d];
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double num = 0;
                    for (int64_t d = 0; d < D; d++) num += qt[d] * St[(i * D + d) * Dv + e];
                    go += dO[IX4(b, t, h, e, N, H, Dv)] * num / den;
                    g[e] = dO[IX4(b, t, h, e, N, H, Dv)] / den;
                }
                const double dden = m->norm == LA_MHLA_NORM_PER_QUERY ? -go / den : 0;
                for (int64_t d = 0; d < D; d++) {
                    double a = dden * zt[i * D + d];
                    for (int64_t e = 0; e < Dv; e++) {
                        a += St[(i * D + d) * Dv + e] * g[e];
                        dSt[(i * D + d) * Dv + e] += qt[d] * g[e];
                    }
                    dzt[i * D + d] += dden * qt[d];
                    dq[IX4(b, t, h, d, N, H, D)] = a * m->sq * dfeat(m->f, q[IX4(b, t, h, d, N, H, D)]);
                }
            }
            for (int64_t i = 0; i < M; i++)
                for (int64_t c = 0; c < M; c++) {
                    double a = 0;
                    for (int64_t x = 0; x < D * Dv; x++) a += dSt[i * D * Dv + x] * S[c * D * Dv + x];
                    for (int64_t x = 0; x < D; x++) a += dzt[i * D + x] * z[c * D + x];
                    dWh[i * M + c] += a;
                }
            for (int64_t t = 0; t < N; t++) {
                const int64_t blk = block_of(m, t, NULL);
                for (int64_t d = 0; d < D; d++) {
                    const double x = k[IX4(b, t, h, d, N, H, D)];
                    double a = 0;
                    for (int64_t i = 0; i < M; i++) {
                        const double w = Wh[i * M + blk];
                        a += w * dzt[i * D + d];
                        for (int64_t e = 0; e < Dv; e++) a += w * dSt[(i * D + d) * Dv + e] * v[IX4(b, t, h, e, N, H, Dv)];
                    }
                    dk[IX4(b, t, h, d, N, H, D)] = a * dfeat(m->f, x);
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double a = 0;
                    for (int64_t i = 0; i < M; i++)
                        for (int64_t d = 0; d < D; d++)
                            a += Wh[i * M + blk] * dSt[(i * D + d) * Dv + e] *
                                 la_ref_feature(m->f, k[IX4(b, t, h, d, N, H, D)]);
                    dv[IX4(b, t, h, e, N, H, Dv)] = a;
                }
            }
        }
    free(S), free(z), free(St), free(zt), free(dSt), free(dzt), free(qt), free(g);
}

/* Central differences of ref_fwd: grads of x[0..3] = q, k, v, W. */
static void fd_grads(const mh_dims *m, double **x, const int64_t *n, const double *dO, double **fd) {
    const double hs = 1e-6;
    for (int a = 0; a < 4; a++)
        for (int64_t i = 0; i < n[a]; i++) {
            const double keep = x[a][i];
            x[a][i] = keep + hs;
            const double lp = ref_fwd(m, x[0], x[1], x[2], x[3], dO);
            x[a][i] = keep - hs;
            const double lm = ref_fwd(m, x[0], x[1], x[2], x[3], dO);
            x[a][i] = keep;
            fd[a][i] = (lp - lm) / (2 * hs);
        }
}

/* A contiguous f32 [M,M] or [H,M,M] mixing view (x NULL: NaN-filled); the
 * dense_views helpers cover ranks 3 and 4 only. */
static hview make_mix(const float *x, int ndim, const int64_t *ne) {
    hview h;
    const int64_t n = ne[0] * ne[1] * (ndim == 3 ? ne[2] : 1);
    h.buf = malloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) ((float *)h.buf)[i] = x ? x[i] : NAN;
    la_tensor_init(&h.t, h.buf, LA_F32, LA_DEVICE_CPU, ndim, ne);
    return h;
}

typedef struct mh_case {
    mh_dims m;
    la_dtype dt;
    int layout, threads, use_fd;
} mh_case;

static void run_case(la_rng *rng, mh_case c) {
    const mh_dims m = c.m;
    const int64_t M = nblocks(&m), Hw = m.per_head ? m.H : 1;
    const int64_t n[4] = {m.B * m.N * m.H * m.D, m.B * m.N * m.H * m.D, m.B * m.N * m.H * m.Dv, Hw * M * M};
    float *x[4], *g = malloc(n[2] * 4);
    for (int a = 0; a < 4; a++) {
        x[a] = malloc(n[a] * 4);
        la_fill_normal(rng, x[a], n[a], 1.0);
    }
    for (int64_t i = 0; i < n[3]; i++) x[3][i] = (float)(0.05 + la_rng_uniform(rng));
    if (m.f == LA_FEATURE_IDENTITY && m.norm != LA_MHLA_NORM_NONE)
        for (int a = 0; a < 2; a++)
            for (int64_t i = 0; i < n[a]; i++) x[a][i] = fabsf(x[a][i]) + 0.2f;
    if (c.use_fd) /* keep q, k off the relu kink for the finite differences */
        for (int a = 0; a < 2; a++)
            for (int64_t i = 0; i < n[a]; i++)
                if (fabsf(x[a][i]) < 0.05f) x[a][i] += 0.1f;
    la_fill_normal(rng, g, n[2], 1.0);
    const int64_t eq[4] = {m.B, m.N, m.H, m.D}, ev[4] = {m.B, m.N, m.H, m.Dv};
    const int64_t ew[3] = {m.H, M, M};
    hview Q = make_view(x[0], 4, eq, c.dt, c.layout), K = make_view(x[1], 4, eq, c.dt, c.layout);
    hview V = make_view(x[2], 4, ev, c.dt, c.layout), G = make_view(g, 4, ev, c.dt, c.layout);
    hview Wv = make_mix(x[3], m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    hview dQ = make_view(NULL, 4, eq, c.dt, c.layout), dK = make_view(NULL, 4, eq, c.dt, c.layout);
    hview dV = make_view(NULL, 4, ev, c.dt, c.layout);
    hview dW = make_mix(NULL, m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    read_view(&Q, x[0]), read_view(&K, x[1]), read_view(&V, x[2]), read_view(&G, g);
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = m.nd;
    for (int a = 0; a < 3; a++) p.grid[a] = m.grid[a], p.blocks[a] = m.blocks[a];
    p.feature = m.f, p.normalize = (la_mhla_normalize)m.norm, p.eps = (float)m.eps;
    p.scale_q = (float)m.sq;
    CHECK_OK(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, &dQ.t, &dK.t, &dV.t, &dW.t, ctx));
    double *xd[4], *r[4], *gd = malloc(n[2] * 8);
    for (int a = 0; a < 4; a++) {
        xd[a] = malloc(n[a] * 8), r[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) xd[a][i] = x[a][i];
    }
    for (int64_t i = 0; i < n[2]; i++) gd[i] = g[i];
    if (c.use_fd) fd_grads(&m, xd, n, gd, r);
    else ref_bwd(&m, xd[0], xd[1], xd[2], xd[3], gd, r[0], r[1], r[2], r[3]);
    const hview *views[4] = {&dQ, &dK, &dV, &dW};
    const char *nm[4] = {"dq", "dk", "dv", "d_mixing"};
    float *a = malloc((n[0] > n[2] ? n[0] : n[2]) * 4 + n[3] * 4);
    for (int i = 0; i < 4; i++) {
        if (i < 3) read_view(views[i], a);
        else memcpy(a, dW.buf, (size_t)n[3] * 4);
        const double e = frob_rel_err(a, r[i], n[i]);
        CHECK(e <= (c.use_fd ? 2e-4 : 1e-4),
              "mhla bwd B%lld N%lld H%lld D%lld Dv%lld nd=%d blocks=%lldx%lldx%lld %s norm=%d per_head=%d %s %s fd=%d: %s rel err %.3g",
              (long long)m.B, (long long)m.N, (long long)m.H, (long long)m.D, (long long)m.Dv, m.nd,
              (long long)m.blocks[0], (long long)m.blocks[1], (long long)m.blocks[2],
              la_feature_name(m.f), m.norm, m.per_head, la_dtype_name(c.dt), layout_name[c.layout],
              c.use_fd, nm[i], e);
    }
    { /* with the forward's out given (read instead of formed) */
        hview O = make_view(NULL, 4, ev, c.dt, c.layout), dQo = make_view(NULL, 4, eq, c.dt, c.layout);
        hview dWo = make_mix(NULL, m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
        CHECK_OK(la_mhla_forward(&p, &Q.t, &K.t, &V.t, &Wv.t, &O.t, ctx));
        CHECK_OK(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, &O.t, &G.t, &dQo.t, NULL, NULL, &dWo.t, ctx));
        read_view(&dQo, a);
        const double e0 = frob_rel_err(a, r[0], n[0]);
        memcpy(a, dWo.buf, (size_t)n[3] * 4);
        const double e3 = frob_rel_err(a, r[3], n[3]);
        CHECK(e0 <= (c.use_fd ? 2e-4 : 1e-4) && e3 <= (c.use_fd ? 2e-4 : 1e-4),
              "mhla bwd with out N%lld norm=%d %s: dq %.3g d_mixing %.3g", (long long)m.N, m.norm,
              la_feature_name(m.f), e0, e3);
        free(O.buf), free(dQo.buf), free(dWo.buf);
    }
    hview dQ2 = make_view(NULL, 4, eq, c.dt, c.layout), dW2 = make_mix(NULL, m.per_head ? 3 : 2, m.per_head ? ew : ew + 1);
    hview dK2 = make_view(NULL, 4, eq, c.dt, c.layout), dV2 = make_view(NULL, 4, ev, c.dt, c.layout);
    CHECK_OK(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, &dQ2.t, NULL, NULL, &dW2.t, ctx));
    CHECK_OK(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &Wv.t, NULL, &G.t, NULL, &dK2.t, &dV2.t, NULL, ctx));
    CHECK(views_identical(&dQ, &dQ2) && views_identical(&dW, &dW2) && views_identical(&dK, &dK2) &&
              views_identical(&dV, &dV2),
          "mhla bwd: repeated / partial calls are not bit-identical");
    la_context_destroy(ctx);
    for (int i = 0; i < 4; i++) free(x[i]), free(xd[i]), free(r[i]);
    free(g), free(gd), free(a);
    hview *all[13] = {&Q, &K, &V, &G, &Wv, &dQ, &dK, &dV, &dW, &dQ2, &dW2, &dK2, &dV2};
    for (int i = 0; i < 13; i++) free(all[i]->buf);
}

static mh_case mk1(int64_t N, int64_t D, int64_t Dv, int64_t blocks, la_feature f, int norm) {
    mh_case c = {{1, N, 2, D, Dv, 1, {N, 1, 1}, {blocks, 1, 1}, f, norm, 0, 1e-6, 1.0}, LA_F32, L_CONTIG, 2, 0};
    return c;
}

/* The analytic reference against central differences. */
static void test_reference_fd(la_rng *rng, int nd, la_feature f, int norm, int per_head) {
    mh_dims m = {1, 12, 2, 3, 2, nd, {12, 1, 1}, {3, 1, 1}, f, norm, per_head, 1e-6, 0.8};
    if (nd == 2) m.grid[0] = 3, m.grid[1] = 4, m.blocks[0] = 2, m.blocks[1] = 3;
    if (nd == 3) m.grid[0] = 2, m.grid[1] = 3, m.grid[2] = 2, m.blocks[0] = 2, m.blocks[1] = 2, m.blocks[2] = 1;
    const int64_t M = nblocks(&m), Hw = per_head ? m.H : 1;
    const int64_t n[4] = {m.N * m.H * m.D, m.N * m.H * m.D, m.N * m.H * m.Dv, Hw * M * M};
    double *x[4], *g[4], *fd[4], *dO = malloc(n[2] * 8);
    for (int a = 0; a < 4; a++) {
        x[a] = malloc(n[a] * 8), g[a] = malloc(n[a] * 8), fd[a] = malloc(n[a] * 8);
        for (int64_t i = 0; i < n[a]; i++) {
            x[a][i] = a == 3 ? 0.1 + la_rng_uniform(rng) : la_rng_normal(rng);
            if (a < 2 && fabs(x[a][i]) < 0.05) x[a][i] += 0.1;
            if (a < 2 && f == LA_FEATURE_IDENTITY && norm != LA_MHLA_NORM_NONE) x[a][i] = fabs(x[a][i]) + 0.2;
        }
    }
    for (int64_t i = 0; i < n[2]; i++) dO[i] = la_rng_normal(rng);
    ref_bwd(&m, x[0], x[1], x[2], x[3], dO, g[0], g[1], g[2], g[3]);
    fd_grads(&m, x, n, dO, fd);
    for (int a = 0; a < 4; a++) {
        const double e = frob_rel_err_d(g[a], fd[a], n[a]);
        CHECK(e < 1e-6, "mhla reference nd=%d %s norm=%d per_head=%d: grad %d vs finite differences %.3g",
              nd, la_feature_name(f), norm, per_head, a, e);
    }
    for (int a = 0; a < 4; a++) free(x[a]), free(g[a]), free(fd[a]);
    free(dO);
}

static void test_bad_input(void) {
    const int64_t eq[4] = {1, 8, 2, 4}, ev[4] = {1, 8, 2, 3}, ew[2] = {2, 2}, ew3[3] = {2, 3, 3};
    float *zq = calloc(200, 4);
    hview Q = make_view(zq, 4, eq, LA_F32, L_CONTIG), K = make_view(zq, 4, eq, LA_F32, L_CONTIG);
    hview V = make_view(zq, 4, ev, LA_F32, L_CONTIG), G = make_view(zq, 4, ev, LA_F32, L_CONTIG);
    hview W = make_mix(zq, 2, ew), W3 = make_mix(zq, 3, ew3);
    hview dQ = make_view(NULL, 4, eq, LA_F32, L_CONTIG), dW = make_mix(NULL, 2, ew);
    dW.t.dtype = LA_F64; /* a wrong dtype (the call must refuse before touching it) */
    hview dWb = make_mix(NULL, 3, ew3), dV = make_view(NULL, 4, eq, LA_F32, L_CONTIG);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 1, p.grid[0] = 8, p.blocks[0] = 2;
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ.t, NULL, NULL, &dW.t, NULL), LA_ERR_DTYPE);
    CHECK(strstr(la_last_error(), "d_mixing") != NULL, "message names d_mixing: %s", la_last_error());
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ.t, NULL, NULL, &dWb.t, NULL), LA_ERR_SHAPE);
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ.t, NULL, &dV.t, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "dv") != NULL, "message names dv: %s", la_last_error());
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W3.t, NULL, &G.t, &dQ.t, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &Q.t, &dQ.t, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "d_out") != NULL, "message names d_out: %s", la_last_error());
    p.blocks[0] = 3;
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ.t, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    p.blocks[0] = 2, p.grid[0] = 7;
    CHECK_STATUS(la_mhla_backward(&p, &Q.t, &K.t, &V.t, &W.t, NULL, &G.t, &dQ.t, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    CHECK(view_untouched(&dQ, view_storage(&dQ)) && isnan(((float *)dW.buf)[0]) && isnan(((float *)dW.buf)[3]),
          "a rejected mhla backward wrote a gradient");
    hview *all[10] = {&Q, &K, &V, &G, &W, &W3, &dQ, &dW, &dWb, &dV};
    for (int i = 0; i < 10; i++) free(all[i]->buf);
    free(zq);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_mhla");
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    for (int nd = 1; nd <= 3; nd++)
        for (int norm = 0; norm < 2; norm++) test_reference_fd(&rng, nd, feats[nd + 1], norm, nd == 2);
    test_reference_fd(&rng, 1, LA_FEATURE_IDENTITY, 0, 1);
    const int64_t Ns[4] = {1, 63, 65, 1000};
    const int64_t Ds[5][2] = {{16, 24}, {32, 32}, {63, 17}, {64, 48}, {128, 128}};
    for (int ni = 0; ni < 4; ni++)
        for (int di = 0; di < 5; di++) {
            if (Ns[ni] == 1000 && di != 2) continue;
            if (Ns[ni] == 1 && di > 1) continue;
            const int64_t blocks = Ns[ni] == 1 ? 1 : 4;
            /* one token per block, normalized: o = v-like, gradient pure cancellation */
            run_case(&rng, mk1(Ns[ni], Ds[di][0], Ds[di][1], blocks, LA_FEATURE_RELU_EPS,
                               Ns[ni] == 1 ? LA_MHLA_NORM_NONE : LA_MHLA_NORM_PER_QUERY));
        }
    for (int fi = 0; fi < 5; fi++)
        for (int norm = 0; norm < 2; norm++) {
            mh_case c = mk1(70, 12, 9, 5, feats[fi], norm);
            c.m.sq = 0.6;
            run_case(&rng, c);
            c.m.per_head = 1, c.m.B = 2;
            run_case(&rng, c);
        }
    /* 2-D and 3-D grids, uneven and empty blocks, layouts, f64 */
    for (int layout = 0; layout < 3; layout++) {
        mh_case c = mk1(0, 20, 13, 1, LA_FEATURE_RELU_EPS, LA_MHLA_NORM_PER_QUERY);
        c.m.nd = 2, c.m.grid[0] = 9, c.m.grid[1] = 11, c.m.N = 99, c.m.blocks[0] = 2, c.m.blocks[1] = 3;
        c.layout = layout;
        run_case(&rng, c);
        c.m.nd = 3, c.m.grid[0] = 3, c.m.grid[1] = 5, c.m.grid[2] = 7, c.m.N = 105;
        c.m.blocks[0] = 2, c.m.blocks[1] = 2, c.m.blocks[2] = 3, c.m.per_head = 1, c.m.B = 2;
        run_case(&rng, c);
    }
    mh_case c = mk1(10, 8, 8, 13, LA_FEATURE_ELU1, LA_MHLA_NORM_PER_QUERY); /* empty blocks */
    run_case(&rng, c);
    c = mk1(64, 16, 8, 4, LA_FEATURE_RELU, LA_MHLA_NORM_NONE);
    c.dt = LA_F64, c.threads = 1;
    run_case(&rng, c);
    /* released_vision (equal blocks) against central differences of the forward */
    for (int nd = 1; nd <= 2; nd++)
        for (int ph = 0; ph < 2; ph++) {
            mh_case r = mk1(12, 4, 3, 3, LA_FEATURE_RELU_EPS, LA_MHLA_NORM_RELEASED_VISION);
            r.use_fd = 1, r.m.per_head = ph, r.m.sq = 0.9;
            if (nd == 2) r.m.nd = 2, r.m.grid[0] = 4, r.m.grid[1] = 6, r.m.N = 24, r.m.blocks[0] = 2, r.m.blocks[1] = 3;
            run_case(&rng, r);
        }
    test_bad_input();
    return la_test_finish();
}
