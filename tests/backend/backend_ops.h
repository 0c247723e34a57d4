/* The backend-vs-reference test harness (tests/backend/test_backend_ops.c),
 * modelled on ggml's test-backend-ops: one binary, one list of cases, each
 * case op x shape x dtype x layout x kernel variant.
 *
 *   backend BO_CUDA  the CUDA path against the CPU path on the same inputs
 *                    (and, where the former tests did, against a float64
 *                    reference or another variant bit for bit);
 *   backend BO_CPU   the CPU path against a float64 reference.
 *
 * Every case gets fresh random inputs from its own generator, seeded with
 * the printed run seed and the case name (so `-o OP` or `-n NAME` replays a
 * case with the same inputs: LA_TEST_SEED=...). Outputs are poisoned (NaN)
 * before the call. A case runs under its own context; when it names a kernel
 * variant (family, variant), the harness forces it with
 * la_context_set_variant and first asks the family's probe whether the
 * library honours it: a family that ignores context variants, or a variant
 * the family rejects, makes the case SKIPPED with the reason, never passed.
 * A case with `known_failure` set reports its failed checks as KNOWN-FAIL
 * (with the reason) and does not fail the run.
 *
 * Adding a family (e.g. a new operator as cases_<family>.c): write
 * tests/backend/cases_<family>.c with
 *   - the case functions (`static void run_x(const void *arg)`: unpack a
 *     parameter struct, stage inputs -- bo_staging.h for host + device
 *     tensors, cpu_check.h for CPU views and the same-precision bound --,
 *     call the op with bo_ctx(), check with CHECK / CHECK_OK from
 *     tests/test_util.h; a device call under a forced variant goes through
 *     CHECK_DEV, and a comparison between variants inside one case forces
 *     the other with bo_use_variant);
 *   - `void cases_<family>(bo_list *L)` that adds the cases (bo_add, BO_ADD)
 *     and, if the family has kernel variants, its probe (bo_add_probe: the
 *     smallest CUDA call that goes through the family's kernel choice);
 * then add X(<family>) to BO_TABLES below (that declares and registers it).
 * The Makefile links every tests/backend/cases_*.c into the one binary. */
#ifndef LA_BACKEND_OPS_H
#define LA_BACKEND_OPS_H

#include <stdbool.h>
#include <stddef.h>

#include "test_util.h"

#include "core/devmem.h"
#include "core/internal.h"
#include "core/variant.h"

/* One counter pair for the whole binary (CHECK in test_util.h counts into
 * la_test_g; every translation unit of the harness shares this one). */
extern la_test_state bo_checks;
#define la_test_g bo_checks

/* The current case's generator (the former tests' `rng`). */
extern la_rng bo_rng;

enum { BO_CPU = 1, BO_CUDA = 2 };

typedef void (*bo_fn)(const void *arg);
/* A probe: one small CUDA call of the family under ctx (with the variant to
 * ask about already forced); returns the call's status. */
typedef la_status (*bo_probe_fn)(la_context *ctx);

#define BO_ARG_MAX 512
#define BO_NAME_MAX 240

typedef struct bo_opts {
    const char *op;            /* the operator (-o filter): "softmax", "dsa", ... */
    int backend;               /* BO_CUDA (vs the CPU path) or BO_CPU (vs float64) */
    int small;                 /* in the --small subset (memcheck runs it, with --san) */
    const char *family;        /* kernel-variant family forced for the case, or NULL */
    const char *variant;       /* its variant (NULL: the library's own choice) */
    const char *known_failure; /* reason, when the case is a known library bug */
} bo_opts;

typedef struct bo_case {
    bo_opts o;
    const char *table;         /* the case table (cases_<table>.c) */
    bo_fn fn;
    int repeat;                /* cases of the same name before this one (seeds differ) */
    const char *kernel;        /* the kernel path beyond op x variant x dtype (bo_set_kernel) */
    int san_rep;               /* marked as its kernel's --san representative (bo_mark_san) */
    int san_pick;              /* chosen for --san (set by the harness) */
    char name[BO_NAME_MAX];
    _Alignas(max_align_t) unsigned char arg[BO_ARG_MAX];
} bo_case;

