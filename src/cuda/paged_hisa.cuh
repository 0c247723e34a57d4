/* HISA's block stage on the paged index-key cache (paged_hisa.cu), used by
 * la_paged_topk_cuda's HISA branch (paged_index.cu). Family "paged_hisa":
 *   - "fused" (the default where it applies, switch kPagedHisaFused): the
 *     scores as an SGEMM-shaped fp32 kernel over (query rows x heads) x
 *     blocks that forms the block means itself in decode (from the pooled
 *     sums, or reads the classic means kernel's without them; prefill: the
 *     means once per call, transposed), then one CTA per row selects the m
 *     kept blocks and writes them ascending;
 *   - "fused3": "fused" with its one-row score kernel at 3 CTAs per SM;
 *   - "fused_guarded": "fused" with its one-row score kernel as first
 *     written (a guard per d step, the per-item work formed per chunk);
 *   - "classic": the means kernel, the generic fp32 score kernel, la_topk
 *     over the block rows and the insertion sort of the kept lists.
 * Both give the same bits: each (row, block, head) dot product runs over d
 * ascending with fmaf from 0, the heads fold in ascending order with fmaf
 * (the CPU kernel's order), and the selection is la_topk's (descending
 * score, ties to the lower block, NaN first, -inf never) as a set.
 * Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_PAGED_HISA_CUH
#define LA_CUDA_PAGED_HISA_CUH

#include <stdint.h>

#include "cuda/common.cuh"

/* Block scores [T][nbmax] of every query row (+inf for the first and last
 * block of the row's range, -inf past it). The one-row score kernel
 * (decode) reads the block rows [block][dI] of the row's sequence itself:
 * the pooled sums (divided by the block's token count in shared memory) or
 * the means; the two-row one (prefill) the means transposed once per call. */
struct ph_blk_args {
    const float *psum;       /* pooled sums [max_seqs][max_blocks][dI] (mean = sum / count), or NULL: */
    int64_t max_blocks;
    const float *kbar;       /* the means [nseq][nbmax][dI] (read when psum is NULL) */
    int64_t nbmax;           /* blocks per score row (the output's row stride) */
    const int32_t *row_seq, *row_end, *lens; /* paged_meta.cuh's row metadata */
    la_cu_view q, w;         /* q [T, HI, dI] (f32, bf16, f16 or e4m3), w [T, HI] */
    int HI, dI;
    int64_t B;               /* tokens per block */
    int64_t T;               /* query rows */
    int w3;                  /* one-row tiles at 3 CTAs per SM (variant "fused3"), else 4 ("fused_guarded":
                              * read from the context by la_ph_block_scores) */
    int64_t tpc;             /* set by the launch: 128-block tiles per score CTA */
    float *kt;               /* set by the launch for two-row tiles: the means transposed, [nseq][dI][ldk] */
    int64_t ldk;
    float *out;
    int pdl;                 /* the score kernel launched as a programmatic dependent (la_cu_launch_pdl) */
    /* Family "paged_meta_overlap" (paged_index.cu): cl non-NULL (rows next_n
     * consecutive ones per sequence, no q_seq; the pooled sums; one kernel
     * after the metadata kernel, no means pass between) derives row t's
     * sequence t / next_n, length and end from context_lens exactly as
     * pg_meta_kernel does (the same clamps: [0, cap], then lenmax), reads
     * none of row_seq / row_end / lens, and is launched before the metadata
     * kernel, which follows as its programmatic dependent and runs beside
     * it (paged_meta.cu: pg_meta::after_scores). */
    const int32_t *cl;       /* context_lens [nseq] (stride cl0), or NULL: the metadata's arrays */
    int64_t cl0, next_n, cap, lenmax;
};
/* Family "paged_meta_overlap" ("on", "off"): the default (true: "on" where
 * it applies: the fused scores on the pooled sums, no q_seq, no means
 * pass) of ph_blk_args::cl. The same bits either way; "on" takes the
 * metadata kernel off the critical path (its time overlaps the block
 * scores'). A forced "on" where it does not apply runs as "off". */
constexpr bool kPagedMetaOverlap = true;
/* la_ph_block_scores' two-row tiles on the transposed means, a pass over
 * them first (prefill: T >= 16 rows a sequence), where the derived rows of
 * cl do not apply (that pass reads the metadata's lengths) */
