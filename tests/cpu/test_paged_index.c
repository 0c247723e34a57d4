/* Paged indexer key cache and the batched paged indexers (docs/SPARSE.md
 * "Paged serving").
 *
 *  - e4m3: every byte decodes to its OCP value (float64, written here); the
 *    encoder picks the nearest finite e4m3 (ties to even), checked against a
 *    brute-force search over the 253 finite values.
 *  - append: the page bytes follow DeepGEMM's layout (values then fp32
 *    scales amax/448), read back here from the raw storage; gathered keys
 *    equal the test's own dequantization; pooled means equal the means
 *    recomputed here from the gathered keys in position order in fp32 (same
 *    order, so bit for bit) and agree with a float64 mean.
 *  - dsa/hisa paged == la_dsa_indexer / la_hisa_indexer on the gathered keys
 *    bit for bit, for f32, bf16 and fp8 caches, shuffled page tables,
 *    interleaved decode-style appends, next_n 1/2/4, q_seq orderings,
 *    return_slots; the DSA selection is also checked against float64 scores.
 *  - bad input: a status naming the argument, the cache and idx unchanged. */
#include "test_util.h"

/* ---- e4m3 reference ------------------------------------------------------ */
static double ref_e4m3(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    double v = e == 0 ? m * pow(2, -9) : (1 + m / 8.0) * pow(2, e - 7);
    if (e == 15 && m == 7) v = NAN;
    return (b & 0x80) ? -v : v;
}
/* nearest finite e4m3 of x (|x| <= 448), ties to the even mantissa */
static uint8_t ref_encode(double x) {
    int best = -1;
    double bd = INFINITY;
    for (int b = 0; b < 256; b++) {
        const double v = ref_e4m3((uint8_t)b);
        if (isnan(v) || (signbit(v) != signbit(x) && v != 0)) continue;
        if ((b & 0x80) != (signbit(x) ? 0x80 : 0)) continue;
        const double d = fabs(v - x);
        if (d < bd || (d == bd && (b & 1) == 0)) {
            bd = d;
            best = b;
        }
    }
    return (uint8_t)best;
}

/* ---- a batch of sequences in a shuffled paged cache ----------------------- */
#define PS 64
typedef struct batch {
    int64_t nseq, maxp, dI, num_pages;
    int64_t *len;      /* [nseq] */
    int32_t *table;    /* [nseq][maxp] */
    float *keys;       /* [nseq][maxlen][dI] inputs */
    int64_t maxlen;
} batch;

static void make_batch(la_rng *r, batch *b, int64_t nseq, const int64_t *lens, int64_t dI, int integer) {
    b->nseq = nseq;
    b->dI = dI;
    b->len = malloc(sizeof(int64_t) * (size_t)nseq);
    b->maxlen = 1;
    int64_t pages = 0;
    for (int64_t s = 0; s < nseq; s++) {
        b->len[s] = lens[s];
        if (lens[s] > b->maxlen) b->maxlen = lens[s];
        pages += (lens[s] + PS - 1) / PS;
    }
    b->maxp = (b->maxlen + PS - 1) / PS + 1;
    b->num_pages = pages + 3; /* a few spare pages */
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)b->num_pages);
    for (int64_t i = 0; i < b->num_pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = b->num_pages - 1; i > 0; i--) {
        const int64_t j = (int64_t)(la_rng_uniform(r) * (double)(i + 1));
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    b->table = malloc(sizeof(int32_t) * (size_t)(nseq * b->maxp));
    int64_t at = 0;
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t j = 0; j < b->maxp; j++)
            b->table[s * b->maxp + j] = j < (lens[s] + PS - 1) / PS ? perm[at++] : 0;
    free(perm);
    b->keys = malloc(sizeof(float) * (size_t)(nseq * b->maxlen * dI));
    for (int64_t i = 0; i < nseq * b->maxlen * dI; i++)
        b->keys[i] = integer ? (float)((int)(la_rng_uniform(r) * 5) - 2) : (float)la_rng_normal(r);
}
static void free_batch(batch *b) { free(b->len); free(b->table); free(b->keys); }
static int64_t slot_of(const batch *b, int64_t s, int64_t pos) {
    return (int64_t)b->table[s * b->maxp + pos / PS] * PS + pos % PS;
}

/* Appends every sequence's keys in decode-like steps: a prefill chunk, then
 * interleaved chunks of 1..5 tokens across the sequences. */
