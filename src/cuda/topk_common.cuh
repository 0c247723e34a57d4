/* Shared pieces of the two top-k kernels (topk.cu: t3_kernel, the default;
 * topk_portable.cu: tk_kernel_old): sortable keys, the row scan, block scans,
 * the radix bin search, the token of a column. Internal. */
#ifndef LA_CUDA_TOPK_COMMON_CUH
#define LA_CUDA_TOPK_COMMON_CUH

#include "sparse_common.cuh"

#define TK_THREADS 512
#define TK_BUF 8192                         /* sort buffer, 64-bit keys (64 KB) */
#define TK_SAMPLE 2048                      /* sampled keys for the threshold guess */
#define TK_CAP (TK_BUF - LA_SP_TOPK_MAX)    /* members of the final bin (multiple of TK_THREADS) */

/* TK_KEYS_BEGIN (dev/emu_topk_short.sh cuts the keys and the token map for the host emulation) */
/* Sortable key of a score: order-preserving on the floats, every NaN mapped
 * to the largest key (above +inf), so that NaN ranks first as in
 * torch.topk; several NaN tie and go to the lower index like equal scores.
 * -inf is not a candidate (masked columns). */
#define TK_KEY_NAN 0xFFFFFFFFu
/* The order-preserving map alone (no NaN rule): NaN lands by its sign bit. */
__device__ __forceinline__ uint32_t tk_rawkey(float f) {
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ uint32_t tk_fkey(float f) { return f != f ? TK_KEY_NAN : tk_rawkey(f); }
__device__ __forceinline__ bool tk_valid(float f) { return f != -INFINITY; }
/* Token of column p: p itself, or in gather mode (HISA candidates) token
 * blocks[p / B]·B + p % B (columns < 2^31: 32-bit division). */
template <bool GATHER>
__device__ __forceinline__ uint32_t tk_token(const int32_t *blocks, int B, int64_t p) {
    if (GATHER) {
        const uint32_t pu = (uint32_t)p, Bu = (uint32_t)B, bi = pu / Bu;
        return (uint32_t)blocks[bi] * Bu + (pu - bi * Bu);
    }
    return (uint32_t)p;
}
/* TK_KEYS_END */

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


/* The radix-select kernel ("portable" of family "topk"). */
la_status la_sp_topk_portable(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s);

#endif
