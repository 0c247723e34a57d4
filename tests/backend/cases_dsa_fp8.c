/* Case table of the flat DSA indexer's tensor-core paths on CUDA (fp8 e4m3
 * q/k with per-key-row and per-(query, head) fp32 scales, and the bf16
 * wgmma kernel), from the former tests/cuda/test_cuda_dsa_fp8.c, each
 * against
 *   - a float64 reference of the score rows computed on the dequantized
 *     inputs (what the device sees): norm-wise rel error (max |err| over the
 *     row set / max |ref|), -inf outside the ranges exactly;
 *   - its own score rows: idx must be exactly the row top-k of the scores it
 *     returned (descending, ties to the lower index, -1 padding, in range);
 *   - the float64 reference: every selected key must score within tolerance
 *     of the k-th best reference score (a set check that tolerates near-ties);
 *   - the CPU DSA on the dequantized f32 inputs: recall >= 0.99 over large
 *     row sets (exact equality can fail on near-ties).
 * Every case runs on the default path (wgmma v2 where it applies), and under
 * the variants of family "dsa": "qg64" (the query group forced to 64: many
 * chunks per CTA, so every pipeline stage is reused), "mma" (mma.sync) and,
 * for fp8, "portable" (dequantized fp32). Outputs are poisoned (idx 0x7f bytes,
 * scores NaN) before each call and checked fully written. Bad fp8 inputs
 * (non-positive / NaN scales, mixed dtypes, scales without fp8, wrong scale
 * shapes, fp8 on the CPU, fp8 through HISA) must fail with a message.
 * Tolerances: bf16 1e-4 (tensor-core fp32 accumulation, as cases_sparse.c);
 * fp8 mma.sync (f16 tensor-core path on sm_90) 1e-4; fp8 wgmma 5e-4:
 * Hopper's fp8 MMA keeps ~14 accumulator bits (DeepSeek-V3 §3.3.2), so 1e-5
 * (exact fp32 accumulation) is not reachable there; the measured error is
 * printed for every case.
 * HISA on every fp8 case (B 16/64, m < nb and m = nb) runs under the
 * variants of family "hisa": "portable" (dequantized copies through the
 * exact kernels: the CPU's sets) and "wgmma" (hisa.cu's e4m3 wgmma route, the
 * default): against the CPU on the dequantized inputs (row structure exact,
 * recall >= 0.99 over >= 1000 indices), every block kept = the GPU DSA
 * indices; "hb2" with every block kept runs the new stage-2 kernel
 * instead of the DSA route, and its indices must equal the DSA fp8 indices
 * exactly (the whole row order: the candidate scores are DSA v2's fp8 scores
 * bit for bit). */
#include "bo_staging.h"

/* ---- cases ---------------------------------------------------------------------- */
typedef struct dcase {
    int64_t T, HI, dI, L, topk;
    int ranges;   /* 0 causal default, 1 ragged [start, end) with empty and full rows */
    int q_perm;   /* q passed as a permuted view of a [HI,T,dI] buffer */
    int k_pad;    /* extra elements per k row (row stride dI + k_pad) */
    int scales;   /* fp8: 3 both, 1 k_scale only, 2 q_scale only, 0 none */
    la_dtype dt;  /* LA_BF16 or LA_FP8_E4M3 */
} dcase;

/* f64 scores over the valid ranges of the dequantized values the device
 * sees: sum_h w·ReLU(qs·ks·(qv·kv)); -inf outside */
static void ref_scores(const float *qv, const float *qsc, const float *kv, const float *ksc,
                       const float *w, int64_t T, int64_t HI, int64_t dI, int64_t L,
                       const int32_t *st, const int32_t *en, double *out, double *mag) {
#pragma omp parallel for schedule(dynamic)
    for (int64_t t = 0; t < T; t++) {
        int64_t lo, hi;
        ranges_of(T, L, st, en, t, &lo, &hi);
        for (int64_t s = 0; s < L; s++) out[t * L + s] = -INFINITY, mag[t * L + s] = 0;
        for (int64_t s = lo; s < hi; s++) {
            double acc = 0, am = 0;
            for (int64_t h = 0; h < HI; h++) {
                const float *qr = qv + (t * HI + h) * dI, *kr = kv + s * dI;
                double d = 0;
                for (int64_t i = 0; i < dI; i++) d += (double)qr[i] * kr[i];
                d *= (double)qsc[t * HI + h] * ksc[s];
                acc += (double)w[t * HI + h] * (d > 0 ? d : 0);
                am += fabs((double)w[t * HI + h]) * (d > 0 ? d : 0);
            }
            out[t * L + s] = acc;
            mag[t * L + s] = am;
        }
    }
}
static int cmp_desc(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}
/* every selected key's reference score >= the n-th best reference score of
 * its row - eps */
static int64_t check_ref_set(const int32_t *ix, const double *ref, int64_t T, int64_t L, int64_t K,
                             const int32_t *st, const int32_t *en, double eps) {
    int64_t bad = 0;
    double *tmp = malloc(((size_t)L + 1) * sizeof(double));
    for (int64_t t = 0; t < T; t++) {
        int64_t lo, hi;
        ranges_of(T, L, st, en, t, &lo, &hi);
        const int64_t n = hi - lo < K ? hi - lo : K;
        if (n <= 0) continue;
        memcpy(tmp, ref + t * L + lo, (size_t)(hi - lo) * sizeof(double));
        qsort(tmp, (size_t)(hi - lo), sizeof(double), cmp_desc);
        const double kth = tmp[n - 1];
        for (int64_t j = 0; j < n; j++) {
            const int32_t s = ix[t * K + j];
            if (s < lo || s >= hi || ref[t * L + s] < kth - eps) {
                bad++;
                break;
            }
        }
    }
    free(tmp);
    return bad;
}

static int cmp_i32(const void *a, const void *b) {
    const int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}
