/* Case table of family "paged_meta_overlap" (src/cuda/paged_hisa.cuh): paged
 * HISA on the pooled sums of an e4m3 cache with e4m3 q at HI 64, dI 128 (the
 * decode shape), with the block scores derived from context_lens beside the
 * metadata kernel ("on", the default where it applies) and after it
 * ("off"). Each case:
 *
 *  - idx (positions and slots) bit for bit the same under "on", "off" and
 *    the default, outputs poisoned differently;
 *  - garbage context_lens (negative, over the table's capacity, INT32_MAX):
 *    each call itself succeeds, idx stays inside -1 .. the table's capacity,
 *    "on" and "off" give the same bits (the same clamps), and
 *    la_paged_index_cache_check reports context_lens once.
 * Shapes: next_n 1 (decode: the one-row score kernel, the packed metadata
 * kernel), 2 and 3 (the two-row kernel), 16 (prefill-like: the means pass,
 * where "on" runs as "off"); lengths 0, 1, around pages and pooled blocks,
 * 128K. (The comparison with the CPU path: cases_paged.c.) */
#include "bo_staging.h"
#include "cpu/paged_index_cpu.h"

#define PM_PS 64

typedef struct pm_cfg {
    int64_t nseq, next_n, topk, m;
    int64_t lens[4];
} pm_cfg;

static void *pm_dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (la_dev_malloc(&d, bytes) != LA_OK) return NULL;
    la_dev_upload(d, h, bytes);
    return d;
}

/* idx of one HISA call under paged_meta_overlap = v (NULL: the default) into h; 0 if skipped */
static int pm_call(const char *v, int poison, const la_index_params *ip, const la_tensor *dq, const la_tensor *dw,
                   la_paged_index_cache *dc, const la_paged_query *pq, const la_tensor *didx, int32_t *h, size_t bytes) {
    if (v && !bo_use_variant("paged_meta_overlap", v)) return 0;
    la_dev_memset(didx->data, poison, bytes);
    int ok = CHECK_DEV(la_hisa_topk_paged(ip, dq, dw, dc, pq, (la_tensor *)didx, bo_ctx()));
    la_dev_synchronize();
    if (ok) la_dev_download(h, didx->data, bytes);
    bo_use_variant("paged_meta_overlap", NULL);
    return ok;
}

