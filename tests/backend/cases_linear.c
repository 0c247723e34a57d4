/* Case table of the linear family on CUDA (softmax, linear, MHLA, causal
 * MHLA, focused), from the former tests/cuda/test_cuda_linear.c: every CUDA
 * operator against the CPU path on the same fresh random inputs (the CPU
 * path has its float64-reference cases in cases_cpu.c and tests/cpu/).
 *
 * Each case: inputs converted to the dtype under test (the CPU sees the very
 * same rounded values), device outputs poisoned with 0xFF bytes (NaN in f32
 * and bf16) before the call, then compared in full: rel = max|gpu - cpu| /
 * max|cpu| <= 1e-5 (fp32; 1e-4 for huge N) or 1e-2 (bf16), and no NaN left.
 *
 * The bf16 tensor-core path of the linear family (non-causal, bf16 rows; D =
 * Dv = 128 in tc_paths, the other head dims forced to "tc" in tc_heads) runs
 * under the default choice ("tc") and, on the same shapes,
 * forced to the fp32 engine (variant "portable" of family "linear" / "mhla");
 * the default also gets the long cases. (The former test ran these shapes
 * under the variants v3, v2, wg and wgs too, removed from src/.) The long
 * sequences (N = 31500 video grid, 32K, 128K, 256K) are not in --small. */
#include "bo_staging.h"

/* ---- softmax -------------------------------------------------------------- */
static void t_softmax(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk, int64_t D,
                      int64_t Dv, int causal, la_dtype dt, int perm) {
    int64_t nq[4] = {B, Nq, H, D}, nk[4] = {B, Nk, Hk, D}, nv[4] = {B, Nk, Hk, Dv},
            no[4] = {B, Nq, H, Dv}, nl[3] = {B, Nq, H};
    tb q = tb_rand(4, nq, dt, perm, 1.0), k = tb_rand(4, nk, dt, perm, 1.0),
       v = tb_rand(4, nv, dt, perm, 1.0);
    tb o = tb_poison(4, no, dt, perm), l = tb_poison(3, nl, LA_F32, 0);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    CHECK_OK(la_softmax_attention(&p, &q.host, &k.host, &v.host, &o.host, &l.host, bo_ctx()));
    CHECK_DEV(la_softmax_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, &l.dev, bo_ctx()));
    char what[160];
    snprintf(what, sizeof what, "softmax %s B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld c%d p%d",
             dtn(dt), (long long)B, (long long)Nq, (long long)Nk, (long long)H, (long long)Hk,
             (long long)D, (long long)Dv, causal, perm);
    tb_compare(&o, what, tol_of(dt, Nk));
    /* lse may hold −inf for rows that see nothing: compare finite parts */
    {
        la_dev_synchronize();
        int64_t n = B * Nq * H;
        float *g = tb_read(&l, true), *c = tb_read(&l, false);
        double md = 0;
        int bad = 0;
        for (int64_t i = 0; i < n; i++) {
            if (isinf(c[i]) && c[i] < 0) {
                bad += !(isinf(g[i]) && g[i] < 0);
                continue;
            }
            if (!isfinite(g[i])) bad++;
            double d = fabs((double)g[i] - c[i]) / fmax(1.0, fabs(c[i]));
            if (d > md) md = d;
        }
        CHECK(bad == 0 && md <= 1e-5, "%s lse: %d mismatched, max err %.3g", what, bad, md);
        free(g);
        free(c);
    }
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&l);
}

/* ---- linear --------------------------------------------------------------- */
static void t_linear(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, la_feature f,
                     int causal, int normalize, int64_t chunk, int state, la_dtype dt, int perm) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv}, nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    tb q = tb_rand(4, nq, dt, perm, 1.0), k = tb_rand(4, nq, dt, perm, 1.0),
       v = tb_rand(4, nv, dt, perm, 1.0), o = tb_poison(4, nv, dt, perm);
    tb Si, zi, So, zo;
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.causal = causal;
    p.normalize = normalize;
    p.chunk = chunk;
    p.scale_q = 0.7f;
    if (state) {
        Si = tb_rand(4, nS, LA_F32, 0, 1.0);
        float *zv = randv(B * H * D, 1.0);
        for (int64_t i = 0; i < B * H * D; i++) zv[i] = fabsf(zv[i]) * 5.f; /* keep den > 0 */
        tb_make(&zi, 3, nz, LA_F32, 0, zv);
        free(zv);
        So = tb_poison(4, nS, LA_F32, 0);
        zo = tb_poison(3, nz, LA_F32, 0);
    }
    if (normalize && (f == LA_FEATURE_IDENTITY)) p.feature = LA_FEATURE_RELU_EPS; /* den > 0 */
    CHECK_OK(la_linear_attention(&p, &q.host, &k.host, &v.host, &o.host,
                                 state ? &Si.host : NULL, state ? &zi.host : NULL,
                                 state ? &So.host : NULL, state ? &zo.host : NULL, bo_ctx()));
    CHECK_DEV(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, state ? &Si.dev : NULL,
                                 state ? &zi.dev : NULL, state ? &So.dev : NULL,
                                 state ? &zo.dev : NULL, bo_ctx()));
    char what[160];
    snprintf(what, sizeof what, "linear %s B%lld N%lld H%lld D%lld Dv%lld %s c%d n%d C%lld s%d p%d",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             la_feature_name(p.feature), causal, normalize, (long long)chunk, state, perm);
    tb_compare(&o, what, tol_of(dt, N));
    if (state) {
        char w2[200];
        snprintf(w2, sizeof w2, "%s S_out", what);
        tb_compare(&So, w2, tol_of(LA_F32, N));
        snprintf(w2, sizeof w2, "%s z_out", what);
        tb_compare(&zo, w2, tol_of(LA_F32, N));
        tb_free(&Si); tb_free(&zi); tb_free(&So); tb_free(&zo);
    }
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o);
}

/* ---- MHLA ----------------------------------------------------------------- */
static tb make_mixing(int64_t M, int64_t H, int per_head, int causal) {
    int64_t nw[3] = {H, M, M};
    int64_t n = (per_head ? H : 1) * M * M;
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(0.05 + la_rng_uniform(&bo_rng));
    (void)causal;
    tb t;
    tb_make(&t, per_head ? 3 : 2, per_head ? nw : nw + 1, LA_F32, 0, w);
    free(w);
    return t;
}

