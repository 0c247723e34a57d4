/* Focused linear attention backward (TRAINING.md §1) on the CPU against
 * central differences of a float64 forward written here from SPEC §4:
 * every input entry at small sizes; at larger maps, directional derivatives
 * along random directions. flatten (softplus scale, power p = 3 and a
 * non-integer p, conv with bias, no conv), blog (conv, focus, identity
 * conv), odd sizes, strided views, f64, poisoned / NULL gradients,
 * determinism and bad input (gradients of absent inputs refused). */
#include "test_util.h"

#include "core/internal.h"
#include "backward_util.h"

typedef struct fo_dims {
    int64_t B, Hm, Wm, H, D, Dv, ks;
    int blog, has_conv, has_bias, has_sp, has_focus;
    double p, eps;
} fo_dims;

#define IX4(b, t, h, d, N, H, D) ((((b) * (N) + (t)) * (H) + (h)) * (D) + (d))

/* Inputs x[0..6] = q, k, v, conv, bias, softplus, focus (absent: NULL).
 * dfocus (blog, may be NULL): the analytic focus gradient Σ dO·num·eps/(f·den²)
 * (focus cancels but for eps, so this gradient is eps-sized: central
 * differences resolve it only at small sizes, where they check this formula). */
static double ref_fwd_f(const fo_dims *m, double *const *x, const double *dO, double *dfocus) {
    const int64_t N = m->Hm * m->Wm, H = m->H, D = m->D, Dv = m->Dv, C = H * D, r = m->ks / 2;
    double *qt = malloc(N * C * 8), *kt = malloc(N * C * 8), *pk = malloc(N * C * 8), loss = 0;
    double *S = malloc(D * Dv * 8), *z = malloc(D * 8), *xp = malloc(C * 8);
    for (int64_t b = 0; b < m->B; b++) {
        for (int64_t n = 0; n < N; n++)
            for (int w = 0; w < 2; w++) {
                const double *src = x[w] + IX4(b, n, 0, 0, N, H, D);
                double *dst = (w ? (m->blog ? pk : kt) : qt) + n * C;
                if (m->blog) {
                    for (int64_t c = 0; c < C; c++) {
                        const double t = w ? src[c] : src[c] / sqrt((double)D);
                        dst[c] = (t > 0 ? t : 0) + 1;
                    }
                    continue;
                }
                double n1 = 0, n2 = 0;
                for (int64_t c = 0; c < C; c++) {
                    const double s = m->has_sp ? x[5][c] : 0;
                    xp[c] = ((src[c] > 0 ? src[c] : 0) + 1e-6) / log1p(exp(s));
                    n1 += xp[c] * xp[c];
                    n2 += pow(xp[c], 2 * m->p);
                }
                for (int64_t c = 0; c < C; c++) dst[c] = sqrt(n1) * pow(xp[c], m->p) / sqrt(n2);
            }
        if (m->blog)
            for (int64_t n = 0; n < N; n++)
                for (int64_t c = 0; c < C; c++) {
                    double a = 0;
                    if (!m->has_conv) a = pk[n * C + c];
                    else
                        for (int64_t i = 0; i < m->ks; i++)
                            for (int64_t j = 0; j < m->ks; j++) {
                                const int64_t yy = n / m->Wm + i - r, xx = n % m->Wm + j - r;
                                if (yy < 0 || yy >= m->Hm || xx < 0 || xx >= m->Wm) continue;
                                a += x[3][(c * m->ks + i) * m->ks + j] * pk[(yy * m->Wm + xx) * C + c];
                            }
                    kt[n * C + c] = a * (m->has_focus ? x[6][c / D] : 2.0);
                }
        for (int64_t h = 0; h < H; h++) {
            memset(S, 0, D * Dv * 8), memset(z, 0, D * 8);
            for (int64_t n = 0; n < N; n++)
                for (int64_t d = 0; d < D; d++) {
                    z[d] += kt[n * C + h * D + d];
                    for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] += kt[n * C + h * D + d] * x[2][IX4(b, n, h, e, N, H, Dv)];
                }
            const double mean = m->blog ? 1.0 : 1.0 / (double)N;
            for (int64_t n = 0; n < N; n++) {
                double den = m->eps;
                for (int64_t d = 0; d < D; d++) den += qt[n * C + h * D + d] * z[d] * mean;
                for (int64_t e = 0; e < Dv; e++) {
                    double o = 0;
                    for (int64_t d = 0; d < D; d++) o += qt[n * C + h * D + d] * S[d * Dv + e] * mean;
                    if (dfocus && m->blog)
                        dfocus[h] += dO[IX4(b, n, h, e, N, H, Dv)] * o * m->eps /
                                     ((m->has_focus ? x[6][h] : 2.0) * den * den);
                    o /= den;
                    if (!m->blog && m->has_conv) {
                        o += m->has_bias ? x[4][e] : 0;
                        for (int64_t i = 0; i < m->ks; i++)
                            for (int64_t j = 0; j < m->ks; j++) {
                                const int64_t yy = n / m->Wm + i - r, xx = n % m->Wm + j - r;
                                if (yy < 0 || yy >= m->Hm || xx < 0 || xx >= m->Wm) continue;
                                o += x[3][(e * m->ks + i) * m->ks + j] * x[2][IX4(b, yy * m->Wm + xx, h, e, N, H, Dv)];
                            }
                    }
                    loss += o * dO[IX4(b, n, h, e, N, H, Dv)];
                }
            }
        }
    }
    free(qt), free(kt), free(pk), free(S), free(z), free(xp);
    return loss;
}