bool la_ph_means_pass(int64_t T, int64_t nseq);
/* kt's row length: nbmax rounded up to the score kernel's 128-block tiles */
static inline int64_t ph_ldk(int64_t nbmax) { return (nbmax + 127) / 128 * 128; }

/* The family's choice (pure): *fused = 1 for "fused" (forced, or the default
 * under kPagedHisaFused) where HI <= 64 and dI <= 128, 2 for "fused3" (the
 * same with the one-row score kernel at 3 CTAs per SM and a 5-chunk ring
 * instead of 4 and 2: the same bits), 3 for "fused_guarded" (the one-row
 * kernel's d loop guarded step by step: the same bits); "classic" or
 * another shape: 0. A forced fused variant on another shape is
 * LA_ERR_UNSUPPORTED. */
la_status la_ph_select(la_context *ctx, int64_t HI, int64_t dI, int *fused);
/* The block scores of a.T rows of nseq sequences (one kernel; two-row
 * tiles: the means kernel into a workspace first). */
la_status la_ph_block_scores(ph_blk_args a, int64_t nseq, const la_context *ctx, cudaStream_t s);
/* kept [T][m]: the m best blocks of each score row sc [T][n], ascending,
 * -1 after the row's valid ones. */
la_status la_ph_block_topk(const float *sc, int64_t T, int64_t n, int64_t m, int32_t *kept, bool pdl,
                           cudaStream_t s);

/* ---- candidate scores, block-major (paged_hisa_cand.cu) -------------------
 * Family "paged_hisa_cand": "blockmajor" (the default under
 * kPagedHisaBlockMajor where a sequence has >= PC_MIN_ROWS query rows:
 * prefill) or "gather" (the paged mma.sync kernel's gather mode). The same
 * bits either way. Candidate column p of row t: token p % 128 of block
 * kept[t][p / 128] (B = 128). */
enum { PC_MIN_ROWS = 8 };
struct pc_args {
    int64_t T, m, nbmax;             /* rows, kept blocks per row, blocks per sequence (bucket stride) */
    const int32_t *kept;             /* [T][m], -1 = none */
    const int32_t *row_seq, *row_end, *lens, *table; /* paged_meta.cuh's metadata, clamped table [nseq][maxp] */
    int64_t maxp;
    const uint8_t *pages;            /* the cache's pages (sc_pages layout) */
    int64_t page_bytes;
    int32_t ps, fp8;
    const void *q;                   /* q rows contiguous: [T][HI][128] bf16 / e4m3 */
    int64_t q_nb0, q_nb1;
    const void *w;
    int w_dt;
    int64_t w_nb0, w_nb1;
    int64_t Lk;                      /* the score rows' position bound (the table's capacity) */
    float *out;                      /* [T][out_ld], columns < ncols written */
    int64_t out_ld, ncols;
    /* set by la_ph_cand_scores */
    const int32_t *list, *boff, *nwork;
    const int4 *work;                /* (bucket, list rows i0, i1, -) */
};
/* The family's choice (pure): *blockmajor for eb (1 e4m3, 2 bf16; 0 = no
 * tensor cores: never), HI 32 / 64, B 128, and by default T >= PC_MIN_ROWS
 * per sequence. A forced "blockmajor" elsewhere is LA_ERR_UNSUPPORTED.
 * Else the gather mode of la_sp_scores_paged: *ring (variant "gather", the
 * default) on the stage-ring kernel where it applies, or (forced "direct")
 * the mma.sync kernel's gather mode, the A fragments loaded into registers;
 * the same bits. *wg: variant "wgmma" (forced, or the default in place of
 * "gather" where wg_ok: la_sp_paged_wgmma_blocks_ok), DSA v2's bits on the
 * candidates' keys; forced where !wg_ok: LA_ERR_UNSUPPORTED. */
la_status la_ph_cand_select(la_context *ctx, int eb, int64_t HI, int64_t B, int64_t T, int64_t nseq, bool wg_ok,
                            int *blockmajor, int *ring, int *wg);
/* Bucket the pairs and score them (EB = eb, HI 32 or 64). */
la_status la_ph_cand_scores(pc_args a, int EB, int HI, int64_t nseq, cudaStream_t s);

#endif
