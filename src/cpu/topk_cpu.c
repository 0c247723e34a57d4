/* Row top-k (SPEC §6 ordering): descending score with NaN ranked first (above
 * +inf, as torch.topk), ties (NaN among NaN too) to the lower position, −inf
 * masked, −1 padding. Linear time per row, and branch-free in its
 * loops (on real rows the data decides every branch, and mispredictions, not
 * arithmetic, were what a branchy version spent its time on):
 *
 *   1. sample 2048 scores (128 evenly spaced runs of 16: one cache line each,
 *      so a cold row costs 128 misses, not 2048) and take as threshold τ the
 *      sample's r-th largest, r a few standard deviations above the expected
 *      count k·2048/n (found by a histogram of the sample's keys, then a sort
 *      of the few keys in the bucket holding it; deterministic);
 *   2. one vectorised pass keeps the (key, position) of every score >= τ:
 *      about 1.3–1.7·k candidates, in ascending position order;
 *      if fewer than k survive (rare), the pass is redone with τ = −inf;
 *   3. a stable LSD radix sort of the candidates on (max key − key), with as
 *      few digits of at most 12 bits as the candidates' key range needs (2
 *      for typical rows). Stability keeps equal keys in ascending position,
 *      which is exactly the tie rule.
 *
 * The result does not depend on τ: any τ that leaves at least k candidates
 * contains the whole top-k, since every score below τ ranks after them.
 * Keys map floats to unsigned integers in the same order (−0 is folded into
 * +0 first, so the two zeros tie as they compare equal). */
#include <stdint.h>
#include <stdlib.h>

#include "cpu/sparse_cpu.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#define TOPK_SAMPLE 2048
#define TOPK_RUN 16     /* consecutive samples per run: one cache line */
#define TOPK_BITS 11    /* histogram / radix digit width */
#define TOPK_SLACK 16   /* lanes of slack for full-vector stores */

/* Every NaN, whatever its sign and payload, has the largest key: above +inf,
 * and all NaN tie. */
#define TOPK_NAN_KEY 0xffffffffu

/* Order-preserving map float -> uint32 (larger float, larger key). */
static inline uint32_t float_key(float x) {
    if (x != x) return TOPK_NAN_KEY;
    x += 0.0f; /* −0 -> +0 */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
static inline float key_float(uint32_t k) {
    const uint32_t u = (k & 0x80000000u) ? (k & 0x7fffffffu) : ~k;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Four arrays of n + 16 (keys, positions and their sort scratch), the
 * sample and its scratch. */
size_t la_topk_row_ws_bytes(int64_t n) {
    return ((size_t)n + TOPK_SLACK) * 16u + 2u * TOPK_SAMPLE * 4u + 64u;
}

/* Keep (key, position) of every x[i] >= tau (or > tau when strict), and of
 * every NaN (it ranks above any tau). */
static int64_t filter_row(const float *x, int64_t n, float tau, int strict, uint32_t *ck,
                          int32_t *ci) {
    int64_t c = 0, i = 0;
#if defined(__AVX512F__)
    /* compress in registers and store all 16 lanes (the arrays have slack);
     * no branch on the data */
    const __m512 vt = _mm512_set1_ps(tau);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i top = _mm512_set1_epi32((int)0x80000000u);
    const __m512i nan_key = _mm512_set1_epi32((int)TOPK_NAN_KEY);
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        const __mmask16 m = nan | (strict ? _mm512_cmp_ps_mask(v, vt, _CMP_GT_OQ)
                                          : _mm512_cmp_ps_mask(v, vt, _CMP_GE_OQ));
        /* float_key, 16 at a time: u ^ (sign ? 0xffffffff : 0x80000000), after
         * −0 -> +0; NaN lanes get TOPK_NAN_KEY */
        const __m512i u = _mm512_castps_si512(_mm512_add_ps(v, _mm512_setzero_ps()));
        const __m512i key = _mm512_mask_mov_epi32(
            _mm512_xor_si512(u, _mm512_or_si512(_mm512_srai_epi32(u, 31), top)), nan, nan_key);
        const __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)i));
        _mm512_storeu_si512((void *)(ck + c), _mm512_maskz_compress_epi32(m, key));
        _mm512_storeu_si512((void *)(ci + c), _mm512_maskz_compress_epi32(m, pos));
        c += __builtin_popcount((unsigned)m);
    }
#endif
    for (; i < n; i++) { /* write always, advance when kept */
        const float v = x[i];
        ck[c] = float_key(v);
        ci[c] = (int32_t)i;
        c += (v != v) | (strict ? (v > tau) : (v >= tau));
    }
    return c;
}

/* The r-th largest of a[0..n) (1 <= r <= n), without data-dependent
 * branches in the loops: a histogram of the keys over 2^TOPK_BITS buckets of
 * their range, walked from the top until r are counted, names the bucket
 * holding the r-th; the few keys of that bucket are then gathered into tmp
 * and sorted (insertion sort: a handful of keys). */
static uint32_t select_desc(const uint32_t *a, int64_t n, int64_t r, uint32_t *tmp) {
    uint32_t mn = a[0], mx = a[0];
    for (int64_t e = 1; e < n; e++) {
        mn = a[e] < mn ? a[e] : mn;
        mx = a[e] > mx ? a[e] : mx;
    }
    if (mn == mx) return mn;
    const int bits = 32 - __builtin_clz(mx - mn);
    const int shift = bits > TOPK_BITS ? bits - TOPK_BITS : 0;
    uint32_t hist[1 << TOPK_BITS];
    memset(hist, 0, sizeof hist);
    for (int64_t e = 0; e < n; e++) hist[(mx - a[e]) >> shift]++; /* bucket 0: the largest keys */
    int64_t above = 0, b = 0;
    for (; b < (1 << TOPK_BITS) - 1 && above + (int64_t)hist[b] < r; b++) above += hist[b];
    int64_t m = 0;
    for (int64_t e = 0; e < n; e++) { /* the keys of bucket b */
        tmp[m] = a[e];
        m += ((mx - a[e]) >> shift) == (uint32_t)b;
    }
    for (int64_t i = 1; i < m; i++) { /* descending */
        const uint32_t v = tmp[i];
        int64_t j = i;
        for (; j > 0 && tmp[j - 1] < v; j--) tmp[j] = tmp[j - 1];
        tmp[j] = v;
    }
    return tmp[r - above - 1];
}