static void t_mhla(int64_t B, int nd, const int64_t *grid, const int64_t *blocks, int64_t H,
                   int64_t D, int64_t Dv, la_mhla_normalize norm, int per_head, la_dtype dt,
                   int perm, double in_scale) {
    int64_t N = 1, M = 1;
    for (int a = 0; a < nd; a++) {
        N *= grid[a];
        M *= blocks[a];
    }
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    tb q = tb_rand(4, nq, dt, perm, in_scale), k = tb_rand(4, nq, dt, perm, in_scale),
       v = tb_rand(4, nv, dt, perm, in_scale), o = tb_poison(4, nv, dt, perm);
    tb W = make_mixing(M, H, per_head, 0);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = nd;
    for (int a = 0; a < nd; a++) {
        p.grid[a] = grid[a];
        p.blocks[a] = blocks[a];
    }
    p.normalize = norm;
    p.scale_q = 0.9f;
    CHECK_OK(la_mhla_forward(&p, &q.host, &k.host, &v.host, &W.host, &o.host, bo_ctx()));
    CHECK_DEV(la_mhla_forward(&p, &q.dev, &k.dev, &v.dev, &W.dev, &o.dev, bo_ctx()));
    char what[160], gs[64] = "", bs[64] = "";
    for (int a = 0; a < nd; a++) {
        snprintf(gs + strlen(gs), sizeof gs - strlen(gs), "%s%lld", a ? "x" : "", (long long)grid[a]);
        snprintf(bs + strlen(bs), sizeof bs - strlen(bs), "%s%lld", a ? "x" : "", (long long)blocks[a]);
    }
    snprintf(what, sizeof what, "mhla %s B%lld grid %s blocks %s H%lld D%lld Dv%lld norm%d ph%d p%d",
             dtn(dt), (long long)B, gs, bs, (long long)H, (long long)D, (long long)Dv, (int)norm,
             per_head, perm);
    tb_compare(&o, what, tol_of(dt, N));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&W);
}

/* feat < 0: the default (relu; relu_eps with per_query, den > 0) */
static void t_mhla_causal(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, int64_t chunk,
                          la_mhla_normalize norm, int per_head, la_dtype dt, int perm, int feat) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    int64_t M = (N + chunk - 1) / chunk + 1; /* one spare row/col: must be ignored */
    tb q = tb_rand(4, nq, dt, perm, 1.0), k = tb_rand(4, nq, dt, perm, 1.0),
       v = tb_rand(4, nv, dt, perm, 1.0), o = tb_poison(4, nv, dt, perm);
    tb W = make_mixing(M, H, per_head, 1);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = chunk;
    p.normalize = norm;
    if (norm == LA_MHLA_NORM_PER_QUERY) p.feature = LA_FEATURE_RELU_EPS;
    if (feat >= 0) p.feature = (la_feature)feat;
    CHECK_OK(la_mhla_causal_forward(&p, &q.host, &k.host, &v.host, &W.host, &o.host, bo_ctx()));
    CHECK_DEV(la_mhla_causal_forward(&p, &q.dev, &k.dev, &v.dev, &W.dev, &o.dev, bo_ctx()));
    char what[160];
    snprintf(what, sizeof what, "mhla-causal %s B%lld N%lld H%lld D%lld Dv%lld C%lld norm%d ph%d p%d %s",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             (long long)chunk, (int)norm, per_head, perm, la_feature_name(p.feature));
    tb_compare(&o, what, tol_of(dt, N));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&W);
}

/* ---- focused -------------------------------------------------------------- */
static void t_focused(la_focused_variant var, int64_t B, int64_t Hm, int64_t Wm, int64_t H,
                      int64_t D, int64_t Dv, int64_t ks, int with_params, la_dtype dt, int perm,
                      double in_scale) {
    int64_t N = Hm * Wm;
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv};
    tb q = tb_rand(4, nq, dt, perm, in_scale), k = tb_rand(4, nq, dt, perm, in_scale),
       v = tb_rand(4, nv, dt, perm, in_scale), o = tb_poison(4, nv, dt, perm);
    const int blog = var == LA_FOCUSED_BLOG;
    int64_t Cc = blog ? H * D : D;
    int64_t ncv[3] = {Cc, ks, ks}, nb1[1] = {D}, nsp[1] = {H * D}, nf[1] = {H};
    tb conv, bias, sp, foc;
    if (ks) { /* blog: positive weights keep K^ > 0, so q~·z^ (the denominator) is far from
                * 0 and the comparison is well conditioned */
        float *w = randv(Cc * ks * ks, 0.3);
        if (blog)
            for (int64_t i = 0; i < Cc * ks * ks; i++) w[i] = fabsf(w[i]) + 0.01f;
        tb_make(&conv, 3, ncv, LA_F32, 0, w);
        free(w);
    }
    if (ks && !blog) bias = tb_rand(1, nb1, LA_F32, 0, 0.3);
    if (with_params) {
        sp = tb_rand(1, nsp, LA_F32, 0, 1.0);
        foc = tb_rand(1, nf, LA_F32, 0, 1.0);
    }
    la_focused_params p;
    la_focused_params_init(&p);
    p.variant = var;
    p.map_h = Hm;
    p.map_w = Wm;
    const la_tensor *hc = ks ? &conv.host : NULL, *dc = ks ? &conv.dev : NULL;
    const la_tensor *hb = (ks && !blog) ? &bias.host : NULL, *db = (ks && !blog) ? &bias.dev : NULL;
    const la_tensor *hs = with_params ? &sp.host : NULL, *ds = with_params ? &sp.dev : NULL;
    const la_tensor *hf = with_params ? &foc.host : NULL, *df = with_params ? &foc.dev : NULL;
    CHECK_OK(la_focused_attention(&p, &q.host, &k.host, &v.host, hc, hb, hs, hf, &o.host, bo_ctx()));
    CHECK_DEV(la_focused_attention(&p, &q.dev, &k.dev, &v.dev, dc, db, ds, df, &o.dev, bo_ctx()));
    char what[160];
    snprintf(what, sizeof what, "focused-%s %s B%lld map %lldx%lld H%lld D%lld Dv%lld k%lld prm%d p%d",
             blog ? "blog" : "flatten", dtn(dt), (long long)B, (long long)Hm, (long long)Wm,
             (long long)H, (long long)D, (long long)Dv, (long long)ks, with_params, perm);
    tb_compare(&o, what, tol_of(dt, N));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o);
    if (ks) tb_free(&conv);
    if (ks && !blog) tb_free(&bias);
    if (with_params) { tb_free(&sp); tb_free(&foc); }
}

/* bf16 and f16 at N = 256K with inputs of scale 10: outputs finite (no overflow;
 * the true results are convex combinations of v, far below f16's 65504); the
 * calls from c0 on (4: causal MHLA only). */
