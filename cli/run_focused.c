/* `longattn run focused` (SPEC §4) and `longattn run attn-map` (SPEC §9),
 * per CLI.md. */
#include <errno.h>
#include <stdlib.h>

#include "cli.h"
#include "op_opts.h"

/* Copy a host f32 rank-4 [Cc,1,k,k] (torch's depthwise weight) or rank-3
 * [Cc,k,k] conv into a rank-3 view. 0/2. */
static int conv_view(la_tensor *t, const char *path) {
    if (t->ndim == 4) {
        if (t->ne[1] != 1)
            return cli_fail("--conv %s: shape [%lld, %lld, %lld, %lld]: a depthwise kernel is "
                               "[channels, 1, k, k] or [channels, k, k]", path,
                               (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                               (long long)t->ne[3]);
        int64_t ne[3] = {t->ne[0], t->ne[2], t->ne[3]};
        la_tensor_init(t, t->data, t->dtype, t->device, 3, ne);
    } else if (t->ndim != 3) {
        return cli_fail("--conv %s: rank %d; a depthwise kernel is [channels, k, k] (or "
                           "[channels, 1, k, k])", path, t->ndim);
    }
    return 0;
}

/* Whole-string float: 1 a finite number, 0 not a number. */
static int parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

static const cli_opt focused_opts[] = {
    CLI_FOCUSED_INPUT_OPTS,
    {"out", CLI_OPT_OUT, NULL, "output .npy [B,N,H,Dv] (required)"},
};

int cli_run_focused(int argc, char **argv) {
    const int nopt = (int)(sizeof focused_opts / sizeof focused_opts[0]);
    const char *usage =
        "Focused linear attention (SPEC §4) over an HxW token map, non-causal.\n"
        "flatten: q~,k~ = f_p((ReLU(x)+1e-6)/softplus(s)) over all H*D channels,\n"
        "         o = (q~ S/N)/(q~ z/N + eps) per head, + depthwise conv of v with bias.\n"
        "blog:    q <- q d^-1/2, relu1 on q and k, K^ = focus[h] * DWConv(phi(K)),\n"
        "         o = q~ S/(q~ z + eps), heads concatenated per token.";
    cli_args a;
    int rc = cli_args_parse(focused_opts, nopt, "run focused", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);

    la_focused_params p;
    la_focused_params_init(&p);
    const char *var = cli_args_get(&a, "variant");
    if (strcmp(var, "flatten") == 0) p.variant = LA_FOCUSED_FLATTEN;
    else if (strcmp(var, "blog") == 0) p.variant = LA_FOCUSED_BLOG;
    else return cli_end(&c, cli_fail("--variant '%s': expected flatten or blog", var));
    const int blog = p.variant == LA_FOCUSED_BLOG;
    /* options that belong to the other variant are refused, not ignored */
    if (blog && (cli_args_given(&a, "conv-bias") || cli_args_given(&a, "softplus-param") ||
                 cli_args_given(&a, "p")))
        return cli_end(&c, cli_fail("--%s applies to --variant flatten only",
                                          cli_args_given(&a, "conv-bias") ? "conv-bias"
                                          : cli_args_given(&a, "p") ? "p" : "softplus-param"));
    if (!blog && cli_args_given(&a, "focus"))
        return cli_end(&c, cli_fail("--focus applies to --variant blog only"));

    int mnd = 0;
    int64_t md[3];
    if (!cli_args_get(&a, "map"))
        return cli_end(&c, cli_fail("option --map HxW is required (the token map, H*W = N)"));
    if (cli_args_dims(&a, "map", &mnd, md)) return cli_end(&c, 2);
    if (mnd != 2) return cli_end(&c, cli_fail("--map '%s': expected HxW", cli_args_get(&a, "map")));
    p.map_h = md[0];
    p.map_w = md[1];
    if (cli_args_float(&a, "p", &p.p) || cli_args_float(&a, "eps", &p.eps)) return cli_end(&c, 2);
    if (!cli_args_get(&a, "out")) return cli_end(&c, cli_fail("option --out is required"));

    la_tensor q, k, v, conv, bias, sp, focus, out, dout;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v) ||
        cli_load(&c, &a, "conv", 0, -1, LA_F32, blog ? "[H*D,k,k]" : "[D,k,k]", &conv) ||
        cli_load(&c, &a, "conv-bias", 0, 1, LA_F32, "[D]", &bias) ||
        cli_load(&c, &a, "softplus-param", 0, 1, LA_F32, "[H*D]", &sp))
        return cli_end(&c, 2);
    const int64_t N = q.ne[1], H = q.ne[2], D = q.ne[3];
    int64_t map_n;
    if (__builtin_mul_overflow(p.map_h, p.map_w, &map_n))
        return cli_end(&c, cli_fail("--map %lldx%lld: the token count overflows int64 but --q %s has N=%lld",
                                    (long long)p.map_h, (long long)p.map_w, cli_args_get(&a, "q"),
                                    (long long)N));
    if (map_n != N)
        return cli_end(&c, cli_fail("--map %lldx%lld holds %lld tokens but --q %s has N=%lld",
                                          (long long)p.map_h, (long long)p.map_w,
                                          (long long)map_n, cli_args_get(&a, "q"),
                                          (long long)N));
    if (conv.data && conv_view(&conv, cli_args_get(&a, "conv"))) return cli_end(&c, 2);
    if (conv.data) {
        const int64_t ks = conv.ne[1], want = blog ? H * D : D;
        const char *path = cli_args_get(&a, "conv");
        if (conv.ne[2] != ks || ks % 2 == 0 || conv.ne[0] != want || ks > p.map_h || ks > p.map_w)
            return cli_end(&c, cli_fail(
                "--conv %s: shape [%lld, %lld, %lld]: expected %s [%lld, k, k] with k odd and at "
                "most the %lldx%lld map", path, (long long)conv.ne[0], (long long)conv.ne[1],
                (long long)conv.ne[2], blog ? "blog" : "flatten", (long long)want,
                (long long)p.map_h, (long long)p.map_w));
    }
    /* --focus: a number for every head, or a file [H] */
    memset(&focus, 0, sizeof focus);
    if (blog) {
        float fv;
        const char *fs = cli_args_get(&a, "focus");
        /* a number (finite, in float32 range: "1e39", "nan" and "inf" are
         * refused as numbers, not looked up as files), else a .npy file */
        const int r = cli_parse_float("focus", fs, &fv);
        if (r == 2) return cli_end(&c, 2);
        if (r == 0) {
            float *buf = NULL;
            int64_t ne1 = H;
            if (cli_alloc(&c, LA_F32, 1, &ne1, &focus)) return cli_end(&c, 2);
            buf = (float *)focus.data;
            for (int64_t h = 0; h < H; h++) buf[h] = fv;
        } else if (cli_load(&c, &a, "focus", 1, 1, LA_F32, "[H]", &focus)) {
            return cli_end(&c, 2);
        }
    }

    int64_t oshape[4] = {q.ne[0], N, H, v.ne[3]};
    if (cli_alloc(&c, cli_out_dtype(&q), 4, oshape, &out)) return cli_end(&c, 2);
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        cli_upload(&c, &conv) || cli_upload(&c, &bias) || cli_upload(&c, &sp) ||
        cli_upload(&c, &focus) || cli_device_out(&c, &out, &dout))
        return cli_end(&c, 2);
    la_status s = la_focused_attention(&p, &q, &k, &v, conv.data ? &conv : NULL,
                                       bias.data ? &bias : NULL, sp.data ? &sp : NULL,
                                       focus.data ? &focus : NULL, &dout, c.ctx);
    rc = cli_status(s, "focused");
    if (rc == 0) rc = cli_save(&c, &a, "out", &out, &dout);
    return cli_end(&c, rc);
}

