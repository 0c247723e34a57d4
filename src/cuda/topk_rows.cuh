/* Exact top-k of a few long score rows over many CTAs (paged DSA decode:
 * 64 rows of up to 128K columns, where la_topk's one CTA per row leaves
 * most of the GPU idle). Same order as la_topk (SPEC §6): descending score,
 * ties to the lower column, NaN first, -inf not a candidate, -1 padding;
 * keys are topk_common.cuh's: key = fkey(score) << 32 | ~column, unique per
 * row, so "ties to the lower column" is "larger key" and any exact
 * selection of the k largest keys gives la_topk's indices bit for bit.
 *
 *  1. tr_hist_kernel (a.hchunk columns per CTA): hist [T][TR_BINS], the
 *     counts of the valid keys of each row by the top 14 bits of fkey, and
 *     coarse [T][TR_CBINS], the same by the top 7, in memory zeroed before;
 *     each CTA counts its chunk in shared memory and adds its nonzero bins
 *     to the row's (a pass of its own: counting in the score kernel's
 *     epilogue with global atomics slowed that kernel more than this pass
 *     costs);
 *  2. tr_collect_kernel (TR_CHUNK columns per CTA): the bin b1 holding the
 *     k-th largest key, from the coarse bins and the 128 fine bins of one
 *     of them (no kernel of one CTA per row in between: 1 KB per CTA, read
 *     while its scores load), and n1 = the keys in bins >= b1 (all valid
 *     keys, b1 = 0, when the row has at most k); when n1 <= TR_CAP, the
 *     keys of bins >= b1 appended to the row's candidate list (unordered: a
 *     block scan inside the CTA, one global atomic per CTA);
 *  3. tr_final_kernel (one CTA per row): the candidates in shared memory
 *     (or, when n1 > TR_CAP, e.g. many equal scores, the whole row read
 *     from global memory at each step). The row's histogram gives every
 *     bin above b1 its output range (its keys are all taken), so only bin
 *     b1 needs a radix select (12-bit digits of the key's low 50 bits) for
 *     the prefix P with exactly kk = min(k, valid) keys >= P. The kk keys are then
 *     ordered by a counting sort without a sorting network: each bin's
 *     output range is split into as many buckets as it has keys, linear in
 *     the key's low bits inside the bin (a bin spans ~2% of its scores,
 *     so a smooth density leaves ~1 key per bucket), and a key's rank is its
 *     bucket's start plus its larger bucket mates. Buckets of more than
 *     TR_BLIM keys (many equal scores) fall back to a bitonic sort of the
 *     kk keys (correct, slower). Written as positions or slots
 *     (pg_finish_kernel's mapping).
 * A 14-bit bin is 1/32 of an octave, so n1 is k plus the keys within ~2%
 * of the k-th score (~1-5K at 128K columns).
 *
 * The kernels use only __syncthreads, shared and global atomics and plain
 * loads, plus warp shuffles in the block scan, so that dev/emu_topk_rows.cpp
 * runs this text on the host (LA_TR_EMU: one std::thread per CUDA thread;
 * its two builds run the shuffle scan, LA_TR_EMU_SHFL, and a shared-memory
 * one). Internal. */
