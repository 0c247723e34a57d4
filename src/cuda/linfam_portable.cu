/* Portable fp32 engine of the linear family (see linfam.cuh for the math and
 * the passes): any D, Dv, strides and dtypes, causal or not, fused focused
 * flatten φ and conv. Tiles are 64×64 with 256 threads, each thread owning a
 * 4×4 sub-tile strided by 16 (rows ty+16i, cols tx+16j) so that shared-memory
 * reads are broadcasts or consecutive words. */
#include "linfam_engine.cuh"

namespace {

constexpr int TILE = 64;   /* d×dv tile of a summary, token×dv tile of an output */
constexpr int TK = 32;     /* tokens per step in the summary pass / d per step in output */

/* ---- pass 1: partial summaries ------------------------------------------
 * grid (K, tiles of d×dv, BH). */
__global__ void __launch_bounds__(NT) lf_summary_kernel(lf_args a) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, b = bh / P.H, h = bh % P.H;
    const int64_t kseg = blockIdx.x, blk = kseg / a.segs, s = kseg % a.segs;
    const int64_t dtiles = (P.D + TILE - 1) / TILE;
    const int64_t d0 = (blockIdx.y % dtiles) * TILE, v0 = (blockIdx.y / dtiles) * TILE;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;

    __shared__ float ks[TK][TILE];
    __shared__ float vs[TK][TILE + 1];
    __shared__ int64_t tok[TK];

    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    const int64_t w0 = s * a.seg;
    const int64_t w1 = min(total, w0 + a.seg);

    float acc[4][4] = {};
    float zacc = 0.f;
    for (int64_t wt = w0; wt < w1; wt += TK) {
        if (tid < TK) tok[tid] = (wt + tid < w1) ? lf_token(a.G, lo, cnt, wt + tid) : -1;
        __syncthreads();
        for (int e = tid; e < TK * TILE; e += NT) {
            int r = e / TILE, c = e % TILE;
            int64_t t = tok[r], d = d0 + c, dv = v0 + c;
            float kv = 0.f, vv = 0.f;
            if (t >= 0) {
                if (d < P.D)
                    kv = lf_phi(P.fk, la_cu_ld4(P.k, b, t, h, d), h * P.D + d, b * P.N + t);
                if (dv < P.Dv) vv = la_cu_ld4(P.v, b, t, h, dv);
            }
            ks[r][c] = kv;
            vs[r][c] = vv;
        }
        __syncthreads();
#pragma unroll 4
        for (int r = 0; r < TK; r++) {
            float kr[4], vr[4];
#pragma unroll
            for (int i = 0; i < 4; i++) kr[i] = ks[r][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) vr[j] = vs[r][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(kr[i], vr[j], acc[i][j]);
        }
        if (v0 == 0 && tid < TILE)
            for (int r = 0; r < TK; r++) zacc += ks[r][tid];
        __syncthreads();
    }
    float *dst = a.sum + ((size_t)bh * a.K + kseg) * a.L;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t d = d0 + ty + 16 * i, dv = v0 + tx + 16 * j;
            if (d < P.D && dv < P.Dv) dst[d * P.Dv + dv] = acc[i][j];
        }
    if (v0 == 0 && tid < TILE && d0 + tid < P.D) dst[P.D * P.Dv + d0 + tid] = zacc;
}

/* ---- pass 2a: mixing -----------------------------------------------------
 * mix[bh][i][x] = Σ_kk w(i,kk) sum[bh][kk][x]; non-causal: kk over M·segs with
 * w = W[i, kk/segs] (1 without W); causal: kk = block b < i, w = W[i,b].
 * grid (ceil(L/NT), ceil(M/RI), BH); a thread owns one x and RI rows. */
constexpr int RI = 32;
__global__ void __launch_bounds__(NT) lf_mix_kernel(lf_args a) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, h = bh % P.H;
    const int64_t x = (int64_t)blockIdx.x * NT + threadIdx.x;
    const int64_t i0 = (int64_t)blockIdx.y * RI;
    const bool causal = P.chunk > 0;
    __shared__ float ws[TK][RI];
    float acc[RI];
