/*
 * longattn — attention over long sequences.
 *
 * Public C API. Every operator follows ../shared/SPEC.md (kept in docs/ as the
 * operator contract). Conventions:
 *   - Every public function returns an la_status; on failure a thread-local
 *     message naming the argument and the shape at fault is available from
 *     la_last_error().
 *   - Operators take tensor views (la_tensor): extents `ne` and strides `nb`
 *     in ELEMENTS (not bytes), outermost dimension first, so a [B,N,H,D]
 *     contiguous tensor has nb = {N*H*D, H*D, D, 1}. A [B,H,N,D] buffer is
 *     passed as a [B,N,H,D] view by permuting extents and strides: no copies.
 *   - Default attention layout is [B, N, H, D]. Indexer tensors are [T, ...].
 *   - No global mutable state: everything lives in an la_context (threads,
 *     workspace allocator, CUDA stream) or in explicit state objects. Distinct
 *     contexts may be used from distinct threads concurrently; a context can
 *     also be shared by threads as long as nobody changes it meanwhile.
 */
#ifndef LONGATTN_H
#define LONGATTN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LONGATTN_VERSION_MAJOR 0
#define LONGATTN_VERSION_MINOR 1
#define LONGATTN_VERSION_PATCH 0

/* Every public function carries LA_API: the shared library is built with
 * hidden visibility, so only these are exported. */
#if defined(__GNUC__) || defined(__clang__)
#define LA_API __attribute__((visibility("default")))
#else
#define LA_API
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */
typedef enum la_status {
    LA_OK = 0,
    LA_ERR_ARG = 1,          /* bad scalar argument / option / NULL pointer   */
    LA_ERR_SHAPE = 2,        /* extents disagree, zero-size dim, bad rank     */
    LA_ERR_DTYPE = 3,        /* dtype not supported for this argument         */
    LA_ERR_NOMEM = 4,        /* allocation failed                             */
    LA_ERR_OVERFLOW = 5,     /* a size computation would overflow            */
    LA_ERR_UNSUPPORTED = 6,  /* valid request this build/backend can't do     */
    LA_ERR_DEVICE = 7,       /* CUDA error, or tensors on the wrong device    */
    LA_ERR_IO = 8,           /* file could not be read or written             */
    LA_ERR_FORMAT = 9,       /* malformed file (e.g. .npy header)             */
    LA_ERR_INTERNAL = 10
} la_status;

/* Name of a status ("LA_ERR_SHAPE"); never NULL. */
LA_API const char *la_status_string(la_status s);
/* Message of the last failed call on this thread ("" if none). */
LA_API const char *la_last_error(void);
/* Library version as "MAJOR.MINOR.PATCH" (the LONGATTN_VERSION_* of the
 * build, which may differ from the header a program was compiled with). */
LA_API const char *la_version(void);
/* Library version and build features (e.g. "0.1.0 blas=openblas cuda=no"). */
LA_API const char *la_build_info(void);
/* Host memory this process can still allocate, in bytes: the least of
 * MemAvailable, the cgroup (v2 or v1) limit less its usage, and the room
 * left under RLIMIT_AS (SIZE_MAX when none is known). The CLI checks its
 * arrays against it before allocating; workspaces of 64 MiB and more are
 * checked against it too. */
LA_API la_status la_memory_available(size_t *bytes);
/* Whether the CUDA backend was compiled in and a device is present. */
LA_API la_status la_cuda_available(int *available);

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */
/* Float views of every operator: f32, f64, bf16 and f16, on CPU and CUDA,
 * loaded to fp32; every sum, normalizer and state is fp32; bf16 / f16
 * outputs are rounded to nearest even (f16 saturates to +-Inf beyond 65504:
 * docs/DTYPES.md). fp8 e4m3 where noted (indexer keys/queries). */
