/* Row top-k (SPEC §6 ordering): descending score, ties to the lower position,
 * −inf / NaN masked, −1 padding. Linear time per row:
 *
 *   1. sample ~2048 scores at fixed strides and take a threshold τ a few
 *      standard deviations below the sample's estimate of the k-th largest
 *      score (deterministic: the same row gives the same τ);
 *   2. one vectorised pass keeps the (key, position) of every score >= τ:
 *      about 1.3–1.6·k candidates, in ascending position order;
 *      if fewer than k survive (rare), the pass is redone with τ = −inf;
 *   3. a stable LSD radix sort of the candidates by descending key. Stability
 *      keeps equal keys in ascending position, which is exactly the tie rule.
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
#define TOPK_PREFETCH_MAX (128 * 1024) /* floats: 512 KB, half an L2 */

/* Order-preserving map float -> uint32 (larger float, larger key). */
static inline uint32_t float_key(float x) {
    x += 0.0f; /* −0 -> +0 */
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

size_t la_topk_row_ws_bytes(int64_t n) {
    /* two (key, position) buffers for the radix sort + the sample */
    return (size_t)n * 16u + TOPK_SAMPLE * 4u + 64u;
}

/* Keep (key, position) of every x[i] >= tau (or > tau when strict). */
static int64_t filter_row(const float *x, int64_t n, float tau, int strict, uint32_t *ck,
                          int32_t *ci) {
    int64_t c = 0, i = 0;
#if defined(__AVX512F__)
    const __m512 vt = _mm512_set1_ps(tau);
    for (; i + 16 <= n; i += 16) {
        const __m512 v = _mm512_loadu_ps(x + i);
        __mmask16 m = strict ? _mm512_cmp_ps_mask(v, vt, _CMP_GT_OQ)
                             : _mm512_cmp_ps_mask(v, vt, _CMP_GE_OQ);
        while (m) {
            const int b = __builtin_ctz(m);
            m &= (__mmask16)(m - 1);
            ck[c] = float_key(x[i + b]);
            ci[c] = (int32_t)(i + b);
            c++;
        }
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

/* Stable LSD radix sort of (key, pos) by descending key, 8-bit digits; passes
 * whose digit is the same for every element are skipped. Returns the buffer
 * pair holding the result. */
static void radix_sort_desc(int64_t c, uint32_t **pk, int32_t **pi, uint32_t *k2, int32_t *i2) {
    uint32_t *ka = *pk, *kb = k2;
    int32_t *ia = *pi, *ib = i2;
    uint32_t hist[4][256];
    memset(hist, 0, sizeof hist);
    for (int64_t e = 0; e < c; e++) {
        const uint32_t d = ~ka[e]; /* ascending in ~key == descending in key */
        hist[0][d & 255]++;
        hist[1][(d >> 8) & 255]++;
        hist[2][(d >> 16) & 255]++;
        hist[3][d >> 24]++;
    }
    for (int pass = 0; pass < 4; pass++) {
        uint32_t *h = hist[pass];
        const int shift = 8 * pass;
        if (h[(~ka[0] >> shift) & 255] == (uint32_t)c) continue; /* one bucket: no-op pass */
        uint32_t sum = 0;
        for (int b = 0; b < 256; b++) {
            const uint32_t t = h[b];
            h[b] = sum;
            sum += t;
        }
        for (int64_t e = 0; e < c; e++) {
            const uint32_t d = (~ka[e] >> shift) & 255;
            const uint32_t o = h[d]++;
            kb[o] = ka[e];
            ib[o] = ia[e];
        }
        uint32_t *tk = ka; ka = kb; kb = tk;
        int32_t *ti = ia; ia = ib; ib = ti;
    }
    *pk = ka;
    *pi = ia;
}

void la_topk_row(const float *x, int64_t n, int64_t k, int32_t *out, void *ws) {
    if (k <= 0) return;
    if (n <= 0) {
        for (int64_t j = 0; j < k; j++) out[j] = -1;
        return;
    }
    uint32_t *ck = (uint32_t *)ws;
    uint32_t *ck2 = ck + n;
    int32_t *ci = (int32_t *)(ck2 + n);
    int32_t *ci2 = ci + n;
    uint32_t *samp = (uint32_t *)(ci2 + n);

    float tau = -INFINITY;
    int strict = 1; /* x > −inf: every valid score */
    if (n >= 4 * k && n >= 4 * TOPK_SAMPLE) {
        /* A cold row makes the strided sample a chain of cache misses: stream
         * it into L2 first (a pure sequential read, at full bandwidth), so the
         * sample and the filter pass below both hit L2. */
        if (n <= TOPK_PREFETCH_MAX)
            for (int64_t i = 0; i < n; i += 16) __builtin_prefetch(x + i, 0, 2);
        /* Sample at fixed strides; masked entries stay out of the sample, and
         * the same fraction of them is expected in the row, so the rank
         * estimate r0 = k·S/n stays right. */
        int64_t sv = 0;
        for (int64_t j = 0; j < TOPK_SAMPLE; j++) {
            const float v = x[(j * n) / TOPK_SAMPLE + (n / TOPK_SAMPLE) / 2];
            if (v > -INFINITY) samp[sv++] = float_key(v);
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
    if (c > 1) radix_sort_desc(c, &ck, &ci, ck2, ci2);
    for (int64_t j = 0; j < nout; j++) out[j] = ci[j];
    for (int64_t j = nout; j < k; j++) out[j] = -1;
}
