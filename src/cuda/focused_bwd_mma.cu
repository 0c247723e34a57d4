/* Focused flatten backward on CUDA, variant "mma" of the family "focused_bwd"
 * (focused_bwd.cu picks it; TRAINING.md §1): bf16 q, k, v, d_out and bf16
 * gradients, D = Dv in {64, 128}, rows with unit inner stride and 16-byte
 * alignment, C = H·D ≤ 4096, N ≥ 64 tokens, no conv or an odd conv of k ≤ 9.
 *
 * The forward is o = (φqᵀ S/N)/(φqᵀ z/N + eps) + DWC(v) + bias with
 * φ = f_p(x') per token over all C channels, x' = (relu(x) + 1e-6)/softplus(s).
 * The mean form equals the sum form φqᵀS/(φqᵀz + N·eps), so the core is the
 * plain non-causal linear attention of (φq, φk, v) with eps·N, whose
 * backward is the tensor-core path of linblock_bwd_tc.cu, called through its
 * entry point lbt_backward (identity features: φ ≥ 1e-6·… > 0, so the
 * denominators stay positive). Passes, all on the context's stream:
 *   1. fb_feat_kernel<FWD>: φq, φk as bf16 [B,N,H,D] workspaces (the
 *      forward's φ: u = x'/max x', φ = u^p·‖x'‖/‖u^p‖, same roundings);
 *   2. lbt_backward on (φq, φk, v, d_out): dφq, dφk (bf16 workspaces), dv
 *      (the caller's view);
 *   3. fb_feat_kernel<BWD>: per token, with û = u^p/‖u^p‖, gu = Σ dφ·û,
 *        dx' = gu·x'/‖x'‖ + p‖x'‖/(max·‖u^p‖)·u^(p−1)·(dφ − gu·û),
 *        dx = relu'(x)·dx'/softplus(s)   (dq, dk written in bf16),
 *      and Σ_tokens dx'·x' per channel (q and k together) into one partial
 *      row per CTA (each lane owns its channels in a per-warp shared row);
 *      fb_rowsum_kernel sums the rows in CTA order: d s = −σ(s)/softplus(s)·Σ;
 *   4. conv: fb_dvconv_kernel adds DWCᵀ(d_out) (the conv with the flipped
 *      kernel) to dv in place; fb_dconv_kernel: per CTA (a stripe of map rows
 *      of one (b, h)) Σ d_out·v(shifted) for every tap and Σ d_out (bias),
 *      v's columns in a per-thread register ring, one partial row per CTA,
 *      summed in CTA order by fb_rowsum_kernel.
 * No floating-point atomics: gradients are bit-identical across calls. fp32
 * arithmetic throughout; bf16 only where a bf16 PyTorch formulation rounds
 * too (φ, dφ, the gradients). Bytes (in [N,H,D] bf16 tensors, D = Dv): pass
 * 1 reads q, k, writes φq, φk (4); pass 2 reads φk, v; φq, d_out; φk, v and
 * writes dφq, dφk, dv (9); pass 3 reads q, k, dφq, dφk, writes dq, dk (6);
 * pass 4 reads d_out, dv, writes dv; reads d_out, v (5): 24 against the floor
 * of 7 (read q, k, v, d_out; write dq, dk, dv).
 *
 * Under LA_BWD_EMU the same kernel text runs on the host emulator
 * (bwd_emu.cuh): CTA primitives through linblock_bwd_tc.cuh's lt_* names,
 * the warp reductions through shared memory (dev/emu_focused_bwd.sh checks
 * fb_mma_backward there against the CPU backward). */
#include <math.h>

#include <algorithm>

#include "cuda/linblock_bwd_tc.cuh"
#include "cuda/focused_bwd_mma.cuh"

#define FB_WARPS (LT_THREADS / 32)
#define FB_MAXC 4096     /* C = H·D: ≤ 16 chunks of 8 channels per lane */
#define FB_FEAT_GRID 528 /* CTAs of the per-token passes (at most) */
#define FB_CONV_CTAS 792 /* CTAs of the d_conv pass to aim for (6 per SM of an H200) */

namespace {

/* ---- small helpers (device, or the host emulator) ------------------------ */
BWD_DEV inline void fb_unpack8(uint4 u, float *x) {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        x[2 * i] = lt_f((lt_bf)(w[i] & 0xffffu));
        x[2 * i + 1] = lt_f((lt_bf)(w[i] >> 16));
    }
}
BWD_DEV inline uint4 fb_pack8(const float *x) {
    uint4 u;
    u.x = (uint32_t)lt_h(x[0]) | ((uint32_t)lt_h(x[1]) << 16);
    u.y = (uint32_t)lt_h(x[2]) | ((uint32_t)lt_h(x[3]) << 16);
    u.z = (uint32_t)lt_h(x[4]) | ((uint32_t)lt_h(x[5]) << 16);
    u.w = (uint32_t)lt_h(x[6]) | ((uint32_t)lt_h(x[7]) << 16);
    return u;
}
BWD_DEV inline uint4 fb_ld16(const lt_bf *p) { return *reinterpret_cast<const uint4 *>(p); }
BWD_DEV inline void fb_st16(lt_bf *p, uint4 u) { *reinterpret_cast<uint4 *>(p) = u; }
BWD_DEV inline float fb_relu_nan(float x) { return x != x ? x : (x > 0.f ? x : 0.f); }
/* powf out of line: inlined at every unrolled element of the per-token
 * passes it made them ~25k PTX lines each (instruction-cache bound: the
 * passes ran 8-13x slower than the forward's φ pass) */
