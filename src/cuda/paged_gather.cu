/* HISA's candidate scores on the paged cache, gather mode (paged_index_tc.cuh:
 * la_sp_scores_paged with a.blocks; the decode path of family
 * "paged_hisa_cand", variant "gather").
 *
 * Why: sc_mma_kernel's gather mode (dsa.cu) gives each CTA 256 candidates
 * of one query and loads their A fragments straight into registers with
 * 4-byte loads, each after two dependent lookups (kept block, page): 32 A
 * registers next to 64 accumulators spill at its 128-register bound, and a
 * CTA's loads, MMAs and epilogue run one after the other. Here a CTA scores
 * `per` consecutive chunks of candidates (128 for bf16, 256 for e4m3: 16 or
 * 32 per warp) of one query row as sc_gather_kernel does for dense bf16:
 * the candidates' key rows go through the block table (page
 * table[seq][s / ps], row s % ps, the fp32 scale from the page's scale
 * area) by cp.async into a PG_STAGES-deep ring of swizzled shared-memory
 * stages (zero-filled where a candidate is invalid), and the warps read
 * them as A fragments with ldmatrix; the query block stays in shared memory
 * (B fragments). The lookups of chunk n + 1 are issued while chunk n's
 * copies are, so their latency overlaps a chunk's MMAs. A thread pair
 * copies one row (bf16; both threads look it up) or two (e4m3; each row's
 * lookup is done once, by one thread of the pair, and the other gets it by
 * a shuffle).
 *
 * Bits: per (query, key) the instruction sequence is sc_mma_kernel's in its
 * gather + PAGED mode. The A registers hold the same bytes (an e4m3 or bf16
 * m16n8k{32,16} A fragment = 4 bytes at row g / g + 8, bytes ks·32 + 4qd
 * and ks·32 + 16 + 4qd: ldmatrix of the 16-byte chunks 2ks and 2ks + 1 of
 * rows 0-7 / 8-15 gives exactly those, zero for an invalid key as the
 * direct loads give), B comes from the same sc_load_q staging and ldmatrix
 * addressing (bf16; e4m3's B below), every accumulator starts at 0 and takes the same mma.sync
 * over k-steps ascending (sc_mma), and the epilogue is the same: ReLU-
 * weighted head fold over j ascending with fmaf, two xor shuffles over the
 * quad, times the key's fp32 scale (fp8), -inf for an invalid key
 * (sc_key_of), +inf for a forced end. An mma's output element depends only
 * on its own row, column and accumulator, so which keys share a tile or a
 * CTA changes nothing.
 *
 * Two kernels: pg_gather_kernel (bf16 keys and queries) as above, and
 * pg_gather_f16q_kernel for e4m3 (further down), the same scheme with the
 * query block converted once per CTA to f16 fragments and the e4m3 MMA
 * issued as the f16 HMMA sequence that ptxas emulates it with: the same
 * instructions on the same bits, hence the same scores. */
#include "cuda/cuda_ops.h"
#include "cuda/dsa_mma.cuh"
#include "cuda/paged_index_tc.cuh"

#include <type_traits>

