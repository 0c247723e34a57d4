/* Shared plumbing for `longattn` subcommands: option parsing, .npy inputs,
 * atomic outputs, device staging and error reporting (exit 2 on bad input,
 * no partial output files). */
#ifndef CLI_H
#define CLI_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "longattn.h"

#define CLI_MAX_OPTS 48
#define CLI_MAX_ITEMS 32

/* Option kinds. CLI_OPT_IN / CLI_OPT_OUT are values that name an input /
 * output file: cli_begin records the inputs' identities and checks every
 * output before anything is computed (cli_plan_output). */
enum { CLI_OPT_VALUE = 0, CLI_OPT_FLAG = 1, CLI_OPT_IN = 2, CLI_OPT_OUT = 3 };

/* One option of a subcommand. For a flag with a negation (e.g. --normalize /
 * --no-normalize) give def "on" or "off"; "--no-NAME" is accepted for every
 * flag. Options common to all ops (--device, --threads, --help) are added by
 * cli_args_parse automatically. */
typedef struct cli_opt {
    const char *name;   /* without leading dashes: "q", "causal" */
    int kind;           /* CLI_OPT_VALUE or CLI_OPT_FLAG */
    const char *def;    /* default as text, NULL = none / required */
    const char *help;
} cli_opt;

typedef struct cli_args {
    const cli_opt *spec;
    int nspec;
    const char *value[CLI_MAX_OPTS]; /* NULL = not given */
    int given[CLI_MAX_OPTS];
    const char *device;                 /* "cpu" (default) or "cuda" */
    int threads;                        /* 0 = all cores */
    int force;                          /* --force: an output may replace an input */
    int device_given, threads_given;
} cli_args;

/* Parse argv[0..argc) (argv[0] is the subcommand name, e.g. "softmax").
 * Returns 0 on success, 1 when --help was printed (exit 0), 2 on error (a
 * message was printed to stderr). `usage` is a one-paragraph description. */
int cli_args_parse(const cli_opt *spec, int nspec, const char *cmd, const char *usage, int argc,
                  char **argv, cli_args *a);
void cli_args_print_help(const cli_opt *spec, int nspec, const char *cmd, const char *usage,
                        FILE *f);
/* Value given or default (NULL if neither). */
const char *cli_args_get(const cli_args *a, const char *name);
int cli_args_given(const cli_args *a, const char *name);
/* Flag state: 1 if --name (or default "on"), 0 if --no-name (or default off). */
int cli_args_flag(const cli_args *a, const char *name);
/* Typed getters: 0 ok, 2 error (message printed naming the option). */
int cli_args_float(const cli_args *a, const char *name, float *out);
/* Parse v as a float32 value of option opt: 0 ok, -1 not a number at all,
 * 2 a number that is NaN, infinite, out of float32 range or a nonzero value
 * that underflows to 0 (message printed). */
int cli_parse_float(const char *opt, const char *v, float *out);
int cli_args_int(const cli_args *a, const char *name, int64_t *out);
/* Parse "4x4", "3x5x10" or "64" into dims; returns 0/2. */
int cli_args_dims(const cli_args *a, const char *name, int *ndim, int64_t dims[3]);