#ifdef LA_BWD_EMU
#define FB_NOINLINE __attribute__((noinline))
#else
#define FB_NOINLINE __noinline__
#endif
BWD_DEV FB_NOINLINE float fb_powf(float u, float p) { return powf(u, p); }
/* u^p for u in (0, 1]: integer p ≤ 8 (ip > 0) by multiplication, else powf */
BWD_DEV inline float fb_pow(float u, int ip, float p) {
    if (ip > 0) {
        float r = u;
        for (int e = 1; e < ip; e++) r *= u;
        return r;
    }
    return ip == 0 && p == 0.f ? 1.f : fb_powf(u, p);
}
/* warp sum / max of v (every lane gets it); xch: this warp's 32 floats of
 * shared memory (used by the host emulator only) */
BWD_DEV inline float fb_warp_sum(float v, float *xch) {
#ifndef LA_BWD_EMU
    (void)xch;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
#else
    xch[lt_tid() & 31] = v;
    bt_syncwarp();
    float s = 0.f;
    for (int i = 0; i < 32; i++) s += xch[i];
    bt_syncwarp();
    return s;
#endif
}
BWD_DEV inline float fb_warp_max(float v, float *xch) {
#ifndef LA_BWD_EMU
    (void)xch;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
#else
    xch[lt_tid() & 31] = v;
    bt_syncwarp();
    float s = xch[0];
    for (int i = 1; i < 32; i++) s = fmaxf(s, xch[i]);
    bt_syncwarp();
    return s;
#endif
}

/* 1/softplus(s) and −σ(s)/softplus(s) per channel (s NULL: 0) */
__global__ void fb_sp_kernel(int64_t total, bwd_view s, float *isp, float *fac) {
    const int64_t c = bwd_gid();
    if (c >= total) return;
    const double x = s.data ? (double)bwd_ld(s, 0, 0, 0, c) : 0.0;
    const double sp = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    isp[c] = (float)(1.0 / sp);
    fac[c] = (float)(-1.0 / (1.0 + exp(-x)) / sp);
}

/* ---- passes 1 and 3: the focusing map, one warp per (token, q|k) --------- */
struct fb_feat_args {
    const lt_bf *x[2];     /* q, k: [B,N,H,D] views */
    int64_t xs[2][3];      /* their b, n, h strides */
    lt_bf *dx[2];          /* BWD: dq, dk views (NULL: not written) */
    int64_t dxs[2][3];
    lt_bf *ph[2];          /* FWD: φq, φk out; BWD: dφq, dφk in ([B,N,H,D] contiguous) */
    const float *isp;      /* [C] */
    float *part;           /* BWD: [grid][C] partial Σ dx'·x' (NULL: not wanted) */
    int64_t N, units;      /* units = 2·B·N: u = 2·(b·N + t) + (0 q | 1 k) */
    int64_t grid;          /* CTAs of the launch (each warp strides over the units) */
    int H, lcpd;           /* D = 8·2^lcpd */
    float p;
};
/* a warp's Σ row: chunk i's channel e of lane l at ((8·i + e)·32 + l)
 * (conflict-free), W = 256·⌈C/256⌉ floats */
#ifdef LA_BWD_EMU
#define FB_HD
#else
#define FB_HD __host__ __device__
#endif
FB_HD inline int64_t fb_row_len(int64_t C) { return (C / 8 + 31) / 32 * 256; }
/* shared memory: isp [C], the exchange rows [8][32], BWD: Σ rows [8][W] */
inline size_t fb_feat_smem(int64_t C, bool bwd) {
    return (size_t)(C + FB_WARPS * 32 + (bwd ? FB_WARPS * fb_row_len(C) : 0)) * sizeof(float);
}
/* the 8 scales of a chunk (two 16-byte shared-memory loads) */
BWD_DEV inline void fb_isp8(const float *p, float *s) {
    const float4 a = *reinterpret_cast<const float4 *>(p), b = *reinterpret_cast<const float4 *>(p + 4);
    s[0] = a.x, s[1] = a.y, s[2] = a.z, s[3] = a.w, s[4] = b.x, s[5] = b.y, s[6] = b.z, s[7] = b.w;
}

/* A lane holds the chunks ch = lane + 32·i (i < R) of 8 channels: c = 8·ch,
 * head c / D; the token's raw values (and dφ) stay in registers. */
/* u^p in a kernel instantiated for p = 3 (IP = 3: the default, by
 * multiplication) or for any p (IP = 0: fb_pow); pm1: u^(p−1) */
