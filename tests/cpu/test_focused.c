/* Focused linear attention (SPEC §4), both variants, against a float64
 * reference written plainly below; plus the three facts about the blog's
 * printed listing (SPEC §4 (i)-(iii)), each shown by a computation. */
#include "core/internal.h" /* bf16 conversion helpers */
#include "test_util.h"

/* ------------------------------------------------------------------------ */
/* float64 reference                                                         */
/* ------------------------------------------------------------------------ */
typedef struct ref_case {
    int blog;
    int64_t B, N, H, D, Dv, Hm, Wm, ks; /* ks = 0: no conv */
    double p, eps;
    const double *q, *k, *v;   /* contiguous [B,N,H,D] / [B,N,H,Dv] */
    const double *conv;        /* [Cc][ks][ks] or NULL */
    const double *bias;        /* [D] or NULL (flatten) */
    const double *sp;          /* [H*D] or NULL (flatten) */
    const double *focus;       /* [H] or NULL (blog, default 2) */
} ref_case;

static double softplus_ref(double s) { return log(1.0 + exp(s)); }

/* q~ and k~ of one batch element: [N][C] each. */
static void ref_features(const ref_case *c, int64_t b, double *qt, double *kt) {
    const int64_t N = c->N, H = c->H, D = c->D, C = H * D;
    const double *q = c->q + b * N * C, *k = c->k + b * N * C;
    if (!c->blog) {
        for (int w = 0; w < 2; w++) {
            const double *x = w ? k : q;
            double *y = w ? kt : qt;
            for (int64_t n = 0; n < N; n++) {
                double n2 = 0, np2 = 0;
                for (int64_t ch = 0; ch < C; ch++) {
                    double xv = x[n * C + ch];
                    double xp = ((xv > 0 ? xv : 0) + 1e-6) / softplus_ref(c->sp ? c->sp[ch] : 0.0);
                    y[n * C + ch] = xp;
                    n2 += xp * xp;
                }
                for (int64_t ch = 0; ch < C; ch++) {
                    double t = pow(y[n * C + ch], c->p);
                    y[n * C + ch] = t;
                    np2 += t * t;
                }
                for (int64_t ch = 0; ch < C; ch++) y[n * C + ch] *= sqrt(n2) / sqrt(np2);
            }
        }
    } else {
        const double s = 1.0 / sqrt((double)D);
        double *phik = (double *)malloc(sizeof(double) * N * C);
        for (int64_t i = 0; i < N * C; i++) {
            double x = q[i] * s;
            qt[i] = (x > 0 ? x : 0) + 1;
            phik[i] = (k[i] > 0 ? k[i] : 0) + 1;
        }
        const int64_t r = c->ks / 2;
        for (int64_t n = 0; n < N; n++) {
            int64_t y = n / c->Wm, x = n % c->Wm;
            for (int64_t ch = 0; ch < C; ch++) {
                double acc = 0;
                if (!c->conv) {
                    acc = phik[n * C + ch];
                } else {
                    for (int64_t a = 0; a < c->ks; a++)
                        for (int64_t bb = 0; bb < c->ks; bb++) {
                            int64_t yy = y + a - r, xx = x + bb - r;
                            if (yy < 0 || yy >= c->Hm || xx < 0 || xx >= c->Wm) continue;
                            acc += c->conv[(ch * c->ks + a) * c->ks + bb] *
                                   phik[(yy * c->Wm + xx) * C + ch];
                        }
                }
                kt[n * C + ch] = acc * (c->focus ? c->focus[ch / D] : 2.0);
            }
        }
        free(phik);
    }
}

static void ref_focused(const ref_case *c, double *out) {
    const int64_t N = c->N, H = c->H, D = c->D, Dv = c->Dv, C = H * D;
    double *qt = malloc(sizeof(double) * N * C), *kt = malloc(sizeof(double) * N * C);
    double *S = malloc(sizeof(double) * D * Dv), *z = malloc(sizeof(double) * D);
    for (int64_t b = 0; b < c->B; b++) {
        ref_features(c, b, qt, kt);
        const double *v = c->v + b * N * H * Dv;
        double *o = out + b * N * H * Dv;
        for (int64_t h = 0; h < H; h++) {
            for (int64_t j = 0; j < D; j++) {
                z[j] = 0;
                for (int64_t e = 0; e < Dv; e++) S[j * Dv + e] = 0;
                for (int64_t n = 0; n < N; n++) {
                    z[j] += kt[n * C + h * D + j];
                    for (int64_t e = 0; e < Dv; e++)
                        S[j * Dv + e] += kt[n * C + h * D + j] * v[(n * H + h) * Dv + e];
                }
            }
            for (int64_t n = 0; n < N; n++) {
                double den = 0;
                for (int64_t j = 0; j < D; j++) den += qt[n * C + h * D + j] * z[j];
                for (int64_t e = 0; e < Dv; e++) {
                    double num = 0;
                    for (int64_t j = 0; j < D; j++) num += qt[n * C + h * D + j] * S[j * Dv + e];
                    double val = c->blog ? num / (den + c->eps)
                                         : (num / N) / (den / N + c->eps); /* mean form */
                    if (!c->blog && c->conv) {
                        int64_t y = n / c->Wm, x = n % c->Wm, r = c->ks / 2;
                        double acc = c->bias ? c->bias[e] : 0;
                        for (int64_t a = 0; a < c->ks; a++)
                            for (int64_t bb = 0; bb < c->ks; bb++) {
                                int64_t yy = y + a - r, xx = x + bb - r;
                                if (yy < 0 || yy >= c->Hm || xx < 0 || xx >= c->Wm) continue;
                                acc += c->conv[(e * c->ks + a) * c->ks + bb] *
                                       v[((yy * c->Wm + xx) * H + h) * Dv + e];
                            }
                        val += acc;
                    }
                    o[(n * H + h) * Dv + e] = val;
                }
            }
        }
    }
    free(qt); free(kt); free(S); free(z);
}

