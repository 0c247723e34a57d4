/* MHLA (SPEC §5) against float64 references written plainly here:
 * non-causal on 1-D/2-D/3-D grids (even and uneven block grids), shared and
 * per-head mixing, every normalize mode and feature map, strided views,
 * f64/bf16 views; invariants (all-ones mixing = global linear attention,
 * identity mixing = block-diagonal linear attention, released_vision ≠
 * per_query). Causal, decoding and the initializers are in test_mhla_causal.c
 * and test_mhla_init.c. */
#include "test_mhla_common.h"

/* ---- plain float64 references ------------------------------------------- */
/* Block id of token t straight from SPEC §5.1: coordinate c on an axis of n
 * tokens and g blocks lies in block coordinate floor(c·g/n). */
static int64_t ref_block_of(int nd, const int64_t *grid, const int64_t *blocks, int64_t t) {
    int64_t c[3], id = 0;
    for (int a = nd - 1; a >= 0; a--) {
        c[a] = t % grid[a];
        t /= grid[a];
    }
    for (int a = 0; a < nd; a++) id = id * blocks[a] + (c[a] * blocks[a]) / grid[a];
    return id;
}

/* SPEC §5.2 in summary form: S_b, z_b, mixing, then per token. W is
 * [Hw][M][M] doubles. out [B,N,H,Dv] logical order. */
static void ref_mhla(const tview *q, const tview *k, const tview *v, const double *W, int Hw,
                     int nd, const int64_t *grid, const int64_t *blocks, la_feature f, int norm,
                     double eps, double scale, double *out) {
    const int64_t B = q->B, N = q->N, H = q->H, D = q->D, Dv = v->D;
    int64_t M = 1;
    for (int a = 0; a < nd; a++) M *= blocks[a];
    int64_t *blk = malloc(sizeof(int64_t) * N), *pos = malloc(sizeof(int64_t) * N);
    int64_t *cnt = calloc(M, sizeof(int64_t));
    for (int64_t t = 0; t < N; t++) {
        blk[t] = ref_block_of(nd, grid, blocks, t);
        pos[t] = cnt[blk[t]]++; /* raster order inside the block */
    }
    int64_t L = cnt[0];
    /* token at position w of block b (released_vision) */
    int64_t *at = malloc(sizeof(int64_t) * M * (L > 0 ? L : 1));
    for (int64_t t = 0; t < N; t++)
        if (pos[t] < L) at[blk[t] * L + pos[t]] = t;
    double *S = malloc(sizeof(double) * M * D * Dv), *z = malloc(sizeof(double) * M * D);
    double *St = malloc(sizeof(double) * M * D * Dv), *zt = malloc(sizeof(double) * M * D);
    double *qt = malloc(sizeof(double) * D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            const double *Wh = W + (Hw == 1 ? 0 : h) * M * M;
            memset(S, 0, sizeof(double) * M * D * Dv);
            memset(z, 0, sizeof(double) * M * D);
            for (int64_t t = 0; t < N; t++)
                for (int64_t d = 0; d < D; d++) {
                    double kd = la_ref_feature(f, tv_get(k, b, t, h, d));
                    z[blk[t] * D + d] += kd;
                    for (int64_t e = 0; e < Dv; e++)
                        S[(blk[t] * D + d) * Dv + e] += kd * tv_get(v, b, t, h, e);
                }
            for (int64_t i = 0; i < M; i++) {
                for (int64_t x = 0; x < D * Dv; x++) {
                    double s = 0;
                    for (int64_t j = 0; j < M; j++) s += Wh[i * M + j] * S[j * D * Dv + x];
                    St[i * D * Dv + x] = s;
                }
                for (int64_t d = 0; d < D; d++) {
                    double s = 0;
                    for (int64_t j = 0; j < M; j++) s += Wh[i * M + j] * z[j * D + d];
                    zt[i * D + d] = s;
                }
            }
            for (int64_t t = 0; t < N; t++) {
                const int64_t i = blk[t];
                for (int64_t d = 0; d < D; d++) qt[d] = scale * la_ref_feature(f, tv_get(q, b, t, h, d));
                double den = 1;
                if (norm == LA_MHLA_NORM_PER_QUERY) {
                    den = eps;
                    for (int64_t d = 0; d < D; d++) den += qt[d] * zt[i * D + d];
                } else if (norm == LA_MHLA_NORM_RELEASED_VISION) {
                    den = eps;
                    for (int64_t j = 0; j < M; j++) {
                        int64_t u = at[j * L + pos[t]]; /* same position in block j */
                        double r = 0;
                        for (int64_t d = 0; d < D; d++)
                            r += scale * la_ref_feature(f, tv_get(q, b, u, h, d)) * z[j * D + d];
                        den += Wh[i * M + j] * r;
                    }
                }
                for (int64_t e = 0; e < Dv; e++) {
                    double s = 0;
                    for (int64_t d = 0; d < D; d++) s += qt[d] * St[(i * D + d) * Dv + e];
                    out[((b * N + t) * H + h) * Dv + e] = s / den;
                }
            }
        }
    free(blk), free(pos), free(cnt), free(at), free(S), free(z), free(St), free(zt), free(qt);
}

