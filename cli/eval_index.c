/* `longattn eval-index`: the selection study of HISA against the flat DSA
 * indexer and the block-sparse baseline, on synthetic long-context indexer
 * inputs (or on real indexer activations given as .npy).
 *
 * The generator (documented in docs/EVAL_INDEX.md) builds keys in contiguous
 * topical spans, queries that attend to a few topics, and one planted needle
 * per query at a controlled depth, either inside a span the query attends to
 * ("span" needle) or inside a span it ignores ("isolated" needle: a single
 * strong key in an otherwise low-scoring block, where mean pooling dilutes it
 * by 1/B). For each L and depth it reports the needle retrieval rate of each
 * method, the IoU and recall of each method's selection against DSA's, and
 * the time per query; HISA is swept over B at a fixed candidate budget m·B.
 * With --device cuda the indexers run on the GPU (inputs staged once per L,
 * bf16 q/k by default, --precision f32 for the exact kernels) and the times
 * are GPU times: wall clock between device synchronizations, best of three
 * calls; the selections are brought back and scored on the host as on the
 * CPU path. */
#include <errno.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "cli.h"
#include "eval_index.h"

/* ---- generator -------------------------------------------------------------- */
static cli_rng64 rng_for(uint64_t seed, uint64_t stream) {
    cli_rng64 r = {seed * 0x2545f4914f6cdd1dull ^ (stream + 1) * 0x9e3779b97f4a7c15ull};
    cli_rng64_next(&r);
    return r;
}
/* Random unit vector. */
static void unit_vec(cli_rng64 *r, float *v, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) {
        v[i] = (float)cli_rng64_normal(r);
        s += (double)v[i] * v[i];
    }
    const float inv = (float)(1.0 / sqrt(s > 0 ? s : 1));
    for (int64_t i = 0; i < n; i++) v[i] *= inv;
}

void cli_evgen_defaults(cli_evgen_cfg *c) {
    memset(c, 0, sizeof *c);
    c->L = 8192;
    c->HI = 64;
    c->dI = 128;
    c->ntopics = 32;
    c->span_min = 128;
    c->span_max = 2048;
    c->attend = 2;
    c->alpha = 1.f;
    c->sigma_k = 0.7f;
    c->sigma_q = 0.5f;
    c->beta = 2.f;
    c->gamma = 1.f;
    c->ndepth = 11;
    c->reps = 4;
    c->seed = 1;
}

void cli_evgen_free(cli_evgen *g) {
    free(g->q);
    free(g->k);
    free(g->w);
    free(g->needle);
    free(g->depth_i);
    free(g->kind);
    memset(g, 0, sizeof *g);
}

