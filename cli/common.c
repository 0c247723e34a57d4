/* Shared CLI plumbing: options, .npy inputs, atomic outputs, device staging. */
#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "longattn: error: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return 2;
}

/* ---- options ------------------------------------------------------------- */
static int find_opt(const cli_opt *spec, int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (strcmp(spec[i].name, name) == 0) return i;
    return -1;
}

void cli_args_print_help(const cli_opt *spec, int nspec, const char *cmd, const char *usage,
                        FILE *f) {
    fprintf(f, "usage: longattn %s [options]\n\n%s\n\noptions:\n", cmd, usage ? usage : "");
    for (int i = 0; i < nspec; i++) {
        char left[64];
        if (spec[i].kind == CLI_OPT_FLAG)
            snprintf(left, sizeof left, "--%s / --no-%s", spec[i].name, spec[i].name);
        else
            snprintf(left, sizeof left, "--%s VALUE", spec[i].name);
        fprintf(f, "  %-28s %s", left, spec[i].help ? spec[i].help : "");
        if (spec[i].def) fprintf(f, " (default: %s)", spec[i].def);
        else if (spec[i].kind == CLI_OPT_FLAG) fprintf(f, " (default: off)");
        fprintf(f, "\n");
    }
    fprintf(f, "  %-28s %s\n", "--device cpu|cuda", "where to compute (default: cpu)");
    fprintf(f, "  %-28s %s\n", "--threads N", "CPU threads (default: 0 = all cores; more than the cores: the cores)");
    fprintf(f, "  %-28s %s\n", "--force", "allow an output to replace an input file");
    fprintf(f, "  %-28s %s\n", "--help", "show this help");
}

int cli_args_parse(const cli_opt *spec, int nspec, const char *cmd, const char *usage, int argc,
                  char **argv, cli_args *a) {
    memset(a, 0, sizeof *a);
    a->spec = spec;
    a->nspec = nspec;
    a->device = "cpu";
    if (nspec > CLI_MAX_OPTS) return cli_fail("%s: too many options (internal)", cmd);
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            cli_args_print_help(spec, nspec, cmd, usage, stdout);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0)
            return cli_fail("%s: unexpected argument '%s' (options start with --; see --help)", cmd, arg);
        char name[64];
        const char *eq = strchr(arg + 2, '=');
        size_t nl = eq ? (size_t)(eq - arg - 2) : strlen(arg + 2);
        if (nl >= sizeof name) return cli_fail("%s: option '%s' is too long", cmd, arg);
        memcpy(name, arg + 2, nl);
        name[nl] = '\0';
        const char *val = eq ? eq + 1 : NULL;
        if (strcmp(name, "force") == 0) {
            if (val) return cli_fail("%s: option --force takes no value", cmd);
            if (a->force) return cli_fail("%s: option --force given twice", cmd);
            a->force = 1;
            continue;
        }
        if (strcmp(name, "device") == 0 || strcmp(name, "threads") == 0) {
            const int is_dev = name[0] == 'd';
            if (is_dev ? a->device_given : a->threads_given)
                return cli_fail("%s: option --%s given twice", cmd, name);
            if (!val) {
                if (i + 1 >= argc) return cli_fail("%s: option --%s needs a value", cmd, name);
                if (strncmp(argv[i + 1], "--", 2) == 0)
                    return cli_fail("%s: option --%s needs a value, got option '%s'", cmd, name, argv[i + 1]);
                val = argv[++i];
            }
            if (is_dev) {
                if (strcmp(val, "cpu") != 0 && strcmp(val, "cuda") != 0)
                    return cli_fail("%s: --device '%s': expected cpu or cuda", cmd, val);
                a->device = val;
                a->device_given = 1;
            } else {
                char *end;
                errno = 0;
                long t = strtol(val, &end, 10);
                if (errno || end == val || *end || t < 0 || t > 4096)
                    return cli_fail("%s: --threads '%s': expected an integer in 0..4096", cmd, val);
                a->threads = (int)t;
                a->threads_given = 1;
            }
            continue;
        }
        int k = find_opt(spec, nspec, name);
        int negated = 0;
        if (k < 0 && strncmp(name, "no-", 3) == 0) {
            k = find_opt(spec, nspec, name + 3);
            if (k >= 0 && spec[k].kind == CLI_OPT_FLAG) negated = 1;
            else k = -1;
        }
        if (k < 0) return cli_fail("%s: unknown option '--%s' (see longattn %s --help)", cmd, name, cmd);
        if (spec[k].kind == CLI_OPT_FLAG) {
            if (val) return cli_fail("%s: option --%s takes no value", cmd, name);
            a->value[k] = negated ? "off" : "on";
        } else {
            if (!val) {
                if (i + 1 >= argc) return cli_fail("%s: option --%s needs a value", cmd, name);
                /* "--v --out o.npy": the value is missing, --out is not a path
                 * (a value that starts with -- is written --v=VALUE) */
                if (strncmp(argv[i + 1], "--", 2) == 0)
                    return cli_fail("%s: option --%s needs a value, got option '%s' (write --%s=VALUE "
                                    "for a value starting with --)", cmd, name, argv[i + 1], name);
                val = argv[++i];
            }
            if (!*val) return cli_fail("%s: option --%s: empty value", cmd, name);
            a->value[k] = val;
        }
        if (a->given[k]) return cli_fail("%s: option --%s given twice", cmd, spec[k].name);
        a->given[k] = 1;
    }
    return 0;
}

