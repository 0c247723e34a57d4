/* test_backend_ops: every backend against its reference, from one list of
 * cases (see backend_ops.h for what a case is and how to add a family).
 *
 *   test_backend_ops [-o OP] [-b cpu|cuda] [-n SUBSTR] [-x SUBSTR] [--small] [--san]
 *                    [--perf] [--list] [--shard I/N]
 *
 *   -o OP      only cases of operator OP (softmax, linear, mhla, mhla_causal,
 *              mhla_decode, focused, topk, dsa -- the indexer cases, DSA with
 *              HISA and block-sparse --, sparse_attn, paged, and the backward
 *              passes softmax_backward, linear_backward, mhla_backward,
 *              mhla_causal_backward, focused_backward, sparse_attn_backward);
 *              may be given several times
 *   -b B       only the cases of backend B: cpu (CPU vs float64) or cuda
 *              (CUDA vs the CPU path)
 *   -n SUBSTR  only cases whose name contains SUBSTR
 *   -x SUBSTR  no case whose name contains SUBSTR (may be given several
 *              times; with -n: the cases of -n without those of -x)
 *   --small    only the small cases
 *   --san      one CUDA case per distinct kernel (op x variant x dtype x
 *              path), at the smallest shape with several tiles: the
 *              compute-sanitizer selection (with --small: the union)
 *   --perf     print the wall time of each case
 *   --list     list the selected cases, run nothing
 *   --shard I/N  only the selected cases whose position in the list is I
 *              modulo N (N processes side by side cover the list once;
 *              `-n S` and `-x S` split a list in two that cover it once)
 *   --shard-block I/N  the same with the I-th of N contiguous runs of the
 *              list: each process meets fewer tables, so fewer kernels (what
 *              a JIT-compiled build loads: tests/cuda/gpu_sm80.sh)
 *
 * Without a CUDA device the CUDA cases are reported as skipped. Prints one
 * line per case (ok / FAIL / SKIP / KNOWN-FAIL), a summary per table, and
 * last "N passed, N failed" (checks). Exit status 1 when a check failed. */
#include "backend_ops.h"

#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>

la_test_state bo_checks;
la_rng bo_rng;

/* ---- registration ------------------------------------------------------------ */
void bo_add(bo_list *L, const bo_opts *o, bo_fn fn, const void *arg, size_t arg_size,
            const char *name) {
    if (arg_size > BO_ARG_MAX) {
        fprintf(stderr, "test_backend_ops: case '%s': argument block of %zu bytes > %d\n", name,
                arg_size, BO_ARG_MAX);
        exit(2);
    }
    if (L->n == L->cap) {
        L->cap = L->cap ? 2 * L->cap : 256;
        L->cases = realloc(L->cases, sizeof(bo_case) * (size_t)L->cap);
        if (!L->cases) {
            fprintf(stderr, "test_backend_ops: out of memory\n");
            exit(2);
        }
    }
    bo_case *c = &L->cases[L->n++];
    memset(c, 0, sizeof *c);
    c->o = *o;
    c->table = L->table;
    c->fn = fn;
    snprintf(c->name, sizeof c->name, "%s", name);
    for (int i = 0; i < L->n - 1; i++)
        c->repeat += !strcmp(L->cases[i].name, c->name) && L->cases[i].fn == fn;
    if (arg_size) memcpy(c->arg, arg, arg_size);
}

void bo_add_probe(bo_list *L, const char *family, bo_probe_fn fn) {
    if (L->nprobes >= (int)(sizeof L->probes / sizeof L->probes[0])) {
        fprintf(stderr, "test_backend_ops: too many probes\n");
        exit(2);
    }
    L->probes[L->nprobes].family = family;
    L->probes[L->nprobes].fn = fn;
    L->nprobes++;
}

void bo_set_kernel(bo_list *L, const char *path) {
    if (L->n) L->cases[L->n - 1].kernel = path;
}
void bo_mark_san(bo_list *L) {
    if (L->n) L->cases[L->n - 1].san_rep = 1;
}

