/* la_context: threads, workspace allocator, CUDA stream. */
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include <unistd.h>

#include "internal.h"
#include "memcheck.h"


static void *default_alloc(size_t n, void *u) { (void)u; return malloc(n ? n : 1); }
static void default_free(void *p, void *u) { (void)u; free(p); }

la_status la_context_create(la_context **ctx) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_create: ctx is NULL");
    la_context *c = (la_context *)calloc(1, sizeof *c);
    if (!c) return la_err(LA_ERR_NOMEM, "la_context_create: out of memory");
    c->threads = 0;
    c->alloc = default_alloc;
    c->free_fn = default_free;
    /* The one verbose switch: selection functions print the kernel they
     * pick (core/variant.h). */
    const char *verbose = getenv("LA_VERBOSE");
    c->verbose = verbose && *verbose && strcmp(verbose, "0") != 0;
    *ctx = c;
    return LA_OK;
}

la_status la_context_destroy(la_context *ctx) {
    free(ctx);
    return LA_OK;
}

la_status la_context_set_threads(la_context *ctx, int threads) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_set_threads: ctx is NULL");
    if (threads < 0) return la_err(LA_ERR_ARG, "threads: %d, expected >= 0 (0 = all cores)", threads);
    ctx->threads = threads;
    return LA_OK;
}

la_status la_context_get_threads(const la_context *ctx, int *threads) {
    if (!ctx || !threads) return la_err(LA_ERR_ARG, "la_context_get_threads: NULL argument");
    *threads = la_ctx_threads(ctx);
    return LA_OK;
}

la_status la_context_set_allocator(la_context *ctx, la_alloc_fn alloc, la_free_fn free_fn,
                                   void *user) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_set_allocator: ctx is NULL");
    if ((alloc == NULL) != (free_fn == NULL))
        return la_err(LA_ERR_ARG, "la_context_set_allocator: alloc and free must both be set or both NULL");
    ctx->alloc = alloc ? alloc : default_alloc;
    ctx->free_fn = free_fn ? free_fn : default_free;
    ctx->alloc_user = user;
    return LA_OK;
}

la_status la_context_set_cuda_stream(la_context *ctx, void *stream) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_set_cuda_stream: ctx is NULL");
    ctx->cuda_stream = stream;
    return LA_OK;
}

la_status la_context_get_cuda_stream(const la_context *ctx, void **stream) {
    if (!ctx || !stream) return la_err(LA_ERR_ARG, "la_context_get_cuda_stream: NULL argument");
    *stream = ctx->cuda_stream;
    return LA_OK;
}

/* Cores this process may run on (its affinity mask with OpenMP). */
static int available_cores(void) {
#ifdef _OPENMP
    int n = omp_get_num_procs();
#else
    long n = sysconf(_SC_NPROCESSORS_ONLN);
#endif
    return n > 0 ? (int)n : 1;
}

/* 0 means all cores; more threads than cores are clamped to the cores, so
 * that a large count can never make libgomp fail to create its threads
 * (which ends the process: include/longattn.h documents the clamp). */
int la_ctx_threads(const la_context *ctx) {
    const int cores = available_cores();
    int t = ctx ? ctx->threads : 0;
    if (t <= 0 || t > cores) t = cores;
    return t < 1 ? 1 : t;
}

void *la_ws_alloc(const la_context *ctx, size_t bytes) {
    /* A workspace the machine cannot hold fails here with a message, not
     * later by an OOM kill when its pages are touched. Only the default
     * allocator is checked: a caller's allocator decides for itself. */
    if (bytes >= LA_MEMCHECK_MIN_BYTES && (!ctx || ctx->alloc == default_alloc) &&
        la_mem_check(bytes, "workspace") != LA_OK)
        return NULL;
    void *p = ctx ? ctx->alloc(bytes, ctx->alloc_user) : malloc(bytes ? bytes : 1);
    if (!p) la_err(LA_ERR_NOMEM, "workspace: could not allocate %zu bytes", bytes);
    return p;
}

void la_ws_free(const la_context *ctx, void *p) {
    if (!p) return;
    if (ctx) ctx->free_fn(p, ctx->alloc_user);
    else free(p);
}

la_status la_mul_size(size_t a, size_t b, size_t *out, const char *what) {
    size_t r;
    if (__builtin_mul_overflow(a, b, &r))
        return la_err(LA_ERR_OVERFLOW, "%s: size %zu x %zu overflows", what ? what : "size", a, b);
    *out = r;
    return LA_OK;
}
