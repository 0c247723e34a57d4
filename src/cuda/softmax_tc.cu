/* Tensor-core softmax attention forward (SPEC §1), FA2-style, bf16 or fp16
 * q/k/v/out (fp32 accumulation, fp32 lse), head dims D, Dv ∈ {32, 64, 128}
 * (the pairs la_softmax_tc_applies lists).
 *
 * One CTA per (BQ queries, head, batch); each warp owns 16·MT query rows
 * (tilings: softmax_tc.cuh). Key/value tiles of BKV rows stream through
 * shared memory with cp.async, double-buffered (the load of tile j+1 is in
 * flight while tile j is computed; one __syncthreads per tile). Rows are
 * stored with a 16-byte XOR swizzle (chunk c of row r at chunk c ^ (r & 7)),
 * so every ldmatrix is free of bank conflicts. Per tile and warp:
 *     S = Q Kᵀ         mma.sync m16n8k16 bf16/f16 → fp32; Q fragments in
 *                      registers (QREG) or ldmatrix'ed per k-step, K by
 *                      ldmatrix (K rows are the "col" B operand as stored)
 *     S ← S·scale·log2e, masked keys (key ≥ Nk, causal key > t + Nk − Nq)
 *                      set to −inf before the row max
 *     m' = max(m, rowmax S),  P = 2^(S − m'),  l = l·2^(m−m') + rowsum P,
 *     O = O·2^(m−m') + P V  P packed to bf16/f16 A fragments in registers as
 *                      it is computed, V by ldmatrix.trans
 * and at the end o = O / l (the input dtype), lse = m·ln2 + ln l. Rows that see no key
 * give o = 0, lse = −inf. Causal: CTAs take q tiles heaviest first, stop at
 * the last key tile their last row sees, and warps skip tiles none of their
 * rows sees; only tiles that straddle the diagonal or the end of the keys
 * are masked. Keys and queries past the end are zero-filled by cp.async. */
#include "softmax_tc.cuh"

/* The kernel body is written against the small set of warp primitives below.
 * In the library they are the PTX instructions. With LA_SMTC_EMU defined
 * (dev/emu_softmax_tc.cu, which #includes this file) the body is also
 * compiled for the host and the primitives call the emulator's hooks, which
 * run a CTA's threads as coroutines with the documented fragment layouts:
 * that is how the indexing was checked without a GPU. */
#ifdef LA_SMTC_EMU
#define TC_FN __host__ __device__ __forceinline__
void emu_ldsm_x4(uint32_t *r, const void *p, bool trans);
void emu_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1, bool f16);
void emu_cp16z(void *dst, const void *src, int bytes);
void emu_cp_wait_all();
float emu_shfl_xor(float v, int mask);
void emu_syncthreads();
#else
#define TC_FN __device__ __forceinline__
#endif

namespace {

struct tc_args {
    const void *q, *k, *v; /* elements of the kernel's type T (bf16 or f16) */
    void *o;
    int64_t qb, qn, qh, kb, kn, kh, vb, vn, vh, ob, on, oh; /* strides, elements */
    void *lse;
    int lse_dt;
    int64_t lb, ln, lh;
    int Nq, Nk, group; /* group = H / Hk */
    float sl2;         /* scale · log2 e */
    int causal;
};

/* c += a·b, m16n8k16 fragments of T (bf16 or f16), fp32 accumulators */
template <typename T>
TC_FN void mma_t(float *c, const uint32_t *a, uint32_t b0, uint32_t b1);
template <>
TC_FN void mma_t<__nv_bfloat16>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(LA_SMTC_EMU)
    emu_mma(c, a, b0, b1, false);
#endif
}
template <>
TC_FN void mma_t<__half>(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#elif defined(LA_SMTC_EMU)
    emu_mma(c, a, b0, b1, true);
#endif
}
/* four 8x8 b16 matrices from shared memory (lane l gives row l % 8 of
 * matrix l / 8); trans: transposed */
