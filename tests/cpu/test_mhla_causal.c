/* Causal MHLA (SPEC §5.4) against a plain float64 reference, and the
 * decoding state: token-by-token decode and prefill-then-decode (with
 * multi-token appends that cross block boundaries) equal the chunkwise
 * forward. */
#include "test_mhla_common.h"

/* o_t = Σ_{s≤t} W[i(t), i(s)] (q̃_t·k̃_s) v_s, i(t) = ⌊t/C⌋ (per_query: divided
 * by the same sum without v, + eps). Pairwise form, straight from the
 * definition; W [Hw][Mw][Mw], only its lower triangle is read. */
static void ref_causal(const tview *q, const tview *k, const tview *v, const double *W, int64_t Hw,
                       int64_t Mw, int64_t C, la_feature f, int norm, double eps, double scale,
                       double *out) {
    const int64_t B = q->B, N = q->N, H = q->H, D = q->D, Dv = v->D;
    double *num = malloc(sizeof(double) * Dv);
    double *kf = malloc(sizeof(double) * N * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *Wh = W + (Hw == 1 ? 0 : h) * Mw * Mw;
            for (int64_t s = 0; s < N; s++)
                for (int64_t d = 0; d < D; d++) kf[s * D + d] = la_ref_feature(f, tv_get(k, b, s, h, d));
            for (int64_t t = 0; t < N; t++) {
                double qf[1024];
                for (int64_t d = 0; d < D; d++) qf[d] = scale * la_ref_feature(f, tv_get(q, b, t, h, d));
                double den = 0;
                memset(num, 0, sizeof(double) * Dv);
                for (int64_t s = 0; s <= t; s++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++) a += qf[d] * kf[s * D + d];
                    a *= Wh[(t / C) * Mw + s / C];
                    den += a;
                    for (int64_t e = 0; e < Dv; e++) num[e] += a * tv_get(v, b, s, h, e);
                }
                for (int64_t e = 0; e < Dv; e++)
                    out[((b * N + t) * H + h) * Dv + e] =
                        norm == LA_MHLA_NORM_PER_QUERY ? num[e] / (den + eps) : num[e];
            }
        }
    free(num), free(kf);
}

/* Sub-view of tokens [n0, n0+n) of a [B,N,H,D] view (no copy). */
static la_tensor rows_view(const tview *x, int64_t n0, int64_t n) {
    la_tensor t = x->t;
    t.data = (char *)x->buf + (size_t)(n0 * t.nb[1]) * la_dtype_size(x->dt);
    t.ne[1] = n;
    return t;
}

typedef struct c_case {
    int64_t B, N, H, D, Dv, C, extraM;
    int per_head;
    la_feature f;
    int norm;
    float scale; /* 0 = default D^-1/2 */
    int layout;
    la_dtype dt;
    int wkind; /* 0 random W; 1 constant below the diagonal in every row
                  (uniform_causal-like, a per-head scale: the running-sum
                  paths); 2 the same with one row broken (mixed paths) */
} c_case;

/* Forward vs reference; then decode token by token, and prefill + decode
 * with uneven appends, against the forward's own output. */
