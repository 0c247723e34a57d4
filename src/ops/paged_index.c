/* Paged indexer key cache and the batched paged indexers: public entry
 * points (docs/SPARSE.md "Paged serving"). Every argument is validated here,
 * before anything is written, then the CPU drivers
 * (src/cpu/paged_index_cpu.c) run; on a CUDA cache the paged indexers'
 * block_table / context_lens / q_seq values are checked on the device
 * instead (reported lazily: la_paged_index_cache_check). */
#include <stdlib.h>
#include <string.h>

#include "core/devmem.h"
#include "cpu/paged_index_cpu.h"
#include "ops/sparse_validate.h"
#ifdef LA_WITH_CUDA
#include "cuda/paged_index.cuh"
#endif

/* Host copies of int32 views on the device (an append's slots, a gather's
 * block table): they are validated on the host, as the CPU path validates
 * them. The paged indexers never copy theirs (checked on the device). */
typedef struct host_copies {
    void *buf[4];
    int n;
} host_copies;

static void host_copies_free(host_copies *h) {
    for (int i = 0; i < h->n; i++) free(h->buf[i]);
    h->n = 0;
}

/* *ht = t itself (CPU, or NULL) or a CPU tensor over a host copy of it. */
static la_status host_i32(host_copies *h, const la_tensor *t, const char *name, int ndim, la_tensor *ht,
                          const la_tensor **out) {
    *out = t;
    if (!t || t->device == LA_DEVICE_CPU) return LA_OK;
    LA_TRY(la_check_tensor(t, name, ndim, LA_DT(LA_I32), LA_DEVICE_CUDA, false));
    int64_t span = 1;
    for (int i = 0; i < t->ndim; i++) span += (t->ne[i] - 1) * t->nb[i];
    void *b = malloc((size_t)span * 4u);
    if (!b) return la_err(LA_ERR_NOMEM, "%s: out of memory for a host copy", name);
    la_status st = la_dev_download(b, t->data, (size_t)span * 4u);
    if (st != LA_OK) {
        free(b);
        return st;
    }
    h->buf[h->n++] = b;
    *ht = *t;
    ht->data = b;
    ht->device = LA_DEVICE_CPU;
    *out = ht;
    return LA_OK;
}

la_status la_paged_cache_params_init(la_paged_cache_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_paged_cache_params_init: p is NULL");
    memset(p, 0, sizeof *p);
    p->page_size = 64;
    p->head_dim = 128;
    p->dtype = LA_FP8_E4M3;
    p->block = 128;
    p->device = LA_DEVICE_CPU;
    return LA_OK;
}

la_status la_paged_query_init(la_paged_query *pq) {
    if (!pq) return la_err(LA_ERR_ARG, "la_paged_query_init: pq is NULL");
    memset(pq, 0, sizeof *pq);
    pq->next_n = 1;
    return LA_OK;
}

la_status la_paged_index_cache_destroy(la_paged_index_cache *c) {
    if (!c) return LA_OK;
#ifdef LA_WITH_CUDA
    if (c->p.device == LA_DEVICE_CUDA) la_paged_free_cuda(c);
#endif
    if (c->p.device == LA_DEVICE_CPU) {
        free(c->pages);
        free(c->psum);
    }
    free(c->pcount);
    free(c);
    return LA_OK;
}

