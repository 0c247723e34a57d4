/* Backward case table: focused attention (flatten and blog, with and
 * without the depthwise conv and the learned parameters). The float64
 * reference is the central difference of L = Σ dO·o in every input
 * element, through a float64 forward of both variants (which checks the
 * gradient without restating its derivation). From the former
 * tests/cuda/test_cuda_backward_attn.h; staging, bounds and what each
 * backend checks: bo_bwd.h. */
#include "bo_bwd.h"

static double *dz(int64_t n) { return (double *)calloc((size_t)(n ? n : 1), sizeof(double)); }

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
/* ---- flatten: the analytic float64 backward ---------------------------------------
 * Sum form o = φqᵀS/(φqᵀz + N·eps) (= the mean form), then through f_p, the
 * ReLU, the softplus scale and the conv. rb: the same formula with its
 * intermediates rounded to bf16 where a bf16 formulation rounds them (φq, φk;
 * S, z; num, den; dnum, dden; dS, dz; dφq, dφk) and dq, dk, dv rounded: the
 * "bf16 formula" of the bound. Checked against the central differences on
 * the small cases (run_focused). Gradients written (not accumulated). */
#define FRB(x) (rb ? rb16(x) : (x))
static double fo_softplus(double s) { return s > 0 ? s + log1p(exp(-s)) : log1p(exp(s)); }
static void fo_ref_flatten(const fo_in *F, int rb, double *gq, double *gk, double *gv,
                           double *gconv, double *gbias, double *gsp) {
    const int64_t B = F->B, N = F->N, H = F->H, D = F->D, Dv = F->Dv, C = H * D;
    const int64_t ks = F->ks, r = ks / 2;
    double *xp[2] = {dz(N * C), dz(N * C)}, *ph[2] = {dz(N * C), dz(N * C)};
    double *dph[2] = {dz(N * C), dz(N * C)}, *n1[2] = {dz(N), dz(N)}, *ny[2] = {dz(N), dz(N)};
    double *S = dz(D * Dv), *z = dz(D), *dS = dz(D * Dv), *dzv = dz(D);
    double *num = dz(N * Dv), *den = dz(N), *dnum = dz(N * Dv), *dden = dz(N);
    double *spv = dz(C), *acc_sp = dz(C);
    for (int64_t c = 0; c < C; c++) spv[c] = fo_softplus(F->sp ? F->sp[c] : 0.0);
    if (gconv) memset(gconv, 0, sizeof(double) * (size_t)(D * ks * ks));
    if (gbias) memset(gbias, 0, sizeof(double) * (size_t)D);
    for (int64_t b = 0; b < B; b++) {
        const double *x2[2] = {F->q + b * N * C, F->k + b * N * C};
        const double *vb = F->v + b * N * H * Dv, *gb = F->g + b * N * H * Dv;
        for (int w = 0; w < 2; w++)
            for (int64_t n = 0; n < N; n++) {
                double s1 = 0, s2 = 0;
                for (int64_t c = 0; c < C; c++) {
                    const double x = x2[w][n * C + c];
                    const double a = ((x > 0 ? x : 0) + 1e-6) / spv[c];
                    xp[w][n * C + c] = a;
                    s1 += a * a;
                    s2 += pow(a, 2 * F->p);
                }
                n1[w][n] = sqrt(s1), ny[w][n] = sqrt(s2);
                for (int64_t c = 0; c < C; c++)
                    ph[w][n * C + c] = FRB(n1[w][n] * pow(xp[w][n * C + c], F->p) / ny[w][n]);
            }
        for (int64_t h = 0; h < H; h++) {
            memset(S, 0, sizeof(double) * (size_t)(D * Dv));
            memset(z, 0, sizeof(double) * (size_t)D);
            memset(dS, 0, sizeof(double) * (size_t)(D * Dv));
            memset(dzv, 0, sizeof(double) * (size_t)D);
            for (int64_t n = 0; n < N; n++)
                for (int64_t d = 0; d < D; d++) {
                    const double kk = ph[1][n * C + h * D + d];
                    z[d] += kk;
                    for (int64_t e = 0; e < Dv; e++) S[d * Dv + e] += kk * vb[(n * H + h) * Dv + e];
                }
            for (int64_t i = 0; i < D * Dv; i++) S[i] = FRB(S[i]);
            for (int64_t d = 0; d < D; d++) z[d] = FRB(z[d]);
            for (int64_t n = 0; n < N; n++) {
                const double *qt = ph[0] + n * C + h * D, *g = gb + (n * H + h) * Dv;
                double dd = (double)N * F->eps, gn = 0;
                for (int64_t d = 0; d < D; d++) dd += qt[d] * z[d];
                den[n] = FRB(dd);
                for (int64_t e = 0; e < Dv; e++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++) a += qt[d] * S[d * Dv + e];
                    num[n * Dv + e] = FRB(a);
                    gn += g[e] * num[n * Dv + e];
                }
                for (int64_t e = 0; e < Dv; e++) dnum[n * Dv + e] = FRB(g[e] / den[n]);
                dden[n] = FRB(-gn / (den[n] * den[n]));
                for (int64_t d = 0; d < D; d++) {
                    for (int64_t e = 0; e < Dv; e++) dS[d * Dv + e] += qt[d] * dnum[n * Dv + e];
                    dzv[d] += qt[d] * dden[n];
                }
            }
            for (int64_t i = 0; i < D * Dv; i++) dS[i] = FRB(dS[i]);
            for (int64_t d = 0; d < D; d++) dzv[d] = FRB(dzv[d]);
            for (int64_t n = 0; n < N; n++) {
                const double *kt = ph[1] + n * C + h * D, *vv = vb + (n * H + h) * Dv;
                for (int64_t d = 0; d < D; d++) {
                    double aq = z[d] * dden[n], ak = dzv[d];
                    for (int64_t e = 0; e < Dv; e++) {
                        aq += S[d * Dv + e] * dnum[n * Dv + e];
                        ak += dS[d * Dv + e] * vv[e];
                    }
                    dph[0][n * C + h * D + d] = FRB(aq);
                    dph[1][n * C + h * D + d] = FRB(ak);
                }
                const int64_t y = n / F->Wm, xx = n % F->Wm;
                for (int64_t e = 0; e < Dv; e++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++) a += dS[d * Dv + e] * kt[d];
                    if (F->conv)
                        for (int64_t ta = 0; ta < ks; ta++)
                            for (int64_t tc = 0; tc < ks; tc++) {
                                const int64_t yy = y - ta + r, x2i = xx - tc + r;
                                if (yy < 0 || yy >= F->Hm || x2i < 0 || x2i >= F->Wm) continue;
                                const double gg = gb[((yy * F->Wm + x2i) * H + h) * Dv + e];
                                a += F->conv[(e * ks + ta) * ks + tc] * gg;
                                if (gconv) gconv[(e * ks + ta) * ks + tc] += gg * vv[e];
                            }
                    if (gbias) gbias[e] += gb[(n * H + h) * Dv + e];
                    gv[((b * N + n) * H + h) * Dv + e] = FRB(a);
                }
            }
        }
        /* through f_p: dx' = (G·ŷ) x'/‖x'‖ + ‖x'‖ p x'^(p−1) (G − (G·ŷ) ŷ)/‖x'^p‖ */
        for (int w = 0; w < 2; w++) {
            double *out = (w ? gk : gq) + b * N * C;
            for (int64_t n = 0; n < N; n++) {
                const double *a = xp[w] + n * C, *G = dph[w] + n * C;
                double gy = 0;
                for (int64_t c = 0; c < C; c++) gy += G[c] * pow(a[c], F->p) / ny[w][n];
                for (int64_t c = 0; c < C; c++) {
                    const double yh = pow(a[c], F->p) / ny[w][n];
                    const double d = gy * a[c] / n1[w][n] +
                                     n1[w][n] * F->p * pow(a[c], F->p - 1) * (G[c] - gy * yh) / ny[w][n];
                    out[n * C + c] = FRB(x2[w][n * C + c] > 0 ? d / spv[c] : 0.0);
                    acc_sp[c] += d * a[c];
                }
            }
        }
    }
    if (gsp)
        for (int64_t c = 0; c < C; c++) {
            const double s = F->sp ? F->sp[c] : 0.0;
            gsp[c] = -acc_sp[c] / (1.0 + exp(-s)) / spv[c];
        }
    for (int w = 0; w < 2; w++) free(xp[w]), free(ph[w]), free(dph[w]), free(n1[w]), free(ny[w]);
    free(S), free(z), free(dS), free(dzv), free(num), free(den), free(dnum), free(dden);
    free(spv), free(acc_sp);
}
#undef FRB
/* an fp32 parameter gradient of a bf16 case: within twice the error of the
 * bf16 formula (ref_b) plus 1e-4, as the bf16 gradients (its precision is
 * that of the bf16 intermediates it is summed from); else 1e-4 */
