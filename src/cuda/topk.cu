/* Row-wise exact top-k on the GPU (SPEC §6 ordering): descending score, ties
 * to the lower token index, -1 padding; -inf (and NaN) are not candidates.
 *
 * One CTA per row, a radix select over a 64-bit composite key
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
#include "sparse_common.cuh"

#define TK_THREADS 512
#define TK_BUF 8192                         /* sort buffer, 64-bit keys (64 KB) */
#define TK_SAMPLE 2048                      /* sampled keys for the threshold guess */
#define TK_CAP (TK_BUF - LA_SP_TOPK_MAX)    /* members of the final bin (multiple of TK_THREADS) */

__device__ __forceinline__ uint32_t tk_fkey(float f) {
    uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ bool tk_valid(float f) { return f == f && f != -INFINITY; }

/* Visit (column, score) of [lo, hi): 16-byte loads when the row is
 * contiguous. */
template <typename F>
__device__ __forceinline__ void tk_scan(const float *row, int64_t cs, int64_t lo, int64_t hi,
                                        F &&f) {
    const int tid = threadIdx.x, nt = blockDim.x;
    if (cs != 1) {
        for (int64_t p = lo + tid; p < hi; p += nt) f(p, row[p * cs]);
        return;
    }
    int64_t a = lo;
    while ((a < hi) && (((uintptr_t)(row + a)) & 15)) a++;
    for (int64_t p = lo + tid; p < a; p += nt) f(p, row[p]);
    const int64_t nvec = (hi - a) >> 2;
    const float4 *v = (const float4 *)(row + a);
    for (int64_t i = tid; i < nvec; i += nt) {
        float4 x = __ldg(v + i);
        int64_t p = a + 4 * i;
        f(p, x.x);
        f(p + 1, x.y);
        f(p + 2, x.z);
        f(p + 3, x.w);
    }
    for (int64_t p = a + 4 * nvec + tid; p < hi; p += nt) f(p, row[p]);
}

/* Exclusive block scan of one value per thread (TK_THREADS threads). */
__device__ __forceinline__ uint32_t tk_block_excl_scan(uint32_t v, uint32_t *warp_tot,
                                                       uint32_t *total) {
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    uint32_t x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        uint32_t y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_tot[wid] = x;
    __syncthreads();
    if (wid == 0) {
        uint32_t t = lane < TK_THREADS / 32 ? warp_tot[lane] : 0;
        uint32_t s = t;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t y = __shfl_up_sync(0xffffffffu, s, o);
            if (lane >= o) s += y;
        }
        if (lane < TK_THREADS / 32) warp_tot[lane] = s - t;
        if (lane == 31) *total = s;
    }
    __syncthreads();
    uint32_t r = warp_tot[wid] + x - v;
    __syncthreads();
    return r;
}

/* Bin holding the need-th largest key of hist (bins scanned from the top):
 * *bin and *above (count in higher bins). Thread i owns bins nbins-1-4i ..
 * nbins-4-4i. Ends with a barrier. */
__device__ __forceinline__ void tk_find_bin(const uint32_t *hist, int nbins, uint32_t need,
                                            uint32_t *warp_tot, uint32_t *total, uint32_t *bin,
                                            uint32_t *above) {
    const int tid = threadIdx.x;
    uint32_t c[4], loc = 0;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int b = nbins - 1 - (4 * tid + j);
        c[j] = b >= 0 ? hist[b] : 0;
        loc += c[j];
    }
    uint32_t cum = tk_block_excl_scan(loc, warp_tot, total);
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int b = nbins - 1 - (4 * tid + j);
        if (b >= 0 && cum < need && cum + c[j] >= need) {
            *bin = (uint32_t)b;
            *above = cum;
        }
        cum += c[j];
    }
    __syncthreads();
}

