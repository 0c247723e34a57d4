/* Host-emulated check of the non-causal linear / MHLA backward on tensor
 * cores (src/cuda/linblock_bwd_tc.cu with linblock_bwd_mix.cu (`mma`) or
 * linblock_bwd_mix2.cu (`mma2`) under LA_BWD_EMU; built and run by
 * dev/emu_linblock_bwd.sh): bf16 inputs at odd sizes (N = 1, 63, 65, 120,
 * 200, 300, 1000; 1-/2-/3-D grids with uneven blocks, M up to 70 (37, 70:
 * not multiples of 4, the padded mixing's edge); shared and
 * per-head W; normalize none and per_query; every feature map the path
 * takes; dense and permuted views), NaN-filled gradients, through
 * la_mhla_backward_cuda / la_linear_backward_cuda with the family forced,
 * against the CPU backward on the same values: bf16 gradients within 1e-2
 * and no worse than 2× the `mma` variant's error + 1e-3 (printed side by
 * side), d_mixing within 1e-4; the second call bit-identical.
 *   emu_linblock_bwd [CASE|-1] [VARIANT ...]   (default: mma mma2) */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include "longattn.h"
#include "core/variant.h"
#include "cuda/cuda_bwd.h"
#include "emu_host.h"

struct T {
    std::vector<uint16_t> b;
    std::vector<float> f;
    la_tensor tb, tf;
};
static void mk(T &t, int64_t B, int64_t N, int64_t H, int64_t D, bool perm, bool fill) {
    const int64_t n = B * N * H * D;
    t.b.assign(n, 0x7fc0);
    t.f.assign(n, 0.f);
    int64_t ne[4] = {B, N, H, D}, nb[4];
    if (perm) nb[0] = H * N * D, nb[1] = D, nb[2] = N * D, nb[3] = 1;
    else nb[0] = N * H * D, nb[1] = H * D, nb[2] = D, nb[3] = 1;
    for (int64_t b = 0; b < B; b++)
        for (int64_t x = 0; x < N; x++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t d = 0; d < D; d++) {
                    const uint16_t v = fill ? f2bf(ur()) : 0x7fc0;
                    t.b[b * nb[0] + x * nb[1] + h * nb[2] + d] = v;
                    t.f[((b * N + x) * H + h) * D + d] = bf2f(v);
                }
    la_tensor_init_strided(&t.tb, t.b.data(), LA_BF16, LA_DEVICE_CPU, 4, ne, nb);
    la_tensor_init(&t.tf, t.f.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
}

struct Case {
    int kind; /* 0 linear, 1 mhla */
    int B, N, H, D, f, norm, perm, ndim, grid[3], blocks[3], phw;
};

int main(int argc, char **argv) {
    const int PQ = LA_MHLA_NORM_PER_QUERY, NO = LA_MHLA_NORM_NONE;
    const std::vector<Case> cs = {
        {1, 1, 65, 1, 64, LA_FEATURE_RELU_EPS, NO, 0, 1, {65}, {4}, 0},
        {1, 1, 63, 2, 128, LA_FEATURE_ELU1, NO, 1, 2, {9, 7}, {3, 2}, 1},
        {1, 1, 120, 1, 64, LA_FEATURE_RELU_EPS, PQ, 0, 3, {4, 6, 5}, {2, 3, 5}, 1},
        {1, 1, 1000, 1, 128, LA_FEATURE_ELU1, PQ, 1, 1, {1000}, {10}, 0},
        {1, 1, 1, 1, 64, LA_FEATURE_RELU, NO, 0, 1, {1}, {1}, 0},
        {1, 2, 300, 1, 64, LA_FEATURE_RELU, NO, 1, 1, {300}, {70}, 1},
        {1, 1, 200, 2, 64, LA_FEATURE_RELU1, PQ, 0, 1, {200}, {37}, 0},
        {1, 1, 200, 1, 128, LA_FEATURE_RELU_EPS, NO, 1, 2, {20, 10}, {4, 3}, 1},
        {0, 1, 1, 2, 64, LA_FEATURE_ELU1, NO, 0, 0, {0}, {0}, 0},
        {0, 2, 63, 1, 128, LA_FEATURE_ELU1, PQ, 1, 0, {0}, {0}, 0},
        {0, 1, 1000, 1, 64, LA_FEATURE_RELU, NO, 0, 0, {0}, {0}, 0},
    };
    const int which = argc > 1 ? atoi(argv[1]) : -1;
    std::vector<std::string> vars;
    for (int i = 2; i < argc; i++) vars.push_back(argv[i]);
    if (vars.empty()) vars = {"mma", "mma2"};
    la_context *ctx;
    la_context_create(&ctx);
    int fails = 0, checks = 0;
    for (size_t ci = 0; ci < cs.size(); ci++) {
        if (which >= 0 && (int)ci != which) continue;
        Case c = cs[ci];
        int64_t M = 1;
        for (int a = 0; a < c.ndim; a++) M *= c.blocks[a];
        T q, k, v, g;
        mk(q, c.B, c.N, c.H, c.D, c.perm, true);
        mk(k, c.B, c.N, c.H, c.D, c.perm, true);
        mk(v, c.B, c.N, c.H, c.D, c.perm, true);
        mk(g, c.B, c.N, c.H, c.D, c.perm, true);
        const int64_t WH = c.phw ? c.H : 1;
        std::vector<float> W(WH * M * M);
        for (auto &x : W) x = 0.5f + 0.5f * ur();
        la_tensor tW;
        int64_t nw[3] = {WH, M, M};
        if (c.phw) la_tensor_init(&tW, W.data(), LA_F32, LA_DEVICE_CPU, 3, nw);
        else la_tensor_init(&tW, W.data(), LA_F32, LA_DEVICE_CPU, 2, nw + 1);
        la_mhla_params mp;
        la_mhla_params_init(&mp);
        mp.grid_ndim = c.ndim;
        for (int a = 0; a < c.ndim; a++) mp.grid[a] = c.grid[a], mp.blocks[a] = c.blocks[a];
        mp.feature = (la_feature)c.f, mp.normalize = (la_mhla_normalize)c.norm;
        mp.scale_q = 0.7f, mp.eps = 1e-6f;
        la_linear_params lp;
        la_linear_params_init(&lp);
        lp.causal = 0, lp.feature = (la_feature)c.f, lp.normalize = c.norm == PQ;
        lp.scale_q = 0.7f, lp.eps = 1e-6f;
        /* the CPU backward on the same values */
        const size_t n = q.f.size();
        std::vector<float> rq(n), rk(n), rv(n), rW(W.size());
        la_tensor tq, tk, tv, trW;
        int64_t ne[4] = {c.B, c.N, c.H, c.D};
        la_tensor_init(&tq, rq.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&tk, rk.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&tv, rv.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        trW = tW;
        trW.data = rW.data();
        la_status st = c.kind ? la_mhla_backward(&mp, &q.tf, &k.tf, &v.tf, &tW, NULL, &g.tf, &tq,
                                                 &tk, &tv, &trW, NULL)
                              : la_linear_backward(&lp, &q.tf, &k.tf, &v.tf, NULL, NULL, NULL,
                                                   &g.tf, NULL, NULL, &tq, &tk, &tv, NULL, NULL,
                                                   NULL);
        if (st != LA_OK) {
            printf("case %zu cpu: %s\n", ci, la_last_error());
            return 1;
        }
        double base[3] = {-1, -1, -1};
        for (const std::string &var : vars) {
            la_context_set_variant(ctx, c.kind ? "mhla_bwd" : "linear_bwd", var.c_str());
            T dq[2], dk[2], dv[2];
            std::vector<float> dW[2];
            for (int call = 0; call < 2; call++) {
                mk(dq[call], c.B, c.N, c.H, c.D, c.perm, false);
                mk(dk[call], c.B, c.N, c.H, c.D, c.perm, false);
                mk(dv[call], c.B, c.N, c.H, c.D, c.perm, false);
                dW[call].assign(W.size(), NAN);
                la_tensor tdW = tW;
                tdW.data = dW[call].data();
                st = c.kind ? la_mhla_backward_cuda(&mp, &q.tb, &k.tb, &v.tb, &tW, NULL, &g.tb,
                                                    &dq[call].tb, &dk[call].tb, &dv[call].tb,
                                                    &tdW, ctx)
                            : la_linear_backward_cuda(&lp, &q.tb, &k.tb, &v.tb, NULL, NULL, NULL,
                                                      &g.tb, NULL, NULL, &dq[call].tb,
                                                      &dk[call].tb, &dv[call].tb, NULL, NULL, ctx);
                if (st != LA_OK) break;
            }
            checks++;
            if (st != LA_OK) {
                printf("case %zu %s: %s %s\n", ci, var.c_str(), la_status_string(st), la_last_error());
                fails++;
                continue;
            }
            const double e[3] = {err(dq[0], rq), err(dk[0], rk), err(dv[0], rv)};
            const double ew = c.kind ? errf(dW[0], rW) : 0;
            const bool same = dq[0].b == dq[1].b && dk[0].b == dk[1].b && dv[0].b == dv[1].b &&
                              !memcmp(dW[0].data(), dW[1].data(), dW[0].size() * 4);
            bool ok = same && ew <= 1e-4;
            for (int i = 0; i < 3; i++) {
                ok = ok && e[i] <= 1e-2;
                if (base[i] >= 0) ok = ok && e[i] <= 2 * base[i] + 1e-3;
            }
            if (var == "mma")
                for (int i = 0; i < 3; i++) base[i] = e[i];
            fails += !ok;
            printf("case %zu %s %s B%d N%d H%d D%d f%d norm%d perm%d grid%d M%lld phw%d: dq %.3g dk "
                   "%.3g dv %.3g dW %.3g%s %s\n",
                   ci, var.c_str(), c.kind ? "mhla" : "linear", c.B, c.N, c.H, c.D, c.f, c.norm,
                   c.perm, c.ndim, (long long)M, c.phw, e[0], e[1], e[2], ew,
                   same ? "" : " (second call differs)", ok ? "ok" : "FAIL");
            fflush(stdout);
        }
    }
    la_context_destroy(ctx);
    printf("EMU linblock backward: %d of %d passed\n", checks - fails, checks);
    return fails != 0;
}
