/* Row-wise exact top-k on the GPU (SPEC §6 ordering): descending score, ties
 * to the lower token index, -1 padding; NaN ranks first (above +inf, as
 * torch.topk), -inf is not a candidate.
 *
 * Three kernels: t3_kernel (variant "sample", the default for long or many
 * rows: a sampled threshold, one filtering pass and a counting-sort
 * ordering; the algorithm is described before the tb_ helpers below, the
 * changes of this version before t3_kernel), ts_kernel (topk_short.cu,
 * variant "short", the default for at most 2 rows per SM of at most 16384
 * columns: one 1024-thread CTA per row) and the first one, tk_kernel_old
 * (variant "portable": the simple radix select, an independent exact
 * reference). All order keys the same way.
 * (The second kernel, tb_kernel, ran the same algorithm at 3 CTAs per SM,
 * slower for the same indices; removed.)
 *
 * tk_kernel_old: one CTA per row, a radix select over a 64-bit composite key
 *     key = sortable(score) << 32 | ~token
 * which is unique per row, so "ties to the lower index" is just "larger
 * key". Passes of 11 bits over the row (histogram in shared memory) narrow
 * the bin holding the k-th key until it has at most TK_CAP members; one more
 * pass collects every key above that bin (fewer than k) and the bin's
 * members into shared memory; a bitonic sort orders them and the first k are
 * written. Typical rows need 2 histogram passes + 1 collect pass (scores of
 * one sign and exponent share the first 11 bits).
 * Reference: the plain CPU top-k in src/cpu (and the tests' qsort). */
#include "cuda_ops.h"
#include "select.cuh"

#include "topk_common.cuh"
#include "topk_short.cuh"


/* ======================================================================== */
/* The sampled-threshold top-k (256 threads; t3_kernel at the end runs it).  */
/*                                                                            */
/* Phase A puts a superset of the row's top kk keys into shared memory       */
/* (cand, at most CAP keys; the numbers below are the first version's, CAP = */
/* 6144: t3_kernel's are before it):                                          */
/*  - rows of at most CAP columns: every valid key (one pass);                */
/*  - longer rows: 4096 sampled keys (512 groups of 8 adjacent columns: one   */
/*    32-byte sector each) give a threshold tau with about 1.5k + 512 keys    */
/*    of the row above it; one pass appends every key >= tau, warp-aggregated */
/*    (one shared atomic per warp per 16 columns per thread). If fewer than k */
/*    or more than CAP keys pass, the radix passes of the old kernel          */
/*    (below) narrow the k-th key's bin over the row instead.                 */
/* Phase B orders the kk largest candidates without a sorting network: a     */
/* counting sort on an 11-bit digit of (key - min) (the digit's shift makes  */
/* the candidates' range fit 2048 buckets), then each of the kk + (bucket)   */
/* keys gets its rank inside its bucket by counting the larger bucket mates.  */
/* With continuous scores the buckets hold 1-3 keys, so phase B is a handful */
/* of passes over ~3K shared keys plus two block scans (by counting:          */
/* ~1K instructions per thread vs ~6K for the 66-stage bitonic sort of 2048   */
/* 64-bit keys, and ~17 barriers instead of ~70). A bucket larger than        */
/* TB_LIMIT (many equal scores, far outliers) first narrows the range to the */
/* keys from the k-th key's bucket up to the bucket of rank 16 (fewer than   */
/* 16 larger keys, e.g. outliers, share the clamped top bucket; twice at     */
/* most); if that does not help, a bitonic sort of all candidates orders     */
/* them (correct, slower). The digit is monotone in the key whatever its    */
/* base and shift, so bucket order is key order in every case.              */
/* ======================================================================== */
#define TB_THREADS 256
#define TB_WARPS (TB_THREADS / 32)
#define TB_LIMIT 48                        /* largest bucket ranked by counting */
#define TB_TMP (LA_SP_TOPK_MAX + TB_LIMIT) /* scatter target; also holds the samples */
#define TB_GROUPS 512                      /* sample groups of 8 adjacent columns */
#define TB_SAMPLES (TB_GROUPS * 8)
#define TB_ULO 0x00800000u  /* fkey(-FLT_MAX): smaller keys are -inf */
#define TB_UINF 0xFF800000u /* fkey(+inf): the only larger key is TK_KEY_NAN */
#define TB_FULL 0xffffffffu

static_assert(TB_SAMPLES * sizeof(uint32_t) <= TB_TMP * sizeof(uint64_t), "samples fit in tmp");

/* Exclusive block scan of one value per thread; the block total in tot. */
__device__ __forceinline__ uint32_t tb_excl_scan(uint32_t v, uint32_t *wt, uint32_t &tot) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(TB_FULL, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) wt[wid] = x;
    __syncthreads();
    uint32_t pre = 0, t = 0;
