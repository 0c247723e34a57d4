/* `longattn collapse`: the MHLA paper's global-context-collapse study
 * (docs/COLLAPSE.md). For N = nmin..nmax (powers of two) and each variant,
 * build the explicit attention map of one head on synthetic tokens with
 * structure (clusters on a 2-D map plus Gaussian tokens), and measure its
 * numerical rank (float64 SVD) and mean row entropy. Writes JSON, then a
 * PNG through scripts/plot_collapse.py (matplotlib). */
#include <errno.h>
#include <limits.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

extern char **environ;

/* ---- the token generator (documented in docs/COLLAPSE.md) --------------- */

typedef struct gen_cfg {
    int64_t clusters;     /* cluster centres on the map                  */
    double noise;         /* within-cluster spread (per coordinate)      */
    double gauss_frac;    /* fraction of tokens that are pure N(0, I)   */
    uint64_t seed;
} gen_cfg;

/* Tokens on an Hm x Wm map: `clusters` centres at uniform random map
 * positions, each with a feature centroid mu_c ~ N(0, I_d). A token belongs
 * to the nearest centre (Voronoi regions, like image segments); its feature
 * is x = mu_c + noise * xi, except a fraction gauss_frac of tokens (chosen at
 * random) that are pure Gaussian x ~ N(0, I_d). Queries and keys are two
 * independent noisy reads of x: q = x + 0.3 xi', k = x + 0.3 xi''. */
static void gen_tokens(const gen_cfg *g, int64_t Hm, int64_t Wm, int64_t d, float *q, float *k,
                       double *scratch /* clusters*(2+d) */) {
    cli_rng64 r = {g->seed * 0x100000001b3ull + (uint64_t)(Hm * Wm)};
    const int64_t C = g->clusters;
    double *pos = scratch, *mu = scratch + 2 * C;
    for (int64_t c = 0; c < C; c++) {
        pos[2 * c] = cli_rng64_uniform(&r) * (double)Hm;
        pos[2 * c + 1] = cli_rng64_uniform(&r) * (double)Wm;
        for (int64_t j = 0; j < d; j++) mu[c * d + j] = cli_rng64_normal(&r);
    }
    for (int64_t y = 0; y < Hm; y++)
        for (int64_t x = 0; x < Wm; x++) {
            const int64_t n = y * Wm + x;
            int64_t best = 0;
            double bd = INFINITY;
            for (int64_t c = 0; c < C; c++) {
                double dy = (double)y + 0.5 - pos[2 * c], dx = (double)x + 0.5 - pos[2 * c + 1];
                if (dy * dy + dx * dx < bd) { bd = dy * dy + dx * dx; best = c; }
            }
            const int gauss = cli_rng64_uniform(&r) < g->gauss_frac;
            for (int64_t j = 0; j < d; j++) {
                double xv = gauss ? cli_rng64_normal(&r) : mu[best * d + j] + g->noise * cli_rng64_normal(&r);
                q[n * d + j] = (float)(xv + 0.3 * cli_rng64_normal(&r));
                k[n * d + j] = (float)(xv + 0.3 * cli_rng64_normal(&r));
            }
        }
}

/* W[i,j] ∝ 1 − dist(i,j)/max_k dist(i,k), rows normalized (SPEC §5.3
 * `locality`, the paper's initializer), for a gh x gw block grid. Written
 * here so the study does not depend on the MHLA module's helper. */
static void locality_init(int64_t gh, int64_t gw, float *W) {
    const int64_t M = gh * gw;
    double dist[64]; /* M <= 64 in this study */
    for (int64_t i = 0; i < M; i++) {
        double yi = (double)(i / gw) + 0.5, xi = (double)(i % gw) + 0.5, mx = 0, s = 0;
        for (int64_t j = 0; j < M; j++) {
            double dy = yi - ((double)(j / gw) + 0.5), dx = xi - ((double)(j % gw) + 0.5);
            dist[j] = sqrt(dy * dy + dx * dx);
            if (dist[j] > mx) mx = dist[j];
        }
        /* in float64 throughout: the farthest block gets exactly 0, never a
         * tiny negative weight */
        for (int64_t j = 0; j < M; j++) {
            dist[j] = mx > 0 ? 1.0 - dist[j] / mx : 1.0;
            s += dist[j];
        }
        for (int64_t j = 0; j < M; j++) W[i * M + j] = (float)(dist[j] / s);
    }
}