#ifndef LA_CUDA_TOPK_ROWS_CUH
#define LA_CUDA_TOPK_ROWS_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TR_SHIFT 18                       /* hist bin = fkey >> TR_SHIFT */
#define TR_BINS (1 << (32 - TR_SHIFT))    /* 16384 */
#define TR_LOW ((1u << TR_SHIFT) - 1u)    /* fkey's bits below its bin */
#define TR_CAP 16384                      /* candidates per row held in shared memory */
#define TR_KMAX 2048                      /* largest k (LA_SP_TOPK_MAX) */
#define TR_CBINS 128                      /* coarse bins: fine bin >> 7 */
#define TR_CFINE (TR_BINS / TR_CBINS)     /* fine bins per coarse bin */
#define TR_NT 1024                        /* threads of tr_final_kernel */
#define TR_HNT 512                        /* threads of tr_hist_kernel */
#define TR_HPER 16                        /* loads in flight per thread of tr_hist_kernel */
#define TR_HSTEP (TR_HNT * TR_HPER)       /* columns per step of a hist CTA; a.hchunk is a multiple */
#define TR_CNT 256                        /* threads of tr_collect_kernel */
#define TR_PER 16                         /* columns per thread of tr_collect_kernel */
#define TR_CHUNK (TR_CNT * TR_PER)        /* 4096 columns per collect CTA */
#define TR_DIG 4096                       /* 12-bit digits of the radix select */
#define TR_BLIM 48                        /* largest bucket ranked by counting its mates */

struct la_tr_args {
    const float *scores; /* [T][ld], columns [0, end[t]) valid (others ignored) */
    int64_t ld, T, W;
    const int32_t *end; /* [T], clamped to [0, W] */
    int32_t k;          /* 1 .. TR_KMAX */
    int64_t hchunk;     /* columns per tr_hist_kernel CTA (la_tr_launch sets it) */
    uint32_t *hist;     /* [T][TR_BINS], zeroed */
    uint32_t *coarse;   /* [T][TR_CBINS], zeroed */
    uint32_t *cnt;      /* [T], zeroed: candidates appended */
    uint64_t *cand;     /* [T][TR_CAP] */
    /* output: idx[t * nb0 + i * nb1] = position, or its slot (to_slots) */
    int32_t to_slots;
    const int32_t *table; /* [nseq][maxp] (clamped) */
    int64_t maxp, ps;
    const int32_t *row_seq;
    int32_t *idx;
    int64_t nb0, nb1;
};

/* shared memory: scan slots (NT words: the emulator's scan needs one per
 * thread), the kernels' words; tr_final_kernel: candidates, the kk keys,
 * digit / bucket counts, the bins' output offsets (16 bits), scan slots, 16
 * words */
#define TR_HIST_SMEM ((TR_BINS + TR_CBINS) * 4)
#define TR_COLLECT_SMEM ((8 + TR_CNT) * 4)
#define TR_FINAL_SMEM (TR_CAP * 8 + TR_KMAX * 8 + TR_DIG * 4 + TR_BINS * 2 + TR_NT * 4 + 64)

#ifndef LA_TR_EMU
/* Launch the three kernels on s (topk_rows.cu; args as above, hchunk set
 * there, hist, coarse and cnt zeroed before on s; T <= 65535, 1 <= k <= TR_KMAX,
 * W < 2^31). */
la_status la_tr_launch(const la_tr_args &a, const la_context *ctx, cudaStream_t s);
#endif

/* the kernels: topk_rows.cu and the emulator only; with LA_TR_HELPERS (and
 * not LA_TR_KERNELS) only the device helpers and tr_final_row, for
 * topk_groups.cuh */
#if defined(LA_TR_KERNELS) || defined(LA_TR_HELPERS)
#ifdef LA_TR_EMU
/* dev/emu_topk_rows.cpp defines tr_tid, tr_bx, tr_by, tr_sync, tr_smem, tr_atomic_add */
#define TR_KERNEL(nt) static void
#define TR_KERNEL_MIN(nt, mb) static void
#define TR_DEV static inline
#else
#define TR_KERNEL(nt) __global__ void __launch_bounds__(nt)
#define TR_KERNEL_MIN(nt, mb) __global__ void __launch_bounds__(nt, mb) /* at least mb CTAs per SM */
#define TR_DEV __device__ __forceinline__
extern __shared__ __align__(16) unsigned char tr_dyn_smem[];
TR_DEV int tr_tid() { return (int)threadIdx.x; }
TR_DEV int tr_bx() { return (int)blockIdx.x; }
TR_DEV int tr_by() { return (int)blockIdx.y; }
TR_DEV void tr_sync() { __syncthreads(); }
TR_DEV unsigned char *tr_smem() { return tr_dyn_smem; }
TR_DEV uint32_t tr_atomic_add(uint32_t *p, uint32_t v) { return atomicAdd(p, v); }
#endif

