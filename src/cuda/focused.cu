/* Focused linear attention (SPEC §4) on CUDA, both variants, through the
 * linear-family engine (linfam.cu). Views validated by src/ops/focused.c.
 *
 * flatten: a per-token pass finds, over all C = H·D channels of q and of k,
 *   x' = (relu(x)+1e-6)/softplus(s), m = 1/max x', r = ‖x'‖/‖(x'·m)^p‖, so that
 *   the engine forms φ(x)_c = (x'_c·m)^p·r on the fly (same scaling as the CPU
 *   path: x'^p stays finite for any p). Mean form: o = (q̃S/N)/(q̃z/N + eps),
 *   then o += DWC(v) + bias, fused into the output pass.
 * blog: K̂ = focus[h]·DWConv(relu1(K)) into an fp32 workspace, then normalized
 *   linear attention with φ(q) = relu1(q·D^-1/2) and K̂ taken as is.
 *
 * flatten, 16-bit fast path (head dims of the engine's tensor-core path,
 * lf_tc_dims: D, Dv ∈ {32, 64, 128}; q, k, v, out all bf16 or all fp16
 * (fo_f16_tc) with unit inner stride and
 * 16-B aligned rows, C = H·D ≤ 4096, no conv or an odd conv of k ≤ 9; family
 * "focused", fo_select: "tc"; "portable" forces the path above):
 *   1. fo_phi_kernel: one warp per (token, q|k) reads the token's C = H·D
 *      channels once into registers (bf16 / fp16), two register passes (max
 *      of x', then Σu², Σu^{2p} with u = x'/max x'), and writes φ = u^p·r,
 *      r = max·‖u‖/‖u^p‖ (= ‖x'‖/‖x'^p‖·x'^p scaling, overflow-free), as
 *      [B,N,H,D] workspaces of the inputs' type;
 *   2. the linear-family engine (tensor-core path) on φ(Q), φ(K), V with the
 *      identity feature and the mean form o = num·a/(den·a + eps), a = 1/N;
 *   3. fo_dwc_kernel (conv given): o += DWC(v) + bias in place on O.
 *   fp16 range: φ_c = ‖x'‖·u_c^p/‖u^p‖, so 0 < φ_c ≤ ‖x'‖ (the norm over the
 *   token's C channels; ‖φ‖ = ‖x'‖) ≤ √C·max_c x', with x' = (relu(x) +
 *   1e-6)/softplus(s): φ is bounded by the input's magnitude and is finite in
 *   fp16 while ‖x'‖ < 65504 (e.g. |x| < 65504/(√C·1.443) at s = 0); past that
 *   a φ value rounds to Inf. The engine keeps its sums in fp32 and scales S̃
 *   into fp16 (linfam_tc.cu); the output, a convex combination of v, is
 *   rounded to fp16 by the engine and again when the conv is added.
 *   Bytes, in [N,H,D] 16-bit tensors (D = Dv): 1. reads Q, K, writes φQ, φK (4);
 *   2. reads φQ, φK, V, writes O (4); 3. reads V, O, writes O (3).
 *   (φ formed in step 2's loaders from the raw Q, K instead, with step 1
 *   writing two floats per token, was slower: docs/CUDA.md.) */
#include "cuda_ops.h"
#include "linfam.cuh"
#include "select.cuh"

#include <algorithm>

namespace {

__global__ void fo_invsp_kernel(la_cu_view sp, int64_t C, float *inv_sp) {
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= C) return;
    double s = sp.data ? (double)la_cu_ld(sp.data, sp.dt, c * sp.nb[0]) : 0.0;
    double soft = s > 0 ? s + log1p(exp(-s)) : log1p(exp(s));
    inv_sp[c] = (float)(1.0 / soft);
}

