/* Launcher of the group-maxima top-k of paged DSA decode (topk_groups.cuh). */
#include "cuda/common.cuh"
#define LA_TR_HELPERS
#include "cuda/topk_groups.cuh"

la_status la_tg_launch(const la_tg_args &args, const la_context *ctx, cudaStream_t s) {
    const la_tr_args &a = args.r;
    if (a.T == 0) return LA_OK;
    if (a.T > 65535 || a.k < 1 || a.k > TR_KMAX || a.W > TG_WMAX || args.gmax_ld % 4 != 0 ||
        args.gmax_ld * 8 < a.W || (a.to_slots && (a.ps < 1 || a.ps > (int64_t)INT32_MAX)))
        return la_err(LA_ERR_UNSUPPORTED, "topk groups: T=%lld k=%d W=%lld ld=%lld outside the kernel's range",
                      (long long)a.T, (int)a.k, (long long)a.W, (long long)args.gmax_ld);
    static_assert(TG_SMEM <= 227 * 1024, "one CTA's shared memory");
    LA_TRY(la_cu_func_smem(ctx, (const void *)tg_kernel, TG_SMEM, TG_SMEM, true));
    tg_kernel<<<(unsigned)a.T, TR_NT, TG_SMEM, s>>>(args);
    LA_CU_LAUNCH("topk groups: selection");
    return LA_OK;
}
