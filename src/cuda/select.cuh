/* Kernel selection helpers shared by the families' selection functions.
 *
 * Every family picks its kernel in one pure function of the problem (views,
 * sizes) and of the variant forced through the context (src/core/variant.h:
 * NULL = the default choice). The function returns LA_ERR_ARG for a name
 * that is not one of the family's variants and LA_ERR_UNSUPPORTED when the
 * forced variant does not take the problem; it launches nothing. The caller
 * prints the choice with la_cu_report when the context is verbose.
 * Internal; included by src/cuda/*.cu only. */
#ifndef LA_CUDA_SELECT_CUH
#define LA_CUDA_SELECT_CUH

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/variant.h"
#include "common.cuh"

/* Index of `name` in the family's variant names, or -1. */
static inline int la_cu_variant_index(const char *name, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(name, names[i])) return i;
    return -1;
}

/* A variant `<prefix><N>` with N a decimal integer in [lo, hi]: 1 and *n = N,
 * else 0. */
static inline int la_cu_variant_number(const char *name, const char *prefix, long lo, long hi,
                                       long *n) {
    const size_t lp = strlen(prefix);
    if (strncmp(name, prefix, lp) || !name[lp]) return 0;
    char *end = nullptr;
    const long v = strtol(name + lp, &end, 10);
    if (*end || v < lo || v > hi) return 0;
    *n = v;
    return 1;
}

/* LA_ERR_ARG naming the family's variants (`known`: a readable list). */
static inline la_status la_cu_unknown_variant(const char *family, const char *name,
                                              const char *known) {
    return la_err(LA_ERR_ARG, "variant: '%s' is not a CUDA %s variant (%s)", name, family, known);
}

/* LA_ERR_UNSUPPORTED: the forced variant does not take this problem. */
static inline la_status la_cu_variant_unsupported(const char *family, const char *name,
                                                  const char *why) {
    return la_err(LA_ERR_UNSUPPORTED, "variant: CUDA %s variant '%s' does not take these inputs (%s)",
                  family, name, why);
}

/* One line to stderr, when the context is verbose: the family, the chosen
 * variant and the problem (printf format). */
static inline void la_cu_report(const la_context *ctx, const char *family, const char *variant,
                                const char *fmt, ...) {
    if (!la_context_verbose(ctx)) return;
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "la: %s: %s (%s)\n", family, variant, buf);
}

#endif
