/* Case table of softmax attention (SPEC §1) on CUDA, from the former
 * tests/cuda/test_cuda_softmax.c: the CUDA op against the CPU path on the
 * same fresh random inputs (the CPU path has its float64-reference cases in
 * cases_cpu.c and tests/cpu/test_softmax.c).
 *
 * Both CUDA paths: the tensor-core kernel (bf16 or f16, D = Dv in {32, 64,
 * 128} or D/Dv = 64/128, 128/64, rows of D contiguous and 16-byte aligned;
 * variant "tc" of family "softmax"; f16 is checked by dev/cuda/softmax.cu
 * until the op layer and this harness take f16) and
 * the general fp32 kernel (other head dims, f32, unaligned rows, variant
 * "portable"). Each case without a
 * forced variant checks which path the dispatch takes; out and lse are
 * poisoned with 0xFF bytes (NaN) before the call and compared in full:
 * rel = max|gpu - cpu| / max|cpu| <= 1e-2 (bf16) or 1e-5 (f32), no NaN left;
 * lse (fp32, natural log) within 1e-4 max(1, |lse|), -inf exactly where the
 * CPU has -inf (rows that see no key).
 *
 * Sizes: N = 1, 63, 65, 1000, 4096 (partial tiles), Nq != Nk both ways
 * (causal bottom-right alignment, rows with no visible key), GQA, [B,H,N,D]
 * views, non-default and negative scales, large-magnitude inputs (peaked
 * rows). The N = 4096 cases are not in the --small subset. */
#include "bo_staging.h"

/* src/cuda/softmax.cu (CUDA builds only): 1 when the dispatch takes the
 * tensor-core kernel for these views */
extern int la_softmax_cuda_tc_path(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                                   const la_tensor *out) __attribute__((weak));

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