static int fill_cache(la_rng *r, const batch *b, la_paged_index_cache *c) {
    int64_t *done = calloc((size_t)b->nseq, sizeof(int64_t));
    const int64_t cap = 512;
    float *k = malloc(sizeof(float) * (size_t)(cap * b->dI));
    int32_t *sl = malloc(sizeof(int32_t) * cap), *sq = malloc(sizeof(int32_t) * cap), *ps = malloc(sizeof(int32_t) * cap);
    int ok = 1;
    for (;;) {
        int64_t n = 0;
        for (int64_t s = 0; s < b->nseq; s++) {
            int64_t want = done[s] == 0 ? 1 + (int64_t)(la_rng_uniform(r) * 300) : 1 + (int64_t)(la_rng_uniform(r) * 5);
            if (want > b->len[s] - done[s]) want = b->len[s] - done[s];
            if (n + want > cap) want = cap - n;
            for (int64_t i = 0; i < want; i++, n++) {
                const int64_t pos = done[s] + i;
                memcpy(k + n * b->dI, b->keys + (s * b->maxlen + pos) * b->dI, sizeof(float) * (size_t)b->dI);
                sl[n] = (int32_t)slot_of(b, s, pos);
                sq[n] = (int32_t)s;
                ps[n] = (int32_t)pos;
            }
            done[s] += want;
        }
        if (n == 0) break;
        if (n < cap && la_rng_uniform(r) < 0.3) { /* a padding token, skipped */
            for (int64_t d = 0; d < b->dI; d++) k[n * b->dI + d] = 1e3f;
            sl[n] = -1; sq[n] = 0; ps[n] = 0;
            n++;
        }
        la_tensor tk, ts, tq, tp;
        const int64_t kne[2] = {n, b->dI};
        la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, kne);
        la_tensor_init(&ts, sl, LA_I32, LA_DEVICE_CPU, 1, &n);
        la_tensor_init(&tq, sq, LA_I32, LA_DEVICE_CPU, 1, &n);
        la_tensor_init(&tp, ps, LA_I32, LA_DEVICE_CPU, 1, &n);
        la_status st = la_paged_index_cache_append(c, &tk, &ts, &tq, &tp, NULL);
        CHECK(st == LA_OK, "append: %s", la_last_error());
        if (st != LA_OK) { ok = 0; break; }
    }
    free(done); free(k); free(sl); free(sq); free(ps);
    return ok;
}

static float stored_ref(la_dtype dt, const float *row, int64_t dI, int64_t d) {
    if (dt == LA_F32) return row[d];
    if (dt == LA_BF16) return la_round_bf16(row[d]);
    float amax = 0;
    for (int64_t i = 0; i < dI; i++) amax = fmaxf(amax, fabsf(row[i]));
    const float scale = amax > 0 ? amax / 448.f : 1.f;
    return (float)ref_e4m3(ref_encode((double)(row[d] / scale))) * scale;
}

/* ---- one equality case ------------------------------------------------------ */
typedef struct pcase {
    la_dtype dt;
    int64_t nseq, HI, dI, topk, m, next_n;
    int64_t lens[6];
    int use_qseq, integer, f64check;
} pcase;

static void sel_check_f64(const float *q, const float *w, const float *keys, int64_t HI, int64_t dI, int64_t L,
                          const int32_t *sel, int64_t topk, int64_t end, const char *what) {
    double *sc = malloc(sizeof(double) * (size_t)(L > 0 ? L : 1));
    for (int64_t s = 0; s < end; s++) {
        double a = 0;
        for (int64_t h = 0; h < HI; h++) {
            double dot = 0;
            for (int64_t d = 0; d < dI; d++) dot += (double)q[h * dI + d] * keys[s * dI + d];
            a += (double)w[h] * (dot > 0 ? dot : 0);
        }
        sc[s] = a;
    }
    char *in = calloc((size_t)(end > 0 ? end : 1), 1);
    int64_t n = 0, bad = 0;
    double minsel = INFINITY, maxout = -INFINITY;
    for (int64_t j = 0; j < topk; j++) {
        if (sel[j] < 0) continue;
        n++;
        if (sel[j] >= end || in[sel[j]]) { bad++; continue; }
        in[sel[j]] = 1;
        if (sc[sel[j]] < minsel) minsel = sc[sel[j]];
    }
    for (int64_t s = 0; s < end; s++) if (!in[s] && sc[s] > maxout) maxout = sc[s];
    const int64_t want = end < topk ? end : topk;
    CHECK(bad == 0 && n == want, "%s: %lld valid (want %lld), %lld out of range or repeated", what, (long long)n,
          (long long)want, (long long)bad);
    double mag = fabs(minsel) + fabs(maxout) + 1e-30;
    CHECK(n < end ? minsel >= maxout - 1e-5 * mag : 1, "%s: a dropped key scores %.9g > a kept %.9g (float64)", what,
          maxout, minsel);
    free(sc); free(in);
}