#ifndef TR_NOTE_BITONIC /* the emulator counts the rows of tr_final_kernel's fallback */
#define TR_NOTE_BITONIC()
#endif
#ifndef TR_PHASE /* the emulator counts each phase's barriers and loop trips (dev/emu_topk_groups.cpp) */
#define TR_PHASE(p) ((void)0)
#define TR_TRIP() ((void)0)
#endif

/* 4 words from p (16-byte aligned): one vector load on the GPU */
TR_DEV void tr_load4(const uint32_t *p, uint32_t *o) {
#ifdef LA_TR_EMU
    o[0] = p[0], o[1] = p[1], o[2] = p[2], o[3] = p[3];
#else
    const uint4 v = *(const uint4 *)p;
    o[0] = v.x, o[1] = v.y, o[2] = v.z, o[3] = v.w;
#endif
}

/* topk_common.cuh's tk_fkey: order-preserving, every NaN the largest key */
TR_DEV uint32_t tr_fkey(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if (f != f) return 0xFFFFFFFFu;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
/* the 64-bit key of a column, 0 for -inf (not a candidate; valid keys are > 0) */
TR_DEV uint64_t tr_key(float f, int64_t p) {
    if (f == -INFINITY) return 0;
    return (uint64_t)tr_fkey(f) << 32 | (uint32_t)~(uint32_t)p;
}
TR_DEV uint32_t tr_bin_of(uint64_t x) { return (uint32_t)(x >> (32 + TR_SHIFT)); }

/* Exclusive scan of one value per thread over NT threads; the total in *tot.
 * sc: NT words (the CUDA scan uses NT / 32). Ends with a barrier. */
template <int NT>
TR_DEV uint32_t tr_excl_scan(uint32_t v, uint32_t *sc, uint32_t *tot) {
    const int tid = tr_tid();
#if defined(LA_TR_EMU) && !defined(LA_TR_EMU_SHFL) /* the emulator's other build runs the shuffle scan */
    sc[tid] = v;
    tr_sync();
    for (int off = 1; off < NT; off <<= 1) {
        const uint32_t u = tid >= off ? sc[tid - off] : 0u;
        tr_sync();
        sc[tid] += u;
        tr_sync();
    }
    const uint32_t incl = sc[tid];
    *tot = sc[NT - 1];
    tr_sync();
    return incl - v;
#else
    const int lane = tid & 31, wid = tid >> 5;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) sc[wid] = x;
    __syncthreads();
    /* every warp scans the NT / 32 warp totals with shuffles (lane w: warp
     * w's), not a loop over them: a few instructions instead of ~4 NT / 32 */
    static_assert(NT % 32 == 0 && NT <= 1024, "at most 32 warps");
    uint32_t c = lane < NT / 32 ? sc[lane] : 0u;
#pragma unroll
    for (int o = 1; o < NT / 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(0xffffffffu, c, o);
        if (lane >= o) c += y;
    }
    *tot = __shfl_sync(0xffffffffu, c, NT / 32 - 1);
    const uint32_t pre = __shfl_sync(0xffffffffu, c, wid > 0 ? wid - 1 : 0);
    __syncthreads(); /* sc is reused */
    return (wid > 0 ? pre : 0u) + x - v;
#endif
}

/* Thread tid's PER = NB / NT entries of hist[0..NB), counted from the top:
 * c[j] = hist[NB - 1 - (PER * tid + j)] (vector loads; PER % 4 == 0) */