typedef enum la_dtype {
    LA_F32 = 0,
    LA_F64 = 1,
    LA_BF16 = 2,
    LA_I32 = 3,
    LA_F16 = 4,
    LA_FP8_E4M3 = 5
} la_dtype;

typedef enum la_device { LA_DEVICE_CPU = 0, LA_DEVICE_CUDA = 1 } la_device;

#define LA_MAX_DIMS 4

typedef struct la_tensor {
    void *data;
    la_dtype dtype;
    la_device device;
    int ndim;                   /* 1..LA_MAX_DIMS                         */
    int64_t ne[LA_MAX_DIMS];    /* extents, outermost first               */
    int64_t nb[LA_MAX_DIMS];    /* strides in elements, outermost first   */
} la_tensor;

/* Fill a view with contiguous (row-major) strides. */
LA_API la_status la_tensor_init(la_tensor *t, void *data, la_dtype dtype, la_device dev,
                         int ndim, const int64_t *ne);
/* Fill a view with explicit strides (elements). */
LA_API la_status la_tensor_init_strided(la_tensor *t, void *data, la_dtype dtype, la_device dev,
                                 int ndim, const int64_t *ne, const int64_t *nb);
/* Size of one element in bytes (0 for unknown). */
LA_API size_t la_dtype_size(la_dtype dt);
LA_API const char *la_dtype_name(la_dtype dt);

/* ------------------------------------------------------------------------ */
/* Context                                                                   */
/* ------------------------------------------------------------------------ */
typedef struct la_context la_context;

typedef void *(*la_alloc_fn)(size_t bytes, void *user);
typedef void (*la_free_fn)(void *ptr, void *user);

LA_API la_status la_context_create(la_context **ctx);
LA_API la_status la_context_destroy(la_context *ctx);
/* Threads for CPU operators; 0 = all cores (default). A count above the
 * cores available to the process (omp_get_num_procs: online CPUs in its
 * affinity mask) is clamped to that number when an operator runs and by
 * la_context_get_threads, so that no thread count can make the OpenMP
 * runtime fail to create threads and end the process. Negative: LA_ERR_ARG. */
LA_API la_status la_context_set_threads(la_context *ctx, int threads);
LA_API la_status la_context_get_threads(const la_context *ctx, int *threads);
/* Host workspace allocator (default malloc/free). The default allocator
 * refuses a workspace of 64 MiB or more that exceeds the memory the process
 * can still get (MemAvailable, the memory cgroup's limit, `ulimit -v`):
 * LA_ERR_NOMEM "workspace: needs X GiB, Y GiB available", not an OOM kill. */
LA_API la_status la_context_set_allocator(la_context *ctx, la_alloc_fn alloc, la_free_fn free_fn,
                                   void *user);
/* CUDA stream (a cudaStream_t) for CUDA operators; NULL = default stream. */
LA_API la_status la_context_set_cuda_stream(la_context *ctx, void *stream);
LA_API la_status la_context_get_cuda_stream(const la_context *ctx, void **stream);

/* ------------------------------------------------------------------------ */
/* Feature maps (SPEC §2)                                                    */
/* ------------------------------------------------------------------------ */
typedef enum la_feature {
    LA_FEATURE_IDENTITY = 0,
    LA_FEATURE_RELU = 1,
    LA_FEATURE_RELU_EPS = 2,   /* max(x,0) + 1e-6 */
    LA_FEATURE_RELU1 = 3,      /* max(x,0) + 1    */
    LA_FEATURE_ELU1 = 4        /* x+1 if x>=0 else exp(x) */
} la_feature;

LA_API la_status la_feature_from_name(const char *name, la_feature *out);
LA_API const char *la_feature_name(la_feature f);

/* ------------------------------------------------------------------------ */
/* §1 Softmax attention                                                      */
/* ------------------------------------------------------------------------ */
typedef struct la_softmax_params {
    int causal;      /* bottom-right aligned when Nk > Nq                    */
    float scale;     /* 0 = default D^-1/2                                   */
} la_softmax_params;
LA_API la_status la_softmax_params_init(la_softmax_params *p);