#pragma unroll
    for (int w = 0; w < TB_WARPS; w++) {
        const uint32_t c = wt[w];
        pre += w < wid ? c : 0u;
        t += c;
    }
    tot = t;
    __syncthreads(); /* wt is reused */
    return pre + x - v;
}
__device__ __forceinline__ uint32_t tb_sum(uint32_t v, uint32_t *wt) {
    v = __reduce_add_sync(TB_FULL, v);
    if ((threadIdx.x & 31) == 0) wt[threadIdx.x >> 5] = v;
    __syncthreads();
    uint32_t t = 0;
#pragma unroll
    for (int w = 0; w < TB_WARPS; w++) t += wt[w];
    __syncthreads();
    return t;
}
__device__ __forceinline__ uint32_t tb_max(uint32_t v, uint32_t *wt) {
    v = __reduce_max_sync(TB_FULL, v);
    if ((threadIdx.x & 31) == 0) wt[threadIdx.x >> 5] = v;
    __syncthreads();
    uint32_t t = 0;
#pragma unroll
    for (int w = 0; w < TB_WARPS; w++) t = max(t, wt[w]);
    __syncthreads();
    return t;
}
__device__ __forceinline__ void tb_minmax64(uint64_t &mn, uint64_t &mx, uint64_t *ra, uint64_t *rb) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mn = min(mn, (uint64_t)__shfl_xor_sync(TB_FULL, (unsigned long long)mn, o));
        mx = max(mx, (uint64_t)__shfl_xor_sync(TB_FULL, (unsigned long long)mx, o));
    }
    if ((threadIdx.x & 31) == 0) {
        ra[threadIdx.x >> 5] = mn;
        rb[threadIdx.x >> 5] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int w = 0; w < TB_WARPS; w++) {
        mn = min(mn, ra[w]);
        mx = max(mx, rb[w]);
    }
    __syncthreads();
}
/* Bin of hist[0..nbins) (counted from the top) holding the need-th largest
 * entry: *bin and *above (entries in higher bins); need <= total. Thread t
 * owns bins nbins-1-8t .. nbins-8-8t. Ends with a barrier. */
__device__ __forceinline__ void tb_find_bin(const uint32_t *hist, int nbins, uint32_t need,
                                            uint32_t *wt, uint32_t *s_bin, uint32_t *s_above) {
    const int tid = threadIdx.x;
    uint32_t c[8], loc = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int b = nbins - 1 - (8 * tid + j);
        c[j] = b >= 0 ? hist[b] : 0u;
        loc += c[j];
    }
    uint32_t tot;
    uint32_t cum = tb_excl_scan(loc, wt, tot);
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int b = nbins - 1 - (8 * tid + j);
        if (b >= 0 && cum < need && cum + c[j] >= need) {
            *s_bin = (uint32_t)b;
            *s_above = cum;
        }
        cum += c[j];
    }
    __syncthreads();
}
/* Reserve c slots of the shared counter for this thread (all 32 lanes of
 * the warp take part): warp prefix sum, one atomic per warp. */
__device__ __forceinline__ uint32_t tb_reserve(uint32_t c, uint32_t *s_n) {
    const int lane = threadIdx.x & 31;
    uint32_t x = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_up_sync(TB_FULL, x, o);
        if (lane >= o) x += y;
    }
    uint32_t base = 0;
    if (lane == 31) base = atomicAdd(s_n, x);
    base = __shfl_sync(TB_FULL, base, 31);
    return base + x - c;
}
/* a candidate key at or above ulo (>= TB_ULO: -inf excluded; NaN included) */
__device__ __forceinline__ bool tb_in(uint32_t u, uint32_t ulo) { return u >= ulo; }

/* The filter loops test raw keys (tk_rawkey: tk_fkey without its NaN rule)
 * shifted by TB_NSHIFT = tk_rawkey(-inf): -inf lands at 0, the finite scores and +inf keep
 * their order, and every NaN, whatever its sign bit, lands above +inf. The
 * test is then one add and one compare per score; the NaN rule is applied
 * only to the keys that pass (tb_key_of_raw). */
#define TB_NSHIFT 0x007FFFFFu
/* The shifted threshold of key threshold ulo (>= TB_ULO); the NaN key as
 * threshold admits exactly the NaN scores. */
__device__ __forceinline__ uint32_t tb_shifted_threshold(uint32_t ulo) {
    return ulo > TB_UINF ? TB_UINF - TB_NSHIFT + 1u : ulo - TB_NSHIFT;
}
__device__ __forceinline__ bool tb_in_raw(uint32_t r, uint32_t sulo) { return r - TB_NSHIFT >= sulo; }
__device__ __forceinline__ uint32_t tb_key_of_raw(uint32_t r) {
    return r - TB_NSHIFT > TB_UINF - TB_NSHIFT ? TK_KEY_NAN : r;
}

/* Append the keys >= ulo among the 16 scores of x[4] (a thread's step of
 * the 16-byte filter loop) to cand, warp-aggregated; col(e) is the column
 * of score e (x[e >> 2], component e & 3). Every lane of the warp calls it. */
template <uint32_t CAP, typename TOK, typename COL>
__device__ __forceinline__ void tb_append16(const float4 (&x)[4], uint32_t ulo, TOK &tok, COL &&col,
                                            uint64_t *cand, uint32_t *s_n) {
    const uint32_t sulo = tb_shifted_threshold(ulo);
    uint32_t u[16], m = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        u[4 * j] = tk_rawkey(x[j].x);
        u[4 * j + 1] = tk_rawkey(x[j].y);
        u[4 * j + 2] = tk_rawkey(x[j].z);
        u[4 * j + 3] = tk_rawkey(x[j].w);
    }