namespace {

enum { PG_STAGES = 3 };

extern __shared__ __align__(128) uint8_t pg_sm[]; /* pg_geom's / pg_geom16's layout */

/* Stage geometry of pg_gather_kernel (bf16; e4m3's is pg_geom16 below):
 * rows are 256 bytes, 16 keys per warp (one m-tile): 32 KB per stage, and
 * two CTAs per SM fit (227 KB). */
template <int HI> struct pg_geom {
    static constexpr int RB = 256;              /* bytes per key row (dI = 128 bf16) */
    static constexpr int ROWS = SC_WARPS * 16;  /* candidates per chunk (stage): one per thread pair */
    /* shared memory: the query block at 0, then the byte offsets of */
    static constexpr size_t KEYS = (size_t)HI * RB;                        /* the stages' key rows */
    static constexpr size_t WS = KEYS + (size_t)PG_STAGES * ROWS * RB;     /* the head weights */
    static constexpr size_t FLAGS = WS + (size_t)HI * 4;                   /* the keys' pg_meta flags */
    static constexpr size_t SMEM = FLAGS + (size_t)PG_STAGES * ROWS;
};

/* One candidate row's lookup: flag 0 invalid (score -inf), 1 valid, 2 a
 * forced end (+inf); page and row of the key when valid. */
struct pg_meta {
    int32_t flag, page, off;
};

/* A CTA's query row and chunk span, and what its lookups need: chunks
 * [c0, c1) of row t; brow its kept blocks, trow its sequence's block-table
 * row, lim = min(ncols, m·B) the candidates that map to a block, [lo, hi)
 * the row's key range; orow its output row. 32-bit where it cannot
 * overflow (ncols < 2^31, context lengths int32): fewer registers. */
struct pg_row {
    int32_t t, c0, c1;
    const int32_t *brow, *trow;
    uint32_t lim;
    int32_t lo, hi;
    float *orow;
};

/* The CTA's pg_row (grid (CTAs per row, T): CTA (x, y) takes chunks
 * [x·per, (x + 1)·per) of the ceil(ncols / ROWS) chunks of query row y);
 * false, and nothing loaded, when its span is empty. */
template <int ROWS>
__device__ __forceinline__ bool pg_row_begin(const la_sp_score_args &a, const sc_pages &pg, int32_t per, pg_row &r) {
    r.t = blockIdx.y;
    const int32_t nchunks = (int32_t)((a.ncols + ROWS - 1) / ROWS);
    r.c0 = (int32_t)blockIdx.x * per;
    r.c1 = min(nchunks, r.c0 + per);
    if (r.c0 >= r.c1) return false;
    r.brow = a.blocks + (int64_t)r.t * a.blocks_ld;
    r.trow = pg.table + (int64_t)pg.row_seq[r.t] * pg.maxp;
    r.lim = (uint32_t)min(a.ncols, a.m * a.B);
    r.orow = a.out + (int64_t)r.t * a.out_ld;
    int64_t lo64, hi64;
    la_sp_row_range(a.range, r.t, &lo64, &hi64);
    r.lo = (int32_t)lo64;
    r.hi = (int32_t)hi64;
    return true;
}

/* Candidate p of the CTA's row: sc_key_of's map (dsa_mma.cuh) in 32-bit
 * arithmetic where it cannot overflow (p < lim = min(ncols, m·B) < 2^31,
 * a block's tokens and positions < 2^31), then the page of the key. The
 * row's fields are read once at the top, so the branches see plain values
 * (the forced-end test stays a select; read in the branches it compiled to
 * branches). */
__device__ __forceinline__ pg_meta pg_lookup(const la_sp_score_args &a, const sc_pages &pg, const pg_row &r,
                                             uint32_t p) {
    const int32_t *brow = r.brow, *trow = r.trow;
    const uint32_t lim = r.lim;
    const int32_t lo = r.lo, hi = r.hi;
    pg_meta m = {0, 0, 0};
    if (p < lim) {
        const uint32_t Bu = (uint32_t)a.B, bi = p / Bu;
        const int32_t b = brow[bi];
        if (b >= 0) {
            const int64_t s = (int64_t)b * a.B + (p - bi * Bu);
            if (s >= lo && s < hi && s < a.Lk) {
                m.flag = a.force_ends && (s == lo || s == hi - 1) ? 2 : 1;
                const uint32_t su = (uint32_t)s, psu = (uint32_t)pg.ps, pj = su / psu;
                m.off = (int32_t)(su - pj * psu);
                m.page = trow[pj];
            }
        }
    }
    return m;
}

/* Chunk n's rows into stage st: thread pair i copies row i, each thread
 * the 16-byte chunks of its parity, so a warp's copies cover whole 32-byte
 * sectors; both threads looked the row up (m), thread 0 of the pair
 * stores its flag. */
template <int HI>
__device__ __forceinline__ void pg_issue(const sc_pages &pg, const pg_meta &m, uint32_t sm_sa, int st) {
    using G = pg_geom<HI>;
    constexpr int CPR = G::RB / 16;
    const int part = threadIdx.x & 1;
    const int r = threadIdx.x >> 1;
    const int ok = m.flag != 0;
    const uint8_t *src = pg.pages + (int64_t)m.page * pg.page_bytes + (int64_t)m.off * G::RB + part * 16;
    /* chunk ch = part + 2k of row r at ch ^ (r & 7) = (part ^ (r & 7)) ^ 2k */
    const uint32_t drow = sm_sa + (uint32_t)(G::KEYS + (st * G::ROWS + r) * G::RB);
    const uint32_t x16 = (uint32_t)((part ^ (r & 7)) * 16);
#pragma unroll
    for (int k = 0; k < CPR / 2; k++) la_cp16z_sa(drow + (x16 ^ (k << 5)), src + k * 32, ok ? 16 : 0);
    if (part == 0) {
        const uint32_t i = (uint32_t)(st * G::ROWS + r);
        pg_sm[G::FLAGS + i] = (uint8_t)m.flag;
    }
}

__device__ __forceinline__ void pg_ldsm4(uint32_t *r, uint32_t sa) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa));
}