template <int IP> BWD_DEV inline float fb_powk(float u, int ip, float p) {
    return IP == 3 ? u * u * u : fb_pow(u, ip, p);
}
template <int IP> BWD_DEV inline float fb_powk_m1(float u, int ipm1, float p) {
    return IP == 3 ? u * u : fb_pow(u, ipm1, p - 1.f);
}
/* one chunk of 8 channels of a token: raw x, the channel scales 1/softplus
 * and x' = (relu(x) + 1e-6)/softplus(s) (what the compiler does not use of
 * it costs nothing) */
struct fb_chunk {
    float x[8], is[8], xp[8];
};
BWD_DEV inline void fb_chunk_load(uint4 raw, const float *isp_ch, fb_chunk &c) {
    fb_unpack8(raw, c.x);
    fb_isp8(isp_ch, c.is);
#pragma unroll
    for (int e = 0; e < 8; e++) c.xp[e] = (fb_relu_nan(c.x[e]) + 1e-6f) * c.is[e];
}
/* f(i, ch) for each of a lane's chunks that exists (ch < nch) */
template <int R, class F> BWD_DEV inline void fb_for_chunks(int lane, int nch, F f) {
#pragma unroll
    for (int i = 0; i < R; i++)
        if (lane + 32 * i < nch) f(i, lane + 32 * i);
}
template <int R, bool BWD, int IP>
__global__ void __launch_bounds__(LT_THREADS) fb_feat_kernel(fb_feat_args a) {
    LT_SMEM_DECL;
    const int nch = a.H << a.lcpd, C = nch * 8, cmask = (1 << a.lcpd) - 1, W = (int)fb_row_len(C);
    float *isp = (float *)lt_sm, *xch = isp + C + (lt_tid() >> 5) * 32;
    float *acc = isp + C + FB_WARPS * 32 + (lt_tid() >> 5) * W; /* BWD: this warp's Σ row */
    for (int c = lt_tid(); c < C; c += LT_THREADS) isp[c] = a.isp[c];
    if (BWD && a.part)
        for (int c = lt_tid(); c < FB_WARPS * W; c += LT_THREADS) isp[C + FB_WARPS * 32 + c] = 0.f;
    lt_sync();
    const int lane = lt_tid() & 31;
    const int ip = (a.p == floorf(a.p) && a.p >= 1.f && a.p <= 8.f) ? (int)a.p : 0;
    const int ipm1 = ip > 0 ? ip - 1 : 0; /* u^(p−1) */
    for (int64_t u = (int64_t)lt_bx() * FB_WARPS + (lt_tid() >> 5); u < a.units;
         u += (int64_t)a.grid * FB_WARPS) {
        const int w = (int)(u & 1);
        const int64_t bt = u >> 1, b = bt / a.N, t = bt % a.N;
        const lt_bf *base = a.x[w] + b * a.xs[w][0] + t * a.xs[w][1];
        /* the token's channel offset of chunk ch in a strided [.., H, D] row */
        auto at = [&](int ch, int64_t hs) { return (int64_t)(ch >> a.lcpd) * hs + (ch & cmask) * 8; };
        uint4 raw[R], gr[R];
#pragma unroll
        for (int i = 0; i < R; i++) raw[i] = gr[i] = make_uint4(0, 0, 0, 0);
        fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
            raw[i] = fb_ld16(base + at(ch, a.xs[w][2]));
            if (BWD) gr[i] = fb_ld16(a.ph[w] + bt * C + ch * 8);
        });
        /* max of x', then Σu², Σu^{2p} with u = x'/max ∈ (0, 1] */
        float mx = 0.f;
        fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
            fb_chunk c;
            fb_chunk_load(raw[i], isp + ch * 8, c);
#pragma unroll
            for (int e = 0; e < 8; e++) mx = fmaxf(mx, c.xp[e]);
        });
        mx = fb_warp_max(mx, xch);
        const float inv_m = 1.f / mx;
        float s2 = 0.f, sp2 = 0.f;
        fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
            fb_chunk c;
            fb_chunk_load(raw[i], isp + ch * 8, c);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float uu = c.xp[e] * inv_m, up = fb_powk<IP>(uu, ip, a.p);
                s2 = fmaf(uu, uu, s2);
                sp2 = fmaf(up, up, sp2);
            }
        });
        s2 = fb_warp_sum(s2, xch);
        sp2 = fb_warp_sum(sp2, xch);
        const float n1 = mx * sqrtf(s2), nu = sqrtf(sp2); /* ‖x'‖, ‖u^p‖ */
        if (!BWD) {
            const float r = n1 / nu; /* φ = u^p·‖x'‖/‖u^p‖ */
            lt_bf *dst = a.ph[w] + bt * C;
            fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
                fb_chunk c;
                fb_chunk_load(raw[i], isp + ch * 8, c);
                float o[8];
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = fb_powk<IP>(c.xp[e] * inv_m, ip, a.p) * r;
                fb_st16(dst + ch * 8, fb_pack8(o));
            });
            continue;
        }
        /* gu = Σ dφ·û, û = u^p/‖u^p‖ */
        const float inv_nu = 1.f / nu;
        float gu = 0.f;
        fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
            fb_chunk c;
            float g[8];
            fb_chunk_load(raw[i], isp + ch * 8, c);
            fb_unpack8(gr[i], g);
