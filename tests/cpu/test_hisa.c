/* la_hisa_indexer, la_blocksparse_indexer and the decode cache against a
 * float64 reference of SPEC §7 written plainly here.
 *
 * Reference: block means and block scores in float64, forced first/last
 * blocks, top-m with ties to the lower block. When the m-th/(m+1)-th block
 * scores are closer than the fp32 tolerance the kept set is ambiguous and
 * that query's exact check is skipped (counted; integer-valued inputs with a
 * power-of-two B make every score exact, so nothing is skipped there and
 * ties are checked exactly). Otherwise the output must equal, exactly, the
 * top-k over the kept blocks ∩ range of the fp32 DSA scores (token scores
 * are computed by the same kernel, so they are bit-identical).
 * Also: HISA == DSA when m covers the blocks of every range; forced blocks in
 * every selection; block-sparse returns whole blocks in rank order; decode
 * cache == recomputation after every append; bad inputs. */
#include "sparse_ref.h"

typedef struct hcase {
    int64_t T, HI, dI, L, B, m, topk;
    int ranges;    /* 0 causal default, 1 random (some empty) */
    int integer;   /* integer inputs (use a power-of-two B, L multiple of B) */
    int weak_ends; /* tiny keys in every range's first and last blocks */
} hcase;

typedef struct inputs {
    int64_t T, HI, dI, L;
    float *q, *k, *w;
    int64_t *s0, *s1;
    int32_t *rs, *re;
    la_tensor tq, tk, tw, ts, te;
} inputs;

static void make_inputs(la_rng *rng, const hcase *c, inputs *in) {
    const int64_t T = c->T, HI = c->HI, dI = c->dI, L = c->L;
    in->T = T; in->HI = HI; in->dI = dI; in->L = L;
    in->q = malloc(sizeof(float) * (size_t)(T * HI * dI));
    in->k = malloc(sizeof(float) * (size_t)(L * dI));
    in->w = malloc(sizeof(float) * (size_t)(T * HI));
    for (int64_t i = 0; i < T * HI * dI; i++)
        in->q[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 5) - 2) : (float)la_rng_normal(rng);
    for (int64_t i = 0; i < L * dI; i++)
        in->k[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 3) - 1) : (float)la_rng_normal(rng);
    for (int64_t i = 0; i < T * HI; i++)
        in->w[i] = c->integer ? (float)((int)(la_rng_uniform(rng) * 3)) : (float)fabs(la_rng_normal(rng)) + 0.1f;
    in->s0 = malloc(sizeof(int64_t) * (size_t)T);
    in->s1 = malloc(sizeof(int64_t) * (size_t)T);
    in->rs = malloc(sizeof(int32_t) * (size_t)T);
    in->re = malloc(sizeof(int32_t) * (size_t)T);
    for (int64_t t = 0; t < T; t++) {
        ref_causal(T, L, t, &in->s0[t], &in->s1[t]);
        if (c->ranges) {
            int64_t a = (int64_t)(la_rng_uniform(rng) * (double)(L + 1));
            int64_t b = (int64_t)(la_rng_uniform(rng) * (double)(L + 1));
            if (a > b) { int64_t x = a; a = b; b = x; }
            if (t % 7 == 3) b = a;
            in->s0[t] = a;
            in->s1[t] = b;
        }
        in->rs[t] = (int32_t)in->s0[t];
        in->re[t] = (int32_t)in->s1[t];
    }
    if (c->weak_ends) /* shrink the keys of every range's end blocks: they score lowest, so only forcing keeps them */
        for (int64_t t = 0; t < T; t++) {
            if (in->s0[t] >= in->s1[t]) continue;
            const int64_t ends[2] = {in->s0[t] / c->B, (in->s1[t] - 1) / c->B};
            for (int e = 0; e < 2; e++) {
                const float f = (float)(1e-3 * (1.0 + la_rng_uniform(rng)));
                for (int64_t s = ends[e] * c->B; s < (ends[e] + 1) * c->B && s < L; s++)
                    for (int64_t d = 0; d < dI; d++) in->k[s * dI + d] *= f;
            }
        }
    int64_t qne[3] = {T, HI, dI}, kne[2] = {L, dI}, wne[2] = {T, HI}, tne[1] = {T};
    la_tensor_init(&in->tq, in->q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&in->tk, in->k, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&in->tw, in->w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&in->ts, in->rs, LA_I32, LA_DEVICE_CPU, 1, tne);
    la_tensor_init(&in->te, in->re, LA_I32, LA_DEVICE_CPU, 1, tne);
}