static void fo_check_param(const char *what, const char *gname, tt *g, const double *ref,
                           const double *ref_b) {
    tt_download(g);
    const double e = frob_err(g->h, ref, g->n);
    const double bound = ref_b ? 2.0 * frob_err_d(ref_b, ref, g->n) + 1e-4 : 1e-4;
    CHECK(e <= bound, "%s %s: rel Frobenius err %.3g > %.3g", what, gname, e, bound);
    printf("  %-8s err %.3g (bound %.3g) %s\n", gname, e, bound, e <= bound ? "ok" : "FAIL");
}

static double *to_d(const tt *x) {
    double *d = dz(x->n);
    for (int64_t i = 0; i < x->n; i++) d[i] = x->h[i];
    return d;
}
typedef struct fo_case {
    int cuda; /* set by bwd_add */
    int blog;
    int64_t B, Hm, Wm, H, D, Dv, ks; /* ks 0: no conv */
    int with_params;
    la_dtype dt;
    int perm;
    int small;  /* also on the CPU backend (and cheap enough for it) */
    double eps; /* 0: 1e-6 (blog with params: N·D) */
    double p;   /* flatten's power; 0: 3 */
} fo_case;

static void run_focused(const void *arg) {
    const fo_case *c = arg;
    const int cu = c->cuda, blog = c->blog, with_params = c->with_params, perm = c->perm;
    const int64_t B = c->B, Hm = c->Hm, Wm = c->Wm, H = c->H, D = c->D, Dv = c->Dv, ks = c->ks;
    const la_dtype dt = c->dt;
    la_rng *r = &bo_rng;
    la_context *ctx = bo_ctx();
    const int64_t N = Hm * Wm, C = H * D;
    char what[160];
    snprintf(what, sizeof what, "focused %s B%lld %lldx%lld H%lld D%lld Dv%lld k%lld%s %s%s",
             blog ? "blog" : "flatten", (long long)B, (long long)Hm, (long long)Wm, (long long)H,
             (long long)D, (long long)Dv, (long long)ks, with_params ? " params" : "",
             dt == LA_BF16 ? "bf16" : "f32", perm ? " perm" : "");
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    tt q = tt_rand(cu, r, 4, nq, dt, perm, 1.0), k = tt_rand(cu, r, 4, nq, dt, perm, 1.0);
    tt v = tt_rand(cu, r, 4, nv, dt, perm, 1.0), go = tt_rand(cu, r, 4, nv, dt, perm, 1.0);
    /* q, k away from the ReLU kink at 0 by more than the differences' step
     * (1e-5): a central difference across it is no derivative */
    for (int w = 0; w < 2; w++) {
        tt *x = w ? &k : &q;
        for (int64_t i = 0; i < x->n; i++)
            if (fabsf(x->h[i]) < 1e-3f) x->h[i] = la_round_bf16(x->h[i] < 0 ? -1e-3f : 1e-3f);
        tt_upload(x);
    }
    tt dq = tt_poison(cu, 4, nq, dt, perm), dk = tt_poison(cu, 4, nq, dt, perm), dv = tt_poison(cu, 4, nv, dt, perm);
    const int64_t Cc = blog ? C : D;
    int64_t ncv[3] = {Cc, ks, ks}, nb1[1] = {D}, nsp[1] = {C}, nf[1] = {H};
    tt conv = {0}, bias = {0}, sp = {0}, foc = {0}, dconv = {0}, dbias = {0}, dsp = {0}, dfoc = {0};
    const int has_conv = ks > 0;
    if (has_conv) {
        conv = tt_rand(cu, r, 3, ncv, LA_F32, 0, 0.3), dconv = tt_poison(cu, 3, ncv, LA_F32, 0);
        /* blog: positive weights, so that K̂ is a valid (positive) key map and
         * the denominators stay away from 0 (signed K̂ makes q̃·ẑ cancel) */
        if (blog) {
            for (int64_t i = 0; i < conv.n; i++) conv.h[i] = (float)(0.05 + 0.3 * la_rng_uniform(r));
            tt_upload(&conv);
        }
    }
    if (with_params && !blog) {
        bias = tt_rand(cu, r, 1, nb1, LA_F32, 0, 0.5), dbias = tt_poison(cu, 1, nb1, LA_F32, 0);
        sp = tt_rand(cu, r, 1, nsp, LA_F32, 0, 0.5), dsp = tt_poison(cu, 1, nsp, LA_F32, 0);
    }
    if (with_params && blog) {
        foc = tt_new(cu, 1, nf, LA_F32, 0);
        for (int64_t h = 0; h < H; h++) foc.h[h] = (float)(0.5 + la_rng_uniform(r));
        tt_upload(&foc);
        dfoc = tt_poison(cu, 1, nf, LA_F32, 0);
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
    const double eps = c->eps > 0 ? c->eps : (blog && with_params) ? (double)(N * D) : 1e-6;
    F.ks = has_conv ? ks : 1, F.p = c->p > 0 ? c->p : 3.0, F.eps = eps;
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
    /* the central differences cost (inputs) × (one forward): the small cases */
    const double fd_cost = (double)(q.n + k.n + v.n) * (double)(N * C * Dv);
    const int fd = blog || fd_cost <= 2e8;
    if (fd) {
        fo_fd(&F, F.q, q.n, rq);
        fo_fd(&F, F.k, k.n, rk);
        fo_fd(&F, F.v, v.n, rv);
        if (rc) fo_fd(&F, F.conv, conv.n, rc);
        if (rb) fo_fd(&F, F.bias, bias.n, rb);
        if (rs) fo_fd(&F, F.sp, sp.n, rs);
        if (rf) fo_fd(&F, F.focus, foc.n, rf);
    }
    /* bf16: twice the error of the same formula with bf16 intermediates
     * (flatten: fo_ref_flatten's rounded form; blog: the float64 gradient
     * rounded to bf16) */
    double *bq = NULL, *bk = NULL, *bv = NULL, *bs = NULL;
    if (!blog) {
        /* the analytic reference, checked against the differences where they ran */
        double *aq = dz(q.n), *ak = dz(k.n), *av = dz(v.n);
        double *ac = rc ? dz(conv.n) : NULL, *ab = rb ? dz(bias.n) : NULL, *as = rs ? dz(sp.n) : NULL;
        fo_ref_flatten(&F, 0, aq, ak, av, ac, ab, as);
        if (fd) {
            const double eq = frob_err_d(aq, rq, q.n), ek = frob_err_d(ak, rk, k.n);
            const double ev = frob_err_d(av, rv, v.n);
            CHECK(eq <= 1e-5 && ek <= 1e-5 && ev <= 1e-5,
                  "%s: analytic reference vs differences dq %.3g dk %.3g dv %.3g", what, eq, ek, ev);
            if (ac) CHECK(frob_err_d(ac, rc, conv.n) <= 1e-5, "%s: analytic d_conv", what);
            if (ab) CHECK(frob_err_d(ab, rb, bias.n) <= 1e-5, "%s: analytic d_conv_bias", what);
            if (as) CHECK(frob_err_d(as, rs, sp.n) <= 1e-5, "%s: analytic d_softplus_param", what);
            printf("  analytic vs differences: dq %.3g dk %.3g dv %.3g\n", eq, ek, ev);
        }
        free(rq), free(rk), free(rv), free(rc), free(rb), free(rs);
        rq = aq, rk = ak, rv = av, rc = ac, rb = ab, rs = as;
        if (dt == LA_BF16) {
            bq = dz(q.n), bk = dz(k.n), bv = dz(v.n), bs = rs ? dz(sp.n) : NULL;
            fo_ref_flatten(&F, 1, bq, bk, bv, NULL, NULL, bs);
        }
    } else if (dt == LA_BF16) {
        bq = dz(q.n), bk = dz(k.n), bv = dz(v.n);
        for (int64_t i = 0; i < q.n; i++) bq[i] = rb16(rq[i]), bk[i] = rb16(rk[i]);
        for (int64_t i = 0; i < v.n; i++) bv[i] = rb16(rv[i]);
    }
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
    p.map_h = Hm, p.map_w = Wm;
    p.eps = (float)eps;
    p.p = (float)F.p;
    float *saved[3] = {NULL, NULL, NULL};
    for (int call = 0; call < 2; call++) {
        la_status st = (call ? la_focused_backward : BWD_FIRST(cu, la_focused_backward, la_focused_backward_cuda))(
            &p, &q.t, &k.t, &v.t, has_conv ? &conv.t : NULL, bias.h ? &bias.t : NULL,
            sp.h ? &sp.t : NULL, foc.h ? &foc.t : NULL, NULL, &go.t, &dq.t, &dk.t, &dv.t,
            has_conv ? &dconv.t : NULL, bias.h ? &dbias.t : NULL, sp.h ? &dsp.t : NULL,
            foc.h ? &dfoc.t : NULL, ctx);
        if (!bwd_ok(cu, st, what)) break;
        if (call == 0) {
            check_grad(what, "dq", &dq, rq, bq);
            check_grad(what, "dk", &dk, rk, bk);
            check_grad(what, "dv", &dv, rv, bv);
            if (rc) check_grad(what, "d_conv", &dconv, rc, NULL);
            if (rb) check_grad(what, "d_conv_bias", &dbias, rb, NULL);
            if (rs) fo_check_param(what, "d_softplus_param", &dsp, rs, bs);
            if (rf) check_grad(what, "d_focus", &dfoc, rf, NULL);
            saved[0] = tt_copy_host(&dq), saved[1] = tt_copy_host(&dk), saved[2] = tt_copy_host(&dv);
            tt_repoison(&dq), tt_repoison(&dk), tt_repoison(&dv);
        } else {
            check_same(what, "dq", &dq, saved[0]);
            check_same(what, "dk", &dk, saved[1]);
            check_same(what, "dv", &dv, saved[2]);
        }
    }
    if (cu && saved[2]) {
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
    free(rq), free(rk), free(rv), free(rc), free(rb), free(rs), free(rf), free(bq), free(bk), free(bv), free(bs);
    tt_free(&q), tt_free(&k), tt_free(&v), tt_free(&go), tt_free(&dq), tt_free(&dk), tt_free(&dv);
    if (has_conv) tt_free(&conv), tt_free(&dconv);
    if (bias.h) tt_free(&bias), tt_free(&dbias);
    if (sp.h) tt_free(&sp), tt_free(&dsp);
    if (foc.h) tt_free(&foc), tt_free(&dfoc);
}

static const char *const fo_variants[] = BWD_VARIANTS_FOCUSED;
#define NV(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* The smallest CUDA call of the family (flatten, f32, a 2x2 map, zeros),
 * through the public entry point: its kernel choice under the variant
 * forced in ctx. */
static la_status probe_focused(la_context *ctx) {
    int64_t ne[4] = {1, 4, 1, 16};
    tt q = tt_new(1, 4, ne, LA_F32, 0), g = tt_new(1, 4, ne, LA_F32, 0);
    la_dev_memset(q.d, 0, (size_t)q.phys * 4);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = 2, p.map_w = 2;
    la_status s = la_focused_backward(&p, &q.t, &q.t, &q.t, NULL, NULL, NULL, NULL, NULL, &q.t,
                                      &g.t, NULL, NULL, NULL, NULL, NULL, NULL, ctx);
    la_dev_synchronize();
    tt_free(&q), tt_free(&g);
    return s;
}

void cases_backward_focused(bo_list *L) {
    bo_add_probe(L, "focused_bwd", probe_focused);
    /* cuda blog B Hm Wm H D Dv ks(0 = no conv) params dtype perm small eps p */
    const fo_case cases[] = {
        {0, 0, 1, 3, 3, 1, 16, 16, 3, 1, LA_F32, 0, 1, 0, 0},
        {0, 0, 2, 9, 7, 2, 16, 16, 5, 1, LA_F32, 1, 1, 0, 0},
        {0, 0, 1, 5, 6, 2, 8, 12, 0, 1, LA_F32, 0, 1, 0, 0},
        {0, 0, 1, 8, 8, 2, 16, 16, 3, 0, LA_BF16, 1, 1, 0, 0},
        {0, 0, 1, 7, 9, 2, 16, 16, 3, 1, LA_BF16, 0, 1, 0, 0},
        {0, 1, 1, 9, 7, 2, 16, 16, 3, 1, LA_F32, 1, 1, 0, 0},
        {0, 1, 2, 4, 5, 2, 8, 12, 0, 0, LA_F32, 0, 1, 0, 0},
        {0, 1, 1, 8, 8, 2, 16, 16, 3, 1, LA_BF16, 0, 1, 0, 0},
        /* the shapes of the "mma" variant (bf16, D = Dv in {64, 128}, N >= 64),
         * CUDA only; below 64 tokens (1x1, 63, 30) the library's choice is the
         * portable engine (forced "mma": SKIPPED). One token: with eps ≪ φq·φk
         * the gradients of q, k are eps-sized differences of O(1) terms (no
         * precision left in bf16), so eps ≫ φq·φk there */
        {0, 0, 1, 1, 1, 1, 64, 64, 1, 1, LA_BF16, 0, 0, 1000.0, 0},
        {0, 0, 1, 1, 1, 2, 128, 128, 0, 1, LA_BF16, 1, 0, 1000.0, 0},
        {0, 0, 2, 7, 9, 2, 128, 128, 5, 1, LA_BF16, 1, 0, 0, 0},
        {0, 0, 2, 9, 7, 3, 64, 64, 3, 0, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 5, 6, 2, 64, 64, 0, 0, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 8, 9, 2, 64, 64, 0, 0, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 32, 32, 2, 64, 64, 3, 1, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 9, 9, 2, 128, 128, 9, 1, LA_BF16, 0, 0, 0, 0},
        /* C = H·D = 4096 (16 chunks of 8 per lane) and C = 320 (lanes with 1 or 2 chunks) */
        {0, 0, 1, 8, 8, 32, 128, 128, 3, 1, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 8, 10, 5, 64, 64, 3, 1, LA_BF16, 1, 0, 0, 0},
        /* p other than 3 (the general power) */
        {0, 0, 1, 9, 11, 2, 64, 64, 3, 1, LA_BF16, 0, 0, 0, 2.5},
        {0, 0, 2, 11, 9, 2, 128, 128, 5, 1, LA_BF16, 1, 0, 0, 0},
        /* several CTAs' rows of the per-token passes and of d_conv */
        {0, 0, 1, 48, 48, 1, 128, 128, 7, 1, LA_BF16, 1, 0, 0, 0},
        /* d_conv's row lanes (6 at D = 64, k = 5) over stripes of map rows
         * whose last one is partial, several (b, h); a row shorter than the
         * lanes' column blocks of k */
        {0, 0, 2, 67, 5, 3, 64, 64, 5, 1, LA_BF16, 0, 0, 0, 0},
        /* shapes the "mma" variant refuses (D = 32; fp32): the portable engine */
        {0, 0, 1, 7, 9, 2, 32, 32, 3, 1, LA_BF16, 0, 0, 0, 0},
        {0, 0, 1, 7, 9, 2, 64, 64, 3, 1, LA_F32, 1, 0, 0, 0},
    };
    char name[BO_NAME_MAX];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fo_case c = cases[i];
        snprintf(name, sizeof name, "focused %s B%lld %lldx%lld H%lld D%lld Dv%lld k%lld%s %s%s",
                 c.blog ? "blog" : "flatten", (long long)c.B, (long long)c.Hm, (long long)c.Wm,
                 (long long)c.H, (long long)c.D, (long long)c.Dv, (long long)c.ks,
                 c.with_params ? " params" : "", dtn(c.dt), c.perm ? " perm" : "");
        if (c.eps > 0)
            snprintf(name + strlen(name), sizeof name - strlen(name), " eps%g", c.eps);
        if (c.p > 0) snprintf(name + strlen(name), sizeof name - strlen(name), " p%g", c.p);
        bwd_add(L, "focused_backward", "focused_bwd", fo_variants, NV(fo_variants), c.small, run_focused,
                &c, sizeof c, name);
    }
}