/* ------------------------------------------------------------------------ */
/* helpers                                                                   */
/* ------------------------------------------------------------------------ */
static double *randn(la_rng *r, int64_t n, double scale) {
    double *x = malloc(sizeof(double) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++) x[i] = la_rng_normal(r) * scale;
    return x;
}
static float *to_f32(const double *x, int64_t n) {
    float *y = malloc(sizeof(float) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++) y[i] = (float)x[i];
    return y;
}
/* round a double array through bf16 (in place) and return the bf16 copy */
static uint16_t *to_bf16_round(double *x, int64_t n) {
    uint16_t *y = malloc(sizeof(uint16_t) * (n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        y[i] = la_f32_to_bf16((float)x[i]);
        x[i] = la_bf16_to_f32(y[i]);
    }
    return y;
}
static void view4(la_tensor *t, void *data, la_dtype dt, int64_t B, int64_t N, int64_t H,
                  int64_t D) {
    int64_t ne[4] = {B, N, H, D};
    la_tensor_init(t, data, dt, LA_DEVICE_CPU, 4, ne);
}
/* [B,N,H,D] view of a buffer stored as [B,H,N,D] */
static void view4_bhnd(la_tensor *t, void *data, la_dtype dt, int64_t B, int64_t N, int64_t H,
                       int64_t D) {
    int64_t ne[4] = {B, N, H, D}, nb[4] = {H * N * D, D, N * D, 1};
    la_tensor_init_strided(t, data, dt, LA_DEVICE_CPU, 4, ne, nb);
}
static void bnhd_to_bhnd(const double *x, double *y, int64_t B, int64_t N, int64_t H, int64_t D) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t j = 0; j < D; j++)
                    y[((b * H + h) * N + n) * D + j] = x[((b * N + n) * H + h) * D + j];
}
static double rel_err_dd(const double *a, const double *b, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i]) != isnan(b[i])) return INFINITY;
        md = fmax(md, fabs(a[i] - b[i]));
        mr = fmax(mr, fabs(b[i]));
    }
    return md / (mr > 1e-300 ? mr : 1e-300);
}

/* ------------------------------------------------------------------------ */
/* one case: random inputs, run the op with the chosen layout/dtypes, compare */
/* ------------------------------------------------------------------------ */
enum { L_CONTIG = 0, L_STRIDED = 1, L_BF16 = 2, L_OUT_F64 = 3, L_OUT_BF16 = 4 };