/* bf16 keys and queries; grid and chunks as pg_row_begin says. */
template <int HI>
__global__ void __launch_bounds__(SC_THREADS, 2) pg_gather_kernel(la_sp_score_args a, sc_pages pg, int32_t per) {
    using G = pg_geom<HI>;
    constexpr int NT = HI / 8, RB = G::RB, KS = RB / 32, SWZ = 7, ROWS = G::ROWS;
    const float *ws = (const float *)(pg_sm + G::WS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    pg_row row;
    if (!pg_row_begin<ROWS>(a, pg, per, row)) return;
    const int32_t c0 = row.c0, c1 = row.c1;
    const uint32_t sm_sa = (uint32_t)__cvta_generic_to_shared(pg_sm);
    const int mrow = threadIdx.x >> 1; /* this thread's lookup row within a chunk */

    sc_load_q<HI, 128, 2>(a, sc_scales{}, row.t, pg_sm, (float *)ws); /* commits group 0 */
    pg_meta nx = {0, 0, 0}; /* the lookup of the next chunk to issue */
    for (int st = 0; st < PG_STAGES - 1; st++) {
        if (c0 + st < c1) {
            nx = pg_lookup(a, pg, row, (uint32_t)(c0 + st) * ROWS + mrow);
            pg_issue<HI>(pg, nx, sm_sa, st);
        }
        la_cp_commit_nc();
    }
    if (c0 + PG_STAGES - 1 < c1) nx = pg_lookup(a, pg, row, (uint32_t)(c0 + PG_STAGES - 1) * ROWS + mrow);

    /* ldmatrix addresses at k-step 0 (shared window): A, lanes 0-7 / 8-15 /
     * 16-23 / 24-31 = rows 0-7 / 8-15 of chunk 2ks, then of chunk 2ks + 1
     * (a0..a3 of the m16n8k16 A fragment, rows g, g + 8); B, heads
     * 16jp + 0-7 of chunks 2ks, 2ks + 1, then heads + 8 (b0, b1 of n-tiles
     * 2jp, 2jp + 1), as sc_mma_kernel reads q. Row r's chunk c is at
     * c ^ (r & 7), so k-step ks is the k-step-0 offset XOR ks << 5 (the
     * offsets from pg_sm; the rows start at multiples of RB). */
    uint32_t a_off, b_off;
    {
        const int ra = 16 * warp + (lane & 7) + ((lane >> 3) & 1) * 8, ca = lane >> 4;
        a_off = (uint32_t)(G::KEYS + ra * RB + ((ca ^ (ra & SWZ)) * 16));
        const int hb = (lane & 7) + ((lane >> 4) << 3), cb = (lane >> 3) & 1;
        b_off = (uint32_t)(hb * RB + ((cb ^ (hb & SWZ)) * 16));
    }
    int stage = 0; /* (c - c0) % PG_STAGES */
    for (int32_t c = c0; c < c1; c++, stage = stage == PG_STAGES - 1 ? 0 : stage + 1) {
        asm volatile("cp.async.wait_group %0;\n" ::"n"(PG_STAGES - 2));
        __syncthreads(); /* chunk c landed; everyone is done with chunk c - 1's stage */
        {
            const int32_t cn = c + PG_STAGES - 1;
            if (cn < c1) pg_issue<HI>(pg, nx, sm_sa, stage == 0 ? PG_STAGES - 1 : stage - 1);
            la_cp_commit_nc();
            if (cn + 1 < c1) nx = pg_lookup(a, pg, row, (uint32_t)(cn + 1) * ROWS + mrow); /* used next iteration */
        }
        float acc[1][NT][4];
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[0][j][e] = 0.f;
        /* k-steps not unrolled: one step's fragments live at a time */
        const uint32_t ka = a_off + (uint32_t)stage * (ROWS * RB);
#pragma unroll 1
        for (int ks = 0; ks < KS; ks++) {
            const uint32_t kx = (uint32_t)ks << 5; /* chunk 2ks + bit at (2ks + bit) ^ (r & 7): (ks << 5) ^ x */
            uint32_t af[4];
            pg_ldsm4(af, sm_sa + (ka ^ kx));
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                uint32_t b[4];
                pg_ldsm4(b, sm_sa + (b_off ^ kx) + jp * 16 * RB);
                sc_mma<2>(acc[0][2 * jp], af, b[0], b[1]);
                sc_mma<2>(acc[0][2 * jp + 1], af, b[2], b[3]);
            }
        }
        /* sc_mma_kernel's epilogue: heads 8j+2qd, 8j+2qd+1 of keys g, g+8 */
        float part[1][2];
        sc_head_sum<1, NT>(acc, ws, qd, part);
        /* lanes qd 0 / 1 of the quad store keys g / g + 8 of the warp's m-tile */
        if (qd < 2) {
            const int hh = qd & 1;
            const float v = hh ? part[0][1] : part[0][0]; /* a select, not an indexed array (local memory) */
            const int r = 16 * warp + g + 8 * hh;
            const int64_t p = (int64_t)c * ROWS + r;
            if (p < a.ncols) {
                const int flag = pg_sm[G::FLAGS + (size_t)stage * ROWS + r];
                float o = v;
                if (flag == 0) o = -INFINITY;
                else if (flag == 2) o = INFINITY;
                row.orow[p] = o;
            }
        }
    }
    la_cp_wait_all_nc();
}

