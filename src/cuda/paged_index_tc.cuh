/* Paged keys for the DSA mma.sync score kernel (dsa.cu: sc_mma_kernel in its
 * PAGED mode), used by the paged indexers (paged_index.cu).
 *
 * The kernel is the dense one: same A/B fragment layouts, same k-step order,
 * same ReLU-weighted head-sum epilogue and, for fp8 e4m3, the per-key scale
 * applied to the head sum after the dot products; only the key-row address
 * (through the block table) and the query rows of a CTA (one sequence's
 * rows) change. So a paged call scores bit for bit as the dense mma.sync
 * kernel does on the gathered keys (bf16 keys with bf16 q; e4m3 keys and
 * scales with e4m3 q, the q scale folded into w as DeepSeek's indexer does).
 *
 * Modes:
 *  - dense (a.blocks NULL, DSA): grid (key tiles of 256 over the table's
 *    capacity, nseq · rsplit); CTA (x, y) scores positions 256x .. of
 *    sequence y / rsplit for its query rows rows[row0[s] + 64·(y % rsplit)
 *    ..] (at most 64), each row over [0, end[t]) (a.range.end);
 *  - gather (a.blocks = HISA's kept blocks [T][m], ascending, -1 last):
 *    grid (column tiles of ncols, T); column p = candidate p of row t
 *    (block blocks[t][p / B], token p % B of it), as the dense gather mode;
 *    by default on paged_gather.cu's stage-ring kernel instead (below).
 * Every column < a.ncols of the CTA's rows is written (-inf where invalid).
 * Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_PAGED_INDEX_TC_CUH
#define LA_CUDA_PAGED_INDEX_TC_CUH

#include "sparse_prep.cuh"

struct sc_pages {
    const uint8_t *pages;   /* page g at pages + g·page_bytes: ps rows of dI·EB bytes, then (fp8) ps fp32 scales */
    int64_t page_bytes;
    int32_t ps;             /* tokens per page */
    int32_t fp8;            /* keys are e4m3 with per-token scales */
    const int32_t *table;   /* [nseq][maxp]: page of position p of sequence s = table[s·maxp + p / ps] */
    int64_t maxp;
    const int32_t *lens;    /* [nseq]: cached tokens per sequence */
    const int32_t *row_seq; /* [T]: the sequence of query row t */
    const int32_t *rows;    /* query rows of sequence s: rows[row0[s] .. row0[s + 1]) in query order */
    const int32_t *row0;    /* [nseq + 1] */
    int32_t rsplit;         /* dense mode: CTAs per sequence along its rows */
};

/* Whether the paged mma.sync kernel takes these args (EB = 2: bf16 q, 1: e4m3
 * q; HI in {16, 32, 64}, dI in {64, 128}, q rows contiguous and 16-byte
 * aligned; e4m3 needs an sm_90 device). */
bool la_sp_paged_tc_ok(const la_sp_score_args &a, int EB);
/* Launch it (checked by la_sp_paged_tc_ok; nseq rows of pg.table). ring:
 * gather mode on la_sp_scores_paged_gather's kernel where it applies (false:
 * the mma.sync kernel's gather mode always; the same bits). */
la_status la_sp_scores_paged(const la_sp_score_args &a, const sc_pages &pg, int EB, int64_t nseq, bool ring,
                             cudaStream_t s);

/* Gather mode on the stage-ring kernel (paged_gather.cu: key rows by
 * cp.async through the block table into shared memory, A fragments by
 * ldmatrix), the same bits as the mma.sync kernel's gather mode, which
 * la_sp_scores_paged runs where this does not apply. Whether it takes these
 * args (a.blocks set, HI 32 or 64, dI 128, EB as la_sp_paged_tc_ok checked,
 * pg.fp8 for EB 1 only, pages and page_bytes 16-byte aligned, its 106-113 KB
 * of shared memory within the device's per-CTA limit), and its
 * launch: grid (CTAs per row, T), each CTA some 256- (e4m3) or 128-row
 * (bf16) chunks of one row's candidates. */
bool la_sp_paged_gather_ok(const la_sp_score_args &a, const sc_pages &pg, int EB);
la_status la_sp_scores_paged_gather(const la_sp_score_args &a, const sc_pages &pg, int EB, cudaStream_t s);

/* Variant "wgmma" (paged_wgmma.cu): DSA dense-mode scores of an e4m3 cache
 * on wgmma m64n64k32 (keys = M, streamed through the block table; the 64
 * heads of one query row = N), equal to DSA v2 on the gathered keys. Whether
 * it takes these args (sm_90, HI 64, dI 128, e4m3 q rows 16-byte aligned,
 * a.blocks NULL), and its launch: grid (ncols / 1024, T). */
bool la_sp_paged_wgmma_ok(const la_sp_score_args &a, const sc_pages &pg);
la_status la_sp_scores_paged_wgmma(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s);
/* The same kernel's pipelined form (pw2) in gather mode: HISA's candidate
 * scores (a.blocks set, no force_ends; sm_90, HI 64, dI 128, e4m3 q and
 * cache), each equal to DSA v2's on the candidate's key; grid (ncols /
 * 1024, T), every column < ncols written (-inf where no key); pdl: as a
 * programmatic dependent of the stream's previous kernel. */
bool la_sp_paged_wgmma_blocks_ok(const la_sp_score_args &a, const sc_pages &pg);
la_status la_sp_scores_paged_wgmma_blocks(const la_sp_score_args &a, const sc_pages &pg, bool pdl, cudaStream_t s);

#endif