#pragma unroll
    for (int e = 0; e < 16; e++) m |= (uint32_t)tb_in_raw(u[e], sulo) << e;
    if (!__any_sync(TB_FULL, m != 0)) return;
    uint32_t pos = tb_reserve(__popc(m), s_n);
#pragma unroll
    for (int e = 0; e < 16; e++)
        if ((m >> e) & 1u) {
            if (pos < CAP) cand[pos] = ((uint64_t)tb_key_of_raw(u[e]) << 32) | (uint32_t)~tok(col(e));
            pos++;
        }
}

/* Append every key of columns [lo, hi) with fkey >= ulo to
 * cand; *s_n counts them all, only the first CAP are written. Every loop
 * is uniform over the block (the warp shuffles need all lanes). */
template <uint32_t CAP, typename TOK>
__device__ __forceinline__ void tb_filter(const float *row, int64_t cs, int64_t lo, int64_t hi,
                                          uint32_t ulo, TOK &tok, uint64_t *cand, uint32_t *s_n) {
    const int tid = threadIdx.x;
    auto scalar = [&](int64_t s, int64_t e) {
        for (int64_t b = s; b < e; b += 4 * TB_THREADS) {
            uint32_t u[4], m = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int64_t p = b + j * TB_THREADS + tid;
                u[j] = p < e ? tk_fkey(row[p * cs]) : 0u;
                m |= (uint32_t)tb_in(u[j], ulo) << j;
            }
            if (!__any_sync(TB_FULL, m != 0)) continue;
            uint32_t pos = tb_reserve(__popc(m), s_n);
#pragma unroll
            for (int j = 0; j < 4; j++)
                if ((m >> j) & 1u) {
                    if (pos < CAP)
                        cand[pos] = ((uint64_t)u[j] << 32) | (uint32_t)~tok(b + j * TB_THREADS + tid);
                    pos++;
                }
        }
    };
    if (cs != 1) {
        scalar(lo, hi);
        return;
    }
    int64_t a = lo;
    while (a < hi && (((uintptr_t)(row + a)) & 15)) a++;
    const int64_t nvec = (hi - a) >> 2;
    scalar(lo, a);
    const float4 *v = (const float4 *)(row + a);
    for (int64_t b = 0; b < nvec; b += 4 * TB_THREADS) {
        float4 x[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int64_t i = b + j * TB_THREADS + tid;
            x[j] = i < nvec ? __ldg(v + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
        }
        tb_append16<CAP>(x, ulo, tok, [&](int e) { return a + 4 * (b + (e >> 2) * TB_THREADS + tid) + (e & 3); },
                         cand, s_n);
    }
    scalar(a + 4 * nvec, hi);
}

__device__ __forceinline__ uint32_t tb_digit(uint64_t key, uint64_t mn, int sh) {
    const uint64_t d = (key - mn) >> sh;
    return d < 2047 ? (uint32_t)d : 2047u; /* +inf and NaN keys beyond the finite max: top bucket */
}

