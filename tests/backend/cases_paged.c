/* Case table of the paged indexer key cache and paged DSA / HISA on CUDA
 * against the CPU path, from the former tests/cuda/test_cuda_paged.c
 * (tests/cpu/test_paged_index.c checks the CPU path against the dense
 * indexers and float64). Each case:
 *
 *  - the same appends (interleaved, chunked) into a CPU and a CUDA cache:
 *    page bytes identical (e4m3 values and fp32 scales, bf16, f32) and
 *    pooled means identical;
 *  - paged DSA / HISA idx (positions and slots): equal to the CPU's; rows
 *    that differ must be near-ties: the float64 scores of both selections,
 *    sorted, agree within 1e-5 relative (counted and printed);
 *  - next_n 1/2/4, q_seq orderings, shuffled pages, contexts 0 ... 128K;
 *  - bad input on device views: appends rejected with a status naming the
 *    argument, pages unchanged; bad block_table / context_lens / q_seq
 *    values of a paged call found on the device (clamped reads, idx inside
 *    the table), reported by la_paged_index_cache_check or by the next
 *    call (which writes nothing), naming the argument.
 * Cases: f32, bf16 and fp8 e4m3 over four configurations and the --san
 * representative (the --small subset), then 128K-token contexts (fp8,
 * bf16: past the top-k's 64K-row bound of its sample size; appended in
 * rounds of up to 3000 tokens, see BIG_CTX).
 * (Sparse MLA decode over a paged latent cache: cases_smla_paged.c.) */
#include "bo_staging.h"
#include "cpu/paged_index_cpu.h"

#define PS 64
#define BIG_CTX 16384 /* contexts past this are appended in large rounds */

static void *dev_copy(const void *h, size_t bytes) {
    void *d = NULL;
    if (la_dev_malloc(&d, bytes) != LA_OK) return NULL;
    la_dev_upload(d, h, bytes);
    return d;
}

typedef struct cfg {
    la_dtype dt;
    int64_t nseq, HI, dI, topk, m, next_n;
    int64_t lens[6];
    int qseq;
    int tcq; /* q in the cache's tensor-core dtype (bf16 cache: bf16 q, fp8: e4m3 q), else f32 */
} cfg;

/* the position in a sequence of a cache slot (page * PS + offset) through
 * its block-table row; -1 for a negative slot, PS * maxp (past every
 * context) for a slot of a page the row does not hold */
