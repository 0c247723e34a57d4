/* Launcher of the many-CTA exact top-k of few long rows (topk_rows.cuh). */
#include "cuda/common.cuh"
#define LA_TR_KERNELS
#include "cuda/topk_rows.cuh"

la_status la_tr_launch(const la_tr_args &a, const la_context *ctx, cudaStream_t s) {
    if (a.T == 0) return LA_OK;
    if (a.T > 65535 || a.k < 1 || a.k > TR_KMAX || a.W > (int64_t)INT32_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk rows: T=%lld k=%d W=%lld outside the kernel's range", (long long)a.T,
                      (int)a.k, (long long)a.W);
    tr_thresh_kernel<<<(unsigned)a.T, TR_NT, TR_THRESH_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: thresholds");
    const dim3 grid((unsigned)la_cu_cdiv(a.W > 0 ? a.W : 1, TR_CHUNK), (unsigned)a.T);
    tr_collect_kernel<<<grid, TR_CNT, TR_COLLECT_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: candidates");
    LA_TRY(la_cu_func_smem(ctx, (const void *)tr_final_kernel, TR_FINAL_SMEM, TR_FINAL_SMEM, true));
    tr_final_kernel<<<(unsigned)a.T, TR_NT, TR_FINAL_SMEM, s>>>(a);
    LA_CU_LAUNCH("topk rows: selection");
    return LA_OK;
}
