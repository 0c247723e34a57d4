/* Case table of causal linear attention (SPEC §3) on the 16-bit tensor-core
 * path (src/cuda/linear_causal_tc.cu: D = Dv = 128, 64, 32, bf16 or f16 rows), from the
 * former tests/cuda/test_cuda_causal.c: the CUDA result against the CPU path
 * on the same inputs (the CPU path has its float64-reference cases in
 * cases_cpu.c and tests/cpu/), for
 *   - the library's choice (variant "tc" of family "linear_causal": mma.sync
 *     chunk states, the wide scan), every case also against variant "walk"
 *     (the walking scan) on the device;
 *   - "tc" with a forced state chunk of L tokens (variants "chunk<L>"), also
 *     against "walk";
 *   - "walk" itself, and the portable path ("portable"; D = 63, Dv != D, f32
 *     by the dispatch);
 *   - a split sequence (state out of the first half into the second equals
 *     one pass; under the default and under "tc").
 * (The former test forced the pass-1 sub-chunk count too and compared with
 * the previous mma kernels; both were removed from src/: the cases keep
 * their shapes, "walk" stands in for the device-vs-device comparison.)
 *
 * Each case: inputs rounded to bf16 (the CPU sees the same values), device
 * outputs poisoned with 0xFF bytes (NaN) before the call, then compared in
 * full: rel = max|gpu - cpu| / max|cpu|
 *   out (bf16):            <= 1e-2 (f16: 2e-3, causal_f16)
 *   S_out, z_out (fp32):   <= 1e-4 (fp32 sums in a different order, on tensor
 *                          cores; phi(k) inexact in bf16 goes through hi + lo)
 * and no NaN left anywhere. The --small subset (for compute-sanitizer) is
 * the default path at N <= 65 and the small forced and split cases. */
#include "bo_staging.h"

/* rel of a (device values) against ref (n values); counts non-finite a. */
static double rel_of(const float *a, const float *ref, int64_t n, int64_t *nonfinite) {
    double md = 0, mr = 0;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i])) {
            bad++;
            continue;
        }
        double d = fabs((double)a[i] - ref[i]);
        if (d > md) md = d;
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    *nonfinite = bad;
    return md / (mr > 1e-30 ? mr : 1e-30);
}
static double worst_out = 0, worst_state = 0;
static void check_vals(const float *g, const float *c, int64_t n, const char *what, double tol,
                       bool is_state) {
    int64_t gbad = 0, cbad = 0;
    for (int64_t i = 0; i < n; i++) cbad += !isfinite(c[i]);
    double rel = rel_of(g, c, n, &gbad);
    CHECK(cbad == 0, "%s: CPU result has %lld non-finite values", what, (long long)cbad);
    CHECK(gbad == 0, "%s: GPU result has %lld non-finite values (unwritten?)", what, (long long)gbad);
    CHECK(rel <= tol, "%s: rel err %.3g > %.1g", what, rel, tol);
    if (is_state && rel > worst_state) worst_state = rel;
    if (!is_state && rel > worst_out) worst_out = rel;
    printf("  %-80s rel %.2e %s\n", what, rel, rel <= tol && gbad == 0 ? "ok" : "FAIL");
}
/* Device copy of t against its host (CPU) copy. */
static void compare(const tb *t, const char *what, double tol, bool is_state) {
    la_dev_synchronize();
    float *g = tb_read(t, true), *c = tb_read(t, false);
    check_vals(g, c, tb_numel(t), what, tol, is_state);
    free(g);
    free(c);
}

#define TOL_OUT 1e-2
#define TOL_STATE 1e-4

static const char *feat_name(la_feature f) { return la_feature_name(f); }

/* One causal call on CPU and GPU. path names the kernel the case forces (the
 * harness sets it on the context: "walk", "chunk<L>", "portable"; NULL =
 * the library's choice); vs_walk: also run the same inputs under variant
 * "walk" and compare device against device. */
