/* `longattn run OP --backward ...` (docs/CLI.md, "Backward"): the gradients
 * of one operator (TRAINING.md §1) from .npy files. Takes OP's forward
 * inputs and options (same names), --dout (the gradient of the output) and
 * writes each requested gradient (--grad-q, --grad-k, ...). The forward is
 * run first where the backward reads its results (softmax and sparse-attn:
 * out and lse); --out also writes the forward output. Bad input exits 2
 * with a one-line message and leaves no output file. */
#include <errno.h>
#include <stdlib.h>

#include "cli.h"
#include "op_opts.h"

#define GRAD_OPTS                                                                             \
    {"backward", CLI_OPT_FLAG, "off", "compute the gradients (this mode)"},                   \
    {"dout", CLI_OPT_IN, NULL, "gradient of the output .npy (the output's shape; required)"}, \
    {"out", CLI_OPT_OUT, NULL, "optional: also write the forward output .npy"}

static int parse_number(const char *s, double *out) {
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(d)) return 0;
    *out = d;
    return 1;
}

/* A host gradient buffer shaped like t (float16 for a float16 input, else
 * float32; f32 forced: always float32, as d_mixing) and its device twin, when
 * the option is given; else both zeroed (NULL data). */
static int grad_out_dt(cli_state *c, const cli_args *a, const char *opt, const la_tensor *like,
                       int f32, la_tensor *host, la_tensor *dev) {
    memset(host, 0, sizeof *host);
    memset(dev, 0, sizeof *dev);
    if (!cli_args_get(a, opt)) return 0;
    if (!like->data) return cli_fail("--%s: the input it belongs to is not given", opt);
    if (cli_alloc(c, f32 ? LA_F32 : cli_out_dtype(like), like->ndim, like->ne, host)) return 2;
    return cli_device_out(c, host, dev);
}
static int grad_out(cli_state *c, const cli_args *a, const char *opt, const la_tensor *like,
                    la_tensor *host, la_tensor *dev) {
    return grad_out_dt(c, a, opt, like, 0, host, dev);
}
static la_tensor *opt_t(la_tensor *t) { return t->data ? t : NULL; }
static int save_if(cli_state *c, const cli_args *a, const char *opt, la_tensor *host, la_tensor *dev) {
    return host->data ? cli_save(c, a, opt, host, dev) : 0;
}

/* d_out of shape want (rank nd). */
static int load_dout(cli_state *c, const cli_args *a, int nd, const int64_t *want, const char *doc,
                     la_tensor *t) {
    if (cli_load(c, a, "dout", 1, nd, LA_F32, doc, t)) return 2;
    for (int i = 0; i < nd; i++)
        if (t->ne[i] != want[i])
            return cli_fail("--dout %s: dim %d is %lld, expected %lld (the output's shape %s)",
                               cli_args_get(a, "dout"), i, (long long)t->ne[i], (long long)want[i], doc);
    return cli_upload(c, t);
}

static int need_some(const cli_args *a, const char *const *names, int n) {
    for (int i = 0; i < n; i++)
        if (cli_args_get(a, names[i])) return 0;
    return cli_fail("--backward: give at least one gradient output (--%s ...)", names[0]);
}

/* ---- softmax -------------------------------------------------------------- */
static const cli_opt softmax_bwd_opts[] = {
    CLI_SOFTMAX_INPUT_OPTS,
    GRAD_OPTS,
    {"grad-q", CLI_OPT_OUT, NULL, "output dL/dq .npy [B,Nq,H,D]"},
    {"grad-k", CLI_OPT_OUT, NULL, "output dL/dk .npy [B,Nk,Hk,D]"},
    {"grad-v", CLI_OPT_OUT, NULL, "output dL/dv .npy [B,Nk,Hk,Dv]"},
};