#pragma unroll
            for (int e = 0; e < 8; e++) gu = fmaf(g[e], fb_powk<IP>(c.xp[e] * inv_m, ip, a.p) * inv_nu, gu);
        });
        gu = fb_warp_sum(gu, xch);
        const float k1 = gu / n1, k2 = a.p * n1 * inv_m * inv_nu;
        lt_bf *drow = a.dx[w] ? a.dx[w] + b * a.dxs[w][0] + t * a.dxs[w][1] : nullptr;
        fb_for_chunks<R>(lane, nch, [&](int i, int ch) {
            fb_chunk c;
            float g[8], d[8];
            fb_chunk_load(raw[i], isp + ch * 8, c);
            fb_unpack8(gr[i], g);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                const float xp = c.xp[e], uu = xp * inv_m;
                const float um1 = fb_powk_m1<IP>(uu, ipm1, a.p);
                const float uh = um1 * uu * inv_nu;
                const float dxp = k1 * xp + k2 * um1 * (g[e] - gu * uh);
                d[e] = c.x[e] > 0.f ? dxp * c.is[e] : 0.f;
                if (a.part) acc[(i * 8 + e) * 32 + lane] += dxp * xp;
            }
            if (drow) fb_st16(drow + at(ch, a.dxs[w][2]), fb_pack8(d));
        });
    }
    if (!BWD || !a.part) return;
    /* this CTA's row: the warps' rows summed in warp order */
    lt_sync();
    const float *rows = isp + C + FB_WARPS * 32;
    for (int c = lt_tid(); c < C; c += LT_THREADS) {
        const int ch = c >> 3, at = ((ch >> 5) * 8 + (c & 7)) * 32 + (ch & 31);
        float s = 0.f;
        for (int j = 0; j < FB_WARPS; j++) s += rows[j * W + at];
        a.part[(int64_t)lt_bx() * C + c] = s;
    }
}

/* out[e] = scale[e]·Σ_r part[r·E + e] (scale NULL: 1) in a fixed order: CTA
 * = 32 columns × 8 row slices (slice j: rows j, j + 8, ..., four loads in
 * flight), the slices' sums added in slice order */
__global__ void __launch_bounds__(LT_THREADS) fb_rowsum_kernel(int64_t E, int64_t rows,
                                                               const float *part,
                                                               const float *scale, float *out) {
    LT_SMEM_DECL;
    float *red = (float *)lt_sm; /* [8][32] */
    const int col = lt_tid() & 31, sl = lt_tid() >> 5;
    const int64_t e = (int64_t)lt_bx() * 32 + col;
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    if (e < E) {
        int64_t r = sl;
        for (; r + 24 < rows; r += 32) {
            s0 += part[r * E + e];
            s1 += part[(r + 8) * E + e];
            s2 += part[(r + 16) * E + e];
            s3 += part[(r + 24) * E + e];
        }
        for (; r < rows; r += 8) s0 += part[r * E + e];
    }
    red[sl * 32 + col] = (s0 + s1) + (s2 + s3);
    lt_sync();
    if (sl == 0 && e < E) {
        float t = 0.f;
        for (int j = 0; j < LT_THREADS / 32; j++) t += red[j * 32 + col];
        out[e] = scale ? scale[e] * t : t;
    }
}
la_status fb_rowsum(int64_t E, int64_t rows, const float *part, const float *scale, float *out,
                    cudaStream_t s) {
    LT_LAUNCH(fb_rowsum_kernel, lt_cdiv(E, 32), 1, LT_THREADS * sizeof(float), s, E, rows, part,
              scale, out);
    return LA_OK;
}

/* ---- pass 4: the depthwise conv on v (one [D,KS,KS] kernel for all heads) -- */
struct fb_conv_args {
    const lt_bf *g, *v; /* d_out, v: [B,N,H,D] views */
    lt_bf *dv;
    int64_t gs[3], vs[3], dvs[3]; /* b, n, h strides */
    const float *w;               /* [D][KS][KS] fp32 */
    int64_t H, Hm, Wm;
    int64_t xblocks;              /* dv pass: column blocks per map row */
    int64_t rows, stripes;        /* d_conv pass: map rows per CTA, CTAs per (b, h) */
    float *part;                  /* d_conv pass: [B·H·stripes][(KS·KS + 1)·D] */
};

/* dv += DWCᵀ(d_out): the conv of d_out with the flipped kernel. CTA = (b·H +
 * h, map row y, a block of columns); thread = 8 channels × FB_CX consecutive
 * columns; per tap row the FB_CX + KS − 1 chunks of the window are read once
 * (in flight together) and reused for up to KS outputs; weights (flipped)
 * staged in shared memory, a tap row's KS·8 held in registers while its
 * window is swept. */
