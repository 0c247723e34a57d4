/* Host-emulated check of the causal MHLA backward on tensor cores
 * (src/cuda/mhla_causal_bwd_tc.cu with the kernels of
 * linear_causal_bwd_tc.cu, under LA_BWD_EMU; built and run by
 * dev/emu_mhla_causal_bwd.sh): bf16 inputs at odd sizes, NaN-filled
 * gradients, a random mixing with a non-zero upper triangle (ignored),
 * through la_mhla_causal_backward_cuda with the family mhla_causal_bwd
 * forced (default mma), against the CPU backward on the same values with
 * the backend harness's bounds (bf16 gradients 1e-2, d_mixing 1e-4 relative
 * Frobenius).
 *   emu_mhla_causal_bwd [CASE|-1] [VARIANT] */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/variant.h"
#include "longattn.h"
extern "C" la_status la_mhla_causal_backward_cuda(const la_mhla_causal_params *p,
    const la_tensor *q, const la_tensor *k, const la_tensor *v, const la_tensor *mixing,
    const la_tensor *out, const la_tensor *d_out, la_tensor *dq, la_tensor *dk, la_tensor *dv,
    la_tensor *d_mixing, la_context *ctx);
#include "emu_host.h"
/* a bf16 view (permuted: [B,H,N,D] storage) and its fp32 copy in logical order */
struct T {
    std::vector<uint16_t> b;
    std::vector<float> f;
    la_tensor tb, tf;
};
static void mk(T &t, int64_t B, int64_t N, int64_t H, int64_t D, bool perm, bool fill) {
    const int64_t n = B * N * H * D;
    t.b.resize(n + 64), t.f.resize(n);
    int64_t ne[4] = {B, N, H, D}, nb[4] = {N * H * D, H * D, D, 1};
    if (perm) nb[0] = H * N * D, nb[1] = D, nb[2] = N * D;
    for (int64_t i = 0; i < n; i++) t.b[i] = fill ? f2bf(ur()) : 0x7fc0;
    la_tensor_init_strided(&t.tb, t.b.data(), LA_BF16, LA_DEVICE_CPU, 4, ne, nb);
    la_tensor_init(&t.tf, t.f.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
    for (int64_t b = 0; b < B; b++)
        for (int64_t x = 0; x < N; x++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++)
                    t.f[((b * N + x) * H + h) * D + d] = bf2f(t.b[b * nb[0] + x * nb[1] + h * nb[2] + d]);
}

int main(int argc, char **argv) {
    struct C {
        int B, N, H, D, f, pq, perm, phw, extra, dmix;
    };
    const int RELU = LA_FEATURE_RELU, ELU1 = LA_FEATURE_ELU1, ID = LA_FEATURE_IDENTITY;
    /* extra: mixing extent beyond ceil(N/64); dmix 0: d_mixing not asked for */
    const std::vector<C> cs = {
        {1, 1, 1, 64, RELU, 0, 0, 0, 0, 1},     {1, 63, 2, 64, RELU, 0, 1, 1, 0, 1},
        {1, 65, 1, 128, RELU, 0, 0, 0, 2, 1},   {1, 200, 2, 64, ID, 0, 0, 1, 0, 1},
        {1, 200, 1, 128, RELU, 0, 1, 0, 0, 1},  {2, 130, 1, 64, RELU, 0, 0, 1, 1, 1},
        {1, 1000, 1, 64, RELU, 0, 1, 0, 0, 1},  {1, 1000, 1, 128, RELU, 0, 0, 1, 0, 1},
        {1, 65, 2, 64, ELU1, 1, 0, 1, 0, 0},    {1, 200, 1, 128, RELU, 1, 1, 0, 0, 0},
        {1, 1000, 1, 64, LA_FEATURE_RELU_EPS, 1, 0, 0, 0, 0},
        {1, 63, 1, 128, ELU1, 0, 1, 0, 0, 0},   {1, 200, 2, 64, LA_FEATURE_RELU_EPS, 0, 1, 1, 0, 1},
        /* one chunk (M = 1: no strict mixing, the GEMMs skipped), with W wider than M */
        {1, 64, 2, 64, RELU, 0, 0, 1, 0, 1},    {2, 64, 1, 128, RELU, 0, 1, 0, 1, 1},
    };
    const int which = argc > 1 ? atoi(argv[1]) : -1;
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_variant(ctx, "mhla_causal_bwd", argc > 2 ? argv[2] : "mma");
    int fails = 0;
    for (size_t ci = 0; ci < cs.size(); ci++) {
        if (which >= 0 && (int)ci != which) continue;
        const C c = cs[ci];
        T q, k, v, g, dq, dk, dv;
        mk(q, c.B, c.N, c.H, c.D, c.perm, true), mk(k, c.B, c.N, c.H, c.D, c.perm, true);
        mk(v, c.B, c.N, c.H, c.D, c.perm, true), mk(g, c.B, c.N, c.H, c.D, c.perm, true);
        mk(dq, c.B, c.N, c.H, c.D, c.perm, false), mk(dk, c.B, c.N, c.H, c.D, c.perm, false);
        mk(dv, c.B, c.N, c.H, c.D, c.perm, false);
        const int64_t M = (c.N + 63) / 64 + c.extra, Hw = c.phw ? c.H : 1;
        std::vector<float> W(Hw * M * M), dW(Hw * M * M, NAN), rdW(Hw * M * M);
        for (auto &x : W) x = 0.5f + 0.5f * ur();
        int64_t nw[3] = {Hw, M, M};
        la_tensor tW, tdW, trdW;
        const int wd = c.phw ? 3 : 2;
        la_tensor_init(&tW, W.data(), LA_F32, LA_DEVICE_CPU, wd, nw + 3 - wd);
        la_tensor_init(&tdW, dW.data(), LA_F32, LA_DEVICE_CPU, wd, nw + 3 - wd);
        la_tensor_init(&trdW, rdW.data(), LA_F32, LA_DEVICE_CPU, wd, nw + 3 - wd);
        la_mhla_causal_params p;
        la_mhla_causal_params_init(&p);
        p.chunk = 64, p.feature = (la_feature)c.f;
        p.normalize = c.pq ? LA_MHLA_NORM_PER_QUERY : LA_MHLA_NORM_NONE;
        la_status st = la_mhla_causal_backward_cuda(&p, &q.tb, &k.tb, &v.tb, &tW, NULL, &g.tb,
                                                    &dq.tb, &dk.tb, &dv.tb,
                                                    c.dmix ? &tdW : NULL, ctx);
        if (st != LA_OK && c.N < 64 && st == LA_ERR_UNSUPPORTED) {
            /* the tensor-core path takes N >= 64 only (shorter inputs go to the
             * fp32 engine): the forced variant must refuse them */
            printf("case %zu: N %d refused by the forced variant, as it must be\n", ci, (int)c.N);
            continue;
        }
        if (st != LA_OK) {
            printf("case %zu: %s %s\n", ci, la_status_string(st), la_last_error());
            fails++;
            continue;
        }
        std::vector<float> rq(q.f.size()), rk(q.f.size()), rv(q.f.size());
        la_tensor tq, tk, tv;
        int64_t ne[4] = {c.B, c.N, c.H, c.D};
        la_tensor_init(&tq, rq.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&tk, rk.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&tv, rv.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        st = la_mhla_causal_backward(&p, &q.tf, &k.tf, &v.tf, &tW, NULL, &g.tf, &tq, &tk, &tv,
                                     &trdW, NULL);
        if (st != LA_OK) {
            printf("cpu: %s\n", la_last_error());
            return 1;
        }
        const double e1 = err(dq, rq), e2 = err(dk, rk), e3 = err(dv, rv);
        const double e4 = c.dmix ? errf(dW, rdW) : 0.0;
        const bool ok = e1 <= 1e-2 && e2 <= 1e-2 && e3 <= 1e-2 && e4 <= 1e-4;
        fails += !ok;
        printf("case %zu B%d N%d H%d D%d f%d %s%s%s W%s%s: dq %.3g dk %.3g dv %.3g d_mixing %.3g %s\n",
               ci, c.B, c.N, c.H, c.D, c.f, c.pq ? "per_query" : "none", c.perm ? " perm" : "",
               c.extra ? " wide-W" : "", c.phw ? " per-head" : " shared",
               c.dmix ? "" : " (no d_mixing)", e1, e2, e3, e4, ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    la_context_destroy(ctx);
    return fails != 0;
}