la_status la_paged_index_cache_create(const la_paged_cache_params *pin, la_paged_index_cache **cache) {
    if (!cache) return la_err(LA_ERR_ARG, "paged cache: cache (output pointer) is NULL");
    *cache = NULL;
    if (!pin) return la_err(LA_ERR_ARG, "paged cache: params is NULL");
    la_paged_cache_params p = *pin;
#ifndef LA_WITH_CUDA
    if (p.device == LA_DEVICE_CUDA)
        return la_err(LA_ERR_UNSUPPORTED, "paged cache: device: no CUDA implementation in this build (device is cuda)");
#endif
    if (p.device != LA_DEVICE_CPU && p.device != LA_DEVICE_CUDA) return la_err(LA_ERR_ARG, "paged cache: device: unknown device %d", (int)p.device);
    if (p.num_pages <= 0) return la_err(LA_ERR_ARG, "num_pages: %lld, must be > 0", (long long)p.num_pages);
    if (p.page_size <= 0 || p.page_size > 65536)
        return la_err(LA_ERR_ARG, "page_size: %lld, must be in 1..65536", (long long)p.page_size);
    if (p.head_dim <= 0 || p.head_dim > 65536)
        return la_err(LA_ERR_ARG, "head_dim: %lld, must be in 1..65536", (long long)p.head_dim);
    if (p.block <= 0 || p.block > INT32_MAX)
        return la_err(LA_ERR_ARG, "block: %lld, must be in 1..%d", (long long)p.block, INT32_MAX);
    if (p.max_seqs < 0 || p.max_seqs > INT32_MAX)
        return la_err(LA_ERR_ARG, "max_seqs: %lld, must be in 0..%d", (long long)p.max_seqs, INT32_MAX);
    int64_t elt;
    switch (p.dtype) {
    case LA_FP8_E4M3: elt = 1; break;
    case LA_BF16: elt = 2; break;
    case LA_F32: elt = 4; break;
    default:
        return la_err(LA_ERR_DTYPE, "dtype: %s, the paged cache stores fp8_e4m3, bf16 or f32",
                      la_dtype_name(p.dtype));
    }
    if (p.num_pages > INT32_MAX / p.page_size)
        return la_err(LA_ERR_ARG, "num_pages: %lld pages of %lld tokens exceed the int32 slot range",
                      (long long)p.num_pages, (long long)p.page_size);
    const int64_t slots = p.num_pages * p.page_size;
    if (p.max_seq_len == 0) p.max_seq_len = slots;
    if (p.max_seq_len < 0 || p.max_seq_len > INT32_MAX)
        return la_err(LA_ERR_ARG, "max_seq_len: %lld, must be in 0..%d", (long long)p.max_seq_len, INT32_MAX);
    size_t page_bytes, pages_bytes, sum_bytes = 0, cnt_bytes = 0;
    LA_TRY(la_mul_size((size_t)p.page_size, (size_t)(p.head_dim * elt + (elt == 1 ? 4 : 0)), &page_bytes,
                       "paged cache: page"));
    LA_TRY(la_mul_size((size_t)p.num_pages, page_bytes, &pages_bytes, "paged cache: pages"));
    const int64_t max_blocks = p.max_seqs > 0 ? (p.max_seq_len + p.block - 1) / p.block : 0;
    if (p.max_seqs > 0) {
        LA_TRY(la_mul_size((size_t)p.max_seqs, (size_t)max_blocks, &cnt_bytes, "paged cache: pooled blocks"));
        LA_TRY(la_mul_size(cnt_bytes, (size_t)p.head_dim * 4u, &sum_bytes, "paged cache: pooled sums"));
        LA_TRY(la_mul_size(cnt_bytes, 4u, &cnt_bytes, "paged cache: pooled counts"));
    }
    la_paged_index_cache *c = calloc(1, sizeof *c);
    if (!c) return la_err(LA_ERR_NOMEM, "paged cache: out of memory");
    c->p = p;
    c->elt = elt;
    c->page_bytes = (int64_t)page_bytes;
    c->max_blocks = max_blocks;
    for (int b = 0; b < 256; b++) c->e4m3[b] = la_e4m3_to_f32((uint8_t)b);
    if (p.max_seqs > 0) c->pcount = calloc(1, cnt_bytes);
#ifdef LA_WITH_CUDA
    if (p.device == LA_DEVICE_CUDA) {
        if (p.max_seqs > 0 && !c->pcount) {
            la_paged_index_cache_destroy(c);
            return la_err(LA_ERR_NOMEM, "paged cache: out of memory for the pooled counts");
        }
        la_status st = la_paged_alloc_cuda(c, pages_bytes, sum_bytes, cnt_bytes);
        if (st != LA_OK) {
            la_paged_index_cache_destroy(c);
            return st;
        }
        *cache = c;
        la_err_clear();
        return LA_OK;
    }
#endif
    c->pages = calloc(1, pages_bytes);
    if (p.max_seqs > 0) c->psum = calloc(1, sum_bytes);
    if (!c->pages || (p.max_seqs > 0 && (!c->psum || !c->pcount))) {
        la_paged_index_cache_destroy(c);
        return la_err(LA_ERR_NOMEM, "paged cache: could not allocate %zu bytes of pages and %zu of pooled sums",
                      pages_bytes, sum_bytes + cnt_bytes);
    }
    if (elt == 1) /* scales of never-written slots: 1, so a stray read dequantizes to 0 */
        for (int64_t pg = 0; pg < p.num_pages; pg++) {
            float *sc = (float *)(c->pages + pg * c->page_bytes + p.page_size * p.head_dim);
            for (int64_t i = 0; i < p.page_size; i++) {
                const float one = 1.f;
                memcpy(sc + i, &one, 4);
            }
        }
    *cache = c;
    la_err_clear();
    return LA_OK;
}

la_status la_paged_index_cache_get_params(const la_paged_index_cache *c, la_paged_cache_params *p) {
    if (!c || !p) return la_err(LA_ERR_ARG, "paged cache: cache or params is NULL");
    *p = c->p;
    return LA_OK;
}

la_status la_paged_index_cache_storage(const la_paged_index_cache *c, void **data, size_t *page_bytes) {
    if (!c || !data || !page_bytes) return la_err(LA_ERR_ARG, "paged cache: cache, data or page_bytes is NULL");
    *data = c->pages;
    *page_bytes = (size_t)c->page_bytes;
    return LA_OK;
}

static inline int32_t i32_at(const la_tensor *t, int64_t i) { return ((const int32_t *)t->data)[i * t->nb[0]]; }

static la_status check_i32_vec_on(const la_tensor *t, const char *name, int64_t n, const char *why, la_device dev) {
    LA_TRY(la_check_tensor(t, name, 1, LA_DT(LA_I32), dev, false));
    return la_check_dim(t, name, 0, n, why);
}
static la_status check_i32_vec(const la_tensor *t, const char *name, int64_t n, const char *why) {
    return check_i32_vec_on(t, name, n, why, LA_DEVICE_CPU);
}

