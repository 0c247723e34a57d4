/* HISA indexer and block-sparse baseline on the GPU (SPEC §7).
 *   1. block means k̄_b (fp32 sums in token order, / true count), stored in
 *      k's precision class (bf16 for bf16 keys so the tensor-core score
 *      kernel runs on them, f32 otherwise);
 *   2. block scores with the indexer score kernel over k̄ in block units,
 *      the first and last block meeting [start, end) forced to +inf, top-m
 *      with the exact top-k (ties -> lower block);
 *   3. HISA: candidate scores over the m*B tokens of the kept blocks
 *      (the block-major hb2_kernel, hisa_stage2.cu; the DSA score kernels in
 *      gather mode for other shapes or with variant "gather", same
 *      per-key arithmetic), then the
 *      exact top-k with candidate -> token mapping.
 *      Block-sparse: the kept blocks in rank order, each block's valid
 *      tokens ascending, -1 padding (as src/cpu/hisa_cpu.c). */
#include "cuda_ops.h"
#include "select.cuh"
#include "sparse_prep.cuh"
#include "hisa.cuh"

#include <cuda_fp8.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
/* The same sums for contiguous bf16 keys, two dimensions per thread (one
 * 4-byte load per token) and the token loop unrolled so that many loads
 * are in flight (the generic kernel above keeps about one per thread).
 * Per dimension the arithmetic is identical: fp32 sum in token order. */
__global__ void hs_pool_bf16_kernel(const __nv_bfloat16 *k, int64_t nb0, int64_t L, int64_t dI,
                                    int64_t B, __nv_bfloat16 *out) {
    const int64_t b = blockIdx.y;
    const int64_t d = 2 * ((int64_t)blockIdx.x * blockDim.x + threadIdx.x);
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float a0 = 0.f, a1 = 0.f;
#pragma unroll 16
    for (int64_t s = s0; s < s1; s++) {
        const float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)(k + s * nb0 + d));
        a0 += v.x;
        a1 += v.y;
    }
    const float n = (float)(s1 - s0);
    *(__nv_bfloat162 *)(out + b * dI + d) = __floats2bfloat162_rn(a0 / n, a1 / n);
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

/* Block means (the default; variant "mma": hs_pool_bf16_kernel):
 * contiguous bf16 keys with 16-byte aligned rows and dI <= 128, one CTA of 128 threads per block. The block's
 * rows (HP_TOK tokens at a time) go to shared memory by cp.async, every
 * 16-byte load of the CTA in flight at once (hs_pool_bf16_kernel keeps ~16
 * 4-byte loads per thread in flight, 64 threads per block), then thread d
 * sums dimension d over the tokens in order: fp32 from 0, the bf16 values
 * widened exactly, / true count, rounded to bf16 once: hs_pool_bf16_kernel's
 * arithmetic, so the means are the same bit for bit. */
#define HP_TOK 128
__global__ void __launch_bounds__(128) hs_pool2_kernel(const __nv_bfloat16 *k, int64_t nb0,
                                                       int64_t L, int dI, int64_t B,
                                                       __nv_bfloat16 *out) {
    __shared__ __align__(16) __nv_bfloat16 tile[HP_TOK * 128];
    const int64_t b = blockIdx.x;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    const int tid = threadIdx.x, cpr = dI / 8;
    float acc = 0.f;
    for (int64_t sa = s0; sa < s1; sa += HP_TOK) {
        const int n = (int)min((int64_t)HP_TOK, s1 - sa);
        __syncthreads(); /* the previous tile is summed */
        for (int i = tid; i < n * cpr; i += 128) {
            const int r = i / cpr, c = i - r * cpr;
            la_cp16z_n(tile + r * dI + c * 8, k + (sa + r) * nb0 + c * 8, 16);
        }
        asm volatile("cp.async.commit_group;\ncp.async.wait_group 0;\n" ::: "memory");
        __syncthreads();
        if (tid < dI) {
#pragma unroll 16
            for (int r = 0; r < n; r++) acc += __bfloat162float(tile[r * dI + tid]);
        }
    }
    if (tid < dI) out[b * dI + tid] = __float2bfloat16_rn(acc / (float)(s1 - s0));
}