const char *cli_args_get(const cli_args *a, const char *name) {
    int k = find_opt(a->spec, a->nspec, name);
    if (k < 0) return NULL;
    return a->given[k] ? a->value[k] : a->spec[k].def;
}

int cli_args_given(const cli_args *a, const char *name) {
    int k = find_opt(a->spec, a->nspec, name);
    return k >= 0 && a->given[k];
}

int cli_args_flag(const cli_args *a, const char *name) {
    const char *v = cli_args_get(a, name);
    return v && strcmp(v, "on") == 0;
}

/* A float32 option value: finite, in float32 range, and not a nonzero value
 * that rounds to 0 (which would silently mean "default" for some options).
 * 0 ok, -1 not a number at all, 2 a number that is not acceptable (message
 * printed naming the option). */
int cli_parse_float(const char *opt, const char *v, float *out) {
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (end == v || *end) return -1;
    if (isnan(d)) return cli_fail("--%s '%s': not a number (NaN), expected a finite number", opt, v);
    if (isinf(d) || fabs(d) > FLT_MAX)
        return cli_fail("--%s '%s': out of float32 range (|x| <= %.6g), expected a finite number", opt, v,
                        (double)FLT_MAX);
    if (d != 0 && (float)d == 0.0f)
        return cli_fail("--%s '%s': underflows to 0 in float32 (smallest magnitude %.3g); give 0 "
                        "explicitly if 0 is meant", opt, v, (double)FLT_TRUE_MIN);
    *out = (float)d;
    return 0;
}

int cli_args_float(const cli_args *a, const char *name, float *out) {
    const char *v = cli_args_get(a, name);
    if (!v) return cli_fail("option --%s is required", name);
    int r = cli_parse_float(name, v, out);
    if (r < 0) return cli_fail("--%s '%s': expected a finite number", name, v);
    return r;
}

int cli_args_int(const cli_args *a, const char *name, int64_t *out) {
    const char *v = cli_args_get(a, name);
    if (!v) return cli_fail("option --%s is required", name);
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end) return cli_fail("--%s '%s': expected an integer", name, v);
    *out = x;
    return 0;
}

int cli_args_dims(const cli_args *a, const char *name, int *ndim, int64_t dims[3]) {
    const char *v = cli_args_get(a, name);
    if (!v) return cli_fail("option --%s is required", name);
    const char *p = v;
    int n = 0;
    while (*p) {
        if (n == 3) return cli_fail("--%s '%s': at most 3 dimensions (TxHxW)", name, v);
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (errno || end == p || x <= 0 || x > (1ll << 40))
            return cli_fail("--%s '%s': expected positive integers like 64, 4x4 or 3x5x10", name, v);
        dims[n++] = x;
        p = end;
        if (*p == 'x' || *p == 'X') {
            p++;
            if (!*p) return cli_fail("--%s '%s': trailing 'x'", name, v);
        } else if (*p) {
            return cli_fail("--%s '%s': expected positive integers like 64, 4x4 or 3x5x10", name, v);
        }
    }
    if (n == 0) return cli_fail("--%s: empty value", name);
    *ndim = n;
    return 0;
}

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
        if (a->spec[i].kind == CLI_OPT_IN && a->given[i]) cli_note_input(c, a->spec[i].name, a->value[i]);
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
            return cli_fail("--%s %s: dtype int32, expected float32 or float64", opt, path);
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

int cli_mem_check(size_t bytes, const char *what) {
    size_t avail = SIZE_MAX;
    la_memory_available(&avail);
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
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return cli_fail("%s: cannot allocate %zu bytes", sb, bytes);
    c->bufs[c->nbufs++] = p;
    if (dt == LA_F32) for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
    else if (dt == LA_F64) for (size_t i = 0; i < n; i++) ((double *)p)[i] = NAN;
    else if (dt == LA_I32) for (size_t i = 0; i < n; i++) ((int32_t *)p)[i] = -7;
    if (la_tensor_init(t, p, dt, LA_DEVICE_CPU, ndim, shape) != LA_OK) return cli_fail("%s", la_last_error());
    return 0;
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
    /* only a terminal bar shares the line; the non-terminal form is whole lines */
    if (p->shown && isatty(2)) {
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