static void run_case(la_rng *rng, const c_case *c, la_context *ctx) {
    const int64_t B = c->B, N = c->N, H = c->H, D = c->D, Dv = c->Dv, C = c->C;
    const int64_t nc = (N + C - 1) / C, M = nc + c->extraM, Hw = c->per_head ? H : 1;
    tview q, k, v, o, od;
    tv_make(&q, B, N, H, D, c->dt, c->layout, rng, 1.0);
    tv_make(&k, B, N, H, D, c->dt, c->layout, rng, 1.0);
    tv_make(&v, B, N, H, Dv, c->dt, c->layout, rng, 1.0);
    tv_make(&o, B, N, H, Dv, c->dt, c->layout ? 2 : 0, NULL, 0);
    tv_make(&od, B, N, H, Dv, c->dt, c->layout ? 1 : 0, NULL, 0);
    mixing_t w;
    mix_make(&w, Hw, M, c->per_head ? 3 : 2, rng, 0);
    if (c->wkind)
        for (int64_t h = 0; h < Hw; h++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j <= i; j++)
                    w.f[(h * M + i) * M + j] =
                        (float)((h + 1.0) / (i + 1.0)) * (j == i ? 0.5f : 1.0f);
    if (c->wkind == 2 && M > 3) w.f[(Hw - 1) * M * M + 3 * M + 1] *= 1.5f; /* row 3, last head */
    mix_sync(&w);
    /* The upper triangle and everything past ceil(N/C) must be ignored: make
     * them NaN in the operator's copy (the reference never reads them). */
    for (int64_t h = 0; h < Hw; h++)
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = i + 1; j < M; j++) w.f[(h * M + i) * M + j] = NAN;

    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = C;
    p.feature = c->f;
    p.normalize = (la_mhla_normalize)c->norm;
    p.scale_q = c->scale;
    const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)D);
    const int64_t n_out = B * N * H * Dv;
    double *ref = malloc(sizeof(double) * n_out);
    float *got = malloc(sizeof(float) * n_out), *got_d = malloc(sizeof(float) * n_out);
    ref_causal(&q, &k, &v, w.d, Hw, M, C, c->f, c->norm, p.eps, scale, ref);
    la_status s = la_mhla_causal_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx);
    CHECK(s == LA_OK, "causal forward: %s", la_last_error());
    tv_read(&o, got);
    const double tol = c->dt == LA_BF16 ? 1e-2 : 1e-5;
    double err = la_rel_err(got, ref, n_out);
    printf("  N=%-5lld C=%-4lld M=%-4lld B=%lld H=%lld D=%-3lld Dv=%-3lld %s%s %-9s %-8s %s%s "
           "scale=%-7.4g rel=%.2e",
           (long long)N, (long long)C, (long long)M, (long long)B, (long long)H, (long long)D,
           (long long)Dv, c->per_head ? "W[H,M,M]" : "W[M,M]  ",
           c->wkind == 1 ? " const-rows" : c->wkind == 2 ? " mixed-rows" : "",
           c->norm == LA_MHLA_NORM_PER_QUERY ? "per_query" : "none", la_feature_name(c->f),
           la_dtype_name(c->dt), c->layout ? " strided" : "", scale, err);
    CHECK(err <= tol, "causal N=%lld C=%lld: rel err %.3e > %.0e", (long long)N, (long long)C, err, tol);

    /* decode token by token */
    la_mhla_state *st = NULL;
    CHECK_OK(la_mhla_state_create(&p, B, H, D, Dv, &w.t, &st));
    if (!st) goto done;
    for (int64_t t = 0; t < N; t++) {
        la_tensor qt = rows_view(&q, t, 1), kt = rows_view(&k, t, 1), vt = rows_view(&v, t, 1);
        la_tensor ot = rows_view(&od, t, 1);
        s = la_mhla_state_append(st, &qt, &kt, &vt, &ot, ctx);
        if (s != LA_OK) {
            CHECK(0, "decode token %lld: %s", (long long)t, la_last_error());
            break;
        }
    }
    int64_t len = -1;
    la_mhla_state_length(st, &len);
    CHECK(len == N, "state length %lld, expected %lld", (long long)len, (long long)N);
    tv_read(&od, got_d);
    double ed = la_rel_err(got_d, ref, n_out), edc = 0, mx = 0;
    for (int64_t i = 0; i < n_out; i++)
        edc = fmax(edc, fabs((double)got_d[i] - got[i])), mx = fmax(mx, fabs((double)got[i]));
    edc /= fmax(mx, 1e-30);
    printf("  decode: vs ref %.2e, vs chunkwise %.2e", ed, edc);
    CHECK(ed <= tol && edc <= tol, "decode != chunkwise: vs ref %.3e, vs chunkwise %.3e", ed, edc);
    la_mhla_state_destroy(st);

    /* prefill then decode, with appends of uneven sizes crossing blocks */
    CHECK_OK(la_mhla_state_create(&p, B, H, D, Dv, &w.t, &st));
    for (int64_t i = 0; i < n_out; i++) tv_set_raw(&od, i, NAN); /* poison again */
    {
        int64_t t = 0, step = 0;
        const int64_t sizes[] = {N / 2 + 1, 1, 1, 2 * C + 3, 1, C - 1 > 0 ? C - 1 : 1, 5, 1};
        while (t < N) {
            int64_t n = sizes[step++ % 8];
            if (n > N - t) n = N - t;
            la_tensor qt = rows_view(&q, t, n), kt = rows_view(&k, t, n), vt = rows_view(&v, t, n);
            la_tensor ot = rows_view(&od, t, n);
            s = la_mhla_state_append(st, &qt, &kt, &vt, &ot, ctx);
            if (s != LA_OK) {
                CHECK(0, "append [%lld, +%lld): %s", (long long)t, (long long)n, la_last_error());
                break;
            }
            t += n;
        }
    }
    tv_read(&od, got_d);
    double ep = 0;
    for (int64_t i = 0; i < n_out; i++) ep = fmax(ep, isnan(got_d[i]) ? INFINITY : fabs((double)got_d[i] - got[i]));
    ep /= fmax(mx, 1e-30);
    printf(", prefill+decode vs chunkwise %.2e\n", ep);
    CHECK(ep <= tol, "prefill-then-decode != chunkwise: %.3e", ep);
    la_mhla_state_destroy(st);
