/* Synthetic long-context indexer inputs with the structure HISA relies on
 * (cli/eval_index.c; used by `longattn eval-index` and the sparse demo).
 * The generative model is documented in docs/EVAL_INDEX.md. */
#ifndef LA_EVAL_INDEX_H
#define LA_EVAL_INDEX_H

#include <stdint.h>

typedef struct cli_evgen_cfg {
    int64_t L, HI, dI;
    int ntopics;                /* topic pool P (default 32)                         */
    int64_t span_min, span_max; /* span lengths, uniform (default 128 .. 2048)       */
    int attend;                 /* topics each query attends to (default 2)          */
    float alpha;                /* topic strength in a key (default 1)              */
    float sigma_k, sigma_q;     /* key / query noise norms (default 0.7 / 0.5)       */
    float beta, gamma;          /* needle key norm / needle share of each head (2, 1) */
    int ndepth;                 /* needle depths 0..100% (default 11)                */
    int reps;                   /* queries per (depth, kind) (default 3)             */
    uint64_t seed;
} cli_evgen_cfg;

enum { LA_NEEDLE_SPAN = 0, LA_NEEDLE_ISOLATED = 1, LA_NEEDLE_KINDS = 2 };

typedef struct cli_evgen {
    int64_t T;          /* ndepth * kinds * reps queries, bottom-right causal */
    float *q, *k, *w;   /* [T,HI,dI], [L,dI], [T,HI] */
    int64_t *needle;    /* [T] needle position of each query */
    int *depth_i;       /* [T] depth index (depth = depth_i / (ndepth-1)) */
    int *kind;          /* [T] LA_NEEDLE_SPAN or LA_NEEDLE_ISOLATED */
} cli_evgen;

void cli_evgen_defaults(cli_evgen_cfg *c);
/* 0 on success, 2 on bad configuration / out of memory (message printed). */
int cli_evgen_make(const cli_evgen_cfg *c, cli_evgen *g);
void cli_evgen_free(cli_evgen *g);

/* |A ∩ B| / |A ∪ B| and |A ∩ B| / min(k, n_valid) of two index rows (−1 =
 * empty), as in SPEC §9 (selection quality); L bounds the indices. */
void cli_index_overlap(const int32_t *a, const int32_t *ref, int64_t k, int64_t n_valid, int64_t L,
                      unsigned char *scratch, double *iou, double *recall);

#endif