static void run_paged_meta(const void *arg) {
    const pm_cfg *C = arg;
    la_rng *r = &bo_rng;
    const int64_t nseq = C->nseq, nn = C->next_n, HI = 64, dI = 128, topk = C->topk, T = nseq * nn;
    int64_t pages = 2, maxlen = 1;
    for (int64_t s = 0; s < nseq; s++) {
        pages += (C->lens[s] + PM_PS - 1) / PM_PS;
        if (C->lens[s] > maxlen) maxlen = C->lens[s];
    }
    const int64_t maxp = (maxlen + PM_PS - 1) / PM_PS + 1;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)pages), *table = calloc((size_t)nseq * (size_t)maxp, 4);
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(la_rng_uniform(r) * (double)(i + 1));
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    int64_t at = 0;
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t j = 0; j < (C->lens[s] + PM_PS - 1) / PM_PS; j++) table[s * maxp + j] = perm[at++];
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = pages;
    cp.page_size = PM_PS;
    cp.head_dim = dI;
    cp.dtype = LA_FP8_E4M3;
    cp.max_seqs = nseq;
    cp.device = LA_DEVICE_CUDA;
    la_paged_index_cache *dc = NULL;
    CHECK_OK(la_paged_index_cache_create(&cp, &dc));
    if (!dc) return;
    /* keys appended sequence by sequence in rounds of up to cap tokens */
    const int64_t cap = 8192;
    float *kb = malloc(sizeof(float) * (size_t)(cap * dI));
    int32_t *meta = malloc(sizeof(int32_t) * (size_t)cap * 3);
    void *ak = NULL, *as = NULL, *aq = NULL, *ap = NULL;
    la_dev_malloc(&ak, sizeof(float) * (size_t)(cap * dI));
    la_dev_malloc(&as, 4 * (size_t)cap);
    la_dev_malloc(&aq, 4 * (size_t)cap);
    la_dev_malloc(&ap, 4 * (size_t)cap);
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t p0 = 0; p0 < C->lens[s]; p0 += cap) {
            const int64_t n = C->lens[s] - p0 < cap ? C->lens[s] - p0 : cap;
            la_fill_normal(r, kb, n * dI, 1.0);
            for (int64_t i = 0; i < n; i++) {
                const int64_t pos = p0 + i;
                meta[i] = table[s * maxp + pos / PM_PS] * PM_PS + (int32_t)(pos % PM_PS);
                meta[cap + i] = (int32_t)s;
                meta[2 * cap + i] = (int32_t)pos;
            }
            la_dev_upload(ak, kb, sizeof(float) * (size_t)(n * dI));
            la_dev_upload(as, meta, (size_t)n * 4);
            la_dev_upload(aq, meta + cap, (size_t)n * 4);
            la_dev_upload(ap, meta + 2 * cap, (size_t)n * 4);
            la_tensor dk, ds, dsq, dp;
            const int64_t kne[2] = {n, dI};
            la_tensor_init(&dk, ak, LA_F32, LA_DEVICE_CUDA, 2, kne);
            la_tensor_init(&ds, as, LA_I32, LA_DEVICE_CUDA, 1, &n);
            la_tensor_init(&dsq, aq, LA_I32, LA_DEVICE_CUDA, 1, &n);
            la_tensor_init(&dp, ap, LA_I32, LA_DEVICE_CUDA, 1, &n);
            CHECK_OK(la_paged_index_cache_append(dc, &dk, &ds, &dsq, &dp, NULL));
        }
    la_dev_free(ak); la_dev_free(as); la_dev_free(aq); la_dev_free(ap);
    /* e4m3 q, f32 weights */
    uint8_t *q8 = malloc((size_t)(T * HI * dI));
    float *w = malloc(sizeof(float) * (size_t)(T * HI)), x;
    for (int64_t i = 0; i < T * HI * dI; i++) {
        la_fill_normal(r, &x, 1, 1.0);
        q8[i] = la_f32_to_e4m3(x);
    }
    for (int64_t i = 0; i < T * HI; i++) w[i] = (float)la_rng_uniform(r) + 0.05f;
    int32_t cl[4];
    for (int64_t s = 0; s < nseq; s++) cl[s] = (int32_t)C->lens[s];
    void *d_q = pm_dev_copy(q8, (size_t)(T * HI * dI)), *d_w = pm_dev_copy(w, sizeof(float) * (size_t)(T * HI));
    void *d_bt = pm_dev_copy(table, (size_t)(nseq * maxp) * 4), *d_cl = pm_dev_copy(cl, (size_t)nseq * 4), *d_idx = NULL;
    const size_t ib = (size_t)(T * topk) * 4;
    la_dev_malloc(&d_idx, ib);
    la_tensor dq, dw, dbt, dcl, didx;
    const int64_t qne[3] = {T, HI, dI}, wne[2] = {T, HI}, btne[2] = {nseq, maxp}, ine[2] = {T, topk};
    la_tensor_init(&dq, d_q, LA_FP8_E4M3, LA_DEVICE_CUDA, 3, qne);
    la_tensor_init(&dw, d_w, LA_F32, LA_DEVICE_CUDA, 2, wne);
    la_tensor_init(&dbt, d_bt, LA_I32, LA_DEVICE_CUDA, 2, btne);
    la_tensor_init(&dcl, d_cl, LA_I32, LA_DEVICE_CUDA, 1, &nseq);
    la_tensor_init(&didx, d_idx, LA_I32, LA_DEVICE_CUDA, 2, ine);
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = topk;
    ip.block_topk = C->m;
    int32_t *h_off = malloc(ib), *h_on = malloc(ib), *h_def = malloc(ib);
    for (int bad = 0; bad < 2; bad++) {
        if (bad) { /* garbage lengths: found and clamped on the device */
            cl[0] = -5;
            if (nseq > 1) cl[nseq - 1] = INT32_MAX;
            if (nseq > 2) cl[1] = (int32_t)(maxp * PM_PS + 7);
            la_dev_upload(d_cl, cl, (size_t)nseq * 4);
        }
        for (int slots = 0; slots < 2; slots++) {
            la_paged_query pq;
            la_paged_query_init(&pq);
            pq.block_table = &dbt;
            pq.context_lens = &dcl;
            pq.next_n = nn;
            pq.return_slots = slots;
            const char *what = bad ? (slots ? "garbage context_lens (slots)" : "garbage context_lens") : slots ? "slots" : "positions";
            const int got_off = pm_call("off", 0x7f, &ip, &dq, &dw, dc, &pq, &didx, h_off, ib);
            if (bad) {
                la_status st = la_paged_index_cache_check(dc, NULL);
                CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "context_lens"), "paged_meta_overlap off, %s: check: %s %s",
                      what, la_status_string(st), la_last_error());
            }
            const int got_on = pm_call("on", 0x5a, &ip, &dq, &dw, dc, &pq, &didx, h_on, ib);
            if (bad) {
                la_status st = la_paged_index_cache_check(dc, NULL);
                CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "context_lens"), "paged_meta_overlap on, %s: check: %s %s",
                      what, la_status_string(st), la_last_error());
                CHECK_OK(la_paged_index_cache_check(dc, NULL)); /* reported once */
            }
            const int got_def = pm_call(NULL, 0x33, &ip, &dq, &dw, dc, &pq, &didx, h_def, ib);
            if (bad) (void)la_paged_index_cache_check(dc, NULL);
            if (got_on && got_off) {
                int64_t d = 0, wild = 0;
                for (int64_t t = 0; t < T; t++) d += memcmp(h_on + t * topk, h_off + t * topk, (size_t)topk * 4) != 0;
                CHECK(d == 0, "paged_meta_overlap, %s: %lld of %lld rows differ between on and off", what, (long long)d, (long long)T);
                if (!slots)
                    for (int64_t i = 0; i < T * topk; i++) wild += h_on[i] < -1 || h_on[i] >= maxp * PM_PS;
                CHECK(wild == 0, "paged_meta_overlap on, %s: %lld idx entries outside -1..%lld", what, (long long)wild,
                      (long long)(maxp * PM_PS - 1));
            }
            if (got_on && got_def) {
                int64_t d = 0;
                for (int64_t t = 0; t < T; t++) d += memcmp(h_on + t * topk, h_def + t * topk, (size_t)topk * 4) != 0;
                CHECK(d == 0, "paged_meta_overlap, %s: %lld rows differ between on and the default", what, (long long)d);
            }
        }
    }
    CHECK_OK(la_paged_index_cache_check(dc, NULL));
    la_dev_free(d_q); la_dev_free(d_w); la_dev_free(d_bt); la_dev_free(d_cl); la_dev_free(d_idx);
    free(h_off); free(h_on); free(h_def); free(q8); free(w); free(kb); free(meta); free(perm); free(table);
    la_paged_index_cache_destroy(dc);
}

