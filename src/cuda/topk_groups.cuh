/* Exact top-k of paged DSA decode's score rows from their group maxima
 * (variant "wgmma2g" of family "paged", the e4m3 default where it applies:
 * rows of W <= TG_WMAX columns, 1 <= k <= TR_KMAX; else "wgmma2r",
 * topk_rows.cuh). Same order as la_topk (SPEC §6) and the same keys as
 * topk_rows.cuh: key = fkey(score) << 32 | ~column, descending score, ties
 * to the lower column, NaN first, -inf (and columns >= end) not a
 * candidate, -1 padding.
 *
 * Why: topk_rows.cuh reads every score row twice (a histogram pass, then a
 * candidate pass) before its per-row selection. Here pw2_kernel's epilogue
 * (paged_wgmma.cu, la_pw_gmax) also stores, per group of 8 consecutive
 * columns, the largest fkey of its valid scores (0: none), from the
 * fkeys each tile's epilogue parks in shared memory; then one CTA per row (tg_kernel, TR_NT threads):
 *   a. the row's ceil(end/8) <= 16384 group maxima u_j, 16 per thread
 *      (the groups past them are never read: pw2 writes only the row's
 *      tiles), held in the candidates' shared memory until c; group key
 *      G_j = u_j << 32 | ~j, valid iff u_j != 0;
 *   b. the k largest valid group keys (every valid group when there are at
 *      most k): a radix select on u in digits of 12 bits from the highest
 *      bit where the valid maxima differ (their count, largest and
 *      smallest first: a warp-shuffle reduction), so the first digit's bins
 *      spread over the maxima's own narrow range instead of serializing
 *      the atomics on the two or three top-bit bins they share; it stops at
 *      the first prefix P that exactly k groups reach (the taken groups are
 *      then u >= P); if every bit leaves groups tied at u == P, the lower
 *      columns first (a block scan of the tied counts);
 *   c. each taken group's 8 scores (one 32-byte sector, two vector loads,
 *      every thread's issued together) read from the score row; the keys
 *      of its valid columns with fkey >= P stored into shared memory at
 *      slots from a warp scan and one atomic per warp (tg_alloc: the
 *      candidates are a set, their order is not used), at most 8k <= TR_CAP
 *      of them, typically ~2 k, with their 14-bit bins counted;
 *   d. tr_final_row (topk_rows.cuh) on those candidates and that histogram:
 *      the exact kk = min(k, candidates) largest keys, ordered, written as
 *      positions or slots exactly as tr_final_kernel writes them.
 * The score rows are read once, in ~k sectors per row, not twice whole.
 *
 * Why it is exact. Let tau = u of the k-th largest group key G (when there
 * are more than k valid groups; otherwise every valid group is taken with P
 * = 1 and the candidates are every valid key). The k taken groups' maxima
 * are k distinct elements with fkey >= tau, so the k-th largest element key
 * has fkey >= tau and every top-k element has fkey >= tau >= P. An element
 * with fkey > tau lies in a group with u > tau, and every such group is
 * taken. An element with fkey == tau in a group not taken lies in a group
 * with u == tau that lost the tie to k groups of larger G (each holding an
 * element with fkey > tau, or fkey == tau at a lower column since the tied
 * groups are taken in column order), i.e. k larger keys: it is not in the
 * top-k. So the candidates hold the exact top-k, no more than 8k keys, and
 * at least min(k, valid keys) of them (one per taken group at least), and
 * the top-k of the candidates is the row's.
 *
 * Shared memory: tr_final_row's layout (TR_FINAL_SMEM: candidates, where
 * the group maxima lie until c, then sk, dig and off, where the 64 KB of
 * step b's digits and step c's histogram lie, then the scan slots and 16
 * words), then the list of the taken groups (TR_KMAX words). The kernel text uses topk_rows.cuh's
 * primitives only, so dev/emu_topk_groups.cpp runs it on the host.
 * Internal. */
#ifndef LA_CUDA_TOPK_GROUPS_CUH
#define LA_CUDA_TOPK_GROUPS_CUH

#include "cuda/topk_rows.cuh"