template <uint32_t CAP, typename TOK>
__device__ __forceinline__ uint32_t tb_radix_collect(const float *row, int64_t cs, int64_t lo, int64_t hi,
                                                     uint32_t k, TOK &tok, uint64_t *cand, uint32_t *hist,
                                                     uint32_t *wt, uint32_t *s_n, uint32_t *s_bin,
                                                     uint32_t *s_above, uint32_t &kk) {
    const int tid = threadIdx.x;
    uint32_t nc = 0;
    uint64_t prefix = 0, mask = 0;
    uint32_t need = 0;
    const int shifts[6] = {53, 42, 31, 20, 9, 0};
    const int widths[6] = {11, 11, 11, 11, 11, 9};
    for (int pass = 0; pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TB_THREADS) hist[i] = 0;
        __syncthreads();
        const uint64_t pm = mask, pp = prefix;
        const bool score_digit = sh >= 32;
        const uint32_t pm32 = (uint32_t)(pm >> 32), pp32 = (uint32_t)(pp >> 32);
        tk_scan(row, cs, lo, hi, [&](int64_t p, float f) {
            if (!tk_valid(f)) return;
            uint32_t bin;
            if (score_digit) {
                const uint32_t u = tk_fkey(f);
                if ((u & pm32) != pp32) return;
                bin = (u >> (sh - 32)) & (uint32_t)(nbins - 1);
            } else {
                const uint64_t key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~tok(p);
                if ((key & pm) != pp) return;
                bin = (uint32_t)(key >> sh) & (uint32_t)(nbins - 1);
            }
            const uint32_t peers = __match_any_sync(__activemask(), bin);
            if ((threadIdx.x & 31) == (__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
        });
        __syncthreads();
        if (pass == 0) {
            uint32_t tot = 0;
            for (int i = tid; i < 2048; i += TB_THREADS) tot += hist[i];
            tot = tb_sum(tot, wt);
            kk = min(tot, k);
            need = kk;
            if (kk == 0) break;
        }
        tb_find_bin(hist, nbins, need, wt, s_bin, s_above);
        const uint32_t bin = *s_bin;
        need -= *s_above;
        prefix |= (uint64_t)bin << sh;
        mask |= (uint64_t)(nbins - 1) << sh;
        const uint32_t cnt = hist[bin];
        __syncthreads(); /* hist is cleared at the next pass */
        if ((kk - need) + cnt <= CAP) break;
    }
    if (kk > 0) {
        if (tid == 0) *s_n = 0;
        __syncthreads();
        const uint64_t pm = mask, pp = prefix;
        const int lane = tid & 31;
        tk_scan(row, cs, lo, hi, [&](int64_t p, float f) {
            bool in = false;
            uint64_t key = 0;
            if (tk_valid(f)) {
                key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~tok(p);
                in = (key & pm) >= pp; /* in the bin or above it */
            }
            const unsigned am = __activemask();
            const unsigned bi = __ballot_sync(am, in);
            if (!bi) return;
            const int leader = __ffs(am) - 1;
            uint32_t b0 = 0;
            if (lane == leader) b0 = atomicAdd(s_n, (uint32_t)__popc(bi));
            b0 = __shfl_sync(am, b0, leader) + __popc(bi & ((1u << lane) - 1u));
            if (in && b0 < CAP) cand[b0] = key;
        });
        __syncthreads();
        nc = min(*s_n, (uint32_t)CAP);
    }
    return nc;
}

/* Phase B: write the kk (>= 1) largest of cand[0..nc) in order to out (k
 * entries, -1 padded). keys = cand = the start of the dynamic buffer, tmp
 * its scatter area; the bitonic fallback pads nc keys to a power of two
 * inside the buffer. */
/* Score of a key (the inverse of tk_fkey on its high word). */
__device__ __forceinline__ float tb_fval(uint64_t key) {
    const uint32_t u = (uint32_t)(key >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}
/* Phase B's bucket of a key: linear in the score over [vmn, vmn + 2047 /
 * scale] (lin), or (key - mn) >> sh in key space. Both are monotone
 * non-decreasing in the key (a rounded subtraction and a positive scaling
 * are monotone; equal scores share a bucket), which is all the counting
 * sort needs: the rank inside a bucket counts the larger keys. Key space
 * is linear in the float's bits, i.e. roughly logarithmic in its
 * magnitude: when the candidates straddle zero (a top 2048 of 8192, as in
 * HISA's candidate rows and DSA rows of 8K: the k-th score is near the
 * median) the tiny magnitudes take most of the buckets and the rest crowd
 * into a few (up to ~200 keys per bucket on real rows, so the narrowing
 * levels failed and the bitonic fallback ran, ~2.5x slower than rows of
 * uniform scores; linear: at most 20). */
struct tb_dig {
    bool lin;
    float vmn, scale;
    uint64_t mn;
    int sh;
    __device__ __forceinline__ uint32_t operator()(uint64_t key) const {
        if (lin) {
            const float d = (tb_fval(key) - vmn) * scale; /* >= 0 in the region; +inf: inf, NaN: NaN */
            return d < 2047.f ? (uint32_t)d : 2047u;
        }
        return tb_digit(key, mn, sh);
    }
};

__device__ __forceinline__ void tb_order_out(uint64_t *keys, uint64_t *tmp, uint32_t nc, uint32_t kk,
                                             uint32_t *hist, uint32_t *wt, uint64_t *ra, uint64_t *rb,
                                             uint32_t *s_bin, uint32_t *s_E, uint32_t *s_hib, int32_t *out,
                                             int64_t k, int64_t out_cs) {
    const int tid = threadIdx.x;
    uint64_t *cand = keys;
    uint64_t thr = 0;     /* region: keys >= thr */
    uint64_t cap = ~0ull; /* key-space digit range ends here; larger keys share bucket 2047 */
    tb_dig dig = {false, 0.f, 0.f, 0, 0};
    const uint32_t outl = min(kk, 16u);
    bool ok = false;
    /* level -1: buckets linear in the score (if the score range allows it);
     * if a bucket is still too large (far outliers, many equal scores), the
     * key-space levels 0..2 start over from the whole candidate set */
    for (int lvl = -1; lvl < 3; lvl++) {
        uint64_t lmn = ~0ull, lmx = 0;
        for (uint32_t i = tid; i < nc; i += TB_THREADS) {
            const uint64_t key = cand[i];
            if (key >= thr) {
                lmn = min(lmn, key);
                if ((uint32_t)(key >> 32) < TB_UINF) lmx = max(lmx, key); /* finite */
            }
        }
        for (int i = tid; i < 2048; i += TB_THREADS) hist[i] = 0;
        tb_minmax64(lmn, lmx, ra, rb); /* barriers: hist cleared too */
        if (lvl < 0) {
            /* lmn, lmx: the smallest key, the largest finite one (uniform) */
            const float vr = tb_fval(lmx) - tb_fval(lmn), sc = 2047.f / vr;
            if (!(lmx > lmn && vr > 0.f && isfinite(vr) && isfinite(sc))) continue;
            dig = {true, tb_fval(lmn), sc, 0, 0};
        } else {
            lmx = min(lmx, cap);
            const uint64_t range = lmx > lmn ? lmx - lmn : 0;
            dig = {false, 0.f, 0.f, lmn, range >= 2048 ? 53 - __clzll((long long)range) : 0}; /* range >> sh < 2048 */
        }
        for (uint32_t i = tid; i < nc; i += TB_THREADS) {
            const uint64_t key = cand[i];
            if (key >= thr) atomicAdd(&hist[dig(key)], 1u);
        }
        __syncthreads();
        /* buckets in descending order: start = keys in higher buckets; the
         * boundary bucket holds rank kk-1; hist[b] = count << 16 | start */
        uint32_t c[8], loc = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            c[j] = hist[2047 - 8 * tid - j];
            loc += c[j];
        }
        uint32_t tot;
        uint32_t cum = tb_excl_scan(loc, wt, tot);
        uint32_t mb = 0;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const uint32_t bin = 2047 - 8 * tid - j;
            if (cum < kk) {
                mb = max(mb, c[j]);
                if (cum + c[j] >= kk) {
                    *s_bin = bin;
                    *s_E = cum + c[j];
                }
                if (cum < outl && cum + c[j] >= outl) *s_hib = bin;
            }
            hist[bin] = (c[j] << 16) | cum;
            cum += c[j];
        }
        mb = tb_max(mb, wt); /* barriers: s_bin, s_E, hist visible */
        if (mb <= TB_LIMIT) {
            ok = true;
            break;
        }
        if (lvl < 0) continue; /* key space from the whole set (thr = 0, cap = ~0) */
        const uint32_t b = *s_bin;
        if (b == 0 && *s_hib == 2047) break; /* neither end of the range can move */
        /* next level: the keys from the k-th key's bucket up to the bucket
         * of rank 16 (fewer than 16 keys above it, e.g. far outliers, share
         * the clamped top bucket): digits over a narrower range */
        thr = dig.mn + ((uint64_t)b << dig.sh);
        cap = dig.mn + ((uint64_t)(*s_hib + 1) << dig.sh) - 1;
    }
    if (ok) {
        const uint32_t b0 = *s_bin, E = *s_E;
        for (uint32_t i = tid; i < nc; i += TB_THREADS) {
            const uint64_t key = cand[i];
            if (key < thr) continue;
            const uint32_t d = dig(key);
            if (d >= b0) tmp[atomicAdd(&hist[d], 1u) & 0xFFFFu] = key;
        }
        __syncthreads();
        /* hist[d] = count << 16 | end; rank = start + larger bucket mates */
        int32_t *ob = (int32_t *)cand;
        for (uint32_t i = tid; i < E; i += TB_THREADS) {
            const uint64_t key = tmp[i];
            const uint32_t h = hist[dig(key)];
            const uint32_t end = h & 0xFFFFu, st = end - (h >> 16);
            uint32_t rk = st;
            for (uint32_t j = st; j < end; j++) rk += tmp[j] > key;
            if (rk < kk) ob[rk] = (int32_t)~(uint32_t)key;
        }
        __syncthreads();
        for (int64_t i = tid; i < k; i += TB_THREADS) out[i * out_cs] = i < (int64_t)kk ? ob[i] : -1;
        return;
    }
    /* fallback: bitonic sort of all nc candidates, descending */
    uint32_t n2 = 1;
    while (n2 < nc) n2 <<= 1;
    for (uint32_t i = nc + tid; i < n2; i += TB_THREADS) keys[i] = 0;
    __syncthreads();
    for (uint32_t size = 2; size <= n2; size <<= 1) {
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t i = tid; i < n2 / 2; i += TB_THREADS) {
                const uint32_t pos = 2 * i - (i & (stride - 1));
                const uint64_t x = keys[pos], y = keys[pos + stride];
                const bool desc = (pos & size) == 0;
                if ((x < y) == desc) {
                    keys[pos] = y;
                    keys[pos + stride] = x;
                }
            }
            __syncthreads();
        }
    }
    for (int64_t i = tid; i < k; i += TB_THREADS)
        out[i * out_cs] = i < (int64_t)kk ? (int32_t)~(uint32_t)keys[i] : -1;
}