static int bwd_softmax(int argc, char **argv) {
    const int nopt = (int)(sizeof softmax_bwd_opts / sizeof *softmax_bwd_opts);
    cli_args a;
    int rc = cli_args_parse(softmax_bwd_opts, nopt, "run softmax --backward",
                           "Gradients of softmax attention (the forward runs first for out and lse).",
                           argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const char *g3[3] = {"grad-q", "grad-k", "grad-v"};
    if (need_some(&a, g3, 3)) return 2;
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = cli_args_flag(&a, "causal");
    if (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &p.scale)) return 2;
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, o, od, l, ld, g, hq, dq, hk, dk, hv, dv;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,Nq,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,Nk,Hk,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,Nk,Hk,Dv]", &v))
        return cli_end(&c, 2);
    const int64_t os[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    if (cli_alloc(&c, cli_out_dtype(&q), 4, os, &o) || cli_alloc(&c, LA_F32, 3, os, &l) ||
        cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        cli_device_out(&c, &o, &od) || cli_device_out(&c, &l, &ld) ||
        load_dout(&c, &a, 4, os, "[B,Nq,H,Dv]", &g) || grad_out(&c, &a, "grad-q", &q, &hq, &dq) ||
        grad_out(&c, &a, "grad-k", &k, &hk, &dk) || grad_out(&c, &a, "grad-v", &v, &hv, &dv))
        return cli_end(&c, 2);
    rc = cli_status(la_softmax_attention(&p, &q, &k, &v, &od, &ld, c.ctx), "softmax");
    if (!rc)
        rc = cli_status(la_softmax_backward(&p, &q, &k, &v, &od, &ld, &g, opt_t(&dq), opt_t(&dk),
                                               opt_t(&dv), c.ctx), "softmax backward");
    if (!rc && cli_args_get(&a, "out")) rc = cli_save(&c, &a, "out", &o, &od);
    if (!rc) rc = save_if(&c, &a, "grad-q", &hq, &dq);
    if (!rc) rc = save_if(&c, &a, "grad-k", &hk, &dk);
    if (!rc) rc = save_if(&c, &a, "grad-v", &hv, &dv);
    return cli_end(&c, rc);
}

/* ---- linear ----------------------------------------------------------------- */
static const cli_opt linear_bwd_opts[] = {
    CLI_LINEAR_INPUT_OPTS,
    {"dstate-out", CLI_OPT_VALUE, NULL, "--causal: gradient of the final state, PREFIX.S.npy and PREFIX.z.npy"},
    GRAD_OPTS,
    {"grad-q", CLI_OPT_OUT, NULL, "output dL/dq .npy [B,N,H,D]"},
    {"grad-k", CLI_OPT_OUT, NULL, "output dL/dk .npy [B,N,H,D]"},
    {"grad-v", CLI_OPT_OUT, NULL, "output dL/dv .npy [B,N,H,Dv]"},
    {"grad-state-in", CLI_OPT_VALUE, NULL, "--causal: write the initial-state gradient to PREFIX.S.npy and PREFIX.z.npy"},
};

/* PREFIX + suffix into buf. */
static const char *with_suffix(char *buf, size_t n, const char *prefix, const char *suffix) {
    snprintf(buf, n, "%s%s", prefix, suffix);
    return buf;
}

/* State file pair PREFIX.S.npy / PREFIX.z.npy of option opt (read with
 * cli_load through a one-option table of that name, so messages name it). */
static int load_pair(cli_state *c, const char *opt, const char *prefix, const int64_t *wS,
                     const int64_t *wz, la_tensor *S, la_tensor *z) {
    const cli_opt one[1] = {{opt, CLI_OPT_VALUE, NULL, ""}};
    char path[4096];
    cli_args fa;
    memset(&fa, 0, sizeof fa);
    fa.spec = one, fa.nspec = 1, fa.given[0] = 1;
    const int64_t *w[2] = {wS, wz};
    la_tensor *t[2] = {S, z};
    const char *suf[2] = {".S.npy", ".z.npy"};
    for (int i = 0; i < 2; i++) {
        fa.value[0] = with_suffix(path, sizeof path, prefix, suf[i]);
        if (cli_load(c, &fa, opt, 1, 4 - i, LA_F32, i ? "[B,H,D]" : "[B,H,D,Dv]", t[i])) return 2;
        for (int d = 0; d < 4 - i; d++)
            if (t[i]->ne[d] != w[i][d])
                return cli_fail("--%s %s: dim %d is %lld, expected %lld", opt, path, d,
                                   (long long)t[i]->ne[d], (long long)w[i][d]);
        if (cli_upload(c, t[i])) return 2;
    }
    return 0;
}

