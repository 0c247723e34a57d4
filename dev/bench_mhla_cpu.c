/* Development harness for docs/MHLA.md "What was tried": non-causal MHLA (M = 16,
 * 1-D blocks, locality W, relu_eps, per_query) and non-causal linear
 * attention (relu_eps) through the C API, B = 1, D = Dv = 64, fp32.
 * Prints min and median of wall time and of process CPU time (getrusage:
 * other processes on the shared machine do not inflate it) per call.
 *
 *   cc -O2 -fopenmp -Iinclude dev/bench_mhla_cpu.c build-X/liblongattn.a \
 *      -lm -lopenblas -llapack <the CUDA/other libs of `make info`> -o /tmp/bench_mhla_cpu
 *   /tmp/bench_mhla_cpu [N=16384] [threads=1] [reps=30]
 *
 * Environment: H=<heads> (default 4); ONLY_MHLA=1; ALIAS=1 (q, k, v views
 * with nb[1] = 0: every token reads the same row, so inputs sit in L1 and
 * what is left is compute); FRESH=1 (a fresh malloc'd output each call, as a
 * Python wrapper that allocates its output does). */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "longattn.h"

static double wall_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           1e-6 * (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    const int64_t N = argc > 1 ? atoll(argv[1]) : 16384;
    const int threads = argc > 2 ? atoi(argv[2]) : 1;
    int reps = argc > 3 ? atoi(argv[3]) : 30;
    if (reps < 1 || reps > 10000) reps = 30;
    const int64_t B = 1, H = getenv("H") ? atoll(getenv("H")) : 4, D = 64, M = 16;
    const int64_t ne[4] = {B, N, H, D}, n = B * N * H * D;
    float *q = malloc(sizeof(float) * n), *k = malloc(sizeof(float) * n);
    float *v = malloc(sizeof(float) * n), *o = malloc(sizeof(float) * n);
    float *w = malloc(sizeof(float) * M * M);
    if (!q || !k || !v || !o || !w) return 1;
    srand(1);
    for (int64_t i = 0; i < n; i++) {
        q[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        k[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        v[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    }
    la_tensor tq, tk, tv, to, tw;
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&tv, v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&to, o, LA_F32, LA_DEVICE_CPU, 4, ne);
    const int64_t wne[2] = {M, M}, blocks[1] = {M};
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, blocks, &tw);
    if (getenv("ALIAS")) {
        const int64_t nb[4] = {0, 0, D, 1};
        la_tensor_init_strided(&tq, q, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
        la_tensor_init_strided(&tk, k, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
        la_tensor_init_strided(&tv, v, LA_F32, LA_DEVICE_CPU, 4, ne, nb);
    }
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, threads);
    la_mhla_params p;
    la_mhla_params_init(&p);
    p.grid_ndim = 1, p.grid[0] = N, p.blocks[0] = M;
    la_linear_params lp;
    la_linear_params_init(&lp);
    lp.feature = LA_FEATURE_RELU_EPS;

    const int nops = getenv("ONLY_MHLA") ? 1 : 2;
    double *tw_s = malloc(sizeof(double) * 2 * reps), *tc_s = malloc(sizeof(double) * 2 * reps);
    for (int r = -2; r < reps; r++) /* two warm-up rounds; ops alternate */
        for (int op = 0; op < nops; op++) {
            if (getenv("FRESH")) {
                free(o);
                o = malloc(sizeof(float) * n);
                to.data = o;
            }
            const double c0 = cpu_s(), t0 = wall_s();
            la_status st = op == 0 ? la_mhla_forward(&p, &tq, &tk, &tv, &tw, &to, ctx)
                                   : la_linear_attention(&lp, &tq, &tk, &tv, &to, NULL, NULL, NULL,
                                                         NULL, ctx);
            if (st != LA_OK) {
                fprintf(stderr, "error: %s\n", la_last_error());
                return 1;
            }
            if (r >= 0) tw_s[op * reps + r] = wall_s() - t0, tc_s[op * reps + r] = cpu_s() - c0;
        }
    const double flop = 4.0 * (double)N * D * D * H;
    const char *name[2] = {"mhla", "linear"};
    for (int op = 0; op < nops; op++) {
        qsort(tw_s + op * reps, reps, sizeof(double), cmp_double);
        qsort(tc_s + op * reps, reps, sizeof(double), cmp_double);
        const double cmed = tc_s[op * reps + reps / 2];
        printf("%-6s N=%lld H=%lld threads=%d: wall min %.3f med %.3f ms | cpu min %.3f med %.3f ms"
               " (%.0f GFLOP per cpu-second)\n",
               name[op], (long long)N, (long long)H, threads, 1e3 * tw_s[op * reps],
               1e3 * tw_s[op * reps + reps / 2], 1e3 * tc_s[op * reps], 1e3 * cmed, flop / cmed / 1e9);
    }
    la_context_destroy(ctx);
    free(q), free(k), free(v), free(o), free(w), free(tw_s), free(tc_s);
    return 0;
}
