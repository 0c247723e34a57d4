/* la_sparse_attention_paged (docs/SPARSE.md "Paged serving") against the
 * dense la_sparse_attention on the gathered keys: the same kernel on the same
 * rows, so out and lse must be bit-equal, for f32 and bf16. A sequence of L
 * positions lives in shuffled pages of the cache (pages it does not use are
 * NaN: reading one would show); idx_slots holds slots page·page_size +
 * offset and -1 (skip), the dense call the positions; odd T, k, Dqk, k
 * above the valid count, a padded token stride, permuted q, outputs poisoned
 * before the call. Then every bad input: status, message naming the
 * argument, and nothing written. */
#include <limits.h>

#include "test_util.h"

typedef struct sp_case {
    int64_t T, Hq, Dqk, dv, num_pages, page_size, L, K;
    double invalid;  /* fraction of -1 slots */
    la_dtype dt;     /* f32 or bf16 (q, cache, out) */
    int pad;         /* extra elements per cached token (token stride Dqk + pad) */
    int permuted_q;  /* q stored as [Hq,T,Dqk] */
    int with_lse;
} sp_case;

static size_t esz(la_dtype dt) { return dt == LA_F32 ? 4 : 2; }

static void put(void *buf, la_dtype dt, int64_t off, float v) {
    if (dt == LA_F32) {
        ((float *)buf)[off] = v;
    } else {
        uint32_t u;
        float r = isnan(v) ? v : la_round_bf16(v);
        memcpy(&u, &r, 4);
        ((uint16_t *)buf)[off] = (uint16_t)(u >> 16);
    }
}

static void poison(void *buf, la_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) put(buf, dt, i, NAN);
}

static int all_finite(const void *buf, la_dtype dt, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float v;
        if (dt == LA_F32) {
            v = ((const float *)buf)[i];
        } else {
            uint32_t u = (uint32_t)((const uint16_t *)buf)[i] << 16;
            memcpy(&v, &u, 4);
        }
        if (isnan(v)) return 0;
    }
    return 1;
}

