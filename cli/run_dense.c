/* `longattn run softmax` (SPEC §1) and `longattn run linear` (SPEC §3), per
 * CLI.md. Inputs f32/f64 .npy [B,N,H,D]; outputs f32; bad input exits 2 with
 * a one-line message and leaves no output file. */
#include <stdlib.h>

#include "cli.h"
#include "op_opts.h"

/* ------------------------------------------------------------------------ */
static const cli_opt softmax_opts[] = {
    CLI_SOFTMAX_INPUT_OPTS,
    {"out", CLI_OPT_OUT, NULL, "output .npy [B,Nq,H,Dv] (required)"},
    {"lse", CLI_OPT_OUT, NULL, "optional output .npy [B,Nq,H]: row log-sum-exp (natural log; -inf for a row that sees no key)"},
};

int cli_run_softmax(int argc, char **argv) {
    const int nopt = (int)(sizeof softmax_opts / sizeof softmax_opts[0]);
    const char *usage =
        "Softmax attention (SPEC §1): O = softmax(scale * Q K^T + mask) V, computed with an\n"
        "online softmax over key tiles (memory O(N) per head). A query row that sees no key\n"
        "(--causal with Nq > Nk) gives o = 0 and lse = -inf.";
    cli_args a;
    int rc = cli_args_parse(softmax_opts, nopt, "run softmax", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output .npy [B,Nq,H,Dv]");
    la_softmax_params p;
    la_softmax_params_init(&p);
    p.causal = cli_args_flag(&a, "causal");
    if (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &p.scale)) return 2;

    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, out, dout, lse, dlse;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,Nq,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,Nk,Hk,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,Nk,Hk,Dv]", &v))
        return cli_end(&c, 2);
    const int want_lse = cli_args_get(&a, "lse") != NULL;
    const int64_t oshape[4] = {q.ne[0], q.ne[1], q.ne[2], v.ne[3]};
    if (cli_alloc(&c, cli_out_dtype(&q), 4, oshape, &out) ||
        (want_lse && cli_alloc(&c, LA_F32, 3, oshape, &lse)))
        return cli_end(&c, 2);
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
        cli_device_out(&c, &out, &dout) || (want_lse && cli_device_out(&c, &lse, &dlse)))
        return cli_end(&c, 2);
    la_status s = la_softmax_attention(&p, &q, &k, &v, &dout, want_lse ? &dlse : NULL, c.ctx);
    rc = cli_status(s, "softmax");
    if (rc == 0) rc = cli_save(&c, &a, "out", &out, &dout);
    if (rc == 0 && want_lse) rc = cli_save(&c, &a, "lse", &lse, &dlse);
    return cli_end(&c, rc);
}

/* ------------------------------------------------------------------------ */
static const cli_opt linear_opts[] = {
    CLI_LINEAR_INPUT_OPTS,
    {"state-out", CLI_OPT_VALUE, NULL, "--causal: write the final state to PREFIX.S.npy and PREFIX.z.npy (may equal --state-in)"},
    {"out", CLI_OPT_OUT, NULL, "output .npy [B,N,H,Dv] (required)"},
};

/* "PREFIX" + suffix, or NULL if it does not fit. */
static char *state_path(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *s = (char *)malloc(n);
    if (s) snprintf(s, n, "%s%s", prefix, suffix);
    return s;
}

/* Load a state file `path` (given through option --state-in) of rank ndim
 * with extents want[] into t (host, f32, contiguous; freed by cli_end). */
static int load_state(cli_state *c, const char *path, int ndim, const int64_t *want,
                      const char *doc, la_tensor *t) {
    if (c->narrays >= CLI_MAX_ITEMS) return cli_fail("too many inputs (internal)");
    cli_array *arr = &c->arrays[c->narrays];
    if (cli_npy_read("state-in", path, 1, arr)) return 2;
    c->narrays++;
    if (arr->dtype == LA_I32)
        return cli_fail("--state-in %s: dtype int32, expected float32 or float64", path);
    int ok = arr->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = arr->shape[i] == want[i];
    if (!ok) {
        char got[160], exp[96];
        int o = 0, e = 0;
        for (int i = 0; i < arr->ndim && o < 120; i++)
            o += snprintf(got + o, sizeof got - (size_t)o, "%s%lld", i ? ", " : "", (long long)arr->shape[i]);
        if (arr->ndim == 0) snprintf(got, sizeof got, "scalar");
        for (int i = 0; i < ndim; i++)
            e += snprintf(exp + e, sizeof exp - (size_t)e, "%s%lld", i ? ", " : "", (long long)want[i]);
        return cli_fail("--state-in %s: shape (%s), expected %s = (%s) from --q/--v", path, got, doc, exp);
    }
    if (la_tensor_init(t, arr->data, LA_F32, LA_DEVICE_CPU, ndim, want) != LA_OK)
        return cli_fail("%s", la_last_error());
    return 0;
}

