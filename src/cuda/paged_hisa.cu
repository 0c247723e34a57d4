/* HISA's block stage on the paged index-key cache (paged_hisa.cuh), SPEC §7
 * steps 1-2 for la_paged_topk_cuda (paged_index.cu).
 *
 * Why: the classic chain (means kernel, generic fp32 score kernel with one
 * thread per block reading q from shared memory for every FMA, la_topk over
 * rows of ~1K blocks, a one-thread-per-row insertion sort) spent most of a
 * decode call on these short rows. Here (the block top-k that follows them:
 * paged_hisa_topk.cu):
 *
 * ph_block_scores_kernel<R, W, TK, GD>: an SGEMM-shaped tile per CTA: R query rows
 *   of one sequence (64R (row, head) pairs) x 128 blocks, 8 x 8 outputs per
 *   thread, d in chunks of 16 through a cp.async ring (the next chunks in
 *   flight during this one's FMAs), q as floats in shared memory for all
 *   the CTA's tiles, W CTAs per SM. A chunk lands as the sequence's block
 *   rows ([block][d], 64 contiguous bytes a block: the pooled sums or the
 *   means as stored); each thread turns the items it copied into means
 *   (sum / count, pg_means_kernel's division: an exact IEEE quotient, so
 *   the same bits in any kernel) and, after a barrier, writes them back
 *   transposed [d][block] for the FMA loop: no separate means pass writing
 *   and re-reading the means. TK (PH_TK_ROWS+ rows a sequence: prefill,
 *   whose CTAs each read all of their sequence's chunks): the chunks of
 *   ph_means_t_kernel's transposed means instead, formed once per call. Each (row, head, block) sum runs over d
 *   ascending with fmaf from 0 (the CPU kernel's per-head dot product, bit
 *   for bit). The ReLU'd sums then go through the ring and one thread per
 *   (row, block) folds the heads in ascending order (fmaf from 0). First /
 *   last block of the row's range +inf, blocks past it -inf, as
 *   pg_score_kernel's PG_BLOCKS mode. A pair of rows of two sequences runs
 *   one pass per row. Decode (R 1, one tile per CTA): W 4, so that a grid
 *   of 512 tiles (64 sequences of 128K) is one wave of 528 slots. A chunk
 *   that fills its 16 d runs its FMAs as one block (no guard per d step:
 *   the compiler issues each step's shared loads during the previous
 *   step's FMAs); GD keeps the guarded loop (variant "fused_guarded", and
 *   the two-row tiles, where the unguarded block spills at 128 registers).
 *   The one-row tile at W 4 (not GD) also fixes each thread's items once a
 *   tile (two blocks: their divisions, their copy offsets) and decodes e4m3
 *   q four bytes at a time (ph_e4m3x4), so that its instructions are
 *   mostly the FMAs. */
#include "cuda/paged_hisa.cuh"
#include "cuda/ptx.cuh"
#include "cuda/select.cuh"

/* The default of family "paged_hisa": true runs "fused" where it applies.
 * (false: "classic", the chain before it; "fused" stays forceable.) */
constexpr bool kPagedHisaFused = true;

namespace {

__device__ __forceinline__ float *ph_smem() {
    extern __shared__ __align__(16) float ph_sm[];
    return ph_sm;
}
/* cp.async of four floats (the emulator: a plain copy, commit / wait no-ops) */
__device__ __forceinline__ void ph_cp16(float *dst, const float *src) { la_cp16(dst, src); }
__device__ __forceinline__ void ph_cp_commit() { la_cp_commit(); }
template <int N> __device__ __forceinline__ void ph_cp_wait() { la_cp_wait<N>(); }
/* programmatic dependent launch (la_pdl_*; no-ops in the emulator): let the
 * call's next kernel be scheduled; wait for the previous one */
__device__ __forceinline__ void ph_pdl_launch() { la_pdl_launch_dependents(); }
__device__ __forceinline__ void ph_pdl_wait() { la_pdl_wait(); }

/* ---- kernel text (dev/emu_paged_hisa.sh cuts it between the markers) ---- */
/* PH_KERNELS_BEGIN */
/* A ring slot (PH_CHUNK floats): a chunk lands as the block rows (ph_land)
 * and is rewritten in place as the means [PH_KC][PH_KS] (rows padded by 4
 * floats: the transposing stores are conflict-free), PH_ITEMS 16-byte items
 * (4 d of a block) a chunk; or (two-row tiles) lands as [PH_KC][PH_KS] from
 * the transposed means. */
enum {
    PH_HI = 64, PH_DI = 128, PH_NB = 128, PH_KC = 16, PH_LD = PH_NB + 4, PH_KS = PH_NB + 4,
    PH_CHUNK = PH_KC * PH_KS, PH_ITEMS = PH_NB * PH_KC / 4, PH_MT = 256, PH_MB = 32,
    PH_TK_ROWS = 16 /* query rows per sequence from which two-row tiles read the transposed-means pass */
};
/* The score kernel's tile for R query rows, W CTAs per SM (sm_90):
 * ROWS = 64R (row, head) pairs x PH_NB blocks, NT = 128R threads of 8 x 8
 * outputs. Shared floats: w [R][PH_HI]; q [PH_DI][ROWS] (all of d, as
 * floats); a ring of ST chunk slots, reused between tiles by the fold as
 * the ReLU'd sums of HS heads [R][HS][PH_LD] (rows padded by 4 floats), NS
 * steps of HS heads. W 4 (R 1): a ring of 2 slots (one chunk in flight
 * during another's FMAs) and the heads folded in 2 steps, so that four
 * CTAs' shared memory fit an SM, and at most 128 registers. TK (two rows,
 * many a sequence: prefill): the means pass's transposed means (kt) copied
 * as they are. Every CTA of a sequence's rows reads each chunk: transposing
 * it in each (~6% of the FMA loop's issue, and a barrier) would cost more
 * than the pass from ~16 rows a sequence. */
template <int R, int W, bool TK> struct ph_tile {
    static constexpr int ROWS = 64 * R, NT = 128 * R, CI = PH_ITEMS / NT;
    static constexpr int ST = W == 4 ? 2 : 5, NS = R == 1 && W == 3 ? 1 : 2, HS = PH_HI / NS;
    static constexpr int SMEM_FLOATS = R * PH_HI + PH_DI * ROWS + ST * PH_CHUNK;
    static_assert(R * HS * PH_LD <= ST * PH_CHUNK, "the fold's sums fit in the ring");
    static_assert(CI * NT == PH_ITEMS, "every item of a chunk has one thread");
};

__device__ __forceinline__ float ph_e4m3(unsigned b) {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) v = (float)m * 0.001953125f; /* m·2^-9 */
    else if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
    else v = __int_as_float((int)(((e + 120u) << 23) | (m << 20)));
    return (b & 0x80u) ? -v : v;
}

