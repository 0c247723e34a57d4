/* Paged indexer key cache on CUDA, the cache itself (docs/SPARSE.md
 * "Paged serving"): allocation, appends (store: one block per token; amax by
 * a block reduction, scale amax/448, e4m3 rounding to nearest even as
 * la_f32_to_e4m3), pooled sums (one block per (sequence, block) group of an
 * append, its tokens added in batch (= position) order in fp32 as on the
 * CPU), gathers, the finite check and the status mirror. The indexers over
 * it are paged_index.cu. */
#include <stdlib.h>
#include <string.h>

#include "core/devmem.h"
#include "cuda/common.cuh"
#include "cuda/paged_common.cuh"
#include "cuda/paged_index.cuh"

namespace {

__global__ void pg_finite_kernel(la_cu_view k, int64_t n, int64_t dI, unsigned long long *flag) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * dI; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t r = i / dI, d = i % dI;
        const float x = la_cu_ld(k.data, k.dt, r * k.nb[0] + d * k.nb[1]);
        if (!isfinite(x)) atomicMin(flag, (unsigned long long)i);
    }
}

__global__ void pg_store_kernel(pg_cache C, unsigned char *pages, la_cu_view k, const int32_t *slots, int64_t n) {
    const int64_t i = blockIdx.x;
    const int64_t slot = slots[i];
    if (slot < 0) return;
    const int64_t dI = C.dI, page = slot / C.ps, off = slot % C.ps;
    unsigned char *pg = pages + page * C.page_bytes;
    __shared__ float red[128];
    float amax = 0.f;
    for (int64_t d = threadIdx.x; d < dI; d += blockDim.x)
        amax = fmaxf(amax, fabsf(la_cu_ld(k.data, k.dt, i * k.nb[0] + d * k.nb[1])));
    red[threadIdx.x] = amax;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) red[threadIdx.x] = fmaxf(red[threadIdx.x], red[threadIdx.x + s]);
        __syncthreads();
    }
    amax = red[0];
    const float scale = amax > 0.f ? amax / 448.f : 1.f;
    for (int64_t d = threadIdx.x; d < dI; d += blockDim.x) {
        const float x = la_cu_ld(k.data, k.dt, i * k.nb[0] + d * k.nb[1]);
        if (C.dt == LA_FP8_E4M3) pg[off * dI + d] = (unsigned char)pg_to_e4m3(x / scale);
        else if (C.dt == LA_BF16) ((__nv_bfloat16 *)pg)[off * dI + d] = __float2bfloat16_rn(x);
        else ((float *)pg)[off * dI + d] = x;
    }
    if (C.dt == LA_FP8_E4M3 && threadIdx.x == 0) *(float *)(pg + C.ps * dI + off * 4) = scale;
}

/* group g: tokens order[gs[g] .. gs[g+1]) of one (sequence, block), in batch order */
__global__ void pg_pool_kernel(pg_cache C, float *psum, int32_t *pcount, int64_t max_blocks, int64_t B,
                               const int32_t *slots, const int32_t *seq, const int32_t *pos, const int32_t *order,
                               const int32_t *gs) {
    const int g = blockIdx.x;
    const int64_t t0 = order[gs[g]], at = (int64_t)seq[t0] * max_blocks + pos[t0] / B;
    float *sum = psum + at * C.dI;
    /* the device copy of the host-validated count: the group's last position + 1 */
    if (threadIdx.x == 0) pcount[at] = pos[order[gs[g + 1] - 1]] % (int32_t)B + 1;
    for (int64_t d = threadIdx.x; d < C.dI; d += blockDim.x) {
        float s = sum[d];
        for (int j = gs[g]; j < gs[g + 1]; j++) {
            const int64_t t = order[j];
            if (pos[t] % B == 0) s = 0.f;
            s += pg_load(C, slots[t], d);
        }
        sum[d] = s;
    }
}

__global__ void pg_gather_kernel(pg_cache C, const int32_t *pages, int64_t len, float *out, int64_t ld0, int64_t ld1) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < len * C.dI; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t p = i / C.dI, d = i % C.dI;
        out[p * ld0 + d * ld1] = pg_load(C, (int64_t)pages[p / C.ps] * C.ps + p % C.ps, d);
    }
}

/* Block means kbar [nseq][nbmax][dI]: pooled sum / count, or summed from the pages in position order. */
la_status pg_upload(la_cu_ws *w, const void *h, size_t bytes, cudaStream_t s, const char *what) {
    LA_TRY(la_cu_ws_alloc(w, bytes, s, what));
    LA_CU(cudaMemcpyAsync(w->p, h, bytes, cudaMemcpyHostToDevice, s));
    return LA_OK;
}

}  // namespace