static void run_case(la_rng *rng, int blog, int64_t B, int64_t Hm, int64_t Wm, int64_t H,
                     int64_t D, int64_t Dv, int64_t ks, double p, int extras, int layout,
                     la_context *ctx) {
    const int64_t N = Hm * Wm, C = H * D, Cc = blog ? C : D;
    const int64_t nq = B * N * C, nv = B * N * H * Dv;
    ref_case c = {blog, B, N, H, D, Dv, Hm, Wm, ks, p, 1e-6, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    double *q = randn(rng, nq, 1.0), *k = randn(rng, nq, 1.0), *v = randn(rng, nv, 1.0);
    double *conv = ks ? randn(rng, Cc * ks * ks, 0.4) : NULL;
    if (conv && blog) {
        /* Blog: K^ = conv(phi(K)) feeds the denominator q~.sum(K^); signed
         * random weights can drive it to ~0 and make any fp32 result look
         * wrong (ill-conditioned, not a bug). Positive weights around the
         * dirac init keep the case well-conditioned, as trained kernels are. */
        for (int64_t i = 0; i < Cc * ks * ks; i++) conv[i] = fabs(conv[i]);
        for (int64_t ch = 0; ch < C; ch++) conv[(ch * ks + ks / 2) * ks + ks / 2] += 2.0;
    }
    double *bias = (!blog && ks && extras) ? randn(rng, D, 1.0) : NULL;
    double *sp = (!blog && extras) ? randn(rng, C, 1.0) : NULL;
    double *focus = NULL;
    if (blog && extras) {
        focus = randn(rng, H, 1.0);
        for (int64_t h = 0; h < H; h++) focus[h] = 0.5 + fabs(focus[h]);
    }
    void *qb, *kb, *vb;
    la_dtype in_dt = LA_F32;
    if (layout == L_BF16) {
        in_dt = LA_BF16;
        qb = to_bf16_round(q, nq);
        kb = to_bf16_round(k, nq);
        vb = to_bf16_round(v, nv);
    } else if (layout == L_STRIDED) {
        double *t1 = malloc(sizeof(double) * nq), *t2 = malloc(sizeof(double) * nq),
               *t3 = malloc(sizeof(double) * nv);
        bnhd_to_bhnd(q, t1, B, N, H, D);
        bnhd_to_bhnd(k, t2, B, N, H, D);
        bnhd_to_bhnd(v, t3, B, N, H, Dv);
        qb = to_f32(t1, nq); kb = to_f32(t2, nq); vb = to_f32(t3, nv);
        free(t1); free(t2); free(t3);
    } else {
        qb = to_f32(q, nq); kb = to_f32(k, nq); vb = to_f32(v, nv);
    }
    /* the reference sees exactly the values the op sees (f32 or bf16) */
    for (int64_t i = 0; i < nq && layout != L_BF16; i++) { q[i] = (float)q[i]; k[i] = (float)k[i]; }
    for (int64_t i = 0; i < nv && layout != L_BF16; i++) v[i] = (float)v[i];
    c.q = q; c.k = k; c.v = v; c.conv = conv; c.bias = bias; c.sp = sp; c.focus = focus;

    la_tensor tq, tk, tv, tout, tconv, tbias, tsp, tfocus;
    if (layout == L_STRIDED) {
        view4_bhnd(&tq, qb, in_dt, B, N, H, D);
        view4_bhnd(&tk, kb, in_dt, B, N, H, D);
        view4_bhnd(&tv, vb, in_dt, B, N, H, Dv);
    } else {
        view4(&tq, qb, in_dt, B, N, H, D);
        view4(&tk, kb, in_dt, B, N, H, D);
        view4(&tv, vb, in_dt, B, N, H, Dv);
    }
    /* parameters: conv stored as [Cc,1,k,k] torch layout read through a
     * rank-3 view, others f32 contiguous */
    float *convf = conv ? to_f32(conv, Cc * ks * ks) : NULL, *biasf = bias ? to_f32(bias, D) : NULL;
    float *spf = sp ? to_f32(sp, C) : NULL, *focf = focus ? to_f32(focus, H) : NULL;
    if (conv) for (int64_t i = 0; i < Cc * ks * ks; i++) conv[i] = convf[i];
    if (bias) for (int64_t i = 0; i < D; i++) bias[i] = biasf[i];
    if (sp) for (int64_t i = 0; i < C; i++) sp[i] = spf[i];
    if (focus) for (int64_t i = 0; i < H; i++) focus[i] = focf[i];
    int64_t ne3[3] = {Cc, ks, ks}, ne1;
    if (conv) la_tensor_init(&tconv, convf, LA_F32, LA_DEVICE_CPU, 3, ne3);
    ne1 = D;
    if (bias) la_tensor_init(&tbias, biasf, LA_F32, LA_DEVICE_CPU, 1, &ne1);
    ne1 = C;
    if (sp) la_tensor_init(&tsp, spf, LA_F32, LA_DEVICE_CPU, 1, &ne1);
    ne1 = H;
    if (focus) la_tensor_init(&tfocus, focf, LA_F32, LA_DEVICE_CPU, 1, &ne1);

    /* output, poisoned */
    la_dtype out_dt = layout == L_OUT_F64 ? LA_F64 : layout == L_OUT_BF16 ? LA_BF16 : LA_F32;
    void *ob = malloc(la_dtype_size(out_dt) * nv);
    for (int64_t i = 0; i < nv; i++) {
        if (out_dt == LA_F64) ((double *)ob)[i] = NAN;
        else if (out_dt == LA_BF16) ((uint16_t *)ob)[i] = 0x7fc0;
        else ((float *)ob)[i] = NAN;
    }
    if (layout == L_STRIDED) view4_bhnd(&tout, ob, out_dt, B, N, H, Dv);
    else view4(&tout, ob, out_dt, B, N, H, Dv);

    la_focused_params prm;
    la_focused_params_init(&prm);
    prm.variant = blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
    prm.map_h = Hm;
    prm.map_w = Wm;
    prm.p = (float)p;
    la_status st = la_focused_attention(&prm, &tq, &tk, &tv, conv ? &tconv : NULL,
                                        bias ? &tbias : NULL, sp ? &tsp : NULL,
                                        focus ? &tfocus : NULL, &tout, ctx);
    CHECK(st == LA_OK, "%s B=%lld map=%lldx%lld H=%lld D=%lld Dv=%lld k=%lld: %s %s",
          blog ? "blog" : "flatten", (long long)B, (long long)Hm, (long long)Wm, (long long)H,
          (long long)D, (long long)Dv, (long long)ks, la_status_string(st), la_last_error());
    if (st == LA_OK) {
        double *ref = malloc(sizeof(double) * nv), *got = malloc(sizeof(double) * nv);
        ref_focused(&c, ref);
        for (int64_t b = 0; b < B; b++)
            for (int64_t n = 0; n < N; n++)
                for (int64_t h = 0; h < H; h++)
                    for (int64_t e = 0; e < Dv; e++) {
                        int64_t off = la_off4(&tout, b, n, h, e);
                        double g = out_dt == LA_F64 ? ((double *)ob)[off]
                                                    : la_load_f32(&tout, off);
                        got[((b * N + n) * H + h) * Dv + e] = g;
                    }
        /* Both variants output a convex combination of values (positive
         * weights) plus, for flatten, DWC(v): rounding errors scale with |v|,
         * not with |o|, which can be far smaller when the mix cancels (D = 1
         * blog: every token gets one weighted mean of v). So the error is
         * relative to max(|ref|, |v|). */
        double vmax = 0;
        for (int64_t i = 0; i < nv; i++) vmax = fmax(vmax, fabs(v[i]));
        double err = rel_err_dd(got, ref, nv);
        double rmax = 0;
        for (int64_t i = 0; i < nv; i++) rmax = fmax(rmax, fabs(ref[i]));
        if (vmax > rmax && rmax > 0) err *= rmax / vmax;
        double tol = out_dt == LA_BF16 ? 1e-2 : 1e-5;
        CHECK(err <= tol, "%s B=%lld map=%lldx%lld H=%lld D=%lld Dv=%lld k=%lld p=%g layout=%d: "
              "rel err %.3g > %g", blog ? "blog" : "flatten", (long long)B, (long long)Hm,
              (long long)Wm, (long long)H, (long long)D, (long long)Dv, (long long)ks, p, layout,
              err, tol);
        free(ref); free(got);
    }
    free(q); free(k); free(v); free(conv); free(bias); free(sp); free(focus);
    free(qb); free(kb); free(vb); free(convf); free(biasf); free(spf); free(focf); free(ob);
}

/* ------------------------------------------------------------------------ */
/* The blog listing's three defects (SPEC §4 (i)-(iii))                      */
/* ------------------------------------------------------------------------ */

/* Run the blog variant on f32 contiguous inputs; out [B,N,H,Dv] f32. */
static la_status run_blog(const float *q, const float *k, const float *v, const float *conv,
                          const float *focus, int64_t B, int64_t Hm, int64_t Wm, int64_t H,
                          int64_t D, int64_t ks, float *out) {
    const int64_t N = Hm * Wm, C = H * D;
    la_tensor tq, tk, tv, to, tc, tf;
    view4(&tq, (void *)q, LA_F32, B, N, H, D);
    view4(&tk, (void *)k, LA_F32, B, N, H, D);
    view4(&tv, (void *)v, LA_F32, B, N, H, D);
    view4(&to, out, LA_F32, B, N, H, D);
    int64_t ne3[3] = {C, ks, ks}, neh = H;
    la_tensor_init(&tc, (void *)conv, LA_F32, LA_DEVICE_CPU, 3, ne3);
    la_tensor_init(&tf, (void *)focus, LA_F32, LA_DEVICE_CPU, 1, &neh);
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = LA_FOCUSED_BLOG;
    p.map_h = Hm;
    p.map_w = Wm;
    return la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, &tf, &to, NULL);
}

