/* HISA indexer and block-sparse baseline on the GPU (SPEC §7).
 *   1. block means k̄_b (fp32 sums in token order, / true count), stored in
 *      k's precision class (bf16 for bf16 keys so the tensor-core score
 *      kernel runs on them, f32 otherwise);
 *   2. block scores with the indexer score kernel over k̄ in block units,
 *      the first and last block meeting [start, end) forced to +inf, top-m
 *      with the exact top-k (ties -> lower block);
 *   3. HISA: the score kernel in gather mode over the m*B candidate tokens
 *      of the kept blocks (same per-key arithmetic as the flat DSA kernel),
 *      then the exact top-k with candidate -> token mapping.
 *      Block-sparse: the kept blocks in rank order, each block's valid
 *      tokens ascending, -1 padding (as src/cpu/hisa_cpu.c). */
#include "cuda_ops.h"
#include "sparse_common.cuh"

la_status la_sp_validate_idx_cuda(const char *op, const la_index_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *w, const la_tensor *start,
                                  const la_tensor *end, const la_tensor *idx);

__global__ void hs_pool_kernel(const void *k, int dt, int64_t nb0, int64_t nb1, int64_t L,
                               int64_t dI, int64_t B, void *out, int out_dt) {
    const int64_t b = blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float acc = 0.f;
    for (int64_t s = s0; s < s1; s++) acc += la_cu_ld(k, dt, s * nb0 + d * nb1);
    la_cu_st(out, out_dt, b * dI + d, acc / (float)(s1 - s0));
}

/* Block-sparse output: kept blocks in rank order, valid tokens ascending. */
__global__ void hs_blocksparse_kernel(const int32_t *kept, int64_t m, la_sp_range range, int64_t B,
                                      int64_t topk, int32_t *out, int64_t out_ld, int64_t out_cs) {
    const int64_t t = blockIdx.x;
    int64_t lo, hi;
    la_sp_row_range(range, t, &lo, &hi);
    /* a block's first slot = sum of the valid token counts of earlier ranks */
    __shared__ int64_t base;
    if (threadIdx.x == 0) base = 0;
    __syncthreads();
    for (int64_t r = 0; r < m; r++) {
        const int32_t b = kept[t * m + r];
        if (b < 0) break;
        const int64_t a = max((int64_t)b * B, lo), e = min(((int64_t)b + 1) * B, hi);
        const int64_t n0 = base;
        for (int64_t s = a + threadIdx.x; s < e; s += blockDim.x) {
            const int64_t j = n0 + (s - a);
            if (j < topk) out[t * out_ld + j * out_cs] = (int32_t)s;
        }
        __syncthreads();
        if (threadIdx.x == 0) base = n0 + (e > a ? e - a : 0);
        __syncthreads();
    }
    const int64_t n = base < topk ? base : topk;
    for (int64_t j = n + threadIdx.x; j < topk; j += blockDim.x) out[t * out_ld + j * out_cs] = -1;
}