/* One CTA per (token, q|k): tok_m = 1/max x', tok_r = ‖x'‖ / ‖(x'·tok_m)^p‖. */
constexpr int FT = 256;
__global__ void __launch_bounds__(FT) fo_flatten_tok_kernel(la_cu_view q, la_cu_view k,
                                                            int64_t N, int64_t H, int64_t D,
                                                            const float *inv_sp, float p,
                                                            float *tok /* [2][2][B*N] */,
                                                            int64_t BN) {
    const int64_t bt = blockIdx.x, b = bt / N, t = bt % N;
    const la_cu_view &x = blockIdx.y ? k : q;
    const int64_t C = H * D;
    __shared__ double red[FT / 32];
    __shared__ double bcast;
    double mx = 0.0, n2 = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += FT) {
        float xp = (la_relu_nan(la_cu_ld4(x, b, t, c / D, c % D)) + 1e-6f) * inv_sp[c];
        mx = fmax(mx, (double)xp);
        n2 += (double)xp * xp;
    }
    /* block max of mx, then block sum of n2 */
    for (int o = 16; o > 0; o >>= 1) mx = fmax(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = mx;
    __syncthreads();
    if (threadIdx.x == 0) {
        double m = 0.0;
        for (int i = 0; i < FT / 32; i++) m = fmax(m, red[i]);
        bcast = m;
    }
    __syncthreads();
    const double m = bcast;
    const float inv_m = (float)(1.0 / m);
    double np2 = 0.0;
    for (int64_t c = threadIdx.x; c < C; c += FT) {
        float xp = (la_relu_nan(la_cu_ld4(x, b, t, c / D, c % D)) + 1e-6f) * inv_sp[c];
        float u = xp * inv_m;
        float up = (p == 3.f) ? u * u * u : powf(u, p);
        np2 += (double)up * up;
    }
    __syncthreads();
    for (int o = 16; o > 0; o >>= 1) {
        n2 += __shfl_xor_sync(0xffffffffu, n2, o);
        np2 += __shfl_xor_sync(0xffffffffu, np2, o);
    }
    __shared__ double red2[FT / 32];
    if (threadIdx.x % 32 == 0) {
        red[threadIdx.x / 32] = n2;
        red2[threadIdx.x / 32] = np2;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double a = 0.0, c2 = 0.0;
        for (int i = 0; i < FT / 32; i++) {
            a += red[i];
            c2 += red2[i];
        }
        float *dst = tok + (size_t)blockIdx.y * 2 * BN;
        dst[bt] = inv_m;               /* tok_m */
        dst[BN + bt] = (float)(sqrt(a) / sqrt(c2)); /* tok_r */
    }
}

/* K̂[b,t,h,d] = focus[h] · Σ conv[c,a,c'] relu1(K)[b, t+offset, h, d] (zero padding). */
__global__ void fo_blog_khat_kernel(la_cu_view k, la_cu_view conv, la_cu_view focus, int64_t B,
                                    int64_t N, int64_t H, int64_t D, int64_t map_h,
                                    int64_t map_w, int64_t ks, float *khat) {
    const int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    const int64_t C = H * D;
    if (e >= B * N * C) return;
    const int64_t c = e % C, bt = e / C, b = bt / N, t = bt % N, h = c / D, d = c % D;
    float acc;
    if (!conv.data) {
        acc = la_relu_nan(la_cu_ld4(k, b, t, h, d)) + 1.f;
    } else {
        const int64_t y = t / map_w, x = t % map_w, r = ks / 2;
        acc = 0.f;
        for (int64_t a = 0; a < ks; a++) {
            const int64_t yy = y + a - r;
            if (yy < 0 || yy >= map_h) continue;
            for (int64_t cc = 0; cc < ks; cc++) {
                const int64_t xx = x + cc - r;
                if (xx < 0 || xx >= map_w) continue;
                float w = la_cu_ld(conv.data, conv.dt, c * conv.nb[0] + a * conv.nb[1] + cc * conv.nb[2]);
                acc = fmaf(w, la_relu_nan(la_cu_ld4(k, b, yy * map_w + xx, h, d)) + 1.f, acc);
            }
        }
    }
    const float f = focus.data ? la_cu_ld(focus.data, focus.dt, h * focus.nb[0]) : 2.0f;
    khat[e] = acc * f;
}

