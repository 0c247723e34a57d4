/* Exact top-k of short rows (at most TS_LMAX columns) with one CTA of
 * TS_NT = 1024 threads per row: variant "short" of family "topk", the
 * default where it applies (topk.cu's la_sp_topk). Same order as la_topk
 * (SPEC §6) and the same keys as topk_common.cuh: key = tk_fkey(score) << 32
 * | ~token, unique per row, so "ties to the lower token" is "larger key" and
 * any exact selection of the k largest keys gives t3_kernel's indices bit
 * for bit; -inf is not a candidate (key word 0 here), NaN ranks first.
 *
 * t3_kernel (256 threads) on 64 rows of 8192 leaves half the SMs idle and
 * spends its row in dependent steps at 8 warps: a sample round trip, ~10
 * barriers of sampling, a second pass over the row, phase B. Here a row is
 * read once, into registers (thread t holds float4 t, t + 1024, ... of the
 * row's aligned body: up to 16 scores; threads 0..2 also hold the <= 3
 * unaligned head columns, threads 4..6 the <= 3 tail columns), and never
 * again; the loops over a thread's keys branch once per float4 group
 * (ts_each: warp-uniform), so a row of 8192 costs 8 keys' work, not 17.
 *  0. the direct order (ts_direct_order, the common case): with the keys
 *     come a lower bound of the k-th key (the smallest over the lanes of a
 *     lane's ceil(k / 1024)-th largest key) and the largest finite key;
 *     topk.cu's phase B counting sort runs on the keys above the bound
 *     straight from the registers: 2048 buckets linear in the score, each
 *     key's rank = its bucket's start + its larger bucket mates, written
 *     to the output. Barriers for a row of continuous scores: 1 (keys,
 *     bounds, histograms cleared) + 1 (histogram) + 2 (scan) + 1 (scatter;
 *     gather mode + 1: tokens) = 5, no radix pass, no candidate buffer, no
 *     staged output. Where a bucket at or above the k-th key's holds more
 *     than TS_LIMIT keys (many equal scores, far outliers) or the range
 *     does not allow linear buckets (no finite key, a range past
 *     FLT_MAX): steps 1-3.
 *  1. radix select over the keys held in registers: 11-bit digits of the
 *     score word (bits 31..21, 20..10, 9..0), then of the ~token word when
 *     equal scores straddle the k-th key; histograms in shared memory,
 *     warp-aggregated (__match_any_sync: one atomic per distinct bin per
 *     warp), two buffers so that a pass never waits to clear the one just
 *     read. A pass ends as soon as the keys at or above the k-th key's bin
 *     fit the candidate buffer (TS_CAP). Three barriers a pass.
 *  2. collect: every key >= the prefix into cand (one warp scan and one
 *     shared atomic per warp), nc = keys above the bin + the bin's count;
 *     the candidates' smallest and largest finite score on the way, for
 *     the ordering's first level. Gather mode: the row's blocks (at most
 *     TS_BLK) are staged in shared memory with the row's loads, a column's
 *     token is a shared load.
 *  3. order the kk = min(k, valid) largest of the nc candidates: topk.cu's
 *     phase B (tb_order_out) at 1024 threads: the counting sort of step 0
 *     over the candidates (key space when the score range does not allow
 *     linear buckets); buckets over TS_LIMIT keys narrow the range (key
 *     space, twice at most), then a bitonic sort of the candidates (many
 *     equal scores, more than TS_LIMIT NaN / +inf: correct, slower).
 * One global round trip (the row and the blocks).
 *
 * The text below uses only ts_* primitives (defined here for CUDA and by
 * dev/emu_topk_short.cpp, LA_TS_EMU, for a host emulation with one
 * std::thread per CUDA thread) and every warp collective is called by all
 * 32 lanes. Internal. */
#ifndef LA_CUDA_TOPK_SHORT_CUH
#define LA_CUDA_TOPK_SHORT_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#define TS_NT 1024                  /* threads per CTA (one CTA per row) */
#define TS_NW (TS_NT / 32)
#define TS_VPT 4                    /* float4 of the body per thread */
#define TS_LMAX (TS_NT * TS_VPT * 4) /* longest row (16384 columns; + <= 6 unaligned) */
#define TS_EPT (4 * TS_VPT + 1)     /* keys per thread: the body's 16 and one head or tail column */
#define TS_KMAX 2048                /* largest k (LA_SP_TOPK_MAX) */
#define TS_CAP 4096                 /* candidates ordered by phase B */
#define TS_LIMIT 48                 /* largest bucket ranked by counting its mates */
#define TS_TMP (TS_KMAX + TS_LIMIT) /* phase B's scatter area */
#define TS_ULO 0x00800000u          /* tk_fkey(-FLT_MAX): the smallest candidate key */
#define TS_UINF 0xFF800000u         /* tk_fkey(+inf) */
#define TS_NONE 0xFFFFFFFFu         /* no histogram bin */
#define TS_BLK 2048                 /* gather mode: most blocks of a row (staged in shared memory) */