/* The four e4m3 bytes of v (byte c in o[c]) as ph_e4m3's floats (NaN:
 * some NaN, which the score's fmaf turns into its own). sm_89+ converts
 * pairs to f16 and those to f32 (both exact: every e4m3 value is an f16).
 * Elsewhere (and in the emulator) without branches: a byte's magnitude
 * bits moved to a float's exponent and mantissa fields, (e << 23) |
 * (m << 20), are 2^(e-127)·(1 + m/8) (e > 0) or m·2^-129 (e = 0, a
 * subnormal), so the exact product by 2^120 is the e4m3 value either way;
 * sign from bit 7, 0x7f the NaN. */
__device__ __forceinline__ void ph_e4m3x4(uint32_t v, float *o) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
    uint32_t h01, h23;
    asm("{.reg .b16 lo, hi;\n\tmov.b32 {lo, hi}, %2;\n\tcvt.rn.f16x2.e4m3x2 %0, lo;\n\tcvt.rn.f16x2.e4m3x2 %1, hi;}"
        : "=r"(h01), "=r"(h23) : "r"(v));
    asm("{.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;}" : "=f"(o[0]), "=f"(o[1]) : "r"(h01));
    asm("{.reg .b16 a, b;\n\tmov.b32 {a, b}, %2;\n\tcvt.f32.f16 %0, a;\n\tcvt.f32.f16 %1, b;}" : "=f"(o[2]), "=f"(o[3]) : "r"(h23));
#else
#pragma unroll
    for (int c = 0; c < 4; c++) {
        const uint32_t b = (v >> (8 * c)) & 255u, mag = b & 0x7fu, sign = (b & 0x80u) << 24;
        const float x = __int_as_float((int)(sign | (mag << 20))) * 0x1p120f;
        o[c] = mag == 0x7fu ? __int_as_float((int)(sign | 0x7fc00000u)) : x;
    }
#endif
}

/* shared floats of the means kernel: a tile [PH_MB][PH_DI + 1] */
enum { PH_MEANS_SMEM_FLOATS = PH_MB * (PH_DI + 1) };
/* The means of the PH_MB blocks of tile x of sequence y, transposed into
 * kt [nseq][dI][ldk]: sum / count (pg_means_kernel's division) from the
 * pooled sums, or the precomputed means; 0 past the sequence's blocks.
 * Tiles past the sequence are not written (the score kernel reads them but
 * its columns there are -inf whatever they hold). Each thread's loads are
 * issued together (one DRAM latency per CTA). */
__global__ void __launch_bounds__(PH_MT) ph_means_t_kernel(ph_blk_args a) {
    float *tile = ph_smem();
    constexpr int PER = PH_MB * PH_DI / PH_MT, LD = PH_DI + 1;
    const int tid = threadIdx.x, dI = a.dI;
    const int64_t s = blockIdx.y, b0 = (int64_t)blockIdx.x * PH_MB, L = a.lens[s], B = a.B;
    if (b0 * B >= L) return;
    const float *src = a.psum ? a.psum + s * a.max_blocks * dI : a.kbar + s * a.nbmax * dI;
    float v[PER];
#pragma unroll
    for (int e = 0; e < PER; e++) {
        const int i = tid + e * PH_MT, j = i / PH_DI, d = i % PH_DI;
        const int64_t b = b0 + j;
        const bool ok = b * B < L && b < a.nbmax && d < dI; /* a block of at least one token */
        v[e] = ok ? src[b * dI + d] : 0.f;
    }
#pragma unroll
    for (int e = 0; e < PER; e++) {
        const int i = tid + e * PH_MT, j = i / PH_DI, d = i % PH_DI;
        const int64_t b = b0 + j;
        if (a.psum && b * B < L) v[e] = v[e] / (float)(L - b * B < B ? L - b * B : B);
        tile[j * LD + d] = v[e];
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; e++) {
        const int i = tid + e * PH_MT, d = i / PH_MB, j = i % PH_MB;
        if (d < dI) a.kt[(s * dI + d) * a.ldk + b0 + j] = tile[j * LD + d];
    }
}

/* q of rows [t0, t0 + nr) as floats [d][row], the element type a constant
 * (the loads of a batch issued together); lanes along the rows */