/* Rows of a and b ([T][K] index rows, -1 padded) whose sets differ. */
static int64_t rows_set_differ(const int32_t *a, const int32_t *b, int64_t T, int64_t K) {
    int32_t *ra = malloc((size_t)K * 4), *rb = malloc((size_t)K * 4);
    int64_t bad = 0;
    for (int64_t t = 0; t < T; t++) {
        memcpy(ra, a + t * K, (size_t)K * 4);
        memcpy(rb, b + t * K, (size_t)K * 4);
        qsort(ra, (size_t)K, 4, cmp_i32);
        qsort(rb, (size_t)K, 4, cmp_i32);
        bad += memcmp(ra, rb, (size_t)K * 4) != 0;
    }
    free(ra);
    free(rb);
    return bad;
}

/* hisa.cu's test hook: hb2_kernel<1>'s candidate scores with every block kept in
 * ascending order (column r*B + j = token r*B + j), out = [T, ceil(L/B)*B] f32
 * on the device; LA_ERR_UNSUPPORTED where hb2_kernel<1> does not take the views. */
la_status la_hisa_fp8_stage2_scores_test(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                                         const la_tensor *idx, float *out, la_context *ctx)
    __attribute__((weak)); /* CUDA builds only */

/* HISA "wgmma" rows against the CPU's rows on the dequantized inputs:
 * the same number of valid entries per row (the kept blocks' candidate count
 * does not depend on which non-forced blocks are kept: those are whole
 * blocks inside the range), valid entries in [lo, hi) and distinct, -1
 * after them (poison shows as out of range); *hits / *tot = recall of the
 * CPU's sets. Returns the rows failing the structure check. */
static int64_t hisa_rows_check(const int32_t *ix, const int32_t *ref, int64_t T, int64_t K, int64_t L,
                               const int32_t *st, const int32_t *en, int64_t *hits, int64_t *tot) {
    int32_t *ra = malloc((size_t)K * 4), *rb = malloc((size_t)K * 4);
    int64_t bad = 0;
    for (int64_t t = 0; t < T; t++) {
        int64_t lo, hi, nr = 0, ng = 0;
        ranges_of(T, L, st, en, t, &lo, &hi);
        for (int64_t j = 0; j < K; j++) nr += ref[t * K + j] >= 0;
        bool ok = true;
        for (int64_t j = 0; j < K; j++) {
            const int32_t v = ix[t * K + j];
            if (j < nr) ok = ok && v >= lo && v < hi;
            else ok = ok && v == -1;
        }
        memcpy(ra, ix + t * K, (size_t)nr * 4);
        memcpy(rb, ref + t * K, (size_t)nr * 4);
        qsort(ra, (size_t)nr, 4, cmp_i32);
        qsort(rb, (size_t)nr, 4, cmp_i32);
        for (int64_t j = 1; j < nr; j++) ok = ok && ra[j] != ra[j - 1];
        for (int64_t i = 0, j = 0; i < nr && j < nr;) { /* sorted merge */
            if (ra[i] == rb[j]) ng++, i++, j++;
            else if (ra[i] < rb[j]) i++;
            else j++;
        }
        *hits += ng;
        *tot += nr;
        bad += !ok;
    }
    free(ra);
    free(rb);
    return bad;
}