/* The kernels of a HISA / block-sparse call (family "hisa"): the default
 * (variant "wgmma"); "gather": stage 2 on the DSA score kernels in gather
 * mode; "mma": also stage 1 on hs_pool_bf16_kernel and the mma.sync block
 * scores; "hb2": fp8 through the e4m3 route even when every block is kept;
 * "portable": the exact fp32 score kernels (fp8: dequantized copies). */
struct hs_choice {
    bool gather; /* stage 2 on the DSA gather kernels instead of hb2_kernel  */
    bool fast1;  /* stage 1 on hs_pool2_kernel + hb2_kernel (dense)         */
    bool exact;  /* every score on the exact fp32 kernel                    */
    int fp8;     /* 0: dequantized f32 route, 1: e4m3 route, 2: also every block kept */
    const la_context *ctx;
};
static const char *const hs_names[] = {"wgmma", "gather", "mma", "hb2", "portable"};
static la_status hs_select(const la_context *ctx, hs_choice *c) {
    const char *forced = la_context_variant(ctx, "hisa");
    c->gather = false;
    c->fast1 = true;
    c->exact = false;
    c->fp8 = 1;
    c->ctx = ctx;
    if (!forced) return LA_OK;
    const int i = la_cu_variant_index(forced, hs_names, 5);
    if (i < 0) return la_cu_unknown_variant("hisa", forced, "wgmma, gather, mma, hb2, portable");
    c->gather = i == 1 || i == 2 || i == 4;
    c->fast1 = !(i == 2 || i == 4);
    c->exact = i == 4;
    c->fp8 = i == 3 ? 2 : i == 4 ? 0 : 1;
    return LA_OK;
}



/* Candidate scores: hb2_kernel, or the DSA score kernels in gather mode
 * (fp32 exact kernel for other dtypes and shapes and with "portable"; all
 * inputs with "gather"). */
static la_status hs_candidate_scores(const la_sp_score_args &a, const hs_choice &ch,
                                     cudaStream_t s) {
    if (a.T == 0 || a.ncols == 0) return LA_OK;
    if (!ch.gather && hb_ok(a)) return hb_launch(a, s, false, nullptr, 0);
    return la_sp_scores(a, ch.exact, s);
}


/* Stage 1 after pooling: block scores of ab's queries and weights over the
 * nb block means kbar ([nb, dI] rows of dtype kb_dt; block units, the first
 * and last block meeting each range forced), then the top mk blocks per
 * query into keptw ([T, mk] int32). Shared by the bf16/f32 pipeline and the
 * fp8 one. */
static la_status hs_keep_blocks(la_sp_score_args ab, const void *kbar, int kb_dt, int64_t nb,
                                int64_t B, int64_t mk, la_cu_ws *bsw, la_cu_ws *keptw,
                                const hs_choice &ch, cudaStream_t s) {
    const int64_t T = ab.T;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)T, (size_t)nb * 4, &bytes, "block scores"));
    LA_TRY(la_cu_ws_alloc(bsw, bytes, s, "block scores"));
    ab.k = kbar;
    ab.k_dt = kb_dt;
    ab.k_nb0 = ab.dI;
    ab.k_nb1 = 1;
    ab.Lk = nb;
    ab.range.blk = (int)B;
    ab.force_ends = 1;
    ab.ncols = nb;
    ab.out = (float *)bsw->p;
    ab.out_ld = nb;
    if (ch.fast1 && !ch.exact && hb2_dense_ok(ab))
        LA_TRY(hb2_dense_launch(ab, s));
    else
        LA_TRY(la_sp_scores(ab, ch.exact, s));
    LA_TRY(la_mul_size((size_t)T, (size_t)mk * 4, &bytes, "kept blocks"));
    LA_TRY(la_cu_ws_alloc(keptw, bytes, s, "kept blocks"));
    la_sp_topk_args tb;
    memset(&tb, 0, sizeof tb);
    tb.scores = (const float *)bsw->p;
    tb.ld = nb;
    tb.cs = 1;
    tb.R = T;
    tb.L = nb;
    tb.use_range = 1;
    tb.range = ab.range;
    tb.k = mk;
    tb.out = (int32_t *)keptw->p;
    tb.out_ld = mk;
    tb.out_cs = 1;
    LA_TRY(la_sp_topk(tb, ch.ctx, s));
    return LA_OK;
}

