/* `longattn demo` section: focused linear attention (SPEC §4, both variants)
 * at growing maps, each checked against a float64 reference on a small case;
 * the blog's focus coefficient cancelling; and the attention-map analysis
 * (SPEC §9) of softmax vs linear vs MHLA vs focused at N=256. */
#include <stdlib.h>

#include "cli.h"

typedef struct fdemo {
    int64_t Hm, Wm, N, H, D, ks;
    float *q, *k, *v, *o, *conv, *bias, *focus;
    la_tensor tq, tk, tv, to, tc, tb, tf;
} fdemo;

static int fdemo_make(fdemo *x, int blog, int64_t Hm, int64_t Wm, int64_t H, int64_t D,
                      int64_t ks, uint64_t seed) {
    cli_rng64 rng = {seed};
    memset(x, 0, sizeof *x);
    x->Hm = Hm, x->Wm = Wm, x->N = Hm * Wm, x->H = H, x->D = D, x->ks = ks;
    const size_t n = (size_t)(x->N * H * D);
    const int64_t Cc = blog ? H * D : D;
    x->q = malloc(n * 4), x->k = malloc(n * 4), x->v = malloc(n * 4), x->o = malloc(n * 4);
    x->conv = malloc(sizeof(float) * (size_t)(Cc * ks * ks));
    x->bias = malloc(sizeof(float) * (size_t)D);
    x->focus = malloc(sizeof(float) * (size_t)H);
    if (!x->q || !x->k || !x->v || !x->o || !x->conv || !x->bias || !x->focus) return 0;
    for (size_t i = 0; i < n; i++) {
        x->q[i] = (float)cli_rng64_normal(&rng);
        x->k[i] = (float)cli_rng64_normal(&rng);
        x->v[i] = (float)cli_rng64_normal(&rng);
        x->o[i] = NAN;
    }
    for (int64_t i = 0; i < Cc * ks * ks; i++) x->conv[i] = (float)(0.2 * cli_rng64_normal(&rng));
    if (blog) /* dirac plus noise, as the blog initializes it */
        for (int64_t c = 0; c < Cc; c++) x->conv[(c * ks + ks / 2) * ks + ks / 2] += 1.0f;
    for (int64_t j = 0; j < D; j++) x->bias[j] = (float)(0.1 * cli_rng64_normal(&rng));
    for (int64_t h = 0; h < H; h++) x->focus[h] = 2.0f;
    int64_t ne[4] = {1, x->N, H, D}, nc[3] = {Cc, ks, ks};
    la_tensor_init(&x->tq, x->q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->tk, x->k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->tv, x->v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->to, x->o, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->tc, x->conv, LA_F32, LA_DEVICE_CPU, 3, nc);
    la_tensor_init(&x->tb, x->bias, LA_F32, LA_DEVICE_CPU, 1, &D);
    la_tensor_init(&x->tf, x->focus, LA_F32, LA_DEVICE_CPU, 1, &H);
    return 1;
}

static void fdemo_free(fdemo *x) {
    free(x->q), free(x->k), free(x->v), free(x->o), free(x->conv), free(x->bias), free(x->focus);
}

static la_status fdemo_run(fdemo *x, int blog, la_context *ctx) {
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = blog ? LA_FOCUSED_BLOG : LA_FOCUSED_FLATTEN;
    p.map_h = x->Hm;
    p.map_w = x->Wm;
    return la_focused_attention(&p, &x->tq, &x->tk, &x->tv, &x->tc, blog ? NULL : &x->tb, NULL,
                                blog ? &x->tf : NULL, &x->to, ctx);
}

/* Float64 reference of SPEC §4 (B=1; flatten p=3, s=0; blog focus=2), its
 * relative error against x->o. */
