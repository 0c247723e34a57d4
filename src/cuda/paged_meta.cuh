/* Device-side metadata of a paged indexer call (paged_meta.cu), used by
 * la_paged_topk_cuda (paged_index.cu). Internal; included by src/cuda/*.cu. */
#ifndef LA_CUDA_PAGED_META_CUH
#define LA_CUDA_PAGED_META_CUH

#include <stdint.h>

#include "cuda/common.cuh"

/* ---- device-side metadata of a paged call ----------------------------------
 * One CTA per sequence s reads its context length, block-table row and (with
 * q_seq) every query row's sequence, and writes the call's metadata in the
 * layout of paged_index_tc.cuh's sc_pages. The values are checked here, not
 * on the host: a bad one is clamped (a page id to 0, a length to [0, cap], a
 * q_seq entry to [0, nseq)), so no kernel reads outside the cache or the
 * table, and recorded in the cache's status words (LA_PG_*). */
struct pg_meta {
    const int32_t *bt, *cl, *qs; /* the caller's block_table, context_lens, q_seq (or NULL) views */
    int64_t bt0, bt1, maxp, cl0, qs0, next_n, nseq, T, num_pages, ps;
    int64_t cap;                 /* maxp · ps: the table's capacity in tokens */
    int64_t lenmax;              /* cap, or the pooled max_seq_len when below it (HISA on pooled sums) */
    const int32_t *pcount;       /* HISA on pooled sums: the device counts [max_seqs][max_blocks], else NULL */
    int64_t max_blocks, B;
    int32_t *status;
    int32_t *mirror;             /* the status's mapped host word: set nonzero with any error */
    int32_t *tab, *row_seq, *row_end, *lens, *rows, *row0; /* out: [nseq][maxp], [T], [T], [nseq], [T], [nseq+1] */
    /* launched right after HISA's block scores as their programmatic dependent
     * (family "paged_meta_overlap"; the packed kernel's shape only): it runs
     * beside them and waits for them before it exits, so that the kernels
     * after it, plain launches, see both grids' writes */
    int after_scores;
};

/* pg_meta_kernel over M.nseq sequences (one CTA each) on stream s; for
 * rows without q_seq on HISA's pooled sums short of the means pass
 * (la_ph_means_pass: where family "paged_meta_overlap" may run the block
 * scores beside it), pg_meta_packed_kernel (one warp a sequence): the same
 * outputs and flags. */
la_status la_pg_meta_launch(const pg_meta &M, cudaStream_t s);
/* The most query rows of one sequence in q_seq [T] (device view), read back
 * to the host: only where the bound T would overflow the scoring grid.
 * Entries outside 0..nseq-1 count as the clamped ones do. */
la_status la_pg_max_rows(const la_tensor *qs, int64_t nseq, int64_t *maxnq);

#endif
