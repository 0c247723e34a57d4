/* Exact top-k of a few long score rows over many CTAs (paged DSA decode:
 * 64 rows of up to 128K columns, where la_topk's one CTA per row leaves
 * most of the GPU idle). Same order as la_topk (SPEC §6): descending score,
 * ties to the lower column, NaN first, -inf not a candidate, -1 padding;
 * keys are topk_common.cuh's: key = fkey(score) << 32 | ~column, unique per
 * row, so "ties to the lower column" is "larger key" and any exact
 * selection of the k largest keys gives la_topk's indices bit for bit.
 *
 *  0. hist [T][TR_BINS]: counts of the valid keys of each row by the top 14
 *     bits of fkey, filled by the score kernel's epilogue (paged_wgmma.cu,
 *     pw2_kernel) into zeroed memory;
 *  1. tr_thresh_kernel (one CTA per row): the bin b1 holding the k-th
 *     largest key, and n1 = the keys in bins >= b1 (all valid keys, b1 = 0,
 *     when the row has at most k);
 *  2. tr_collect_kernel (TR_CHUNK columns per CTA): the keys of bins >= b1
 *     appended to the row's candidate list (unordered: a block scan inside
 *     the CTA, one global atomic per CTA), when n1 <= TR_CAP;
 *  3. tr_final_kernel (one CTA per row): the candidates (or, when n1 >
 *     TR_CAP, e.g. many equal scores, the whole row read from global
 *     memory) in shared memory; a radix select of 12-bit digits over the
 *     64-bit keys finds the prefix P with exactly min(k, valid) keys >= P;
 *     those are sorted by a bitonic network (descending) and written as
 *     positions or slots (pg_finish_kernel's mapping).
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
#define TR_CAP 16384                      /* candidates per row held in shared memory */
#define TR_KMAX 2048                      /* largest k (LA_SP_TOPK_MAX) */
#define TR_NT 512                         /* threads of tr_thresh_kernel / tr_final_kernel */
#define TR_CNT 256                        /* threads of tr_collect_kernel */
#define TR_PER 16                         /* columns per thread of tr_collect_kernel */
#define TR_CHUNK (TR_CNT * TR_PER)        /* 4096 columns per collect CTA */
#define TR_DIG 4096                       /* 12-bit digits of the radix select */

struct la_tr_args {
    const float *scores; /* [T][ld], columns [0, end[t]) valid (others ignored) */
    int64_t ld, T, W;
    const int32_t *end; /* [T], clamped to [0, W] */
    int32_t k;          /* 1 .. TR_KMAX */
    const uint32_t *hist; /* [T][TR_BINS] */
    uint32_t *cnt;        /* [T], zeroed: candidates appended */
    uint32_t *info;       /* [T][2]: b1, n1 */
    uint64_t *cand;       /* [T][TR_CAP] */
    /* output: idx[t * nb0 + i * nb1] = position, or its slot (to_slots) */
    int32_t to_slots;
    const int32_t *table; /* [nseq][maxp] (clamped) */
    int64_t maxp, ps;
    const int32_t *row_seq;
    int32_t *idx;
    int64_t nb0, nb1;
};

/* shared memory: scan slots (NT words: the emulator's scan needs one per
 * thread), the kernels' words; tr_final_kernel: candidates, sorted keys,
 * digit counts, scan slots, 4 words */
#define TR_THRESH_SMEM ((4 + TR_NT) * 4)
#define TR_COLLECT_SMEM ((1 + TR_CNT) * 4)
#define TR_FINAL_SMEM (TR_CAP * 8 + TR_KMAX * 8 + TR_DIG * 4 + TR_NT * 4 + 16)

#ifndef LA_TR_EMU
/* Launch the three kernels on s (topk_rows.cu; args as above, hist filled
 * and cnt zeroed before on s; T <= 65535, 1 <= k <= TR_KMAX, W < 2^31). */
la_status la_tr_launch(const la_tr_args &a, const la_context *ctx, cudaStream_t s);
#endif

