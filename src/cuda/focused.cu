/* Focused linear attention (SPEC §4) on CUDA, both variants, through the
 * linear-family engine (linfam.cu). Views validated by src/ops/focused.c.
 *
 * flatten: a per-token pass finds, over all C = H·D channels of q and of k,
 *   x' = (relu(x)+1e-6)/softplus(s), m = 1/max x', r = ‖x'‖/‖(x'·m)^p‖, so that
 *   the engine forms φ(x)_c = (x'_c·m)^p·r on the fly (same scaling as the CPU
 *   path: x'^p stays finite for any p). Mean form: o = (q̃S/N)/(q̃z/N + eps),
 *   then o += DWC(v) + bias, fused into the output pass.
 * blog: K̂ = focus[h]·DWConv(relu1(K)) into an fp32 workspace, then normalized
 *   linear attention with φ(q) = relu1(q·D^-1/2) and K̂ taken as is. */
#include "cuda_ops.h"
#include "linfam.cuh"

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
        float xp = (fmaxf(la_cu_ld4(x, b, t, c / D, c % D), 0.f) + 1e-6f) * inv_sp[c];
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
        float xp = (fmaxf(la_cu_ld4(x, b, t, c / D, c % D), 0.f) + 1e-6f) * inv_sp[c];
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
        acc = fmaxf(la_cu_ld4(k, b, t, h, d), 0.f) + 1.f;
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
                acc = fmaf(w, fmaxf(la_cu_ld4(k, b, yy * map_w + xx, h, d), 0.f) + 1.f, acc);
            }
        }
    }
    const float f = focus.data ? la_cu_ld(focus.data, focus.dt, h * focus.nb[0]) : 2.0f;
    khat[e] = acc * f;
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
    }
    return lf_run(&P, st);
}