template <int R, int DT> __device__ __forceinline__ void ph_load_q(const ph_blk_args &a, int64_t t0, int nr, float *qs) {
    constexpr int ROWS = 64 * R, NT = 128 * R, PER = PH_DI * ROWS / NT, BATCH = 16;
    const int tid = threadIdx.x;
#pragma unroll 1
    for (int e0 = 0; e0 < PER; e0 += BATCH) {
        float v[BATCH];
#pragma unroll
        for (int u = 0; u < BATCH; u++) {
            const int i = tid + (e0 + u) * NT, r = i % ROWS, d = i / ROWS, h = r % PH_HI;
            const int64_t t = t0 + r / PH_HI, off = t * a.q.nb[0] + h * a.q.nb[1] + d * a.q.nb[2];
            const bool ok = t < t0 + nr && h < a.HI && d < a.dI;
            v[u] = !ok ? 0.f : DT == LA_FP8_E4M3 ? ph_e4m3(((const unsigned char *)a.q.data)[off]) : la_cu_ld(a.q.data, DT, off);
        }
#pragma unroll
        for (int u = 0; u < BATCH; u++) qs[tid + (e0 + u) * NT] = v[u];
    }
}

/* The same for e4m3 q with d contiguous and 4-byte aligned rows: four
 * elements a load, all of a thread's loads in one batch. FAST: one row
 * pointer a thread (NT = 2 ROWS: a thread's items are one (row, head), d
 * groups g0 + 2u) and ph_e4m3x4's decode. */
template <int R, bool FAST = false> __device__ __forceinline__ void ph_load_q8x4(const ph_blk_args &a, int64_t t0, int nr, float *qs) {
    constexpr int ROWS = 64 * R, NT = 128 * R, PER = PH_DI / 4 * ROWS / NT;
    static_assert(NT == 2 * ROWS, "a thread's items share a row");
    const int tid = threadIdx.x;
    const unsigned char *q = (const unsigned char *)a.q.data;
    uint32_t v[PER];
    if constexpr (FAST) {
        const int r = tid % ROWS, g0 = tid / ROWS, h = r % PH_HI;
        const int64_t t = t0 + r / PH_HI;
        const bool ok = t < t0 + nr && h < a.HI;
        const uint32_t *row = (const uint32_t *)(q + (ok ? t * a.q.nb[0] + h * a.q.nb[1] : 0));
#pragma unroll
        for (int u = 0; u < PER; u++) v[u] = ok && 4 * (g0 + 2 * u) < a.dI ? row[g0 + 2 * u] : 0u;
    } else {
#pragma unroll
        for (int u = 0; u < PER; u++) {
            const int i = tid + u * NT, r = i % ROWS, g = i / ROWS, h = r % PH_HI;
            const int64_t t = t0 + r / PH_HI;
            v[u] = t < t0 + nr && h < a.HI && 4 * g < a.dI ? *(const uint32_t *)(q + t * a.q.nb[0] + h * a.q.nb[1] + 4 * g) : 0u;
        }
    }
#pragma unroll
    for (int u = 0; u < PER; u++) {
        const int i = tid + u * NT, r = i % ROWS, g = i / ROWS;
        float f[4];
        if (FAST) ph_e4m3x4(v[u], f);
#pragma unroll
        for (int c = 0; c < 4; c++) qs[(4 * g + c) * ROWS + r] = FAST ? f[c] : ph_e4m3((v[u] >> (8 * c)) & 255u);
    }
}

/* One sequence's block rows as the score kernel reads them: p [rows][dI]
 * (the pooled sums, div: the mean is sum / the block's token count, or the
 * means), blocks [0, nvalid) read: those meeting the pass's row ranges
 * (nbp; a range ends at most at the length L, so each has a token), inside
 * the buffer. L is needed only by the division, after the q load: the
 * first copies wait for no load of it. vec: 16-byte aligned rows
 * (cp.async), else plain loads. 32-bit indices (the launch bounds the
 * blocks; a sequence's length is int32). */
struct ph_src {
    const float *p;
    int nvalid, L;
};
/* the kernel-wide rest (parameters, no registers): div, vec */
__device__ __forceinline__ bool ph_div(const ph_blk_args &a) { return a.psum != nullptr; }
__device__ __forceinline__ bool ph_vec(const ph_blk_args &a) {
    return a.dI % 4 == 0 && ((uintptr_t)(a.psum ? a.psum : a.kbar) & 15) == 0;
}
__device__ __forceinline__ ph_src ph_src_of(const ph_blk_args &a, int64_t seq, int nbp, int Lrow) {
    ph_src S;
    S.L = a.cl ? Lrow : a.lens[seq]; /* derived (ph_row_of) or the metadata's */
    S.p = a.psum ? a.psum + seq * a.max_blocks * a.dI : a.kbar + seq * a.nbmax * a.dI;
    const int64_t rows = a.psum ? a.max_blocks : a.nbmax;
    S.nvalid = (int)(nbp < rows ? nbp : rows);
    return S;
}
/* Row t's sequence, range end and (derived rows only) length. With a.cl
 * (family "paged_meta_overlap": rows next_n consecutive ones a sequence)
 * derived from context_lens as pg_meta_kernel derives them, so the same
 * values bit for bit: sequence t / next_n, row j = t % next_n of it, L =
 * context_lens clamped to [0, cap] and then to lenmax, end = max(0, L -
 * next_n + j + 1). The kernel reads nothing else of the metadata: the
 * block rows are indexed by the sequence (ph_src_of: psum + seq ·
 * max_blocks · dI; ph_issue_* read S.p + block · dI + d), not through the
 * page table, and q / w by the row. Garbage lengths stay in bounds: L <=
 * lenmax <= max_blocks · B (the pooled sums' rows: lenmax is at most the
 * cache's max_seq_len, max_blocks its blocks), so the blocks read (those
 * below ceil(end / B), and below nvalid <= max_blocks) are inside the
 * sequence's sums, and end <= cap keeps the columns below nbmax; the
 * metadata kernel reports the bad values (its status word). Else from
 * row_seq / row_end (L then read by ph_src_of, after the q load). */
