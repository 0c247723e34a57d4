/* GPU tests of softmax attention (SPEC §1): the CUDA op against the CPU path
 * on the same fresh random inputs (the CPU path has its own float64-reference
 * tests in tests/cpu/). Runs on the GPU machine only; without a device it
 * skips.
 *
 * Both CUDA paths: the tensor-core kernel (bf16, D = Dv ∈ {64, 128}, rows of
 * D contiguous and 16-byte aligned; every tiling LA_CUDA_SOFTMAX_TC_CFG
 * offers) and the general fp32 kernel (other head dims, f32, unaligned rows,
 * LA_CUDA_SOFTMAX_PATH=old). Each case checks which path the dispatch takes,
 * poisons out and lse with 0xFF bytes (NaN) before the call and compares them
 * in full: rel = max|gpu − cpu| / max|cpu| ≤ 1e-2 (bf16) or 1e-5 (f32), no
 * NaN left; lse (fp32, natural log) within 1e-4·max(1, |lse|), −inf exactly
 * where the CPU has −inf (rows that see no key).
 *
 * Sizes: N = 1, 63, 65, 1000, 4096 (partial tiles), Nq ≠ Nk both ways
 * (causal bottom-right alignment, rows with no visible key), GQA, [B,H,N,D]
 * views, non-default and negative scales, large-magnitude inputs (peaked
 * rows). LA_CUDA_SMALL=1 skips the N = 4096 cases (for compute-sanitizer). */
#include "cuda_test_util.h"

/* src/cuda/softmax.cu (CUDA builds only): 1 when the dispatch takes the
 * tensor-core kernel for these views */
extern int la_softmax_cuda_tc_path(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                                   const la_tensor *out) __attribute__((weak));

static bool small_only;

/* ---- one case ------------------------------------------------------------- */
typedef struct sm_case {
    int64_t B, Nq, Nk, H, Hk, D, Dv;
    int causal;
    la_dtype dt;
    int layout;  /* of q, k, v and out (tb_make: 0 contiguous, 1 buffer [B,H,N,D],
                  * TB_PADDED = 2 rows padded by one element, not 16-byte aligned) */
    int want_lse;
    float scale; /* 0 = default D^-1/2 */
    double in_scale;
    int want_tc; /* the path the dispatch must take */
} sm_case;