static void t_no_overflow_dt(la_dtype dt, int c0) {
    const int64_t N = 262144, H = 2, D = 64;
    int64_t nq[4] = {1, N, H, D};
    tb q = tb_rand(4, nq, dt, 0, 10.0), k = tb_rand(4, nq, dt, 0, 10.0),
       v = tb_rand(4, nq, dt, 0, 10.0), o = tb_poison(4, nq, dt, 0);
    const char *names[5] = {"linear", "linear-causal", "mhla 512x512/8x8", "focused-flatten 512x512",
                            "mhla-causal 4096 blocks"};
    for (int c = c0; c < 5; c++) {
        la_dev_memset(o.dev.data, 0xff, o.bytes);
        la_status s;
        if (c < 2) {
            la_linear_params p;
            la_linear_params_init(&p);
            p.causal = c;
            s = la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, NULL, NULL, NULL, NULL, bo_ctx());
        } else if (c == 2) {
            la_mhla_params p;
            la_mhla_params_init(&p);
            p.grid_ndim = 2;
            p.grid[0] = p.grid[1] = 512;
            p.blocks[0] = p.blocks[1] = 8;
            tb W = make_mixing(64, H, 0, 0);
            s = la_mhla_forward(&p, &q.dev, &k.dev, &v.dev, &W.dev, &o.dev, bo_ctx());
            la_dev_synchronize();
            tb_free(&W);
        } else if (c == 3) {
            la_focused_params p;
            la_focused_params_init(&p);
            p.map_h = p.map_w = 512;
            s = la_focused_attention(&p, &q.dev, &k.dev, &v.dev, NULL, NULL, NULL, NULL, &o.dev, bo_ctx());
        } else { /* causal MHLA, chunk 64, per_query (a convex combination of v) */
            la_mhla_causal_params p;
            la_mhla_causal_params_init(&p);
            p.normalize = LA_MHLA_NORM_PER_QUERY;
            p.feature = LA_FEATURE_RELU_EPS;
            tb W = make_mixing(N / 64, H, 0, 1);
            s = la_mhla_causal_forward(&p, &q.dev, &k.dev, &v.dev, &W.dev, &o.dev, bo_ctx());
            la_dev_synchronize();
            tb_free(&W);
        }
        CHECK(s == LA_OK, "%s %s N=256K: %s", names[c], dtn(dt), la_last_error());
        la_dev_synchronize();
        float *g = tb_read(&o, true);
        int64_t bad = 0;
        for (int64_t i = 0; i < N * H * D; i++) bad += !isfinite(g[i]);
        CHECK(bad == 0, "%s %s N=256K scale 10: %lld non-finite outputs", names[c], dtn(dt), (long long)bad);
        printf("  %-67s %-4s %s\n", names[c], dtn(dt), bad ? "FAIL (non-finite)" : "finite ok");
        free(g);
    }
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o);
}
static void t_no_overflow(void) {
    t_no_overflow_dt(LA_BF16, 0);
    t_no_overflow_dt(LA_F16, 0);
}


/* ---- the case arguments and their registration -------------------------------- */
typedef struct softmax_args { int64_t B, Nq, Nk, H, Hk, D, Dv; int causal; la_dtype dt; int perm; } softmax_args;
typedef struct linear_args {
    int64_t B, N, H, D, Dv; la_feature f; int causal, normalize; int64_t chunk; int state;
    la_dtype dt; int perm;
} linear_args;
typedef struct mhla_args {
    int64_t B; int nd; int64_t grid[3], blocks[3]; int64_t H, D, Dv; la_mhla_normalize norm;
    int per_head; la_dtype dt; int perm; double in_scale;
} mhla_args;
typedef struct mhla_causal_args {
    int64_t B, N, H, D, Dv, chunk; la_mhla_normalize norm; int per_head; la_dtype dt; int perm;
    int feat; /* < 0: the default */
} mhla_causal_args;
typedef struct focused_args {
    la_focused_variant var; int64_t B, Hm, Wm, H, D, Dv, ks; int with_params; la_dtype dt; int perm;
    double in_scale;
} focused_args;

static void run_softmax(const void *p) {
    const softmax_args *a = p;
    t_softmax(a->B, a->Nq, a->Nk, a->H, a->Hk, a->D, a->Dv, a->causal, a->dt, a->perm);
}
static void run_linear(const void *p) {
    const linear_args *a = p;
    t_linear(a->B, a->N, a->H, a->D, a->Dv, a->f, a->causal, a->normalize, a->chunk, a->state,
             a->dt, a->perm);
}
static void run_mhla(const void *p) {
    const mhla_args *a = p;
    t_mhla(a->B, a->nd, a->grid, a->blocks, a->H, a->D, a->Dv, a->norm, a->per_head, a->dt,
           a->perm, a->in_scale);
}
static void run_mhla_causal(const void *p) {
    const mhla_causal_args *a = p;
    t_mhla_causal(a->B, a->N, a->H, a->D, a->Dv, a->chunk, a->norm, a->per_head, a->dt, a->perm,
                  a->feat);
}
static void run_focused(const void *p) {
    const focused_args *a = p;
    t_focused(a->var, a->B, a->Hm, a->Wm, a->H, a->D, a->Dv, a->ks, a->with_params, a->dt,
              a->perm, a->in_scale);
}
static void run_no_overflow(const void *p) {
    (void)p;
    t_no_overflow();
}
static void run_no_overflow_mhla_causal_f16(const void *p) { (void)p; t_no_overflow_dt(LA_F16, 4); }

/* Registration state of this table: where cases go, whether they are in
 * the --small subset, and the variant they force (NULL: default) in the
 * family of their operator. */
typedef struct reg {
    bo_list *L;
    int small;
    const char *variant;
} reg;

static bo_opts opts(const reg *r, const char *op) {
    const char *family = op;
    bo_opts o = {op, BO_CUDA, r->small, r->variant ? family : NULL, r->variant, NULL};
    return o;
}