struct ts_smem {
    uint64_t cand[TS_CAP]; /* candidates; phase B's output tokens (int32) at the end */
    uint64_t tmp[TS_TMP];
    uint32_t hist[2][2048];
    uint32_t wt[2][TS_NW]; /* block reductions, used alternately */
    uint64_t ra[2][TS_NW], rb[2][TS_NW];
    uint32_t hmn[TS_NW], hmx[TS_NW]; /* the candidates' smallest score word, largest finite one */
    int32_t blk[TS_BLK];               /* gather mode: the row's blocks */
    uint32_t s_n, s_bin, s_above, s_cnt, s_E, s_hib;
    uint32_t wfmx[TS_NW], wfmn[TS_NW], wlo[TS_NW]; /* per warp: ts_direct_order's range (the keys' loop) */
    uint32_t s_mb;       /* the direct ordering: its largest bucket at or above the k-th key */
    uint32_t s_ob, s_oE; /* the direct ordering: the k-th key's bucket, keys in it and above */
};
static_assert(TS_CAP >= 2 * TS_KMAX, "bitonic fallback and collect capacity");
static_assert(TS_KMAX <= 2 * TS_NT, "the direct order's bound: a lane's first or second largest key");
static_assert(TS_NT == 1024 && TS_CAP >= TS_NT / 2, "S.cand holds ts_direct_order's 2048 bins: one entry a thread");
static_assert(TS_CAP < 65536, "bucket start and count are packed in 16 bits each");

/* One row: columns [lo, hi) of row (stride cs), tokens of gather mode from
 * blocks (the row's kept blocks, B tokens each; NULL: token = column); k
 * entries of out (stride out_cs). */
struct ts_row {
    const float *row;
    int64_t cs, lo, hi;
    const int32_t *blocks;
    int B;
    uint32_t k;
    int32_t *out;
    int64_t out_cs;
};

#ifndef LA_TS_EMU
/* Whether the short-row kernel takes the rows: at most TS_LMAX columns and
 * in gather mode at most TS_BLK blocks (k <= TS_KMAX is the caller's check). */
static inline bool la_sp_topk_short_ok(const la_sp_topk_args &a) {
    return a.L >= 0 && a.L <= TS_LMAX && (!a.blocks || (a.B > 0 && (a.L + a.B - 1) / a.B <= TS_BLK));
}
/* The most rows it takes by default: two waves of one CTA per SM. */
int la_sp_topk_short_rows_max();
/* Launch it on s: one CTA per row (topk_short.cu). */
la_status la_sp_topk_short(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s);
#endif

#ifdef LA_TS_KERNELS
#ifndef LA_TS_EMU
#define TS_DEV __device__ __forceinline__
#define TS_MEMBER __device__ __forceinline__
TS_DEV int ts_tid() { return (int)threadIdx.x; }
TS_DEV void ts_sync() { __syncthreads(); }
TS_DEV uint32_t ts_atomic_add(uint32_t *p, uint32_t v) { return atomicAdd(p, v); }
TS_DEV uint32_t ts_shfl_up(uint32_t x, int o) { return __shfl_up_sync(0xffffffffu, x, o); }
TS_DEV uint32_t ts_shfl(uint32_t x, int src) { return __shfl_sync(0xffffffffu, x, src); }
TS_DEV uint32_t ts_shfl_xor(uint32_t x, int o) { return __shfl_xor_sync(0xffffffffu, x, o); }
TS_DEV uint64_t ts_shfl_xor64(uint64_t x, int o) {
    return (uint64_t)__shfl_xor_sync(0xffffffffu, (unsigned long long)x, o);
}
TS_DEV uint32_t ts_ballot(bool p) { return __ballot_sync(0xffffffffu, p); }
TS_DEV uint32_t ts_match_any(uint32_t x) { return __match_any_sync(0xffffffffu, x); }
TS_DEV uint32_t ts_atomic_max(uint32_t *p, uint32_t v) { return atomicMax(p, v); }
/* h[i] += v where c; where c: dst[h[i]++ & 0xFFFF] = x (h[i] atomically).
 * Shared addresses from the loop-invariant bases (one window base, not one
 * per element); predicated in PTX, though ptxas still branches around the
 * atomics. */
TS_DEV void ts_add_if(bool c, uint32_t *h, uint32_t i, uint32_t v) {
    asm volatile("{\n\t.reg .pred q;\n\tsetp.ne.u32 q, %0, 0;\n\t@q red.shared.add.u32 [%1], %2;\n\t}" ::"r"((uint32_t)c),
                 "r"((uint32_t)__cvta_generic_to_shared(h) + 4 * i), "r"(v)
                 : "memory");
}
TS_DEV void ts_push_if(bool c, uint32_t *h, uint32_t i, uint64_t *dst, uint64_t x) {
    asm volatile("{\n\t.reg .pred q;\n\t.reg .u32 j;\n\tsetp.ne.u32 q, %0, 0;\n\t"
                 "@q atom.shared.add.u32 j, [%1], 1;\n\t@q and.b32 j, j, 65535;\n\t"
                 "@q mad.lo.u32 j, j, 8, %2;\n\t@q st.shared.u64 [j], %3;\n\t}" ::"r"((uint32_t)c),
                 "r"((uint32_t)__cvta_generic_to_shared(h) + 4 * i), "r"((uint32_t)__cvta_generic_to_shared(dst)),
                 "l"((unsigned long long)x)
                 : "memory");
}
TS_DEV uint32_t ts_reduce_max(uint32_t x) { return __reduce_max_sync(0xffffffffu, x); }
TS_DEV uint32_t ts_reduce_min(uint32_t x) { return __reduce_min_sync(0xffffffffu, x); }
TS_DEV float4 ts_ldg4(const float4 *p) { return __ldg(p); }
TS_DEV float ts_ldg(const float *p) { return __ldg(p); }
#endif

