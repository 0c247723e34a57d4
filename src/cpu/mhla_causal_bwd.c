/* CPU causal MHLA backward (TRAINING.md §1, SPEC §5.4), chunkwise.
 *
 * Per (batch, head) with chunks of C tokens (nc of them), chunk summaries
 * kept augmented, Sa_b = [K̃_bᵀV_b | Σ k̃], and the strictly lower part of W
 * (W_<, nc×nc) mixing the finished chunks:
 *     S̃a  = W_< Sa                               (inter-chunk states)
 *   chunk i:  A = tril(Q̃K̃ᵀ),  num = Q̃ S̃_i + W_ii A V,
 *             den = Q̃ z̃_i + W_ii rowsum(A) + eps      (per_query; none: 1)
 *             G = dO / den,  dden = −(dO·o) / den,  dA = tril(G Vᵀ + dden 1ᵀ)
 *             dq̃ = G S̃_iᵀ + dden z̃_iᵀ + W_ii dA K̃
 *             dS̃a_i = [Q̃ᵀG | Q̃ᵀdden],   dW_ii = Σ A∘dA
 *     dW_<  = (dS̃a Saᵀ) strictly below the diagonal;  dSa = W_<ᵀ dS̃a
 *   chunk b:  dK̃ = V dS_bᵀ + 1 dz_bᵀ + W_bb dAᵀ Q̃,   dV = K̃ dS_b + W_bb Aᵀ G
 * G and dden are kept from the first sweep (O(N·Dv) per head); A and dA
 * are recomputed. Entries of d_mixing above the diagonal, and rows/columns
 * past the last chunk, are written as zero. One task per (batch, head);
 * the mixing gradient is a fixed-order sum of per-task slots. */
#include "cpu/backward_cpu.h"

#include <stdlib.h>

typedef struct cb_job {
    const la_mhla_causal_params *p;
    const la_tensor *q, *k, *v, *d_out;
    la_tensor *dq, *dk, *dv;
    int64_t B, N, H, D, Dv, C, nc, L, Hw, M;
    const float *W; /* [Hw, nc, nc] strictly lower part */
    const float *Wd; /* [Hw, nc] diagonal */
    float *dW;       /* [B·H, nc, nc] per-task slots (diagonal included) */
} cb_job;

typedef struct cb_ws {
    float *Sa, *Sm, *dSm, *qr, *qt, *kr, *kt, *vv, *go, *o, *dqt, *dkt, *dvv, *a, *da, *den,
        *dden, *gall, *ddall;
} cb_ws;

static size_t cb_floats(const cb_job *j) {
    const size_t C = (size_t)j->C, D = (size_t)j->D, Dv = (size_t)j->Dv;
    return 3 * (size_t)j->nc * (size_t)j->L + C * (6 * D + 4 * Dv) + 2 * C * C + 2 * C +
           (size_t)j->N * (Dv + 1);
}

static void cb_carve(const cb_job *j, float *w, cb_ws *s) {
    const int64_t C = j->C, D = j->D, Dv = j->Dv, X = j->nc * j->L;
    float **six[6] = {&s->qr, &s->qt, &s->kr, &s->kt, &s->dqt, &s->dkt};
    float **four[4] = {&s->vv, &s->go, &s->o, &s->dvv};
    s->Sa = w, w += X;
    s->Sm = w, w += X;
    s->dSm = w, w += X;
    for (int i = 0; i < 6; i++) *six[i] = w, w += C * D;
    for (int i = 0; i < 4; i++) *four[i] = w, w += C * Dv;
    s->a = w, w += C * C;
    s->da = w, w += C * C;
    s->den = w, w += C;
    s->dden = w, w += C;
    s->gall = w, w += j->N * Dv;
    s->ddall = w;
}