/* q [B,Nq,H,D], k [B,Nk,Hk,D], v [B,Nk,Hk,Dv] (H % Hk == 0: GQA),
 * out [B,Nq,H,Dv], lse [B,Nq,H] (optional, may be NULL; natural log). */
LA_API la_status la_softmax_attention(const la_softmax_params *p, const la_tensor *q,
                               const la_tensor *k, const la_tensor *v, la_tensor *out,
                               la_tensor *lse, la_context *ctx);

/* ------------------------------------------------------------------------ */
/* §3 Linear attention                                                       */
/* ------------------------------------------------------------------------ */
typedef struct la_linear_params {
    la_feature feature;  /* default relu                                     */
    int causal;          /* default 0                                        */
    int normalize;       /* default 1                                        */
    float eps;           /* default 1e-6                                     */
    float scale_q;       /* default 1                                        */
    int64_t chunk;       /* causal chunk size, default 64                    */
} la_linear_params;
LA_API la_status la_linear_params_init(la_linear_params *p);

/* q,k [B,N,H,D], v [B,N,H,Dv], out [B,N,H,Dv].
 * Causal only: optional recurrent state in/out, S [B,H,D,Dv] and z [B,H,D]
 * (f32). state_in NULLs = zero state. In and out may alias. */
LA_API la_status la_linear_attention(const la_linear_params *p, const la_tensor *q,
                              const la_tensor *k, const la_tensor *v, la_tensor *out,
                              const la_tensor *S_in, const la_tensor *z_in,
                              la_tensor *S_out, la_tensor *z_out, la_context *ctx);

/* ------------------------------------------------------------------------ */
/* §4 Focused linear attention                                               */
/* ------------------------------------------------------------------------ */
typedef enum la_focused_variant { LA_FOCUSED_FLATTEN = 0, LA_FOCUSED_BLOG = 1 } la_focused_variant;

typedef struct la_focused_params {
    la_focused_variant variant;  /* default flatten                         */
    int64_t map_h, map_w;        /* required, map_h*map_w == N               */
    float p;                     /* focusing factor (flatten), default 3    */
    float eps;                   /* default 1e-6                             */
} la_focused_params;
LA_API la_status la_focused_params_init(la_focused_params *p);

/* q,k,v [B,N,H,D] (v may have Dv for flatten only if conv is absent; the
 * conv is over v's channels so Dv == D when conv is given).
 * flatten: conv [D,k,k] shared by heads (odd k), conv_bias [D] (optional),
 *          softplus_param [H*D] (optional, default zeros), focus ignored.
 * blog:    conv [H*D,k,k] over φ(K) (odd k, no bias), focus [H] (optional,
 *          default 2.0), softplus_param/conv_bias ignored.
 * conv NULL = no conv term (flatten) / identity conv (blog). */
LA_API la_status la_focused_attention(const la_focused_params *p, const la_tensor *q,
                               const la_tensor *k, const la_tensor *v,
                               const la_tensor *conv, const la_tensor *conv_bias,
                               const la_tensor *softplus_param, const la_tensor *focus,
                               la_tensor *out, la_context *ctx);

/* ------------------------------------------------------------------------ */
/* §5 MHLA                                                                   */
/* ------------------------------------------------------------------------ */
typedef enum la_mhla_normalize {
    LA_MHLA_NORM_PER_QUERY = 0,
    LA_MHLA_NORM_NONE = 1,
    LA_MHLA_NORM_RELEASED_VISION = 2
} la_mhla_normalize;

typedef struct la_mhla_params {
    int grid_ndim;         /* 1, 2 or 3; 1-D with grid[0]=0 means N        */
    int64_t grid[3];       /* token grid (T,Hm,Wm) / (Hm,Wm) / (N)         */
    int64_t blocks[3];     /* block grid, same rank                        */
    la_feature feature;    /* default relu_eps                             */
    la_mhla_normalize normalize; /* default per_query                      */
    float eps;             /* default 1e-6                                 */
    float scale_q;         /* default 1                                    */
} la_mhla_params;
LA_API la_status la_mhla_params_init(la_mhla_params *p);