/* Stage 2's selection: the top idx->ne[1] of the [T, nc = mk·B] candidate
 * scores cs, each column mapped back to its token through the kept blocks. */
static la_status hs_token_topk(const float *cs, int64_t T, int64_t nc, const int32_t *kept, int64_t mk,
                               int64_t B, la_tensor *idx, const hs_choice &ch, cudaStream_t s) {
    la_sp_topk_args tc;
    memset(&tc, 0, sizeof tc);
    tc.scores = cs;
    tc.ld = nc;
    tc.cs = 1;
    tc.R = T;
    tc.L = nc;
    tc.blocks = kept;
    tc.blocks_ld = mk;
    tc.B = (int)B;
    tc.k = idx->ne[1];
    tc.out = (int32_t *)idx->data;
    tc.out_ld = idx->nb[0];
    tc.out_cs = idx->nb[1];
    LA_TRY(la_sp_topk(tc, ch.ctx, s));
    return LA_OK;
}

/* The block parameters (after the views are validated). */
static la_status hs_check_params(const char *op, int blocksparse, const la_index_params *p) {
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
    return LA_OK;
}

static la_status hs_run(const char *op, int blocksparse, const la_index_params *p,
                        const la_tensor *q, const la_tensor *k, const la_tensor *w,
                        const la_tensor *start, const la_tensor *end, la_tensor *idx,
                        la_context *ctx) {
    LA_TRY(la_sp_validate_idx_cuda(op, p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params(op, blocksparse, p));
    cudaStream_t s = la_cu_stream(ctx);
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end, ctx);
    la_cu_ws qw, kw, kbw, bsw, keptw, csw, kw16;
    LA_TRY(la_sp_prepare_bf16(&a, &qw, &kw, s));
    if (!blocksparse && a.q_dt == LA_BF16 && a.k_dt == LA_BF16 &&
        la_sp_scores_fast_shape(a.HI, a.dI) && a.T > 0 &&
        (a.k_nb1 != 1 || a.k_nb0 % 8 != 0 || ((uintptr_t)a.k & 15) != 0)) {
        /* the cp.async copies (hb2_kernel) need contiguous, 16-byte aligned k rows: copy */
        size_t kb16;
        LA_TRY(la_mul_size((size_t)a.Lk, (size_t)a.dI * 2, &kb16, "k copy"));
        LA_TRY(la_cu_ws_alloc(&kw16, kb16, s, "aligned bf16 copy of k"));
        LA_TRY(la_sp_pack_bf16(a.k, a.k_dt, 1, a.Lk, a.dI, 0, a.k_nb0, a.k_nb1,
                               (__nv_bfloat16 *)kw16.p, s));
        a.k = kw16.p;
        a.k_nb0 = a.dI;
        a.k_nb1 = 1;
    }
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
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));
    la_cu_report(ctx, "hisa", la_context_variant(ctx, "hisa") ? la_context_variant(ctx, "hisa") : "wgmma",
                 "%s T=%lld L=%lld HI=%lld dI=%lld block=%lld %s%s", op, (long long)T, (long long)L,
                 (long long)a.HI, (long long)dI, (long long)B, la_dtype_name((la_dtype)a.q_dt),
                 a.hopper ? "" : ", no sm_90: wgmma kernels replaced by mma.sync / exact ones");

    /* 1. block means */
    const bool bf = a.k_dt == LA_BF16 && a.q_dt == LA_BF16;
    const int kb_dt = bf ? LA_BF16 : LA_F32;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * (bf ? 2 : 4), &bytes, "block means"));
    LA_TRY(la_cu_ws_alloc(&kbw, bytes, s, "block means"));
    {
        dim3 grid((unsigned)la_cu_cdiv(dI, 128), (unsigned)nb);
        if (nb > 65535) return la_err(LA_ERR_UNSUPPORTED, "%s: %lld blocks exceed the grid", op, (long long)nb);
        if (ch.fast1 && bf && a.k_nb1 == 1 && a.k_nb0 % 8 == 0 && dI % 8 == 0 && dI <= 128 &&
            ((uintptr_t)a.k & 15) == 0) {
            hs_pool2_kernel<<<(unsigned)nb, 128, 0, s>>>((const __nv_bfloat16 *)a.k, a.k_nb0, L,
                                                          (int)dI, B, (__nv_bfloat16 *)kbw.p);
        } else if (bf && a.k_nb1 == 1 && a.k_nb0 % 2 == 0 && dI % 2 == 0 && ((uintptr_t)a.k & 3) == 0) {
            dim3 g2((unsigned)la_cu_cdiv(dI / 2, 64), (unsigned)nb);
            hs_pool_bf16_kernel<<<g2, 64, 0, s>>>((const __nv_bfloat16 *)a.k, a.k_nb0, L, dI, B,
                                                   (__nv_bfloat16 *)kbw.p);
        } else {
            hs_pool_kernel<<<grid, 128, 0, s>>>(a.k, a.k_dt, a.k_nb0, a.k_nb1, L, dI, B, kbw.p, kb_dt);
        }
        LA_CU_LAUNCH("block means");
    }
    /* 2. block scores (block units, forced ends), top-m */
    LA_TRY(hs_keep_blocks(a, kbw.p, kb_dt, nb, B, mk, &bsw, &keptw, ch, s));

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
    LA_TRY(hs_candidate_scores(ac, ch, s));
    LA_TRY(hs_token_topk((const float *)csw.p, T, nc, (const int32_t *)keptw.p, mk, B, idx, ch, s));
    la_err_clear();
    return LA_OK;
}

