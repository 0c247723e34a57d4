/* Host-emulated check of the sparse MLA backward on tensor cores
 * (src/cuda/sparse_attn_bwd_tc.cu under LA_BWD_EMU; built and run by
 * dev/emu_sparse_bwd.sh): bf16 q [T,Hq,576], kv [L,576] (or [L,1,576], rows
 * padded), d_out [T,Hq,512] at odd sizes, indices with −1 / >= L / repeated
 * keys, a token whose slots are all skipped (lse = −inf), NaN-filled
 * gradients; out and lse from the CPU forward (k >= 2: with one slot dq is
 * rounding noise around 0, a case for the backend harness's bound). Through
 * la_sparse_attention_backward_cuda with sparse_attn_bwd forced (default
 * mma; mma_atomic), against the CPU backward on the same values (bf16
 * gradients: 1e-2 relative Frobenius), and two calls bit for bit.
 *   emu_sparse_bwd [CASE|-1] [VARIANT] */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/variant.h"
#include "longattn.h"
extern "C" la_status la_sparse_attention_backward_cuda(const la_sparse_attn_params *p,
    const la_tensor *q, const la_tensor *kv, const la_tensor *idx, const la_tensor *out,
    const la_tensor *lse, const la_tensor *d_out, la_tensor *dq, la_tensor *dkv, la_context *ctx);
#include "emu_host.h"
/* a bf16 tensor with rows of `ld` elements (ld >= last extent) and its fp32
 * copy, contiguous; fill: random values times amp, else NaN */
struct T {
    std::vector<uint16_t> b;
    std::vector<float> f;
    la_tensor tb, tf;
    int64_t rows = 0, D = 0, ld = 0;
};
static void mk(T &t, int nd, const int64_t *ne, int64_t ld, bool fill, float amp) {
    t.D = ne[nd - 1], t.ld = ld, t.rows = 1;
    for (int i = 0; i + 1 < nd; i++) t.rows *= ne[i];
    t.b.assign(t.rows * ld + 8, 0x7fc0), t.f.assign(t.rows * t.D, 0.f);
    int64_t nb[3];
    nb[nd - 1] = 1;
    for (int i = nd - 2; i >= 0; i--) nb[i] = (i == nd - 2 ? ld : nb[i + 1] * ne[i + 1]);
    for (int64_t r = 0; r < t.rows; r++)
        for (int64_t d = 0; d < t.D; d++) {
            const uint16_t v = fill ? f2bf(amp * ur()) : 0x7fc0;
            t.b[r * ld + d] = v;
            t.f[r * t.D + d] = bf2f(v);
        }
    la_tensor_init_strided(&t.tb, t.b.data(), LA_BF16, LA_DEVICE_CPU, nd, ne, nb);
    la_tensor_init(&t.tf, t.f.data(), LA_F32, LA_DEVICE_CPU, nd, ne);
}
static double err(const T &g, const std::vector<float> &ref, bool *finite) {
    double a = 0, r = 0;
    for (int64_t i = 0; i < g.rows; i++)
        for (int64_t d = 0; d < g.D; d++) {
            const double y = bf2f(g.b[i * g.ld + d]), z = ref[i * g.D + d];
            if (!std::isfinite(y)) *finite = false;
            a += (y - z) * (y - z), r += z * z;
        }
    return sqrt(a / (r + 1e-300));
}