struct ph_row {
    int seq, end, L;
};
__device__ __forceinline__ ph_row ph_row_of(const ph_blk_args &a, int64_t t) {
    ph_row r;
    if (a.cl) {
        const int64_t s = t / a.next_n, j = t - s * a.next_n;
        int64_t L = a.cl[s * a.cl0];
        if (L < 0 || L > a.cap) L = L < 0 ? 0 : a.cap;
        if (L > a.lenmax) L = a.lenmax;
        const int64_t e = L - a.next_n + j + 1;
        r.seq = (int)s;
        r.end = (int)(e < 0 ? 0 : e);
        r.L = (int)L;
    } else {
        r.seq = a.row_seq[t];
        r.end = a.row_end[t];
        r.L = 0;
    }
    return r;
}

/* Item i of a chunk (PH_ITEMS of them: 4 d of one block): block j, quarter
 * dq. Consecutive threads take the two halves (32 bytes, a sector) of a
 * block's 64 bytes, a warp 16 blocks; items [0, PH_ITEMS / 2) are the
 * quarters 0-1, the rest 2-3. */
__device__ __forceinline__ void ph_item(int i, int &j, int &dq) {
    const int h = i / (2 * PH_NB), r = i % (2 * PH_NB);
    j = r / 2;
    dq = 2 * h + r % 2;
}
/* where item (j, dq) lands in its slot: quarters 0-1 as [j][8] from 0,
 * quarters 2-3 from PH_LH, past the transposed rows 0-7 (8 PH_KS floats),
 * so that a CTA can transpose the two halves one after the other; 8 lanes'
 * 16-byte copies and reads meet 8 distinct bank groups */
enum { PH_LH = 8 * PH_KS + 32 };
static_assert(PH_LH % 32 == 0 && PH_LH + PH_NB * 8 <= PH_CHUNK, "the landing halves fit a slot");
__device__ __forceinline__ int ph_land(int j, int dq) { return (dq >> 1) * PH_LH + j * 8 + 4 * (dq & 1); }

/* chunk c of a tile (d in [16c, 16c + 16), blocks [b0, b0 + 128) of S)
 * into its ring slot: 16-byte copies, or plain loads (0 past dI); items of
 * blocks not present not copied. One commit group per call. */
template <int NT, int ST>
__device__ __forceinline__ void ph_issue_chunk(const ph_blk_args &a, float *ring, const ph_src &S, int b0, int c, int nch) {
    const int dI = a.dI;
    if (c < nch) {
        float *slot = ring + (c % ST) * PH_CHUNK;
#pragma unroll
        for (int e = 0; e < PH_ITEMS / NT; e++) {
            int j, dq;
            ph_item(threadIdx.x + e * NT, j, dq);
            const int d = c * PH_KC + 4 * dq, b = b0 + j;
            if (b < S.nvalid && d < dI) {
                const float *src = S.p + b * dI + d;
                float *dst = slot + ph_land(j, dq);
                if (ph_vec(a)) ph_cp16(dst, src);
                else
                    for (int u = 0; u < 4; u++) dst[u] = d + u < dI ? src[u] : 0.f;
            }
        }
    }
    ph_cp_commit();
}

/* ph_issue_chunk for the one-row tile (NT 128: items e and e + 2 are the
 * quarters dq and dq + 2 of one block) from what a tile fixes: off[e] (e <
 * 2) the item's first float in S.p, chunk 0 (b·dI + 4dq), f[e] != 0 where
 * its block is copied (ph_scales); the same copies. */
template <int ST>
__device__ __forceinline__ void ph_issue_items(const ph_blk_args &a, float *ring, const float *p, const int *off, const float *f, int c, int nch) {
    const int dI = a.dI;
    if (c < nch) {
        float *slot = ring + (c % ST) * PH_CHUNK;
        const float *cp = p + c * PH_KC; /* the chunk's first column */
        if (ph_vec(a)) { /* uniform: one test a chunk */
#pragma unroll
            for (int e = 0; e < PH_ITEMS / 128; e++) {
                int j, dq;
                ph_item(threadIdx.x + e * 128, j, dq);
                if (f[e % 2] != 0.f && c * PH_KC + 4 * dq < dI) ph_cp16(slot + ph_land(j, dq), cp + off[e % 2] + (e / 2) * 8);
            }
        } else {
#pragma unroll
            for (int e = 0; e < PH_ITEMS / 128; e++) {
                int j, dq;
                ph_item(threadIdx.x + e * 128, j, dq);
                const int d = c * PH_KC + 4 * dq;
                if (f[e % 2] != 0.f && d < dI) {
                    const float *sp = cp + off[e % 2] + (e / 2) * 8;
                    float *dst = slot + ph_land(j, dq);
                    for (int u = 0; u < 4; u++) dst[u] = d + u < dI ? sp[u] : 0.f;
                }
            }
        }
    }
    ph_cp_commit();
}

/* The means of this thread's items [E0, E1) of chunk c (landed: this
 * thread's own copies), into v: sum / count with count = min(B, L - b·B)
 * (a power of two: the product with its exact reciprocal, the same
 * correctly rounded quotient), the means as stored, or 0 for items not
 * copied. */