/* q,k [B,N,H,D], v [B,N,H,Dv], mixing [M,M] or [H,M,M] (f32), out [B,N,H,Dv]. */
LA_API la_status la_mhla_forward(const la_mhla_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *v, const la_tensor *mixing, la_tensor *out,
                          la_context *ctx);

typedef struct la_mhla_causal_params {
    int64_t chunk;               /* default 64                             */
    la_feature feature;          /* default relu                           */
    la_mhla_normalize normalize; /* default none (per_query allowed)       */
    float eps;                   /* default 1e-6                           */
    float scale_q;               /* 0 = default D^-1/2                     */
} la_mhla_causal_params;
LA_API la_status la_mhla_causal_params_init(la_mhla_causal_params *p);

/* mixing [M,M] or [H,M,M] with M >= ceil(N/chunk); upper triangle ignored. */
LA_API la_status la_mhla_causal_forward(const la_mhla_causal_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *v,
                                 const la_tensor *mixing, la_tensor *out, la_context *ctx);

/* Decoding state: finished block summaries plus the open block. */
typedef struct la_mhla_state la_mhla_state;
/* mixing is copied; max blocks M = its extent. */
LA_API la_status la_mhla_state_create(const la_mhla_causal_params *p, int64_t B, int64_t H,
                               int64_t D, int64_t Dv, const la_tensor *mixing,
                               la_mhla_state **state);
/* Append n tokens (q,k [B,n,H,D], v [B,n,H,Dv]) one after another and write
 * their outputs to out [B,n,H,Dv]. */
LA_API la_status la_mhla_state_append(la_mhla_state *state, const la_tensor *q, const la_tensor *k,
                               const la_tensor *v, la_tensor *out, la_context *ctx);
LA_API la_status la_mhla_state_length(const la_mhla_state *state, int64_t *tokens);
LA_API la_status la_mhla_state_destroy(la_mhla_state *state);

typedef enum la_mhla_init_kind {
    LA_MHLA_INIT_LOCALITY = 0,
    LA_MHLA_INIT_LOCALITY_GLOBAL = 1,
    LA_MHLA_INIT_UNIFORM_CAUSAL = 2
} la_mhla_init_kind;
/* blocks: block grid of rank ndim (uniform_causal: ndim 1, M = blocks[0]).
 * out: f32 [M,M] contiguous CPU tensor. */
LA_API la_status la_mhla_init(la_mhla_init_kind kind, int ndim, const int64_t *blocks, la_tensor *out);
/* Training-time projection: clamp to [1e-5,1]; causal also zeroes j > i. */
LA_API la_status la_mhla_project(la_tensor *mixing, int causal);

/* ------------------------------------------------------------------------ */
/* §6–§7 Indexers                                                            */
/* ------------------------------------------------------------------------ */
typedef struct la_index_params {
    int64_t topk;        /* default 2048                                   */
    int64_t block;       /* HISA / block-sparse block size B, default 128  */
    int64_t block_topk;  /* HISA blocks kept m, default 64                 */
    /* fp8 e4m3 only (GPU): fp32 scale per key row [L] and per (query,head)
     * [T,HI]; NULL otherwise. */
    const la_tensor *k_scale;
    const la_tensor *q_scale;
} la_index_params;
LA_API la_status la_index_params_init(la_index_params *p);

/* q [T,HI,dI], k [L,dI], w [T,HI]; start/end int32 [T] (NULL = causal
 * bottom-right: start 0, end = L-T+t+1). idx int32 [T,topk];
 * scores f32 [T,L] optional (−inf outside the range). */