typedef struct bo_probe {
    const char *family;
    bo_probe_fn fn;
} bo_probe;

typedef struct bo_list {
    bo_case *cases;
    int n, cap;
    bo_probe probes[32];
    int nprobes;
    const char *table;         /* set by the harness while a table registers */
} bo_list;

/* Adds a case: fn(arg copy) runs it; name (at most BO_NAME_MAX - 1 chars)
 * says what it is. Exits on an argument block over BO_ARG_MAX (a table bug). */
void bo_add(bo_list *L, const bo_opts *o, bo_fn fn, const void *arg, size_t arg_size,
            const char *name);
void bo_add_probe(bo_list *L, const char *family, bo_probe_fn fn);
/* the probe shared by families mhla_causal and mhla_causal_mix (cases_linear.c) */
la_status bo_probe_mhla_causal(la_context *ctx);
/* For --san (one case per distinct kernel, see test_backend_ops.c), about
 * the case added last: the kernel path it exercises beyond op x variant x
 * dtype (e.g. "D128 causal"; a static string; default: read from the name),
 * and that it is its kernel's representative (the smallest shape with >= 2
 * tiles along each tiled axis; default: chosen from the names). */
void bo_set_kernel(bo_list *L, const char *path);
void bo_mark_san(bo_list *L);

/* BO_ADD(L, opts, fn, T, field values...): a case whose argument is the
 * struct T built from the values in field order; its name is fn and the
 * values as written. */
#define BO_ADD(L, OPTS, FN, T, ...)                                                            \
    do {                                                                                       \
        const bo_opts bo_o_ = OPTS;                                                            \
        const T bo_a_ = {__VA_ARGS__};                                                         \
        bo_add((L), &bo_o_, (FN), &bo_a_, sizeof bo_a_, #FN "(" #__VA_ARGS__ ")");             \
    } while (0)

/* ---- for the case functions ------------------------------------------------ */
/* The context of the current case (its variant forced, if any). */
la_context *bo_ctx(void);
/* Whether the run is the --small subset. */
int bo_small(void);
/* Whether the run times cases (--perf). */
int bo_perf(void);
/* Force variant `variant` of `family` in the current case's context (NULL:
 * back to the case's own setting). Returns 1 when the library honours it;
 * else 0, after printing and counting one skipped sub-check with the reason:
 * the caller leaves that sub-check out. */
int bo_use_variant(const char *family, const char *variant);
/* The status of a device call, counted as one check: LA_OK passes. A
 * forced variant that does not take the call's views (LA_ERR_UNSUPPORTED,
 * message "variant: ...") is not a failure: forced by the case itself, the
 * case ends here as SKIPPED (a jump back into the harness: what the case
 * allocated so far is not freed); forced inside the case (bo_use_variant),
 * one skipped sub-check is counted and 0 returned, and the caller leaves
 * that sub-check out. Any other status fails the check; returns 0. */
int bo_check_dev(la_status s, const char *expr);
#define CHECK_DEV(expr) bo_check_dev((expr), #expr)
/* Mark the current case SKIPPED with a reason (the caller returns). */
void bo_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Whether a CUDA device is present. */
int bo_have_cuda(void);

/* ---- the case tables ----------------------------------------------------------
 * One function per cases_<table>.c; the harness calls them in this order. */
#define BO_TABLES(X)                                                                           \
    X(cpu)                                                                                     \
    X(cpu_sparse)                                                                              \
    X(softmax)                                                                                 \
    X(linear)                                                                                  \
    X(causal)                                                                                  \
    X(decode)                                                                                  \
    X(focused)                                                                                 \
    X(f16tc)                                                                                   \
    X(sparse)                                                                                  \
    X(topk_short)                                                                              \
    X(smla)                                                                                    \
    X(dsa_fp8)                                                                                 \
    X(dsa_epi)                                                                                 \
    X(nan)                                                                                     \
    X(paged)                                                                                   \
    X(paged_meta)                                                                              \
    X(smla_paged)                                                                              \
    X(backward_lin)                                                                            \
    X(backward_attn)                                                                           \
    X(backward_focused)
#define BO_DECLARE(t) void cases_##t(bo_list *L);
BO_TABLES(BO_DECLARE)
#undef BO_DECLARE

#endif