static void run_case(la_rng *r, const pcase *pc) {
    batch b;
    make_batch(r, &b, pc->nseq, pc->lens, pc->dI, pc->integer);
    const int64_t HI = pc->HI, dI = pc->dI, topk = pc->topk, nseq = pc->nseq, nn = pc->next_n;
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = b.num_pages;
    cp.head_dim = dI;
    cp.dtype = pc->dt;
    cp.max_seqs = nseq;
    la_paged_index_cache *c = NULL, *c0 = NULL;
    CHECK_OK(la_paged_index_cache_create(&cp, &c));
    la_paged_cache_params cp0 = cp;
    cp0.max_seqs = 0;
    CHECK_OK(la_paged_index_cache_create(&cp0, &c0));
    if (!c || !c0) return;
    if (!fill_cache(r, &b, c)) return;
    { /* the same keys without pooled state, in one append per sequence */
        for (int64_t s = 0; s < nseq; s++) {
            if (b.len[s] == 0) continue;
            int32_t *sl = malloc(sizeof(int32_t) * (size_t)b.len[s]);
            for (int64_t i = 0; i < b.len[s]; i++) sl[i] = (int32_t)slot_of(&b, s, i);
            la_tensor tk, ts;
            const int64_t kne[2] = {b.len[s], dI};
            la_tensor_init(&tk, b.keys + s * b.maxlen * dI, LA_F32, LA_DEVICE_CPU, 2, kne);
            la_tensor_init(&ts, sl, LA_I32, LA_DEVICE_CPU, 1, &b.len[s]);
            CHECK_OK(la_paged_index_cache_append(c0, &tk, &ts, NULL, NULL, NULL));
            free(sl);
        }
    }
    const char *dn = la_dtype_name(pc->dt);
    la_tensor tbt, tcl;
    const int64_t btne[2] = {nseq, b.maxp};
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)nseq);
    for (int64_t s = 0; s < nseq; s++) cl[s] = (int32_t)b.len[s];
    la_tensor_init(&tbt, b.table, LA_I32, LA_DEVICE_CPU, 2, btne);
    la_tensor_init(&tcl, cl, LA_I32, LA_DEVICE_CPU, 1, &nseq);

    /* stored bytes, gathered keys, pooled means */
    void *raw;
    size_t pb;
    CHECK_OK(la_paged_index_cache_storage(c, &raw, &pb));
    CHECK(pb == (size_t)(PS * dI * (pc->dt == LA_FP8_E4M3 ? 1 : pc->dt == LA_BF16 ? 2 : 4) + (pc->dt == LA_FP8_E4M3 ? PS * 4 : 0)),
          "%s: page bytes %zu", dn, pb);
    float **gk = calloc((size_t)nseq, sizeof(float *));
    int64_t bad_store = 0, bad_raw = 0, bad_pool = 0;
    double pool_err = 0;
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t L = b.len[s];
        if (L == 0) continue;
        gk[s] = malloc(sizeof(float) * (size_t)(L * dI));
        la_tensor tg;
        const int64_t gne[2] = {L, dI};
        la_tensor_init(&tg, gk[s], LA_F32, LA_DEVICE_CPU, 2, gne);
        la_fill_nan(gk[s], L * dI);
        CHECK_OK(la_paged_index_cache_gather(c, &tbt, s, L, &tg));
        for (int64_t t = 0; t < L; t++) {
            const float *row = b.keys + (s * b.maxlen + t) * dI;
            for (int64_t d = 0; d < dI; d++)
                if (memcmp(&gk[s][t * dI + d], &(float){stored_ref(pc->dt, row, dI, d)}, 4) != 0) bad_store++;
            if (pc->dt == LA_FP8_E4M3) { /* raw layout: values, then the page's scales */
                const int64_t slot = slot_of(&b, s, t), pg = slot / PS, off = slot % PS;
                const unsigned char *page = (const unsigned char *)raw + pg * pb;
                float scale, amax = 0;
                memcpy(&scale, page + PS * dI + off * 4, 4);
                for (int64_t d = 0; d < dI; d++) amax = fmaxf(amax, fabsf(row[d]));
                if (scale != (amax > 0 ? amax / 448.f : 1.f)) bad_raw++;
                for (int64_t d = 0; d < dI; d++)
                    if ((float)(ref_e4m3(page[off * dI + d]) * scale) != gk[s][t * dI + d]) bad_raw++;
            }
        }
        const int64_t B = 128, nb = (L + B - 1) / B;
        float *pm = malloc(sizeof(float) * (size_t)(nb * dI));
        la_fill_nan(pm, nb * dI);
        la_tensor tp;
        const int64_t pne[2] = {nb, dI};
        la_tensor_init(&tp, pm, LA_F32, LA_DEVICE_CPU, 2, pne);
        CHECK_OK(la_paged_index_cache_pooled(c, s, L, &tp));
        for (int64_t bl = 0; bl < nb; bl++)
            for (int64_t d = 0; d < dI; d++) {
                float sum = 0;
                double sd = 0;
                const int64_t e = (bl + 1) * B < L ? (bl + 1) * B : L;
                for (int64_t t = bl * B; t < e; t++) sum += gk[s][t * dI + d], sd += gk[s][t * dI + d];
                const float mean = sum / (float)(e - bl * B);
                if (memcmp(&mean, &pm[bl * dI + d], 4) != 0) bad_pool++;
                const double err = fabs(pm[bl * dI + d] - sd / (double)(e - bl * B)) / (fabs(sd / (e - bl * B)) + 1);
                if (!(err <= pool_err)) pool_err = isnan(err) ? INFINITY : err;
            }
        free(pm);
    }
    CHECK(bad_store == 0, "%s: %lld gathered values differ from the reference storage", dn, (long long)bad_store);
    CHECK(bad_raw == 0, "%s: %lld raw page bytes/scales off the DeepGEMM layout", dn, (long long)bad_raw);
    CHECK(bad_pool == 0, "%s: %lld pooled means differ from recomputation", dn, (long long)bad_pool);
    CHECK(pool_err <= 1e-5, "%s: pooled means vs float64: %.3g", dn, pool_err);

    /* queries */
    const int64_t T = nseq * nn;
    float *q = malloc(sizeof(float) * (size_t)(T * HI * dI)), *w = malloc(sizeof(float) * (size_t)(T * HI));
    for (int64_t i = 0; i < T * HI * dI; i++)
        q[i] = pc->integer ? (float)((int)(la_rng_uniform(r) * 5) - 2) : (float)la_rng_normal(r);
    for (int64_t i = 0; i < T * HI; i++) w[i] = pc->integer ? (float)(1 + (int)(la_rng_uniform(r) * 2)) : (float)fabs(la_rng_normal(r)) + 0.1f;
    /* row order: consecutive (q_seq NULL) or a random permutation named by q_seq */
    int64_t *row_of = malloc(sizeof(int64_t) * (size_t)T); /* row of (s, j) = row_of[s*nn+j] */
    for (int64_t i = 0; i < T; i++) row_of[i] = i;
    int32_t *qs = malloc(sizeof(int32_t) * (size_t)T);
    if (pc->use_qseq) {
        for (int64_t i = T - 1; i > 0; i--) {
            const int64_t j = (int64_t)(la_rng_uniform(r) * (double)(i + 1));
            int64_t t = row_of[i]; row_of[i] = row_of[j]; row_of[j] = t;
        }
        /* keep each sequence's rows in increasing order (query j = its j-th row) */
        for (int64_t s = 0; s < nseq; s++)
            for (int64_t a = 0; a < nn; a++)
                for (int64_t bq = a + 1; bq < nn; bq++)
                    if (row_of[s * nn + bq] < row_of[s * nn + a]) {
                        int64_t t = row_of[s * nn + a]; row_of[s * nn + a] = row_of[s * nn + bq]; row_of[s * nn + bq] = t;
                    }
    }
    for (int64_t i = 0; i < T; i++) qs[row_of[i]] = (int32_t)(i / nn);
    la_tensor tq, tw, tqs;
    const int64_t qne[3] = {T, HI, dI}, wne[2] = {T, HI};
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&tqs, qs, LA_I32, LA_DEVICE_CPU, 1, &T);
    la_paged_query pq;
    la_paged_query_init(&pq);
    pq.block_table = &tbt;
    pq.context_lens = &tcl;
    pq.next_n = nn;
    pq.q_seq = pc->use_qseq ? &tqs : NULL;
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = topk;
    ip.block_topk = pc->m;
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(T * topk)), *out2 = malloc(sizeof(int32_t) * (size_t)(T * topk));
    int32_t *ref = malloc(sizeof(int32_t) * (size_t)(nn * topk));
    la_tensor to, to2;
    const int64_t one[2] = {T, topk};
    la_tensor_init(&to, out, LA_I32, LA_DEVICE_CPU, 2, one);
    la_tensor_init(&to2, out2, LA_I32, LA_DEVICE_CPU, 2, one);
    for (int hisa = 0; hisa < 2; hisa++) {
        memset(out, 0x7f, sizeof(int32_t) * (size_t)(T * topk)); /* poison */
        memset(out2, 0x7f, sizeof(int32_t) * (size_t)(T * topk));
        pq.return_slots = 0;
        CHECK_OK(hisa ? la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &to, NULL) : la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &to, NULL));
        pq.return_slots = 1;
        CHECK_OK(hisa ? la_hisa_topk_paged(&ip, &tq, &tw, c0, &pq, &to2, NULL) : la_dsa_topk_paged(&ip, &tq, &tw, c0, &pq, &to2, NULL));
        int64_t bad = 0, bad_slot = 0;
        for (int64_t s = 0; s < nseq; s++) {
            const int64_t L = b.len[s];
            /* the dense indexer on the gathered keys, this sequence's queries */
            float *qd = malloc(sizeof(float) * (size_t)(nn * HI * dI)), *wd = malloc(sizeof(float) * (size_t)(nn * HI));
            for (int64_t j = 0; j < nn; j++) {
                memcpy(qd + j * HI * dI, q + row_of[s * nn + j] * HI * dI, sizeof(float) * (size_t)(HI * dI));
                memcpy(wd + j * HI, w + row_of[s * nn + j] * HI, sizeof(float) * (size_t)HI);
            }
            if (L > 0) {
                la_tensor dq, dk, dw, di;
                const int64_t dqne[3] = {nn, HI, dI}, dkne[2] = {L, dI}, dwne[2] = {nn, HI}, dine[2] = {nn, topk};
                la_tensor_init(&dq, qd, LA_F32, LA_DEVICE_CPU, 3, dqne);
                la_tensor_init(&dk, gk[s], LA_F32, LA_DEVICE_CPU, 2, dkne);
                la_tensor_init(&dw, wd, LA_F32, LA_DEVICE_CPU, 2, dwne);
                la_tensor_init(&di, ref, LA_I32, LA_DEVICE_CPU, 2, dine);
                CHECK_OK(hisa ? la_hisa_indexer(&ip, &dq, &dk, &dw, NULL, NULL, &di, NULL)
                              : la_dsa_indexer(&ip, &dq, &dk, &dw, NULL, NULL, &di, NULL, NULL));
            } else {
                for (int64_t i = 0; i < nn * topk; i++) ref[i] = -1;
            }
            for (int64_t j = 0; j < nn; j++) {
                const int64_t row = row_of[s * nn + j];
                for (int64_t i = 0; i < topk; i++) {
                    const int32_t e = ref[j * topk + i];
                    if (out[row * topk + i] != e) bad++;
                    if (out2[row * topk + i] != (e >= 0 ? (int32_t)slot_of(&b, s, e) : -1)) bad_slot++;
                }
                if (!hisa && pc->f64check && L > 0) {
                    int64_t end = L - nn + j + 1;
                    if (end < 0) end = 0;
                    sel_check_f64(qd + j * HI * dI, wd + j * HI, gk[s], HI, dI, L, out + row * topk, topk, end, dn);
                }
            }
            free(qd); free(wd);
        }
        CHECK(bad == 0, "%s %s paged: %lld entries differ from the dense indexer (nseq %lld next_n %lld q_seq %d)", dn,
              hisa ? "hisa" : "dsa", (long long)bad, (long long)nseq, (long long)nn, pc->use_qseq);
        CHECK(bad_slot == 0, "%s %s paged (no pooled state, return_slots): %lld entries differ", dn,
              hisa ? "hisa" : "dsa", (long long)bad_slot);
    }
    for (int64_t s = 0; s < nseq; s++) free(gk[s]);
    free(gk); free(q); free(w); free(row_of); free(qs); free(out); free(out2); free(ref); free(cl);
    la_paged_index_cache_destroy(c);
    la_paged_index_cache_destroy(c0);
    free_batch(&b);
}