static la_status append_impl(la_paged_index_cache *c, const la_tensor *k, const la_tensor *slot_mapping,
                             const la_tensor *seq_ids, const la_tensor *positions, la_context *ctx,
                             host_copies *hc);

la_status la_paged_index_cache_append(la_paged_index_cache *c, const la_tensor *k,
                                      const la_tensor *slot_mapping, const la_tensor *seq_ids,
                                      const la_tensor *positions, la_context *ctx) {
    host_copies hc = {{0}, 0};
    la_status st = append_impl(c, k, slot_mapping, seq_ids, positions, ctx, &hc);
    host_copies_free(&hc);
    return st;
}

static la_status append_impl(la_paged_index_cache *c, const la_tensor *k, const la_tensor *slot_mapping,
                             const la_tensor *seq_ids, const la_tensor *positions, la_context *ctx,
                             host_copies *hc) {
    char sb[96];
    if (!c) return la_err(LA_ERR_ARG, "paged cache: cache is NULL");
    if (!k) return la_err(LA_ERR_ARG, "paged cache: k is NULL");
    if (!slot_mapping) return la_err(LA_ERR_ARG, "paged cache: slot_mapping is NULL");
    const la_tensor *views[4] = {k, slot_mapping, seq_ids, positions};
    const char *vnames[4] = {"k", "slot_mapping", "seq_ids", "positions"};
    for (int i = 0; i < 4; i++)
        if (views[i] && views[i]->device != c->p.device)
            return la_err(c->p.device == LA_DEVICE_CPU ? LA_ERR_UNSUPPORTED : LA_ERR_DEVICE,
                          "paged cache: %s is on %s, but the cache lives on the %s", vnames[i],
                          c->p.device == LA_DEVICE_CUDA ? "cuda" : "cpu",
                          views[i]->device == LA_DEVICE_CUDA ? "cuda" : "the cpu");
    const int on_cuda = c->p.device == LA_DEVICE_CUDA;
    LA_TRY(la_check_tensor(k, "k", 2, LA_DT_FLOAT, c->p.device, false));
    la_tensor hsl, hsq, hps;
    LA_TRY(host_i32(hc, slot_mapping, "slot_mapping", 1, &hsl, &slot_mapping));
    LA_TRY(host_i32(hc, seq_ids, "seq_ids", 1, &hsq, &seq_ids));
    LA_TRY(host_i32(hc, positions, "positions", 1, &hps, &positions));
    const int64_t n = k->ne[0], dI = c->p.head_dim, ps = c->p.page_size, B = c->p.block;
    if (k->ne[1] != dI)
        return la_err(LA_ERR_SHAPE, "k: [n,dI] = %s, but the cache holds keys of dI=%lld",
                      la_shape_str(k, sb, sizeof sb), (long long)dI);
    LA_TRY(check_i32_vec(slot_mapping, "slot_mapping", n, "(tokens of k)"));
    if (!seq_ids != !positions)
        return la_err(LA_ERR_ARG, "%s: seq_ids and positions go together (one of them is NULL)",
                      seq_ids ? "positions" : "seq_ids");
    const int pooled = seq_ids != NULL;
    if (pooled && !c->psum)
        return la_err(LA_ERR_ARG, "seq_ids: the cache keeps no pooled sums (created with max_seqs = 0)");
    if (pooled) {
        LA_TRY(check_i32_vec(seq_ids, "seq_ids", n, "(tokens of k)"));
        LA_TRY(check_i32_vec(positions, "positions", n, "(tokens of k)"));
    }
    const int64_t nslots = c->p.num_pages * ps;
    /* 1. values: slots, positions, finite keys */
    for (int64_t i = 0; i < n; i++) {
        const int64_t slot = i32_at(slot_mapping, i);
        if (slot < -1 || slot >= nslots)
            return la_err(LA_ERR_ARG, "slot_mapping: slot_mapping[%lld] = %lld is outside the cache "
                                      "(%lld pages x %lld = %lld slots; -1 skips)",
                          (long long)i, (long long)slot, (long long)c->p.num_pages, (long long)ps, (long long)nslots);
        for (int64_t d = 0; d < (on_cuda ? 0 : dI); d++) { /* CUDA: checked by a kernel below */
            const float x = la_load_f32(k, la_off2(k, i, d));
            if (!isfinite(x))
                return la_err(LA_ERR_ARG, "k: k[%lld][%lld] = %g is not finite (a cached key and its "
                                          "fp8 scale must be finite)",
                              (long long)i, (long long)d, (double)x);
        }
        if (!pooled || slot < 0) continue;
        const int64_t s = i32_at(seq_ids, i), pos = i32_at(positions, i);
        if (s < 0 || s >= c->p.max_seqs)
            return la_err(LA_ERR_ARG, "seq_ids: seq_ids[%lld] = %lld outside 0..%lld (max_seqs)", (long long)i,
                          (long long)s, (long long)c->p.max_seqs - 1);
        if (pos < 0 || pos >= c->p.max_seq_len)
            return la_err(LA_ERR_ARG, "positions: positions[%lld] = %lld outside 0..%lld (max_seq_len)",
                          (long long)i, (long long)pos, (long long)c->p.max_seq_len - 1);
    }
#ifdef LA_WITH_CUDA
    if (on_cuda) LA_TRY(la_paged_check_finite_cuda(k, ctx));
#endif
    /* 2. pooled order: each token continues its block; counts advance here and
     *    are rolled back if a later token breaks the order */
    int64_t *undo = NULL;
    if (pooled) {
        undo = la_ws_alloc(ctx, (size_t)(n > 0 ? n : 1) * 2 * sizeof(int64_t));
        if (!undo) return la_err(LA_ERR_NOMEM, "paged cache: out of memory validating %lld tokens", (long long)n);
        int64_t nu = 0;
        for (int64_t i = 0; i < n; i++) {
            if (i32_at(slot_mapping, i) < 0) continue;
            const int64_t s = i32_at(seq_ids, i), pos = i32_at(positions, i);
            const int64_t b = pos / B, r = pos % B, at = s * c->max_blocks + b;
            if (r != 0 && c->pcount[at] != r) {
                const int64_t have = c->pcount[at];
                for (int64_t u = nu - 1; u >= 0; u--) c->pcount[undo[2 * u]] = (int32_t)undo[2 * u + 1];
                la_ws_free(ctx, undo);
                return la_err(LA_ERR_ARG, "positions: positions[%lld] = %lld of sequence %lld, but its block %lld "
                                          "holds %lld tokens (a block's tokens are appended in position order)",
                              (long long)i, (long long)pos, (long long)s, (long long)b, (long long)have);
            }
            undo[2 * nu] = at;
            undo[2 * nu + 1] = c->pcount[at];
            nu++;
            c->pcount[at] = (int32_t)(r + 1);
        }
    }
#ifdef LA_WITH_CUDA
    if (on_cuda) {
        int32_t *hs = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1) * 3);
        la_status st = LA_OK;
        if (!hs) {
            st = la_err(LA_ERR_NOMEM, "paged cache: out of memory");
        } else {
            for (int64_t i = 0; i < n; i++) {
                hs[i] = i32_at(slot_mapping, i);
                if (pooled) hs[n + i] = i32_at(seq_ids, i), hs[2 * n + i] = i32_at(positions, i);
            }
            st = la_paged_store_cuda(c, k, hs, pooled ? hs + n : NULL, pooled ? hs + 2 * n : NULL, n, ctx);
            free(hs);
        }
        la_ws_free(ctx, undo);
        if (st == LA_OK) la_err_clear();
        return st;
    }
