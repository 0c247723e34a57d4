/* `longattn run mhla` (SPEC §5.2, §5.4) and `longattn run mhla-init`
 * (SPEC §5.3), per CLI.md. Added beyond CLI.md: --decode / --prefill, which
 * compute the causal outputs through the decoding state instead of the
 * chunkwise forward (the two must agree). */
#include <stdlib.h>

#include "cli.h"
#include "op_opts.h"

static const cli_opt mhla_opts[] = {
    CLI_MHLA_INPUT_OPTS,
    {"decode", CLI_OPT_FLAG, "off", "--causal: compute through the decoding state, one token at a time"},
    {"prefill", CLI_OPT_VALUE, "0", "--decode: append this many tokens at once first, then decode the rest"},
    {"out", CLI_OPT_OUT, NULL, "output .npy [B,N,H,Dv] (required)"},
};

static int parse_normalize(const char *s, la_mhla_normalize *out) {
    if (strcmp(s, "per_query") == 0) *out = LA_MHLA_NORM_PER_QUERY;
    else if (strcmp(s, "none") == 0) *out = LA_MHLA_NORM_NONE;
    else if (strcmp(s, "released_vision") == 0) *out = LA_MHLA_NORM_RELEASED_VISION;
    else return cli_fail("--normalize '%s': expected per_query, none or released_vision", s);
    return 0;
}

/* Sub-view of tokens [n0, n0+n) of a contiguous host [B,N,H,D] tensor. */
static la_tensor token_rows(const la_tensor *t, int64_t n0, int64_t n) {
    la_tensor r = *t;
    r.data = (char *)t->data + (size_t)(n0 * t->nb[1]) * la_dtype_size(t->dtype);
    r.ne[1] = n;
    return r;
}

static la_status decode_all(const la_mhla_causal_params *p, const la_tensor *q,
                            const la_tensor *k, const la_tensor *v, const la_tensor *mix,
                            la_tensor *out, int64_t prefill, la_context *ctx) {
    la_mhla_state *st = NULL;
    la_status s = la_mhla_state_create(p, q->ne[0], q->ne[2], q->ne[3], v->ne[3], mix, &st);
    const int64_t N = q->ne[1];
    for (int64_t t = 0; s == LA_OK && t < N;) {
        int64_t n = t == 0 && prefill > 0 ? prefill : 1;
        la_tensor qt = token_rows(q, t, n), kt = token_rows(k, t, n), vt = token_rows(v, t, n);
        la_tensor ot = token_rows(out, t, n);
        s = la_mhla_state_append(st, &qt, &kt, &vt, &ot, ctx);
        t += n;
    }
    la_mhla_state_destroy(st);
    return s;
}

