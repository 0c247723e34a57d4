/* Tiles, fragments and state helpers of the causal linear attention backward
 * kernels (linear_causal_bwd_tc.cu, the only file that includes this one: its
 * anonymous namespace is that file's). Shared memory holds row-major bf16
 * tiles of 64 tokens (rows padded to LD / LT elements, ldmatrix conflict
 * free); fragments are those of mma.sync m16n8k16; the same text runs on the
 * host emulator (bwd_emu.cuh) under LA_BWD_EMU. */
#ifndef LA_CUDA_LINEAR_CAUSAL_BWD_TILES_CUH
#define LA_CUDA_LINEAR_CAUSAL_BWD_TILES_CUH

#include "cuda/linblock_bwd_tc.cuh"
#include "cuda/linear_causal_bwd_tc.cuh"

namespace {
template <int DH> struct lc_cfg {
    static constexpr int LD = DH + 8;    /* row of DH bf16, padded (ldmatrix rows conflict-free) */
    static constexpr int LT = LT_T + 8;  /* row of the 64 tokens of a tile, padded */
    static constexpr int LS = DH + 4;    /* fp32 staging row */
    static constexpr int TN = DH / 16;   /* 64 × DH products: n-tiles per warp (DH/2 columns) */
    static constexpr int RB = DH / 16 < 8 ? DH / 16 : 8; /* DH × DH products: warps along rows */
    static constexpr int SN = DH / (8 / RB) / 8;         /* ... and n-tiles per warp */
    static constexpr int64_t SE = (int64_t)DH * DH + DH; /* a state [S | z] */
    static constexpr int CK = DH / 8;                    /* 16-byte pieces of a row */
    static constexpr int IT = LT_T * CK / LT_THREADS;    /* ... per thread per tile */
    static constexpr size_t RT = 2 * LT_T * LD, ST = 2 * DH * LD, PT = 2 * LT_T * LT; /* bytes */
};

struct lc_args {
    const lt_bf *q, *k, *v, *g;
    lt_bf *dq, *dk, *dv;
    int64_t qs[3], ks[3], vs[3], gs[3], dqs[3], dks[3], dvs[3]; /* b, n, h strides */
    int64_t N, H, L, nch, c0; /* c0: first chunk of a state-sum launch */
    int64_t nsum0; /* which = 2 (both sums in one launch): blocks x < nsum0 take which 0 */
    int f, norm, split;
    float scale_q, eps;
    float *hs;  /* [B·H][nch][SE]: ΔS_c, then h_c */
    float *dhs; /* [B·H][nch][SE]: ΔdH_c, then dH_c */
    float *w, *e; /* [B·H][N] (normalize only) */
    /* causal MHLA (L = 64: a chunk is a block): W[c,c] of block c scales the
     * block's own part, at mixw[h·mix_hs + c·(mix_ld + 1)] (NULL: 1); dwd
     * [B·H][nch] gets dW[c,c] (NULL: skip) */
    const float *mixw;
    int64_t mix_hs, mix_ld;
    float *dwd;
    int gs1; /* dk/dv walk without normalize: g unscaled, s on M and A in fp32 (so that
              * dW[c,c] has exact bf16 products; needs no running dH: L = 64) */
};

BWD_DEV inline float lc_wdiag(const lc_args &a, int64_t h, int64_t c) {
    return a.mixw ? a.mixw[h * a.mix_hs + c * (a.mix_ld + 1)] : 1.f;
}

BWD_DEV inline const lt_bf *lc_row(const lt_bf *base, const int64_t *s, int64_t b, int64_t t,
                                   int64_t h) {
    return base + b * s[0] + t * s[1] + h * s[2];
}

#ifndef LA_BWD_EMU
static __device__ __forceinline__ void lc_ldsm4(uint32_t *r, const lt_bf *p) { la_ldsm4(r, p); }
static __device__ __forceinline__ void lc_ldsm4t(uint32_t *r, const lt_bf *p) { la_ldsm4t(r, p); }
static __device__ __forceinline__ void lc_cp16(lt_bf *sm, const lt_bf *g, bool ok) {
    la_cp16z(sm, g, ok);
}
static __device__ __forceinline__ void lc_commit(void) { la_cp_commit(); }
static __device__ __forceinline__ void lc_wait1(void) { la_cp_wait<1>(); }
#else /* the emulator copies at once */
static inline void lc_ldsm4(uint32_t *r, const lt_bf *p) { bt_ldsm4(r, p); }
static inline void lc_ldsm4t(uint32_t *r, const lt_bf *p) { bt_ldsm4t(r, p); }
static inline void lc_cp16(lt_bf *sm, const lt_bf *g, bool ok) {
    if (ok) memcpy(sm, g, 16);
    else memset(sm, 0, 16);
}
static inline void lc_commit(void) {}
static inline void lc_wait1(void) {}
#endif

/* acc += A·B for one warp: rows m0..m0+15, columns n0..n0+8·NT−1, reduction
 * k < K (a multiple of 16), fragments by ldmatrix from row-major bf16 tiles:
 * A(m, k) at sA[m·la + k] or, AT, sA[k·la + m]; B(k, n) at sB[n·lb + k] or,
 * BT, sB[k·lb + n] (ldmatrix .trans for the transposed reads). */
template <int NT, bool AT, bool BT>
BWD_DEV inline void lc_mma(float (&acc)[NT][4], const lt_bf *sA, int la, const lt_bf *sB, int lb,
                           int m0, int n0, int K) {
    static_assert(NT % 2 == 0, "n-tiles in pairs");
    const int lane = lt_tid() & 31, li = lane & 7, lj = lane >> 3;
    for (int k0 = 0; k0 < K; k0 += 16) {
        uint32_t a[4];
        if (!AT) lc_ldsm4(a, sA + (m0 + 8 * (lj & 1) + li) * la + k0 + 8 * (lj >> 1));
        else lc_ldsm4t(a, sA + (k0 + 8 * (lj >> 1) + li) * la + m0 + 8 * (lj & 1));
#pragma unroll
        for (int np = 0; np < NT / 2; np++) {
            uint32_t b[4];
            const int nb = n0 + 16 * np;
            if (!BT) lc_ldsm4(b, sB + (nb + 8 * (lj >> 1) + li) * lb + k0 + 8 * (lj & 1));
            else lc_ldsm4t(b, sB + (k0 + 8 * (lj & 1) + li) * lb + nb + 8 * (lj >> 1));
            lt_mma(acc[2 * np], a, b[0], b[1]);
            lt_mma(acc[2 * np + 1], a, b[2], b[3]);
        }
    }
}

BWD_DEV inline uint4 lc_pack8(const lt_bf *e) {
    uint4 o;
    o.x = (uint32_t)e[0] | ((uint32_t)e[1] << 16);
    o.y = (uint32_t)e[2] | ((uint32_t)e[3] << 16);
    o.z = (uint32_t)e[4] | ((uint32_t)e[5] << 16);
    o.w = (uint32_t)e[6] | ((uint32_t)e[7] << 16);
    return o;
}

/* piece `it` of this thread in a tile of 64 rows of 16-byte pieces: row r, piece ch */
template <int DH> BWD_DEV inline void lc_piece(int it, int &r, int &ch) {
    const int p = lt_tid() + it * LT_THREADS;
    r = p / lc_cfg<DH>::CK, ch = p % lc_cfg<DH>::CK;
}
/* the 8 bf16 of a 16-byte piece as floats */
BWD_DEV inline void lc_unpack8(const uint4 &u, float (&x)[8]) {
    const uint32_t wd[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int j = 0; j < 8; j++) x[j] = lt_f((lt_bf)(wd[j / 2] >> (16 * (j % 2))));
}

/* The tiles by cp.async (two buffers: the next tile's
 * copies overlap the products of this one): lc_issue copies tokens [t0, t0 +
 * nr) of a view into sm[r][c] (rows nr..63 zero-filled), lc_map then
 * applies x = post · rs[r] · φ(x) in place to the pieces this thread copied
 * (so that its own cp.async.wait is all it needs before that). */
template <int DH>
BWD_DEV inline void lc_issue(const lt_bf *src, const int64_t *st, int64_t b, int64_t h, int64_t t0,
                             int nr, lt_bf *sm) {
    using C = lc_cfg<DH>;
#pragma unroll
    for (int it = 0; it < C::IT; it++) {
        int r, ch;
        lc_piece<DH>(it, r, ch);
        const bool ok = r < nr;
        lc_cp16(sm + r * C::LD + ch * 8, lc_row(src, st, b, t0 + (ok ? r : 0), h) + ch * 8, ok);
    }
}
template <int DH>
BWD_DEV inline void lc_map(lt_bf *sm, int nr, int f, float post, const float *rs,
                           lt_bf *sm_lo = nullptr) {
    using C = lc_cfg<DH>;
    if (!((f >= 0 && f != LA_FEATURE_IDENTITY) || rs || post != 1.f)) return;
#pragma unroll
    for (int it = 0; it < C::IT; it++) {
        int r, ch;
        lc_piece<DH>(it, r, ch);
        uint4 *lo = sm_lo ? reinterpret_cast<uint4 *>(sm_lo + r * C::LD + ch * 8) : nullptr;
        if (r >= nr) {
            if (lo) *lo = make_uint4(0, 0, 0, 0);
            continue;
        }
        uint4 *q = reinterpret_cast<uint4 *>(sm + r * C::LD + ch * 8);
        float xs[8];
        lc_unpack8(*q, xs);
        const float sc = post * (rs ? rs[r] : 1.f);
        lt_bf e[8], l[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float x = xs[j];
            if (f >= 0) x = bwd_feature(f, x);
            x *= sc;
            e[j] = lt_h(x);
            l[j] = lt_h(x - lt_f(e[j]));
        }
        *q = lc_pack8(e);
        if (lo) *lo = lc_pack8(l);
    }
}

/* rows [t0, t0 + nr) of an output view from the fp32 staging tile, times
 * φ'(x) of the input x (f >= 0, not the identity) */
template <int DH>
BWD_DEV inline void lc_write(const float *stage, lt_bf *dst, const int64_t *ds, const lt_bf *x,
                             const int64_t *xs, int f, int64_t b, int64_t h, int64_t t0, int nr) {
    using C = lc_cfg<DH>;
    if (!dst) return;
    const bool grad = f >= 0 && f != LA_FEATURE_IDENTITY;
#pragma unroll
    for (int it = 0; it < C::IT; it++) {
        int r, ch;
        lc_piece<DH>(it, r, ch);
        if (r >= nr) continue;
        float y[8];
#pragma unroll
        for (int j = 0; j < 8; j++) y[j] = stage[r * C::LS + ch * 8 + j];
        if (grad) {
            float xv[8];
            lc_unpack8(*reinterpret_cast<const uint4 *>(lc_row(x, xs, b, t0 + r, h) + ch * 8), xv);
#pragma unroll
            for (int j = 0; j < 8; j++) y[j] *= bwd_feature_grad(f, xv[j]);
        }
        lt_bf e[8];
#pragma unroll
        for (int j = 0; j < 8; j++) e[j] = lt_h(y[j]);
        lt_bf *drow = const_cast<lt_bf *>(lc_row(dst, ds, b, t0 + r, h));
        *reinterpret_cast<uint4 *>(drow + ch * 8) = lc_pack8(e);
    }
}

/* a 64 × 64 product of warp (m0, n0) (16 × 32) into bf16 dst[row][col]
 * (stride LT), col_add[col] added first (NULL: none), then times mul;
 * upper: keep col ≥ row, else col ≤ row; the rest zero */
template <int LT>
BWD_DEV inline void lc_store64(float (&acc)[4][4], lt_bf *dst, int m0, int n0, bool upper,
                               const float *col_add, float mul = 1.f) {
    const int lane = lt_tid() & 31, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < 4; nt++) {
        const int col = n0 + 8 * nt + 2 * cq;
        float x[4] = {acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]};
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int rr = m0 + g + 8 * (e >> 1), cc = col + (e & 1);
            if (col_add) x[e] += col_add[cc];
            x[e] *= mul;
            if (upper ? cc < rr : cc > rr) x[e] = 0.f;
        }
        lt_st2(dst + (m0 + g) * LT + col, x[0], x[1]);
        lt_st2(dst + (m0 + g + 8) * LT + col, x[2], x[3]);
    }
}