/* the emulator counts the rows of each path */
#ifndef TS_NOTE_BITONIC
#define TS_NOTE_BITONIC()
#endif
#ifndef TS_NOTE_PASSES
#define TS_NOTE_PASSES(n)
#endif
#ifndef TS_NOTE_DIRECT
#define TS_NOTE_DIRECT()
#endif

template <typename T> TS_DEV T ts_min(T a, T b) { return b < a ? b : a; }
template <typename T> TS_DEV T ts_max(T a, T b) { return a < b ? b : a; }

/* Block reductions (all threads): a warp step, the warp results through
 * shared memory (one barrier), a warp step over them. The two slot arrays
 * alternate (ws): a call writes its slots only after the barrier of the
 * call before, which every reader of the other array has passed. */
TS_DEV uint32_t ts_excl_scan(uint32_t v, ts_smem &S, int &ws, uint32_t &tot) {
    const int lane = ts_tid() & 31, wid = ts_tid() >> 5;
    uint32_t *wt = S.wt[ws];
    ws ^= 1;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = ts_shfl_up(x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) wt[wid] = x;
    ts_sync();
    uint32_t w = wt[lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = ts_shfl_up(w, o);
        if (lane >= o) w += y;
    }
    tot = ts_shfl(w, 31);
    const uint32_t pre = ts_shfl(w, wid) - ts_shfl(x, 31); /* warps before this one */
    return pre + x - v;
}
TS_DEV uint32_t ts_block_max(uint32_t v, ts_smem &S, int &ws) {
    const int lane = ts_tid() & 31, wid = ts_tid() >> 5;
    uint32_t *wt = S.wt[ws];
    ws ^= 1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = ts_max(v, ts_shfl_xor(v, o));
    if (lane == 0) wt[wid] = v;
    ts_sync();
    v = wt[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = ts_max(v, ts_shfl_xor(v, o));
    return v;
}
TS_DEV void ts_block_minmax64(uint64_t &mn, uint64_t &mx, ts_smem &S, int &ws) {
    const int lane = ts_tid() & 31, wid = ts_tid() >> 5;
    uint64_t *ra = S.ra[ws], *rb = S.rb[ws];
    ws ^= 1;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mn = ts_min(mn, ts_shfl_xor64(mn, o));
        mx = ts_max(mx, ts_shfl_xor64(mx, o));
    }
    if (lane == 0) ra[wid] = mn, rb[wid] = mx;
    ts_sync();
    mn = ra[lane];
    mx = rb[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        mn = ts_min(mn, ts_shfl_xor64(mn, o));
        mx = ts_max(mx, ts_shfl_xor64(mx, o));
    }
}
/* c slots of *s_n for this thread (all lanes call): one atomic per warp. */
TS_DEV uint32_t ts_reserve(uint32_t c, uint32_t *s_n) {
    const int lane = ts_tid() & 31;
    uint32_t x = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = ts_shfl_up(x, o);
        if (lane >= o) x += y;
    }
    uint32_t base = 0;
    if (lane == 31) base = ts_atomic_add(s_n, x);
    return ts_shfl(base, 31) + x - c;
}

/* A 2048-bin histogram zeroed by all threads (fixed trip count: the
 * compiler does not know tid < TS_NT). */
TS_DEV void ts_zero_hist(uint32_t *h) {
#pragma unroll
    for (int j = 0; j < 2048 / TS_NT; j++) h[ts_tid() + j * TS_NT] = 0;
}

/* Score of a key (the inverse of tk_fkey on its high word). */
TS_DEV float ts_fval(uint64_t key) {
    const uint32_t u = (uint32_t)(key >> 32);
    return __uint_as_float((u & 0x80000000u) ? (u & 0x7FFFFFFFu) : ~u);
}
/* Phase B's bucket of a key (topk.cu's tb_dig): linear in the score over
 * [vmn, vmn + 2047 / scale], or (key - mn) >> sh in key space; both are
 * monotone non-decreasing in the key, which is all the counting sort needs. */
struct ts_dig {
    bool lin;
    float vmn, scale;
    uint64_t mn;
    int sh;
    TS_MEMBER uint32_t operator()(uint64_t key) const {
        if (lin) {
            const float d = (ts_fval(key) - vmn) * scale; /* >= 0 in the region; +inf: inf, NaN: NaN */
            return d < 2047.f ? (uint32_t)d : 2047u;
        }
        const uint64_t d = (key - mn) >> sh;
        return d < 2047 ? (uint32_t)d : 2047u; /* +inf and NaN keys beyond the finite max: top bucket */
    }
};