#define FB_CX 8
template <int KS, int LCP>
__global__ void __launch_bounds__(LT_THREADS) fb_dvconv_kernel(fb_conv_args a) {
    constexpr int D = 8 << LCP, RR = KS / 2;
    LT_SMEM_DECL;
    float *ws = (float *)lt_sm; /* [tap][D], flipped */
    for (int e = lt_tid(); e < KS * KS * D; e += LT_THREADS) {
        const int c = e % D, tap = e / D, ta = tap / KS, tc = tap % KS;
        ws[e] = a.w[(c * KS + (KS - 1 - ta)) * KS + (KS - 1 - tc)];
    }
    lt_sync();
    const int64_t bh = lt_by(), b = bh / a.H, h = bh % a.H;
    const int64_t y = lt_bx() / a.xblocks, xb = lt_bx() % a.xblocks, Wm = a.Wm;
    const int c8 = (lt_tid() & ((1 << LCP) - 1)) * 8;
    const int64_t x0 = xb * (FB_CX * (LT_THREADS >> LCP)) + (lt_tid() >> LCP) * FB_CX;
    if (x0 >= Wm) return;
    float acc[FB_CX][8];
#pragma unroll
    for (int j = 0; j < FB_CX; j++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[j][e] = 0.f;
    const lt_bf *gb = a.g + b * a.gs[0] + h * a.gs[2] + c8;
    for (int t = 0; t < KS; t++) {
        const int64_t yy = y + t - RR;
        if (yy < 0 || yy >= a.Hm) continue;
        float wr[KS][8]; /* the tap row's weights, in registers for the whole row */
#pragma unroll
        for (int cc = 0; cc < KS; cc++) fb_isp8(ws + (t * KS + cc) * D + c8, wr[cc]);
        /* the window row's FB_CX + KS − 1 columns x0 + s − RR, loaded together
         * (in flight at once), then used */
        uint4 win[FB_CX + KS - 1];
#pragma unroll
        for (int s = 0; s < FB_CX + KS - 1; s++) {
            const int64_t xx = x0 + s - RR;
            win[s] = xx >= 0 && xx < Wm ? fb_ld16(gb + (yy * Wm + xx) * a.gs[1]) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int s = 0; s < FB_CX + KS - 1; s++) {
            const int64_t xx = x0 + s - RR;
            if (xx < 0 || xx >= Wm) continue;
            float gv[8];
            fb_unpack8(win[s], gv);
#pragma unroll
            for (int j = 0; j < FB_CX; j++) {
                const int cc = s - j;
                if (cc < 0 || cc >= KS) continue;
#pragma unroll
                for (int e = 0; e < 8; e++) acc[j][e] = fmaf(wr[cc][e], gv[e], acc[j][e]);
            }
        }
    }
    lt_bf *db = a.dv + b * a.dvs[0] + h * a.dvs[2] + c8;
#pragma unroll
    for (int j = 0; j < FB_CX; j++) {
        const int64_t xx = x0 + j;
        if (xx >= Wm) break;
        lt_bf *po = db + (y * Wm + xx) * a.dvs[1];
        float o[8];
        fb_unpack8(fb_ld16(po), o);
#pragma unroll
        for (int e = 0; e < 8; e++) o[e] += acc[j][e];
        fb_st16(po, fb_pack8(o));
    }
}

/* d_conv and d_conv_bias partial rows: CTA = (stripe of map rows, b·H + h);
 * thread = (8 channels c8, tap row ta, row lane rg): for the rows y = y0 + rg,
 * y0 + rg + RG, ... of its stripe it sweeps x keeping the KS columns
 * x − RR .. x + RR of v's row y + ta − RR in a register ring (one new 16-byte
 * load per column, KS at a time so that they are in flight together) and
 * adds d_out[y][x]·v[y + ta − RR][x + tc − RR] to tap (ta, tc); the ta = 0
 * threads also sum d_out (the bias). Loads per pixel and head: 2·KS per
 * 8 channels (the former per-tap loop read v once per tap: KS² + 1). The
 * row lanes' sums are added in rg order in shared memory, then
 * part[cta][tap·D + d], cta = (b·H + h)·stripes + stripe (tap KS·KS: bias). */
template <int KS, int LCP> struct fb_dconv_geo {
    static constexpr int NCH = 1 << LCP, TR = NCH * KS, RG = LT_THREADS / TR;
};
/* map rows per d_conv CTA: a multiple of the row lanes, about FB_CONV_CTAS
 * CTAs in all */
inline int64_t fb_dconv_rows(int64_t ks, int64_t D, int64_t Hm, int64_t BH) {
    const int64_t rg = LT_THREADS / ((D / 8) * (ks ? ks : 1));
    const int64_t per = lt_cdiv(Hm, std::min<int64_t>(Hm, lt_cdiv(FB_CONV_CTAS, BH)));
    return std::min<int64_t>(lt_cdiv(per, rg) * rg, lt_cdiv(Hm, rg) * rg);
}
template <int KS, int LCP>
__global__ void __launch_bounds__(LT_THREADS) fb_dconv_kernel(fb_conv_args a) {
    constexpr int D = 8 << LCP, RR = KS / 2, NT = KS * KS + 1;
    using G = fb_dconv_geo<KS, LCP>;
    LT_SMEM_DECL;
    float *red = (float *)lt_sm; /* [NT][D] */
    const int64_t bh = lt_by(), b = bh / a.H, h = bh % a.H, Hm = a.Hm, Wm = a.Wm;
    const int tid = lt_tid(), c8 = (tid % G::NCH) * 8, ta = (tid / G::NCH) % KS, rg = tid / G::TR;
    const bool live = rg < G::RG;
    const int64_t y0 = (int64_t)lt_bx() * a.rows, y1 = lt_min(y0 + a.rows, Hm);
    float acc[KS][8], bacc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        bacc[e] = 0.f;
#pragma unroll
        for (int j = 0; j < KS; j++) acc[j][e] = 0.f;
    }
    const lt_bf *gb = a.g + b * a.gs[0] + h * a.gs[2] + c8, *vb = a.v + b * a.vs[0] + h * a.vs[2] + c8;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (int64_t y = y0 + rg; live && y < y1; y += G::RG) {
        const int64_t yy = y + ta - RR;
        const bool rowin = yy >= 0 && yy < Hm;
        const lt_bf *grow = gb + y * Wm * a.gs[1], *vrow = vb + yy * Wm * a.vs[1];
        /* ring slot s holds v's column c with c ≡ s (mod KS) (c + KS·RR ≥ 0) */
        uint4 ring[KS];
#pragma unroll
        for (int s = 0; s < KS; s++) ring[s] = zero;
#pragma unroll
        for (int c = -RR; c < RR; c++) /* the columns before the first step */
            ring[(c + KS * RR) % KS] = rowin && c >= 0 && c < Wm ? fb_ld16(vrow + c * a.vs[1]) : zero;
        for (int64_t x0 = 0; x0 < Wm; x0 += KS) {
            uint4 gn[KS], vn[KS]; /* d_out[y][x0 + j], v[yy][x0 + j + RR] */
#pragma unroll
            for (int j = 0; j < KS; j++) {
                const int64_t x = x0 + j, xv = x + RR;
                gn[j] = x < Wm ? fb_ld16(grow + x * a.gs[1]) : zero;
                vn[j] = rowin && xv < Wm ? fb_ld16(vrow + xv * a.vs[1]) : zero;
            }
#pragma unroll
            for (int j = 0; j < KS; j++) {
                /* step x = x0 + j (x0 ≡ 0 mod KS): column x + RR enters slot (j + RR) % KS */
                ring[(j + RR) % KS] = vn[j];
                float gv[8];
                fb_unpack8(gn[j], gv); /* a padded column (x ≥ Wm) adds 0 */
#pragma unroll
                for (int tc = 0; tc < KS; tc++) {
                    float vv[8];
                    fb_unpack8(ring[(j + tc - RR + KS * RR) % KS], vv);
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[tc][e] = fmaf(gv[e], vv[e], acc[tc][e]);
                }
                if (ta == 0)
#pragma unroll
                    for (int e = 0; e < 8; e++) bacc[e] += gv[e];
            }
        }
    }
    /* the row lanes' sums in rg order (deterministic) */
    for (int r = 0; r < G::RG; r++) {
        if (rg == r) {
#pragma unroll
            for (int tc = 0; tc < KS; tc++)
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    float *o = red + (ta * KS + tc) * D + c8 + e;
                    *o = r ? *o + acc[tc][e] : acc[tc][e];
                }
            if (ta == 0)
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    float *o = red + (NT - 1) * D + c8 + e;
                    *o = r ? *o + bacc[e] : bacc[e];
                }
        }
        lt_sync();
    }
    float *dst = a.part + (bh * a.stripes + (int64_t)lt_bx()) * (int64_t)(NT * D);
    for (int i = tid; i < NT * D; i += LT_THREADS) dst[i] = red[i];
}
/* [tap][D] rows summed → d_conv [D][KS][KS] and d_conv_bias [D] */
__global__ void fb_dconv_unpack_kernel(int64_t total, int64_t D, int64_t KK, const float *sum,
                                       float *dw, float *db) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t tap = i / D, d = i % D;
    if (tap < KK) dw[d * KK + tap] = sum[i];
    else db[d] = sum[i];
}