/* f(nt, r0, r1, col) for each n-tile of this warp's part of a DH × DH state
 * accumulator: acc[nt][0..1] at (r0, col..col+1), acc[nt][2..3] at (r1, ...) */
template <int DH, class F> BWD_DEV inline void lc_state_frags(F f) {
    using C = lc_cfg<DH>;
    const int warp = lt_tid() >> 5, lane = lt_tid() & 31, g = lane >> 2, cq = lane & 3;
    const int m0 = 16 * (warp % C::RB), n0 = C::SN * 8 * (warp / C::RB);
#pragma unroll
    for (int nt = 0; nt < C::SN; nt++) f(nt, m0 + g, m0 + g + 8, n0 + 8 * nt + 2 * cq);
}
/* a DH × DH state accumulator of this warp as bf16 rows sm[d][e] (stride LD) */
template <int DH>
BWD_DEV inline void lc_state_to_smem(const float (&acc)[lc_cfg<DH>::SN][4], lt_bf *sm) {
    lc_state_frags<DH>([&](int nt, int r0, int r1, int col) {
        lt_st2(sm + r0 * lc_cfg<DH>::LD + col, acc[nt][0], acc[nt][1]);
        lt_st2(sm + r1 * lc_cfg<DH>::LD + col, acc[nt][2], acc[nt][3]);
    });
}
/* this warp's part of a DH × DH fp32 state src[d·DH + e] into accumulators */
template <int DH>
BWD_DEV inline void lc_state_load(float (&acc)[lc_cfg<DH>::SN][4], const float *src) {
    lc_state_frags<DH>([&](int nt, int r0, int r1, int col) {
        acc[nt][0] = src[r0 * DH + col];
        acc[nt][1] = src[r0 * DH + col + 1];
        acc[nt][2] = src[r1 * DH + col];
        acc[nt][3] = src[r1 * DH + col + 1];
    });
}
/* ... and back, times fs */
template <int DH>
BWD_DEV inline void lc_state_store(const float (&acc)[lc_cfg<DH>::SN][4], float *dst, float fs) {
    lc_state_frags<DH>([&](int nt, int r0, int r1, int col) {
        dst[r0 * DH + col] = fs * acc[nt][0];
        dst[r0 * DH + col + 1] = fs * acc[nt][1];
        dst[r1 * DH + col] = fs * acc[nt][2];
        dst[r1 * DH + col + 1] = fs * acc[nt][3];
    });
}
/* a walk's running state [S | z] from src: S into accumulators and their
 * bf16 copy sm, z into vec (fp32, shared memory) */