/* SPEC §9 form, O(N²): o_t = Σ_s W[b(t),b(s)] (q̃_t·k̃_s) v_s / (Σ_s W[..](q̃_t·k̃_s) + eps).
 * An independent cross-check of ref_mhla for per_query/none. */
static void ref_mhla_pairwise(const tview *q, const tview *k, const tview *v, const double *W,
                              int Hw, int nd, const int64_t *grid, const int64_t *blocks,
                              la_feature f, int norm, double eps, double scale, double *out) {
    const int64_t B = q->B, N = q->N, H = q->H, D = q->D, Dv = v->D;
    int64_t M = 1;
    for (int a = 0; a < nd; a++) M *= blocks[a];
    double *num = malloc(sizeof(double) * Dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < N; t++) {
                const double *Wh = W + (Hw == 1 ? 0 : h) * M * M;
                int64_t bt = ref_block_of(nd, grid, blocks, t);
                double den = 0;
                memset(num, 0, sizeof(double) * Dv);
                for (int64_t s = 0; s < N; s++) {
                    double a = 0;
                    for (int64_t d = 0; d < D; d++)
                        a += scale * la_ref_feature(f, tv_get(q, b, t, h, d)) * la_ref_feature(f, tv_get(k, b, s, h, d));
                    a *= Wh[bt * M + ref_block_of(nd, grid, blocks, s)];
                    den += a;
                    for (int64_t e = 0; e < Dv; e++) num[e] += a * tv_get(v, b, s, h, e);
                }
                for (int64_t e = 0; e < Dv; e++)
                    out[((b * N + t) * H + h) * Dv + e] =
                        norm == LA_MHLA_NORM_PER_QUERY ? num[e] / (den + eps) : num[e];
            }
    free(num);
}

/* Plain linear attention (SPEC §3) over a set of tokens: tokens with
 * group[t] == g attend to tokens with group == g. group NULL = all. */
static void ref_linear_groups(const tview *q, const tview *k, const tview *v, const int64_t *group,
                              la_feature f, int normalize, double eps, double *out) {
    const int64_t B = q->B, N = q->N, H = q->H, D = q->D, Dv = v->D;
    double *num = malloc(sizeof(double) * Dv);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < N; t++) {
                double den = 0;
                memset(num, 0, sizeof(double) * Dv);
                for (int64_t s = 0; s < N; s++) {
                    if (group && group[s] != group[t]) continue;
                    double a = 0;
                    for (int64_t d = 0; d < D; d++)
                        a += la_ref_feature(f, tv_get(q, b, t, h, d)) * la_ref_feature(f, tv_get(k, b, s, h, d));
                    den += a;
                    for (int64_t e = 0; e < Dv; e++) num[e] += a * tv_get(v, b, s, h, e);
                }
                for (int64_t e = 0; e < Dv; e++)
                    out[((b * N + t) * H + h) * Dv + e] = normalize ? num[e] / (den + eps) : num[e];
            }
    free(num);
}