static int32_t slot_position(const int32_t *row, int64_t maxp, int32_t slot) {
    if (slot < 0) return -1;
    for (int64_t j = 0; j < maxp; j++)
        if (row[j] == slot / PS) return (int32_t)(j * PS + slot % PS);
    return (int32_t)(maxp * PS);
}
static double score64(const float *q, const float *w, const float *k, int64_t HI, int64_t dI) {
    double a = 0;
    for (int64_t h = 0; h < HI; h++) {
        double dot = 0;
        for (int64_t d = 0; d < dI; d++) dot += (double)q[h * dI + d] * k[d];
        a += (double)w[h] * (dot > 0 ? dot : 0);
    }
    return a;
}
static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Tensor-core queries (cfg.tcq): (1) paged DSA equals the dense DSA
 * (la_dsa_indexer) on each sequence's gathered keys -- the cache's bf16 rows,
 * or its e4m3 rows with their scales and q_scale 1 -- bit for bit: the
 * paged mma.sync kernel (the default for bf16 and at HI != 64; forced "mma"
 * for fp8 at HI 64) equals the dense mma.sync variant, and the dense default
 * for bf16 (wgmma at HI 64: equal) and at HI != 64 (mma.sync); fp8 at HI 64:
 * the variants "wgmma", "wgmma2", "wgmma2r" (pw2_kernel with topk_rows),
 * "wgmma2g" (with topk_groups) equal the dense default (DSA v2's e4m3 wgmma),
 * the same bits on a second call; the paged default equals a dense kernel (wgmma2g,
 * or mma.sync with paged_index.cu's kPagedWgmma2Default off); (2) paged HISA
 * keeping every block equals paged DSA on the mma.sync kernel (HISA's
 * candidate scores are that kernel in gather mode). dl: the device pages. */
static void tc_equalities(const cfg *C, la_paged_index_cache *dc, const unsigned char *dl, size_t pb,
                          const int32_t *table, int64_t maxp, const void *qdev, const float *w,
                          const int64_t *rowof, const int32_t *idsa, const la_index_params *ip,
                          const la_tensor *dq, const la_tensor *dw, const la_tensor *dbt, const la_tensor *dcl,
                          const la_tensor *dqs) {
    const int64_t nseq = C->nseq, HI = C->HI, dI = C->dI, topk = C->topk, nn = C->next_n, T = nseq * nn;
    const int fp8 = C->dt == LA_FP8_E4M3;
    const size_t eb = fp8 ? 1 : 2, rb = (size_t)dI * eb;
    const la_dtype dt = fp8 ? LA_FP8_E4M3 : LA_BF16;
    int32_t *got = malloc((size_t)(nn * topk) * 4);
    unsigned char *qd = malloc(rb * (size_t)(nn * HI));
    float *wd = malloc(sizeof(float) * (size_t)(nn * HI)), *ones = malloc(sizeof(float) * (size_t)(nn * HI));
    for (int64_t i = 0; i < nn * HI; i++) ones[i] = 1.f;
    int64_t diff[2] = {0, 0}, nbmax = 1;
    int32_t *dflt = malloc((size_t)(T * topk) * 4); /* the dense default's rows (pass 0) */
    int32_t *dmma = malloc((size_t)(T * topk) * 4); /* the dense mma.sync variant's rows (pass 1) */
    char *have = calloc((size_t)T, 1);
    const char *kern[2] = {"default", "mma"};
    int have_mma = 0;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1 && !bo_use_variant("dsa", "mma")) break;
        for (int64_t s = 0; s < nseq; s++) {
            const int64_t L = C->lens[s];
            if (!L) continue;
            if ((L + 127) / 128 > nbmax) nbmax = (L + 127) / 128;
            unsigned char *kd = malloc(rb * (size_t)L);
            float *ks = malloc(sizeof(float) * (size_t)L);
            for (int64_t pos = 0; pos < L; pos++) {
                const int64_t slot = table[s * maxp + pos / PS] * PS + pos % PS, pg = slot / PS, off = slot % PS;
                memcpy(kd + pos * rb, dl + pg * pb + off * rb, rb);
                if (fp8) memcpy(&ks[pos], dl + pg * pb + PS * rb + off * 4, 4);
            }
            for (int64_t j = 0; j < nn; j++) {
                const int64_t t = rowof[s * nn + j];
                memcpy(qd + j * HI * rb, (const unsigned char *)qdev + t * HI * rb, rb * (size_t)HI);
                memcpy(wd + j * HI, w + t * HI, sizeof(float) * (size_t)HI);
            }
            void *d_k = dev_copy(kd, rb * (size_t)L), *d_ks = dev_copy(ks, sizeof(float) * (size_t)L);
            void *d_q = dev_copy(qd, rb * (size_t)(nn * HI)), *d_w = dev_copy(wd, sizeof(float) * (size_t)(nn * HI));
            void *d_qs = dev_copy(ones, sizeof(float) * (size_t)(nn * HI)), *d_i = NULL;
            la_dev_malloc(&d_i, (size_t)(nn * topk) * 4);
            la_dev_memset(d_i, 0x7f, (size_t)(nn * topk) * 4);
            la_tensor tk, tks, tq, tqs, tw, ti;
            const int64_t kne[2] = {L, dI}, qne[3] = {nn, HI, dI}, wne[2] = {nn, HI}, ine[2] = {nn, topk};
            la_tensor_init(&tk, d_k, dt, LA_DEVICE_CUDA, 2, kne);
            la_tensor_init(&tks, d_ks, LA_F32, LA_DEVICE_CUDA, 1, &L);
            la_tensor_init(&tq, d_q, dt, LA_DEVICE_CUDA, 3, qne);
            la_tensor_init(&tqs, d_qs, LA_F32, LA_DEVICE_CUDA, 2, wne);
            la_tensor_init(&tw, d_w, LA_F32, LA_DEVICE_CUDA, 2, wne);
            la_tensor_init(&ti, d_i, LA_I32, LA_DEVICE_CUDA, 2, ine);
            la_index_params p;
            la_index_params_init(&p);
            p.topk = topk;
            if (fp8) {
                p.k_scale = &tks;
                p.q_scale = &tqs;
            }
            if (CHECK_DEV(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()))) {
                la_dev_download(got, d_i, (size_t)(nn * topk) * 4);
                for (int64_t j = 0; j < nn; j++) {
                    diff[pass] += memcmp(got + j * topk, idsa + rowof[s * nn + j] * topk, (size_t)topk * 4) != 0;
                    memcpy((pass ? dmma : dflt) + rowof[s * nn + j] * topk, got + j * topk, (size_t)topk * 4);
                    if (pass == 0) have[rowof[s * nn + j]] = 1;
                }
            }
            la_dev_free(d_k); la_dev_free(d_ks); la_dev_free(d_q); la_dev_free(d_w); la_dev_free(d_qs); la_dev_free(d_i);
            free(kd); free(ks);
        }
        /* the paged mma.sync kernel is the dense mma.sync one: equal to it
         * always; the dense default is wgmma at HI 64 x dI 128, whose e4m3
         * k32 MMA rounds its partial sums differently from mma.sync's e4m3
         * (run through the f16 path on sm_90): for fp8 at HI 64 the paged
         * default is checked below, against both */
        if (!fp8 || HI != 64)
            CHECK(diff[pass] == 0, "%s paged dsa (tensor cores): %lld rows differ from the dense dsa (%s kernel) on "
                  "the gathered keys", la_dtype_name(C->dt), (long long)diff[pass], kern[pass]);
        if (pass == 1) have_mma = 1;
    }
    bo_use_variant("dsa", NULL);
    /* fp8 at HI 64: the paged default equals one of the dense kernels; the
     * paged variants each equal theirs (mma.sync: the dense mma.sync
     * variant; the wgmma ones: the dense default), the same bits on a second
     * call; rows differing from the paged mma.sync kernel counted */
    int64_t wd_dense = -1, wd_mma = -1;
    int32_t *pmma = NULL; /* paged mma.sync rows (forced "mma"): HISA's reference */
    if (fp8 && HI == 64) {
        CHECK(diff[0] == 0 || (have_mma && diff[1] == 0), "fp8 paged dsa (default): %lld rows differ from the dense "
              "default, %lld from the dense mma.sync variant", (long long)diff[0], have_mma ? (long long)diff[1] : -1LL);
        static const char *const pv[5] = {"mma", "wgmma", "wgmma2", "wgmma2r", "wgmma2g"};
        la_paged_query pw;
        la_paged_query_init(&pw);
        pw.block_table = dbt;
        pw.context_lens = dcl;
        pw.next_n = nn;
        pw.q_seq = C->qseq ? dqs : NULL;
        void *d_w1 = NULL;
        la_dev_malloc(&d_w1, (size_t)(T * topk) * 4);
        la_tensor tw1;
        const int64_t wne1[2] = {T, topk};
        la_tensor_init(&tw1, d_w1, LA_I32, LA_DEVICE_CUDA, 2, wne1);
        int32_t *r1 = malloc((size_t)(T * topk) * 4), *r2 = malloc((size_t)(T * topk) * 4);
        for (int v = 0; v < 5; v++) {
            if (!bo_use_variant("paged", pv[v])) continue;
            la_dev_memset(d_w1, 0x7f, (size_t)(T * topk) * 4);
            if (CHECK_DEV(la_dsa_topk_paged(ip, dq, dw, dc, &pw, &tw1, bo_ctx()))) {
                la_dev_download(r1, d_w1, (size_t)(T * topk) * 4);
                la_dev_memset(d_w1, 0x7f, (size_t)(T * topk) * 4);
                CHECK_OK(la_dsa_topk_paged(ip, dq, dw, dc, &pw, &tw1, bo_ctx()));
                la_dev_download(r2, d_w1, (size_t)(T * topk) * 4);
                CHECK(!memcmp(r1, r2, (size_t)(T * topk) * 4), "fp8 paged dsa (%s): a second call differs", pv[v]);
                const int32_t *dense = v == 0 ? (have_mma ? dmma : NULL) : dflt;
                int64_t dd = 0, dm = 0;
                for (int64_t t = 0; t < T; t++) {
                    const int32_t *ref = have[t] && dense ? dense + t * topk : idsa + t * topk; /* empty: all -1 */
                    dd += memcmp(r1 + t * topk, ref, (size_t)topk * 4) != 0;
                    if (v) dm += pmma && memcmp(r1 + t * topk, pmma + t * topk, (size_t)topk * 4) != 0;
                }
                if (dense)
                    CHECK(dd == 0, "fp8 paged dsa (%s): %lld rows differ from the dense %s on the gathered keys", pv[v],
                          (long long)dd, v == 0 ? "mma.sync variant" : "default (DSA v2 wgmma)");
                if (v == 0) {
                    pmma = malloc((size_t)(T * topk) * 4);
                    memcpy(pmma, r1, (size_t)(T * topk) * 4);
                } else {
                    if (wd_dense < dd) wd_dense = dd;
                    if (pmma && wd_mma < dm) wd_mma = dm;
                }
            }
            CHECK_OK(la_paged_index_cache_check(dc, bo_ctx()));
        }
        la_dev_free(d_w1);
        free(r1); free(r2);
        bo_use_variant("paged", NULL);
    }
    /* HISA keeping every block == DSA */
    la_index_params ih = *ip;
    ih.block_topk = nbmax;
    la_paged_query pq;
    la_paged_query_init(&pq);
    pq.block_table = dbt;
    pq.context_lens = dcl;
    pq.next_n = nn;
    pq.q_seq = C->qseq ? dqs : NULL;
    void *d_i = NULL;
    la_dev_malloc(&d_i, (size_t)(T * topk) * 4);
    la_dev_memset(d_i, 0x7f, (size_t)(T * topk) * 4);
    la_tensor ti;
    const int64_t ine[2] = {T, topk};
    la_tensor_init(&ti, d_i, LA_I32, LA_DEVICE_CUDA, 2, ine);
    /* the mma.sync candidate kernels (forced "gather") select as the paged
     * mma.sync DSA; the wgmma gather (forced "wgmma", fp8 at HI 64 on sm_90)
     * as the dense default, DSA v2, on the gathered keys */
    int32_t *all = malloc((size_t)(T * topk) * 4);
    int64_t hd = 0, hw = -1;
    if (bo_use_variant("paged_hisa_cand", "gather")) {
        CHECK_OK(la_hisa_topk_paged(&ih, dq, dw, dc, &pq, &ti, bo_ctx()));
        la_dev_download(all, d_i, (size_t)(T * topk) * 4);
        const int32_t *dsa_mma = fp8 && HI == 64 ? pmma : idsa; /* NULL: "mma" not run */
        for (int64_t t = 0; dsa_mma && t < T; t++) hd += memcmp(all + t * topk, dsa_mma + t * topk, (size_t)topk * 4) != 0;
        CHECK(hd == 0, "%s paged hisa keeping all %lld blocks: %lld rows differ from paged dsa (mma.sync)",
              la_dtype_name(C->dt), (long long)nbmax, (long long)hd);
    }
    if (fp8 && HI == 64 && bo_use_variant("paged_hisa_cand", "wgmma")) {
        la_dev_memset(d_i, 0x5a, (size_t)(T * topk) * 4);
        CHECK_OK(la_hisa_topk_paged(&ih, dq, dw, dc, &pq, &ti, bo_ctx()));
        la_dev_download(all, d_i, (size_t)(T * topk) * 4);
        hw = 0;
        for (int64_t t = 0; t < T; t++)
            hw += memcmp(all + t * topk, have[t] ? dflt + t * topk : idsa + t * topk, (size_t)topk * 4) != 0;
        CHECK(hw == 0, "%s paged hisa (wgmma) keeping all %lld blocks: %lld rows differ from the dense dsa default",
              la_dtype_name(C->dt), (long long)nbmax, (long long)hw);
    }
    bo_use_variant("paged_hisa_cand", NULL);
    free(dflt); free(dmma); free(have);
    printf("  tensor cores: dense dsa rows differing (default, mma): %lld, %lld; hisa(all blocks) vs dsa: %lld, "
           "wgmma vs dense default: %lld; paged wgmma variants (worst) vs dense default, vs paged mma: %lld, %lld\n",
           (long long)diff[0], (long long)diff[1], (long long)hd, (long long)hw, (long long)wd_dense, (long long)wd_mma);
    la_dev_free(d_i);
    free(all); free(got); free(qd); free(wd); free(ones); free(pmma);
}

