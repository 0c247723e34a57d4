/* HISA's candidate scores on the paged cache, gather mode (paged_index_tc.cuh:
 * la_sp_scores_paged with a.blocks; the decode path of family
 * "paged_hisa_cand", variant "gather").
 *
 * Why: sc_mma_kernel's gather mode (dsa.cu) gives each CTA 256 candidates
 * of one query and loads their A fragments straight into registers with
 * 4-byte loads, each after two dependent lookups (kept block, page): 32 A
 * registers next to 64 accumulators spill at its 128-register bound, and a
 * CTA's loads, MMAs and epilogue run one after the other. Here a CTA scores
 * `per` consecutive 256-candidate chunks of one query row as
 * sc_gather_kernel does for dense bf16: the candidates' key rows go through
 * the block table (page table[seq][s / ps], row s % ps, the fp32 scale from
 * the page's scale area) by cp.async into a PG_STAGES-deep ring of swizzled
 * shared-memory stages (zero-filled where a candidate is invalid), and the
 * warps read them as A fragments with ldmatrix; the query block stays in
 * shared memory (B fragments, ldmatrix). The lookups of chunk n + 1 are
 * issued while chunk n's copies are, so their latency overlaps a chunk's
 * MMAs; each thread pair copies two rows, and each row's lookup is done
 * once, by one thread of the pair (the other gets it by a shuffle).
 *
 * Bits: per (query, key) the instruction sequence is sc_mma_kernel's in its
 * gather + PAGED mode. The A registers hold the same bytes (an e4m3 or bf16
 * m16n8k{32,16} A fragment = 4 bytes at row g / g + 8, bytes ks·32 + 4qd
 * and ks·32 + 16 + 4qd: ldmatrix of the 16-byte chunks 2ks and 2ks + 1 of
 * rows 0-7 / 8-15 gives exactly those, zero for an invalid key as the
 * direct loads give), B comes from the same sc_load_q staging and ldmatrix
 * addressing, every accumulator starts at 0 and takes the same mma.sync
 * over k-steps ascending (sc_mma), and the epilogue is the same: ReLU-
 * weighted head fold over j ascending with fmaf, two xor shuffles over the
 * quad, times the key's fp32 scale (fp8), -inf for an invalid key
 * (sc_key_of), +inf for a forced end. An mma's output element depends only
 * on its own row, column and accumulator, so which keys share a tile or a
 * CTA changes nothing. */
#include "cuda/cuda_ops.h"
#include "cuda/dsa_mma.cuh"
#include "cuda/paged_index_tc.cuh"

namespace {

enum { PG_STAGES = 3 };

extern __shared__ __align__(128) uint8_t pg_sm[]; /* pg_geom's layout */

/* Stage geometry: e4m3 (EB = 1) rows are 128 bytes, so a warp takes 32 keys
 * (two m-tiles, each B fragment used twice as in sc_mma_kernel's MT = 2);
 * bf16 rows are 256 bytes, 16 keys per warp: 32 KB per stage either way,
 * and two CTAs per SM fit (227 KB). */
template <int HI, int EB> struct pg_geom {
    static constexpr int RB = 128 * EB;                  /* bytes per key row (dI = 128) */
    static constexpr int MT = EB == 1 ? 2 : 1;           /* m-tiles per warp */
    static constexpr int ROWS = SC_WARPS * 16 * MT;      /* candidates per chunk (stage) */
    static constexpr int RPT = ROWS / (SC_THREADS / 2);  /* rows per thread pair */
    /* shared memory: the query block at 0, then the byte offsets of */
    static constexpr size_t KEYS = (size_t)HI * RB;                             /* the stages' key rows */
    static constexpr size_t SCALES = KEYS + (size_t)PG_STAGES * ROWS * RB;      /* (fp8) their fp32 scales */
    static constexpr size_t WS = SCALES + (EB == 1 ? (size_t)PG_STAGES * ROWS * 4 : 0); /* the head weights */
    static constexpr size_t FLAGS = WS + (size_t)HI * 4;                        /* the keys' pg_meta flags */
    static constexpr size_t SMEM = FLAGS + (size_t)PG_STAGES * ROWS;
};

/* One candidate row's lookup: flag 0 invalid (score -inf), 1 valid, 2 a
 * forced end (+inf); page and row of the key when valid. */
struct pg_meta {
    int32_t flag, page, off;
};

/* Candidate p of the CTA's row: sc_key_of's map (dsa_mma.cuh) in 32-bit
 * arithmetic where it cannot overflow (p < lim = min(ncols, m·B) < 2^31,
 * a block's tokens and positions < 2^31), then the page of the key.
 * brow: the row's kept blocks; trow: its sequence's block-table row. */
__device__ __forceinline__ pg_meta pg_lookup(const la_sp_score_args &a, const sc_pages &pg, const int32_t *brow,
                                             const int32_t *trow, uint32_t lim, uint32_t p, int32_t lo, int32_t hi) {
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

__device__ __forceinline__ void pg_cp4z_sa(uint32_t sa, const void *gsrc, int src_bytes) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(gsrc), "r"(src_bytes));
}