/* Print "longattn: error: ..." to stderr; returns 2. */
int cli_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ---- .npy files (cli/cli_npy.c: the CLI's own reader and writer) -------- */
#define CLI_NPY_MAX_DIMS 8
typedef struct cli_array {
    la_dtype dtype;     /* LA_F32, LA_F64, LA_F16 or LA_I32 as stored (LA_F32 after conversion) */
    int ndim;
    int64_t shape[CLI_NPY_MAX_DIMS];
    void *data;         /* malloc'd, contiguous C order */
    size_t nbytes;
} cli_array;
/* Read `path` (named by option `opt` in messages) straight into one buffer
 * of its data's size; with to_f32 a float64 file is converted while it is
 * read (no second copy of the file). The size is checked against the
 * memory available (cli_mem_check) before allocating. 0 or 2
 * (message printed). */
int cli_npy_read(const char *opt, const char *path, int to_f32, cli_array *out);
/* Parse the .npy header in buf[0, len) of a file of `total` bytes: 0 with
 * dtype/ndim/shape/nbytes and *data_off set; 1 when it needs the first
 * *need bytes; 2 with a message in msg (the data must fill the file). */
int cli_npy_header(const unsigned char *buf, size_t len, size_t total, cli_array *out,
                   size_t *data_off, size_t *need, char *msg, size_t msgn);
/* Write a complete .npy image to fd: 0, or errno of the failed write. */
int cli_npy_write_fd(int fd, la_dtype dtype, int ndim, const int64_t *shape, const void *data);
void cli_array_free(cli_array *a);

/* ---- device staging (cli/cli_devmem.c: the CUDA runtime directly) -------- */
/* 0 on success; else a message in buf and a nonzero la_status. */
la_status cli_dev_malloc(void **ptr, size_t bytes, char *msg, size_t n);
void cli_dev_free(void *ptr);
la_status cli_dev_upload(void *dst, const void *src, size_t bytes, char *msg, size_t n);
la_status cli_dev_download(void *dst, const void *src, size_t bytes, char *msg, size_t n);
la_status cli_dev_memset(void *dst, int byte, size_t bytes, char *msg, size_t n);
la_status cli_dev_synchronize(char *msg, size_t n);
/* Why no CUDA device is usable, in the CUDA runtime's words. */
void cli_dev_why(char *msg, size_t n);

/* ---- memory -------------------------------------------------------------- */
/* malloc, but a large buffer is 2 MiB aligned with transparent huge pages
 * requested (madvise): far fewer page faults. Free with free(). */
void *cli_big_alloc(size_t bytes);
/* Bytes this process can still allocate (la_memory_available of the public API): the least of
 * MemAvailable, the memory cgroup's limit minus usage (inactive file cache
 * counted free) and RLIMIT_AS minus the mapped address space; SIZE_MAX when
 * none can be read. */
size_t cli_memory_available(void);
/* 0 when `bytes` fit in the memory available to this process
 * (cli_memory_available, less the BLAS reserve under ulimit -v); else prints
 * "WHAT: needs X GiB, Y GiB available" and returns 2. */
int cli_mem_check(size_t bytes, const char *what);

/* Address space left under RLIMIT_AS (ulimit -v): 1 and *bytes when a
 * limit is set, 0 when there is none. */
int cli_as_headroom(size_t *bytes);
/* OpenBLAS (0.3.21) maps a buffer of this size for every thread that calls
 * it, and retries forever when the mapping fails. */
#define CLI_BLAS_BUFFER_MIB 128
/* Address space kept free for the BLAS buffers of the threads that call
 * BLAS (one per core; OpenBLAS's own worker has mapped its buffer before
 * main), plus a margin: CLI_BLAS_BUFFER_MIB x cores + 32 MiB. */
size_t cli_blas_reserve(void);

/* One output file, planned (checked, temporary created) before computing. */
typedef struct cli_output {
    const char *opt;    /* option that named it ("out", "lse", "state-out") */
    char *path;         /* where the result goes (a symbolic link resolved) */
    char *shown;        /* the path as given, for messages */
    char *tmp;          /* temporary beside it (NULL: written straight) */
    int fd;             /* open temporary, -1 when none */
    int direct;         /* a character device or FIFO: written in place */
    int slot;           /* signal-cleanup slot of tmp, -1 when none */
    int existed;
    dev_t dev;          /* identity of the existing file (existed) */
    ino_t ino;
    dev_t ddev;         /* identity of its directory, and its base name */
    ino_t dino;
    char *base;
    int written, renamed;
} cli_output;

/* One input file named by an option (for the output-is-input check). */
typedef struct cli_input {
    const char *opt;
    const char *path;
    dev_t dev;
    ino_t ino;
} cli_input;

/* One invocation's resources. */
typedef struct cli_state {
    la_context *ctx;
    la_device device;
    int narrays;
    cli_array arrays[CLI_MAX_ITEMS];
    int nbufs;
    void *bufs[CLI_MAX_ITEMS];        /* host buffers we malloc'd */
    int ndev;
    void *devbufs[CLI_MAX_ITEMS];     /* device buffers */
    int nouts;
    cli_output outs[CLI_MAX_ITEMS];
    int nins;
    cli_input ins[CLI_MAX_ITEMS];
    int force;
} cli_state;

/* Create the context (threads), pick the device, record the inputs and
 * plan every CLI_OPT_OUT output given (cli_plan_output). 0/2. */
int cli_begin(cli_state *c, const cli_args *a);
/* Record input `path` of option `opt` (its device and inode, when it
 * exists) so that no output replaces it unnoticed: 2 (message printed) when
 * an output planned already is that file and --force was not given. */
int cli_note_input(cli_state *c, const char *opt, const char *path);
/* Check output `path` of option `opt` before computing and create its
 * temporary (mkstemp, O_EXCL, beside it; removed on SIGINT/SIGTERM/SIGHUP):
 * not a directory, not a block device or socket, not a dangling link, not
 * the same file as another output, its directory writable, and not the
 * same file as an input unless --force (or unless that input is option
 * `may_replace`, e.g. --state-out over --state-in). Character devices and
 * FIFOs are written in place at the end. 0/2. */
int cli_plan_output(cli_state *c, const char *opt, const char *path, const char *may_replace);
/* Load the .npy named by option `opt` (if not given: required -> error 2,
 * else t->data = NULL and returns 0). ndim: expected rank (-1 any).
 * want: LA_F32 (f32/f64 accepted, f64 converted to f32; f16 kept as f16,
 * which the operators take as such) or LA_I32. The tensor is on
 * the host, contiguous. `shape_doc` (e.g. "[B,N,H,D]") goes in messages. */
int cli_load(cli_state *c, const cli_args *a, const char *opt, int required, int ndim,
                la_dtype want, const char *shape_doc, la_tensor *t);
/* The same for an explicit path (e.g. PREFIX.S.npy of --state-in). */
int cli_load_path(cli_state *c, const char *opt, const char *path, int ndim, la_dtype want,
                  const char *shape_doc, la_tensor *t);
/* Host output buffer (contiguous), filled with NaN (f32/f64/f16) / -7 (i32)
 * so that unwritten elements are visible. */
int cli_alloc(cli_state *c, la_dtype dt, int ndim, const int64_t *shape, la_tensor *t);
/* The dtype of an output computed from input `like` (and of a gradient of
 * it): float16 when like is float16 (a `<f2` file), else float32.
 * Normalizers, states and scores stay float32 whatever the inputs. */
la_dtype cli_out_dtype(const la_tensor *like);
/* With --device cuda: copy a host tensor to a new device buffer and make t
 * point to it (contiguous). No-op on cpu. 0/2/1. */
int cli_upload(cli_state *c, la_tensor *t);
/* Make a device twin of host output `host` in `dev` (cuda) or copy the view
 * (cpu). */
int cli_device_out(cli_state *c, const la_tensor *host, la_tensor *dev);
/* After the op: bring `dev` back into `host` (cuda) and write it to the
 * planned temporary of option `opt`'s path. Skipped if the option is
 * absent. Messages name the option and the path given, never the
 * temporary. */
int cli_save(cli_state *c, const cli_args *a, const char *opt, const la_tensor *host,
                const la_tensor *dev);
/* Save to an explicit path (e.g. PREFIX.S.npy), planned before (or now). */
int cli_save_path(cli_state *c, const char *path, const la_tensor *host, const la_tensor *dev);
/* Report a library status: prints la_last_error(); returns 2 for bad input
 * or a refused resource (ARG/SHAPE/DTYPE/OVERFLOW/FORMAT/IO/UNSUPPORTED/
 * NOMEM) or 1 otherwise; 0 for LA_OK. */
int cli_status(la_status s, const char *what);
/* The output half of cli_end (cli/outputs.c). */
int cli_finish_outputs(cli_state *c, int rc);
/* Finish: on rc == 0 rename every temporary output to its final name (if a
 * rename fails, the outputs already in place stay, the remaining
 * temporaries are removed and it returns 1, naming both); else remove the
 * temporaries. Only files this run created are ever removed. Frees all. */
int cli_end(cli_state *c, int rc);

/* ---- subcommands ------------------------------------------------------- */
/* `longattn run OP ...`: argv[0] is OP. Each returns the exit status. */
int cli_run_softmax(int argc, char **argv);
int cli_run_linear(int argc, char **argv);
int cli_run_mhla(int argc, char **argv);
int cli_run_mhla_init(int argc, char **argv);
int cli_run_focused(int argc, char **argv);
int cli_run_attn_map(int argc, char **argv);
int cli_run_dsa(int argc, char **argv);
int cli_run_hisa(int argc, char **argv);
int cli_run_blocksparse(int argc, char **argv);
int cli_run_sparse_attn(int argc, char **argv);
/* `run OP ... --backward`: the gradients of OP; -1 when argv has no --backward. */
int cli_run_backward(int argc, char **argv);

/* Demo sections (cli/demo_*.c): print to f; return number of failed checks. */
int cli_demo_dense(FILE *f, int quick);
int cli_demo_mhla(FILE *f, int quick);
int cli_demo_focused(FILE *f, int quick);
int cli_demo_sparse(FILE *f, int quick);

/* Benchmark families (cli/bench_*.c). */
typedef struct cli_bench_cfg {
    int json;            /* print JSON lines instead of a table */
    int threads;
    int64_t nmin, nmax;  /* sequence length range (powers of two) */
    int64_t D;
    int64_t H;
    double min_time;     /* seconds per measurement */
    const char *ops;     /* comma list filter or NULL = all */
    FILE *out;
} cli_bench_cfg;
int cli_bench_dense(const cli_bench_cfg *cfg);
int cli_bench_mhla(const cli_bench_cfg *cfg);
int cli_bench_sparse(const cli_bench_cfg *cfg);

/* Progress bar on stderr for runs longer than a second (no-op when stderr
 * is not a terminal unless force). */
typedef struct cli_progress {
    const char *label;
    int64_t total, done;
    double t0, last;
    int shown;
} cli_progress;
void cli_progress_start(cli_progress *p, const char *label, int64_t total);
void cli_progress_step(cli_progress *p, int64_t inc);
void cli_progress_end(cli_progress *p);
/* Erase a drawn bar so that the next line of output starts clean (p NULL:
 * whichever bar is drawn; a no-op when stderr is not a terminal). */
void cli_progress_clear(cli_progress *p);
double cli_now(void);
/* splitmix64 random numbers (cli/bench_util.c): demos, benches and studies
 * are deterministic for a given seed, with no global generator state. */
typedef struct cli_rng64 {
    uint64_t s;
} cli_rng64;
uint64_t cli_rng64_next(cli_rng64 *r);
double cli_rng64_uniform(cli_rng64 *r); /* [0, 1), 53 bits */
double cli_rng64_normal(cli_rng64 *r);  /* N(0,1), Box-Muller from two uniforms */

/* Bench helpers (cli/bench_util.c). */
double cli_bench_median(double *x, int n);          /* sorts x */
void cli_bench_fill(float *x, size_t n, uint64_t seed); /* uniform [-1,1) */
/* Median seconds of call(arg): one warm-up call (returned alone if it took
 * over 2 s), then at least 3 timed calls lasting min_time. */
double cli_bench_time_median(la_status (*call)(void *), void *arg, double min_time, int *reps,
                            la_status *st);
/* GFLOP/s of `threads` concurrent single-threaded 1024^3 sgemm calls (the
 * best of several rounds: a peak, robust to a busy machine). */
double cli_bench_sgemm_peak(int threads, double min_time);
/* Bench helper: whether op name passes the cfg->ops filter. */
int cli_bench_selected(const cli_bench_cfg *cfg, const char *op);

/* Name of the BLAS the CLI was built against ("openblas" or "builtin"). */
const char *cli_blas_name(void);
/* Single-threaded row-major C = alpha op(A) op(B) + beta C (cli/bench_util.c). */
void cli_sgemm(int64_t M, int64_t N, int64_t K, const float *A, const float *B, float *C);
/* Number of elements of a tensor view. */
int64_t cli_numel(const la_tensor *t);
/* float32 -> bfloat16 bits, round to nearest even (NaN kept). */
uint16_t cli_f32_to_bf16(float f);
/* The library's feature maps, for the demos' float64 references. */
double cli_feature(la_feature f, double x);

/* Signal cleanup of temporaries (cli/common.c): handlers are installed once
 * by cli_begin; a registered name is unlinked if the process is killed by
 * SIGINT, SIGTERM or SIGHUP before it is released. */
/* A text report (--json-out): written to a temporary made with mkostemp
 * beside `path` (a random name, O_EXCL, removed on SIGINT/SIGTERM), put in
 * place by cli_text_commit, removed by cli_text_abort. Each returns 0, or 2
 * after printing a line naming the option. */
typedef struct cli_text {
    FILE *f;            /* write the report here */
    const char *opt, *path;
    char *tmp;
    int slot;
} cli_text;
int cli_text_begin(cli_text *t, const char *opt, const char *path);
int cli_text_commit(cli_text *t);
void cli_text_abort(cli_text *t);
int cli_tmp_register(const char *path);
int cli_tmp_create(char *tmpl, int *slot);
void cli_tmp_release(int slot);

/* Find a helper script (plot_collapse.py, plot_eval_index.py): beside the
 * executable's scripts/ (a build tree), its ../share/longattn/ (an
 * installed tree: `make install`), the configured share directory, or
 * ./scripts/. 1 with the path in buf, else 0. */
int cli_find_script(const char *name, char *buf, size_t n);

/* Top-level commands implemented elsewhere */
int cli_cmd_collapse(int argc, char **argv);
int cli_cmd_eval_index(int argc, char **argv);

#endif
