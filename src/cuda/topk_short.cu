/* The short-row top-k kernel (variant "short" of family "topk"; the
 * algorithm is described in topk_short.cuh, whose text
 * dev/emu_topk_short.cpp also runs on the host): one CTA of 1024 threads
 * per row, rows of at most TS_LMAX columns, column stride and gather mode
 * (HISA's token blocks) as la_sp_topk_args gives them. */
#include "cuda_ops.h"

#include "topk_common.cuh"

#define LA_TS_KERNELS
#include "topk_short.cuh"

template <bool GATHER>
__global__ void __launch_bounds__(TS_NT, 1) ts_kernel(la_sp_topk_args a) {
    extern __shared__ __align__(16) unsigned char ts_dyn_smem[];
    la_pdl_wait(); /* a.pdl: after the score kernel (a no-op for a normal launch) */
    ts_smem &S = *(ts_smem *)ts_dyn_smem;
    const int64_t rw = blockIdx.x;
    int64_t lo = 0, hi = a.L;
    if (a.use_range) la_sp_row_range(a.range, rw, &lo, &hi);
    ts_row r;
    r.row = a.scores + rw * a.ld;
    r.cs = a.cs;
    r.lo = lo;
    r.hi = hi;
    r.blocks = GATHER ? a.blocks + rw * a.blocks_ld : nullptr;
    r.B = a.B;
    r.k = (uint32_t)a.k;
    r.out = a.out + rw * a.out_ld;
    r.out_cs = a.out_cs;
    ts_topk_row<GATHER>(r, S);
}

template <bool GATHER>
static la_status ts_launch(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s) {
    const size_t smem = sizeof(ts_smem);
    LA_TRY(la_cu_func_smem(ctx, (const void *)ts_kernel<GATHER>, smem, smem, true));
    LA_CU(la_cu_launch_pdl(a.pdl != 0, ts_kernel<GATHER>, dim3((unsigned)a.R), dim3(TS_NT), smem, s, a));
    LA_CU_LAUNCH("topk short");
    return LA_OK;
}

la_status la_sp_topk_short(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s) {
    return a.blocks ? ts_launch<true>(a, ctx, s) : ts_launch<false>(a, ctx, s);
}

/* two rows per SM: the SM count asked per call (la_cu_device_attr) */
int la_sp_topk_short_rows_max() { return 2 * la_cu_device_attr(cudaDevAttrMultiProcessorCount, 132); }