/* ---- one case ------------------------------------------------------------- */
typedef struct nc_case {
    int64_t B, H, D, Dv;
    int nd;
    int64_t grid[3], blocks[3];
    int per_head;       /* [H,M,M] mixing */
    la_feature f;
    int norm;
    float scale;
    int layout;         /* 0 contiguous, 1 permuted [B,H,N,D] buffers */
    la_dtype dt;        /* input/output dtype */
    int pairwise;       /* also cross-check with the O(N²) reference */
    int buf_mode;       /* 0 as made; 1 out 64-byte aligned (streaming stores);
                           2 bf16 out; 3 q,k,v,out shifted off 64-byte alignment */
} nc_case;

/* Move a view's data to a fresh buffer whose start is 64-byte aligned plus
 * shift elements (same strides, same contents). Returns the block to free
 * (x->buf then points inside it: do not tv_free x). */
static void *tv_realign(tview *x, int64_t shift) {
    const size_t es = la_dtype_size(x->dt);
    size_t n = 1;
    for (int i = 0; i < 4; i++) n += (size_t)((x->t.ne[i] - 1) * x->t.nb[i]);
    void *raw = NULL;
    if (posix_memalign(&raw, 64, (n + (size_t)shift) * es)) abort();
    memcpy((char *)raw + shift * es, x->buf, n * es);
    free(x->buf);
    x->buf = (char *)raw + shift * es;
    x->f32 = x->dt == LA_F32 ? (float *)x->buf : NULL;
    x->t.data = x->buf;
    return raw;
}

static const char *norm_str(int n) {
    return n == 0 ? "per_query" : n == 1 ? "none" : "released_vision";
}

static void run_case(la_rng *rng, const nc_case *c, la_context *ctx) {
    int64_t N = 1, M = 1;
    for (int a = 0; a < c->nd; a++) N *= c->grid[a], M *= c->blocks[a];
    tview q, k, v, o;
    tv_make(&q, c->B, N, c->H, c->D, c->dt, c->layout, rng, 1.0);
    tv_make(&k, c->B, N, c->H, c->D, c->dt, c->layout, rng, 1.0);
    tv_make(&v, c->B, N, c->H, c->Dv, c->dt, c->layout, rng, 1.0);
    tv_make(&o, c->B, N, c->H, c->Dv, c->buf_mode == 2 ? LA_BF16 : c->dt, c->layout ? 2 : 0, NULL,
            0); /* NaN-poisoned */
    void *raw[4] = {NULL, NULL, NULL, NULL}; /* realigned buffers (buf_mode 1, 3) */
    if (c->buf_mode == 1) raw[3] = tv_realign(&o, 0);
    if (c->buf_mode == 3) {
        raw[0] = tv_realign(&q, 1), raw[1] = tv_realign(&k, 1), raw[2] = tv_realign(&v, 1);
        raw[3] = tv_realign(&o, 1);
    }
    int Hw = c->per_head ? (int)c->H : 1;
    mixing_t w;
    mix_make(&w, Hw, M, c->per_head ? 3 : 2, rng, 0);

    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = c->nd;
    for (int a = 0; a < c->nd; a++) p.grid[a] = c->grid[a], p.blocks[a] = c->blocks[a];
    if (c->nd == 1 && (c->grid[0] & 1)) p.grid[0] = 0; /* exercise "0 = N" */
    p.feature = c->f;
    p.normalize = (la_mhla_normalize)c->norm;
    p.scale_q = c->scale;
    const int64_t n_out = c->B * N * c->H * c->Dv;
    double *ref = malloc(sizeof(double) * n_out);
    float *got = malloc(sizeof(float) * n_out);
    ref_mhla(&q, &k, &v, w.d, Hw, c->nd, c->grid, c->blocks, c->f, c->norm, p.eps, c->scale, ref);
    la_status s = la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx);
    CHECK(s == LA_OK, "mhla forward: %s", la_last_error());
    tv_read(&o, got);
    double err = la_rel_err(got, ref, n_out);
    double tol = c->dt == LA_BF16 || c->buf_mode == 2 ? 1e-2 : 1e-5;
    char g[64], bl[64];
    dims_str(c->nd, c->grid, g, sizeof g);
    dims_str(c->nd, c->blocks, bl, sizeof bl);
    printf("  grid %-9s blocks %-7s B=%lld H=%lld D=%-3lld Dv=%-3lld %s %-15s %-8s %s%s%s rel=%.2e\n",
           g, bl, (long long)c->B, (long long)c->H, (long long)c->D, (long long)c->Dv,
           c->per_head ? "W[H,M,M]" : "W[M,M]  ", norm_str(c->norm), la_feature_name(c->f),
           la_dtype_name(c->dt), c->layout ? " strided" : "",
           c->buf_mode == 1 ? " out-aligned" : c->buf_mode == 2 ? " out-bf16" :
           c->buf_mode == 3 ? " misaligned" : "", err);
    CHECK(err <= tol, "grid %s blocks %s %s %s: rel err %.3e > %.0e", g, bl, norm_str(c->norm),
          la_feature_name(c->f), err, tol);
    if (c->pairwise && c->norm != LA_MHLA_NORM_RELEASED_VISION) {
        double *ref2 = malloc(sizeof(double) * n_out);
        ref_mhla_pairwise(&q, &k, &v, w.d, Hw, c->nd, c->grid, c->blocks, c->f, c->norm, p.eps,
                          c->scale, ref2);
        double e2 = 0, mx = 0;
        for (int64_t i = 0; i < n_out; i++) {
            e2 = fmax(e2, fabs(ref2[i] - ref[i]));
            mx = fmax(mx, fabs(ref2[i]));
        }
        CHECK(e2 <= 1e-10 * fmax(mx, 1e-30), "summary and pairwise references disagree: %.3e", e2 / mx);
        free(ref2);
    }
    free(ref), free(got);
    tview *views[4] = {&q, &k, &v, &o};
    for (int i = 0; i < 4; i++) {
        if (raw[i]) free(raw[i]);
        else tv_free(views[i]);
    }
    mix_free(&w);
}