template <int KS, int LCP> la_status fb_conv_launch(fb_conv_args a, int64_t BH, bool want_dv,
                                                    bool want_dw, cudaStream_t s) {
    constexpr int D = 8 << LCP;
    if (want_dv) {
        a.xblocks = lt_cdiv(a.Wm, FB_CX * (LT_THREADS >> LCP));
        auto kdv = fb_dvconv_kernel<KS, LCP>;
        LT_LAUNCH(kdv, a.xblocks * a.Hm, BH, (size_t)KS * KS * D * 4, s, a);
    }
    if (want_dw) {
        auto kdw = fb_dconv_kernel<KS, LCP>;
        LT_LAUNCH(kdw, a.stripes, BH, (size_t)(KS * KS + 1) * D * sizeof(float), s, a);
    }
    return LA_OK;
}
template <int LCP> la_status fb_conv_ks(int ks, const fb_conv_args &a, int64_t BH, bool dv,
                                        bool dw, cudaStream_t s) {
    switch (ks) {
    case 1: return fb_conv_launch<1, LCP>(a, BH, dv, dw, s);
    case 3: return fb_conv_launch<3, LCP>(a, BH, dv, dw, s);
    case 5: return fb_conv_launch<5, LCP>(a, BH, dv, dw, s);
    case 7: return fb_conv_launch<7, LCP>(a, BH, dv, dw, s);
    default: return fb_conv_launch<9, LCP>(a, BH, dv, dw, s);
    }
}