#endif
    /* 3. write: store each row, then add its stored values to its block sum in
     *    token order (a block's first position restarts the sum) */
    float *row = la_ws_alloc(ctx, (size_t)dI * 8u);
    if (!row) {
        la_ws_free(ctx, undo);
        return la_err(LA_ERR_NOMEM, "paged cache: out of memory");
    }
    float *stored = row + dI;
    for (int64_t i = 0; i < n; i++) {
        const int64_t slot = i32_at(slot_mapping, i);
        if (slot < 0) continue;
        for (int64_t d = 0; d < dI; d++) row[d] = la_load_f32(k, la_off2(k, i, d));
        la_paged_store_row(c, slot, row, stored);
        if (!pooled) continue;
        const int64_t s = i32_at(seq_ids, i), pos = i32_at(positions, i);
        float *sum = c->psum + (s * c->max_blocks + pos / B) * dI;
        if (pos % B == 0)
            for (int64_t d = 0; d < dI; d++) sum[d] = 0.f;
        for (int64_t d = 0; d < dI; d++) sum[d] += stored[d];
    }
    la_ws_free(ctx, row);
    la_ws_free(ctx, undo);
    la_err_clear();
    return LA_OK;
}

/* block_table int32 [nseq, max_pages] on the CPU. */
static la_status check_table(const la_paged_index_cache *c, const la_tensor *bt) {
    if (!bt) return la_err(LA_ERR_ARG, "paged: block_table is NULL");
    if (bt->device != LA_DEVICE_CPU) /* device tables arrive here as host copies */
        return la_err(LA_ERR_UNSUPPORTED, "paged: block_table is on cuda, but the cache lives on the cpu");
    return la_check_tensor(bt, "block_table", 2, LA_DT(LA_I32), LA_DEVICE_CPU, false);
}

/* Pages [0, ceil(len/page_size)) of row `row` name pages of the cache. */
static la_status check_row_pages(const la_paged_index_cache *c, const la_tensor *bt, int64_t row, int64_t len) {
    const int64_t ps = c->p.page_size, np = (len + ps - 1) / ps;
    if (np > bt->ne[1])
        return la_err(LA_ERR_ARG, "context_lens: sequence %lld has %lld tokens, over the block table's capacity "
                                  "%lld pages x %lld = %lld",
                      (long long)row, (long long)len, (long long)bt->ne[1], (long long)ps, (long long)(bt->ne[1] * ps));
    const int32_t *t = (const int32_t *)bt->data;
    for (int64_t j = 0; j < np; j++) {
        const int64_t pg = t[row * bt->nb[0] + j * bt->nb[1]];
        if (pg < 0 || pg >= c->p.num_pages)
            return la_err(LA_ERR_ARG, "block_table: block_table[%lld][%lld] = %lld is outside the cache's "
                                      "pages 0..%lld",
                          (long long)row, (long long)j, (long long)pg, (long long)c->p.num_pages - 1);
    }
    return LA_OK;
}

