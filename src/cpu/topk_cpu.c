/* Row top-k (SPEC §6 ordering): descending score, ties to the lower position,
 * −inf / NaN masked, −1 padding. Linear time per row:
 *
 *   1. sample 2048 scores (128 evenly spaced runs of 16: one cache line each,
 *      so a cold row costs 128 misses, not 2048) and take a threshold τ a few
 *      standard deviations below the sample's estimate of the k-th largest
 *      score (deterministic: the same row gives the same τ);
 *   2. one vectorised pass keeps the (key, position) of every score >= τ:
 *      about 1.3–1.6·k candidates, in ascending position order;
 *      if fewer than k survive (rare), the pass is redone with τ = −inf;
 *   3. a stable MSD bucket sort of the candidates by descending key (2048
 *      buckets over the candidates' key range, recursing into crowded
 *      buckets, insertion sort below 32). Stability keeps equal keys in
 *      ascending position, which is exactly the tie rule.
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
#define TOPK_RUN 16 /* consecutive samples per run: one cache line */

/* Order-preserving map float -> uint32 (larger float, larger key). */
static inline uint32_t float_key(float x) {
    x += 0.0f; /* −0 -> +0 */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Four arrays of n + 16 (keys, positions, and their sort scratch; 16 lanes
 * of slack for full-vector stores) and the sample. */
#define TOPK_SLACK 16
size_t la_topk_row_ws_bytes(int64_t n) {
    return ((size_t)n + TOPK_SLACK) * 16u + TOPK_SAMPLE * 4u + 64u;
}

/* Keep (key, position) of every x[i] >= tau (or > tau when strict). */
static int64_t filter_row(const float *x, int64_t n, float tau, int strict, uint32_t *ck,
                          int32_t *ci) {
    int64_t c = 0, i = 0;
#if defined(__AVX512F__)
    /* compress in registers and store all 16 lanes (the arrays have 16 lanes
     * of slack): no branch per element, no slow compress-to-memory */
    const __m512 vt = _mm512_set1_ps(tau);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i top = _mm512_set1_epi32((int)0x80000000u);
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        const __mmask16 m = strict ? _mm512_cmp_ps_mask(v, vt, _CMP_GT_OQ) : _mm512_cmp_ps_mask(v, vt, _CMP_GE_OQ);
        if (!m) continue;
        /* float_key, 16 at a time: u ^ (sign ? 0xffffffff : 0x80000000), after −0 -> +0 */
        const __m512i u = _mm512_castps_si512(_mm512_add_ps(v, _mm512_setzero_ps()));
        const __m512i key = _mm512_xor_si512(u, _mm512_or_si512(_mm512_srai_epi32(u, 31), top));
        const __m512i pos = _mm512_add_epi32(iota, _mm512_set1_epi32((int)i));
        _mm512_storeu_si512((void *)(ck + c), _mm512_maskz_compress_epi32(m, key));
        _mm512_storeu_si512((void *)(ci + c), _mm512_maskz_compress_epi32(m, pos));
        c += __builtin_popcount((unsigned)m);
    }
#endif
    for (; i < n; i++) {
        const float v = x[i];
        if (strict ? (v > tau) : (v >= tau)) {
            ck[c] = float_key(v);
            ci[c] = (int32_t)i;
            c++;
        }
    }
    return c;
}

/* r-th largest (1-based) of a[0..n) by quickselect; a is reordered. */
static uint32_t select_desc(uint32_t *a, int64_t n, int64_t r) {
    int64_t lo = 0, hi = n - 1, want = r - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        /* median of three as pivot */
        uint32_t x = a[lo], y = a[mid], z = a[hi];
        uint32_t piv = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        int64_t i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                uint32_t t = a[i];
                a[i] = a[j];
                a[j] = t;
                i++;
                j--;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else return a[want];
    }
    return a[want];
}

