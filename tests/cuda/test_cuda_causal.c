/* GPU tests of causal linear attention (SPEC §3) on the bf16 tensor-core path
 * (src/cuda/linear_causal_tc.cu: D = Dv = 128, bf16 rows): the CUDA result
 * against the CPU path on the same inputs (the CPU path has its float64-
 * reference tests in tests/cpu/), the v3 path (the default; LA_CUDA_CAUSAL_PATH=v3:
 * wide scan, pass 1 on sub-chunks; every case also against the previous mma
 * path (LA_CUDA_CAUSAL_PATH=mma) on the device, forced state chunks /
 * sub-chunk counts through LA_CUDA_CAUSAL_L / _KS), the mma path itself,
 * the fallbacks (LA_CUDA_CAUSAL_PATH=old,
 * D ≠ 128, f32) and a split sequence (state out of the first half into the
 * second equals one pass).
 *
 * Each case: inputs drawn with the printed seed, rounded to bf16 (the CPU sees
 * the same values), device outputs poisoned with 0xFF bytes (NaN) before the
 * call, then compared in full: rel = max|gpu − cpu| / max|cpu|
 *   out (bf16):            ≤ 1e-2
 *   S_out, z_out (fp32):   ≤ 1e-4 (fp32 sums in a different order, on tensor
 *                          cores; φ(k) inexact in bf16 goes through hi + lo)
 * and no NaN left anywhere. Runs on the GPU machine only; without a device it
 * skips. LA_CUDA_SMALL=1: only N ≤ 1000; LA_CUDA_SMALL=2: N ≤ 65 in the
 * main loop (for compute-sanitizer).
 * LA_CUDA_CAUSAL_VERBOSE=1 prints the path of each call on stderr. */
#include "cuda_test_util.h"

static int small_only; /* LA_CUDA_SMALL: 1 → N ≤ 1000, 2 → N ≤ 65 (sanitizers), 3 → the
                        * same on v3 only (its main loop, small forced and split cases) */

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

/* One causal call on CPU and GPU. path: NULL = default (new where it
 * applies), "old" = the portable path. */