static void run_paged(const void *arg) {
    const cfg *C = arg;
    la_rng *r = &bo_rng;
    int64_t exact_rows = 0, tie_rows = 0;
    const int64_t nseq = C->nseq, dI = C->dI, HI = C->HI, topk = C->topk, nn = C->next_n;
    int64_t pages = 0, maxlen = 1;
    for (int64_t s = 0; s < nseq; s++) {
        pages += (C->lens[s] + PS - 1) / PS;
        if (C->lens[s] > maxlen) maxlen = C->lens[s];
    }
    pages += 2;
    const int64_t maxp = (maxlen + PS - 1) / PS + 1;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)(pages > 0 ? pages : 1)), *table = calloc((size_t)(nseq * maxp), 4);
    for (int64_t i = 0; i < pages; i++) perm[i] = (int32_t)i;
    for (int64_t i = pages - 1; i > 0; i--) {
        int64_t j = (int64_t)(la_rng_uniform(r) * (double)(i + 1));
        int32_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
    }
    int64_t at = 0;
    for (int64_t s = 0; s < nseq; s++)
        for (int64_t j = 0; j < (C->lens[s] + PS - 1) / PS; j++) table[s * maxp + j] = perm[at++];
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = pages;
    cp.head_dim = dI;
    cp.dtype = C->dt;
    cp.max_seqs = nseq;
    la_paged_index_cache *hc = NULL, *dc = NULL;
    CHECK_OK(la_paged_index_cache_create(&cp, &hc));
    cp.device = LA_DEVICE_CUDA;
    CHECK_OK(la_paged_index_cache_create(&cp, &dc));
    if (!hc || !dc) return;
    /* keys: each sequence's tokens, appended in interleaved chunks */
    float **keys = calloc((size_t)nseq, sizeof(float *));
    for (int64_t s = 0; s < nseq; s++) {
        keys[s] = malloc(sizeof(float) * (size_t)((C->lens[s] ? C->lens[s] : 1) * dI));
        la_fill_normal(r, keys[s], C->lens[s] * dI, 1.0);
    }
    int64_t *done = calloc((size_t)nseq, sizeof(int64_t));
    const int64_t cap = 8192;
    float *kb = malloc(sizeof(float) * (size_t)(cap * dI));
    int32_t *meta = malloc(sizeof(int32_t) * (size_t)cap * 3);
    /* device copies of one round's keys, slots, seq_ids and positions: one
     * buffer each for the whole case */
    void *ap_k = NULL, *ap_s = NULL, *ap_q = NULL, *ap_p = NULL;
    if (la_dev_malloc(&ap_k, sizeof(float) * (size_t)(cap * dI)) != LA_OK ||
        la_dev_malloc(&ap_s, sizeof(int32_t) * (size_t)cap) != LA_OK ||
        la_dev_malloc(&ap_q, sizeof(int32_t) * (size_t)cap) != LA_OK ||
        la_dev_malloc(&ap_p, sizeof(int32_t) * (size_t)cap) != LA_OK)
        CHECK(0, "paged: device buffers for the appends: %s", la_last_error());
    for (;;) {
        int64_t n = 0;
        for (int64_t s = 0; s < nseq; s++) {
            /* a long context (the 128K cases) keeps appending up to 3000
             * tokens a round: ~100 rounds instead of ~50K, still splitting
             * pages and pooled blocks between appends at random positions */
            const double step = done[s] == 0 || C->lens[s] > BIG_CTX ? 3000 : 4;
            int64_t want = 1 + (int64_t)(la_rng_uniform(r) * step);
            if (want > C->lens[s] - done[s]) want = C->lens[s] - done[s];
            if (want > cap - n) want = cap - n;
            for (int64_t i = 0; i < want; i++, n++) {
                const int64_t pos = done[s] + i;
                memcpy(kb + n * dI, keys[s] + pos * dI, sizeof(float) * (size_t)dI);
                meta[n] = table[s * maxp + pos / PS] * PS + (int32_t)(pos % PS);
                meta[cap + n] = (int32_t)s;
                meta[2 * cap + n] = (int32_t)pos;
            }
            done[s] += want;
        }
        if (n == 0) break;
        la_tensor tk, ts, tq, tp, dk, ds, dq, dp;
        const int64_t kne[2] = {n, dI};
        la_tensor_init(&tk, kb, LA_F32, LA_DEVICE_CPU, 2, kne);
        la_tensor_init(&ts, meta, LA_I32, LA_DEVICE_CPU, 1, &n);
        la_tensor_init(&tq, meta + cap, LA_I32, LA_DEVICE_CPU, 1, &n);
        la_tensor_init(&tp, meta + 2 * cap, LA_I32, LA_DEVICE_CPU, 1, &n);
        CHECK_OK(la_paged_index_cache_append(hc, &tk, &ts, &tq, &tp, NULL));
        la_dev_upload(ap_k, kb, sizeof(float) * (size_t)(n * dI));
        la_dev_upload(ap_s, meta, (size_t)n * 4);
        la_dev_upload(ap_q, meta + cap, (size_t)n * 4);
        la_dev_upload(ap_p, meta + 2 * cap, (size_t)n * 4);
        la_tensor_init(&dk, ap_k, LA_F32, LA_DEVICE_CUDA, 2, kne);
        la_tensor_init(&ds, ap_s, LA_I32, LA_DEVICE_CUDA, 1, &n);
        la_tensor_init(&dq, ap_q, LA_I32, LA_DEVICE_CUDA, 1, &n);
        la_tensor_init(&dp, ap_p, LA_I32, LA_DEVICE_CUDA, 1, &n);
        CHECK_OK(la_paged_index_cache_append(dc, &dk, &ds, &dq, &dp, NULL));
    }
    la_dev_free(ap_k); la_dev_free(ap_s); la_dev_free(ap_q); la_dev_free(ap_p);
    const char *dn = la_dtype_name(C->dt);
    /* pages and pooled means */
    void *hraw, *draw;
    size_t pb, pb2;
    la_paged_index_cache_storage(hc, &hraw, &pb);
    la_paged_index_cache_storage(dc, &draw, &pb2);
    unsigned char *dl = malloc(pb * (size_t)pages);
    la_dev_download(dl, draw, pb * (size_t)pages);
    int64_t diff = 0;
    for (int64_t s = 0; s < nseq; s++) /* written slots only (CPU scales start at 1, CUDA's at 0) */
        for (int64_t pos = 0; pos < C->lens[s]; pos++) {
            const int64_t slot = table[s * maxp + pos / PS] * PS + pos % PS, pg = slot / PS, off = slot % PS;
            const size_t vb = (size_t)dI * (C->dt == LA_FP8_E4M3 ? 1 : C->dt == LA_BF16 ? 2 : 4);
            if (memcmp(dl + pg * pb + off * vb, (unsigned char *)hraw + pg * pb + off * vb, vb)) diff++;
            if (C->dt == LA_FP8_E4M3 && memcmp(dl + pg * pb + PS * dI + off * 4, (unsigned char *)hraw + pg * pb + PS * dI + off * 4, 4))
                diff++;
        }
    CHECK(diff == 0 && pb == pb2, "%s: %lld stored tokens differ between the CUDA and CPU caches", dn, (long long)diff);
    int64_t pdiff = 0;
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t L = C->lens[s];
        if (!L) continue;
        const int64_t nb = (L + 127) / 128;
        float *hm = malloc(sizeof(float) * (size_t)(nb * dI)), *dm = malloc(sizeof(float) * (size_t)(nb * dI));
        void *d_m = NULL;
        la_dev_malloc(&d_m, sizeof(float) * (size_t)(nb * dI));
        la_tensor th, td;
        const int64_t ne[2] = {nb, dI};
        la_tensor_init(&th, hm, LA_F32, LA_DEVICE_CPU, 2, ne);
        la_tensor_init(&td, d_m, LA_F32, LA_DEVICE_CUDA, 2, ne);
        CHECK_OK(la_paged_index_cache_pooled(hc, s, L, &th));
        CHECK_OK(la_paged_index_cache_pooled(dc, s, L, &td));
        la_dev_download(dm, d_m, sizeof(float) * (size_t)(nb * dI));
        if (memcmp(hm, dm, sizeof(float) * (size_t)(nb * dI))) pdiff++;
        free(hm); free(dm); la_dev_free(d_m);
    }
    CHECK(pdiff == 0, "%s: pooled means of %lld sequences differ between CUDA and CPU", dn, (long long)pdiff);

    /* the stored keys (CPU cache), for the float64 near-tie check */
    for (int64_t s = 0; s < nseq; s++) {
        if (!C->lens[s]) continue;
        la_tensor tg;
        const int64_t gne[2] = {C->lens[s], dI};
        la_tensor_init(&tg, keys[s], LA_F32, LA_DEVICE_CPU, 2, gne);
        la_tensor hbt0;
        const int64_t bne[2] = {nseq, maxp};
        la_tensor_init(&hbt0, table, LA_I32, LA_DEVICE_CPU, 2, bne);
        CHECK_OK(la_paged_index_cache_gather(hc, &hbt0, s, C->lens[s], &tg));
    }
    /* queries */
    const int64_t T = nseq * nn;
    float *q = malloc(sizeof(float) * (size_t)(T * HI * dI)), *w = malloc(sizeof(float) * (size_t)(T * HI));
    la_fill_normal(r, q, T * HI * dI, 1.0);
    for (int64_t i = 0; i < T * HI; i++) w[i] = (float)la_rng_uniform(r) + 0.05f;
    /* tensor-core queries: the host (CPU path, float64 scores) holds their
     * exact values in f32; the device the bf16 / e4m3 bytes */
    const int tc8 = C->tcq && C->dt == LA_FP8_E4M3, tc16 = C->tcq && C->dt == LA_BF16;
    const la_dtype qdt = tc8 ? LA_FP8_E4M3 : tc16 ? LA_BF16 : LA_F32;
    const size_t qeb = tc8 ? 1 : tc16 ? 2 : 4;
    void *qdev = malloc(qeb * (size_t)(T * HI * dI));
    for (int64_t i = 0; i < T * HI * dI; i++) {
        if (tc8) {
            const uint8_t b = la_f32_to_e4m3(q[i]);
            ((uint8_t *)qdev)[i] = b;
            q[i] = la_e4m3_to_f32(b);
        } else if (tc16) {
            const uint16_t b = la_f32_to_bf16(q[i]);
            ((uint16_t *)qdev)[i] = b;
            q[i] = la_bf16_to_f32(b);
        } else {
            ((float *)qdev)[i] = q[i];
        }
    }
    int32_t *cl = malloc(sizeof(int32_t) * (size_t)nseq), *qs = malloc(sizeof(int32_t) * (size_t)T);
    int64_t *rowof = malloc(sizeof(int64_t) * (size_t)T); /* row of (s, j) */
    for (int64_t s = 0; s < nseq; s++) cl[s] = (int32_t)C->lens[s];
    for (int64_t i = 0; i < T; i++) rowof[i] = i;
    if (C->qseq) /* reverse the row order: sequence s's rows descend, so query j is its j-th row in order */
        for (int64_t s = 0; s < nseq; s++)
            for (int64_t j = 0; j < nn; j++) rowof[s * nn + j] = (nseq - 1 - s) * nn + j;
    for (int64_t i = 0; i < T; i++) qs[rowof[i]] = (int32_t)(i / nn);
    void *d_q = dev_copy(qdev, qeb * (size_t)(T * HI * dI)), *d_w = dev_copy(w, sizeof(float) * (size_t)(T * HI));
    void *d_bt = dev_copy(table, (size_t)(nseq * maxp) * 4), *d_cl = dev_copy(cl, (size_t)nseq * 4),
         *d_qs = dev_copy(qs, (size_t)T * 4), *d_idx = NULL;
    la_dev_malloc(&d_idx, (size_t)(T * topk) * 4);
    la_tensor hq, hw, hbt, hcl, hqs, hidx, dq, dw, dbt, dcl, dqs, didx;
    const int64_t qne[3] = {T, HI, dI}, wne[2] = {T, HI}, btne[2] = {nseq, maxp}, ine[2] = {T, topk};
    int32_t *ih = malloc((size_t)(T * topk) * 4), *id = malloc((size_t)(T * topk) * 4);
    int32_t *id2 = malloc((size_t)(T * topk) * 4), *idsa = malloc((size_t)(T * topk) * 4);
    la_tensor_init(&hq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&hw, w, LA_F32, LA_DEVICE_CPU, 2, wne);
    la_tensor_init(&hbt, table, LA_I32, LA_DEVICE_CPU, 2, btne);
    la_tensor_init(&hcl, cl, LA_I32, LA_DEVICE_CPU, 1, &nseq);
    la_tensor_init(&hqs, qs, LA_I32, LA_DEVICE_CPU, 1, &T);
    la_tensor_init(&hidx, ih, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&dq, d_q, qdt, LA_DEVICE_CUDA, 3, qne);
    la_tensor_init(&dw, d_w, LA_F32, LA_DEVICE_CUDA, 2, wne);
    la_tensor_init(&dbt, d_bt, LA_I32, LA_DEVICE_CUDA, 2, btne);
    la_tensor_init(&dcl, d_cl, LA_I32, LA_DEVICE_CUDA, 1, &nseq);
    la_tensor_init(&dqs, d_qs, LA_I32, LA_DEVICE_CUDA, 1, &T);
    la_tensor_init(&didx, d_idx, LA_I32, LA_DEVICE_CUDA, 2, ine);
    la_index_params ip;
    la_index_params_init(&ip);
    ip.topk = topk;
    ip.block_topk = C->m;
    for (int hisa = 0; hisa < 2; hisa++)
        for (int slots = 0; slots < 2; slots++) {
            la_paged_query ph, pd;
            la_paged_query_init(&ph);
            ph.block_table = &hbt;
            ph.context_lens = &hcl;
            ph.next_n = nn;
            ph.q_seq = C->qseq ? &hqs : NULL;
            ph.return_slots = slots;
            pd = ph;
            pd.block_table = &dbt;
            pd.context_lens = &dcl;
            pd.q_seq = C->qseq ? &dqs : NULL;
            la_dev_memset(d_idx, 0x7f, (size_t)(T * topk) * 4);
            CHECK_OK(hisa ? la_hisa_topk_paged(&ip, &hq, &hw, hc, &ph, &hidx, NULL) : la_dsa_topk_paged(&ip, &hq, &hw, hc, &ph, &hidx, NULL));
            CHECK_OK(hisa ? la_hisa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL) : la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
            la_dev_synchronize();
            la_dev_download(id, d_idx, (size_t)(T * topk) * 4);
            if (C->tcq) { /* run-to-run: the same bits again */
                la_dev_memset(d_idx, 0x7f, (size_t)(T * topk) * 4);
                CHECK_OK(hisa ? la_hisa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL) : la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
                la_dev_download(id2, d_idx, (size_t)(T * topk) * 4);
                CHECK(!memcmp(id, id2, (size_t)(T * topk) * 4), "%s %s paged%s: a second call differs", dn,
                      hisa ? "hisa" : "dsa", slots ? " (slots)" : "");
                if (!hisa && !slots) memcpy(idsa, id, (size_t)(T * topk) * 4);
            }
            int64_t bad = 0;
            for (int64_t s = 0; s < nseq; s++)
                for (int64_t j = 0; j < nn; j++) {
                    const int64_t t = rowof[s * nn + j];
                    if (!memcmp(ih + t * topk, id + t * topk, (size_t)topk * 4)) {
                        exact_rows++;
                        continue;
                    }
                    /* near-tie check on the selections' float64 scores, at the
                     * positions (a slot output is mapped back through the
                     * sequence's block table; a slot of another sequence's
                     * page maps to no position and fails) */
                    double *a = malloc(sizeof(double) * (size_t)topk), *b = malloc(sizeof(double) * (size_t)topk);
                    int64_t na = 0, nb = 0, oob = 0;
                    for (int64_t i = 0; i < topk; i++) {
                        int32_t x = ih[t * topk + i], y = id[t * topk + i];
                        if (slots) x = slot_position(table + s * maxp, maxp, x), y = slot_position(table + s * maxp, maxp, y);
                        if (x >= C->lens[s]) oob++;
                        else if (x >= 0) a[na++] = score64(q + t * HI * dI, w + t * HI, keys[s] + (int64_t)x * dI, HI, dI);
                        if (y >= 0 && y < C->lens[s]) b[nb++] = score64(q + t * HI * dI, w + t * HI, keys[s] + (int64_t)y * dI, HI, dI);
                        else if (y >= 0) oob++;
                    }
                    qsort(a, (size_t)na, 8, cmp_desc);
                    qsort(b, (size_t)nb, 8, cmp_desc);
                    double mx = 1e-30;
                    for (int64_t i = 0; i < na; i++) mx = fmax(mx, fabs(a[i]));
                    int ok = na == nb && !oob;
                    /* keys[s] now holds the stored (dequantized) keys. e4m3 q at HI 64,
                     * dI 128 takes the wgmma kernels on sm_90 (the default), whose fp8
                     * MMA keeps ~14 accumulator bits (DeepSeek-V3 §3.3.2): the dense
                     * table's bound there, 4 x 5e-4 of the scores (cases_dsa_fp8.c);
                     * else the exact kernels' 1e-5 */
                    const double tol = tc8 && HI == 64 && dI == 128 ? 2e-3 : 1e-5;
                    for (int64_t i = 0; ok && i < na; i++) ok = fabs(a[i] - b[i]) <= tol * mx;
                    if (ok) tie_rows++;
                    else bad++;
                    free(a); free(b);
                }
            CHECK(bad == 0, "%s %s paged%s: %lld query rows differ from the CPU beyond near-ties (nseq %lld next_n %lld)",
                  dn, hisa ? "hisa" : "dsa", slots ? " (slots)" : "", (long long)bad, (long long)nseq, (long long)nn);
        }
    /* HISA's variant families give the same bits, positions and slots:
     * "paged_hisa" (the fused block stage, its 3-CTA layout and its
     * guarded d loop, vs the classic chain) in every
     * case; "paged_hisa_cand" (block-major candidate scores and the
     * mma.sync gather mode with its fragments loaded into registers,
     * "direct", vs the stage-ring gather kernel) on the tensor-core path.
     * Outputs poisoned differently. */
    static const char *const fam[2] = {"paged_hisa", "paged_hisa_cand"};
    static const char *const vn[2][4] = {{"classic", "fused", "fused3", "fused_guarded"}, {"gather", "blockmajor", "direct", NULL}};
    for (int f = 0; f < (C->tcq ? 2 : 1); f++)
        for (int slots = 0; slots < 2; slots++) {
            la_paged_query pd;
            la_paged_query_init(&pd);
            pd.block_table = &dbt;
            pd.context_lens = &dcl;
            pd.next_n = nn;
            pd.q_seq = C->qseq ? &dqs : NULL;
            pd.return_slots = slots;
            int got0 = 0;
            for (int v = 0; v < 4 && vn[f][v]; v++) {
                if (!bo_use_variant(fam[f], vn[f][v])) continue;
                la_dev_memset(d_idx, v ? 0x5a : 0x7f, (size_t)(T * topk) * 4);
                if (!CHECK_DEV(la_hisa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, bo_ctx()))) continue;
                la_dev_download(v ? id2 : id, d_idx, (size_t)(T * topk) * 4);
                if (v == 0) got0 = 1;
                if (v == 0 || !got0) continue;
                int64_t vd = 0;
                for (int64_t t = 0; t < T; t++) vd += memcmp(id + t * topk, id2 + t * topk, (size_t)topk * 4) != 0;
                CHECK(vd == 0, "%s paged hisa%s: %lld rows differ between %s variants %s and %s", dn,
                      slots ? " (slots)" : "", (long long)vd, fam[f], vn[f][v], vn[f][0]);
            }
            bo_use_variant(fam[f], NULL);
        }
    if (tc8) { /* the CPU path takes e4m3 q too: decoded exactly, the same bits as its f32 values */
        la_paged_query ph;
        la_paged_query_init(&ph);
        ph.block_table = &hbt;
        ph.context_lens = &hcl;
        ph.next_n = nn;
        ph.q_seq = C->qseq ? &hqs : NULL;
        la_tensor hq8;
        la_tensor_init(&hq8, qdev, LA_FP8_E4M3, LA_DEVICE_CPU, 3, qne);
        CHECK_OK(la_dsa_topk_paged(&ip, &hq, &hw, hc, &ph, &hidx, NULL));
        memcpy(id2, ih, (size_t)(T * topk) * 4);
        CHECK_OK(la_dsa_topk_paged(&ip, &hq8, &hw, hc, &ph, &hidx, NULL));
        CHECK(!memcmp(id2, ih, (size_t)(T * topk) * 4), "cpu paged dsa: e4m3 q differs from its f32 values");
    }
    if (C->tcq) tc_equalities(C, dc, dl, pb, table, maxp, qdev, w, rowof, idsa, &ip, &dq, &dw, &dbt, &dcl, &dqs);
    /* bad input on device views */
    if (C->nseq >= 2 && C->lens[0] > PS) {
        unsigned char *before = malloc(pb * (size_t)pages), *after = malloc(pb * (size_t)pages);
        la_dev_download(before, draw, pb * (size_t)pages);
        int32_t sl[2] = {0, (int32_t)(pages * PS)}, sq[2] = {0, 0}, ps[2] = {0, 1};
        float kk[2 * 128];
        for (int i = 0; i < 2 * 128; i++) kk[i] = 1.f;
        const int64_t n2 = 2, kne[2] = {2, dI};
        void *d_k = dev_copy(kk, sizeof(float) * (size_t)(2 * dI)), *d_s = dev_copy(sl, 8), *d_sq = dev_copy(sq, 8), *d_p = dev_copy(ps, 8);
        la_tensor tk, ts, tq, tp;
        la_tensor_init(&tk, d_k, LA_F32, LA_DEVICE_CUDA, 2, kne);
        la_tensor_init(&ts, d_s, LA_I32, LA_DEVICE_CUDA, 1, &n2);
        la_tensor_init(&tq, d_sq, LA_I32, LA_DEVICE_CUDA, 1, &n2);
        la_tensor_init(&tp, d_p, LA_I32, LA_DEVICE_CUDA, 1, &n2);
        la_status st = la_paged_index_cache_append(dc, &tk, &ts, &tq, &tp, NULL);
        CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "slot_mapping"), "cuda bad slot: %s %s", la_status_string(st), la_last_error());
        sl[1] = 1;
        la_dev_upload(d_s, sl, 8);
        kk[dI + 3] = NAN;
        la_dev_upload(d_k, kk, sizeof(float) * (size_t)(2 * dI));
        st = la_paged_index_cache_append(dc, &tk, &ts, NULL, NULL, NULL);
        CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "k[1][3]"), "cuda NaN key: %s %s", la_status_string(st), la_last_error());
        la_dev_download(after, draw, pb * (size_t)pages);
        CHECK(memcmp(before, after, pb * (size_t)pages) == 0, "a rejected CUDA append changed the pages");
        /* bad values in device-resident metadata (docs/SPARSE.md "Paged
         * serving"): found on the device, clamped, reported by
         * la_paged_index_cache_check or by a later call once the device is done */
        la_paged_query pd;
        la_paged_query_init(&pd);
        int32_t saved = table[1];
        table[1] = (int32_t)pages;
        la_dev_upload(d_bt, table, (size_t)(nseq * maxp) * 4);
        pd.block_table = &dbt;
        pd.context_lens = &dcl;
        pd.next_n = nn;
        CHECK_OK(la_paged_index_cache_check(dc, NULL)); /* nothing pending */
        for (int hisa = 0; hisa < 2; hisa++) {
            st = hisa ? la_hisa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL) : la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL);
            CHECK(st == LA_OK, "cuda bad page (%s): the call itself: %s %s", hisa ? "hisa" : "dsa", la_status_string(st), la_last_error());
            la_dev_download(id, d_idx, (size_t)(T * topk) * 4);
            int64_t wild = 0; /* the clamped read: positions inside the table's capacity, or -1 */
            for (int64_t i = 0; i < T * topk; i++) wild += id[i] < -1 || id[i] >= maxp * PS;
            CHECK(wild == 0, "cuda bad page (%s): %lld idx entries outside -1..%lld", hisa ? "hisa" : "dsa", (long long)wild, (long long)(maxp * PS - 1));
            st = la_paged_index_cache_check(dc, NULL);
            CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "block_table[0][1]"), "cuda bad page (%s) check: %s %s",
                  hisa ? "hisa" : "dsa", la_status_string(st), la_last_error());
            CHECK_OK(la_paged_index_cache_check(dc, NULL)); /* reported once */
        }
        /* lazily: the next call (on good metadata) fails, writes nothing; the one after runs */
        CHECK_OK(la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        la_dev_synchronize();
        table[1] = saved;
        la_dev_upload(d_bt, table, (size_t)(nseq * maxp) * 4);
        la_dev_memset(d_idx, 0x5a, (size_t)(T * topk) * 4);
        st = la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL);
        CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "block_table[0][1]") && strstr(la_last_error(), "earlier"),
              "cuda bad page, lazily: %s %s", la_status_string(st), la_last_error());
        la_dev_download(id, d_idx, (size_t)(T * topk) * 4);
        int64_t touched = 0;
        for (int64_t i = 0; i < T * topk; i++) touched += id[i] != 0x5a5a5a5a;
        CHECK(touched == 0, "a CUDA paged call rejected for an earlier bad page wrote idx");
        CHECK_OK(la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        CHECK_OK(la_paged_index_cache_check(dc, NULL));
        /* a length over the table's capacity; a q_seq row outside the table */
        const int32_t cl0 = cl[0];
        cl[0] = (int32_t)(maxp * PS + 1);
        la_dev_upload(d_cl, cl, (size_t)nseq * 4);
        CHECK_OK(la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        st = la_paged_index_cache_check(dc, NULL);
        CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "context_lens[0]"), "cuda long context: %s %s", la_status_string(st), la_last_error());
        /* HISA on pooled sums: a length that splits a pooled block */
        cl[0] = cl0 - 1;
        la_dev_upload(d_cl, cl, (size_t)nseq * 4);
        CHECK_OK(la_hisa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        st = la_paged_index_cache_check(dc, NULL);
        if ((cl0 - 1) % 128)
            CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "pooled"), "cuda pooled count: %s %s", la_status_string(st), la_last_error());
        cl[0] = cl0;
        la_dev_upload(d_cl, cl, (size_t)nseq * 4);
        int32_t *qs2 = malloc(sizeof(int32_t) * (size_t)T);
        memcpy(qs2, qs, sizeof(int32_t) * (size_t)T);
        qs2[T - 1] = (int32_t)nseq;
        la_dev_upload(d_qs, qs2, (size_t)T * 4);
        pd.q_seq = &dqs;
        CHECK_OK(la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        st = la_paged_index_cache_check(dc, NULL);
        char want[48];
        snprintf(want, sizeof want, "q_seq[%lld]", (long long)(T - 1));
        CHECK(st == LA_ERR_ARG && strstr(la_last_error(), want), "cuda bad q_seq: %s %s", la_status_string(st), la_last_error());
        la_dev_upload(d_qs, qs, (size_t)T * 4);
        free(qs2);
        CHECK_OK(la_dsa_topk_paged(&ip, &dq, &dw, dc, &pd, &didx, NULL));
        CHECK_OK(la_paged_index_cache_check(dc, NULL));
        table[1] = saved;
        la_dev_free(d_k); la_dev_free(d_s); la_dev_free(d_sq); la_dev_free(d_p);
        free(before); free(after);
    }
    la_dev_free(d_q); la_dev_free(d_w); la_dev_free(d_bt); la_dev_free(d_cl); la_dev_free(d_qs); la_dev_free(d_idx);
    for (int64_t s = 0; s < nseq; s++) free(keys[s]);
    free(keys); free(done); free(kb); free(meta); free(dl); free(q); free(w); free(cl); free(qs); free(rowof);
    free(ih); free(id); free(id2); free(idsa); free(qdev); free(perm); free(table);
    la_paged_index_cache_destroy(hc);
    la_paged_index_cache_destroy(dc);
    printf("  rows equal to the CPU bit for bit: %lld, near-tie rows: %lld\n", (long long)exact_rows,
           (long long)tie_rows);
}

