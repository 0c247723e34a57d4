/* HISA indexer and block-sparse baseline (SPEC §7): public entry points. */
#include <stdint.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#ifdef LA_WITH_CUDA
#include "cuda/cuda_ops.h"
#endif

/* Checks shared by HISA, block-sparse and the decode cache. */
la_status la_idx_check_blocks(const char *op, const la_index_params *p, int need_m) {
    if (p->block <= 0)
        return la_err(LA_ERR_ARG, "block: block size %lld, must be > 0", (long long)p->block);
    if (p->block > INT32_MAX)
        return la_err(LA_ERR_ARG, "block: block size %lld exceeds the int32 index range", (long long)p->block);
    if (need_m && p->block_topk <= 0)
        return la_err(LA_ERR_ARG, "block_topk: m = %lld blocks kept, must be > 0", (long long)p->block_topk);
    if (!need_m && p->topk > 0 && p->topk < p->block)
        return la_err(LA_ERR_ARG,
                      "%s: topk = %lld is smaller than the block size %lld, so topk/block = 0 blocks would be kept",
                      op, (long long)p->topk, (long long)p->block);
    return LA_OK;
}

static la_status run_blocks(const char *op, la_blk_mode mode, const la_index_params *p,
                            const la_tensor *q, const la_tensor *k, const la_tensor *w,
                            const la_tensor *start, const la_tensor *end, la_tensor *idx,
                            la_context *ctx) {
    la_idx_problem P;
#ifdef LA_WITH_CUDA
    if (q && q->device == LA_DEVICE_CUDA) /* validates the CUDA views itself */
        return mode == LA_BLK_HISA ? la_hisa_indexer_cuda(p, q, k, w, start, end, idx, ctx)
                                   : la_blocksparse_indexer_cuda(p, q, k, w, start, end, idx, ctx);
#endif
    LA_TRY(la_idx_validate(op, p, q, k, w, start, end, idx, &P));
    la_status s = la_idx_check_blocks(op, p, mode == LA_BLK_HISA);
    if (s == LA_OK) {
        const int64_t m = mode == LA_BLK_HISA ? p->block_topk : p->topk / p->block;
        /* a block larger than the sequence names the same single block */
        const int64_t B = p->block < P.L ? p->block : P.L;
        s = la_hisa_cpu(&P, NULL, B, m, p->topk, mode, idx, ctx);
    }
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