/* Stable LSD radix sort of (key, pos) by descending key: sorts d = mx − key
 * ascending in as few passes of at most TOPK_SORT_BITS (and about log2(c))
 * bits as the range of d needs, the digit width balanced over the passes (a
 * 24-bit range, typical of a top-k tail, takes 2 passes of 12 bits). The
 * sorted pairs end in (k, p). */
#define TOPK_SORT_BITS 12
static void sort_desc(uint32_t *k, int32_t *p, uint32_t *tk, int32_t *tp, int64_t c) {
    uint32_t mn = k[0], mx = k[0];
    for (int64_t e = 1; e < c; e++) {
        mn = k[e] < mn ? k[e] : mn;
        mx = k[e] > mx ? k[e] : mx;
    }
    if (mn == mx) return; /* all tied: already in position order */
    const int bits = 32 - __builtin_clz(mx - mn);
    /* digits no wider than log2(c) + 1: clearing and scanning 2^width counters
     * must not cost more than the c elements themselves */
    int maxw = 64 - __builtin_clzll((unsigned long long)c) + 1;
    maxw = maxw < 4 ? 4 : (maxw > TOPK_SORT_BITS ? TOPK_SORT_BITS : maxw);
    const int passes = (bits + maxw - 1) / maxw;
    const int width = (bits + passes - 1) / passes;
    const uint32_t mask = (1u << width) - 1;
    uint32_t hist[8][1 << TOPK_SORT_BITS]; /* passes <= 32/4 */
    for (int ps = 0; ps < passes; ps++) memset(hist[ps], 0, sizeof(uint32_t) * ((size_t)mask + 1));
    for (int64_t e = 0; e < c; e++) {
        const uint32_t d = mx - k[e];
        for (int ps = 0; ps < passes; ps++) hist[ps][(d >> (width * ps)) & mask]++;
    }
    uint32_t *ka = k, *kb = tk;
    int32_t *pa = p, *pb = tp;
    for (int ps = 0; ps < passes; ps++) {
        uint32_t *h = hist[ps];
        uint32_t sum = 0;
        for (uint32_t b = 0; b <= mask; b++) {
            const uint32_t t = h[b];
            h[b] = sum;
            sum += t;
        }
        const int shift = width * ps;
        for (int64_t e = 0; e < c; e++) {
            const uint32_t o = h[((mx - ka[e]) >> shift) & mask]++;
            kb[o] = ka[e];
            pb[o] = pa[e];
        }
        uint32_t *t1 = ka; ka = kb; kb = t1;
        int32_t *t2 = pa; pa = pb; pb = t2;
    }
    if (ka != k) {
        memcpy(k, ka, sizeof(uint32_t) * (size_t)c);
        memcpy(p, pa, sizeof(int32_t) * (size_t)c);
    }
}

void la_topk_row(const float *x, int64_t n, int64_t k, int32_t *out, void *ws) {
    if (k <= 0) return;
    if (n <= 0) {
        for (int64_t j = 0; j < k; j++) out[j] = -1;
        return;
    }
    uint32_t *ck = (uint32_t *)ws;
    uint32_t *ck2 = ck + n + TOPK_SLACK;
    int32_t *ci = (int32_t *)(ck2 + n + TOPK_SLACK);
    int32_t *ci2 = ci + n + TOPK_SLACK;
    uint32_t *samp = (uint32_t *)(ci2 + n + TOPK_SLACK);

    float tau = -INFINITY;
    int strict = 1; /* x > −inf: every valid score */
    if (n >= 4 * k && n >= 4 * TOPK_SAMPLE) {
        /* Masked entries and NaN stay out of the sample (the same fraction of
         * them is expected in the row, so the rank estimate r0 = k·S/n stays
         * right; every NaN is a candidate anyway). */
        int64_t sv = 0;
        const int64_t runs = TOPK_SAMPLE / TOPK_RUN;
        for (int64_t j = 0; j < runs; j++) {
            const int64_t at = (j * (n - TOPK_RUN)) / (runs - 1);
            for (int64_t e = 0; e < TOPK_RUN; e++) {
                const float v = x[at + e];
                samp[sv] = float_key(v);
                sv += v > -INFINITY;
            }
        }
        const double r0 = (double)k * TOPK_SAMPLE / (double)n;
        const int64_t r = (int64_t)ceil(r0 + 3.0 * sqrt(r0) + 4.0);
        if (r <= sv) {
            tau = key_float(select_desc(samp, sv, r, samp + TOPK_SAMPLE));
            strict = 0;
        }
    }
    int64_t c = filter_row(x, n, tau, strict, ck, ci);
    if (c < k && !(strict && tau == -INFINITY)) c = filter_row(x, n, -INFINITY, 1, ck, ci);

    const int64_t nout = c < k ? c : k;
    if (c > 1) sort_desc(ck, ci, ck2, ci2, c);
    for (int64_t j = 0; j < nout; j++) out[j] = ci[j];
    for (int64_t j = nout; j < k; j++) out[j] = -1;
}