static void add_softmax(const reg *r, int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk,
                        int64_t D, int64_t Dv, int causal, la_dtype dt, int perm) {
    const softmax_args a = {B, Nq, Nk, H, Hk, D, Dv, causal, dt, perm};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "softmax %s B%lld Nq%lld Nk%lld H%lld/%lld D%lld Dv%lld c%d p%d",
             dtn(dt), (long long)B, (long long)Nq, (long long)Nk, (long long)H, (long long)Hk,
             (long long)D, (long long)Dv, causal, perm);
    const bo_opts o = opts(r, "softmax");
    bo_add(r->L, &o, run_softmax, &a, sizeof a, name);
}
static void add_linear(const reg *r, int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv,
                       la_feature f, int causal, int normalize, int64_t chunk, int state,
                       la_dtype dt, int perm) {
    const linear_args a = {B, N, H, D, Dv, f, causal, normalize, chunk, state, dt, perm};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "linear %s B%lld N%lld H%lld D%lld Dv%lld %s c%d n%d C%lld s%d p%d",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             la_feature_name(f), causal, normalize, (long long)chunk, state, perm);
    bo_opts o = opts(r, "linear");
    if (causal && o.family) o.family = "linear_causal";
    bo_add(r->L, &o, run_linear, &a, sizeof a, name);
}
static void add_mhla(const reg *r, int64_t B, int nd, const int64_t *grid, const int64_t *blocks,
                     int64_t H, int64_t D, int64_t Dv, la_mhla_normalize norm, int per_head,
                     la_dtype dt, int perm, double in_scale) {
    mhla_args a = {B, nd, {0}, {0}, H, D, Dv, norm, per_head, dt, perm, in_scale};
    char gs[64] = "", bs[64] = "", name[BO_NAME_MAX];
    for (int i = 0; i < nd; i++) {
        a.grid[i] = grid[i];
        a.blocks[i] = blocks[i];
        snprintf(gs + strlen(gs), sizeof gs - strlen(gs), "%s%lld", i ? "x" : "", (long long)grid[i]);
        snprintf(bs + strlen(bs), sizeof bs - strlen(bs), "%s%lld", i ? "x" : "", (long long)blocks[i]);
    }
    snprintf(name, sizeof name, "mhla %s B%lld grid %s blocks %s H%lld D%lld Dv%lld norm%d ph%d p%d",
             dtn(dt), (long long)B, gs, bs, (long long)H, (long long)D, (long long)Dv, (int)norm,
             per_head, perm);
    const bo_opts o = opts(r, "mhla");
    bo_add(r->L, &o, run_mhla, &a, sizeof a, name);
}
static void add_mhla_causal_f(const reg *r, int64_t B, int64_t N, int64_t H, int64_t D,
                              int64_t Dv, int64_t chunk, la_mhla_normalize norm, int per_head,
                              la_dtype dt, int perm, int feat) {
    const mhla_causal_args a = {B, N, H, D, Dv, chunk, norm, per_head, dt, perm, feat};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "mhla-causal %s B%lld N%lld H%lld D%lld Dv%lld C%lld norm%d ph%d p%d f%d",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             (long long)chunk, (int)norm, per_head, perm, feat);
    const bo_opts o = opts(r, "mhla_causal");
    bo_add(r->L, &o, run_mhla_causal, &a, sizeof a, name);
}
static void add_mhla_causal(const reg *r, int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv,
                            int64_t chunk, la_mhla_normalize norm, int per_head, la_dtype dt,
                            int perm) {
    add_mhla_causal_f(r, B, N, H, D, Dv, chunk, norm, per_head, dt, perm, -1);
}
static void add_focused(const reg *r, la_focused_variant var, int64_t B, int64_t Hm, int64_t Wm,
                        int64_t H, int64_t D, int64_t Dv, int64_t ks, int with_params, la_dtype dt,
                        int perm, double in_scale) {
    const focused_args a = {var, B, Hm, Wm, H, D, Dv, ks, with_params, dt, perm, in_scale};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "focused-%s %s B%lld map %lldx%lld H%lld D%lld Dv%lld k%lld prm%d p%d x%g",
             var == LA_FOCUSED_BLOG ? "blog" : "flatten", dtn(dt), (long long)B, (long long)Hm,
             (long long)Wm, (long long)H, (long long)D, (long long)Dv, (long long)ks, with_params,
             perm, in_scale);
    const bo_opts o = opts(r, "focused");
    bo_add(r->L, &o, run_focused, &a, sizeof a, name);
}

/* The smallest calls through the kernel choice of the families "linear" (the
 * bf16 tensor-core path, non-causal, D = Dv = 128), "linear_causal" and
 * "mhla" (1-D grid of 16 tokens, 4 blocks). */
static la_status probe_with(la_context *ctx, int which) {
    int64_t ne[4] = {1, 16, 1, 128};
    tb q, o;
    tb_make(&q, 4, ne, LA_BF16, 0, NULL);
    tb_make(&o, 4, ne, LA_BF16, 0, NULL);
    la_dev_memset(q.dev.data, 0, q.bytes);
    la_status s;
    if (which < 2) {
        la_linear_params p;
        la_linear_params_init(&p);
        p.normalize = 0;
        p.causal = which;
        s = la_linear_attention(&p, &q.dev, &q.dev, &q.dev, &o.dev, NULL, NULL, NULL, NULL, ctx);
    } else {
        int64_t nw[2] = {4, 4};
        tb W;
        tb_make(&W, 2, nw, LA_F32, 0, NULL);
        la_dev_memset(W.dev.data, 0, W.bytes);
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = 1;
        p.grid[0] = 16;
        p.blocks[0] = 4;
        p.normalize = LA_MHLA_NORM_NONE;
        s = la_mhla_forward(&p, &q.dev, &q.dev, &q.dev, &W.dev, &o.dev, ctx);
        la_dev_synchronize();
        tb_free(&W);
    }
    la_dev_synchronize();
    tb_free(&q);
    tb_free(&o);
    return s;
}
static la_status probe_linear(la_context *ctx) { return probe_with(ctx, 0); }
static la_status probe_mhla(la_context *ctx) { return probe_with(ctx, 2); }
/* a causal MHLA forward of 16 tokens (the probe of families mhla_causal and
 * mhla_causal_mix, cases_causal.c) */
la_status bo_probe_mhla_causal(la_context *ctx) {
    int64_t ne[4] = {1, 16, 1, 128}, nw[2] = {1, 1};
    tb q, o, W;
    tb_make(&q, 4, ne, LA_BF16, 0, NULL);
    tb_make(&o, 4, ne, LA_BF16, 0, NULL);
    tb_make(&W, 2, nw, LA_F32, 0, NULL);
    la_dev_memset(q.dev.data, 0, q.bytes);
    la_dev_memset(W.dev.data, 0, W.bytes);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    la_status s = la_mhla_causal_forward(&p, &q.dev, &q.dev, &q.dev, &W.dev, &o.dev, ctx);
    la_dev_synchronize();
    tb_free(&q);
    tb_free(&o);
    tb_free(&W);
    return s;
}

/* Causal MHLA on tensor cores (family "mhla_causal", mhla_causal_tc.cu),
 * forced to "mma" (a shape it stops taking fails instead of running
 * portable): odd N (one block, a partial second, many blocks with a tail),
 * D = Dv in {32, 64, 128}, the feature maps, normalize none and per_query,
 * shared and per-head random W (its upper triangle and a spare row and
 * column must be ignored), permuted views; the default on views it does not
 * take (padded rows, D = 63, chunk 7) and on f16 (mma with the fp16 mixing
 * GEMM while mct_f16_tc in mhla_causal_tc.cu is true, else portable: odd N,
 * D 128/64/32, both W kinds and normalize modes, permuted; N = 16K and 32K
 * in the long cases; and forced mma_split), the forced portable engine,
 * "mma_split" (the fp32-accurate mixing), "mma_bf16s" (bf16 block states:
 * odd N, D 128/64/32, shared and per-head W, per_query, permuted views) and
 * "mma_f16s" (scaled fp16 block states: the f16 rows, and N = 256K ×10);
 * N = 16K and 32K (M = 256, 512 blocks) in the long cases. */
static const int mc_fnone[4] = {LA_FEATURE_RELU, LA_FEATURE_ELU1, LA_FEATURE_IDENTITY,
                                LA_FEATURE_RELU_EPS};
static const int mc_fpq[3] = {LA_FEATURE_RELU_EPS, LA_FEATURE_ELU1, LA_FEATURE_RELU1};
static const int64_t mc_Ns[5] = {1, 63, 65, 1000, 4097}, mc_Ds[3] = {128, 64, 32};

/* The 30 rows of dt on the shapes mc_Ns x mc_Ds, normalize none and
 * per_query each, W kinds and views alternating; fshift moves the feature
 * maps along (the f16 rows take the next ones, so that each shape sees a
 * different map than in bf16). */