/* ---- flatten, 16-bit fast path ---------------------------------------------- */
constexpr int PT = 256;      /* threads of fo_phi_kernel (8 warps) */
constexpr int PHI_MAXC = 4096; /* C = H·D ≤ 4096: ≤ 16 chunks of 8 per lane */
/* fp16 inputs on the fast path (φ workspaces, engine and conv in fp16);
 * false sends them to the portable engine with φ and the conv fused. The
 * engine's own fp16 tensor-core choice is lf_f16_tc (linfam.cu). On since the
 * device harness's fp16 focused rows passed. */
constexpr bool fo_f16_tc = true;

/* the flatten φ helpers (lf_x8, lf_flat_xprime8, lf_flat_pow, ...) are in
 * linfam.cuh */

/* One warp per (token, q|k) unit u = 2·(b·N + t) + (0 q | 1 k). A lane holds
 * chunks ch = lane + 32 i (i < R) of 8 channels: c = 8·ch, head c / D (D =
 * 8·2^lcpd). The raw values (T: bf16 or fp16) stay in registers over the
 * three passes. */
template <typename T, int R>
__global__ void __launch_bounds__(PT) fo_phi_kernel(la_cu_view q, la_cu_view k, int64_t N,
                                                    int H, int lcpd, const float *inv_sp, float p,
                                                    T *phq, T *phk, int64_t units) {
    __shared__ __align__(16) float isp[PHI_MAXC];
    const int nch = H << lcpd, C = nch * 8, cmask = (1 << lcpd) - 1;
    for (int c = threadIdx.x; c < C; c += PT) isp[c] = inv_sp[c];
    __syncthreads();
    const int lane = threadIdx.x % 32;
    const float pf = p;
    const int ip = lf_flat_ip(p);
    for (int64_t u = (int64_t)blockIdx.x * (PT / 32) + threadIdx.x / 32; u < units;
         u += (int64_t)gridDim.x * (PT / 32)) {
        const int which = (int)(u & 1);
        const int64_t bt = u >> 1, b = bt / N, t = bt % N;
        const void *xd = which ? k.data : q.data;
        const int64_t n0 = which ? k.nb[0] : q.nb[0], n1 = which ? k.nb[1] : q.nb[1],
                      n2 = which ? k.nb[2] : q.nb[2];
        const T *base = (const T *)xd + b * n0 + t * n1;
        uint4 raw[R];
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int ch = lane + 32 * i;
            raw[i] = make_uint4(0, 0, 0, 0);
            if (ch < nch)
                raw[i] = __ldg((const uint4 *)(base + (int64_t)(ch >> lcpd) * n2 + (ch & cmask) * 8));
        }
        /* pass 1: max of x' = (relu(x) + 1e-6)·inv_sp */
        float mx = 0.f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int ch = lane + 32 * i;
            if (ch < nch) {
                float v[8];
                lf_flat_xprime8<T>(raw[i], &isp[ch * 8], 1.f, v);
#pragma unroll
                for (int e = 0; e < 8; e++) mx = fmaxf(mx, v[e]);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
        const float inv_m = 1.f / mx;
        /* pass 2: Σu², Σu^{2p}, u = x'/max ∈ (0, 1] */
        float s2 = 0.f, sp2 = 0.f;
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int ch = lane + 32 * i;
            if (ch < nch) {
                float v[8];
                lf_flat_xprime8<T>(raw[i], &isp[ch * 8], inv_m, v);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const float uu = v[e];
                    const float up = lf_flat_pow(uu, ip, pf);
                    s2 = fmaf(uu, uu, s2);
                    sp2 = fmaf(up, up, sp2);
                }
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            s2 += __shfl_xor_sync(0xffffffffu, s2, o);
            sp2 += __shfl_xor_sync(0xffffffffu, sp2, o);
        }
        /* ‖x'‖/‖u^p‖ = max·‖u‖/‖u^p‖; the largest u is ~1, so sp2 ≥ ~1 */
        const float r = mx * sqrtf(s2) / sqrtf(sp2);
        /* pass 3: φ = u^p·r in T, [B,N,H,D] contiguous */
        T *dst = (which ? phk : phq) + bt * (int64_t)C;
#pragma unroll
        for (int i = 0; i < R; i++) {
            const int ch = lane + 32 * i;
            if (ch < nch) *(uint4 *)(dst + ch * 8) = lf_flat_phi8<T>(raw[i], &isp[ch * 8], inv_m, r, ip, pf);
        }
    }
}

