/* longattn — command-line entry point.
 *   longattn run OP [options]     one operator on .npy files (CLI.md)
 *   longattn demo                 the guided tour (synthetic inputs)
 *   longattn bench                time / throughput table
 *   longattn collapse             MHLA global-context-collapse study
 *   longattn eval-index           HISA vs DSA selection study
 *   longattn version              build information */
#include <stdlib.h>

#include "cli.h"

/* Subcommands are linked from their own files; the weak declarations keep
 * the tool linkable while a family is absent from a build. */
#pragma weak la_run_softmax
#pragma weak la_run_linear
#pragma weak la_run_mhla
#pragma weak la_run_mhla_init
#pragma weak la_run_focused
#pragma weak la_run_attn_map
#pragma weak la_run_dsa
#pragma weak la_run_hisa
#pragma weak la_run_blocksparse
#pragma weak la_run_sparse_attn
#pragma weak la_cmd_collapse
#pragma weak la_cmd_eval_index

int la_cmd_demo(int argc, char **argv);
int la_cmd_bench(int argc, char **argv);

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} la_op_entry;

static const la_op_entry ops[] = {
    {"softmax", la_run_softmax, "softmax attention (SPEC §1), online softmax, causal, lse"},
    {"linear", la_run_linear, "linear attention (SPEC §3), feature maps, causal chunkwise, state"},
    {"mhla", la_run_mhla, "multi-head linear attention over token blocks (SPEC §5)"},
    {"mhla-init", la_run_mhla_init, "MHLA mixing-matrix initializers (SPEC §5.3)"},
    {"focused", la_run_focused, "focused linear attention, flatten or blog variant (SPEC §4)"},
    {"dsa", la_run_dsa, "flat DSA lightning indexer + top-k (SPEC §6)"},
    {"hisa", la_run_hisa, "hierarchical HISA indexer (SPEC §7)"},
    {"blocksparse", la_run_blocksparse, "block-sparse baseline indexer (SPEC §7)"},
    {"sparse-attn", la_run_sparse_attn, "sparse MLA attention over selected keys (SPEC §8)"},
    {"attn-map", la_run_attn_map, "explicit attention map, rank and entropy (SPEC §9)"},
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

static void usage(FILE *f) {
    fprintf(f,
            "longattn %s — attention over long sequences\n\n"
            "usage: longattn COMMAND [options]\n\n"
            "commands:\n"
            "  run OP        compute one operator on .npy files (longattn run --help lists OPs)\n"
            "  demo          a short guided tour on synthetic inputs (checks against float64)\n"
            "  bench         time and throughput per operator across sequence lengths\n"
            "  collapse      MHLA paper's global-context-collapse study (rank, entropy)\n"
            "  eval-index    HISA vs DSA vs block-sparse selection study\n"
            "  version       build information\n\n"
            "Every command takes --help.\n",
            la_build_info());
}

static int cmd_run(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        FILE *f = argc < 2 ? stderr : stdout;
        fprintf(f, "usage: longattn run OP [options]   (longattn run OP --help for OP's options)\n\nOPs:\n");
        for (int i = 0; i < NOPS; i++)
            fprintf(f, "  %-12s %s%s\n", ops[i].name, ops[i].help, ops[i].fn ? "" : " [not in this build]");
        return argc < 2 ? 2 : 0;
    }
    const int brc = la_run_backward(argc - 1, argv + 1); /* OP --backward (cli/run_backward.c) */
    if (brc >= 0) return brc;
    for (int i = 0; i < NOPS; i++) {
        if (strcmp(argv[1], ops[i].name) == 0) {
            if (!ops[i].fn) return la_cli_fail("run %s: not available in this build", ops[i].name);
            return ops[i].fn(argc - 1, argv + 1);
        }
    }
    return la_cli_fail("run: unknown operator '%s' (longattn run --help lists them)", argv[1]);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("longattn %s\n", la_build_info());
        return 0;
    }
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 1, argv + 1);
    if (strcmp(cmd, "demo") == 0) return la_cmd_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return la_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "collapse") == 0) {
        if (!la_cmd_collapse) return la_cli_fail("collapse: not available in this build");
        return la_cmd_collapse(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "eval-index") == 0) {
        if (!la_cmd_eval_index) return la_cli_fail("eval-index: not available in this build");
        return la_cmd_eval_index(argc - 1, argv + 1);
    }
    usage(stderr);
    return la_cli_fail("unknown command '%s'", cmd);
}