static void t_causal(int64_t B, int64_t N, int64_t H, int64_t D, int64_t Dv, la_feature f,
                     int normalize, int64_t chunk, int state, la_dtype dt, int perm,
                     const char *path) {
    int64_t nq[4] = {B, N, H, D}, nv[4] = {B, N, H, Dv}, nS[4] = {B, H, D, Dv}, nz[3] = {B, H, D};
    tb q = tb_rand(4, nq, dt, perm, 1.0), k = tb_rand(4, nq, dt, perm, 1.0),
       v = tb_rand(4, nv, dt, perm, 1.0), o = tb_poison(4, nv, dt, perm);
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
        la_fill_normal(&rng, zv, B * H * D, 1.0);
        for (int64_t i = 0; i < B * H * D; i++) zv[i] = fabsf(zv[i]) * 5.f; /* den > 0 */
        tb_make(&zi, 3, nz, LA_F32, 0, zv);
        free(zv);
        So = tb_poison(4, nS, LA_F32, 0);
        zo = tb_poison(3, nz, LA_F32, 0);
    }
    if (path) setenv("LA_CUDA_CAUSAL_PATH", path, 1);
    CHECK_OK(la_linear_attention(&p, &q.host, &k.host, &v.host, &o.host,
                                 state ? &Si.host : NULL, state ? &zi.host : NULL,
                                 state ? &So.host : NULL, state ? &zo.host : NULL, NULL));
    CHECK_OK(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, state ? &Si.dev : NULL,
                                 state ? &zi.dev : NULL, state ? &So.dev : NULL,
                                 state ? &zo.dev : NULL, NULL));
    la_dev_synchronize();
    if (path) unsetenv("LA_CUDA_CAUSAL_PATH");
    char what[200];
    snprintf(what, sizeof what, "causal %s%s%s%s B%lld N%lld H%lld D%lld Dv%lld %s n%d C%lld s%d p%d",
             path ? "[" : "", path ? path : "", path ? "] " : "", dt == LA_BF16 ? "bf16" : "f32", (long long)B, (long long)N,
             (long long)H, (long long)D, (long long)Dv, feat_name(p.feature), normalize,
             (long long)chunk, state, perm);
    compare(&o, what, dt == LA_BF16 ? TOL_OUT : 1e-4, false);
    if (state) {
        char w2[240];
        snprintf(w2, sizeof w2, "%s S_out", what);
        compare(&So, w2, TOL_STATE, true);
        snprintf(w2, sizeof w2, "%s z_out", what);
        compare(&zo, w2, TOL_STATE, true);
    }
    if (path && !strcmp(path, "v3")) { /* the same inputs on the mma path (device vs device) */
        tb o2 = tb_poison(4, nv, dt, perm), So2, zo2;
        if (state) {
            So2 = tb_poison(4, nS, LA_F32, 0);
            zo2 = tb_poison(3, nz, LA_F32, 0);
        }
        setenv("LA_CUDA_CAUSAL_PATH", "mma", 1);
        CHECK_OK(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o2.dev, state ? &Si.dev : NULL,
                                     state ? &zi.dev : NULL, state ? &So2.dev : NULL,
                                     state ? &zo2.dev : NULL, NULL));
        la_dev_synchronize();
        unsetenv("LA_CUDA_CAUSAL_PATH");
        const tb *gv[3] = {&o, &So, &zo}, *dv[3] = {&o2, &So2, &zo2};
        const char *nm[3] = {"out", "S_out", "z_out"};
        for (int i = 0; i < (state ? 3 : 1); i++) {
            char w2[240];
            snprintf(w2, sizeof w2, "%s %s vs mma", what, nm[i]);
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
    const int64_t B = 1, H = 2, D = 128;
    int64_t nq[4] = {B, N, H, D}, nS[4] = {B, H, D, D}, nz[3] = {B, H, D};
    tb q = tb_rand(4, nq, LA_BF16, perm, 1.0), k = tb_rand(4, nq, LA_BF16, perm, 1.0),
       v = tb_rand(4, nq, LA_BF16, perm, 1.0);
    tb o1 = tb_poison(4, nq, LA_BF16, perm), o2 = tb_poison(4, nq, LA_BF16, perm);
    tb Si = tb_rand(4, nS, LA_F32, 0, 1.0);
    float *zv = malloc(sizeof(float) * (size_t)(B * H * D));
    la_fill_normal(&rng, zv, B * H * D, 1.0);
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
    CHECK_OK(la_linear_attention(&p, &q.dev, &k.dev, &v.dev, &o1.dev, &Si.dev, &zi.dev, &S1.dev,
                                 &z1.dev, NULL));
    /* two halves; the state passes through S2/z2 (in and out alias in the second call) */
    la_tensor qa = token_range(&q.dev, 0, N1), ka = token_range(&k.dev, 0, N1),
              va = token_range(&v.dev, 0, N1), oa = token_range(&o2.dev, 0, N1);
    la_tensor qb = token_range(&q.dev, N1, N - N1), kb = token_range(&k.dev, N1, N - N1),
              vb = token_range(&v.dev, N1, N - N1), ob = token_range(&o2.dev, N1, N - N1);
    CHECK_OK(la_linear_attention(&p, &qa, &ka, &va, &oa, &Si.dev, &zi.dev, &S2.dev, &z2.dev, NULL));
    CHECK_OK(la_linear_attention(&p, &qb, &kb, &vb, &ob, &S2.dev, &z2.dev, &S2.dev, &z2.dev, NULL));
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

/* v3 with a forced state chunk L (tokens; 0: lct_run's choice) and ks (0: its choice) */
static void t_v3(int64_t B, int64_t N, int64_t H, la_feature f, int normalize, int state, int perm,
                 int L, int ks) {
    char buf[32];
    if (L) { snprintf(buf, sizeof buf, "%d", L); setenv("LA_CUDA_CAUSAL_L", buf, 1); }
    if (ks) { snprintf(buf, sizeof buf, "%d", ks); setenv("LA_CUDA_CAUSAL_KS", buf, 1); }
    printf("  (v3: L=%d ks=%d, 0 = automatic)\n", L, ks);
    t_causal(B, N, H, 128, 128, f, normalize, 64, state, LA_BF16, perm, "v3");
    unsetenv("LA_CUDA_CAUSAL_L");
    unsetenv("LA_CUDA_CAUSAL_KS");
}

int main(void) {
    rng = la_test_rng("test_cuda_causal");
    if (getenv("LA_CUDA_SMALL")) {
        const int sm = atoi(getenv("LA_CUDA_SMALL"));
        small_only = sm >= 3 ? 3 : sm == 2 ? 2 : 1;
    }
    if (cuda_test_skip()) return la_test_finish();
    const la_feature feats[5] = {LA_FEATURE_IDENTITY, LA_FEATURE_RELU, LA_FEATURE_RELU_EPS,
                                 LA_FEATURE_RELU1, LA_FEATURE_ELU1};
    const int64_t chunks[4] = {64, 7, 100, 256};
    const la_dtype bf = LA_BF16;

    /* every feature map × normalize × state, odd lengths (tile and chunk tails),
     * B = 2 and 1..3 heads, chunk parameters 64 / 7 / 100 / 256, permuted views */
    const int64_t Ns[5] = {1, 63, 65, 1000, 4096};
    for (int pi = small_only == 3 ? 1 : 0; pi < 2; pi++) {
        /* the previous kernels (mma), then v3 = the default (each case also vs mma) */
        const char *pth = pi ? "v3" : "mma";
        printf("# tensor-core path %s (bf16, D = Dv = 128)\n", pi ? "v3 (default)" : "mma");
        int cnt = 0;
        for (int ni = 0; ni < 5; ni++) {
            if ((small_only && Ns[ni] > 1000) || (small_only >= 2 && Ns[ni] > 65)) continue;
            for (int f = 0; f < 5; f++)
                for (int nm = 0; nm < 2; nm++)
                    for (int s = 0; s < 2; s++, cnt++) {
                        la_feature ff = feats[f];
                        /* N = 1, identity, no normalization: o = (q̃·k) v is ill-conditioned
                         * under the bf16 rounding of the products (test_cuda_linear.c, t_tc_paths) */
                        if (Ns[ni] == 1 && ff == LA_FEATURE_IDENTITY && !nm) ff = LA_FEATURE_RELU;
                        t_causal(ni == 3 ? 2 : 1, Ns[ni], 1 + cnt % 3, 128, 128, ff, nm,
                                 chunks[cnt % 4], s, bf, cnt & 1, pth);
                    }
        }
        if (!small_only) {
            printf("# long sequences (%s)\n", pi ? "v3 (default)" : "mma");
            t_causal(1, 32768, 2, 128, 128, LA_FEATURE_RELU, 0, 64, 1, bf, 0, pth);
            t_causal(1, 32768, 2, 128, 128, LA_FEATURE_RELU, 1, 64, 0, bf, 1, pth);
            t_causal(1, 32768, 2, 128, 128, LA_FEATURE_ELU1, 1, 64, 1, bf, 1, pth);
            if (!pi) { /* v3 has its own long cases below */
                t_causal(1, 32768, 2, 128, 128, LA_FEATURE_IDENTITY, 0, 100, 0, bf, 0, pth);
                t_causal(1, 32768, 3, 128, 128, LA_FEATURE_RELU1, 0, 64, 1, bf, 0, pth);
            }
        }
    }
    /* v3 where its choices differ from the default's: the wide scan over 1..32
     * groups, sub-chunks (ks > 1), the benchmark shape (H = 12: L = 1024 at
     * 32K), and the walk fallback (np > 255) */
    printf("# v3: forced state chunks and sub-chunk counts\n");
    t_v3(1, 200, 2, LA_FEATURE_RELU1, 1, 1, 0, 128, 2);
    t_v3(2, 333, 2, LA_FEATURE_ELU1, 1, 1, 1, 192, 3);
    if (small_only < 3) {
        t_v3(1, 1000, 3, LA_FEATURE_RELU_EPS, 0, 0, 0, 128, 2);
        t_v3(1, 1111, 1, LA_FEATURE_RELU, 1, 1, 1, 64, 1); /* 18 chunks, 3 groups */
    }
    if (small_only < 2) {
        t_v3(1, 4095, 2, LA_FEATURE_IDENTITY, 0, 1, 0, 256, 4);
        t_v3(1, 4096, 12, LA_FEATURE_RELU, 0, 0, 0, 0, 0); /* bench shape at 4K */
    }
    if (!small_only) {
        t_v3(1, 16000, 1, LA_FEATURE_RELU, 0, 0, 0, 64, 1);  /* np 249: 32 groups of 8 columns */
        t_v3(1, 20001, 1, LA_FEATURE_RELU, 1, 1, 0, 64, 1);  /* nd 313 > 255: the walk */
        t_v3(1, 32768, 2, LA_FEATURE_RELU, 0, 1, 1, 1024, 2);
        t_v3(1, 32767, 2, LA_FEATURE_ELU1, 1, 1, 0, 4032, 3); /* L = 63 tiles */
        t_v3(1, 32768, 12, LA_FEATURE_RELU, 0, 0, 0, 0, 0);  /* bench shape at 32K: L = 1024 */
        t_v3(1, 32768, 12, LA_FEATURE_RELU, 1, 1, 1, 0, 3);  /* ks = 2 there */
    }
    printf("# split sequences (GPU vs GPU)\n");
    if (small_only < 3) {
        t_split(1000, 333, LA_FEATURE_RELU1, 1, 0);
        t_split(1000, 64, LA_FEATURE_RELU, 0, 1);
        t_split(130, 1, LA_FEATURE_ELU1, 1, 1);
    }
    if (!small_only) t_split(20000, 12345, LA_FEATURE_RELU_EPS, 1, 0);
    printf("# split sequences on v3 (S_in and S_out alias in the second half)\n");
    setenv("LA_CUDA_CAUSAL_PATH", "v3", 1);
    if (small_only < 3) t_split(1000, 333, LA_FEATURE_RELU1, 1, 0);
    t_split(130, 1, LA_FEATURE_ELU1, 1, 1);
    if (!small_only) t_split(20000, 12345, LA_FEATURE_RELU, 0, 1);
    unsetenv("LA_CUDA_CAUSAL_PATH");
    if (small_only == 3) {
        printf("# worst rel: out %.2e, state %.2e\n", worst_out, worst_state);
        return la_test_finish();
    }

    if (small_only >= 2) {
        printf("# worst rel: out %.2e, state %.2e\n", worst_out, worst_state);
        return la_test_finish();
    }
    printf("# fallbacks (portable path)\n");
    t_causal(1, 1000, 2, 128, 128, LA_FEATURE_RELU1, 1, 64, 1, bf, 1, "old");
    t_causal(1, 65, 2, 128, 128, LA_FEATURE_ELU1, 0, 64, 1, bf, 0, "old");
    t_causal(1, 1000, 2, 64, 64, LA_FEATURE_RELU, 1, 64, 1, bf, 0, NULL);   /* D = 64   */
    t_causal(1, 300, 2, 128, 64, LA_FEATURE_RELU, 0, 64, 0, bf, 1, NULL);   /* Dv = 64  */
    t_causal(1, 1000, 2, 128, 128, LA_FEATURE_ELU1, 1, 64, 1, LA_F32, 0, NULL); /* f32 */

    printf("# worst rel: out %.2e, state %.2e\n", worst_out, worst_state);
    return la_test_finish();
}
