/* Case table of sparse MLA decode over a paged latent cache
 * (la_sparse_attention_paged, run_smla_paged; from cases_paged.c): CUDA
 * against the CPU on the same shuffled pages and slots (-1 skips, unused
 * pages NaN), CUDA paged bit-equal to CUDA dense on the gathered keys (the
 * kernel choice does not depend on the row count), and a slot outside the
 * cache rejected on device views with out untouched. */
#include "bo_staging.h"

/* ---- sparse MLA decode over a paged latent cache ---------------------------- */
typedef struct smla_cfg {
    la_dtype dt;
    int64_t T, Hq, Dqk, dv, pages, page_size, L, K;
} smla_cfg;

static void run_smla_paged(const void *arg) {
    const smla_cfg *C = arg;
    la_rng *r = &bo_rng;
    const int64_t T = C->T, Hq = C->Hq, D = C->Dqk, dv = C->dv, P = C->pages, S = C->page_size;
    const int64_t L = C->L, K = C->K, ns = P * S;
    int32_t *table = malloc(sizeof(int32_t) * (size_t)P), *slots = malloc(4 * (size_t)(T * K));
    int32_t *pos = malloc(4 * (size_t)(T * K));
    float *cache = malloc(4 * (size_t)(ns * D)), *dense = malloc(4 * (size_t)(L * D));
    float *q = randv(T * Hq * D, 1.0);
    for (int64_t i = 0; i < P; i++) table[i] = (int32_t)i;
    for (int64_t i = P - 1; i > 0; i--) {
        int64_t j = (int64_t)(la_rng_uniform(r) * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = table[i]; table[i] = table[j]; table[j] = t;
    }
    for (int64_t i = 0; i < ns * D; i++) cache[i] = NAN; /* pages outside the sequence */
    for (int64_t p = 0; p < L; p++)
        for (int64_t d = 0; d < D; d++) {
            const float v = la_round_dt((float)la_rng_normal(r), C->dt);
            cache[((int64_t)table[p / S] * S + p % S) * D + d] = v;
            dense[p * D + d] = v;
        }
    for (int64_t i = 0; i < T * K; i++) {
        int64_t p = (int64_t)(la_rng_uniform(r) * (double)L);
        if (p >= L) p = L - 1;
        const int skip = la_rng_uniform(r) < 0.2 || (i / K == T - 1 && T > 1); /* last row: all -1 */
        pos[i] = skip ? -1 : (int32_t)p;
        slots[i] = skip ? -1 : (int32_t)((int64_t)table[p / S] * S + p % S);
    }
    dbuf dq = dput(q, T * Hq * D, C->dt), dc = dput(cache, ns * D, C->dt), dd = dput(dense, L * D, C->dt);
    dbuf dsl = dput_i32(slots, T * K), dpo = dput_i32(pos, T * K);
    const size_t oe = la_dtype_size(C->dt), nout = (size_t)(T * Hq * dv);
    dbuf o1 = dalloc(nout * oe), o2 = dalloc(nout * oe), l1 = dalloc((size_t)(T * Hq) * 4), l2 = dalloc((size_t)(T * Hq) * 4);
    la_dev_memset(o1.d, 0xff, o1.bytes), la_dev_memset(o2.d, 0xff, o2.bytes);
    la_dev_memset(l1.d, 0xff, l1.bytes), la_dev_memset(l2.d, 0xff, l2.bytes);
    la_tensor tq, tc, td, ts, tp, to1, to2, tl1, tl2, hq, hc, hs, ho, hl;
    const int64_t cne[3] = {P, S, D};
    tset(&tq, dq.d, C->dt, LA_DEVICE_CUDA, 3, T, Hq, D);
    la_tensor_init(&tc, dc.d, C->dt, LA_DEVICE_CUDA, 3, cne);
    tset(&td, dd.d, C->dt, LA_DEVICE_CUDA, 2, L, D, 0);
    tset(&ts, dsl.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&tp, dpo.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&to1, o1.d, C->dt, LA_DEVICE_CUDA, 3, T, Hq, dv);
    tset(&to2, o2.d, C->dt, LA_DEVICE_CUDA, 3, T, Hq, dv);
    tset(&tl1, l1.d, LA_F32, LA_DEVICE_CUDA, 2, T, Hq, 0);
    tset(&tl2, l2.d, LA_F32, LA_DEVICE_CUDA, 2, T, Hq, 0);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = dv;
    CHECK_OK(la_sparse_attention_paged(&p, &tq, &tc, &ts, &to1, &tl1, bo_ctx()));
    CHECK_OK(la_sparse_attention(&p, &tq, &td, &tp, &to2, &tl2, bo_ctx()));
    unsigned char *b1 = malloc(nout * oe), *b2 = malloc(nout * oe);
    float *g1 = malloc(4 * (size_t)(T * Hq)), *g2 = malloc(4 * (size_t)(T * Hq));
    la_dev_download(b1, o1.d, nout * oe), la_dev_download(b2, o2.d, nout * oe);
    la_dev_download(g1, l1.d, 4 * (size_t)(T * Hq)), la_dev_download(g2, l2.d, 4 * (size_t)(T * Hq));
    CHECK(memcmp(b1, b2, nout * oe) == 0 && memcmp(g1, g2, 4 * (size_t)(T * Hq)) == 0,
          "smla paged %s: CUDA paged differs from CUDA dense on the gathered keys", la_dtype_name(C->dt));
    /* the CPU on the same pages and slots */
    void *hqb = malloc((size_t)(T * Hq * D) * oe), *hcb = malloc((size_t)(ns * D) * oe), *hob = malloc(nout * oe);
    float *hlb = malloc(4 * (size_t)(T * Hq));
    la_dev_download(hqb, dq.d, (size_t)(T * Hq * D) * oe), la_dev_download(hcb, dc.d, (size_t)(ns * D) * oe);
    hq = tq, hq.data = hqb, hq.device = LA_DEVICE_CPU;
    hc = tc, hc.data = hcb, hc.device = LA_DEVICE_CPU;
    hs = ts, hs.data = slots, hs.device = LA_DEVICE_CPU;
    ho = to1, ho.data = hob, ho.device = LA_DEVICE_CPU;
    hl = tl1, hl.data = hlb, hl.device = LA_DEVICE_CPU;
    CHECK_OK(la_sparse_attention_paged(&p, &hq, &hc, &hs, &ho, &hl, NULL));
    float *gc = malloc(4 * nout), *gh = malloc(4 * nout);
    dget_f32(gc, &o1, (int64_t)nout, C->dt);
    double num = 0, den = 0, el = 0;
    int finite = 1;
    for (size_t i = 0; i < nout; i++) {
        gh[i] = C->dt == LA_F32 ? ((float *)hob)[i] : get_elem(hob, C->dt, (int64_t)i);
        finite &= isfinite(gc[i]) != 0;
        num += ((double)gc[i] - gh[i]) * ((double)gc[i] - gh[i]);
        den += (double)gh[i] * gh[i];
    }
    for (int64_t i = 0; i < T * Hq; i++) {
        if (isinf(hlb[i]) || isinf(g1[i])) finite &= hlb[i] == g1[i];
        else if (fabs(hlb[i] - g1[i]) > el) el = fabs(hlb[i] - g1[i]);
    }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    const double tol = C->dt == LA_F32 ? 1e-4 : 1e-2;
    CHECK(finite && rel <= tol && el <= 1e-3, "smla paged %s T=%lld Dqk=%lld: CUDA vs CPU out rel %.3g lse %.3g finite %d",
          la_dtype_name(C->dt), (long long)T, (long long)D, rel, el, finite);
    printf("  smla paged %s T=%lld Hq=%lld Dqk=%lld dv=%lld pages %lldx%lld k=%lld: CUDA vs CPU out rel %.2e lse %.2e\n",
           la_dtype_name(C->dt), (long long)T, (long long)Hq, (long long)D, (long long)dv, (long long)P, (long long)S,
           (long long)K, rel, el);
    /* a slot outside the cache, on device views: rejected, out untouched */
    slots[0] = (int32_t)ns;
    la_dev_upload(dsl.d, slots, 4);
    la_dev_memset(o1.d, 0x5a, o1.bytes);
    la_status st = la_sparse_attention_paged(&p, &tq, &tc, &ts, &to1, NULL, bo_ctx());
    CHECK(st == LA_ERR_ARG && strstr(la_last_error(), "idx_slots[0][0]"), "cuda bad slot: %s %s",
          la_status_string(st), la_last_error());
    la_dev_download(b1, o1.d, nout * oe);
    size_t touched = 0;
    for (size_t i = 0; i < nout * oe; i++) touched += b1[i] != 0x5a;
    CHECK(touched == 0, "a rejected CUDA paged sparse attention wrote out");
    dfree(&dq), dfree(&dc), dfree(&dd), dfree(&dsl), dfree(&dpo), dfree(&o1), dfree(&o2), dfree(&l1), dfree(&l2);
    free(table), free(slots), free(pos), free(cache), free(dense), free(q), free(b1), free(b2), free(g1), free(g2);
    free(hqb), free(hcb), free(hob), free(hlb), free(gc), free(gh);
}

void cases_smla_paged(bo_list *L) {
    char name[BO_NAME_MAX];
    const smla_cfg sm[] = {
        /* dt T Hq Dqk dv pages page_size L K */
        {LA_BF16, 5, 16, 576, 512, 9, 64, 500, 2048}, /* MLA decode shape (wgmma on sm_90) */
        {LA_BF16, 3, 128, 576, 512, 5, 64, 257, 129},
        {LA_F32, 7, 3, 63, 40, 11, 16, 150, 65},
        {LA_BF16, 65, 2, 128, 100, 300, 1, 290, 33},   /* page_size 1 */
    };
    for (int i = 0; i < (int)(sizeof sm / sizeof sm[0]); i++) {
        const bo_opts o = {"smla_paged", BO_CUDA, i < 2, NULL, NULL, NULL};
        snprintf(name, sizeof name, "smla paged %s T %lld Hq %lld Dqk %lld dv %lld pages %lldx%lld k %lld",
                 la_dtype_name(sm[i].dt), (long long)sm[i].T, (long long)sm[i].Hq, (long long)sm[i].Dqk,
                 (long long)sm[i].dv, (long long)sm[i].pages, (long long)sm[i].page_size, (long long)sm[i].K);
        bo_add(L, &o, run_smla_paged, &sm[i], sizeof sm[i], name);
        /* the kernel smla_select takes on sm_90 (one --san case each) */
        const int wg = sm[i].dt == LA_BF16 && sm[i].Dqk == 576 && sm[i].dv == 512;
        bo_set_kernel(L, wg ? "wgmma" : "portable");
    }
}