static void free_inputs(inputs *in) {
    free(in->q); free(in->k); free(in->w); free(in->s0); free(in->s1); free(in->rs); free(in->re);
}

/* float64 kept blocks of query t in rank order (forced first). Returns the
 * count; *ambiguous set when the boundary or (rank order) is within tol. */
static int64_t ref_kept(const inputs *in, int64_t t, int64_t B, int64_t m, double tolrel, int64_t *kept,
                        double *kscore, double *tol_out, int *ambiguous_set, int *ambiguous_order) {
    const int64_t s0 = in->s0[t], s1 = in->s1[t], L = in->L, dI = in->dI;
    *ambiguous_set = *ambiguous_order = 0;
    if (s0 >= s1) return 0;
    const int64_t b0 = s0 / B, b1 = (s1 + B - 1) / B, nblk = b1 - b0;
    ref_pair *p = malloc(sizeof(ref_pair) * (size_t)nblk);
    double *kb = malloc(sizeof(double) * (size_t)dI);
    ref_idx_in ri = {in->T, in->HI, dI, L, in->q, in->k, in->w};
    double termscale = 0;
    for (int64_t b = b0; b < b1; b++) {
        const int64_t e = (b + 1) * B < L ? (b + 1) * B : L;
        for (int64_t d = 0; d < dI; d++) {
            double sum = 0;
            for (int64_t s = b * B; s < e; s++) sum += in->k[s * dI + d];
            kb[d] = sum / (double)(e - b * B);
        }
        p[b - b0].v = ref_score_vec(&ri, t, kb);
        p[b - b0].i = b;
        double a = 0;
        for (int64_t h = 0; h < in->HI; h++) {
            double dd = 0;
            for (int64_t d = 0; d < dI; d++) dd += fabs(in->q[(t * in->HI + h) * dI + d] * kb[d]);
            a += fabs(in->w[t * in->HI + h]) * dd;
        }
        if (a > termscale) termscale = a;
    }
    const double tol = tolrel * termscale;
    /* forced blocks get +inf; the two forced tie and the lower wins */
    p[0].v = INFINITY;
    p[nblk - 1].v = INFINITY;
    qsort(p, (size_t)nblk, sizeof *p, ref_pair_cmp);
    const int64_t n = m < nblk ? m : nblk;
    for (int64_t j = 0; j < n; j++) {
        kept[j] = p[j].i;
        kscore[j] = p[j].v;
    }
    *tol_out = tol;
    if (tolrel > 0 && n < nblk && isfinite(p[n - 1].v) && p[n - 1].v - p[n].v <= tol) *ambiguous_set = 1;
    for (int64_t j = 1; j < n; j++)
        if (tolrel > 0 && isfinite(p[j].v) && p[j - 1].v - p[j].v <= tol) *ambiguous_order = 1;
    free(p);
    free(kb);
    return n;
}

static la_status call(int sparse, const la_index_params *p, inputs *in, int ranges, la_tensor *ti,
                      la_context *ctx) {
    return sparse ? la_blocksparse_indexer(p, &in->tq, &in->tk, &in->tw, ranges ? &in->ts : NULL,
                                           ranges ? &in->te : NULL, ti, ctx)
                  : la_hisa_indexer(p, &in->tq, &in->tk, &in->tw, ranges ? &in->ts : NULL,
                                    ranges ? &in->te : NULL, ti, ctx);
}