static double ref_fwd(const fo_dims *m, double *const *x, const double *dO) {
    return ref_fwd_f(m, x, dO, NULL);
}

typedef struct fo_case {
    fo_dims m;
    la_dtype dt;
    int layout, threads, ndir; /* ndir 0: every entry by central differences */
} fo_case;

static void sizes(const fo_dims *m, int64_t *n) {
    const int64_t N = m->Hm * m->Wm, C = m->H * m->D;
    n[0] = n[1] = m->B * N * C;
    n[2] = m->B * N * m->H * m->Dv;
    n[3] = m->has_conv ? (m->blog ? C : m->D) * m->ks * m->ks : 0;
    n[4] = m->has_bias ? m->D : 0;
    n[5] = m->has_sp ? C : 0;
    n[6] = m->has_focus ? m->H : 0;
}

static void run_case(la_rng *rng, fo_case c) {
    const fo_dims m = c.m;
    const int64_t N = m.Hm * m.Wm, C = m.H * m.D;
    int64_t n[7];
    sizes(&m, n);
    float *x[7] = {0};
    double *xd[7] = {0}, *gd = malloc(n[2] * 8);
    float *g = malloc(n[2] * 4);
    for (int a = 0; a < 7; a++) {
        if (!n[a]) continue;
        x[a] = malloc(n[a] * 4), xd[a] = malloc(n[a] * 8);
        la_fill_normal(rng, x[a], n[a], a == 3 ? 0.3 : 1.0);
        if (a < 2) /* off the relu kink for the finite differences */
            for (int64_t i = 0; i < n[a]; i++)
                if (fabsf(x[a][i]) < 0.05f) x[a][i] += 0.1f;
        /* D < 4: a query with one positive channel has a one-hot feature
         * map, whose output does not depend on its size but for eps, so its
         * true dq is an eps-sized difference of O(1) terms that float32 cannot
         * resolve to 1e-4; positive queries keep the problem well conditioned */
        if (a == 0 && m.D < 4)
            for (int64_t i = 0; i < n[a]; i++) x[a][i] = fabsf(x[a][i]) + 0.05f;
        if (a == 6)
            for (int64_t i = 0; i < n[a]; i++) x[a][i] = 1.0f + x[a][i] * 0.3f;
        /* blog: a positive kernel keeps K̂ and so the denominator positive (a
         * denominator near 0 makes the problem ill-conditioned) */
        if (a == 3 && m.blog)
            for (int64_t i = 0; i < n[a]; i++) x[a][i] = fabsf(x[a][i]) + 0.05f;
    }
    la_fill_normal(rng, g, n[2], 1.0);
    const int64_t eq[4] = {m.B, N, m.H, m.D}, ev[4] = {m.B, N, m.H, m.Dv};
    const int64_t Cc = m.blog ? C : m.D, ec[3] = {Cc, m.ks, m.ks};
    hview Q = make_view(x[0], 4, eq, c.dt, c.layout), K = make_view(x[1], 4, eq, c.dt, c.layout);
    hview V = make_view(x[2], 4, ev, c.dt, c.layout), G = make_view(g, 4, ev, c.dt, c.layout);
    hview dQ = make_view(NULL, 4, eq, c.dt, c.layout), dK = make_view(NULL, 4, eq, c.dt, c.layout);
    hview dV = make_view(NULL, 4, ev, c.dt, c.layout);
    la_tensor P[4], dP[4];
    float *pg[4] = {0};
    const int64_t pe[4] = {0, m.D, C, m.H};
    for (int a = 3; a < 7; a++) {
        if (!n[a]) continue;
        pg[a - 3] = malloc(n[a] * 4);
        la_fill_nan(pg[a - 3], n[a]);
        if (a == 3) {
            la_tensor_init(&P[0], x[3], LA_F32, LA_DEVICE_CPU, 3, ec);
            la_tensor_init(&dP[0], pg[0], LA_F32, LA_DEVICE_CPU, 3, ec);
        } else {
            la_tensor_init(&P[a - 3], x[a], LA_F32, LA_DEVICE_CPU, 1, &pe[a - 3]);
            la_tensor_init(&dP[a - 3], pg[a - 3], LA_F32, LA_DEVICE_CPU, 1, &pe[a - 3]);
        }
    }
    read_view(&Q, x[0]), read_view(&K, x[1]), read_view(&V, x[2]), read_view(&G, g);
    for (int a = 0; a < 7; a++)
        for (int64_t i = 0; i < n[a]; i++) xd[a][i] = x[a][i];
    for (int64_t i = 0; i < n[2]; i++) gd[i] = g[i];
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, c.threads);
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = m.blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
    p.map_h = m.Hm, p.map_w = m.Wm, p.p = (float)m.p, p.eps = (float)m.eps;
    la_tensor *pp[4], *dpp[4];
    for (int a = 0; a < 4; a++) pp[a] = n[a + 3] ? &P[a] : NULL, dpp[a] = n[a + 3] ? &dP[a] : NULL;
    CHECK_OK(la_focused_backward(&p, &Q.t, &K.t, &V.t, pp[0], pp[1], pp[2], pp[3], NULL, &G.t,
                                 &dQ.t, &dK.t, &dV.t, dpp[0], dpp[1], dpp[2], dpp[3], ctx));
    float *got[7];
    for (int a = 0; a < 7; a++) got[a] = n[a] ? malloc(n[a] * 4) : NULL;
    read_view(&dQ, got[0]), read_view(&dK, got[1]), read_view(&dV, got[2]);
    for (int a = 3; a < 7; a++)
        if (n[a]) memcpy(got[a], pg[a - 3], n[a] * 4);
    const char *nm[7] = {"dq", "dk", "dv", "d_conv", "d_conv_bias", "d_softplus_param", "d_focus"};
    for (int a = 0; a < 7; a++) {
        if (!n[a]) continue;
        /* focus cancels but for eps: its gradient is ~eps-sized, so a larger
         * step keeps the float64 differences above their rounding */
        const double hs = a == 6 ? 1e-2 : 1e-5;
        double e;
        if (a == 6 && c.ndir) {
            double *ref = calloc(n[6], 8);
            ref_fwd_f(&m, xd, gd, ref);
            e = frob_rel_err(got[a], ref, n[a]);
            free(ref);
        } else if (c.ndir == 0) {
            double *fd = malloc(n[a] * 8);
            for (int64_t i = 0; i < n[a]; i++) {
                const double keep = xd[a][i];
                xd[a][i] = keep + hs;
                const double lp = ref_fwd(&m, xd, gd);
                xd[a][i] = keep - hs;
                const double lm = ref_fwd(&m, xd, gd);
                fd[i] = (lp - lm) / (2 * hs);
                if (a == 6) { /* fourth order: the eps-sized focus gradient needs it */
                    xd[a][i] = keep + 2 * hs;
                    const double lp2 = ref_fwd(&m, xd, gd);
                    xd[a][i] = keep - 2 * hs;
                    const double lm2 = ref_fwd(&m, xd, gd);
                    fd[i] = (8 * (lp - lm) - (lp2 - lm2)) / (12 * hs);
                }
                xd[a][i] = keep;
            }
            e = frob_rel_err(got[a], fd, n[a]);
            if (a == 6) {
                /* d_focus is eps-sized: even fourth-order differences of the
                 * float64 loss resolve it only to ~1e-3 on some inputs. They
                 * check the analytic reference's formula (a wrong formula is
                 * off by O(1)); the library is held to the analytic value. */
                double *ref = calloc(n[6], 8);
                ref_fwd_f(&m, xd, gd, ref);
                const double ea = frob_rel_err_d(ref, fd, n[6]);
                CHECK(ea < 1e-2, "focused reference: analytic d_focus vs central differences %.3g", ea);
                e = frob_rel_err(got[a], ref, n[a]);
                free(ref);
            }
            free(fd);
        } else { /* <grad, δ> against the directional difference, relative to ‖grad‖‖δ‖ */
            double *dir = malloc(n[a] * 8), worst = 0, gn = 0;
            for (int64_t i = 0; i < n[a]; i++) gn += (double)got[a][i] * got[a][i];
            for (int t = 0; t < c.ndir; t++) {
                double dn = 0, dot = 0;
                for (int64_t i = 0; i < n[a]; i++) dir[i] = la_rng_normal(rng), dn += dir[i] * dir[i];
                for (int64_t i = 0; i < n[a]; i++) dot += got[a][i] * dir[i], xd[a][i] += hs * dir[i];
                const double lp = ref_fwd(&m, xd, gd);
                for (int64_t i = 0; i < n[a]; i++) xd[a][i] -= 2 * hs * dir[i];
                const double lm = ref_fwd(&m, xd, gd);
                for (int64_t i = 0; i < n[a]; i++) xd[a][i] += hs * dir[i];
                const double rel = fabs(dot - (lp - lm) / (2 * hs)) / (sqrt(gn * dn) + 1e-300);
                if (!isfinite(dot)) worst = INFINITY;
                if (rel > worst) worst = rel;
            }
            e = worst;
            free(dir);
        }
        /* d_focus at large maps: an eps-sized sum of N signed terms whose
         * float32 rounding (~1e-5 each) does not cancel with them */
        const double tol = a == 6 && c.ndir ? 2e-3 : 2e-4;
        CHECK(e <= tol, "focused bwd %s %lldx%lld H%lld D%lld Dv%lld k%lld conv=%d bias=%d sp=%d focus=%d p=%g %s %s: %s rel err %.3g",
              m.blog ? "blog" : "flatten", (long long)m.Hm, (long long)m.Wm, (long long)m.H, (long long)m.D,
              (long long)m.Dv, (long long)m.ks, m.has_conv, m.has_bias, m.has_sp, m.has_focus, m.p,
              la_dtype_name(c.dt), layout_name[c.layout], nm[a], e);
    }
    /* determinism and NULL gradients */
    hview dQ2 = make_view(NULL, 4, eq, c.dt, c.layout), dV2 = make_view(NULL, 4, ev, c.dt, c.layout);
    CHECK_OK(la_focused_backward(&p, &Q.t, &K.t, &V.t, pp[0], pp[1], pp[2], pp[3], NULL, &G.t,
                                 &dQ2.t, NULL, &dV2.t, NULL, NULL, NULL, NULL, ctx));
    CHECK(views_identical(&dQ, &dQ2) && views_identical(&dV, &dV2),
          "focused bwd: repeated / partial calls are not bit-identical");
    la_context_destroy(ctx);
    for (int a = 0; a < 7; a++) free(x[a]), free(xd[a]), free(got[a]);
    for (int a = 0; a < 4; a++) free(pg[a]);
    free(g), free(gd);
    hview *all[9] = {&Q, &K, &V, &G, &dQ, &dK, &dV, &dQ2, &dV2};
    for (int i = 0; i < 9; i++) free(all[i]->buf);
}