/* o += DWC(v) + bias in place, o and v of T (bf16 or fp16; Dv = 8·2^lcpv ≤ 128), one
 * [Dv,KS,KS] kernel shared by the heads. CTA = (b·H + h, map row y, cw map
 * columns, cw = 8·256/(Dv/8)); thread = 8 channels (c8 = 8·(tid % (Dv/8))) ×
 * 8 consecutive columns x0 + [0, 8): per tap row it reads the 8 + KS − 1 v
 * chunks of the window once (L1/L2) and reuses each for up to KS outputs;
 * weights and bias from shared memory (fp32). */
constexpr int CT = 256, CX = 8 /* columns per thread */;
constexpr int fo_dwc_cols(int lcpv) { return CX * (CT >> lcpv); } /* map columns per CTA */
template <typename T, int KS, int LCPV>
__global__ void __launch_bounds__(CT) fo_dwc_kernel(la_cu_view v, la_cu_view out, la_cu_view conv,
                                                    la_cu_view bias, int64_t H, int64_t map_h,
                                                    int64_t map_w, int64_t xblocks) {
    constexpr int Dv = 8 << LCPV, lcpv = LCPV;
    __shared__ __align__(16) float ws[KS * KS * Dv];
    __shared__ __align__(16) float bs[Dv];
    for (int e = threadIdx.x; e < KS * KS * Dv; e += CT) {
        const int c = e % Dv, tap = e / Dv, a = tap / KS, cc = tap % KS;
        ws[e] = la_cu_ld(conv.data, conv.dt, c * conv.nb[0] + a * conv.nb[1] + cc * conv.nb[2]);
    }
    for (int c = threadIdx.x; c < Dv; c += CT)
        bs[c] = bias.data ? la_cu_ld(bias.data, bias.dt, c * bias.nb[0]) : 0.f;
    __syncthreads();
    const int64_t bh = blockIdx.y, b = bh / H, h = bh % H;
    const int64_t y = blockIdx.x / xblocks, xb = blockIdx.x % xblocks;
    const int c8 = (threadIdx.x & ((1 << lcpv) - 1)) * 8;
    const int64_t x0 = xb * fo_dwc_cols(lcpv) + (threadIdx.x >> lcpv) * CX;
    if (x0 >= map_w) return;
    constexpr int RR = KS / 2;
    float acc[CX][8];
#pragma unroll
    for (int j = 0; j < CX; j++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[j][e] = bs[c8 + e];
    const T *vb = (const T *)v.data + b * v.nb[0] + h * v.nb[2] + c8;
#pragma unroll 1
    for (int a = 0; a < KS; a++) {
        const int64_t yy = y + a - RR;
        if (yy < 0 || yy >= map_h) continue;
        const T *vrow = vb + yy * map_w * v.nb[1];
#pragma unroll
        for (int s = 0; s < CX + KS - 1; s++) { /* window column xx = x0 + s − RR */
            const int64_t xx = x0 + s - RR;
            if (xx < 0 || xx >= map_w) continue;
            float vv[8];
            lf_x8<T>::unpack(__ldg((const uint4 *)(vrow + xx * v.nb[1])), vv);
#pragma unroll
            for (int j = 0; j < CX; j++) {
                const int cc = s - j; /* tap column of output x0 + j */
                if (cc < 0 || cc >= KS) continue;
                const float4 w0 = *(const float4 *)&ws[(a * KS + cc) * Dv + c8];
                const float4 w1 = *(const float4 *)&ws[(a * KS + cc) * Dv + c8 + 4];
                acc[j][0] = fmaf(w0.x, vv[0], acc[j][0]);
                acc[j][1] = fmaf(w0.y, vv[1], acc[j][1]);
                acc[j][2] = fmaf(w0.z, vv[2], acc[j][2]);
                acc[j][3] = fmaf(w0.w, vv[3], acc[j][3]);
                acc[j][4] = fmaf(w1.x, vv[4], acc[j][4]);
                acc[j][5] = fmaf(w1.y, vv[5], acc[j][5]);
                acc[j][6] = fmaf(w1.z, vv[6], acc[j][6]);
                acc[j][7] = fmaf(w1.w, vv[7], acc[j][7]);
            }
        }
    }
    T *ob = (T *)out.data + b * out.nb[0] + h * out.nb[2] + c8;
#pragma unroll
    for (int j = 0; j < CX; j++) {
        const int64_t xx = x0 + j;
        if (xx >= map_w) break;
        uint4 *po = (uint4 *)(ob + (y * map_w + xx) * out.nb[1]);
        float o[8];
        lf_x8<T>::unpack(*po, o);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] += acc[j][e];
        *po = lf_x8<T>::pack(o);
    }
}