/* ---- invariants ------------------------------------------------------------ */
static void invariants(la_rng *rng, la_context *ctx) {
    printf("invariants\n");
    /* 7x9 map, 2x3 blocks (uneven), M = 6 */
    const int64_t B = 2, H = 2, D = 16, Dv = 24, grid[2] = {7, 9}, blocks[2] = {2, 3}, M = 6, N = 63;
    tview q, k, v, o;
    tv_make(&q, B, N, H, D, LA_F32, 0, rng, 1.0);
    tv_make(&k, B, N, H, D, LA_F32, 0, rng, 1.0);
    tv_make(&v, B, N, H, Dv, LA_F32, 0, rng, 1.0);
    tv_make(&o, B, N, H, Dv, LA_F32, 0, NULL, 0);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 2;
    p.grid[0] = 7, p.grid[1] = 9, p.blocks[0] = 2, p.blocks[1] = 3;
    const int64_t n_out = B * N * H * Dv;
    double *ref = malloc(sizeof(double) * n_out);
    float *got = malloc(sizeof(float) * n_out);
    mixing_t w;
    for (int norm = 0; norm < 2; norm++) {
        p.normalize = (la_mhla_normalize)norm;
        /* all-ones mixing: every block sees every summary = global linear attention */
        mix_make(&w, 1, M, 2, NULL, 1);
        ref_linear_groups(&q, &k, &v, NULL, p.feature, norm == 0, p.eps, ref);
        la_fill_nan(o.f32, n_out);
        CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx));
        tv_read(&o, got);
        double e1 = la_rel_err(got, ref, n_out);
        printf("  all-ones mixing vs global linear attention (%s): rel=%.2e\n", norm_str(norm), e1);
        CHECK(e1 <= 1e-5, "all-ones mixing != global linear attention: %.3e", e1);
        mix_free(&w);
        /* identity mixing: block-diagonal linear attention */
        mix_make(&w, 1, M, 2, NULL, 2);
        int64_t group[63];
        for (int64_t t = 0; t < N; t++) group[t] = ref_block_of(2, grid, blocks, t);
        ref_linear_groups(&q, &k, &v, group, p.feature, norm == 0, p.eps, ref);
        la_fill_nan(o.f32, n_out);
        CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx));
        tv_read(&o, got);
        double e2 = la_rel_err(got, ref, n_out);
        printf("  identity mixing vs block-diagonal linear attention (%s): rel=%.2e\n",
               norm_str(norm), e2);
        CHECK(e2 <= 1e-5, "identity mixing != block-diagonal linear attention: %.3e", e2);
        mix_free(&w);
    }
    tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&o);

    /* released_vision differs from per_query (equal 4x4 blocks of an 8x8 map,
     * locality mixing): say by how much. They agree when W is the identity
     * (then both divide by q̃_t·z_i). */
    const int64_t N2 = 64, g2[2] = {8, 8}, b2[2] = {2, 2};
    tv_make(&q, 1, N2, 2, D, LA_F32, 0, rng, 1.0);
    tv_make(&k, 1, N2, 2, D, LA_F32, 0, rng, 1.0);
    tv_make(&v, 1, N2, 2, Dv, LA_F32, 0, rng, 1.0);
    tv_make(&o, 1, N2, 2, Dv, LA_F32, 0, NULL, 0);
    tview o2;
    tv_make(&o2, 1, N2, 2, Dv, LA_F32, 0, NULL, 0);
    p.grid[0] = g2[0], p.grid[1] = g2[1], p.blocks[0] = b2[0], p.blocks[1] = b2[1];
    mix_make(&w, 1, 4, 2, NULL, 0);
    CHECK_OK(la_mhla_init(LA_MHLA_INIT_LOCALITY, 2, b2, &w.t));
    p.normalize = LA_MHLA_NORM_PER_QUERY;
    CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx));
    p.normalize = LA_MHLA_NORM_RELEASED_VISION;
    CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o2.t, ctx));
    const int64_t n2 = N2 * 2 * Dv;
    double dmax = 0, vmax = 0, dsum = 0;
    for (int64_t i = 0; i < n2; i++) {
        double d = fabs((double)o.f32[i] - o2.f32[i]);
        dmax = fmax(dmax, d), dsum += d, vmax = fmax(vmax, fabs(o.f32[i]));
    }
    printf("  released_vision vs per_query (8x8 map, 2x2 blocks, locality W): max |diff| = %.3e "
           "(%.1f%% of max |out|), mean |diff| = %.3e\n", dmax, 100 * dmax / vmax, dsum / n2);
    CHECK(dmax > 1e-3 * vmax, "released_vision should differ from per_query: %.3e", dmax);
    mix_free(&w);
    mix_make(&w, 1, 4, 2, NULL, 2);
    p.normalize = LA_MHLA_NORM_PER_QUERY;
    CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o.t, ctx));
    p.normalize = LA_MHLA_NORM_RELEASED_VISION;
    CHECK_OK(la_mhla_forward(&p, &q.t, &k.t, &v.t, &w.t, &o2.t, ctx));
    double eid = 0;
    for (int64_t i = 0; i < n2; i++) eid = fmax(eid, fabs((double)o.f32[i] - o2.f32[i]));
    printf("  released_vision vs per_query with identity W: max |diff| = %.3e (they coincide)\n", eid);
    CHECK(eid <= 1e-5 * vmax, "with identity W released_vision should equal per_query: %.3e", eid);
    mix_free(&w);
    tv_free(&q), tv_free(&k), tv_free(&v), tv_free(&o), tv_free(&o2);
    free(ref), free(got);
}

