/* Case table of focused linear attention, flatten variant (SPEC §4a), on
 * CUDA, from the former tests/cuda/test_cuda_focused.c: the CUDA operator
 * against the CPU path on the same inputs (the CPU path has its own
 * float64-reference tests in tests/cpu/). Covers the 16-bit fast path of
 * src/cuda/focused.cu (D = Dv = 128, 64, 32, bf16 or f16 rows: fused phi pass,
 * tensor-core engine, separate depthwise-conv kernel) and the portable path it
 * falls back to (f32, other D, H > 32, conv k > 9, or forced: variant
 * "portable" of family "focused"). Inputs rounded to the dtype under test (the
 * CPU sees the same values), device output poisoned with 0xFF bytes (NaN)
 * before the call and compared in full: rel <= 1e-2 (bf16), 2e-3 (f16) or
 * 1e-5 (f32), no NaN left (more f16 rows, with the check that the default
 * takes the fast path: cases_f16tc.c). The
 * N = 4096 cases are not in the --small subset. */
#include "bo_staging.h"

/* One flatten case. ks = 0: no conv; bias only with a conv. force_old: the
 * case forces the portable variant (the harness sets it on the context), so
 * only the CUDA call runs under it. */
static void t_flatten(int64_t B, int64_t Hm, int64_t Wm, int64_t H, int64_t D, int64_t ks,
                      int with_bias, int with_sp, float pf, la_dtype dt, int perm, int force_old,
                      double in_scale) {
    const int64_t N = Hm * Wm;
    int64_t nq[4] = {B, N, H, D};
    tb q = tb_rand(4, nq, dt, perm, in_scale), k = tb_rand(4, nq, dt, perm, in_scale),
       v = tb_rand(4, nq, dt, perm, in_scale), o = tb_poison(4, nq, dt, perm);
    int64_t ncv[3] = {D, ks, ks}, nb1[1] = {D}, nsp[1] = {H * D};
    tb conv, bias, sp;
    if (ks) conv = tb_rand(3, ncv, LA_F32, 0, 0.3);
    if (ks && with_bias) bias = tb_rand(1, nb1, LA_F32, 0, 0.3);
    if (with_sp) sp = tb_rand(1, nsp, LA_F32, 0, 1.0);
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = LA_FOCUSED_FLATTEN;
    p.map_h = Hm;
    p.map_w = Wm;
    p.p = pf;
    const la_tensor *hc = ks ? &conv.host : NULL, *dc = ks ? &conv.dev : NULL;
    const la_tensor *hb = (ks && with_bias) ? &bias.host : NULL,
                    *db = (ks && with_bias) ? &bias.dev : NULL;
    const la_tensor *hs = with_sp ? &sp.host : NULL, *ds = with_sp ? &sp.dev : NULL;
    CHECK_OK(la_focused_attention(&p, &q.host, &k.host, &v.host, hc, hb, hs, NULL, &o.host, bo_ctx()));
    CHECK_DEV(la_focused_attention(&p, &q.dev, &k.dev, &v.dev, dc, db, ds, NULL, &o.dev, bo_ctx()));
    la_dev_synchronize();
    char what[200];
    snprintf(what, sizeof what, "flatten %s B%lld map %lldx%lld H%lld D%lld k%lld bias%d sp%d p=%g perm%d%s",
             dtn(dt), (long long)B, (long long)Hm, (long long)Wm, (long long)H, (long long)D,
             (long long)ks, with_bias, with_sp, (double)pf, perm, force_old ? " old" : "");
    tb_compare(&o, what, tol_of(dt, N));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o);
    if (ks) tb_free(&conv);
    if (ks && with_bias) tb_free(&bias);
    if (with_sp) tb_free(&sp);
}

/* The output tensor is a view into a larger poisoned buffer: nothing outside
 * the view may be written (bf16 fast path: φ workspaces, in-place conv). */