int cli_run_mhla(int argc, char **argv) {
    const int nopt = (int)(sizeof mhla_opts / sizeof mhla_opts[0]);
    const char *usage =
        "Multi-head linear attention over token blocks (SPEC §5).\n"
        "Non-causal: tokens on a 1-D/2-D/3-D grid (raster order) split into a block grid\n"
        "(coordinate c of an axis with n tokens and g blocks is in block floor(c*g/n));\n"
        "S_b = sum_{j in b} k~_j v_j^T, S~_i = sum_b W[i,b] S_b, o_t = q~_t S~_i / (q~_t z~_i + eps).\n"
        "--causal: blocks are chunks of C tokens; o_t = q~_t (sum_{b<i} W[i,b] S_b\n"
        "          + W[i,i] sum_{j in i, j<=t} k~_j v_j^T), W's upper triangle ignored.";
    cli_args a;
    int rc = cli_args_parse(mhla_opts, nopt, "run mhla", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const int causal = cli_args_flag(&a, "causal");
    /* options of the other mode are refused, not ignored */
    if (causal && (cli_args_given(&a, "grid") || cli_args_given(&a, "blocks")))
        return cli_fail("--%s is for non-causal MHLA; --causal uses 1-D chunks of --chunk tokens",
                           cli_args_given(&a, "grid") ? "grid" : "blocks");
    if (!causal && (cli_args_given(&a, "chunk") || cli_args_given(&a, "decode") ||
                    cli_args_given(&a, "prefill")))
        return cli_fail("--%s needs --causal",
                           cli_args_given(&a, "chunk") ? "chunk"
                           : cli_args_given(&a, "decode") ? "decode" : "prefill");
    const int decode = cli_args_flag(&a, "decode");
    if (cli_args_given(&a, "prefill") && !decode) return cli_fail("--prefill needs --decode");
    if (decode && strcmp(a.device, "cpu") != 0)
        return cli_fail("--decode: the decoding state runs on the CPU (use --device cpu)");
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output .npy [B,N,H,Dv]");

    la_feature feature = causal ? LA_FEATURE_RELU : LA_FEATURE_RELU_EPS;
    la_mhla_normalize norm = causal ? LA_MHLA_NORM_NONE : LA_MHLA_NORM_PER_QUERY;
    const char *fe = cli_args_get(&a, "feature"), *no = cli_args_get(&a, "normalize");
    if (fe && la_feature_from_name(fe, &feature) != LA_OK)
        return cli_fail("--feature '%s': expected identity, relu, relu_eps, relu1 or elu1", fe);
    if (no && parse_normalize(no, &norm)) return 2;
    float eps, scale = 0.0f;
    if (cli_args_float(&a, "eps", &eps)) return 2;
    if (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &scale)) return 2;
    int64_t chunk = 64, prefill = 0;
    if (cli_args_int(&a, "chunk", &chunk) || cli_args_int(&a, "prefill", &prefill)) return 2;
    if (prefill < 0) return cli_fail("--prefill %lld: expected >= 0", (long long)prefill);
    int gnd = 0, bnd = 0;
    int64_t grid[3] = {0, 0, 0}, blocks[3] = {0, 0, 0};
    if (cli_args_given(&a, "grid") && cli_args_dims(&a, "grid", &gnd, grid)) return 2;
    if (cli_args_given(&a, "blocks") && cli_args_dims(&a, "blocks", &bnd, blocks)) return 2;
    if (!causal && gnd > 1 && !bnd)
        return cli_fail("--blocks is required with a %d-D --grid (e.g. --blocks %s)", gnd,
                           gnd == 2 ? "4x4" : "2x4x4");
    if (bnd && bnd != (gnd ? gnd : 1))
        return cli_fail("--blocks '%s' has rank %d but --grid %s has rank %d", cli_args_get(&a, "blocks"),
                           bnd, gnd ? cli_args_get(&a, "grid") : "(default N)", gnd ? gnd : 1);

    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, mix, out, dout;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v) ||
        cli_load(&c, &a, "mixing", 1, -1, LA_F32, "[M,M] or [H,M,M]", &mix))
        return cli_end(&c, 2);
    if (mix.ndim != 2 && mix.ndim != 3)
        return cli_end(&c, cli_fail("--mixing %s: rank %d, expected [M,M] or [H,M,M]",
                                          cli_args_get(&a, "mixing"), mix.ndim));
    if (prefill > q.ne[1])
        return cli_end(&c, cli_fail("--prefill %lld is more than N = %lld tokens of --q",
                                          (long long)prefill, (long long)q.ne[1]));
    int64_t oshape[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    if (cli_alloc(&c, cli_out_dtype(&q), 4, oshape, &out)) return cli_end(&c, 2);
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        cli_upload(&c, &mix) || cli_device_out(&c, &out, &dout))
        return cli_end(&c, 2);

    la_status s;
    if (causal) {
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = chunk;
        p.feature = feature;
        p.normalize = norm;
        p.eps = eps;
        p.scale_q = scale; /* 0 = D^-1/2 */
        s = decode ? decode_all(&p, &q, &k, &v, &mix, &dout, prefill, c.ctx)
                   : la_mhla_causal_forward(&p, &q, &k, &v, &mix, &dout, c.ctx);
    } else {
        la_mhla_params p;
        la_mhla_params_init(&p);
        p.grid_ndim = gnd ? gnd : 1;
        for (int i = 0; i < 3; i++) p.grid[i] = grid[i];
        if (bnd) {
            for (int i = 0; i < 3; i++) p.blocks[i] = blocks[i];
        } else {
            p.blocks[0] = mix.ne[mix.ndim - 1]; /* 1-D: one block per mixing row */
        }
        p.feature = feature;
        p.normalize = norm;
        p.eps = eps;
        p.scale_q = cli_args_given(&a, "scale") ? scale : 1.0f;
        s = la_mhla_forward(&p, &q, &k, &v, &mix, &dout, c.ctx);
    }
    rc = cli_status(s, causal ? "mhla --causal" : "mhla");
    if (rc == 0) rc = cli_save(&c, &a, "out", &out, &dout);
    return cli_end(&c, rc);
}