static void cb_load(const cb_job *j, int64_t b, int64_t h, int64_t c0, int64_t n, cb_ws *s) {
    const int64_t D = j->D;
    const la_feature f = j->p->feature;
    la_gather_bnhd_rows(j->q, b, h, c0, n, s->qr, D);
    la_gather_bnhd_rows(j->k, b, h, c0, n, s->kr, D);
    la_gather_bnhd_rows(j->v, b, h, c0, n, s->vv, j->Dv);
    la_feature_map_n(f, s->qr, s->qt, n * D, j->p->scale_q);
    la_feature_map_n(f, s->kr, s->kt, n * D, 1.f);
}

/* A = tril(Q̃K̃ᵀ); with da, dA = tril(G Vᵀ + dden 1ᵀ) (G in s->go). */
static void cb_masked(const cb_job *j, int64_t n, cb_ws *s, bool da) {
    const int64_t C = j->C;
    la_sgemm(false, true, n, n, j->D, 1.f, s->qt, j->D, s->kt, j->D, 0.f, s->a, C);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = r + 1; c < n; c++) s->a[r * C + c] = 0.f;
    if (!da) return;
    la_sgemm(false, true, n, n, j->Dv, 1.f, s->go, j->Dv, s->vv, j->Dv, 0.f, s->da, C);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c <= r; c++) s->da[r * C + c] += s->dden[r];
        for (int64_t c = r + 1; c < n; c++) s->da[r * C + c] = 0.f;
    }
}

