/* `longattn serve-sim`: a simulated decode of a batch of sequences whose
 * contexts grow from --ctx-start to --ctx-end tokens in a paged indexer key
 * cache (docs/SPARSE.md "Paged serving"). At each measured context the
 * per-step time of la_hisa_topk_paged and la_dsa_topk_paged (next_n query
 * rows per sequence, median of --reps) is printed, with the overlap of the
 * two selections. Between measured points the keys of the tokens decoded
 * meanwhile are appended in chunks (the selection of the intermediate steps
 * is not computed). Keys and queries are random normal; the page table is
 * shuffled. Output: a table (the progress bar on stderr is cleared before
 * each row), --json-out FILE, --png FILE (scripts/plot_serve_sim.py).
 * --device cuda: the cache and the calls' tensors live on the GPU. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

/* Device memory through the CLI's runtime staging (cli/cli_devmem.c); a
 * failure prints the runtime's message. */
#define SIM_TRY(x) do { la_status st_ = (x); if (st_ != LA_OK) return st_; } while (0)
static la_status sim_said(la_status s, const char *m) {
    if (s != LA_OK) fprintf(stderr, "longattn serve-sim: %s\n", m);
    return s;
}
static la_status sim_dev_malloc(void **p, size_t b) {
    char m[256];
    return sim_said(cli_dev_malloc(p, b, m, sizeof m), m);
}
static la_status sim_dev_upload(void *d, const void *s, size_t b) {
    char m[256];
    return sim_said(cli_dev_upload(d, s, b, m, sizeof m), m);
}
static la_status sim_dev_download(void *d, const void *s, size_t b) {
    char m[256];
    return sim_said(cli_dev_download(d, s, b, m, sizeof m), m);
}
static la_status sim_dev_synchronize(void) {
    char m[256];
    return sim_said(cli_dev_synchronize(m, sizeof m), m);
}
static int sim_threads(la_context *ctx) {
    int t = 0;
    la_context_get_threads(ctx, &t);
    return t;
}

static const cli_opt serve_opts[] = {
    {"batch", CLI_OPT_VALUE, "4", "sequences decoded together"},
    {"ctx-start", CLI_OPT_VALUE, "8192", "context of every sequence at the first measured step"},
    {"ctx-end", CLI_OPT_VALUE, "131072", "context at the last measured step"},
    {"points", CLI_OPT_VALUE, "5", "measured contexts (geometric from ctx-start to ctx-end)"},
    {"next-n", CLI_OPT_VALUE, "1", "query tokens per sequence per step (MTP)"},
    {"hi", CLI_OPT_VALUE, "16", "indexer heads HI"},
    {"di", CLI_OPT_VALUE, "128", "indexer head dim dI"},
    {"topk", CLI_OPT_VALUE, "2048", "tokens selected per query"},
    {"block", CLI_OPT_VALUE, "128", "HISA block B (pooled in the cache)"},
    {"block-topk", CLI_OPT_VALUE, "64", "HISA blocks kept m"},
    {"dtype", CLI_OPT_VALUE, "fp8_e4m3", "cache dtype: fp8_e4m3, bf16 or f32"},
    {"reps", CLI_OPT_VALUE, "3", "timed steps per point (median)"},
    {"seed", CLI_OPT_VALUE, "18", "random seed"},
    {"json-out", CLI_OPT_VALUE, NULL, "write the results as JSON to FILE"},
    {"png", CLI_OPT_VALUE, NULL, "plot to FILE (needs --json-out and matplotlib)"},
};

static int find_script(char *buf, size_t n) {
    if (access("scripts/plot_serve_sim.py", R_OK) == 0) {
        snprintf(buf, n, "scripts/plot_serve_sim.py");
        return 1;
    }
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len <= 0) return 0;
    exe[len] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash) return 0;
    *slash = '\0';
    snprintf(buf, n, "%s/../scripts/plot_serve_sim.py", exe);
    return access(buf, R_OK) == 0;
}

typedef struct sim {
    int64_t batch, dI, maxp, block;
    int32_t *table;   /* [batch][maxp] */
    int32_t *lens;    /* [batch] */
    float *k;         /* chunk buffer [chunk][dI] */
    int32_t *sl, *sq, *ps;
    int64_t chunk;
    cli_rng64 rng;
    la_device dev;    /* where the cache and the call's tensors live */
    void *dk, *dmeta; /* CUDA: device copies of k and sl|sq|ps */
} sim;