static void t_causal(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, la_feature f,
                     int normalize, int64_t chunk, int state, la_dtype dt, int perm,
                     const char *path, int vs_walk, double in_scale) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv}, nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    tb q = tb_rand(4, nq, dt, perm, in_scale), k = tb_rand(4, nq, dt, perm, in_scale),
       v = tb_rand(4, nv, dt, perm, in_scale), o = tb_poison(4, nv, dt, perm);
    tb Si, zi, So, zo;
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.causal = 1;
    p.normalize = normalize;
    p.chunk = chunk;
    p.scale_q = 0.7f;
    if (normalize && f == LA_FEATURE_IDENTITY) p.feature = LA_FEATURE_RELU_EPS; /* den > 0 */
    if (state) {
        Si = tb_rand(4, nS, LA_F32, 0, 1.0);
        float *zv = malloc(sizeof(float) * (size_t)(B * H * D));
        la_fill_normal(&bo_rng, zv, B * H * D, 1.0);
        for (int64_t i = 0; i < B * H * D; i++) zv[i] = fabsf(zv[i]) * 5.f; /* den > 0 */
        tb_make(&zi, 3, nz, LA_F32, 0, zv);
        free(zv);
        So = tb_poison(4, nS, LA_F32, 0);
        zo = tb_poison(3, nz, LA_F32, 0);
    }
    CHECK_OK(la_linear_attention(&p, &q.host, &k.host, &v.host, &o.host,
                                 state ? &Si.host : NULL, state ? &zi.host : NULL,
                                 state ? &So.host : NULL, state ? &zo.host : NULL, bo_ctx()));
    CHECK_DEV(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, state ? &Si.dev : NULL,
                                 state ? &zi.dev : NULL, state ? &So.dev : NULL,
                                 state ? &zo.dev : NULL, bo_ctx()));
    la_dev_synchronize();
    char what[200];
    snprintf(what, sizeof what, "causal %s%s%s%s B%lld N%lld H%lld D%lld Dv%lld %s n%d C%lld s%d p%d x%g",
             path ? "[" : "", path ? path : "", path ? "] " : "", dtn(dt), (long long)B, (long long)N,
             (long long)H, (long long)D, (long long)Dv, feat_name(p.feature), normalize,
             (long long)chunk, state, perm, in_scale);
    compare(&o, what, dt == LA_BF16 ? TOL_OUT : dt == LA_F16 ? tol_of(LA_F16, N) : 1e-4, false);
    if (state) {
        char w2[240];
        snprintf(w2, sizeof w2, "%s S_out", what);
        compare(&So, w2, TOL_STATE, true);
        snprintf(w2, sizeof w2, "%s z_out", what);
        compare(&zo, w2, TOL_STATE, true);
    }
    if (vs_walk && bo_use_variant("linear_causal", "walk")) { /* the same inputs on walk (device vs device) */
        tb o2 = tb_poison(4, nv, dt, perm), So2, zo2;
        if (state) {
            So2 = tb_poison(4, nS, LA_F32, 0);
            zo2 = tb_poison(3, nz, LA_F32, 0);
        }
        const int ran = CHECK_DEV(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o2.dev,
                                                      state ? &Si.dev : NULL, state ? &zi.dev : NULL,
                                                      state ? &So2.dev : NULL,
                                                      state ? &zo2.dev : NULL, bo_ctx()));
        la_dev_synchronize();
        bo_use_variant("linear_causal", NULL);
        const tb *gv[3] = {&o, &So, &zo}, *dv[3] = {&o2, &So2, &zo2};
        const char *nm[3] = {"out", "S_out", "z_out"};
        for (int i = 0; ran && i < (state ? 3 : 1); i++) {
            char w2[240];
            snprintf(w2, sizeof w2, "%s %s vs walk", what, nm[i]);
            float *a = tb_read(gv[i], true), *b = tb_read(dv[i], true);
            check_vals(a, b, tb_numel(dv[i]), w2, i ? TOL_STATE : TOL_OUT, i != 0);
            free(a);
            free(b);
        }
        tb_free(&o2);
        if (state) { tb_free(&So2); tb_free(&zo2); }
    }
    if (state) { tb_free(&Si); tb_free(&zi); tb_free(&So); tb_free(&zo); }
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o);
}

/* A view of tokens [t0, t0+n) of a [B,N,H,D] device view. */
static la_tensor token_range(const la_tensor *t, int64_t t0, int64_t n) {
    la_tensor r = *t;
    r.data = (char *)t->data + t0 * t->nb[1] * (int64_t)la_dtype_size(t->dtype);
    r.ne[1] = n;
    return r;
}

/* Split sequence on the GPU: tokens [0, N1) with the state out, then [N1, N)
 * from that state, against one pass over [0, N) (state in and out in both). */
