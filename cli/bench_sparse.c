/* `longattn bench` family for the sparse operators (SPEC §6–§8), fp32, at
 * L = nmin..nmax (powers of two), DeepSeek-V3.2-like shapes fixed here
 * (cfg->D and cfg->H belong to the dense families):
 *   dsa, hisa, blocksparse: T = 256 queries at the end of an L-token prefix
 *       (bottom-right causal: a chunked-prefill step), HI = 64, dI = 128,
 *       topk = 2048, HISA B = 128, m = 64 (block-sparse: 16 blocks);
 *   topk: 256 rows of L N(0,1) fp32 scores, k = 2048;
 *   sparse-attn: T = 64 queries, Hq = 16 heads sharing one latent entry per
 *       key (MQA mode of MLA), Dqk = 576, dv = 512, 2048 indices per query.
 * Medians over repeats lasting cfg->min_time (at least 3, unless one call
 * takes over 2 s). The first row is the sgemm peak measured as in the dense
 * family (each thread its own single-threaded 1024³ la_sgemm).
 *
 * FLOP counts (multiply-adds x 2; ReLU, exp, selection not counted):
 *   dsa:          2·HI·dI·P,  P = Σ_t (valid keys of query t)
 *   hisa:         2·HI·dI·(Σ_t blocks meeting the range + Σ_t candidate tokens)
 *   blocksparse:  2·HI·dI·Σ_t blocks meeting the range
 *   sparse-attn:  2·T·Hq·k·(Dqk + dv) */
#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"


/* Roughly N(0,1) scores (sum of 4 uniforms), as torch.randn rows. */
static void fill_normal(float *x, size_t n, uint64_t seed) {
    float *u = malloc(sizeof(float) * 4096);
    for (size_t i = 0; i < n; i += 1024) {
        const size_t m = n - i < 1024 ? n - i : 1024;
        cli_bench_fill(u, 4 * m, seed + i);
        for (size_t j = 0; j < m; j++) x[i + j] = (u[4 * j] + u[4 * j + 1] + u[4 * j + 2] + u[4 * j + 3]) * 0.866f;
    }
    free(u);
}

enum { OP_DSA, OP_HISA, OP_BLOCKSPARSE, OP_TOPK, OP_SATTN, NOPS };
static const char *op_names[NOPS] = {"dsa", "hisa", "blocksparse", "topk", "sparse-attn"};

typedef struct bench_in {
    la_tensor q, k, w, idx, scores, sq, skv, sidx, sout;
    la_index_params p;
    la_context *ctx;
} bench_in;

static la_status run_once(int op, bench_in *b) {
    switch (op) {
    case OP_DSA: return la_dsa_indexer(&b->p, &b->q, &b->k, &b->w, NULL, NULL, &b->idx, NULL, b->ctx);
    case OP_HISA: return la_hisa_indexer(&b->p, &b->q, &b->k, &b->w, NULL, NULL, &b->idx, b->ctx);
    case OP_BLOCKSPARSE: return la_blocksparse_indexer(&b->p, &b->q, &b->k, &b->w, NULL, NULL, &b->idx, b->ctx);
    case OP_TOPK: return la_topk(&b->scores, &b->idx, b->ctx);
    default: {
        la_sparse_attn_params sp;
        la_sparse_attn_params_init(&sp);
        return la_sparse_attention(&sp, &b->sq, &b->skv, &b->sidx, &b->sout, NULL, b->ctx);
    }
    }
}

typedef struct timed_call {
    int op;
    bench_in *b;
} timed_call;

static la_status call_op(void *arg) {
    const timed_call *c = (const timed_call *)arg;
    return run_once(c->op, c->b);
}

static double time_median(int op, bench_in *b, double min_time, int *reps, la_status *st) {
    timed_call c = {op, b};
    return cli_bench_time_median(call_op, &c, min_time, reps, st);
}