template <int NT, int E0, int E1>
__device__ __forceinline__ void ph_take_chunk(const ph_blk_args &a, const float *slot, const ph_src &S, int b0, int c, float4 *v) {
    const int dI = a.dI, B = (int)a.B;
#pragma unroll
    for (int e = E0; e < E1; e++) {
        int j, dq;
        ph_item(threadIdx.x + e * NT, j, dq);
        const int b = b0 + j;
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (b < S.nvalid && c * PH_KC + 4 * dq < dI) {
            x = *(const float4 *)(slot + ph_land(j, dq));
            if (ph_div(a)) {
                const int n = S.L - b * B < B ? S.L - b * B : B;
                const float cnt = (float)n;
                if ((n & (n - 1)) == 0) {
                    const float inv = __frcp_rn(cnt);
                    x = make_float4(x.x * inv, x.y * inv, x.z * inv, x.w * inv);
                } else {
                    x = make_float4(x.x / cnt, x.y / cnt, x.z / cnt, x.w / cnt);
                }
            }
        }
        v[e - E0] = x;
    }
}
/* The same for the one-row tile (NT 128: items e and e + 2 are two
 * quarters of one block) with each item's division chosen once per tile
 * (ph_scales): f[e % 2] > 0 the reciprocal of a power-of-two count, < 0
 * minus a count to divide by, 0 an item not copied (its block past the
 * valid ones). The same quotients (bits) as ph_take_chunk, fewer
 * instructions a chunk. */
__device__ __forceinline__ void ph_scales(const ph_blk_args &a, const ph_src &S, int b0, float *f) {
    const int B = (int)a.B;
#pragma unroll
    for (int e = 0; e < 2; e++) {
        int j, dq;
        ph_item(threadIdx.x + e * 128, j, dq);
        const int b = b0 + j, n = S.L - b * B < B ? S.L - b * B : B;
        f[e] = b >= S.nvalid ? 0.f : (n & (n - 1)) == 0 ? __frcp_rn((float)n) : -(float)n;
    }
}
template <int E0, int E1>
__device__ __forceinline__ void ph_take_scaled(const ph_blk_args &a, const float *slot, const float *f, int c, float4 *v) {
    const int dI = a.dI;
#pragma unroll
    for (int e = E0; e < E1; e++) {
        int j, dq;
        ph_item(threadIdx.x + e * 128, j, dq);
        float4 x = make_float4(0.f, 0.f, 0.f, 0.f);
        if (f[e % 2] != 0.f && c * PH_KC + 4 * dq < dI) {
            x = *(const float4 *)(slot + ph_land(j, dq));
            if (ph_div(a)) {
                const float g = f[e % 2];
                if (g > 0.f) {
                    x = make_float4(x.x * g, x.y * g, x.z * g, x.w * g);
                } else {
                    const float cnt = -g;
                    x = make_float4(x.x / cnt, x.y / cnt, x.z / cnt, x.w / cnt);
                }
            }
        }
        v[e - E0] = x;
    }
}
/* ... written transposed into the slot (after a barrier: those items'
 * landed rows read by every thread): d 4dq + u of block j at [4dq + u][j]
 * (a warp's stores: 16 blocks x 2 quarters, 16 banks apart: conflict-free) */
template <int NT, int E0, int E1> __device__ __forceinline__ void ph_put_chunk(float *slot, const float4 *v) {
#pragma unroll
    for (int e = E0; e < E1; e++) {
        int j, dq;
        ph_item(threadIdx.x + e * NT, j, dq);
        float *dst = slot + 4 * dq * PH_KS + j;
        dst[0] = v[e - E0].x;
        dst[PH_KS] = v[e - E0].y;
        dst[2 * PH_KS] = v[e - E0].z;
        dst[3 * PH_KS] = v[e - E0].w;
    }
}

/* chunk c of a tile of the transposed means (d in [16c, 16c + 16), blocks
 * [b0, b0 + 128) of kt) into its ring slot as [d][PH_KS], 16 bytes a copy;
 * one commit group per call */
template <int NT, int ST>
__device__ __forceinline__ void ph_issue_kt_chunk(float *ring, const float *kt, int64_t ldk, int b0, int c, int nch, int dI) {
    if (c < nch) {
        float *slot = ring + (c % ST) * PH_CHUNK;
#pragma unroll
        for (int e = 0; e < PH_KC * PH_NB / 4 / NT; e++) {
            const int i = threadIdx.x + e * NT, dl = i / (PH_NB / 4), j = 4 * (i % (PH_NB / 4)), d = c * PH_KC + dl;
            if (d < dI) ph_cp16(slot + dl * PH_KS + j, kt + d * ldk + b0 + j);
        }
    }
    ph_cp_commit();
}

/* The FMAs of one chunk: kc d steps (kk ascending) of the thread's 8 x 8
 * outputs, (row, head) 4ty + i and ROWS / 2 + 4ty + i - 4, blocks 4tx + j
 * and PH_NB / 2 + 4tx + j - 4. GUARD: each step behind kk < kc (a chunk
 * past dI's end; the layout before: a branch per step, so that no step's
 * loads could be issued before the one before it had run its FMAs); else
 * all PH_KC steps in one block, which the compiler software-pipelines (the
 * next step's shared loads in flight during this one's FMAs). */
