/* Shared CLI plumbing: options, .npy inputs, atomic outputs, device staging. */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "../src/core/devmem.h"

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
    fprintf(f, "  %-28s %s\n", "--threads N", "CPU threads (default: 0 = all cores)");
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
        if (strcmp(name, "device") == 0 || strcmp(name, "threads") == 0) {
            if (!val) {
                if (i + 1 >= argc) return cli_fail("%s: option --%s needs a value", cmd, name);
                val = argv[++i];
            }
            if (name[0] == 'd') {
                if (strcmp(val, "cpu") != 0 && strcmp(val, "cuda") != 0)
                    return cli_fail("%s: --device '%s': expected cpu or cuda", cmd, val);
                a->device = val;
            } else {
                char *end;
                errno = 0;
                long t = strtol(val, &end, 10);
                if (errno || *end || t < 0 || t > 4096)
                    return cli_fail("%s: --threads '%s': expected an integer in 0..4096", cmd, val);
                a->threads = (int)t;
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
                val = argv[++i];
            }
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

int cli_args_float(const cli_args *a, const char *name, float *out) {
    const char *v = cli_args_get(a, name);
    if (!v) return cli_fail("option --%s is required", name);
    char *end;
    errno = 0;
    double d = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(d) || fabs(d) > 3.4e38)
        return cli_fail("--%s '%s': expected a finite number", name, v);
    *out = (float)d;
    return 0;
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
    if (la_context_create(&c->ctx) != LA_OK) return cli_fail("%s", la_last_error());
    la_context_set_threads(c->ctx, a->threads);
    c->device = strcmp(a->device, "cuda") == 0 ? LA_DEVICE_CUDA : LA_DEVICE_CPU;
    if (c->device == LA_DEVICE_CUDA) {
        int ok = 0;
        la_cuda_available(&ok);
        if (!ok) {
            la_status s = la_dev_synchronize(); /* produces the no-CUDA message */
            return cli_fail("--device cuda: %s", s != LA_OK ? la_last_error() : "no CUDA device found");
        }
    }
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
    if (c->narrays >= CLI_MAX_ITEMS) return cli_fail("too many inputs (internal)");
    la_npy_array *arr = &c->arrays[c->narrays];
    la_status s = la_npy_read(path, arr);
    if (s != LA_OK) return cli_fail("--%s %s", opt, la_last_error());
    c->narrays++;
    if (want == LA_F32) {
        if (arr->dtype == LA_I32)
            return cli_fail("--%s %s: dtype int32, expected float32 or float64", opt, path);
        if (la_npy_to_f32(arr, path) != LA_OK) return cli_fail("--%s %s", opt, la_last_error());
    } else if (want == LA_I32 && arr->dtype != LA_I32) {
        return cli_fail("--%s %s: dtype %s, expected int32", opt, path, la_dtype_name(arr->dtype));
    }
    if (ndim >= 0 && arr->ndim != ndim) {
        char sb[128];
        int o = snprintf(sb, sizeof sb, "(");
        for (int i = 0; i < arr->ndim; i++) o += snprintf(sb + o, sizeof sb - (size_t)o, "%s%lld", i ? ", " : "", (long long)arr->shape[i]);
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

int cli_alloc(cli_state *c, la_dtype dt, int ndim, const int64_t *shape, la_tensor *t) {
    size_t n = 1;
    for (int i = 0; i < ndim; i++)
        if (shape[i] < 0 || __builtin_mul_overflow(n, (size_t)shape[i], &n))
            return cli_fail("output size overflows");
    size_t bytes;
    if (__builtin_mul_overflow(n, la_dtype_size(dt), &bytes)) return cli_fail("output size overflows");
    if (c->nbufs >= CLI_MAX_ITEMS) return cli_fail("too many outputs (internal)");
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return cli_fail("cannot allocate %zu bytes for an output", bytes);
    c->bufs[c->nbufs++] = p;
    if (dt == LA_F32) for (size_t i = 0; i < n; i++) ((float *)p)[i] = NAN;
    else if (dt == LA_I32) for (size_t i = 0; i < n; i++) ((int32_t *)p)[i] = -7;
    if (la_tensor_init(t, p, dt, LA_DEVICE_CPU, ndim, shape) != LA_OK) return cli_fail("%s", la_last_error());
    return 0;
}

static size_t tensor_bytes(const la_tensor *t) { return (size_t)la_numel(t) * la_dtype_size(t->dtype); }

int cli_upload(cli_state *c, la_tensor *t) {
    if (c->device != LA_DEVICE_CUDA || !t->data) return 0;
    if (c->ndev >= CLI_MAX_ITEMS) return cli_fail("too many device buffers (internal)");
    void *d = NULL;
    size_t bytes = tensor_bytes(t);
    if (la_dev_malloc(&d, bytes) != LA_OK) return cli_fail("%s", la_last_error());
    c->devbufs[c->ndev++] = d;
    if (la_dev_upload(d, t->data, bytes) != LA_OK) return cli_fail("%s", la_last_error());
    t->data = d;
    t->device = LA_DEVICE_CUDA;
    return 0;
}

int cli_device_out(cli_state *c, const la_tensor *host, la_tensor *dev) {
    *dev = *host;
    if (c->device != LA_DEVICE_CUDA) return 0;
    if (c->ndev >= CLI_MAX_ITEMS) return cli_fail("too many device buffers (internal)");
    void *d = NULL;
    size_t bytes = tensor_bytes(host);
    if (la_dev_malloc(&d, bytes) != LA_OK) return cli_fail("%s", la_last_error());
    c->devbufs[c->ndev++] = d;
    /* poison (0xff bytes = NaN for f32, -1 for i32) so unwritten output is visible */
    if (la_dev_memset(d, 0xff, bytes) != LA_OK) return cli_fail("%s", la_last_error());
    dev->data = d;
    dev->device = LA_DEVICE_CUDA;
    return 0;
}

int cli_save_path(cli_state *c, const char *path, const la_tensor *host, const la_tensor *dev) {
    if (c->nouts >= CLI_MAX_ITEMS) return cli_fail("too many outputs (internal)");
    if (dev && dev->device == LA_DEVICE_CUDA && dev->data != host->data) {
        if (la_dev_synchronize() != LA_OK) return cli_fail("%s", la_last_error());
        if (la_dev_download(host->data, dev->data, tensor_bytes(host)) != LA_OK)
            return cli_fail("%s", la_last_error());
    }
    for (int i = 0; i < c->nouts; i++)
        if (strcmp(c->out_final[i], path) == 0) return cli_fail("output path '%s' given twice", path);
    size_t n = strlen(path) + 64;
    char *tmp = (char *)malloc(n);
    char *fin = strdup(path);
    if (!tmp || !fin) { free(tmp); free(fin); return cli_fail("out of memory"); }
    /* the temporary lives beside the final file so rename() stays atomic */
    snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    c->out_tmp[c->nouts] = tmp;
    c->out_final[c->nouts] = fin;
    c->nouts++;
    if (la_npy_write_raw(tmp, host->dtype, host->ndim, host->ne, host->data) != LA_OK)
        return cli_fail("%s", la_last_error());
    return 0;
}

int cli_save(cli_state *c, const cli_args *a, const char *opt, const la_tensor *host,
                const la_tensor *dev) {
    const char *path = cli_args_get(a, opt);
    if (!path) return 0;
    return cli_save_path(c, path, host, dev);
}

int cli_status(la_status s, const char *what) {
    if (s == LA_OK) return 0;
    fprintf(stderr, "longattn: error: %s%s%s\n", what ? what : "", what ? ": " : "", la_last_error());
    switch (s) {
    case LA_ERR_ARG: case LA_ERR_SHAPE: case LA_ERR_DTYPE: case LA_ERR_OVERFLOW:
    case LA_ERR_FORMAT: case LA_ERR_IO: case LA_ERR_UNSUPPORTED:
        return 2;
    default:
        return 1;
    }
}

int cli_end(cli_state *c, int rc) {
    if (rc == 0) {
        for (int i = 0; i < c->nouts; i++) {
            if (rename(c->out_tmp[i], c->out_final[i]) != 0) {
                fprintf(stderr, "longattn: error: cannot rename %s to %s: %s\n", c->out_tmp[i], c->out_final[i], strerror(errno));
                /* remove what was already renamed: all or nothing */
                for (int j = 0; j < i; j++) unlink(c->out_final[j]);
                for (int j = i; j < c->nouts; j++) unlink(c->out_tmp[j]);
                rc = 1;
                break;
            }
        }
    } else {
        for (int i = 0; i < c->nouts; i++) unlink(c->out_tmp[i]);
    }
    for (int i = 0; i < c->nouts; i++) { free(c->out_tmp[i]); free(c->out_final[i]); }
    for (int i = 0; i < c->narrays; i++) la_npy_free(&c->arrays[i]);
    for (int i = 0; i < c->nbufs; i++) free(c->bufs[i]);
    for (int i = 0; i < c->ndev; i++) la_dev_free(c->devbufs[i]);
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
