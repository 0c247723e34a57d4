/* Kernel-variant choice through the context: see variant.h. */
#include "core/variant.h"

#include <string.h>

#include "core/internal.h"

static int find_family(const la_context *ctx, const char *family) {
    for (int i = 0; i < ctx->n_variants; i++)
        if (strcmp(ctx->variant_family[i], family) == 0) return i;
    return -1;
}

la_status la_context_set_variant(la_context *ctx, const char *family, const char *variant) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_set_variant: ctx is NULL");
    if (!family || !*family) return la_err(LA_ERR_ARG, "la_context_set_variant: family is empty");
    if (strlen(family) >= LA_VARIANT_NAME_MAX)
        return la_err(LA_ERR_ARG, "family: '%s' is longer than %d characters", family,
                      LA_VARIANT_NAME_MAX - 1);
    if (variant && strlen(variant) >= LA_VARIANT_NAME_MAX)
        return la_err(LA_ERR_ARG, "variant: '%s' is longer than %d characters", variant,
                      LA_VARIANT_NAME_MAX - 1);
    int i = find_family(ctx, family);
    if (!variant || !*variant) {
        if (i >= 0) {
            ctx->n_variants--;
            memmove(ctx->variant_family[i], ctx->variant_family[ctx->n_variants],
                    LA_VARIANT_NAME_MAX);
            memmove(ctx->variant_name[i], ctx->variant_name[ctx->n_variants], LA_VARIANT_NAME_MAX);
        }
        return LA_OK;
    }
    if (i < 0) {
        if (ctx->n_variants >= LA_MAX_VARIANTS)
            return la_err(LA_ERR_UNSUPPORTED, "la_context_set_variant: %d families already set",
                          LA_MAX_VARIANTS);
        i = ctx->n_variants++;
        strcpy(ctx->variant_family[i], family);
    }
    strcpy(ctx->variant_name[i], variant);
    return LA_OK;
}

const char *la_context_variant(const la_context *ctx, const char *family) {
    if (!ctx || !family) return NULL;
    int i = find_family(ctx, family);
    return i >= 0 ? ctx->variant_name[i] : NULL;
}

int la_context_variant_is(const la_context *ctx, const char *family, const char *name) {
    const char *v = la_context_variant(ctx, family);
    return v && name && strcmp(v, name) == 0;
}

int la_context_verbose(const la_context *ctx) { return ctx ? ctx->verbose : 0; }

la_status la_context_set_verbose(la_context *ctx, int verbose) {
    if (!ctx) return la_err(LA_ERR_ARG, "la_context_set_verbose: ctx is NULL");
    ctx->verbose = verbose != 0;
    return LA_OK;
}