LA_API la_status la_dsa_indexer(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                         const la_tensor *w, const la_tensor *start, const la_tensor *end,
                         la_tensor *idx, la_tensor *scores, la_context *ctx);
LA_API la_status la_hisa_indexer(const la_index_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *w, const la_tensor *start, const la_tensor *end,
                          la_tensor *idx, la_context *ctx);
LA_API la_status la_blocksparse_indexer(const la_index_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *w,
                                 const la_tensor *start, const la_tensor *end,
                                 la_tensor *idx, la_context *ctx);

/* Row-wise top-k of scores [R,L] (f32; −inf = masked) into idx int32 [R,k]:
 * descending score, NaN first (as torch.topk), ties (NaN too) to the lower index, −1 padding. */
LA_API la_status la_topk(const la_tensor *scores, la_tensor *idx, la_context *ctx);

/* Decode-time indexer key cache (pooled block means kept incrementally). */
typedef struct la_index_cache la_index_cache;
LA_API la_status la_index_cache_create(int64_t dI, int64_t block, int64_t capacity,
                                la_index_cache **cache);
/* k [n,dI] appended at the end. */
LA_API la_status la_index_cache_append(la_index_cache *cache, const la_tensor *k);
LA_API la_status la_index_cache_length(const la_index_cache *cache, int64_t *tokens);
/* HISA selection for queries q [T,HI,dI], w [T,HI] over the cached keys,
 * with ranges as in la_dsa_indexer; equals la_hisa_indexer on the same keys. */
LA_API la_status la_index_cache_hisa(const la_index_cache *cache, const la_index_params *p,
                              const la_tensor *q, const la_tensor *w, const la_tensor *start,
                              const la_tensor *end, la_tensor *idx, la_context *ctx);
LA_API la_status la_index_cache_destroy(la_index_cache *cache);

/* ------------------------------------------------------------------------ */
/* §8 Sparse attention (MLA, MQA mode)                                       */
/* ------------------------------------------------------------------------ */
typedef struct la_sparse_attn_params {
    int64_t dv;   /* default 512 */
    float scale;  /* 0 = default Dqk^-1/2 */
} la_sparse_attn_params;
LA_API la_status la_sparse_attn_params_init(la_sparse_attn_params *p);

/* q [T,Hq,Dqk], kv [L,Dqk] or [L,Hkv,Dqk], idx int32 [T,k] (−1 or >= L
 * skipped), out [T,Hq,dv], lse [T,Hq] (optional). */
LA_API la_status la_sparse_attention(const la_sparse_attn_params *p, const la_tensor *q,
                              const la_tensor *kv, const la_tensor *idx, la_tensor *out,
                              la_tensor *lse, la_context *ctx);

/* ------------------------------------------------------------------------ */
/* Backward passes (shared/TRAINING.md §1)                                   */
/* ------------------------------------------------------------------------ */
/* Conventions shared by every la_*_backward:
 *   - the params, inputs and `out` are those of the forward call; saved
 *     statistics (lse) are the forward's outputs;
 *   - d_out has the shape of out; each gradient has the shape of its input
 *     and the input's dtype (d_mixing / state gradients: f32);
 *   - a NULL gradient pointer skips that gradient; gradients are written,
 *     not accumulated; a rejected call writes nothing;
 *   - fp32 accumulation; deterministic (no floating-point atomics).
 * out may be NULL where the backward recomputes what it needs (every
 * operator but softmax and sparse attention, which read it). */

/* softmax: lse [B,Nq,H] f32 from the forward is required. */
LA_API la_status la_softmax_backward(const la_softmax_params *p, const la_tensor *q,
                                     const la_tensor *k, const la_tensor *v,
                                     const la_tensor *out, const la_tensor *lse,
                                     const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                     la_tensor *dv, la_context *ctx);

/* linear (non-causal or causal). Causal only: S_in/z_in the initial state
 * (NULL = zero), d_S_out/d_z_out the gradient of the final state (NULL =
 * zero), d_S_in/d_z_in the gradient of the initial state (NULL = skip). */