static void run_case(const void *arg) {
    const dcase c = *(const dcase *)arg;
    const int64_t T = c.T, HI = c.HI, dI = c.dI, L = c.L, K = c.topk;
    const bool fp8 = c.dt == LA_FP8_E4M3;
    const int64_t kst = dI + c.k_pad; /* k row stride (elements) */
    float *q = malloc((size_t)(T * HI * dI) * 4), *k = malloc((size_t)(L * dI) * 4),
          *w = malloc((size_t)(T * HI) * 4);
    la_fill_normal(&bo_rng, q, T * HI * dI, 1.0);
    la_fill_normal(&bo_rng, k, L * dI, 1.0);
    la_fill_normal(&bo_rng, w, T * HI, 1.0 / sqrt((double)HI * dI));
    /* quantize: values the device sees (qv, kv) and their scales (1 if none) */
    float *qv = malloc((size_t)(T * HI * dI) * 4), *kv = malloc((size_t)(L * dI) * 4);
    float *qsc = malloc((size_t)(T * HI) * 4), *ksc = malloc((size_t)L * 4);
    const size_t es = fp8 ? 1 : 2;
    uint8_t *qh = malloc((size_t)(T * HI * dI) * es), *kh = calloc((size_t)(L * kst) * es + 16, 1);
    const bool use_ks = fp8 && (c.scales & 1), use_qs = fp8 && (c.scales & 2);
    for (int64_t s = 0; s < L; s++) {
        double amax = 0;
        for (int64_t i = 0; i < dI; i++) amax = fmax(amax, fabs(k[s * dI + i]));
        ksc[s] = use_ks ? (float)(amax / 448.0) : 1.f;
        if (use_ks && !(ksc[s] > 0)) ksc[s] = 1e-3f;
        for (int64_t i = 0; i < dI; i++) {
            const float x = k[s * dI + i];
            if (fp8) {
                /* without a k scale the raw values are encoded (|x| < ~6) */
                uint8_t b = e4m3_enc(x / ksc[s]);
                kh[s * kst + i] = b;
                kv[s * dI + i] = e4m3_dec(b);
            } else {
                uint16_t b = la_f32_to_bf16(x);
                ((uint16_t *)kh)[s * kst + i] = b;
                kv[s * dI + i] = la_bf16_to_f32(b);
            }
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < HI; h++) {
            const float *qr = q + (t * HI + h) * dI;
            double amax = 0;
            for (int64_t i = 0; i < dI; i++) amax = fmax(amax, fabs(qr[i]));
            float sq = use_qs ? (float)(amax / 448.0) : 1.f;
            if (use_qs && !(sq > 0)) sq = 1e-3f;
            qsc[t * HI + h] = sq;
            for (int64_t i = 0; i < dI; i++) {
                /* device layout: [T,HI,dI], or [HI,T,dI] for the permuted view */
                const int64_t di = c.q_perm ? (h * T + t) * dI + i : (t * HI + h) * dI + i;
                if (fp8) {
                    uint8_t b = e4m3_enc(qr[i] / sq);
                    qh[di] = b;
                    qv[(t * HI + h) * dI + i] = e4m3_dec(b);
                } else {
                    uint16_t b = la_f32_to_bf16(qr[i]);
                    ((uint16_t *)qh)[di] = b;
                    qv[(t * HI + h) * dI + i] = la_bf16_to_f32(b);
                }
            }
        }
    int32_t *st = NULL, *en = NULL;
    if (c.ranges) {
        st = malloc((size_t)T * 4);
        en = malloc((size_t)T * 4);
        for (int64_t t = 0; t < T; t++) {
            int64_t a = (int64_t)(la_rng_uniform(&bo_rng) * L), b = (int64_t)(la_rng_uniform(&bo_rng) * (L + 1));
            if (a > b) { int64_t x = a; a = b; b = x; }
            if (t % 7 == 3) b = a;                 /* empty range */
            if (t % 5 == 1) { a = 0; b = L; }      /* full range */
            if (t % 11 == 2 && L > 3) b = a + 3 < L ? a + 3 : L; /* fewer than k valid keys */
            st[t] = (int32_t)a;
            en[t] = (int32_t)b;
        }
    }
    /* device tensors */
    dbuf dq = dput_raw(qh, (size_t)(T * HI * dI) * es);
    dbuf dk = dput_raw(kh, (size_t)(L * kst) * es + 16);
    dbuf dw = dput_raw(w, (size_t)(T * HI) * 4);
    dbuf dks = {0}, dqs = {0}, dst = {0}, den = {0};
    if (use_ks) dks = dput_raw(ksc, (size_t)L * 4);
    if (use_qs) dqs = dput_raw(qsc, (size_t)(T * HI) * 4);
    if (c.ranges) {
        dst = dput_raw(st, (size_t)T * 4);
        den = dput_raw(en, (size_t)T * 4);
    }
    la_tensor tq, tk, tw, tks, tqs, ts, te, ti, tsc;
    if (c.q_perm) {
        int64_t ne[3] = {T, HI, dI}, nb[3] = {dI, T * dI, 1};
        la_tensor_init_strided(&tq, dq.d, c.dt, LA_DEVICE_CUDA, 3, ne, nb);
    } else
        tset(&tq, dq.d, c.dt, LA_DEVICE_CUDA, 3, T, HI, dI);
    {
        int64_t ne[2] = {L, dI}, nb[2] = {kst, 1};
        la_tensor_init_strided(&tk, dk.d, c.dt, LA_DEVICE_CUDA, 2, ne, nb);
    }
    tset(&tw, dw.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    if (use_ks) tset(&tks, dks.d, LA_F32, LA_DEVICE_CUDA, 1, L, 0, 0);
    if (use_qs) tset(&tqs, dqs.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    if (c.ranges) {
        tset(&ts, dst.d, LA_I32, LA_DEVICE_CUDA, 1, T, 0, 0);
        tset(&te, den.d, LA_I32, LA_DEVICE_CUDA, 1, T, 0, 0);
    }
    const la_tensor *gs = c.ranges ? &ts : NULL, *ge = c.ranges ? &te : NULL;
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    p.k_scale = use_ks ? &tks : NULL;
    p.q_scale = use_qs ? &tqs : NULL;
    dbuf didx = dalloc((size_t)(T * K) * 4), dsc = dalloc((size_t)(T * L) * 4);
    tset(&ti, didx.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&tsc, dsc.d, LA_F32, LA_DEVICE_CUDA, 2, T, L, 0);

    /* references: f64 scores; CPU DSA on the dequantized f32 inputs */
    double *sr = malloc((size_t)(T * L) * 8), *sm = malloc((size_t)(T * L) * 8);
    ref_scores(qv, qsc, kv, ksc, w, T, HI, dI, L, st, en, sr, sm);
    double mref = 0;
    for (int64_t i = 0; i < T * L; i++)
        if (!isinf(sr[i]) && fabs(sr[i]) > mref) mref = fabs(sr[i]);
    float *qd = malloc((size_t)(T * HI * dI) * 4), *kd = malloc((size_t)(L * dI) * 4);
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < HI; h++)
            for (int64_t i = 0; i < dI; i++)
                qd[(t * HI + h) * dI + i] = (float)((double)qv[(t * HI + h) * dI + i] * qsc[t * HI + h]);
    for (int64_t s = 0; s < L; s++)
        for (int64_t i = 0; i < dI; i++) kd[s * dI + i] = (float)((double)kv[s * dI + i] * ksc[s]);
    int32_t *ic = malloc((size_t)(T * K) * 4);
    /* CPU views of the dequantized inputs (also for HISA / block-sparse below) */
    la_tensor hq, hk, hw, hs, he, hi;
    tset(&hq, qd, LA_F32, LA_DEVICE_CPU, 3, T, HI, dI);
    tset(&hk, kd, LA_F32, LA_DEVICE_CPU, 2, L, dI, 0);
    tset(&hw, w, LA_F32, LA_DEVICE_CPU, 2, T, HI, 0);
    tset(&hi, ic, LA_I32, LA_DEVICE_CPU, 2, T, K, 0);
    if (c.ranges) {
        tset(&hs, st, LA_I32, LA_DEVICE_CPU, 1, T, 0, 0);
        tset(&he, en, LA_I32, LA_DEVICE_CPU, 1, T, 0, 0);
    }
    {
        la_index_params pc;
        la_index_params_init(&pc);
        pc.topk = K;
        CHECK_OK(la_dsa_indexer(&pc, &hq, &hk, &hw, c.ranges ? &hs : NULL, c.ranges ? &he : NULL, &hi,
                                NULL, bo_ctx()));
    }

    int32_t *ig = malloc((size_t)(T * K) * 4);
    float *sg = malloc((size_t)(T * L) * 4), *sg0 = malloc((size_t)(T * L) * 4);
    int32_t *ig0 = malloc((size_t)(T * K) * 4); /* the default path's DSA indices */
    char tag[200];
    snprintf(tag, sizeof tag, "%s T=%lld HI=%lld dI=%lld L=%lld k=%lld ranges=%d qperm=%d kpad=%d scales=%d",
             la_dtype_name(c.dt), (long long)T, (long long)HI, (long long)dI, (long long)L, (long long)K,
             c.ranges, c.q_perm, c.k_pad, fp8 ? c.scales : 0);
    /* paths: the default, then variants of family "dsa": the wgmma kernel
     * with the query group forced to 64 ("qg64"), mma.sync ("mma"), the
     * exact fp32 kernel ("portable", on dequantized copies; fp8 only). A
     * variant that does not take the views is a skipped sub-check. */
    static const char *paths[4] = {NULL, "qg64", "mma", "portable"};
    const int npaths = fp8 ? 4 : 3;
    for (int pi = 0; pi < npaths; pi++) {
        if (paths[pi] && !bo_use_variant("dsa", paths[pi])) continue;
        const char *pname = pi == 0 ? "default" : paths[pi];
        la_dev_memset(didx.d, 0x7f, didx.bytes);
        la_dev_memset(dsc.d, 0xff, dsc.bytes);
        if (!CHECK_DEV(la_dsa_indexer(&p, &tq, &tk, &tw, gs, ge, &ti, &tsc, bo_ctx()))) {
            bo_use_variant("dsa", NULL);
            continue;
        }
        la_dev_download(ig, didx.d, didx.bytes);
        la_dev_download(sg, dsc.d, dsc.bytes);
        const double e = score_err_mag(sg, sr, sm, T * L);
        /* the v2 kernel runs only for HI=64, dI=128 */
        const bool v2 = pi < 2 && HI == 64 && dI == 128;
        const double tol = fp8 ? (pi == 3 ? 1e-5 : v2 ? 5e-4 : 1e-4) : (pi == 3 ? 1e-5 : 1e-4);
        CHECK(e <= tol, "dsa scores %s [%s]: rel err %.3g > %.1g", tag, pname, e, tol);
        char msg[160] = "";
        int64_t bad = check_own_topk(ig, sg, T, L, K, st, en, msg, sizeof msg);
        CHECK(bad == 0, "dsa idx %s [%s]: %lld rows are not the top-k of the returned scores (%s)", tag,
              pname, (long long)bad, msg);
        bad = check_ref_set(ig, sr, T, L, K, st, en, 4.0 * tol * mref);
        CHECK(bad == 0, "dsa idx %s [%s]: %lld rows select a key below the reference k-th score - eps", tag,
              pname, (long long)bad);
        int64_t tot = 0;
        const double rc = overlap(ig, ic, T, K, L, &tot);
        if (tot >= 1000) CHECK(rc >= 0.99, "dsa %s [%s]: recall vs the CPU on dequantized inputs %.4f", tag, pname, rc);
        int64_t ndiff = 0;
        if (pi == 0) memcpy(ig0, ig, (size_t)(T * K) * 4);
        if (pi == 0) memcpy(sg0, sg, (size_t)(T * L) * 4);
        else
            for (int64_t i = 0; i < T * L; i++) ndiff += memcmp(&sg[i], &sg0[i], 4) != 0;
        printf("  %-70s [%-8s] score rel err %.2e, recall vs CPU %.4f (%lld), scores != new: %lld\n", tag,
               pname, e, rc, (long long)tot, (long long)ndiff);
    }
    bo_use_variant("dsa", NULL);
    if (fp8 && L > 0) {
        /* HISA and block-sparse on the same fp8 inputs and scales (hisa.cu:
         * dequantized f32 copies through the exact pipeline, or the DSA
         * indexer itself when every block is kept). Against the CPU on the
         * dequantized f32 inputs: the same set per row; every block kept:
         * equal to the GPU DSA indices of the default path (SPEC §7). */
        const int64_t Bs[2] = {16, 64};
        for (int bi = 0; bi < 2; bi++) {
            const int64_t B = Bs[bi], Be = B < L ? B : L, nb = (L + Be - 1) / Be;
            for (int mi = 0; mi < 2; mi++) {
                const int64_t m = mi ? nb : (nb / 3 > 0 ? nb / 3 : 1);
                if (mi == 0 && m >= nb) continue; /* the all-blocks case below */
                la_index_params ph = p, pc;
                ph.block = B;
                ph.block_topk = m;
                la_index_params_init(&pc);
                pc.topk = K;
                pc.block = B;
                pc.block_topk = m;
                la_dev_memset(didx.d, mi ? 0xff : 0x7f, didx.bytes);
                /* the f32 route (dequantized copies, exact kernels): the CPU's sets */
                if (!bo_use_variant("hisa", "portable")) continue;
                const int sh = CHECK_DEV(la_hisa_indexer(&ph, &tq, &tk, &tw, gs, ge, &ti, bo_ctx()));
                bo_use_variant("hisa", NULL);
                if (!sh) continue;
                la_dev_download(ig, didx.d, didx.bytes);
                const int32_t *want = ig0;
                if (m < nb) {
                    CHECK_OK(la_hisa_indexer(&pc, &hq, &hk, &hw, c.ranges ? &hs : NULL, c.ranges ? &he : NULL,
                                             &hi, bo_ctx()));
                    want = ic;
                }
                int64_t nd = 0;
                for (int64_t i = 0; i < T * K; i++) nd += ig[i] != want[i];
                if (m >= nb) /* the same kernels: the same indices, in order */
                    CHECK(nd == 0, "hisa fp8 %s B=%lld m=%lld: %lld of %lld indices differ from the GPU DSA "
                          "indexer (every block kept)", tag, (long long)B, (long long)m, (long long)nd,
                          (long long)(T * K));
                else { /* vs the CPU: the same set per row; the GPU's fp32 sums run in another
                        * order, so ulp-close scores may come out swapped (seen: 4 of 526336
                        * positions, T = 257, L = 1500, B = 16, m = 31) */
                    const int64_t bad = rows_set_differ(ig, want, T, K);
                    CHECK(bad == 0, "hisa fp8 %s B=%lld m=%lld: %lld rows select another set than the CPU on "
                          "the dequantized inputs", tag, (long long)B, (long long)m, (long long)bad);
                }
                printf("  hisa fp8 %-60s B=%-3lld m=%-4lld vs %s: %lld positions differ\n", tag, (long long)B,
                       (long long)m, m < nb ? "CPU" : "DSA", (long long)nd);
                /* variant "wgmma" of family "hisa" (hisa.cu: stage 1 on bf16 q / bf16 block means / w*q_scale,
                 * stage 2 hb2_kernel<1> on the e4m3 rows). m < nb: against the CPU on the
                 * dequantized inputs, row structure exact and recall >= 0.99 where >= 1000
                 * indices are compared (bf16 block means may flip near-tied blocks, v2's fp8
                 * accumulation near-tied tokens). m = nb: "wgmma" keeps the DSA route (equal to
                 * the GPU DSA); "hb2" runs hb2_kernel<1> anyway where it takes the views
                 * (HI 64, dI 128, 16-byte rows): its candidate scores are DSA v2's fp8 scores
                 * bit for bit by construction, so the indices must equal the GPU DSA's exactly
                 * (rows here are up to 2048 long: the whole order is compared); other views
                 * take the f32 route (checked as m < nb). Outputs poisoned before each call. */
                const bool wg_views = HI == 64 && dI == 128 && kst % 16 == 0;
                for (int wm = 0; wm < 2; wm++) {
                    const bool force = wm == 1;
                    if (force && m < nb) continue; /* "hb2" = "wgmma" when blocks are dropped */
                    if (!bo_use_variant("hisa", force ? "hb2" : "wgmma")) continue;
                    la_dev_memset(didx.d, 0x7f, didx.bytes); /* 0x7f7f7f7f: out of range */
                    const la_status sw = la_hisa_indexer(&ph, &tq, &tk, &tw, gs, ge, &ti, bo_ctx());
                    bo_use_variant("hisa", NULL);
                    if (sw == LA_ERR_UNSUPPORTED && !wg_views) continue; /* hb2 / wgmma take HI 64, dI 128 rows */
                    const char *mname = force ? "hb2" : "wgmma";
                    CHECK(sw == LA_OK, "hisa fp8 %s %s B=%lld m=%lld: %s: %s", mname, tag, (long long)B,
                          (long long)m, la_status_string(sw), la_last_error());
                    if (sw != LA_OK) continue;
                    la_dev_download(ig, didx.d, didx.bytes);
                    if (m >= nb && (!force || wg_views)) {
                        int64_t nw = 0;
                        for (int64_t i = 0; i < T * K; i++) nw += ig[i] != ig0[i];
                        CHECK(nw == 0, "hisa fp8 %s %s B=%lld m=%lld: %lld of %lld indices differ from the GPU "
                              "DSA indexer (every block kept%s)", mname, tag, (long long)B, (long long)m,
                              (long long)nw, (long long)(T * K),
                              force ? "; stage-2 scores should be DSA v2's fp8 scores bit for bit" : "");
                        printf("  hisa fp8 %-8s %-51s B=%-3lld m=%-4lld vs DSA: %lld positions differ%s\n", mname,
                               tag, (long long)B, (long long)m, (long long)nw,
                               force ? " (hb2_kernel<1> vs sc_wgmma_kernel<1>)" : "");
                        continue;
                    }
                    if (m >= nb) /* the CPU rows for m = nb (not computed above) */
                        CHECK_OK(la_hisa_indexer(&pc, &hq, &hk, &hw, c.ranges ? &hs : NULL,
                                                 c.ranges ? &he : NULL, &hi, bo_ctx()));
                    int64_t hits = 0, tot = 0;
                    const int64_t bad = hisa_rows_check(ig, ic, T, K, L, st, en, &hits, &tot);
                    const double rc = tot ? (double)hits / (double)tot : 1.0;
                    CHECK(bad == 0, "hisa fp8 %s %s B=%lld m=%lld: %lld rows malformed (valid count, range, "
                          "duplicates, -1 padding) against the CPU rows", mname, tag, (long long)B,
                          (long long)m, (long long)bad);
                    if (tot >= 1000)
                        CHECK(rc >= 0.99, "hisa fp8 %s %s B=%lld m=%lld: recall vs the CPU on dequantized "
                              "inputs %.4f (%lld of %lld)", mname, tag, (long long)B, (long long)m, rc,
                              (long long)hits, (long long)tot);
                    printf("  hisa fp8 %-8s %-51s B=%-3lld m=%-4lld vs CPU: recall %.4f (%lld of %lld)%s\n",
                           mname, tag, (long long)B, (long long)m, rc, (long long)hits, (long long)tot,
                           wg_views ? "" : " [f32 route: views not hb2_kernel<1>'s]");
                }
            }
            /* (d) direct: hb2_kernel<1>'s scores (every block kept, ascending) against the
             * DSA's fp8 score rows of the default path (v2 for these views), bit for bit;
             * columns past L must be -inf; output poisoned (0x7f7f7f7f, finite) first */
            if (HI == 64 && dI == 128 && kst % 16 == 0 && la_hisa_fp8_stage2_scores_test) {
                la_index_params ph = p;
                ph.block = B;
                ph.block_topk = nb;
                const int64_t ncol = nb * Be;
                dbuf d2 = dalloc((size_t)(T * ncol) * 4);
                la_dev_memset(d2.d, 0x7f, d2.bytes);
                const la_status s2 = la_hisa_fp8_stage2_scores_test(&ph, &tq, &tk, &tw, gs, ge, &ti, (float *)d2.d, bo_ctx());
                CHECK(s2 == LA_OK, "hisa fp8 stage-2 hook %s B=%lld: %s: %s", tag, (long long)B,
                      la_status_string(s2), la_last_error());
                if (s2 == LA_OK) {
                    float *h2 = malloc(d2.bytes);
                    la_dev_download(h2, d2.d, d2.bytes);
                    int64_t nd = 0, ntail = 0, nfin = 0;
                    double md = 0, mr = 0;
                    for (int64_t t = 0; t < T; t++) {
                        for (int64_t s = 0; s < L; s++) {
                            const float a = h2[t * ncol + s], b = sg0[t * L + s];
                            nd += memcmp(&a, &b, 4) != 0;
                            if (isfinite(b)) {
                                nfin++;
                                mr = fmax(mr, fabs((double)b));
                                if (isfinite(a)) md = fmax(md, fabs((double)a - (double)b));
                                else md = INFINITY;
                            }
                        }
                        for (int64_t s = L; s < ncol; s++) ntail += !(isinf(h2[t * ncol + s]) && h2[t * ncol + s] < 0);
                    }
                    CHECK(nd == 0 && ntail == 0, "hisa fp8 stage-2 scores %s B=%lld: %lld of %lld differ bitwise from "
                          "the DSA fp8 (v2) scores (max |diff| %.3g, max |score| %.3g), %lld columns past L not -inf",
                          tag, (long long)B, (long long)nd, (long long)(T * L), md, mr, (long long)ntail);
                    printf("  hisa fp8 stage2 %-52s B=%-3lld vs DSA v2 scores: %lld of %lld differ bitwise "
                           "(%lld finite; max |diff| %.3g of max |score| %.3g)\n", tag, (long long)B, (long long)nd,
                           (long long)(T * L), (long long)nfin, md, mr);
                    free(h2);
                }
                dfree(&d2);
            }
            if (K >= B) { /* block-sparse: topk/B blocks */
                la_index_params ph = p, pc;
                ph.block = B;
                la_index_params_init(&pc);
                pc.topk = K;
                pc.block = B;
                la_dev_memset(didx.d, 0x7f, didx.bytes);
                la_status sb = la_blocksparse_indexer(&ph, &tq, &tk, &tw, gs, ge, &ti, bo_ctx());
                CHECK(sb == LA_OK, "blocksparse fp8 %s B=%lld: %s: %s", tag, (long long)B,
                      la_status_string(sb), la_last_error());
                if (sb == LA_OK) {
                    la_dev_download(ig, didx.d, didx.bytes);
                    CHECK_OK(la_blocksparse_indexer(&pc, &hq, &hk, &hw, c.ranges ? &hs : NULL,
                                                    c.ranges ? &he : NULL, &hi, bo_ctx()));
                    const int64_t bad = rows_set_differ(ig, ic, T, K);
                    CHECK(bad == 0, "blocksparse fp8 %s B=%lld: %lld rows select another set than the CPU", tag,
                          (long long)B, (long long)bad);
                }
            }
        }
    }
    free(ig0);
    dfree(&dq); dfree(&dk); dfree(&dw); dfree(&dks); dfree(&dqs); dfree(&dst); dfree(&den);
    dfree(&didx); dfree(&dsc);
    free(q); free(k); free(w); free(qv); free(kv); free(qsc); free(ksc); free(qh); free(kh);
    free(st); free(en); free(sr); free(sm); free(qd); free(kd); free(ic); free(ig); free(sg); free(sg0);
}

/* ---- bad fp8 inputs -------------------------------------------------------------- */
static void expect_fail(la_status got, la_status want, const char *what, const char *needle) {
    const char *m = la_last_error();
    CHECK(got == want, "%s: got %s, want %s (%s)", what, la_status_string(got), la_status_string(want), m);
    CHECK(strlen(m) > 0 && (!needle || strstr(m, needle)), "%s: message '%s' lacks '%s'", what, m,
          needle ? needle : "");
    printf("  bad input %-44s -> %s: %s\n", what, la_status_string(got), m);
}
static void test_bad_inputs(const void *arg) {
    (void)arg;
    const int64_t T = 3, HI = 64, dI = 128, L = 50, K = 4;
    uint8_t *q8 = calloc((size_t)(T * HI * dI), 1), *k8 = calloc((size_t)(L * dI), 1);
    float *w = calloc((size_t)(T * HI), 4), *ks = malloc((size_t)L * 4), *qs = malloc((size_t)(T * HI) * 4);
    for (int64_t i = 0; i < L; i++) ks[i] = 0.01f;
    for (int64_t i = 0; i < T * HI; i++) qs[i] = 0.02f;
    dbuf dq = dput_raw(q8, (size_t)(T * HI * dI)), dk = dput_raw(k8, (size_t)(L * dI)),
         dw = dput_raw(w, (size_t)(T * HI) * 4), dks = dput_raw(ks, (size_t)L * 4),
         dqs = dput_raw(qs, (size_t)(T * HI) * 4), di = dalloc((size_t)(T * K) * 4),
         dkb = dalloc((size_t)(L * dI) * 2);
    la_dev_memset(dkb.d, 0, dkb.bytes);
    la_tensor tq, tk, tw, tks, tqs, ti, tkb, tks_short, tks_bf;
    tset(&tq, dq.d, LA_FP8_E4M3, LA_DEVICE_CUDA, 3, T, HI, dI);
    tset(&tk, dk.d, LA_FP8_E4M3, LA_DEVICE_CUDA, 2, L, dI, 0);
    tset(&tw, dw.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    tset(&tks, dks.d, LA_F32, LA_DEVICE_CUDA, 1, L, 0, 0);
    tset(&tqs, dqs.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    tset(&tkb, dkb.d, LA_BF16, LA_DEVICE_CUDA, 2, L, dI, 0);
    tset(&tks_short, dks.d, LA_F32, LA_DEVICE_CUDA, 1, L - 1, 0, 0);
    tset(&tks_bf, dks.d, LA_BF16, LA_DEVICE_CUDA, 1, L, 0, 0);
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    p.k_scale = &tks;
    p.q_scale = &tqs;
    /* the valid call first */
    CHECK_OK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()));
    /* scale values */
    float bad_vals[4] = {-0.5f, 0.f, NAN, INFINITY};
    const char *bad_names[4] = {"negative", "zero", "NaN", "inf"};
    for (int i = 0; i < 4; i++) {
        char what[64];
        la_dev_upload((float *)dks.d + 17, &bad_vals[i], 4);
        snprintf(what, sizeof what, "%s k_scale[17]", bad_names[i]);
        expect_fail(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_ARG, what,
                    "k_scale[17]");
        la_dev_upload((float *)dks.d + 17, &ks[17], 4);
        la_dev_upload((float *)dqs.d + 70, &bad_vals[i], 4); /* q_scale[1, 6] */
        snprintf(what, sizeof what, "%s q_scale[1, 6]", bad_names[i]);
        expect_fail(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_ARG, what,
                    "q_scale[1, 6]");
        la_dev_upload((float *)dqs.d + 70, &qs[70], 4);
    }
    CHECK_OK(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()));
    /* shapes / dtypes */
    p.k_scale = &tks_short;
    expect_fail(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_SHAPE,
                "k_scale of L-1 entries", "k_scale");
    p.k_scale = &tks_bf;
    expect_fail(la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_DTYPE,
                "bf16 k_scale", "k_scale");
    p.k_scale = &tks;
    expect_fail(la_dsa_indexer(&p, &tq, &tkb, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_DTYPE,
                "fp8 q with bf16 k", "fp8_e4m3");
    {
        la_tensor tqb;
        dbuf dqb = dalloc((size_t)(T * HI * dI) * 2);
        tset(&tqb, dqb.d, LA_BF16, LA_DEVICE_CUDA, 3, T, HI, dI);
        expect_fail(la_dsa_indexer(&p, &tqb, &tkb, &tw, NULL, NULL, &ti, NULL, bo_ctx()), LA_ERR_ARG,
                    "scales with bf16 q/k", "fp8");
        dfree(&dqb);
    }
    /* HISA / block-sparse take fp8 too, with the same view checks (named
     * after the operator) and their own parameter checks */
    p.block = 16;
    p.block_topk = 2;
    expect_fail(la_hisa_indexer(&p, &tq, &tkb, &tw, NULL, NULL, &ti, bo_ctx()), LA_ERR_DTYPE,
                "hisa: fp8 q with bf16 k", "hisa: q is fp8_e4m3");
    p.block_topk = 0;
    expect_fail(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, bo_ctx()), LA_ERR_ARG,
                "hisa fp8 with block_topk 0", "block_topk");
    p.block_topk = 2;
    p.topk = 8; /* < block */
    {
        dbuf dib = dalloc((size_t)(T * 8) * 4);
        la_tensor tib;
        tset(&tib, dib.d, LA_I32, LA_DEVICE_CUDA, 2, T, 8, 0);
        expect_fail(la_blocksparse_indexer(&p, &tq, &tk, &tw, NULL, NULL, &tib, bo_ctx()),
                    LA_ERR_ARG, "blocksparse fp8 with topk < block", "smaller than the block size");
        dfree(&dib);
    }
    p.topk = K;
    /* variant "wgmma" of family "hisa" (m = 2 < 4 blocks: the e4m3 wgmma
     * route): the valid call, then bad scale values named as for the DSA */
    if (bo_use_variant("hisa", "wgmma")) {
    CHECK_OK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, bo_ctx()));
    {
        const float z = 0.f, nan = NAN;
        la_dev_upload((float *)dks.d + 17, &z, 4);
        expect_fail(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, bo_ctx()), LA_ERR_ARG,
                    "hisa wg: zero k_scale[17]", "k_scale[17]");
        la_dev_upload((float *)dks.d + 17, &ks[17], 4);
        la_dev_upload((float *)dqs.d + 70, &nan, 4);
        expect_fail(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, bo_ctx()), LA_ERR_ARG,
                    "hisa wg: NaN q_scale[1, 6]", "q_scale[1, 6]");
        la_dev_upload((float *)dqs.d + 70, &qs[70], 4);
    }
    CHECK_OK(la_hisa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, bo_ctx()));
    bo_use_variant("hisa", NULL);
    }
    /* fp8 on the CPU: rejected (the CPU takes f32/f64/bf16) */
    {
        la_tensor hq, hk, hw, hi;
        int32_t *hidx = malloc((size_t)(T * K) * 4);
        tset(&hq, q8, LA_FP8_E4M3, LA_DEVICE_CPU, 3, T, HI, dI);
        tset(&hk, k8, LA_FP8_E4M3, LA_DEVICE_CPU, 2, L, dI, 0);
        tset(&hw, w, LA_F32, LA_DEVICE_CPU, 2, T, HI, 0);
        tset(&hi, hidx, LA_I32, LA_DEVICE_CPU, 2, T, K, 0);
        la_index_params pc;
        la_index_params_init(&pc);
        pc.topk = K;
        la_status s = la_dsa_indexer(&pc, &hq, &hk, &hw, NULL, NULL, &hi, NULL, bo_ctx());
        CHECK(s != LA_OK && strlen(la_last_error()) > 0, "fp8 on the CPU must be rejected with a message");
        printf("  bad input %-44s -> %s: %s\n", "fp8 q/k on the CPU", la_status_string(s), la_last_error());
        free(hidx);
    }
    dfree(&dq); dfree(&dk); dfree(&dw); dfree(&dks); dfree(&dqs); dfree(&di); dfree(&dkb);
    free(q8); free(k8); free(w); free(ks); free(qs);
}