template <int NT, int NB>
TR_DEV void tr_load_desc(const uint32_t *hist, uint32_t *c) {
    constexpr int PER = NB / NT;
    static_assert(PER % 4 == 0, "vector loads");
    const int base = NB - PER * (tr_tid() + 1);
    uint32_t w[PER];
#pragma unroll
    for (int j = 0; j < PER; j += 4) tr_load4(hist + base + j, w + j);
#pragma unroll
    for (int j = 0; j < PER; j++) c[j] = w[PER - 1 - j];
}

/* The bin of hist[0..NB) (counted from the top) holding the need-th largest
 * entry: out4 = {bin, above (entries in higher bins), inbin, total}; bin =
 * NB when total < need. NB / NT bins per thread. Ends with a barrier. */
template <int NT, int NB>
TR_DEV void tr_find_bin(const uint32_t *hist, uint32_t need, uint32_t *sc, uint32_t *out4) {
    constexpr int PER = NB / NT;
    const int tid = tr_tid();
    uint32_t c[PER], loc = 0;
    tr_load_desc<NT, NB>(hist, c);
#pragma unroll
    for (int j = 0; j < PER; j++) loc += c[j];
    if (tid == 0) out4[0] = NB;
    uint32_t tot;
    uint32_t cum = tr_excl_scan<NT>(loc, sc, &tot); /* ends with a barrier: out4[0] = NB is visible */
#pragma unroll
    for (int j = 0; j < PER; j++) {
        if (cum < need && cum + c[j] >= need) {
            out4[0] = (uint32_t)(NB - 1 - (PER * tid + j));
            out4[1] = cum;
            out4[2] = c[j];
        }
        cum += c[j];
    }
    if (tid == 0) out4[3] = tot;
    tr_sync();
}

/* tr_find_bin over NB <= NT entries, one per thread (threads >= NB: none) */
template <int NT, int NB>
TR_DEV void tr_find_small(const uint32_t *hist, uint32_t need, uint32_t *sc, uint32_t *out4) {
    static_assert(NB <= NT, "one entry per thread");
    const int tid = tr_tid();
    const uint32_t c = tid < NB ? hist[NB - 1 - tid] : 0u;
    if (tid == 0) out4[0] = NB;
    uint32_t tot;
    const uint32_t cum = tr_excl_scan<NT>(c, sc, &tot); /* ends with a barrier: out4[0] = NB is visible */
    if (cum < need && cum + c >= need) {
        out4[0] = (uint32_t)(NB - 1 - tid);
        out4[1] = cum;
        out4[2] = c;
    }
    if (tid == 0) out4[3] = tot;
    tr_sync();
}

#endif /* LA_TR_KERNELS || LA_TR_HELPERS */

#ifdef LA_TR_KERNELS
/* 1. per (chunk, row): the chunk's valid keys counted by bin in shared
 * memory, then added to the row's histograms (nonzero bins only). A thread
 * adds a run of equal bins once (equal scores are common in a row's tail). */