TC_FN void ldsm_x4(uint32_t *r, const void *p) {
#if defined(__CUDA_ARCH__)
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sa));
#elif defined(LA_SMTC_EMU)
    emu_ldsm_x4(r, p, false);
#endif
}
TC_FN void ldsm_x4_t(uint32_t *r, const void *p) {
#if defined(__CUDA_ARCH__)
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(sa));
#elif defined(LA_SMTC_EMU)
    emu_ldsm_x4(r, p, true);
#endif
}
/* 16-byte async copy global → shared; src_bytes 0 zero-fills (src not read) */
TC_FN void cp16z(void *sdst, const void *gsrc, int src_bytes) {
#if defined(__CUDA_ARCH__)
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
#elif defined(LA_SMTC_EMU)
    emu_cp16z(sdst, gsrc, src_bytes);
#endif
}
TC_FN void cp_commit() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
TC_FN void cp_wait_all() {
#if defined(__CUDA_ARCH__)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
#elif defined(LA_SMTC_EMU)
    emu_cp_wait_all();
#endif
}
TC_FN void bar_sync() {
#if defined(__CUDA_ARCH__)
    __syncthreads();
#elif defined(LA_SMTC_EMU)
    emu_syncthreads();
#endif
}
TC_FN float shfl_xor(float v, int mask) {
#if defined(__CUDA_ARCH__)
    return __shfl_xor_sync(0xffffffffu, v, mask);
#elif defined(LA_SMTC_EMU)
    return emu_shfl_xor(v, mask);
#else
    return v;
#endif
}
TC_FN float ex2(float x) {
#if defined(__CUDA_ARCH__)
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}
/* two floats rounded to T, packed as one 32-bit fragment register */
template <typename T>
TC_FN uint32_t pack2(float lo, float hi);
template <>
TC_FN uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
template <>
TC_FN uint32_t pack2<__half>(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
}
TC_FN int imin(int a, int b) { return a < b ? a : b; }
TC_FN int imax(int a, int b) { return a > b ? a : b; }
/* lse store in its dtype (as la_cu_st) */
TC_FN void st_lse(void *p, int dt, int64_t off, float x) {
    switch (dt) {
    case LA_F32: ((float *)p)[off] = x; break;
    case LA_BF16: ((__nv_bfloat16 *)p)[off] = __float2bfloat16_rn(x); break;
    case LA_F64: ((double *)p)[off] = (double)x; break;
    case LA_F16: ((__half *)p)[off] = __float2half_rn(x); break;
    default: break;
    }
}

/* element offset of 16-byte chunk c of row r in a swizzled [rows][D] tile:
 * the 8 rows an ldmatrix reads at one logical chunk land on 8 different
 * 16-byte bank groups (rows of 128 bytes and more: c ^ (r & 7); rows of 64
 * bytes, D = 32, two to a bank window: c ^ ((r >> 1) & 3)). Either pattern
 * repeats every 8 rows. */
template <int D>
TC_FN int swz(int r, int c) {
    static_assert(D == 32 || D % 64 == 0, "head dim 32, 64 or a multiple of 64");
    if (D == 32) return r * D + ((c ^ ((r >> 1) & 3)) << 3);
    return r * D + ((c ^ (r & 7)) << 3);
}

/* One tile of ROWS rows of a [N][D] view into a swizzled smem tile. Thread
 * tid copies 16-byte chunk c = tid % CH of rows r0 + i·RSTEP (r0 = tid / CH);
 * RSTEP is a multiple of 8, so the swizzle of those rows is that of r0 and
 * the smem offsets are constants. s_thr = tile + swz(r0, c); g_thr = that
 * chunk of the tile's row r0 in global memory; step = RSTEP rows; rows with
 * i·RSTEP >= nvalid are zero-filled (their source is `safe`, never read). */
