/* `longattn demo` section "dense": softmax attention (SPEC §1) against linear
 * attention (SPEC §3). Checks each against a float64 reference computed
 * inline on small shapes, then times both at growing N to show O(N²) against
 * O(N). Returns the number of failed checks. */
#include <math.h>
#include <stdlib.h>

#include "cli.h"

static void fill(float *x, int64_t n, uint64_t *s) {
    for (int64_t i = 0; i < n; i++) { /* xorshift → roughly N(0,1) via sum of uniforms */
        double a = 0;
        for (int r = 0; r < 4; r++) {
            *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
            a += (double)(*s >> 11) * (1.0 / 9007199254740992.0);
        }
        x[i] = (float)((a - 2.0) * 1.7320508);
    }
}

static double max_rel(const float *a, const double *r, int64_t n) {
    double md = 0, mr = 0;
    for (int64_t i = 0; i < n; i++) {
        if (isnan(a[i])) return INFINITY;
        md = fmax(md, fabs(a[i] - r[i]));
        mr = fmax(mr, fabs(r[i]));
    }
    return md / (mr > 0 ? mr : 1);
}

/* float64 causal/non-causal softmax, [B,N,H,D] contiguous, GQA by h/(H/Hk). */
static void ref_softmax(int causal, int64_t B, int64_t N, int64_t H, int64_t Hk, int64_t D,
                        const float *q, const float *k, const float *v, double *o) {
    double *s = malloc((size_t)N * sizeof *s), sc = 1.0 / sqrt((double)D);
    for (int64_t b = 0; b < B; b++)
        for (int64_t i = 0; i < N; i++)
            for (int64_t h = 0; h < H; h++) {
                int64_t hk = h / (H / Hk), nv = causal ? i + 1 : N;
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < nv; j++) {
                    double d = 0;
                    for (int64_t x = 0; x < D; x++)
                        d += (double)q[((b * N + i) * H + h) * D + x] * k[((b * N + j) * Hk + hk) * D + x];
                    s[j] = d * sc;
                    m = fmax(m, s[j]);
                }
                for (int64_t j = 0; j < nv; j++) sum += (s[j] = exp(s[j] - m));
                for (int64_t x = 0; x < D; x++) {
                    double acc = 0;
                    for (int64_t j = 0; j < nv; j++) acc += s[j] * v[((b * N + j) * Hk + hk) * D + x];
                    o[((b * N + i) * H + h) * D + x] = acc / sum;
                }
            }
    free(s);
}

/* float64 linear attention with φ = relu, normalized, as the token recurrence. */
static void ref_linear(int causal, int64_t B, int64_t N, int64_t H, int64_t D, const float *q,
                       const float *k, const float *v, double *o) {
    double *S = malloc((size_t)(D * D) * sizeof *S), *z = malloc((size_t)D * sizeof *z);
    for (int64_t b = 0; b < B; b++)
        for (int64_t h = 0; h < H; h++) {
            memset(S, 0, (size_t)(D * D) * sizeof *S);
            memset(z, 0, (size_t)D * sizeof *z);
            for (int pass = causal ? 1 : 0; pass < 2; pass++)
                for (int64_t t = 0; t < N; t++) {
                    const float *kt = k + ((b * N + t) * H + h) * D, *vt = v + ((b * N + t) * H + h) * D;
                    const float *qt = q + ((b * N + t) * H + h) * D;
                    if (pass == 0 || causal)
                        for (int64_t x = 0; x < D; x++) {
                            double kx = kt[x] > 0 ? kt[x] : 0;
                            z[x] += kx;
                            for (int64_t y = 0; y < D; y++) S[x * D + y] += kx * vt[y];
                        }
                    if (pass == 1) {
                        double den = 1e-6;
                        for (int64_t x = 0; x < D; x++) den += (qt[x] > 0 ? qt[x] : 0) * z[x];
                        for (int64_t y = 0; y < D; y++) {
                            double num = 0;
                            for (int64_t x = 0; x < D; x++) num += (qt[x] > 0 ? qt[x] : 0) * S[x * D + y];
                            o[((b * N + t) * H + h) * D + y] = num / den;
                        }
                    }
                }
        }
    free(S);
    free(z);
}

typedef struct bufs {
    float *q, *k, *v, *o;
    la_tensor Q, K, V, O;
} bufs;

static int make_bufs(bufs *x, int64_t B, int64_t N, int64_t H, int64_t Hk, int64_t D, uint64_t *seed) {
    const int64_t nq = B * N * H * D, nk = B * N * Hk * D;
    x->q = malloc((size_t)nq * 4);
    x->k = malloc((size_t)nk * 4);
    x->v = malloc((size_t)nk * 4);
    x->o = malloc((size_t)nq * 4);
    if (!x->q || !x->k || !x->v || !x->o) return 1;
    fill(x->q, nq, seed);
    fill(x->k, nk, seed);
    fill(x->v, nk, seed);
    for (int64_t i = 0; i < nq; i++) x->o[i] = NAN;
    const int64_t ne[4] = {B, N, H, D}, nek[4] = {B, N, Hk, D};
    la_tensor_init(&x->Q, x->q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&x->K, x->k, LA_F32, LA_DEVICE_CPU, 4, nek);
    la_tensor_init(&x->V, x->v, LA_F32, LA_DEVICE_CPU, 4, nek);
    la_tensor_init(&x->O, x->o, LA_F32, LA_DEVICE_CPU, 4, ne);
    return 0;
}