/* ======================================================================== */
/* Top-k v3 (t3_kernel, the default): the algorithm above with more rows in */
/* flight and fewer, shorter memory round trips per row than tb_kernel had. */
/* tb_kernel was latency-bound, not bandwidth- or issue-bound: a CTA took   */
/* about 3x a fair share of the bandwidth for its row, and rows that sit in */
/* L2 were no faster, while the SM could issue all of a row's instructions  */
/* in a fraction of that time. A CTA spends its row in dependent steps      */
/* (sample round trips, ~10 barriers of sampling, the filter's load round    */
/* trips, ~17 barriers of phase B) with 8 warps; its SASS (sm_90a) also      */
/* shows the filter issuing 2 of its 4 float4 loads, consuming them, then    */
/* the other 2: 32 round trips of 8 KB per CTA for a 64K row. So:            */
/*  - 4 CTAs/SM (was 3): 48.9 KB dynamic + 8 KB hist (was 64 + 8 KB); the    */
/*    candidate buffer holds T3_CAP = 4016 keys (was 6144) and the scatter   */
/*    area of phase B follows it. 1024 rows = 1.94 waves of 528 (was 2.59).  */
/*    64 registers (launch bounds), no spills.                               */
/*  - the smaller buffer needs a tighter threshold: ~1.25k + 448 keys above  */
/*    tau (3008 at k = 2048) from 4096 samples up to 64K columns, 8192       */
/*    beyond (sample rank ~188 at 64K and at 128K: sd of the count ~220      */
/*    keys, so [k, T3_CAP] is -4.4 / +4.6 sd; at 256K about +-3.1 sd, i.e.   */
/*    ~0.2% of the rows take the radix fallback). The samples use the whole  */
/*    buffer (8192 x 4 B), free until the filter, and a thread's 2 or 4      */
/*    sample groups (one 32-byte sector each) are loaded in one round trip.  */
/*  - the filter of contiguous rows (t3_filter) issues a step's 4 float4     */
/*    loads together (16 KB per CTA per round trip), and prefetches into L2  */
/*    the step pfd ahead; the first pfd steps are prefetched before the      */
/*    sampling, whose round trip and barriers they overlap. pfd =            */
/*    T3_PF_DEFAULT = 0: off (3 and 6 steps were slower).                    */
/* Everything else (strided rows' filter, the radix fallback, phase B) is    */
/* tb_kernel's code with the capacity T3_CAP. Keys are unique (score << 32   */
/* | ~token) and phase B orders whatever superset of the top k it is given,  */
/* so the output is tb_kernel's bit for bit.                                 */
/* ======================================================================== */
#define T3_BUF 6112                 /* dynamic buffer in keys: 4 CTAs/SM with hist */
#define T3_CAP (T3_BUF - TB_TMP)    /* candidate keys (4016); tmp follows them */
#define T3_SMEM (T3_BUF * sizeof(uint64_t))
#define T3_PF_DEFAULT 0 /* the filter's L2 prefetch distance in 16 KB steps: off */