template <int DH>
BWD_DEV inline void lc_state_begin(float (&acc)[lc_cfg<DH>::SN][4], const float *src, lt_bf *sm,
                                   float *vec) {
    lc_state_load<DH>(acc, src);
    lc_state_to_smem<DH>(acc, sm);
    for (int i = lt_tid(); i < DH; i += LT_THREADS) vec[i] = src[DH * DH + i];
}

/* Tiles of several views, each in two buffers in shared memory: src[i]'s
 * buffer j at byte off[i] + j·RT */
struct lc_src {
    const lt_bf *p;
    const int64_t *st;
    size_t off;
};
template <int DH> BWD_DEV inline lt_bf *lc_buf(unsigned char *sm, size_t off, int buf) {
    return (lt_bf *)(sm + off + buf * lc_cfg<DH>::RT);
}
/* copies of tokens [t, min(t + 64, t1)) of every source into buffer buf */
template <int DH, int NS>
BWD_DEV inline void lc_issue_tiles(const lc_src (&src)[NS], int64_t b, int64_t h, int64_t t,
                                   int64_t t1, int buf, unsigned char *sm) {
    const int n = (int)lt_min(LT_T, t1 - t);
#pragma unroll
    for (int i = 0; i < NS; i++) lc_issue<DH>(src[i].p, src[i].st, b, h, t, n, lc_buf<DH>(sm, src[i].off, buf));
}
/* the walks' copies of q, k, v and g (the byte offsets of the layout S; VF:
 * v first, as the dk/dv walk uses them), read from the kernel's arguments */