TR_KERNEL(TR_HNT) tr_hist_kernel(la_tr_args a) {
    uint32_t *h = (uint32_t *)tr_smem(), *hc = h + TR_BINS;
    const int64_t t = tr_by();
    const int64_t lo = (int64_t)tr_bx() * a.hchunk;
    const int64_t hi = a.end[t] < lo + a.hchunk ? (int64_t)a.end[t] : lo + a.hchunk;
    if (lo >= hi) return; /* uniform over the CTA */
    const int tid = tr_tid();
    for (int i = tid; i < TR_BINS + TR_CBINS; i += TR_HNT) h[i] = 0;
    tr_sync();
    const float *row = a.scores + t * a.ld;
    auto load = [&](int64_t b, float *v) {
        if (b + TR_HSTEP <= hi) { /* no predicates: the loads issue together */
#pragma unroll
            for (int j = 0; j < TR_HPER; j++) v[j] = row[b + j * TR_HNT + tid];
        } else {
#pragma unroll
            for (int j = 0; j < TR_HPER; j++) {
                const int64_t p = b + j * TR_HNT + tid;
                v[j] = p < hi ? row[p] : -INFINITY;
            }
        }
    };
    uint32_t prev = 0, run = 0;
    float v[TR_HPER], nx[TR_HPER];
    load(lo, v);
    for (int64_t b = lo; b < hi; b += TR_HSTEP) {
        if (b + TR_HSTEP < hi) load(b + TR_HSTEP, nx); /* the next step's loads in flight while these count */
#pragma unroll
        for (int j = 0; j < TR_HPER; j++) {
            if (v[j] == -INFINITY) continue;
            const uint32_t bin = tr_fkey(v[j]) >> TR_SHIFT;
            if (bin != prev) {
                if (run) tr_atomic_add(h + prev, run);
                prev = bin;
                run = 0;
            }
            run++;
        }
        if (b + TR_HSTEP < hi)
#pragma unroll
            for (int j = 0; j < TR_HPER; j++) v[j] = nx[j];
    }
    if (run) tr_atomic_add(h + prev, run);
    tr_sync();
    /* warp w flushes bins [w WB, (w + 1) WB), a coarse bin per 4 of its
     * loads (lane l: word 32 j + l, conflict-free), summed per lane */
    constexpr int WB = TR_BINS / (TR_HNT / 32), JC = TR_CFINE / 32;
    static_assert(WB % TR_CFINE == 0 && TR_CFINE % 32 == 0, "whole coarse bins per warp");
    uint32_t *g = a.hist + t * TR_BINS;
    const int lane = tid & 31, w0 = (tid >> 5) * WB;
    for (int q = 0; q < WB / TR_CFINE; q++) {
        uint32_t sum = 0;
#pragma unroll
        for (int j = 0; j < JC; j++) {
            const int i = w0 + (q * JC + j) * 32 + lane;
            const uint32_t c = h[i];
            if (c) tr_atomic_add(g + i, c);
            sum += c;
        }
        if (sum) tr_atomic_add(hc + w0 / TR_CFINE + q, sum);
    }
    tr_sync();
    if (tid < TR_CBINS && hc[tid]) tr_atomic_add(a.coarse + t * TR_CBINS + tid, hc[tid]);
}

/* 2. per (chunk, row): b1, n1; the keys of bins >= b1 appended to the row's list */
/* 6 CTAs/SM (40 registers): 96 KB of score loads in flight per SM */
TR_KERNEL_MIN(TR_CNT, 6) tr_collect_kernel(la_tr_args a) {
    uint32_t *sm = (uint32_t *)tr_smem(); /* [0]: base, [4, 8): tr_find_small's; then scan slots */
    const int64_t t = tr_by();
    const int64_t lo = (int64_t)tr_bx() * TR_CHUNK;
    const int64_t hi = a.end[t] < lo + TR_CHUNK ? (int64_t)a.end[t] : lo + TR_CHUNK;
    if (lo >= hi) return;
    const float *row = a.scores + t * a.ld;
    const int tid = tr_tid();
    float v[TR_PER]; /* loaded before b1 is known: the round trips overlap */
#pragma unroll
    for (int i = 0; i < TR_PER; i++) {
        const int64_t p = lo + tid + (int64_t)i * TR_CNT;
        v[i] = p < hi ? row[p] : -INFINITY;
    }
    const uint32_t k = (uint32_t)a.k;
    tr_find_small<TR_CNT, TR_CBINS>(a.coarse + t * TR_CBINS, k, sm + 8, sm + 4);
    const uint32_t cb = sm[4], ca = sm[5], tot = sm[7];
    uint32_t b1 = 0, n1 = tot; /* at most k valid keys: every one of them */
    if (cb < TR_CBINS) {
        tr_sync(); /* sm[4..8) is rewritten */
        tr_find_small<TR_CNT, TR_CFINE>(a.hist + t * TR_BINS + cb * TR_CFINE, k - ca, sm + 8, sm + 4);
        b1 = cb * TR_CFINE + sm[4];
        n1 = ca + sm[5] + sm[6];
    }
    if (n1 > TR_CAP) return; /* tr_final_kernel reads the row itself */
    /* in: bit i set for a key of bin >= b1 (the keys are formed again at the store) */
    uint32_t in = 0, mine = 0;
#pragma unroll
    for (int i = 0; i < TR_PER; i++) {
        const uint64_t x = tr_key(v[i], 0);
        if (x && tr_bin_of(x) >= b1) in |= 1u << i, mine++;
    }
    uint32_t nin;
    uint32_t at = tr_excl_scan<TR_CNT>(mine, sm + 8, &nin);
    if (nin == 0) return; /* uniform: every thread saw the same total */
    if (tid == 0) sm[0] = tr_atomic_add(a.cnt + t, nin);
    tr_sync();
    at += sm[0];
    uint64_t *out = a.cand + t * TR_CAP;
#pragma unroll
    for (int i = 0; i < TR_PER; i++)
        if ((in >> i & 1u) && at < TR_CAP) out[at++] = tr_key(v[i], lo + tid + (int64_t)i * TR_CNT);
}