int cli_evgen_make(const cli_evgen_cfg *c, cli_evgen *g) {
    memset(g, 0, sizeof *g);
    if (c->L < 16 || c->HI < 1 || c->dI < 2 || c->ntopics < c->attend + 1 || c->attend < 1 || c->span_min < 1 ||
        c->span_max < c->span_min || c->ndepth < 2 || c->reps < 1)
        return cli_fail("eval-index: bad generator configuration (L >= 16, topics > attend >= 1, depths >= 2)");
    const int64_t L = c->L, HI = c->HI, dI = c->dI, P = c->ntopics;
    const int64_t T = (int64_t)c->ndepth * LA_NEEDLE_KINDS * c->reps;
    if (T > L) return cli_fail("eval-index: %lld queries do not fit L = %lld", (long long)T, (long long)L);
    g->T = T;
    float *topics = malloc(sizeof(float) * (size_t)(P * dI));
    int *span_topic = malloc(sizeof(int) * (size_t)L); /* topic of every token */
    g->q = malloc(sizeof(float) * (size_t)(T * HI * dI));
    g->k = malloc(sizeof(float) * (size_t)(L * dI));
    g->w = malloc(sizeof(float) * (size_t)(T * HI));
    g->needle = malloc(sizeof(int64_t) * (size_t)T);
    g->depth_i = malloc(sizeof(int) * (size_t)T);
    g->kind = malloc(sizeof(int) * (size_t)T);
    if (!topics || !span_topic || !g->q || !g->k || !g->w || !g->needle || !g->depth_i || !g->kind) {
        free(topics);
        free(span_topic);
        cli_evgen_free(g);
        return cli_fail("eval-index: out of memory generating L = %lld", (long long)L);
    }
    cli_rng64 r = rng_for(c->seed, 0);
    for (int64_t j = 0; j < P; j++) unit_vec(&r, topics + j * dI, dI);
    /* contiguous spans, each of one topic */
    for (int64_t s = 0; s < L;) {
        int64_t len = c->span_min + (int64_t)(cli_rng64_uniform(&r) * (double)(c->span_max - c->span_min + 1));
        int topic = (int)(cli_rng64_uniform(&r) * (double)P);
        for (int64_t e = s; e < s + len && e < L; e++) span_topic[e] = topic;
        s += len;
    }
    /* keys: alpha·u_topic + sigma_k·n, |n| ≈ 1; one RNG stream per row (thread-independent) */
    const float nk = c->sigma_k / sqrtf((float)dI);
#pragma omp parallel for schedule(static)
    for (int64_t s = 0; s < L; s++) {
        cli_rng64 rr = rng_for(c->seed, 1000 + (uint64_t)s);
        const float *u = topics + (int64_t)span_topic[s] * dI;
        for (int64_t d = 0; d < dI; d++) g->k[s * dI + d] = c->alpha * u[d] + nk * (float)cli_rng64_normal(&rr);
    }
    /* queries: t = (rep·kinds + kind)·ndepth + depth, at the end of the sequence (bottom-right causal) */
    float *v = malloc(sizeof(float) * (size_t)dI);
    const float nq = c->sigma_q / sqrtf((float)dI);
    for (int64_t t = 0; t < T; t++) {
        const int di = (int)(t % c->ndepth), kind = (int)((t / c->ndepth) % LA_NEEDLE_KINDS);
        const int64_t slot = t / c->ndepth; /* rep·kinds + kind: spreads needles of one depth apart */
        const int64_t end = L - T + t + 1;
        const double depth = (double)di / (double)(c->ndepth - 1);
        int64_t p = (int64_t)llround(depth * (double)(end - 1));
        p += (depth < 0.5 ? 3 : -3) * slot; /* distinct positions near the same depth */
        if (p < 0) p = 0;
        if (p > end - 1) p = end - 1;
        g->needle[t] = p;
        g->depth_i[t] = di;
        g->kind[t] = kind;
        cli_rng64 rq = rng_for(c->seed, 0x10000000ull + (uint64_t)t);
        /* attended topics: a span needle's own topic first; an isolated needle's topic never */
        int att[16];
        const int na = c->attend < 16 ? c->attend : 16;
        for (int a = 0; a < na; a++) {
            int tp;
            int ok;
            do {
                tp = (a == 0 && kind == LA_NEEDLE_SPAN) ? span_topic[p] : (int)(cli_rng64_uniform(&rq) * (double)P);
                ok = !(kind == LA_NEEDLE_ISOLATED && tp == span_topic[p]);
                for (int b = 0; b < a; b++) ok &= att[b] != tp;
            } while (!ok);
            att[a] = tp;
        }
        unit_vec(&rq, v, dI); /* the needle's direction */
        for (int64_t h = 0; h < HI; h++) {
            const float *u = topics + (int64_t)att[h % na] * dI;
            const float cs = (float)(0.5 + cli_rng64_uniform(&rq));
            float *qr = g->q + (t * HI + h) * dI;
            for (int64_t d = 0; d < dI; d++) qr[d] = cs * u[d] + c->gamma * v[d] + nq * (float)cli_rng64_normal(&rq);
            g->w[t * HI + h] = (float)((0.5 + cli_rng64_uniform(&rq)) / sqrt((double)HI * (double)dI));
        }
        for (int64_t d = 0; d < dI; d++) g->k[p * dI + d] = c->beta * v[d] + nk * (float)cli_rng64_normal(&rq);
    }
    free(v);
    free(topics);
    free(span_topic);
    return 0;
}

void cli_index_overlap(const int32_t *a, const int32_t *ref, int64_t k, int64_t n_valid, int64_t L,
                      unsigned char *scratch, double *iou, double *recall) {
    int64_t na = 0, nr = 0, inter = 0;
    for (int64_t j = 0; j < k; j++)
        if (ref[j] >= 0 && ref[j] < L) {
            scratch[ref[j]] = 1;
            nr++;
        }
    for (int64_t j = 0; j < k; j++)
        if (a[j] >= 0 && a[j] < L) {
            na++;
            inter += scratch[a[j]];
        }
    for (int64_t j = 0; j < k; j++)
        if (ref[j] >= 0 && ref[j] < L) scratch[ref[j]] = 0;
    const int64_t uni = na + nr - inter;
    const int64_t den = k < n_valid ? k : n_valid;
    *iou = uni > 0 ? (double)inter / (double)uni : 1.0;
    *recall = den > 0 ? (double)inter / (double)den : 1.0;
}

/* ---- the study ------------------------------------------------------------------- */
#define EV_MAX_METHODS 8
#define EV_MAX_L 16

typedef struct method {
    char name[48];
    int kind; /* 0 dsa, 1 hisa, 2 blocksparse */
    int64_t B, m;
} method;