static void run_case(la_rng *rng, const hcase *c, int sparse, la_context *ctx) {
    inputs in;
    make_inputs(rng, c, &in);
    const int64_t T = c->T, L = c->L, B = c->B, K = c->topk;
    const int64_t m = sparse ? K / B : c->m;
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    p.block = B;
    p.block_topk = c->m;

    /* fp32 DSA scores (the token scores HISA must reproduce bit for bit) */
    la_tensor ti, tsc, tdi;
    int32_t *idx = malloc(sizeof(int32_t) * (size_t)(T * K));
    int32_t *didx = malloc(sizeof(int32_t) * (size_t)(T * K));
    float *sc = malloc(sizeof(float) * (size_t)(T * L));
    int64_t ine[2] = {T, K}, sne[2] = {T, L};
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&tdi, didx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&tsc, sc, LA_F32, LA_DEVICE_CPU, 2, sne);
    CHECK_OK(la_dsa_indexer(&p, &in.tq, &in.tk, &in.tw, c->ranges ? &in.ts : NULL, c->ranges ? &in.te : NULL,
                            &tdi, &tsc, ctx));
    for (int64_t i = 0; i < T * K; i++) idx[i] = -7;
    la_status st = call(sparse, &p, &in, c->ranges, &ti, ctx);
    CHECK(st == LA_OK, "%s: %s %s", sparse ? "blocksparse" : "hisa", la_status_string(st), la_last_error());

    int64_t *kept = malloc(sizeof(int64_t) * (size_t)(L / B + 2));
    double *kscore = malloc(sizeof(double) * (size_t)(L / B + 2));
    double *cand = malloc(sizeof(double) * (size_t)L);
    int32_t *want = malloc(sizeof(int32_t) * (size_t)K);
    int64_t skipped = 0, covered_all = 1;
    int bad = st != LA_OK;
    for (int64_t t = 0; t < T && !bad; t++) {
        int amb_set, amb_order;
        const double tolrel = c->integer ? 0.0 : 1e-4;
        double tolb = 0.0;
        const int64_t nk = ref_kept(&in, t, B, m, tolrel, kept, kscore, &tolb, &amb_set, &amb_order);
        const int64_t s0 = in.s0[t], s1 = in.s1[t];
        const int64_t nblk = s0 < s1 ? (s1 + B - 1) / B - s0 / B : 0;
        if (nk < nblk) covered_all = 0;
        const int32_t *row = idx + t * K;
        /* forced blocks present whenever the output can show them */
        if (nk > 0 && (sparse || K >= nk * B)) {
            int has0 = 0, has1 = 0;
            for (int64_t j = 0; j < K; j++) {
                if (row[j] >= 0 && row[j] / B == s0 / B) has0 = 1;
                if (row[j] >= 0 && row[j] / B == (s1 - 1) / B) has1 = 1;
            }
            CHECK(has0 && (has1 || m == 1), "t=%lld: forced block missing (first %d, last %d)", (long long)t, has0,
                  has1);
            if (!has0 || (!has1 && m > 1)) bad = 1;
        }
        if (amb_set) {
            skipped++;
            continue;
        }
        if (sparse && amb_order) {
            /* near-tied kept blocks may come in either order: check the block
             * sequence is the kept set, forced first, then non-increasing in
             * float64 score within the tolerance */
            int64_t nseq = 0, prev = -1;
            double prev_score = INFINITY;
            for (int64_t j = 0; j < K && row[j] >= 0 && !bad; j++) {
                const int64_t b = row[j] / B;
                if (b == prev) continue;
                prev = b;
                int64_t at = -1;
                for (int64_t x = 0; x < nk; x++)
                    if (kept[x] == b) at = x;
                if (at < 0 || (nseq < 2 && isinf(kscore[nseq]) && at != nseq) ||
                    (isfinite(kscore[at]) && kscore[at] > prev_score + tolb)) {
                    CHECK(0, "blocksparse t=%lld: block %lld out of rank order or not kept", (long long)t, (long long)b);
                    bad = 1;
                }
                prev_score = kscore[at >= 0 ? at : 0];
                nseq++;
            }
            if (!bad && nseq != nk) {
                CHECK(0, "blocksparse t=%lld: %lld blocks returned, %lld kept", (long long)t, (long long)nseq, (long long)nk);
                bad = 1;
            }
            continue;
        }
        if (!sparse) {
            /* candidates: kept blocks ∩ range, fp32 DSA scores, exact top-k */
            for (int64_t s = 0; s < L; s++) cand[s] = -INFINITY;
            for (int64_t j = 0; j < nk; j++)
                for (int64_t s = kept[j] * B; s < (kept[j] + 1) * B && s < L; s++)
                    if (s >= s0 && s < s1) cand[s] = sc[t * L + s];
            ref_topk(cand, NULL, L, K, want);
        } else {
            int64_t n = 0;
            for (int64_t j = 0; j < nk && n < K; j++)
                for (int64_t s = kept[j] * B; s < (kept[j] + 1) * B && s < L && n < K; s++)
                    if (s >= s0 && s < s1) want[n++] = (int32_t)s;
            for (; n < K; n++) want[n] = -1;
        }
        for (int64_t j = 0; j < K; j++)
            if (row[j] != want[j]) {
                CHECK(0, "%s T=%lld L=%lld B=%lld m=%lld topk=%lld: idx[%lld,%lld] = %d, reference %d",
                      sparse ? "blocksparse" : "hisa", (long long)T, (long long)L, (long long)B, (long long)m,
                      (long long)K, (long long)t, (long long)j, row[j], want[j]);
                bad = 1;
                break;
            }
    }
    CHECK(!bad, "%s T=%lld HI=%lld dI=%lld L=%lld B=%lld m=%lld topk=%lld ranges=%d%s (%lld/%lld skipped as ambiguous)",
          sparse ? "blocksparse" : "hisa", (long long)T, (long long)c->HI, (long long)c->dI, (long long)L,
          (long long)B, (long long)m, (long long)K, c->ranges, c->integer ? " integer" : "", (long long)skipped,
          (long long)T);
    CHECK(skipped * 4 <= T, "%s L=%lld B=%lld m=%lld: too many ambiguous queries (%lld of %lld): the test would not test",
          sparse ? "blocksparse" : "hisa", (long long)L, (long long)B, (long long)m, (long long)skipped, (long long)T);
    if (c->integer) CHECK(skipped == 0, "integer inputs: exact scores, nothing may be skipped");
    /* block-sparse: every block that appears appears whole (its valid tokens, ascending, together) */
    if (sparse && !bad)
        for (int64_t t = 0; t < T; t++) {
            const int32_t *row = idx + t * K;
            for (int64_t j = 0; j < K && row[j] >= 0;) {
                const int64_t b = row[j] / B;
                const int64_t a = b * B > in.s0[t] ? b * B : in.s0[t];
                const int64_t e = (b + 1) * B < in.s1[t] ? (b + 1) * B : in.s1[t];
                for (int64_t s = a; s < e; s++, j++)
                    if (j >= K || row[j] != s) {
                        CHECK(0, "blocksparse t=%lld: block %lld not whole at position %lld", (long long)t,
                              (long long)b, (long long)j);
                        t = T;
                        break;
                    }
            }
        }
    /* HISA == DSA when the kept blocks cover every range */
    if (!sparse && covered_all)
        CHECK(memcmp(idx, didx, sizeof(int32_t) * (size_t)(T * K)) == 0,
              "hisa with m covering every range must equal dsa exactly (L=%lld B=%lld m=%lld)", (long long)L,
              (long long)B, (long long)m);
    free(kept); free(kscore); free(cand); free(want); free(idx); free(didx); free(sc);
    free_inputs(&in);
}