/* Block b of sequence s holds min(B, len - b·B) pooled tokens for b < ceil(len/B). */
static la_status check_pooled(const la_paged_index_cache *c, int64_t s, int64_t len, int64_t B) {
    if (s >= c->p.max_seqs)
        return la_err(LA_ERR_ARG, "block_table: sequence %lld has no pooled sums (the cache keeps max_seqs = %lld)",
                      (long long)s, (long long)c->p.max_seqs);
    if (len > c->p.max_seq_len)
        return la_err(LA_ERR_ARG, "context_lens: sequence %lld has %lld tokens, over the pooled max_seq_len %lld",
                      (long long)s, (long long)len, (long long)c->p.max_seq_len);
    const int64_t nb = (len + B - 1) / B;
    for (int64_t b = 0; b < nb; b++) {
        const int64_t want = len - b * B < B ? len - b * B : B;
        const int64_t have = c->pcount[s * c->max_blocks + b];
        if (have != want)
            return la_err(LA_ERR_ARG, "context_lens: sequence %lld has %lld tokens, so its block %lld should hold %lld "
                                      "pooled tokens, but it holds %lld (append with seq_ids/positions)",
                          (long long)s, (long long)len, (long long)b, (long long)want, (long long)have);
    }
    return LA_OK;
}

static la_status gather_impl(const la_paged_index_cache *c, const la_tensor *bt, int64_t row, int64_t len,
                             la_tensor *out);

la_status la_paged_index_cache_gather(const la_paged_index_cache *c, const la_tensor *bt, int64_t row,
                                      int64_t len, la_tensor *out) {
    if (!c) return la_err(LA_ERR_ARG, "paged cache: cache is NULL");
    host_copies hc = {{0}, 0};
    la_tensor hbt;
    la_status st = c->p.device == LA_DEVICE_CUDA ? host_i32(&hc, bt, "block_table", 2, &hbt, &bt) : LA_OK;
    if (st == LA_OK) st = gather_impl(c, bt, row, len, out);
    host_copies_free(&hc);
    return st;
}

static la_status gather_impl(const la_paged_index_cache *c, const la_tensor *bt, int64_t row, int64_t len,
                             la_tensor *out) {
    LA_TRY(check_table(c, bt));
    if (row < 0 || row >= bt->ne[0])
        return la_err(LA_ERR_ARG, "row: %lld outside the block table's %lld rows", (long long)row, (long long)bt->ne[0]);
    if (len <= 0) return la_err(LA_ERR_ARG, "len: %lld, must be > 0", (long long)len);
    LA_TRY(check_row_pages(c, bt, row, len));
    if (!out) return la_err(LA_ERR_ARG, "paged cache: out is NULL");
    LA_TRY(la_check_tensor(out, "out", 2, LA_DT(LA_F32), c->p.device, false));
    LA_TRY(la_check_dim(out, "out", 0, len, "(len)"));
    LA_TRY(la_check_dim(out, "out", 1, c->p.head_dim, "(head_dim)"));
    const int64_t ps = c->p.page_size, dI = c->p.head_dim;
    const int32_t *t = (const int32_t *)bt->data;
#ifdef LA_WITH_CUDA
    if (c->p.device == LA_DEVICE_CUDA) {
        const int64_t np = (len + ps - 1) / ps;
        int32_t *pl = malloc(sizeof(int32_t) * (size_t)np);
        if (!pl) return la_err(LA_ERR_NOMEM, "paged cache: out of memory");
        for (int64_t j = 0; j < np; j++) pl[j] = t[row * bt->nb[0] + j * bt->nb[1]];
        la_status st = la_paged_gather_cuda(c, pl, len, out, NULL);
        free(pl);
        if (st == LA_OK) la_err_clear();
        return st;
    }
#endif
    float *tmp = malloc((size_t)dI * 4u);
    if (!tmp) return la_err(LA_ERR_NOMEM, "paged cache: out of memory");
    for (int64_t s = 0; s < len; s++) {
        const int64_t pg = t[row * bt->nb[0] + (s / ps) * bt->nb[1]];
        la_paged_load_row(c, pg * ps + s % ps, tmp);
        for (int64_t d = 0; d < dI; d++) ((float *)out->data)[la_off2(out, s, d)] = tmp[d];
    }
    free(tmp);
    la_err_clear();
    return LA_OK;
}