static void add_mhla_causal_rows(const reg *r, la_dtype dt, int fshift) {
    for (int di = 0; di < 3; di++)
        for (int ni = 0; ni < 5; ni++) {
            const int64_t D = mc_Ds[di], N = mc_Ns[ni], B = ni == 2 ? 2 : 1, H = ni == 4 ? 1 : 2;
            /* N = 1, identity, no normalize: ill-conditioned in bf16 (see tc_paths) */
            const int f0 = mc_fnone[(ni + di + fshift) % 4];
            add_mhla_causal_f(r, B, N, H, D, D, 64, LA_MHLA_NORM_NONE, (ni + di) & 1, dt, ni & 1,
                              ni == 0 && f0 == LA_FEATURE_IDENTITY ? LA_FEATURE_RELU : f0);
            add_mhla_causal_f(r, B, N, H, D, D, 64, LA_MHLA_NORM_PER_QUERY, (ni + di + 1) & 1, dt,
                              (ni + 1) & 1, mc_fpq[(ni + di + fshift) % 3]);
        }
}

static void mhla_causal_mma(bo_list *L) {
    bo_add_probe(L, "mhla_causal", bo_probe_mhla_causal);
    const reg rs = {L, 1, "mma"}, rl = {L, 0, "mma"}, rd = {L, 1, NULL}, rp = {L, 1, "portable"};
    const la_mhla_normalize NO = LA_MHLA_NORM_NONE, PQ = LA_MHLA_NORM_PER_QUERY;
    add_mhla_causal_rows(&rs, LA_BF16, 0);
    add_mhla_causal_f(&rs, 1, 1000, 3, 128, 128, 64, NO, 1, LA_BF16, 0, LA_FEATURE_RELU);
    add_mhla_causal_f(&rl, 1, 16384, 2, 128, 128, 64, NO, 1, LA_BF16, 1, LA_FEATURE_RELU);
    add_mhla_causal_f(&rl, 1, 32768, 1, 128, 128, 64, PQ, 0, LA_BF16, 0, LA_FEATURE_RELU_EPS);
    add_mhla_causal_f(&rl, 1, 16384, 2, 64, 64, 64, PQ, 1, LA_BF16, 1, LA_FEATURE_ELU1);
    /* the default: the fast path where it applies, else portable */
    add_mhla_causal_f(&rd, 1, 1000, 2, 128, 128, 64, NO, 1, LA_BF16, 0, -1);
    add_mhla_causal_f(&rd, 1, 1000, 2, 128, 128, 64, NO, 0, LA_BF16, TB_PADDED, -1);
    add_mhla_causal_f(&rd, 1, 1000, 2, 128, 128, 64, PQ, 1, LA_F16, 1, -1);
    add_mhla_causal_f(&rd, 1, 300, 2, 63, 63, 64, NO, 0, LA_BF16, 0, -1);
    /* f16 under the default choice */
    const reg rdl = {L, 0, NULL};
    add_mhla_causal_rows(&rd, LA_F16, 1);
    add_mhla_causal_f(&rdl, 1, 16384, 2, 128, 128, 64, NO, 1, LA_F16, 1, LA_FEATURE_RELU);
    add_mhla_causal_f(&rdl, 1, 32768, 1, 64, 64, 64, PQ, 0, LA_F16, 0, LA_FEATURE_RELU_EPS);
    add_mhla_causal_f(&rd, 1, 300, 2, 64, 64, 7, PQ, 1, LA_BF16, 1, -1);
    /* the fp32-accurate mixing (mcb_combine) */
    const reg rx = {L, 1, "mma_split"};
    add_mhla_causal_f(&rx, 1, 1000, 2, 128, 128, 64, NO, 1, LA_BF16, 1, LA_FEATURE_RELU);
    add_mhla_causal_f(&rx, 2, 65, 2, 64, 64, 64, PQ, 0, LA_BF16, 0, LA_FEATURE_ELU1);
    add_mhla_causal_f(&rx, 1, 4097, 1, 32, 32, 64, NO, 0, LA_BF16, 1, LA_FEATURE_RELU_EPS);
    add_mhla_causal_f(&rx, 1, 1000, 2, 64, 64, 64, PQ, 1, LA_F16, 1, LA_FEATURE_ELU1);
    /* bf16 block states (mct_mix_bf16_kernel): N = 8200 has two 128-row tiles */
    const reg rb = {L, 1, "mma_bf16s"};
    for (int di = 0; di < 2; di++)
        for (int ni = 0; ni < 5; ni++) {
            const int64_t D = mc_Ds[di], N = mc_Ns[ni], B = ni == 2 ? 2 : 1, H = ni == 4 ? 1 : 2;
            add_mhla_causal_f(&rb, B, N, H, D, D, 64, NO, ni & 1, LA_BF16, (ni + di) & 1,
                              ni == 0 ? LA_FEATURE_RELU : mc_fnone[(ni + di) % 4]);
            add_mhla_causal_f(&rb, B, N, H, D, D, 64, PQ, (ni + 1) & 1, LA_BF16, ni & 1,
                              mc_fpq[(ni + di) % 3]);
        }
    add_mhla_causal_f(&rb, 1, 8200, 1, 32, 32, 64, PQ, 1, LA_BF16, 1, LA_FEATURE_ELU1);
    add_mhla_causal_f(&rb, 1, 1000, 2, 32, 32, 64, NO, 0, LA_BF16, 0, LA_FEATURE_RELU);
    const reg rbl = {L, 0, "mma_bf16s"};
    add_mhla_causal_f(&rbl, 1, 32768, 1, 128, 128, 64, PQ, 0, LA_BF16, 0, LA_FEATURE_RELU_EPS);
    add_mhla_causal_f(&rp, 1, 1000, 2, 128, 128, 64, NO, 1, LA_BF16, 1, LA_FEATURE_ELU1);
    add_mhla_causal_f(&rp, 2, 65, 2, 64, 64, 64, PQ, 0, LA_BF16, 0, LA_FEATURE_RELU_EPS);
    /* fp16 block states scaled per block (mma_f16s, sm_90: skipped elsewhere): the f16 rows
     * above forced, N = 8200 (two row tiles), 32K, and N = 256K with inputs ×10 */
    const reg rf = {L, 1, "mma_f16s"}, rfl = {L, 0, "mma_f16s"};
    add_mhla_causal_rows(&rf, LA_F16, 1);
    add_mhla_causal_f(&rf, 1, 8200, 1, 32, 32, 64, PQ, 1, LA_F16, 1, LA_FEATURE_ELU1);
    /* f16 with fp32 block states (mma: the default off sm_90) */
    add_mhla_causal_f(&rs, 1, 1000, 2, 128, 128, 64, PQ, 1, LA_F16, 1, LA_FEATURE_RELU_EPS);
    add_mhla_causal_f(&rs, 2, 65, 2, 64, 64, 64, NO, 0, LA_F16, 0, LA_FEATURE_ELU1);
    add_mhla_causal_f(&rs, 1, 4097, 1, 32, 32, 64, PQ, 0, LA_F16, 1, LA_FEATURE_RELU1);
    add_mhla_causal_f(&rfl, 1, 32768, 1, 128, 128, 64, PQ, 0, LA_F16, 0, LA_FEATURE_RELU_EPS);
    const bo_opts of = opts(&rfl, "mhla_causal");
    bo_add(L, &of, run_no_overflow_mhla_causal_f16, NULL, 0, "mhla-causal f16 N=256K x10, outputs finite");
}