template <int DH, class S, bool VF>
BWD_DEV inline void lc_issue_qkvg(const lc_args &a, int64_t b, int64_t h, int64_t t, int64_t t1,
                                  int buf, unsigned char *sm) {
    const int n = (int)lt_min(LT_T, t1 - t);
    if (VF) lc_issue<DH>(a.v, a.vs, b, h, t, n, lc_buf<DH>(sm, S::V, buf));
    else lc_issue<DH>(a.q, a.qs, b, h, t, n, lc_buf<DH>(sm, S::Q, buf));
    lc_issue<DH>(a.k, a.ks, b, h, t, n, lc_buf<DH>(sm, S::K, buf));
    if (VF) lc_issue<DH>(a.q, a.qs, b, h, t, n, lc_buf<DH>(sm, S::Q, buf));
    else lc_issue<DH>(a.v, a.vs, b, h, t, n, lc_buf<DH>(sm, S::V, buf));
    lc_issue<DH>(a.g, a.gs, b, h, t, n, lc_buf<DH>(sm, S::G, buf));
}
/* the start of a tile: issue() the next tile's copies (more: there is one)
 * and wait for this thread's copies of this tile */
template <class F> BWD_DEV inline void lc_next_tile(bool more, F issue) {
    if (more) issue();
    lc_commit();
    lc_wait1();
}
BWD_DEV inline void lc_zero_bf(lt_bf *p, int n) {
    for (int i = lt_tid(); i < n; i += LT_THREADS) p[i] = 0;
}

/* this warp's 16 × DH/2 part of a 64 × DH product into the fp32 staging
 * tile: at row r, columns col and col + 1, the float2 f(nt, hh, r, col) of
 * the accumulator elements [nt][2hh], [nt][2hh + 1] */
template <int DH, class F> BWD_DEV inline void lc_stage(float *stage, int m0, int un0, F f) {
    using C = lc_cfg<DH>;
    const int lane = lt_tid() & 31, g = lane >> 2, cq = lane & 3;
#pragma unroll
    for (int nt = 0; nt < C::TN; nt++) {
        const int col = un0 + 8 * nt + 2 * cq;
#pragma unroll
        for (int hh = 0; hh < 2; hh++) {
            const int r = m0 + g + 8 * hh;
            *reinterpret_cast<float2 *>(&stage[r * C::LS + col]) =
                f(nt, hh, r, col);
        }
    }
}

} // namespace

#endif