static void t_flatten_guard(const void *arg) {
    (void)arg;
    const int64_t Hm = 9, Wm = 7, N = Hm * Wm, H = 3, D = 128, ks = 5;
    int64_t nq[4] = {1, N, H, D};
    tb q = tb_rand(4, nq, LA_BF16, 0, 1.0), k = tb_rand(4, nq, LA_BF16, 0, 1.0),
       v = tb_rand(4, nq, LA_BF16, 0, 1.0);
    int64_t ncv[3] = {D, ks, ks}, nb1[1] = {D};
    tb conv = tb_rand(3, ncv, LA_F32, 0, 0.3), bias = tb_rand(1, nb1, LA_F32, 0, 0.3);
    /* out: [1,N,H,128] view with token stride (H+1)·128 inside a zero buffer */
    const size_t tot = (size_t)N * (H + 1) * D;
    uint16_t *hz = calloc(tot, 2);
    void *dbuf = NULL;
    if (la_dev_malloc(&dbuf, tot * 2) != LA_OK) { fprintf(stderr, "alloc\n"); exit(1); }
    la_dev_upload(dbuf, hz, tot * 2);
    int64_t nb[4] = {(int64_t)tot, (H + 1) * D, D, 1};
    la_tensor od;
    la_tensor_init_strided(&od, dbuf, LA_BF16, LA_DEVICE_CUDA, 4, nq, nb);
    tb o = tb_poison(4, nq, LA_BF16, 0);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = Hm;
    p.map_w = Wm;
    CHECK_OK(la_focused_attention(&p, &q.host, &k.host, &v.host, &conv.host, &bias.host, NULL,
                                  NULL, &o.host, bo_ctx()));
    CHECK_DEV(la_focused_attention(&p, &q.dev, &k.dev, &v.dev, &conv.dev, &bias.dev, NULL, NULL,
                                  &od, bo_ctx()));
    la_dev_synchronize();
    la_dev_download(hz, dbuf, tot * 2);
    int64_t outside = 0, bad = 0;
    double md = 0, mref = 0;
    for (int64_t t = 0; t < N; t++)
        for (int64_t h = 0; h <= H; h++)
            for (int64_t j = 0; j < D; j++) {
                const uint16_t g = hz[(t * (H + 1) + h) * D + j];
                if (h == H) { outside += g != 0; continue; }
                const float gv = la_bf16_to_f32(g);
                const float cv = la_bf16_to_f32(((uint16_t *)o.host.data)[(t * H + h) * D + j]);
                if (!isfinite(gv)) bad++;
                md = fmax(md, fabs((double)gv - cv));
                mref = fmax(mref, fabs((double)cv));
            }
    const double rel = md / (mref > 0 ? mref : 1);
    CHECK(outside == 0, "flatten strided out: %lld values written outside the view", (long long)outside);
    CHECK(bad == 0, "flatten strided out: %lld non-finite values", (long long)bad);
    CHECK(rel <= 1e-2, "flatten strided out: rel err %.3g", rel);
    printf("  %-72s rel %.2e %s\n", "flatten bf16 strided out (token stride (H+1)*128), guard band",
           rel, outside == 0 && bad == 0 && rel <= 1e-2 ? "ok" : "FAIL");
    free(hz);
    la_dev_free(dbuf);
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&conv); tb_free(&bias);
}


typedef struct flatten_args {
    int64_t B, Hm, Wm, H, D, ks; int with_bias, with_sp; float pf; la_dtype dt; int perm;
    int force_old; double in_scale;
} flatten_args;

static void run_flatten(const void *p) {
    const flatten_args *a = p;
    t_flatten(a->B, a->Hm, a->Wm, a->H, a->D, a->ks, a->with_bias, a->with_sp, a->pf, a->dt,
              a->perm, a->force_old, a->in_scale);
}