LA_API la_status la_linear_backward(const la_linear_params *p, const la_tensor *q,
                                    const la_tensor *k, const la_tensor *v,
                                    const la_tensor *out, const la_tensor *S_in,
                                    const la_tensor *z_in, const la_tensor *d_out,
                                    const la_tensor *d_S_out, const la_tensor *d_z_out,
                                    la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                    la_tensor *d_S_in, la_tensor *d_z_in, la_context *ctx);

/* MHLA non-causal: d_mixing has the mixing's shape ([M,M] or [H,M,M]). */
LA_API la_status la_mhla_backward(const la_mhla_params *p, const la_tensor *q,
                                  const la_tensor *k, const la_tensor *v,
                                  const la_tensor *mixing, const la_tensor *out,
                                  const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                  la_tensor *dv, la_tensor *d_mixing, la_context *ctx);

/* causal MHLA: the upper triangle of d_mixing (and rows/columns past the
 * last chunk) is written as zero. */
LA_API la_status la_mhla_causal_backward(const la_mhla_causal_params *p, const la_tensor *q,
                                         const la_tensor *k, const la_tensor *v,
                                         const la_tensor *mixing, const la_tensor *out,
                                         const la_tensor *d_out, la_tensor *dq, la_tensor *dk,
                                         la_tensor *dv, la_tensor *d_mixing, la_context *ctx);

/* focused: flatten fills d_conv, d_conv_bias, d_softplus_param; blog fills
 * d_conv and d_focus ([H]). Gradients of absent inputs must be NULL. */
LA_API la_status la_focused_backward(const la_focused_params *p, const la_tensor *q,
                                     const la_tensor *k, const la_tensor *v,
                                     const la_tensor *conv, const la_tensor *conv_bias,
                                     const la_tensor *softplus_param, const la_tensor *focus,
                                     const la_tensor *out, const la_tensor *d_out,
                                     la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                     la_tensor *d_conv, la_tensor *d_conv_bias,
                                     la_tensor *d_softplus_param, la_tensor *d_focus,
                                     la_context *ctx);

/* sparse attention: lse [T,Hq] from the forward is required; dkv has kv's
 * shape (keys picked by several queries sum, in a fixed order). */
LA_API la_status la_sparse_attention_backward(const la_sparse_attn_params *p,
                                              const la_tensor *q, const la_tensor *kv,
                                              const la_tensor *idx, const la_tensor *out,
                                              const la_tensor *lse, const la_tensor *d_out,
                                              la_tensor *dq, la_tensor *dkv, la_context *ctx);

/* ------------------------------------------------------------------------ */
/* §9 Analysis                                                               */
/* ------------------------------------------------------------------------ */
typedef enum la_map_variant {
    LA_MAP_SOFTMAX = 0,
    LA_MAP_LINEAR = 1,
    LA_MAP_MHLA = 2,
    LA_MAP_FOCUSED_FLATTEN = 3,
    LA_MAP_FOCUSED_BLOG = 4
} la_map_variant;

typedef struct la_attn_map_params {
    la_map_variant variant;
    la_feature feature;          /* linear / mhla feature map               */
    float scale;                 /* softmax: 0 = D^-1/2; linear/mhla scale_q (0 = 1) */
    la_mhla_params mhla;         /* grid/blocks for mhla                    */
    la_focused_params focused;   /* p, map for focused variants             */
} la_attn_map_params;
LA_API la_status la_attn_map_params_init(la_attn_map_params *p);

/* q,k [N,D] (one head). mixing [M,M] for mhla; softplus_param [D] for
 * focused-flatten (optional); focus scalar ignored (it cancels). out f32 or
 * f64 [N,N]: attention weights, rows sum to 1. */
LA_API la_status la_attention_map(const la_attn_map_params *p, const la_tensor *q,
                           const la_tensor *k, const la_tensor *mixing,
                           const la_tensor *softplus_param, la_tensor *out, la_context *ctx);