done:
    free(ref), free(got), free(got_d);
    tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&o), tv_free(&od), mix_free(&w);
}

/* Capacity: appending past M·C tokens fails cleanly and leaves the state as
 * it was; a following valid append still matches. */
static void capacity(la_rng *rng, la_context *ctx) {
    const int64_t C = 4, M = 3, D = 8, Dv = 5;
    tview q, k, v, o;
    tv_make(&q, 1, 13, 1, D, LA_F32, 0, rng, 1.0);
    tv_make(&k, 1, 13, 1, D, LA_F32, 0, rng, 1.0);
    tv_make(&v, 1, 13, 1, Dv, LA_F32, 0, rng, 1.0);
    tv_make(&o, 1, 13, 1, Dv, LA_F32, 0, NULL, 0);
    mixing_t w;
    mix_make(&w, 1, M, 2, rng, 0);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = C;
    la_mhla_state *st = NULL;
    CHECK_OK(la_mhla_state_create(&p, 1, 1, D, Dv, &w.t, &st));
    la_tensor q10 = rows_view(&q, 0, 10), k10 = rows_view(&k, 0, 10), v10 = rows_view(&v, 0, 10),
              o10 = rows_view(&o, 0, 10);
    CHECK_OK(la_mhla_state_append(st, &q10, &k10, &v10, &o10, ctx));
    la_tensor q3 = rows_view(&q, 10, 3), k3 = rows_view(&k, 10, 3), v3 = rows_view(&v, 10, 3),
              o3 = rows_view(&o, 10, 3);
    CHECK_STATUS(la_mhla_state_append(st, &q3, &k3, &v3, &o3, ctx), LA_ERR_SHAPE);
    CHECK(err_mentions("capacity"), "capacity message: %s", la_last_error());
    int64_t len = 0;
    la_mhla_state_length(st, &len);
    CHECK(len == 10, "length after a refused append: %lld", (long long)len);
    la_tensor q2 = rows_view(&q, 10, 2), k2 = rows_view(&k, 10, 2), v2 = rows_view(&v, 10, 2),
              o2 = rows_view(&o, 10, 2);
    CHECK_OK(la_mhla_state_append(st, &q2, &k2, &v2, &o2, ctx));
    la_mhla_state_destroy(st);
    /* the 12 tokens equal the chunkwise forward on the same 12 tokens */
    tview of;
    tv_make(&of, 1, 12, 1, Dv, LA_F32, 0, NULL, 0);
    la_tensor q12 = rows_view(&q, 0, 12), k12 = rows_view(&k, 0, 12), v12 = rows_view(&v, 0, 12);
    CHECK_OK(la_mhla_causal_forward(&p, &q12, &k12, &v12, &w.t, &of.t, ctx));
    double e = 0;
    for (int64_t i = 0; i < 12 * Dv; i++) e = fmax(e, fabs((double)of.f32[i] - o.f32[i]));
    CHECK(e <= 1e-5, "after a refused append the state drifted: %.3e", e);
    printf("  capacity M*C = 12: 10 + 3 refused (%s), 10 + 2 accepted, matches chunkwise (%.1e)\n",
           "LA_ERR_SHAPE", e);
    tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&o), tv_free(&of), mix_free(&w);
}