static void t_split(int64_t N, int64_t N1, la_feature f, int normalize, int perm) {
    /* (under the case's variant: the library's choice or forced) */
    const int64_t B = 1, H = 2, D = 128;
    int64_t nq[4] = {B, N, H, D}, nS[4] = {B, H, D, D}, nz[3] = {B, H, D};
    tb q = tb_rand(4, nq, LA_BF16, perm, 1.0), k = tb_rand(4, nq, LA_BF16, perm, 1.0),
       v = tb_rand(4, nq, LA_BF16, perm, 1.0);
    tb o1 = tb_poison(4, nq, LA_BF16, perm), o2 = tb_poison(4, nq, LA_BF16, perm);
    tb Si = tb_rand(4, nS, LA_F32, 0, 1.0);
    float *zv = malloc(sizeof(float) * (size_t)(B * H * D));
    la_fill_normal(&bo_rng, zv, B * H * D, 1.0);
    for (int64_t i = 0; i < B * H * D; i++) zv[i] = fabsf(zv[i]) * 5.f;
    tb zi;
    tb_make(&zi, 3, nz, LA_F32, 0, zv);
    free(zv);
    tb S1 = tb_poison(4, nS, LA_F32, 0), z1 = tb_poison(3, nz, LA_F32, 0);
    tb S2 = tb_poison(4, nS, LA_F32, 0), z2 = tb_poison(3, nz, LA_F32, 0);
    la_linear_params p;
    la_linear_params_init(&p);
    p.feature = f;
    p.causal = 1;
    p.normalize = normalize;
    /* one pass */
    CHECK_DEV(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o1.dev, &Si.dev, &zi.dev, &S1.dev,
                                 &z1.dev, bo_ctx()));
    /* two halves; the state passes through S2/z2 (in and out alias in the second call) */
    la_tensor qa = token_range(&q.dev, 0, N1), ka = token_range(&k.dev, 0, N1),
              va = token_range(&v.dev, 0, N1), oa = token_range(&o2.dev, 0, N1);
    la_tensor qb = token_range(&q.dev, N1, N - N1), kb = token_range(&k.dev, N1, N - N1),
              vb = token_range(&v.dev, N1, N - N1), ob = token_range(&o2.dev, N1, N - N1);
    CHECK_DEV(la_linear_attention(&p, &qa, &ka, &va, &oa, &Si.dev, &zi.dev, &S2.dev, &z2.dev, bo_ctx()));
    CHECK_DEV(la_linear_attention(&p, &qb, &kb, &vb, &ob, &S2.dev, &z2.dev, &S2.dev, &z2.dev, bo_ctx()));
    la_dev_synchronize();
    char what[200];
    snprintf(what, sizeof what, "split %lld = %lld + %lld %s n%d p%d: out", (long long)N,
             (long long)N1, (long long)(N - N1), feat_name(f), normalize, perm);
    float *a = tb_read(&o2, true), *b = tb_read(&o1, true);
    check_vals(a, b, tb_numel(&o1), what, TOL_OUT, false);
    free(a); free(b);
    snprintf(what, sizeof what, "split %lld = %lld + %lld %s n%d p%d: S_out", (long long)N,
             (long long)N1, (long long)(N - N1), feat_name(f), normalize, perm);
    a = tb_read(&S2, true);
    b = tb_read(&S1, true);
    check_vals(a, b, tb_numel(&S1), what, TOL_STATE, true);
    free(a); free(b);
    snprintf(what, sizeof what, "split %lld = %lld + %lld %s n%d p%d: z_out", (long long)N,
             (long long)N1, (long long)(N - N1), feat_name(f), normalize, perm);
    a = tb_read(&z2, true);
    b = tb_read(&z1, true);
    check_vals(a, b, tb_numel(&z1), what, TOL_STATE, true);
    free(a); free(b);
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o1); tb_free(&o2);
    tb_free(&Si); tb_free(&zi); tb_free(&S1); tb_free(&z1); tb_free(&S2); tb_free(&z2);
}


typedef struct causal_args {
    int64_t B, N, H, D, Dv; la_feature f; int normalize; int64_t chunk; int state; la_dtype dt;
    int perm; const char *path; int vs_walk; double in_scale;
} causal_args;
typedef struct split_args { int64_t N, N1; la_feature f; int normalize, perm; } split_args;

