/* DSA indexer (SPEC §6): public entry point, and la_index_params_init. Views
 * are validated (src/ops/sparse_validate.c) before dispatch. */
#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

la_status la_index_params_init(la_index_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_index_params_init: p is NULL");
    p->topk = 2048;
    p->block = 128;
    p->block_topk = 64;
    p->k_scale = NULL;
    p->q_scale = NULL;
    return LA_OK;
}

la_status la_dsa_indexer(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                         la_tensor *idx, la_tensor *scores, la_context *ctx) {
    LA_TRY(la_idx_check_call("dsa", p, q, k, w, start, end, idx));
    if (scores) LA_TRY(la_dsa_check_scores(p, q, k, w, start, end, idx, scores));
#ifdef LA_WITH_CUDA
    if (q->device == LA_DEVICE_CUDA) return la_dsa_indexer_cuda(p, q, k, w, start, end, idx, scores, ctx);
#endif
    la_idx_problem P;
    LA_TRY(la_idx_resolve("dsa", q, k, w, start, end, &P));
    la_status s = la_dsa_cpu(&P, p->topk, idx, scores, ctx);
    la_idx_problem_free(&P);
    if (s == LA_OK) la_err_clear();
    return s;
}