extern "C" la_status la_paged_alloc_cuda(la_paged_index_cache *c, size_t pages_bytes, size_t sum_bytes,
                                         size_t cnt_bytes) {
    void *p = nullptr;
    LA_TRY(la_dev_malloc(&p, pages_bytes));
    c->pages = (unsigned char *)p;
    LA_CU(cudaMemset(p, 0, pages_bytes));
    if (sum_bytes) {
        void *q = nullptr;
        LA_TRY(la_dev_malloc(&q, sum_bytes));
        c->psum = (float *)q;
        LA_CU(cudaMemset(q, 0, sum_bytes));
        LA_TRY(la_dev_malloc(&q, cnt_bytes));
        c->pcount_dev = (int32_t *)q;
        LA_CU(cudaMemset(q, 0, cnt_bytes));
    }
    void *st = nullptr;
    LA_TRY(la_dev_malloc(&st, LA_PG_STATUS_WORDS * 4));
    c->status_dev = (int32_t *)st;
    LA_CU(cudaMemset(st, 0, LA_PG_STATUS_WORDS * 4));
    LA_CU(cudaHostAlloc(&st, LA_PG_STATUS_WORDS * 4, cudaHostAllocMapped));
    c->status_host = (int32_t *)st;
    memset(st, 0, LA_PG_STATUS_WORDS * 4);
    void *mirror = nullptr;
    LA_CU(cudaHostGetDevicePointer(&mirror, st, 0));
    c->status_mirror = (int32_t *)mirror;
    return LA_OK;
}

extern "C" void la_paged_free_cuda(la_paged_index_cache *c) {
    if (c->pages) cudaFree(c->pages);
    if (c->psum) cudaFree(c->psum);
    if (c->pcount_dev) cudaFree(c->pcount_dev);
    if (c->status_dev) cudaFree(c->status_dev);
    if (c->status_host) cudaFreeHost(c->status_host);
    c->pages = nullptr;
    c->psum = nullptr;
    c->pcount_dev = c->status_dev = c->status_host = c->status_mirror = nullptr;
}

extern "C" la_status la_paged_check_finite_cuda(const la_tensor *k, la_context *ctx) {
    cudaStream_t s = la_cu_stream(ctx);
    const int64_t n = k->ne[0], dI = k->ne[1];
    la_cu_ws flag;
    LA_TRY(la_cu_ws_alloc(&flag, 8, s, "finite check"));
    LA_CU(cudaMemsetAsync(flag.p, 0xff, 8, s));
    int64_t blocks = la_cu_cdiv(n * dI, 256);
    if (blocks > 4096) blocks = 4096;
    pg_finite_kernel<<<(unsigned)(blocks > 0 ? blocks : 1), 256, 0, s>>>(la_cu_view_of(k), n, dI,
                                                                       (unsigned long long *)flag.p);
    LA_CU_LAUNCH("paged finite check");
    unsigned long long h = 0;
    LA_CU(cudaMemcpyAsync(&h, flag.p, 8, cudaMemcpyDeviceToHost, s));
    LA_CU(cudaStreamSynchronize(s));
    if (h == ~0ull) return LA_OK;
    return la_err(LA_ERR_ARG, "k: k[%lld][%lld] is not finite (a cached key and its fp8 scale must be finite)",
                  (long long)(h / (unsigned long long)dI), (long long)(h % (unsigned long long)dI));
}

extern "C" la_status la_paged_store_cuda(la_paged_index_cache *c, const la_tensor *k, const int32_t *slots,
                                         const int32_t *seq, const int32_t *pos, int64_t n, la_context *ctx) {
    if (n == 0) return LA_OK;
    cudaStream_t s = la_cu_stream(ctx);
    const pg_cache C = pg_of(c);
    la_cu_ws ds, dq, dp, dorder, dgs;
    LA_TRY(pg_upload(&ds, slots, (size_t)n * 4, s, "slot mapping"));
    pg_store_kernel<<<(unsigned)n, 128, 0, s>>>(C, c->pages, la_cu_view_of(k), (const int32_t *)ds.p, n);
    LA_CU_LAUNCH("paged store");
    if (!seq) return LA_OK;
    /* groups of tokens by (sequence, block), batch order kept inside a group */
    int64_t *key = (int64_t *)malloc(sizeof(int64_t) * (size_t)n * 2);
    int32_t *order = (int32_t *)malloc(sizeof(int32_t) * (size_t)n), *gs = (int32_t *)malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (!key || !order || !gs) {
        free(key), free(order), free(gs);
        return la_err(LA_ERR_NOMEM, "paged (cuda): out of memory grouping %lld tokens", (long long)n);
    }
    int64_t m = 0;
    for (int64_t i = 0; i < n; i++)
        if (slots[i] >= 0) {
            key[2 * m] = (int64_t)seq[i] * c->max_blocks + pos[i] / c->p.block;
            key[2 * m + 1] = i;
            m++;
        }
    qsort(key, (size_t)m, 2 * sizeof(int64_t), [](const void *a, const void *b) -> int {
        const int64_t *x = (const int64_t *)a, *y = (const int64_t *)b;
        if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
        return (x[1] > y[1]) - (x[1] < y[1]);
    });
    int64_t ng = 0;
    for (int64_t i = 0; i < m; i++) {
        order[i] = (int32_t)key[2 * i + 1];
        if (i == 0 || key[2 * i] != key[2 * i - 2]) gs[ng++] = (int32_t)i;
    }
    gs[ng] = (int32_t)m;
    la_status st = LA_OK;
    if (ng > 0) {
        st = pg_upload(&dq, seq, (size_t)n * 4, s, "seq_ids");
        if (st == LA_OK) st = pg_upload(&dp, pos, (size_t)n * 4, s, "positions");
        if (st == LA_OK) st = pg_upload(&dorder, order, (size_t)m * 4, s, "token order");
        if (st == LA_OK) st = pg_upload(&dgs, gs, (size_t)(ng + 1) * 4, s, "groups");
        if (st == LA_OK) {
            pg_pool_kernel<<<(unsigned)ng, 128, 0, s>>>(C, c->psum, c->pcount_dev, c->max_blocks, c->p.block,
                                                        (const int32_t *)ds.p,
                                                        (const int32_t *)dq.p, (const int32_t *)dp.p,
                                                        (const int32_t *)dorder.p, (const int32_t *)dgs.p);
            cudaError_t e = cudaGetLastError();
            if (e != cudaSuccess) st = la_err(LA_ERR_DEVICE, "CUDA: launch of paged pooling failed (%s)", cudaGetErrorString(e));
        }
    }
    free(key), free(order), free(gs);
    if (st == LA_OK) LA_CU(cudaStreamSynchronize(s)); /* the host arrays and uploads end here */
    return st;
}