static void run_causal(const void *p) {
    const causal_args *a = p;
    t_causal(a->B, a->N, a->H, a->D, a->Dv, a->f, a->normalize, a->chunk, a->state, a->dt, a->perm,
             a->path, a->vs_walk, a->in_scale);
}
static void run_split(const void *p) {
    const split_args *a = p;
    t_split(a->N, a->N1, a->f, a->normalize, a->perm);
}

/* path: the variant the case forces ("walk", "portable", "chunk<L>": family
 * "linear_causal"); "tc" as a path means the library's choice, compared
 * with walk (as is every chunk<L> case) */
static void add_causal_x(bo_list *L, int small, int64_t B, int64_t N, int64_t H, int64_t D,
                         int64_t Dv, la_feature f, int normalize, int64_t chunk, int state,
                         la_dtype dt, int perm, const char *path, double in_scale) {
    const int dflt = path && !strcmp(path, "tc");
    const causal_args a = {B, N, H, D, Dv, f, normalize, chunk, state, dt, perm, path,
                           dflt || (path && !strncmp(path, "chunk", 5)), in_scale};
    char name[BO_NAME_MAX], xs[32] = "";
    if (in_scale != 1.0) snprintf(xs, sizeof xs, " x%g", in_scale);
    snprintf(name, sizeof name, "causal %s B%lld N%lld H%lld D%lld Dv%lld %s n%d C%lld s%d p%d%s%s",
             dtn(dt), (long long)B, (long long)N, (long long)H, (long long)D, (long long)Dv,
             la_feature_name(f), normalize, (long long)chunk, state, perm, xs,
             a.vs_walk ? " (and vs walk)" : "");
    const char *v = dflt ? NULL : path;
    const bo_opts o = {"linear", BO_CUDA, small, v ? "linear_causal" : NULL, v, NULL};
    bo_add(L, &o, run_causal, &a, sizeof a, name);
}
static void add_causal(bo_list *L, int small, int64_t B, int64_t N, int64_t H, int64_t D,
                       int64_t Dv, la_feature f, int normalize, int64_t chunk, int state,
                       la_dtype dt, int perm, const char *path) {
    add_causal_x(L, small, B, N, H, D, Dv, f, normalize, chunk, state, dt, perm, path, 1.0);
}

/* fp16 under the library's choice (tc while lct_f16_tc in
 * linear_causal_tc.cu is true, the portable engine when it is set false;
 * both must pass): odd N, D = Dv in {128, 64, 32}, the five feature maps
 * with and without normalization, the state in and out (relu1 / elu1 /
 * relu_eps: the hi/lo split), permuted views; inputs of scale 10
 * (normalized: the outputs stay inside fp16 while the denominators' sums
 * and, at N = 256K, the state pass 65504) at N = 1000 and 65 in --small,
 * 256K in the long cases beside N = 32K and 128K. */
static void causal_f16(bo_list *L) {
    const la_dtype dt = LA_F16;
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    const int64_t Ns[4] = {1, 63, 65, 1000}, Ds[3] = {128, 64, 32};
    for (int di = 0; di < 3; di++)
        for (int ni = 0; ni < 4; ni++) {
            const int64_t D = Ds[di], N = Ns[ni], B = ni == 2 ? 2 : 1, H = ni == 1 ? 3 : 2;
            const int f = (ni + 2 * di) % 5;
            /* N = 1, identity, no normalize: ill-conditioned (cases_linear's tc_paths): relu */
            add_causal(L, 1, B, N, H, D, D, (ni == 0 && f == 0) ? LA_FEATURE_RELU : feats[f], f != 0, 64,
                       0, dt, (ni + di) & 1, NULL);
            add_causal(L, 1, B, N, H, D, D, feats[(f + 3) % 5], 1, 64, 1, dt, (ni + di + 1) & 1, NULL);
        }
    add_causal(L, 0, 1, 32768, 3, 128, 128, LA_FEATURE_ELU1, 1, 64, 0, dt, 1, NULL);
    add_causal(L, 0, 1, 32768, 2, 64, 64, LA_FEATURE_RELU, 0, 64, 1, dt, 0, NULL);
    add_causal(L, 0, 1, 131072, 2, 32, 32, LA_FEATURE_RELU_EPS, 1, 64, 0, dt, 1, NULL);
    add_causal_x(L, 1, 1, 1000, 2, 128, 128, LA_FEATURE_ELU1, 1, 64, 0, dt, 1, NULL, 10.0);
    add_causal_x(L, 1, 2, 65, 2, 32, 32, LA_FEATURE_RELU, 1, 64, 1, dt, 0, NULL, 10.0);
    add_causal_x(L, 0, 1, 262144, 2, 64, 64, LA_FEATURE_RELU, 1, 64, 0, dt, 0, NULL, 10.0);
}
/* tc with a forced state chunk of Lc tokens (0: its own choice); ks, the
 * former pass-1 sub-chunk count, is no longer a choice (kept in the table
 * as written) */