template <int D, int ROWS, int NT, typename T>
TC_FN void load_tile(T *s_thr, const T *g_thr, int64_t step, int nvalid, const T *safe) {
    constexpr int CH = D / 8, RSTEP = NT / CH;
    static_assert(RSTEP % 8 == 0 && ROWS % RSTEP == 0, "rows must split evenly over the threads");
#pragma unroll
    for (int i = 0; i < ROWS / RSTEP; i++) {
        const bool ok = i * RSTEP < nvalid;
        cp16z(s_thr + i * RSTEP * D, ok ? g_thr : safe, ok ? 16 : 0);
        g_thr += step;
    }
}

/* Whether the Q tile shares stage 1 of the K/V buffers (Q in registers and
 * small enough) */
template <int D, int DV, int MT, bool QREG, int NW, int BKV>
constexpr TC_FN bool q_aliases() {
    return QREG && 16 * MT * NW * D <= BKV * (D + DV);
}
/* shared memory of a tiling, bytes (16-bit elements) */
template <int D, int DV, int MT, bool QREG, int NW, int BKV>
constexpr size_t tc_smem_bytes() {
    return 2 * (size_t)(2 * BKV * (D + DV) + (q_aliases<D, DV, MT, QREG, NW, BKV>() ? 0 : 16 * MT * NW * D));
}