/* Append tokens so that every sequence reaches `target`. */
static la_status grow(sim *S, la_paged_index_cache *c, int64_t target, la_context *ctx) {
    for (;;) {
        int64_t n = 0;
        for (int64_t s = 0; s < S->batch && n < S->chunk; s++)
            while (S->lens[s] < target && n < S->chunk) {
                const int64_t pos = S->lens[s]++;
                for (int64_t d = 0; d < S->dI; d++) S->k[n * S->dI + d] = (float)cli_rng64_normal(&S->rng);
                S->sl[n] = (int32_t)((int64_t)S->table[s * S->maxp + pos / 64] * 64 + pos % 64);
                S->sq[n] = (int32_t)s;
                S->ps[n] = (int32_t)pos;
                n++;
            }
        if (n == 0) return LA_OK;
        la_tensor tk, ts, tq, tp;
        const int64_t kne[2] = {n, S->dI};
        float *k = S->k;
        int32_t *sl = S->sl, *sq = S->sq, *ps = S->ps;
        if (S->dev == LA_DEVICE_CUDA) {
            SIM_TRY(sim_dev_upload(S->dk, S->k, sizeof(float) * (size_t)(n * S->dI)));
            SIM_TRY(sim_dev_upload(S->dmeta, S->sl, sizeof(int32_t) * (size_t)S->chunk * 3));
            k = S->dk;
            sl = S->dmeta;
            sq = sl + S->chunk;
            ps = sq + S->chunk;
        }
        la_tensor_init(&tk, k, LA_F32, S->dev, 2, kne);
        la_tensor_init(&ts, sl, LA_I32, S->dev, 1, &n);
        la_tensor_init(&tq, sq, LA_I32, S->dev, 1, &n);
        la_tensor_init(&tp, ps, LA_I32, S->dev, 1, &n);
        SIM_TRY(la_paged_index_cache_append(c, &tk, &ts, &tq, &tp, ctx));
    }
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int cli_cmd_serve_sim(int argc, char **argv) {
    const int nspec = (int)(sizeof serve_opts / sizeof serve_opts[0]);
    cli_args a;
    int rc = cli_args_parse(serve_opts, nspec, "serve-sim",
                           "Simulated batched decode over a paged fp8 indexer key cache: per-step time of "
                           "HISA paged (pooled block keys kept in the cache) against DSA paged as the "
                           "contexts grow.",
                           argc, argv, &a);
    if (rc == 1) return 0;
    if (rc) return rc;
    int64_t batch, c0, c1, points, nn, HI, dI, topk, B, m, reps, seed;
    if (cli_args_int(&a, "batch", &batch) || cli_args_int(&a, "ctx-start", &c0) || cli_args_int(&a, "ctx-end", &c1) ||
        cli_args_int(&a, "points", &points) || cli_args_int(&a, "next-n", &nn) || cli_args_int(&a, "hi", &HI) ||
        cli_args_int(&a, "di", &dI) || cli_args_int(&a, "topk", &topk) || cli_args_int(&a, "block", &B) ||
        cli_args_int(&a, "block-topk", &m) || cli_args_int(&a, "reps", &reps) || cli_args_int(&a, "seed", &seed))
        return 2;
    if (batch < 1 || batch > 4096) return cli_fail("--batch: %lld, must be in 1..4096", (long long)batch);
    if (c0 < 1 || c1 < c0 || c1 > (1 << 24))
        return cli_fail("--ctx-start/--ctx-end: need 1 <= %lld <= %lld <= 16777216", (long long)c0, (long long)c1);
    if (points < 1 || points > 64) return cli_fail("--points: %lld, must be in 1..64", (long long)points);
    if (nn < 1 || nn > c0) return cli_fail("--next-n: %lld, must be in 1..ctx-start", (long long)nn);
    if (HI < 1 || HI > 1024 || dI < 1 || dI > 4096) return cli_fail("--hi/--di: out of range (1..1024, 1..4096)");
    if (topk < 1 || B < 1 || m < 1) return cli_fail("--topk, --block, --block-topk must be positive");
    if (reps < 1 || reps > 100) return cli_fail("--reps: %lld, must be in 1..100", (long long)reps);
    const char *dts = cli_args_get(&a, "dtype");
    la_dtype dt;
    if (strcmp(dts, "fp8_e4m3") == 0) dt = LA_FP8_E4M3;
    else if (strcmp(dts, "bf16") == 0) dt = LA_BF16;
    else if (strcmp(dts, "f32") == 0) dt = LA_F32;
    else return cli_fail("--dtype '%s': expected fp8_e4m3, bf16 or f32", dts);
    const char *json_path = cli_args_get(&a, "json-out"), *png = cli_args_get(&a, "png");
    if (png && !json_path) return cli_fail("--png needs --json-out (the plot script reads the JSON)");

    cli_state c;
    if ((rc = cli_begin(&c, &a))) return rc;
    sim S = {0};
    void *dq = NULL, *dw = NULL, *dbt = NULL, *dcl = NULL, *did = NULL, *dih = NULL; /* CUDA twins */
    S.batch = batch;
    S.dI = dI;
    S.block = B;
    S.maxp = (c1 + 63) / 64;
    S.chunk = 4096;
    S.rng.s = (uint64_t)seed;
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = batch * S.maxp;
    cp.head_dim = dI;
    cp.dtype = dt;
    cp.block = B;
    cp.max_seqs = batch;
    cp.max_seq_len = c1;
    S.dev = c.device;
    cp.device = c.device;
    la_paged_index_cache *cache = NULL;
    la_status st = la_paged_index_cache_create(&cp, &cache);
    if (st != LA_OK) return cli_end(&c, cli_status(st, "serve-sim: cache"));
    const int64_t T = batch * nn;
    S.table = malloc(sizeof(int32_t) * (size_t)(batch * S.maxp));
    S.lens = calloc((size_t)batch, sizeof(int32_t));
    S.k = malloc(sizeof(float) * (size_t)(S.chunk * dI));
    S.sl = malloc(sizeof(int32_t) * (size_t)S.chunk * 3);
    float *q = malloc(sizeof(float) * (size_t)(T * HI * dI)), *w = malloc(sizeof(float) * (size_t)(T * HI));
    int32_t *idx_d = malloc(sizeof(int32_t) * (size_t)(T * topk)), *idx_h = malloc(sizeof(int32_t) * (size_t)(T * topk));
    double *res = malloc(sizeof(double) * (size_t)points * 4);
    if (!S.table || !S.lens || !S.k || !S.sl || !q || !w || !idx_d || !idx_h || !res) {
        rc = cli_fail("serve-sim: out of memory");
        goto done;
    }
    S.sq = S.sl + S.chunk;
    S.ps = S.sq + S.chunk;
    /* CUDA: device twins of the host buffers (q, w, table, lens, the two idx) */
    if (S.dev == LA_DEVICE_CUDA &&
        (sim_dev_malloc(&S.dk, sizeof(float) * (size_t)(S.chunk * dI)) || sim_dev_malloc(&S.dmeta, 12u * (size_t)S.chunk) ||
         sim_dev_malloc(&dq, sizeof(float) * (size_t)(T * HI * dI)) || sim_dev_malloc(&dw, sizeof(float) * (size_t)(T * HI)) ||
         sim_dev_malloc(&dbt, 4u * (size_t)(batch * S.maxp)) || sim_dev_malloc(&dcl, 4u * (size_t)batch) ||
         sim_dev_malloc(&did, 4u * (size_t)(T * topk)) || sim_dev_malloc(&dih, 4u * (size_t)(T * topk)))) {
        rc = cli_fail("--device cuda: %s", la_last_error());
        goto done;
    }
    { /* a shuffled page pool */
        const int64_t np = batch * S.maxp;
        for (int64_t i = 0; i < np; i++) S.table[i] = (int32_t)i;
        for (int64_t i = np - 1; i > 0; i--) {
            const int64_t j = (int64_t)(cli_rng64_uniform(&S.rng) * (double)(i + 1));
            const int32_t t = S.table[i];
            S.table[i] = S.table[j];
            S.table[j] = t;
        }
    }
    const double wscale = 1.0 / sqrt((double)dI * (double)HI);
    la_tensor tq, tw, tbt, tcl, tid, tih;
    const int64_t qne[3] = {T, HI, dI}, wne[2] = {T, HI}, btne[2] = {batch, S.maxp}, ine[2] = {T, topk};
    const int cu = S.dev == LA_DEVICE_CUDA;
    la_tensor_init(&tq, cu ? dq : q, LA_F32, S.dev, 3, qne);
    la_tensor_init(&tw, cu ? dw : w, LA_F32, S.dev, 2, wne);
    la_tensor_init(&tbt, cu ? dbt : S.table, LA_I32, S.dev, 2, btne);
    la_tensor_init(&tcl, cu ? dcl : S.lens, LA_I32, S.dev, 1, &batch);
    la_tensor_init(&tid, cu ? did : idx_d, LA_I32, S.dev, 2, ine);
    la_tensor_init(&tih, cu ? dih : idx_h, LA_I32, S.dev, 2, ine);
    if (cu && sim_dev_upload(dbt, S.table, 4u * (size_t)(batch * S.maxp)) != LA_OK) {
        rc = cli_fail("--device cuda: %s", la_last_error());
        goto done;
    }
    la_paged_query pq;
    la_paged_query_init(&pq);
    pq.block_table = &tbt;
    pq.context_lens = &tcl;
    pq.next_n = nn;
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = topk;
    ip.block = B;
    ip.block_topk = m;
    printf("serve-sim: batch %lld, next_n %lld, HI %lld, dI %lld, topk %lld, HISA B=%lld m=%lld, cache %s "
           "(%lld pages of 64), threads %d\n",
           (long long)batch, (long long)nn, (long long)HI, (long long)dI, (long long)topk, (long long)B, (long long)m,
           dts, (long long)cp.num_pages, sim_threads(c.ctx));
    printf("%10s %12s %12s %9s %9s\n", "context", "dsa ms/step", "hisa ms/step", "speedup", "overlap");
    fflush(stdout);
    cli_progress pg;
    cli_progress_start(&pg, "serve-sim", points * (2 * reps + 1));
    for (int64_t pi = 0; pi < points; pi++) {
        const double f = points > 1 ? (double)pi / (double)(points - 1) : 1.0;
        const int64_t ctxlen = (int64_t)llround((double)c0 * pow((double)c1 / (double)c0, f));
        st = grow(&S, cache, ctxlen, c.ctx);
        cli_progress_step(&pg, 1);
        if (st != LA_OK) {
            rc = cli_status(st, "serve-sim: append");
            goto done;
        }
        double td[100], th[100];
        for (int64_t r = 0; r < reps; r++) {
            for (int64_t i = 0; i < T * HI * dI; i++) q[i] = (float)cli_rng64_normal(&S.rng);
            for (int64_t i = 0; i < T * HI; i++) w[i] = (float)(cli_rng64_uniform(&S.rng) * wscale);
            if (cu) {
                st = sim_dev_upload(dq, q, sizeof(float) * (size_t)(T * HI * dI));
                if (st == LA_OK) st = sim_dev_upload(dw, w, sizeof(float) * (size_t)(T * HI));
                if (st == LA_OK) st = sim_dev_upload(dcl, S.lens, 4u * (size_t)batch);
                if (st != LA_OK) {
                    rc = cli_status(st, "serve-sim: upload");
                    goto done;
                }
            }
            double t0 = cli_now();
            st = la_dsa_topk_paged(&ip, &tq, &tw, cache, &pq, &tid, c.ctx);
            if (st == LA_OK && cu) st = sim_dev_synchronize();
            td[r] = cli_now() - t0;
            cli_progress_step(&pg, 1);
            if (st == LA_OK) {
                t0 = cli_now();
                st = la_hisa_topk_paged(&ip, &tq, &tw, cache, &pq, &tih, c.ctx);
                if (st == LA_OK && cu) st = sim_dev_synchronize();
                th[r] = cli_now() - t0;
                cli_progress_step(&pg, 1);
            }
            if (st != LA_OK) {
                rc = cli_status(st, "serve-sim: indexer");
                goto done;
            }
        }
        /* overlap of the last step's selections */
        if (cu && (sim_dev_download(idx_d, did, 4u * (size_t)(T * topk)) != LA_OK ||
                   sim_dev_download(idx_h, dih, 4u * (size_t)(T * topk)) != LA_OK)) {
            rc = cli_fail("--device cuda: %s", la_last_error());
            goto done;
        }
        int64_t hit = 0, tot = 0;
        for (int64_t t = 0; t < T; t++) {
            const int32_t *a1 = idx_d + t * topk, *a2 = idx_h + t * topk;
            for (int64_t i = 0; i < topk; i++) {
                if (a1[i] < 0) continue;
                tot++;
                for (int64_t j = 0; j < topk; j++)
                    if (a2[j] == a1[i]) {
                        hit++;
                        break;
                    }
            }
        }
        qsort(td, (size_t)reps, sizeof(double), cmp_d);
        qsort(th, (size_t)reps, sizeof(double), cmp_d);
        res[pi * 4 + 0] = (double)ctxlen;
        res[pi * 4 + 1] = td[reps / 2] * 1e3;
        res[pi * 4 + 2] = th[reps / 2] * 1e3;
        res[pi * 4 + 3] = tot ? (double)hit / (double)tot : 1.0;
        if (isatty(2)) fprintf(stderr, "\r\033[K"); /* clear the bar before the row */
        printf("%10lld %12.2f %12.2f %8.2fx %9.3f\n", (long long)ctxlen, res[pi * 4 + 1], res[pi * 4 + 2],
               res[pi * 4 + 1] / res[pi * 4 + 2], res[pi * 4 + 3]);
        fflush(stdout);
    }
    if (isatty(2)) fprintf(stderr, "\r\033[K");
    if (json_path) {
        cli_text jt;
        if ((rc = cli_text_begin(&jt, "json-out", json_path))) goto done;
        FILE *fj = jt.f;
        fprintf(fj, "{\"tool\": \"longattn serve-sim\", \"build\": \"%s\", \"device\": \"%s\", \"threads\": %d,\n",
                la_build_info(), cu ? "cuda" : "cpu", sim_threads(c.ctx));
        fprintf(fj, " \"batch\": %lld, \"next_n\": %lld, \"HI\": %lld, \"dI\": %lld, \"topk\": %lld, \"block\": %lld, "
                    "\"block_topk\": %lld, \"dtype\": \"%s\", \"reps\": %lld,\n \"steps\": [",
                (long long)batch, (long long)nn, (long long)HI, (long long)dI, (long long)topk, (long long)B,
                (long long)m, dts, (long long)reps);
        for (int64_t pi = 0; pi < points; pi++)
            fprintf(fj, "%s\n  {\"context\": %lld, \"dsa_ms\": %.4f, \"hisa_ms\": %.4f, \"overlap\": %.4f}",
                    pi ? "," : "", (long long)res[pi * 4], res[pi * 4 + 1], res[pi * 4 + 2], res[pi * 4 + 3]);
        fprintf(fj, "\n]}\n");
        if ((rc = cli_text_commit(&jt))) goto done;
        printf("wrote %s\n", json_path);
        if (png) {
            char script[4200];
            if (!find_script(script, sizeof script)) {
                printf("plot script scripts/plot_serve_sim.py not found; run it by hand: "
                       "/usr/bin/python3 scripts/plot_serve_sim.py %s %s\n", json_path, png);
            } else {
                fflush(stdout);
                pid_t pid = fork();
                int status = -1;
                if (pid == 0) {
                    char *args[] = {"/usr/bin/python3", script, (char *)json_path, (char *)png, NULL};
                    execv(args[0], args);
                    _exit(127);
                }
                if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
                    rc = cli_fail("--png: /usr/bin/python3 %s %s %s failed", script, json_path, png);
            }
        }
    }
done:
    if (S.dev == LA_DEVICE_CUDA) {
        void *dv[8] = {S.dk, S.dmeta, dq, dw, dbt, dcl, did, dih};
        for (int i = 0; i < 8; i++)
            if (dv[i]) cli_dev_free(dv[i]);
    }
    la_paged_index_cache_destroy(cache);
    free(S.table); free(S.lens); free(S.k); free(S.sl);
    free(q); free(w); free(idx_d); free(idx_h); free(res);
    return cli_end(&c, rc);
}