static void add_v3(bo_list *L, int small, int64_t B, int64_t N, int64_t H, la_feature f,
                   int normalize, int state, int perm, int Lc, int ks) {
    static char names[32][24];
    static int nnames;
    char v[24];
    (void)ks;
    if (Lc) snprintf(v, sizeof v, "chunk%d", Lc);
    else snprintf(v, sizeof v, "tc");
    const char *vp = NULL;
    for (int i = 0; i < nnames; i++)
        if (!strcmp(names[i], v)) vp = names[i];
    if (!vp && nnames < 32) vp = strcpy(names[nnames++], v);
    add_causal(L, small, B, N, H, 128, 128, f, normalize, 64, state, LA_BF16, perm, vp);
}
static void add_split(bo_list *L, int small, const char *variant, int64_t N, int64_t N1,
                      la_feature f, int normalize, int perm) {
    const split_args a = {N, N1, f, normalize, perm};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "split %lld = %lld + %lld %s n%d p%d", (long long)N, (long long)N1,
             (long long)(N - N1), la_feature_name(f), normalize, perm);
    const bo_opts o = {"linear", BO_CUDA, small, variant ? "linear_causal" : NULL, variant, NULL};
    bo_add(L, &o, run_split, &a, sizeof a, name);
}

/* The smallest call through the family's kernel choice (causal, bf16, D = 128). */
static la_status probe(la_context *ctx) {
    int64_t ne[4] = {1, 16, 1, 128};
    tb q, o;
    tb_make(&q, 4, ne, LA_BF16, 0, NULL);
    tb_make(&o, 4, ne, LA_BF16, 0, NULL);
    la_dev_memset(q.dev.data, 0, q.bytes);
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = 1;
    p.normalize = 0;
    const la_status s =
        la_linear_attention(&p, &q.dev, &q.dev, &q.dev, &o.dev, NULL, NULL, NULL, NULL, ctx);
    la_dev_synchronize();
    tb_free(&q);
    tb_free(&o);
    return s;
}

/* ---- causal MHLA: the bf16 mixing GEMM (family "mhla_causal_mix") ---------
 * The mixing H_i = Σ_{b<i} W[i,b] S_b of variant mma_bf16s (the default of
 * family "mhla_causal" for bf16; src/cuda/mhla_causal_tc.cu), forced: "v2"
 * (mct_mix2_kernel, the default while mct_mix_v2), "wgmma" (mct_mixw_kernel,
 * sm_90 only: skipped elsewhere) and "v1" (mct_mix_bf16_kernel); the CUDA
 * output against the CPU path on the same bf16 inputs (out rel <= 1e-2, the
 * output poisoned first). W: random [WM, WM] or [H, WM, WM] with WM = M + 1
 * (a spare row and column, and the upper triangle, must be ignored). Names
 * "mhla-causal-mix <impl> ...". */
typedef struct mhla_mix_args {
    int64_t B, N, H, D; la_mhla_normalize norm; int per_head, perm, feat;
} mhla_mix_args;

static void t_mhla_mix(const mhla_mix_args *a) {
    int64_t nq[4] = {a->B, a->N, a->H, a->D}, M = (a->N + 63) / 64 + 1;
    tb q = tb_rand(4, nq, LA_BF16, a->perm, 1.0), k = tb_rand(4, nq, LA_BF16, a->perm, 1.0),
       v = tb_rand(4, nq, LA_BF16, a->perm, 1.0), o = tb_poison(4, nq, LA_BF16, a->perm), W;
    int64_t nw[3] = {a->H, M, M}, n = (a->per_head ? a->H : 1) * M * M;
    float *w = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) w[i] = (float)(0.05 + la_rng_uniform(&bo_rng));
    tb_make(&W, a->per_head ? 3 : 2, a->per_head ? nw : nw + 1, LA_F32, 0, w);
    free(w);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = 64;
    p.normalize = a->norm;
    p.feature = (la_feature)a->feat;
    CHECK_OK(la_mhla_causal_forward(&p, &q.host, &k.host, &v.host, &W.host, &o.host, bo_ctx()));
    CHECK_DEV(la_mhla_causal_forward(&p, &q.dev, &k.dev, &v.dev, &W.dev, &o.dev, bo_ctx()));
    char what[160];
    snprintf(what, sizeof what, "mhla-causal-mix B%lld N%lld H%lld D%lld norm%d ph%d p%d %s", (long long)a->B,
             (long long)a->N, (long long)a->H, (long long)a->D, (int)a->norm, a->per_head, a->perm,
             la_feature_name(p.feature));
    tb_compare(&o, what, tol_of(LA_BF16, a->N));
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&W);
}
static void run_mhla_mix(const void *p) { t_mhla_mix(p); }