#pragma unroll
    for (int r = 0; r < RI; r++) acc[r] = 0.f;
    int64_t kend = a.K;
    if (causal) kend = min(a.K, i0 + RI - 1); /* strict lower triangle */
    const float *src = a.sum + (size_t)bh * a.K * a.L;
    for (int64_t k0 = 0; k0 < kend; k0 += TK) {
        for (int e = threadIdx.x; e < TK * RI; e += NT) {
            int kk = e / RI, r = e % RI;
            int64_t i = i0 + r, k = k0 + kk;
            float w = 0.f;
            if (i < a.M && k < kend) {
                if (causal) w = (k < i) ? (P.use_w ? lf_w(P.W, h, i, k) : 1.f) : 0.f;
                else w = P.use_w ? lf_w(P.W, h, i, k / a.segs) : 1.f;
            }
            ws[kk][r] = w;
        }
        __syncthreads();
        if (x < a.L) {
            int kn = (int)min((int64_t)TK, kend - k0);
            for (int kk = 0; kk < kn; kk++) {
                float sv = src[(size_t)(k0 + kk) * a.L + x];
#pragma unroll
                for (int r = 0; r < RI; r++) acc[r] = fmaf(ws[kk][r], sv, acc[r]);
            }
        }
        __syncthreads();
    }
    if (x < a.L)
        for (int r = 0; r < RI; r++)
            if (i0 + r < a.M) a.mix[((size_t)bh * a.M + i0 + r) * a.L + x] = acc[r];
}

/* ---- pass 2b: causal linear prefix scan with state -----------------------
 * mix[c] = S_in + Σ_{b<c} sum[b]; S_out = S_in + Σ_b sum[b]. grid (ceil(L/NT), BH). */
__global__ void __launch_bounds__(NT) lf_scan_kernel(lf_args a) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.y, b = bh / P.H, h = bh % P.H;
    const int64_t x = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (x >= a.L) return;
    const bool isS = x < P.D * P.Dv;
    const int64_t d = isS ? x / P.Dv : x - P.D * P.Dv, dv = isS ? x % P.Dv : 0;
    float st = 0.f;
    if (isS && P.S_in.data)
        st = la_cu_ld4(P.S_in, b, h, d, dv);
    else if (!isS && P.z_in.data)
        st = la_cu_ld(P.z_in.data, P.z_in.dt, b * P.z_in.nb[0] + h * P.z_in.nb[1] + d * P.z_in.nb[2]);
    const float *src = a.sum + (size_t)bh * a.K * a.L + x;
    float *dst = a.mix + (size_t)bh * a.M * a.L + x;
    for (int64_t c = 0; c < a.K; c++) {
        float sv = src[(size_t)c * a.L];
        dst[(size_t)c * a.L] = st;
        st += sv;
    }
    if (isS && P.S_out.data)
        la_cu_st((void *)P.S_out.data, P.S_out.dt,
                 b * P.S_out.nb[0] + h * P.S_out.nb[1] + d * P.S_out.nb[2] + dv * P.S_out.nb[3], st);
    else if (!isS && P.z_out.data)
        la_cu_st((void *)P.z_out.data, P.z_out.dt,
                 b * P.z_out.nb[0] + h * P.z_out.nb[1] + d * P.z_out.nb[2], st);
}

/* ---- released_vision: r[bh][b][w] = q̃_{b,w} · z_b ------------------------
 * grid (ceil(maxcnt/8), M, BH), one warp per position w. */
__global__ void __launch_bounds__(NT) lf_rv_kernel(lf_args a) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, b = bh / P.H, h = bh % P.H, blk = blockIdx.y;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t w = (int64_t)blockIdx.x * (NT / 32) + warp;
    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    if (w >= cnt[0] * cnt[1] * cnt[2]) return;
    const int64_t t = lf_token(a.G, lo, cnt, w);
    const float *zs = a.sum + ((size_t)bh * a.K + blk * a.segs) * a.L + P.D * P.Dv;
    float acc = 0.f;
    for (int64_t d = lane; d < P.D; d += 32) {
        float z = 0.f;
        for (int64_t s = 0; s < a.segs; s++) z += zs[s * a.L + d];
        acc += lf_phi(P.fq, la_cu_ld4(P.q, b, t, h, d), h * P.D + d, b * P.N + t) * z;
    }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) a.r[((size_t)bh * a.M + blk) * a.maxcnt + w] = acc;
}


/* acc[i][j] += Σ_{c < TK} a[ty + 16i][c0 + c] · b[c][tx + 16j]: one TK-deep
 * step of a 64×64 tile product held in shared memory, 4×4 outputs per thread
 * (the output pass's q̃·summary, q̃·k̃ᵀ and A·V products). */
template <int LDA>
__device__ __forceinline__ void lf_tile_step(const float (*a)[LDA], int c0, const float (*b)[TILE],
                                             int ty, int tx, float (&acc)[4][4]) {
#pragma unroll 4
    for (int c = 0; c < TK; c++) {
        float ar[4], br[4];
#pragma unroll
        for (int i = 0; i < 4; i++) ar[i] = a[ty + 16 * i][c0 + c];
#pragma unroll
        for (int j = 0; j < 4; j++) br[j] = b[c][tx + 16 * j];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++) acc[i][j] = fmaf(ar[i], br[j], acc[i][j]);
    }
}

/* ---- pass 3: outputs -----------------------------------------------------
 * grid (M·tiles_per_block, ceil(Dv/64), BH). Tokens: 64 consecutive positions
 * of one block's box. */
