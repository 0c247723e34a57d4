/* Shared CLI plumbing: one invocation's context, .npy inputs, outputs buffers,
 * device staging, memory checks, progress display. Options are in args.c,
 * output files in outputs.c. */
#include <errno.h>
#include <stdint.h>
#include <float.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* ---- invocation resources ------------------------------------------------ */
int cli_begin(cli_state *c, const cli_args *a) {
    memset(c, 0, sizeof *c);
    c->force = a->force;
    if (la_context_create(&c->ctx) != LA_OK) return cli_fail("%s", la_last_error());
    if (la_context_set_threads(c->ctx, a->threads) != LA_OK) return cli_fail("--threads: %s", la_last_error());
    c->device = strcmp(a->device, "cuda") == 0 ? LA_DEVICE_CUDA : LA_DEVICE_CPU;
    if (c->device == LA_DEVICE_CUDA) {
        int ok = 0;
        la_status s = la_cuda_available(&ok);
        if (s != LA_OK || !ok) {
            char why[256];
            if (s != LA_OK) snprintf(why, sizeof why, "%s", la_last_error());
            else cli_dev_why(why, sizeof why); /* the runtime's words: driver too old, no device */
            return cli_fail("--device cuda: no usable CUDA device: %s", why);
        }
    }
    /* inputs first, so that an output naming an input is recognised */
    for (int i = 0; i < a->nspec; i++)
        if (a->spec[i].kind == CLI_OPT_IN && a->given[i]) (void)cli_note_input(c, a->spec[i].name, a->value[i]);
    for (int i = 0; i < a->nspec; i++)
        if (a->spec[i].kind == CLI_OPT_OUT && a->given[i] &&
            cli_plan_output(c, a->spec[i].name, a->value[i], NULL))
            return 2;
    return 0;
}

int cli_load(cli_state *c, const cli_args *a, const char *opt, int required, int ndim,
             la_dtype want, const char *shape_doc, la_tensor *t) {
    memset(t, 0, sizeof *t);
    const char *path = cli_args_get(a, opt);
    if (!path) {
        if (required) return cli_fail("option --%s is required%s%s", opt, shape_doc ? ": " : "", shape_doc ? shape_doc : "");
        return 0;
    }
    return cli_load_path(c, opt, path, ndim, want, shape_doc, t);
}

int cli_load_path(cli_state *c, const char *opt, const char *path, int ndim, la_dtype want,
                  const char *shape_doc, la_tensor *t) {
    memset(t, 0, sizeof *t);
    if (c->narrays >= CLI_MAX_ITEMS) return cli_fail("too many inputs (internal)");
    cli_array *arr = &c->arrays[c->narrays];
    if (cli_npy_read(opt, path, want == LA_F32, arr)) return 2;
    c->narrays++;
    if (want == LA_F32) {
        if (arr->dtype == LA_I32)
            return cli_fail("--%s %s: dtype int32, expected float32, float64 or float16", opt, path);
    } else if (want == LA_I32 && arr->dtype != LA_I32) {
        return cli_fail("--%s %s: dtype %s, expected int32", opt, path, la_dtype_name(arr->dtype));
    }
    if (ndim >= 0 && arr->ndim != ndim) {
        char sb[128];
        int o = snprintf(sb, sizeof sb, "(");
        for (int i = 0; i < arr->ndim && o < 100; i++) o += snprintf(sb + o, sizeof sb - (size_t)o, "%s%lld", i ? ", " : "", (long long)arr->shape[i]);
        snprintf(sb + o, sizeof sb - (size_t)o, ")");
        return cli_fail("--%s %s: shape %s has rank %d, expected rank %d%s%s", opt, path, sb, arr->ndim, ndim,
                           shape_doc ? " " : "", shape_doc ? shape_doc : "");
    }
    if (arr->ndim < 1 || arr->ndim > LA_MAX_DIMS)
        return cli_fail("--%s %s: rank %d not supported (1..%d)", opt, path, arr->ndim, LA_MAX_DIMS);
    for (int i = 0; i < arr->ndim; i++)
        if (arr->shape[i] == 0)
            return cli_fail("--%s %s: dimension %d is zero (empty arrays are not valid input)", opt, path, i);
    if (la_tensor_init(t, arr->data, arr->dtype, LA_DEVICE_CPU, arr->ndim, arr->shape) != LA_OK)
        return cli_fail("--%s %s: %s", opt, path, la_last_error());
    return 0;
}

int cli_as_headroom(size_t *bytes) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) return 0;
    unsigned long long pages = 0;
    FILE *f = fopen("/proc/self/statm", "re");
    if (f) {
        if (fscanf(f, "%llu", &pages) != 1) pages = 0;
        fclose(f);
    }
    const unsigned long long used = pages * (unsigned long long)sysconf(_SC_PAGESIZE);
    *bytes = rl.rlim_cur > used ? (size_t)(rl.rlim_cur - used) : 0;
    return 1;
}