typedef struct results {
    int nL, nm, ndepth;
    int64_t Ls[EV_MAX_L];
    /* [method][L][kind][depth] hits and counts */
    double *hit;
    double iou[EV_MAX_METHODS][EV_MAX_L], recall[EV_MAX_METHODS][EV_MAX_L], ms[EV_MAX_METHODS][EV_MAX_L];
} results;

static double *hit_at(results *R, int mi, int li, int kind, int di) {
    return R->hit + (((size_t)mi * EV_MAX_L + (size_t)li) * LA_NEEDLE_KINDS + (size_t)kind) * (size_t)R->ndepth + (size_t)di;
}

static la_status run_method(const method *me, int64_t topk, const la_tensor *q, const la_tensor *k,
                            const la_tensor *w, const la_tensor *st, const la_tensor *en, la_tensor *idx,
                            la_context *ctx) {
    la_index_params p;
    la_index_params_init(&p);
    p.topk = topk;
    p.block = me->B;
    p.block_topk = me->m;
    if (me->kind == 0) return la_dsa_indexer(&p, q, k, w, st, en, idx, NULL, ctx);
    if (me->kind == 1) return la_hisa_indexer(&p, q, k, w, st, en, idx, ctx);
    return la_blocksparse_indexer(&p, q, k, w, st, en, idx, ctx);
}

/* Where the indexers run: the CPU (host tensors as given) or the GPU (host
 * inputs copied to device buffers once per study_one call; q and k in
 * `prec`, bf16 or f32). */
typedef struct ev_dev {
    int cuda;
    la_dtype prec;
} ev_dev;

/* Device copies of one study input; every pointer NULL when unused. */
typedef struct ev_staged {
    void *q, *k, *w, *st, *en, *idx;
    la_tensor tq, tk, tw, tst, ten, tidx;
} ev_staged;

static void ev_unstage(ev_staged *d) {
    void *p[6] = {d->q, d->k, d->w, d->st, d->en, d->idx};
    for (int i = 0; i < 6; i++) cli_dev_free(p[i]);
    memset(d, 0, sizeof *d);
}

/* Copy a contiguous host f32/i32 tensor to the device as dtype `dt` (f32 ->
 * bf16 rounds to nearest even on the host first). 0 or the exit status of
 * the failure (cli_status / cli_fail). */
static int ev_put(const la_tensor *h, la_dtype dt, void **dp, la_tensor *t) {
    const int64_t n = cli_numel(h);
    const size_t es = la_dtype_size(dt);
    char msg[256];
    if (cli_dev_malloc(dp, (size_t)n * es, msg, sizeof msg) != LA_OK) return cli_fail("eval-index: %s", msg);
    la_status s;
    if (dt == LA_BF16) {
        uint16_t *tmp = malloc((size_t)n * 2 + 1);
        if (!tmp) return cli_fail("eval-index: out of memory converting to bf16");
        const float *src = (const float *)h->data;
        for (int64_t i = 0; i < n; i++) tmp[i] = cli_f32_to_bf16(src[i]);
        s = cli_dev_upload(*dp, tmp, (size_t)n * 2, msg, sizeof msg);
        free(tmp);
    } else {
        s = cli_dev_upload(*dp, h->data, (size_t)n * es, msg, sizeof msg);
    }
    if (s != LA_OK) return cli_fail("eval-index: %s", msg);
    if (la_tensor_init(t, *dp, dt, LA_DEVICE_CUDA, h->ndim, h->ne) != LA_OK) return cli_status(LA_ERR_ARG, "eval-index");
    return 0;
}

static int ev_stage(const ev_dev *dv, const la_tensor *q, const la_tensor *k, const la_tensor *w,
                    const la_tensor *st, const la_tensor *en, int64_t topk, ev_staged *d) {
    memset(d, 0, sizeof *d);
    if (ev_put(q, dv->prec, &d->q, &d->tq) || ev_put(k, dv->prec, &d->k, &d->tk) || ev_put(w, LA_F32, &d->w, &d->tw) ||
        (st && ev_put(st, LA_I32, &d->st, &d->tst)) || (en && ev_put(en, LA_I32, &d->en, &d->ten)))
        return 1;
    const int64_t T = q->ne[0], ine[2] = {T, topk};
    char msg[256];
    if (cli_dev_malloc(&d->idx, (size_t)(T * topk) * 4, msg, sizeof msg) != LA_OK)
        return cli_fail("eval-index: %s", msg);
    la_tensor_init(&d->tidx, d->idx, LA_I32, LA_DEVICE_CUDA, 2, ine);
    return 0;
}