/* dt: bf16 (the default and the forced portable engine on each shape) or
 * f16 (the default, which takes the same tensor-core path "tc" since fp16
 * is accepted there; its portable rows are the f16 rows of cases_linear) */
static void tc_paths(bo_list *L, la_dtype dt) {
    static const char *paths[2] = {NULL, "portable"}; /* NULL: the default */
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    for (int pi = 0; pi < (dt == LA_BF16 ? 2 : 1); pi++) {
        const bool long_cases = pi == 0; /* the default */
        reg rs = {L, 1, paths[pi]}, rl = {L, 0, paths[pi]};
        const reg *r = &rs;
        const int64_t Ns[4] = {1, 63, 65, 1000};
        /* N = 1 with φ = identity and no normalization is ill-conditioned for this
         * path: o = (q·k) v, and the bf16 rounding of S̃ = k vᵀ errs by ~2^-9 Σ|q_d k_d|
         * |v|, unbounded against |q·k| (a float64 model of the rounding exceeds
         * rel 1e-2 in ~10% of draws; seen once on the H200, both versions alike):
         * relu there; identity is kept from N = 63 on */
        for (int ni = 0; ni < 4; ni++)
            for (int f = 0; f < 5; f++)
                add_linear(r, ni == 3 ? 2 : 1, Ns[ni], ni == 1 ? 3 : 2, 128, 128,
                         (ni == 0 && f == 0) ? LA_FEATURE_RELU : feats[f], 0, f != 0, 64, 0, dt,
                         (f + ni) & 1);
        add_linear(r, 1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 0, 0, 64, 0, dt, 1); /* no normalize */
        int64_t g1[1] = {1000}, b1[1] = {16}, g1b[1] = {65}, b1b[1] = {5}, g1c[1] = {1}, b1c[1] = {1};
        int64_t g1d[1] = {63}, b1d[1] = {7}, g1e[1] = {980}, b1e[1] = {70}, b2e[2] = {8, 8};
        int64_t g2[2] = {16, 16}, b2[2] = {4, 4}, g2b[2] = {15, 17}, b2b[2] = {4, 3};
        int64_t g3[3] = {21, 30, 50}, b3a[3] = {3, 5, 10}, b3b[3] = {7, 3, 5};
        for (int nm = 0; nm < 3; nm++) {
            const la_mhla_normalize n = (la_mhla_normalize)nm;
            if (nm != 2) add_mhla(r, 2, 1, g1, b1, 2, 128, 128, n, nm == 1, dt, 1, 1.0);
            add_mhla(r, 1, 1, g1b, b1b, 3, 128, 128, n, nm != 1, dt, 0, 1.0);
            add_mhla(r, 1, 1, g1c, b1c, 1, 128, 128, n, 0, dt, 0, 1.0);
            add_mhla(r, 1, 1, g1d, b1d, 2, 128, 128, n, 1, dt, 1, 1.0);
            add_mhla(r, 1, 2, g2, b2, 3, 128, 128, n, nm != 0, dt, nm & 1, 1.0);
            if (nm != 2) /* released_vision needs equal blocks */
                add_mhla(r, 1, 2, g2b, b2b, 2, 128, 128, n, nm == 0, dt, 1, 1.0);
            /* M >= 32: the mix runs as a tf32 GEMM (two 64-row tiles at M = 70; 14 tokens per block) */
            add_mhla(r, 1, 1, g1e, b1e, 2, 128, 128, n, nm != 1, dt, nm & 1, 1.0);
            add_mhla(r, 2, 2, g2, b2e, 1, 128, 128, n, nm == 1, dt, 0, 1.0);
            if (long_cases) /* 3-D video grid, N = 31500 */
                add_mhla(&rl, 1, 3, g3, nm == 1 ? b3b : b3a, 2, 128, 128, n, nm != 1, dt, nm & 1, 1.0);
        }
        if (long_cases) { /* long sequences: the default path */
            r = &rl;
            int64_t gl[1] = {32768}, bl[1] = {16}, bm[1] = {150}, gh[1] = {131072};
            add_linear(r, 1, 32768, 3, 128, 128, LA_FEATURE_ELU1, 0, 1, 64, 0, dt, 1);
            add_linear(r, 1, 131072, 2, 128, 128, LA_FEATURE_RELU_EPS, 0, 1, 64, 0, dt, 0);
            for (int nm = 0; nm < 3; nm++)
                add_mhla(r, 1, 1, gl, bl, 2, 128, 128, (la_mhla_normalize)nm, nm != 1, dt, nm & 1, 1.0);
            add_mhla(r, 1, 1, gl, bm, 2, 128, 128, LA_MHLA_NORM_PER_QUERY, 1, dt, 0, 1.0);
            add_mhla(r, 1, 1, gh, bl, 2, 128, 128, LA_MHLA_NORM_NONE, 0, dt, 1, 1.0);
        }
    }
}

/* The head dims of the tensor-core path besides 128 (D = Dv = 64, 32 and
 * (D, Dv) = (64, 128), (128, 64)), forced to "tc" (so that a shape the path
 * stops taking fails instead of running portable): odd N, the five feature
 * maps, permuted views, MHLA 1-D (the tf32 mix at M = 70), 2-D, the three
 * normalize modes, per-head mixing; N = 32K in the long cases. dt: bf16 or
 * f16 (the same path templated on the 16-bit type; f16 under the default
 * choice, which is "tc" for these shapes while lf_f16_tc in linfam.cu is
 * true, and the portable engine when it is set false). */
static void tc_heads(bo_list *L, la_dtype dt) {
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    const int64_t dims[4][2] = {{64, 64}, {32, 32}, {64, 128}, {128, 64}};
    const char *var = dt == LA_F16 ? NULL : "tc";
    reg rs = {L, 1, var}, rl = {L, 0, var};
    const int64_t Ns[4] = {1, 63, 65, 1000};
    int64_t g1b[1] = {65}, b1b[1] = {5}, g1e[1] = {980}, b1e[1] = {70}, g1[1] = {1000}, b1[1] = {16};
    int64_t g2[2] = {16, 16}, b2[2] = {4, 4}, gl[1] = {32768}, bl[1] = {150};
    for (int di = 0; di < 4; di++) {
        const int64_t D = dims[di][0], Dv = dims[di][1];
        for (int ni = 0; ni < 4; ni++)
            for (int f = 0; f < 5; f++) /* N = 1: relu (see tc_paths) */
                add_linear(&rs, ni == 3 ? 2 : 1, Ns[ni], ni == 1 ? 3 : 2, D, Dv,
                           (ni == 0 && f == 0) ? LA_FEATURE_RELU : feats[f], 0, f != 0, 64, 0, dt,
                           (f + ni + di) & 1);
        for (int nm = 0; nm < 3; nm++) {
            const la_mhla_normalize n = (la_mhla_normalize)nm;
            add_mhla(&rs, 1, 1, g1b, b1b, 3, D, Dv, n, nm != 1, dt, (nm + di) & 1, 1.0);
            add_mhla(&rs, 1, 1, g1e, b1e, 2, D, Dv, n, nm != 1, dt, nm & 1, 1.0);
            add_mhla(&rs, 1, 2, g2, b2, 2, D, Dv, n, nm != 0, dt, (nm + 1) & 1, 1.0);
            if (nm != 2) add_mhla(&rs, 2, 1, g1, b1, 2, D, Dv, n, nm == 1, dt, 1, 1.0);
        }
        add_linear(&rl, 1, 32768, 3, D, Dv, LA_FEATURE_ELU1, 0, 1, 64, 0, dt, di & 1);
        add_mhla(&rl, 1, 1, gl, bl, 2, D, Dv, LA_MHLA_NORM_PER_QUERY, 1, dt, 0, 1.0);
    }
}