/* dtype dt (bf16, or fp16 while fo_f16_tc), unit inner stride, 16-B aligned
 * rows (uint4 loads and stores). */
bool fo_view_fast(const la_cu_view &x, int dt) {
    return x.dt == dt && (dt == LA_BF16 || (dt == LA_F16 && fo_f16_tc)) && x.nb[3] == 1 &&
           x.nb[0] % 8 == 0 && x.nb[1] % 8 == 0 && x.nb[2] % 8 == 0 && ((uintptr_t)x.data % 16) == 0;
}

/* log2 of a head dim's 16-byte chunks (D = 32, 64, 128: 2, 3, 4) */
int fo_lchunks(int64_t D) { return D == 32 ? 2 : D == 64 ? 3 : 4; }

template <typename T, int R>
la_status fo_launch_phi(const la_cu_view &q, const la_cu_view &k, int64_t N, int H, int lcpd,
                        const float *inv_sp, float p, T *phq, T *phk, int64_t units, cudaStream_t st) {
    int dev = 0, nsm = 132;
    LA_CU(cudaGetDevice(&dev));
    LA_CU(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const int64_t want = la_cu_cdiv(units, PT / 32);
    const unsigned grid = (unsigned)std::min<int64_t>(want, (int64_t)nsm * 16);
    fo_phi_kernel<T, R><<<grid, PT, 0, st>>>(q, k, N, H, lcpd, inv_sp, p, phq, phk, units);
    LA_CU_LAUNCH("fo_phi_kernel");
    return LA_OK;
}

template <typename T, int KS, int LCPV>
la_status fo_launch_dwc(const lf_problem &P, const la_cu_view &conv, const la_cu_view &bias,
                        cudaStream_t st) {
    const int64_t xblocks = la_cu_cdiv(P.map_w, fo_dwc_cols(LCPV)), gx = xblocks * P.map_h;
    if (gx > 0x7fffffff || P.B * P.H > 65535)
        return la_err(LA_ERR_UNSUPPORTED, "focused CUDA: conv grid too large");
    fo_dwc_kernel<T, KS, LCPV><<<dim3((unsigned)gx, (unsigned)(P.B * P.H)), CT, 0, st>>>(
        P.v, P.out, conv, bias, P.H, P.map_h, P.map_w, xblocks);
    LA_CU_LAUNCH("fo_dwc_kernel");
    return LA_OK;
}

/* the conv launch for an odd k ≤ 9 at Dv = 8·2^LCPV */
template <typename T, int LCPV>
la_status fo_dwc_ks(const lf_problem &P, const la_cu_view &cv, const la_cu_view &bv, int ks,
                    cudaStream_t st) {
    switch (ks) {
    case 1: return fo_launch_dwc<T, 1, LCPV>(P, cv, bv, st);
    case 3: return fo_launch_dwc<T, 3, LCPV>(P, cv, bv, st);
    case 5: return fo_launch_dwc<T, 5, LCPV>(P, cv, bv, st);
    case 7: return fo_launch_dwc<T, 7, LCPV>(P, cv, bv, st);
    default: return fo_launch_dwc<T, 9, LCPV>(P, cv, bv, st);
    }
}

/* The fast flatten path for the inputs' type T (bf16 or fp16); P holds q,
 * k, v, out, B, N, H, D, Dv, map, eps. */
template <typename T>
la_status fo_flatten_fast(const lf_problem &P0, const la_focused_params *p, const la_tensor *conv,
                          const la_tensor *conv_bias, const la_tensor *softplus_param,
                          const la_context *ctx, cudaStream_t st) {
    lf_problem P = P0;
    const int64_t C = P.H * P.D, BN = P.B * P.N;
    if (BN == 0 || C == 0) return LA_OK; /* empty output: no launch (a 0-sized grid fails) */
    size_t nphi, bytes;
    LA_TRY(la_mul_size((size_t)BN, (size_t)C, &nphi, "focused phi"));
    /* [inv_sp: C floats, rounded to 16 B][φQ][φK] */
    const size_t isp_bytes = ((size_t)C * sizeof(float) + 15) / 16 * 16;
    LA_TRY(la_mul_size(nphi, 2 * sizeof(T), &bytes, "focused phi"));
    if (bytes + isp_bytes < bytes) return la_err(LA_ERR_OVERFLOW, "focused: workspace overflows");
    la_cu_ws ws;
    LA_TRY(la_cu_ws_alloc(&ws, bytes + isp_bytes, st, "focused phi(Q), phi(K)"));
    float *inv_sp = (float *)ws.p;
    T *phq = (T *)((char *)ws.p + isp_bytes);
    T *phk = phq + nphi;
    fo_invsp_kernel<<<(unsigned)la_cu_cdiv(C, 256), 256, 0, st>>>(la_cu_view_of(softplus_param),
                                                                   C, inv_sp);
    LA_CU_LAUNCH("fo_invsp_kernel");
    const int64_t units = 2 * BN;
    const int H = (int)P.H, lcpd = fo_lchunks(P.D), per_lane = (int)la_cu_cdiv(C / 8, 32);
    if (per_lane <= 2)
        LA_TRY((fo_launch_phi<T, 2>(P.q, P.k, P.N, H, lcpd, inv_sp, p->p, phq, phk, units, st)));
    else if (per_lane <= 4)
        LA_TRY((fo_launch_phi<T, 4>(P.q, P.k, P.N, H, lcpd, inv_sp, p->p, phq, phk, units, st)));
    else if (per_lane <= 8)
        LA_TRY((fo_launch_phi<T, 8>(P.q, P.k, P.N, H, lcpd, inv_sp, p->p, phq, phk, units, st)));
    else
        LA_TRY((fo_launch_phi<T, 16>(P.q, P.k, P.N, H, lcpd, inv_sp, p->p, phq, phk, units, st)));
    /* the engine on φQ, φK (contiguous [B,N,H,D] in T), identity features */
    for (int w = 0; w < 2; w++) {
        la_cu_view &x = w ? P.k : P.q;
        x.data = w ? phk : phq;
        x.dt = P0.q.dt;
        x.nb[0] = P.N * C;
        x.nb[1] = C;
        x.nb[2] = P.D;
        x.nb[3] = 1;
    }
    P.fq = {LA_FEATURE_IDENTITY, 1.f, 1.f, 0.f, nullptr, nullptr, nullptr};
    P.fk = P.fq;
    P.den_scale = 1.f / (float)P.N;
    P.conv = la_cu_view{};
    P.bias = la_cu_view{};
    P.ksize = 0;
    LA_TRY(lf_run(&P, ctx, "focused", nullptr, st));
    if (conv) {
        const la_cu_view cv = la_cu_view_of(conv), bv = la_cu_view_of(conv_bias);
        switch (fo_lchunks(P.Dv)) {
        case 2: return fo_dwc_ks<T, 2>(P, cv, bv, (int)conv->ne[1], st);
        case 3: return fo_dwc_ks<T, 3>(P, cv, bv, (int)conv->ne[1], st);
        default: return fo_dwc_ks<T, 4>(P, cv, bv, (int)conv->ne[1], st);
        }
    }
    return LA_OK;
}

enum fo_kernel { FO_TC = 0, FO_PORTABLE = 1 };
const char *const fo_names[] = {"tc", "portable"};

/* flatten's kernels (pure): φ materialized + the tensor-core engine, or the
 * portable engine with φ and the conv fused; forced: the context's variant. */
la_status fo_select(const lf_problem &P, const la_tensor *conv, const char *forced, fo_kernel *kern) {
    const int dt = P.q.dt;
    const bool tc = lf_tc_dims(P.D, P.Dv) && P.H * P.D <= PHI_MAXC && (!conv || conv->ne[1] <= 9) &&
                    fo_view_fast(P.q, dt) && fo_view_fast(P.k, dt) && fo_view_fast(P.v, dt) &&
                    fo_view_fast(P.out, dt);
    if (!forced) {
        *kern = tc ? FO_TC : FO_PORTABLE;
        return LA_OK;
    }
    const int i = la_cu_variant_index(forced, fo_names, 2);
    if (i < 0) return la_cu_unknown_variant("focused", forced, "tc, portable");
    if (i == FO_TC && !tc)
        return la_cu_variant_unsupported(
            "focused", forced,
            fo_f16_tc ? "bf16 or fp16 (one dtype), D = Dv in {32, 64, 128} or (D, Dv) = (64, 128), "
                        "(128, 64), rows contiguous, H*D <= 4096, conv k <= 9"
                      : "bf16, D = Dv in {32, 64, 128} or (D, Dv) = (64, 128), "
                        "(128, 64), rows contiguous, H*D <= 4096, conv k <= 9");
    *kern = (fo_kernel)i;
    return LA_OK;
}

}  // namespace