/* the 16-token bf16 problem, chunk 64, a 1×1 W (the default takes mma_bf16s) */

static void add_mhla_mix(bo_list *L, int small, const char *impl, int64_t B, int64_t N, int64_t H,
                         int64_t D, la_mhla_normalize norm, int per_head, int perm, la_feature feat) {
    const mhla_mix_args a = {B, N, H, D, norm, per_head, perm, (int)feat};
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "mhla-causal-mix %s bf16 B%lld N%lld H%lld D%lld norm%d ph%d p%d %s", impl,
             (long long)B, (long long)N, (long long)H, (long long)D, (int)norm, per_head, perm,
             la_feature_name(feat));
    const bo_opts o = {"mhla_causal", BO_CUDA, small, "mhla_causal_mix", impl, NULL};
    bo_add(L, &o, run_mhla_mix, &a, sizeof a, name);
}

/* v2 and wgmma: odd N (one block: no k step; a partial second; many with a
 * tail), D 128 / 64 / 32, shared and per-head W, none and per_query, the
 * feature maps, permuted views; M = 129 (one CTA holds both row tiles),
 * M = 313 (three row tiles: a pair and the middle one alone); M = 512 and
 * 2048 blocks (N = 32K, 128K: the shapes) in the long cases; v1 on
 * a few of the same shapes. */
static void mhla_mix_rows(bo_list *L) {
    bo_add_probe(L, "mhla_causal_mix", bo_probe_mhla_causal); /* its variants run inside that call */
    const la_mhla_normalize NO = LA_MHLA_NORM_NONE, PQ = LA_MHLA_NORM_PER_QUERY;
    const int64_t Ns[5] = {1, 63, 65, 1000, 4097}, Ds[3] = {128, 64, 32};
    /* none: no identity at N = 1 (ill-conditioned in bf16); per_query: positive features */
    const la_feature fno[4] = {LA_FEATURE_RELU, LA_FEATURE_ELU1, LA_FEATURE_IDENTITY, LA_FEATURE_RELU_EPS};
    const la_feature fpq[3] = {LA_FEATURE_RELU_EPS, LA_FEATURE_ELU1, LA_FEATURE_RELU1};
    static const char *impls[2] = {"v2", "wgmma"};
    for (int ki = 0; ki < 2; ki++) {
        for (int di = 0; di < 3; di++)
            for (int ni = 0; ni < 5; ni++) {
                const int64_t D = Ds[di], N = Ns[ni], B = ni == 2 ? 2 : 1, H = ni == 4 ? 1 : 2;
                add_mhla_mix(L, 1, impls[ki], B, N, H, D, NO, ni & 1, (ni + di) & 1,
                             ni == 0 ? LA_FEATURE_RELU : fno[(ni + di) % 4]);
                if (ki == 0)
                    add_mhla_mix(L, 1, impls[ki], B, N, H, D, PQ, (ni + 1) & 1, ni & 1, fpq[(ni + di) % 3]);
            }
        add_mhla_mix(L, 1, impls[ki], 1, 8200, 1, 32, PQ, 1, 1, LA_FEATURE_ELU1);
        add_mhla_mix(L, 1, impls[ki], 1, 20000, 1, 32, NO, 1, 0, LA_FEATURE_RELU);
        add_mhla_mix(L, 1, impls[ki], 1, 8200, 2, 64, NO, 0, 1, LA_FEATURE_RELU_EPS);
        add_mhla_mix(L, 0, impls[ki], 1, 32768, 1, 128, PQ, 0, 0, LA_FEATURE_RELU_EPS);
        add_mhla_mix(L, 0, impls[ki], 1, 131072, 1, 32, NO, 1, 1, LA_FEATURE_RELU);
    }
    add_mhla_mix(L, 1, "v1", 1, 1000, 2, 128, NO, 1, 1, LA_FEATURE_RELU);
    add_mhla_mix(L, 1, "v1", 1, 8200, 1, 32, PQ, 0, 0, LA_FEATURE_ELU1);
    add_mhla_mix(L, 1, "v1", 2, 65, 2, 64, PQ, 1, 0, LA_FEATURE_RELU_EPS);
}