/* ------------------------------------------------------------------------ */
static const cli_opt init_opts[] = {
    {"blocks", CLI_OPT_VALUE, NULL, "block grid, e.g. 16, 4x4 or 3x5x10 (uniform_causal: the number of chunks); M <= 16384"},
    {"init", CLI_OPT_VALUE, "locality", "locality (paper: rows sum to 1) | locality_global (released code: columns sum to 1) | uniform_causal (W[i,j] = 1/(i+1), j <= i)"},
    {"out", CLI_OPT_OUT, NULL, "output .npy [M,M] (required)"},
};

int cli_run_mhla_init(int argc, char **argv) {
    const int nopt = (int)(sizeof init_opts / sizeof init_opts[0]);
    const char *usage =
        "MHLA mixing-matrix initializers (SPEC §5.3). Block centres are block\n"
        "coordinates + 0.5; dist is the Euclidean distance between centres.\n"
        "locality:        W[i,j] ~ 1 - dist(i,j)/max_k dist(i,k), rows normalized to 1\n"
        "locality_global: W[i,j] = 1 - dist(i,j)/max_ab dist(a,b), columns normalized to 1\n"
        "uniform_causal:  W[i,j] = 1/(i+1) for j <= i, else 0";
    cli_args a;
    int rc = cli_args_parse(init_opts, nopt, "run mhla-init", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (strcmp(a.device, "cpu") != 0)
        return cli_fail("mhla-init: --device %s: the initializer runs on the host (use cpu)", a.device);
    const char *in = cli_args_get(&a, "init");
    la_mhla_init_kind kind;
    if (strcmp(in, "locality") == 0) kind = LA_MHLA_INIT_LOCALITY;
    else if (strcmp(in, "locality_global") == 0) kind = LA_MHLA_INIT_LOCALITY_GLOBAL;
    else if (strcmp(in, "uniform_causal") == 0) kind = LA_MHLA_INIT_UNIFORM_CAUSAL;
    else return cli_fail("--init '%s': expected locality, locality_global or uniform_causal", in);
    if (!cli_args_get(&a, "blocks")) return cli_fail("option --blocks is required (e.g. 4x4, or 32 for uniform_causal)");
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output .npy [M,M]");
    int nd = 0;
    int64_t bl[3];
    if (cli_args_dims(&a, "blocks", &nd, bl)) return 2;
    int64_t M = 1;
    for (int i = 0; i < nd; i++) {
        if (bl[i] > 16384 || M * bl[i] > 16384)
            return cli_fail("--blocks '%s': more than 16384 blocks (the [M,M] output would be "
                               "over 1 GiB)", cli_args_get(&a, "blocks"));
        M *= bl[i];
    }
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor out;
    int64_t shape[2] = {M, M};
    if (cli_alloc(&c, LA_F32, 2, shape, &out)) return cli_end(&c, 2);
    rc = cli_status(la_mhla_init(kind, nd, bl, &out), "mhla-init");
    if (rc == 0) rc = cli_save(&c, &a, "out", &out, NULL);
    return cli_end(&c, rc);
}
