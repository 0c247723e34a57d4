/* Shared pieces of the CUDA sparse family (dsa.cu, topk.cu, hisa.cu,
 * sparse_attn.cu): per-query valid ranges, the row-wise exact top-k launcher
 * and the indexer score launcher. Internal; included by those files only. */
#ifndef LA_CUDA_SPARSE_COMMON_CUH
#define LA_CUDA_SPARSE_COMMON_CUH

#include "common.cuh"
#include "ptx.cuh"

/* Per-query valid key range [start_t, end_t) (SPEC §6). NULL start/end =
 * causal bottom-right: start 0, end = L - T + t + 1. With blk > 1 the range
 * is converted to units of key blocks: the blocks that meet [start, end). */
struct la_sp_range {
    const int32_t *start;
    int64_t start_nb;
    const int32_t *end;
    int64_t end_nb;
    int64_t T, L; /* queries, tokens */
    int blk;      /* 1 = token units, B = block units */
};

__device__ __forceinline__ void la_sp_row_range(const la_sp_range &r, int64_t t, int64_t *lo,
                                                int64_t *hi) {
    int64_t s = r.start ? (int64_t)r.start[t * r.start_nb] : 0;
    int64_t e = r.end ? (int64_t)r.end[t * r.end_nb] : r.L - r.T + t + 1;
    s = s < 0 ? 0 : (s > r.L ? r.L : s);
    e = e > r.L ? r.L : e;
    if (e < s) e = s;
    if (r.blk > 1) {
        s = s / r.blk;
        e = (e + r.blk - 1) / r.blk;
        if (e < s) e = s;
    }
    *lo = s;
    *hi = e;
}

/* Row-wise exact top-k (descending score, ties to the lower token index,
 * -1 padding). Row r, column p holds scores[r*ld + p*cs]; -inf is "not a
 * candidate", NaN ranks above +inf (torch.topk's order; several NaN: lower
 * index first). The token of column p is p, or in gather mode
 * blocks[r*blocks_ld + p/B]*B + p%B (HISA stage 2). With use_range only the
 * columns [lo_r, hi_r) of `range` are scanned (columns outside must be -inf
 * or irrelevant). */
struct la_sp_topk_args {
    const float *scores;
    int64_t ld, cs, R, L;
    int use_range;
    la_sp_range range;
    const int32_t *blocks; /* NULL: token = column */
    int64_t blocks_ld;
    int B;
    int64_t k;
    int32_t *out;
    int64_t out_ld, out_cs;
    int pdl; /* launched as a programmatic dependent of the stream's previous kernel (la_cu_launch_pdl) */
};
#define LA_SP_TOPK_MAX 2048
/* The top-k kernels (family "topk"): the sampled-threshold kernel
 * ("sample"), the radix-select kernel ("portable") or the short-row kernel
 * ("short"). Selection: pure, from the forced variant (NULL = default:
 * "short" for at most short_rows rows that it takes, else "sample"). */
enum la_sp_topk_kernel { LA_SP_TOPK_SAMPLE = 0, LA_SP_TOPK_PORTABLE = 1, LA_SP_TOPK_SHORT = 2 };
la_status la_sp_topk_select(const char *forced, const la_sp_topk_args &a, int64_t short_rows,
                            la_sp_topk_kernel *kern);
/* Selects with ctx's "topk" variant, reports when verbose, launches on s. */
la_status la_sp_topk(const la_sp_topk_args &a, const la_context *ctx, cudaStream_t s);

/* Indexer scores I(t,p) = sum_h w[t,h] ReLU(q[t,h].k[key(p)]) (SPEC §6).
 * Dense mode: key(p) = row p of k (tokens, or pooled blocks with
 * range.blk = B). Gather mode (blocks != NULL): p < m*B is candidate
 * p%B of kept block blocks[t*blocks_ld + p/B] (token units). Columns outside
 * the valid range are -inf; force_ends puts +inf on the first and last valid
 * column (HISA's forced blocks). out is f32 [T, ncols] with row stride
 * out_ld. */
struct la_sp_score_args {
    const void *q;
    int q_dt;
    int64_t q_nb0, q_nb1, q_nb2;
    const void *k;
    int k_dt;
    int64_t k_nb0, k_nb1;
    const void *w;
    int w_dt;
    int64_t w_nb0, w_nb1;
    int64_t T, HI, dI, Lk; /* Lk: rows of k */
    la_sp_range range;
    int force_ends;
    const int32_t *blocks;
    int64_t blocks_ld, m;
    int B;
    int64_t ncols;
    float *out;
    int64_t out_ld;
    int hopper; /* la_cu_hopper of the call: the wgmma / fp8 kernels may run */
    const la_context *ctx; /* the call's context (host only: la_cu_func_smem's cache) */
};
/* Whether the bf16 mma.sync score kernel takes these args. */
bool la_sp_scores_mma_ok(const la_sp_score_args &a);
/* The bf16 mma.sync kernel where it takes the args (and !exact), else the
 * exact fp32 kernel (any float dtype). */
la_status la_sp_scores(const la_sp_score_args &a, bool exact, cudaStream_t s);
/* Contiguous bf16 copy of a strided 2-D/3-D view (rows of `inner` elements). */
la_status la_sp_pack_bf16(const void *src, int dt, int64_t n0, int64_t n1, int64_t n2,
                          int64_t nb0, int64_t nb1, int64_t nb2, __nv_bfloat16 *dst,
                          cudaStream_t s);
/* Whether the tensor-core score kernel takes these extents. */
bool la_sp_scores_fast_shape(int64_t HI, int64_t dI);
/* Score args from the public views (ncols/out/force/gather left zero) and
 * the device of ctx (hopper). */
void la_sp_fill_score_args(la_sp_score_args *a, const la_tensor *q, const la_tensor *k,
                           const la_tensor *w, const la_tensor *start, const la_tensor *end,
                           const la_context *ctx);
/* bf16 q/k that the tensor-core kernel can't read in place are packed into
 * contiguous copies held by qw/kw (a is updated to point at them). */
la_status la_sp_prepare_bf16(la_sp_score_args *a, la_cu_ws *qw, la_cu_ws *kw, cudaStream_t s);

#endif
