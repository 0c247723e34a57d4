/* HISA indexer and block-sparse baseline (SPEC §7): public entry points.
 * Views are validated (src/ops/sparse_validate.c) before dispatch. */
#include <stdint.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

static la_status run_blocks(const char *op, la_blk_mode mode, const la_index_params *p,
                            const la_tensor *q, const la_tensor *k, const la_tensor *w,
                            const la_tensor *start, const la_tensor *end, la_tensor *idx,
                            la_context *ctx) {
    LA_TRY(la_idx_check_call(op, p, q, k, w, start, end, idx));
    LA_TRY(la_idx_check_blocks(op, p, mode == LA_BLK_HISA));
#ifdef LA_WITH_CUDA
    if (q->device == LA_DEVICE_CUDA)
        return mode == LA_BLK_HISA ? la_hisa_indexer_cuda(p, q, k, w, start, end, idx, ctx)
                                   : la_blocksparse_indexer_cuda(p, q, k, w, start, end, idx, ctx);
#endif
    la_idx_problem P;
    LA_TRY(la_idx_resolve(op, q, k, w, start, end, &P));
    const int64_t m = mode == LA_BLK_HISA ? p->block_topk : p->topk / p->block;
    /* a block larger than the sequence names the same single block */
    const int64_t B = p->block < P.L ? p->block : P.L;
    la_status s = la_hisa_cpu(&P, NULL, B, m, p->topk, mode, idx, ctx);
    la_idx_problem_free(&P);
    if (s == LA_OK) la_err_clear();
    return s;
}

la_status la_hisa_indexer(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *w, const la_tensor *start, const la_tensor *end,
                          la_tensor *idx, la_context *ctx) {
    return run_blocks("hisa", LA_BLK_HISA, p, q, k, w, start, end, idx, ctx);
}

la_status la_blocksparse_indexer(const la_index_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *w,
                                 const la_tensor *start, const la_tensor *end,
                                 la_tensor *idx, la_context *ctx) {
    return run_blocks("blocksparse", LA_BLK_SPARSE, p, q, k, w, start, end, idx, ctx);
}
