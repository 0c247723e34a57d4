/* `longattn run dsa|hisa|blocksparse|sparse-attn` (SPEC §6–§8), per CLI.md.
 * Inputs f32/f64 .npy (indices and ranges int32); outputs f32 / int32; bad
 * input exits 2 with a one-line message and leaves no output file. */
#include <stdlib.h>

#include "cli.h"
#include "op_opts.h"

/* Outputs the CLI is willing to allocate (a typo in --topk must not OOM the machine). */
#define CLI_MAX_OUT_BYTES ((int64_t)8 << 30)

static int check_out_size(const char *opt, int64_t a, int64_t b, int64_t c) {
    int64_t n;
    if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) ||
        __builtin_mul_overflow(n, (int64_t)4, &n) || n > CLI_MAX_OUT_BYTES)
        return cli_fail("--%s: output [%lld, %lld%s] would exceed the CLI's 8 GiB output limit", opt, (long long)a,
                           (long long)b, c > 1 ? ", ..." : "");
    return 0;
}

/* --start / --end hold key positions: 0..L (end is one past the last valid
 * key); a negative one gets its own message naming the file and the row. */
static int check_range_file(const cli_args *a, const char *opt, const la_tensor *t, int64_t T, int64_t L) {
    if (!t->data) return 0;
    if (t->ne[0] != T)
        return cli_fail("--%s %s: shape [%lld], expected [T] = [%lld] from --q", opt, cli_args_get(a, opt),
                        (long long)t->ne[0], (long long)T);
    const int32_t *x = (const int32_t *)t->data;
    for (int64_t i = 0; i < T; i++)
        if (x[i] < 0)
            return cli_fail("--%s %s: %s[%lld] = %d is negative (key positions are 0..L = 0..%lld%s)", opt,
                            cli_args_get(a, opt), opt, (long long)i, (int)x[i], (long long)L,
                            opt[0] == 'e' ? ", end one past the last valid key" : "");
    return 0;
}

/* ---- indexers ------------------------------------------------------------ */
enum { IX_DSA, IX_HISA, IX_BLOCKSPARSE };

#define IDX_COMMON_OPTS                                                                                    \
    {"q", CLI_OPT_IN, NULL, "indexer queries .npy [T,HI,dI]"},                                            \
    {"k", CLI_OPT_IN, NULL, "indexer keys .npy [L,dI] (one shared key per token)"},                       \
    {"w", CLI_OPT_IN, NULL, "head weights .npy [T,HI] (fold dI^-1/2 HI^-1/2 and scales in here)"},        \
    {"topk", CLI_OPT_VALUE, "2048", "indices returned per query (rows with fewer valid keys: -1 padding)"},  \
    {"start", CLI_OPT_IN, NULL, "int32 .npy [T]: first valid key of each query (default 0)"},             \
    {"end", CLI_OPT_IN, NULL, "int32 .npy [T]: one past the last valid key (default causal bottom-right: L-T+t+1)"}

static const cli_opt dsa_opts[] = {
    IDX_COMMON_OPTS,
    {"out", CLI_OPT_OUT, NULL, "output int32 .npy [T,topk]: key indices by descending score, ties to the lower index"},
    {"scores", CLI_OPT_OUT, NULL, "optional output .npy [T,L]: the fp32 scores (-inf outside each range)"},
};
static const cli_opt hisa_opts[] = {
    IDX_COMMON_OPTS,
    {"block", CLI_OPT_VALUE, "128", "block size B (blocks are absolute: token s in block s/B)"},
    {"block-topk", CLI_OPT_VALUE, "64", "blocks kept m (first and last block of each range always kept)"},
    {"out", CLI_OPT_OUT, NULL, "output int32 .npy [T,topk]: key indices by descending score, ties to the lower index"},
};
static const cli_opt blocksparse_opts[] = {
    IDX_COMMON_OPTS,
    {"block", CLI_OPT_VALUE, "128", "block size B; topk/B blocks are kept (topk >= B)"},
    {"block-topk", CLI_OPT_VALUE, "64", "accepted for symmetry with hisa, not used (block-sparse keeps topk/B blocks)"},
    {"out", CLI_OPT_OUT, NULL, "output int32 .npy [T,topk]: kept blocks in rank order (forced first, then by block "
                                "score), each block's valid tokens ascending, -1 padding"},
};

