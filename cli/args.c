/* Option parsing of every `longattn` subcommand (cli.h): the only code
 * between argv and the typed values, fuzzed by tests/fuzz/fuzz_cli.c. It
 * depends on nothing but libc, so the fuzzer links this file alone. */
#include <errno.h>
#include <float.h>
#include <stdarg.h>
#include <stdlib.h>

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
    int has_out = 0;
    for (int i = 0; i < nspec; i++) has_out |= spec[i].kind == CLI_OPT_OUT;
    if (has_out) fprintf(f, "  %-28s %s\n", "--force", "allow an output to replace an input file");
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