static void run_case(const void *arg) {
    const sm_case c = *(const sm_case *)arg;
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
    snprintf(what, sizeof what, "%s B%lld Nq%lld Nk%lld H%lld/%lld D%lld/%lld c%d L%d lse%d s%g x%g",
             dtn(c.dt), (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H,
             (long long)c.Hk, (long long)c.D, (long long)c.Dv, c.causal, c.layout, c.want_lse,
             (double)c.scale, c.in_scale);
    if (la_softmax_cuda_tc_path && !la_context_variant(bo_ctx(), "softmax")) {
        const int tc = la_softmax_cuda_tc_path(&q.dev, &k.dev, &v.dev, &o.dev);
        CHECK(tc == c.want_tc, "%s: dispatch takes the %s path, want %s", what, tc ? "tc" : "old",
              c.want_tc ? "tc" : "old");
    }
    la_tensor *lh = c.want_lse ? &l.host : NULL, *ld = c.want_lse ? &l.dev : NULL;
    CHECK_OK(la_softmax_attention(&p, &q.host, &k.host, &v.host, &o.host, lh, bo_ctx()));
    CHECK_DEV(la_softmax_attention(&p, &q.dev, &k.dev, &v.dev, &o.dev, ld, bo_ctx()));
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
    const double rel = la_rel_err(g, ref, n), tol = c.dt == LA_F32 ? 1e-5 : tol_of(c.dt, c.Nk);
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

static void add(bo_list *L, int small, const char *variant, sm_case c) {
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name,
             "softmax %s B%lld Nq%lld Nk%lld H%lld/%lld D%lld/%lld causal%d layout%d lse%d scale%g x%g",
             dtn(c.dt), (long long)c.B, (long long)c.Nq, (long long)c.Nk, (long long)c.H,
             (long long)c.Hk, (long long)c.D, (long long)c.Dv, c.causal, c.layout, c.want_lse,
             (double)c.scale, c.in_scale);
    const bo_opts o = {"softmax", BO_CUDA, small, variant ? "softmax" : NULL, variant, NULL};
    bo_add(L, &o, run_case, &c, sizeof c, name);
}

/* The smallest call through the family's kernel choice (bf16, D = 64). */
static la_status probe(la_context *ctx) {
    int64_t ne[4] = {1, 16, 1, 64};
    tb q, o;
    tb_make(&q, 4, ne, LA_BF16, 0, NULL);
    tb_make(&o, 4, ne, LA_BF16, 0, NULL);
    la_dev_memset(q.dev.data, 0, q.bytes);
    la_softmax_params p;
    la_softmax_params_init(&p);
    const la_status s = la_softmax_attention(&p, &q.dev, &q.dev, &q.dev, &o.dev, NULL, ctx);
    la_dev_synchronize();
    tb_free(&q);
    tb_free(&o);
    return s;
}

/* The tensor-core path: partial tiles, Nq != Nk, GQA, layouts, lse, scales. */
static void tc_cases(bo_list *L) {
    for (int di = 0; di < 3; di++) {
        const int64_t D = di == 2 ? 32 : di ? 128 : 64;
        for (int causal = 0; causal < 2; causal++) {
            add(L, 1, NULL, mk(1, 1, 1, 1, 1, D, causal, 0, 1));
            add(L, 1, NULL, mk(2, 63, 63, 2, 1, D, causal, 1, 1));
            add(L, 1, NULL, mk(1, 65, 65, 4, 2, D, causal, 0, causal));
            add(L, 1, NULL, mk(1, 1000, 1000, 6, 2, D, causal, causal, 1));
            add(L, 1, NULL, mk(1, 65, 1000, 2, 2, D, causal, 1, 1));  /* Nq < Nk */
            add(L, 1, NULL, mk(2, 1000, 65, 2, 1, D, causal, 0, 1));  /* Nq > Nk: causal rows with no key */
            add(L, 1, NULL, mk(1, 1, 1000, 4, 1, D, causal, 0, 1));   /* decode-like */
            add(L, 1, NULL, mk(1, 130, 127, 2, 2, D, causal, 1, 1));
        }
        sm_case c = mk(1, 300, 300, 2, 2, D, 1, 0, 1);
        c.scale = 0.05f;
        add(L, 1, NULL, c);
        c.scale = -0.2f; /* negative scale: the mask must still win */
        c.causal = 0;
        add(L, 1, NULL, c);
        c = mk(1, 500, 700, 2, 1, D, 1, 1, 1);
        c.in_scale = 4.0; /* peaked rows: scores of +-100 */
        add(L, 1, NULL, c);
    }
}

void cases_softmax(bo_list *L) {
    bo_add_probe(L, "softmax", probe);
    /* the tensor-core path, default tiling */
    tc_cases(L);
    for (int causal = 0; causal < 2; causal++) {
        add(L, 0, NULL, mk(1, 4096, 4096, 2, 2, 128, causal, 0, 1));
        add(L, 0, NULL, mk(1, 4096, 4096, 4, 1, 64, causal, 1, 1));
    }
    add(L, 0, NULL, mk(1, 1000, 4096, 2, 1, 128, 1, 1, 1));
    add(L, 0, NULL, mk(1, 4096, 4096, 8, 2, 32, 1, 1, 1));

    /* Dv != D on the tensor-core path: (64, 128) and (128, 64) */
    for (int causal = 0; causal < 2; causal++)
        for (int di = 0; di < 2; di++) {
            const int64_t D = di ? 128 : 64, Dv = di ? 64 : 128;
            sm_case c = mk(2, 63, 63, 2, 1, D, causal, 1, 1);
            c.Dv = Dv;
            add(L, 1, NULL, c);
            c = mk(1, 1000, 1000, 4, 2, D, causal, causal, 1);
            c.Dv = Dv;
            add(L, 1, NULL, c);
            c = mk(1, 130, 65, 2, 2, D, causal, 0, 1); /* Nq > Nk */
            c.Dv = Dv;
            add(L, 1, NULL, c);
        }

    /* the tensor-core kernel forced ("tc"; the former tests ran these shapes
     * under each of the other tilings, removed from src/) */
    for (int di = 0; di < 3; di++) {
        const int64_t D = di == 2 ? 32 : di ? 128 : 64;
        add(L, 1, "tc", mk(2, 63, 63, 2, 1, D, 1, 1, 1));
        add(L, 1, "tc", mk(1, 1000, 1000, 4, 2, D, 0, 0, 1));
        add(L, 1, "tc", mk(1, 1000, 1000, 4, 2, D, 1, 1, 1));
        add(L, 1, "tc", mk(2, 1000, 65, 2, 1, D, 1, 0, 1));
        add(L, 1, "tc", mk(1, 65, 1000, 2, 2, D, 1, 1, 0));
    }

    /* the general path, chosen by the dispatch */
    sm_case c = mk(2, 63, 63, 2, 1, 16, 1, 1, 1); /* D = 16 */
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 65, 130, 4, 2, 63, 1, 0, 1); /* D = 63 */
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 1000, 1000, 2, 2, 63, 0, 1, 1);
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 130, 65, 2, 2, 64, 1, 0, 1); /* D = 64, Dv = 32: no tiling */
    c.Dv = 32;
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 65, 63, 2, 1, 48, 0, 1, 1); /* D = 48: no tiling */
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 300, 300, 2, 1, 32, 1, 2, 1); /* bf16 D = 32, rows not 16-byte aligned */
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 300, 300, 2, 1, 128, 1, 2, 1); /* bf16 D = 128, rows not 16-byte aligned */
    c.want_tc = 0;
    add(L, 1, NULL, c);
    c = mk(1, 300, 400, 2, 2, 128, 1, 1, 1); /* f32 */
    c.dt = LA_F32;
    c.want_tc = 0;
    add(L, 1, NULL, c);
    /* f16: the tensor-core kernels at D = 128 and 64, the general path at D = 63 */
    c = mk(1, 300, 300, 2, 1, 128, 1, 0, 1);
    c.dt = LA_F16;
    c.want_tc = 1;
    add(L, 1, NULL, c);
    c.want_tc = 0;
    add(L, 1, "portable", c);
    c = mk(2, 63, 65, 2, 2, 64, 0, 1, 1);
    c.dt = LA_F16;
    c.want_tc = 1;
    add(L, 1, NULL, c);
    c = mk(1, 1000, 1000, 2, 1, 63, 1, 0, 1);
    c.dt = LA_F16;
    c.want_tc = 0;
    add(L, 1, NULL, c);
    /* the general path forced where the tensor-core kernel applies */
    c = mk(1, 1000, 1000, 4, 2, 128, 1, 0, 1);
    c.want_tc = 0;
    add(L, 1, "portable", c);
    c = mk(1, 65, 1000, 2, 1, 64, 0, 1, 1);
    c.want_tc = 0;
    add(L, 1, "portable", c);
    c = mk(1, 65, 1000, 2, 1, 32, 1, 1, 1);
    c.want_tc = 0;
    add(L, 1, "portable", c);
}