/* ---- variants ------------------------------------------------------------ */
typedef struct variant {
    const char *name;    /* in JSON and the table */
    la_map_variant kind;
    int64_t M;           /* mhla blocks (a square block grid), else 0 */
} variant;

static const variant VARIANTS[] = {
    {"softmax", LA_MAP_SOFTMAX, 0},
    {"linear", LA_MAP_LINEAR, 0},
    {"focused-flatten", LA_MAP_FOCUSED_FLATTEN, 0},
    {"mhla-4", LA_MAP_MHLA, 4},
    {"mhla-16", LA_MAP_MHLA, 16},
    {"mhla-64", LA_MAP_MHLA, 64},
};
#define NVAR ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

static int selected(const char *list, const char *name) {
    if (!list || !*list || strcmp(list, "all") == 0) return 1;
    size_t n = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && strncmp(s, name, n) == 0) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

static int is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static int find_script(char *buf, size_t n) { return cli_find_script("plot_collapse.py", buf, n); }

/* Run /usr/bin/python3 SCRIPT JSON PNG; returns its exit status (or -1). */
static int run_plot(const char *script, const char *json, const char *png) {
    const char *py = "/usr/bin/python3";
    char *args[] = {(char *)py, (char *)script, (char *)json, (char *)png, NULL};
    pid_t pid;
    if (posix_spawn(&pid, py, NULL, NULL, args, environ) != 0) return -1;
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static const cli_opt collapse_opts[] = {
    {"nmin", CLI_OPT_VALUE, "256", "smallest sequence length (power of two, >= 64)"},
    {"nmax", CLI_OPT_VALUE, "2048", "largest sequence length (power of two, <= 8192; 4096 adds ~2 min of SVDs on 2 cores)"},
    {"d", CLI_OPT_VALUE, "64", "head dimension"},
    {"clusters", CLI_OPT_VALUE, "8", "cluster centres on the token map"},
    {"noise", CLI_OPT_VALUE, "0.5", "within-cluster spread of the features"},
    {"gauss-frac", CLI_OPT_VALUE, "0.25", "fraction of tokens that are pure Gaussian"},
    {"seed", CLI_OPT_VALUE, "1", "generator seed"},
    {"rtol", CLI_OPT_VALUE, "1e-6", "rank = #{singular values > rtol * largest}"},
    {"variants", CLI_OPT_VALUE, "all", "comma list of softmax,linear,focused-flatten,mhla-4,mhla-16,mhla-64"},
    {"json-out", CLI_OPT_VALUE, "collapse.json", "results as JSON"},
    {"png", CLI_OPT_VALUE, "collapse.png", "plot (needs matplotlib for /usr/bin/python3; 'none' skips it)"},
};

int cli_cmd_collapse(int argc, char **argv) {
    const int nopt = (int)(sizeof collapse_opts / sizeof collapse_opts[0]);
    const char *usage =
        "The MHLA paper's global-context-collapse study (docs/COLLAPSE.md): for N from\n"
        "--nmin to --nmax (powers of two) and each variant (softmax, linear, focused-flatten,\n"
        "MHLA with M = 4, 16, 64 blocks), the numerical rank (float64 SVD) and mean row\n"
        "entropy of one head's N x N attention map on clustered tokens on a 2-D map.\n"
        "Writes --json-out and a --png plot. The float64 SVD of the largest map dominates:\n"
        "the default (--nmax 2048) takes ~15 s on 2 cores; --nmax 4096 (docs/COLLAPSE.md)\n"
        "adds six 4096x4096 SVDs, ~2 min of CPU time in all.";
    cli_args a;
    int rc = cli_args_parse(collapse_opts, nopt, "collapse", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (strcmp(a.device, "cpu") != 0)
        return cli_fail("collapse: --device %s: the study runs on the host", a.device);
    int64_t nmin, nmax, d, clusters, seed;
    float noise, gfrac, rtolf;
    if (cli_args_int(&a, "nmin", &nmin) || cli_args_int(&a, "nmax", &nmax) ||
        cli_args_int(&a, "d", &d) || cli_args_int(&a, "clusters", &clusters) ||
        cli_args_int(&a, "seed", &seed) || cli_args_float(&a, "noise", &noise) ||
        cli_args_float(&a, "gauss-frac", &gfrac) || cli_args_float(&a, "rtol", &rtolf))
        return 2;
    if (!is_pow2(nmin) || nmin < 64)
        return cli_fail("--nmin %lld: expected a power of two >= 64", (long long)nmin);
    if (!is_pow2(nmax) || nmax < nmin || nmax > 8192)
        return cli_fail("--nmax %lld: expected a power of two in [--nmin, 8192] (the map is "
                           "N x N float64)", (long long)nmax);
    if (d < 1 || d > 4096) return cli_fail("--d %lld: expected 1..4096", (long long)d);
    if (clusters < 1 || clusters > 4096)
        return cli_fail("--clusters %lld: expected 1..4096", (long long)clusters);
    if (noise < 0 || gfrac < 0 || gfrac > 1 || rtolf < 0)
        return cli_fail("--noise/--gauss-frac/--rtol: expected noise >= 0, 0 <= gauss-frac <= 1, rtol >= 0");
    const char *vlist = cli_args_get(&a, "variants");
    int nsel = 0;
    for (int i = 0; i < NVAR; i++) nsel += selected(vlist, VARIANTS[i].name);
    if (nsel == 0) return cli_fail("--variants '%s': none of the known variants", vlist);
    const char *json_path = cli_args_get(&a, "json-out"), *png_path = cli_args_get(&a, "png");

    la_context *ctx = NULL;
    if (la_context_create(&ctx) != LA_OK) return cli_fail("%s", la_last_error());
    la_context_set_threads(ctx, a.threads);

    /* buffers for the largest N */
    const size_t NN = (size_t)nmax * (size_t)nmax;
    double *map = (double *)malloc(NN * sizeof(double));
    float *q = (float *)malloc((size_t)nmax * (size_t)d * sizeof(float));
    float *k = (float *)malloc((size_t)nmax * (size_t)d * sizeof(float));
    float *W = (float *)malloc(64 * 64 * sizeof(float));
    double *scratch = (double *)malloc((size_t)clusters * (size_t)(2 + d) * sizeof(double));
    cli_text jt = {NULL, NULL, NULL, NULL, -1};
    FILE *jf = NULL;
    if (!map || !q || !k || !W || !scratch) {
        rc = cli_fail("collapse: cannot allocate the %lld x %lld map", (long long)nmax, (long long)nmax);
        goto done;
    }
    if ((rc = cli_text_begin(&jt, "json-out", json_path))) goto done;
    jf = jt.f;

    gen_cfg g = {clusters, noise, gfrac, (uint64_t)seed};
    fprintf(jf, "{\n  \"study\": \"global context collapse (MHLA paper §3.2)\",\n");
    fprintf(jf, "  \"build\": \"%s\",\n  \"d\": %lld,\n  \"rtol\": %g,\n", la_build_info(),
            (long long)d, (double)rtolf);
    fprintf(jf, "  \"generator\": {\"kind\": \"clusters on a 2-D map plus Gaussian tokens\", "
                "\"clusters\": %lld, \"noise\": %g, \"gauss_frac\": %g, \"qk_noise\": 0.3, "
                "\"seed\": %lld},\n", (long long)clusters, (double)noise, (double)gfrac,
            (long long)seed);
    fprintf(jf, "  \"features\": {\"softmax\": \"scale d^-1/2\", \"linear\": \"relu\", "
                "\"focused-flatten\": \"p=3, softplus(0)\", \"mhla\": \"relu_eps, locality W, "
                "square block grid\"},\n");
    fprintf(jf, "  \"results\": [\n");

    int64_t total = 0;
    for (int64_t N = nmin; N <= nmax; N *= 2) total += (N / 64) * (N / 64) * (N / 64) * nsel;
    cli_progress pr;
    cli_progress_start(&pr, "collapse", total);
    printf("%6s  %-16s %6s %6s %9s %8s %7s\n", "N", "variant", "rank", "bound", "entropy",
           "ln N", "time");
    int first = 1;
    const double t_all = cli_now();
    for (int64_t N = nmin; N <= nmax && rc == 0; N *= 2) {
        int64_t lg = 0;
        while ((1ll << lg) < N) lg++;
        const int64_t Hm = 1ll << (lg / 2), Wm = N / Hm; /* 16x16, 16x32, 32x32, ... */
        gen_tokens(&g, Hm, Wm, d, q, k, scratch);
        la_tensor tq, tk, tm, tw;
        int64_t neq[2] = {N, d}, nem[2] = {N, N};
        la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 2, neq);
        la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, neq);
        la_tensor_init(&tm, map, LA_F64, LA_DEVICE_CPU, 2, nem);
        for (int vi = 0; vi < NVAR && rc == 0; vi++) {
            const variant *v = &VARIANTS[vi];
            if (!selected(vlist, v->name)) continue;
            const double t0 = cli_now();
            la_attn_map_params p;
            la_attn_map_params_init(&p);
            p.variant = v->kind;
            int64_t bound = N;
            if (v->kind == LA_MAP_LINEAR) {
                p.feature = LA_FEATURE_RELU;
                bound = d < N ? d : N;
            } else if (v->kind == LA_MAP_FOCUSED_FLATTEN) {
                bound = d < N ? d : N;
            } else if (v->kind == LA_MAP_MHLA) {
                const int64_t gb = v->M == 4 ? 2 : v->M == 16 ? 4 : 8;
                p.feature = LA_FEATURE_RELU_EPS;
                p.mhla.grid_ndim = 2;
                p.mhla.grid[0] = Hm;
                p.mhla.grid[1] = Wm;
                p.mhla.blocks[0] = gb;
                p.mhla.blocks[1] = gb;
                locality_init(gb, gb, W);
                int64_t nem2[2] = {v->M, v->M};
                la_tensor_init(&tw, W, LA_F32, LA_DEVICE_CPU, 2, nem2);
                /* sum over blocks of min(n_b, d): equal blocks here */
                int64_t nb = N / v->M;
                bound = v->M * (nb < d ? nb : d);
            }
            la_status s = la_attention_map(&p, &tq, &tk, v->kind == LA_MAP_MHLA ? &tw : NULL, NULL,
                                           &tm, ctx);
            int64_t rank = -1;
            double ent = NAN;
            if (s == LA_OK) s = la_map_rank_entropy(&tm, rtolf, &rank, &ent);
            if (s != LA_OK) {
                cli_progress_end(&pr);
                rc = cli_status(s, "collapse");
                break;
            }
            const double dt = cli_now() - t0;
            cli_progress_step(&pr, (N / 64) * (N / 64) * (N / 64));
            /* the progress line shares the terminal: print the row after it */
            if (pr.shown && isatty(2)) fprintf(stderr, "\r%80s\r", "");
            printf("%6lld  %-16s %6lld %6lld %9.4f %8.4f %6.1fs\n", (long long)N, v->name,
                   (long long)rank, (long long)bound, ent, log((double)N), dt);
            fflush(stdout);
            char ebuf[32];
            if (isfinite(ent)) snprintf(ebuf, sizeof ebuf, "%.6f", ent);
            else snprintf(ebuf, sizeof ebuf, "null"); /* JSON has no NaN */
            fprintf(jf, "%s    {\"N\": %lld, \"map\": \"%lldx%lld\", \"variant\": \"%s\", "
                        "\"M\": %lld, \"rank\": %lld, \"rank_bound\": %lld, \"entropy\": %s, "
                        "\"ln_N\": %.6f, \"seconds\": %.3f}",
                    first ? "" : ",\n", (long long)N, (long long)Hm, (long long)Wm, v->name,
                    (long long)v->M, (long long)rank, (long long)bound, ebuf, log((double)N), dt);
            first = 0;
        }
    }
    cli_progress_end(&pr);
    if (rc) goto done;
    fprintf(jf, "\n  ],\n  \"seconds_total\": %.2f\n}\n", cli_now() - t_all);
    jf = NULL;
    if ((rc = cli_text_commit(&jt))) goto done;
    printf("wrote %s (%.1fs)\n", json_path, cli_now() - t_all);
    fflush(stdout);

    if (strcmp(png_path, "none") != 0) {
        char script[PATH_MAX + 64];
        if (!find_script(script, sizeof script)) {
            fprintf(stderr, "longattn: note: scripts/plot_collapse.py not found; no plot (the "
                            "JSON is written)\n");
        } else {
            int prc = run_plot(script, json_path, png_path);
            if (prc == 0) printf("wrote %s\n", png_path);
            else if (prc == 3)
                fprintf(stderr, "longattn: note: matplotlib is missing for /usr/bin/python3 "
                                "(apt-get install python3-matplotlib); no plot, the JSON is written\n");
            else
                fprintf(stderr, "longattn: note: the plot script failed (exit %d); the JSON is "
                                "written\n", prc);
        }
    }
done:
    cli_text_abort(&jt);
    free(map); free(q); free(k); free(W); free(scratch);
    la_context_destroy(ctx);
    return rc;
}