/* ---- e4m3: the query block staged as f16 fragments ---------------------
 *
 * Why: sm_90 has no e4m3 mma.sync in hardware; ptxas emulates each
 * mma.sync.m16n8k32.e4m3 with F2FP.F16.E4M3.UNPACK_B (e4m3 pairs to f16x2)
 * and two HMMA.16816.F32. When pg_gather_kernel also ran e4m3 (an e4m3
 * query block in shared memory, mma.sync e4m3; since removed) every warp
 * unpacked the CTA-constant query block again for every chunk: per k-step
 * 32 of its 48 F2FP were B's. Here the CTA converts q once, with the same conversion
 * instruction, into shared memory in fragment order, and the warps issue
 * the emulation's f16 instruction sequence themselves.
 *
 * The emulation, read off the SASS of that e4m3 pg_gather_kernel at HI 64
 * (nvcc 13.0, sm_90a; dev/sass_trace_e4m3_mma.py checks it mechanically):
 * for the e4m3
 * mma c += A·B with A registers a0..a3 and B registers b0, b1 (4 e4m3 each,
 * byte i of a register = element i),
 *   t  = HMMA.16816.F32({lo a0, lo a1, lo a2, lo a3}, {lo b0, lo b1}, RZ)
 *   t  = HMMA.16816.F32({hi a0, hi a1, hi a2, hi a3}, {hi b0, hi b1}, t)
 *   c += t                                          (4 FADD, one per element)
 * where lo x = F2FP.F16.E4M3.UNPACK_B of x's bytes 0-1 and hi x = the same of
 * bytes 2-3 (.H1), i.e. cvt.rn.f16x2.e4m3x2 of x's low / high 16 bits. All
 * mmas of a k-step have this form (16 at HI 64, 8 at HI 32; so does
 * sc_mma_kernel's paged e4m3 code, variant "direct"): lo from zero, hi
 * chained on it, then the FADDs; only the issue order of the independent
 * chains is interleaved. pg_mma_e4m3_f16 issues exactly this: the two
 * mma.sync.m16n8k16.f16 (HMMA.16816.F32 on sm_90), the first on zero
 * accumulators, the second on the first's result, then add.rn.f32 into c.
 * Bits: the same instructions on the same input bits in the same
 * dependency order give the same output bits (the tensor core is
 * deterministic; fp32 addition commutes; the order in which independent
 * chains are issued does not matter). The inputs are the same bits: A is
 * still unpacked per fragment, with cvt.rn.f16x2.e4m3x2 (the F2FP the
 * emulation used) of the same ldmatrix bytes; B words are the results of
 * that conversion of the same query bytes, only computed once per CTA and
 * read back from shared memory (e4m3 to f16 is exact; NaN stays the
 * conversion's NaN since the stored word is the instruction's output).
 *
 * B layout: the emulation's B for n-tile j (heads 8j + g), k-step ks, lane
 * (g, qd) came from ldmatrix of q row 8j + g: b0 = bytes 32ks + 4qd .. + 3,
 * b1 = bytes 32ks + 16 + 4qd .. + 3. Entry (ks, j, lane) of the f16 block
 * (shared memory from 0) is 16 bytes at ((ks·NT + j)·32 + lane)·16: words
 * {lo b0, lo b1, hi b0, hi b1},
 * so one 16-byte shared load gives both HMMAs' B registers and a warp's
 * load of an n-tile reads 512 contiguous bytes (conflict-free).
 * dev/check_pg_qf16.py replays both paths on the host for random q.
 *
 * Shared memory: the f16 block is 16 KB (HI 64) where the e4m3 one was 8;
 * to keep two CTAs per SM (228 KB) the keys' fp32 scales and flags leave
 * shared memory: each thread now looks up the very row that its epilogue
 * lane stores (so each key's flag and scale are private to one thread) and
 * loads the scale into a register when it issues the row's copies. The
 * chunk loop is unrolled by PG_STAGES so each stage's scale and flag stay
 * in fixed registers while the next stages' loads are in flight. More
 * m-tiles per warp (fewer B loads per HMMA) do not fit: two m-tiles' 64
 * accumulators already take the kernel to its 128 registers. */