/* Write the kk (>= 1) largest of S.cand[0..nc) in order to r.out (k
 * entries, -1 padded): tb_order_out's algorithm (topk.cu) at TS_NT threads.
 * hmn, hmx: the smallest score word of the candidates and the largest
 * finite one (0: none), uniform; S.hist[0] zeroed by the caller. Level -1
 * needs only these (its digit reads the score word), so it starts with the
 * histogram: no pass over cand, no barrier before it. */
TS_DEV void ts_order_out(ts_smem &S, uint32_t nc, uint32_t kk, const ts_row &r, int &ws, uint32_t hmn,
                         uint32_t hmx) {
    const int tid = ts_tid();
    uint64_t *cand = S.cand;
    uint32_t *hist = S.hist[0];
    uint64_t thr = 0;     /* region: keys >= thr */
    uint64_t cap = ~0ull; /* key-space digit range ends here; larger keys share bucket 2047 */
    ts_dig dig = {false, 0.f, 0.f, 0, 0};
    const uint32_t outl = ts_min(kk, 16u);
    bool ok = false;
    /* level -1: buckets linear in the score (if the score range allows it);
     * if a bucket is still too large (far outliers, many equal scores), the
     * key-space levels 0..2 start over from the whole candidate set */
    for (int lvl = -1; lvl < 3; lvl++) {
        if (lvl < 0) {
            /* tb_order_out's lmn, lmx reduced to their score words (the
             * test and the digit depend on nothing else) */
            const uint64_t lmn = (uint64_t)hmn << 32, lmx = (uint64_t)hmx << 32;
            const float vr = ts_fval(lmx) - ts_fval(lmn), sc = 2047.f / vr;
            if (!(hmx > hmn && vr > 0.f && isfinite(vr) && isfinite(sc))) continue;
            dig = {true, ts_fval(lmn), sc, 0, 0};
        } else {
            uint64_t lmn = ~0ull, lmx = 0;
            for (uint32_t i = tid; i < nc; i += TS_NT) {
                const uint64_t key = cand[i];
                if (key >= thr) {
                    lmn = ts_min(lmn, key);
                    if ((uint32_t)(key >> 32) < TS_UINF) lmx = ts_max(lmx, key); /* finite */
                }
            }
            ts_zero_hist(hist);
            ts_block_minmax64(lmn, lmx, S, ws); /* its barrier: hist cleared too */
            lmx = ts_min(lmx, cap);
            const uint64_t range = lmx > lmn ? lmx - lmn : 0;
            dig = {false, 0.f, 0.f, lmn, range >= 2048 ? 53 - __clzll((long long)range) : 0}; /* range >> sh < 2048 */
        }
        for (uint32_t i = tid; i < nc; i += TS_NT) {
            const uint64_t key = cand[i];
            if (key >= thr) ts_atomic_add(&hist[dig(key)], 1u);
        }
        ts_sync();
        /* buckets in descending order (thread t: 2047 - 2t, 2046 - 2t):
         * start = keys in higher buckets; the boundary bucket holds rank
         * kk-1; hist[b] = count << 16 | start */
        uint32_t c[2];
        c[0] = hist[2047 - 2 * tid];
        c[1] = hist[2046 - 2 * tid];
        uint32_t tot;
        uint32_t cum = ts_excl_scan(c[0] + c[1], S, ws, tot);
        uint32_t mb = 0;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const uint32_t bin = 2047 - 2 * tid - j;
            if (cum < kk) {
                mb = ts_max(mb, c[j]);
                if (cum + c[j] >= kk) {
                    S.s_bin = bin;
                    S.s_E = cum + c[j];
                }
                if (cum < outl && cum + c[j] >= outl) S.s_hib = bin;
            }
            hist[bin] = (c[j] << 16) | cum;
            cum += c[j];
        }
        mb = ts_block_max(mb, S, ws); /* its barrier: s_bin, s_E, hist visible */
        if (mb <= TS_LIMIT) {
            ok = true;
            break;
        }
        if (lvl < 0) continue; /* key space from the whole set (thr = 0, cap = ~0) */
        const uint32_t b = S.s_bin;
        if (b == 0 && S.s_hib == 2047) break; /* neither end of the range can move */
        /* next level: the keys from the k-th key's bucket up to the bucket
         * of rank 16 (fewer than 16 keys above it share the clamped top
         * bucket): digits over a narrower range */
        thr = dig.mn + ((uint64_t)b << dig.sh);
        cap = dig.mn + ((uint64_t)(S.s_hib + 1) << dig.sh) - 1;
    }
    int32_t *ob; /* the output tokens, staged in shared memory */
    if (ok) {
        const uint32_t b0 = S.s_bin, E = S.s_E;
        for (uint32_t i = tid; i < nc; i += TS_NT) {
            const uint64_t key = cand[i];
            if (key < thr) continue;
            const uint32_t d = dig(key);
            if (d >= b0) S.tmp[ts_atomic_add(&hist[d], 1u) & 0xFFFFu] = key;
        }
        ts_sync();
        /* hist[d] = count << 16 | end; rank = start + larger bucket mates;
         * cand is dead: the tokens are staged at its start */
        ob = (int32_t *)cand;
        for (uint32_t i = tid; i < E; i += TS_NT) {
            const uint64_t key = S.tmp[i];
            const uint32_t h = hist[dig(key)];
            const uint32_t end = h & 0xFFFFu, st = end - (h >> 16);
            uint32_t rk = st;
            for (uint32_t j = st; j < end; j++) rk += S.tmp[j] > key;
            if (rk < kk) ob[rk] = (int32_t)~(uint32_t)key;
        }
    } else {
        /* bitonic sort of all nc candidates, descending */
        if (tid == 0) TS_NOTE_BITONIC();
        uint32_t n2 = 1;
        while (n2 < nc) n2 <<= 1;
        for (uint32_t i = nc + tid; i < n2; i += TS_NT) cand[i] = 0;
        ts_sync();
        for (uint32_t size = 2; size <= n2; size <<= 1) {
            for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
                for (uint32_t i = tid; i < n2 / 2; i += TS_NT) {
                    const uint32_t pos = 2 * i - (i & (stride - 1));
                    const uint64_t x = cand[pos], y = cand[pos + stride];
                    const bool desc = (pos & size) == 0;
                    if ((x < y) == desc) {
                        cand[pos] = y;
                        cand[pos + stride] = x;
                    }
                }
                ts_sync();
            }
        }
        /* the tokens of the first kk keys, staged in tmp (cand holds the keys) */
        ob = (int32_t *)S.tmp;
        for (uint32_t i = tid; i < kk; i += TS_NT) ob[i] = (int32_t)~(uint32_t)cand[i];
    }
    ts_sync();
    for (uint32_t i = tid; i < r.k; i += TS_NT) r.out[(int64_t)i * r.out_cs] = i < kk ? ob[i] : -1;
}

