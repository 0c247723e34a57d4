/* Case table of the DSA v2 score kernel (dsa.cu's sc_wgmma_kernel) on CUDA,
 * from the former tests/cuda/test_cuda_dsa_epi.c. Every case runs the DSA
 * indexer (HI = 64, dI = 128: the v2 kernels; bf16, and fp8 e4m3 with k/q
 * scales) for several query groups (the automatic one, and variants "qg6"
 * / "qg64" of family "dsa": chunks with one valid query, every pipeline
 * stage reused), and checks
 *   - scores vs a float64 reference on the dequantized inputs the device
 *     sees (score_err_mag: relative to max(|ref|, the entry's sum of absolute
 *     head terms); bf16 1e-4, fp8 5e-4 as cases_dsa_fp8.c), -inf outside
 *     the valid ranges exactly; on every row, or on 24 spread rows when the
 *     case is large;
 *   - idx = the exact row top-k of the scores the call returned (descending,
 *     ties to the lower index, -1 padding, inside the range);
 *   - every query group == the automatic one bit for bit (scores and idx):
 *     each score's arithmetic does not depend on the grouping.
 * Outputs are poisoned (idx 0x7f bytes, scores NaN) before each call.
 * Shapes: odd T and L (partial key tiles, one-key tiles, a final chunk with
 * one valid query), ragged ranges with empty rows, topk > L, q as a permuted
 * view (query stride != head stride), padded k rows, and the bench shape
 * T = 1024, L = 64K (checked on 24 rows; with --perf also timed against the
 * mma.sync kernels, variant "mma": median of CUDA events, 15 calls after 2
 * warm-ups, the whole indexer call: scores + top-k). */
#include "bo_staging.h"

#ifdef LA_WITH_CUDA
/* the few CUDA runtime calls the timing needs (extern "C" in libcudart; the
 * test is C and does not include the CUDA headers) */
typedef struct CUevent_st *epi_event;
extern int cudaEventCreate(epi_event *ev);
extern int cudaEventRecord(epi_event ev, void *stream);
extern int cudaEventSynchronize(epi_event ev);
extern int cudaEventElapsedTime(float *ms, epi_event a, epi_event b);
extern int cudaEventDestroy(epi_event ev);
#endif

#define HI 64
#define DI 128

typedef struct ecase {
    int64_t T, L, K;
    int fp8;    /* 1: e4m3 with k_scale and q_scale; 0: bf16 */
    int ranges; /* 1: ragged [start, end) (empty, full, < k rows); 0: causal */
    int q_perm; /* q as a permuted view of a [HI, T, dI] buffer */
    int k_pad;  /* extra elements per k row (16-byte multiples keep v2) */
} ecase;

/* the inputs of one case, on the host (dequantized) and the device */
typedef struct edata {
    ecase c;
    float *qv, *kv, *qsc, *ksc, *w; /* dequantized values the device sees, scales */
    int32_t *st, *en;
    dbuf dq, dk, dw, dks, dqs, dst, den, didx, dsc;
    la_tensor tq, tk, tw, tks, tqs, ts, te, ti, tsc;
    la_index_params p;
} edata;