void cases_causal(bo_list *L) {
    mhla_mix_rows(L);
    bo_add_probe(L, "linear_causal", probe);
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    const int64_t chunks[4] = {64, 7, 100, 256};
    const la_dtype bf = LA_BF16;

    /* every feature map x normalize x state, odd lengths (tile and chunk tails),
     * B = 2 and 1..3 heads, chunk parameters 64 / 7 / 100 / 256, permuted views */
    const int64_t Ns[5] = {1, 63, 65, 1000, 4096};
    for (int pi = 0; pi < 2; pi++) {
        /* the walking scan forced, then the default (each case also vs walk) */
        const char *pth = pi ? "tc" : "walk";
        int cnt = 0;
        for (int ni = 0; ni < 5; ni++) {
            const int small = pi == 1 && Ns[ni] <= 65;
            for (int f = 0; f < 5; f++)
                for (int nm = 0; nm < 2; nm++)
                    for (int s = 0; s < 2; s++, cnt++) {
                        la_feature ff = feats[f];
                        /* N = 1, identity, no normalization: o = (q~.k) v is ill-conditioned
                         * under the bf16 rounding of the products (cases_linear.c, tc_paths) */
                        if (Ns[ni] == 1 && ff == LA_FEATURE_IDENTITY && !nm) ff = LA_FEATURE_RELU;
                        add_causal(L, small, ni == 3 ? 2 : 1, Ns[ni], 1 + cnt % 3, 128, 128, ff, nm,
                                   chunks[cnt % 4], s, bf, cnt & 1, pth);
                    }
        }
        /* long sequences */
        add_causal(L, 0, 1, 32768, 2, 128, 128, LA_FEATURE_RELU, 0, 64, 1, bf, 0, pth);
        add_causal(L, 0, 1, 32768, 2, 128, 128, LA_FEATURE_RELU, 1, 64, 0, bf, 1, pth);
        add_causal(L, 0, 1, 32768, 2, 128, 128, LA_FEATURE_ELU1, 1, 64, 1, bf, 1, pth);
        if (!pi) { /* the default has its own long cases below */
            add_causal(L, 0, 1, 32768, 2, 128, 128, LA_FEATURE_IDENTITY, 0, 100, 0, bf, 0, pth);
            add_causal(L, 0, 1, 32768, 3, 128, 128, LA_FEATURE_RELU1, 0, 64, 1, bf, 0, pth);
        }
    }
    /* head dims 64 and 32 on the tensor-core path: "walk" forces it (a shape
     * it stops taking fails), "tc" is the default and is compared with the
     * walk too; odd N, every feature map, state in/out, permuted views */
    {
        const int64_t Ds[2] = {64, 32};
        int cnt = 0;
        for (int di = 0; di < 2; di++)
            for (int ni = 0; ni < 4; ni++)
                for (int f = 0; f < 5; f++, cnt++) {
                    la_feature ff = feats[f];
                    const int nm = (cnt / 2) & 1;
                    if (Ns[ni] == 1 && ff == LA_FEATURE_IDENTITY && !nm) ff = LA_FEATURE_RELU;
                    add_causal(L, Ns[ni] <= 65, ni == 3 ? 2 : 1, Ns[ni], 1 + cnt % 3, Ds[di], Ds[di], ff,
                               nm, chunks[cnt % 4], cnt & 1, bf, (cnt / 3) & 1, (cnt & 2) ? "tc" : "walk");
                }
        add_causal(L, 0, 1, 32768, 3, 64, 64, LA_FEATURE_ELU1, 1, 64, 1, bf, 1, "tc");
        add_causal(L, 0, 1, 32768, 6, 32, 32, LA_FEATURE_RELU, 1, 64, 0, bf, 0, "tc");
        add_causal(L, 0, 1, 4095, 2, 32, 32, LA_FEATURE_RELU1, 0, 64, 1, bf, 1, "chunk256");
        add_causal(L, 0, 1, 20001, 1, 64, 64, LA_FEATURE_RELU, 1, 64, 1, bf, 0, "tc"); /* nd > 255 */
    }
    /* forced state chunks: the wide scan over 1..32 groups, the benchmark
     * shape (H = 12: L = 1024 at 32K), and the walk fallback (np > 255) */
    add_v3(L, 1, 1, 200, 2, LA_FEATURE_RELU1, 1, 1, 0, 128, 2);
    add_v3(L, 1, 2, 333, 2, LA_FEATURE_ELU1, 1, 1, 1, 192, 3);
    add_v3(L, 0, 1, 1000, 3, LA_FEATURE_RELU_EPS, 0, 0, 0, 128, 2);
    add_v3(L, 0, 1, 1111, 1, LA_FEATURE_RELU, 1, 1, 1, 64, 1); /* 18 chunks, 3 groups */
    add_v3(L, 0, 1, 4095, 2, LA_FEATURE_IDENTITY, 0, 1, 0, 256, 4);
    add_v3(L, 0, 1, 4096, 12, LA_FEATURE_RELU, 0, 0, 0, 0, 0); /* bench shape at 4K */
    add_v3(L, 0, 1, 16000, 1, LA_FEATURE_RELU, 0, 0, 0, 64, 1);  /* np 249: 32 groups of 8 columns */
    add_v3(L, 0, 1, 20001, 1, LA_FEATURE_RELU, 1, 1, 0, 64, 1);  /* nd 313 > 255: the walk */
    add_v3(L, 0, 1, 32768, 2, LA_FEATURE_RELU, 0, 1, 1, 1024, 2);
    add_v3(L, 0, 1, 32767, 2, LA_FEATURE_ELU1, 1, 1, 0, 4032, 3); /* L = 63 tiles */
    add_v3(L, 0, 1, 32768, 12, LA_FEATURE_RELU, 0, 0, 0, 0, 0);  /* bench shape at 32K: L = 1024 */
    add_v3(L, 0, 1, 32768, 12, LA_FEATURE_RELU, 1, 1, 1, 0, 3);  /* ks = 2 there */
    /* split sequences (GPU vs GPU), the library's choice */
    add_split(L, 0, NULL, 1000, 333, LA_FEATURE_RELU1, 1, 0);
    add_split(L, 0, NULL, 1000, 64, LA_FEATURE_RELU, 0, 1);
    add_split(L, 0, NULL, 130, 1, LA_FEATURE_ELU1, 1, 1);
    add_split(L, 0, NULL, 20000, 12345, LA_FEATURE_RELU_EPS, 1, 0);
    /* split sequences on tc forced (S_in and S_out alias in the second half) */
    add_split(L, 0, "tc", 1000, 333, LA_FEATURE_RELU1, 1, 0);
    add_split(L, 1, "tc", 130, 1, LA_FEATURE_ELU1, 1, 1);
    add_split(L, 0, "tc", 20000, 12345, LA_FEATURE_RELU, 0, 1);
    /* fallbacks (the portable path) */
    add_causal(L, 0, 1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 1, 64, 1, bf, 1, "portable");
    add_causal(L, 0, 1, 65, 2, 128, 128, LA_FEATURE_ELU1, 0, 64, 1, bf, 0, "portable");
    add_causal(L, 0, 1, 1000, 2, 64, 64, LA_FEATURE_RELU, 1, 64, 1, bf, 0, NULL);   /* D = 64 (tc) */
    add_causal(L, 0, 1, 300, 2, 128, 64, LA_FEATURE_RELU, 0, 64, 0, bf, 1, NULL);   /* Dv = 64  */
    add_causal(L, 0, 1, 1000, 2, 128, 128, LA_FEATURE_ELU1, 1, 64, 1, LA_F32, 0, NULL); /* f32 */
    /* f16: the default (tc while lct_f16_tc in linear_causal_tc.cu is true) and forced portable;
     * causal_f16 has the rest */
    add_causal(L, 0, 1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 1, 64, 1, LA_F16, 1, NULL);
    add_causal(L, 0, 1, 65, 2, 64, 32, LA_FEATURE_ELU1, 0, 64, 0, LA_F16, 0, NULL);
    add_causal(L, 0, 2, 63, 2, 128, 128, LA_FEATURE_RELU, 1, 64, 1, LA_F16, 0, "portable");
    causal_f16(L);
}