la_status la_paged_index_cache_pooled(const la_paged_index_cache *c, int64_t seq, int64_t len, la_tensor *out) {
    if (!c) return la_err(LA_ERR_ARG, "paged cache: cache is NULL");
    if (!c->psum) return la_err(LA_ERR_ARG, "paged cache: the cache keeps no pooled sums (max_seqs = 0)");
    if (seq < 0) return la_err(LA_ERR_ARG, "seq: %lld is negative", (long long)seq);
    if (len <= 0) return la_err(LA_ERR_ARG, "len: %lld, must be > 0", (long long)len);
    const int64_t B = c->p.block, dI = c->p.head_dim, nb = (len + B - 1) / B;
    LA_TRY(check_pooled(c, seq, len, B));
    if (!out) return la_err(LA_ERR_ARG, "paged cache: out is NULL");
    LA_TRY(la_check_tensor(out, "out", 2, LA_DT(LA_F32), c->p.device, false));
    LA_TRY(la_check_dim(out, "out", 0, nb, "(ceil(len/block) blocks)"));
    LA_TRY(la_check_dim(out, "out", 1, dI, "(head_dim)"));
#ifdef LA_WITH_CUDA
    if (c->p.device == LA_DEVICE_CUDA) {
        la_status st = la_paged_pooled_cuda(c, seq, len, out, NULL);
        if (st == LA_OK) la_err_clear();
        return st;
    }
#endif
    for (int64_t b = 0; b < nb; b++) {
        const int64_t at = seq * c->max_blocks + b;
        for (int64_t d = 0; d < dI; d++)
            ((float *)out->data)[la_off2(out, b, d)] = la_idx_block_mean(c->psum[at * dI + d], c->pcount[at]);
    }
    la_err_clear();
    return LA_OK;
}

/* Validates a paged indexer call and resolves its sequences (seqs[nseq],
 * rows[T], both malloc'd into *mem). */