static double fdemo_check(const fdemo *x, int blog) {
    const int64_t N = x->N, H = x->H, D = x->D, C = H * D, ks = x->ks, r = ks / 2;
    double *qt = malloc(sizeof(double) * (size_t)(N * C)), *kt = malloc(sizeof(double) * (size_t)(N * C));
    double *S = malloc(sizeof(double) * (size_t)(D * D)), *z = malloc(sizeof(double) * (size_t)D);
    double md = 0, mr = 0;
    if (!qt || !kt || !S || !z) goto out;
    for (int64_t n = 0; n < N; n++) {
        if (!blog) {
            for (int w = 0; w < 2; w++) {
                const float *src = (w ? x->k : x->q) + n * C;
                double *y = (w ? kt : qt) + n * C, n2 = 0, np2 = 0;
                for (int64_t c = 0; c < C; c++) {
                    double xp = ((src[c] > 0 ? src[c] : 0) + 1e-6) / log(2.0);
                    n2 += xp * xp;
                    y[c] = xp * xp * xp;
                    np2 += y[c] * y[c];
                }
                for (int64_t c = 0; c < C; c++) y[c] *= sqrt(n2 / np2);
            }
        } else {
            for (int64_t c = 0; c < C; c++) {
                double a = x->q[n * C + c] / sqrt((double)D);
                qt[n * C + c] = (a > 0 ? a : 0) + 1;
                double acc = 0;
                int64_t yy0 = n / x->Wm, xx0 = n % x->Wm;
                for (int64_t a2 = 0; a2 < ks; a2++)
                    for (int64_t b2 = 0; b2 < ks; b2++) {
                        int64_t yy = yy0 + a2 - r, xx = xx0 + b2 - r;
                        if (yy < 0 || yy >= x->Hm || xx < 0 || xx >= x->Wm) continue;
                        double kv = x->k[(yy * x->Wm + xx) * C + c];
                        acc += x->conv[(c * ks + a2) * ks + b2] * ((kv > 0 ? kv : 0) + 1);
                    }
                kt[n * C + c] = 2.0 * acc;
            }
        }
    }
    for (int64_t h = 0; h < H; h++) {
        for (int64_t j = 0; j < D; j++) {
            z[j] = 0;
            for (int64_t e = 0; e < D; e++) S[j * D + e] = 0;
            for (int64_t n = 0; n < N; n++) {
                z[j] += kt[n * C + h * D + j];
                for (int64_t e = 0; e < D; e++) S[j * D + e] += kt[n * C + h * D + j] * x->v[n * C + h * D + e];
            }
        }
        for (int64_t n = 0; n < N; n++) {
            double den = 0;
            for (int64_t j = 0; j < D; j++) den += qt[n * C + h * D + j] * z[j];
            for (int64_t e = 0; e < D; e++) {
                double num = 0;
                for (int64_t j = 0; j < D; j++) num += qt[n * C + h * D + j] * S[j * D + e];
                double o = blog ? num / (den + 1e-6) : (num / N) / (den / N + 1e-6);
                if (!blog) {
                    int64_t y0 = n / x->Wm, x0 = n % x->Wm;
                    o += x->bias[e];
                    for (int64_t a2 = 0; a2 < ks; a2++)
                        for (int64_t b2 = 0; b2 < ks; b2++) {
                            int64_t yy = y0 + a2 - r, xx = x0 + b2 - r;
                            if (yy < 0 || yy >= x->Hm || xx < 0 || xx >= x->Wm) continue;
                            o += x->conv[(e * ks + a2) * ks + b2] * x->v[(yy * x->Wm + xx) * C + h * D + e];
                        }
                }
                double g = x->o[n * C + h * D + e];
                md = fmax(md, isnan(g) ? INFINITY : fabs(g - o));
                mr = fmax(mr, fabs(o));
            }
        }
    }
out:
    free(qt), free(kt), free(S), free(z);
    return (qt && kt && S && z) ? md / fmax(mr, 1e-30) : INFINITY;
}

static int fverdict(FILE *f, const char *what, double err, double tol) {
    fprintf(f, "   check %-46s rel err %.2e  %s\n", what, err, err <= tol ? "PASS" : "FAIL");
    return err <= tol ? 0 : 1;
}

static int variant_stage(FILE *f, la_context *ctx, int blog, int quick) {
    int fails = 0;
    const int64_t H = 4, D = 32, ks = blog ? 3 : 5;
    fprintf(f, "-- %s: %s, H=%lld D=%lld, %lldx%lld depthwise conv\n", blog ? "blog" : "flatten",
            blog ? "relu1, q*d^-1/2, conv on phi(K) per channel, focus[h]=2"
                 : "FLatten module, p=3, norms over all H*D channels, mean form, conv on v + bias",
            (long long)H, (long long)D, (long long)ks, (long long)ks);
    fdemo x;
    if (fdemo_make(&x, blog, 7, 9, 3, 16, ks, blog ? 41 : 40)) {
        la_status s = fdemo_run(&x, blog, ctx);
        fails += fverdict(f, blog ? "blog, map 7x9, H=3 D=16 vs float64" : "flatten, map 7x9, H=3 D=16 vs float64",
                          s == LA_OK ? fdemo_check(&x, blog) : INFINITY, 1e-5);
    } else {
        fails++;
    }
    fdemo_free(&x);
    for (int64_t side = 32; side <= (quick ? 128 : 256); side *= 2) {
        if (!fdemo_make(&x, blog, side, side, H, D, ks, 50 + (uint64_t)side)) {
            fprintf(f, "   (out of memory at %lldx%lld)\n", (long long)side, (long long)side);
            fdemo_free(&x);
            return fails + 1;
        }
        double best = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = cli_now();
            la_status s = fdemo_run(&x, blog, ctx);
            double dt = cli_now() - t0;
            if (s != LA_OK) {
                fprintf(f, "   error: %s\n", la_last_error());
                fails++;
                break;
            }
            best = dt < best ? dt : best;
        }
        if (best < 1e30)
            fprintf(f, "   map %4lldx%-4lld N=%-6lld %8.2f ms  %6.2f Mtok/s\n", (long long)side,
                    (long long)side, (long long)(side * side), best * 1e3, side * side / best * 1e-6);
        fdemo_free(&x);
    }
    return fails;
}