/* ---- fp8 e4m3 HISA on wgmma (the default; "portable": the f32 route) --------
 * Stage 1 on bf16 copies, stage 2 on the fp8 rows:
 *  - w' = w·q_scale (f32 [T, HI], the product sc_wq forms in dsa.cu: the
 *    weight as f32 times q_scale[t,h], one rounding);
 *  - q8 -> bf16 (exact: every e4m3 value is a bf16 value);
 *  - block means of the dequantized keys k8·k_scale (the product rounded
 *    once, as la_sp_fp8_to_f32's dequantized copy; fp32 sums in token order,
 *    / true count: the f32 route's means bit for bit), rounded to bf16 once
 *    at the store: the bf16 path's rounding (hs_pool_bf16_kernel also stores
 *    bf16 means of fp32 sums);
 *  - block scores = the bf16 block-score path (la_sp_scores on q_bf16, k̄,
 *    w'): Σ_h w'·ReLU(q8·k̄) = Σ_h w·ReLU((q8·qs)·k̄) since qs > 0;
 *  - candidate scores: hb2_kernel<1> on the e4m3 q/k rows with w' and k_scale,
 *    per (query, key) the instruction sequence of DSA v2's fp8 kernel
 *    (sc_wgmma_kernel<1>), then the token top-k in gather mode.
 * Compared with the f32 route (the CPU's indices on dequantized inputs),
 * selections can differ where the bf16-rounded block means flip near-tied
 * blocks (stage 1) and where v2's fp8 accumulation (~14 bits) reorders
 * near-tied tokens (stage 2); with every block kept the candidate scores are
 * the DSA fp8 scores. */