static_assert(T3_CAP >= 4000, "candidate capacity");
static_assert(T3_CAP < 65536, "bucket start and count are packed in 16 bits each");
static_assert(4096 <= T3_BUF, "the bitonic fallback pads T3_CAP keys to 4096");
static_assert(1024 * 8 * sizeof(uint32_t) <= T3_SMEM, "8192 samples fit in the buffer");
static_assert(1024 <= 4 * TB_THREADS, "at most 4 sample groups per thread");
/* 4 CTAs/SM: 4 x (dynamic + 8 KB hist + ~0.2 KB + 1 KB reserved) <= 228 KB */
static_assert(4 * (T3_SMEM + 8192 + 256 + 1024) <= 228 * 1024, "4 CTAs per SM");

__device__ __forceinline__ void t3_prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

/* Append the keys >= ulo of a contiguous row's columns [lo, hi) to cand:
 * tb_filter's keys in tb_filter's way, with two differences in the 16-byte
 * loop. (1) Its full steps (every thread has 4 float4) load without
 * predicates, and the 4 loads are issued before any is used: in tb_filter
 * (ptxas, sm_90a) the predicated loads' -inf defaults make it issue 2
 * float4, consume them, then issue the other 2, i.e. two round trips of
 * 8 KB per CTA per step instead of one of 16 KB. (2) Each step first asks
 * L2 for the 16 KB that step + pfd will load (threads 0..127, one 128-byte
 * line each), so DRAM streams ahead of the loads. */
template <typename TOK>
__device__ __forceinline__ void t3_filter(const float *row, int64_t lo, int64_t hi, uint32_t ulo, TOK &tok,
                                          uint64_t *cand, uint32_t *s_n, int pfd) {
    const int tid = threadIdx.x;
    int64_t a = lo;
    while (a < hi && (((uintptr_t)(row + a)) & 15)) a++;
    const uint32_t nvec = (uint32_t)((hi - a) >> 2); /* L < 2^31 */
    tb_filter<T3_CAP>(row, 1, lo, a, ulo, tok, cand, s_n); /* < 4 unaligned head columns */
    const float4 *v = (const float4 *)(row + a);
    const uint32_t step = 4 * TB_THREADS, full = nvec / step * step;
    for (uint32_t b = 0; b < nvec; b += step) {
        const uint32_t pf = b + (uint32_t)pfd * step + 8 * tid;
        if (tid < 128 && pfd > 0 && pf < nvec) t3_prefetch_l2(v + pf);
        float4 x[4];
        if (b < full) {
#pragma unroll
            for (int j = 0; j < 4; j++) x[j] = __ldg(v + b + j * TB_THREADS + tid);
        } else {
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t i = b + j * TB_THREADS + tid;
                x[j] = i < nvec ? __ldg(v + i) : make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
            }
        }
        tb_append16<T3_CAP>(
            x, ulo, tok, [&](int e) { return a + 4 * (int64_t)(b + (e >> 2) * TB_THREADS + tid) + (e & 3); }, cand,
            s_n);
    }
    tb_filter<T3_CAP>(row, 1, a + 4 * (int64_t)nvec, hi, ulo, tok, cand, s_n); /* < 4 tail columns */
}