__global__ void __launch_bounds__(NT) lf_output_kernel(lf_args a, int64_t tpb) {
    const lf_problem &P = a.P;
    const int64_t bh = blockIdx.z, b = bh / P.H, h = bh % P.H;
    const int64_t blk = blockIdx.x / tpb, wt = (blockIdx.x % tpb) * TILE;
    const int64_t v0 = (int64_t)blockIdx.y * TILE;
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const bool causal = P.chunk > 0;

    __shared__ float qs[TILE][TK + 1];
    __shared__ float ms[TK][TILE];
    __shared__ float zs[TK];
    __shared__ float As[TILE][TILE + 1];
    __shared__ int64_t tok[TILE];
    __shared__ float den[TILE];

    int64_t lo[3], cnt[3];
    lf_box(a.G, blk, lo, cnt);
    const int64_t total = cnt[0] * cnt[1] * cnt[2];
    if (wt >= total) return; /* whole CTA: uniform */
    const int64_t nrows = min((int64_t)TILE, total - wt);
    if (tid < TILE) {
        tok[tid] = tid < nrows ? lf_token(a.G, lo, cnt, wt + tid) : -1;
        den[tid] = 0.f;
    }
    __syncthreads();

    float acc[4][4] = {};
    float dacc = 0.f;
    const float *mrow = a.mix + ((size_t)bh * a.M + blk) * a.L;
    /* inter-block part: φ(Q) P_i */
    for (int64_t dc = 0; dc < P.D; dc += TK) {
        for (int e = tid; e < TILE * TK; e += NT) {
            int r = e / TK, c = e % TK;
            int64_t t = tok[r], d = dc + c;
            qs[r][c] = (t >= 0 && d < P.D)
                           ? lf_phi(P.fq, la_cu_ld4(P.q, b, t, h, d), h * P.D + d, b * P.N + t)
                           : 0.f;
        }
        for (int e = tid; e < TK * TILE; e += NT) {
            int r = e / TILE, c = e % TILE;
            int64_t d = dc + r, dv = v0 + c;
            ms[r][c] = (d < P.D && dv < P.Dv) ? mrow[d * P.Dv + dv] : 0.f;
        }
        if (tid < TK) zs[tid] = (dc + tid < P.D) ? mrow[P.D * P.Dv + dc + tid] : 0.f;
        __syncthreads();
        lf_tile_step(qs, 0, ms, ty, tx, acc);
        if (tid < TILE)
            for (int c = 0; c < TK; c++) dacc = fmaf(qs[tid][c], zs[c], dacc);
        __syncthreads();
    }

    /* intra-chunk part (causal): W[i,i] Σ_{j in chunk, j ≤ t} (q̃_t·k̃_j) v_j */
    if (causal) {
        const float wd = P.use_w ? lf_w(P.W, h, blk, blk) : 1.f;
        const int64_t tlast = wt + nrows - 1; /* last position in this tile */
        for (int64_t j0 = 0; j0 <= tlast; j0 += TILE) {
            float sacc[4][4] = {};
            for (int64_t dc = 0; dc < P.D; dc += TK) {
                __syncthreads();
                for (int e = tid; e < TILE * TK; e += NT) {
                    int r = e / TK, c = e % TK;
                    int64_t t = tok[r], d = dc + c;
                    qs[r][c] = (t >= 0 && d < P.D) ? lf_phi(P.fq, la_cu_ld4(P.q, b, t, h, d),
                                                            h * P.D + d, b * P.N + t)
                                                   : 0.f;
                }
                for (int e = tid; e < TK * TILE; e += NT) {
                    int c = e / TILE, r = e % TILE; /* ms[c][r] = k̃[key r][d c] */
                    int64_t j = (j0 + r <= tlast) ? lo[2] + j0 + r : -1, d = dc + c;
                    ms[c][r] = (j >= 0 && d < P.D) ? lf_phi(P.fk, la_cu_ld4(P.k, b, j, h, d),
                                                            h * P.D + d, b * P.N + j)
                                                   : 0.f;
                }
                __syncthreads();
                lf_tile_step(qs, 0, ms, ty, tx, sacc);
            }
            /* mask (key position ≤ query position) and weight */
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) {
                    int r = ty + 16 * i, c = tx + 16 * j;
                    bool ok = (wt + r < total) && (j0 + c <= wt + r);
                    As[r][c] = ok ? wd * sacc[i][j] : 0.f;
                }
            __syncthreads();
            if (tid < TILE)
                for (int c = 0; c < TILE; c++) dacc += As[tid][c];
            /* As · V, 32 keys at a time through ms */
            for (int half = 0; half < 2; half++) {
                for (int e = tid; e < TK * TILE; e += NT) {
                    int r = e / TILE, c = e % TILE;
                    int64_t jj = j0 + half * TK + r, dv = v0 + c;
                    ms[r][c] = (jj <= tlast && dv < P.Dv) ? la_cu_ld4(P.v, b, lo[2] + jj, h, dv)
                                                          : 0.f;
                }
                __syncthreads();
                lf_tile_step(As, half * TK, ms, ty, tx, acc);
                __syncthreads();
            }
        }
    }

    /* denominators */
    if (tid < TILE) {
        float dn = 1.f;
        if (P.norm == LF_NORM_PER_QUERY) {
            dn = dacc * P.den_scale + P.eps;
        } else if (P.norm == LF_NORM_RELEASED_VISION) {
            float s = 0.f;
            const float *rr = a.r + (size_t)bh * a.M * a.maxcnt + wt + tid;
            if (tid < nrows)
                for (int64_t bb = 0; bb < a.M; bb++)
                    s = fmaf(lf_w(P.W, h, blk, bb), rr[bb * a.maxcnt], s);
            dn = s + P.eps;
        }
        den[tid] = dn;
    }
    __syncthreads();
    const float num_scale = (P.norm == LF_NORM_PER_QUERY) ? P.den_scale : 1.f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int r = ty + 16 * i;
        int64_t t = tok[r];
        if (t < 0) continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t dv = v0 + tx + 16 * j;
            if (dv < P.Dv) {
                float o = acc[i][j] * num_scale / den[r];
                if (P.conv.data) o += lf_dwc(P, b, t, h, dv);
                la_cu_st((void *)P.out.data, P.out.dt,
                         b * P.out.nb[0] + t * P.out.nb[1] + h * P.out.nb[2] + dv * P.out.nb[3], o);
            }
        }
    }
}

}  // namespace

