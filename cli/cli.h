/* Shared plumbing for `longattn` subcommands: option parsing, .npy inputs,
 * atomic outputs, device staging and error reporting (exit 2 on bad input,
 * no partial output files). */
#ifndef LA_CLI_H
#define LA_CLI_H

#include <stdio.h>

#include "../src/core/internal.h"
#include "../src/core/npy.h"

#define LA_CLI_MAX_OPTS 48
#define LA_CLI_MAX_ITEMS 32

enum { LA_OPT_VALUE = 0, LA_OPT_FLAG = 1 };

/* One option of a subcommand. For a flag with a negation (e.g. --normalize /
 * --no-normalize) give def "on" or "off"; "--no-NAME" is accepted for every
 * flag. Options common to all ops (--device, --threads, --help) are added by
 * la_args_parse automatically. */
typedef struct la_opt {
    const char *name;   /* without leading dashes: "q", "causal" */
    int kind;           /* LA_OPT_VALUE or LA_OPT_FLAG */
    const char *def;    /* default as text, NULL = none / required */
    const char *help;
} la_opt;

typedef struct la_args {
    const la_opt *spec;
    int nspec;
    const char *value[LA_CLI_MAX_OPTS]; /* NULL = not given */
    int given[LA_CLI_MAX_OPTS];
    const char *device;                 /* "cpu" (default) or "cuda" */
    int threads;                        /* 0 = all cores */
} la_args;

/* Parse argv[0..argc) (argv[0] is the subcommand name, e.g. "softmax").
 * Returns 0 on success, 1 when --help was printed (exit 0), 2 on error (a
 * message was printed to stderr). `usage` is a one-paragraph description. */
int la_args_parse(const la_opt *spec, int nspec, const char *cmd, const char *usage, int argc,
                  char **argv, la_args *a);
void la_args_print_help(const la_opt *spec, int nspec, const char *cmd, const char *usage,
                        FILE *f);
/* Value given or default (NULL if neither). */
const char *la_args_get(const la_args *a, const char *name);
int la_args_given(const la_args *a, const char *name);
/* Flag state: 1 if --name (or default "on"), 0 if --no-name (or default off). */
int la_args_flag(const la_args *a, const char *name);
/* Typed getters: 0 ok, 2 error (message printed naming the option). */
int la_args_float(const la_args *a, const char *name, float *out);
int la_args_int(const la_args *a, const char *name, int64_t *out);
/* Parse "4x4", "3x5x10" or "64" into dims; returns 0/2. */
int la_args_dims(const la_args *a, const char *name, int *ndim, int64_t dims[3]);

/* Print "longattn: error: ..." to stderr; returns 2. */
int la_cli_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* One invocation's resources. */
typedef struct la_cli {
    la_context *ctx;
    la_device device;
    int narrays;
    la_npy_array arrays[LA_CLI_MAX_ITEMS];
    int nbufs;
    void *bufs[LA_CLI_MAX_ITEMS];        /* host buffers we malloc'd */
    int ndev;
    void *devbufs[LA_CLI_MAX_ITEMS];     /* device buffers */
    int nouts;
    char *out_final[LA_CLI_MAX_ITEMS];
    char *out_tmp[LA_CLI_MAX_ITEMS];
} la_cli;

/* Create the context (threads) and pick the device. 0/2. */
int la_cli_begin(la_cli *c, const la_args *a);
/* Load the .npy named by option `opt` (if not given: required -> error 2,
 * else t->data = NULL and returns 0). ndim: expected rank (-1 any).
 * want: LA_F32 (f32/f64 accepted, converted) or LA_I32. The tensor is on
 * the host, contiguous. `shape_doc` (e.g. "[B,N,H,D]") goes in messages. */
int la_cli_load(la_cli *c, const la_args *a, const char *opt, int required, int ndim,
                la_dtype want, const char *shape_doc, la_tensor *t);
/* Host output buffer (contiguous), filled with NaN (f32) / -7 (i32) so that
 * unwritten elements are visible. */
int la_cli_alloc(la_cli *c, la_dtype dt, int ndim, const int64_t *shape, la_tensor *t);
/* With --device cuda: copy a host tensor to a new device buffer and make t
 * point to it (contiguous). No-op on cpu. 0/2/1. */
int la_cli_upload(la_cli *c, la_tensor *t);
/* Make a device twin of host output `host` in `dev` (cuda) or copy the view
 * (cpu). */