/* e4m3 [T, HI, dI] view -> contiguous bf16 (exact) */
__global__ void hs_q8_bf16_kernel(const uint8_t *q, int64_t HI, int64_t dI, int64_t nb0,
                                  int64_t nb1, int64_t nb2, __nv_bfloat16 *out, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t d = i % dI, r = i / dI, h = r % HI, t = r / HI;
        __nv_fp8_e4m3 v;
        v.__x = q[t * nb0 + h * nb1 + d * nb2];
        out[i] = __float2bfloat16_rn((float)v);
    }
}
/* w' = w·q_scale as f32 [T, HI] (sc_wq's expression) */
__global__ void hs_wq_kernel(const void *w, int w_dt, int64_t w_nb0, int64_t w_nb1,
                             const float *qs, int64_t qs_nb0, int64_t qs_nb1, int64_t HI,
                             float *out, int64_t total) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t t = i / HI, h = i % HI;
        float wv = la_cu_ld(w, w_dt, t * w_nb0 + h * w_nb1);
        if (qs) wv *= qs[t * qs_nb0 + h * qs_nb1];
        out[i] = wv;
    }
}
/* block means of k8·k_scale (contiguous e4m3 rows), one dimension per
 * thread; the product is rounded once (__fmul_rn: not contracted into the
 * sum), fp32 sum in token order, / true count, stored bf16 */
__global__ void hs_pool_fp8_kernel(const uint8_t *k, int64_t nb0, int64_t L, int64_t dI,
                                   int64_t B, const float *ks, int64_t ks_nb,
                                   __nv_bfloat16 *out) {
    const int64_t b = blockIdx.y;
    const int64_t d = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (d >= dI) return;
    const int64_t s0 = b * B, s1 = min(s0 + B, L);
    float acc = 0.f;
#pragma unroll 16
    for (int64_t s = s0; s < s1; s++) {
        __nv_fp8_e4m3 v;
        v.__x = k[s * nb0 + d];
        const float x = (float)v;
        acc = __fadd_rn(acc, ks ? __fmul_rn(x, ks[s * ks_nb]) : x);
    }
    out[b * dI + d] = __float2bfloat16_rn(acc / (float)(s1 - s0));
}


/* HISA on fp8 q/k with the stages above. *taken = false (nothing launched,
 * nothing written) when the views or sizes are not the kernel's: the
 * caller then runs the f32 route. Views and block parameters are validated
 * by the caller. */