static int bwd_linear(int argc, char **argv) {
    const int nopt = (int)(sizeof linear_bwd_opts / sizeof *linear_bwd_opts);
    cli_args a;
    int rc = cli_args_parse(linear_bwd_opts, nopt, "run linear --backward",
                           "Gradients of linear attention; causal: also of the initial state, given the\n"
                           "gradient of the final state (--dstate-out; default zero).", argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const char *g4[4] = {"grad-q", "grad-k", "grad-v", "grad-state-in"};
    if (need_some(&a, g4, 4)) return 2;
    la_linear_params p;
    la_linear_params_init(&p);
    p.causal = cli_args_flag(&a, "causal");
    p.normalize = cli_args_flag(&a, "normalize");
    const char *fe = cli_args_get(&a, "feature");
    if (la_feature_from_name(fe, &p.feature) != LA_OK)
        return cli_fail("--feature '%s': expected identity, relu, relu_eps, relu1 or elu1", fe);
    if (cli_args_float(&a, "eps", &p.eps) || cli_args_float(&a, "scale", &p.scale_q) ||
        cli_args_int(&a, "chunk", &p.chunk))
        return 2;
    const char *sin = cli_args_get(&a, "state-in"), *dso = cli_args_get(&a, "dstate-out");
    const char *gsi = cli_args_get(&a, "grad-state-in");
    if ((sin || dso || gsi) && !p.causal)
        return cli_fail("--%s needs --causal", sin ? "state-in" : dso ? "dstate-out" : "grad-state-in");
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, g, Si, zi, dSo, dzo, hq, dq, hk, dk, hv, dv, hS, dS, hz, dz, o, od;
    memset(&Si, 0, sizeof Si), memset(&zi, 0, sizeof zi), memset(&dSo, 0, sizeof dSo);
    memset(&dzo, 0, sizeof dzo), memset(&hS, 0, sizeof hS), memset(&hz, 0, sizeof hz);
    memset(&dS, 0, sizeof dS), memset(&dz, 0, sizeof dz);
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v))
        return cli_end(&c, 2);
    const int64_t os[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    const int64_t wS[4] = {q.ne[0], q.ne[2], q.ne[3], v.ne[3]}, wz[3] = {q.ne[0], q.ne[2], q.ne[3]};
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        load_dout(&c, &a, 4, os, "[B,N,H,Dv]", &g) ||
        (sin && load_pair(&c, "state-in", sin, wS, wz, &Si, &zi)) ||
        (dso && load_pair(&c, "dstate-out", dso, wS, wz, &dSo, &dzo)) ||
        grad_out(&c, &a, "grad-q", &q, &hq, &dq) || grad_out(&c, &a, "grad-k", &k, &hk, &dk) ||
        grad_out(&c, &a, "grad-v", &v, &hv, &dv))
        return cli_end(&c, 2);
    if (gsi) {
        if (cli_alloc(&c, LA_F32, 4, wS, &hS) || cli_alloc(&c, LA_F32, 3, wz, &hz) ||
            cli_device_out(&c, &hS, &dS) || cli_device_out(&c, &hz, &dz))
            return cli_end(&c, 2);
    }
    rc = cli_status(la_linear_backward(&p, &q, &k, &v, NULL, opt_t(&Si), opt_t(&zi), &g,
                                          opt_t(&dSo), opt_t(&dzo), opt_t(&dq), opt_t(&dk),
                                          opt_t(&dv), opt_t(&dS), opt_t(&dz), c.ctx),
                       "linear backward");
    if (!rc && cli_args_get(&a, "out")) {
        rc = cli_alloc(&c, cli_out_dtype(&q), 4, os, &o) || cli_device_out(&c, &o, &od) ? 2 : 0;
        if (!rc)
            rc = cli_status(la_linear_attention(&p, &q, &k, &v, &od, opt_t(&Si), opt_t(&zi),
                                                   NULL, NULL, c.ctx), "linear");
        if (!rc) rc = cli_save(&c, &a, "out", &o, &od);
    }
    if (!rc) rc = save_if(&c, &a, "grad-q", &hq, &dq);
    if (!rc) rc = save_if(&c, &a, "grad-k", &hk, &dk);
    if (!rc) rc = save_if(&c, &a, "grad-v", &hv, &dv);
    if (!rc && gsi) {
        char path[4096];
        rc = cli_save_path(&c, with_suffix(path, sizeof path, gsi, ".S.npy"), &hS, &dS);
        if (!rc) rc = cli_save_path(&c, with_suffix(path, sizeof path, gsi, ".z.npy"), &hz, &dz);
    }
    return cli_end(&c, rc);
}