/* Numerical rank (#σ > rtol·σ1, float64 SVD) and mean row entropy. */
LA_API la_status la_map_rank_entropy(const la_tensor *map, double rtol, int64_t *rank,
                              double *entropy);

/* ------------------------------------------------------------------------ */
/* Paged serving: paged indexer key cache, batched paged indexers            */
/* (docs/SPARSE.md "Paged serving")                                          */
/* ------------------------------------------------------------------------ */
/* A cache of indexer keys in pages of page_size tokens, as in sglang / vLLM.
 * Slot = page·page_size + offset. Page layout (DeepGEMM's for fp8):
 *   fp8_e4m3: page_size × dI e4m3 values, then page_size fp32 scales
 *             (dI + 4 bytes per token; scale = amax/448 per token, 1 for an
 *             all-zero key; value = e4m3(k/scale)); dequantized e4m3·scale.
 *   bf16 / f32: page_size × dI values.
 * Pooled HISA block sums (SPEC §7.1, absolute blocks of `block` tokens) are
 * kept per (sequence, block) when max_seqs > 0 and appends name each token's
 * sequence and position. */
typedef struct la_paged_index_cache la_paged_index_cache;

typedef struct la_paged_cache_params {
    int64_t num_pages;   /* required, > 0                                   */
    int64_t page_size;   /* tokens per page, default 64                     */
    int64_t head_dim;    /* dI, default 128                                 */
    la_dtype dtype;      /* LA_FP8_E4M3 (default), LA_BF16 or LA_F32        */
    int64_t block;       /* pooled block B, default 128                     */
    int64_t max_seqs;    /* sequences with pooled sums; 0 (default) = none:
                            HISA then pools each sequence from its pages    */
    int64_t max_seq_len; /* positions per pooled sequence; 0 (default) =
                            num_pages·page_size                             */
    la_device device;    /* default CPU                                     */
} la_paged_cache_params;
LA_API la_status la_paged_cache_params_init(la_paged_cache_params *p);

LA_API la_status la_paged_index_cache_create(const la_paged_cache_params *p,
                                             la_paged_index_cache **cache);
LA_API la_status la_paged_index_cache_destroy(la_paged_index_cache *cache);
/* The parameters the cache was created with (defaults resolved). */
LA_API la_status la_paged_index_cache_get_params(const la_paged_index_cache *cache,
                                                 la_paged_cache_params *p);
/* Raw page memory (num_pages·page_bytes bytes, on the cache's device). */
LA_API la_status la_paged_index_cache_storage(const la_paged_index_cache *cache, void **data,
                                              size_t *page_bytes);

/* Write n tokens' keys k [n,dI] (f32/f64/bf16/f16) to slot_mapping int32 [n]
 * (−1 = skip, as padding). seq_ids and positions int32 [n] (both or
 * neither; need max_seqs > 0) name each token's sequence and absolute
 * position: the pooled sum of block positions/B of that sequence grows by
 * the stored (dequantized) key. A block's tokens are appended in position
 * order; position % B == 0 starts the block afresh. Every argument is
 * validated (slots, finite keys, ranges, order) before anything is
 * written: a rejected append leaves the cache as it was. */
LA_API la_status la_paged_index_cache_append(la_paged_index_cache *cache, const la_tensor *k,
                                             const la_tensor *slot_mapping,
                                             const la_tensor *seq_ids,
                                             const la_tensor *positions, la_context *ctx);
/* Keys of positions [0, len) of block_table row `row` (int32 [nseq,
 * max_pages]), dequantized, into out f32 [len,dI]. */
LA_API la_status la_paged_index_cache_gather(const la_paged_index_cache *cache,
                                             const la_tensor *block_table, int64_t row,
                                             int64_t len, la_tensor *out);
