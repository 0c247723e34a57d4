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
#define TK_CAP (TK_BUF - LA_SP_TOPK_MAX)    /* members of the final bin     */

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
        if (GATHER) return (uint32_t)(blocks[p / a.B] * a.B + (int32_t)(p % a.B));
        return (uint32_t)p;
    };

    uint64_t prefix = 0, mask = 0;
    uint32_t need = 0, kk = 0, cnt = 0;
    const int shifts[6] = {53, 42, 31, 20, 9, 0};
    const int widths[6] = {11, 11, 11, 11, 11, 9};
    for (int pass = 0; pass < 6; pass++) {
        const int sh = shifts[pass], nbins = 1 << widths[pass];
        for (int i = tid; i < 2048; i += TK_THREADS) hist[i] = 0;
        __syncthreads();
        const uint64_t pm = mask, pp = prefix;
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            if (!tk_valid(f)) return;
            uint64_t key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
            if ((key & pm) != pp) return;
            uint32_t bin = (uint32_t)(key >> sh) & (uint32_t)(nbins - 1);
            /* many scores share the first digit: aggregate equal bins of a warp */
            uint32_t peers = __match_any_sync(__activemask(), bin);
            if ((threadIdx.x & 31) == (__ffs(peers) - 1)) atomicAdd(&hist[bin], __popc(peers));
        });
        __syncthreads();
        /* thread i owns bins nbins-1-4i .. nbins-4-4i (descending) */
        uint32_t c[4], loc = 0;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int b = nbins - 1 - (4 * tid + j);
            c[j] = b >= 0 ? hist[b] : 0;
            loc += c[j];
        }
        uint32_t excl = tk_block_excl_scan(loc, warp_tot, &s_total);
        if (pass == 0) {
            kk = (uint32_t)min((int64_t)s_total, a.k);
            need = kk;
            if (kk == 0) break;
        }
        uint32_t cum = excl;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int b = nbins - 1 - (4 * tid + j);
            if (b >= 0 && cum < need && cum + c[j] >= need) {
                s_bin = (uint32_t)b;
                s_above = cum;
            }
            cum += c[j];
        }
        __syncthreads();
        const uint32_t bin = s_bin;
        need -= s_above;
        prefix |= (uint64_t)bin << sh;
        mask |= (uint64_t)(nbins - 1) << sh;
        cnt = hist[bin];
        __syncthreads(); /* hist is cleared at the next pass */
        if (cnt <= TK_CAP) break;
    }
    if (kk == 0) {
        for (int64_t i = tid; i < a.k; i += TK_THREADS) out[i * a.out_cs] = -1;
        return;
    }
    /* collect: keys above the bin go to [0, nA), the bin's members after them */
    const uint32_t nA = kk - need;
    if (tid == 0) {
        s_nA = 0;
        s_nC = 0;
    }
    __syncthreads();
    {
        const uint64_t pm = mask, pp = prefix;
        tk_scan(row, a.cs, lo, hi, [&](int64_t p, float f) {
            if (!tk_valid(f)) return;
            uint64_t key = ((uint64_t)tk_fkey(f) << 32) | (uint32_t)~token_of(p);
            uint64_t mk = key & pm;
            if (mk > pp) {
                uint32_t pos = atomicAdd(&s_nA, 1u);
                tk_buf[pos] = key;
            } else if (mk == pp) {
                uint32_t pos = atomicAdd(&s_nC, 1u);
                tk_buf[nA + pos] = key;
            }
        });
    }
    __syncthreads();
    const uint32_t n = nA + cnt;
    uint32_t n2 = 1;
    while (n2 < n) n2 <<= 1;
    for (uint32_t i = n + tid; i < n2; i += TK_THREADS) tk_buf[i] = 0;
    __syncthreads();
    /* bitonic sort, descending; only the first kk matter but the bin is
     * unordered, so sort all n */
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