/* The "paged" family's probe: one DSA call (HISA for "paged_hisa") on a one-page e4m3 cache (zero
 * keys) with e4m3 q at HI 64, dI 128 (the shape every paged variant takes). */
static la_status probe_paged_op(la_context *ctx, int hisa) {
    la_paged_cache_params cp;
    la_paged_cache_params_init(&cp);
    cp.num_pages = 1;
    cp.page_size = PS;
    cp.head_dim = 128;
    cp.dtype = LA_FP8_E4M3;
    cp.device = LA_DEVICE_CUDA;
    la_paged_index_cache *c = NULL;
    la_status s = la_paged_index_cache_create(&cp, &c);
    if (s != LA_OK) return s;
    const int64_t T = 1, HI = 64, dI = 128, K = 4, one = 1;
    int32_t tab = 0, len = PS;
    void *dq = NULL, *dw = NULL, *di = NULL, *dt = dev_copy(&tab, 4), *dl = dev_copy(&len, 4);
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
    s = hisa ? la_hisa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, ctx) : la_dsa_topk_paged(&ip, &tq, &tw, c, &pq, &ti, ctx);
    la_dev_synchronize();
    la_dev_free(dq); la_dev_free(dw); la_dev_free(di); la_dev_free(dt); la_dev_free(dl);
    la_paged_index_cache_destroy(c);
    return s;
}