static void test_blog_defects(la_rng *rng) {
    const int64_t B = 1, Hm = 7, Wm = 9, N = Hm * Wm, H = 3, D = 16, C = H * D, ks = 3;
    const int64_t nq = B * N * C;
    double *qd = randn(rng, nq, 1.0), *kd = randn(rng, nq, 1.0), *vd = randn(rng, nq, 1.0);
    double *cd = randn(rng, C * ks * ks, 0.2);
    for (int64_t ch = 0; ch < C; ch++) cd[(ch * ks + 1) * ks + 1] += 1.0; /* dirac + noise */
    float *q = to_f32(qd, nq), *k = to_f32(kd, nq), *v = to_f32(vd, nq);
    float *conv = to_f32(cd, C * ks * ks);
    float focus2[3] = {2, 2, 2}, focus1[3] = {1, 1, 1}, focusx[3] = {0.5f, 3.f, 7.f};
    float *o2 = malloc(sizeof(float) * nq), *o1 = malloc(sizeof(float) * nq),
          *ox = malloc(sizeof(float) * nq);
    la_fill_nan(o2, nq);
    CHECK_OK(run_blog(q, k, v, conv, focus2, B, Hm, Wm, H, D, ks, o2));

    /* (i) the printed einsum "bhnd,bhme->bhde" has two token indices: the
     * summary becomes (sum_n k_n)(sum_m v_m)^T, and every token's output is
     * (q~.sum k)(sum v)/(q~.sum k + eps), i.e. the column sum of its head's V. */
    {
        ref_case c = {1, B, N, H, D, D, Hm, Wm, ks, 3, 1e-6, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
        double f2[3] = {2, 2, 2};
        for (int64_t i = 0; i < nq; i++) { qd[i] = q[i]; kd[i] = k[i]; vd[i] = v[i]; }
        for (int64_t i = 0; i < C * ks * ks; i++) cd[i] = conv[i];
        c.q = qd; c.k = kd; c.v = vd; c.conv = cd; c.focus = f2;
        double *qt = malloc(sizeof(double) * N * C), *kt = malloc(sizeof(double) * N * C);
        ref_features(&c, 0, qt, kt);
        double max_bug_vs_colsum = 0, max_ok_vs_bug = 0, scale = 0;
        double *buggy = malloc(sizeof(double) * nq);
        for (int64_t h = 0; h < H; h++) {
            /* kv[d][e] = sum_n sum_m k[n][d] v[m][e]   (einsum bhnd,bhme->bhde) */
            double kv[16][16], ksum[16], vsum[16];
            for (int64_t j = 0; j < D; j++) {
                for (int64_t e = 0; e < D; e++) {
                    double acc = 0;
                    for (int64_t n = 0; n < N; n++)
                        for (int64_t m = 0; m < N; m++)
                            acc += kt[n * C + h * D + j] * vd[(m * H + h) * D + e];
                    kv[j][e] = acc;
                }
            }
            for (int64_t j = 0; j < D; j++) {
                ksum[j] = 0;
                vsum[j] = 0;
                for (int64_t n = 0; n < N; n++) {
                    ksum[j] += kt[n * C + h * D + j];
                    vsum[j] += vd[(n * H + h) * D + j];
                }
            }
            for (int64_t n = 0; n < N; n++) {
                double z = 0;
                for (int64_t j = 0; j < D; j++) z += qt[n * C + h * D + j] * ksum[j];
                for (int64_t e = 0; e < D; e++) {
                    double ctx_e = 0;
                    for (int64_t j = 0; j < D; j++) ctx_e += qt[n * C + h * D + j] * kv[j][e];
                    double bug = ctx_e / (z + 1e-6);
                    buggy[(n * H + h) * D + e] = bug;
                    max_bug_vs_colsum = fmax(max_bug_vs_colsum, fabs(bug - vsum[e]));
                    max_ok_vs_bug = fmax(max_ok_vs_bug, fabs(o2[(n * H + h) * D + e] - bug));
                    scale = fmax(scale, fabs(vsum[e]));
                }
            }
        }
        printf("# (i) printed einsum: max |out - colsum(V)| / max|colsum| = %.2e; "
               "op (intended) vs printed: %.2e\n", max_bug_vs_colsum / scale, max_ok_vs_bug / scale);
        CHECK(max_bug_vs_colsum / scale < 1e-6,
              "(i) the printed einsum should give colsum(V) per token: rel %.3g",
              max_bug_vs_colsum / scale);
        CHECK(max_ok_vs_bug / scale > 0.1,
              "(i) the op should not equal the printed einsum: rel diff %.3g", max_ok_vs_bug / scale);
        free(qt); free(kt); free(buggy);
    }

    /* (ii) the printed out.reshape(B, N, C) on a contiguous [B, heads, N, d]
     * tensor is not the per-token concatenation. Index maps of both: */
    {
        int64_t differ = 0, mixes_tokens = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t flat = n * C + ch; /* printed reshape reads flat index of [heads,N,d] */
                int64_t hp = flat / (N * D), np = (flat / D) % N, jp = flat % D;
                int64_t hc = ch / D, nc = n, jc = ch % D; /* concatenation */
                if (hp != hc || np != nc || jp != jc) differ++;
                if (np != n) mixes_tokens++;
            }
        printf("# (ii) printed reshape vs per-token concat: %lld of %lld positions differ, "
               "%lld take another token's output\n", (long long)differ, (long long)(N * C),
               (long long)mixes_tokens);
        CHECK(differ > N * C / 2, "(ii) printed reshape should differ from concat at most "
              "positions, got %lld of %lld", (long long)differ, (long long)(N * C));
        /* apply the printed reshape to the op's per-head outputs and compare */
        /* o2 is [B,N,H,D]: token n's row is the concatenation over heads
         * (checked against the reference in the sweep); the printed reshape
         * would give token n the outputs of other tokens */
        double d_print = 0, sc = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t ch = 0; ch < C; ch++) {
                int64_t flat = n * C + ch;
                int64_t hp = flat / (N * D), np = (flat / D) % N, jp = flat % D;
                double printed = o2[(np * H + hp) * D + jp];
                double cat = o2[n * C + ch];
                d_print = fmax(d_print, fabs(printed - cat));
                sc = fmax(sc, fabs(cat));
            }
        CHECK(d_print / sc > 0.1, "(ii) printed reshape should scramble the output: %.3g",
              d_print / sc);
        /* with one head the two coincide */
        int64_t differ1 = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t j = 0; j < D; j++) {
                int64_t flat = n * D + j;
                if (flat / (N * D) != 0 || (flat / D) % N != n || flat % D != j) differ1++;
            }
        CHECK(differ1 == 0, "(ii) with one head the reshape is the identity");
    }

    /* (iii) focus[h] scales K^, hence numerator and denominator alike: it
     * cancels except against eps */
    {
        la_fill_nan(o1, nq);
        la_fill_nan(ox, nq);
        CHECK_OK(run_blog(q, k, v, conv, focus1, B, Hm, Wm, H, D, ks, o1));
        CHECK_OK(run_blog(q, k, v, conv, focusx, B, Hm, Wm, H, D, ks, ox));
        double *r2 = malloc(sizeof(double) * nq), *r1 = malloc(sizeof(double) * nq);
        for (int64_t i = 0; i < nq; i++) r2[i] = o2[i];
        double e21 = la_rel_err(o1, r2, nq), e2x = la_rel_err(ox, r2, nq);
        printf("# (iii) focus 2 vs 1: rel %.2e; focus 2 vs (0.5,3,7): rel %.2e (fp32)\n", e21, e2x);
        CHECK(e21 <= 1e-6, "(iii) focus=2 vs focus=1 should agree to 1e-6: %.3g", e21);
        CHECK(e2x <= 1e-6, "(iii) per-head focus should cancel: %.3g", e2x);
        free(r2); free(r1);

        /* in float64, on a case with an O(1) denominator, the difference is
         * exactly the eps effect: o_f = num/(den + eps/f) */
        double q1 = -1, k1 = -1, v1 = 3, c1 = 1, fa = 2, fb = 1;
        ref_case c = {1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1e-6, &q1, &k1, &v1, &c1, NULL, NULL, &fa};
        double oa, ob;
        ref_focused(&c, &oa);
        c.focus = &fb;
        ref_focused(&c, &ob);
        double rel = fabs(oa - ob) / fabs(ob), pred = 1e-6 / 2; /* den = 1: eps/den * (1 - 1/2) */
        printf("# (iii) float64, den = 1: focus 2 vs 1 rel diff %.3e (eps/2 = %.3e)\n", rel, pred);
        CHECK(fabs(rel - pred) < 1e-3 * pred, "(iii) eps effect %.6g vs predicted %.6g", rel, pred);
    }

    /* contrast: the flatten variant's p does change the output */
    {
        la_tensor tq, tk, tv, to;
        view4(&tq, q, LA_F32, B, N, H, D);
        view4(&tk, k, LA_F32, B, N, H, D);
        view4(&tv, v, LA_F32, B, N, H, D);
        view4(&to, o1, LA_F32, B, N, H, D);
        la_focused_params p;
        la_focused_params_init(&p);
        p.map_h = Hm;
        p.map_w = Wm;
        p.p = 1;
        CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL));
        view4(&to, ox, LA_F32, B, N, H, D);
        p.p = 3;
        CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL));
        double *r = malloc(sizeof(double) * nq);
        for (int64_t i = 0; i < nq; i++) r[i] = ox[i];
        double e = la_rel_err(o1, r, nq);
        printf("# flatten p=1 vs p=3: rel diff %.3g (p focuses, focus[h] does not)\n", e);
        CHECK(e > 1e-2, "flatten p should change the output: %.3g", e);
        free(r);
    }
    free(qd); free(kd); free(vd); free(cd); free(q); free(k); free(v); free(conv);
    free(o2); free(o1); free(ox);
}

