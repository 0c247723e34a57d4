/* `longattn bench` family for the dense baselines: softmax attention
 * (SPEC §1) and linear attention (SPEC §3), causal and not, B = 1, fp32,
 * across N = nmin..nmax (powers of two). Medians over repeats lasting
 * cfg->min_time (at least 3 repeats, unless one call takes over 2 s); a
 * table or JSON lines. First row: the machine's sgemm peak, every thread
 * running its own 1024³ la_sgemm (single-threaded BLAS, as inside our
 * kernels), so "% of peak" compares like with like.
 *
 * FLOP counts (per batch·head; exp/max/divisions not counted):
 *   softmax:        2·P·(D + Dv), P = visible (query, key) pairs:
 *                   N² non-causal, N(N+1)/2 causal
 *   linear:         4·N·D·(Dv + 1)            (K̃ᵀ[V|1] and Q̃[S|z])
 *   linear-causal:  4·N·D·(Dv + 1) + N·C·(D + Dv)   (plus the lower-triangular
 *                   half of the C×C intra-chunk products, C = 64) */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"

typedef struct run_arg {
    int op; /* 0 softmax, 1 linear */
    int causal;
    la_tensor q, k, v, o;
    la_context *ctx;
} run_arg;

static la_status run_once(const run_arg *r) {
    if (r->op == 0) {
        la_softmax_params p;
        la_softmax_params_init(&p);
        p.causal = r->causal;
        return la_softmax_attention(&p, &r->q, &r->k, &r->v, (la_tensor *)&r->o, NULL, r->ctx);
    }
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = r->causal;
    return la_linear_attention(&p, &r->q, &r->k, &r->v, (la_tensor *)&r->o, NULL, NULL, NULL, NULL, r->ctx);
}

static la_status run_call(void *arg) { return run_once((const run_arg *)arg); }

static double time_median(const run_arg *r, double min_time, int *reps, la_status *st) {
    return cli_bench_time_median(run_call, (void *)r, min_time, reps, st);
}

int cli_bench_dense(const cli_bench_cfg *cfg) {
    const char *names[4] = {"softmax", "softmax-causal", "linear", "linear-causal"};
    int sel[4], any = 0;
    for (int i = 0; i < 4; i++) any |= sel[i] = cli_bench_selected(cfg, names[i]);
    const int want_peak = cli_bench_selected(cfg, "sgemm_peak") || any;
    if (!want_peak) return 0;
    const int64_t H = cfg->H, D = cfg->D, Dv = cfg->D, C = 64;

    la_context *ctx = NULL;
    if (la_context_create(&ctx) != LA_OK) return cli_status(LA_ERR_NOMEM, "bench dense");
    la_context_set_threads(ctx, cfg->threads);
    int threads = 1;
    la_context_get_threads(ctx, &threads);

    int steps = 1;
    for (int64_t N = cfg->nmin; N <= cfg->nmax; N *= 2)
        for (int i = 0; i < 4; i++) steps += sel[i];
    cli_progress pr;
    cli_progress_start(&pr, "bench dense", steps);

    const double peak = cli_bench_sgemm_peak(threads, cfg->min_time);
    cli_progress_clear(&pr);
    if (cfg->json)
        fprintf(cfg->out, "{\"op\":\"sgemm_peak\",\"M\":1024,\"N\":1024,\"K\":1024,\"threads\":%d,"
                "\"gflops\":%.3f,\"blas\":\"%s\"}\n", threads, peak, cli_blas_name());
    else
        fprintf(cfg->out, "-- softmax / linear attention (SPEC §1, §3), fp32, B=1, H=%lld, D=Dv=%lld, "
                "threads=%d, BLAS %s\n%-15s 1024^3 on each of %d thread(s)  %8.2f GFLOP/s\n",
                (long long)H, (long long)D, threads, cli_blas_name(), "sgemm_peak", threads, peak);
    fflush(cfg->out);
    cli_progress_step(&pr, 1);

    int rc = 0;
    if (any) {
        size_t n = (size_t)cfg->nmax * (size_t)(H * D);
        float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
        if (!q || !k || !v || !o) {
            free(q), free(k), free(v), free(o);
            la_context_destroy(ctx);
            return cli_fail("bench dense: out of memory for N=%lld", (long long)cfg->nmax);
        }
        cli_bench_fill(q, n, 1), cli_bench_fill(k, n, 2), cli_bench_fill(v, n, 3);
        run_arg r;
        r.ctx = ctx;
        int64_t ne[4] = {1, 1, H, D};
        la_tensor_init(&r.q, q, LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&r.k, k, LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&r.v, v, LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&r.o, o, LA_F32, LA_DEVICE_CPU, 4, ne);
        for (int64_t N = cfg->nmin; N <= cfg->nmax && !rc; N *= 2) {
            r.q.ne[1] = r.k.ne[1] = r.v.ne[1] = r.o.ne[1] = N;
            for (int i = 0; i < 4 && !rc; i++) {
                if (!sel[i]) continue;
                r.op = i / 2;
                r.causal = i % 2;
                int reps = 0;
                la_status st;
                double s = time_median(&r, cfg->min_time, &reps, &st);
                if (st != LA_OK) {
                    rc = cli_status(st, names[i]);
                    break;
                }
                double flops;
                if (r.op == 0) {
                    double pairs = r.causal ? 0.5 * (double)N * (double)(N + 1) : (double)N * (double)N;
                    flops = 2.0 * H * pairs * (double)(D + Dv);
                } else {
                    flops = 4.0 * H * (double)N * D * (Dv + 1);
                    if (r.causal) flops += (double)H * N * C * (D + Dv);
                }
                const double gf = flops / s * 1e-9;
                cli_progress_clear(&pr);
                if (cfg->json)
                    fprintf(cfg->out, "{\"op\":\"%s\",\"N\":%lld,\"H\":%lld,\"D\":%lld,\"threads\":%d,"
                            "\"ms\":%.4f,\"tok_per_s\":%.1f,\"gflops\":%.3f,\"pct_peak\":%.2f,"
                            "\"repeats\":%d}\n",
                            names[i], (long long)N, (long long)H, (long long)D, threads, s * 1e3,
                            N / s, gf, peak > 0 ? 100 * gf / peak : 0, reps);
                else
                    fprintf(cfg->out, "%-15s N=%-7lld H=%-3lld D=%-4lld %11.3f ms %9.3f Mtok/s %8.2f GFLOP/s "
                            "%5.1f%% of peak\n", names[i], (long long)N, (long long)H, (long long)D,
                            s * 1e3, N / s * 1e-6, gf, peak > 0 ? 100 * gf / peak : 0);
                fflush(cfg->out);
                cli_progress_step(&pr, 1);
            }
        }
        free(q), free(k), free(v), free(o);
    }
    cli_progress_end(&pr);
    la_context_destroy(ctx);
    return rc;
}