/* ---- mhla (non-causal and --causal) ------------------------------------------- */
static const cli_opt mhla_bwd_opts[] = {
    CLI_MHLA_INPUT_OPTS,
    GRAD_OPTS,
    {"grad-q", CLI_OPT_OUT, NULL, "output dL/dq .npy [B,N,H,D]"},
    {"grad-k", CLI_OPT_OUT, NULL, "output dL/dk .npy [B,N,H,D]"},
    {"grad-v", CLI_OPT_OUT, NULL, "output dL/dv .npy [B,N,H,Dv]"},
    {"grad-mixing", CLI_OPT_OUT, NULL, "output dL/dmixing .npy, the mixing's shape (--causal: zero above the diagonal)"},
};

static int norm_of(const char *s, la_mhla_normalize *n) {
    if (strcmp(s, "per_query") == 0) *n = LA_MHLA_NORM_PER_QUERY;
    else if (strcmp(s, "none") == 0) *n = LA_MHLA_NORM_NONE;
    else if (strcmp(s, "released_vision") == 0) *n = LA_MHLA_NORM_RELEASED_VISION;
    else return cli_fail("--normalize '%s': expected per_query, none or released_vision", s);
    return 0;
}

static int bwd_mhla(int argc, char **argv) {
    const int nopt = (int)(sizeof mhla_bwd_opts / sizeof *mhla_bwd_opts);
    cli_args a;
    int rc = cli_args_parse(mhla_bwd_opts, nopt, "run mhla --backward",
                           "Gradients of MHLA (non-causal, or --causal chunkwise), including the mixing.",
                           argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const char *g4[4] = {"grad-q", "grad-k", "grad-v", "grad-mixing"};
    if (need_some(&a, g4, 4)) return 2;
    const int causal = cli_args_flag(&a, "causal");
    la_mhla_params p;
    la_mhla_causal_params pc;
    la_mhla_params_init(&p);
    la_mhla_causal_params_init(&pc);
    const char *fe = cli_args_get(&a, "feature"), *nm = cli_args_get(&a, "normalize");
    la_feature f = causal ? LA_FEATURE_RELU : LA_FEATURE_RELU_EPS;
    la_mhla_normalize n = causal ? LA_MHLA_NORM_NONE : LA_MHLA_NORM_PER_QUERY;
    if (fe && la_feature_from_name(fe, &f) != LA_OK)
        return cli_fail("--feature '%s': expected identity, relu, relu_eps, relu1 or elu1", fe);
    if (nm && norm_of(nm, &n)) return 2;
    float eps, scale = causal ? 0.f : 1.f;
    if (cli_args_float(&a, "eps", &eps) || (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &scale)) ||
        cli_args_int(&a, "chunk", &pc.chunk))
        return 2;
    p.feature = pc.feature = f, p.normalize = pc.normalize = n, p.eps = pc.eps = eps;
    p.scale_q = pc.scale_q = scale;
    if (causal && (cli_args_given(&a, "grid") || cli_args_given(&a, "blocks")))
        return cli_fail("--%s applies to non-causal MHLA only", cli_args_given(&a, "grid") ? "grid" : "blocks");
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, w, g, hq, dq, hk, dk, hv, dv, hw, dw, o, od;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v) ||
        cli_load(&c, &a, "mixing", 1, -1, LA_F32, "[M,M] or [H,M,M]", &w))
        return cli_end(&c, 2);
    if (!causal) {
        int gnd = 1, bnd = 0;
        int64_t gd[3] = {q.ne[1], 0, 0}, bd[3] = {w.ne[w.ndim - 1], 0, 0};
        if (cli_args_given(&a, "grid") && cli_args_dims(&a, "grid", &gnd, gd)) return cli_end(&c, 2);
        if (cli_args_given(&a, "blocks")) {
            if (cli_args_dims(&a, "blocks", &bnd, bd)) return cli_end(&c, 2);
        } else if (gnd != 1) {
            return cli_end(&c, cli_fail("--blocks is required with a %d-D --grid", gnd));
        } else {
            bnd = 1;
        }
        if (gnd != bnd) return cli_end(&c, cli_fail("--grid and --blocks must have the same rank"));
        p.grid_ndim = gnd;
        for (int i = 0; i < 3; i++) p.grid[i] = gd[i], p.blocks[i] = bd[i];
    }
    const int64_t os[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) || cli_upload(&c, &w) ||
        load_dout(&c, &a, 4, os, "[B,N,H,Dv]", &g) || grad_out(&c, &a, "grad-q", &q, &hq, &dq) ||
        grad_out(&c, &a, "grad-k", &k, &hk, &dk) || grad_out(&c, &a, "grad-v", &v, &hv, &dv) ||
        grad_out_dt(&c, &a, "grad-mixing", &w, 1, &hw, &dw))
        return cli_end(&c, 2);
    la_status s = causal ? la_mhla_causal_backward(&pc, &q, &k, &v, &w, NULL, &g, opt_t(&dq), opt_t(&dk),
                                                   opt_t(&dv), opt_t(&dw), c.ctx)
                         : la_mhla_backward(&p, &q, &k, &v, &w, NULL, &g, opt_t(&dq), opt_t(&dk),
                                            opt_t(&dv), opt_t(&dw), c.ctx);
    rc = cli_status(s, "mhla backward");
    if (!rc && cli_args_get(&a, "out")) {
        rc = cli_alloc(&c, cli_out_dtype(&q), 4, os, &o) || cli_device_out(&c, &o, &od) ? 2 : 0;
        if (!rc)
            rc = cli_status(causal ? la_mhla_causal_forward(&pc, &q, &k, &v, &w, &od, c.ctx)
                                      : la_mhla_forward(&p, &q, &k, &v, &w, &od, c.ctx), "mhla");
        if (!rc) rc = cli_save(&c, &a, "out", &o, &od);
    }
    if (!rc) rc = save_if(&c, &a, "grad-q", &hq, &dq);
    if (!rc) rc = save_if(&c, &a, "grad-k", &hk, &dk);
    if (!rc) rc = save_if(&c, &a, "grad-v", &hv, &dv);
    if (!rc) rc = save_if(&c, &a, "grad-mixing", &hw, &dw);
    return cli_end(&c, rc);
}