template <int HI> struct pg_geom16 {
    static constexpr int RB = 128, MT = 2, NT = HI / 8, KS = RB / 32;
    static constexpr int ROWS = SC_WARPS * 16 * MT;           /* candidates per chunk (stage) */
    static constexpr size_t KEYS = (size_t)KS * NT * 32 * 16; /* after the f16 q fragments */
    static constexpr size_t WS = KEYS + (size_t)PG_STAGES * ROWS * RB; /* the head weights */
    static constexpr size_t SMEM = WS + (size_t)HI * 4;
};

/* The chunk row whose score lane `lane` of warp `warp` stores (the
 * epilogue's key of m-tile qd / 2, row g + 8·(qd & 1)); also its lookup row. */
__device__ __forceinline__ int pg_row16(int warp, int lane) {
    const int g = lane >> 2, qd = lane & 3;
    return 32 * warp + 16 * (qd >> 1) + 8 * (qd & 1) + g;
}

/* The e4m3 pairs of x (bytes 0-1 to lo, 2-3 to hi; byte 2i to the low f16)
 * as f16x2: the emulation's F2FP.F16.E4M3.UNPACK_B of x and of x.H1 (the
 * halves split by mov so ptxas reads x.H1 in place, no shift). sm_89+ PTX;
 * callers are sm_90a code only. */
__device__ __forceinline__ void pg_e4m3x4_f16x2(uint32_t x, uint32_t &lo, uint32_t &hi) {
#if LA_CU_SM90_CODE
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}\n"
        : "=r"(lo), "=r"(hi) : "r"(x));
#else
    lo = hi = 0;
    __trap(); /* fp8 path: built for sm_90a only (dsa_fp8_mma_ok) */
#endif
}

/* c += A·B for one e4m3 m16n8k32 tile as ptxas emulates it (see above):
 * alo / ahi = A's low / high e4m3 pairs as f16x2, b = {lo b0, lo b1, hi b0, hi b1}. */
__device__ __forceinline__ void pg_mma_e4m3_f16(float (&c)[4], const uint32_t (&alo)[4], const uint32_t (&ahi)[4],
                                                const uint4 &b) {
    float t0, t1, t2, t3;
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%10,%10,%10,%10};\n"
        : "=f"(t0), "=f"(t1), "=f"(t2), "=f"(t3)
        : "r"(alo[0]), "r"(alo[1]), "r"(alo[2]), "r"(alo[3]), "r"(b.x), "r"(b.y), "f"(0.f));
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(t0), "+f"(t1), "+f"(t2), "+f"(t3)
        : "r"(ahi[0]), "r"(ahi[1]), "r"(ahi[2]), "r"(ahi[3]), "r"(b.z), "r"(b.w));
    c[0] = __fadd_rn(t0, c[0]);
    c[1] = __fadd_rn(t1, c[1]);
    c[2] = __fadd_rn(t2, c[2]);
    c[3] = __fadd_rn(t3, c[3]);
}