/* Chunk n's rows into stage st: thread pair i copies rows i and i + 128
 * (e4m3) or row i (bf16), each thread the 16-byte chunks of its parity, so
 * a warp's copies cover whole 32-byte sectors. mine is the lookup of this
 * thread's row (i + 128·part for e4m3; row i for both threads for bf16). */
template <int HI, int EB>
__device__ __forceinline__ void pg_issue(const sc_pages &pg, const pg_meta &mine, uint32_t sm_sa, int st) {
    using G = pg_geom<HI, EB>;
    constexpr int CPR = G::RB / 16;
    const int part = threadIdx.x & 1;
    pg_meta other = mine;
    if constexpr (G::RPT == 2) {
        other.flag = __shfl_xor_sync(0xffffffffu, mine.flag, 1);
        other.page = __shfl_xor_sync(0xffffffffu, mine.page, 1);
        other.off = __shfl_xor_sync(0xffffffffu, mine.off, 1);
    }
#pragma unroll
    for (int j = 0; j < G::RPT; j++) {
        const bool own = G::RPT == 1 || j == part;
        const pg_meta m = own ? mine : other;
        const int r = (threadIdx.x >> 1) + j * (SC_THREADS / 2);
        const int ok = m.flag != 0;
        const uint8_t *base = pg.pages + (int64_t)m.page * pg.page_bytes;
        const uint8_t *src = base + (int64_t)m.off * G::RB + part * 16;
        /* chunk ch = part + 2k of row r at ch ^ (r & 7) = (part ^ (r & 7)) ^ 2k */
        const uint32_t drow = sm_sa + (uint32_t)(G::KEYS + (st * G::ROWS + r) * G::RB);
        const uint32_t x16 = (uint32_t)((part ^ (r & 7)) * 16);
#pragma unroll
        for (int k = 0; k < CPR / 2; k++) la_cp16z_sa(drow + (x16 ^ (k << 5)), src + k * 32, ok ? 16 : 0);
        if (own && (G::RPT == 2 || part == 0)) {
            const uint32_t i = (uint32_t)(st * G::ROWS + r);
            if (EB == 1)
                pg_cp4z_sa(sm_sa + (uint32_t)G::SCALES + i * 4, base + (int64_t)pg.ps * G::RB + (int64_t)m.off * 4,
                           ok ? 4 : 0);
            pg_sm[G::FLAGS + i] = (uint8_t)m.flag;
        }
    }
}

__device__ __forceinline__ void pg_ldsm4(uint32_t *r, uint32_t sa) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(sa));
}

/* grid (CTAs per row, T); CTA (x, y) scores chunks [x·per, (x + 1)·per) of
 * the ceil(ncols / ROWS) chunks of query row y. */