/* The bin of H (2048 bins, scanned from the top; thread t: bins 2047 - 2t,
 * 2046 - 2t) holding the need-th largest key, for the first pass (need 0)
 * the min(k, total)-th: S.s_bin, S.s_above (keys in higher bins), S.s_cnt
 * (its keys), visible after the barrier at the end. Returns that rank,
 * uniform (0: no key, no bin). */
TS_DEV uint32_t ts_find_bin(const uint32_t *H, uint32_t need, uint32_t k, ts_smem &S, int &ws) {
    const int tid = ts_tid();
    uint32_t c[2];
    c[0] = H[2047 - 2 * tid];
    c[1] = H[2046 - 2 * tid];
    uint32_t tot;
    uint32_t cum = ts_excl_scan(c[0] + c[1], S, ws, tot);
    if (need == 0) need = ts_min(tot, k);
#pragma unroll
    for (int j = 0; j < 2; j++) {
        if (cum < need && cum + c[j] >= need) {
            S.s_bin = 2047 - 2 * tid - j;
            S.s_above = cum;
            S.s_cnt = c[j];
        }
        cum += c[j];
    }
    ts_sync();
    return need;
}

/* f(e) for the elements e that some lane of the warp holds (act, uniform):
 * one branch per float4 group (act(4g) covers 4g .. 4g + 3), one for the
 * head / tail element. */
template <typename ACT, typename F> TS_DEV void ts_each(ACT act, F f) {
#pragma unroll
    for (int g = 0; g < TS_VPT; g++)
        if (act(4 * g)) {
#pragma unroll
            for (int j = 0; j < 4; j++) f(4 * g + j);
        }
    if (act(TS_EPT - 1)) f(TS_EPT - 1);
}

/* The direct ordering (the common case): phase B's counting sort on the
 * keys >= lo, still in registers, with buckets linear in the score (dig:
 * ts_lin_dig over [score(lo), the row's largest finite score]): histogram
 * (in S.cand, zeroed by the caller), scan, scatter of the keys from the
 * k-th key's bucket up into S.tmp, each one's rank = its bucket's start +
 * its larger bucket mates, written straight to r.out. No candidate buffer,
 * no radix pass, no staged output: 4 barriers (gather mode + 1: the
 * tokens). lo is at most the kk-th largest key, kk = min(k, valid keys) =
 * min(k, keys >= lo): lo bounds the k-th key for the whole row, or is the
 * smallest valid key. Any monotone bucket map gives the same ranks, so the
 * result is phase B's. False (uniform) where a bucket at or above the k-th
 * key's holds more than TS_LIMIT keys (many equal scores, far outliers):
 * S.cand and S.s_mb are spent, and the caller goes on with the radix
 * passes, the collect and ts_order_out, whose state (S.hist, S.s_n) this
 * leaves as it found it. ts_lin_dig: false where the range does not allow
 * linear buckets (no finite key above lo, a range past FLT_MAX). */