/* ---- --san: one case per distinct kernel ------------------------------------------
 * compute-sanitizer (racecheck above all) multiplies a case's time by 10 to
 * 1000, so the sanitizer runs take one case per distinct kernel. A CUDA
 * case's kernel key is: op, forced variant, case function (the name's first
 * word), dtype (the first dtype the name spells: fp8 / e4m3, bf16, f16, f32,
 * f64, any case) and path (bo_set_kernel's, else the class of the name's
 * head-dim token "D<n>": D32, D64, D128 -- the head dims kernels are
 * templated on -- or Dx for any other, and "causal" when a word of the
 * name is causal, causal1 or c1).
 * Per key the representative is the case marked with bo_mark_san, else,
 * among the cases whose sequence extent (name_size) is at most
 * SAN_MAX_EXTENT, the smallest (product of the name's numbers) whose extent
 * is at least SAN_MIN_EXTENT (two 64-row tiles and a partial one along each
 * sequence axis), else the largest of the --small subset, else the
 * smallest. A key with no case within SAN_MAX_EXTENT (kernels that only run
 * past 8K tokens) is left out: the run says how many kernels it covers of
 * how many. The names are the tables' own, so this is a heuristic: a table
 * overrides it with bo_set_kernel and bo_mark_san. */
#define SAN_MIN_EXTENT 129
#define SAN_MAX_EXTENT 8192

static int has_word(const char *name, const char *w) {
    const size_t n = strlen(w);
    for (const char *p = strstr(name, w); p; p = strstr(p + 1, w)) {
        const int left = p == name || strchr(" (,[", p[-1]) != NULL;
        const int right = p[n] == 0 || strchr(" ),]", p[n]) != NULL;
        if (left && right) return 1;
    }
    return 0;
}
static const char *name_dtype(const char *name) {
    static const struct { const char *tok, *dt; } tab[] = {
        {"fp8", "fp8"}, {"FP8", "fp8"}, {"e4m3", "fp8"}, {"E4M3", "fp8"}, {"bf16", "bf16"},
        {"BF16", "bf16"}, {"f16", "f16"}, {"F16", "f16"}, {"f32", "f32"}, {"F32", "f32"},
        {"f64", "f64"}, {"F64", "f64"}};
    for (size_t i = 0; i < sizeof tab / sizeof tab[0]; i++)
        if (strstr(name, tab[i].tok)) return tab[i].dt;
    return "-";
}
static void kernel_key(const bo_case *c, char *key, size_t len) {
    char path[64] = "";
    if (c->kernel) {
        snprintf(path, sizeof path, "%s", c->kernel);
    } else {
        for (const char *p = c->name; *p; p++)
            if (*p == 'D' && p[1] >= '0' && p[1] <= '9' && (p == c->name || strchr(" (,[", p[-1]))) {
                const long d = strtol(p + 1, NULL, 10);
                snprintf(path, sizeof path, (d == 32 || d == 64 || d == 128) ? "D%ld" : "Dx", d);
                break;
            }
        if (has_word(c->name, "causal") || has_word(c->name, "causal1") || has_word(c->name, "c1"))
            snprintf(path + strlen(path), sizeof path - strlen(path), " causal");
    }
    int w = 0;
    while (c->name[w] && !strchr(" (", c->name[w])) w++;
    snprintf(key, len, "%s|%s=%s|%.*s|%s|%s", c->o.op, c->o.family ? c->o.family : "",
             c->o.variant ? c->o.variant : "", w, c->name, name_dtype(c->name), path);
}
/* Whether the number at p in name follows a sequence-axis label: N, Nq,
 * Nk, T, L (then optionally '='), "grid " or "map ". */
static int seq_label(const char *name, const char *p) {
    static const char *const labels[] = {"N", "Nq", "Nk", "T", "L", "N=", "T=", "L=", "grid ",
                                         "map "};
    for (size_t i = 0; i < sizeof labels / sizeof labels[0]; i++) {
        const size_t n = strlen(labels[i]);
        if ((size_t)(p - name) < n || strncmp(p - n, labels[i], n)) continue;
        const char *b = p - n;
        if (b == name || !isalnum((unsigned char)b[-1])) return 1;
    }
    return 0;
}
/* The numbers of a case's name (a map "AxB" counts as one number A*B, a
 * suffix K as 1024): their product (a size) and the sequence extent (the
 * smallest number after a sequence-axis label, as each such axis is tiled;
 * without one, the largest number). */
