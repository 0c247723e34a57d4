/* Kernel-variant choice through the context (internal API).
 *
 * Each operator family has one pure selection function that picks its
 * kernel from the problem; tests and benchmarks may force another variant
 * of a family through the context. The default (no variant set) is always
 * the selection function's choice. Family and variant names are short
 * identifiers ("dsa", "mma"); the portable fallback of every family is
 * called "portable". */
#ifndef LA_CORE_VARIANT_H
#define LA_CORE_VARIANT_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif

#define LA_MAX_VARIANTS 16
#define LA_VARIANT_NAME_MAX 24

/* Force `variant` for `family` (NULL or "" variant = back to the default).
 * LA_ERR_ARG for a NULL ctx/family or a name longer than
 * LA_VARIANT_NAME_MAX - 1; LA_ERR_UNSUPPORTED when LA_MAX_VARIANTS
 * families are already set. The names are not checked against the
 * families' variants: the family's selection function rejects an unknown
 * one with LA_ERR_ARG when it is asked to choose. */
la_status la_context_set_variant(la_context *ctx, const char *family, const char *variant);
/* The forced variant of `family`, or NULL (ctx NULL or nothing set). */
const char *la_context_variant(const la_context *ctx, const char *family);
/* Whether the forced variant of `family` is `name` (0 when none is set). */
int la_context_variant_is(const la_context *ctx, const char *family, const char *name);
/* Whether the context asks selection functions to report their choice
 * (la_context_set_verbose, or LA_VERBOSE=1 in the environment at context
 * creation). */
int la_context_verbose(const la_context *ctx);
la_status la_context_set_verbose(la_context *ctx, int verbose);

#ifdef __cplusplus
}
#endif
#endif