TS_DEV bool ts_lin_dig(uint32_t lo, uint32_t hx, ts_dig &dig) {
    if (hx <= lo) return false; /* no finite key above lo */
    const float vmn = ts_fval((uint64_t)lo << 32), vr = ts_fval((uint64_t)hx << 32) - vmn, sc = 2047.f / vr;
    if (!(vr > 0.f && isfinite(vr) && isfinite(sc))) return false;
    dig = {true, vmn, sc, 0, 0};
    return true;
}
template <bool GATHER, typename ACT, typename COL, typename TOK>
TS_DEV bool ts_direct_order(const uint32_t (&u)[TS_EPT], ACT act, COL col, TOK tok, uint32_t lo, const ts_dig &dig,
                            const ts_row &r, ts_smem &S, int &ws) {
    const int tid = ts_tid();
    uint32_t *oh = (uint32_t *)S.cand;
    /* invalid keys: 0 < lo */
    ts_each(act, [&](int e) { ts_add_if(u[e] >= lo, oh, dig((uint64_t)u[e] << 32), 1u); });
    ts_sync();
    /* buckets in descending order (thread t: 2047 - 2t, 2046 - 2t), as in
     * ts_order_out: oh[b] = count << 16 | start */
    uint32_t c[2];
    c[0] = oh[2047 - 2 * tid];
    c[1] = oh[2046 - 2 * tid];
    uint32_t tot;
    uint32_t cum = ts_excl_scan(c[0] + c[1], S, ws, tot);
    const uint32_t kk = ts_min(tot, r.k); /* >= 1: hx > lo is a key */
    uint32_t mb = 0;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const uint32_t b = 2047 - 2 * tid - j;
        if (cum < kk) {
            mb = ts_max(mb, c[j]);
            if (cum + c[j] >= kk) {
                S.s_ob = b;
                S.s_oE = cum + c[j];
            }
        }
        oh[b] = (c[j] << 16) | cum;
        cum += c[j];
    }
    mb = ts_reduce_max(mb);
    if ((tid & 31) == 0 && mb > TS_LIMIT) ts_atomic_max(&S.s_mb, mb); /* zeroed by the caller */
    ts_sync();
    if (S.s_mb > TS_LIMIT) return false;
    const uint32_t b0 = S.s_ob, E = S.s_oE; /* E < kk + TS_LIMIT <= TS_TMP */
    ts_each(act, [&](int e) {
        /* gather mode: the column now, its token after the barrier */
        const uint64_t key = ((uint64_t)u[e] << 32) | (uint32_t)~(GATHER ? col(e) : tok(col(e)));
        const uint32_t d = dig(key);
        ts_push_if(u[e] >= lo && d >= b0, oh, d, S.tmp, key);
    });
    ts_sync();
    if (GATHER) {
        for (uint32_t i = tid; i < E; i += TS_NT) {
            const uint64_t key = S.tmp[i];
            S.tmp[i] = (key & 0xFFFFFFFF00000000ull) | (uint32_t)~tok(~(uint32_t)key);
        }
        ts_sync();
    }
    /* oh[d] = count << 16 | end */
    for (uint32_t i = tid; i < E; i += TS_NT) {
        const uint64_t key = S.tmp[i];
        const uint32_t h = oh[dig(key)];
        const uint32_t end = h & 0xFFFFu, st = end - (h >> 16);
        uint32_t rk = st;
        for (uint32_t j = st; j < end; j++) rk += S.tmp[j] > key;
        if (rk < kk) r.out[(int64_t)rk * r.out_cs] = (int32_t)~(uint32_t)key;
    }
    for (uint32_t i = kk + tid; i < r.k; i += TS_NT) r.out[(int64_t)i * r.out_cs] = -1;
    return true;
}

/* The row's top k (all TS_NT threads of the CTA; the row is at most TS_LMAX
 * columns past its aligned start, TS_LMAX + 3 in all). */