/* ------------------------------------------------------------------------ */
static const cli_opt map_opts[] = {
    {"q", CLI_OPT_IN, NULL, "queries .npy [N,D] (one head)"},
    {"k", CLI_OPT_IN, NULL, "keys .npy [N,D]"},
    {"variant", CLI_OPT_VALUE, "softmax", "softmax | linear | mhla | focused-flatten | focused-blog"},
    {"feature", CLI_OPT_VALUE, NULL, "linear/mhla feature map: identity relu relu_eps relu1 elu1 (default: relu for linear, relu_eps for mhla)"},
    {"scale", CLI_OPT_VALUE, "0", "softmax scale (0 = D^-1/2); linear/mhla query scale (0 = 1)"},
    {"mixing", CLI_OPT_IN, NULL, "mhla: mixing matrix .npy [M,M]"},
    {"grid", CLI_OPT_VALUE, NULL, "mhla: token grid N, HxW or TxHxW (default: N, 1-D)"},
    {"blocks", CLI_OPT_VALUE, NULL, "mhla: block grid, same rank as --grid (default 1-D: M of --mixing)"},
    {"map", CLI_OPT_VALUE, NULL, "focused: token map HxW (checked against N; the conv terms are left out of the map)"},
    {"softplus-param", CLI_OPT_IN, NULL, "focused-flatten: s .npy [D] (default: zeros)"},
    {"p", CLI_OPT_VALUE, "3", "focused-flatten: focusing factor"},
    {"rtol", CLI_OPT_VALUE, "1e-6", "rank = #{singular values > rtol * largest}"},
    {"out", CLI_OPT_OUT, NULL, "output .npy [N,N] attention weights, rows sum to 1 (optional)"},
};