/* ------------------------------------------------------------------------ */
/* bad input                                                                 */
/* ------------------------------------------------------------------------ */
static void test_bad_input(void) {
    const int64_t B = 1, Hm = 4, Wm = 5, N = 20, H = 2, D = 8, C = H * D;
    float *q = calloc(B * N * C, sizeof(float)), *k = calloc(B * N * C, sizeof(float));
    float *v = calloc(B * N * C, sizeof(float)), *o = calloc(B * N * C, sizeof(float));
    float *w = calloc(C * 25 + 64, sizeof(float));
    la_tensor tq, tk, tv, to, tc, tb, tsp, tf, tbad;
    view4(&tq, q, LA_F32, B, N, H, D);
    view4(&tk, k, LA_F32, B, N, H, D);
    view4(&tv, v, LA_F32, B, N, H, D);
    view4(&to, o, LA_F32, B, N, H, D);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = Hm;
    p.map_w = Wm;
    CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL));

    CHECK_STATUS(la_focused_params_init(NULL), LA_ERR_ARG);
    CHECK_STATUS(la_focused_attention(NULL, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    CHECK_STATUS(la_focused_attention(&p, NULL, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    la_focused_params pb = p;
    pb.map_w = 4; /* 4x4 != 20 */
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "map") != NULL, "message names the map: %s", la_last_error());
    pb = p;
    pb.map_h = 0;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    pb = p;
    pb.p = 0;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    pb.p = NAN;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    pb = p;
    pb.eps = -1;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);
    pb = p;
    pb.variant = (la_focused_variant)7;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_ARG);

    /* conv kernels: even, larger than the map, wrong channel count, not square, rank 4 */
    int64_t ne_even[3] = {D, 2, 2}, ne_big[3] = {D, 5, 5}, ne_ch[3] = {C, 3, 3},
            ne_rect[3] = {D, 3, 1}, ne4[4] = {D, 1, 3, 3}, ne_ok[3] = {D, 3, 3};
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, ne_even);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "conv") && strstr(la_last_error(), "even"), "%s", la_last_error());
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, ne_big);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "larger") != NULL, "%s", la_last_error());
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, ne_ch); /* [C,3,3] given to flatten */
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "conv") != NULL, "%s", la_last_error());
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, ne_rect);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 4, ne4);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    /* blog with a [D,k,k] kernel: needs [C,k,k] */
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, ne_ok);
    pb = p;
    pb.variant = LA_FOCUSED_BLOG;
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);

    /* bias without conv, bias of the wrong size, softplus and focus sizes */
    int64_t nD = D, nbad = D + 1, nC = C, nH = H;
    la_tensor_init(&tb, w, LA_F32, LA_DEVICE_CPU, 1, &nD);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, NULL, &tb, NULL, NULL, &to, NULL), LA_ERR_ARG);
    la_tensor_init(&tb, w, LA_F32, LA_DEVICE_CPU, 1, &nbad);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, &tc, &tb, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "conv_bias") != NULL, "%s", la_last_error());
    la_tensor_init(&tsp, w, LA_F32, LA_DEVICE_CPU, 1, &nD); /* needs C */
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, &tsp, NULL, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "softplus") != NULL, "%s", la_last_error());
    la_tensor_init(&tsp, w, LA_F32, LA_DEVICE_CPU, 1, &nC);
    CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, &tsp, NULL, &to, NULL));
    la_tensor_init(&tf, w, LA_F32, LA_DEVICE_CPU, 1, &nC); /* needs H */
    CHECK_STATUS(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, &tf, &to, NULL), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "focus") != NULL, "%s", la_last_error());
    la_tensor_init(&tf, w, LA_F32, LA_DEVICE_CPU, 1, &nH);
    CHECK_OK(la_focused_attention(&pb, &tq, &tk, &tv, NULL, NULL, NULL, &tf, &to, NULL));

    /* shapes of k, v, out; flatten conv with Dv != D */
    view4(&tbad, k, LA_F32, B, N, H, D - 1);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tbad, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_SHAPE);
    view4(&tbad, o, LA_F32, B, N, H, D - 1);
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &tbad, NULL), LA_ERR_SHAPE);
    {
        la_tensor tv2, to2;
        view4(&tv2, v, LA_F32, B, N, H, 4);
        view4(&to2, o, LA_F32, B, N, H, 4);
        CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv2, NULL, NULL, NULL, NULL, &to2, NULL));
        CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv2, &tc, NULL, NULL, NULL, &to2, NULL), LA_ERR_SHAPE);
    }
    /* out aliasing q */
    CHECK_STATUS(la_focused_attention(&p, &tq, &tk, &tv, NULL, NULL, NULL, NULL, &tq, NULL), LA_ERR_ARG);
    /* int32 input */
    view4(&tbad, q, LA_I32, B, N, H, D);
    CHECK_STATUS(la_focused_attention(&p, &tbad, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL), LA_ERR_DTYPE);
    /* mixed devices are refused before anything is read; all on CUDA in a
     * build without CUDA is unsupported (host pointers labelled CUDA are
     * never dereferenced on either path) */
    {
        la_tensor cq = tq, ck = tk, cv = tv, co = to;
        cq.device = ck.device = cv.device = co.device = LA_DEVICE_CUDA;
        CHECK_STATUS(la_focused_attention(&p, &cq, &tk, &tv, NULL, NULL, NULL, NULL, &to, NULL),
                     LA_ERR_DEVICE);
#ifndef LA_WITH_CUDA
        CHECK_STATUS(la_focused_attention(&p, &cq, &ck, &cv, NULL, NULL, NULL, NULL, &co, NULL),
                     LA_ERR_UNSUPPORTED);
#endif
    }
    free(q); free(k); free(v); free(o); free(w);
}

