/* The headline forward rows of docs/PERF.md (goals table) and
 * docs/PERF_FORWARD.md, timed on the GPU through the public API only, so that
 * the same source builds against this tree's include/longattn.h and against an
 * older commit's (tests/cuda/gpu_ab.sh links one binary per library and runs
 * them interleaved). Uses only calls and parameters whose meaning is the same in
 * both; no internal header, no kernel-variant forcing: each library runs its
 * own default kernels.
 *
 * Shapes (bf16, B = 1, H = 12, D = Dv = 128 unless the row says otherwise):
 *   linear_32k, linear_128k   non-causal linear attention (relu, normalized)
 *   linear_causal_32k         causal linear attention, chunk 64, no normalize
 *   mhla_m16_32k, mhla_m150_32k  MHLA on a 1-D grid of 32K tokens, M blocks
 *   mhla_wan                  MHLA 3-D grid 21x30x50, blocks 3x5x10 (M = 150)
 *   mhla_causal_32k           causal MHLA, chunk 64, general mixing (M = 512)
 *   focused_conv_32k          focused flatten, map 128x256, 5x5 conv + bias
 *   softmax_8k, softmax_causal_8k
 *   dsa_bf16_64k, dsa_fp8_64k flat DSA indexer incl. top-k: T = 1024 at the end
 *                             of L = 64K keys, HI = 64, dI = 128, k = 2048
 *                             (fp8: e4m3 q/k with k_scale [L], q_scale [T,HI])
 *   hisa_64k, hisa_128k       HISA, same queries, B = 128, m = 64, bf16
 *   topk_64k                  top-2048 of 1024 rows of 64K f32 scores
 *   sparse_mla                sparse MLA: Tq = 4096, Hq = 128, k = 2048,
 *                             Dqk = 576, dv = 512, L = 64K kv rows
 *   mhla_decode_b32           MHLA decode, 32 sequences, 4K tokens of context,
 *                             chunk 64, uniform-causal mixing: one token step
 *                             inside a block (ms per token)
 * Each row: 3 warm-up calls, then calls each timed between two CUDA events on
 * the default stream, as many as fill --min-time seconds (at least 10); the
 * median. Inputs are the same pseudo-random values in every build (fixed
 * seeds), on the device, outputs in their own buffers.
 *
 *   build-gpu/bench/headline [--rows a,b,...] [--min-time 0.2] [--tag NAME] [--list]
 * prints one line per row:
 *   headline tag=NAME row=ROW ms=MEDIAN reps=N min=FASTEST status=ok|ERROR
 */
#include <cuda_runtime_api.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "longattn.h"

#define HL_H 12
#define HL_D 128
#define HL_NMAX 131072
#define HL_SLOT ((size_t)HL_NMAX * HL_H * HL_D) /* bf16 elements of one [1,128K,12,128] */

/* ---- device buffers, filled once per process ---- */
typedef struct hl_buffers {
    uint16_t *pool;   /* 3 slots of random bf16 */
    uint16_t *out;    /* outputs (bf16), large enough for sparse MLA's */
    float *scores;    /* top-k input [1024, 64K] */
    uint8_t *q8, *k8; /* e4m3 indexer q [1024,64,128], k [64K,128] */
    float *w;         /* indexer head weights [1024,64] */
    float *k_scale, *q_scale;
    int32_t *idx;     /* indices out [4096, 2048] */
    int32_t *sidx;    /* sparse MLA's selected rows [4096, 2048] */
    float *mixing;    /* [512, 512] general mixing */
    float *conv, *conv_bias;
} hl_buffers;

static int cuda_ok(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    fprintf(stderr, "headline: %s: %s\n", what, cudaGetErrorString(e));
    return 0;
}