template <int HI, int EB>
__global__ void __launch_bounds__(SC_THREADS, 2) pg_gather_kernel(la_sp_score_args a, sc_pages pg, int32_t per) {
    using G = pg_geom<HI, EB>;
    constexpr int NT = HI / 8, RB = G::RB, KS = RB / 32, SWZ = 7, MT = G::MT, ROWS = G::ROWS;
    const float *ws = (const float *)(pg_sm + G::WS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, qd = lane & 3;
    /* 32-bit loop state (ncols < 2^31, context lengths int32): fewer registers */
    const int32_t t = blockIdx.y;
    const int32_t nchunks = (int32_t)((a.ncols + ROWS - 1) / ROWS);
    const int32_t c0 = (int32_t)blockIdx.x * per, c1 = min(nchunks, c0 + per);
    if (c0 >= c1) return;
    const int32_t *brow = a.blocks + (int64_t)t * a.blocks_ld;
    const int32_t *trow = pg.table + (int64_t)pg.row_seq[t] * pg.maxp;
    const uint32_t lim = (uint32_t)min(a.ncols, a.m * a.B);
    const uint32_t sm_sa = (uint32_t)__cvta_generic_to_shared(pg_sm);
    float *orow = a.out + (int64_t)t * a.out_ld;
    int32_t lo, hi;
    {
        int64_t lo64, hi64;
        la_sp_row_range(a.range, t, &lo64, &hi64);
        lo = (int32_t)lo64;
        hi = (int32_t)hi64;
    }
    /* this thread's lookup row within a chunk */
    const int mrow = (threadIdx.x >> 1) + (G::RPT == 2 ? (threadIdx.x & 1) * (SC_THREADS / 2) : 0);

    sc_load_q<HI, 128, EB>(a, sc_scales{}, t, pg_sm, (float *)ws); /* commits group 0 */
    pg_meta nx = {0, 0, 0}; /* the lookup of the next chunk to issue */
    for (int st = 0; st < PG_STAGES - 1; st++) {
        if (c0 + st < c1) {
            nx = pg_lookup(a, pg, brow, trow, lim, (uint32_t)(c0 + st) * ROWS + mrow, lo, hi);
            pg_issue<HI, EB>(pg, nx, sm_sa, st);
        }
        la_cp_commit_nc();
    }
    if (c0 + PG_STAGES - 1 < c1) nx = pg_lookup(a, pg, brow, trow, lim, (uint32_t)(c0 + PG_STAGES - 1) * ROWS + mrow, lo, hi);

    /* ldmatrix addresses at k-step 0 (shared window): A, lanes 0-7 / 8-15 /
     * 16-23 / 24-31 = rows 0-7 / 8-15 of chunk 2ks, then of chunk 2ks + 1
     * (a0..a3 of the m16n8k{32,16} A fragment, rows g, g + 8); B, heads
     * 16jp + 0-7 of chunks 2ks, 2ks + 1, then heads + 8 (b0, b1 of n-tiles
     * 2jp, 2jp + 1), as sc_mma_kernel reads q. Row r's chunk c is at
     * c ^ (r & 7), so k-step ks is the k-step-0 offset XOR ks << 5 (the
     * offsets from pg_sm; the rows start at multiples of RB). */
    uint32_t a_off, b_off;
    {
        const int ra = 16 * MT * warp + (lane & 7) + ((lane >> 3) & 1) * 8, ca = lane >> 4;
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
            if (cn < c1) pg_issue<HI, EB>(pg, nx, sm_sa, stage == 0 ? PG_STAGES - 1 : stage - 1);
            la_cp_commit_nc();
            if (cn + 1 < c1) nx = pg_lookup(a, pg, brow, trow, lim, (uint32_t)(cn + 1) * ROWS + mrow, lo, hi); /* used next iteration */
        }
        float acc[MT][NT][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int j = 0; j < NT; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[mt][j][e] = 0.f;
        /* k-steps not unrolled: one step's fragments live at a time (the
         * 64 accumulators of e4m3's two m-tiles leave no room for more) */
        const uint32_t ka = a_off + (uint32_t)stage * (ROWS * RB);
#pragma unroll 1
        for (int ks = 0; ks < KS; ks++) {
            const uint32_t kx = (uint32_t)ks << 5; /* chunk 2ks + bit at (2ks + bit) ^ (r & 7): (ks << 5) ^ x */
            uint32_t af[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) pg_ldsm4(af[mt], sm_sa + (ka ^ kx) + mt * 16 * RB);
#pragma unroll
            for (int jp = 0; jp < NT / 2; jp++) {
                uint32_t b[4];
                pg_ldsm4(b, sm_sa + (b_off ^ kx) + jp * 16 * RB);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    sc_mma<EB>(acc[mt][2 * jp], af[mt], b[0], b[1]);
                    sc_mma<EB>(acc[mt][2 * jp + 1], af[mt], b[2], b[3]);
                }
            }
        }
        /* sc_mma_kernel's epilogue: heads 8j+2qd, 8j+2qd+1 of keys g, g+8 */
        float part[MT][2];
        sc_head_sum<MT, NT>(acc, ws, qd, part);
        /* lane qd of the quad stores key (m-tile qd / 2, row g + 8·(qd & 1)) */
        if (qd / 2 < MT) {
            const int mt = qd / 2, hh = qd & 1;
            /* selects, not an indexed array (which would live in local memory) */
            const float v0 = hh ? part[0][1] : part[0][0], v1 = hh ? part[MT - 1][1] : part[MT - 1][0];
            const float v = MT == 2 && mt == 1 ? v1 : v0;
            const int row = 16 * (MT * warp + mt) + g + 8 * hh;
            const int64_t p = (int64_t)c * ROWS + row;
            if (p < a.ncols) {
                const size_t i = (size_t)stage * ROWS + row;
                const int flag = pg_sm[G::FLAGS + i];
                float o = v;
                if (EB == 1) o = v * ((const float *)(pg_sm + G::SCALES))[i];
                if (flag == 0) o = -INFINITY;
                else if (flag == 2) o = INFINITY;
                orow[p] = o;
            }
        }
    }
    la_cp_wait_all_nc();
}