/* Same inputs, 1 thread vs all threads: bitwise identical outputs (fixed
 * token chunks, float64 partial sums added in chunk order). */
static void test_thread_independence(la_rng *rng) {
    const int64_t Hm = 40, Wm = 50, N = Hm * Wm, H = 3, D = 16, n = N * H * D;
    float *q = malloc(4 * n), *k = malloc(4 * n), *v = malloc(4 * n);
    float *o1 = malloc(4 * n), *o2 = malloc(4 * n), w[16 * 9];
    la_fill_normal(rng, q, n, 1);
    la_fill_normal(rng, k, n, 1);
    la_fill_normal(rng, v, n, 1);
    la_fill_normal(rng, w, 16 * 9, 0.3);
    la_tensor tq, tk, tv, ta, tb, tc;
    view4(&tq, q, LA_F32, 1, N, H, D);
    view4(&tk, k, LA_F32, 1, N, H, D);
    view4(&tv, v, LA_F32, 1, N, H, D);
    view4(&ta, o1, LA_F32, 1, N, H, D);
    view4(&tb, o2, LA_F32, 1, N, H, D);
    int64_t nc[3] = {16, 3, 3};
    la_tensor_init(&tc, w, LA_F32, LA_DEVICE_CPU, 3, nc);
    la_context *c1 = NULL, *cn = NULL;
    la_context_create(&c1);
    la_context_create(&cn);
    la_context_set_threads(c1, 1);
    la_context_set_threads(cn, 0);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = Hm;
    p.map_w = Wm;
    CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &ta, c1));
    CHECK_OK(la_focused_attention(&p, &tq, &tk, &tv, &tc, NULL, NULL, NULL, &tb, cn));
    CHECK(memcmp(o1, o2, 4 * (size_t)n) == 0, "flatten: 1 thread and all threads differ");
    la_context_destroy(c1);
    la_context_destroy(cn);
    free(q); free(k); free(v); free(o1); free(o2);
}