static void edata_make(edata *d, ecase c) {
    memset(d, 0, sizeof *d);
    d->c = c;
    const int64_t T = c.T, L = c.L, K = c.K, kst = DI + c.k_pad;
    const size_t es = c.fp8 ? 1 : 2;
    float *q = malloc((size_t)(T * HI * DI) * 4), *k = malloc((size_t)(L * DI) * 4);
    d->w = malloc((size_t)(T * HI) * 4);
    la_fill_normal(&bo_rng, q, T * HI * DI, 1.0);
    la_fill_normal(&bo_rng, k, L * DI, 1.0);
    la_fill_normal(&bo_rng, d->w, T * HI, 1.0 / sqrt((double)HI * DI));
    d->qv = malloc((size_t)(T * HI * DI) * 4);
    d->kv = malloc((size_t)(L * DI) * 4);
    d->qsc = malloc((size_t)(T * HI) * 4);
    d->ksc = malloc((size_t)L * 4);
    uint8_t *qh = malloc((size_t)(T * HI * DI) * es), *kh = calloc((size_t)(L * kst) * es + 16, 1);
    for (int64_t s = 0; s < L; s++) {
        double amax = 0;
        for (int64_t i = 0; i < DI; i++) amax = fmax(amax, fabs(k[s * DI + i]));
        d->ksc[s] = c.fp8 && amax > 0 ? (float)(amax / 448.0) : 1.f;
        for (int64_t i = 0; i < DI; i++) {
            const float x = k[s * DI + i];
            if (c.fp8) {
                const uint8_t b = e4m3_enc(x / d->ksc[s]);
                kh[s * kst + i] = b;
                d->kv[s * DI + i] = e4m3_dec(b);
            } else {
                const uint16_t b = la_f32_to_bf16(x);
                ((uint16_t *)kh)[s * kst + i] = b;
                d->kv[s * DI + i] = la_bf16_to_f32(b);
            }
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < HI; h++) {
            const float *qr = q + (t * HI + h) * DI;
            double amax = 0;
            for (int64_t i = 0; i < DI; i++) amax = fmax(amax, fabs(qr[i]));
            const float sq = c.fp8 && amax > 0 ? (float)(amax / 448.0) : 1.f;
            d->qsc[t * HI + h] = sq;
            for (int64_t i = 0; i < DI; i++) {
                const int64_t di = c.q_perm ? (h * T + t) * DI + i : (t * HI + h) * DI + i;
                if (c.fp8) {
                    const uint8_t b = e4m3_enc(qr[i] / sq);
                    qh[di] = b;
                    d->qv[(t * HI + h) * DI + i] = e4m3_dec(b);
                } else {
                    const uint16_t b = la_f32_to_bf16(qr[i]);
                    ((uint16_t *)qh)[di] = b;
                    d->qv[(t * HI + h) * DI + i] = la_bf16_to_f32(b);
                }
            }
        }
    if (c.ranges) {
        d->st = malloc((size_t)T * 4);
        d->en = malloc((size_t)T * 4);
        for (int64_t t = 0; t < T; t++) {
            int64_t a = (int64_t)(la_rng_uniform(&bo_rng) * L), b = (int64_t)(la_rng_uniform(&bo_rng) * (L + 1));
            if (a > b) { const int64_t x = a; a = b; b = x; }
            if (t % 7 == 3) b = a;                               /* empty */
            if (t % 5 == 1) { a = 0; b = L; }                    /* full */
            if (t % 11 == 2 && L > 3) b = a + 3 < L ? a + 3 : L; /* fewer than k keys */
            d->st[t] = (int32_t)a;
            d->en[t] = (int32_t)b;
        }
    }
    d->dq = dput_raw(qh, (size_t)(T * HI * DI) * es);
    d->dk = dput_raw(kh, (size_t)(L * kst) * es + 16);
    d->dw = dput_raw(d->w, (size_t)(T * HI) * 4);
    const la_dtype dt = c.fp8 ? LA_FP8_E4M3 : LA_BF16;
    if (c.q_perm) {
        int64_t ne[3] = {T, HI, DI}, nb[3] = {DI, T * DI, 1};
        la_tensor_init_strided(&d->tq, d->dq.d, dt, LA_DEVICE_CUDA, 3, ne, nb);
    } else
        tset(&d->tq, d->dq.d, dt, LA_DEVICE_CUDA, 3, T, HI, DI);
    {
        int64_t ne[2] = {L, DI}, nb[2] = {kst, 1};
        la_tensor_init_strided(&d->tk, d->dk.d, dt, LA_DEVICE_CUDA, 2, ne, nb);
    }
    tset(&d->tw, d->dw.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    la_index_params_init(&d->p);
    d->p.topk = K;
    if (c.fp8) {
        d->dks = dput_raw(d->ksc, (size_t)L * 4);
        d->dqs = dput_raw(d->qsc, (size_t)(T * HI) * 4);
        tset(&d->tks, d->dks.d, LA_F32, LA_DEVICE_CUDA, 1, L, 0, 0);
        tset(&d->tqs, d->dqs.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
        d->p.k_scale = &d->tks;
        d->p.q_scale = &d->tqs;
    }
    if (c.ranges) {
        d->dst = dput_raw(d->st, (size_t)T * 4);
        d->den = dput_raw(d->en, (size_t)T * 4);
        tset(&d->ts, d->dst.d, LA_I32, LA_DEVICE_CUDA, 1, T, 0, 0);
        tset(&d->te, d->den.d, LA_I32, LA_DEVICE_CUDA, 1, T, 0, 0);
    }
    d->didx = dalloc((size_t)(T * K) * 4);
    d->dsc = dalloc((size_t)(T * L) * 4);
    tset(&d->ti, d->didx.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&d->tsc, d->dsc.d, LA_F32, LA_DEVICE_CUDA, 2, T, L, 0);
    free(q);
    free(k);
    free(qh);
    free(kh);
}
static void edata_free(edata *d) {
    dfree(&d->dq); dfree(&d->dk); dfree(&d->dw); dfree(&d->dks); dfree(&d->dqs);
    dfree(&d->dst); dfree(&d->den); dfree(&d->didx); dfree(&d->dsc);
    free(d->qv); free(d->kv); free(d->qsc); free(d->ksc); free(d->w); free(d->st); free(d->en);
}
static la_status edata_call(edata *d) {
    return la_dsa_indexer(&d->p, &d->tq, &d->tk, &d->tw, d->c.ranges ? &d->ts : NULL,
                          d->c.ranges ? &d->te : NULL, &d->ti, &d->tsc, bo_ctx());
}

/* f64 reference of row t (out, mag: L entries; -inf / 0 outside the range) */
static void ref_row(const edata *d, int64_t t, double *out, double *mag) {
    const int64_t T = d->c.T, L = d->c.L;
    int64_t lo, hi;
    ranges_of(T, L, d->st, d->en, t, &lo, &hi);
    for (int64_t s = 0; s < L; s++) out[s] = -INFINITY, mag[s] = 0;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (int64_t s = lo; s < hi; s++) {
        double acc = 0, am = 0;
        for (int64_t h = 0; h < HI; h++) {
            const float *qr = d->qv + (t * HI + h) * DI, *kr = d->kv + s * DI;
            double x = 0;
            for (int64_t i = 0; i < DI; i++) x += (double)qr[i] * kr[i];
            x *= (double)d->qsc[t * HI + h] * d->ksc[s];
            const double r = x > 0 ? x : 0;
            acc += (double)d->w[t * HI + h] * r;
            am += fabs((double)d->w[t * HI + h]) * r;
        }
        out[s] = acc;
        mag[s] = am;
    }
}

/* rows whose idx is not the exact top-k of the returned scores sg */
static int64_t bad_topk_rows(const edata *d, const int32_t *ix, const float *sg, char *msg, size_t mlen) {
    return check_own_topk(ix, sg, d->c.T, d->c.L, d->c.K, d->st, d->en, msg, mlen);
}

/* the rows checked against the reference: all, or 24 spread ones (first,
 * last, both of a chunk, both ends of a query group) */
static int64_t pick_rows(int64_t T, int64_t *rows) {
    if (T <= 80) {
        for (int64_t t = 0; t < T; t++) rows[t] = t;
        return T;
    }
    int64_t n = 0;
    for (int64_t i = 0; i < 24; i++) {
        int64_t t = i < 4 ? i : i >= 20 ? T - 24 + i : (i * T) / 24 + (i & 1);
        if (t >= T) t = T - 1;
        if (n == 0 || t > rows[n - 1]) rows[n++] = t;
    }
    return n;
}

#ifdef LA_WITH_CUDA
static int cmp_f(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}
/* median ms of reps timed calls (events on the default stream, which the
 * library uses when the context sets none) after 2 warm-ups */
static double time_call(edata *d, int reps) {
    float ms[32];
    epi_event e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    for (int i = 0; i < 2; i++) CHECK_OK(edata_call(d));
    for (int i = 0; i < reps; i++) {
        cudaEventRecord(e0, NULL);
        la_status s = edata_call(d);
        cudaEventRecord(e1, NULL);
        cudaEventSynchronize(e1);
        CHECK(s == LA_OK, "timed call: %s", la_last_error());
        ms[i] = 0;
        cudaEventElapsedTime(&ms[i], e0, e1);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    qsort(ms, (size_t)reps, sizeof(float), cmp_f);
    return ms[reps / 2];
}
#endif

typedef struct epi_args { ecase c; int timed; } epi_args;

static void run_case(const void *arg) {
    const ecase c = ((const epi_args *)arg)->c;
    const bool timed = ((const epi_args *)arg)->timed && bo_perf();
    (void)timed; /* used by the CUDA build only */
    edata d;
    edata_make(&d, c);
    const int64_t T = c.T, L = c.L, K = c.K;
    const double tol = c.fp8 ? 5e-4 : 1e-4;
    char tag[160];
    snprintf(tag, sizeof tag, "%s T=%lld L=%lld k=%lld ranges=%d qperm=%d kpad=%d", c.fp8 ? "fp8" : "bf16",
             (long long)T, (long long)L, (long long)K, c.ranges, c.q_perm, c.k_pad);
    /* reference rows */
    int64_t *rows = malloc(((size_t)T + 24) * sizeof(int64_t));
    const int64_t nr = pick_rows(T, rows);
    double *ref = malloc((size_t)(nr * L) * 8 + 8), *mag = malloc((size_t)(nr * L) * 8 + 8);
    for (int64_t r = 0; r < nr; r++) ref_row(&d, rows[r], ref + r * L, mag + r * L);
    float *sg = malloc((size_t)(T * L) * 4 + 4), *s0 = malloc((size_t)(T * L) * 4 + 4),
          *sub = malloc((size_t)(nr * L) * 4 + 4);
    int32_t *ig = malloc((size_t)(T * K) * 4), *i0 = malloc((size_t)(T * K) * 4);
    /* the automatic query group, then variants "qg6" and "qg64" of family "dsa" */
    const char *qgs[3] = {NULL, "qg6", "qg64"};
    const int nqg = ((const epi_args *)arg)->timed ? 1 : 3;
    for (int qi = 0; qi < nqg; qi++) {
        const char *qn = qgs[qi] ? qgs[qi] + 2 : "auto";
        if (qgs[qi] && !bo_use_variant("dsa", qgs[qi])) continue;
        la_dev_memset(d.didx.d, 0x7f, d.didx.bytes);
        la_dev_memset(d.dsc.d, 0xff, d.dsc.bytes);
        if (!CHECK_DEV(edata_call(&d))) continue; /* (a query group that does not take the views: skipped) */
        la_dev_download(ig, d.didx.d, d.didx.bytes);
        la_dev_download(sg, d.dsc.d, d.dsc.bytes);
        for (int64_t r = 0; r < nr; r++) memcpy(sub + r * L, sg + rows[r] * L, (size_t)L * 4);
        const double e = score_err_mag(sub, ref, mag, nr * L);
        CHECK(e <= tol, "dsa scores %s [qg %s]: rel err %.3g > %.1g", tag, qn, e, tol);
        char msg[160] = "";
        const int64_t bad = bad_topk_rows(&d, ig, sg, msg, sizeof msg);
        CHECK(bad == 0, "dsa idx %s [qg %s]: %lld rows are not the top-k of the returned scores (%s)", tag, qn,
              (long long)bad, msg);
        int64_t nds = 0, ndi = 0;
        if (qi == 0) {
            memcpy(s0, sg, (size_t)(T * L) * 4);
            memcpy(i0, ig, (size_t)(T * K) * 4);
        } else {
            for (int64_t i = 0; i < T * L; i++) nds += memcmp(&sg[i], &s0[i], 4) != 0;
            for (int64_t i = 0; i < T * K; i++) ndi += ig[i] != i0[i];
            CHECK(nds == 0 && ndi == 0, "dsa %s [qg %s]: differs from [qg auto]: %lld scores, %lld indices", tag,
                  qn, (long long)nds, (long long)ndi);
        }
        printf("  %-58s [qg %-4s] rel err %.2e (%lld rows), idx ok %s%s\n", tag, qn, e, (long long)nr,
               bad ? "NO" : "yes", qi == 0 ? "" : (nds || ndi ? ", DIFFERS from [auto]" : ", == [auto] bit for bit"));
    }
    bo_use_variant("dsa", NULL);
#ifdef LA_WITH_CUDA
    if (timed && bo_use_variant("dsa", "mma")) { /* --perf: v2 against the mma.sync kernels */
        bo_use_variant("dsa", NULL);
        const double t0 = time_call(&d, 15);
        bo_use_variant("dsa", "mma");
        const double t1 = time_call(&d, 15);
        bo_use_variant("dsa", NULL);
        printf("TIME dsa %s: v2 %.3f ms, mma.sync %.3f ms (median of 15, scores + top-k), v2 %.2fx faster\n",
               tag, t0, t1, t1 / t0);
    }
#endif
    free(rows); free(ref); free(mag); free(sg); free(s0); free(sub); free(ig); free(i0);
    edata_free(&d);
}


void cases_dsa_epi(bo_list *L) {
    /* {T, L, K, fp8, ranges, q_perm, k_pad} */
    const ecase cases[] = {
        {1, 1, 1, 0, 0, 0, 0},
        {1, 1, 1, 1, 0, 0, 0},
        {3, 257, 7, 0, 0, 0, 0},      /* a key tile of one key */
        {3, 257, 7, 1, 0, 0, 0},
        {63, 1000, 7, 0, 1, 0, 0},    /* ragged ranges, odd T */
        {63, 1000, 7, 1, 1, 0, 0},
        {65, 100, 2048, 0, 1, 0, 0},  /* k > L */
        {65, 100, 2048, 1, 1, 0, 0},
        {17, 300, 7, 0, 1, 1, 8},     /* permuted q view, padded k rows */
        {17, 300, 7, 1, 1, 1, 16},
        {130, 777, 33, 0, 0, 1, 0},   /* causal, permuted q, many chunks */
        {130, 777, 33, 1, 0, 0, 16},
        {257, 5000, 2048, 0, 0, 0, 0}, /* bench-like */
        {257, 5000, 2048, 1, 1, 0, 0},
        /* the bench shape, checked on 24 rows (and timed with --perf) */
        {1024, 65536, 2048, 0, 0, 0, 0},
        {1024, 65536, 2048, 1, 0, 0, 0},
    };
    const int n = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < n; i++) {
        const ecase *c = &cases[i];
        const epi_args a = {*c, i >= n - 2};
        char name[BO_NAME_MAX];
        snprintf(name, sizeof name, "dsa v2 %s T=%lld L=%lld k=%lld ranges=%d qperm=%d kpad=%d",
                 c->fp8 ? "fp8" : "bf16", (long long)c->T, (long long)c->L, (long long)c->K,
                 c->ranges, c->q_perm, c->k_pad);
        const bo_opts o = {"dsa", BO_CUDA, c->T * c->L <= 200000, NULL, NULL, NULL};
        bo_add(L, &o, run_case, &a, sizeof a, name);
    }
}