int main(int argc, char **argv) {
    struct C {
        int T, Hq, L, K, kv3, pad;
    };
    const std::vector<C> cs = {
        {1, 16, 5, 2, 0, 0},     {3, 16, 70, 63, 0, 8},  {2, 64, 200, 64, 1, 0},
        {5, 16, 40, 100, 0, 16}, {2, 128, 300, 33, 0, 0}, {4, 80, 4100, 65, 1, 8},
    };
    const int which = argc > 1 ? atoi(argv[1]) : -1;
    const char *var = argc > 2 ? argv[2] : "mma";
    la_context *ctx;
    la_context_create(&ctx);
    la_context_set_variant(ctx, "sparse_attn_bwd", var);
    int fails = 0;
    for (size_t ci = 0; ci < cs.size(); ci++) {
        if (which >= 0 && (int)ci != which) continue;
        const C c = cs[ci];
        const int64_t Dqk = 576, dv = 512;
        int64_t nq[3] = {c.T, c.Hq, Dqk}, ng[3] = {c.T, c.Hq, dv}, nkv3[3] = {c.L, 1, Dqk},
                nkv2[2] = {c.L, Dqk}, ni[2] = {c.T, c.K}, nl[2] = {c.T, c.Hq};
        T q, kv, g, dq, dkv;
        mk(q, 3, nq, Dqk + c.pad, true, 1.f), mk(g, 3, ng, dv + c.pad, true, 1.f);
        mk(kv, c.kv3 ? 3 : 2, c.kv3 ? nkv3 : nkv2, Dqk + c.pad, true, 1.f);
        mk(dq, 3, nq, Dqk + c.pad, false, 0.f);
        mk(dkv, c.kv3 ? 3 : 2, c.kv3 ? nkv3 : nkv2, Dqk + c.pad, false, 0.f);
        std::vector<int32_t> idx(c.T * c.K);
        for (int64_t t = 0; t < c.T; t++)
            for (int64_t j = 0; j < c.K; j++) {
                const float u = 0.5f + 0.5f * ur();
                int32_t s = (int32_t)((0.5f + 0.5f * ur()) * c.L) % c.L;
                if (u < 0.05f) s = -1;
                else if (u < 0.08f) s = c.L + 3;
                else if (u < 0.2f) s = 0;
                if (c.T > 2 && t == c.T - 1) s = -1;
                idx[t * c.K + j] = s;
            }
        la_tensor ti;
        la_tensor_init(&ti, idx.data(), LA_I32, LA_DEVICE_CPU, 2, ni);
        /* out, lse of the forward (fp32 CPU on the bf16 values; out rounded to bf16) */
        std::vector<float> of(c.T * c.Hq * dv), lse(c.T * c.Hq);
        la_tensor tof, tl;
        la_tensor_init(&tof, of.data(), LA_F32, LA_DEVICE_CPU, 3, ng);
        la_tensor_init(&tl, lse.data(), LA_F32, LA_DEVICE_CPU, 2, nl);
        la_sparse_attn_params p;
        la_sparse_attn_params_init(&p);
        p.dv = dv;
        if (la_sparse_attention(&p, &q.tf, &kv.tf, &ti, &tof, &tl, NULL) != LA_OK) {
            printf("forward: %s\n", la_last_error());
            return 1;
        }
        T o;
        mk(o, 3, ng, dv, false, 0.f);
        for (size_t i = 0; i < of.size(); i++) o.b[i] = f2bf(of[i]), o.f[i] = bf2f(o.b[i]);
        std::vector<float> rq(q.f.size()), rkv(kv.f.size());
        la_tensor trq, trkv;
        la_tensor_init(&trq, rq.data(), LA_F32, LA_DEVICE_CPU, 3, nq);
        la_tensor_init(&trkv, rkv.data(), LA_F32, LA_DEVICE_CPU, c.kv3 ? 3 : 2, c.kv3 ? nkv3 : nkv2);
        if (la_sparse_attention_backward(&p, &q.tf, &kv.tf, &ti, &o.tf, &tl, &g.tf, &trq, &trkv,
                                         NULL) != LA_OK) {
            printf("cpu backward: %s\n", la_last_error());
            return 1;
        }
        std::vector<uint16_t> first_q, first_kv;
        for (int call = 0; call < 2; call++) {
            la_status st = la_sparse_attention_backward_cuda(&p, &q.tb, &kv.tb, &ti, &o.tb, &tl,
                                                             &g.tb, &dq.tb, &dkv.tb, ctx);
            if (st != LA_OK) {
                printf("case %zu: %s %s\n", ci, la_status_string(st), la_last_error());
                fails++;
                break;
            }
            if (call == 0) {
                bool fin = true;
                const double e1 = err(dq, rq, &fin), e2 = err(dkv, rkv, &fin);
                const bool ok = fin && e1 <= 1e-2 && e2 <= 1e-2;
                fails += !ok;
                printf("case %zu T%d Hq%d L%d k%d%s%s %s: dq %.3g dkv %.3g%s %s\n", ci, c.T, c.Hq,
                       c.L, c.K, c.kv3 ? " kv3" : "", c.pad ? " padded" : "", var, e1, e2,
                       fin ? "" : " non-finite", ok ? "ok" : "FAIL");
                first_q = dq.b, first_kv = dkv.b;
                std::fill(dq.b.begin(), dq.b.end(), 0x7fc0);
                std::fill(dkv.b.begin(), dkv.b.end(), 0x7fc0);
            } else {
                const bool same = first_q == dq.b && first_kv == dkv.b;
                printf("case %zu: second call %s\n", ci, same ? "bit-identical" : "DIFFERS");
                if (!same && strcmp(var, "mma_atomic")) fails++;
            }
            if (call == 1 && !strcmp(var, "mma")) { /* one token per chunk: the same bits */
                la_context_set_variant(ctx, "sparse_attn_bwd", "mma_rowchunk");
                std::fill(dq.b.begin(), dq.b.end(), 0x7fc0);
                std::fill(dkv.b.begin(), dkv.b.end(), 0x7fc0);
                st = la_sparse_attention_backward_cuda(&p, &q.tb, &kv.tb, &ti, &o.tb, &tl, &g.tb,
                                                       &dq.tb, &dkv.tb, ctx);
                la_context_set_variant(ctx, "sparse_attn_bwd", var);
                const bool same = st == LA_OK && first_q == dq.b && first_kv == dkv.b;
                printf("case %zu: mma_rowchunk %s\n", ci, same ? "bit-identical" : "DIFFERS");
                fails += !same;
            }
            fflush(stdout);
        }
    }
    la_context_destroy(ctx);
    return fails != 0;
}