static void name_size(const char *name, double *volume, long *extent) {
    long largest = 0, seq = 0;
    *volume = 1;
    for (const char *p = name; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        char *end;
        long v = strtol(p, &end, 10);
        while (*end == 'x' && end[1] >= '0' && end[1] <= '9') v *= strtol(end + 1, &end, 10);
        if (*end == 'K') v *= 1024;
        if (v > 1) *volume *= (double)v;
        if (v > largest) largest = v;
        if (seq_label(name, p) && (!seq || v < seq)) seq = v;
        p = end;
    }
    *extent = seq ? seq : largest;
}
/* Sets san_pick on one CUDA case per kernel key; returns the number of keys. */
static int san_select(bo_list *L) {
    char(*keys)[256] = calloc((size_t)(L->n ? L->n : 1), sizeof *keys);
    int *done = calloc((size_t)(L->n ? L->n : 1), sizeof(int)), nkeys = 0;
    if (!keys || !done) {
        fprintf(stderr, "test_backend_ops: out of memory\n");
        exit(2);
    }
    for (int i = 0; i < L->n; i++)
        if (L->cases[i].o.backend == BO_CUDA) kernel_key(&L->cases[i], keys[i], sizeof keys[i]);
    for (int i = 0; i < L->n; i++) {
        if (L->cases[i].o.backend != BO_CUDA || done[i]) continue;
        nkeys++;
        int marked = -1, multi = -1, small = -1, any = -1;
        double vm = 0, vs = 0, va = 0;
        for (int j = i; j < L->n; j++) {
            const bo_case *c = &L->cases[j];
            if (c->o.backend != BO_CUDA || done[j] || strcmp(keys[j], keys[i])) continue;
            done[j] = 1;
            double v;
            long big;
            name_size(c->name, &v, &big);
            if (c->san_rep && marked < 0) marked = j;
            if (big > SAN_MAX_EXTENT) continue;
            if (big >= SAN_MIN_EXTENT && (multi < 0 || v < vm)) multi = j, vm = v;
            if (c->o.small && (small < 0 || v > vs)) small = j, vs = v;
            if (any < 0 || v < va) any = j, va = v;
        }
        const int pick = marked >= 0 ? marked : multi >= 0 ? multi : small >= 0 ? small : any;
        if (pick >= 0) L->cases[pick].san_pick = 1;
    }
    free(keys);
    free(done);
    return nkeys;
}

/* ---- run state ------------------------------------------------------------------ */
typedef struct bo_run {
    bo_list *L;
    la_context *ctx;
    const bo_case *cur;
    int small, san, perf, have_cuda;
    char skip_reason[400];
    int sub_skips;
    int in_case_variant;   /* a bo_use_variant override is in effect */
    jmp_buf skip_jump;     /* back into the harness: the case's variant does not apply */
    /* answers of the probes: family/variant -> honoured (1) or reason */
    struct { char key[64]; int ok; char why[300]; } seen[128];
    int nseen;
} bo_run;

static bo_run R;

la_context *bo_ctx(void) { return R.ctx; }
int bo_small(void) { return R.small; }
int bo_perf(void) { return R.perf; }
int bo_have_cuda(void) { return R.have_cuda; }

void bo_skip(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(R.skip_reason, sizeof R.skip_reason, fmt, ap);
    va_end(ap);
}

static const bo_probe *find_probe(const char *family) {
    for (int i = 0; i < R.L->nprobes; i++)
        if (!strcmp(R.L->probes[i].family, family)) return &R.L->probes[i];
    return NULL;
}

/* Whether the library honours `variant` of `family`; *why gets the reason
 * when not. The answer is cached per family/variant. 1: honoured; 0: not
 * testable here (no CUDA device); -1: a table or library bug (no probe, a
 * failing probe, variants ignored or a listed variant rejected), which the
 * caller counts as a failed check, not a skip. */