size_t cli_blas_reserve(void) {
#ifdef LA_BLAS_OPENBLAS
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    return ((size_t)CLI_BLAS_BUFFER_MIB << 20) * (size_t)cores + ((size_t)32 << 20);
#else
    return (size_t)32 << 20;
#endif
}

/* Large buffers on 2 MiB boundaries with transparent huge pages asked for
 * (THP "madvise" mode is common): a fresh 16 MiB array then costs 8 page
 * faults instead of 4096, which is most of what a short `longattn run` spends
 * beyond its arithmetic. Freed with free(). */
void *cli_big_alloc(size_t bytes) {
    const size_t huge = (size_t)2 << 20;
    if (bytes < 2 * huge) return malloc(bytes ? bytes : 1);
    size_t n = (bytes + huge - 1) / huge * huge;
    void *p = NULL;
    if (posix_memalign(&p, huge, n) != 0) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);
#endif
    return p;
}

size_t cli_memory_available(void) {
    size_t avail = SIZE_MAX;
    if (la_memory_available(&avail) != LA_OK) avail = SIZE_MAX;
    return avail;
}

int cli_mem_check(size_t bytes, const char *what) {
    size_t avail = cli_memory_available(), room = 0;
    /* under ulimit -v, keep the BLAS buffers' address space free as well */
    if (cli_as_headroom(&room)) {
        room = room > cli_blas_reserve() ? room - cli_blas_reserve() : 0;
        if (room < avail) avail = room;
    }
    if (bytes <= avail) return 0;
    return cli_fail("%s: needs %.2f GiB, %.2f GiB available", what, (double)bytes / 1073741824.0,
                    (double)avail / 1073741824.0);
}

int cli_alloc(cli_state *c, la_dtype dt, int ndim, const int64_t *shape, la_tensor *t) {
    size_t n = 1;
    char sb[160];
    int o = snprintf(sb, sizeof sb, "output [");
    for (int i = 0; i < ndim && o < 120; i++)
        o += snprintf(sb + o, sizeof sb - (size_t)o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    snprintf(sb + o, sizeof sb - (size_t)o, "]");
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, (size_t)shape[i], &n))
            return cli_fail("%s: size overflows", sb);
    size_t bytes;
    if (__builtin_mul_overflow(n, la_dtype_size(dt), &bytes)) return cli_fail("%s: size overflows", sb);
    if (c->nbufs >= CLI_MAX_ITEMS) return cli_fail("too many outputs (internal)");
    /* checked before allocating: the NaN fill below touches every page, and
     * an output the machine cannot hold must fail here, not by an OOM kill */
    if (cli_mem_check(bytes, sb)) return 2;
    void *p = cli_big_alloc(bytes);
    if (!p) return cli_fail("%s: cannot allocate %zu bytes", sb, bytes);
    c->bufs[c->nbufs++] = p;
    if (dt == LA_F32) for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
    else if (dt == LA_F64) for (size_t i = 0; i < n; i++) ((double *)p)[i] = NAN;
    else if (dt == LA_F16) for (size_t i = 0; i < n; i++) ((uint16_t *)p)[i] = 0x7e00; /* NaN */
    else if (dt == LA_I32) for (size_t i = 0; i < n; i++) ((int32_t *)p)[i] = -7;
    if (la_tensor_init(t, p, dt, LA_DEVICE_CPU, ndim, shape) != LA_OK) return cli_fail("%s", la_last_error());
    return 0;
}

la_dtype cli_out_dtype(const la_tensor *like) {
    return like && like->dtype == LA_F16 ? LA_F16 : LA_F32;
}

int64_t cli_numel(const la_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->ne[i];
    return n;
}

static size_t tensor_bytes(const la_tensor *t) { return (size_t)cli_numel(t) * la_dtype_size(t->dtype); }

int cli_upload(cli_state *c, la_tensor *t) {
    if (c->device != LA_DEVICE_CUDA || !t->data) return 0;
    if (c->ndev >= CLI_MAX_ITEMS) return cli_fail("too many device buffers (internal)");
    void *d = NULL;
    char msg[256];
    size_t bytes = tensor_bytes(t);
    if (cli_dev_malloc(&d, bytes, msg, sizeof msg) != LA_OK) return cli_fail("--device cuda: %s", msg);
    c->devbufs[c->ndev++] = d;
    if (cli_dev_upload(d, t->data, bytes, msg, sizeof msg) != LA_OK) return cli_fail("--device cuda: %s", msg);
    t->data = d;
    t->device = LA_DEVICE_CUDA;
    return 0;
}

