/* Paged indexer key cache (docs/SPARSE.md "Paged serving"): the cache
 * object, the e4m3 conversions and the CPU drivers of the batched paged
 * indexers. The public entry points (src/ops/paged_index.c) validate every
 * argument, then call these. Internal, not installed. */
#ifndef LA_PAGED_INDEX_CPU_H
#define LA_PAGED_INDEX_CPU_H

#include <math.h>
#include <stdint.h>

#include "core/internal.h"
#include "cpu/sparse_cpu.h"

#ifdef __cplusplus
extern "C" {
#endif

struct la_paged_index_cache {
    la_paged_cache_params p; /* defaults resolved                              */
    int64_t elt;             /* bytes per key value (1, 2 or 4)                 */
    int64_t page_bytes;      /* page_size·dI·elt (+ page_size·4 scales for fp8) */
    unsigned char *pages;    /* num_pages·page_bytes, on p.device               */
    int64_t max_blocks;      /* pooled blocks per sequence                      */
    float *psum;             /* [max_seqs][max_blocks][dI] pooled running sums  */
    int32_t *pcount;         /* [max_seqs][max_blocks] tokens in each sum       */
    float e4m3[256];         /* la_e4m3_to_f32 of every byte (decode table)     */
    /* CUDA caches: the device copy of pcount (kept by the append's pooling
     * kernel, checked by the paged calls) and the status of the paged calls'
     * device-side checks (LA_PG_STATUS_WORDS int32: kinds found, then the
     * first error's kind and values), and a word of mapped pinned host
     * memory that the checking kernel itself sets nonzero with an error
     * (status_host; status_mirror its device address), so a call adds no
     * copy to the stream (docs/CUDA.md "Paged indexers") */
    int32_t *pcount_dev;
    int32_t *status_dev;
    int32_t *status_host;
    int32_t *status_mirror;
};

/* Errors that the CUDA paged calls find on the device in the values of
 * block_table / context_lens / q_seq (bits of status word 0; word 1 the
 * first one's kind, words 2..5 its values a, b, v, x). */
enum {
    LA_PG_BAD_PAGE = 1, /* block_table[a][b] = v outside the pages 0..x-1            */
    LA_PG_BAD_LEN = 2,  /* context_lens[a] = v negative or over x (table capacity)   */
    LA_PG_BAD_QSEQ = 4, /* q_seq[a] = v outside the block table's rows 0..x-1        */
    LA_PG_BAD_POOL = 8, /* sequence a of v tokens: block b holds x pooled tokens
                         * (b = -1: v over the pooled max_seq_len x)                 */
    LA_PG_STATUS_WORDS = 8
};

/* OCP e4m3 (fn): bias 7, 3 mantissa bits, largest finite 448, no infinity. */
static inline float la_e4m3_to_f32(uint8_t b) {
    const int e = (b >> 3) & 15, m = b & 7;
    float v;
    if (e == 0) v = ldexpf((float)m, -9);
    else if (e == 15 && m == 7) v = NAN;
    else v = ldexpf(1.f + (float)m / 8.f, e - 7);
    return (b & 0x80) ? -v : v;
}
/* Round to nearest even, saturating at ±448 (x finite). */
static inline uint8_t la_f32_to_e4m3(float x) {
    const uint8_t sign = signbit(x) ? 0x80 : 0;
    const float a = fabsf(x);
    if (a >= 448.f) return sign | 0x7E;
    if (a < 0.015625f) { /* below the smallest normal 2^-6: multiples of 2^-9 */
        const int m = (int)nearbyintf(ldexpf(a, 9)); /* 0..8; 8 is the smallest normal */
        return sign | (uint8_t)m;
    }
    int E;
    const float f = frexpf(a, &E);  /* a = f·2^E, f in [0.5, 1) */
    int e = E - 1 + 7;              /* biased exponent of a = (2f)·2^(E-1) */
    int m = (int)nearbyintf((2.f * f - 1.f) * 8.f);
    if (m == 8) {
        m = 0;
        e++;
    }
    if (e > 15 || (e == 15 && m == 7)) return sign | 0x7E;
    return sign | (uint8_t)(e << 3 | m);
}

/* Quantize (fp8) or round (bf16) or copy (f32) one key row of dI floats
 * into slot `slot` of host pages; writes the stored values, as floats, to
 * stored[dI]. */
void la_paged_store_row(struct la_paged_index_cache *c, int64_t slot, const float *row,
                        float *stored);
/* The stored (dequantized) key of slot `slot` into dst[dI] (host pages). */
void la_paged_load_row(const struct la_paged_index_cache *c, int64_t slot, float *dst);

/* One sequence of a paged indexer call, resolved by the entry point. */
typedef struct la_paged_seq {
    int64_t len;           /* context_len                                 */
    const int32_t *pages;  /* its block-table row (len/page_size pages +) */
    int64_t nq;            /* its query rows                              */
    const int64_t *rows;   /* [nq] query rows of q in order (query j)     */
} la_paged_seq;

/* DSA (hisa = 0) or HISA (hisa = 1) over nseq sequences: gathers each
 * sequence's keys, runs la_dsa_cpu / la_hisa_cpu with ranges [0, len − nq
 * + j + 1) and writes idx rows (positions or slots). HISA uses the pooled
 * sums of sequence s when the cache keeps them (max_seqs > 0). */
la_status la_paged_topk_cpu(const struct la_paged_index_cache *c, const la_index_params *p,
                            int hisa, const la_tensor *q, const la_tensor *w,
                            const la_paged_seq *seqs, int64_t nseq, int return_slots,
                            la_tensor *idx, la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