/* Run every method on one input; fill iou/recall/ms at column li and, when
 * g is given, the needle hits. Returns 0 or an exit status. */
static int study_one(const method *ms, int nm, int64_t topk, const la_tensor *q, const la_tensor *k,
                     const la_tensor *w, const la_tensor *st, const la_tensor *en, const cli_evgen *g,
                     results *R, int li, la_context *ctx, cli_progress *pr, const ev_dev *dv) {
    const int64_t T = q->ne[0], L = k->ne[0];
    int32_t *idx[EV_MAX_METHODS] = {0};
    unsigned char *scratch = calloc((size_t)L, 1);
    int64_t *nvalid = malloc(sizeof(int64_t) * (size_t)T);
    int rc = 0;
    ev_staged dd;
    memset(&dd, 0, sizeof dd);
    if (!scratch || !nvalid) rc = cli_fail("eval-index: out of memory");
    if (!rc && dv->cuda) rc = ev_stage(dv, q, k, w, st, en, topk, &dd);
    for (int64_t t = 0; t < T && !rc; t++) {
        int64_t s0 = 0, s1 = L - T + t + 1;
        if (s1 < 0) s1 = 0;
        if (st) s0 = ((const int32_t *)st->data)[t];
        if (en) s1 = ((const int32_t *)en->data)[t];
        nvalid[t] = s1 > s0 ? s1 - s0 : 0;
    }
    for (int mi = 0; mi < nm && !rc; mi++) {
        idx[mi] = malloc(sizeof(int32_t) * (size_t)(T * topk));
        if (!idx[mi]) {
            rc = cli_fail("eval-index: out of memory for [T,topk] = [%lld, %lld]", (long long)T, (long long)topk);
            break;
        }
        la_tensor ti;
        int64_t ine[2] = {T, topk};
        la_tensor_init(&ti, idx[mi], LA_I32, LA_DEVICE_CPU, 2, ine);
        double dt = INFINITY;
        la_status s = LA_OK;
        if (dv->cuda) {
            /* best of three synchronized calls (the first also grows the
             * workspace pool and loads the kernels) */
            char msg[256] = "";
            cli_dev_memset(dd.idx, 0xff, (size_t)(T * topk) * 4, msg, sizeof msg);
            for (int rep = 0; rep < 3 && s == LA_OK; rep++) {
                s = cli_dev_synchronize(msg, sizeof msg);
                const double t0 = cli_now();
                if (s == LA_OK)
                    s = run_method(&ms[mi], topk, &dd.tq, &dd.tk, &dd.tw, st ? &dd.tst : NULL, en ? &dd.ten : NULL,
                                   &dd.tidx, ctx);
                if (s == LA_OK) s = cli_dev_synchronize(msg, sizeof msg);
                const double d = cli_now() - t0;
                if (d < dt) dt = d;
            }
            if (s == LA_OK) s = cli_dev_download(idx[mi], dd.idx, (size_t)(T * topk) * 4, msg, sizeof msg);
            if (s != LA_OK && msg[0]) {
                rc = cli_fail("eval-index: %s", msg);
                break;
            }
        } else {
            /* best of two calls: the first also pays page faults of fresh workspace */
            for (int rep = 0; rep < 2 && s == LA_OK; rep++) {
                const double t0 = cli_now();
                s = run_method(&ms[mi], topk, q, k, w, st, en, &ti, ctx);
                const double d = cli_now() - t0;
                if (d < dt) dt = d;
            }
        }
        if (s != LA_OK) {
            rc = cli_status(s, ms[mi].name);
            break;
        }
        R->ms[mi][li] = 1e3 * dt / (double)T;
        cli_progress_step(pr, 1);
    }
    for (int mi = 0; mi < nm && !rc; mi++) {
        double si = 0, sr = 0;
        for (int64_t t = 0; t < T; t++) {
            double iou, rec;
            cli_index_overlap(idx[mi] + t * topk, idx[0] + t * topk, topk, nvalid[t], L, scratch, &iou, &rec);
            si += iou;
            sr += rec;
        }
        R->iou[mi][li] = si / (double)T;
        R->recall[mi][li] = sr / (double)T;
        if (g)
            for (int64_t t = 0; t < T; t++) {
                int found = 0;
                for (int64_t j = 0; j < topk; j++) found |= idx[mi][t * topk + j] == (int32_t)g->needle[t];
                *hit_at(R, mi, li, g->kind[t], g->depth_i[t]) += found;
            }
    }
    for (int mi = 0; mi < nm; mi++) free(idx[mi]);
    ev_unstage(&dd);
    free(scratch);
    free(nvalid);
    return rc;
}