static void run_case(la_rng *rng, const sp_case *c, la_context *ctx) {
    const int64_t T = c->T, Hq = c->Hq, D = c->Dqk, P = c->num_pages, S = c->page_size, L = c->L, K = c->K;
    const int64_t ts = D + c->pad, nslots = P * S;
    const size_t e = esz(c->dt);
    void *q = malloc(e * (size_t)(T * Hq * D));
    void *cache = malloc(e * (size_t)(nslots * ts));
    void *dense = malloc(e * (size_t)(L * D));
    int32_t *slots = malloc(sizeof(int32_t) * (size_t)(T * K));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)(T * K));
    int32_t *table = malloc(sizeof(int32_t) * (size_t)P);
    void *o1 = malloc(e * (size_t)(T * Hq * c->dv)), *o2 = malloc(e * (size_t)(T * Hq * c->dv));
    float *l1 = malloc(sizeof(float) * (size_t)(T * Hq)), *l2 = malloc(sizeof(float) * (size_t)(T * Hq));
    /* block table: the sequence's pages, a random permutation of the cache's */
    for (int64_t i = 0; i < P; i++) table[i] = (int32_t)i;
    for (int64_t i = P - 1; i > 0; i--) {
        int64_t j = (int64_t)(la_rng_uniform(rng) * (double)(i + 1));
        if (j > i) j = i;
        int32_t t = table[i];
        table[i] = table[j];
        table[j] = t;
    }
    poison(cache, c->dt, nslots * ts);
    for (int64_t p = 0; p < L; p++) {
        const int64_t slot = (int64_t)table[p / S] * S + p % S;
        for (int64_t d = 0; d < D; d++) {
            const float v = (float)la_rng_normal(rng);
            put(cache, c->dt, slot * ts + d, v);
            put(dense, c->dt, p * D + d, v);
        }
    }
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t d = 0; d < D; d++) {
                const int64_t off = c->permuted_q ? (h * T + t) * D + d : (t * Hq + h) * D + d;
                put(q, c->dt, off, (float)la_rng_normal(rng));
            }
    for (int64_t i = 0; i < T * K; i++) {
        if (la_rng_uniform(rng) < c->invalid) {
            slots[i] = pos[i] = -1;
            continue;
        }
        int64_t p = (int64_t)(la_rng_uniform(rng) * (double)L);
        if (p >= L) p = L - 1;
        pos[i] = (int32_t)p;
        slots[i] = (int32_t)((int64_t)table[p / S] * S + p % S);
    }
    la_tensor tq, tc, td, tsl, tpo, to1, to2, tl1, tl2;
    const int64_t qne[3] = {T, Hq, D};
    const int64_t qnb[3] = {c->permuted_q ? D : Hq * D, c->permuted_q ? T * D : D, 1};
    const int64_t cne[3] = {P, S, D}, cnb[3] = {S * ts, ts, 1}, dne[2] = {L, D}, ine[2] = {T, K};
    const int64_t one[3] = {T, Hq, c->dv}, lne[2] = {T, Hq};
    la_tensor_init_strided(&tq, q, c->dt, LA_DEVICE_CPU, 3, qne, qnb);
    la_tensor_init_strided(&tc, cache, c->dt, LA_DEVICE_CPU, 3, cne, cnb);
    la_tensor_init(&td, dense, c->dt, LA_DEVICE_CPU, 2, dne);
    la_tensor_init(&tsl, slots, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&tpo, pos, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&to1, o1, c->dt, LA_DEVICE_CPU, 3, one);
    la_tensor_init(&to2, o2, c->dt, LA_DEVICE_CPU, 3, one);
    la_tensor_init(&tl1, l1, LA_F32, LA_DEVICE_CPU, 2, lne);
    la_tensor_init(&tl2, l2, LA_F32, LA_DEVICE_CPU, 2, lne);
    poison(o1, c->dt, T * Hq * c->dv);
    poison(o2, c->dt, T * Hq * c->dv);
    poison(l1, LA_F32, T * Hq);
    poison(l2, LA_F32, T * Hq);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = c->dv;
    CHECK_OK(la_sparse_attention_paged(&p, &tq, &tc, &tsl, &to1, c->with_lse ? &tl1 : NULL, ctx));
    CHECK_OK(la_sparse_attention(&p, &tq, &td, &tpo, &to2, c->with_lse ? &tl2 : NULL, ctx));
    const size_t ob = e * (size_t)(T * Hq * c->dv);
    CHECK(all_finite(o1, c->dt, T * Hq * c->dv), "paged out fully written, no NaN (T=%lld Dqk=%lld %s)",
          (long long)T, (long long)D, la_dtype_name(c->dt));
    CHECK(memcmp(o1, o2, ob) == 0, "paged out bit-equal to dense (T=%lld Hq=%lld Dqk=%lld dv=%lld pages=%lldx%lld "
          "L=%lld k=%lld %s)", (long long)T, (long long)Hq, (long long)D, (long long)c->dv, (long long)P,
          (long long)S, (long long)L, (long long)K, la_dtype_name(c->dt));
    if (c->with_lse) {
        int lse_nan = 0;
        for (int64_t i = 0; i < T * Hq; i++) lse_nan |= isnan(l1[i]);
        CHECK(!lse_nan, "paged lse fully written");
        CHECK(memcmp(l1, l2, sizeof(float) * (size_t)(T * Hq)) == 0, "paged lse bit-equal to dense");
    }
    free(q), free(cache), free(dense), free(slots), free(pos), free(table);
    free(o1), free(o2), free(l1), free(l2);
}

/* Every rejected call leaves out and lse as they were (all 0x7f bytes). */
static int untouched(const void *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (((const unsigned char *)b)[i] != 0x7f) return 0;
    return 1;
}

#define REJECT(expr, want, name)                                                              \
    do {                                                                                      \
        memset(out, 0x7f, sizeof out);                                                        \
        memset(lse, 0x7f, sizeof lse);                                                        \
        CHECK_STATUS(expr, want);                                                             \
        CHECK(strstr(la_last_error(), name) != NULL, "message names %s: %s", name, la_last_error()); \
        CHECK(untouched(out, sizeof out) && untouched(lse, sizeof lse), "rejected call wrote nothing"); \
    } while (0)

