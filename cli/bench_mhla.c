/* `longattn bench` family for MHLA (SPEC §5): non-causal MHLA on a 1-D grid
 * with M = 16 blocks, causal chunkwise MHLA (C = 64, M = N/C), and decoding
 * (time per token against context length 1K..64K). Medians over repeats
 * lasting cfg->min_time; a table or JSON lines.
 *
 * Flop model (per batch·head, E = Dv+1 for the normalizer column):
 *   mhla:        4·N·D·E (summaries + outputs) + 2·M²·D·E (mixing)
 *   mhla-causal: 4·N·D·E + 2·N·C·(D+E)/2 (masked intra-chunk) (+ M²·D·E triangular mixing, -w)
 *   mhla-decode: 4·D·E per token (+ 2·i·D·E once per block, amortized over C). */
#include <stdlib.h>

#include "cli.h"


static void report(const cli_bench_cfg *cfg, const char *op, int64_t N, int64_t M, double sec,
                   double flops, const char *extra) {
    const int64_t H = cfg->H, D = cfg->D;
    cli_progress_clear(NULL);
    if (cfg->json)
        fprintf(cfg->out, "{\"op\":\"%s\",\"N\":%lld,\"H\":%lld,\"D\":%lld,\"M\":%lld,"
                "\"threads\":%d,\"ms\":%.4f,\"tok_per_s\":%.1f,\"gflops\":%.3f%s%s}\n",
                op, (long long)N, (long long)H, (long long)D, (long long)M, cfg->threads,
                sec * 1e3, N / sec, flops / sec * 1e-9, extra ? "," : "", extra ? extra : "");
    else
        fprintf(cfg->out, "%-12s N=%-7lld H=%-3lld D=%-4lld M=%-5lld %10.3f ms %10.3f Mtok/s %8.2f GFLOP/s\n",
                op, (long long)N, (long long)H, (long long)D, (long long)M, sec * 1e3,
                N / sec * 1e-6, flops / sec * 1e-9);
    fflush(cfg->out);
}

/* Median seconds of fn(arg) (cli_bench_time_median: warm-up, >= 3 repeats). */
typedef la_status (*run_fn)(void *);
static double time_median(run_fn fn, void *arg, double min_time, la_status *st) {
    int reps;
    return cli_bench_time_median(fn, arg, min_time, &reps, st);
}

typedef struct run_arg {
    la_mhla_params p;
    la_mhla_causal_params cp;
    la_tensor q, k, v, w, o;
    la_context *ctx;
} run_arg;

static la_status run_nc(void *a) {
    run_arg *r = (run_arg *)a;
    return la_mhla_forward(&r->p, &r->q, &r->k, &r->v, &r->w, &r->o, r->ctx);
}
static la_status run_c(void *a) {
    run_arg *r = (run_arg *)a;
    return la_mhla_causal_forward(&r->cp, &r->q, &r->k, &r->v, &r->w, &r->o, r->ctx);
}

/* Causal mixing [M,M]: uniform_causal (every row constant below the
 * diagonal, so the library mixes by running sums, O(M·d·dv)), or, with
 * general, the same with the entries of each row made unequal (the GEMM /
 * stream over all earlier summaries, O(M²·d·dv)). */