static int run_indexer(int kind, int argc, char **argv) {
    static const char *names[3] = {"run dsa", "run hisa", "run blocksparse"};
    static const char *usage[3] = {
        "DSA indexer, flat scan (SPEC §6): I(t,s) = sum_h w[t,h] ReLU(q[t,h].k[s]) over s in\n"
        "[start_t, end_t); returns the topk best keys of each query.",
        "HISA indexer (SPEC §7): block means of B keys, block scores, the first and last block of\n"
        "each range always kept, top m blocks, then the DSA score and top-k over the tokens of the\n"
        "kept blocks. Equals dsa when the m kept blocks cover the range.",
        "Block-sparse baseline (SPEC §7): the block scores and forcing of hisa, keeps topk/B blocks\n"
        "and returns all their valid tokens (no token-level scoring).",
    };
    const cli_opt *spec = kind == IX_DSA ? dsa_opts : (kind == IX_HISA ? hisa_opts : blocksparse_opts);
    const int nopt = kind == IX_DSA ? (int)(sizeof dsa_opts / sizeof *dsa_opts)
                                    : (int)(sizeof hisa_opts / sizeof *hisa_opts);
    cli_args a;
    int rc = cli_args_parse(spec, nopt, names[kind], usage[kind], argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output int32 .npy [T,topk]");
    la_index_params p;
    la_index_params_init(&p);
    if (cli_args_int(&a, "topk", &p.topk)) return 2;
    if (p.topk <= 0) return cli_fail("--topk: %lld, must be > 0", (long long)p.topk);
    if (kind != IX_DSA && (cli_args_int(&a, "block", &p.block) || cli_args_int(&a, "block-topk", &p.block_topk)))
        return 2;

    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, k, w, st, en, dst, den, idx, didx, sc, dsc;
    if (cli_load(&c, &a, "q", 1, 3, LA_F32, "[T,HI,dI]", &q) ||
        cli_load(&c, &a, "k", 1, 2, LA_F32, "[L,dI]", &k) ||
        cli_load(&c, &a, "w", 1, 2, LA_F32, "[T,HI]", &w) ||
        cli_load(&c, &a, "start", 0, 1, LA_I32, "[T]", &st) ||
        cli_load(&c, &a, "end", 0, 1, LA_I32, "[T]", &en))
        return cli_end(&c, 2);
    const int64_t T = q.ne[0], L = k.ne[0];
    if (check_range_file(&a, "start", &st, T, L) || check_range_file(&a, "end", &en, T, L))
        return cli_end(&c, 2);
    const int want_scores = kind == IX_DSA && cli_args_get(&a, "scores") != NULL;
    if (check_out_size("out", T, p.topk, 1) || (want_scores && check_out_size("scores", T, L, 1)))
        return cli_end(&c, 2);
    const int64_t ishape[2] = {T, p.topk}, sshape[2] = {T, L};
    if (cli_alloc(&c, LA_I32, 2, ishape, &idx) || (want_scores && cli_alloc(&c, LA_F32, 2, sshape, &sc)))
        return cli_end(&c, 2);
    if (cli_upload(&c, &q) || cli_upload(&c, &k) || cli_upload(&c, &w) || cli_upload(&c, &st) ||
        cli_upload(&c, &en) || cli_device_out(&c, &idx, &didx) ||
        (want_scores && cli_device_out(&c, &sc, &dsc)))
        return cli_end(&c, 2);
    dst = st;
    den = en;
    la_status s;
    if (kind == IX_DSA)
        s = la_dsa_indexer(&p, &q, &k, &w, dst.data ? &dst : NULL, den.data ? &den : NULL, &didx,
                           want_scores ? &dsc : NULL, c.ctx);
    else if (kind == IX_HISA)
        s = la_hisa_indexer(&p, &q, &k, &w, dst.data ? &dst : NULL, den.data ? &den : NULL, &didx, c.ctx);
    else
        s = la_blocksparse_indexer(&p, &q, &k, &w, dst.data ? &dst : NULL, den.data ? &den : NULL, &didx, c.ctx);
    rc = cli_status(s, names[kind] + 4);
    if (rc == 0) rc = cli_save(&c, &a, "out", &idx, &didx);
    if (rc == 0 && want_scores) rc = cli_save(&c, &a, "scores", &sc, &dsc);
    return cli_end(&c, rc);
}

int cli_run_dsa(int argc, char **argv) { return run_indexer(IX_DSA, argc, argv); }
int cli_run_hisa(int argc, char **argv) { return run_indexer(IX_HISA, argc, argv); }
int cli_run_blocksparse(int argc, char **argv) { return run_indexer(IX_BLOCKSPARSE, argc, argv); }

/* ---- sparse attention ------------------------------------------------------ */
static const cli_opt sparse_attn_opts[] = {
    CLI_SPARSE_ATTN_INPUT_OPTS,
    {"out", CLI_OPT_OUT, NULL, "output .npy [T,Hq,dv] (a row with no valid index gives 0)"},
    {"lse", CLI_OPT_OUT, NULL, "optional output .npy [T,Hq]: log-sum-exp (natural log; -inf for no valid index)"},
};

int cli_run_sparse_attn(int argc, char **argv) {
    const int nopt = (int)(sizeof sparse_attn_opts / sizeof *sparse_attn_opts);
    const char *usage =
        "Sparse attention over selected keys, MQA mode of MLA (SPEC §8):\n"
        "  o[t,h] = sum_{s in idx[t]} softmax_s(scale q[t,h].kv[s]) kv[s][:dv]";
    cli_args a;
    int rc = cli_args_parse(sparse_attn_opts, nopt, "run sparse-attn", usage, argc, argv, &a);
    if (rc) return rc == 1 ? 0 : 2;
    if (!cli_args_get(&a, "out")) return cli_fail("option --out is required: output .npy [T,Hq,dv]");
    la_sparse_attn_params p;
    la_sparse_attn_params_init(&p);
    if (cli_args_int(&a, "dv", &p.dv)) return 2;
    if (cli_args_given(&a, "scale") && cli_args_float(&a, "scale", &p.scale)) return 2;
    if (p.dv <= 0) return cli_fail("--dv: %lld, must be > 0", (long long)p.dv);

    cli_state c;
    if (cli_begin(&c, &a)) return cli_end(&c, 2);
    la_tensor q, kv, idx, out, dout, lse, dlse;
    if (cli_load(&c, &a, "q", 1, 3, LA_F32, "[T,Hq,Dqk]", &q) ||
        cli_load(&c, &a, "kv", 1, -1, LA_F32, "[L,Dqk] or [L,Hkv,Dqk]", &kv) ||
        cli_load(&c, &a, "idx", 1, 2, LA_I32, "[T,k]", &idx))
        return cli_end(&c, 2);
    if (kv.ndim != 2 && kv.ndim != 3)
        return cli_end(&c, cli_fail("--kv %s: rank %d, expected [L,Dqk] or [L,Hkv,Dqk]", cli_args_get(&a, "kv"),
                                          kv.ndim));
    if (p.dv > q.ne[2])
        return cli_end(&c, cli_fail("--dv: %lld exceeds Dqk = %lld of --q (values are the first dv columns of kv)",
                                          (long long)p.dv, (long long)q.ne[2]));
    const int want_lse = cli_args_get(&a, "lse") != NULL;
    const int64_t oshape[3] = {q.ne[0], q.ne[1], p.dv};
    if (check_out_size("out", q.ne[0], q.ne[1], p.dv) || cli_alloc(&c, cli_out_dtype(&q), 3, oshape, &out) ||
        (want_lse && cli_alloc(&c, LA_F32, 2, oshape, &lse)))
        return cli_end(&c, 2);
    if (cli_upload(&c, &q) || cli_upload(&c, &kv) || cli_upload(&c, &idx) ||
        cli_device_out(&c, &out, &dout) || (want_lse && cli_device_out(&c, &lse, &dlse)))
        return cli_end(&c, 2);
    la_status s = la_sparse_attention(&p, &q, &kv, &idx, &dout, want_lse ? &dlse : NULL, c.ctx);
    rc = cli_status(s, "sparse-attn");
    if (rc == 0) rc = cli_save(&c, &a, "out", &out, &dout);
    if (rc == 0 && want_lse) rc = cli_save(&c, &a, "lse", &lse, &dlse);
    return cli_end(&c, rc);
}