static void cb_head(const cb_job *j, int64_t b, int64_t h, cb_ws *s) {
    const int64_t D = j->D, Dv = j->Dv, C = j->C, nc = j->nc, L = j->L;
    const float *W = j->W + (j->Hw == 1 ? 0 : h) * nc * nc, *Wd = j->Wd + (j->Hw == 1 ? 0 : h) * nc;
    const bool pq = j->p->normalize == LA_MHLA_NORM_PER_QUERY;
    float *dW = j->dW ? j->dW + (b * j->H + h) * nc * nc : NULL;
    for (int64_t i = 0; i < nc; i++) {
        const int64_t c0 = i * C, n = j->N - c0 < C ? j->N - c0 : C;
        float *Sb = s->Sa + i * L, *zb = Sb + D * Dv;
        cb_load(j, b, h, c0, n, s);
        la_sgemm(true, false, D, Dv, n, 1.f, s->kt, D, s->vv, Dv, 0.f, Sb, Dv);
        for (int64_t d = 0; d < D; d++) zb[d] = 0.f;
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) zb[d] += s->kt[r * D + d];
    }
    la_sgemm(false, false, nc, L, nc, 1.f, W, nc, s->Sa, L, 0.f, s->Sm, L);
    for (int64_t i = 0; i < nc; i++) {
        const int64_t c0 = i * C, n = j->N - c0 < C ? j->N - c0 : C;
        const float *Si = s->Sm + i * L, *zi = Si + D * Dv, wii = Wd[i];
        cb_load(j, b, h, c0, n, s);
        la_gather_bnhd_rows(j->d_out, b, h, c0, n, s->go, Dv);
        cb_masked(j, n, s, false);
        la_sgemm(false, false, n, Dv, n, wii, s->a, C, s->vv, Dv, 0.f, s->o, Dv);
        la_sgemm(false, false, n, Dv, D, 1.f, s->qt, D, Si, Dv, 1.f, s->o, Dv);
        for (int64_t r = 0; r < n; r++) {
            float den = 1.f;
            if (pq) {
                float a = 0.f, ra = 0.f;
                for (int64_t d = 0; d < D; d++) a += s->qt[r * D + d] * zi[d];
                for (int64_t c = 0; c <= r; c++) ra += s->a[r * C + c];
                den = a + wii * ra + j->p->eps;
            }
            const float inv = 1.f / den;
            float go = 0.f;
            for (int64_t e = 0; e < Dv; e++) go += s->go[r * Dv + e] * s->o[r * Dv + e];
            s->dden[r] = pq ? -go * inv * inv : 0.f;
            for (int64_t e = 0; e < Dv; e++) s->go[r * Dv + e] *= inv;
        }
        memcpy(s->gall + c0 * Dv, s->go, (size_t)(n * Dv) * sizeof(float));
        memcpy(s->ddall + c0, s->dden, (size_t)n * sizeof(float));
        cb_masked(j, n, s, true);
        if (j->dq) {
            la_sgemm(false, true, n, D, Dv, 1.f, s->go, Dv, Si, Dv, 0.f, s->dqt, D);
            if (pq)
                for (int64_t r = 0; r < n; r++)
                    for (int64_t d = 0; d < D; d++) s->dqt[r * D + d] += s->dden[r] * zi[d];
            la_sgemm(false, false, n, D, n, wii, s->da, C, s->kt, D, 1.f, s->dqt, D);
            la_feature_grad_n(j->p->feature, s->qr, s->dqt, n * D, j->p->scale_q);
            la_scatter_bnhd_rows(j->dq, b, h, c0, n, s->dqt, D);
        }
        float *dSi = s->dSm + i * L, *dzi = dSi + D * Dv;
        la_sgemm(true, false, D, Dv, n, 1.f, s->qt, D, s->go, Dv, 0.f, dSi, Dv);
        for (int64_t d = 0; d < D; d++) dzi[d] = 0.f;
        if (pq)
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) dzi[d] += s->dden[r] * s->qt[r * D + d];
        if (dW) {
            double acc = 0;
            for (int64_t r = 0; r < n; r++)
                for (int64_t c = 0; c <= r; c++) acc += (double)s->a[r * C + c] * s->da[r * C + c];
            dW[i * nc + i] = (float)acc;
        }
    }
    if (dW) /* strictly lower part: <dS̃a_i, Sa_c>; the diagonal is already there */
        for (int64_t i = 0; i < nc; i++)
            for (int64_t c = 0; c < nc; c++) {
                if (c >= i) {
                    if (c > i) dW[i * nc + c] = 0.f;
                    continue;
                }
                float a = 0.f;
                const float *x = s->dSm + i * L, *y = s->Sa + c * L;
                for (int64_t e = 0; e < L; e++) a += x[e] * y[e];
                dW[i * nc + c] = a;
            }
    if (!j->dk && !j->dv) return;
    float *dSa = s->Sm;
    la_sgemm(true, false, nc, L, nc, 1.f, W, nc, s->dSm, L, 0.f, dSa, L);
    for (int64_t i = 0; i < nc; i++) {
        const int64_t c0 = i * C, n = j->N - c0 < C ? j->N - c0 : C;
        const float *dSb = dSa + i * L, *dzb = dSb + D * Dv, wii = Wd[i];
        cb_load(j, b, h, c0, n, s);
        memcpy(s->go, s->gall + c0 * Dv, (size_t)(n * Dv) * sizeof(float));
        memcpy(s->dden, s->ddall + c0, (size_t)n * sizeof(float));
        cb_masked(j, n, s, true);
        if (j->dk) {
            la_sgemm(false, true, n, D, Dv, 1.f, s->vv, Dv, dSb, Dv, 0.f, s->dkt, D);
            la_sgemm(true, false, n, D, n, wii, s->da, C, s->qt, D, 1.f, s->dkt, D);
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) s->dkt[r * D + d] += dzb[d];
            la_feature_grad_n(j->p->feature, s->kr, s->dkt, n * D, 1.f);
            la_scatter_bnhd_rows(j->dk, b, h, c0, n, s->dkt, D);
        }
        if (j->dv) {
            la_sgemm(false, false, n, Dv, D, 1.f, s->kt, D, dSb, Dv, 0.f, s->dvv, Dv);
            la_sgemm(true, false, n, Dv, n, wii, s->a, C, s->go, Dv, 1.f, s->dvv, Dv);
            la_scatter_bnhd_rows(j->dv, b, h, c0, n, s->dvv, Dv);
        }
    }
}