static void json_array(FILE *f, const double *x, int n, const char *fmt) {
    fputc('[', f);
    for (int i = 0; i < n; i++) {
        if (i) fputc(',', f);
        fprintf(f, fmt, x[i]);
    }
    fputc(']', f);
}

static int find_plot_script(char *buf, size_t n) { return cli_find_script("plot_eval_index.py", buf, n); }

static int parse_list(const char *s, int64_t *out, int max) {
    int n = 0;
    while (s && *s && n < max) {
        char *e;
        long long v = strtoll(s, &e, 10);
        if (e == s || v <= 0) return -1;
        out[n++] = v;
        s = *e == ',' ? e + 1 : e;
        if (*e && *e != ',') return -1;
    }
    return n;
}

int cli_cmd_eval_index(int argc, char **argv) {
    static const cli_opt spec[] = {
        {"lmin", CLI_OPT_VALUE, "8192", "smallest context length L (powers of two up to --lmax)"},
        {"lmax", CLI_OPT_VALUE, "131072", "largest context length L"},
        {"hi", CLI_OPT_VALUE, "64", "indexer heads HI"},
        {"di", CLI_OPT_VALUE, "128", "indexer head dim dI"},
        {"topk", CLI_OPT_VALUE, "2048", "tokens selected per query (all methods)"},
        {"budget", CLI_OPT_VALUE, "8192", "HISA candidate budget m*B (m = budget/B)"},
        {"blocks", CLI_OPT_VALUE, "64,128,256", "HISA block sizes B swept at the fixed budget"},
        {"block", CLI_OPT_VALUE, "128", "block size of the block-sparse baseline (keeps topk/B blocks)"},
        {"reps", CLI_OPT_VALUE, "4", "queries per (depth, needle kind): T = depths*2*reps"},
        {"depths", CLI_OPT_VALUE, "11", "needle depths, evenly from 0% to 100%"},
        {"seed", CLI_OPT_VALUE, "1", "generator seed"},
        {"json-out", CLI_OPT_VALUE, NULL, "write every number to this JSON file"},
        {"png", CLI_OPT_VALUE, NULL, "PREFIX: also draw PREFIX_needles.png and PREFIX_overlap.png "
                                    "(runs scripts/plot_eval_index.py with /usr/bin/python3; needs --json-out)"},
        {"q", CLI_OPT_VALUE, NULL, "real indexer queries .npy [T,HI,dI] (with --k, --w: no generator, no needles)"},
        {"k", CLI_OPT_VALUE, NULL, "real indexer keys .npy [L,dI]"},
        {"w", CLI_OPT_VALUE, NULL, "real head weights .npy [T,HI]"},
        {"start", CLI_OPT_VALUE, NULL, "int32 .npy [T] ranges for --q/--k/--w (default causal bottom-right)"},
        {"end", CLI_OPT_VALUE, NULL, "int32 .npy [T]"},
        {"precision", CLI_OPT_VALUE, NULL, "with --device cuda: q/k precision on the GPU, bf16 (default: "
                                          "tensor cores) or f32 (exact kernels: the CPU's selections)"},
    };
    const int nspec = (int)(sizeof spec / sizeof *spec);
    cli_args a;
    int rc = cli_args_parse(spec, nspec, "eval-index",
                           "Selection study (HISA paper, §5.3 and the IoU analysis) without a model: needle retrieval "
                           "rate by context length and depth for DSA, HISA and block-sparse; IoU and recall of each "
                           "against DSA; time per query; HISA swept over B at a fixed budget m*B. Synthetic inputs "
                           "are described in docs/EVAL_INDEX.md; --q/--k/--w study real indexer activations instead.",
                           argc, argv, &a);
    if (rc) return rc == 1 ? 0 : rc;
    int64_t lmin, lmax, HI, dI, topk, budget, bs_block, reps, ndepth, seed;
    if (cli_args_int(&a, "lmin", &lmin) || cli_args_int(&a, "lmax", &lmax) || cli_args_int(&a, "hi", &HI) ||
        cli_args_int(&a, "di", &dI) || cli_args_int(&a, "topk", &topk) || cli_args_int(&a, "budget", &budget) ||
        cli_args_int(&a, "block", &bs_block) || cli_args_int(&a, "reps", &reps) || cli_args_int(&a, "depths", &ndepth) ||
        cli_args_int(&a, "seed", &seed))
        return 2;
    int64_t Bs[EV_MAX_METHODS];
    const int nB = parse_list(cli_args_get(&a, "blocks"), Bs, EV_MAX_METHODS - 2);
    if (nB <= 0) return cli_fail("--blocks: expected a comma list of positive block sizes, e.g. 64,128,256");
    if (topk < 1 || budget < 1 || bs_block < 1 || HI < 1 || dI < 1 || HI > 4096 || dI > 4096)
        return cli_fail("eval-index: --topk, --budget, --block, --hi, --di must be positive (hi, di <= 4096)");
    if (bs_block > topk) return cli_fail("--block: %lld > --topk %lld keeps no block", (long long)bs_block, (long long)topk);
    for (int i = 0; i < nB; i++)
        if (Bs[i] > budget) return cli_fail("--blocks: B = %lld exceeds --budget %lld (m = 0)", (long long)Bs[i], (long long)budget);
    if (reps < 1 || reps > 1000 || ndepth < 2 || ndepth > 101) return cli_fail("eval-index: --reps in 1..1000, --depths in 2..101");
    const char *json_path = cli_args_get(&a, "json-out"), *png = cli_args_get(&a, "png");
    if (png && !json_path) return cli_fail("--png needs --json-out (the plot script reads the JSON)");
    const int user = cli_args_given(&a, "k") || cli_args_given(&a, "q") || cli_args_given(&a, "w");

    method ms[EV_MAX_METHODS];
    int nm = 0;
    ms[nm] = (method){"dsa", 0, 0, 0};
    nm++;
    int main_hisa = -1;
    for (int i = 0; i < nB; i++) {
        ms[nm].kind = 1;
        ms[nm].B = Bs[i];
        ms[nm].m = budget / Bs[i];
        snprintf(ms[nm].name, sizeof ms[nm].name, "hisa B=%lld m=%lld", (long long)Bs[i], (long long)(budget / Bs[i]));
        if (Bs[i] == bs_block || main_hisa < 0) main_hisa = nm;
        nm++;
    }
    ms[nm].kind = 2;
    ms[nm].B = bs_block;
    ms[nm].m = topk / bs_block;
    snprintf(ms[nm].name, sizeof ms[nm].name, "blocksparse B=%lld (%lld blocks)", (long long)bs_block,
             (long long)(topk / bs_block));
    const int bsm = nm++;

    results R;
    memset(&R, 0, sizeof R);
    R.nm = nm;
    R.ndepth = (int)ndepth;
    R.hit = calloc((size_t)EV_MAX_METHODS * EV_MAX_L * LA_NEEDLE_KINDS * (size_t)ndepth, sizeof(double));
    cli_state c;
    if (!R.hit) return cli_fail("eval-index: out of memory");
    if (cli_begin(&c, &a)) {
        free(R.hit);
        return cli_end(&c, 2);
    }
    ev_dev dv = {c.device == LA_DEVICE_CUDA, LA_BF16};
    const char *prec = cli_args_get(&a, "precision");
    if (prec && !dv.cuda) {
        free(R.hit);
        return cli_end(&c, cli_fail("--precision: applies to --device cuda only (the CPU runs f32)"));
    }
    if (prec && strcmp(prec, "bf16") != 0 && strcmp(prec, "f32") != 0) {
        free(R.hit);
        return cli_end(&c, cli_fail("--precision '%s': expected bf16 or f32", prec));
    }
    if (prec && !strcmp(prec, "f32")) dv.prec = LA_F32;
    int threads = 1;
    la_context_get_threads(c.ctx, &threads);
    cli_evgen_cfg gc;
    cli_evgen_defaults(&gc);
    gc.HI = HI;
    gc.dI = dI;
    gc.reps = (int)reps;
    gc.ndepth = (int)ndepth;
    gc.seed = (uint64_t)seed;
    const int64_t Tgen = ndepth * LA_NEEDLE_KINDS * reps;
    cli_progress pr;

    printf("longattn eval-index — %s, threads=%d\n", la_build_info(), threads);
    if (dv.cuda)
        printf("device: cuda, q/k %s on the GPU; times are GPU times (synchronized wall clock, best of 3)\n",
               la_dtype_name(dv.prec));
    if (user) {
        la_tensor q, k, w, st, en;
        if (cli_load(&c, &a, "q", 1, 3, LA_F32, "[T,HI,dI]", &q) || cli_load(&c, &a, "k", 1, 2, LA_F32, "[L,dI]", &k) ||
            cli_load(&c, &a, "w", 1, 2, LA_F32, "[T,HI]", &w) || cli_load(&c, &a, "start", 0, 1, LA_I32, "[T]", &st) ||
            cli_load(&c, &a, "end", 0, 1, LA_I32, "[T]", &en)) {
            free(R.hit);
            return cli_end(&c, 2);
        }
        R.nL = 1;
        R.Ls[0] = k.ne[0];
        printf("inputs: q %s [T=%lld, HI=%lld, dI=%lld], k [L=%lld], topk=%lld, budget m*B=%lld\n", cli_args_get(&a, "q"),
               (long long)q.ne[0], (long long)q.ne[1], (long long)q.ne[2], (long long)k.ne[0], (long long)topk,
               (long long)budget);
        cli_progress_start(&pr, "eval-index", nm);
        rc = study_one(ms, nm, topk, &q, &k, &w, st.data ? &st : NULL, en.data ? &en : NULL, NULL, &R, 0, c.ctx, &pr,
                       &dv);
        cli_progress_end(&pr);
    } else {
        for (int64_t L = lmin; L <= lmax && R.nL < EV_MAX_L; L *= 2) R.Ls[R.nL++] = L;
        if (R.nL == 0 || lmin < Tgen) {
            free(R.hit);
            return cli_end(&c, cli_fail("eval-index: need %lld <= --lmin <= --lmax (T = %lld queries)",
                                              (long long)Tgen, (long long)Tgen));
        }
        printf("synthetic inputs (docs/EVAL_INDEX.md): T=%lld queries (%lld depths x 2 needle kinds x %lld), HI=%lld, "
               "dI=%lld, topk=%lld, HISA budget m*B=%lld, seed=%lld\n",
               (long long)Tgen, (long long)ndepth, (long long)reps, (long long)HI, (long long)dI, (long long)topk,
               (long long)budget, (long long)seed);
        cli_progress_start(&pr, "eval-index", (int64_t)R.nL * (nm + 1));
        for (int li = 0; li < R.nL && !rc; li++) {
            cli_evgen g;
            gc.L = R.Ls[li];
            if (cli_evgen_make(&gc, &g)) {
                rc = 2;
                break;
            }
            cli_progress_step(&pr, 1);
            la_tensor q, k, w;
            int64_t qne[3] = {g.T, HI, dI}, kne[2] = {gc.L, dI}, wne[2] = {g.T, HI};
            la_tensor_init(&q, g.q, LA_F32, LA_DEVICE_CPU, 3, qne);
            la_tensor_init(&k, g.k, LA_F32, LA_DEVICE_CPU, 2, kne);
            la_tensor_init(&w, g.w, LA_F32, LA_DEVICE_CPU, 2, wne);
            rc = study_one(ms, nm, topk, &q, &k, &w, NULL, NULL, &g, &R, li, c.ctx, &pr, &dv);
            cli_evgen_free(&g);
        }
        cli_progress_end(&pr);
    }
    if (rc) {
        free(R.hit);
        return cli_end(&c, rc);
    }

    /* ---- table ---- */
    const double per_cell = (double)reps;
    printf("\n%-8s %-32s %9s %9s %7s %7s %9s\n", "L", "method", "needle:sp", "needle:is", "IoU", "recall", "ms/query");
    for (int li = 0; li < R.nL; li++)
        for (int mi = 0; mi < nm; mi++) {
            double hs = 0, hi = 0;
            for (int di = 0; di < ndepth; di++) {
                hs += *hit_at(&R, mi, li, LA_NEEDLE_SPAN, di);
                hi += *hit_at(&R, mi, li, LA_NEEDLE_ISOLATED, di);
            }
            if (user)
                printf("%-8lld %-32s %9s %9s %7.3f %7.3f %9.3f\n", (long long)R.Ls[li], ms[mi].name, "-", "-",
                       R.iou[mi][li], R.recall[mi][li], R.ms[mi][li]);
            else
                printf("%-8lld %-32s %9.3f %9.3f %7.3f %7.3f %9.3f\n", (long long)R.Ls[li], ms[mi].name,
                       hs / (per_cell * (double)ndepth), hi / (per_cell * (double)ndepth), R.iou[mi][li],
                       R.recall[mi][li], R.ms[mi][li]);
        }
    if (!user) {
        const int show[3] = {0, main_hisa, bsm};
        for (int kind = 0; kind < LA_NEEDLE_KINDS; kind++) {
            printf("\nneedle retrieval by depth, %s needles (rows L, columns depth 0%%..100%%)\n",
                   kind == LA_NEEDLE_SPAN ? "span" : "isolated");
            for (int x = 0; x < 3; x++) {
                printf("  %s\n", ms[show[x]].name);
                for (int li = 0; li < R.nL; li++) {
                    printf("    %-8lld", (long long)R.Ls[li]);
                    for (int di = 0; di < ndepth; di++) printf(" %4.2f", *hit_at(&R, show[x], li, kind, di) / per_cell);
                    printf("\n");
                }
            }
        }
    }

    /* ---- JSON ---- */
    if (json_path) {
        cli_text jt;
        if (cli_text_begin(&jt, "json-out", json_path)) {
            free(R.hit);
            return cli_end(&c, 2);
        }
        FILE *f = jt.f;
        fprintf(f, "{\n  \"tool\": \"longattn eval-index\",\n  \"build\": \"%s\",\n  \"threads\": %d,\n", la_build_info(), threads);
        if (dv.cuda) /* (the CPU study's JSON keeps its previous fields) */
            fprintf(f, "  \"device\": \"cuda\",\n  \"precision\": \"%s\",\n", la_dtype_name(dv.prec));
        if (user)
            fprintf(f, "  \"source\": \"npy\",\n  \"q\": \"%s\",\n", cli_args_get(&a, "q"));
        else
            fprintf(f,
                    "  \"source\": \"synthetic\",\n  \"generator\": {\"T\": %lld, \"HI\": %lld, \"dI\": %lld, \"topics\": %d, "
                    "\"span_min\": %lld, \"span_max\": %lld, \"attend\": %d, \"alpha\": %g, \"sigma_k\": %g, \"sigma_q\": %g, "
                    "\"beta\": %g, \"gamma\": %g, \"reps\": %lld, \"seed\": %lld},\n",
                    (long long)Tgen, (long long)HI, (long long)dI, gc.ntopics, (long long)gc.span_min,
                    (long long)gc.span_max, gc.attend, gc.alpha, gc.sigma_k, gc.sigma_q, gc.beta, gc.gamma,
                    (long long)reps, (long long)seed);
        fprintf(f, "  \"topk\": %lld,\n  \"budget\": %lld,\n  \"L\": [", (long long)topk, (long long)budget);
        for (int li = 0; li < R.nL; li++) fprintf(f, "%s%lld", li ? "," : "", (long long)R.Ls[li]);
        fprintf(f, "],\n  \"depths\": [");
        for (int di = 0; di < ndepth; di++) fprintf(f, "%s%.4g", di ? "," : "", (double)di / (double)(ndepth - 1));
        fprintf(f, "],\n  \"main\": {\"dsa\": \"%s\", \"hisa\": \"%s\", \"blocksparse\": \"%s\"},\n", ms[0].name,
                ms[main_hisa].name, ms[bsm].name);
        fprintf(f, "  \"methods\": [\n");
        for (int mi = 0; mi < nm; mi++) {
            fprintf(f, "    {\"name\": \"%s\", \"kind\": \"%s\", \"B\": %lld, \"m\": %lld,\n     \"iou\": ", ms[mi].name,
                    ms[mi].kind == 0 ? "dsa" : (ms[mi].kind == 1 ? "hisa" : "blocksparse"), (long long)ms[mi].B,
                    (long long)ms[mi].m);
            json_array(f, R.iou[mi], R.nL, "%.5f");
            fprintf(f, ",\n     \"recall\": ");
            json_array(f, R.recall[mi], R.nL, "%.5f");
            fprintf(f, ",\n     \"ms_per_query\": ");
            json_array(f, R.ms[mi], R.nL, "%.5f");
            if (!user) {
                for (int kind = 0; kind < LA_NEEDLE_KINDS; kind++) {
                    fprintf(f, ",\n     \"retrieval_%s\": [", kind == LA_NEEDLE_SPAN ? "span" : "isolated");
                    for (int li = 0; li < R.nL; li++) {
                        double row[101];
                        for (int di = 0; di < ndepth; di++) row[di] = *hit_at(&R, mi, li, kind, di) / per_cell;
                        if (li) fputc(',', f);
                        json_array(f, row, (int)ndepth, "%.4f");
                    }
                    fputc(']', f);
                }
            }
            fprintf(f, "}%s\n", mi + 1 < nm ? "," : "");
        }
        fprintf(f, "  ]\n}\n");
        if (cli_text_commit(&jt)) {
            free(R.hit);
            return cli_end(&c, 2);
        }
        printf("\nwrote %s\n", json_path);
        if (png) {
            char script[4200];
            if (!find_plot_script(script, sizeof script)) {
                printf("plot script scripts/plot_eval_index.py not found; run it by hand: "
                       "/usr/bin/python3 scripts/plot_eval_index.py %s %s\n", json_path, png);
            } else {
                /* no shell: the paths are passed as they are */
                fflush(stdout);
                pid_t pid = fork();
                int status = -1;
                if (pid == 0) {
                    char *args[] = {"/usr/bin/python3", script, (char *)json_path, (char *)png, NULL};
                    execv(args[0], args);
                    _exit(127);
                }
                if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                    free(R.hit);
                    return cli_end(&c, cli_fail("--png: /usr/bin/python3 %s %s %s failed", script, json_path, png));
                }
            }
        }
    }
    free(R.hit);
    return cli_end(&c, 0);
}