/* splitmix64 of element i of stream `seed`, and a uniform float in [-1, 1) */
static uint64_t hl_mix(uint64_t i, uint64_t seed) {
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull ^ (seed * 0xd1b54a32d192ed03ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float hl_unit(uint64_t z) { return (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f; }

static uint16_t hl_bf16(float f) { /* round to nearest even */
    uint32_t b;
    memcpy(&b, &f, 4);
    return (uint16_t)((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
}

/* e4m3 (bias 7, no inf, 0x7f = NaN): the nearest code to x, |x| <= 448 */
static float hl_e4m3_value(unsigned code) {
    const unsigned e = (code >> 3) & 15u, m = code & 7u;
    return e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, (int)e - 7);
}
static uint8_t hl_e4m3(float x) {
    const float a = fabsf(x);
    unsigned lo = 0, hi = 126; /* codes 0..126 are increasing magnitudes */
    while (lo < hi) {          /* first code whose value >= a */
        const unsigned mid = (lo + hi) / 2;
        if (hl_e4m3_value(mid) < a) lo = mid + 1;
        else hi = mid;
    }
    unsigned c = lo;
    if (c > 0 && a - hl_e4m3_value(c - 1) <= hl_e4m3_value(c) - a) c--;
    return (uint8_t)(c | (x < 0 ? 0x80u : 0u));
}

enum hl_fill { HL_FILL_BF16, HL_FILL_F32, HL_FILL_E4M3, HL_FILL_POS, HL_FILL_IDX };

/* n elements of kind `kind` from stream `seed`, staged through a host chunk:
 * bf16 / f32 uniform in scale·[-1, 1), e4m3 uniform in 448·[-1, 1), POS
 * scale·[0.5, 1.5), IDX uniform in [0, (int)scale). */
static int hl_fill(void *dst, size_t n, enum hl_fill kind, uint64_t seed, float scale, void *host,
                   size_t host_bytes) {
    const size_t esz = kind == HL_FILL_BF16 ? 2 : kind == HL_FILL_E4M3 ? 1 : 4;
    const size_t per = host_bytes / esz;
    for (size_t s = 0; s < n; s += per) {
        const size_t cnt = n - s < per ? n - s : per;
        const long long icnt = (long long)cnt;
#pragma omp parallel for schedule(static)
        for (long long j = 0; j < icnt; j++) {
            const uint64_t z = hl_mix(s + (size_t)j, seed);
            const float u = hl_unit(z);
            switch (kind) {
            case HL_FILL_BF16: ((uint16_t *)host)[j] = hl_bf16(u * scale); break;
            case HL_FILL_F32: ((float *)host)[j] = u * scale; break;
            case HL_FILL_E4M3: ((uint8_t *)host)[j] = hl_e4m3(u * 448.0f); break;
            case HL_FILL_POS: ((float *)host)[j] = scale * (1.0f + 0.5f * u); break;
            case HL_FILL_IDX: ((int32_t *)host)[j] = (int32_t)((z >> 33) % (uint64_t)scale); break;
            }
        }
        if (!cuda_ok(cudaMemcpy((char *)dst + s * esz, host, cnt * esz, cudaMemcpyHostToDevice), "fill copy"))
            return 0;
    }
    return 1;
}

static int hl_alloc(void **p, size_t bytes) { return cuda_ok(cudaMalloc(p, bytes), "cudaMalloc"); }

static int hl_setup(hl_buffers *b) {
    memset(b, 0, sizeof *b);
    const size_t T = 1024, HI = 64, dI = 128, L = 65536, Tq = 4096, Hq = 128, Dv = 512, K = 2048;
    const size_t out_elems = Tq * Hq * Dv > HL_SLOT ? Tq * Hq * Dv : HL_SLOT;
    if (!hl_alloc((void **)&b->pool, 3 * HL_SLOT * 2) || !hl_alloc((void **)&b->out, out_elems * 2) ||
        !hl_alloc((void **)&b->scores, T * L * 4) || !hl_alloc((void **)&b->q8, T * HI * dI) ||
        !hl_alloc((void **)&b->k8, L * dI) || !hl_alloc((void **)&b->w, T * HI * 4) ||
        !hl_alloc((void **)&b->k_scale, L * 4) || !hl_alloc((void **)&b->q_scale, T * HI * 4) ||
        !hl_alloc((void **)&b->idx, Tq * K * 4) || !hl_alloc((void **)&b->sidx, Tq * K * 4) ||
        !hl_alloc((void **)&b->mixing, 512 * 512 * 4) || !hl_alloc((void **)&b->conv, HL_D * 25 * 4) ||
        !hl_alloc((void **)&b->conv_bias, HL_D * 4))
        return 0;
    const size_t host_bytes = (size_t)64 << 20;
    void *host = malloc(host_bytes);
    if (!host) return 0;
    int ok = hl_fill(b->pool, 3 * HL_SLOT, HL_FILL_BF16, 1, 1.0f, host, host_bytes) &&
             hl_fill(b->scores, T * L, HL_FILL_F32, 2, 1.0f, host, host_bytes) &&
             hl_fill(b->q8, T * HI * dI, HL_FILL_E4M3, 3, 1.0f, host, host_bytes) &&
             hl_fill(b->k8, L * dI, HL_FILL_E4M3, 4, 1.0f, host, host_bytes) &&
             hl_fill(b->w, T * HI, HL_FILL_F32, 5, 1.0f / sqrtf((float)(HI * dI)), host, host_bytes) &&
             hl_fill(b->k_scale, L, HL_FILL_POS, 6, 1.0f / 448.0f, host, host_bytes) &&
             hl_fill(b->q_scale, T * HI, HL_FILL_POS, 7, 1.0f / 448.0f, host, host_bytes) &&
             hl_fill(b->sidx, Tq * K, HL_FILL_IDX, 8, (float)L, host, host_bytes) &&
             hl_fill(b->conv, HL_D * 25, HL_FILL_F32, 9, 0.2f, host, host_bytes) &&
             hl_fill(b->conv_bias, HL_D, HL_FILL_F32, 10, 0.05f, host, host_bytes);
    if (ok) { /* mixing: positive entries as the dev drivers use (0.01 .. 1) */
        float *m = (float *)host;
        for (size_t i = 0; i < 512 * 512; i++) m[i] = 0.01f + (float)((i * 7919) % 1000) / 1000.f;
        ok = cuda_ok(cudaMemcpy(b->mixing, m, 512 * 512 * 4, cudaMemcpyHostToDevice), "mixing copy");
    }
    free(host);
    return ok && cuda_ok(cudaDeviceSynchronize(), "setup sync");
}

/* slot s of the pool (0..2): a [1,N,H,D] bf16 view, or any view of rank <= 4 */
static uint16_t *slot(const hl_buffers *b, int s) { return b->pool + (size_t)s * HL_SLOT; }
static la_tensor tv(void *p, la_dtype dt, int nd, int64_t a, int64_t b, int64_t c, int64_t d) {
    la_tensor t;
    const int64_t ne[4] = {a, b, c, d};
    la_tensor_init(&t, p, dt, LA_DEVICE_CUDA, nd, ne);
    return t;
}
static la_tensor bnhd(void *p, int64_t N) { return tv(p, LA_BF16, 4, 1, N, HL_H, HL_D); }

/* ---- rows ---- */
typedef struct hl_row hl_row;
typedef la_status (*hl_call)(const hl_row *r, const hl_buffers *b, la_context *ctx);
struct hl_row {
    const char *name, *shape;
    hl_call call;
    int64_t N, M;
};

static la_status call_linear(const hl_row *r, const hl_buffers *b, la_context *ctx, int causal) {
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = causal;
    if (causal) p.normalize = 0;
    la_tensor q = bnhd(slot(b, 0), r->N), k = bnhd(slot(b, 1), r->N), v = bnhd(slot(b, 2), r->N),
              o = bnhd(b->out, r->N);
    return la_linear_attention(&p, &q, &k, &v, &o, NULL, NULL, NULL, NULL, ctx);
}
static la_status row_linear(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    return call_linear(r, b, ctx, 0);
}
static la_status row_linear_causal(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    return call_linear(r, b, ctx, 1);
}

static la_status row_mhla(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    la_mhla_params p;
    la_mhla_params_init(&p);
    int64_t N = r->N;
    if (r->M > 0) { /* 1-D grid of N tokens, M blocks */
        p.grid_ndim = 1;
        p.grid[0] = N;
        p.blocks[0] = r->M;
    } else { /* Wan video grid 21x30x50, blocks 3x5x10 */
        p.grid_ndim = 3;
        p.grid[0] = 21, p.grid[1] = 30, p.grid[2] = 50;
        p.blocks[0] = 3, p.blocks[1] = 5, p.blocks[2] = 10;
        N = 21 * 30 * 50;
    }
    const int64_t M = p.blocks[0] * (p.grid_ndim == 3 ? p.blocks[1] * p.blocks[2] : 1);
    la_tensor W = tv(b->mixing, LA_F32, 2, M, M, 0, 0);
    la_tensor q = bnhd(slot(b, 0), N), k = bnhd(slot(b, 1), N), v = bnhd(slot(b, 2), N),
              o = bnhd(b->out, N);
    return la_mhla_forward(&p, &q, &k, &v, &W, &o, ctx);
}

static la_status row_mhla_causal(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = 64;
    const int64_t M = (r->N + 63) / 64;
    la_tensor W = tv(b->mixing, LA_F32, 2, M, M, 0, 0);
    la_tensor q = bnhd(slot(b, 0), r->N), k = bnhd(slot(b, 1), r->N), v = bnhd(slot(b, 2), r->N),
              o = bnhd(b->out, r->N);
    return la_mhla_causal_forward(&p, &q, &k, &v, &W, &o, ctx);
}

static la_status row_focused(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    la_focused_params p;
    la_focused_params_init(&p);
    p.map_h = 128;
    p.map_w = r->N / 128;
    la_tensor conv = tv(b->conv, LA_F32, 3, HL_D, 5, 5, 0), bias = tv(b->conv_bias, LA_F32, 1, HL_D, 0, 0, 0);
    la_tensor q = bnhd(slot(b, 0), r->N), k = bnhd(slot(b, 1), r->N), v = bnhd(slot(b, 2), r->N),
              o = bnhd(b->out, r->N);
    return la_focused_attention(&p, &q, &k, &v, &conv, &bias, NULL, NULL, &o, ctx);
}

static la_status row_softmax(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = r->M; /* M carries the causal flag */
    la_tensor q = bnhd(slot(b, 0), r->N), k = bnhd(slot(b, 1), r->N), v = bnhd(slot(b, 2), r->N),
              o = bnhd(b->out, r->N);
    return la_softmax_attention(&p, &q, &k, &v, &o, NULL, ctx);
}

/* indexers: T = 1024 queries at the end of L = N keys (default causal ranges) */
static la_status call_index(const hl_row *r, const hl_buffers *b, la_context *ctx, int which) {
    const int64_t T = 1024, HI = 64, dI = 128, K = 2048, L = r->N;
    la_index_params p;
    la_index_params_init(&p);
    p.topk = K;
    la_tensor w = tv(b->w, LA_F32, 2, T, HI, 0, 0), idx = tv(b->idx, LA_I32, 2, T, K, 0, 0);
    if (which == 1) { /* fp8 DSA */
        la_tensor q = tv(b->q8, LA_FP8_E4M3, 3, T, HI, dI, 0), k = tv(b->k8, LA_FP8_E4M3, 2, L, dI, 0, 0);
        la_tensor ks = tv(b->k_scale, LA_F32, 1, L, 0, 0, 0), qs = tv(b->q_scale, LA_F32, 2, T, HI, 0, 0);
        p.k_scale = &ks;
        p.q_scale = &qs;
        return la_dsa_indexer(&p, &q, &k, &w, NULL, NULL, &idx, NULL, ctx);
    }
    la_tensor q = tv(slot(b, 0), LA_BF16, 3, T, HI, dI, 0), k = tv(slot(b, 1), LA_BF16, 2, L, dI, 0, 0);
    if (which == 2) {
        p.block = 128;
        p.block_topk = 64;
        return la_hisa_indexer(&p, &q, &k, &w, NULL, NULL, &idx, ctx);
    }
    return la_dsa_indexer(&p, &q, &k, &w, NULL, NULL, &idx, NULL, ctx);
}
static la_status row_dsa_bf16(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    return call_index(r, b, ctx, 0);
}
static la_status row_dsa_fp8(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    return call_index(r, b, ctx, 1);
}
static la_status row_hisa(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    return call_index(r, b, ctx, 2);
}

static la_status row_topk(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    la_tensor s = tv(b->scores, LA_F32, 2, 1024, r->N, 0, 0), idx = tv(b->idx, LA_I32, 2, 1024, 2048, 0, 0);
    return la_topk(&s, &idx, ctx);
}

static la_status row_sparse_mla(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    const int64_t Tq = 4096, Hq = 128, Dqk = 576, Dv = 512, K = 2048, L = r->N;
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    p.dv = Dv;
    /* q spans slots 0-1 (302M elements), kv in slot 2 */
    la_tensor q = tv(slot(b, 0), LA_BF16, 3, Tq, Hq, Dqk, 0), kv = tv(slot(b, 2), LA_BF16, 2, L, Dqk, 0, 0);
    la_tensor idx = tv(b->sidx, LA_I32, 2, Tq, K, 0, 0), o = tv(b->out, LA_BF16, 3, Tq, Hq, Dv, 0);
    return la_sparse_attention(&p, &q, &kv, &idx, &o, NULL, ctx);
}

/* placeholder: the decode row is timed by time_decode (its calls change the state) */
static la_status row_decode(const hl_row *r, const hl_buffers *b, la_context *ctx) {
    (void)r, (void)b, (void)ctx;
    return LA_OK;
}

static const hl_row ROWS[] = {
    {"linear_32k", "N=32768", row_linear, 32768, 0},
    {"linear_128k", "N=131072", row_linear, 131072, 0},
    {"linear_causal_32k", "N=32768,chunk=64,nonorm", row_linear_causal, 32768, 0},
    {"mhla_m16_32k", "N=32768,M=16", row_mhla, 32768, 16},
    {"mhla_m150_32k", "N=32768,M=150", row_mhla, 32768, 150},
    {"mhla_wan", "21x30x50/3x5x10", row_mhla, 0, 0},
    {"mhla_causal_32k", "N=32768,chunk=64,M=512", row_mhla_causal, 32768, 0},
    {"focused_conv_32k", "N=32768,map=128x256,conv=5x5", row_focused, 32768, 0},
    {"softmax_8k", "N=8192", row_softmax, 8192, 0},
    {"softmax_causal_8k", "N=8192,causal", row_softmax, 8192, 1},
    {"dsa_bf16_64k", "T=1024,L=65536,HI=64,dI=128,k=2048", row_dsa_bf16, 65536, 0},
    {"dsa_fp8_64k", "T=1024,L=65536,HI=64,dI=128,k=2048", row_dsa_fp8, 65536, 0},
    {"hisa_64k", "T=1024,L=65536,B=128,m=64", row_hisa, 65536, 0},
    {"hisa_128k", "T=1024,L=131072,B=128,m=64", row_hisa, 131072, 0},
    {"topk_64k", "R=1024,L=65536,k=2048", row_topk, 65536, 0},
    {"sparse_mla", "Tq=4096,Hq=128,k=2048,L=65536", row_sparse_mla, 65536, 0},
    {"mhla_decode_b32", "B=32,ctx=4096,chunk=64", row_decode, 4096, 32},
};
#define NROWS ((int)(sizeof ROWS / sizeof ROWS[0]))

/* ---- timing ---- */
static int cmp_float(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct hl_result {
    double median, fastest;
    int reps;
    la_status st;
} hl_result;

#define HL_MAX_REPS 4000

static void finish(hl_result *res, float *ts, int n) {
    qsort(ts, (size_t)n, sizeof *ts, cmp_float);
    res->reps = n;
    res->median = n ? (n % 2 ? ts[n / 2] : 0.5 * ((double)ts[n / 2 - 1] + ts[n / 2])) : NAN;
    res->fastest = n ? ts[0] : NAN;
}

static hl_result time_row(const hl_row *r, const hl_buffers *b, la_context *ctx, double min_time,
                          float *ts, cudaEvent_t e0, cudaEvent_t e1) {
    hl_result res = {NAN, NAN, 0, LA_OK};
    for (int i = 0; i < 3; i++)
        if ((res.st = r->call(r, b, ctx)) != LA_OK) return res;
    if (!cuda_ok(cudaDeviceSynchronize(), "warm-up")) {
        res.st = LA_ERR_DEVICE;
        return res;
    }
    int n = 0, want = HL_MAX_REPS;
    double spent = 0;
    while (n < want) {
        float ms = 0;
        cudaEventRecord(e0, 0);
        res.st = r->call(r, b, ctx);
        cudaEventRecord(e1, 0);
        if (!cuda_ok(cudaEventSynchronize(e1), "event sync")) res.st = LA_ERR_DEVICE;
        if (res.st != LA_OK) return res;
        cudaEventElapsedTime(&ms, e0, e1);
        ts[n++] = ms;
        spent += ms * 1e-3;
        if (n == 3) { /* calls to fill min_time, at least 10 */
            want = (int)(min_time / (spent / 3));
            want = want < 10 ? 10 : want > HL_MAX_REPS ? HL_MAX_REPS : want;
        }
    }
    finish(&res, ts, n);
    return res;
}

/* MHLA decode: 32 sequences, 4K tokens of prefill, then single-token appends;
 * samples are groups of 7 tokens inside a block (the first token of each block,
 * which closes the previous one, is appended untimed), ms per token. */
static hl_result time_decode(const hl_row *r, const hl_buffers *b, la_context *ctx, double min_time,
                             float *ts, cudaEvent_t e0, cudaEvent_t e1) {
    hl_result res = {NAN, NAN, 0, LA_OK};
    const int64_t B = r->M, H = HL_H, D = HL_D, C = 64, ctxlen = r->N, max_blocks = 160;
    const int64_t M = ctxlen / C + max_blocks + 2;
    float *w = (float *)calloc((size_t)(M * M), sizeof(float)), *dw = NULL;
    if (!w) {
        res.st = LA_ERR_NOMEM;
        return res;
    }
    for (int64_t i = 0; i < M; i++) /* uniform causal rows */
        for (int64_t j = 0; j <= i; j++) w[i * M + j] = 1.0f / (float)(i + 1);
    la_mhla_state *st = NULL;
    if (!hl_alloc((void **)&dw, (size_t)(M * M) * 4) ||
        !cuda_ok(cudaMemcpy(dw, w, (size_t)(M * M) * 4, cudaMemcpyHostToDevice), "decode mixing")) {
        free(w);
        res.st = LA_ERR_DEVICE;
        return res;
    }
    free(w);
    la_mhla_causal_params p;
    la_mhla_causal_params_init(&p);
    p.chunk = C;
    la_tensor W = tv(dw, LA_F32, 2, M, M, 0, 0);
    la_tensor q = tv(slot(b, 0), LA_BF16, 4, B, ctxlen, H, D), k = tv(slot(b, 1), LA_BF16, 4, B, ctxlen, H, D),
              v = tv(slot(b, 2), LA_BF16, 4, B, ctxlen, H, D), o = tv(b->out, LA_BF16, 4, B, ctxlen, H, D);
    la_tensor q1 = tv(slot(b, 0), LA_BF16, 4, B, 1, H, D), k1 = tv(slot(b, 1), LA_BF16, 4, B, 1, H, D),
              v1 = tv(slot(b, 2), LA_BF16, 4, B, 1, H, D), o1 = tv(b->out, LA_BF16, 4, B, 1, H, D);
    q1.nb[0] = k1.nb[0] = v1.nb[0] = o1.nb[0] = q.nb[0];
    if ((res.st = la_mhla_state_create(&p, B, H, D, D, &W, &st)) != LA_OK) goto done;
    if ((res.st = la_mhla_state_append(st, &q, &k, &v, &o, ctx)) != LA_OK) goto done;
    int n = 0;
    double spent = 0;
    for (int64_t blk = 0; blk < max_blocks && n < HL_MAX_REPS; blk++) {
        if ((res.st = la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx)) != LA_OK) goto done;
        for (int g = 0; g < 9; g++) { /* 63 tokens: the rest of the block */
            float ms = 0;
            cudaEventRecord(e0, 0);
            for (int t = 0; t < 7 && res.st == LA_OK; t++) res.st = la_mhla_state_append(st, &q1, &k1, &v1, &o1, ctx);
            cudaEventRecord(e1, 0);
            if (!cuda_ok(cudaEventSynchronize(e1), "event sync")) res.st = LA_ERR_DEVICE;
            if (res.st != LA_OK) goto done;
            cudaEventElapsedTime(&ms, e0, e1);
            if (blk >= 2) { /* two blocks of warm-up */
                ts[n++] = ms / 7;
                spent += ms * 1e-3;
            }
        }
        if (blk >= 2 && spent >= min_time && n >= 10) break;
    }
    finish(&res, ts, n);
done:
    if (st) la_mhla_state_destroy(st);
    cudaFree(dw);
    return res;
}

static int wanted(const char *list, const char *name) {
    if (!list) return 1;
    const size_t len = strlen(name);
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        const size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == len && !strncmp(s, name, len)) return 1;
        s += l + (e ? 1 : 0);
    }
    return 0;
}

int main(int argc, char **argv) {
    const char *rows = NULL, *tag = "lib";
    double min_time = 0.2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rows") && i + 1 < argc) rows = argv[++i];
        else if (!strcmp(argv[i], "--min-time") && i + 1 < argc) min_time = atof(argv[++i]);
        else if (!strcmp(argv[i], "--tag") && i + 1 < argc) tag = argv[++i];
        else if (!strcmp(argv[i], "--list")) {
            for (int r = 0; r < NROWS; r++) printf("%-20s %s\n", ROWS[r].name, ROWS[r].shape);
            return 0;
        } else {
            fprintf(stderr, "usage: %s [--rows a,b,...] [--min-time S] [--tag NAME] [--list]\n", argv[0]);
            return 2;
        }
    }
    for (const char *s = rows; s && *s;) { /* every name given must be a row */
        const char *e = strchr(s, ',');
        const size_t l = e ? (size_t)(e - s) : strlen(s);
        int known = 0;
        for (int r = 0; r < NROWS && !known; r++) known = strlen(ROWS[r].name) == l && !strncmp(s, ROWS[r].name, l);
        if (!known) {
            fprintf(stderr, "headline: --rows: no row '%.*s' (--list names them)\n", (int)l, s);
            return 2;
        }
        s += l + (e ? 1 : 0);
    }
    if (!(min_time > 0 && min_time < 60)) {
        fprintf(stderr, "headline: --min-time must be in (0, 60) s\n");
        return 2;
    }
    int avail = 0;
    if (la_cuda_available(&avail) != LA_OK || !avail) {
        printf("headline tag=%s status=NO_CUDA %s\n", tag, la_build_info());
        return 1;
    }
    la_context *ctx = NULL;
    if (la_context_create(&ctx) != LA_OK) {
        fprintf(stderr, "headline: la_context_create: %s\n", la_last_error());
        return 1;
    }
    hl_buffers b;
    float *ts = (float *)malloc(HL_MAX_REPS * sizeof(float));
    cudaEvent_t e0, e1;
    if (!ts || !hl_setup(&b) || !cuda_ok(cudaEventCreate(&e0), "event") || !cuda_ok(cudaEventCreate(&e1), "event"))
        return 1;
    printf("# headline tag=%s lib=%s (%s) min_time=%.3f s\n", tag, la_version(), la_build_info(), min_time);
    int failed = 0;
    for (int r = 0; r < NROWS; r++) {
        if (!wanted(rows, ROWS[r].name)) continue;
        const hl_row *row = &ROWS[r];
        const hl_result res = row->call == row_decode ? time_decode(row, &b, ctx, min_time, ts, e0, e1)
                                                       : time_row(row, &b, ctx, min_time, ts, e0, e1);
        if (res.st == LA_OK && res.reps > 0) {
            printf("headline tag=%s row=%s ms=%.5f reps=%d min=%.5f status=ok shape=%s\n", tag, row->name,
                   res.median, res.reps, res.fastest, row->shape);
        } else {
            failed++;
            printf("headline tag=%s row=%s ms=nan reps=0 min=nan status=%s shape=%s msg=\"%s\"\n", tag, row->name,
                   la_status_string(res.st), row->shape, la_last_error());
        }
        fflush(stdout);
    }
    la_context_destroy(ctx);
    return failed ? 1 : 0;
}