static int variant_honoured(const char *family, const char *variant, const char **why) {
    char key[64];
    snprintf(key, sizeof key, "%s/%s", family, variant);
    for (int i = 0; i < R.nseen; i++)
        if (!strcmp(R.seen[i].key, key)) {
            *why = R.seen[i].why;
            return R.seen[i].ok;
        }
    int ok = -1;
    char reason[300] = "";
    const bo_probe *pr = find_probe(family);
    if (!R.have_cuda) {
        ok = 0;
        snprintf(reason, sizeof reason, "no CUDA device");
    } else if (!pr) {
        snprintf(reason, sizeof reason, "no probe for variant family '%s' in the case tables",
                 family);
    } else {
        la_context *pc = NULL;
        la_context_create(&pc);
        /* 1. an unknown name must be refused: else the family does not read
         *    context variants at all and forcing one would test the default */
        la_context_set_variant(pc, family, "no-such-variant");
        la_status s = pr->fn(pc);
        if (s == LA_OK) {
            snprintf(reason, sizeof reason,
                     "the library ignores context variants of family '%s' (an unknown variant "
                     "name was accepted)", family);
        } else if (s != LA_ERR_ARG || strncmp(la_last_error(), "variant:", 8)) {
            snprintf(reason, sizeof reason,
                     "the probe of family '%s' failed (a table bug): %s: %s", family,
                     la_status_string(s), la_last_error());
        } else {
            /* 2. the variant itself, on the probe's problem: a known name that
             *    does not take the probe's views (LA_ERR_UNSUPPORTED, "variant:
             *    ...") is honoured; the case's own calls then decide */
            la_context_set_variant(pc, family, variant);
            s = pr->fn(pc);
            if (s == LA_OK || (s == LA_ERR_UNSUPPORTED && !strncmp(la_last_error(), "variant:", 8)))
                ok = 1;
            else
                snprintf(reason, sizeof reason, "variant '%s' of family '%s' rejected: %s: %s",
                         variant, family, la_status_string(s), la_last_error());
        }
        la_dev_synchronize();
        la_context_destroy(pc);
    }
    if (R.nseen < (int)(sizeof R.seen / sizeof R.seen[0])) {
        snprintf(R.seen[R.nseen].key, sizeof R.seen[R.nseen].key, "%s", key);
        R.seen[R.nseen].ok = ok;
        snprintf(R.seen[R.nseen].why, sizeof R.seen[R.nseen].why, "%s", reason);
        *why = R.seen[R.nseen].why;
        R.nseen++;
    } else {
        static const char full[] = "probe cache full";
        *why = full;
    }
    return ok;
}

int bo_use_variant(const char *family, const char *variant) {
    if (!variant) {
        const char *own = R.cur && R.cur->o.family && !strcmp(R.cur->o.family, family)
                              ? R.cur->o.variant : NULL;
        la_context_set_variant(R.ctx, family, own);
        R.in_case_variant = 0;
        return 1;
    }
    const char *why = "";
    const int ok = variant_honoured(family, variant, &why);
    if (ok < 0) {
        CHECK(0, "sub-check [%s=%s]: %s", family, variant, why);
        return 0;
    }
    if (!ok) {
        printf("  SKIP sub-check [%s=%s]: %s\n", family, variant, why);
        R.sub_skips++;
        return 0;
    }
    la_context_set_variant(R.ctx, family, variant);
    R.in_case_variant = 1;
    return 1;
}

int bo_check_dev(la_status s, const char *expr) {
    if (s == LA_OK) {
        bo_checks.passed++;
        return 1;
    }
    const char *msg = la_last_error();
    if (s == LA_ERR_UNSUPPORTED && !strncmp(msg, "variant:", 8)) {
        if (R.in_case_variant) {
            printf("  SKIP sub-check: %s\n", msg);
            R.sub_skips++;
            return 0;
        }
        if (R.cur && R.cur->o.variant) {
            snprintf(R.skip_reason, sizeof R.skip_reason, "%s", msg);
            longjmp(R.skip_jump, 1);
        }
    }
    CHECK(0, "%s -> %s: %s", expr, la_status_string(s), msg);
    return 0;
}

/* Runs a case; bo_check_dev jumps back here when the case's own variant
 * does not take its views. */
static void run_guarded(const bo_case *c) {
    if (!setjmp(R.skip_jump)) c->fn(c->arg);
}

/* ---- main -------------------------------------------------------------------------- */
static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

typedef struct table_sum {
    const char *table;
    int cases[5]; /* ok, fail, skip, known, listed */
    int checks_passed, checks_failed;
} table_sum;

enum { S_OK, S_FAIL, S_SKIP, S_KNOWN };
static const char *state_name[4] = {"ok", "FAIL", "SKIP", "KNOWN-FAIL"};

static void usage(void) {
    fprintf(stderr, "usage: test_backend_ops [-o OP] [-b cpu|cuda] [-n SUBSTR] [-x SUBSTR] "
                    "[--small] [--san] [--perf] [--list] [--shard I/N] [--shard-block I/N]\n");
}

/* the command line's case filters (-b, -n, -x, -o, --small, --san) */
typedef struct selection {
    int backend;
    const char *name_sub;
    const char *const *excl;
    int nexcl;
    const char *const *ops;
    int nops;
} selection;