static void bad_inputs(la_context *ctx) {
    /* q [2,3,8], kv_cache [4 pages, 2 tokens, 8] (8 slots), idx_slots [2,3] */
    float q[2 * 3 * 8] = {0}, kv[4 * 2 * 8] = {0}, out[2 * 3 * 6], lse[2 * 3];
    int32_t idx[2 * 3] = {0, 7, -1, 3, 5, 6};
    la_tensor tq, tc, ti, to, tl;
    const int64_t qne[3] = {2, 3, 8}, cne[3] = {4, 2, 8}, ine[2] = {2, 3}, one[3] = {2, 3, 6}, lne[2] = {2, 3};
    la_tensor_init(&tq, q, LA_F32, LA_DEVICE_CPU, 3, qne);
    la_tensor_init(&tc, kv, LA_F32, LA_DEVICE_CPU, 3, cne);
    la_tensor_init(&ti, idx, LA_I32, LA_DEVICE_CPU, 2, ine);
    la_tensor_init(&to, out, LA_F32, LA_DEVICE_CPU, 3, one);
    la_tensor_init(&tl, lse, LA_F32, LA_DEVICE_CPU, 2, lne);
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = 6;
    CHECK_OK(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, &tl, ctx));
    CHECK_OK(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, NULL, ctx));
    REJECT(la_sparse_attention_paged(NULL, &tq, &tc, &ti, &to, &tl, ctx), LA_ERR_ARG, "params");
    REJECT(la_sparse_attention_paged(&p, NULL, &tc, &ti, &to, &tl, ctx), LA_ERR_ARG, "q");
    REJECT(la_sparse_attention_paged(&p, &tq, NULL, &ti, &to, &tl, ctx), LA_ERR_ARG, "kv_cache");
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, NULL, &to, &tl, ctx), LA_ERR_ARG, "idx_slots");
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, NULL, &tl, ctx), LA_ERR_ARG, "out");
    /* slots outside the cache: the value and its position in the message */
    const int32_t bad[4] = {8, -2, INT32_MAX, INT32_MIN};
    for (int i = 0; i < 4; i++) {
        idx[4] = bad[i];
        REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, &tl, ctx), LA_ERR_ARG, "idx_slots[1][1]");
        char v[24];
        snprintf(v, sizeof v, "= %d", bad[i]);
        CHECK(strstr(la_last_error(), v) != NULL, "message has the value %s: %s", v, la_last_error());
    }
    idx[4] = 5;
    la_tensor c2 = tc; /* rank 2 */
    c2.ndim = 2;
    c2.ne[0] = 8;
    c2.nb[0] = 8;
    c2.ne[1] = 8;
    c2.nb[1] = 1;
    REJECT(la_sparse_attention_paged(&p, &tq, &c2, &ti, &to, &tl, ctx), LA_ERR_SHAPE, "kv_cache");
    la_tensor c3 = tc; /* Dqk 7 != 8 */
    c3.ne[2] = 7;
    REJECT(la_sparse_attention_paged(&p, &tq, &c3, &ti, &to, &tl, ctx), LA_ERR_SHAPE, "kv_cache");
    la_tensor c4 = tc; /* f64 cache */
    c4.dtype = LA_F64;
    REJECT(la_sparse_attention_paged(&p, &tq, &c4, &ti, &to, &tl, ctx), LA_ERR_DTYPE, "kv_cache");
    la_tensor c5 = tc; /* bf16 cache under an f32 q */
    c5.dtype = LA_BF16;
    REJECT(la_sparse_attention_paged(&p, &tq, &c5, &ti, &to, &tl, ctx), LA_ERR_DTYPE, "kv_cache");
    la_tensor c6 = tc; /* pages not contiguous: page stride 20 != 2·8 (3 pages fit in kv) */
    c6.ne[0] = 3;
    c6.nb[0] = 20;
    REJECT(la_sparse_attention_paged(&p, &tq, &c6, &ti, &to, &tl, ctx), LA_ERR_ARG, "kv_cache");
    la_tensor c7 = tc; /* 2^20 pages of 2^12 tokens: slots past the int32 range */
    c7.ne[0] = (int64_t)1 << 20;
    c7.ne[1] = (int64_t)1 << 12;
    c7.nb[0] = c7.nb[1] = 0;
    REJECT(la_sparse_attention_paged(&p, &tq, &c7, &ti, &to, &tl, ctx), LA_ERR_SHAPE, "kv_cache");
    la_tensor c8 = tc; /* the cache on cuda, q on the cpu */
    c8.device = LA_DEVICE_CUDA;
    memset(out, 0x7f, sizeof out);
    CHECK_MIXED_DEVICE(la_sparse_attention_paged(&p, &tq, &c8, &ti, &to, &tl, ctx));
    CHECK(untouched(out, sizeof out), "mixed-device call wrote nothing");
    la_tensor i2 = ti;
    i2.dtype = LA_F32;
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &i2, &to, &tl, ctx), LA_ERR_DTYPE, "idx_slots");
    la_tensor i3 = ti;
    i3.ne[0] = 1;
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &i3, &to, &tl, ctx), LA_ERR_SHAPE, "idx");
    la_tensor o2 = to;
    o2.ne[2] = 5;
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &o2, &tl, ctx), LA_ERR_SHAPE, "out");
    la_tensor o3 = to;
    o3.data = kv; /* out aliases the cache */
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &o3, &tl, ctx), LA_ERR_ARG, "out");
    la_tensor l2 = tl;
    l2.ne[1] = 2;
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, &l2, ctx), LA_ERR_SHAPE, "lse");
    p.dv = 9; /* > Dqk */
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, &tl, ctx), LA_ERR_ARG, "dv");
    p.dv = 6;
    p.scale = INFINITY;
    REJECT(la_sparse_attention_paged(&p, &tq, &tc, &ti, &to, &tl, ctx), LA_ERR_ARG, "scale");
    p.scale = 0.f;
    la_tensor q2 = tq, c9 = tc, i4 = ti, o4 = to; /* all on cuda in a build without it */
    q2.device = c9.device = i4.device = o4.device = LA_DEVICE_CUDA;
    CHECK_CUDA_REFUSED(la_sparse_attention_paged(&p, &q2, &c9, &i4, &o4, NULL, ctx));
}