static la_status probe_paged(la_context *ctx) { return probe_paged_op(ctx, 0); }
/* families "paged_hisa" (HISA's block stage) and "paged_hisa_cand" (its
 * candidate scores): the same call through HISA */
static la_status probe_paged_hisa(la_context *ctx) { return probe_paged_op(ctx, 1); }

void cases_paged(bo_list *L) {
    bo_add_probe(L, "paged", probe_paged);
    bo_add_probe(L, "paged_hisa", probe_paged_hisa);
    bo_add_probe(L, "paged_hisa_cand", probe_paged_hisa);
    const la_dtype dts[3] = {LA_F32, LA_BF16, LA_FP8_E4M3};
    /* dt nseq HI dI topk m next_n lens qseq */
    const cfg cases[] = {
        {LA_F32, 3, 4, 16, 8, 2, 1, {1, 63, 65}, 0, 0},
        {LA_F32, 4, 8, 64, 64, 3, 2, {128, 129, 1000, 2}, 1, 0},
        {LA_F32, 2, 5, 63, 100, 4, 4, {700, 5}, 0, 0},
        {LA_F32, 5, 64, 128, 256, 8, 1, {1, 300, 2000, 5000, 0}, 1, 0},
    };
    /* the --san representative of each dtype (compute-sanitizer runs it):
     * the indexer's head shape HI 64 x dI 128 (the largest shared-memory
     * tiles of the scoring kernel), every kernel of the table over several
     * tiles -- 4 score tiles of 128 keys, 4 pooled blocks of which HISA keeps
     * 3, 8 pages, a row of an empty range (next_n 2 over a 1-token context),
     * q_seq -- in a few append rounds (the 5000-token context of the last
     * configuration above takes ~1400) */
    const cfg san = {LA_F32, 3, 64, 128, 64, 3, 2, {500, 129, 1}, 1, 0};
    char name[BO_NAME_MAX];
    for (int di = 0; di < 3; di++)
        for (int i = 0; i <= (int)(sizeof cases / sizeof cases[0]); i++) {
            const int is_san = i == (int)(sizeof cases / sizeof cases[0]);
            cfg c = is_san ? san : cases[i];
            c.dt = dts[di];
            const bo_opts o = {"paged", BO_CUDA, 1, NULL, NULL, NULL};
            snprintf(name, sizeof name, "paged %s nseq %lld HI %lld dI %lld topk %lld m %lld next_n %lld%s",
                     la_dtype_name(c.dt), (long long)c.nseq, (long long)c.HI, (long long)c.dI,
                     (long long)c.topk, (long long)c.m, (long long)c.next_n, c.qseq ? " q_seq" : "");
            bo_add(L, &o, run_paged, &c, sizeof c, name);
            if (is_san) bo_mark_san(L);
        }
    /* tensor-core queries (bf16 cache + bf16 q, fp8 cache + e4m3 q): the
     * paged mma.sync kernel at HI 64 / 32 x dI 128, against the CPU path,
     * the dense DSA, HISA keeping every block, and a second call */
    const cfg tcs[] = {
        {LA_BF16, 5, 64, 128, 256, 8, 1, {1, 300, 2000, 5000, 0}, 1, 1},
        {LA_BF16, 4, 32, 128, 64, 3, 2, {128, 129, 1000, 2}, 1, 1},
        {LA_BF16, 2, 64, 128, 100, 4, 4, {700, 5}, 0, 1},
        {LA_BF16, 3, 64, 128, 64, 3, 2, {500, 129, 1}, 1, 1},
        /* odd lengths around the wgmma kernels' 64-key tiles and 1024-key
         * spans, k over some contexts (-1 padding), next_n 3 */
        {LA_BF16, 6, 64, 128, 100, 4, 3, {1, 63, 65, 1000, 2049, 1025}, 1, 1},
        /* a prefill chunk: 96 rows of one sequence, HISA's candidates block-major by default */
        {LA_BF16, 1, 64, 128, 300, 6, 96, {6000}, 0, 1},
        {LA_BF16, 2, 64, 128, 256, 5, 40, {3000, 4500}, 1, 1},
    };
    for (int di = 1; di < 3; di++)
        for (int i = 0; i < (int)(sizeof tcs / sizeof tcs[0]); i++) {
            cfg c = tcs[i];
            c.dt = dts[di];
            const bo_opts o = {"paged", BO_CUDA, i == 3, NULL, NULL, NULL};
            snprintf(name, sizeof name, "paged tc %s nseq %lld HI %lld dI %lld topk %lld m %lld next_n %lld%s",
                     la_dtype_name(c.dt), (long long)c.nseq, (long long)c.HI, (long long)c.dI,
                     (long long)c.topk, (long long)c.m, (long long)c.next_n, c.qseq ? " q_seq" : "");
            bo_add(L, &o, run_paged, &c, sizeof c, name);
            bo_set_kernel(L, c.HI == 64 ? "tc HI64" : "tc HI32");
            if (i == 3) bo_mark_san(L);
        }
    const cfg big[4] = {
        {LA_FP8_E4M3, 3, 64, 128, 2048, 64, 1, {131072, 32768, 77777}, 0, 0},
        {LA_BF16, 2, 64, 128, 2048, 64, 4, {131072, 4097}, 1, 0},
        {LA_FP8_E4M3, 3, 64, 128, 2048, 64, 1, {131072, 32768, 77777}, 0, 1},
        {LA_BF16, 3, 64, 128, 2048, 64, 2, {131072, 4097, 65}, 1, 1},
    };
    for (int i = 0; i < 4; i++) {
        const bo_opts o = {"paged", BO_CUDA, 0, NULL, NULL, NULL};
        snprintf(name, sizeof name, "paged %s%s 128K contexts next_n %lld", big[i].tcq ? "tc " : "",
                 la_dtype_name(big[i].dt), (long long)big[i].next_n);
        bo_add(L, &o, run_paged, &big[i], sizeof big[i], name);
    }
}