/* the kernels: topk_rows.cu and the emulator only */
#ifdef LA_TR_KERNELS
#ifdef LA_TR_EMU
/* dev/emu_topk_rows.cpp defines tr_tid, tr_bx, tr_by, tr_sync, tr_smem, tr_atomic_add */
#define TR_KERNEL(nt) static void
#define TR_DEV static inline
#else
#define TR_KERNEL(nt) __global__ void __launch_bounds__(nt)
#define TR_DEV __device__ __forceinline__
extern __shared__ __align__(16) unsigned char tr_dyn_smem[];
TR_DEV int tr_tid() { return (int)threadIdx.x; }
TR_DEV int tr_bx() { return (int)blockIdx.x; }
TR_DEV int tr_by() { return (int)blockIdx.y; }
TR_DEV void tr_sync() { __syncthreads(); }
TR_DEV unsigned char *tr_smem() { return tr_dyn_smem; }
TR_DEV uint32_t tr_atomic_add(uint32_t *p, uint32_t v) { return atomicAdd(p, v); }
#endif

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
    uint32_t pre = 0, t = 0;
#pragma unroll
    for (int w = 0; w < NT / 32; w++) {
        const uint32_t c = sc[w];
        pre += w < wid ? c : 0u;
        t += c;
    }
    *tot = t;
    __syncthreads(); /* sc is reused */
    return pre + x - v;
#endif
}

/* The bin of hist[0..NB) (counted from the top) holding the need-th largest
 * entry: *bin, *above (entries in higher bins), *inbin; *total the sum.
 * *bin = NB when total < need. NB / NT bins per thread. Ends with a barrier. */