/* SM count, and the opt-in shared memory per CTA, of the current device
 * (cheap host-side queries, asked per call: no cached static) */
int pg_device_attr(cudaDeviceAttr attr, int fallback) {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, attr, dev) == cudaSuccess && n > 0)
        return n;
    cudaGetLastError();
    return fallback;
}

size_t pg_smem(int HI, int EB) {
    if (EB == 1) return HI == 64 ? pg_geom<64, 1>::SMEM : pg_geom<32, 1>::SMEM;
    return HI == 64 ? pg_geom<64, 2>::SMEM : pg_geom<32, 2>::SMEM;
}

template <int HI, int EB>
la_status pg_gather_launch(const la_sp_score_args &a, const sc_pages &pg, cudaStream_t s) {
    using G = pg_geom<HI, EB>;
    const void *fn = (const void *)pg_gather_kernel<HI, EB>;
    LA_TRY(la_cu_func_smem(a.ctx, fn, G::SMEM, G::SMEM, true));
    /* one wave of 2 CTAs per SM where the rows have the chunks for it: the
     * fewest chunks per CTA that fill the slots (a decode batch of 64 rows
     * at 128K: 8 chunks of 256 candidates, 4 CTAs per row) */
    const int64_t nchunks = la_cu_cdiv(a.ncols, G::ROWS);
    int64_t per = la_cu_cdiv(nchunks * a.T, 2 * (int64_t)pg_device_attr(cudaDevAttrMultiProcessorCount, 132));
    if (per > nchunks) per = nchunks;
    if (per < 1) per = 1;
    dim3 grid((unsigned)la_cu_cdiv(nchunks, per), (unsigned)a.T);
    pg_gather_kernel<HI, EB><<<grid, SC_THREADS, G::SMEM, s>>>(a, pg, (int32_t)per);
    LA_CU_LAUNCH(EB == 2 ? "paged candidate scores (bf16 gather)" : "paged candidate scores (fp8 e4m3 gather)");
    return LA_OK;
}

} // namespace

bool la_sp_paged_gather_ok(const la_sp_score_args &a, const sc_pages &pg, int EB) {
    return a.blocks && (a.HI == 64 || a.HI == 32) && a.dI == 128 && (EB == 1 || EB == 2) &&
           (pg.fp8 != 0) == (EB == 1) && ((uintptr_t)pg.pages & 15) == 0 && pg.page_bytes % 16 == 0 &&
           a.T >= 1 && a.T <= 65535 && a.ncols <= (int64_t)INT32_MAX &&
           /* the ring fits a CTA (bf16 HI 64: 113 KB; not on sm_86 / sm_89) */
           pg_smem((int)a.HI, EB) <= (size_t)pg_device_attr(cudaDevAttrMaxSharedMemoryPerBlockOptin, 0);
}

la_status la_sp_scores_paged_gather(const la_sp_score_args &a, const sc_pages &pg, int EB, cudaStream_t s) {
    if (EB == 1) return a.HI == 64 ? pg_gather_launch<64, 1>(a, pg, s) : pg_gather_launch<32, 1>(a, pg, s);
    return a.HI == 64 ? pg_gather_launch<64, 2>(a, pg, s) : pg_gather_launch<32, 2>(a, pg, s);
}