int cli_run_linear(int argc, char **argv) {
    const int nopt = (int)(sizeof linear_opts / sizeof linear_opts[0]);
    const char *usage =
        "Linear attention (SPEC §3), q~ = scale*phi(q), k~ = phi(k):\n"
        "  S = sum_j k~_j v_j^T, z = sum_j k~_j;  o_t = q~_t^T S / (q~_t . z + eps)  (--no-normalize: q~_t^T S)\n"
        "--causal: sums over j <= t, computed chunkwise (equal to the token recurrence); the\n"
        "recurrent state (S, z) can be read and written for prefill-then-continue.";
    cli_args a;
    int rc = cli_args_parse(linear_opts, nopt, "run linear", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output .npy [B,N,H,Dv]");
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
    const char *sin = cli_args_get(&a, "state-in"), *sout = cli_args_get(&a, "state-out");
    if ((sin || sout) && !p.causal)
        return cli_fail("--%s needs --causal (the recurrent state is that of the causal form)",
                           sin ? "state-in" : "state-out");
    if ((sin && !*sin) || (sout && !*sout)) return cli_fail("--state-in/--state-out: empty PREFIX");

    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, v, out, dout, Si, zi, So, zo, dSo, dzo;
    if (cli_load(&c, &a, "q", 1, 4, LA_F32, "[B,N,H,D]", &q) ||
        cli_load(&c, &a, "k", 1, 4, LA_F32, "[B,N,H,D]", &k) ||
        cli_load(&c, &a, "v", 1, 4, LA_F32, "[B,N,H,Dv]", &v))
        return cli_end(&c, 2);
    const int64_t B = q.ne[0], H = q.ne[2], D = q.ne[3], Dv = v.ne[3];
    const int64_t wS[4] = {B, H, D, Dv}, wz[3] = {B, H, D};
    char *pSi = NULL, *pzi = NULL, *pSo = NULL, *pzo = NULL;
    rc = 0;
    if (sin) {
        pSi = state_path(sin, ".S.npy");
        pzi = state_path(sin, ".z.npy");
        if (!pSi || !pzi) rc = cli_fail("out of memory");
        if (!rc && (cli_note_input(&c, "state-in", pSi) || cli_note_input(&c, "state-in", pzi))) rc = 2;
    }
    if (!rc && sout) {
        /* the state outputs are planned (checked, temporaries made) before
         * computing, like every output; they may replace --state-in's files */
        pSo = state_path(sout, ".S.npy");
        pzo = state_path(sout, ".z.npy");
        if (!pSo || !pzo) rc = cli_fail("out of memory");
        else if (cli_plan_output(&c, "state-out", pSo, "state-in") ||
                 cli_plan_output(&c, "state-out", pzo, "state-in"))
            rc = 2;
    }
    if (!rc && sin) {
        if (!rc) rc = load_state(&c, pSi, 4, wS, "[B,H,D,Dv]", &Si);
        if (!rc) rc = load_state(&c, pzi, 3, wz, "[B,H,D]", &zi);
    }
    const int64_t oshape[4] = {B, q.ne[1], H, Dv};
    if (!rc) rc = cli_alloc(&c, cli_out_dtype(&q), 4, oshape, &out);
    if (!rc && sout && (cli_alloc(&c, LA_F32, 4, wS, &So) || cli_alloc(&c, LA_F32, 3, wz, &zo)))
        rc = 2;
    if (!rc && (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &v) ||
                (sin && (cli_upload(&c, &Si) || cli_upload(&c, &zi))) ||
                cli_device_out(&c, &out, &dout) ||
                (sout && (cli_device_out(&c, &So, &dSo) || cli_device_out(&c, &zo, &dzo)))))
        rc = 2;
    if (!rc) {
        la_status s = la_linear_attention(&p, &q, &k, &v, &dout, sin ? &Si : NULL, sin ? &zi : NULL,
                                          sout ? &dSo : NULL, sout ? &dzo : NULL, c.ctx);
        rc = cli_status(s, "linear");
    }
    if (!rc) rc = cli_save(&c, &a, "out", &out, &dout);
    if (!rc && sout && (cli_save_path(&c, pSo, &So, &dSo) || cli_save_path(&c, pzo, &zo, &dzo))) rc = 2;
    free(pSi); free(pzi); free(pSo); free(pzo);
    return cli_end(&c, rc);
}