/* Stable sort of (key, pos) by descending key. MSD bucketing over the
 * actual key range (at most 2^TOPK_MSD_BITS buckets, bucket 0 holding the
 * largest keys) through the scratch arrays tk/tp, then each crowded bucket
 * recursively; insertion sort for small runs. Every step keeps equal keys in
 * their input (= ascending position) order. Depth <= 3 (32 key bits). */
#define TOPK_MSD_BITS 11
#define TOPK_MSD_SMALL 32

static void sort_desc(uint32_t *k, int32_t *p, uint32_t *tk, int32_t *tp, int64_t c) {
    if (c <= TOPK_MSD_SMALL) {
        for (int64_t i = 1; i < c; i++) {
            const uint32_t key = k[i];
            const int32_t pos = p[i];
            int64_t j = i;
            for (; j > 0 && k[j - 1] < key; j--) { /* strict: equal keys keep their order */
                k[j] = k[j - 1];
                p[j] = p[j - 1];
            }
            k[j] = key;
            p[j] = pos;
        }
        return;
    }
    uint32_t mn = k[0], mx = k[0];
    for (int64_t e = 1; e < c; e++) {
        mn = k[e] < mn ? k[e] : mn;
        mx = k[e] > mx ? k[e] : mx;
    }
    if (mn == mx) return; /* all tied: already in position order */
    const int bits = 32 - __builtin_clz(mx - mn);
    const int shift = bits > TOPK_MSD_BITS ? bits - TOPK_MSD_BITS : 0;
    const int64_t nb = (int64_t)((mx - mn) >> shift) + 1;
    uint32_t off[(1 << TOPK_MSD_BITS) + 1];
    memset(off, 0, sizeof(uint32_t) * (size_t)nb);
    for (int64_t e = 0; e < c; e++) off[(mx - k[e]) >> shift]++;
    uint32_t sum = 0;
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t t = off[b];
        off[b] = sum;
        sum += t;
    }
    for (int64_t e = 0; e < c; e++) {
        const uint32_t o = off[(mx - k[e]) >> shift]++;
        tk[o] = k[e];
        tp[o] = p[e];
    }
    memcpy(k, tk, sizeof(uint32_t) * (size_t)c);
    memcpy(p, tp, sizeof(int32_t) * (size_t)c);
    if (shift == 0) return; /* one key per bucket */
    uint32_t start = 0; /* off[b] is now the end of bucket b */
    for (int64_t b = 0; b < nb; b++) {
        const uint32_t end = off[b];
        if (end - start > 1) sort_desc(k + start, p + start, tk + start, tp + start, (int64_t)(end - start));
        start = end;
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
        int64_t sv = 0;
        const int64_t runs = TOPK_SAMPLE / TOPK_RUN;
        for (int64_t j = 0; j < runs; j++) {
            const int64_t at = (j * (n - TOPK_RUN)) / (runs - 1);
            for (int64_t e = 0; e < TOPK_RUN; e++) {
                const float v = x[at + e];
                if (v > -INFINITY) samp[sv++] = float_key(v);
            }
        }
        const double r0 = (double)k * TOPK_SAMPLE / (double)n;
        const int64_t r = (int64_t)ceil(r0 + 3.0 * sqrt(r0) + 4.0);
        if (r <= sv) {
            const uint32_t kt = select_desc(samp, sv, r);
            /* back to the float with this key (keys are a bijection) */
            const uint32_t u = (kt & 0x80000000u) ? (kt & 0x7fffffffu) : ~kt;
            memcpy(&tau, &u, 4);
            strict = 0;
        }
    }
    int64_t c = filter_row(x, n, tau, strict, ck, ci);
    if (c < k && !(strict && tau == -INFINITY)) c = filter_row(x, n, -INFINITY, 1, ck, ci);

    int64_t nout = c < k ? c : k;
    if (c > 1) sort_desc(ck, ci, ck2, ci2, c);
    for (int64_t j = 0; j < nout; j++) out[j] = ci[j];
    for (int64_t j = nout; j < k; j++) out[j] = -1;
}