#endif /* LA_TR_KERNELS */

#if defined(LA_TR_KERNELS) || defined(LA_TR_HELPERS)
/* 3. per row t: exact selection, order, output. hist: the row's TR_BINS
 * counts (global or shared memory: read into registers before the first
 * barrier, so it may lie over sk, dig and off); src: the n candidates in
 * global memory (CAND_IN_SMEM: none, they are in shared memory already, cand,
 * 0 for an empty slot, and the histogram's total is at most TR_CAP: no
 * whole-row fallback). TR_FINAL_SMEM of shared memory. */
template <bool CAND_IN_SMEM>
TR_DEV void tr_final_row(const la_tr_args &a, int64_t t, const uint32_t *hist, const uint64_t *src, int64_t n) {
    unsigned char *raw = tr_smem();
    uint64_t *cand = (uint64_t *)raw, *sk = cand + TR_CAP;
    uint32_t *dig = (uint32_t *)(sk + TR_KMAX);
    uint16_t *off = (uint16_t *)(dig + TR_DIG);
    uint32_t *sc = (uint32_t *)(off + TR_BINS), *s8 = sc + TR_NT;
    const int tid = tr_tid();
    const uint32_t k = (uint32_t)a.k;
    const float *row = a.scores + t * a.ld;
    /* the bins from the top: off[b] = keys in higher bins (set where < k);
     * b1, A = off[b1], m1 = the keys of b1 (b1 = 0, A = total, m1 = 0 when
     * the row has fewer than k keys) */
    constexpr int BPER = TR_BINS / TR_NT;
    TR_PHASE(5);
    {
        uint32_t c[BPER], loc = 0;
        tr_load_desc<TR_NT, TR_BINS>(hist, c);
        /* the candidates (none appended when n1 > TR_CAP) while the bins load: 4 loads per round trip */
        for (int64_t i = tid; !CAND_IN_SMEM && i < n; i += 4 * TR_NT) {
            uint64_t x[4];
#pragma unroll
            for (int j = 0; j < 4; j++) x[j] = i + j * TR_NT < n ? src[i + j * TR_NT] : 0;
#pragma unroll
            for (int j = 0; j < 4; j++)
                if (i + j * TR_NT < n) cand[i + j * TR_NT] = x[j];
        }
#pragma unroll
        for (int j = 0; j < BPER; j++) loc += c[j];
        if (tid == 0) s8[0] = 0, s8[2] = 0, s8[3] = 0;
        uint32_t tot;
        uint32_t cum = tr_excl_scan<TR_NT>(loc, sc, &tot);
        if (tid == 0) s8[1] = tot;
        tr_sync(); /* s8[1] = tot before a thread of b1 overwrites it */
#pragma unroll
        for (int j = 0; j < BPER; j++) {
            const int b = TR_BINS - 1 - (BPER * tid + j);
            if (cum < k) off[b] = (uint16_t)cum; /* only bins >= b1 are looked up */
            if (cum < k && cum + c[j] >= k) {
                s8[0] = (uint32_t)b;
                s8[1] = cum;
                s8[2] = c[j];
            }
            cum += c[j];
        }
        if (tid == 0) s8[4] = tot < k ? tot : k;
        tr_sync(); /* off, s8 and the candidates visible */
    }
    const uint32_t b1 = s8[0], A = s8[1], m1 = s8[2], kk = s8[4], nb1 = kk - A; /* nb1: the keys taken from b1 */
    bool inl = true; /* candidates in shared memory; else the whole row */
    auto keyat = [&](int64_t i) -> uint64_t { return inl ? cand[i] : tr_key(row[i], i); };
    if (!CAND_IN_SMEM && A + m1 > TR_CAP) { /* n1 as tr_collect_kernel found it (A + m1 = total when total < k) */
        inl = false;
        n = a.end[t];
    }
    /* P: exactly kk keys >= P; a radix select inside b1 unless all or none of it is taken */
    uint64_t P = nb1 == 0 ? 1u : (uint64_t)b1 << (32 + TR_SHIFT);
    TR_PHASE(6);
    if (nb1 > 0 && nb1 < m1) {
        uint64_t M = (uint64_t)(TR_BINS - 1) << (32 + TR_SHIFT);
        uint32_t need = nb1;
        for (int shift = 38;; shift = shift > 2 ? shift - 12 : 0) { /* digits 49-38, .., 13-2, then 1-0 */
            const uint64_t dm = shift > 0 ? TR_DIG - 1 : 3;
            for (int i = tid; i < TR_DIG; i += TR_NT) dig[i] = 0;
            tr_sync();
            for (int64_t i = tid; i < n; i += TR_NT) {
                const uint64_t x = keyat(i);
                TR_TRIP();
                if (x && (x & M) == P) tr_atomic_add(dig + ((x >> shift) & dm), 1u);
            }
            tr_sync();
            tr_find_bin<TR_NT, TR_DIG>(dig, need, sc, s8 + 8);
            const uint32_t bin = s8[8], above = s8[9], inbin = s8[10];
            tr_sync(); /* s8[8..12) is rewritten by the next pass */
            P |= (uint64_t)bin << shift;
            M |= dm << shift;
            need -= above;
            if (inbin == need || shift == 0) break; /* every key of this prefix is in */
        }
    }
    const uint32_t plo = (uint32_t)(P >> 32) & TR_LOW; /* b1's taken keys: fkey low bits in [plo, 2^18) */
    /* the bucket of a taken key: its bin's output range [st, st + c) split
     * linearly in the key's low fkey bits, descending (monotone in the key) */
    auto bucket = [&](uint64_t x) -> uint32_t {
        const uint32_t b = tr_bin_of(x), f = (uint32_t)(x >> 32) & TR_LOW;
        if (b > b1) { /* b - 1 >= b1: off[b - 1] = off[b] + (keys of b) */
            const uint32_t st = off[b], c = (uint32_t)off[b - 1] - st;
            return st + c - 1 - ((f * c) >> TR_SHIFT);
        }
        /* 32-bit: (f - plo) nb1 < 2^18 2^11 (nb1 <= kk <= TR_KMAX) */
        static_assert(TR_KMAX <= (1 << 11) && TR_SHIFT <= 18, "the bucket's product fits 32 bits");
        return A + nb1 - 1 - (f - plo) * nb1 / ((TR_LOW + 1) - plo);
    };
    TR_PHASE(7);
    for (int i = tid; i < TR_KMAX; i += TR_NT) dig[i] = 0;
    if (tid == 0) s8[3] = 0;
    tr_sync();
    for (int64_t i = tid; i < n; i += TR_NT) {
        const uint64_t x = keyat(i);
        TR_TRIP();
        if (x >= P) tr_atomic_add(dig + bucket(x), 1u);
    }
    tr_sync();
    {   /* bucket starts: dig[d] = count << 16 | start (kk <= TR_KMAX < 2^16) */
        constexpr int DPER = TR_KMAX / TR_NT;
        uint32_t c[DPER], loc = 0;
#pragma unroll
        for (int j = 0; j < DPER; j++) {
            c[j] = dig[DPER * tid + j];
            loc += c[j];
        }
        uint32_t tot, big = 0;
        uint32_t cum = tr_excl_scan<TR_NT>(loc, sc, &tot);
#pragma unroll
        for (int j = 0; j < DPER; j++) {
            dig[DPER * tid + j] = c[j] << 16 | cum;
            cum += c[j];
            big |= c[j] > TR_BLIM;
        }
        if (big) tr_atomic_add(s8 + 3, 1u);
        tr_sync();
    }
    for (int64_t i = tid; i < n; i += TR_NT) {
        const uint64_t x = keyat(i);
        TR_TRIP();
        if (x >= P) sk[tr_atomic_add(dig + bucket(x), 1u) & 0xFFFFu] = x;
    }
    tr_sync();
    TR_PHASE(8);
    int32_t *out = a.idx + t * a.nb0;
    auto put = [&](uint32_t i, uint64_t x) {
        int64_t v = (int64_t)(uint32_t)~(uint32_t)x;
        if (a.to_slots) { /* 32-bit division: the column < 2^31, the page size an int32 (paged_index.cu) */
            const uint32_t vu = (uint32_t)v, pu = (uint32_t)a.ps, pi = vu / pu;
            v = (int64_t)a.table[(int64_t)a.row_seq[t] * a.maxp + pi] * a.ps + (vu - pi * pu);
        }
        out[(int64_t)i * a.nb1] = (int32_t)v;
    };
    for (uint32_t i = kk + tid; i < k; i += TR_NT) out[(int64_t)i * a.nb1] = -1;
    if (s8[3] == 0) { /* dig[d] = count << 16 | end: rank = start + the larger bucket mates */
        for (uint32_t i = tid; i < kk; i += TR_NT) {
            const uint64_t x = sk[i];
            const uint32_t h = dig[bucket(x)], e = h & 0xFFFFu, st = e - (h >> 16);
            uint32_t rk = st;
            for (uint32_t j = st; j < e; j++) TR_TRIP(), rk += sk[j] > x;
            put(rk, x);
        }
        return;
    }
    /* a bucket too large to rank by counting: bitonic sort of the kk keys, descending (zero padding last) */
    if (tid == 0) TR_NOTE_BITONIC();
    int N = 1;
    while (N < (int)kk) N <<= 1;
    for (int i = (int)kk + tid; i < N; i += TR_NT) sk[i] = 0;
    tr_sync();
    for (int size = 2; size <= N; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = tid; i < N / 2; i += TR_NT) {
                const int lo = 2 * stride * (i / stride) + (i % stride), hi2 = lo + stride;
                const bool desc = (lo & size) == 0;
                const uint64_t x = sk[lo], y = sk[hi2];
                if (desc ? x < y : x > y) {
                    sk[lo] = y;
                    sk[hi2] = x;
                }
            }
            tr_sync();
        }
    for (uint32_t i = tid; i < kk; i += TR_NT) put(i, sk[i]);
}
#endif /* LA_TR_KERNELS || LA_TR_HELPERS */

#ifdef LA_TR_KERNELS
TR_KERNEL(TR_NT) tr_final_kernel(la_tr_args a) {
    const int64_t t = tr_bx();
    tr_final_row<false>(a, t, a.hist + t * TR_BINS, a.cand + t * TR_CAP, a.cnt[t] < TR_CAP ? (int64_t)a.cnt[t] : TR_CAP);
}
#endif /* LA_TR_KERNELS */
#endif