/* Query row t's [HI, 128] e4m3 block into the f16 fragment order (layout
 * above), in two halves so that the prologue's lookups and copies are
 * issued while the loads are in flight: thread i holds 16-byte chunks
 * i + k·SC_THREADS (chunk c of head h: k-step c / 2, b0 for even c, b1 for
 * odd), and stores word qd of each to lane 4(h % 8) + qd of n-tile h / 8. */
template <int HI> struct pg_qf16_raw {
    static constexpr int N = HI * 8 / SC_THREADS;
    uint4 v[N];
};
template <int HI> __device__ __forceinline__ void pg_qf16_fetch(const la_sp_score_args &a, int64_t t, pg_qf16_raw<HI> &r) {
    static_assert(HI * 8 % SC_THREADS == 0, "whole chunks per thread");
    const uint8_t *q = (const uint8_t *)a.q + t * a.q_nb0;
#pragma unroll
    for (int k = 0; k < pg_qf16_raw<HI>::N; k++) {
        const int i = threadIdx.x + k * SC_THREADS, h = i >> 3, c = i & 7;
        r.v[k] = *(const uint4 *)(q + h * a.q_nb1 + c * 16);
    }
}
template <int HI> __device__ __forceinline__ void pg_qf16_store(const pg_qf16_raw<HI> &r) {
    constexpr int NT = HI / 8;
#pragma unroll
    for (int k = 0; k < pg_qf16_raw<HI>::N; k++) {
        const int i = threadIdx.x + k * SC_THREADS, h = i >> 3, c = i & 7, ks = c >> 1, odd = c & 1;
        const uint32_t w[4] = {r.v[k].x, r.v[k].y, r.v[k].z, r.v[k].w};
        uint32_t *e = (uint32_t *)(pg_sm + ((size_t)(ks * NT + (h >> 3)) * 32 + 4 * (h & 7)) * 16);
#pragma unroll
        for (int qd = 0; qd < 4; qd++) pg_e4m3x4_f16x2(w[qd], e[qd * 4 + odd], e[qd * 4 + 2 + odd]);
    }
}

/* pg_issue for the f16-q kernel: thread pair i of warp w copies the rows
 * of lanes 2i (j = 0) and 2i + 1 (j = 1), each thread the 16-byte chunks of
 * its parity; mine is the lookup of this thread's row (j = parity). Returns
 * this row's fp32 scale (0 where invalid, as the zero-filled copy gave),
 * loaded into a register. */
template <int HI>
__device__ __forceinline__ float pg_issue16(const sc_pages &pg, const pg_meta &mine, uint32_t sm_sa, int st) {
    using G = pg_geom16<HI>;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = lane & 1;
    pg_meta other;
    other.flag = __shfl_xor_sync(0xffffffffu, mine.flag, 1);
    other.page = __shfl_xor_sync(0xffffffffu, mine.page, 1);
    other.off = __shfl_xor_sync(0xffffffffu, mine.off, 1);
    float scale = 0.f;
#pragma unroll
    for (int j = 0; j < 2; j++) {
        const bool own = j == part;
        const pg_meta m = own ? mine : other;
        const int r = pg_row16(warp, (lane & ~1) | j);
        const int ok = m.flag != 0;
        const uint8_t *base = pg.pages + (int64_t)m.page * pg.page_bytes;
        const uint8_t *src = base + (int64_t)m.off * G::RB + part * 16;
        const uint32_t drow = sm_sa + (uint32_t)(G::KEYS + (st * G::ROWS + r) * G::RB);
        const uint32_t x16 = (uint32_t)((part ^ (r & 7)) * 16);
#pragma unroll
        for (int k = 0; k < G::RB / 32; k++) la_cp16z_sa(drow + (x16 ^ (k << 5)), src + k * 32, ok ? 16 : 0);
        if (own && ok) scale = __ldg((const float *)(base + (int64_t)pg.ps * G::RB) + m.off);
    }
    return scale;
}

/* pg_gather_kernel for e4m3 keys and queries: the same grid, row prologue
 * and pipeline, two m-tiles per warp (256-candidate chunks), the MMA as
 * above */