int cli_bench_sparse(const cli_bench_cfg *cfg) {
    int sel[NOPS], any = 0;
    for (int i = 0; i < NOPS; i++) any |= sel[i] = cli_bench_selected(cfg, op_names[i]);
    if (!any) return 0;
    const int64_t T = 256, HI = 64, dI = 128, K = 2048, B = 128, M = 64;
    const int64_t R = 256;                                   /* top-k rows */
    const int64_t Ta = 64, Hq = 16, Dqk = 576, dv = 512;     /* sparse attention */

    bench_in b;
    memset(&b, 0, sizeof b);
    if (la_context_create(&b.ctx) != LA_OK) return cli_status(LA_ERR_NOMEM, "bench sparse");
    la_context_set_threads(b.ctx, cfg->threads);
    int threads = 1;
    la_context_get_threads(b.ctx, &threads);
    la_index_params_init(&b.p);
    b.p.topk = K;
    b.p.block = B;
    b.p.block_topk = M;

    int steps = 1;
    for (int64_t N = cfg->nmin; N <= cfg->nmax; N *= 2)
        for (int i = 0; i < NOPS; i++) steps += sel[i];
    cli_progress pr;
    cli_progress_start(&pr, "bench sparse", steps);
    const double peak = cli_bench_sgemm_peak(threads, cfg->min_time);
    cli_progress_clear(&pr);
    if (cfg->json)
        fprintf(cfg->out, "{\"op\":\"sgemm_peak\",\"M\":1024,\"N\":1024,\"K\":1024,\"threads\":%d,\"gflops\":%.3f,"
                "\"blas\":\"%s\"}\n", threads, peak, cli_blas_name());
    else
        fprintf(cfg->out,
                "-- sparse family (SPEC §6-§8), fp32, threads=%d: indexers T=%lld HI=%lld dI=%lld topk=%lld "
                "(HISA B=%lld m=%lld); topk %lld rows k=%lld; sparse-attn T=%lld Hq=%lld Dqk=%lld dv=%lld k=%lld\n"
                "%-12s 1024^3 on each of %d thread(s) (%s)  %8.2f GFLOP/s\n",
                threads, (long long)T, (long long)HI, (long long)dI, (long long)K, (long long)B, (long long)M,
                (long long)R, (long long)K, (long long)Ta, (long long)Hq, (long long)Dqk, (long long)dv, (long long)K,
                "sgemm_peak", threads, cli_blas_name(), peak);
    fflush(cfg->out);
    cli_progress_step(&pr, 1);

    const int64_t Lmax = cfg->nmax;
    const size_t nq = (size_t)(T * HI * dI), nk = (size_t)Lmax * (size_t)dI, nw = (size_t)(T * HI);
    const size_t nsc = (size_t)R * (size_t)Lmax, nsq = (size_t)(Ta * Hq * Dqk), nkv = (size_t)Lmax * (size_t)Dqk;
    const int need_idx = sel[OP_DSA] || sel[OP_HISA] || sel[OP_BLOCKSPARSE];
    float *q = need_idx ? malloc(nq * 4) : NULL, *k = need_idx ? malloc(nk * 4) : NULL, *w = need_idx ? malloc(nw * 4) : NULL;
    float *sc = sel[OP_TOPK] ? malloc(nsc * 4) : NULL;
    float *sq = sel[OP_SATTN] ? malloc(nsq * 4) : NULL, *skv = sel[OP_SATTN] ? malloc(nkv * 4) : NULL;
    float *so = sel[OP_SATTN] ? malloc((size_t)(Ta * Hq * dv) * 4) : NULL;
    int32_t *idx = malloc((size_t)(R > T ? R : T) * (size_t)K * 4), *sidx = sel[OP_SATTN] ? malloc((size_t)(Ta * K) * 4) : NULL;
    int rc = 0;
    if ((need_idx && (!q || !k || !w)) || (sel[OP_TOPK] && !sc) || (sel[OP_SATTN] && (!sq || !skv || !so || !sidx)) || !idx)
        rc = cli_fail("bench sparse: out of memory for L=%lld", (long long)Lmax);
    if (!rc) {
        if (q) cli_bench_fill(q, nq, 1), cli_bench_fill(k, nk, 2), cli_bench_fill(w, nw, 3);
        if (sc) fill_normal(sc, nsc, 4);
        if (sq) cli_bench_fill(sq, nsq, 5), cli_bench_fill(skv, nkv, 6);
    }
    double dsa_ms = 0;
    for (int64_t L = cfg->nmin; L <= cfg->nmax && !rc; L *= 2) {
        int64_t qn[3] = {T, HI, dI}, kn[2] = {L, dI}, wn[2] = {T, HI}, in[2] = {T, K}, rn[2] = {R, L}, rin[2] = {R, K};
        int64_t sqn[3] = {Ta, Hq, Dqk}, skn[2] = {L, Dqk}, sin_[2] = {Ta, K}, son[3] = {Ta, Hq, dv};
        if (q) {
            la_tensor_init(&b.q, q, LA_F32, LA_DEVICE_CPU, 3, qn);
            la_tensor_init(&b.k, k, LA_F32, LA_DEVICE_CPU, 2, kn);
            la_tensor_init(&b.w, w, LA_F32, LA_DEVICE_CPU, 2, wn);
        }
        if (sc) la_tensor_init(&b.scores, sc, LA_F32, LA_DEVICE_CPU, 2, rn);
        if (sq) {
            la_tensor_init(&b.sq, sq, LA_F32, LA_DEVICE_CPU, 3, sqn);
            la_tensor_init(&b.skv, skv, LA_F32, LA_DEVICE_CPU, 2, skn);
            la_tensor_init(&b.sidx, sidx, LA_I32, LA_DEVICE_CPU, 2, sin_);
            la_tensor_init(&b.sout, so, LA_F32, LA_DEVICE_CPU, 3, son);
            uint64_t s = 99; /* distinct-ish random keys of the prefix */
            for (int64_t i = 0; i < Ta * K; i++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                sidx[i] = (int32_t)(s % (uint64_t)L);
            }
        }
        /* visible keys / blocks / candidates, for the FLOP counts */
        double pairs = 0, blocks = 0, cands = 0;
        for (int64_t t = 0; t < T; t++) {
            int64_t e = L - T + t + 1;
            if (e < 0) e = 0;
            const int64_t nb = (e + B - 1) / B;
            pairs += (double)e;
            blocks += (double)nb;
            cands += (double)(nb <= M ? e : M * B);
        }
        for (int op = 0; op < NOPS && !rc; op++) {
            if (!sel[op]) continue;
            la_tensor_init(&b.idx, idx, LA_I32, LA_DEVICE_CPU, 2, op == OP_TOPK ? rin : in);
            int reps = 0;
            la_status st;
            const double s = time_median(op, &b, cfg->min_time, &reps, &st);
            if (st != LA_OK) {
                rc = cli_status(st, op_names[op]);
                break;
            }
            double flops = 0;
            if (op == OP_DSA) flops = 2.0 * HI * dI * pairs;
            if (op == OP_HISA) flops = 2.0 * HI * dI * (blocks + cands);
            if (op == OP_BLOCKSPARSE) flops = 2.0 * HI * dI * blocks;
            if (op == OP_SATTN) flops = 2.0 * Ta * Hq * (double)K * (double)(Dqk + dv);
            if (op == OP_DSA) dsa_ms = s * 1e3;
            const double gf = flops / s * 1e-9;
            const int64_t rows = op == OP_TOPK ? R : (op == OP_SATTN ? Ta : T);
            const double vs_dsa = (op == OP_HISA || op == OP_BLOCKSPARSE) && sel[OP_DSA] && dsa_ms > 0 ? dsa_ms / (s * 1e3) : 0;
            cli_progress_clear(&pr);
            if (cfg->json)
                fprintf(cfg->out, "{\"op\":\"%s\",\"L\":%lld,\"rows\":%lld,\"threads\":%d,\"ms\":%.4f,"
                        "\"us_per_row\":%.3f,\"gflops\":%.3f,\"pct_peak\":%.2f,\"speedup_vs_dsa\":%.3f,\"repeats\":%d}\n",
                        op_names[op], (long long)L, (long long)rows, threads, s * 1e3, s * 1e6 / (double)rows, gf,
                        peak > 0 && flops > 0 ? 100 * gf / peak : 0, vs_dsa, reps);
            else {
                fprintf(cfg->out, "%-12s L=%-7lld %11.3f ms %10.2f us/%s", op_names[op], (long long)L, s * 1e3,
                        s * 1e6 / (double)rows, op == OP_TOPK ? "row  " : "query");
                if (flops > 0) fprintf(cfg->out, " %8.2f GFLOP/s %5.1f%% of peak", gf, peak > 0 ? 100 * gf / peak : 0);
                if (vs_dsa > 0) fprintf(cfg->out, "  %.2fx faster than dsa", vs_dsa);
                fprintf(cfg->out, "\n");
            }
            fflush(cfg->out);
            cli_progress_step(&pr, 1);
        }
    }
    cli_progress_end(&pr);
    free(q), free(k), free(w), free(sc), free(sq), free(skv), free(so), free(idx), free(sidx);
    la_context_destroy(b.ctx);
    return rc;
}