/* Pooled block means of sequence `seq` over its first len positions
 * (every block must hold min(B, len − b·B) pooled tokens) into out f32
 * [ceil(len/B), dI]: mean = sum/count, the sum in position order. */
LA_API la_status la_paged_index_cache_pooled(const la_paged_index_cache *cache, int64_t seq,
                                             int64_t len, la_tensor *out);

/* The batch of a paged indexer call. Row s of block_table is sequence s
 * (also its pooled-state sequence), with context_lens[s] cached tokens.
 * Queries: q_seq int32 [T] gives each query row's sequence (the j-th row of
 * sequence s, of n_s, is its query j); NULL = next_n consecutive rows per
 * sequence (T = nseq·next_n). Query j sees positions
 * [0, context_len − n_s + j + 1). */
typedef struct la_paged_query {
    const la_tensor *block_table;  /* int32 [nseq, max_pages]             */
    const la_tensor *context_lens; /* int32 [nseq]                        */
    const la_tensor *q_seq;        /* int32 [T] or NULL                   */
    int64_t next_n;                /* default 1 (used when q_seq is NULL) */
    int return_slots;              /* 0 (default): positions; 1: slots    */
} la_paged_query;
LA_API la_status la_paged_query_init(la_paged_query *pq);

/* q [T,HI,dI], w [T,HI]; idx int32 [T,topk]: per query the top-k token
 * positions of its sequence (or their slots), −1 padding; equal to
 * la_dsa_indexer / la_hisa_indexer on the sequence's gathered keys.
 * On a CUDA cache the values of block_table, context_lens and q_seq are
 * checked on the device, with no copy to the host: a page id outside the
 * cache, a length below 0 or over the table's capacity (max_pages ·
 * page_size; HISA on pooled sums: max_seq_len, and each block's pooled
 * count) or a q_seq entry outside the rows is clamped (nothing is read out
 * of bounds; that call's idx is unspecified) and recorded in the cache.
 * It is reported, as LA_ERR_ARG naming the argument, by
 * la_paged_index_cache_check (which waits for the device) or by a later
 * paged call on the cache once the device has finished the bad one (that
 * call then writes nothing). Shapes are checked on the host, as always. */
LA_API la_status la_dsa_topk_paged(const la_index_params *p, const la_tensor *q,
                                   const la_tensor *w, const la_paged_index_cache *cache,
                                   const la_paged_query *pq, la_tensor *idx, la_context *ctx);
LA_API la_status la_hisa_topk_paged(const la_index_params *p, const la_tensor *q,
                                    const la_tensor *w, const la_paged_index_cache *cache,
                                    const la_paged_query *pq, la_tensor *idx, la_context *ctx);
/* LA_OK, or LA_ERR_ARG naming the argument of the first bad value that a
 * paged indexer call on this CUDA cache found on the device since the last
 * check (then cleared). Waits for ctx's stream. Always LA_OK on the CPU. */
LA_API la_status la_paged_index_cache_check(const la_paged_index_cache *cache, la_context *ctx);

/* Sparse MLA decode over a paged latent cache: q [T,Hq,Dqk], kv_cache
 * [num_pages,page_size,Dqk] (one latent kv head, f32 or bf16 as q, pages
 * contiguous: page stride = page_size·token stride), idx_slots int32 [T,k]
 * cache slots page·page_size + offset (−1 = skip; the paged indexers'
 * return_slots), out [T,Hq,dv], lse [T,Hq] (optional). Equals
 * la_sparse_attention on the cache viewed as [num_pages·page_size, Dqk]
 * (the same kernel on the same rows). A slot outside the cache is
 * LA_ERR_ARG naming idx_slots; a rejected call writes nothing. */
LA_API la_status la_sparse_attention_paged(const la_sparse_attn_params *p, const la_tensor *q,
                                           const la_tensor *kv_cache, const la_tensor *idx_slots,
                                           la_tensor *out, la_tensor *lse, la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif /* LONGATTN_H */