/* ---- focused ------------------------------------------------------------------ */
static const cli_opt focused_bwd_opts[] = {
    CLI_FOCUSED_INPUT_OPTS,
    GRAD_OPTS,
    {"grad-q", CLI_OPT_OUT, NULL, "output dL/dq .npy [B,N,H,D]"},
    {"grad-k", CLI_OPT_OUT, NULL, "output dL/dk .npy [B,N,H,D]"},
    {"grad-v", CLI_OPT_OUT, NULL, "output dL/dv .npy [B,N,H,Dv]"},
    {"grad-conv", CLI_OPT_OUT, NULL, "output dL/dconv .npy (the conv's shape)"},
    {"grad-conv-bias", CLI_OPT_OUT, NULL, "flatten: output dL/dconv_bias .npy [D]"},
    {"grad-softplus-param", CLI_OPT_OUT, NULL, "flatten: output dL/ds .npy [H*D]"},
    {"grad-focus", CLI_OPT_OUT, NULL, "blog: output dL/dfocus .npy [H] (needs --focus FILE)"},
};

static int bwd_focused(int argc, char **argv) {
    const int nopt = (int)(sizeof focused_bwd_opts / sizeof *focused_bwd_opts);
    cli_args a;
    int rc = cli_args_parse(focused_bwd_opts, nopt, "run focused --backward",
                           "Gradients of focused linear attention (flatten: q, k, v, conv, conv-bias,\n"
                           "softplus-param; blog: q, k, v, conv, focus).", argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const char *g7[7] = {"grad-q", "grad-k", "grad-v", "grad-conv", "grad-conv-bias",
                         "grad-softplus-param", "grad-focus"};
    if (need_some(&a, g7, 7)) return 2;
    la_focused_params p;
    la_focused_params_init(&p);
    const char *var = cli_args_get(&a, "variant");
    if (strcmp(var, "flatten") == 0) p.variant = LA_FOCUSED_FLATTEN;
    else if (strcmp(var, "blog") == 0) p.variant = LA_FOCUSED_BLOG;
    else return cli_fail("--variant '%s': expected flatten or blog", var);
    const int blog = p.variant == LA_FOCUSED_BLOG;
    if (blog && (cli_args_given(&a, "conv-bias") || cli_args_given(&a, "softplus-param") ||
                 cli_args_given(&a, "grad-conv-bias") || cli_args_given(&a, "grad-softplus-param")))
        return cli_fail("--conv-bias / --softplus-param and their gradients apply to --variant flatten only");
    if (!blog && (cli_args_given(&a, "focus") || cli_args_given(&a, "grad-focus")))
        return cli_fail("--focus / --grad-focus apply to --variant blog only");
    int mnd = 0;
    int64_t md[3];
    if (!cli_args_get(&a, "map")) return cli_fail("option --map HxW is required");
    if (cli_args_dims(&a, "map", &mnd, md)) return 2;
    if (mnd != 2) return cli_fail("--map '%s': expected HxW", cli_args_get(&a, "map"));
    p.map_h = md[0], p.map_w = md[1];
    if (cli_args_float(&a, "p", &p.p) || cli_args_float(&a, "eps", &p.eps)) return 2;
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, cv, cb, sp, fo, g, o, od, hq, dq, hk, dk, hv, dv, hc, dc, hb, db, hs, ds, hf, df;
    memset(&fo, 0, sizeof fo);
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v) ||
        cli_load(&c, &a, "conv", 0, 3, LA_F32, blog ? "[H*D,k,k]" : "[D,k,k]", &cv) ||
        cli_load(&c, &a, "conv-bias", 0, 1, LA_F32, "[D]", &cb) ||
        cli_load(&c, &a, "softplus-param", 0, 1, LA_F32, "[H*D]", &sp))
        return cli_end(&c, 2);
    if (blog) {
        double fv;
        const char *fs = cli_args_get(&a, "focus");
        if (parse_number(fs, &fv)) {
            if (cli_args_given(&a, "grad-focus"))
                return cli_end(&c, cli_fail("--grad-focus needs --focus FILE.npy [H] (a number is a constant)"));
            int64_t H = q.ne[2];
            if (cli_alloc(&c, LA_F32, 1, &H, &fo)) return cli_end(&c, 2);
            for (int64_t h = 0; h < H; h++) ((float *)fo.data)[h] = (float)fv;
        } else if (cli_load(&c, &a, "focus", 1, 1, LA_F32, "[H]", &fo)) {
            return cli_end(&c, 2);
        }
    }
    const int64_t os[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        cli_upload(&c, &cv) || cli_upload(&c, &cb) || cli_upload(&c, &sp) ||
        cli_upload(&c, &fo) || load_dout(&c, &a, 4, os, "[B,N,H,Dv]", &g) ||
        grad_out(&c, &a, "grad-q", &q, &hq, &dq) || grad_out(&c, &a, "grad-k", &k, &hk, &dk) ||
        grad_out(&c, &a, "grad-v", &v, &hv, &dv) || grad_out(&c, &a, "grad-conv", &cv, &hc, &dc) ||
        grad_out(&c, &a, "grad-conv-bias", &cb, &hb, &db) ||
        grad_out(&c, &a, "grad-softplus-param", &sp, &hs, &ds) ||
        grad_out(&c, &a, "grad-focus", &fo, &hf, &df))
        return cli_end(&c, 2);
    rc = cli_status(la_focused_backward(&p, &q, &k, &v, opt_t(&cv), opt_t(&cb), opt_t(&sp),
                                           opt_t(&fo), NULL, &g, opt_t(&dq), opt_t(&dk), opt_t(&dv),
                                           opt_t(&dc), opt_t(&db), opt_t(&ds), opt_t(&df), c.ctx),
                       "focused backward");
    if (!rc && cli_args_get(&a, "out")) {
        rc = cli_alloc(&c, cli_out_dtype(&q), 4, os, &o) || cli_device_out(&c, &o, &od) ? 2 : 0;
        if (!rc)
            rc = cli_status(la_focused_attention(&p, &q, &k, &v, opt_t(&cv), opt_t(&cb), opt_t(&sp),
                                                    opt_t(&fo), &od, c.ctx), "focused");
        if (!rc) rc = cli_save(&c, &a, "out", &o, &od);
    }
    const char *names[7] = {"grad-q", "grad-k", "grad-v", "grad-conv", "grad-conv-bias",
                            "grad-softplus-param", "grad-focus"};
    la_tensor *hs7[7] = {&hq, &hk, &hv, &hc, &hb, &hs, &hf}, *ds7[7] = {&dq, &dk, &dv, &dc, &db, &ds, &df};
    for (int i = 0; i < 7 && !rc; i++) rc = save_if(&c, &a, names[i], hs7[i], ds7[i]);
    return cli_end(&c, rc);
}