int main(void) {
    la_rng rng = la_test_rng("test_mhla");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);

    const la_feature F[5] = {LA_FEATURE_RELU_EPS, LA_FEATURE_RELU, LA_FEATURE_ELU1,
                             LA_FEATURE_RELU1, LA_FEATURE_IDENTITY};
    printf("1-D grids\n");
    /* N = 1, 63, 65, 1000 with D = 1, 16, 63, 64, 128 and Dv != D */
    const struct { int64_t N, g, D, Dv; } one[] = {
        {1, 1, 16, 8},   {63, 4, 1, 3},    {65, 8, 16, 24}, {63, 63, 63, 17},
        {65, 5, 64, 32}, {1000, 16, 128, 64}, {1000, 7, 64, 96}, {64, 4, 16, 16},
    };
    for (size_t i = 0; i < sizeof one / sizeof one[0]; i++)
        for (int norm = 0; norm < 3; norm++) {
            if (norm == 2 && one[i].N % one[i].g) continue;
            nc_case c = {.B = 2, .H = 3, .D = one[i].D, .Dv = one[i].Dv, .nd = 1,
                         .grid = {one[i].N}, .blocks = {one[i].g}, .per_head = (int)(i & 1),
                         .f = F[(i + norm) % 5], .norm = norm, .scale = norm == 1 ? 0.125f : 1.0f,
                         .layout = (int)((i + norm) % 2), .dt = LA_F32,
                         .pairwise = one[i].N <= 65};
            if (c.f == LA_FEATURE_IDENTITY && norm != 1) c.f = LA_FEATURE_RELU1; /* keep den > 0 */
            if (c.f == LA_FEATURE_RELU && norm == 0) c.f = LA_FEATURE_RELU_EPS;
            if (one[i].N == 1000) c.B = 1, c.H = 2;
            run_case(&rng, &c, ctx);
        }

    printf("2-D and 3-D grids (uneven blocks included)\n");
    const struct { int nd; int64_t grid[3], blocks[3]; } gr[] = {
        {2, {7, 9}, {2, 3}},     {2, {16, 16}, {4, 4}},   {2, {9, 7}, {9, 1}},
        {2, {5, 13}, {5, 13}},   {3, {6, 10, 10}, {3, 5, 2}}, {3, {4, 6, 6}, {2, 3, 2}},
        {3, {5, 7, 3}, {2, 3, 3}}, {3, {21, 6, 5}, {3, 2, 1}},
    };
    for (size_t i = 0; i < sizeof gr / sizeof gr[0]; i++)
        for (int norm = 0; norm < 3; norm++) {
            int eq = 1;
            for (int a = 0; a < gr[i].nd; a++) eq &= gr[i].grid[a] % gr[i].blocks[a] == 0;
            if (norm == 2 && !eq) continue;
            nc_case c = {.B = 2, .H = 2, .D = i & 1 ? 16 : 63, .Dv = i & 1 ? 24 : 32, .nd = gr[i].nd,
                         .per_head = (int)((i + norm) & 1), .f = F[(i + 2 * norm) % 4],
                         .norm = norm, .scale = 1.0f, .layout = (int)(i % 2), .dt = LA_F32,
                         .pairwise = 1};
            if (c.f == LA_FEATURE_RELU && norm == 0) c.f = LA_FEATURE_RELU_EPS;
            memcpy(c.grid, gr[i].grid, sizeof c.grid);
            memcpy(c.blocks, gr[i].blocks, sizeof c.blocks);
            run_case(&rng, &c, ctx);
        }

    printf("f64 and bf16 views\n");
    {
        nc_case c = {.B = 1, .H = 2, .D = 32, .Dv = 16, .nd = 2, .grid = {7, 9}, .blocks = {2, 3},
                     .f = LA_FEATURE_RELU_EPS, .norm = 0, .scale = 1.0f, .layout = 1, .dt = LA_F64};
        run_case(&rng, &c, ctx);
        c.dt = LA_BF16;
        c.layout = 0;
        run_case(&rng, &c, ctx);
        c.norm = 2;
        c.grid[0] = 8, c.blocks[0] = 4, c.grid[1] = 9, c.blocks[1] = 3;
        run_case(&rng, &c, ctx);
    }

    /* The AVX-512 path (f32 q,k,v with unit-stride rows, relu family or
     * identity): tiles of 64 tokens, 6 rows × 64 columns per kernel call, so
     * blocks of 65/127/129 tokens (token tails), D and Dv of 1, 63, 65, 127
     * (row and column tails), streaming stores on an aligned out, a bf16 out,
     * rows off 64-byte alignment. (elu1, bf16 and f64 inputs above take the
     * GEMM path.) */
    printf("fast-kernel tails\n");
    {
        const struct { int64_t N, g, D, Dv; la_feature f; int norm, layout, mode; } fk[] = {
            {130, 2, 65, 127, LA_FEATURE_RELU_EPS, 0, 1, 0},  /* blocks of 65    */
            {257, 2, 127, 65, LA_FEATURE_RELU, 1, 0, 1},      /* 129 + 128       */
            {200, 3, 1, 1, LA_FEATURE_RELU1, 0, 0, 3},        /* 67 + 66 + 67    */
            {200, 3, 1, 1, LA_FEATURE_IDENTITY, 1, 1, 0},
            {195, 3, 63, 63, LA_FEATURE_RELU_EPS, 2, 0, 2},   /* released_vision */
            {384, 3, 64, 64, LA_FEATURE_RELU_EPS, 0, 0, 1},   /* exact tiles     */
            {384, 3, 64, 64, LA_FEATURE_RELU1, 2, 0, 3},
            {300, 4, 16, 80, LA_FEATURE_IDENTITY, 1, 0, 1},
        };
        for (size_t i = 0; i < sizeof fk / sizeof fk[0]; i++) {
            nc_case c = {.B = 2, .H = 3, .D = fk[i].D, .Dv = fk[i].Dv, .nd = 1,
                         .grid = {fk[i].N}, .blocks = {fk[i].g}, .per_head = (int)(i & 1),
                         .f = fk[i].f, .norm = fk[i].norm, .scale = i & 2 ? 0.3f : 1.0f,
                         .layout = fk[i].layout, .dt = LA_F32, .buf_mode = fk[i].mode};
            run_case(&rng, &c, ctx);
        }
        /* 2-D and 3-D blocks larger than a tile (rows gathered by index) */
        nc_case c = {.B = 1, .H = 2, .D = 64, .Dv = 64, .nd = 2, .grid = {20, 20},
                     .blocks = {2, 3}, .f = LA_FEATURE_RELU_EPS, .norm = 0, .scale = 1.0f,
                     .layout = 0, .dt = LA_F32, .buf_mode = 1, .per_head = 1};
        run_case(&rng, &c, ctx);
        c.layout = 1, c.norm = 1, c.buf_mode = 0;
        run_case(&rng, &c, ctx);
        nc_case c3 = {.B = 2, .H = 2, .D = 33, .Dv = 70, .nd = 3, .grid = {3, 11, 10},
                      .blocks = {1, 2, 1}, .f = LA_FEATURE_RELU, .norm = 1, .scale = 0.5f,
                      .layout = 0, .dt = LA_F32, .buf_mode = 3};
        run_case(&rng, &c3, ctx);
        c3.norm = 2, c3.grid[1] = 12, c3.f = LA_FEATURE_RELU1, c3.buf_mode = 2;
        run_case(&rng, &c3, ctx);
    }

    /* B·H = 3: whole-head tasks with 1 and 3 threads, phase-by-phase
     * scheduling (blocks and column tiles) with 2 */
    printf("threads 1, 2, 3 (both GEMM-path schedules, AVX-512 head groups)\n");
    for (int th = 1; th <= 3; th++) {
        la_context_set_threads(ctx, th);
        nc_case c = {.B = 1, .H = 3, .D = 16, .Dv = 8, .nd = 3, .grid = {6, 10, 10},
                     .blocks = {3, 5, 2}, .f = LA_FEATURE_ELU1, .norm = 0, .scale = 1.0f,
                     .per_head = 1, .dt = LA_F32};
        run_case(&rng, &c, ctx);
        c.norm = 2, c.per_head = 0; /* 6x10x10 in 3x5x2 blocks: equal sizes */
        run_case(&rng, &c, ctx);
        /* AVX-512 path: tasks of all 3 heads (30 blocks), and of fewer heads
         * when blocks alone are too few for the threads (2 blocks) */
        c.f = LA_FEATURE_RELU_EPS, c.norm = 0, c.D = 20, c.Dv = 36;
        run_case(&rng, &c, ctx);
        nc_case c2 = {.B = 1, .H = 3, .D = 16, .Dv = 24, .nd = 1, .grid = {150}, .blocks = {2},
                      .f = LA_FEATURE_RELU1, .norm = th == 2 ? 2 : 0, .scale = 0.5f,
                      .per_head = 1, .dt = LA_F32, .buf_mode = th == 3 ? 1 : 0};
        run_case(&rng, &c2, ctx);
    }
    la_context_set_threads(ctx, 2);

    invariants(&rng, ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