template <bool GATHER>
__global__ void __launch_bounds__(TK_THREADS) tk_kernel(la_sp_topk_args a) {
    extern __shared__ uint64_t tk_buf[];
    __shared__ uint32_t hist[2048];
    __shared__ uint32_t warp_tot[TK_THREADS / 32];
    __shared__ uint32_t s_total, s_above, s_bin, s_nA, s_nC;

    const int64_t r = blockIdx.x;
    const int tid = threadIdx.x;
    int64_t lo = 0, hi = a.L;
    if (a.use_range) la_sp_row_range(a.range, r, &lo, &hi);
    const float *row = a.scores + r * a.ld;
    const int32_t *blocks = GATHER ? a.blocks + r * a.blocks_ld : nullptr;
    int32_t *out = a.out + r * a.out_ld;

    auto token_of = [&](int64_t p) -> uint32_t {
        if (GATHER) { /* columns < 2^31: 32-bit division */
            const uint32_t pu = (uint32_t)p, Bu = (uint32_t)a.B, bi = pu / Bu;
            return (uint32_t)blocks[bi] * Bu + (pu - bi * Bu);
        }
        return (uint32_t)p;
    };

    uint64_t prefix = 0, mask = 0;
    uint32_t need = 0, kk = 0, cnt = 0;
    const int shifts[6] = {53, 42, 31, 20, 9, 0};
    const int widths[6] = {11, 11, 11, 11, 11, 9};
    int pass = 0;
    uint64_t *cand = tk_buf + LA_SP_TOPK_MAX;
    bool fast_ok = false;
    /* Sampled threshold (long rows): the score of sample rank r, chosen so
     * that about 1.5k + 256 keys of the row lie above it, filters the row in
     * ONE pass into shared memory; the exact selection then runs there. If
     * the guess misses (fewer than k above, or more than TK_CAP), fall back
     * to the radix passes over the row. */
    const int64_t nrow = hi - lo;
    if (nrow >= 4 * TK_SAMPLE && a.k * 2 <= nrow) {
        uint32_t *samp = (uint32_t *)cand;
        for (int i = tid; i < TK_SAMPLE; i += TK_THREADS) {
            const int64_t p = lo + ((int64_t)i * nrow) / TK_SAMPLE;
            const float f = row[p * a.cs];
            samp[i] = tk_valid(f) ? tk_fkey(f) : 0u;
        }
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        for (int i = tid; i < TK_SAMPLE; i += TK_THREADS)
            if (samp[i]) atomicAdd(&hist[samp[i] >> 21], 1u);
        __syncthreads();
        uint32_t vs = 0;
        for (int i = tid; i < 2048; i += TK_THREADS) vs += hist[i];
        vs = __reduce_add_sync(0xffffffffu, vs);
        if ((tid & 31) == 0) warp_tot[tid >> 5] = vs;
        __syncthreads();
        vs = 0;
        for (int w = 0; w < TK_THREADS / 32; w++) vs += warp_tot[w];
        __syncthreads();
        const uint32_t r = (uint32_t)(((double)a.k * 1.5 + 256.0) * TK_SAMPLE / (double)nrow) + 1;
        if (r < vs) {
            tk_find_bin(hist, 2048, r, warp_tot, &s_total, &s_bin, &s_above);
            const uint32_t b1 = s_bin, r2 = r - s_above;
            for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
            __syncthreads();
            for (int i = tid; i < TK_SAMPLE; i += TK_THREADS)
                if (samp[i] && (samp[i] >> 21) == b1) atomicAdd(&hist[(samp[i] >> 10) & 2047u], 1u);
            __syncthreads();
            tk_find_bin(hist, 2048, r2, warp_tot, &s_total, &s_bin, &s_above);
            const uint32_t tau = (b1 << 21) | (s_bin << 10);
            if (tid == 0) {
                s_nA = 0;
                s_nC = 0;
            }
            __syncthreads();
            uint32_t nvalid = 0;
            const int lane = tid & 31;
            tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
                bool in = false;
                uint32_t u = 0;
                if (tk_valid(f)) {
                    nvalid++;
                    u = tk_fkey(f);
                    in = u >= tau;
                }
                const unsigned am = __activemask();
                const unsigned bi = __ballot_sync(am, in);
                if (!bi) return;
                const int leader = __ffs(am) - 1;
                uint32_t b0 = 0;
                if (lane == leader) b0 = atomicAdd(&s_nC, (uint32_t)__popc(bi));
                b0 = __shfl_sync(am, b0, leader) + __popc(bi & ((1u << lane) - 1u));
                if (in && b0 < TK_CAP) cand[b0] = ((uint64_t)u << 32) | (uint32_t)~token_of(p);
            });
            nvalid = __reduce_add_sync(0xffffffffu, nvalid);
            if (lane == 0) warp_tot[tid >> 5] = nvalid;
            __syncthreads();
            nvalid = 0;
            for (int w = 0; w < TK_THREADS / 32; w++) nvalid += warp_tot[w];
            kk = (uint32_t)min((int64_t)nvalid, a.k);
            const uint32_t nin = s_nC;
            __syncthreads();
            if (kk == 0) {
                for (int64_t i = tid; i < a.k; i += TK_THREADS) out[i * a.out_cs] = -1;
                return;
            }
            if (nin >= kk && nin <= TK_CAP) {
                fast_ok = true;
                need = kk;
                cnt = nin;
            }
        }
    }
    if (!fast_ok) {
    /* global passes: narrow the k-th key's bin until it fits in shared memory */
    for (; pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        const uint64_t pm = mask, pp = prefix;
        const bool score_digit = sh >= 32; /* digit and prefix within the score bits */
        const uint32_t pm32 = (uint32_t)(pm >> 32), pp32 = (uint32_t)(pp >> 32);
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            if (!tk_valid(f)) return;
            uint32_t bin;
            if (score_digit) {
                const uint32_t u = tk_fkey(f);
                if ((u & pm32) != pp32) return;
                bin = (u >> (sh - 32)) & (uint32_t)(nbins - 1);
            } else {
                uint64_t key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
                if ((key & pm) != pp) return;
                bin = (uint32_t)(key >> sh) & (uint32_t)(nbins - 1);
            }
            /* many scores share the first digit: aggregate equal bins of a warp */
            uint32_t peers = __match_any_sync(__activemask(), bin);
            if ((threadIdx.x & 31) == (__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
        });
        __syncthreads();
        if (pass == 0) {
            uint32_t tot = 0;
            for (int i = tid; i < 2048; i += TK_THREADS) tot += hist[i];
            tot = __reduce_add_sync(0xffffffffu, tot);
            if ((tid & 31) == 0) warp_tot[tid >> 5] = tot;
            __syncthreads();
            if (tid == 0) {
                uint32_t t = 0;
                for (int w = 0; w < TK_THREADS / 32; w++) t += warp_tot[w];
                s_total = t;
            }
            __syncthreads();
            kk = (uint32_t)min((int64_t)s_total, a.k);
            need = kk;
            if (kk == 0) break;
        }
        tk_find_bin(hist, nbins, need, warp_tot, &s_total, &s_bin, &s_above);
        const uint32_t bin = s_bin;
        need -= s_above;
        prefix |= (uint64_t)bin << sh;
        mask |= (uint64_t)(nbins - 1) << sh;
        cnt = hist[bin];
        __syncthreads(); /* hist is cleared at the next pass */
        if (cnt <= TK_CAP) {
            pass++;
            break;
        }
    }
    if (kk == 0) {
        for (int64_t i = tid; i < a.k; i += TK_THREADS) out[i * a.out_cs] = -1;
        return;
    }
    /* collect: keys above the bin (exactly kk - need of them) to buf[0..),
     * the bin's members to cand[0..cnt) */
    if (tid == 0) {
        s_nA = 0;
        s_nC = 0;
    }
    __syncthreads();
    {
        const uint64_t pm = mask, pp = prefix;
        const int lane = tid & 31;
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            bool ab = false, cd = false;
            uint64_t key = 0;
            if (tk_valid(f)) {
                key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
                const uint64_t mk = key & pm;
                ab = mk > pp;
                cd = mk == pp;
            }
            const unsigned am = __activemask();
            const unsigned ba = __ballot_sync(am, ab), bc = __ballot_sync(am, cd);
            if (!(ba | bc)) return;
            const int leader = __ffs(am) - 1;
            uint32_t b0 = 0, b1 = 0;
            if (lane == leader) {
                if (ba) b0 = atomicAdd(&s_nA, (uint32_t)__popc(ba));
                if (bc) b1 = atomicAdd(&s_nC, (uint32_t)__popc(bc));
            }
            b0 = __shfl_sync(am, b0, leader);
            b1 = __shfl_sync(am, b1, leader);
            const unsigned lt = (1u << lane) - 1u;
            if (ab) tk_buf[b0 + __popc(ba & lt)] = key;
            if (cd) cand[b1 + __popc(bc & lt)] = key;
        });
    }
    __syncthreads();
    } /* !fast_ok */
    /* refine inside shared memory until every remaining candidate is taken */
    uint32_t nc = cnt;
    for (; need < nc && pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        for (uint32_t i = tid; i < nc; i += TK_THREADS)
            atomicAdd(&hist[(uint32_t)(cand[i] >> sh) & (uint32_t)(nbins - 1)], 1u);
        __syncthreads();
        tk_find_bin(hist, nbins, need, warp_tot, &s_total, &s_bin, &s_above);
        const uint32_t bin = s_bin;
        need -= s_above;
        uint64_t r[TK_CAP / TK_THREADS];
#pragma unroll
        for (int j = 0; j < TK_CAP / TK_THREADS; j++) {
            const uint32_t i = tid + j * TK_THREADS;
            r[j] = i < nc ? cand[i] : 0;
        }
        if (tid == 0) s_nC = 0;
        __syncthreads();
#pragma unroll
        for (int j = 0; j < TK_CAP / TK_THREADS; j++) {
            const uint32_t i = tid + j * TK_THREADS;
            if (i >= nc) continue;
            const uint32_t d = (uint32_t)(r[j] >> sh) & (uint32_t)(nbins - 1);
            if (d > bin) tk_buf[atomicAdd(&s_nA, 1u)] = r[j];
            else if (d == bin) cand[atomicAdd(&s_nC, 1u)] = r[j];
        }
        __syncthreads();
        nc = s_nC;
    }
    /* all nc remaining candidates are selected: append them */
    const uint32_t nA = s_nA;
    for (uint32_t i = tid; i < nc; i += TK_THREADS) tk_buf[nA + i] = cand[i];
    const uint32_t n = kk;
    uint32_t n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (uint32_t i = n + tid; i < n2; i += TK_THREADS) tk_buf[i] = 0;
    __syncthreads();
    /* bitonic sort of the kk selected keys, descending */
    for (uint32_t size = 2; size <= n2; size <<= 1) {
        for (uint32_t stride = size >> 1; stride > 0; stride >>= 1) {
            for (uint32_t i = tid; i < n2 / 2; i += TK_THREADS) {
                uint32_t pos = 2 * i - (i & (stride - 1));
                uint64_t x = tk_buf[pos], y = tk_buf[pos + stride];
                bool desc = (pos & size) == 0;
                if ((x < y) == desc) {
                    tk_buf[pos] = y;
                    tk_buf[pos + stride] = x;
                }
            }
            __syncthreads();
        }
    }
    for (int64_t i = tid; i < a.k; i += TK_THREADS)
        out[i * a.out_cs] = i < (int64_t)kk ? (int32_t)~(uint32_t)tk_buf[i] : -1;
}

la_status la_sp_topk(const la_sp_topk_args &a, cudaStream_t s) {
    if (a.k > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: k=%lld exceeds the CUDA top-k maximum %d",
                      (long long)a.k, LA_SP_TOPK_MAX);
    if (a.L > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: row length %lld exceeds int32", (long long)a.L);
    if (a.R == 0 || a.k == 0) return LA_OK;
    if (a.R > INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: %lld rows exceed the grid", (long long)a.R);
    const size_t smem = TK_BUF * sizeof(uint64_t);
    if (a.blocks) {
        LA_CU(cudaFuncSetAttribute(tk_kernel<true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
        tk_kernel<true><<<(unsigned)a.R, TK_THREADS, smem, s>>>(a);
    } else {
        LA_CU(cudaFuncSetAttribute(tk_kernel<false>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
        tk_kernel<false><<<(unsigned)a.R, TK_THREADS, smem, s>>>(a);
    }
    LA_CU_LAUNCH("topk");
    return LA_OK;
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
    LA_TRY(la_sp_topk(a, la_cu_stream(ctx)));
    la_err_clear();
    return LA_OK;
}