static void causal_mixing(la_tensor *w, float *buf, int64_t M, int general) {
    int64_t wne[2] = {M, M}, bl[1] = {M};
    la_tensor_init(w, buf, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_mhla_init(LA_MHLA_INIT_UNIFORM_CAUSAL, 1, bl, w);
    if (general)
        for (int64_t i = 0; i < M; i++)
            for (int64_t b = 0; b < i; b++) buf[i * M + b] *= 1.0f + 0.25f * (float)((7 * b + i) % 4);
}

/* Decode rows for one mixing kind: one state, prefilled to each context
 * (1K, 4K, 16K, 64K), then 8·C tokens appended one by one and timed: the
 * median token inside a block, the median block start (which forms the new
 * block's mixture once), and the amortized cost per token. */
static int bench_decode(const cli_bench_cfg *cfg, run_arg *r, float *W, int64_t M, int general,
                        const float *q, const float *k, const float *v, float *o, int64_t dmax,
                        cli_progress *pr) {
    const int64_t H = cfg->H, D = cfg->D, E = D + 1, C = 64;
    const char *name = general ? "mhla-decode-w" : "mhla-decode";
    causal_mixing(&r->w, W, M, general);
    la_mhla_causal_params_init(&r->cp);
    la_mhla_state *sp = NULL;
    la_status st = la_mhla_state_create(&r->cp, 1, H, D, D, &r->w, &sp);
    int64_t len = 0;
    for (int64_t c = 1024; c <= dmax && st == LA_OK; c *= 4) {
        la_tensor tq = r->q, tk = r->k, tv = r->v, to = r->o;
        tq.ne[1] = tk.ne[1] = tv.ne[1] = to.ne[1] = c - len;
        st = la_mhla_state_append(sp, &tq, &tk, &tv, &to, r->ctx); /* prefill */
        len = c;
        enum { STEPS = 512 };
        double tin[STEPS], tst[STEPS];
        int nin = 0, nst = 0;
        for (int i = 0; i < STEPS && st == LA_OK; i++) {
            la_tensor q1 = r->q, k1 = r->k, v1 = r->v, o1 = r->o;
            q1.ne[1] = k1.ne[1] = v1.ne[1] = o1.ne[1] = 1;
            q1.data = (float *)q + i * H * D, k1.data = (float *)k + i * H * D;
            v1.data = (float *)v + i * H * D, o1.data = o + i * H * D;
            const int starts_block = (len + i) % C == 0;
            double t0 = cli_now();
            st = la_mhla_state_append(sp, &q1, &k1, &v1, &o1, r->ctx);
            double dt = cli_now() - t0;
            if (starts_block) tst[nst++] = dt;
            else tin[nin++] = dt;
        }
        len += STEPS;
        if (st != LA_OK) break;
        /* medians, so that a preempted token does not count; amortized =
         * (C−1) in-block tokens plus one block start, per C tokens */
        const double med = cli_bench_median(tin, nin), mst = cli_bench_median(tst, nst);
        const double amort = ((double)(C - 1) * med + mst) / (double)C;
        char extra[240];
        snprintf(extra, sizeof extra, "\"mixing\":\"%s\",\"context\":%lld,\"us_per_token_median\":%.3f,"
                 "\"us_block_start_median\":%.3f,\"us_per_token_amortized\":%.3f",
                 general ? "general" : "uniform_causal", (long long)c, med * 1e6, mst * 1e6, amort * 1e6);
        cli_progress_clear(pr);
        if (cfg->json)
            report(cfg, name, c, c / C + 1, amort, (double)H * 4.0 * D * E, extra);
        else
            fprintf(cfg->out, "%-13s ctx=%-7lld H=%-3lld D=%-4lld M=%-5lld %8.2f us/token median "
                    "%9.1f us block start %8.2f us/token amortized\n", name, (long long)c,
                    (long long)H, (long long)D, (long long)(c / C + 1), med * 1e6, mst * 1e6,
                    amort * 1e6);
        cli_progress_step(pr, 1);
    }
    la_mhla_state_destroy(sp);
    return st == LA_OK ? 0 : cli_status(st, name);
}

int cli_bench_mhla(const cli_bench_cfg *cfg) {
    const int do_nc = cli_bench_selected(cfg, "mhla");
    const int do_c[2] = {cli_bench_selected(cfg, "mhla-causal"), cli_bench_selected(cfg, "mhla-causal-w")};
    const int do_d[2] = {cli_bench_selected(cfg, "mhla-decode"), cli_bench_selected(cfg, "mhla-decode-w")};
    if (!do_nc && !do_c[0] && !do_c[1] && !do_d[0] && !do_d[1]) return 0;
    const int64_t H = cfg->H, D = cfg->D, E = D + 1, C = 64, Mnc = 16;
    const int64_t dmax = cfg->nmax > 65536 ? cfg->nmax : 65536; /* decode contexts 1K..64K */
    const int64_t nall = (cfg->nmax > dmax ? cfg->nmax : dmax) + 512;
    size_t n = (size_t)(nall * H * D);
    float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4);
    const int64_t Mc = nall / C + 1;
    float *W = malloc(sizeof(float) * (size_t)(Mc * Mc));
    if (!q || !k || !v || !o || !W) {
        free(q), free(k), free(v), free(o), free(W);
        return cli_fail("bench mhla: out of memory for N=%lld", (long long)nall);
    }
    cli_bench_fill(q, n, 1), cli_bench_fill(k, n, 2), cli_bench_fill(v, n, 3);
    run_arg r;
    la_context_create(&r.ctx);
    la_context_set_threads(r.ctx, cfg->threads);
    int64_t ne[4] = {1, 1, H, D};
    la_tensor_init(&r.q, q, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&r.k, k, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&r.v, v, LA_F32, LA_DEVICE_CPU, 4, ne);
    la_tensor_init(&r.o, o, LA_F32, LA_DEVICE_CPU, 4, ne);
    int steps = 0;
    for (int64_t N = cfg->nmin; N <= cfg->nmax; N *= 2) steps += do_nc + do_c[0] + do_c[1];
    for (int64_t c = 1024; c <= dmax; c *= 4) steps += do_d[0] + do_d[1];
    cli_progress pr;
    cli_progress_start(&pr, "bench mhla", steps);
    if (!cfg->json)
        fprintf(cfg->out, "-- MHLA (SPEC §5), fp32, B=1, threads=%d; non-causal M=%lld 1-D blocks; "
                "causal C=%lld M=N/C, W uniform_causal (-w: a general W)\n", cfg->threads,
                (long long)Mnc, (long long)C);
    int rc = 0;
    la_status st = LA_OK;
    for (int64_t N = cfg->nmin; N <= cfg->nmax && !rc; N *= 2) {
        r.q.ne[1] = r.k.ne[1] = r.v.ne[1] = r.o.ne[1] = N;
        if (do_nc && N >= Mnc) {
            int64_t wne[2] = {Mnc, Mnc}, bl[1] = {Mnc};
            la_tensor_init(&r.w, W, LA_F32, LA_DEVICE_CPU, 2, wne);
            la_mhla_init(LA_MHLA_INIT_LOCALITY, 1, bl, &r.w);
            la_mhla_params_init(&r.p);
            r.p.blocks[0] = Mnc;
            double s = time_median(run_nc, &r, cfg->min_time, &st);
            if (st != LA_OK) { rc = cli_status(st, "bench mhla"); break; }
            report(cfg, "mhla", N, Mnc, s, (double)H * (4.0 * N * D * E + 2.0 * Mnc * Mnc * D * E), NULL);
        }
        if (do_nc) cli_progress_step(&pr, 1);
        for (int general = 0; general < 2 && !rc; general++) {
            if (!do_c[general]) continue;
            const int64_t M = (N + C - 1) / C;
            causal_mixing(&r.w, W, M, general);
            la_mhla_causal_params_init(&r.cp);
            double s = time_median(run_c, &r, cfg->min_time, &st);
            const char *name = general ? "mhla-causal-w" : "mhla-causal";
            if (st != LA_OK) { rc = cli_status(st, name); break; }
            /* flops: the running-sum mixing is O(M·d·dv) and not counted */
            report(cfg, name, N, M, s,
                   (double)H * (4.0 * N * D * E + (double)N * C * (D + E) +
                                (general ? (double)M * M * D * E : 0.0)),
                   general ? "\"mixing\":\"general\"" : "\"mixing\":\"uniform_causal\"");
            cli_progress_step(&pr, 1);
        }
    }
    for (int general = 0; general < 2 && !rc; general++)
        if (do_d[general]) rc = bench_decode(cfg, &r, W, nall / C, general, q, k, v, o, dmax, &pr);
    cli_progress_end(&pr);
    la_context_destroy(r.ctx);
    free(q), free(k), free(v), free(o), free(W);
    return rc;
}