static void run_case(sm_case c, const char *tag) {
    int64_t nq[4] = {c.B, c.Nq, c.H, c.D}, nk[4] = {c.B, c.Nk, c.Hk, c.D},
            nv[4] = {c.B, c.Nk, c.Hk, c.Dv}, no[4] = {c.B, c.Nq, c.H, c.Dv}, nl[3] = {c.B, c.Nq, c.H};
    tb q = tb_rand(4, nq, c.dt, c.layout, c.in_scale), k = tb_rand(4, nk, c.dt, c.layout, c.in_scale),
       v = tb_rand(4, nv, c.dt, c.layout, 1.0);
    tb o, l;
    tb_make(&o, 4, no, c.dt, c.layout, NULL);
    tb_make(&l, 3, nl, LA_F32, 0, NULL);
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = c.causal;
    p.scale = c.scale;
    char what[200];
    snprintf(what, sizeof what, "%s %s B%lld Nq%lld Nk%lld H%lld/%lld D%lld/%lld c%d L%d lse%d s%g x%g",
             tag, dtn(c.dt), (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H,
             (long long)c.Hk, (long long)c.D, (long long)c.Dv, c.causal, c.layout, c.want_lse,
             (double)c.scale, c.in_scale);
    if (la_softmax_cuda_tc_path) {
        const int tc = la_softmax_cuda_tc_path(&q.dev, &k.dev, &v.dev, &o.dev);
        CHECK(tc == c.want_tc, "%s: dispatch takes the %s path, want %s", what, tc ? "tc" : "old",
              c.want_tc ? "tc" : "old");
    }
    la_tensor *lh = c.want_lse ? &l.host : NULL, *ld = c.want_lse ? &l.dev : NULL;
    CHECK_OK(la_softmax_attention(&p, &q.host, &k.host, &v.host, &o.host, lh, NULL));
    CHECK_OK(la_softmax_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, ld, NULL));
    la_dev_synchronize();

    /* out, in full */
    const int64_t n = tb_numel(&o);
    float *g = tb_read(&o, true), *cpu = tb_read(&o, false);
    double *ref = malloc(sizeof(double) * (size_t)n);
    int64_t cpu_nan = 0, gnan = 0;
    for (int64_t i = 0; i < n; i++) {
        ref[i] = cpu[i];
        cpu_nan += isnan(cpu[i]);
        gnan += !isfinite(g[i]);
    }
    const double rel = la_rel_err(g, ref, n), tol = c.dt == LA_BF16 ? 1e-2 : 1e-5;
    CHECK(cpu_nan == 0, "%s: CPU output has %lld NaN", what, (long long)cpu_nan);
    CHECK(gnan == 0, "%s: GPU output has %lld non-finite values (unwritten?)", what, (long long)gnan);
    CHECK(rel <= tol, "%s: rel err %.3g > %.1g", what, rel, tol);

    /* lse: −inf where the CPU has −inf, else close */
    double lerr = 0;
    int lbad = 0;
    if (c.want_lse) {
        const int64_t nn = c.B * c.Nq * c.H;
        float *gl = tb_read(&l, true), *cl = tb_read(&l, false);
        for (int64_t i = 0; i < nn; i++) {
            if (isinf(cl[i]) && cl[i] < 0) {
                lbad += !(isinf(gl[i]) && gl[i] < 0);
                continue;
            }
            if (!isfinite(gl[i]) || !isfinite(cl[i])) {
                lbad++;
                continue;
            }
            const double d = fabs((double)gl[i] - cl[i]) / fmax(1.0, fabs(cl[i]));
            if (d > lerr) lerr = d;
        }
        CHECK(lbad == 0 && lerr <= 1e-4, "%s lse: %d mismatched, max err %.3g", what, lbad, lerr);
        free(gl);
        free(cl);
    }
    const bool ok = rel <= tol && gnan == 0 && lbad == 0 && lerr <= 1e-4;
    printf("  %-96s rel %.2e lse %.1e %s\n", what, rel, lerr, ok ? "ok" : "FAIL");
    fflush(stdout);
    free(g);
    free(cpu);
    free(ref);
    tb_free(&q); tb_free(&k); tb_free(&v); tb_free(&o); tb_free(&l);
}

static sm_case mk(int64_t B, int64_t Nq, int64_t Nk, int64_t H, int64_t Hk, int64_t D, int causal,
                  int layout, int lse) {
    sm_case c = {B, Nq, Nk, H, Hk, D, D, causal, LA_BF16, layout, lse, 0.f, 1.0, 1};
    return c;
}

/* The tensor-core path: partial tiles, Nq ≠ Nk, GQA, layouts, lse, scales. */
static void tc_cases(const char *tag) {
    for (int di = 0; di < 2; di++) {
        const int64_t D = di ? 128 : 64;
        for (int causal = 0; causal < 2; causal++) {
            run_case(mk(1, 1, 1, 1, 1, D, causal, 0, 1), tag);
            run_case(mk(2, 63, 63, 2, 1, D, causal, 1, 1), tag);
            run_case(mk(1, 65, 65, 4, 2, D, causal, 0, causal), tag);
            run_case(mk(1, 1000, 1000, 6, 2, D, causal, causal, 1), tag);
            run_case(mk(1, 65, 1000, 2, 2, D, causal, 1, 1), tag);  /* Nq < Nk */
            run_case(mk(2, 1000, 65, 2, 1, D, causal, 0, 1), tag);  /* Nq > Nk: causal rows with no key */
            run_case(mk(1, 1, 1000, 4, 1, D, causal, 0, 1), tag);   /* decode-like */
            run_case(mk(1, 130, 127, 2, 2, D, causal, 1, 1), tag);
        }
        sm_case c = mk(1, 300, 300, 2, 2, D, 1, 0, 1);
        c.scale = 0.05f;
        run_case(c, tag);
        c.scale = -0.2f; /* negative scale: the mask must still win */
        c.causal = 0;
        run_case(c, tag);
        c = mk(1, 500, 700, 2, 1, D, 1, 1, 1);
        c.in_scale = 4.0; /* peaked rows: scores of ±100 */
        run_case(c, tag);
    }
}

