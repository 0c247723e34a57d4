/* MHLA on the CPU (SPEC §5): internal interface between src/ops/mhla.c (which
 * validates every view and option) and src/cpu/mhla_*_cpu.c (which compute;
 * their shared pieces are in mhla_cpu_impl.h).
 *
 * The decoding state stores each summary "augmented", the d×(dv+1) matrix
 * [S_b | z_b], so that one product with [v | 1] updates S and z together and
 * one product q̃ᵀ[S̃ | z̃] gives numerator and per_query denominator. (The
 * forward passes keep S and z apart: OpenBLAS is slower on the odd dv+1
 * width.) */
#ifndef LA_MHLA_CPU_H
#define LA_MHLA_CPU_H

#include "core/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Token grid and block grid, always as rank 3 (leading axes of size 1 for
 * 1-D and 2-D grids). Block coordinate β on axis a covers the token
 * coordinates [lo(β), lo(β+1)) with lo(β) = ceil(β·n_a/g_a): exactly the
 * tokens with ⌊c·g_a/n_a⌋ = β. */
typedef struct la_mhla_geom {
    int64_t n[3];       /* token grid (T, Hm, Wm)               */
    int64_t g[3];       /* block grid (gt, gh, gw), 1 <= g <= n */
    int64_t M;          /* number of blocks gt·gh·gw            */
    int64_t N;          /* number of tokens T·Hm·Wm             */
    int64_t max_block;  /* tokens in the largest block          */
    int equal_blocks;   /* every n_a divisible by g_a           */
} la_mhla_geom;

/* First token coordinate of block coordinate beta on an axis of n tokens
 * and g blocks. */
static inline int64_t la_mhla_block_lo(int64_t beta, int64_t n, int64_t g) {
    return (beta * n + g - 1) / g;
}

/* Fill geom from a validated (ndim, grid, blocks); grid entries > 0 and
 * 1 <= blocks <= grid. */
void la_mhla_geom_init(la_mhla_geom *geom, int ndim, const int64_t *grid,
                       const int64_t *blocks);

/* Non-causal forward (SPEC §5.2). Views validated: q,k [B,N,H,D],
 * v,out [B,N,H,Dv], mixing [M,M] or [H,M,M]; p->normalize released_vision
 * only with geom->equal_blocks. */
la_status la_mhla_forward_cpu(const la_mhla_params *p, const la_mhla_geom *geom,
                              const la_tensor *q, const la_tensor *k, const la_tensor *v,
                              const la_tensor *mixing, la_tensor *out, la_context *ctx);

/* Whether la_mhla_forward_cpu runs these views through its AVX-512 kernels
 * (f32 q, k, v with unit-stride rows, φ relu/relu_eps/relu1/identity, a
 * build with AVX-512). Non-causal linear attention uses them too: it is MHLA
 * with W = all ones. */
int la_mhla_fast_ok(la_feature f, const la_tensor *q, const la_tensor *k, const la_tensor *v);

/* Causal chunkwise forward (SPEC §5.4). p->scale_q already resolved (> 0 or
 * given), p->chunk >= 1, mixing at least ceil(N/chunk) square. */
la_status la_mhla_causal_forward_cpu(const la_mhla_causal_params *p, const la_tensor *q,
                                     const la_tensor *k, const la_tensor *v,
                                     const la_tensor *mixing, la_tensor *out,
                                     la_context *ctx);

/* Decoding state (opaque in the public header). Per (batch, head):
 *   S    [M, D, Dv+1]  finished block summaries [S_b | z_b], b < len/C
 *   P    [D, Dv+1]     the open block's running summary
 *   mix  [D, Dv+1]     Σ_{b<i} W[i,b] [S_b | z_b] for the open block i,
 *                      formed once when block i starts: O(i·d·dv), or
 *                      O(d·dv) from the running total T when row i of W is
 *                      constant below the diagonal (uniform_causal).
 * The open block i = ⌊(len−1)/C⌋ (none when len = 0). When len is a
 * multiple of C the open block is full; it moves into S when the next token
 * arrives. */
struct la_mhla_state {
    la_mhla_causal_params p;  /* resolved: scale_q > 0                 */
    int64_t B, H, D, Dv, M;
    int64_t Hw;               /* 1 (shared mixing) or H (per head)     */
    float *W;                 /* [Hw, M, M] copy of the mixing         */
    int64_t len;              /* tokens appended so far                */
    float *S;                 /* [B, H, M, D, Dv+1]                    */
    float *P;                 /* [B, H, D, Dv+1]                       */
    float *mix;               /* [B, H, D, Dv+1]                       */
    float *T;                 /* [B, H, D, Dv+1] Σ of the finished S_b */
    unsigned char *row_const; /* [Hw, M]: W[i,b] equal for all b < i,
                                 so mix_i = W[i,0]·T (uniform_causal) */
};

/* Append n tokens (views validated, len + n <= M·C checked). */
la_status la_mhla_state_append_cpu(la_mhla_state *st, const la_tensor *q, const la_tensor *k,
                                   const la_tensor *v, la_tensor *out, la_context *ctx);

#ifdef __cplusplus
}
#endif
#endif