template <int R, int IP> la_status fb_feat_launch(const fb_feat_args &a, bool bwd, size_t smem,
                                                  cudaStream_t s) {
    auto kb = fb_feat_kernel<R, true, IP>;
    auto kf = fb_feat_kernel<R, false, IP>;
    if (bwd) LT_LAUNCH(kb, a.grid, 1, smem, s, a);
    else LT_LAUNCH(kf, a.grid, 1, smem, s, a);
    return LA_OK;
}
template <int R> la_status fb_feat_p(const fb_feat_args &a, bool bwd, size_t smem, cudaStream_t s) {
    return a.p == 3.f ? fb_feat_launch<R, 3>(a, bwd, smem, s) : fb_feat_launch<R, 0>(a, bwd, smem, s);
}
la_status fb_feat(const fb_feat_args &a, bool bwd, cudaStream_t s) {
    const int64_t C = (int64_t)a.H << (a.lcpd + 3), per_lane = lt_cdiv(C / 8, 32);
    const size_t smem = fb_feat_smem(C, bwd && a.part);
    if (per_lane <= 2) return fb_feat_p<2>(a, bwd, smem, s);
    if (per_lane <= 4) return fb_feat_p<4>(a, bwd, smem, s);
    if (per_lane <= 8) return fb_feat_p<8>(a, bwd, smem, s);
    return fb_feat_p<16>(a, bwd, smem, s);
}

bool fb_view_ok(const la_tensor *t, int64_t D) {
    if (!t) return true;
    if (t->dtype != LA_BF16 || t->ndim != 4 || t->ne[3] != D || t->nb[3] != 1) return false;
    for (int i = 0; i < 3; i++)
        if (t->nb[i] % 8) return false;
    return ((uintptr_t)t->data & 15) == 0;
}
void fb_strides(const la_tensor *t, int64_t *s) {
    for (int i = 0; i < 3; i++) s[i] = t ? t->nb[i] : 0;
}
/* a contiguous bf16 [B,N,H,D] workspace as a tensor */
la_tensor fb_tensor(lt_bf *p, int64_t B, int64_t N, int64_t H, int64_t D) {
    la_tensor t;
    memset(&t, 0, sizeof t);
    t.data = p;
    t.dtype = LA_BF16;
    t.device = LA_DEVICE_CUDA;
    t.ndim = 4;
    t.ne[0] = B, t.ne[1] = N, t.ne[2] = H, t.ne[3] = D;
    t.nb[3] = 1, t.nb[2] = D, t.nb[1] = H * D, t.nb[0] = N * H * D;
    return t;
}

} // namespace

int fb_mma_eligible(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                    const la_tensor *v, const la_tensor *conv, const la_tensor *d_out,
                    const la_tensor *dq, const la_tensor *dk, const la_tensor *dv) {
    if (p->variant != LA_FOCUSED_FLATTEN) return 0;
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3];
    /* N >= 64: at least one token tile. Below it the portable engine costs
     * the same, and the bf16 summaries of a few tokens (one outer product
     * at N = 1) average none of their roundings: dq, dk off by 1-2 %. */
    if ((D != 64 && D != 128) || v->ne[3] != D || B < 1 || N < 64 || H < 1) return 0;
    if (H * D > FB_MAXC || B * H > 65535 || p->map_h * p->map_w != N) return 0;
    if (!(p->p > 0.f) || !isfinite(p->p)) return 0;
    if (conv && (conv->ne[1] > 9 || conv->ne[1] % 2 == 0)) return 0;
    if (p->map_h * lt_cdiv(p->map_w, FB_CX * (LT_THREADS >> 3)) > 0x7fffffff) return 0;
    return fb_view_ok(q, D) && fb_view_ok(k, D) && fb_view_ok(v, D) && fb_view_ok(d_out, D) &&
           fb_view_ok(dq, D) && fb_view_ok(dk, D) && fb_view_ok(dv, D);
}