static void test_e4m3(la_rng *r) {
    int bad = 0;
    /* encode through the cache: a key whose amax is 448 has scale 1, so the
     * stored values are e4m3(x) exactly */
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = 1;
    cp.head_dim = 128;
    la_paged_index_cache *c = NULL;
    CHECK_OK(la_paged_index_cache_create(&cp, &c));
    if (!c) return;
    float k[64 * 128];
    int32_t sl[64];
    for (int t = 0; t < 64; t++) {
        sl[t] = t;
        k[t * 128] = 448.f;
        for (int d = 1; d < 128; d++) {
            const double u = la_rng_uniform(r);
            /* every byte's value, midpoints between neighbours, and random values */
            if (t < 2) k[t * 128 + d] = (float)ref_e4m3((uint8_t)((d - 1) + t * 127 < 256 ? (d - 1) + t * 127 : 0));
            else if (t < 4) {
                const uint8_t a = (uint8_t)(((d - 1) + (t - 2) * 127) % 126);
                k[t * 128 + d] = (float)((ref_e4m3(a) + ref_e4m3((uint8_t)(a + 1))) / 2) * (d & 1 ? 1 : -1);
            } else k[t * 128 + d] = (float)((u * 2 - 1) * pow(2, -12 + 20 * la_rng_uniform(r)));
            if (isnan(k[t * 128 + d])) k[t * 128 + d] = 0;
        }
    }
    la_tensor tk, ts;
    const int64_t kne[2] = {64, 128}, n = 64;
    la_tensor_init(&tk, k, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&ts, sl, LA_I32, LA_DEVICE_CPU, 1, &n);
    CHECK_OK(la_paged_index_cache_append(c, &tk, &ts, NULL, NULL, NULL));
    void *raw;
    size_t pb;
    la_paged_index_cache_storage(c, &raw, &pb);
    const unsigned char *v = raw;
    for (int t = 0; t < 64; t++) {
        float sc;
        memcpy(&sc, v + 64 * 128 + t * 4, 4);
        if (sc != 1.f) bad++;
        for (int d = 0; d < 128; d++)
            if (v[t * 128 + d] != ref_encode(k[t * 128 + d])) {
                if (bad < 5)
                    fprintf(stderr, "e4m3(%.9g) = 0x%02x, want 0x%02x\n", k[t * 128 + d], v[t * 128 + d],
                            ref_encode(k[t * 128 + d]));
                bad++;
            }
    }
    CHECK(bad == 0, "e4m3: %d values not the nearest (ties to even)", bad);
    la_paged_index_cache_destroy(c);
}