/* Decode cache: append in random pieces; after each, the cache's selection
 * equals la_hisa_indexer over the keys so far (default causal and random ranges). */
static void run_cache(la_rng *rng, int64_t L, int64_t dI, int64_t HI, int64_t B, int64_t m, int64_t K,
                      la_dtype kdt, la_context *ctx) {
    hcase c = {3, HI, dI, L, B, m, K, 0, 0, 0};
    inputs in;
    make_inputs(rng, &c, &in);
    la_index_cache *cache = NULL;
    CHECK_OK(la_index_cache_create(dI, B, L, &cache));
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    p.block = B;
    p.block_topk = m;
    int32_t *a = malloc(sizeof(int32_t) * (size_t)(3 * K)), *b = malloc(sizeof(int32_t) * (size_t)(3 * K));
    uint16_t *kb = malloc(sizeof(uint16_t) * (size_t)(L * dI));
    for (int64_t i = 0; i < L * dI; i++) {
        uint32_t u;
        memcpy(&u, &in.k[i], 4);
        kb[i] = (uint16_t)(u >> 16);
        if (kdt == LA_BF16) { /* the f32 copy holds the same (bf16-truncated) values */
            u &= 0xffff0000u;
            memcpy(&in.k[i], &u, 4);
        }
    }
    int64_t len = 0, checks = 0, bad = 0;
    while (len < L && !bad) {
        int64_t n = 1 + (int64_t)(la_rng_uniform(rng) * 40);
        if (n > L - len) n = L - len;
        la_tensor piece;
        int64_t pne[2] = {n, dI};
        if (kdt == LA_BF16) la_tensor_init(&piece, kb + len * dI, LA_BF16, LA_DEVICE_CPU, 2, pne);
        else la_tensor_init(&piece, in.k + len * dI, LA_F32, LA_DEVICE_CPU, 2, pne);
        CHECK_OK(la_index_cache_append(cache, &piece));
        len += n;
        int64_t got;
        la_index_cache_length(cache, &got);
        CHECK(got == len, "cache length %lld, want %lld", (long long)got, (long long)len);
        la_tensor tk, ta, tb, ts, te;
        int64_t kne[2] = {len, dI}, ine[2] = {3, K}, tne[1] = {3};
        la_tensor_init(&tk, in.k, LA_F32, LA_DEVICE_CPU, 2, kne);
        la_tensor_init(&ta, a, LA_I32, LA_DEVICE_CPU, 2, ine);
        la_tensor_init(&tb, b, LA_I32, LA_DEVICE_CPU, 2, ine);
        int32_t rs[3], re[3];
        for (int r = 0; r < 3; r++) {
            int64_t x = (int64_t)(la_rng_uniform(rng) * (double)(len + 1));
            int64_t y = (int64_t)(la_rng_uniform(rng) * (double)(len + 1));
            rs[r] = (int32_t)(x < y ? x : y);
            re[r] = (int32_t)(x < y ? y : x);
        }
        la_tensor_init(&ts, rs, LA_I32, LA_DEVICE_CPU, 1, tne);
        la_tensor_init(&te, re, LA_I32, LA_DEVICE_CPU, 1, tne);
        for (int mode = 0; mode < 2; mode++) {
            memset(a, 0x55, sizeof(int32_t) * (size_t)(3 * K));
            CHECK_OK(la_index_cache_hisa(cache, &p, &in.tq, &in.tw, mode ? &ts : NULL, mode ? &te : NULL, &ta, ctx));
            CHECK_OK(la_hisa_indexer(&p, &in.tq, &tk, &in.tw, mode ? &ts : NULL, mode ? &te : NULL, &tb, ctx));
            if (memcmp(a, b, sizeof(int32_t) * (size_t)(3 * K)) != 0) {
                CHECK(0, "cache selection != recomputation at length %lld (B=%lld, ranges %d)", (long long)len,
                      (long long)B, mode);
                bad = 1;
            }
            checks++;
        }
    }
    CHECK(!bad, "decode cache L=%lld dI=%lld B=%lld m=%lld topk=%lld %s: %lld comparisons", (long long)L,
          (long long)dI, (long long)B, (long long)m, (long long)K, la_dtype_name(kdt), (long long)checks);
    /* capacity is a hard limit */
    float extra[64] = {0};
    la_tensor te1;
    int64_t ene[2] = {1, dI};
    la_tensor_init(&te1, extra, LA_F32, LA_DEVICE_CPU, 2, ene);
    if (dI <= 64) CHECK_STATUS(la_index_cache_append(cache, &te1), LA_ERR_ARG);
    la_index_cache_destroy(cache);
    free(a); free(b); free(kb);
    free_inputs(&in);
}