int main(void) {
    rng = la_test_rng("test_cuda_softmax");
    small_only = getenv("LA_CUDA_SMALL") != NULL;
    if (cuda_test_skip()) return la_test_finish();
    unsetenv("LA_CUDA_SOFTMAX_PATH");
    unsetenv("LA_CUDA_SOFTMAX_TC_CFG");

    printf("# tensor-core path, default tiling\n");
    tc_cases("tc");
    if (!small_only) {
        for (int causal = 0; causal < 2; causal++) {
            run_case(mk(1, 4096, 4096, 2, 2, 128, causal, 0, 1), "tc");
            run_case(mk(1, 4096, 4096, 4, 1, 64, causal, 1, 1), "tc");
        }
        run_case(mk(1, 1000, 4096, 2, 1, 128, 1, 1, 1), "tc");
    }

    /* every other tiling of the tensor-core kernel, on a subset */
    const char *cfgs[3] = {"1", "3", "4"};
    for (int ci = 0; ci < 3; ci++) {
        setenv("LA_CUDA_SOFTMAX_TC_CFG", cfgs[ci], 1);
        char tag[16];
        snprintf(tag, sizeof tag, "tc cfg%s", cfgs[ci]);
        printf("# tensor-core path, LA_CUDA_SOFTMAX_TC_CFG=%s\n", cfgs[ci]);
        for (int di = 0; di < 2; di++) {
            const int64_t D = di ? 128 : 64;
            run_case(mk(2, 63, 63, 2, 1, D, 1, 1, 1), tag);
            run_case(mk(1, 1000, 1000, 4, 2, D, 0, 0, 1), tag);
            run_case(mk(1, 1000, 1000, 4, 2, D, 1, 1, 1), tag);
            run_case(mk(2, 1000, 65, 2, 1, D, 1, 0, 1), tag);
            run_case(mk(1, 65, 1000, 2, 2, D, 1, 1, 0), tag);
        }
    }
    unsetenv("LA_CUDA_SOFTMAX_TC_CFG");

    printf("# general path\n");
    {
        sm_case c = mk(2, 63, 63, 2, 1, 16, 1, 1, 1); /* D = 16 */
        c.want_tc = 0;
        run_case(c, "old");
        c = mk(1, 65, 130, 4, 2, 63, 1, 0, 1); /* D = 63 */
        c.want_tc = 0;
        run_case(c, "old");
        c = mk(1, 1000, 1000, 2, 2, 63, 0, 1, 1);
        c.want_tc = 0;
        run_case(c, "old");
        c = mk(1, 130, 65, 2, 2, 64, 1, 0, 1); /* D = 64, Dv = 32 */
        c.Dv = 32;
        c.want_tc = 0;
        run_case(c, "old");
        c = mk(1, 300, 300, 2, 1, 128, 1, 2, 1); /* bf16 D = 128, rows not 16-byte aligned */
        c.want_tc = 0;
        run_case(c, "old");
        c = mk(1, 300, 400, 2, 2, 128, 1, 1, 1); /* f32 */
        c.dt = LA_F32;
        c.want_tc = 0;
        run_case(c, "old");
        setenv("LA_CUDA_SOFTMAX_PATH", "old", 1); /* forced */
        c = mk(1, 1000, 1000, 4, 2, 128, 1, 0, 1);
        c.want_tc = 0;
        run_case(c, "old forced");
        c = mk(1, 65, 1000, 2, 1, 64, 0, 1, 1);
        c.want_tc = 0;
        run_case(c, "old forced");
        unsetenv("LA_CUDA_SOFTMAX_PATH");
    }
    return la_test_finish();
}