template <bool GATHER>
__global__ void __launch_bounds__(TB_THREADS, 4) t3_kernel(la_sp_topk_args a, int pfd) {
    extern __shared__ uint64_t t3_keys[]; /* cand [T3_CAP] then tmp [TB_TMP] */
    __shared__ uint32_t hist[2048];
    __shared__ uint32_t wt[TB_WARPS];
    __shared__ uint64_t ra[TB_WARPS], rb[TB_WARPS];
    __shared__ uint32_t s_n, s_bin, s_above, s_E, s_hib;
    uint64_t *cand = t3_keys, *tmp = t3_keys + T3_CAP;

    const int tid = threadIdx.x;
    const int64_t r = blockIdx.x;
    int64_t lo = 0, hi = a.L;
    if (a.use_range) la_sp_row_range(a.range, r, &lo, &hi);
    const float *row = a.scores + r * a.ld;
    const int32_t *blocks = GATHER ? a.blocks + r * a.blocks_ld : nullptr;
    int32_t *out = a.out + r * a.out_ld;
    auto tok = [&](int64_t p) { return tk_token<GATHER>(blocks, a.B, p); };
    const int64_t nrow = hi > lo ? hi - lo : 0;
    const uint32_t k = (uint32_t)a.k;
    uint32_t nc = 0, kk = 0;
    bool have = false;

    if (tid == 0) s_n = 0;
    if (nrow <= T3_CAP) {
        __syncthreads();
        tb_filter<T3_CAP>(row, a.cs, lo, hi, TB_ULO, tok, cand, &s_n);
        __syncthreads();
        nc = s_n;
        kk = min(nc, k);
        have = true;
    } else {
        if (a.cs == 1) /* the first pfd filter steps, fetched while we sample */
            for (int64_t j = tid; j < (int64_t)pfd * 128 && lo + 32 * j < hi; j += TB_THREADS)
                t3_prefetch_l2(row + lo + 32 * j);
        const int groups = nrow > 65536 ? 1024 : 512, nsamp = groups * 8;
        uint32_t *samp = (uint32_t *)t3_keys;
        auto group_at = [&](int g) { /* first column of sample group g */
            int64_t p = lo + (int64_t)g * (nrow - 8) / (groups - 1);
            if (a.cs == 1) { /* start the group on a 32-byte sector */
                p -= (int64_t)(((uintptr_t)(row + p) >> 2) & 7);
                if (p < lo) p += 8;
            }
            return p;
        };
        auto put = [&](int g, int j, float f) {
            const uint32_t u = tk_fkey(f);
            samp[g * 8 + j] = tb_in(u, TB_ULO) ? u : 0u;
        };
        if (a.cs == 1) {
            /* a group is one aligned sector = 2 float4; a thread's 2 or 4
             * groups are all loaded before any is stored (one round trip) */
            float4 x[8];
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (q * TB_THREADS < groups) {
                    const float4 *s4 = (const float4 *)(row + group_at(tid + q * TB_THREADS));
                    x[2 * q] = __ldg(s4);
                    x[2 * q + 1] = __ldg(s4 + 1);
                }
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (q * TB_THREADS < groups) {
                    const int g = tid + q * TB_THREADS;
                    put(g, 0, x[2 * q].x), put(g, 1, x[2 * q].y), put(g, 2, x[2 * q].z), put(g, 3, x[2 * q].w);
                    put(g, 4, x[2 * q + 1].x), put(g, 5, x[2 * q + 1].y), put(g, 6, x[2 * q + 1].z);
                    put(g, 7, x[2 * q + 1].w);
                }
        } else {
            for (int g = tid; g < groups; g += TB_THREADS) {
                const int64_t p = group_at(g);
#pragma unroll
                for (int j = 0; j < 8; j++) put(g, j, row[(p + j) * a.cs]);
            }
        }
        for (int i = tid; i < 2048; i += TB_THREADS) hist[i] = 0;
        __syncthreads();
        uint32_t nv = 0;
        for (int i = tid; i < nsamp; i += TB_THREADS) {
            const uint32_t u = samp[i];
            if (u) {
                atomicAdd(&hist[u >> 21], 1u);
                nv++;
            }
        }
        nv = tb_sum(nv, wt);
        const uint32_t rs = (uint32_t)(((double)k * 1.25 + 448.0) * nsamp / (double)nrow) + 1;
        if (rs < nv) {
            tb_find_bin(hist, 2048, rs, wt, &s_bin, &s_above);
            const uint32_t b1 = s_bin, r2 = rs - s_above;
            for (int i = tid; i < 2048; i += TB_THREADS) hist[i] = 0;
            __syncthreads();
            for (int i = tid; i < nsamp; i += TB_THREADS) {
                const uint32_t u = samp[i];
                if (u && (u >> 21) == b1) atomicAdd(&hist[(u >> 10) & 2047u], 1u);
            }
            __syncthreads();
            tb_find_bin(hist, 2048, r2, wt, &s_bin, &s_above); /* ends with a barrier: samp is dead */
            const uint32_t tau = (b1 << 21) | (s_bin << 10);
            if (a.cs == 1) t3_filter(row, lo, hi, max(tau, TB_ULO), tok, cand, &s_n, pfd);
            else tb_filter<T3_CAP>(row, a.cs, lo, hi, max(tau, TB_ULO), tok, cand, &s_n);
            __syncthreads();
            const uint32_t nin = s_n;
            if (nin >= k && nin <= T3_CAP) {
                nc = nin;
                kk = k;
                have = true;
            }
        }
    }
    if (!have) nc = tb_radix_collect<T3_CAP>(row, a.cs, lo, hi, k, tok, cand, hist, wt, &s_n, &s_bin, &s_above, kk);
    if (kk == 0) {
        for (int64_t i = tid; i < a.k; i += TB_THREADS) out[i * a.out_cs] = -1;
        return;
    }
    tb_order_out(t3_keys, tmp, nc, kk, hist, wt, ra, rb, &s_bin, &s_E, &s_hib, out, a.k, a.out_cs);
}