#define TG_GROUPS 16384                 /* largest groups per row (16 per thread) */
#define TG_WMAX (8 * TG_GROUPS)         /* largest row (131072 columns) */
#define TG_PER (TG_GROUPS / TR_NT)      /* groups per thread */
#define TG_SMEM (TR_FINAL_SMEM + TR_KMAX * 4)

struct la_tg_args {
    la_tr_args r;         /* scores, ld, T, W, end, k and the output (hist, coarse, cnt, cand unused) */
    const uint32_t *gmax; /* [T][gmax_ld]: la_pw_gmax's group maxima of the rows */
    int64_t gmax_ld;      /* a multiple of 4, >= ceil(W / 8) rounded up to 4 */
};

#ifndef LA_TR_EMU
/* Launch tg_kernel on s (topk_groups.cu): 1 <= k <= TR_KMAX, W <= TG_WMAX. */
la_status la_tg_launch(const la_tg_args &a, const la_context *ctx, cudaStream_t s);
#endif

#if defined(LA_TR_KERNELS) || defined(LA_TR_HELPERS)
TR_DEV uint32_t tg_popc(uint32_t x) {
#ifdef LA_TR_EMU
    return (uint32_t)__builtin_popcount(x);
#else
    return (uint32_t)__popc(x);
#endif
}

TR_DEV int tg_clz(uint32_t x) {
#ifdef LA_TR_EMU
    return __builtin_clz(x);
#else
    return __clz(x);
#endif
}

/* the CTA's sum of c and largest hi, smallest lo (every thread gets them);
 * sc: 96 words. Ends with a barrier. */
TR_DEV void tg_reduce(uint32_t *c, uint32_t *hi, uint32_t *lo, uint32_t *sc) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t c2 = __shfl_xor_sync(0xffffffffu, *c, o), h2 = __shfl_xor_sync(0xffffffffu, *hi, o),
                       l2 = __shfl_xor_sync(0xffffffffu, *lo, o);
        *c += c2;
        *hi = h2 > *hi ? h2 : *hi;
        *lo = l2 < *lo ? l2 : *lo;
    }
    const int tid = tr_tid(), w = tid >> 5;
    if ((tid & 31) == 0) sc[w] = *c, sc[32 + w] = *hi, sc[64 + w] = *lo;
    tr_sync();
    /* lane i: warp i's (TR_NT = 1024: 32 warps), then the same butterfly */
    static_assert(TR_NT == 1024, "one warp total per lane");
    const int lane = tid & 31;
    uint32_t c3 = sc[lane], h3 = sc[32 + lane], l3 = sc[64 + lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t c2 = __shfl_xor_sync(0xffffffffu, c3, o), h2 = __shfl_xor_sync(0xffffffffu, h3, o),
                       l2 = __shfl_xor_sync(0xffffffffu, l3, o);
        c3 += c2;
        h3 = h2 > h3 ? h2 : h3;
        l3 = l2 < l3 ? l2 : l3;
    }
    *c = c3, *hi = h3, *lo = l3;
    tr_sync(); /* sc is reused */
}

/* n slots of a shared array whose fill count is *ctr (order does not
 * matter: the groups' and the candidates' lists are used as sets): the
 * first one's index; a warp scan and one atomic per warp, no block scan */
TR_DEV uint32_t tg_alloc(uint32_t n, uint32_t *ctr) {
#if defined(LA_TR_EMU) && !defined(LA_TR_EMU_SHFL)
    return tr_atomic_add(ctr, n);
#else
    const int lane = tr_tid() & 31;
    uint32_t x = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    uint32_t base = 0;
    if (lane == 31) base = tr_atomic_add(ctr, x);
    base = __shfl_sync(0xffffffffu, base, 31);
    return base + x - n;
#endif
}

/* columns [c, c + 8) of row (in the row): two vector loads when aligned */
TR_DEV void tg_load8(const float *row, int c, bool vec, float *v) {
#ifdef LA_TR_EMU
    (void)vec;
    for (int e = 0; e < 8; e++) v[e] = row[c + e];
#else
    if (vec) {
        const float4 x = *(const float4 *)(row + c), y = *(const float4 *)(row + c + 4);
        v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, v[4] = y.x, v[5] = y.y, v[6] = y.z, v[7] = y.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++) v[e] = row[c + e];
    }