static fo_case flat(int64_t Hm, int64_t Wm, int64_t H, int64_t D, int conv) {
    fo_case c = {{1, Hm, Wm, H, D, D, 3, 0, conv, conv, 1, 0, 3.0, 1e-6}, LA_F32, L_CONTIG, 2, 0};
    return c;
}
static fo_case blog(int64_t Hm, int64_t Wm, int64_t H, int64_t D, int conv) {
    fo_case c = {{1, Hm, Wm, H, D, D + 1, 3, 1, conv, 0, 0, 1, 3.0, 1e-6}, LA_F32, L_CONTIG, 2, 0};
    return c;
}

static void test_bad_input(void) {
    const int64_t eq[4] = {1, 12, 2, 3}, ec[3] = {3, 3, 3}, e6[1] = {6}, e2[1] = {2};
    float *z = calloc(200, 4), *gb = malloc(400);
    la_fill_nan(gb, 100);
    hview Q = make_view(z, 4, eq, LA_F32, L_CONTIG), G = make_view(z, 4, eq, LA_F32, L_CONTIG);
    hview dQ = make_view(NULL, 4, eq, LA_F32, L_CONTIG);
    la_tensor conv, dconv, dsp, dfo;
    la_tensor_init(&conv, z, LA_F32, LA_DEVICE_CPU, 3, ec);
    la_tensor_init(&dconv, gb, LA_F32, LA_DEVICE_CPU, 3, ec);
    la_tensor_init(&dsp, gb + 50, LA_F32, LA_DEVICE_CPU, 1, e6);
    la_tensor_init(&dfo, gb + 60, LA_F32, LA_DEVICE_CPU, 1, e2);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = 3, p.map_w = 4;
    CHECK_STATUS(la_focused_backward(&p, &Q.t, &Q.t, &Q.t, NULL, NULL, NULL, NULL, NULL, &G.t, &dQ.t,
                                     NULL, NULL, &dconv, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "d_conv") != NULL, "message names d_conv: %s", la_last_error());
    CHECK_STATUS(la_focused_backward(&p, &Q.t, &Q.t, &Q.t, &conv, NULL, NULL, NULL, NULL, &G.t, &dQ.t,
                                     NULL, NULL, NULL, NULL, &dsp, NULL, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_focused_backward(&p, &Q.t, &Q.t, &Q.t, &conv, NULL, NULL, NULL, NULL, &G.t, &dQ.t,
                                     NULL, NULL, NULL, NULL, NULL, &dfo, NULL), LA_ERR_ARG);
    p.map_w = 5;
    CHECK_STATUS(la_focused_backward(&p, &Q.t, &Q.t, &Q.t, NULL, NULL, NULL, NULL, NULL, &G.t, &dQ.t,
                                     NULL, NULL, NULL, NULL, NULL, NULL, NULL), LA_ERR_SHAPE);
    p.map_w = 4;
    CHECK_STATUS(la_focused_backward(&p, &Q.t, &Q.t, &Q.t, NULL, NULL, NULL, NULL, NULL, &G.t, &dQ.t,
                                     &dQ.t, NULL, NULL, NULL, NULL, NULL, NULL), LA_ERR_ARG);
    int untouched = view_untouched(&dQ, view_storage(&dQ));
    for (int i = 0; i < 100; i++) untouched &= isnan(gb[i]);
    CHECK(untouched, "a rejected focused backward wrote a gradient");
    free(Q.buf), free(G.buf), free(dQ.buf), free(z), free(gb);
}

int main(void) {
    la_rng rng = la_test_rng("test_backward_focused");
    /* every entry by central differences */
    run_case(&rng, flat(3, 4, 2, 3, 1));
    run_case(&rng, flat(4, 3, 2, 4, 0));
    fo_case c = flat(3, 5, 2, 3, 1);
    c.m.p = 2.5, c.m.has_bias = 0;
    run_case(&rng, c);
    c = flat(3, 3, 1, 2, 1);
    c.m.has_sp = 0, c.m.B = 2;
    run_case(&rng, c);
    run_case(&rng, blog(3, 4, 2, 3, 1));
    run_case(&rng, blog(4, 3, 2, 2, 0));
    c = blog(3, 5, 2, 3, 1);
    c.m.has_focus = 0, c.m.B = 2;
    run_case(&rng, c);
    /* directional derivatives at larger sizes, layouts, dtypes */
    const int64_t maps[3][2] = {{7, 9}, {5, 13}, {25, 40}};
    const int64_t Ds[3] = {16, 63, 32};
    for (int i = 0; i < 3; i++)
        for (int v = 0; v < 2; v++) {
            fo_case d = v ? blog(maps[i][0], maps[i][1], 2, Ds[i], 1) : flat(maps[i][0], maps[i][1], 2, Ds[i], 1);
            d.ndir = 3;
            d.m.ks = i == 1 ? 5 : 3;
            d.layout = i;
            run_case(&rng, d);
        }
    /* flatten at D = 64 and 128 (the vector rows and conv sums), 5×5 taps, p = 3 and 2.5 */
    c = flat(9, 11, 2, 64, 1);
    c.ndir = 3, c.m.ks = 5;
    run_case(&rng, c);
    c = flat(5, 7, 3, 128, 1);
    c.ndir = 3, c.m.p = 2.5, c.layout = 1;
    run_case(&rng, c);
    c = flat(6, 6, 3, 8, 1);
    c.ndir = 3, c.dt = LA_F64, c.threads = 1;
    run_case(&rng, c);
    test_bad_input();
    return la_test_finish();
}