static int selected(const bo_case *c, const selection *f) {
    if (f->backend && c->o.backend != f->backend) return 0;
    if (R.san ? !(c->san_pick || (R.small && c->o.small)) : R.small && !c->o.small) return 0;
    if (f->name_sub && !strstr(c->name, f->name_sub)) return 0;
    for (int i = 0; i < f->nexcl; i++)
        if (strstr(c->name, f->excl[i])) return 0;
    if (f->nops) {
        int hit = 0;
        for (int i = 0; i < f->nops; i++) hit |= !strcmp(f->ops[i], c->o.op);
        if (!hit) return 0;
    }
    return 1;
}

int main(int argc, char **argv) {
    const char *ops[32], *excl[32];
    int nops = 0, nexcl = 0, backend = 0, list = 0, shard = 0, nshards = 1, shard_block = 0;
    const char *name_sub = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-o") && i + 1 < argc) {
            if (nops < 32) ops[nops++] = argv[++i];
        } else if (!strcmp(a, "-b") && i + 1 < argc) {
            const char *b = argv[++i];
            if (!strcmp(b, "cpu")) backend = BO_CPU;
            else if (!strcmp(b, "cuda")) backend = BO_CUDA;
            else {
                fprintf(stderr, "test_backend_ops: -b: backend '%s' is not cpu or cuda\n", b);
                return 2;
            }
        } else if (!strcmp(a, "-n") && i + 1 < argc) {
            name_sub = argv[++i];
        } else if (!strcmp(a, "-x") && i + 1 < argc) {
            if (nexcl == 32) {
                fprintf(stderr, "test_backend_ops: -x: more than 32 exclusions\n");
                return 2;
            }
            excl[nexcl++] = argv[++i];
        } else if (!strcmp(a, "--small")) {
            R.small = 1;
        } else if (!strcmp(a, "--san")) {
            R.san = 1;
        } else if (!strcmp(a, "--perf")) {
            R.perf = 1;
        } else if (!strcmp(a, "--list")) {
            list = 1;
        } else if ((!strcmp(a, "--shard") || !strcmp(a, "--shard-block")) && i + 1 < argc) {
            shard_block = !strcmp(a, "--shard-block");
            if (sscanf(argv[++i], "%d/%d", &shard, &nshards) != 2 || nshards < 1 || shard < 0 ||
                shard >= nshards) {
                fprintf(stderr, "test_backend_ops: %s: '%s' is not I/N with 0 <= I < N\n", a,
                        argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "test_backend_ops: unknown argument '%s'\n", a);
            usage();
            return 2;
        }
    }
    la_rng seed_rng = la_test_rng("test_backend_ops");
    const uint64_t seed = seed_rng.s;
    int avail = 0;
    la_cuda_available(&avail);
    R.have_cuda = avail;
    printf("# CUDA device: %s%s\n", avail ? "yes" : "no (CUDA cases skipped)",
           la_test_built_with_cuda() ? "" : " (built without CUDA)");

    bo_list L = {0};
    R.L = &L;
#define BO_REGISTER(t) L.table = #t; cases_##t(&L);
    BO_TABLES(BO_REGISTER)
