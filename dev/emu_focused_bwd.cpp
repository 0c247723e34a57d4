/* Host-emulated check of the focused flatten backward's fast path
 * (src/cuda/focused_bwd_mma.cu under LA_BWD_EMU, with the tensor-core core
 * of linblock_bwd_tc.cu; built and run by dev/emu_focused_bwd.sh): bf16 q,
 * k, v, d_out at small odd maps (N ≥ 64), D 64/128, conv k 1..9 or none,
 * p = 3 and p = 2.5, permuted views, NaN-filled gradients, through
 * fb_mma_backward against the CPU backward (la_focused_backward) on the same
 * values: bf16 dq, dk, dv within 1e-2, fp32 d_softplus_param within 2e-2,
 * d_conv, d_conv_bias within 1e-4 (relative Frobenius); a second call must
 * give the same bits (no atomics).
 *   emu_focused_bwd [CASE] */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include "longattn.h"
#include "cuda/focused_bwd_mma.cuh"
#include "emu_host.h"
/* a bf16 [B,N,H,D] tensor (permuted: [B,H,N,D] memory) and its fp32 copy in logical order */
struct T { std::vector<uint16_t> b; std::vector<float> f; la_tensor tb, tf; };
static void mk(T &t, int64_t B, int64_t N, int64_t H, int64_t D, bool perm, bool fill, float sc) {
    int64_t n = B * N * H * D, ne[4] = {B, N, H, D}, nb[4];
    t.b.resize(n); t.f.resize(n);
    if (perm) { nb[0] = H * N * D; nb[1] = D; nb[2] = N * D; nb[3] = 1; } else { nb[0] = N * H * D; nb[1] = H * D; nb[2] = D; nb[3] = 1; }
    for (int64_t i = 0; i < n; i++) t.b[i] = fill ? f2bf(sc * ur()) : 0x7fc0;
    la_tensor_init_strided(&t.tb, t.b.data(), LA_BF16, LA_DEVICE_CPU, 4, ne, nb);
    la_tensor_init(&t.tf, t.f.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
    for (int64_t b = 0; b < B; b++) for (int64_t x = 0; x < N; x++) for (int64_t h = 0; h < H; h++) for (int64_t d = 0; d < D; d++)
        t.f[((b * N + x) * H + h) * D + d] = bf2f(t.b[b * nb[0] + x * nb[1] + h * nb[2] + d]);
}
int main(int argc, char **argv) {
    struct C { int B, hm, wm, H, D, ks; float p; int perm, grads; }; /* grads: 1 all, 0 dv + conv only */
    std::vector<C> cs = {
        {1, 8, 9, 2, 64, 5, 3.f, 0, 1},  {1, 9, 8, 1, 128, 3, 3.f, 1, 1}, {1, 16, 5, 3, 64, 0, 2.5f, 0, 1},
        {2, 9, 9, 1, 64, 9, 3.f, 1, 1}, {1, 11, 7, 2, 64, 7, 2.5f, 0, 1}, {1, 8, 8, 1, 128, 1, 3.f, 0, 1},
        {1, 13, 5, 2, 64, 5, 3.f, 1, 0}, {1, 5, 17, 1, 128, 5, 3.f, 0, 1},
    };
    int which = argc > 1 ? atoi(argv[1]) : -1, fails = 0;
    for (size_t ci = 0; ci < cs.size(); ci++) {
        if (which >= 0 && (int)ci != which) continue;
        const C c = cs[ci];
        const int64_t N = (int64_t)c.hm * c.wm, D = c.D, H = c.H, Cc = H * D, ks = c.ks;
        T q, k, v, g, dq, dk, dv;
        mk(q, c.B, N, H, D, c.perm, true, 1.f); mk(k, c.B, N, H, D, c.perm, true, 1.f);
        mk(v, c.B, N, H, D, c.perm, true, 1.f); mk(g, c.B, N, H, D, c.perm, true, 1.f);
        mk(dq, c.B, N, H, D, c.perm, false, 0); mk(dk, c.B, N, H, D, c.perm, false, 0); mk(dv, c.B, N, H, D, c.perm, false, 0);
        std::vector<float> w(D * ks * ks), bias(D), sp(Cc), dw(w.size(), NAN), db(D, NAN), dsp(Cc, NAN);
        for (auto &x : w) x = 0.2f * ur();
        for (auto &x : bias) x = 0.2f * ur();
        for (auto &x : sp) x = 0.5f * ur();
        int64_t nw[3] = {D, ks, ks}, nd[1] = {D}, nc[1] = {Cc};
        la_tensor tw, tb, tsp, tdw, tdb, tdsp;
        la_tensor_init(&tw, w.data(), LA_F32, LA_DEVICE_CPU, 3, nw); la_tensor_init(&tb, bias.data(), LA_F32, LA_DEVICE_CPU, 1, nd);
        la_tensor_init(&tsp, sp.data(), LA_F32, LA_DEVICE_CPU, 1, nc);
        la_tensor_init(&tdw, dw.data(), LA_F32, LA_DEVICE_CPU, 3, nw); la_tensor_init(&tdb, db.data(), LA_F32, LA_DEVICE_CPU, 1, nd);
        la_tensor_init(&tdsp, dsp.data(), LA_F32, LA_DEVICE_CPU, 1, nc);
        la_focused_params p; la_focused_params_init(&p);
        p.map_h = c.hm; p.map_w = c.wm; p.p = c.p;
        const la_tensor *conv = ks ? &tw : NULL;
        la_tensor *gq = c.grads ? &dq.tb : NULL, *gk = c.grads ? &dk.tb : NULL, *gsp = c.grads ? &tdsp : NULL;
        la_tensor *gw = ks ? &tdw : NULL, *gb = ks ? &tdb : NULL;
        if (!fb_mma_eligible(&p, &q.tb, &k.tb, &v.tb, conv, &g.tb, gq, gk, &dv.tb)) { printf("case %zu: not eligible FAIL\n", ci); fails++; continue; }
        la_status st = fb_mma_backward(&p, &q.tb, &k.tb, &v.tb, conv, &tsp, &g.tb, gq, gk, &dv.tb, gw, gb, gsp, 0);
        if (st != LA_OK) { printf("case %zu: %s %s FAIL\n", ci, la_status_string(st), la_last_error()); fails++; continue; }
        /* a second call: the same bits */
        std::vector<uint16_t> dq1 = dq.b, dk1 = dk.b, dv1 = dv.b; std::vector<float> dw1 = dw, db1 = db, dsp1 = dsp;
        st = fb_mma_backward(&p, &q.tb, &k.tb, &v.tb, conv, &tsp, &g.tb, gq, gk, &dv.tb, gw, gb, gsp, 0);
        const bool same = st == LA_OK && dq1 == dq.b && dk1 == dk.b && dv1 == dv.b &&
                          !memcmp(dw1.data(), dw.data(), dw.size() * 4) && !memcmp(db1.data(), db.data(), db.size() * 4) &&
                          !memcmp(dsp1.data(), dsp.data(), dsp.size() * 4);
        std::vector<float> rq(q.f.size()), rk(q.f.size()), rv(q.f.size()), rw(w.size()), rb(D), rsp(Cc);
        la_tensor tq, tk, tv, trw, trb, trsp; int64_t ne[4] = {c.B, N, H, D};
        la_tensor_init(&tq, rq.data(), LA_F32, LA_DEVICE_CPU, 4, ne); la_tensor_init(&tk, rk.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&tv, rv.data(), LA_F32, LA_DEVICE_CPU, 4, ne);
        la_tensor_init(&trw, rw.data(), LA_F32, LA_DEVICE_CPU, 3, nw); la_tensor_init(&trb, rb.data(), LA_F32, LA_DEVICE_CPU, 1, nd);
        la_tensor_init(&trsp, rsp.data(), LA_F32, LA_DEVICE_CPU, 1, nc);
        st = la_focused_backward(&p, &q.tf, &k.tf, &v.tf, conv, ks ? &tb : NULL, &tsp, NULL, NULL, &g.tf,
                                 &tq, &tk, &tv, ks ? &trw : NULL, ks ? &trb : NULL, &trsp, NULL, NULL);
        if (st != LA_OK) { printf("cpu: %s\n", la_last_error()); return 1; }
        const double e1 = c.grads ? err(dq, rq) : 0, e2 = c.grads ? err(dk, rk) : 0, e3 = err(dv, rv);
        const double e4 = ks ? errf(dw, rw) : 0, e5 = ks ? errf(db, rb) : 0, e6 = c.grads ? errf(dsp, rsp) : 0;
        /* the gradients not asked for stay untouched (NaN) */
        bool untouched = true;
        if (!c.grads) for (size_t i = 0; i < dq.b.size(); i++) untouched &= dq.b[i] == 0x7fc0 && dk.b[i] == 0x7fc0;
        const bool ok = e1 < 1e-2 && e2 < 1e-2 && e3 < 1e-2 && e4 < 1e-4 && e5 < 1e-4 && e6 < 2e-2 && same && untouched;
        fails += !ok;
        printf("case %zu B%d %dx%d H%d D%d k%d p%g perm%d grads%d: dq %.3g dk %.3g dv %.3g d_conv %.3g d_bias %.3g d_sp %.3g%s %s\n",
               ci, c.B, c.hm, c.wm, c.H, c.D, c.ks, c.p, c.perm, c.grads, e1, e2, e3, e4, e5, e6,
               same ? "" : " (second call differs)", ok ? "ok" : "FAIL");
        fflush(stdout);
    }
    printf("%s\n", fails ? "FAILED" : "all ok");
    return fails != 0;
}
