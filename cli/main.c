/* longattn — command-line entry point.
 *   longattn run OP [options]     one operator on .npy files (CLI.md)
 *   longattn demo                 the guided tour (synthetic inputs)
 *   longattn bench                time / throughput table
 *   longattn collapse             MHLA global-context-collapse study
 *   longattn eval-index           HISA vs DSA selection study
 *   longattn version              build information */
#include <stdlib.h>
#include <unistd.h>

#include "cli.h"

#ifdef LA_BLAS_OPENBLAS
/* OpenBLAS (pthreads) starts its worker threads when it is loaded; after
 * start-up and after every multi-threaded call they spin (sched_yield) for
 * a while before sleeping, which on a small machine takes a core from the
 * CLI's file I/O. The CLI only ever runs single-threaded BLAS calls (the
 * library's tiles run inside its own OpenMP regions), so main() sets
 * OpenBLAS to one thread and stops its server threads: program state,
 * chosen by the program. blas_thread_shutdown_ is OpenBLAS's own (exported,
 * used at fork); weak, so another BLAS build still links. */
void openblas_set_num_threads(int);
int blas_thread_shutdown_(void) __attribute__((weak));
static void cli_quiet_blas(void) {
    openblas_set_num_threads(1);
    if (blas_thread_shutdown_) blas_thread_shutdown_();
}
#else
static void cli_quiet_blas(void) {}
#endif

/* Subcommands are linked from their own files; the weak declarations keep
 * the tool linkable while a family is absent from a build. */
#pragma weak cli_run_softmax
#pragma weak cli_run_linear
#pragma weak cli_run_mhla
#pragma weak cli_run_mhla_init
#pragma weak cli_run_focused
#pragma weak cli_run_attn_map
#pragma weak cli_run_dsa
#pragma weak cli_run_hisa
#pragma weak cli_run_blocksparse
#pragma weak cli_run_sparse_attn
#pragma weak cli_cmd_collapse
#pragma weak cli_cmd_eval_index
#pragma weak cli_cmd_serve_sim
int cli_cmd_serve_sim(int argc, char **argv);

int cli_cmd_demo(int argc, char **argv);
int cli_cmd_bench(int argc, char **argv);

typedef struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} cli_op_entry;

static const cli_op_entry ops[] = {
    {"softmax", cli_run_softmax, "softmax attention (SPEC §1), online softmax, causal, lse"},
    {"linear", cli_run_linear, "linear attention (SPEC §3), feature maps, causal chunkwise, state"},
    {"mhla", cli_run_mhla, "multi-head linear attention over token blocks (SPEC §5)"},
    {"mhla-init", cli_run_mhla_init, "MHLA mixing-matrix initializers (SPEC §5.3)"},
    {"focused", cli_run_focused, "focused linear attention, flatten or blog variant (SPEC §4)"},
    {"dsa", cli_run_dsa, "flat DSA lightning indexer + top-k (SPEC §6)"},
    {"hisa", cli_run_hisa, "hierarchical HISA indexer (SPEC §7)"},
    {"blocksparse", cli_run_blocksparse, "block-sparse baseline indexer (SPEC §7)"},
    {"sparse-attn", cli_run_sparse_attn, "sparse MLA attention over selected keys (SPEC §8)"},
    {"attn-map", cli_run_attn_map, "explicit attention map, rank and entropy (SPEC §9)"},
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
    const int brc = cli_run_backward(argc - 1, argv + 1); /* OP --backward (cli/run_backward.c) */
    if (brc >= 0) return brc;
    for (int i = 0; i < NOPS; i++) {
        if (strcmp(argv[1], ops[i].name) == 0) {
            if (!ops[i].fn) return cli_fail("run %s: not available in this build", ops[i].name);
            return ops[i].fn(argc - 1, argv + 1);
        }
    }
    return cli_fail("run: unknown operator '%s' (longattn run --help lists them)", argv[1]);
}

int main(int argc, char **argv) {
    /* Under an address-space limit (ulimit -v) too tight for the BLAS
     * buffers, OpenBLAS retries its buffer mmap forever (its threads never
     * finish, nor would joining them at exit): fail at once instead, with
     * _exit so that no library destructor waits for them. */
    size_t room = 0;
    if (cli_as_headroom(&room) && room < cli_blas_reserve()) {
        fprintf(stderr, "longattn: error: the address-space limit (ulimit -v) leaves %.0f MiB; "
                "longattn needs at least %.0f MiB (OpenBLAS maps a %d MiB buffer per thread and core): "
                "raise the limit\n", (double)room / 1048576.0, (double)cli_blas_reserve() / 1048576.0,
                CLI_BLAS_BUFFER_MIB);
        fflush(stderr);
        _exit(2);
    }
    cli_quiet_blas();
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
    if (strcmp(cmd, "demo") == 0) return cli_cmd_demo(argc - 1, argv + 1);
    if (strcmp(cmd, "bench") == 0) return cli_cmd_bench(argc - 1, argv + 1);
    if (strcmp(cmd, "collapse") == 0) {
        if (!cli_cmd_collapse) return cli_fail("collapse: not available in this build");
        return cli_cmd_collapse(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "eval-index") == 0) {
        if (!cli_cmd_eval_index) return cli_fail("eval-index: not available in this build");
        return cli_cmd_eval_index(argc - 1, argv + 1);
    }
    if (strcmp(cmd, "serve-sim") == 0 && cli_cmd_serve_sim) return cli_cmd_serve_sim(argc - 1, argv + 1);
    usage(stderr);
    return cli_fail("unknown command '%s'", cmd);
}