#undef BO_REGISTER

    int nkeys = 0, ncuda = 0, san_total = 0;
    if (R.san) {
        nkeys = san_select(&L);
        for (int ci = 0; ci < L.n; ci++) {
            ncuda += L.cases[ci].o.backend == BO_CUDA;
            san_total += L.cases[ci].san_pick;
        }
    }
    const selection sel = {backend, name_sub, excl, nexcl, ops, nops};
    int ntotal = 0; /* selected cases before sharding (--shard-block splits them in runs) */
    for (int ci = 0; ci < L.n; ci++) ntotal += selected(&L.cases[ci], &sel);
    table_sum sums[32];
    int nsums = 0, nselected = 0, san_run = 0;
    for (int ci = 0; ci < L.n; ci++) {
        bo_case *c = &L.cases[ci];
        if (!selected(c, &sel)) continue;
        const int pos = nselected++;
        if (shard_block ? (int)((int64_t)pos * nshards / (ntotal ? ntotal : 1)) != shard
                        : pos % nshards != shard)
            continue;
        san_run += c->san_pick;
        table_sum *ts = NULL;
        for (int i = 0; i < nsums; i++)
            if (!strcmp(sums[i].table, c->table)) ts = &sums[i];
        if (!ts) {
            ts = &sums[nsums++];
            memset(ts, 0, sizeof *ts);
            ts->table = c->table;
        }
        char label[BO_NAME_MAX + 80];
        if (c->o.variant)
            snprintf(label, sizeof label, "[%s %s %s=%s] %s", c->o.backend == BO_CUDA ? "cuda" : "cpu",
                     c->o.op, c->o.family, c->o.variant, c->name);
        else
            snprintf(label, sizeof label, "[%s %s] %s", c->o.backend == BO_CUDA ? "cuda" : "cpu",
                     c->o.op, c->name);
        if (list) {
            printf("%s%s%s\n", label, c->o.small ? " small" : "", c->san_pick ? " san" : "");
            ts->cases[4]++;
            continue;
        }
        R.cur = c;
        R.skip_reason[0] = 0;
        R.sub_skips = 0;
        int state;
        const char *why = NULL;
        double t0 = now_s(), dt = 0;
        if (c->o.backend == BO_CUDA && !R.have_cuda) {
            snprintf(R.skip_reason, sizeof R.skip_reason, "no CUDA device");
        }
        const int before_p = bo_checks.passed, before_f = bo_checks.failed;
        if (!R.skip_reason[0] && c->o.variant) {
            const int ok = variant_honoured(c->o.family, c->o.variant, &why);
            if (ok != 1) snprintf(R.skip_reason, sizeof R.skip_reason, "%s", why);
            if (ok < 0) CHECK(0, "[%s=%s]: %s", c->o.family, c->o.variant, why); /* a table bug fails */
        }
        if (!R.skip_reason[0]) {
            printf("# %s\n", label);
            fflush(stdout);
            la_context_create(&R.ctx);
            if (c->o.variant) la_context_set_variant(R.ctx, c->o.family, c->o.variant);
            bo_rng.s = seed ^ fnv1a(c->name) ^ (c->o.variant ? fnv1a(c->o.variant) : 0) ^
                       (uint64_t)c->repeat * 0x9e3779b97f4a7c15ull;
            R.in_case_variant = 0;
            run_guarded(c);
            if (R.have_cuda) la_dev_synchronize();
            la_context_destroy(R.ctx);
            R.ctx = NULL;
            dt = now_s() - t0;
        }
        const int dp = bo_checks.passed - before_p, df = bo_checks.failed - before_f;
        if (R.skip_reason[0] && df == 0) state = S_SKIP;
        else if (df && c->o.known_failure) {
            state = S_KNOWN;
            bo_checks.failed -= df; /* reported, not counted against the run */
        } else state = df ? S_FAIL : S_OK;
        ts->cases[state]++;
        ts->checks_passed += dp;
        ts->checks_failed += state == S_KNOWN ? 0 : df;
        if (state == S_SKIP) {
            printf("SKIP %s: %s\n", label, R.skip_reason);
        } else {
            printf("%s %s: %d checks, %d failed", state_name[state], label, dp + df, df);
            if (R.sub_skips) printf(", %d sub-checks skipped", R.sub_skips);
            if (state == S_KNOWN) printf(" (known failure: %s)", c->o.known_failure);
            else if (c->o.known_failure) printf(" (listed as a known failure: %s; passes now)",
                                                c->o.known_failure);
            if (R.perf) printf(" [%.3f ms]", dt * 1e3);
            printf("\n");
        }
        fflush(stdout);
    }
    printf("# summary per table: cases ok / FAIL / SKIP / KNOWN-FAIL, checks passed / failed\n");
    int tot[5] = {0};
    for (int i = 0; i < nsums; i++) {
        const table_sum *ts = &sums[i];
        if (list)
            printf("#   %-10s %d cases\n", ts->table, ts->cases[4]);
        else
            printf("#   %-10s %4d / %d / %d / %d   %6d / %d\n", ts->table, ts->cases[0],
                   ts->cases[1], ts->cases[2], ts->cases[3], ts->checks_passed, ts->checks_failed);
        for (int k = 0; k < 5; k++) tot[k] += ts->cases[k];
    }
    if (list) printf("# %d cases\n", tot[4]);
    else
        printf("# cases: %d ok, %d failed, %d skipped, %d known failures\n", tot[0], tot[1], tot[2],
               tot[3]);
    if (R.san)
        printf("# --san: %d cases here, one per kernel; the selection covers %d of the %d distinct "
               "kernels of the full table (%d CUDA cases)\n", san_run, san_total, nkeys, ncuda);
    free(L.cases);
    printf("%d passed, %d failed\n", bo_checks.passed, bo_checks.failed);
    return bo_checks.failed ? 1 : 0;
}