int cli_run_attn_map(int argc, char **argv) {
    const int nopt = (int)(sizeof map_opts / sizeof map_opts[0]);
    const char *usage =
        "Explicit N x N attention weights of one head (SPEC §9), their numerical rank\n"
        "(float64 SVD, LAPACK) and mean row entropy; prints 'rank=R entropy=E'.";
    cli_args a;
    int rc = cli_args_parse(map_opts, nopt, "run attn-map", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (strcmp(a.device, "cpu") != 0)
        return cli_fail("attn-map: --device %s: the analysis runs on the host (use cpu)", a.device);
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);

    la_attn_map_params p;
    la_attn_map_params_init(&p);
    const char *var = cli_args_get(&a, "variant");
    static const char *names[] = {"softmax", "linear", "mhla", "focused-flatten", "focused-blog"};
    int vi = -1;
    for (int i = 0; i < 5; i++)
        if (strcmp(var, names[i]) == 0) vi = i;
    if (vi < 0)
        return cli_end(&c, cli_fail("--variant '%s': expected softmax, linear, mhla, "
                                          "focused-flatten or focused-blog", var));
    p.variant = (la_map_variant)vi;
    const char *fe = cli_args_get(&a, "feature");
    p.feature = p.variant == LA_MAP_MHLA ? LA_FEATURE_RELU_EPS : LA_FEATURE_RELU;
    if (fe && la_feature_from_name(fe, &p.feature) != LA_OK)
        return cli_end(&c, cli_fail("--feature '%s': expected identity, relu, relu_eps, "
                                          "relu1 or elu1", fe));
    double rtol;
    if (cli_args_float(&a, "scale", &p.scale) || cli_args_float(&a, "p", &p.focused.p))
        return cli_end(&c, 2);
    if (!parse_number(cli_args_get(&a, "rtol"), &rtol) || rtol < 0)
        return cli_end(&c, cli_fail("--rtol '%s': expected a number >= 0", cli_args_get(&a, "rtol")));

    la_tensor q, k, mix, sp;
    if (cli_load(&c, &a, "q", 1, 2, LA_F32, "[N,D]", &q) ||
        cli_load(&c, &a, "k", 1, 2, LA_F32, "[N,D]", &k) ||
        cli_load(&c, &a, "mixing", p.variant == LA_MAP_MHLA, 2, LA_F32, "[M,M]", &mix) ||
        cli_load(&c, &a, "softplus-param", 0, 1, LA_F32, "[D]", &sp))
        return cli_end(&c, 2);
    const int64_t N = q.ne[0];
    if (k.ne[0] != N || k.ne[1] != q.ne[1])
        return cli_end(&c, cli_fail("--k %s: shape [%lld, %lld] but --q is [%lld, %lld]",
                                          cli_args_get(&a, "k"), (long long)k.ne[0],
                                          (long long)k.ne[1], (long long)N, (long long)q.ne[1]));
    if (p.variant == LA_MAP_MHLA) {
        int gnd = 1, bnd = 0;
        int64_t g[3] = {N, 0, 0}, bl[3] = {0, 0, 0};
        if (cli_args_get(&a, "grid") && cli_args_dims(&a, "grid", &gnd, g)) return cli_end(&c, 2);
        if (cli_args_get(&a, "blocks")) {
            if (cli_args_dims(&a, "blocks", &bnd, bl)) return cli_end(&c, 2);
        } else if (gnd == 1) {
            bnd = 1;
            bl[0] = mix.ne[0];
        } else {
            return cli_end(&c, cli_fail("option --blocks is required with a %d-D --grid", gnd));
        }
        if (bnd != gnd)
            return cli_end(&c, cli_fail("--blocks has rank %d but --grid has rank %d", bnd, gnd));
        int64_t prod = 1;
        for (int i = 0; i < gnd; i++) prod = prod > INT64_MAX / g[i] ? -1 : prod * g[i];
        if (prod != N)
            return cli_end(&c, cli_fail("--grid %s holds %lld tokens but --q %s has N=%lld",
                                              cli_args_get(&a, "grid") ? cli_args_get(&a, "grid") : "N",
                                              (long long)prod, cli_args_get(&a, "q"), (long long)N));
        p.mhla.grid_ndim = gnd;
        for (int i = 0; i < 3; i++) {
            p.mhla.grid[i] = g[i];
            p.mhla.blocks[i] = bl[i];
        }
    } else if (mix.data) {
        return cli_end(&c, cli_fail("--mixing applies to --variant mhla only"));
    }
    if (cli_args_get(&a, "map")) {
        int mnd;
        int64_t md[3], map_n = 0;
        if (cli_args_dims(&a, "map", &mnd, md)) return cli_end(&c, 2);
        if (mnd != 2 || __builtin_mul_overflow(md[0], md[1], &map_n) || map_n != N)
            return cli_end(&c, cli_fail("--map %s does not hold the N=%lld tokens of --q %s",
                                              cli_args_get(&a, "map"), (long long)N,
                                              cli_args_get(&a, "q")));
        p.focused.map_h = md[0];
        p.focused.map_w = md[1];
    }
    if (sp.data && p.variant != LA_MAP_FOCUSED_FLATTEN)
        return cli_end(&c, cli_fail("--softplus-param applies to --variant focused-flatten only"));

    /* the map in float64 for the SVD, written as float32 */
    la_tensor m64, out;
    int64_t shape[2] = {N, N};
    if (cli_alloc(&c, LA_F64, 2, shape, &m64)) return cli_end(&c, 2);
    la_status s = la_attention_map(&p, &q, &k, mix.data ? &mix : NULL, sp.data ? &sp : NULL,
                                   &m64, c.ctx);
    if ((rc = cli_status(s, "attn-map"))) return cli_end(&c, rc);
    int64_t rank = -1;
    double ent = 0;
    s = la_map_rank_entropy(&m64, rtol, &rank, &ent);
    if ((rc = cli_status(s, "attn-map"))) return cli_end(&c, rc);
    if (cli_args_get(&a, "out")) {
        if (cli_alloc(&c, LA_F32, 2, shape, &out)) return cli_end(&c, 2);
        const double *src = (const double *)m64.data;
        float *dst = (float *)out.data;
        for (int64_t i = 0; i < N * N; i++) dst[i] = (float)src[i];
        if ((rc = cli_save(&c, &a, "out", &out, NULL))) return cli_end(&c, rc);
    }
    printf("rank=%lld entropy=%.6f\n", (long long)rank, ent);
    return cli_end(&c, 0);
}