/* ---- bad input ------------------------------------------------------------ */
#define CHECK_NAMES(expr, want, name)                                                  \
    do {                                                                               \
        CHECK_STATUS(expr, want);                                                      \
        CHECK(strstr(la_last_error(), name) != NULL, "%s: message '%s' does not name %s", #expr, \
              la_last_error(), name);                                                  \
    } while (0)

static int64_t g_n;
static la_tensor g_k, g_sl, g_sq, g_ps;
static void set_append(float *k, int32_t *sl, int32_t *sq, int32_t *ps, int64_t n, int64_t dI) {
    g_n = n;
    const int64_t kne[2] = {n, dI};
    la_tensor_init(&g_k, k, LA_F32, LA_DEVICE_CPU, 2, kne);
    la_tensor_init(&g_sl, sl, LA_I32, LA_DEVICE_CPU, 1, &g_n);
    la_tensor_init(&g_sq, sq, LA_I32, LA_DEVICE_CPU, 1, &g_n);
    la_tensor_init(&g_ps, ps, LA_I32, LA_DEVICE_CPU, 1, &g_n);
}

static void test_paged_errors(la_rng *r) {
    la_paged_cache_params cp;
    la_paged_index_cache *c = NULL;
    CHECK_NAMES(la_paged_index_cache_create(NULL, &c), LA_ERR_ARG, "params");
    la_paged_cache_params_init(&cp);
    CHECK_NAMES(la_paged_index_cache_create(&cp, &c), LA_ERR_ARG, "num_pages");
    cp.num_pages = 4;
    cp.head_dim = 16;
    cp.max_seqs = 2;
    cp.dtype = LA_F16;
    CHECK_NAMES(la_paged_index_cache_create(&cp, &c), LA_ERR_DTYPE, "dtype");
    cp.dtype = LA_FP8_E4M3;
    cp.page_size = 0;
    CHECK_NAMES(la_paged_index_cache_create(&cp, &c), LA_ERR_ARG, "page_size");
    cp.page_size = 64;
    cp.device = LA_DEVICE_CUDA;
    CHECK_CUDA_REFUSED(la_paged_index_cache_create(&cp, &c));
    cp.device = LA_DEVICE_CPU;
    CHECK_OK(la_paged_index_cache_create(&cp, &c));
    if (!c) return;
    const int64_t dI = 16;
    int32_t table[2][3] = {{3, 1, 0}, {2, 0, 0}};
    float k[80 * 16];
    int32_t sl[80], sq[80], ps[80];
    for (int i = 0; i < 80 * 16; i++) k[i] = (float)la_rng_normal(r);
    for (int i = 0; i < 70; i++) sl[i] = table[0][i / 64] * 64 + i % 64, sq[i] = 0, ps[i] = i;
    set_append(k, sl, sq, ps, 70, dI);
    CHECK_OK(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL));
    void *raw;
    size_t pb;
    la_paged_index_cache_storage(c, &raw, &pb);
    unsigned char *snap = malloc(4 * pb);
    memcpy(snap, raw, 4 * pb);
    float pool0[16], pool1[16];
    la_tensor tp;
    const int64_t pne[2] = {1, 16};
    la_tensor_init(&tp, pool0, LA_F32, LA_DEVICE_CPU, 2, pne);
    CHECK_OK(la_paged_index_cache_pooled(c, 0, 70, &tp));

    /* rejected appends: position 70, 71 then a bad one */
    for (int i = 0; i < 3; i++) sl[i] = table[0][1] * 64 + 6 + i, sq[i] = 0, ps[i] = 70 + i;
    set_append(k, sl, sq, ps, 3, dI);
    sl[2] = 4 * 64;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "slot_mapping");
    sl[2] = -2;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "slot_mapping");
    sl[2] = table[0][1] * 64 + 8;
    k[2 * 16 + 5] = NAN;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "k");
    k[2 * 16 + 5] = INFINITY;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "not finite");
    k[2 * 16 + 5] = 0.5f;
    ps[2] = 73; /* skips position 72 */
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "positions");
    ps[2] = 72;
    sq[2] = 2;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "seq_ids");
    sq[2] = 0;
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, NULL, NULL), LA_ERR_ARG, "positions");
    la_tensor kbad;
    const int64_t kbne[2] = {3, 15};
    la_tensor_init(&kbad, k, LA_F32, LA_DEVICE_CPU, 2, kbne);
    CHECK_NAMES(la_paged_index_cache_append(c, &kbad, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_SHAPE, "k");
    CHECK(memcmp(raw, snap, 4 * pb) == 0, "a rejected append changed the pages");
    la_tensor_init(&tp, pool1, LA_F32, LA_DEVICE_CPU, 2, pne);
    CHECK_OK(la_paged_index_cache_pooled(c, 0, 70, &tp));
    CHECK(memcmp(pool0, pool1, sizeof pool0) == 0, "a rejected append changed the pooled sums");
    CHECK_NAMES(la_paged_index_cache_pooled(c, 0, 71, &tp), LA_ERR_ARG, "context_lens");
    /* the rolled-back counts accept the valid batch */
    CHECK_OK(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL));

    /* rejected queries: idx untouched */
    int32_t cl[2] = {73, 0};
    la_tensor tbt, tcl, tq, tw, ti;
    const int64_t btne[2] = {2, 3}, n2 = 2;
    la_tensor_init(&tbt, table, LA_I32, LA_DEVICE_CPU, 2, btne);
    la_tensor_init(&tcl, cl, LA_I32, LA_DEVICE_CPU, 1, &n2);
    float q[2 * 2 * 16], w[2 * 2];
    for (int i = 0; i < 64; i++) q[i] = (float)la_rng_normal(r);
    for (int i = 0; i < 4; i++) w[i] = 1.f;
    int32_t idx[2 * 8], poison[2 * 8];
    memset(poison, 0x5a, sizeof poison);
    memcpy(idx, poison, sizeof idx);
    const int64_t qne[3] = {2, 2, 16}, wne[2] = {2, 2}, ine[2] = {2, 8};
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&tw, w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_paged_query pq;
    la_paged_query_init(&pq);
    pq.block_table = &tbt;
    pq.context_lens = &tcl;
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = 8;
    ip.block_topk = 2;
    CHECK_OK(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL));
    CHECK_OK(la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL));
    memcpy(idx, poison, sizeof idx);
    table[0][1] = 4;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "block_table");
    table[0][1] = -1;
    CHECK_NAMES(la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "block_table");
    table[0][1] = 1;
    cl[1] = 3 * 64 + 1;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "context_lens");
    cl[1] = -1;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "context_lens");
    cl[1] = 5; /* sequence 1 has no pooled tokens */
    CHECK_NAMES(la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "context_lens");
    cl[1] = 0;
    pq.next_n = 2;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_SHAPE, "next_n");
    pq.next_n = 0;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "next_n");
    pq.next_n = 1;
    int32_t qs[2] = {0, 2};
    la_tensor tqs;
    la_tensor_init(&tqs, qs, LA_I32, LA_DEVICE_CPU, 1, &n2);
    pq.q_seq = &tqs;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "q_seq");
    pq.q_seq = NULL;
    ip.block = 64;
    CHECK_NAMES(la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "block");
    ip.block = 128;
    la_tensor qbad;
    const int64_t qbne[3] = {2, 2, 8};
    la_tensor_init(&qbad, q, LA_F32, LA_DEVICE_CPU, 3, qbne);
    CHECK_NAMES(la_dsa_topk_paged(&ip, &qbad, &tw, c, &pq, &ti, NULL), LA_ERR_SHAPE, "q");
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, NULL, NULL), LA_ERR_ARG, "idx");
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, NULL, &pq, &ti, NULL), LA_ERR_ARG, "cache");
    ip.k_scale = &tw;
    CHECK_NAMES(la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, NULL), LA_ERR_ARG, "k_scale");
    ip.k_scale = NULL;
    CHECK(memcmp(idx, poison, sizeof idx) == 0, "a rejected paged call wrote idx");
    la_tensor tg;
    float g[80 * 16];
    const int64_t gne[2] = {74, 16};
    la_tensor_init(&tg, g, LA_F32, LA_DEVICE_CPU, 2, gne);
    CHECK_NAMES(la_paged_index_cache_gather(c, &tbt, 2, 74, &tg), LA_ERR_ARG, "row");
    table[0][1] = 9;
    CHECK_NAMES(la_paged_index_cache_gather(c, &tbt, 0, 74, &tg), LA_ERR_ARG, "block_table");
    table[0][1] = 1;
    /* the device-side status check: nothing to report on the CPU (every value was checked before its call) */
    CHECK_OK(la_paged_index_cache_check(c, NULL));
    CHECK_NAMES(la_paged_index_cache_check(NULL, NULL), LA_ERR_ARG, "cache");
    free(snap);
    la_paged_index_cache_destroy(c);
    /* pooled appends need max_seqs > 0 */
    cp.max_seqs = 0;
    CHECK_OK(la_paged_index_cache_create(&cp, &c));
    set_append(k, sl, sq, ps, 3, dI);
    CHECK_NAMES(la_paged_index_cache_append(c, &g_k, &g_sl, &g_sq, &g_ps, NULL), LA_ERR_ARG, "max_seqs");
    la_paged_index_cache_destroy(c);
}