template <int ROWS, bool GUARD>
__device__ __forceinline__ void ph_fma_steps(float (&acc)[8][8], const float *qc, const float *ks, int ty, int tx, int kc) {
#pragma unroll
    for (int kk = 0; kk < PH_KC; kk++) {
        if (!GUARD || kk < kc) {
            const float4 q0 = *(const float4 *)(qc + kk * ROWS + 4 * ty);
            const float4 q1 = *(const float4 *)(qc + kk * ROWS + ROWS / 2 + 4 * ty);
            const float4 k0 = *(const float4 *)(ks + kk * PH_KS + 4 * tx);
            const float4 k1 = *(const float4 *)(ks + kk * PH_KS + PH_NB / 2 + 4 * tx);
            const float qa[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
            const float ka[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(qa[i], ka[j], acc[i][j]);
        }
    }
}

template <int R, int W, bool TK, bool GD>
__global__ void __launch_bounds__(128 * R, W) ph_block_scores_kernel(ph_blk_args a) {
    /* derived rows (a.cl): a plain launch (the previous work done), the
     * metadata kernel its programmatic dependent, whose outputs this kernel
     * does not read; else wait for the previous kernel (a.pdl) */
    ph_pdl_launch();
    if (!a.cl) ph_pdl_wait();
    typedef ph_tile<R, W, TK> P;
    constexpr int ROWS = P::ROWS, NT = P::NT, HS = P::HS, ST = P::ST;
    float *ws = ph_smem(), *qs = ws + R * PH_HI, *ring = qs + PH_DI * ROWS, *red = ring;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t t0 = (int64_t)blockIdx.x * R;
    /* tiles, blocks and lengths in 32 bits (the launch bounds the tiles to 65535) */
    const int tile0 = (int)(blockIdx.y * a.tpc), ntiles = (int)((a.nbmax + PH_NB - 1) / PH_NB);
    const int tile1 = tile0 + a.tpc < ntiles ? tile0 + (int)a.tpc : ntiles;
    const int nr = R == 1 || t0 + R <= a.T ? R : (int)(a.T - t0); /* query rows of this CTA (R 1: one, known) */
    const int HI = a.HI, dI = a.dI, nch = (dI + PH_KC - 1) / PH_KC;
    const int B = (int)a.B;
    /* the rows' sequences and the blocks meeting their ranges [0, end) */
    const ph_row r0 = ph_row_of(a, t0), r1 = nr > 1 ? ph_row_of(a, t0 + 1) : ph_row{-1, 0, 0};
    const int seq0 = r0.seq, seq1 = r1.seq, e0 = r0.end, e1 = r1.end;
    const int nblk0 = e0 > 0 ? (e0 - 1) / B + 1 : 0, nblk1 = e1 > 0 ? (e1 - 1) / B + 1 : 0;
    for (int i = tid; i < R * PH_HI; i += NT) {
        const int r = i / PH_HI, h = i % PH_HI;
        ws[i] = r < nr && h < HI ? la_cu_ld(a.w.data, a.w.dt, (t0 + r) * a.w.nb[0] + h * a.w.nb[1]) : 0.f;
    }
    /* two rows of different sequences (a sequence boundary): one pass per
     * row, each with its sequence's means (the other row's sums unused) */
    const int npass = nr == 2 && seq1 != seq0 ? 2 : 1;
    /* pass 0's first tile: its first chunks in flight while q loads */
    const int nbp0 = nr > 1 && npass == 1 && nblk1 > nblk0 ? nblk1 : nblk0;
    const bool primed = tile0 < tile1 && tile0 * PH_NB < nbp0;
    if (primed) {
        const ph_src S0 = ph_src_of(a, seq0, nbp0, r0.L);
        for (int c = 0; c < ST - 1; c++) {
            if constexpr (TK) ph_issue_kt_chunk<NT, ST>(ring, a.kt + (int64_t)seq0 * dI * a.ldk, a.ldk, tile0 * PH_NB, c, nch, dI);
            else ph_issue_chunk<NT, ST>(a, ring, S0, tile0 * PH_NB, c, nch);
        }
    }
    /* q as floats [d][row] (conflict-free stores) */
    const bool q8x4 = a.q.dt == LA_FP8_E4M3 && a.q.nb[2] == 1 && a.dI % 4 == 0 && a.q.nb[1] % 4 == 0 &&
                      a.q.nb[0] % 4 == 0 && ((uintptr_t)a.q.data & 3) == 0;
    if (q8x4) ph_load_q8x4<R, !GD>(a, t0, nr, qs); /* the branch-free decode (not GD: the layout before) */
    else if (a.q.dt == LA_FP8_E4M3) ph_load_q<R, LA_FP8_E4M3>(a, t0, nr, qs);
    else if (a.q.dt == LA_BF16) ph_load_q<R, LA_BF16>(a, t0, nr, qs);
    else if (a.q.dt == LA_F16) ph_load_q<R, LA_F16>(a, t0, nr, qs);
    else ph_load_q<R, LA_F32>(a, t0, nr, qs);
    for (int pass = 0; pass < npass; pass++) {
        const int sp = pass ? seq1 : seq0;
        const bool in0 = npass == 1 || pass == 0, in1 = nr > 1 && (npass == 1 || pass == 1);
        int nbp = in0 ? nblk0 : 0;
        if (in1 && nblk1 > nbp) nbp = nblk1;
        const ph_src S = ph_src_of(a, sp, nbp, pass ? r1.L : r0.L);
        for (int tile = tile0; tile < tile1; tile++) {
            const int b0 = tile * PH_NB;
            const int fr = tid / PH_NB, fj = tid % PH_NB; /* this thread's (row, block) of the fold */
            float sc = 0.f;
            if (b0 < nbp) { /* uniform: some block of the tile meets a row's range */
                constexpr bool fast = W == 4 && !GD && !TK; /* the one-row tile's items fixed once a tile */
                static_assert(!fast || NT == 128, "ph_scales / ph_issue_items: two blocks a thread");
                float fsc[2]; /* the items' divisions and presence (fast) */
                int ioff[2];   /* their offsets in S.p, chunk 0 (a sequence's block rows: 32 bits) */
                if constexpr (fast) {
                    ph_scales(a, S, b0, fsc);
#pragma unroll
                    for (int e = 0; e < 2; e++) {
                        int j, dq;
                        ph_item(tid + e * NT, j, dq);
                        ioff[e] = (b0 + j) * dI + 4 * dq;
                    }
                }
                auto issue = [&](int c) {
                    if constexpr (TK) ph_issue_kt_chunk<NT, ST>(ring, a.kt + (int64_t)sp * dI * a.ldk, a.ldk, b0, c, nch, dI);
                    else if constexpr (fast) ph_issue_items<ST>(a, ring, S.p, ioff, fsc, c, nch);
                    else ph_issue_chunk<NT, ST>(a, ring, S, b0, c, nch);
                };
                if (!(pass == 0 && tile == tile0 && primed)) {
                    __syncthreads(); /* the ring's previous contents (chunks, the fold's sums) have been read */
                    for (int c = 0; c < ST - 1; c++) issue(c);
                }
                float acc[8][8];
#pragma unroll
                for (int i = 0; i < 8; i++)
#pragma unroll
                    for (int j = 0; j < 8; j++) acc[i][j] = 0.f;
                for (int c = 0; c < nch; c++) {
                    float *slot = ring + (c % ST) * PH_CHUNK;
                    ph_cp_wait<ST - 2>(); /* this thread's copies of chunk c have landed */
                    constexpr int CI = P::CI, CH = CI / 2;
                    if constexpr (TK) {
                        __syncthreads(); /* everyone's copies of chunk c; chunk c - 1's slot has been read */
                    } else if constexpr (fast) { /* the chunk transposed in two halves (ph_land): half the items in registers at a time */
                        float4 v[CH];
                        ph_take_scaled<0, CH>(a, slot, fsc, c, v);
                        __syncthreads(); /* quarters 0-1 read; chunk c - 1's slot has been read */
                        ph_put_chunk<NT, 0, CH>(slot, v);
                        ph_take_scaled<CH, CI>(a, slot, fsc, c, v);
                        __syncthreads(); /* quarters 2-3 read */
                        ph_put_chunk<NT, CH, CI>(slot, v);
                    } else if constexpr (W == 4) {
                        float4 v[CH];
                        ph_take_chunk<NT, 0, CH>(a, slot, S, b0, c, v);
                        __syncthreads(); /* quarters 0-1 read; chunk c - 1's slot has been read */
                        ph_put_chunk<NT, 0, CH>(slot, v);
                        ph_take_chunk<NT, CH, CI>(a, slot, S, b0, c, v);
                        __syncthreads(); /* quarters 2-3 read */
                        ph_put_chunk<NT, CH, CI>(slot, v);
                    } else {
                        float4 v[CI];
                        ph_take_chunk<NT, 0, CI>(a, slot, S, b0, c, v);
                        __syncthreads(); /* slot c's landed rows read; chunk c - 1's slot has been read */
                        ph_put_chunk<NT, 0, CI>(slot, v);
                    }
                    issue(c + ST - 1);
                    if constexpr (!TK) __syncthreads(); /* slot c holds the chunk's means [d][block] */
                    const float *ks = slot, *qc = qs + c * PH_KC * ROWS;
                    const int kc = dI - c * PH_KC < PH_KC ? dI - c * PH_KC : PH_KC;
                    /* d ascending from 0 with fmaf: the CPU kernel's per-head dot product */
                    if (!GD && kc == PH_KC) ph_fma_steps<ROWS, false>(acc, qc, ks, ty, tx, PH_KC);
                    else ph_fma_steps<ROWS, true>(acc, qc, ks, ty, tx, kc);
                }
                /* the heads folded in ascending order with fmaf from 0, HS
                 * heads at a time through the ring (all its copies landed) */
#pragma unroll
                for (int step = 0; step < P::NS; step++) {
                    __syncthreads();
#pragma unroll
                    for (int i = 0; i < 8; i++) {
                        const int r = i < 4 ? 4 * ty + i : ROWS / 2 + 4 * ty + i - 4, h = r % PH_HI, rr = r / PH_HI;
                        /* one row, two steps: outputs i < 4 are heads 4ty + i < 32, the rest 32 + 4ty + i - 4
                         * (known to the compiler: one address for both steps) */
                        constexpr bool halves = R == 1 && P::NS == 2;
                        if (halves ? i / 4 == step : h / HS == step) {
                            float v[8];
#pragma unroll
                            for (int j = 0; j < 8; j++) v[j] = acc[i][j] < 0.f ? 0.f : acc[i][j]; /* NaN kept, as torch.relu */
                            float *dst = red + (halves ? 4 * ty + i % 4 : rr * HS + h % HS) * PH_LD + 4 * tx;
                            *(float4 *)dst = make_float4(v[0], v[1], v[2], v[3]);
                            *(float4 *)(dst + PH_NB / 2) = make_float4(v[4], v[5], v[6], v[7]);
                        }
                    }
                    __syncthreads();
                    /* eight heads' loads issued before their FMA chain */
                    const int hend = HI < (step + 1) * HS ? HI : (step + 1) * HS;
                    for (int h0 = step * HS; h0 < hend; h0 += 8) {
                        float wv[8], rv[8];
#pragma unroll
                        for (int u = 0; u < 8; u++) {
                            const int h = h0 + u < hend ? h0 + u : h0;
                            wv[u] = ws[fr * PH_HI + h];
                            rv[u] = red[(fr * HS + h % HS) * PH_LD + fj];
                        }
#pragma unroll
                        for (int u = 0; u < 8; u++)
                            if (h0 + u < hend) sc = fmaf(wv[u], rv[u], sc);
                    }
                }
            }
            /* first / last block of the range +inf, past it -inf (NT = R x PH_NB: every column once) */
            const int b = b0 + fj, nb = fr ? nblk1 : nblk0;
            if ((fr ? in1 : in0) && b < a.nbmax)
                a.out[(t0 + fr) * a.nbmax + b] = b >= nb ? -INFINITY : b == 0 || b == nb - 1 ? INFINITY : sc;
        }
    }
}

/* PH_KERNELS_END */

} // namespace

static const char *const ph_names[] = {"fused", "classic", "fused3", "fused_guarded"};
/* the family's variant: an index into ph_names, -1 for an unknown name */
static int ph_variant(const la_context *ctx) {
    const char *forced = la_context_variant(ctx, "paged_hisa");
    return forced ? la_cu_variant_index(forced, ph_names, 4) : (kPagedHisaFused ? 0 : 1);
}

la_status la_ph_select(la_context *ctx, int64_t HI, int64_t dI, int *fused) {
    const char *const *names = ph_names;
    const char *forced = la_context_variant(ctx, "paged_hisa");
    const int v = ph_variant(ctx);
    if (v < 0) return la_cu_unknown_variant("paged_hisa", forced, "fused, classic, fused3, fused_guarded");
    const bool ok = HI >= 1 && HI <= PH_HI && dI >= 1 && dI <= PH_DI;
    if (v != 1 && forced && !ok) return la_cu_variant_unsupported("paged_hisa", names[v], "HI <= 64, dI <= 128");
    *fused = v == 1 || !ok ? 0 : v == 0 ? 1 : v;
    la_cu_report(ctx, "paged_hisa", *fused ? names[v] : "classic", "HI=%lld dI=%lld", (long long)HI, (long long)dI);
    return LA_OK;
}

template <int R, int W, bool TK = false, bool GD = false>
static la_status ph_launch_block_scores(ph_blk_args a, int64_t ntiles, const la_context *ctx, cudaStream_t s) {
    const int64_t groups = (a.T + R - 1) / R, slots = (int64_t)la_cu_device_attr(cudaDevAttrMultiProcessorCount, 132) * W;
    /* several tiles per CTA (q loaded once for them) while the grid keeps
     * ~4 CTAs per slot; decode: one */
    int64_t tpc = groups * ntiles / (4 * slots);
    a.tpc = tpc < 1 ? 1 : tpc > ntiles ? ntiles : tpc;
    const size_t smem = ph_tile<R, W, TK>::SMEM_FLOATS * sizeof(float);
    /* W CTAs' shared memory per SM (W x 50-75 KB) only with the largest
     * carveout; set once per context (a host call costs as much as a launch) */
    LA_TRY(la_cu_func_smem(ctx, (const void *)ph_block_scores_kernel<R, W, TK, GD>, smem, smem, true));
    const dim3 grid((unsigned)groups, (unsigned)((ntiles + a.tpc - 1) / a.tpc));
    /* derived rows: a plain launch whatever a.pdl (this kernel never waits
     * then: it must not start before the previous work, e.g. an append, ends) */
    LA_CU(la_cu_launch_pdl(a.pdl != 0 && a.cl == nullptr, ph_block_scores_kernel<R, W, TK, GD>, grid, dim3(128 * R),
                           smem, s, a));
    LA_CU_LAUNCH("paged hisa block scores");
    return LA_OK;
}

bool la_ph_means_pass(int64_t T, int64_t nseq) { return T >= PH_TK_ROWS * nseq; }

la_status la_ph_block_scores(ph_blk_args a, int64_t nseq, const la_context *ctx, cudaStream_t s) {
    if (a.T <= 0 || a.nbmax <= 0) return LA_OK;
    const int64_t ntiles = (a.nbmax + PH_NB - 1) / PH_NB;
    if (ntiles > 65535 || nseq > 65535 || a.T > 0x7fffffffLL)
        return la_err(LA_ERR_UNSUPPORTED, "paged hisa: %lld query rows x %lld blocks of %lld sequences exceed the grid",
                      (long long)a.T, (long long)a.nbmax, (long long)nseq);
    /* two query rows per CTA where sequences have several (prefill, MTP):
     * each means chunk then serves 128 (row, head) pairs; one row per CTA in
     * decode, where a row's neighbour is another sequence's */
    if (la_ph_means_pass(a.T, nseq)) {
        /* the means once, transposed, for the two-row kernel of many rows
         * (after the metadata kernel: it reads the lengths) */
        a.cl = nullptr;
        a.ldk = ph_ldk(a.nbmax);
        size_t bytes;
        LA_TRY(la_mul_size((size_t)(nseq * a.dI), (size_t)a.ldk * 4u, &bytes, "paged hisa: transposed means"));
        la_cu_ws dkt;
        LA_TRY(la_cu_ws_alloc(&dkt, bytes, s, "paged hisa transposed means"));
        a.kt = (float *)dkt.p;
        const size_t msmem = PH_MEANS_SMEM_FLOATS * sizeof(float);
        ph_means_t_kernel<<<dim3((unsigned)(a.ldk / PH_MB), (unsigned)nseq), PH_MT, msmem, s>>>(a);
        LA_CU_LAUNCH("paged hisa block means");
        return ph_launch_block_scores<2, 2, true, true>(a, ntiles, ctx, s);
    }
    if (a.T >= 2 * nseq) return ph_launch_block_scores<2, 2, false, true>(a, ntiles, ctx, s); /* MTP */
    /* one row per CTA: 4 CTAs per SM (a decode grid of 512 tiles in one
     * wave of 528 slots), or 3 with the deeper ring (variant "fused3");
     * "fused_guarded" (the loop before: a guard per d step) is read from the
     * context, which paged_index.cu passes (it sets only w3) */
    if (a.w3) return ph_launch_block_scores<1, 3>(a, ntiles, ctx, s);
    if (ph_variant(ctx) == 3) return ph_launch_block_scores<1, 4, false, true>(a, ntiles, ctx, s);
    return ph_launch_block_scores<1, 4>(a, ntiles, ctx, s);
}