template <int HI>
__global__ void __launch_bounds__(SC_THREADS, 2) pg_gather_f16q_kernel(la_sp_score_args a, sc_pages pg, int32_t per) {
    using G = pg_geom16<HI>;
    static_assert(PG_STAGES == 3, "the chunk loop below is unrolled by PG_STAGES");
    constexpr int NT = G::NT, RB = G::RB, KS = G::KS, SWZ = 7, MT = G::MT, ROWS = G::ROWS;
    const float *ws = (const float *)(pg_sm + G::WS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int qd = lane & 3;
    pg_row row;
    if (!pg_row_begin<ROWS>(a, pg, per, row)) return;
    const int32_t c0 = row.c0, c1 = row.c1;
    const uint32_t sm_sa = (uint32_t)__cvta_generic_to_shared(pg_sm);
    const int mrow = pg_row16(warp, lane); /* this thread's lookup and output row */

    pg_qf16_raw<HI> qraw;
    pg_qf16_fetch<HI>(a, row.t, qraw);
    /* per stage: this row's scale, and its flag at bits 2·stage (fixed registers: the loop is unrolled) */
    float scale[PG_STAGES] = {0.f, 0.f, 0.f};
    uint32_t flags = 0;
    pg_meta nx = {0, 0, 0};
#pragma unroll
    for (int st = 0; st < PG_STAGES - 1; st++) {
        if (c0 + st < c1) {
            nx = pg_lookup(a, pg, row, (uint32_t)(c0 + st) * ROWS + mrow);
            scale[st] = pg_issue16<HI>(pg, nx, sm_sa, st);
            flags |= (uint32_t)nx.flag << (2 * st);
        }
        la_cp_commit_nc();
    }
    if (c0 + PG_STAGES - 1 < c1) nx = pg_lookup(a, pg, row, (uint32_t)(c0 + PG_STAGES - 1) * ROWS + mrow);
    /* plain stores: visible after the loop's first barrier */
    pg_qf16_store<HI>(qraw);
    for (int h = threadIdx.x; h < HI; h += SC_THREADS) ((float *)ws)[h] = sc_wq(a, sc_scales{}, row.t, h);

    /* ldmatrix addresses of A at k-step 0 as in pg_gather_kernel, for the
     * warp's two m-tiles; B: this lane's 16-byte entry of n-tile 0, k-step 0 */
    uint32_t a_off;
    {
        const int ra = 16 * MT * warp + (lane & 7) + ((lane >> 3) & 1) * 8, ca = lane >> 4;
        a_off = (uint32_t)(G::KEYS + ra * RB + ((ca ^ (ra & SWZ)) * 16));
    }
    const uint32_t b_sa = sm_sa + (uint32_t)lane * 16;

    auto chunk = [&](auto stage_c, int32_t c) {
        constexpr int S = decltype(stage_c)::value, SN = (S + PG_STAGES - 1) % PG_STAGES;
        asm volatile("cp.async.wait_group %0;\n" ::"n"(PG_STAGES - 2));
        __syncthreads(); /* chunk c landed; everyone is done with chunk c - 1's stage */
        {
            const int32_t cn = c + PG_STAGES - 1;
            if (cn < c1) {
                scale[SN] = pg_issue16<HI>(pg, nx, sm_sa, SN);
                flags = (flags & ~(3u << (2 * SN))) | ((uint32_t)nx.flag << (2 * SN));
            }
            la_cp_commit_nc();
            if (cn + 1 < c1) nx = pg_lookup(a, pg, row, (uint32_t)(cn + 1) * ROWS + mrow);
        }
        float acc[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;
        const uint32_t ka = a_off + (uint32_t)S * (ROWS * RB);
#pragma unroll 1
        for (int ks = 0; ks < KS; ks++) {
            const uint32_t kx = (uint32_t)ks << 5;
            uint32_t alo[MT][4], ahi[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                uint32_t raw[4];
                pg_ldsm4(raw, sm_sa + (ka ^ kx) + mt * 16 * RB);
#pragma unroll
                for (int i = 0; i < 4; i++) pg_e4m3x4_f16x2(raw[i], alo[mt][i], ahi[mt][i]);
            }
            const uint32_t bk = b_sa + (uint32_t)ks * (NT * 512);
#pragma unroll
            for (int j = 0; j < NT; j++) {
                uint4 b;
                asm volatile("ld.shared.v4.b32 {%0,%1,%2,%3}, [%4];\n"
                             : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "r"(bk + j * 512));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) pg_mma_e4m3_f16(acc[mt][j], alo[mt], ahi[mt], b);
            }
        }
        float part[MT][2];
        sc_head_sum<MT, NT>(acc, ws, qd, part);
        /* lane qd stores key mrow (m-tile qd / 2, row g + 8·(qd & 1)) */
        {
            const int hh = qd & 1;
            const float v0 = hh ? part[0][1] : part[0][0], v1 = hh ? part[1][1] : part[1][0];
            const float v = qd >> 1 ? v1 : v0;
            const int64_t p = (int64_t)c * ROWS + mrow;
            if (p < a.ncols) {
                const uint32_t flag = (flags >> (2 * S)) & 3u;
                float o = v * scale[S];
                if (flag == 0) o = -INFINITY;
                else if (flag == 2) o = INFINITY;
                row.orow[p] = o;
            }
        }
    };
    for (int32_t c = c0;;) {
        chunk(std::integral_constant<int, 0>{}, c);
        if (++c >= c1) break;
        chunk(std::integral_constant<int, 1>{}, c);
        if (++c >= c1) break;
        chunk(std::integral_constant<int, 2>{}, c);
        if (++c >= c1) break;
    }
    la_cp_wait_all_nc();
}

size_t pg_smem(int HI, int EB) {
    if (EB == 1) return HI == 64 ? pg_geom16<64>::SMEM : pg_geom16<32>::SMEM;
    return HI == 64 ? pg_geom<64>::SMEM : pg_geom<32>::SMEM;
}

/* EB 1: e4m3 (pg_gather_f16q_kernel), 2: bf16 (pg_gather_kernel) */
template <int HI, int EB>
la_status pg_gather_launch(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s) {
    using G = std::conditional_t<EB == 1, pg_geom16<HI>, pg_geom<HI>>;
    const size_t smem = pg_smem(HI, EB);
    const void *fn;
    if constexpr (EB == 1) fn = (const void *)pg_gather_f16q_kernel<HI>;
    else fn = (const void *)pg_gather_kernel<HI>;
    LA_TRY(la_cu_func_smem(a.ctx, fn, smem, smem, true));
    /* one wave of 2 CTAs per SM where the rows have the chunks for it: the
     * fewest chunks per CTA that fill the slots (a decode batch of 64 rows
     * at 128K: 8 chunks of 256 candidates, 4 CTAs per row) */
    const int64_t nchunks = la_cu_cdiv(a.ncols, G::ROWS);
    int64_t per = la_cu_cdiv(nchunks * a.T, 2 * (int64_t)la_cu_device_attr(cudaDevAttrMultiProcessorCount, 132));
    if (per > nchunks) per = nchunks;
    if (per < 1) per = 1;
    dim3 grid((unsigned)la_cu_cdiv(nchunks, per), (unsigned)a.T);
    if constexpr (EB == 1)
        pg_gather_f16q_kernel<HI><<<grid, SC_THREADS, smem, s>>>(a, pg, (int32_t)per);
    else
        pg_gather_kernel<HI><<<grid, SC_THREADS, smem, s>>>(a, pg, (int32_t)per);
    LA_CU_LAUNCH(EB == 2 ? "paged candidate scores (bf16 gather)" : "paged candidate scores (fp8 e4m3 gather)");
    return LA_OK;
}

} // namespace

bool la_sp_paged_gather_ok(const la_sp_score_args &a, const sc_pages &pg, int EB) {
    return a.blocks && (a.HI == 64 || a.HI == 32) && a.dI == 128 && (EB == 1 || EB == 2) &&
           (pg.fp8 != 0) == (EB == 1) && ((uintptr_t)pg.pages & 15) == 0 && pg.page_bytes % 16 == 0 &&
           a.T >= 1 && a.T <= 65535 && a.ncols <= (int64_t)INT32_MAX &&
           /* the ring fits a CTA (bf16 HI 64: 113 KB; not on sm_86 / sm_89) */
           pg_smem((int)a.HI, EB) <= (size_t)la_cu_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
}

la_status la_sp_scores_paged_gather(const la_sp_score_args &a, const sc_pages &pg, int EB, cudaStream_t s) {
    if (EB == 1) return a.HI == 64 ? pg_gather_launch<64, 1>(a, pg, s) : pg_gather_launch<32, 1>(a, pg, s);
    return a.HI == 64 ? pg_gather_launch<64, 2>(a, pg, s) : pg_gather_launch<32, 2>(a, pg, s);
}