int main(void) {
    la_rng rng = la_test_rng("test_mhla_causal");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);
    printf("causal forward, decode, prefill+decode\n");
    const c_case cases[] = {
        /* B  N    H  D    Dv  C    +M ph feature                norm scale layout dt */
        {2, 1, 3, 16, 8, 64, 0, 0, LA_FEATURE_RELU, 1, 0, 0, LA_F32, 0},
        {2, 63, 3, 1, 3, 64, 0, 1, LA_FEATURE_RELU, 1, 0, 1, LA_F32, 0},
        {2, 65, 2, 16, 24, 64, 2, 0, LA_FEATURE_RELU_EPS, 0, 0, 0, LA_F32, 0},
        {1, 65, 2, 63, 17, 1, 0, 1, LA_FEATURE_ELU1, 0, 0.5f, 1, LA_F32, 0},
        {2, 100, 2, 64, 32, 7, 3, 1, LA_FEATURE_RELU, 1, 0, 1, LA_F32, 0},
        {1, 200, 2, 16, 24, 70, 0, 0, LA_FEATURE_RELU1, 0, 0, 0, LA_F32, 0},
        {1, 300, 2, 32, 16, 150, 1, 1, LA_FEATURE_RELU, 1, 0, 1, LA_F32, 0},
        {1, 130, 2, 16, 8, 200, 0, 0, LA_FEATURE_IDENTITY, 1, 0, 0, LA_F32, 0},
        {1, 1000, 2, 64, 32, 64, 0, 0, LA_FEATURE_RELU, 1, 0, 1, LA_F32, 0},
        {1, 1000, 1, 128, 64, 16, 0, 1, LA_FEATURE_ELU1, 0, 0, 0, LA_F32, 0},
        {1, 1000, 2, 16, 48, 128, 0, 1, LA_FEATURE_RELU_EPS, 0, 0, 1, LA_F32, 0},
        {1, 90, 2, 32, 16, 13, 0, 0, LA_FEATURE_RELU1, 0, 0, 1, LA_F64, 0},
        {1, 90, 2, 32, 16, 13, 0, 1, LA_FEATURE_RELU1, 0, 0, 0, LA_BF16, 0},
        /* row-constant W: running-sum mixing in the forward and the decoder */
        {2, 1000, 2, 32, 24, 16, 2, 1, LA_FEATURE_RELU, 1, 0, 0, LA_F32, 1},
        {1, 700, 1, 64, 64, 64, 0, 0, LA_FEATURE_RELU, 0, 0, 1, LA_F32, 1},
        {2, 300, 2, 16, 8, 7, 1, 1, LA_FEATURE_ELU1, 0, 0, 0, LA_F32, 2},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&rng, &cases[i], ctx);
    la_context_set_threads(ctx, 1);
    run_case(&rng, &cases[4], ctx);
    la_context_set_threads(ctx, 3);
    run_case(&rng, &cases[4], ctx);
    la_context_set_threads(ctx, 2);
    capacity(&rng, ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
