/* Sparse MLA decode over a paged latent cache (docs/SPARSE.md "Paged
 * serving"): la_sparse_attention on the flat view of the pages.
 *
 * kv_cache [num_pages, page_size, Dqk] holds one latent kv head; slot s is
 * row s of the cache viewed as [num_pages·page_size, Dqk] (s = page·page_size
 * + offset, the indices the paged indexers return with return_slots). The
 * op validates the cache view and every slot, then runs the existing sparse
 * attention (CPU or CUDA) on the flat view: the same kernel on the same rows
 * as the dense call on the gathered keys, so the results are bit-equal.
 *
 * No block_table argument: a paged serving engine (FlashMLA's sparse decode,
 * sglang, vLLM) hands the attention cache slots, and the paged indexers give
 * them directly (return_slots), so positions → slots is the indexer's job;
 * the Python wrapper maps positions through a block table for callers that
 * hold positions. */
#include <stdint.h>
#include <stdlib.h>

#include "core/devmem.h"
#include "core/internal.h"
#include "ops/sparse_validate.h"

/* kv_cache [num_pages, page_size, Dqk] → flat [num_pages·page_size, Dqk]. */
static la_status flat_view(const la_tensor *q, const la_tensor *kv, la_tensor *flat) {
    char sk[96], sq[96];
    LA_TRY(la_check_tensor(kv, "kv_cache", 3, LA_DT(LA_F32) | LA_DT(LA_BF16), q->device, false));
    la_shape_str(kv, sk, sizeof sk);
    la_shape_str(q, sq, sizeof sq);
    const int64_t P = kv->ne[0], S = kv->ne[1], D = kv->ne[2];
    if (D != q->ne[2])
        return la_err(LA_ERR_SHAPE, "kv_cache: [num_pages,page_size,Dqk] = %s has Dqk=%lld, but q "
                      "[T,Hq,Dqk] = %s has Dqk=%lld", sk, (long long)D, sq, (long long)q->ne[2]);
    if (kv->dtype != q->dtype)
        return la_err(LA_ERR_DTYPE, "kv_cache: dtype %s, but q has dtype %s (they must match)",
                      la_dtype_name(kv->dtype), la_dtype_name(q->dtype));
    if (S > INT32_MAX / P)
        return la_err(LA_ERR_SHAPE, "kv_cache: %s has %lld pages of %lld tokens, more slots than "
                      "the int32 range of idx_slots", sk, (long long)P, (long long)S);
    /* The flat view needs one row stride: consecutive pages one page apart. */
    int64_t row_stride = S == 1 ? kv->nb[0] : kv->nb[1];
    if (P > 1 && S > 1 && kv->nb[0] != S * kv->nb[1])
        return la_err(LA_ERR_ARG, "kv_cache: %s has page stride %lld, but page_size·token stride = "
                      "%lld·%lld (pages must be contiguous so that slot = page·page_size + offset "
                      "is one row of the flat cache)", sk, (long long)kv->nb[0], (long long)S,
                      (long long)kv->nb[1]);
    *flat = *kv;
    flat->ndim = 2;
    flat->ne[0] = P * S;
    flat->ne[1] = D;
    flat->nb[0] = row_stride;
    flat->nb[1] = kv->nb[2];
    flat->ne[2] = flat->nb[2] = 0;
    return LA_OK;
}

/* Every slot is -1 or in 0..nslots-1 (idx_slots checked as int32 [T,k] on
 * q's device; a CUDA view is read through a host copy). */
static la_status check_slots(const la_tensor *idx, int64_t nslots, const char *sk) {
    const int32_t *v = idx->data;
    void *host = NULL;
    if (idx->device == LA_DEVICE_CUDA) {
        const size_t span = (size_t)((idx->ne[0] - 1) * idx->nb[0] + (idx->ne[1] - 1) * idx->nb[1] + 1);
        size_t bytes;
        LA_TRY(la_mul_size(span, sizeof(int32_t), &bytes, "idx_slots host copy"));
        host = malloc(bytes);
        if (!host) return la_err(LA_ERR_NOMEM, "idx_slots: out of memory for a host copy");
        la_status st = la_dev_download(host, idx->data, bytes);
        if (st != LA_OK) {
            free(host);
            return st;
        }
        v = host;
    }
    la_status st = LA_OK;
    for (int64_t t = 0; t < idx->ne[0] && st == LA_OK; t++)
        for (int64_t j = 0; j < idx->ne[1]; j++) {
            const int64_t s = v[t * idx->nb[0] + j * idx->nb[1]];
            if (s == -1 || (s >= 0 && s < nslots)) continue;
            st = la_err(LA_ERR_ARG, "idx_slots: idx_slots[%lld][%lld] = %lld is outside the cache's slots "
                        "0..%lld (kv_cache %s; -1 skips)", (long long)t, (long long)j, (long long)s,
                        (long long)(nslots - 1), sk);
            break;
        }
    free(host);
    return st;
}

la_status la_sparse_attention_paged(const la_sparse_attn_params *p, const la_tensor *q,
                                    const la_tensor *kv_cache, const la_tensor *idx_slots,
                                    la_tensor *out, la_tensor *lse, la_context *ctx) {
    if (!p) return la_err(LA_ERR_ARG, "sparse-attn-paged: params is NULL");
    if (!q) return la_err(LA_ERR_ARG, "sparse-attn-paged: q is NULL");
    if (!kv_cache) return la_err(LA_ERR_ARG, "sparse-attn-paged: kv_cache is NULL");
    if (!idx_slots) return la_err(LA_ERR_ARG, "sparse-attn-paged: idx_slots is NULL");
    if (!out) return la_err(LA_ERR_ARG, "sparse-attn-paged: out is NULL");
    LA_TRY(la_sparse_check_device("sparse-attn-paged", "q", q->device));
    LA_TRY(la_check_tensor(q, "q", 3, LA_DT(LA_F32) | LA_DT(LA_BF16), q->device, false));
    la_tensor flat;
    LA_TRY(flat_view(q, kv_cache, &flat));
    LA_TRY(la_check_tensor(idx_slots, "idx_slots", 2, LA_DT(LA_I32), q->device, false));
    /* the remaining views (out, lse, dv, scale, aliasing) as the dense call */
    LA_TRY(la_sparse_attn_check_call(p, q, &flat, idx_slots, out, lse));
    char sk[96];
    la_shape_str(kv_cache, sk, sizeof sk);
    LA_TRY(check_slots(idx_slots, flat.ne[0], sk));
    return la_sparse_attention(p, q, &flat, idx_slots, out, lse, ctx);
}