int main(void) {
    la_rng rng = la_test_rng("test_focused");
    la_context *ctx = NULL;
    la_context_create(&ctx);

    /* sweep: odd maps, D in {1,16,63,64}, H in {1,3}, kernels 1/3/5 where
     * they fit, both variants; extras (softplus, bias, focus) every other */
    const int64_t maps[4][2] = {{1, 1}, {7, 9}, {8, 8}, {25, 40}};
    const int64_t Ds[4] = {1, 16, 63, 64}, Hs[2] = {1, 3}, kss[3] = {1, 3, 5};
    int cnt = 0;
    for (int m = 0; m < 4; m++)
        for (int di = 0; di < 4; di++)
            for (int hi = 0; hi < 2; hi++)
                for (int blog = 0; blog < 2; blog++) {
                    int64_t Hm = maps[m][0], Wm = maps[m][1];
                    int64_t ks = kss[cnt % 3];
                    while (ks > Hm || ks > Wm) ks -= 2;
                    run_case(&rng, blog, 1 + (cnt % 5 == 0), Hm, Wm, Hs[hi], Ds[di], Ds[di], ks,
                             3.0, cnt & 1, L_CONTIG, ctx);
                    cnt++;
                }
    /* no conv at all; Dv != D (blog with conv; flatten without) */
    run_case(&rng, 0, 2, 7, 9, 3, 16, 16, 0, 3.0, 1, L_CONTIG, ctx);
    run_case(&rng, 1, 2, 7, 9, 3, 16, 16, 0, 3.0, 1, L_CONTIG, ctx);
    run_case(&rng, 1, 1, 7, 9, 3, 16, 40, 3, 3.0, 1, L_CONTIG, ctx);
    run_case(&rng, 0, 1, 8, 8, 1, 63, 7, 0, 3.0, 1, L_CONTIG, ctx);
    /* other focusing factors (non-integer goes through pow) */
    run_case(&rng, 0, 1, 7, 9, 3, 16, 16, 3, 1.0, 1, L_CONTIG, ctx);
    run_case(&rng, 0, 1, 7, 9, 3, 16, 16, 3, 2.5, 1, L_CONTIG, ctx);
    run_case(&rng, 0, 1, 8, 8, 1, 64, 64, 5, 7.0, 0, L_CONTIG, ctx);
    /* strided [B,H,N,D] buffers as [B,N,H,D] views (inputs and output) */
    run_case(&rng, 0, 2, 7, 9, 3, 16, 16, 3, 3.0, 1, L_STRIDED, ctx);
    run_case(&rng, 1, 2, 25, 40, 3, 63, 63, 5, 3.0, 1, L_STRIDED, ctx);
    /* bf16 inputs (reference on the rounded values), f64 and bf16 outputs */
    run_case(&rng, 0, 1, 25, 40, 3, 16, 16, 3, 3.0, 1, L_BF16, ctx);
    run_case(&rng, 1, 1, 25, 40, 3, 16, 16, 3, 3.0, 1, L_BF16, ctx);
    run_case(&rng, 0, 1, 7, 9, 3, 64, 64, 5, 3.0, 1, L_OUT_F64, ctx);
    run_case(&rng, 1, 1, 7, 9, 1, 64, 64, 3, 3.0, 1, L_OUT_BF16, ctx);
    /* a longer sequence (sums over 65536 tokens; more than 64 chunks) */
    run_case(&rng, 0, 1, 256, 256, 1, 16, 16, 3, 3.0, 1, L_CONTIG, ctx);
    run_case(&rng, 1, 1, 256, 256, 1, 16, 16, 3, 3.0, 1, L_CONTIG, ctx);
    /* one thread gives the same numbers as all threads (fixed chunking) */
    {
        la_context *c1 = NULL;
        la_context_create(&c1);
        la_context_set_threads(c1, 1);
        run_case(&rng, 0, 1, 25, 40, 3, 16, 16, 3, 3.0, 1, L_CONTIG, c1);
        la_context_destroy(c1);
    }

    test_thread_independence(&rng);
    test_blog_defects(&rng);
    test_bad_input();
    la_context_destroy(ctx);
    return la_test_finish();
}