static la_status resolve_paged(const char *op, const la_index_params *p, int hisa, const la_tensor *q,
                               const la_tensor *w, const la_paged_index_cache *c, const la_paged_query *pq_in,
                               const la_tensor *idx, la_paged_seq **seqs_out, int64_t *nseq_out, void **mem) {
    char sq[96], sw[96];
    *mem = NULL;
    if (!p) return la_err(LA_ERR_ARG, "%s: params is NULL", op);
    if (!q) return la_err(LA_ERR_ARG, "%s: q is NULL", op);
    if (!w) return la_err(LA_ERR_ARG, "%s: w is NULL", op);
    if (!c) return la_err(LA_ERR_ARG, "%s: cache is NULL", op);
    if (!pq_in) return la_err(LA_ERR_ARG, "%s: query (la_paged_query) is NULL", op);
    if (!idx) return la_err(LA_ERR_ARG, "%s: idx (output) is NULL", op);
    if (!pq_in->context_lens) return la_err(LA_ERR_ARG, "%s: context_lens is NULL", op);
    la_paged_query hq = *pq_in;
    const la_paged_query *pq = &hq;
    const la_tensor *views[6] = {q, w, idx, pq->block_table, pq->context_lens, pq->q_seq};
    const char *vnames[6] = {"q", "w", "idx", "block_table", "context_lens", "q_seq"};
    for (int i = 0; i < 6; i++)
        if (views[i] && views[i]->device != c->p.device)
            return la_err(c->p.device == LA_DEVICE_CPU ? LA_ERR_UNSUPPORTED : LA_ERR_DEVICE,
                          "%s: %s is on %s, but the cache lives on the %s", op, vnames[i],
                          views[i]->device == LA_DEVICE_CUDA ? "cuda" : "cpu",
                          c->p.device == LA_DEVICE_CUDA ? "cuda" : "cpu");
    if (p->k_scale || p->q_scale)
        return la_err(LA_ERR_ARG, "%s: k_scale/q_scale: the paged cache holds its own scales; pass NULL", op);
    const unsigned fmask = LA_DT_FLOAT;
    /* e4m3 q (an fp8 cache; its scale folded into w, as DeepSeek's indexer
     * does): the tensor-core path of the CUDA cache, decoded exactly on the CPU */
    LA_TRY(la_check_tensor(q, "q", 3, c->p.dtype == LA_FP8_E4M3 ? fmask | LA_DT(LA_FP8_E4M3) : fmask,
                           c->p.device, false));
    LA_TRY(la_check_tensor(w, "w", 2, fmask, c->p.device, false));
    LA_TRY(la_check_tensor(idx, "idx", 2, LA_DT(LA_I32), c->p.device, false));
    /* CUDA: block_table, context_lens and q_seq stay on the device (their
     * values are checked there: la_paged_topk_cuda); shapes are checked here */
    const int on_cuda = c->p.device == LA_DEVICE_CUDA;
    if (on_cuda) {
        if (!pq->block_table) return la_err(LA_ERR_ARG, "paged: block_table is NULL");
        LA_TRY(la_check_tensor(pq->block_table, "block_table", 2, LA_DT(LA_I32), LA_DEVICE_CUDA, false));
    } else {
        LA_TRY(check_table(c, pq->block_table));
    }
    const int64_t T = q->ne[0], HI = q->ne[1], dI = q->ne[2], nseq = pq->block_table->ne[0];
    /* the shapes' strings only for a message (per call they cost more than
     * the checks around them) */
    if (dI != c->p.head_dim)
        return la_err(LA_ERR_SHAPE, "q: [T,HI,dI] = %s, but the cache holds keys of dI=%lld",
                      la_shape_str(q, sq, sizeof sq), (long long)c->p.head_dim);
    if (HI > 65536) return la_err(LA_ERR_SHAPE, "q: %s has HI above 65536", la_shape_str(q, sq, sizeof sq));
    if (w->ne[0] != T || w->ne[1] != HI)
        return la_err(LA_ERR_SHAPE, "w: shape %s, expected [T,HI] = [%lld, %lld] from q %s",
                      la_shape_str(w, sw, sizeof sw), (long long)T, (long long)HI, la_shape_str(q, sq, sizeof sq));
    if (p->topk <= 0) return la_err(LA_ERR_ARG, "topk: %lld, must be > 0", (long long)p->topk);
    LA_TRY(la_check_dim(idx, "idx", 0, T, "(queries of q)"));
    LA_TRY(la_check_dim(idx, "idx", 1, p->topk, "(topk)"));
    if (hisa) {
        LA_TRY(la_idx_check_blocks(op, p, 1));
        if (c->psum && p->block != c->p.block)
            return la_err(LA_ERR_ARG, "block: params ask for blocks of %lld, but the cache pools blocks of %lld",
                          (long long)p->block, (long long)c->p.block);
    }
    const la_device dev = c->p.device;
    LA_TRY(check_i32_vec_on(pq->context_lens, "context_lens", nseq, "(rows of block_table)", dev));
    if (pq->q_seq) {
        LA_TRY(check_i32_vec_on(pq->q_seq, "q_seq", T, "(queries of q)", dev));
        if (T > 0 && nseq == 0)
            return la_err(LA_ERR_SHAPE, "q_seq: %lld query rows, but block_table has no rows", (long long)T);
    } else {
        if (pq->next_n <= 0) return la_err(LA_ERR_ARG, "next_n: %lld, must be > 0", (long long)pq->next_n);
        if (T != nseq * pq->next_n)
            return la_err(LA_ERR_SHAPE, "q: %s has T=%lld query rows, expected nseq x next_n = %lld x %lld",
                          la_shape_str(q, sq, sizeof sq),
                          (long long)T, (long long)nseq, (long long)pq->next_n);
    }
    const la_tensor *ins[5] = {q, w, pq->block_table, pq->context_lens, pq->q_seq};
    for (int i = 0; i < 5; i++)
        if (ins[i] && la_tensors_overlap(idx, ins[i]))
            return la_err(LA_ERR_ARG, "idx: overlaps input %s in memory (outputs must not alias inputs)", vnames[i < 2 ? i : i + 1]);
    if (on_cuda) {
        if (pq->block_table->ne[1] > INT32_MAX / c->p.page_size)
            return la_err(LA_ERR_SHAPE, "block_table: %lld pages per row x %lld tokens exceed the int32 positions",
                          (long long)pq->block_table->ne[1], (long long)c->p.page_size);
        if (hisa && c->psum && nseq > c->p.max_seqs)
            return la_err(LA_ERR_ARG, "block_table: %lld rows, but the cache keeps pooled sums of max_seqs = %lld "
                                      "sequences", (long long)nseq, (long long)c->p.max_seqs);
        *nseq_out = nseq;
        return LA_OK;
    }
    for (int64_t s = 0; s < nseq; s++) {
        const int64_t len = i32_at(pq->context_lens, s);
        if (len < 0)
            return la_err(LA_ERR_ARG, "context_lens: context_lens[%lld] = %lld is negative", (long long)s, (long long)len);
        LA_TRY(check_row_pages(c, pq->block_table, s, len));
        if (hisa && c->psum && len > 0) LA_TRY(check_pooled(c, s, len, p->block < len ? p->block : len));
    }
    size_t bytes;
    LA_TRY(la_mul_size((size_t)nseq, sizeof(la_paged_seq), &bytes, "paged: sequences"));
    void *m = malloc(bytes + (size_t)T * sizeof(int64_t) + 1);
    if (!m) return la_err(LA_ERR_NOMEM, "%s: out of memory for %lld sequences", op, (long long)nseq);
    la_paged_seq *seqs = m;
    int64_t *rows = (int64_t *)((char *)m + bytes);
    /* rows grouped by sequence, in query order */
    for (int64_t s = 0; s < nseq; s++) seqs[s].nq = 0;
    for (int64_t t = 0; t < T; t++) {
        const int64_t s = pq->q_seq ? i32_at(pq->q_seq, t) : t / pq->next_n;
        if (s < 0 || s >= nseq) {
            free(m);
            return la_err(LA_ERR_ARG, "q_seq: q_seq[%lld] = %lld outside the block table's rows 0..%lld",
                          (long long)t, (long long)s, (long long)nseq - 1);
        }
        seqs[s].nq++;
    }
    int64_t at = 0;
    for (int64_t s = 0; s < nseq; s++) {
        seqs[s].rows = rows + at;
        at += seqs[s].nq;
        seqs[s].nq = 0;
        seqs[s].len = i32_at(pq->context_lens, s);
        seqs[s].pages = (const int32_t *)pq->block_table->data + s * pq->block_table->nb[0];
        if (pq->block_table->nb[1] != 1) { /* the drivers read rows contiguously */
            free(m);
            return la_err(LA_ERR_ARG, "block_table: rows must be contiguous (stride %lld along max_pages)",
                          (long long)pq->block_table->nb[1]);
        }
    }
    for (int64_t t = 0; t < T; t++) {
        const int64_t s = pq->q_seq ? i32_at(pq->q_seq, t) : t / pq->next_n;
        ((int64_t *)seqs[s].rows)[seqs[s].nq++] = t;
    }
    *seqs_out = seqs;
    *nseq_out = nseq;
    *mem = m;
    return LA_OK;
}