/* FLATTEN(small, B, Hm, Wm, H, D, ks, bias, softplus, p, dtype, perm, force_old, scale) */
#define FLATTEN(SMALL, ...)                                                                     \
    do {                                                                                        \
        const flatten_args a_ = {__VA_ARGS__};                                                  \
        const bo_opts o_ = {"focused", BO_CUDA, (SMALL), a_.force_old ? "focused" : NULL,       \
                            a_.force_old ? "portable" : NULL, NULL};                            \
        bo_add(L, &o_, run_flatten, &a_, sizeof a_, "flatten(" #__VA_ARGS__ ")");                \
    } while (0)

/* The smallest call through the family's kernel choice (bf16, D = 128). */
static la_status probe(la_context *ctx) {
    int64_t ne[4] = {1, 16, 1, 128};
    tb q, o;
    tb_make(&q, 4, ne, LA_BF16, 0, NULL);
    tb_make(&o, 4, ne, LA_BF16, 0, NULL);
    la_dev_memset(q.dev.data, 0, q.bytes);
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = 4;
    p.map_w = 4;
    const la_status s =
        la_focused_attention(&p, &q.dev, &q.dev, &q.dev, NULL, NULL, NULL, NULL, &o.dev, ctx);
    la_dev_synchronize();
    tb_free(&q);
    tb_free(&o);
    return s;
}

void cases_focused(bo_list *L) {
    bo_add_probe(L, "focused", probe);
    const int small = 1;
    FLATTEN(small, 1, 1, 1, 2, 128, 0, 0, 0, 3.f, LA_BF16, 0, 0, 1.0);     /* N = 1 */
    FLATTEN(small, 1, 1, 1, 2, 128, 0, 0, 0, 3.f, LA_F16 , 0, 0, 1.0);     /* N = 1 */
    FLATTEN(small, 1, 1, 1, 2, 128, 1, 1, 1, 3.f, LA_BF16, 1, 0, 1.0);     /* N = 1, 1x1 conv */
    FLATTEN(small, 2, 7, 9, 3, 128, 5, 1, 0, 3.f, LA_BF16, 1, 0, 1.0);     /* N = 63 */
    FLATTEN(small, 2, 7, 9, 3, 128, 5, 1, 0, 3.f, LA_F16 , 1, 0, 1.0);     /* N = 63 */
    FLATTEN(small, 1, 7, 9, 3, 128, 0, 0, 1, 2.5f, LA_BF16, 0, 0, 1.0);    /* N = 63, p = 2.5 */
    FLATTEN(small, 1, 5, 13, 4, 128, 3, 1, 1, 2.5f, LA_BF16, 0, 0, 1.0);   /* N = 65 */
    FLATTEN(small, 1, 5, 13, 4, 128, 3, 1, 1, 2.5f, LA_F16 , 0, 0, 1.0);   /* N = 65 */
    FLATTEN(small, 1, 5, 13, 4, 128, 3, 0, 0, 4.f, LA_BF16, 1, 0, 1.0);    /* conv without bias */
    FLATTEN(small, 1, 1, 65, 2, 128, 0, 0, 0, 3.f, LA_BF16, 0, 0, 1.0);    /* 1 x 65 map */
    FLATTEN(small, 1, 25, 40, 12, 128, 5, 1, 1, 3.f, LA_BF16, 0, 0, 1.0);  /* N = 1000, H = 12 */
    FLATTEN(small, 1, 25, 40, 12, 128, 5, 1, 1, 3.f, LA_F16 , 0, 0, 1.0);  /* N = 1000, H = 12 */
    FLATTEN(small, 1, 40, 25, 5, 128, 7, 1, 0, 1.5f, LA_BF16, 1, 0, 1.0);  /* N = 1000, p = 1.5 */
    FLATTEN(small, 1, 16, 20, 2, 128, 9, 1, 0, 3.f, LA_BF16, 0, 0, 1.0);   /* k = 9 */
    FLATTEN(small, 1, 9, 300, 2, 128, 5, 1, 0, 3.f, LA_BF16, 0, 0, 1.0);   /* 3 column blocks */
    FLATTEN(small, 1, 3, 3, 32, 128, 3, 1, 1, 3.f, LA_BF16, 0, 0, 1.0);    /* H = 32: 16 chunks/lane */
    FLATTEN(small, 1, 8, 8, 1, 128, 3, 1, 0, 3.f, LA_BF16, 1, 0, 1.0);     /* H = 1: partial lanes */
    FLATTEN(small, 1, 7, 9, 3, 128, 5, 1, 0, 3.f, LA_BF16, 0, 0, 10.0);    /* inputs of scale 10 */
    FLATTEN(small, 1, 7, 9, 3, 128, 5, 1, 0, 3.f, LA_F16 , 0, 0, 10.0);    /* inputs of scale 10 */
    /* head dims 64 and 32 on the fast path (H·D ≤ 4096) */
    FLATTEN(small, 1, 1, 1, 4, 32, 0, 0, 0, 3.f, LA_BF16, 0, 0, 1.0);      /* N = 1, D = 32 */
    FLATTEN(small, 1, 7, 9, 6, 64, 5, 1, 1, 3.f, LA_BF16, 1, 0, 1.0);      /* N = 63, D = 64 */
    FLATTEN(small, 1, 5, 13, 12, 32, 3, 1, 0, 2.5f, LA_BF16, 0, 0, 1.0);   /* N = 65, D = 32 */
    FLATTEN(small, 1, 25, 40, 24, 64, 5, 1, 1, 3.f, LA_BF16, 1, 0, 1.0);   /* N = 1000, H = 24 */
    FLATTEN(small, 1, 40, 25, 48, 32, 7, 1, 0, 1.5f, LA_BF16, 0, 0, 1.0);  /* N = 1000, H = 48 */
    FLATTEN(small, 1, 3, 3, 128, 32, 3, 1, 1, 3.f, LA_BF16, 1, 0, 1.0);    /* C = 4096 at D = 32 */
    FLATTEN(small, 1, 9, 300, 4, 64, 5, 1, 0, 3.f, LA_BF16, 0, 0, 1.0);   /* conv column blocks, Dv 64 */
    FLATTEN(small, 1, 16, 20, 8, 32, 9, 1, 0, 3.f, LA_BF16, 1, 0, 1.0);    /* k = 9, Dv 32 */
    /* f16 on the fast path (fo_f16_tc): head dims 64 and 32, p, k = 9, C = 4096 */
    FLATTEN(small, 1, 7, 9, 6, 64, 5, 1, 1, 3.f, LA_F16, 1, 0, 1.0);       /* N = 63, D = 64 */
    FLATTEN(small, 1, 5, 13, 12, 32, 3, 1, 0, 2.5f, LA_F16, 0, 0, 1.0);    /* N = 65, D = 32 */
    FLATTEN(small, 1, 40, 25, 5, 128, 7, 1, 0, 1.5f, LA_F16, 1, 0, 1.0);   /* N = 1000, p = 1.5 */
    FLATTEN(small, 1, 16, 20, 8, 32, 9, 1, 0, 3.f, LA_F16, 1, 0, 1.0);     /* k = 9, Dv 32 */
    FLATTEN(small, 1, 3, 3, 128, 32, 3, 1, 1, 3.f, LA_F16, 1, 0, 1.0);     /* C = 4096 at D = 32 */
    FLATTEN(small, 1, 25, 40, 24, 64, 5, 1, 1, 3.f, LA_F16, 0, 0, 10.0);   /* N = 1000, H = 24, x10 */
    {
        const bo_opts o = {"focused", BO_CUDA, 1, NULL, NULL, NULL};
        bo_add(L, &o, t_flatten_guard, NULL, 0,
               "flatten bf16 strided out (token stride (H+1)*128), guard band");
    }
    {
        const int small = 0;
        FLATTEN(small, 1, 64, 64, 12, 128, 5, 1, 1, 3.f, LA_BF16, 0, 0, 1.0); /* N = 4096 */
        FLATTEN(small, 1, 64, 64, 12, 128, 0, 0, 0, 4.f, LA_BF16, 1, 0, 1.0); /* no conv, perm */
        FLATTEN(small, 2, 32, 128, 3, 128, 5, 1, 0, 3.f, LA_BF16, 1, 0, 1.0); /* B = 2, N = 4096 */
        FLATTEN(small, 1, 64, 64, 12, 128, 5, 1, 1, 3.f, LA_F16, 0, 0, 1.0);  /* N = 4096 */
        FLATTEN(small, 2, 32, 128, 6, 64, 5, 1, 0, 3.f, LA_F16, 1, 0, 1.0);   /* B = 2, N = 4096, D 64 */
    }
    FLATTEN(small, 1, 7, 9, 3, 128, 5, 1, 0, 3.f, LA_F32, 0, 0, 1.0);
    FLATTEN(small, 1, 5, 13, 2, 128, 0, 0, 1, 2.5f, LA_F32, 1, 0, 1.0);
    FLATTEN(small, 1, 7, 9, 3, 64, 5, 1, 1, 3.f, LA_BF16, 1, 0, 1.0);
    FLATTEN(small, 1, 5, 13, 2, 63, 3, 0, 0, 2.f, LA_BF16, 0, 0, 1.0);
    FLATTEN(small, 1, 5, 13, 2, 63, 3, 0, 0, 2.f, LA_F16 , 0, 0, 1.0);
    FLATTEN(small, 1, 3, 3, 33, 128, 3, 1, 0, 3.f, LA_BF16, 0, 0, 1.0);
    FLATTEN(small, 1, 12, 12, 2, 128, 11, 1, 0, 3.f, LA_BF16, 0, 0, 1.0);
    FLATTEN(small, 1, 25, 40, 4, 128, 5, 1, 1, 3.f, LA_BF16, 0, 1, 1.0);
    FLATTEN(small, 1, 25, 40, 4, 128, 5, 1, 1, 3.f, LA_F16, 0, 1, 1.0);   /* f16 forced portable */
    {
        const int small = 0;
        FLATTEN(small, 1, 25, 40, 3, 128, 5, 1, 1, 3.f, LA_F32, 1, 0, 1.0);  /* N = 1000 */
        FLATTEN(small, 1, 64, 64, 4, 128, 5, 1, 0, 3.f, LA_BF16, 0, 1, 1.0); /* N = 4096 forced old */
    }
}