static void bad_inputs(la_context *ctx) {
    hcase c = {2, 3, 4, 50, 8, 2, 16, 0, 0, 0};
    la_rng r = {7};
    inputs in;
    make_inputs(&r, &c, &in);
    int32_t idx[2 * 16];
    la_tensor ti;
    int64_t ine[2] = {2, 16};
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_index_params p;
    la_index_params_init(&p);
    p.topk = 16;
    p.block = 8;
    p.block_topk = 2;
    CHECK_OK(la_hisa_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx));
    CHECK_OK(la_blocksparse_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx));
    p.block = 0;
    CHECK_STATUS(la_hisa_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "block") != NULL, "block message: %s", la_last_error());
    CHECK_STATUS(la_blocksparse_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    p.block = 8;
    p.block_topk = 0;
    CHECK_STATUS(la_hisa_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "block_topk") != NULL, "m message: %s", la_last_error());
    p.block_topk = -1;
    CHECK_STATUS(la_hisa_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    p.block_topk = 2;
    p.block = 32; /* block-sparse: topk 16 < block 32 keeps no block */
    CHECK_STATUS(la_blocksparse_indexer(&p, &in.tq, &in.tk, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    p.block = 8;
    la_tensor k2 = in.tk;
    k2.ne[1] = 5;
    CHECK_STATUS(la_hisa_indexer(&p, &in.tq, &k2, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_SHAPE);
    in.re[0] = 51; /* end > L */
    CHECK_STATUS(la_hisa_indexer(&p, &in.tq, &in.tk, &in.tw, &in.ts, &in.te, &ti, ctx), LA_ERR_ARG);
    in.re[0] = 3; in.rs[0] = 4; /* start > end */
    CHECK_STATUS(la_blocksparse_indexer(&p, &in.tq, &in.tk, &in.tw, &in.ts, &in.te, &ti, ctx), LA_ERR_ARG);
    la_tensor q3 = in.tq;
    q3.device = LA_DEVICE_CUDA;
    CHECK_MIXED_DEVICE(la_hisa_indexer(&p, &q3, &in.tk, &in.tw, NULL, NULL, &ti, ctx));
    /* cache */
    la_index_cache *cache = NULL;
    CHECK_STATUS(la_index_cache_create(0, 8, 10, &cache), LA_ERR_ARG);
    CHECK_STATUS(la_index_cache_create(4, 0, 10, &cache), LA_ERR_ARG);
    CHECK_STATUS(la_index_cache_create(4, 8, 0, &cache), LA_ERR_ARG);
    CHECK_STATUS(la_index_cache_create(4, 8, 10, NULL), LA_ERR_ARG);
    CHECK_OK(la_index_cache_create(4, 8, 60, &cache));
    CHECK_STATUS(la_index_cache_hisa(cache, &p, &in.tq, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG); /* empty */
    CHECK_OK(la_index_cache_append(cache, &in.tk));
    CHECK_STATUS(la_index_cache_append(cache, &k2), LA_ERR_SHAPE);
    CHECK(strstr(la_last_error(), "dI") != NULL, "cache dI message: %s", la_last_error());
    p.block = 16;
    CHECK_STATUS(la_index_cache_hisa(cache, &p, &in.tq, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_ARG);
    CHECK(strstr(la_last_error(), "block") != NULL, "cache block message: %s", la_last_error());
    p.block = 8;
    CHECK_OK(la_index_cache_hisa(cache, &p, &in.tq, &in.tw, NULL, NULL, &ti, ctx));
    CHECK_STATUS(la_index_cache_hisa(cache, &p, &q3, &in.tw, NULL, NULL, &ti, ctx), LA_ERR_UNSUPPORTED);
    CHECK(strstr(la_last_error(), "q is on cuda") != NULL, "cache cuda message: %s", la_last_error());
    CHECK_STATUS(la_index_cache_append(cache, &in.tk), LA_ERR_ARG); /* 100 > capacity 60 */
    la_index_cache_destroy(cache);
    free_inputs(&in);
}

int main(void) {
    la_rng rng = la_test_rng("test_hisa");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);
    const hcase cases[] = {
        /* T, HI, dI, L, B, m, topk, ranges, integer, weak_ends */
        {1, 1, 1, 1, 4, 1, 1, 0, 0, 0},
        {4, 3, 16, 63, 8, 3, 24, 0, 0, 0},      /* topk = m·B: kept blocks fully visible */
        {5, 3, 16, 63, 8, 100, 4, 0, 0, 0},     /* m larger than the number of blocks */
        {9, 4, 63, 129, 16, 1, 16, 1, 0, 0},    /* m = 1: both forced -> the lower */
        {9, 4, 63, 129, 16, 2, 2048, 1, 0, 1},  /* forced weakest blocks, topk > range */
        {20, 8, 64, 1000, 64, 4, 100, 0, 0, 0}, /* B does not divide L (tail of 40) */
        {20, 8, 64, 1000, 100, 3, 300, 0, 0, 1},     /* weakest end blocks, causal ranges */
        {12, 5, 7, 1000, 7, 20, 140, 1, 0, 0},  /* odd B */
        {16, 64, 128, 1000, 128, 8, 2048, 0, 0, 0},  /* m·B >= L: equals DSA */
        {16, 6, 24, 1000, 32, 40, 256, 1, 0, 0},     /* m covers every range: equals DSA */
        {4, 8, 32, 700, 32, 30, 128, 1, 0, 0},       /* same with a decode-sized batch */
        {16, 3, 4, 1024, 16, 5, 80, 0, 1, 0},   /* exact ties (integer, B = 2^4) */
        {16, 3, 2, 512, 8, 7, 30, 1, 1, 0},
        {8, 16, 64, 4000, 128, 6, 512, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        run_case(&rng, &cases[i], 0, ctx);
        if (cases[i].topk >= cases[i].B) run_case(&rng, &cases[i], 1, ctx);
    }
    run_cache(&rng, 300, 24, 5, 16, 4, 40, LA_F32, ctx);
    run_cache(&rng, 260, 7, 3, 37, 2, 64, LA_BF16, ctx);
    run_cache(&rng, 100, 16, 4, 128, 3, 16, LA_F32, ctx); /* B larger than the whole cache */
    la_context_set_threads(ctx, 1);
    run_case(&rng, &cases[5], 0, ctx);
    bad_inputs(ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