/* The family's probe: one HISA call on a one-page e4m3 cache (zero keys, no
 * pooled sums: the variant is read, "on" runs as "off") */
static la_status probe_paged_meta(la_context *ctx) {
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = 1;
    cp.page_size = PM_PS;
    cp.head_dim = 128;
    cp.dtype = LA_FP8_E4M3;
    cp.device = LA_DEVICE_CUDA;
    la_paged_index_cache *c = NULL;
    la_status s = la_paged_index_cache_create(&cp, &c);
    if (s != LA_OK) return s;
    const int64_t T = 1, HI = 64, dI = 128, K = 4, one = 1;
    int32_t tab = 0, len = PM_PS;
    void *dq = NULL, *dw = NULL, *di = NULL, *dt = pm_dev_copy(&tab, 4), *dl = pm_dev_copy(&len, 4);
    la_dev_malloc(&dq, (size_t)(T * HI * dI));
    la_dev_malloc(&dw, (size_t)(T * HI) * 4);
    la_dev_malloc(&di, (size_t)(T * K) * 4);
    la_dev_memset(dq, 0, (size_t)(T * HI * dI));
    la_dev_memset(dw, 0, (size_t)(T * HI) * 4);
    la_tensor tq, tw, ti, tt, tl;
    const int64_t qne[3] = {T, HI, dI}, wne[2] = {T, HI}, ine[2] = {T, K}, tne[2] = {1, 1};
    la_tensor_init(&tq, dq, LA_FP8_E4M3, LA_DEVICE_CUDA, 3, qne);
    la_tensor_init(&tw, dw, LA_F32, LA_DEVICE_CUDA, 2, wne);
    la_tensor_init(&ti, di, LA_I32, LA_DEVICE_CUDA, 2, ine);
    la_tensor_init(&tt, dt, LA_I32, LA_DEVICE_CUDA, 2, tne);
    la_tensor_init(&tl, dl, LA_I32, LA_DEVICE_CUDA, 1, &one);
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = K;
    la_paged_query pq;
    la_paged_query_init(&pq);
    pq.block_table = &tt;
    pq.context_lens = &tl;
    s = la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, ctx);
    la_dev_synchronize();
    la_dev_free(dq); la_dev_free(dw); la_dev_free(di); la_dev_free(dt); la_dev_free(dl);
    la_paged_index_cache_destroy(c);
    return s;
}

void cases_paged_meta(bo_list *L) {
    bo_add_probe(L, "paged_meta_overlap", probe_paged_meta);
    /* nseq next_n topk m lens */
    const pm_cfg cases[] = {
        {4, 1, 256, 8, {1, 63, 65, 0}},
        {4, 1, 300, 6, {129, 1000, 5000, 128}},
        {2, 3, 200, 5, {7000, 257}},
        {3, 2, 2048, 64, {131072, 4097, 65}},
        {3, 1, 2048, 64, {131072, 32768, 77777}},
        {2, 16, 300, 6, {6000, 300}},
    };
    char name[BO_NAME_MAX];
    for (int i = 0; i < (int)(sizeof cases / sizeof cases[0]); i++) {
        const pm_cfg *c = &cases[i];
        const bo_opts o = {"paged_meta", BO_CUDA, i == 0, NULL, NULL, NULL};
        snprintf(name, sizeof name, "paged_meta e4m3 nseq %lld next_n %lld topk %lld m %lld lens %lld...%s",
                 (long long)c->nseq, (long long)c->next_n, (long long)c->topk, (long long)c->m,
                 (long long)c->lens[0], c->lens[0] >= 131072 ? " (128K)" : "");
        bo_add(L, &o, run_paged_meta, c, sizeof *c, name);
    }
}