int cli_demo_focused(FILE *f, int quick) {
    la_context *ctx;
    if (la_context_create(&ctx) != LA_OK) return 1;
    int fails = 0;
    fprintf(f, "   Linear cost: doubling the side quadruples N and about quadruples the time.\n");
    fails += variant_stage(f, ctx, 0, quick);
    fails += variant_stage(f, ctx, 1, quick);

    /* SPEC §4 (iii): focus[h] multiplies numerator and denominator alike */
    {
        fdemo x;
        if (fdemo_make(&x, 1, 16, 16, 4, 32, 3, 60)) {
            const size_t n = (size_t)(x.N * x.H * x.D);
            float *o2 = malloc(n * 4);
            la_status s = fdemo_run(&x, 1, ctx);
            if (o2 && s == LA_OK) {
                memcpy(o2, x.o, n * 4);
                for (int64_t h = 0; h < x.H; h++) x.focus[h] = (float)(0.5 + h);
                s = fdemo_run(&x, 1, ctx);
            }
            double md = 0, mr = 0;
            for (size_t i = 0; o2 && s == LA_OK && i < n; i++) {
                md = fmax(md, fabs((double)x.o[i] - o2[i]));
                mr = fmax(mr, fabs((double)o2[i]));
            }
            fprintf(f, "-- blog's focus[h]: 2,2,2,2 vs 0.5,1.5,2.5,3.5 changes the output by %.1e "
                       "(relative): it cancels\n", s == LA_OK && o2 ? md / mr : INFINITY);
            fails += (s != LA_OK || !o2 || md / mr > 1e-6);
            free(o2);
        } else {
            fails++;
        }
        fdemo_free(&x);
    }

    /* SPEC §9: the attention maps themselves at N=256 (16x16 map), D=32 */
    fprintf(f, "-- attention maps at N=256 (16x16 map), D=32: numerical rank (rtol 1e-6) and "
               "mean row entropy (uniform: ln 256 = %.3f)\n", log(256.0));
    {
        const int64_t N = 256, D = 32;
        float *q = malloc(sizeof(float) * N * D), *k = malloc(sizeof(float) * N * D), W[256];
        double *A = malloc(sizeof(double) * N * N);
        cli_rng64 rng = {77};
        if (!q || !k || !A) {
            fails++;
        } else {
            for (int64_t i = 0; i < N * D; i++) {
                q[i] = (float)cli_rng64_normal(&rng);
                k[i] = (float)cli_rng64_normal(&rng);
            }
            la_tensor tq, tk, ta, tw;
            int64_t ne[2] = {N, D}, nea[2] = {N, N}, new_[2] = {16, 16}, bl[2] = {4, 4};
            la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 2, ne);
            la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, ne);
            la_tensor_init(&ta, A, LA_F64, LA_DEVICE_CPU, 2, nea);
            la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, new_);
            la_status ws = la_mhla_init(LA_MHLA_INIT_LOCALITY, 2, bl, &tw);
            const char *names[4] = {"softmax", "linear (relu)", "MHLA M=16 (locality)", "focused-flatten p=3"};
            const la_map_variant kinds[4] = {LA_MAP_SOFTMAX, LA_MAP_LINEAR, LA_MAP_MHLA, LA_MAP_FOCUSED_FLATTEN};
            int64_t ranks[4] = {-1, -1, -1, -1};
            for (int i = 0; i < 4; i++) {
                la_attn_map_params p;
                la_attn_map_params_init(&p);
                p.variant = kinds[i];
                if (kinds[i] == LA_MAP_MHLA) {
                    if (ws != LA_OK) {
                        fprintf(f, "   %-24s (mixing init failed: %s)\n", names[i], la_last_error());
                        fails++;
                        continue;
                    }
                    p.feature = LA_FEATURE_RELU_EPS;
                    p.mhla.grid_ndim = 2;
                    p.mhla.grid[0] = p.mhla.grid[1] = 16;
                    p.mhla.blocks[0] = p.mhla.blocks[1] = 4;
                }
                double e = NAN;
                la_status s = la_attention_map(&p, &tq, &tk, kinds[i] == LA_MAP_MHLA ? &tw : NULL,
                                               NULL, &ta, ctx);
                if (s == LA_OK) s = la_map_rank_entropy(&ta, 1e-6, &ranks[i], &e);
                if (s != LA_OK) {
                    fprintf(f, "   %-24s error: %s\n", names[i], la_last_error());
                    fails += s != LA_ERR_UNSUPPORTED; /* no LAPACK: said, not a failure */
                    continue;
                }
                fprintf(f, "   %-24s rank %4lld   entropy %.3f\n", names[i], (long long)ranks[i], e);
            }
            if (ranks[1] >= 0 && ranks[2] >= 0) {
                int ok = ranks[1] <= D && ranks[2] > ranks[1];
                fprintf(f, "   check %-46s %s\n", "linear rank <= d < MHLA rank", ok ? "PASS" : "FAIL");
                fails += !ok;
            }
            fprintf(f, "   (`longattn collapse` runs the full study; docs/COLLAPSE.md)\n");
        }
        free(q), free(k), free(A);
    }
    la_context_destroy(ctx);
    return fails;
}