int main(void) {
    la_rng r = la_test_rng("test_paged_index");
    test_e4m3(&r);
    const la_dtype dts[3] = {LA_F32, LA_BF16, LA_FP8_E4M3};
    const pcase cases[] = {
        /* dt, nseq, HI, dI, topk, m, next_n, lens, qseq, integer, f64 */
        {LA_F32, 3, 4, 16, 8, 2, 1, {1, 63, 65}, 0, 0, 1},
        {LA_F32, 4, 3, 32, 16, 3, 2, {128, 129, 1000, 2}, 1, 0, 1},
        {LA_F32, 2, 5, 63, 64, 4, 4, {300, 4}, 0, 0, 1},
        {LA_F32, 5, 2, 64, 32, 2, 4, {1, 3, 256, 700, 0}, 1, 1, 0},
        {LA_F32, 2, 8, 128, 100, 64, 1, {2000, 777}, 0, 0, 1},
    };
    const int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int di = 0; di < 3; di++)
        for (int i = 0; i < nc; i++) {
            pcase pc = cases[i];
            pc.dt = dts[di];
            run_case(&r, &pc);
        }
    /* long contexts, a few cases only */
    {
        pcase big = {LA_FP8_E4M3, 2, 2, 16, 2048, 64, 1, {131072, 40000}, 0, 0, 0};
        run_case(&r, &big);
        pcase big2 = {LA_BF16, 1, 2, 16, 512, 16, 4, {65537}, 1, 0, 0};
        run_case(&r, &big2);
    }
    test_paged_errors(&r);
    return la_test_finish();
}