static const char *const tk_names[] = {"sample", "portable", "short"};
static_assert(TS_KMAX == LA_SP_TOPK_MAX, "the short-row kernel takes every k");

la_status la_sp_topk_select(const char *forced, const la_sp_topk_args &a, int64_t short_rows,
                            la_sp_topk_kernel *kern) {
    const bool short_ok = la_sp_topk_short_ok(a);
    if (!forced) {
        /* the short-row kernel (one row per SM at 1024 threads) while the
         * rows fit it and take at most short_rows (two waves); else
         * t3_kernel, 4 rows per SM */
        *kern = short_ok && a.R <= short_rows ? LA_SP_TOPK_SHORT : LA_SP_TOPK_SAMPLE;
        return LA_OK;
    }
    const int i = la_cu_variant_index(forced, tk_names, 3);
    if (i < 0) return la_cu_unknown_variant("topk", forced, "sample, portable, short");
    *kern = (la_sp_topk_kernel)i;
    if (*kern == LA_SP_TOPK_SHORT && !short_ok)
        return la_cu_variant_unsupported("topk", "short", "rows over 16384 columns or 2048 gather blocks");
    return LA_OK;
}

template <bool GATHER>
static la_status tk_launch_v3(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s) {
    LA_TRY(la_cu_func_smem(ctx, (const void *)t3_kernel<GATHER>, T3_SMEM, T3_SMEM, true));
    t3_kernel<GATHER><<<(unsigned)a.R, TB_THREADS, T3_SMEM, s>>>(a, T3_PF_DEFAULT);
    LA_CU_LAUNCH("topk");
    return LA_OK;
}

la_status la_sp_topk(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s) {
    la_sp_topk_kernel kern;
    LA_TRY(la_sp_topk_select(la_context_variant(ctx, "topk"), a, la_sp_topk_short_rows_max(), &kern));
    if (a.k > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: k=%lld exceeds the CUDA top-k maximum %d",
                      (long long)a.k, LA_SP_TOPK_MAX);
    if (a.L > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: row length %lld exceeds int32", (long long)a.L);
    if (a.R == 0 || a.k == 0) return LA_OK;
    if (a.R > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: %lld rows exceed the grid", (long long)a.R);
    la_cu_report(ctx, "topk", tk_names[kern], "rows=%lld L=%lld k=%lld gather=%d", (long long)a.R,
                 (long long)a.L, (long long)a.k, a.blocks != nullptr);
    if (kern == LA_SP_TOPK_PORTABLE) return la_sp_topk_portable(a, ctx, s);
    if (kern == LA_SP_TOPK_SHORT) return la_sp_topk_short(a, ctx, s);
    return a.blocks ? tk_launch_v3<true>(a, ctx, s) : tk_launch_v3<false>(a, ctx, s);
}

extern "C" la_status la_topk_cuda(const la_tensor *scores, la_tensor *idx, la_context *ctx) {
    if (!scores) return la_err(LA_ERR_ARG, "topk: scores is NULL");
    if (!idx) return la_err(LA_ERR_ARG, "topk: idx (output) is NULL");
    LA_TRY(la_check_tensor(scores, "scores", 2, LA_DT(LA_F32), LA_DEVICE_CUDA, false));
    LA_TRY(la_check_tensor(idx, "idx", 2, LA_DT(LA_I32), LA_DEVICE_CUDA, false));
    LA_TRY(la_check_dim(idx, "idx", 0, scores->ne[0], "(rows of scores)"));
    if (la_tensors_overlap(idx, scores))
        return la_err(LA_ERR_ARG, "idx: overlaps scores in memory (outputs must not alias inputs)");
    la_sp_topk_args a;
    memset(&a, 0, sizeof a);
    a.scores = (const float *)scores->data;
    a.R = scores->ne[0];
    a.L = scores->ne[1];
    a.ld = scores->nb[0];
    a.cs = scores->nb[1];
    a.k = idx->ne[1];
    a.out = (int32_t *)idx->data;
    a.out_ld = idx->nb[0];
    a.out_cs = idx->nb[1];
    LA_TRY(la_sp_topk(a, ctx, la_cu_stream(ctx)));
    la_err_clear();
    return LA_OK;
}
