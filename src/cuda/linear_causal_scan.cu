/* Pass 2 of the causal tensor-core path (linear_causal_tc.cu): the exclusive
 * prefix of the chunk states, with the state in and out. */
#include "linear_causal_args.cuh"

namespace {

/* ---- pass 2: exclusive prefix over the chunks, in place ------------------
 * grid (⌈LS/4/NT⌉, B·H): a thread owns 4 consecutive entries of (S, z); nd
 * chunks hold a ΔS (nch − 1, or nch when the final state is asked for). The
 * input state is read and the output state written by the same thread for
 * the same entries, so S_in / S_out (and z_in / z_out) may alias. */
constexpr int SU = 8; /* loads in flight per thread */
/* Entries x..x+3 of the input state (S, then z) of head (b, h); 0 without one. */
__device__ __forceinline__ void lct_state_in4(const lct_args &a, int64_t b, int64_t h, int64_t x,
                                              float st[4]) {
    const bool isS = x < a.D * a.D; /* D·D % 4 == 0: the 4 entries are all S or all z */
#pragma unroll
    for (int e = 0; e < 4; e++) {
        float s = 0.f;
        if (isS) {
            const int64_t d = (x + e) / a.D, dv = (x + e) % a.D;
            if (a.S_in.data) s = la_cu_ld4(a.S_in, b, h, d, dv);
        } else {
            const int64_t d = x + e - a.D * a.D;
            if (a.z_in.data)
                s = la_cu_ld(a.z_in.data, a.z_in.dt,
                             b * a.z_in.nb[0] + h * a.z_in.nb[1] + d * a.z_in.nb[2]);
        }
        st[e] = s;
    }
}
/* Entries x..x+3 of the final state into S_out / z_out (where asked for). */
__device__ __forceinline__ void lct_state_out4(const lct_args &a, int64_t b, int64_t h, int64_t x,
                                               const float st[4]) {
    const bool isS = x < a.D * a.D;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        if (isS && a.S_out.data) {
            const int64_t d = (x + e) / a.D, dv = (x + e) % a.D;
            la_cu_st((void *)a.S_out.data, a.S_out.dt,
                     b * a.S_out.nb[0] + h * a.S_out.nb[1] + d * a.S_out.nb[2] + dv * a.S_out.nb[3],
                     st[e]);
        } else if (!isS && a.z_out.data) {
            const int64_t d = x + e - a.D * a.D;
            la_cu_st((void *)a.z_out.data, a.z_out.dt,
                     b * a.z_out.nb[0] + h * a.z_out.nb[1] + d * a.z_out.nb[2], st[e]);
        }
    }
}
__global__ void __launch_bounds__(NT) lct_scan_kernel(lct_args a, int64_t nd) {
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int64_t x4 = (int64_t)blockIdx.x * NT + threadIdx.x;
    if (x4 >= a.LS / 4) return;
    float st[4];
    lct_state_in4(a, b, h, 4 * x4, st);
    float4 *base = (float4 *)(a.ws + (size_t)bh * a.nch * a.LS) + x4;
    const int64_t cs = a.LS / 4; /* float4 stride between chunks */
    for (int64_t c0 = 0; c0 < a.nch; c0 += SU) {
        float4 dv[SU];
#pragma unroll
        for (int u = 0; u < SU; u++)
            dv[u] = (c0 + u < nd) ? base[(c0 + u) * cs] : make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int u = 0; u < SU; u++) {
            if (c0 + u < a.nch) base[(c0 + u) * cs] = make_float4(st[0], st[1], st[2], st[3]);
            st[0] += dv[u].x;
            st[1] += dv[u].y;
            st[2] += dv[u].z;
            st[3] += dv[u].w;
        }
    }
    lct_state_out4(a, b, h, 4 * x4, st);
}

