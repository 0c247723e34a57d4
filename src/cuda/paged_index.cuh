/* CUDA backend of the paged indexer key cache (src/cuda/paged_index.cu).
 * The entry points (src/ops/paged_index.c) validate appends and gathers on
 * the host (their slots and page lists are copied down for that); the
 * paged indexers are checked on the host by shape only, and by value on the
 * device (la_paged_topk_cuda: clamped reads and the cache's status words).
 * Internal. */
#ifndef LA_PAGED_INDEX_CUH
#define LA_PAGED_INDEX_CUH
#include "cpu/paged_index_cpu.h"
#ifdef __cplusplus
extern "C" {
#endif
/* Device pages / pooled sums and counts / status words of a cache created
 * on CUDA (zeroed; cnt_bytes = 0 without pooled sums). */
la_status la_paged_alloc_cuda(struct la_paged_index_cache *c, size_t pages_bytes, size_t sum_bytes,
                              size_t cnt_bytes);
void la_paged_free_cuda(struct la_paged_index_cache *c);
/* LA_ERR_ARG naming k[i][d] if the device view k [n,dI] holds a non-finite value. */
la_status la_paged_check_finite_cuda(const la_tensor *k, la_context *ctx);
/* Store n keys (device view k) at the host-validated slots; with seq/pos
 * (host arrays, NULL = no pooled update) add the stored keys to their
 * block sums in token order. */
la_status la_paged_store_cuda(struct la_paged_index_cache *c, const la_tensor *k, const int32_t *slots,
                              const int32_t *seq, const int32_t *pos, int64_t n, la_context *ctx);
/* Dequantized keys of positions [0,len) of a host page list into device out f32 [len,dI]. */
la_status la_paged_gather_cuda(const struct la_paged_index_cache *c, const int32_t *pages, int64_t len,
                               la_tensor *out, la_context *ctx);
/* Pooled means of sequence seq (counts validated) into device out f32 [nb,dI]. */
la_status la_paged_pooled_cuda(const struct la_paged_index_cache *c, int64_t seq, int64_t len,
                               la_tensor *out, la_context *ctx);
/* The batched paged indexers on device views (shapes checked on the host,
 * values on the device: an out-of-range page id, length or q_seq entry is
 * clamped and recorded in the cache's status words). */
la_status la_paged_topk_cuda(const struct la_paged_index_cache *c, const la_index_params *p, int hisa,
                             const la_tensor *q, const la_tensor *w, const la_paged_query *pq,
                             la_tensor *idx, la_context *ctx);
/* The status words into out[LA_PG_STATUS_WORDS], then cleared. wait = 1:
 * after the context stream's work (a synchronization); wait = 0: only when
 * the pinned mirror already shows an error (no synchronization otherwise;
 * out[0] = 0 then). */
la_status la_paged_status_cuda(const struct la_paged_index_cache *c, int wait, int32_t *out, la_context *ctx);
#ifdef __cplusplus
}
#endif
#endif