/* f16 on the tensor-core path "tc" (the default for f16 while lf_f16_tc in
 * linfam.cu is true) with inputs of scale 10 at N = 256K
 * (compared in full against the CPU path): the sums S = Σ φ(k) vᵀ and
 * z = Σ φ(k) pass 65504 there, S̃ enters the fp16 product scaled per block
 * and z̃ stays fp32, while the normalized outputs stay well inside fp16
 * (per_query and released_vision only: without normalization the true
 * output itself passes 65504 at this scale); odd N at scale 10 in --small. */
static void f16_scaled(bo_list *L) {
    const reg rs = {L, 1, NULL}, rl = {L, 0, NULL};
    const la_dtype dt = LA_F16;
    const la_mhla_normalize PQ = LA_MHLA_NORM_PER_QUERY, RV = LA_MHLA_NORM_RELEASED_VISION;
    int64_t g1[1] = {1000}, b1[1] = {16}, g1b[1] = {63}, b1b[1] = {7}, g2[2] = {16, 16}, b2[2] = {4, 4};
    int64_t gl[1] = {262144}, bl[1] = {1}, bm[1] = {16}, g2l[2] = {512, 512}, b2l[2] = {8, 8};
    add_mhla(&rs, 1, 1, g1, b1, 2, 128, 128, PQ, 0, dt, 1, 10.0);
    add_mhla(&rs, 1, 1, g1b, b1b, 3, 64, 64, PQ, 1, dt, 0, 10.0);
    add_mhla(&rs, 1, 2, g2, b2, 2, 32, 32, RV, 0, dt, 1, 10.0);
    add_mhla(&rl, 1, 1, gl, bl, 2, 64, 64, PQ, 0, dt, 0, 10.0);  /* linear attention, M = 1 */
    add_mhla(&rl, 1, 1, gl, bm, 2, 128, 128, PQ, 1, dt, 1, 10.0); /* M = 16: the tf32 mix */
    add_mhla(&rl, 1, 2, g2l, b2l, 1, 64, 128, PQ, 0, dt, 0, 10.0);
}

/* MHLA variant tc_bf16s (linfam_tc_bf16s.cu: bf16 block summaries, a bf16
 * mixing GEMM), forced (a shape it stops taking fails): D = Dv in {64, 128},
 * N = 2 (one token per block: M >= 2, and the CUDA backend refuses empty
 * blocks), odd N, 1-D / 2-D / 3-D grids with uneven
 * blocks, M = 2 (several segments per block) up to 245 (two 160-row tiles),
 * shared and per-head W, per_query and none, permuted views; the Wan-2.1
 * video grid and N = 32K (M = 150) in the long cases. */
static void mhla_bf16s(bo_list *L) {
    const reg rs = {L, 1, "tc_bf16s"}, rl = {L, 0, "tc_bf16s"};
    const la_dtype dt = LA_BF16;
    const la_mhla_normalize NO = LA_MHLA_NORM_NONE, PQ = LA_MHLA_NORM_PER_QUERY;
    int64_t g1a[1] = {2}, b1a[1] = {2}, g1b[1] = {63}, b1b[1] = {7}, g1c[1] = {65}, b1c[1] = {6};
    int64_t g1d[1] = {1000}, b1d[1] = {2}, g1e[1] = {340}, b1e[1] = {170}, g1f[1] = {980}, b1f[1] = {245};
    int64_t g2[2] = {20, 50}, b2[2] = {3, 7}, g3[3] = {5, 6, 7}, b3[3] = {2, 3, 2};
    int64_t gw[3] = {21, 30, 50}, bw[3] = {3, 5, 10}, gl[1] = {32768}, bl[1] = {150};
    for (int di = 0; di < 2; di++) {
        const int64_t D = di ? 64 : 128;
        add_mhla(&rs, 1, 1, g1a, b1a, 2, D, D, PQ, 0, dt, 0, 1.0);
        add_mhla(&rs, 1, 1, g1b, b1b, 3, D, D, NO, 1, dt, 1, 1.0);
        add_mhla(&rs, 2, 1, g1c, b1c, 1, D, D, PQ, di, dt, di, 1.0);
        add_mhla(&rs, 1, 1, g1d, b1d, 2, D, D, NO, 0, dt, 0, 1.0);
        add_mhla(&rs, 1, 2, g2, b2, 2, D, D, PQ, 1, dt, 1, 1.0);
        add_mhla(&rs, 1, 3, g3, b3, 2, D, D, NO, 0, dt, di, 1.0);
        add_mhla(&rs, 1, 1, g1e, b1e, 1, D, D, PQ, 1, dt, 1 - di, 1.0);
        add_mhla(&rs, 1, 1, g1f, b1f, 1, D, D, PQ, 0, dt, 0, 1.0);
        add_mhla(&rl, 1, 3, gw, bw, 4, D, D, PQ, di, dt, 0, 1.0);
        add_mhla(&rl, 1, 1, gl, bl, 2, D, D, di ? NO : PQ, 1, dt, di, 1.0);
    }
}