extern "C" la_status la_focused_attention_cuda(const la_focused_params *p, const la_tensor *q,
                                               const la_tensor *k, const la_tensor *v,
                                               const la_tensor *conv,
                                               const la_tensor *conv_bias,
                                               const la_tensor *softplus_param,
                                               const la_tensor *focus, la_tensor *out,
                                               la_context *ctx) {
    cudaStream_t st = la_cu_stream(ctx);
    lf_problem P = {};
    lf_set_qkvo(&P, q, k, v, out);
    P.n[0] = P.n[1] = 1;
    P.n[2] = P.N;
    P.g[0] = P.g[1] = P.g[2] = 1;
    P.chunk = 0;
    P.use_w = 0;
    P.norm = LF_NORM_PER_QUERY;
    P.eps = p->eps;
    P.map_h = p->map_h;
    P.map_w = p->map_w;
    const int64_t C = P.H * P.D, BN = P.B * P.N;
    la_cu_ws ws;
    if (p->variant == LA_FOCUSED_FLATTEN) {
        /* 16-bit fast path: see the top of this file */
        fo_kernel kern;
        LA_TRY(fo_select(P, conv, la_context_variant(ctx, "focused"), &kern));
        la_cu_report(ctx, "focused", fo_names[kern], "flatten N=%lld H=%lld k=%lld", (long long)P.N,
                     (long long)P.H, conv ? (long long)conv->ne[1] : 0LL);
        if (kern == FO_TC)
            return P.q.dt == LA_F16 ? fo_flatten_fast<__half>(P, p, conv, conv_bias, softplus_param, ctx, st)
                                    : fo_flatten_fast<__nv_bfloat16>(P, p, conv, conv_bias, softplus_param, ctx, st);
        size_t bytes;
        LA_TRY(la_mul_size((size_t)(C + 4 * BN), sizeof(float), &bytes, "focused workspace"));
        LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "focused feature scales"));
        float *inv_sp = (float *)ws.p, *tok = inv_sp + C;
        fo_invsp_kernel<<<(unsigned)la_cu_cdiv(C, 256), 256, 0, st>>>(la_cu_view_of(softplus_param),
                                                                       C, inv_sp);
        LA_CU_LAUNCH("fo_invsp_kernel");
        if (BN > 0x7fffffff) return la_err(LA_ERR_UNSUPPORTED, "focused CUDA: B*N too large");
        fo_flatten_tok_kernel<<<dim3((unsigned)BN, 2), FT, 0, st>>>(
            la_cu_view_of(q), la_cu_view_of(k), P.N, P.H, P.D, inv_sp, p->p, tok, BN);
        LA_CU_LAUNCH("fo_flatten_tok_kernel");
        P.fq = {LF_FEAT_FLATTEN, 1.f, 1.f, p->p, inv_sp, tok + BN, tok};
        P.fk = {LF_FEAT_FLATTEN, 1.f, 1.f, p->p, inv_sp, tok + 3 * BN, tok + 2 * BN};
        P.den_scale = 1.f / (float)P.N;
        if (conv) {
            P.conv = la_cu_view_of(conv);
            P.bias = la_cu_view_of(conv_bias);
            P.ksize = conv->ne[1];
        }
    } else {
        size_t n, bytes;
        LA_TRY(la_mul_size((size_t)BN, (size_t)C, &n, "blog K^"));
        LA_TRY(la_mul_size(n, sizeof(float), &bytes, "blog K^"));
        LA_TRY(la_cu_ws_alloc(&ws, bytes, st, "blog K^"));
        float *khat = (float *)ws.p;
        fo_blog_khat_kernel<<<(unsigned)la_cu_cdiv((int64_t)n, 256), 256, 0, st>>>(
            la_cu_view_of(k), la_cu_view_of(conv), la_cu_view_of(focus), P.B, P.N, P.H, P.D,
            p->map_h, p->map_w, conv ? conv->ne[1] : 1, khat);
        LA_CU_LAUNCH("fo_blog_khat_kernel");
        P.k.data = khat;
        P.k.dt = LA_F32;
        P.k.nb[0] = P.N * C;
        P.k.nb[1] = C;
        P.k.nb[2] = P.D;
        P.k.nb[3] = 1;
        P.fq = {LA_FEATURE_RELU1, 1.f / sqrtf((float)P.D), 1.f, 0.f, nullptr, nullptr, nullptr};
        P.fk = {LA_FEATURE_IDENTITY, 1.f, 1.f, 0.f, nullptr, nullptr, nullptr};
        P.den_scale = 1.f;
        const char *forced = la_context_variant(ctx, "focused");
        if (forced && strcmp(forced, "portable"))
            return forced && !strcmp(forced, "tc")
                       ? la_cu_variant_unsupported("focused", forced, "the flatten variant")
                       : la_cu_unknown_variant("focused", forced, "tc, portable");
        la_cu_report(ctx, "focused", "portable", "blog N=%lld H=%lld", (long long)P.N, (long long)P.H);
    }
    return lf_run(&P, ctx, "focused", "portable", st);
}