static la_status hs_run(const char *op, int blocksparse, const la_index_params *p,
                        const la_tensor *q, const la_tensor *k, const la_tensor *w,
                        const la_tensor *start, const la_tensor *end, la_tensor *idx,
                        la_context *ctx) {
    LA_TRY(la_sp_validate_idx_cuda(op, p, q, k, w, start, end, idx));
    if (p->block <= 0 || p->block > INT32_MAX)
        return la_err(LA_ERR_ARG, "block: block size %lld, must be in 1..2^31-1", (long long)p->block);
    if (!blocksparse && p->block_topk <= 0)
        return la_err(LA_ERR_ARG, "block_topk: m = %lld blocks kept, must be > 0",
                      (long long)p->block_topk);
    if (blocksparse && p->topk < p->block)
        return la_err(LA_ERR_ARG,
                      "%s: topk = %lld is smaller than the block size %lld, so topk/block = 0 "
                      "blocks would be kept",
                      op, (long long)p->topk, (long long)p->block);
    cudaStream_t s = la_cu_stream(ctx);
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end);
    la_cu_ws qw, kw, kbw, bsw, keptw, csw;
    LA_TRY(la_sp_prepare_bf16(&a, &qw, &kw, s));
    const int64_t T = a.T, L = a.Lk, dI = a.dI;
    const int64_t B = p->block < L ? p->block : L; /* a block past L is the single block */
    const int64_t nb = (L + B - 1) / B;
    const int64_t m_req = blocksparse ? p->topk / p->block : p->block_topk;
    const int64_t mk = m_req < nb ? m_req : nb;
    if (mk > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "%s: %lld blocks kept exceed the CUDA top-k maximum %d",
                      op, (long long)mk, LA_SP_TOPK_MAX);
    if (!blocksparse && p->topk > LA_SP_TOPK_MAX)
        return la_err(LA_ERR_UNSUPPORTED, "topk: %lld exceeds the CUDA top-k maximum %d",
                      (long long)p->topk, LA_SP_TOPK_MAX);
    if (T == 0) return LA_OK;

    /* 1. block means */
    const bool bf = a.k_dt == LA_BF16 && a.q_dt == LA_BF16;
    const int kb_dt = bf ? LA_BF16 : LA_F32;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * (bf ? 2 : 4), &bytes, "block means"));
    LA_TRY(la_cu_ws_alloc(&kbw, bytes, s, "block means"));
    {
        dim3 grid((unsigned)la_cu_cdiv(dI, 128), (unsigned)nb);
        if (nb > 65535) return la_err(LA_ERR_UNSUPPORTED, "%s: %lld blocks exceed the grid", op, (long long)nb);
        hs_pool_kernel<<<grid, 128, 0, s>>>(a.k, a.k_dt, a.k_nb0, a.k_nb1, L, dI, B, kbw.p, kb_dt);
        LA_CU_LAUNCH("block means");
    }
    /* 2. block scores (block units, forced ends), top-m */
    LA_TRY(la_mul_size((size_t)T, (size_t)nb * 4, &bytes, "block scores"));
    LA_TRY(la_cu_ws_alloc(&bsw, bytes, s, "block scores"));
    la_sp_score_args ab = a;
    ab.k = kbw.p;
    ab.k_dt = kb_dt;
    ab.k_nb0 = dI;
    ab.k_nb1 = 1;
    ab.Lk = nb;
    ab.range.blk = (int)B;
    ab.force_ends = 1;
    ab.ncols = nb;
    ab.out = (float *)bsw.p;
    ab.out_ld = nb;
    LA_TRY(la_sp_scores(ab, s));
    LA_TRY(la_mul_size((size_t)T, (size_t)mk * 4, &bytes, "kept blocks"));
    LA_TRY(la_cu_ws_alloc(&keptw, bytes, s, "kept blocks"));
    la_sp_topk_args tb;
    memset(&tb, 0, sizeof tb);
    tb.scores = (const float *)bsw.p;
    tb.ld = nb;
    tb.cs = 1;
    tb.R = T;
    tb.L = nb;
    tb.use_range = 1;
    tb.range = ab.range;
    tb.k = mk;
    tb.out = (int32_t *)keptw.p;
    tb.out_ld = mk;
    tb.out_cs = 1;
    LA_TRY(la_sp_topk(tb, s));

    if (blocksparse) {
        hs_blocksparse_kernel<<<(unsigned)T, 128, 0, s>>>((const int32_t *)keptw.p, mk, a.range, B,
                                                          idx->ne[1], (int32_t *)idx->data,
                                                          idx->nb[0], idx->nb[1]);
        LA_CU_LAUNCH("block-sparse tokens");
        la_err_clear();
        return LA_OK;
    }
    /* 3. candidate token scores, top-k */
    const int64_t nc = mk * B;
    LA_TRY(la_mul_size((size_t)T, (size_t)nc * 4, &bytes, "candidate scores"));
    LA_TRY(la_cu_ws_alloc(&csw, bytes, s, "candidate scores"));
    la_sp_score_args ac = a;
    ac.blocks = (const int32_t *)keptw.p;
    ac.blocks_ld = mk;
    ac.m = mk;
    ac.B = (int)B;
    ac.ncols = nc;
    ac.out = (float *)csw.p;
    ac.out_ld = nc;
    LA_TRY(la_sp_scores(ac, s));
    la_sp_topk_args tc;
    memset(&tc, 0, sizeof tc);
    tc.scores = (const float *)csw.p;
    tc.ld = nc;
    tc.cs = 1;
    tc.R = T;
    tc.L = nc;
    tc.blocks = (const int32_t *)keptw.p;
    tc.blocks_ld = mk;
    tc.B = (int)B;
    tc.k = idx->ne[1];
    tc.out = (int32_t *)idx->data;
    tc.out_ld = idx->nb[0];
    tc.out_cs = idx->nb[1];
    LA_TRY(la_sp_topk(tc, s));
    la_err_clear();
    return LA_OK;
}

extern "C" la_status la_hisa_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                          const la_tensor *k, const la_tensor *w,
                                          const la_tensor *start, const la_tensor *end,
                                          la_tensor *idx, la_context *ctx) {
    return hs_run("hisa", 0, p, q, k, w, start, end, idx, ctx);
}

extern "C" la_status la_blocksparse_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                                 const la_tensor *k, const la_tensor *w,
                                                 const la_tensor *start, const la_tensor *end,
                                                 la_tensor *idx, la_context *ctx) {
    return hs_run("blocksparse", 1, p, q, k, w, start, end, idx, ctx);
}