la_status la_mhla_causal_backward_cpu(const la_mhla_causal_params *p, const la_tensor *q,
                                      const la_tensor *k, const la_tensor *v,
                                      const la_tensor *mixing, const la_tensor *d_out,
                                      la_tensor *dq, la_tensor *dk, la_tensor *dv,
                                      la_tensor *d_mixing, la_context *ctx) {
    cb_job j = {0};
    j.p = p, j.q = q, j.k = k, j.v = v, j.d_out = d_out, j.dq = dq, j.dk = dk, j.dv = dv;
    j.B = q->ne[0], j.N = q->ne[1], j.H = q->ne[2], j.D = q->ne[3], j.Dv = v->ne[3];
    j.C = p->chunk < j.N ? p->chunk : j.N;
    j.nc = (j.N + p->chunk - 1) / p->chunk;
    j.L = j.D * j.Dv + j.D, j.Hw = mixing->ndim == 3 ? j.H : 1;
    j.M = mixing->ne[mixing->ndim - 1];
    if (!dq && !dk && !dv && !d_mixing) return LA_OK;
    const int threads = la_ctx_threads(ctx);
    const int64_t nc = j.nc;
    size_t per = cb_floats(&j), bytes, extra, dwn = 0;
    la_status st = la_mul_size((size_t)j.Hw * (size_t)nc, (size_t)(nc + 1), &extra, "mhla causal backward mixing");
    if (st == LA_OK && d_mixing) st = la_mul_size((size_t)(j.B * j.H) * (size_t)nc, (size_t)nc, &dwn, "mhla causal backward mixing gradients");
    if (st == LA_OK) st = la_mul_size(per, (size_t)threads, &bytes, "mhla causal backward workspace");
    if (st == LA_OK && bytes + extra + dwn < bytes) st = la_err(LA_ERR_OVERFLOW, "mhla causal backward: workspace overflows");
    if (st == LA_OK) st = la_mul_size(bytes + extra + dwn, sizeof(float), &bytes, "mhla causal backward workspace");
    if (st != LA_OK) return st;
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    float *Wl = ws + per * (size_t)threads, *Wd = Wl + (size_t)j.Hw * nc * nc;
    j.dW = d_mixing ? Wd + (size_t)j.Hw * nc : NULL;
    for (int64_t hw = 0; hw < j.Hw; hw++)
        for (int64_t a = 0; a < nc; a++)
            for (int64_t c = 0; c < nc; c++) {
                const int64_t off = mixing->ndim == 3 ? la_off3(mixing, hw, a, c) : la_off2(mixing, a, c);
                const float w = la_load_f32(mixing, off);
                Wl[(hw * nc + a) * nc + c] = c < a ? w : 0.f;
                if (c == a) Wd[hw * nc + a] = w;
            }
    j.W = Wl, j.Wd = Wd;
#pragma omp parallel num_threads(threads)
    {
        cb_ws s;
        cb_carve(&j, ws + (size_t)la_thread_id() * per, &s);
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < j.B * j.H; bh++) cb_head(&j, bh / j.H, bh % j.H, &s);
    }
    if (d_mixing)
        for (int64_t hw = 0; hw < j.Hw; hw++)
            for (int64_t a = 0; a < j.M; a++)
                for (int64_t c = 0; c < j.M; c++) {
                    double acc = 0;
                    if (a < nc && c < nc)
                        for (int64_t b = 0; b < j.B; b++)
                            for (int64_t h = 0; h < j.H; h++)
                                if (j.Hw == 1 || h == hw) acc += j.dW[((b * j.H + h) * nc + a) * nc + c];
                    const int64_t off = d_mixing->ndim == 3 ? la_off3(d_mixing, hw, a, c) : la_off2(d_mixing, a, c);
                    la_store_f32(d_mixing, off, (float)acc);
                }
    la_ws_free(ctx, ws);
    return LA_OK;
}
