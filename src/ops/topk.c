/* Row-wise top-k (the selection step of SPEC §6/§7 as its own operator). */
#include <stdint.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

la_status la_topk(const la_tensor *scores, la_tensor *idx, la_context *ctx) {
    LA_TRY(la_topk_check_call(scores, idx));
#ifdef LA_WITH_CUDA
    if (scores->device == LA_DEVICE_CUDA) return la_topk_cuda(scores, idx, ctx);
#endif
    const int64_t R = scores->ne[0], L = scores->ne[1], k = idx->ne[1];

    const int nth = la_ctx_threads(ctx);
    /* rows that are not contiguous f32 are converted into a row buffer first */
    const int direct = scores->dtype == LA_F32 && scores->nb[1] == 1;
    size_t ws_one = la_topk_row_ws_bytes(L) + (size_t)k * 4u + (direct ? 0u : (size_t)L * 4u) + 64u;
    size_t ws_bytes;
    LA_TRY(la_mul_size((size_t)nth, ws_one, &ws_bytes, "topk: workspace"));
    char *ws = la_ws_alloc(ctx, ws_bytes);
    if (!ws) return LA_ERR_NOMEM;

#pragma omp parallel for num_threads(nth) schedule(dynamic, 1)
    for (int64_t r = 0; r < R; r++) {
        const int tid = la_thread_id();
        char *my = ws + (size_t)tid * ws_one;
        int32_t *o = (int32_t *)(my + la_topk_row_ws_bytes(L));
        const float *row;
        if (direct) {
            row = (const float *)scores->data + r * scores->nb[0];
        } else {
            float *buf = (float *)(o + k);
            for (int64_t s = 0; s < L; s++) buf[s] = la_load_f32(scores, la_off2(scores, r, s));
            row = buf;
        }
        la_topk_row(row, L, k, o, my);
        int32_t *dst = (int32_t *)idx->data;
        for (int64_t j = 0; j < k; j++) dst[la_off2(idx, r, j)] = o[j];
    }
    la_ws_free(ctx, ws);
    la_err_clear();
    return LA_OK;
}