void cases_linear(bo_list *L) {
    bo_add_probe(L, "linear", probe_linear);
    bo_add_probe(L, "mhla", probe_mhla);
    reg rs = {L, 1, NULL}, rl = {L, 0, NULL};
    const reg *r = &rs;
    const la_dtype dts[3] = {LA_F32, LA_BF16, LA_F16};
    for (int di = 0; di < 3; di++) {
        la_dtype dt = dts[di];
        add_softmax(r, 1, 1, 1, 1, 1, 1, 1, 0, dt, 0);
        add_softmax(r, 2, 63, 63, 2, 1, 16, 17, 1, dt, 1);
        add_softmax(r, 1, 65, 130, 4, 2, 63, 64, 1, dt, 0);
        add_softmax(r, 1, 130, 65, 2, 2, 64, 32, 1, dt, 1); /* Nq > Nk: empty rows */
        add_softmax(r, 2, 1000, 1000, 2, 2, 128, 128, 0, dt, 1);
        add_softmax(&rl, 1, 1000, 1000, 3, 1, 128, 96, 1, dt, 0);
        const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                     LA_FEATURE_RELU1, LA_FEATURE_ELU1};
        for (int f = 0; f < 5; f++) add_linear(r, 1, 65, 2, 16, 17, feats[f], 0, f != 0, 64, 0, dt, f & 1);
        add_linear(r, 1, 1, 1, 1, 1, LA_FEATURE_RELU, 0, 1, 64, 0, dt, 0);
        add_linear(r, 2, 63, 3, 63, 64, LA_FEATURE_ELU1, 0, 1, 64, 0, dt, 1);
        add_linear(r, 2, 1000, 2, 128, 128, LA_FEATURE_RELU, 0, 1, 64, 0, dt, 0);
        add_linear(r, 1, 1000, 2, 64, 32, LA_FEATURE_RELU, 0, 0, 64, 0, dt, 1);
        /* causal, with and without state, odd chunks */
        add_linear(r, 1, 1, 1, 1, 1, LA_FEATURE_RELU, 1, 1, 64, 0, dt, 0);
        add_linear(r, 2, 63, 2, 16, 17, LA_FEATURE_ELU1, 1, 1, 64, 1, dt, 1);
        add_linear(r, 1, 65, 3, 63, 64, LA_FEATURE_RELU, 1, 0, 64, 1, dt, 0);
        add_linear(r, 1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 1, 1, 64, 1, dt, 1);
        add_linear(r, 1, 1000, 2, 64, 32, LA_FEATURE_RELU, 1, 0, 7, 0, dt, 0);
        add_linear(r, 1, 300, 1, 32, 48, LA_FEATURE_ELU1, 1, 1, 100, 1, dt, 0);
        int64_t g1[1] = {1000}, b1[1] = {16}, g1b[1] = {65}, b1b[1] = {5};
        int64_t g2[2] = {16, 16}, b2[2] = {4, 4}, g2b[2] = {15, 17}, b2b[2] = {4, 3};
        int64_t g3[3] = {21, 30, 50}, b3a[3] = {3, 5, 10}, b3b[3] = {7, 3, 5};
        for (int nm = 0; nm < 3; nm++) {
            add_mhla(r, 1, 2, g2, b2, 2, 16, 17, (la_mhla_normalize)nm, nm == 1, dt, nm & 1, 1.0);
            if (nm != 2) {
                add_mhla(r, 2, 1, g1, b1, 2, 64, 64, (la_mhla_normalize)nm, 0, dt, 1, 1.0);
                add_mhla(r, 1, 1, g1b, b1b, 3, 63, 64, (la_mhla_normalize)nm, 1, dt, 0, 1.0);
                add_mhla(r, 1, 2, g2b, b2b, 2, 128, 128, (la_mhla_normalize)nm, 1, dt, 1, 1.0);
            }
            add_mhla(&rl, 1, 3, g3, b3a, 2, 64, 64, (la_mhla_normalize)nm, nm != 1, dt, 0, 1.0);
            add_mhla(&rl, 1, 3, g3, b3b, 2, 64, 64, (la_mhla_normalize)nm, nm == 1, dt, 1, 1.0);
        }
        /* D = Dv = 128 with bf16 rows takes the tensor-core path: every mode */
        for (int nm = 0; nm < 3; nm++) {
            add_mhla(r, 1, 2, g2, b2, 3, 128, 128, (la_mhla_normalize)nm, nm != 1, dt, nm & 1, 1.0);
            add_mhla(&rl, 1, 3, g3, b3b, 2, 128, 128, (la_mhla_normalize)nm, nm == 1, dt, 0, 1.0);
        }
        add_mhla_causal(r, 1, 1, 1, 1, 1, 64, LA_MHLA_NORM_NONE, 0, dt, 0);
        add_mhla_causal(r, 2, 63, 2, 16, 17, 64, LA_MHLA_NORM_NONE, 1, dt, 1);
        add_mhla_causal(r, 1, 1000, 2, 64, 64, 64, LA_MHLA_NORM_NONE, 0, dt, 0);
        add_mhla_causal(r, 1, 1000, 2, 63, 32, 64, LA_MHLA_NORM_PER_QUERY, 1, dt, 1);
        add_mhla_causal(r, 1, 300, 2, 32, 32, 7, LA_MHLA_NORM_PER_QUERY, 0, dt, 0);
        add_mhla_causal(r, 1, 300, 1, 32, 32, 100, LA_MHLA_NORM_NONE, 1, dt, 0);
        add_focused(r, LA_FOCUSED_FLATTEN, 1, 1, 1, 1, 1, 1, 0, 0, dt, 0, 1.0);
        add_focused(r, LA_FOCUSED_FLATTEN, 2, 7, 9, 2, 16, 16, 5, 1, dt, 1, 1.0);
        add_focused(r, LA_FOCUSED_FLATTEN, 1, 13, 5, 3, 63, 40, 0, 1, dt, 0, 1.0);
        add_focused(r, LA_FOCUSED_FLATTEN, 1, 32, 32, 2, 64, 64, 3, 0, dt, 1, 1.0);
        add_focused(r, LA_FOCUSED_BLOG, 1, 1, 1, 1, 1, 1, 0, 0, dt, 0, 1.0);
        add_focused(r, LA_FOCUSED_BLOG, 2, 7, 9, 2, 16, 17, 3, 1, dt, 1, 1.0);
        add_focused(r, LA_FOCUSED_BLOG, 1, 32, 32, 2, 64, 64, 5, 0, dt, 0, 1.0);
        add_focused(r, LA_FOCUSED_BLOG, 1, 13, 5, 3, 63, 40, 0, 1, dt, 1, 1.0);
    }
    tc_paths(L, LA_BF16);
    tc_paths(L, LA_F16);
    tc_heads(L, LA_BF16);
    tc_heads(L, LA_F16);
    f16_scaled(L);
    mhla_bf16s(L);
    mhla_causal_mma(L);
    r = &rl;
    {
        for (int di = 0; di < 2; di++) {
            la_dtype dt = dts[di];
            int64_t gl[1] = {131072}, bl[1] = {16};
            add_linear(r, 1, 131072, 2, 64, 64, LA_FEATURE_RELU, 0, 1, 64, 0, dt, 0);
            add_linear(r, 1, 131072, 2, 64, 64, LA_FEATURE_ELU1, 1, 1, 64, 1, dt, 1);
            add_mhla(r, 1, 1, gl, bl, 2, 64, 64, LA_MHLA_NORM_PER_QUERY, 1, dt, 0, 1.0);
            add_mhla_causal(r, 1, 16384, 2, 64, 64, 64, LA_MHLA_NORM_NONE, 0, dt, 0);
            add_focused(r, LA_FOCUSED_FLATTEN, 1, 256, 512, 2, 64, 64, 5, 1, dt, 0, 1.0);
            add_softmax(r, 1, 4096, 4096, 2, 2, 128, 128, 1, dt, 0);
            add_linear(r, 1, 131072, 2, 128, 128, LA_FEATURE_ELU1, 0, 1, 64, 0, dt, 1);
            add_mhla(r, 1, 1, gl, bl, 2, 128, 128, LA_MHLA_NORM_NONE, 0, dt, 0, 1.0);
        }
        const bo_opts o = opts(r, "linear");
        bo_add(L, &o, run_no_overflow, NULL, 0,
               "linear, linear-causal, mhla 512x512/8x8, focused-flatten 512x512, mhla-causal: bf16, f16 N=256K, "
               "inputs of scale 10, outputs finite");
    }
}