int la_cli_device_out(la_cli *c, const la_tensor *host, la_tensor *dev);
/* After the op: bring `dev` back into `host` (cuda) and write it to the
 * temporary name of option `opt`'s path. Skipped if the option is absent. */
int la_cli_save(la_cli *c, const la_args *a, const char *opt, const la_tensor *host,
                const la_tensor *dev);
/* Save to an explicit path (e.g. PREFIX.S.npy). */
int la_cli_save_path(la_cli *c, const char *path, const la_tensor *host, const la_tensor *dev);
/* Report a library status: prints la_last_error(); returns 2 for bad input
 * (ARG/SHAPE/DTYPE/OVERFLOW/FORMAT/IO) or 1 otherwise; 0 for LA_OK. */
int la_cli_status(la_status s, const char *what);
/* Finish: on rc == 0 rename every temporary output to its final name (if a
 * rename fails, remove all and return 1); else remove them. Frees all. */
int la_cli_end(la_cli *c, int rc);

/* ---- subcommands ------------------------------------------------------- */
/* `longattn run OP ...`: argv[0] is OP. Each returns the exit status. */
int la_run_softmax(int argc, char **argv);
int la_run_linear(int argc, char **argv);
int la_run_mhla(int argc, char **argv);
int la_run_mhla_init(int argc, char **argv);
int la_run_focused(int argc, char **argv);
int la_run_attn_map(int argc, char **argv);
int la_run_dsa(int argc, char **argv);
int la_run_hisa(int argc, char **argv);
int la_run_blocksparse(int argc, char **argv);
int la_run_sparse_attn(int argc, char **argv);
/* `run OP ... --backward`: the gradients of OP; -1 when argv has no --backward. */
int la_run_backward(int argc, char **argv);

/* Demo sections (cli/demo_*.c): print to f; return number of failed checks. */
int la_demo_dense(FILE *f, int quick);
int la_demo_mhla(FILE *f, int quick);
int la_demo_focused(FILE *f, int quick);
int la_demo_sparse(FILE *f, int quick);

/* Benchmark families (cli/bench_*.c). */
typedef struct la_bench_cfg {
    int json;            /* print JSON lines instead of a table */
    int threads;
    int64_t nmin, nmax;  /* sequence length range (powers of two) */
    int64_t D;
    int64_t H;
    double min_time;     /* seconds per measurement */
    const char *ops;     /* comma list filter or NULL = all */
    FILE *out;
} la_bench_cfg;
int la_bench_dense(const la_bench_cfg *cfg);
int la_bench_mhla(const la_bench_cfg *cfg);
int la_bench_sparse(const la_bench_cfg *cfg);

/* Progress bar on stderr for runs longer than a second (no-op when stderr
 * is not a terminal unless force). */
typedef struct la_progress {
    const char *label;
    int64_t total, done;
    double t0, last;
    int shown;
} la_progress;
void la_progress_start(la_progress *p, const char *label, int64_t total);
void la_progress_step(la_progress *p, int64_t inc);
void la_progress_end(la_progress *p);
double la_now(void);
/* splitmix64 random numbers (cli/bench_util.c): demos, benches and studies
 * are deterministic for a given seed, with no global generator state. */
typedef struct la_rng64 {
    uint64_t s;
} la_rng64;
uint64_t la_rng64_next(la_rng64 *r);
double la_rng64_uniform(la_rng64 *r); /* [0, 1), 53 bits */
double la_rng64_normal(la_rng64 *r);  /* N(0,1), Box-Muller from two uniforms */

/* Bench helpers (cli/bench_util.c). */
double la_bench_median(double *x, int n);          /* sorts x */
void la_bench_fill(float *x, size_t n, uint64_t seed); /* uniform [-1,1) */
/* Median seconds of call(arg): one warm-up call (returned alone if it took
 * over 2 s), then at least 3 timed calls lasting min_time. */
double la_bench_time_median(la_status (*call)(void *), void *arg, double min_time, int *reps,
                            la_status *st);
/* GFLOP/s of `threads` concurrent single-threaded 1024^3 la_sgemm calls. */
double la_bench_sgemm_peak(int threads, double min_time);
/* Bench helper: whether op name passes the cfg->ops filter. */
int la_bench_selected(const la_bench_cfg *cfg, const char *op);

/* Top-level commands implemented elsewhere */
int la_cmd_collapse(int argc, char **argv);
int la_cmd_eval_index(int argc, char **argv);

#endif
