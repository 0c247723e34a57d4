/* Analysis tools (SPEC §9): explicit attention maps of one head and their
 * numerical rank and mean row entropy. Validation and the MHLA block rule
 * (§5.1) live here; the float64 work in src/cpu/attn_map_cpu.c. */
#include "core/internal.h"
#include "cpu/attn_map_cpu.h"

la_status la_attn_map_params_init(la_attn_map_params *p) {
    if (!p) return la_err(LA_ERR_ARG, "la_attn_map_params_init: p is NULL");
    memset(p, 0, sizeof *p);
    p->variant = LA_MAP_SOFTMAX;
    p->feature = LA_FEATURE_RELU; /* §3 default; set relu_eps to match MHLA's §5.2 default */
    p->scale = 0.f;
    p->mhla.grid_ndim = 1;
    p->mhla.grid[0] = 0; /* = N */
    p->mhla.blocks[0] = p->mhla.blocks[1] = p->mhla.blocks[2] = 1;
    p->mhla.feature = LA_FEATURE_RELU_EPS;
    p->mhla.normalize = LA_MHLA_NORM_PER_QUERY;
    p->mhla.eps = 1e-6f;
    p->mhla.scale_q = 1.f;
    p->focused.variant = LA_FOCUSED_FLATTEN;
    p->focused.map_h = p->focused.map_w = 0;
    p->focused.p = 3.f;
    p->focused.eps = 1e-6f;
    return LA_OK;
}

/* §5.1: block id of every token of a 1/2/3-D grid in raster order. */
static la_status mhla_block_ids(const la_mhla_params *m, int64_t N, int64_t *blk, int64_t *M_out) {
    const int nd = m->grid_ndim;
    if (nd < 1 || nd > 3)
        return la_err(LA_ERR_ARG, "mhla.grid_ndim=%d: the token grid is 1-, 2- or 3-D", nd);
    int64_t g[3], nb[3], prod = 1, M = 1;
    for (int a = 0; a < nd; a++) {
        g[a] = (nd == 1 && m->grid[0] == 0) ? N : m->grid[a];
        nb[a] = m->blocks[a];
        if (g[a] <= 0)
            return la_err(LA_ERR_ARG, "mhla.grid[%d]=%lld must be positive", a, (long long)g[a]);
        /* more blocks than tokens is valid (SPEC §5.1: some blocks stay empty) */
        if (nb[a] < 1 || nb[a] > ((int64_t)1 << 31))
            return la_err(LA_ERR_ARG, "mhla.blocks[%d]=%lld must be in [1, 2^31]", a,
                          (long long)nb[a]);
        if (prod > INT64_MAX / g[a] || M > INT64_MAX / nb[a])
            return la_err(LA_ERR_OVERFLOW, "mhla: grid or block count overflows");
        prod *= g[a];
        M *= nb[a];
    }
    if (prod != N)
        return la_err(LA_ERR_SHAPE, "mhla: the token grid holds %lld tokens but q has N=%lld",
                      (long long)prod, (long long)N);
    for (int64_t n = 0; n < N; n++) {
        int64_t rest = n, c[3] = {0, 0, 0}, id = 0;
        for (int a = nd - 1; a >= 0; a--) { c[a] = rest % g[a]; rest /= g[a]; }
        for (int a = 0; a < nd; a++) id = id * nb[a] + (c[a] * nb[a]) / g[a];
        blk[n] = id;
    }
    *M_out = M;
    return LA_OK;
}