static la_status hs_run_fp8wg(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                              const la_tensor *w, const la_tensor *start, const la_tensor *end,
                              la_tensor *idx, la_context *ctx, bool *taken) {
    *taken = false;
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end, ctx);
    const int64_t T = a.T, L = a.Lk, HI = a.HI, dI = a.dI;
    if (T < 1 || L < 1 || T > 65535 || p->topk > LA_SP_TOPK_MAX) return LA_OK;
    const int64_t B = p->block < L ? p->block : L;
    const int64_t nb = (L + B - 1) / B;
    const int64_t mk = p->block_topk < nb ? p->block_topk : nb;
    if (nb > 65535 || mk > LA_SP_TOPK_MAX) return LA_OK;
    la_sp_score_args ac = a; /* stage 2 on the e4m3 rows */
    ac.m = mk;
    ac.blocks_ld = mk;
    ac.B = (int)B;
    if (!hb8_ok(ac)) return LA_OK;
    *taken = true;

    cudaStream_t s = la_cu_stream(ctx);
    const float *ks = p->k_scale ? (const float *)p->k_scale->data : nullptr;
    const int64_t ks_nb = p->k_scale ? p->k_scale->nb[0] : 0;
    const float *qsc = p->q_scale ? (const float *)p->q_scale->data : nullptr;
    const int64_t qs_nb0 = p->q_scale ? p->q_scale->nb[0] : 0;
    const int64_t qs_nb1 = p->q_scale ? p->q_scale->nb[1] : 0;
    /* the scale values: finite, > 0 (dsa.cu's check and messages) */
    if (ks || qsc) LA_TRY(la_sp_fp8_check_scales(p, q, k, s));
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));

    /* 1. bf16 q, f32 w' = w·qs, bf16 block means of k8·ks */
    la_cu_ws qbw, wqw, kbw, bsw, keptw, csw;
    size_t bytes;
    LA_TRY(la_mul_size((size_t)(T * HI), (size_t)dI * 2, &bytes, "bf16 q"));
    LA_TRY(la_cu_ws_alloc(&qbw, bytes, s, "bf16 copy of fp8 q"));
    LA_TRY(la_mul_size((size_t)T, (size_t)HI * 4, &bytes, "w*q_scale"));
    LA_TRY(la_cu_ws_alloc(&wqw, bytes, s, "w*q_scale"));
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * 2, &bytes, "block means"));
    LA_TRY(la_cu_ws_alloc(&kbw, bytes, s, "block means"));
    {
        const int64_t total = T * HI * dI;
        int64_t blocks = la_cu_cdiv(total, 256);
        if (blocks > 65535 * 16) blocks = 65535 * 16;
        hs_q8_bf16_kernel<<<(unsigned)blocks, 256, 0, s>>>((const uint8_t *)a.q, HI, dI, a.q_nb0,
                                                           a.q_nb1, a.q_nb2,
                                                           (__nv_bfloat16 *)qbw.p, total);
        LA_CU_LAUNCH("fp8 q -> bf16");
        const int64_t tw = T * HI;
        hs_wq_kernel<<<(unsigned)la_cu_cdiv(tw, 256), 256, 0, s>>>(a.w, a.w_dt, a.w_nb0, a.w_nb1,
                                                                   qsc, qs_nb0, qs_nb1, HI,
                                                                   (float *)wqw.p, tw);
        LA_CU_LAUNCH("w*q_scale");
        dim3 grid((unsigned)la_cu_cdiv(dI, 128), (unsigned)nb);
        hs_pool_fp8_kernel<<<grid, 128, 0, s>>>((const uint8_t *)a.k, a.k_nb0, L, dI, B, ks, ks_nb,
                                                (__nv_bfloat16 *)kbw.p);
        LA_CU_LAUNCH("block means (fp8)");
    }
    /* 2. block scores: the bf16 path on (q_bf16, k̄, w'), forced ends, top-m */
    la_sp_score_args ab = a;
    ab.q = qbw.p;
    ab.q_dt = LA_BF16;
    ab.q_nb0 = HI * dI;
    ab.q_nb1 = dI;
    ab.q_nb2 = 1;
    ab.w = wqw.p;
    ab.w_dt = LA_F32;
    ab.w_nb0 = HI;
    ab.w_nb1 = 1;
    LA_TRY(hs_keep_blocks(ab, kbw.p, LA_BF16, nb, B, mk, &bsw, &keptw, ch, s));
    /* 3. candidate scores on the e4m3 rows (hb2_kernel<1>), token top-k */
    const int64_t nc = mk * B;
    LA_TRY(la_mul_size((size_t)T, (size_t)nc * 4, &bytes, "candidate scores"));
    LA_TRY(la_cu_ws_alloc(&csw, bytes, s, "candidate scores"));
    ac.w = wqw.p;
    ac.w_dt = LA_F32;
    ac.w_nb0 = HI;
    ac.w_nb1 = 1;
    ac.blocks = (const int32_t *)keptw.p;
    ac.ncols = nc;
    ac.out = (float *)csw.p;
    ac.out_ld = nc;
    LA_TRY(hb_launch(ac, s, true, ks, ks_nb));
    LA_TRY(hs_token_topk((const float *)csw.p, T, nc, (const int32_t *)keptw.p, mk, B, idx, ch, s));
    la_err_clear();
    return LA_OK;
}