/* T: bf16 or f16; D: head dim of q, k; DV: of v and out. */
template <typename T, int D, int DV, int MT, bool QREG, int NW, int BKV>
TC_FN void tc_fwd_body(const tc_args &a, unsigned char *smem_raw, int tid, int bx, int h, int b,
                       int nqt) {
    constexpr int NT = NW * 32, BQ = 16 * MT * NW, KS = D / 16, NB = BKV / 8, ND = DV / 8;
    constexpr int SST = BKV * (D + DV); /* elements of one K + V stage */
    T *sm = reinterpret_cast<T *>(smem_raw);
    /* stage s: K at sm + s·SST, V right after; Q aliases stage 1 where it
     * fits there and lives in registers (read before stage 1 is first
     * written: q_aliases), else follows the stages. */
    T *Qs = q_aliases<D, DV, MT, QREG, NW, BKV>() ? sm + SST : sm + 2 * SST;

    const int warp = tid >> 5, lane = tid & 31;
    const int qt = a.causal ? nqt - 1 - bx : bx; /* heaviest first */
    const int q0 = qt * BQ, kh = h / a.group;
    const T *qg = (const T *)a.q + b * a.qb + h * a.qh;
    const T *kg = (const T *)a.k + b * a.kb + kh * a.kh;
    const T *vg = (const T *)a.v + b * a.vb + kh * a.vh;
    const int shift = a.Nk - a.Nq; /* causal: key s visible to query t iff s <= t + shift */
    const int qlast = imin(a.Nq, q0 + BQ) - 1;
    int kend = a.Nk;
    if (a.causal) kend = imax(0, imin(a.Nk, qlast + shift + 1));
    const int ntiles = (kend + BKV - 1) / BKV;
    const int wr0 = q0 + warp * 16 * MT; /* first query row of this warp */

    /* this thread's chunk of the tile loads (see load_tile): Q and K rows of
     * D, V rows of DV */
    constexpr int CH = D / 8, RSTEP = NT / CH, CHV = DV / 8, RSTEPV = NT / CHV;
    const int lr0 = tid / CH, lc = tid % CH, soff = swz<D>(lr0, lc);
    const int lv0 = tid / CHV, lcv = tid % CHV, soffv = swz<DV>(lv0, lcv);
    load_tile<D, BQ, NT>(Qs + soff, qg + (int64_t)(q0 + lr0) * a.qn + lc * 8, RSTEP * a.qn,
                         a.Nq - q0 - lr0, qg);
    if (ntiles > 0) {
        load_tile<D, BKV, NT>(sm + soff, kg + (int64_t)lr0 * a.kn + lc * 8, RSTEP * a.kn,
                              a.Nk - lr0, kg);
        load_tile<DV, BKV, NT>(sm + BKV * D + soffv, vg + (int64_t)lv0 * a.vn + lcv * 8,
                               RSTEPV * a.vn, a.Nk - lv0, vg);
    }
    cp_commit();

    uint32_t qf[QREG ? MT : 1][QREG ? KS : 1][4];
    if (QREG) {
        cp_wait_all();
        bar_sync();
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int kk = 0; kk < KS; kk++)
                ldsm_x4(qf[QREG ? mt : 0][QREG ? kk : 0],
                        Qs + swz<D>(warp * 16 * MT + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
    }

    float o[MT][ND][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int n = 0; n < ND; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) o[mt][n][e] = 0.f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.f;
    }

    for (int j = 0; j < ntiles; j++) {
        cp_wait_all();
        bar_sync(); /* tile j landed for all; every warp is done with tile j-1 */
        const int st = j & 1, j0 = j * BKV;
        if (j + 1 < ntiles) {
            T *nk = sm + (st ^ 1) * SST;
            const int r = j0 + BKV + lr0, rv = j0 + BKV + lv0;
            load_tile<D, BKV, NT>(nk + soff, kg + (int64_t)r * a.kn + lc * 8, RSTEP * a.kn, a.Nk - r,
                                  kg);
            load_tile<DV, BKV, NT>(nk + BKV * D + soffv, vg + (int64_t)rv * a.vn + lcv * 8,
                                   RSTEPV * a.vn, a.Nk - rv, vg);
        }
        cp_commit();
        /* causal: no row of this warp sees any key of this tile */
        if (a.causal && j0 > wr0 + 16 * MT - 1 + shift) continue;
        const T *Ks = sm + st * SST, *Vs = Ks + BKV * D;

        float s[MT][NB][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][n][e] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t qs[QREG ? 1 : MT][4];
            if (!QREG) {
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    ldsm_x4(qs[QREG ? 0 : mt],
                            Qs + swz<D>(warp * 16 * MT + mt * 16 + (lane & 15), kk * 2 + (lane >> 4)));
            }
#pragma unroll
            for (int np = 0; np < NB / 2; np++) {
                uint32_t kf[4];
                ldsm_x4(kf, Ks + swz<D>(np * 16 + (lane & 7) + ((lane >> 4) << 3),
                                        kk * 2 + ((lane >> 3) & 1)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint32_t *af = QREG ? qf[QREG ? mt : 0][QREG ? kk : 0] : qs[QREG ? 0 : mt];
                    mma_t<T>(s[mt][2 * np], af, kf[0], kf[1]);
                    mma_t<T>(s[mt][2 * np + 1], af, kf[2], kf[3]);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int n = 0; n < NB; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) s[mt][n][e] *= a.sl2;
        /* mask (scaled scores, so a negative scale cannot turn −inf into +inf) */
        if (j0 + BKV > a.Nk || (a.causal && j0 + BKV - 1 > wr0 + shift)) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int n = 0; n < NB; n++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        const int row = wr0 + mt * 16 + (lane >> 2) + ((e >> 1) << 3);
                        const int key = j0 + n * 8 + 2 * (lane & 3) + (e & 1);
                        if (key >= a.Nk || (a.causal && key > row + shift)) s[mt][n][e] = -INFINITY;
                    }
        }
        /* online softmax, rows g and g+8 of each m tile (a quad shares a row);
         * P goes straight into A fragments of P V (type T): keys 16kk..16kk+15
         * are S tiles 2kk (regs 0, 1) and 2kk+1 (regs 2, 3), rows g / g+8
         * alternate */
        uint32_t pa[MT][BKV / 16][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int hr = 0; hr < 2; hr++) {
                float mx = m[mt][hr];
#pragma unroll
                for (int n = 0; n < NB; n++) mx = fmaxf(mx, fmaxf(s[mt][n][2 * hr], s[mt][n][2 * hr + 1]));
                mx = fmaxf(mx, shfl_xor(mx, 1));
                mx = fmaxf(mx, shfl_xor(mx, 2));
                const float mu = mx == -INFINITY ? 0.f : mx; /* row saw no key yet: P = 0 */
                const float al = ex2(m[mt][hr] - mu);
                m[mt][hr] = mx;
                float sum = 0.f;
#pragma unroll
                for (int n = 0; n < NB; n++) {
                    const float p0 = ex2(s[mt][n][2 * hr] - mu), p1 = ex2(s[mt][n][2 * hr + 1] - mu);
                    sum += p0 + p1;
                    pa[mt][n >> 1][(n & 1) * 2 + hr] = pack2<T>(p0, p1);
                }
                l[mt][hr] = l[mt][hr] * al + sum;
#pragma unroll
                for (int n = 0; n < ND; n++) {
                    o[mt][n][2 * hr] *= al;
                    o[mt][n][2 * hr + 1] *= al;
                }
            }
        /* O += P V */
#pragma unroll
        for (int kk = 0; kk < BKV / 16; kk++) {
#pragma unroll
            for (int dp = 0; dp < ND / 2; dp++) {
                uint32_t vf[4];
                ldsm_x4_t(vf, Vs + swz<DV>(kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3),
                                           dp * 2 + (lane >> 4)));
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma_t<T>(o[mt][2 * dp], pa[mt][kk], vf[0], vf[1]);
                    mma_t<T>(o[mt][2 * dp + 1], pa[mt][kk], vf[2], vf[3]);
                }
            }
        }
    }
    cp_wait_all(); /* nothing left in flight at exit */

    /* epilogue: o = O / l, lse = m·ln2 + ln l */
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            float lt = l[mt][hr];
            lt += shfl_xor(lt, 1);
            lt += shfl_xor(lt, 2);
            const int row = wr0 + mt * 16 + (lane >> 2) + hr * 8;
            if (row >= a.Nq) continue;
            const float inv = lt > 0.f ? 1.f / lt : 0.f;
            T *orow = (T *)a.o + b * a.ob + (int64_t)row * a.on + h * a.oh + 2 * (lane & 3);