extern "C" la_status la_paged_gather_cuda(const la_paged_index_cache *c, const int32_t *pages, int64_t len,
                                          la_tensor *out, la_context *ctx) {
    cudaStream_t s = la_cu_stream(ctx);
    la_cu_ws dp;
    LA_TRY(pg_upload(&dp, pages, (size_t)la_cu_cdiv(len, c->p.page_size) * 4, s, "page list"));
    int64_t blocks = la_cu_cdiv(len * c->p.head_dim, 256);
    if (blocks > 8192) blocks = 8192;
    pg_gather_kernel<<<(unsigned)blocks, 256, 0, s>>>(pg_of(c), (const int32_t *)dp.p, len, (float *)out->data,
                                                      out->nb[0], out->nb[1]);
    LA_CU_LAUNCH("paged gather");
    LA_CU(cudaStreamSynchronize(s));
    return LA_OK;
}

extern "C" la_status la_paged_pooled_cuda(const la_paged_index_cache *c, int64_t seq, int64_t len, la_tensor *out,
                                          la_context *ctx) {
    cudaStream_t s = la_cu_stream(ctx);
    const int64_t B = c->p.block, dI = c->p.head_dim, nb = la_cu_cdiv(len, B);
    float *h = (float *)malloc(sizeof(float) * (size_t)(nb * dI));
    if (!h) return la_err(LA_ERR_NOMEM, "paged (cuda): out of memory");
    cudaError_t e = cudaMemcpy(h, c->psum + seq * c->max_blocks * dI, sizeof(float) * (size_t)(nb * dI),
                               cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(h);
        return la_err(LA_ERR_DEVICE, "CUDA: pooled sums copy failed (%s)", cudaGetErrorString(e));
    }
    for (int64_t b = 0; b < nb; b++) {
        const int64_t cnt = len - b * B < B ? len - b * B : B;
        for (int64_t d = 0; d < dI; d++) h[b * dI + d] = la_idx_block_mean(h[b * dI + d], cnt);
    }
    la_status st = LA_OK;
    for (int64_t b = 0; b < nb && st == LA_OK; b++) {
        e = cudaMemcpy2DAsync((float *)out->data + b * out->nb[0], (size_t)out->nb[1] * 4, h + b * dI, 4, 4, (size_t)dI,
                              cudaMemcpyHostToDevice, s);
        if (e != cudaSuccess) st = la_err(LA_ERR_DEVICE, "CUDA: pooled means copy failed (%s)", cudaGetErrorString(e));
    }
    e = cudaStreamSynchronize(s);
    free(h);
    if (st == LA_OK && e != cudaSuccess) st = la_err(LA_ERR_DEVICE, "CUDA: %s", cudaGetErrorString(e));
    return st;
}

extern "C" la_status la_paged_status_cuda(const la_paged_index_cache *c, int wait, int32_t *out, la_context *ctx) {
    cudaStream_t s = la_cu_stream(ctx);
    out[0] = 0;
    if (!wait && !((volatile const int32_t *)c->status_host)[0]) return LA_OK;
    LA_CU(cudaStreamSynchronize(s)); /* every earlier call's checks are done */
    LA_CU(cudaMemcpy(out, c->status_dev, LA_PG_STATUS_WORDS * 4, cudaMemcpyDeviceToHost));
    LA_CU(cudaMemset(c->status_dev, 0, LA_PG_STATUS_WORDS * 4));
    memset(c->status_host, 0, LA_PG_STATUS_WORDS * 4);
    return LA_OK;
}