/* The smallest DSA call through the family's kernel choice (bf16 HI = 64, dI = 128). */
static la_status probe_dsa(la_context *ctx) {
    const int64_t T = 2, HI = 64, dI = 128, Lk = 64, K = 8;
    dbuf dq = dalloc((size_t)(T * HI * dI) * 2), dk = dalloc((size_t)(Lk * dI) * 2),
         dw = dalloc((size_t)(T * HI) * 4), di = dalloc((size_t)(T * K) * 4);
    la_dev_memset(dq.d, 0, dq.bytes);
    la_dev_memset(dk.d, 0, dk.bytes);
    la_dev_memset(dw.d, 0, dw.bytes);
    la_tensor tq, tk, tw, ti;
    tset(&tq, dq.d, LA_BF16, LA_DEVICE_CUDA, 3, T, HI, dI);
    tset(&tk, dk.d, LA_BF16, LA_DEVICE_CUDA, 2, Lk, dI, 0);
    tset(&tw, dw.d, LA_F32, LA_DEVICE_CUDA, 2, T, HI, 0);
    tset(&ti, di.d, LA_I32, LA_DEVICE_CUDA, 2, T, K, 0);
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    const la_status s = la_dsa_indexer(&p, &tq, &tk, &tw, NULL, NULL, &ti, NULL, ctx);
    la_dev_synchronize();
    dfree(&dq); dfree(&dk); dfree(&dw); dfree(&di);
    return s;
}
static void add_case(bo_list *L, int small, const dcase *c) {
    char name[BO_NAME_MAX];
    snprintf(name, sizeof name, "dsa %s T=%lld HI=%lld dI=%lld L=%lld k=%lld ranges=%d qperm=%d kpad=%d scales=%d",
             la_dtype_name(c->dt), (long long)c->T, (long long)c->HI, (long long)c->dI,
             (long long)c->L, (long long)c->topk, c->ranges, c->q_perm, c->k_pad,
             c->dt == LA_FP8_E4M3 ? c->scales : 0);
    const bo_opts o = {"dsa", BO_CUDA, small, NULL, NULL, NULL};
    bo_add(L, &o, run_case, c, sizeof *c, name);
}