la_status lf_launch_rv(const lf_args &a, cudaStream_t st) {
    lf_rv_kernel<<<dim3((unsigned)la_cu_cdiv(a.maxcnt, NT / 32), (unsigned)a.M, (unsigned)(a.P.B * a.P.H)),
                   NT, 0, st>>>(a);
    LA_CU_LAUNCH("lf_rv_kernel");
    return LA_OK;
}

la_status lf_run_portable(lf_args &a, cudaStream_t st) {
    const lf_problem *P = &a.P;
    const bool causal = P->chunk > 0;
    const int64_t BH = P->B * P->H;
    a.segs = la_cu_cdiv(a.maxcnt, a.seg);
    a.K = a.M * a.segs;
    a.L = P->D * P->Dv + P->D;
    if (BH > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "CUDA linear family: B*H = %lld exceeds 65535",
                      (long long)BH);
    size_t nsum, nmix, bytes;
    LA_TRY(la_mul_size((size_t)BH, (size_t)a.K, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size(nsum, (size_t)a.L, &nsum, "CUDA summaries"));
    LA_TRY(la_mul_size((size_t)BH * a.M, (size_t)a.L, &nmix, "CUDA mixed summaries"));
    size_t nr = (P->norm == LF_NORM_RELEASED_VISION) ? (size_t)BH * a.M * a.maxcnt : 0;
    LA_TRY(la_mul_size(nsum + nmix + nr, sizeof(float), &bytes, "CUDA workspace"));
    la_cu_ws ws;
    LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "linear-family summaries"));
    a.sum = (float *)ws.p;
    a.mix = a.sum + nsum;
    a.r = nr ? a.mix + nmix : nullptr;

    const int64_t dtiles = la_cu_cdiv(P->D, TILE), vtiles = la_cu_cdiv(P->Dv, TILE);
    lf_summary_kernel<<<dim3((unsigned)a.K, (unsigned)(dtiles * vtiles), (unsigned)BH), NT, 0,
                        st>>>(a);
    LA_CU_LAUNCH("lf_summary_kernel");
    if (causal && !P->use_w) {
        lf_scan_kernel<<<dim3((unsigned)la_cu_cdiv(a.L, NT), (unsigned)BH), NT, 0, st>>>(a);
        LA_CU_LAUNCH("lf_scan_kernel");
    } else {
        lf_mix_kernel<<<dim3((unsigned)la_cu_cdiv(a.L, NT), (unsigned)la_cu_cdiv(a.M, RI),
                             (unsigned)BH),
                        NT, 0, st>>>(a);
        LA_CU_LAUNCH("lf_mix_kernel");
    }
    if (nr) LA_TRY(lf_launch_rv(a, st));
    const int64_t tpb = la_cu_cdiv(a.maxcnt, TILE);
    lf_output_kernel<<<dim3((unsigned)(a.M * tpb), (unsigned)vtiles, (unsigned)BH), NT, 0, st>>>(
        a, tpb);
    LA_CU_LAUNCH("lf_output_kernel");
    return LA_OK;
}