la_status fb_mma_backward(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                          const la_tensor *v, const la_tensor *conv, const la_tensor *softplus_param,
                          const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
                          la_tensor *d_conv, la_tensor *d_conv_bias, la_tensor *d_softplus_param,
                          cudaStream_t s) {
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], C = H * D, BN = B * N;
    const int64_t BH = B * H, n = BN * C, ks = conv ? conv->ne[1] : 0, E = (ks * ks + 1) * D;
    const bool want_sp = d_softplus_param != nullptr, want_q = dq || want_sp, want_k = dk || want_sp;
    const bool want_dw = conv && (d_conv || d_conv_bias), want_dvc = conv && dv;
    const int64_t fgrid = std::min<int64_t>(lt_cdiv(2 * BN, FB_WARPS), FB_FEAT_GRID);
    /* d_conv pass: stripes of map rows per (b, h), about FB_CONV_CTAS CTAs in all */
    const int64_t rows = fb_dconv_rows(ks, D, p->map_h, BH);
    const int64_t stripes = lt_cdiv(p->map_h, rows);
    bwd_ws ws;
    float *isp, *fac, *small, *w = nullptr, *fpart = nullptr, *cpart = nullptr, *csum = nullptr;
    float *bufs[4] = {nullptr, nullptr, nullptr, nullptr}; /* φq, φk, dφq, dφk (bf16) */
    ws.want(&isp, C);
    ws.want(&fac, C);
    ws.want(&small, C + D * 82); /* d s [C]; d_conv [D][ks][ks] and d_conv_bias [D] */
    for (int i = 0; i < 4; i++)
        if (i < 2 || (i == 2 ? want_q : want_k)) ws.want(&bufs[i], lt_cdiv(n, 2));
    if (want_sp) ws.want(&fpart, fgrid, C);
    if (conv) ws.want(&w, D, ks * ks);
    if (want_dw) {
        ws.want(&cpart, BH * stripes, E);
        ws.want(&csum, E);
    }
    LA_TRY(ws.alloc(s, "focused backward (mma)"));
    BWD_LAUNCH(fb_sp_kernel, C, s, softplus_param ? bwd_pad_of(softplus_param).v : bwd_view{},
               isp, fac);

    fb_feat_args fa;
    memset(&fa, 0, sizeof fa);
    fa.x[0] = (const lt_bf *)q->data, fa.x[1] = (const lt_bf *)k->data;
    fb_strides(q, fa.xs[0]), fb_strides(k, fa.xs[1]);
    fa.isp = isp;
    fa.N = N, fa.units = 2 * BN, fa.grid = fgrid;
    fa.H = (int)H, fa.lcpd = D == 64 ? 3 : 4;
    fa.p = p->p;
    fa.ph[0] = (lt_bf *)bufs[0], fa.ph[1] = (lt_bf *)bufs[1];
    LA_TRY(fb_feat(fa, false, s));

    /* the linear core: o = φqᵀS/(φqᵀz + N·eps) */
    la_tensor tq = fb_tensor((lt_bf *)bufs[0], B, N, H, D), tk = fb_tensor((lt_bf *)bufs[1], B, N, H, D);
    la_tensor tdq = fb_tensor((lt_bf *)bufs[2], B, N, H, D), tdk = fb_tensor((lt_bf *)bufs[3], B, N, H, D);
    lbt_problem tp;
    memset(&tp, 0, sizeof tp);
    tp.q = &tq, tp.k = &tk, tp.v = v, tp.d_out = d_out;
    tp.dq = want_q ? &tdq : nullptr, tp.dk = want_k ? &tdk : nullptr, tp.dv = dv;
    tp.n[0] = tp.n[1] = 1, tp.n[2] = N;
    tp.g[0] = tp.g[1] = tp.g[2] = 1;
    tp.M = 1;
    tp.feature = LA_FEATURE_IDENTITY;
    tp.norm = LA_MHLA_NORM_PER_QUERY;
    tp.scale_q = 1.f;
    tp.eps = p->eps * (float)N;
    if (tp.dq || tp.dk || tp.dv) LA_TRY(lbt_backward(&tp, s));

    if (want_q || want_k) {
        fa.ph[0] = (lt_bf *)bufs[2], fa.ph[1] = (lt_bf *)bufs[3];
        fa.dx[0] = dq ? (lt_bf *)dq->data : nullptr, fa.dx[1] = dk ? (lt_bf *)dk->data : nullptr;
        fb_strides(dq, fa.dxs[0]), fb_strides(dk, fa.dxs[1]);
        fa.part = fpart;
        /* a unit whose dφ was not computed (q without dq and d s) is not read */
        if (!want_q) fa.ph[0] = fa.ph[1];
        if (!want_k) fa.ph[1] = fa.ph[0];
        LA_TRY(fb_feat(fa, true, s));
        if (want_sp) {
            LA_TRY(fb_rowsum(C, fgrid, fpart, fac, small, s));
            LA_TRY(bwd_unpack(s, d_softplus_param, small));
        }
    }
    if (conv) {
        LA_TRY(bwd_pack(s, conv, w));
        fb_conv_args ca;
        memset(&ca, 0, sizeof ca);
        ca.g = (const lt_bf *)d_out->data, ca.v = (const lt_bf *)v->data;
        ca.dv = dv ? (lt_bf *)dv->data : nullptr;
        fb_strides(d_out, ca.gs), fb_strides(v, ca.vs), fb_strides(dv, ca.dvs);
        ca.w = w;
        ca.H = H, ca.Hm = p->map_h, ca.Wm = p->map_w;
        ca.rows = rows, ca.stripes = stripes;
        ca.part = cpart;
        if (want_dvc || want_dw) {
            if (D == 64) LA_TRY(fb_conv_ks<3>((int)ks, ca, BH, want_dvc, want_dw, s));
            else LA_TRY(fb_conv_ks<4>((int)ks, ca, BH, want_dvc, want_dw, s));
        }
        if (want_dw) {
            float *dw = small + C, *db = dw + D * ks * ks;
            LA_TRY(fb_rowsum(E, BH * stripes, cpart, nullptr, csum, s));
            BWD_LAUNCH(fb_dconv_unpack_kernel, E, s, D, ks * ks, csum, dw, db);
            if (d_conv) LA_TRY(bwd_unpack(s, d_conv, dw));
            if (d_conv_bias) LA_TRY(bwd_unpack(s, d_conv_bias, db));
        }
    }
    return LA_OK;
}