/* Test hook (tests/cuda/test_cuda_dsa_fp8.c declares it; not in the public
 * header): hb2_kernel<1>'s candidate scores with every block kept in ascending
 * order, so column r*B + j is token r*B + j and `out` ([T, nb*B] f32 on the
 * device, nb = ⌈L/B⌉) compares column for column with the DSA indexer's
 * fp8 score rows (-inf outside the ranges, columns >= L -inf too). The
 * views are validated as HISA's (idx: any valid [T, topk] i32 view, not
 * written); LA_ERR_UNSUPPORTED when hb2_kernel<1> does not take them. */
__global__ void hs_iota_blocks_kernel(int32_t *kept, int64_t T, int64_t nb) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < T * nb;
         i += (int64_t)gridDim.x * blockDim.x)
        kept[i] = (int32_t)(i % nb);
}
extern "C" la_status la_hisa_fp8_stage2_scores_test(const la_index_params *p, const la_tensor *q,
                                                    const la_tensor *k, const la_tensor *w,
                                                    const la_tensor *start, const la_tensor *end,
                                                    const la_tensor *idx, float *out,
                                                    la_context *ctx) {
    LA_TRY(la_sp_validate_fp8_cuda("hisa", p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params("hisa", 0, p));
    la_sp_score_args a;
    la_sp_fill_score_args(&a, q, k, w, start, end, ctx);
    const int64_t T = a.T, L = a.Lk, HI = a.HI;
    if (T < 1 || L < 1) return LA_OK;
    const int64_t B = p->block < L ? p->block : L, nb = (L + B - 1) / B;
    a.m = nb;
    a.blocks_ld = nb;
    a.B = (int)B;
    if (!hb8_ok(a) || nb > (int64_t)INT32_MAX / B)
        return la_err(LA_ERR_UNSUPPORTED, "hisa stage-2 test hook: views not hb2_kernel<1>'s");
    cudaStream_t s = la_cu_stream(ctx);
    const float *ks = p->k_scale ? (const float *)p->k_scale->data : nullptr;
    const int64_t ks_nb = p->k_scale ? p->k_scale->nb[0] : 0;
    const float *qsc = p->q_scale ? (const float *)p->q_scale->data : nullptr;
    la_cu_ws wqw, keptw;
    LA_TRY(la_cu_ws_alloc(&wqw, (size_t)(T * HI) * 4, s, "w*q_scale"));
    LA_TRY(la_cu_ws_alloc(&keptw, (size_t)(T * nb) * 4, s, "kept blocks"));
    hs_wq_kernel<<<(unsigned)la_cu_cdiv(T * HI, 256), 256, 0, s>>>(
        a.w, a.w_dt, a.w_nb0, a.w_nb1, qsc, qsc ? p->q_scale->nb[0] : 0,
        qsc ? p->q_scale->nb[1] : 0, HI, (float *)wqw.p, T * HI);
    LA_CU_LAUNCH("w*q_scale");
    int64_t g = la_cu_cdiv(T * nb, 256);
    hs_iota_blocks_kernel<<<(unsigned)(g < 65535 ? g : 65535), 256, 0, s>>>((int32_t *)keptw.p, T, nb);
    LA_CU_LAUNCH("iota blocks");
    a.w = wqw.p;
    a.w_dt = LA_F32;
    a.w_nb0 = HI;
    a.w_nb1 = 1;
    a.blocks = (const int32_t *)keptw.p;
    a.ncols = nb * B;
    a.out = out;
    a.out_ld = nb * B;
    LA_TRY(hb_launch(a, s, true, ks, ks_nb));
    LA_CU(cudaStreamSynchronize(s));
    la_err_clear();
    return LA_OK;
}

/* fp8 e4m3 q/k (k_scale / q_scale as for the DSA indexer, SPEC §6):
 *  - HISA keeping every block (m ≥ ⌈L/B⌉): the candidates are all keys, and
 *    SPEC §7 says the result equals the DSA indexer's: it is the DSA
 *    indexer's fp8 path, so equal by construction;
 *  - otherwise HISA runs the e4m3 wgmma route above (hs_run_fp8wg) where it
 *    takes the views (HI = 64, dI = 128, 16-byte rows);
 *  - the block-sparse baseline, other views, and variant "portable":
 *    dequantized f32 copies (scales folded in) through the f32 pipeline
 *    (exact fp32 kernels: the CPU's result on the same dequantized inputs).
 *    Correct, not fast: block means, block scores and candidate scores run
 *    on CUDA cores (docs/SPARSE.md). */
static la_status hs_run_fp8(const char *op, int blocksparse, const la_index_params *p,
                            const la_tensor *q, const la_tensor *k, const la_tensor *w,
                            const la_tensor *start, const la_tensor *end, la_tensor *idx,
                            la_context *ctx) {
    LA_TRY(la_sp_validate_fp8_cuda(op, p, q, k, w, start, end, idx));
    LA_TRY(hs_check_params(op, blocksparse, p));
    const int64_t L = k->ne[0];
    hs_choice ch;
    LA_TRY(hs_select(ctx, &ch));
    const int mode = blocksparse ? 0 : ch.fp8;
    if (!blocksparse && L > 0) {
        const int64_t B = p->block < L ? p->block : L, nb = (L + B - 1) / B;
        if (p->block_topk >= nb && mode != 2) {
            la_cu_report(ctx, "hisa", "dsa", "fp8, every block kept: the DSA indexer");
            return la_dsa_indexer_cuda(p, q, k, w, start, end, idx, NULL, ctx);
        }
    }
    if (mode != 0) {
        bool taken = false;
        LA_TRY(hs_run_fp8wg(p, q, k, w, start, end, idx, ctx, &taken));
        if (taken) {
            la_cu_report(ctx, "hisa", mode == 2 ? "hb2" : "wgmma", "fp8 e4m3: stage 2 on hb2_kernel<1>");
            return LA_OK;
        }
    }
    cudaStream_t s = la_cu_stream(ctx);
    la_cu_ws qf, kf;
    la_tensor tq, tk;
    LA_TRY(la_sp_fp8_to_f32(p, q, k, &qf, &kf, &tq, &tk, s));
    la_index_params pf = *p;
    pf.k_scale = NULL;
    pf.q_scale = NULL;
    return hs_run(op, blocksparse, &pf, &tq, &tk, w, start, end, idx, ctx);
}

static bool hs_is_fp8(const la_index_params *p, const la_tensor *q, const la_tensor *k) {
    return p && q && k &&
           (p->k_scale || p->q_scale || q->dtype == LA_FP8_E4M3 || k->dtype == LA_FP8_E4M3);
}

extern "C" la_status la_hisa_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                          const la_tensor *k, const la_tensor *w,
                                          const la_tensor *start, const la_tensor *end,
                                          la_tensor *idx, la_context *ctx) {
    if (hs_is_fp8(p, q, k)) return hs_run_fp8("hisa", 0, p, q, k, w, start, end, idx, ctx);
    return hs_run("hisa", 0, p, q, k, w, start, end, idx, ctx);
}

extern "C" la_status la_blocksparse_indexer_cuda(const la_index_params *p, const la_tensor *q,
                                                 const la_tensor *k, const la_tensor *w,
                                                 const la_tensor *start, const la_tensor *end,
                                                 la_tensor *idx, la_context *ctx) {
    if (hs_is_fp8(p, q, k)) return hs_run_fp8("blocksparse", 1, p, q, k, w, start, end, idx, ctx);
    return hs_run("blocksparse", 1, p, q, k, w, start, end, idx, ctx);
}