/* ---- pass 2, wide -----------------------------------------------------------
 * Why: the walk above issues ⌈nd/SU⌉ rounds of 8 loads one after the other
 * per thread, from about 1.5 CTAs per SM at H = 12: about 4× its byte time.
 * Here the chunk axis is cut as well, so that
 * every load of the kernel is issued up front and one barrier joins them:
 * block (CW, G), thread (x, g) owns float4 column x of (S, z) and slots
 * p ∈ [SW·g, SW·g + SW) of the np = nd·ks partial states (ks partials per
 * chunk when pass 1 runs on sub-chunks of L/ks tokens; lct_run passes ks = 1:
 * sub-chunks were no faster). It loads its ≤ SW partials at once, puts its group
 * total in shared memory, and after the barrier writes
 *     P_c = S_in + Σ_{p < c·ks} ΔS_p   for the c with c·ks in its slots,
 * into out [B·H][nch][LS] (what pass 3 reads). G = np/SW + 1 so that slot np
 * (the total, = P of a chunk without a ΔS and the final state) has an owner;
 * the last group writes S_out / z_out. A CTA holds every slot of its columns
 * and all its loads (incl. S_in) precede the barrier, all stores follow it:
 * so `part` may be `out` (ks = 1, in place) and S_in may alias S_out. */
constexpr int SW = 8;
__global__ void __launch_bounds__(NT) lct_scan_wide_kernel(lct_args a, const float *part,
                                                           float *out, int np, int ks) {
    __shared__ float4 tot[NT]; /* [G][CW] group totals */
    const int CW = blockDim.x, gi = threadIdx.y;
    const int64_t bh = blockIdx.y, b = bh / a.H, h = bh % a.H;
    const int64_t x4 = (int64_t)blockIdx.x * CW + threadIdx.x;
    const bool live = x4 < a.LS / 4; /* no early return: the barrier below */
    const int64_t cs = a.LS / 4;      /* float4 stride between states */
    const float4 *src = (const float4 *)(part + (size_t)bh * a.nch * ks * a.LS) + x4;
    float4 v[SW];
#pragma unroll
    for (int u = 0; u < SW; u++) {
        const int p = SW * gi + u;
        v[u] = (live && p < np) ? src[p * cs] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
    float4 sum = v[0];
#pragma unroll
    for (int u = 1; u < SW; u++) {
        sum.x += v[u].x;
        sum.y += v[u].y;
        sum.z += v[u].z;
        sum.w += v[u].w;
    }
    tot[gi * CW + threadIdx.x] = sum;
    float st[4] = {0.f, 0.f, 0.f, 0.f};
    if (live) lct_state_in4(a, b, h, 4 * x4, st);
    __syncthreads();
    if (!live) return;
    for (int g2 = 0; g2 < gi; g2++) { /* the groups before this one, in order */
        const float4 t = tot[g2 * CW + threadIdx.x];
        st[0] += t.x;
        st[1] += t.y;
        st[2] += t.z;
        st[3] += t.w;
    }
    float4 *dst = (float4 *)(out + (size_t)bh * a.nch * a.LS) + x4;
#pragma unroll
    for (int u = 0; u < SW; u++) {
        const int p = SW * gi + u;
        if (p % ks == 0 && p / ks < a.nch && p <= np) dst[(p / ks) * cs] = make_float4(st[0], st[1], st[2], st[3]);
        st[0] += v[u].x;
        st[1] += v[u].y;
        st[2] += v[u].z;
        st[3] += v[u].w;
    }
    if (gi == (int)blockDim.y - 1) lct_state_out4(a, b, h, 4 * x4, st);
}

}  // namespace

la_status lct_launch_scan(const lct_args &a, int64_t BH, int64_t nd, bool wide, cudaStream_t st) {
    if (wide) {
        const int np = (int)nd, G = np / SW + 1; /* G ≤ 32 */
        int cw = NT;
        while (cw * G > NT) cw /= 2; /* CW·G ≤ 256, CW a power of two ≥ 8 */
        lct_scan_wide_kernel<<<dim3((unsigned)la_cu_cdiv(a.LS / 4, cw), (unsigned)BH), dim3(cw, G), 0, st>>>(
            a, a.ws, a.ws, np, 1);
        LA_CU_LAUNCH("lct_scan_wide_kernel");
    } else {
        lct_scan_kernel<<<dim3((unsigned)la_cu_cdiv(a.LS / 4, NT), (unsigned)BH), NT, 0, st>>>(a, nd);
        LA_CU_LAUNCH("lct_scan_kernel");
    }
    return LA_OK;
}