template <int NT, int NB>
TR_DEV void tr_find_bin(const uint32_t *hist, uint32_t need, uint32_t *sc, uint32_t *out4) {
    constexpr int PER = NB / NT;
    const int tid = tr_tid();
    uint32_t c[PER], loc = 0;
#pragma unroll
    for (int j = 0; j < PER; j++) {
        c[j] = hist[NB - 1 - (PER * tid + j)];
        loc += c[j];
    }
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

/* 1. per row: b1 and n1 from the row's hist */
TR_KERNEL(TR_NT) tr_thresh_kernel(la_tr_args a) {
    uint32_t *sm = (uint32_t *)tr_smem(); /* [0, 4): bin, above, inbin, total; then scan slots */
    const int64_t t = tr_bx();
    tr_find_bin<TR_NT, TR_BINS>(a.hist + t * TR_BINS, (uint32_t)a.k, sm + 4, sm);
    if (tr_tid() == 0) {
        const uint32_t bin = sm[0], total = sm[3];
        /* at most k valid keys: every one of them (bin 0 and up) */
        a.info[2 * t] = bin < TR_BINS ? bin : 0u;
        a.info[2 * t + 1] = bin < TR_BINS ? sm[1] + sm[2] : total;
    }
}

/* 2. per (chunk, row): append the keys of bins >= b1 to the row's list */
TR_KERNEL(TR_CNT) tr_collect_kernel(la_tr_args a) {
    uint32_t *sm = (uint32_t *)tr_smem(); /* [0]: base; then scan slots */
    const int64_t t = tr_by();
    const uint32_t b1 = a.info[2 * t], n1 = a.info[2 * t + 1];
    if (n1 > TR_CAP) return; /* tr_final_kernel reads the row itself */
    const int64_t lo = (int64_t)tr_bx() * TR_CHUNK;
    const int64_t hi = a.end[t] < lo + TR_CHUNK ? (int64_t)a.end[t] : lo + TR_CHUNK;
    if (lo >= hi) return;
    const float *row = a.scores + t * a.ld;
    const int tid = tr_tid();
    uint64_t key[TR_PER];
    uint32_t mine = 0;
#pragma unroll
    for (int i = 0; i < TR_PER; i++) {
        const int64_t p = lo + tid + (int64_t)i * TR_CNT;
        key[i] = p < hi ? tr_key(row[p], p) : 0;
        if (key[i] && (uint32_t)(key[i] >> (32 + TR_SHIFT)) < b1) key[i] = 0;
        mine += key[i] != 0;
    }
    uint32_t tot;
    uint32_t at = tr_excl_scan<TR_CNT>(mine, sm + 1, &tot);
    if (tot == 0) return; /* uniform: every thread saw the same total */
    if (tid == 0) sm[0] = tr_atomic_add(a.cnt + t, tot);
    tr_sync();
    at += sm[0];
    uint64_t *out = a.cand + t * TR_CAP;
#pragma unroll
    for (int i = 0; i < TR_PER; i++)
        if (key[i] && at < TR_CAP) out[at++] = key[i];
}

/* 3. per row: exact selection, order, output */
TR_KERNEL(TR_NT) tr_final_kernel(la_tr_args a) {
    unsigned char *raw = tr_smem();
    uint64_t *cand = (uint64_t *)raw, *sk = cand + TR_CAP;
    uint32_t *dig = (uint32_t *)(sk + TR_KMAX), *sc = dig + TR_DIG, *s4 = sc + TR_NT;
    const int64_t t = tr_bx();
    const int tid = tr_tid();
    const uint32_t n1 = a.info[2 * t + 1];
    const bool inl = n1 <= TR_CAP; /* candidates in shared memory; else the whole row */
    const int64_t hi = a.end[t];
    const float *row = a.scores + t * a.ld;
    int64_t n = 0;
    if (inl) {
        n = a.cnt[t] < TR_CAP ? a.cnt[t] : TR_CAP; /* = n1 */
        const uint64_t *src = a.cand + t * TR_CAP;
        for (int64_t i = tid; i < n; i += TR_NT) cand[i] = src[i];
    } else {
        n = hi;
    }
    tr_sync();
    auto keyat = [&](int64_t i) -> uint64_t { return inl ? cand[i] : tr_key(row[i], i); };
    /* radix select: digits of 12 bits from the top (the last one 4 bits) */
    uint64_t P = 0, M = 0;
    uint32_t need = (uint32_t)a.k, kk = 0;
    for (int pass = 0; pass < 6; pass++) {
        const int shift = pass < 5 ? 52 - 12 * pass : 0;
        const uint64_t dm = pass < 5 ? 4095u : 15u;
        for (int i = tid; i < TR_DIG; i += TR_NT) dig[i] = 0;
        tr_sync();
        for (int64_t i = tid; i < n; i += TR_NT) {
            const uint64_t x = keyat(i);
            if (x && (x & M) == P) tr_atomic_add(dig + ((x >> shift) & dm), 1u);
        }
        tr_sync();
        tr_find_bin<TR_NT, TR_DIG>(dig, need, sc, s4);
        const uint32_t bin = s4[0], above = s4[1], inbin = s4[2], total = s4[3];
        tr_sync(); /* s4 is rewritten by the next pass */
        if (bin >= TR_DIG) { /* fewer than need keys match: only in the first pass (need = k) */
            P = 1;
            kk = total;
            break;
        }
        P |= (uint64_t)bin << shift;
        M |= dm << shift;
        need -= above;
        if (inbin == need) { /* every key of this prefix is in: exactly k keys >= P */
            kk = (uint32_t)a.k;
            break;
        }
    }
    /* the kk keys >= P, sorted descending (zero padding sorts last) */
    int N = 1;
    while (N < (int)kk) N <<= 1;
    if (tid == 0) s4[0] = 0;
    for (int i = tid; i < N; i += TR_NT) sk[i] = 0;
    tr_sync();
    for (int64_t i = tid; i < n; i += TR_NT) {
        const uint64_t x = keyat(i);
        if (x && x >= P) {
            const uint32_t at = tr_atomic_add(s4, 1u);
            if (at < TR_KMAX) sk[at] = x;
        }
    }
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
    for (int i = tid; i < a.k; i += TR_NT) {
        int64_t v = -1;
        if (i < (int)kk) {
            v = (int64_t)(uint32_t)~(uint32_t)sk[i];
            if (a.to_slots) v = (int64_t)a.table[(int64_t)a.row_seq[t] * a.maxp + v / a.ps] * a.ps + v % a.ps;
        }
        a.idx[t * a.nb0 + (int64_t)i * a.nb1] = (int32_t)v;
    }
}

#endif /* LA_TR_KERNELS */
#endif