#pragma unroll
            for (int n = 0; n < ND; n++)
                *reinterpret_cast<uint32_t *>(orow + n * 8) =
                    pack2<T>(o[mt][n][2 * hr] * inv, o[mt][n][2 * hr + 1] * inv);
            if (a.lse && (lane & 3) == 0) {
                const float lse = lt > 0.f ? m[mt][hr] * 0.69314718055994531f + logf(lt) : -INFINITY;
                st_lse(a.lse, a.lse_dt, b * a.lb + (int64_t)row * a.ln + h * a.lh, lse);
            }
        }
}

template <typename T, int D, int DV, int MT, bool QREG, int NW, int MINB, int BKV>
__global__ void __launch_bounds__(NW * 32, MINB) tc_fwd_kernel(tc_args a) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    tc_fwd_body<T, D, DV, MT, QREG, NW, BKV>(a, smem_raw, (int)threadIdx.x, (int)blockIdx.x,
                                             (int)blockIdx.y, (int)blockIdx.z, (int)gridDim.x);
}

template <typename T, int D, int DV, int MT, bool QREG, int NW, int MINB, int BKV = 64>
la_status launch(const tc_args &a, int B, int H, cudaStream_t st) {
    constexpr int BQ = 16 * MT * NW;
    const size_t smem = tc_smem_bytes<D, DV, MT, QREG, NW, BKV>();
    auto kern = tc_fwd_kernel<T, D, DV, MT, QREG, NW, MINB, BKV>;
    LA_CU(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    const dim3 grid((unsigned)la_cu_cdiv(a.Nq, BQ), (unsigned)H, (unsigned)B);
    kern<<<grid, NW * 32, smem, st>>>(a);
    LA_CU_LAUNCH("softmax tc_fwd_kernel");
    return LA_OK;
}

/* The tilings by (D, Dv), for element type T: template D, Dv, query m tiles
 * a warp, Q in registers, warps, min CTAs an SM (BKV = 64). Q fragments stay
 * in registers where they and the O accumulators fit (D ≤ 64 with Dv ≤ 64),
 * else they are ldmatrix'ed from smem every tile. D = 32: 4 warps × 32 rows
 * at 3 CTAs an SM measured 10–20% faster than 8 warps × 32 rows (BQ = 256)
 * and 8 warps × 16 rows (docs/PERF.md, "Softmax head dims and fp16"). */
template <typename T>
la_status launch_dims(const tc_args &a, int D, int DV, int B, int H, cudaStream_t st) {
    if (D == 32 && DV == 32) return launch<T, 32, 32, 2, true, 4, 3>(a, B, H, st);
    if (D == 64 && DV == 64) return launch<T, 64, 64, 2, true, 4, 2>(a, B, H, st);
    if (D == 64 && DV == 128) return launch<T, 64, 128, 2, false, 4, 2>(a, B, H, st);
    if (D == 128 && DV == 64) return launch<T, 128, 64, 2, false, 4, 2>(a, B, H, st);
    return launch<T, 128, 128, 2, false, 4, 2>(a, B, H, st);
}

bool row_ok(const la_tensor *t, la_dtype dt) {
    if (!t || t->dtype != dt || t->ndim != 4 || t->nb[3] != 1) return false;
    if (((uintptr_t)t->data & 15) != 0) return false;
    for (int i = 0; i < 3; i++)
        if (t->nb[i] % 8 != 0) return false;
    return true;
}

}  // namespace

