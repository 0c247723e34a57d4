/* Decode-time indexer key cache (SPEC §7 step 1, "maintained incrementally").
 *
 * The cache holds the indexer keys appended so far (f32) and the pooled block
 * means k̄_b of HISA's first stage. Blocks are absolute (token s in block
 * ⌊s/B⌋), so appending a token only touches the open block: its running sum
 * grows by the new key and its mean is refreshed as sum/count, in O(dI).
 * Finished blocks never change. The running sum adds keys in token order in
 * fp32, exactly as la_idx_pool_blocks does, and both form the mean with
 * la_idx_block_mean, so a selection from the cache equals la_hisa_indexer on
 * the same keys bit for bit. */
#include <stdint.h>
#include <stdlib.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"
#include "ops/sparse_validate.h"

struct la_index_cache {
    int64_t dI, B, capacity, len;
    float *keys;     /* [capacity][dI]                                        */
    float *kbar;     /* [ceil(capacity/B)][dI]: means of finished blocks + open */
    float *open_sum; /* [dI] running sum of the open block                    */
};

la_status la_index_cache_create(int64_t dI, int64_t block, int64_t capacity,
                                la_index_cache **cache) {
    if (!cache) return la_err(LA_ERR_ARG, "index cache: cache (output pointer) is NULL");
    *cache = NULL;
    if (dI <= 0 || dI > 65536) return la_err(LA_ERR_ARG, "dI: %lld, must be in 1..65536", (long long)dI);
    if (block <= 0) return la_err(LA_ERR_ARG, "block: block size %lld, must be > 0", (long long)block);
    if (capacity <= 0 || capacity > INT32_MAX)
        return la_err(LA_ERR_ARG, "capacity: %lld tokens, must be in 1..%d (int32 indices)",
                      (long long)capacity, INT32_MAX);
    const int64_t nb = capacity / block + 1;
    size_t kb, bb;
    LA_TRY(la_mul_size((size_t)capacity, (size_t)dI * sizeof(float), &kb, "index cache: keys"));
    LA_TRY(la_mul_size((size_t)nb, (size_t)dI * sizeof(float), &bb, "index cache: block means"));
    la_index_cache *c = calloc(1, sizeof *c);
    if (!c) return la_err(LA_ERR_NOMEM, "index cache: out of memory");
    c->keys = malloc(kb);
    c->kbar = malloc(bb);
    c->open_sum = calloc((size_t)dI, sizeof(float));
    if (!c->keys || !c->kbar || !c->open_sum) {
        la_index_cache_destroy(c);
        return la_err(LA_ERR_NOMEM, "index cache: could not allocate %zu bytes for %lld tokens of dI=%lld",
                      kb + bb, (long long)capacity, (long long)dI);
    }
    c->dI = dI;
    c->B = block;
    c->capacity = capacity;
    *cache = c;
    la_err_clear();
    return LA_OK;
}

la_status la_index_cache_append(la_index_cache *c, const la_tensor *k) {
    char sb[96];
    if (!c) return la_err(LA_ERR_ARG, "index cache: cache is NULL");
    if (k && k->device == LA_DEVICE_CUDA)
        return la_err(LA_ERR_UNSUPPORTED, "index cache: no CUDA implementation in this build (k is on cuda)");
    LA_TRY(la_check_tensor(k, "k", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    const int64_t n = k->ne[0], dI = c->dI;
    if (k->ne[1] != dI)
        return la_err(LA_ERR_SHAPE, "k: [n,dI] = %s, but the cache holds keys of dI=%lld",
                      la_shape_str(k, sb, sizeof sb), (long long)dI);
    if (n > c->capacity - c->len)
        return la_err(LA_ERR_ARG, "k: appending %lld tokens to %lld cached exceeds the capacity %lld",
                      (long long)n, (long long)c->len, (long long)c->capacity);
    for (int64_t i = 0; i < n; i++) {
        const int64_t s = c->len;
        float *row = c->keys + s * dI;
        for (int64_t d = 0; d < dI; d++) row[d] = la_load_f32(k, la_off2(k, i, d));
        const int64_t b = s / c->B, count = s - b * c->B + 1;
        float *mean = c->kbar + b * dI;
        for (int64_t d = 0; d < dI; d++) {
            c->open_sum[d] += row[d];
            mean[d] = la_idx_block_mean(c->open_sum[d], count);
        }
        if (count == c->B) /* block finished: its mean is final, start the next */
            for (int64_t d = 0; d < dI; d++) c->open_sum[d] = 0.f;
        c->len = s + 1;
    }
    la_err_clear();
    return LA_OK;
}

la_status la_index_cache_length(const la_index_cache *c, int64_t *tokens) {
    if (!c || !tokens) return la_err(LA_ERR_ARG, "index cache: cache or tokens is NULL");
    *tokens = c->len;
    return LA_OK;
}

la_status la_index_cache_hisa(const la_index_cache *c, const la_index_params *p,
                              const la_tensor *q, const la_tensor *w, const la_tensor *start,
                              const la_tensor *end, la_tensor *idx, la_context *ctx) {
    if (!c) return la_err(LA_ERR_ARG, "index cache: cache is NULL");
    if (!p) return la_err(LA_ERR_ARG, "index cache: params is NULL");
    if (c->len == 0) return la_err(LA_ERR_ARG, "index cache: empty (append keys before selecting)");
    if (p->block != c->B)
        return la_err(LA_ERR_ARG, "block: params ask for blocks of %lld, but the cache pools blocks of %lld",
                      (long long)p->block, (long long)c->B);
    const la_tensor *views[5] = {q, w, start, end, idx};
    const char *names[5] = {"q", "w", "start", "end", "idx"};
    for (int i = 0; i < 5; i++)
        if (views[i] && views[i]->device == LA_DEVICE_CUDA)
            return la_err(LA_ERR_UNSUPPORTED, "index cache: the cache lives on the CPU, but %s is on cuda",
                          names[i]);
    la_tensor k;
    const int64_t ne[2] = {c->len, c->dI};
    LA_TRY(la_tensor_init(&k, c->keys, LA_F32, LA_DEVICE_CPU, 2, ne));
    LA_TRY(la_idx_check_call("index cache", p, q, &k, w, start, end, idx));
    LA_TRY(la_idx_check_blocks("index cache", p, 1));
    la_idx_problem P;
    LA_TRY(la_idx_resolve("index cache", q, &k, w, start, end, &P));
    const int64_t B = c->B < c->len ? c->B : c->len; /* same blocks as la_hisa_indexer */
    la_status s = la_hisa_cpu(&P, c->kbar, B, p->block_topk, p->topk, LA_BLK_HISA, idx, ctx);
    la_idx_problem_free(&P);
    if (s == LA_OK) la_err_clear();
    return s;
}

la_status la_index_cache_destroy(la_index_cache *c) {
    if (!c) return LA_OK;
    free(c->keys);
    free(c->kbar);
    free(c->open_sum);
    free(c);
    return LA_OK;
}