int main(void) {
    la_rng rng = la_test_rng("test_sparse_paged");
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 2);
    const sp_case cases[] = {
        /* T, Hq, Dqk, dv, pages, page_size, L, K, invalid, dtype, pad, permuted_q, lse */
        {1, 1, 16, 16, 1, 1, 1, 1, 0.0, LA_F32, 0, 0, 1},
        {3, 4, 63, 40, 5, 64, 300, 7, 0.2, LA_F32, 0, 0, 1},      /* partial last page */
        {5, 16, 576, 512, 4, 64, 256, 129, 0.1, LA_BF16, 0, 0, 1}, /* the MLA decode shape */
        {7, 3, 32, 32, 9, 16, 63, 200, 0.6, LA_F32, 3, 1, 1},    /* k > valid, padded tokens, permuted q */
        {65, 2, 64, 63, 17, 8, 129, 65, 0.3, LA_BF16, 5, 1, 0},  /* odd page_size-free T, no lse */
        {2, 8, 128, 100, 3, 64, 1000 % 192, 33, 1.0, LA_F32, 0, 0, 1}, /* every slot -1 */
        {1000, 1, 16, 8, 2, 1, 2, 3, 0.5, LA_BF16, 1, 0, 1},     /* page_size 1 */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) run_case(&rng, &cases[i], ctx);
    la_context_set_threads(ctx, 1);
    run_case(&rng, &cases[3], ctx);
    bad_inputs(ctx);
    la_context_destroy(ctx);
    return la_test_finish();
}