bool la_softmax_tc_dims(int64_t D, int64_t Dv) {
    return (D == Dv && (D == 32 || D == 64 || D == 128)) || (D == 64 && Dv == 128) ||
           (D == 128 && Dv == 64);
}

bool la_softmax_tc_applies(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                           const la_tensor *out) {
    if (!q || (q->dtype != LA_BF16 && q->dtype != LA_F16)) return false;
    if (!row_ok(q, q->dtype) || !row_ok(k, q->dtype) || !row_ok(v, q->dtype) || !row_ok(out, q->dtype))
        return false;
    if (!la_softmax_tc_dims(q->ne[3], v->ne[3])) return false;
    const int64_t lim = (int64_t)1 << 30;
    return q->ne[0] <= 65535 && q->ne[2] <= 65535 && q->ne[1] < lim && k->ne[1] < lim;
}

la_status la_softmax_tc_launch(const la_tensor *q, const la_tensor *k, const la_tensor *v,
                               la_tensor *out, la_tensor *lse, float scale, int causal,
                               cudaStream_t st) {
    tc_args a;
    a.q = q->data;
    a.k = k->data;
    a.v = v->data;
    a.o = out->data;
    a.qb = q->nb[0], a.qn = q->nb[1], a.qh = q->nb[2];
    a.kb = k->nb[0], a.kn = k->nb[1], a.kh = k->nb[2];
    a.vb = v->nb[0], a.vn = v->nb[1], a.vh = v->nb[2];
    a.ob = out->nb[0], a.on = out->nb[1], a.oh = out->nb[2];
    a.lse = lse ? lse->data : nullptr;
    a.lse_dt = lse ? (int)lse->dtype : 0;
    a.lb = lse ? lse->nb[0] : 0, a.ln = lse ? lse->nb[1] : 0, a.lh = lse ? lse->nb[2] : 0;
    const int64_t B = q->ne[0], H = q->ne[2];
    a.Nq = (int)q->ne[1];
    a.Nk = (int)k->ne[1];
    a.group = (int)(H / k->ne[2]);
    a.sl2 = scale * 1.4426950408889634f;
    a.causal = causal != 0;
    if (B == 0 || H == 0 || a.Nq == 0) return LA_OK;
    const int D = (int)q->ne[3], DV = (int)v->ne[3];
    if (q->dtype == LA_F16) return launch_dims<__half>(a, D, DV, (int)B, (int)H, st);
    return launch_dims<__nv_bfloat16>(a, D, DV, (int)B, (int)H, st);
}