#endif
}

TR_KERNEL(TR_NT) tg_kernel(la_tg_args A) {
    const la_tr_args &a = A.r;
    unsigned char *raw = tr_smem();
    uint64_t *cand = (uint64_t *)raw;
    uint32_t *H = (uint32_t *)(cand + TR_CAP); /* TR_BINS words: tr_final_row's sk, dig and off */
    uint32_t *sc = H + TR_BINS, *s8 = sc + TR_NT, *glist = s8 + 16;
    const int t = tr_bx();
    const int tid = tr_tid();
    const uint32_t k = (uint32_t)a.k;
    const int end = a.end[t]; /* <= W <= TG_WMAX: 32-bit columns */
    const int ng = (end + 7) >> 3, g0 = TG_PER * tid;
    /* a. this thread's groups g0 .. g0 + 15 (0 past the row's), kept in
     * the candidates' space until c (us[j TR_NT + tid]: conflict-free), with
     * their count, largest and smallest valid maxima */
    uint32_t *us = (uint32_t *)cand;
    TR_PHASE(0);
    if (tid == 0) s8[12] = 0, s8[13] = 0; /* the counts of glist and of the candidates (tg_alloc) */
    uint32_t cnt = 0, hi = 0, lo = 0xFFFFFFFFu;
    {
        uint32_t u[TG_PER];
        const uint32_t *gr = A.gmax + (int64_t)t * A.gmax_ld + g0;
#pragma unroll
        for (int q = 0; q < TG_PER; q += 4) {
            if (g0 + q < ng) tr_load4(gr + q, u + q);
            else u[q] = u[q + 1] = u[q + 2] = u[q + 3] = 0;
        }
#pragma unroll
        for (int j = 0; j < TG_PER; j++) {
            if (g0 + j >= ng) u[j] = 0;
            us[j * TR_NT + tid] = u[j];
            if (u[j]) {
                cnt++;
                hi = u[j] > hi ? u[j] : hi;
                lo = u[j] < lo ? u[j] : lo;
            }
        }
    }
    /* b. P: the groups u >= P are the k largest (tied: u > P, then the
     * first `need` of u == P); P = 1 when at most k groups are valid. The
     * digits start at the highest bit where the valid maxima differ: they
     * spread over the maxima's own range, not over the few top-bit bins
     * that they share (a bin's atomics serialize) */
    TR_PHASE(1);
    tg_reduce(&cnt, &hi, &lo, sc);
    TR_PHASE(2);
    uint32_t P = 1, need = k;
    bool tied = false;
    if (cnt > k) { /* uniform */
        const int top = hi != lo ? 31 - tg_clz(hi ^ lo) : -1; /* bits above top: every valid u's */
        uint32_t M = top >= 31 ? 0u : ~0u << (top + 1);
        P = hi & M;
        tied = true; /* unless a prefix is reached that exactly need groups share */
        for (int h = top; h >= 0;) {
            const int l = h >= 11 ? h - 11 : 0; /* digit bits h .. l */
            const uint32_t dm = (2u << (h - l)) - 1u;
            for (int i = tid; i < TR_DIG; i += TR_NT) H[i] = 0;
            tr_sync();
#pragma unroll
            for (int j = 0; j < TG_PER; j++) {
                const uint32_t u = us[j * TR_NT + tid];
                TR_TRIP();
                if (u && (u & M) == P) tr_atomic_add(H + ((u >> l) & dm), 1u);
            }
            tr_sync();
            tr_find_bin<TR_NT, TR_DIG>(H, need, sc, s8 + 8); /* ends with a barrier; some bin holds the need-th */
            const uint32_t bin = s8[8], above = s8[9], inbin = s8[10];
            P |= bin << l;
            M |= dm << l;
            need -= above;
            if (inbin == need) { /* every group of this prefix is taken */
                tied = false;
                break;
            }
            h = l - 1;
        }
    }
    /* the taken groups of this thread (bit j), and the histogram zeroed for c */
    TR_PHASE(3);
    uint32_t mask = 0;
    if (!tied) { /* uniform */
#pragma unroll
        for (int j = 0; j < TG_PER; j++) {
            const uint32_t u = us[j * TR_NT + tid];
            if (u && u >= P) mask |= 1u << j;
        }
    } else {
        uint32_t eq = 0, tot;
#pragma unroll
        for (int j = 0; j < TG_PER; j++) eq += us[j * TR_NT + tid] == P;
        uint32_t r = tr_excl_scan<TR_NT>(eq, sc, &tot); /* the tied groups of lower threads */
#pragma unroll
        for (int j = 0; j < TG_PER; j++) {
            const uint32_t u = us[j * TR_NT + tid];
            if (u > P) mask |= 1u << j;
            else if (u == P) {
                if (r < need) mask |= 1u << j;
                r++;
            }
        }
    }
    for (int i = tid; i < TR_BINS; i += TR_NT) H[i] = 0; /* step b's digits were read before its last barrier */
    uint32_t at = tg_alloc(tg_popc(mask), s8 + 12);
    for (uint32_t m = mask; m; m &= m - 1u) /* its set bits only (~2 of 16) */
        glist[at++] = (uint32_t)g0 + tg_popc((m & (0u - m)) - 1u);
    tr_sync(); /* glist, its count and the zeros */
    const uint32_t nsel = s8[12];
    /* c. the taken groups' keys with fkey >= P (P = 1: every valid one), counted by bin */
    TR_PHASE(4);
    const float *row = a.scores + (int64_t)t * a.ld;
    const bool vec = ((uintptr_t)row & 15) == 0;
    constexpr int GS = TR_KMAX / TR_NT; /* taken groups per thread, at most */
    float v[GS][8];
    int c0[GS];
    auto load = [&]() {
#pragma unroll
        for (int s = 0; s < GS; s++) { /* issued together */
            const uint32_t i = (uint32_t)tid + (uint32_t)s * TR_NT;
            c0[s] = i < nsel ? 8 * (int)glist[i] : -1;
            if (c0[s] >= 0) {
                if (c0[s] + 8 <= end) tg_load8(row, c0[s], vec, v[s]);
                else
                    for (int e = 0; e < 8; e++) v[s][e] = c0[s] + e < end ? row[c0[s] + e] : -INFINITY;
            }
        }
    };
    /* each key's fkey where kept (not -inf, fkey >= P), else 0 (P >= 1),
     * in place of the scores; counted, then stored at tg_alloc's slots
     * (the candidates are a set: tr_final_row's result does not depend on
     * their order) with their bins counted */
    load();
    uint32_t nmine = 0;
#pragma unroll
    for (int s = 0; s < GS; s++)
#pragma unroll
        for (int e = 0; e < 8; e++) {
            uint32_t f = 0;
            if (c0[s] >= 0 && v[s][e] != -INFINITY) f = tr_fkey(v[s][e]); /* -inf: the columns >= end too */
            f = f < P ? 0u : f;
            TR_TRIP();
            nmine += f != 0;
            memcpy(&v[s][e], &f, 4);
        }
    at = tg_alloc(nmine, s8 + 13);
#pragma unroll
    for (int s = 0; s < GS; s++)
#pragma unroll
        for (int e = 0; e < 8; e++) {
            uint32_t f;
            memcpy(&f, &v[s][e], 4);
            if (f) {
                const uint64_t x = (uint64_t)f << 32 | (uint32_t)~(uint32_t)(c0[s] + e);
                cand[at++] = x;
                tr_atomic_add(H + tr_bin_of(x), 1u);
            }
        }
    tr_sync();
    const uint32_t nc = s8[13];
    /* d. exact order of the candidates (never more than TR_CAP: no whole-row fallback) */
    tr_final_row<true>(a, t, H, nullptr, (int64_t)nc);
}
#endif /* LA_TR_KERNELS || LA_TR_HELPERS */
#endif