template <bool GATHER>
TS_DEV void ts_topk_row(const ts_row &r, ts_smem &S) {
    const int tid = ts_tid(), lane = tid & 31, wbase = tid & ~31;
    /* columns: [lo, a) the unaligned head (< 4, contiguous rows only), then
     * nvec groups of 4 from a (float4 when contiguous), then the < 4 tail */
    int64_t a = r.lo;
    if (r.cs == 1)
        while (a < r.hi && (((uintptr_t)(r.row + a)) & 15)) a++;
    const uint32_t nh = (uint32_t)(a - r.lo);
    const uint32_t nvec = r.hi > a ? (uint32_t)((r.hi - a) >> 2) : 0u;
    const int64_t tail0 = a + 4 * (int64_t)nvec;
    const uint32_t nt = (uint32_t)(r.hi > tail0 ? r.hi - tail0 : 0);
    /* column of element e (32 bits: the caller checks L < 2^31) */
    const uint32_t a32 = (uint32_t)a, c16 = tid < 4 ? (uint32_t)r.lo + tid : (uint32_t)tail0 + tid - 4;
    auto col = [&](int e) -> uint32_t { return e < 16 ? a32 + 4 * (uint32_t)(tid + TS_NT * (e >> 2)) + (e & 3) : c16; };
    /* whether element e can be valid in some lane of this warp (uniform) */
    auto act = [&](int e) -> bool {
        return e < 16 ? (uint32_t)(wbase + TS_NT * (e >> 2)) < nvec : wbase == 0 && nh + nt > 0;
    };
    /* gather mode: the blocks of columns [0, hi) in shared memory (at most
     * TS_BLK: la_sp_topk_short_ok) */
    auto tok = [&](uint32_t p) -> uint32_t { return tk_token<GATHER>(S.blk, r.B, (int64_t)p); };

    uint32_t u[TS_EPT];
    {
        float f[TS_EPT];
        if (r.cs == 1) {
            const float4 *v = (const float4 *)(r.row + a);
            float4 x[TS_VPT];
#pragma unroll
            for (int j = 0; j < TS_VPT; j++) {
                x[j] = make_float4(-INFINITY, -INFINITY, -INFINITY, -INFINITY);
                if ((uint32_t)(tid + TS_NT * j) < nvec) x[j] = ts_ldg4(v + tid + TS_NT * j);
            }
#pragma unroll
            for (int j = 0; j < TS_VPT; j++) {
                f[4 * j] = x[j].x, f[4 * j + 1] = x[j].y, f[4 * j + 2] = x[j].z, f[4 * j + 3] = x[j].w;
            }
        } else {
#pragma unroll
            for (int e = 0; e < 16; e++)
                f[e] = (uint32_t)(tid + TS_NT * (e >> 2)) < nvec ? r.row[(int64_t)col(e) * r.cs] : -INFINITY;
        }
        const bool ext = tid < 4 ? (uint32_t)tid < nh : (uint32_t)(tid - 4) < nt; /* < 4 each */
        f[16] = ext ? r.row[(int64_t)col(16) * r.cs] : -INFINITY;
        if constexpr (GATHER) {
            const uint32_t nblk = (uint32_t)((r.hi + r.B - 1) / r.B);
            for (uint32_t i = tid; i < nblk; i += TS_NT) S.blk[i] = r.blocks[i];
        }
        /* while the loads are in flight (S.cand: ts_direct_order's histogram) */
        ts_zero_hist(S.hist[0]);
        S.cand[tid] = 0; /* 1024 = TS_NT entries */
        if (tid == 0) S.s_n = 0, S.s_mb = 0;
        /* the keys; per warp for ts_direct_order's range: the largest and
         * the smallest finite key, and the smallest over the lanes of a
         * lane's j-th largest key (0: fewer than j valid), j = ceil(k /
         * TS_NT): every lane holds j keys >= it, so the row >= k: a lower
         * bound of the kk-th key well above the row's low tail */
        uint32_t t1 = 0, t2 = 0, fmx = 0, fmn = ~0u;
#pragma unroll
        for (int e = 0; e < TS_EPT; e++) u[e] = 0;
        ts_each(act, [&](int e) {
            u[e] = tk_valid(f[e]) ? tk_fkey(f[e]) : 0u;
            t2 = ts_max(t2, ts_min(t1, u[e]));
            t1 = ts_max(t1, u[e]);
            const bool fin = u[e] && u[e] < TS_UINF;
            fmx = ts_max(fmx, fin ? u[e] : 0u);
            fmn = ts_min(fmn, fin ? u[e] : ~0u);
        });
        fmx = ts_reduce_max(fmx);
        fmn = ts_reduce_min(fmn);
        t1 = ts_reduce_min(r.k > TS_NT ? t2 : t1);
        if (lane == 0) S.wfmx[tid >> 5] = fmx, S.wfmn[tid >> 5] = fmn, S.wlo[tid >> 5] = t1;
        ts_sync();
    }
    int ws = 0;
    {
        const uint32_t lb = ts_reduce_min(S.wlo[lane]), lo = lb ? lb : ts_reduce_min(S.wfmn[lane]);
        ts_dig dig;
        if (ts_lin_dig(lo, ts_reduce_max(S.wfmx[lane]), dig) &&
            ts_direct_order<GATHER>(u, act, col, tok, lo, dig, r, S, ws)) {
            if (tid == 0) TS_NOTE_DIRECT();
            return;
        }
    }
    /* pass 0: the top 11 bits of every valid key */
    {
        uint32_t *H = S.hist[0];
        const uint32_t below = (1u << lane) - 1u; /* the lanes below this one */
        ts_each(act, [&](int e) {
            const uint32_t bin = u[e] ? u[e] >> 21 : TS_NONE;
            const uint32_t peers = ts_match_any(bin);
            ts_add_if(bin != TS_NONE && !(peers & below), H, bin, (uint32_t)__popc(peers));
        });
        ts_zero_hist(S.hist[1]); /* pass 1's */
        ts_sync();
    }
    const uint32_t kk = ts_find_bin(S.hist[0], 0, r.k, S, ws);
    if (tid == 0 && kk == 0) TS_NOTE_PASSES(1);
    if (kk == 0) { /* no candidate (uniform) */
        for (uint32_t i = tid; i < r.k; i += TS_NT) r.out[(int64_t)i * r.out_cs] = -1;
        return;
    }
    /* the radix passes after the first (their state from S: fewer registers
     * live in ts_direct_order): pass p < 3 on the score word, p >= 3 on the
     * ~token word (shifts 21, 10, 0); ph/pl: the k-th key's prefix so far,
     * under mh/ml; need: its rank among the keys of that prefix, taken: the
     * keys above the prefix, cnt: the keys in it */
    uint32_t ph = S.s_bin << 21, pl = 0, mh = 2047u << 21, ml = 0;
    uint32_t taken = S.s_above, need = kk - taken, cnt = S.s_cnt;
    int pass = 1; /* passes done */
    /* pass 5 leaves one key per full prefix (unique tokens); equal tokens
     * (duplicate gather blocks) stop there too, clamped below */
    for (; taken + cnt > TS_CAP && pass < 6; pass++) {
        const int sh = pass % 3 == 0 ? 21 : pass % 3 == 1 ? 10 : 0;
        const uint32_t dm = pass % 3 == 2 ? 1023u : 2047u;
        uint32_t *H = S.hist[pass & 1], *O = S.hist[(pass + 1) & 1];
#pragma unroll
        for (int e = 0; e < TS_EPT; e++) {
            if (!act(e)) continue;
            uint32_t bin = TS_NONE;
            if (u[e]) {
                if (pass < 3) {
                    if ((u[e] & mh) == ph) bin = (u[e] >> sh) & dm;
                } else if (u[e] == ph) {
                    const uint32_t t = ~tok(col(e));
                    if ((t & ml) == pl) bin = (t >> sh) & dm;
                }
            }
            const uint32_t peers = ts_match_any(bin);
            if (bin != TS_NONE && lane == __ffs(peers) - 1) ts_atomic_add(&H[bin], (uint32_t)__popc(peers));
        }
        /* O was last read before the previous pass's final barrier */
        ts_zero_hist(O);
        ts_sync();
        ts_find_bin(H, need, r.k, S, ws);
        const uint32_t bin = S.s_bin, above = S.s_above;
        cnt = S.s_cnt;
        need -= above;
        taken += above;
        if (pass < 3) {
            ph |= bin << sh;
            mh |= dm << sh;
        } else {
            pl |= bin << sh;
            ml |= dm << sh;
        }
    }
    if (tid == 0) TS_NOTE_PASSES(pass);
    pass--; /* the last pass's index */
    /* collect the keys >= the prefix (ph, pl): exactly taken + cnt of them */
    const uint32_t uth = ts_max(ph, TS_ULO);
    uint32_t m = 0;
#pragma unroll
    for (int e = 0; e < TS_EPT; e++) {
        bool in = false;
        if (pass < 3) in = u[e] >= uth;
        else if (u[e] == ph) in = ~tok(col(e)) >= pl;
        else in = u[e] > ph;
        m |= (uint32_t)in << e;
    }
    uint32_t pos = ts_reserve((uint32_t)__popc(m), &S.s_n);
    /* for phase B's level -1: the score words' min and largest finite */
    uint32_t hmn = ~0u, hmx = 0;
#pragma unroll
    for (int e = 0; e < TS_EPT; e++)
        if ((m >> e) & 1u) {
            hmn = ts_min(hmn, u[e]);
            if (u[e] < TS_UINF) hmx = ts_max(hmx, u[e]);
        }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        hmn = ts_min(hmn, ts_shfl_xor(hmn, o));
        hmx = ts_max(hmx, ts_shfl_xor(hmx, o));
    }
    if (lane == 0) S.hmn[tid >> 5] = hmn, S.hmx[tid >> 5] = hmx;
    /* the passes' histograms were last read before their final barrier */
    ts_zero_hist(S.hist[0]);
    /* gather mode: columns first, their tokens after the barrier (the 17
     * block lookups in the loop with the 17 keys live spill, ptxas) */
#pragma unroll
    for (int e = 0; e < TS_EPT; e++)
        if ((m >> e) & 1u) {
            if (pos < TS_CAP) S.cand[pos] = ((uint64_t)u[e] << 32) | (uint32_t)~(GATHER ? col(e) : tok(col(e)));
            pos++;
        }
    ts_sync();
    const uint32_t nc = ts_min(taken + cnt, (uint32_t)TS_CAP);
    hmn = S.hmn[lane];
    hmx = S.hmx[lane];
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        hmn = ts_min(hmn, ts_shfl_xor(hmn, o));
        hmx = ts_max(hmx, ts_shfl_xor(hmx, o));
    }
    if (GATHER) {
        for (uint32_t i = tid; i < nc; i += TS_NT) {
            const uint64_t key = S.cand[i];
            S.cand[i] = (key & 0xFFFFFFFF00000000ull) | (uint32_t)~tok(~(uint32_t)key);
        }
        ts_sync();
    }
    ts_order_out(S, nc, kk, r, ws, hmn, hmx);
}
#endif /* LA_TS_KERNELS */
#endif