#ifdef LA_WITH_CUDA
/* The first device-found error of st (LA_PG_*) as a status naming its argument. */
static la_status status_error(const char *op, const int32_t *st, const char *when) {
    const long long a = st[2], b = st[3], v = st[4], x = st[5];
    switch (st[1]) {
    case LA_PG_BAD_PAGE:
        return la_err(LA_ERR_ARG, "block_table: block_table[%lld][%lld] = %lld is outside the cache's pages 0..%lld "
                                  "(%s: %s; found on the device, read as page 0)", a, b, v, x - 1, op, when);
    case LA_PG_BAD_LEN:
        return la_err(LA_ERR_ARG, "context_lens: context_lens[%lld] = %lld is negative or over the block table's "
                                  "capacity of %lld tokens (%s: %s; found on the device, clamped)", a, v, x, op, when);
    case LA_PG_BAD_QSEQ:
        return la_err(LA_ERR_ARG, "q_seq: q_seq[%lld] = %lld outside the block table's rows 0..%lld (%s: %s; found "
                                  "on the device, clamped)", a, v, x - 1, op, when);
    case LA_PG_BAD_POOL:
        if (b < 0)
            return la_err(LA_ERR_ARG, "context_lens: sequence %lld has %lld tokens, over the pooled max_seq_len %lld "
                                      "(%s: %s; found on the device, clamped)", a, v, x, op, when);
        return la_err(LA_ERR_ARG, "context_lens: sequence %lld has %lld tokens, but its block %lld holds %lld pooled "
                                  "tokens (append with seq_ids/positions; %s: %s; found on the device)", a, v, b, x,
                      op, when);
    default:
        return la_err(LA_ERR_ARG, "paged: status word %d from the device (%s: %s)", (int)st[0], op, when);
    }
}
#endif

la_status la_paged_index_cache_check(const la_paged_index_cache *c, la_context *ctx) {
    if (!c) return la_err(LA_ERR_ARG, "paged cache: cache is NULL");
#ifdef LA_WITH_CUDA
    if (c->p.device == LA_DEVICE_CUDA) {
        int32_t st[LA_PG_STATUS_WORDS];
        LA_TRY(la_paged_status_cuda(c, 1, st, ctx));
        if (st[0]) return status_error("la_paged_index_cache_check", st, "a paged call since the last check");
    }
#endif
    la_err_clear();
    return LA_OK;
}

static la_status run_paged(const char *op, int hisa, const la_index_params *p, const la_tensor *q,
                           const la_tensor *w, const la_paged_index_cache *c, const la_paged_query *pq,
                           la_tensor *idx, la_context *ctx) {
    la_paged_seq *seqs = NULL;
    int64_t nseq = 0;
    void *mem = NULL;
#ifdef LA_WITH_CUDA
    if (c && c->p.device == LA_DEVICE_CUDA) { /* an error an earlier call found on the device, if seen by now */
        int32_t st[LA_PG_STATUS_WORDS];
        LA_TRY(la_paged_status_cuda(c, 0, st, ctx));
        if (st[0]) return status_error(op, st, "an earlier paged call on this cache");
    }
#endif
    la_status s = resolve_paged(op, p, hisa, q, w, c, pq, idx, &seqs, &nseq, &mem);
    if (s == LA_OK) {
#ifdef LA_WITH_CUDA
        if (c->p.device == LA_DEVICE_CUDA)
            s = la_paged_topk_cuda(c, p, hisa, q, w, pq, idx, ctx);
        else
#endif
            s = la_paged_topk_cpu(c, p, hisa, q, w, seqs, nseq, pq->return_slots != 0, idx, ctx);
    }
    free(mem);
    if (s == LA_OK) la_err_clear();
    return s;
}

la_status la_dsa_topk_paged(const la_index_params *p, const la_tensor *q, const la_tensor *w,
                            const la_paged_index_cache *cache, const la_paged_query *pq, la_tensor *idx,
                            la_context *ctx) {
    return run_paged("dsa_paged", 0, p, q, w, cache, pq, idx, ctx);
}

la_status la_hisa_topk_paged(const la_index_params *p, const la_tensor *q, const la_tensor *w,
                             const la_paged_index_cache *cache, const la_paged_query *pq, la_tensor *idx,
                             la_context *ctx) {
    return run_paged("hisa_paged", 1, p, q, w, cache, pq, idx, ctx);
}