/* ---- sparse-attn -------------------------------------------------------------- */
static const cli_opt sparse_bwd_opts[] = {
    CLI_SPARSE_ATTN_INPUT_OPTS,
    GRAD_OPTS,
    {"grad-q", CLI_OPT_OUT, NULL, "output dL/dq .npy [T,Hq,Dqk]"},
    {"grad-kv", CLI_OPT_OUT, NULL, "output dL/dkv .npy (kv's shape)"},
};

static int bwd_sparse(int argc, char **argv) {
    const int nopt = (int)(sizeof sparse_bwd_opts / sizeof *sparse_bwd_opts);
    cli_args a;
    int rc = cli_args_parse(sparse_bwd_opts, nopt, "run sparse-attn --backward",
                           "Gradients of sparse attention (the forward runs first for out and lse).",
                           argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    const char *g2[2] = {"grad-q", "grad-kv"};
    if (need_some(&a, g2, 2)) return 2;
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    if (cli_args_int(&a, "dv", &p.dv) || (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &p.scale)))
        return 2;
    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, kv, ix, o, od, l, ld, g, hq, dq, hk, dk;
    if (cli_load(&c, &a, "q", 1, 3, LA_F32, "[T,Hq,Dqk]", &q) ||
        cli_load(&c, &a, "kv", 1, -1, LA_F32, "[L,Dqk] or [L,Hkv,Dqk]", &kv) ||
        cli_load(&c, &a, "idx", 1, 2, LA_I32, "[T,k]", &ix))
        return cli_end(&c, 2);
    const int64_t os[3] = {q.ne[0], q.ne[1], p.dv};
    if (cli_alloc(&c, cli_out_dtype(&q), 3, os, &o) || cli_alloc(&c, LA_F32, 2, os, &l) ||
        cli_upload(&c, &q) || cli_upload(&c, &kv) || cli_upload(&c, &ix) ||
        cli_device_out(&c, &o, &od) || cli_device_out(&c, &l, &ld) ||
        load_dout(&c, &a, 3, os, "[T,Hq,dv]", &g) || grad_out(&c, &a, "grad-q", &q, &hq, &dq) ||
        grad_out(&c, &a, "grad-kv", &kv, &hk, &dk))
        return cli_end(&c, 2);
    rc = cli_status(la_sparse_attention(&p, &q, &kv, &ix, &od, &ld, c.ctx), "sparse-attn");
    if (!rc)
        rc = cli_status(la_sparse_attention_backward(&p, &q, &kv, &ix, &od, &ld, &g, opt_t(&dq),
                                                        opt_t(&dk), c.ctx), "sparse-attn backward");
    if (!rc && cli_args_get(&a, "out")) rc = cli_save(&c, &a, "out", &o, &od);
    if (!rc) rc = save_if(&c, &a, "grad-q", &hq, &dq);
    if (!rc) rc = save_if(&c, &a, "grad-kv", &hk, &dk);
    return cli_end(&c, rc);
}

int cli_run_backward(int argc, char **argv) {
    int want = 0;
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--backward") == 0) want = 1;
    if (argc < 1 || !want) return -1;
    const char *op = argv[0];
    if (strcmp(op, "softmax") == 0) return bwd_softmax(argc, argv);
    if (strcmp(op, "linear") == 0) return bwd_linear(argc, argv);
    if (strcmp(op, "mhla") == 0) return bwd_mhla(argc, argv);
    if (strcmp(op, "focused") == 0) return bwd_focused(argc, argv);
    if (strcmp(op, "sparse-attn") == 0) return bwd_sparse(argc, argv);
    return cli_fail("run %s: --backward is not defined for this operator (softmax, linear, mhla, "
                       "focused, sparse-attn have gradients)", op);
}