void cases_dsa_fp8(bo_list *L) {
    bo_add_probe(L, "dsa", probe_dsa);
    {
        const bo_opts o = {"dsa", BO_CUDA, 1, NULL, NULL, NULL};
        bo_add(L, &o, test_bad_inputs, NULL, 0,
               "dsa/hisa/blocksparse fp8 bad inputs: scales, shapes, dtypes, fp8 on the CPU");
    }
    /* {T, HI, dI, L, topk, ranges, q_perm, k_pad, scales, dtype} */
    const dcase small[] = {
        {1, 64, 128, 1, 1, 0, 0, 0, 3, LA_FP8_E4M3},
        {1, 64, 128, 1, 1, 0, 0, 0, 0, LA_BF16},
        {63, 64, 128, 100, 7, 1, 0, 0, 3, LA_FP8_E4M3},
        {63, 64, 128, 100, 7, 1, 0, 0, 0, LA_BF16},
        {65, 64, 128, 100, 1, 0, 0, 0, 1, LA_FP8_E4M3},   /* k_scale only */
        {65, 64, 128, 100, 2048, 1, 0, 0, 2, LA_FP8_E4M3}, /* q_scale only, k > L */
        {65, 64, 128, 1000, 2048, 1, 0, 0, 3, LA_FP8_E4M3},
        {65, 64, 128, 1000, 2048, 1, 0, 0, 0, LA_BF16},
        {1, 64, 128, 1000, 7, 0, 0, 0, 3, LA_FP8_E4M3},
        {20, 64, 128, 333, 7, 1, 0, 0, 0, LA_FP8_E4M3},    /* fp8 without scales (= 1) */
        {17, 64, 128, 300, 7, 1, 1, 0, 3, LA_FP8_E4M3},    /* permuted q view (strided rows) */
        {17, 64, 128, 300, 7, 1, 1, 8, 0, LA_BF16},        /* permuted q, padded k rows */
        {20, 64, 128, 333, 7, 0, 0, 2, 0, LA_BF16},        /* k rows 4-byte aligned: mma.sync */
        {20, 64, 128, 333, 7, 0, 0, 16, 3, LA_FP8_E4M3},   /* padded k rows, 16-byte aligned */
        {20, 64, 128, 333, 7, 1, 0, 4, 3, LA_FP8_E4M3},    /* k rows 4-byte aligned: mma.sync */
        {20, 64, 128, 333, 7, 1, 0, 1, 3, LA_FP8_E4M3},    /* unaligned k rows: dequantized */
        {33, 32, 64, 500, 7, 1, 0, 0, 3, LA_FP8_E4M3},     /* mma.sync fp8, 64-byte rows */
        {9, 16, 128, 200, 7, 0, 0, 0, 3, LA_FP8_E4M3},
        {63, 5, 20, 100, 7, 1, 0, 0, 3, LA_FP8_E4M3},      /* generic shape: dequantized */
    };
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) add_case(L, 1, &small[i]);
    {
        const dcase big[] = {
            {1, 64, 128, 5000, 2048, 0, 0, 0, 3, LA_FP8_E4M3},
            {1, 64, 128, 5000, 2048, 0, 0, 0, 0, LA_BF16},
            {63, 64, 128, 5000, 7, 1, 0, 0, 3, LA_FP8_E4M3},
            {65, 64, 128, 5000, 2048, 1, 0, 0, 0, LA_BF16},
            {257, 64, 128, 1500, 2048, 0, 0, 0, 3, LA_FP8_E4M3}, /* causal, many chunks */
            {257, 64, 128, 1500, 1, 0, 0, 0, 0, LA_BF16},
        };
        for (size_t i = 0; i < sizeof big / sizeof big[0]; i++) add_case(L, 0, &big[i]);
    }
}