int cli_device_out(cli_state *c, const la_tensor *host, la_tensor *dev) {
    *dev = *host;
    if (c->device != LA_DEVICE_CUDA) return 0;
    if (c->ndev >= CLI_MAX_ITEMS) return cli_fail("too many device buffers (internal)");
    void *d = NULL;
    char msg[256];
    size_t bytes = tensor_bytes(host);
    if (cli_dev_malloc(&d, bytes, msg, sizeof msg) != LA_OK) return cli_fail("--device cuda: %s", msg);
    c->devbufs[c->ndev++] = d;
    /* poison (0xff bytes = NaN for f32, -1 for i32) so unwritten output is visible */
    if (cli_dev_memset(d, 0xff, bytes, msg, sizeof msg) != LA_OK) return cli_fail("--device cuda: %s", msg);
    dev->data = d;
    dev->device = LA_DEVICE_CUDA;
    return 0;
}

int cli_status(la_status s, const char *what) {
    if (s == LA_OK) return 0;
    fprintf(stderr, "longattn: error: %s%s%s\n", what ? what : "", what ? ": " : "", la_last_error());
    switch (s) {
    case LA_ERR_ARG: case LA_ERR_SHAPE: case LA_ERR_DTYPE: case LA_ERR_OVERFLOW:
    case LA_ERR_FORMAT: case LA_ERR_IO: case LA_ERR_UNSUPPORTED: case LA_ERR_NOMEM:
        return 2;
    default:
        return 1;
    }
}

int cli_end(cli_state *c, int rc) {
    rc = cli_finish_outputs(c, rc);
    for (int i = 0; i < c->narrays; i++) cli_array_free(&c->arrays[i]);
    for (int i = 0; i < c->nbufs; i++) free(c->bufs[i]);
    for (int i = 0; i < c->ndev; i++) cli_dev_free(c->devbufs[i]);
    if (c->ctx) la_context_destroy(c->ctx);
    memset(c, 0, sizeof *c);
    return rc;
}

/* ---- progress ------------------------------------------------------------ */
double cli_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void cli_progress_start(cli_progress *p, const char *label, int64_t total) {
    p->label = label;
    p->total = total > 0 ? total : 1;
    p->done = 0;
    p->t0 = p->last = cli_now();
    p->shown = 0;
}

static void progress_draw(cli_progress *p, int final) {
    double el = cli_now() - p->t0;
    double frac = (double)p->done / (double)p->total;
    if (frac > 1) frac = 1;
    int w = 30, fill = (int)(frac * w);
    char bar[40];
    for (int i = 0; i < w; i++) bar[i] = i < fill ? '#' : '.';
    bar[w] = '\0';
    double eta = frac > 0 ? el / frac - el : 0;
    if (isatty(2))
        fprintf(stderr, "\r%-18s [%s] %3.0f%% %6.1fs elapsed, ~%.0fs left%s", p->label, bar, frac * 100, el, eta,
                final ? "\n" : "");
    else if (final || cli_now() - p->last >= 5.0)
        fprintf(stderr, "%s: %3.0f%% (%lld/%lld) %.1fs elapsed\n", p->label, frac * 100, (long long)p->done,
                (long long)p->total, el);
    fflush(stderr);
}

void cli_progress_step(cli_progress *p, int64_t inc) {
    p->done += inc;
    double now = cli_now();
    /* only runs longer than a second get a progress display */
    if (now - p->t0 >= 1.0 && (now - p->last >= (isatty(2) ? 0.2 : 5.0))) {
        progress_draw(p, 0);
        p->last = now;
        p->shown = 1;
    }
}

void cli_progress_end(cli_progress *p) {
    if (p->shown) {
        p->done = p->total;
        progress_draw(p, 1);
        p->shown = 0;
    }
}

void cli_progress_clear(cli_progress *p) {
    /* only a terminal bar shares the line; the non-terminal form is whole
     * lines. NULL: clear whatever bar may be drawn (harmless when none is). */
    if ((!p || p->shown) && isatty(2)) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
}

int cli_bench_selected(const cli_bench_cfg *cfg, const char *op) {
    if (!cfg->ops || !*cfg->ops) return 1;
    const char *s = cfg->ops;
    size_t n = strlen(op);
    while (*s) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        if (l == n && strncmp(s, op, n) == 0) return 1;
        if (!e) break;
        s = e + 1;
    }
    return 0;
}

/* ---- installed files ------------------------------------------------------ */
#include <limits.h>
int cli_find_script(const char *name, char *buf, size_t n) {
    char exe[PATH_MAX];
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l > 0) {
        exe[l] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            /* build/longattn -> scripts/; PREFIX/bin/longattn -> PREFIX/share/longattn/ */
            snprintf(buf, n, "%s/../scripts/%s", exe, name);
            if (access(buf, R_OK) == 0) return 1;
            snprintf(buf, n, "%s/../share/longattn/%s", exe, name);
            if (access(buf, R_OK) == 0) return 1;
        }
    }
#ifdef CLI_SHARE_DIR
    snprintf(buf, n, "%s/%s", CLI_SHARE_DIR, name);
    if (access(buf, R_OK) == 0) return 1;
#endif
    snprintf(buf, n, "scripts/%s", name);
    return access(buf, R_OK) == 0;
}