la_status la_attention_map(const la_attn_map_params *p, const la_tensor *q,
                           const la_tensor *k, const la_tensor *mixing,
                           const la_tensor *softplus_param, la_tensor *out, la_context *ctx) {
    char s1[64], s2[64];
    if (!p) return la_err(LA_ERR_ARG, "attn_map: params is NULL");
    if (!q || !k || !out)
        return la_err(LA_ERR_ARG, "attn_map: %s is NULL", !q ? "q" : !k ? "k" : "out");
    if ((int)p->variant < LA_MAP_SOFTMAX || p->variant > LA_MAP_FOCUSED_BLOG)
        return la_err(LA_ERR_ARG, "attn_map: unknown variant %d", (int)p->variant);
    if (q->device == LA_DEVICE_CUDA || k->device == LA_DEVICE_CUDA ||
        out->device == LA_DEVICE_CUDA)
        return la_err(LA_ERR_UNSUPPORTED, "attn_map: analysis maps are computed on the host; "
                      "pass CPU tensors (q, k, out)");
    LA_TRY(la_check_tensor(q, "q", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    LA_TRY(la_check_tensor(k, "k", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    LA_TRY(la_check_tensor(out, "out", 2, LA_DT(LA_F32) | LA_DT(LA_F64), LA_DEVICE_CPU, false));
    const int64_t N = q->ne[0], D = q->ne[1];
    if (k->ne[0] != N || k->ne[1] != D)
        return la_err(LA_ERR_SHAPE, "attn_map: k is %s but q is %s (one head, [N,D] each)",
                      la_shape_str(k, s1, sizeof s1), la_shape_str(q, s2, sizeof s2));
    if (out->ne[0] != N || out->ne[1] != N)
        return la_err(LA_ERR_SHAPE, "attn_map: out is %s, expected [N,N] = [%lld, %lld]",
                      la_shape_str(out, s1, sizeof s1), (long long)N, (long long)N);
    if (la_tensors_overlap(out, q) || la_tensors_overlap(out, k))
        return la_err(LA_ERR_ARG, "attn_map: out overlaps q or k");
    if (!(p->scale >= 0.f) || isinf(p->scale))
        return la_err(LA_ERR_ARG, "attn_map: scale=%g must be finite and >= 0 (0 = default)",
                      (double)p->scale);
    if (p->variant == LA_MAP_LINEAR || p->variant == LA_MAP_MHLA)
        LA_TRY(la_check_feature(p->feature, "attn_map: feature"));

    int64_t *blk = NULL, M = 0;
    const la_tensor *mix = NULL, *sp = NULL;
    if (p->variant == LA_MAP_MHLA) {
        if (!mixing) return la_err(LA_ERR_ARG, "attn_map: mhla needs the mixing matrix [M,M]");
        size_t bytes;
        LA_TRY(la_mul_size((size_t)N, sizeof(int64_t), &bytes, "attn_map: block ids"));
        blk = (int64_t *)la_ws_alloc(ctx, bytes);
        if (!blk) return LA_ERR_NOMEM;
        la_status st = mhla_block_ids(&p->mhla, N, blk, &M);
        if (st == LA_OK) st = la_check_tensor(mixing, "mixing", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false);
        if (st == LA_OK && (mixing->ne[0] != M || mixing->ne[1] != M))
            st = la_err(LA_ERR_SHAPE, "mixing: %s, expected [M,M] with M=%lld blocks",
                        la_shape_str(mixing, s1, sizeof s1), (long long)M);
        if (st != LA_OK) {
            la_ws_free(ctx, blk);
            return st;
        }
        mix = mixing;
    }
    if (p->variant == LA_MAP_FOCUSED_FLATTEN || p->variant == LA_MAP_FOCUSED_BLOG) {
        const la_focused_params *f = &p->focused;
        if ((f->map_h || f->map_w) &&
            (f->map_h <= 0 || f->map_w <= 0 || f->map_h > INT64_MAX / f->map_w ||
             f->map_h * f->map_w != N))
            return la_err(LA_ERR_SHAPE, "attn_map: map %lldx%lld does not hold the N=%lld tokens",
                          (long long)f->map_h, (long long)f->map_w, (long long)N);
        if (p->variant == LA_MAP_FOCUSED_FLATTEN) {
            if (!(f->p > 0.f) || isinf(f->p))
                return la_err(LA_ERR_ARG, "attn_map: focusing factor p=%g must be finite and > 0",
                              (double)f->p);
            if (softplus_param) {
                LA_TRY(la_check_tensor(softplus_param, "softplus_param", 1, LA_DT_FLOAT,
                                       LA_DEVICE_CPU, false));
                LA_TRY(la_check_dim(softplus_param, "softplus_param", 0, D,
                                    "one scale per channel of the head"));
                sp = softplus_param;
            }
        }
    }
    la_status st = la_attn_map_cpu(p, q, k, blk, mix, sp, out, ctx);
    la_ws_free(ctx, blk);
    if (st == LA_OK) la_err_clear();
    return st;
}

la_status la_map_rank_entropy(const la_tensor *map, double rtol, int64_t *rank,
                              double *entropy) {
    if (!map) return la_err(LA_ERR_ARG, "map_rank_entropy: map is NULL");
    if (!rank && !entropy)
        return la_err(LA_ERR_ARG, "map_rank_entropy: rank and entropy are both NULL");
    if (map->device == LA_DEVICE_CUDA)
        return la_err(LA_ERR_UNSUPPORTED, "map: analysis runs on the host; pass a CPU tensor");
    LA_TRY(la_check_tensor(map, "map", 2, LA_DT_FLOAT, LA_DEVICE_CPU, false));
    if (!(rtol >= 0.0) || isinf(rtol))
        return la_err(LA_ERR_ARG, "map_rank_entropy: rtol=%g must be finite and >= 0", rtol);
    /* LAPACK may loop or fail on NaN/Inf: refuse them up front */
    for (int64_t i = 0; i < map->ne[0]; i++)
        for (int64_t j = 0; j < map->ne[1]; j++) {
            int64_t off = la_off2(map, i, j);
            double a = map->dtype == LA_F64 ? ((const double *)map->data)[off]
                                            : la_load_f32(map, off);
            if (!isfinite(a))
                return la_err(LA_ERR_ARG, "map: element [%lld, %lld] is %g (not finite)",
                              (long long)i, (long long)j, a);
        }
    la_status st = la_map_rank_entropy_cpu(map, rtol, rank, entropy);
    if (st == LA_OK) la_err_clear();
    return st;
}
