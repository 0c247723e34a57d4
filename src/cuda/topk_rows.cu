/* Launcher of the many-CTA exact top-k of few long rows (topk_rows.cuh). */
#include "cuda/common.cuh"
#define LA_TR_KERNELS
#include "cuda/topk_rows.cuh"

/* hist CTAs per row: about two per SM over all rows (two 64 KB
 * histograms of 512 threads fit an SM), each a whole number of TR_HSTEP
 * steps, so one wave reads the rows once */
static la_status tr_hist_chunk(int64_t T, int64_t W, int64_t *chunk) {
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const int64_t per_row = T < 2 * (int64_t)nsm ? 2 * (int64_t)nsm / T : 1;
    *chunk = la_cu_cdiv(la_cu_cdiv(W > 0 ? W : 1, per_row), TR_HSTEP) * TR_HSTEP;
    return LA_OK;
}

la_status la_tr_launch(const la_tr_args &args, const la_context *ctx, cudaStream_t s) {
    if (args.T == 0) return LA_OK;
    if (args.T > 65535 || args.k < 1 || args.k > TR_KMAX || args.W > (int64_t)INT32_MAX ||
        (args.to_slots && (args.ps < 1 || args.ps > (int64_t)INT32_MAX))) /* tr_final_row's 32-bit slot division */
        return la_err(LA_ERR_UNSUPPORTED, "topk rows: T=%lld k=%d W=%lld outside the kernel's range",
                      (long long)args.T, (int)args.k, (long long)args.W);
    la_tr_args a = args;
    LA_TRY(tr_hist_chunk(a.T, a.W, &a.hchunk));
    const unsigned W1 = (unsigned)(a.W > 0 ? a.W : 1);
    LA_TRY(la_cu_func_smem(ctx, (const void *)tr_hist_kernel, TR_HIST_SMEM, TR_HIST_SMEM, true));
    tr_hist_kernel<<<dim3((unsigned)la_cu_cdiv(W1, a.hchunk), (unsigned)a.T), TR_HNT, TR_HIST_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: histograms");
    tr_collect_kernel<<<dim3((unsigned)la_cu_cdiv(W1, TR_CHUNK), (unsigned)a.T), TR_CNT, TR_COLLECT_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: candidates");
    LA_TRY(la_cu_func_smem(ctx, (const void *)tr_final_kernel, TR_FINAL_SMEM, TR_FINAL_SMEM, true));
    tr_final_kernel<<<(unsigned)a.T, TR_NT, TR_FINAL_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: selection");
    return LA_OK;
}