static void free_bufs(bufs *x) {
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->o);
}

static la_status run_softmax(int causal, bufs *x, la_context *ctx) {
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = causal;
    return la_softmax_attention(&p, &x->Q, &x->K, &x->V, &x->O, NULL, ctx);
}

static la_status run_linear(int causal, bufs *x, la_context *ctx) {
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = causal;
    return la_linear_attention(&p, &x->Q, &x->K, &x->V, &x->O, NULL, NULL, NULL, NULL, ctx);
}

/* Minimum wall time of up to 3 causal calls; a call over 0.3 s (where the
 * first-call set-up no longer matters) is measured once. */
static double best_time(la_status (*fn)(int, bufs *, la_context *), bufs *x, la_context *ctx,
                        la_status *st) {
    double best = INFINITY;
    for (int r = 0; r < 3 && best > 0.3; r++) {
        double t0 = cli_now();
        *st = fn(1, x, ctx);
        double t = cli_now() - t0;
        if (*st != LA_OK) return 0;
        best = t < best ? t : best;
    }
    return best;
}

int cli_demo_dense(FILE *f, int quick) {
    int failed = 0;
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    la_context *ctx = NULL;
    if (la_context_create(&ctx) != LA_OK) {
        fprintf(f, "  cannot create a context: %s\n", la_last_error());
        return 1;
    }
    int threads = 1;
    la_context_get_threads(ctx, &threads);

    fprintf(f, "  Checks against float64 references computed here (fp32 tolerance 1e-5):\n");
    const int64_t cB = 2, cN = 257, cH = 4, cD = 64;
    for (int op = 0; op < 2; op++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t Hk = op == 0 ? 2 : cH; /* softmax with GQA (2 kv heads) */
            bufs x;
            double *ref = malloc((size_t)(cB * cN * cH * cD) * sizeof(double));
            if (make_bufs(&x, cB, cN, cH, Hk, cD, &seed) || !ref) {
                fprintf(f, "  out of memory\n");
                free_bufs(&x);
                free(ref);
                failed++;
                continue;
            }
            la_status s = op == 0 ? run_softmax(causal, &x, ctx) : run_linear(causal, &x, ctx);
            if (op == 0) ref_softmax(causal, cB, cN, cH, Hk, cD, x.q, x.k, x.v, ref);
            else ref_linear(causal, cB, cN, cH, cD, x.q, x.k, x.v, ref);
            double e = s == LA_OK ? max_rel(x.o, ref, cB * cN * cH * cD) : INFINITY;
            int ok = e <= 1e-5;
            failed += !ok;
            fprintf(f, "    %-8s B=%lld N=%lld H=%lld%s D=%lld %-10s max rel err %.2e  %s\n",
                    op == 0 ? "softmax" : "linear", (long long)cB, (long long)cN, (long long)cH,
                    op == 0 ? " Hk=2" : "     ", (long long)cD, causal ? "causal" : "non-causal", e,
                    ok ? "PASS" : "FAIL");
            free_bufs(&x);
            free(ref);
        }

    const int64_t H = 4, D = 64, nmax = quick ? 4096 : 16384;
    fprintf(f, "\n  Causal forward time, B=1 H=%lld D=%lld, %d thread(s), BLAS %s:\n", (long long)H,
            (long long)D, threads, cli_blas_name());
    fprintf(f, "    %7s  %12s  %12s  %10s  %16s\n", "N", "softmax (ms)", "linear (ms)", "ratio",
            "growth per 2x N");
    double prev_s = 0, prev_l = 0;
    for (int64_t N = 1024; N <= nmax; N *= 2) {
        bufs x;
        if (make_bufs(&x, 1, N, H, H, D, &seed)) {
            fprintf(f, "    out of memory at N=%lld\n", (long long)N);
            free_bufs(&x);
            failed++;
            break;
        }
        /* best of a few calls (the first pays first-touch and BLAS set-up;
         * the minimum is the estimate least disturbed by other processes) */
        la_status s1 = LA_OK, s2 = LA_OK;
        double tl = best_time(run_linear, &x, ctx, &s1);
        double ts = best_time(run_softmax, &x, ctx, &s2);
        if (s1 != LA_OK || s2 != LA_OK) {
            fprintf(f, "    N=%lld failed: %s\n", (long long)N, la_last_error());
            failed++;
            free_bufs(&x);
            break;
        }
        char growth[64] = "";
        if (prev_s > 0)
            snprintf(growth, sizeof growth, "softmax x%.1f, linear x%.1f", ts / prev_s, tl / prev_l);
        fprintf(f, "    %7lld  %12.2f  %12.2f  %9.0fx  %s\n", (long long)N, 1e3 * ts, 1e3 * tl, ts / tl,
                growth);
        fflush(f);
        prev_s = ts;
        prev_l = tl;
        free_bufs(&x);
    }
    fprintf(f, "  Softmax attention costs O(N^2) (time x4 per doubling of N, memory O(N) thanks to the\n"
               "  online softmax); linear attention costs O(N) (x2 per doubling): the gap widens with N.\n");
    la_context_destroy(ctx);
    return failed;
}
