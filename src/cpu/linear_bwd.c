/* CPU linear attention backward (TRAINING.md §1, SPEC §3).
 *
 * With q̃ = s·φ(q), k̃ = φ(k), den_t = q̃_t·z_t + eps, o_t = q̃_tᵀS_t / den_t:
 *     g_t   = dO_t / den_t,   dden_t = −(dO_t·o_t) / den_t     (normalize off:
 *                                                              g = dO, dden = 0)
 *     dq̃_t  = S_t g_t + dden_t z_t
 *     dS̄_j  = dS_out + Σ_{t ≥ j} q̃_t g_tᵀ,   dz̄_j = dz_out + Σ_{t ≥ j} dden_t q̃_t
 *     dk̃_j  = dS̄_j v_j + dz̄_j,   dv_j = dS̄_jᵀ k̃_j
 *     dq = s·φ'(q)∘dq̃,  dk = φ'(k)∘dk̃;  dS_in = dS̄_0, dz_in = dz̄_0.
 * (non-causal: S_t = S, the sums over all t, no state.)
 *
 * Causal, chunkwise, per (batch, head): a forward sweep over the chunks
 * rebuilds the running state (S, z) from S_in, forms o, g, dden and dq̃ of
 * each chunk (inter-chunk through the state, intra-chunk through the masked
 * C×C products A = tril(Q̃K̃ᵀ), dA = tril(G Vᵀ + dden 1ᵀ)) and keeps g and
 * dden (O(N·Dv) per head); a reverse sweep carries (dS̄, dz̄) from the
 * final-state gradient back to the first chunk and forms dk̃, dv:
 *     dK̃ = V dS̄ᵀ + 1 dz̄ᵀ + dAᵀ Q̃,   dV = K̃ dS̄ + Aᵀ G.
 * With the forward's out given, o is read instead of formed (normalize on:
 * num = out·den; off: o is not needed). No per-token state is stored. Non-causal: three passes over row blocks
 * (S, z; then g, dq, dS, dz; then dk, dv). One task per (batch, head); every
 * product is a la_sgemm; each gradient element is written by one task. */
#include "cpu/backward_cpu.h"
#include "cpu/linear_cpu.h"
#include "cpu/bwd_gemm.h"

#include <stdlib.h>

typedef struct lb_job {
    const la_linear_params *p;
    const la_tensor *q, *k, *v, *d_out;
    const la_tensor *out; /* the forward's output (optional): o without the products */
    la_tensor *dq, *dk, *dv;
    int64_t B, N, H, D, Dv, R; /* R: rows per block (causal: the chunk) */
} lb_job;

typedef struct lb_scratch {
    float *qr, *qt, *kr, *kt, *vv, *go; /* R×D, R×D, R×D, R×D, R×Dv, R×Dv (dO, then g) */
    float *o, *dqt, *dkt, *dvv;         /* R×Dv, R×D, R×D, R×Dv */
    float *a, *da;                      /* R×R */
    float *den, *dden;                  /* R */
    float *S, *z, *dS, *dz;             /* D×Dv, D, D×Dv, D */
    float *gall, *ddall;                /* causal: N×Dv, N */
} lb_scratch;

static size_t lb_scratch_floats(const lb_job *j, bool causal) {
    const size_t R = (size_t)j->R, D = (size_t)j->D, Dv = (size_t)j->Dv;
    size_t n = R * (6 * D + 4 * Dv) + 2 * R * R + 2 * R + 2 * D * Dv + 2 * D;
    if (causal) n += (size_t)j->N * (Dv + 1);
    return n;
}

static void lb_carve(const lb_job *j, float *w, lb_scratch *s) {
    const int64_t R = j->R, D = j->D, Dv = j->Dv;
    float **const rows_d[] = {&s->qr, &s->qt, &s->kr, &s->kt, &s->dqt, &s->dkt};
    float **const rows_dv[] = {&s->vv, &s->go, &s->o, &s->dvv};
    float **const rows_r[] = {&s->a, &s->da}, **const rows_1[] = {&s->den, &s->dden};
    float **const state_dv[] = {&s->S, &s->dS}, **const state_1[] = {&s->z, &s->dz};
    w = la_carve_blocks(w, R * D, rows_d, 6);
    w = la_carve_blocks(w, R * Dv, rows_dv, 4);
    w = la_carve_blocks(w, R * R, rows_r, 2);
    w = la_carve_blocks(w, R, rows_1, 2);
    w = la_carve_blocks(w, D * Dv, state_dv, 2);
    w = la_carve_blocks(w, D, state_1, 2);
    s->gall = w;
    s->ddall = w + j->N * Dv;
}

/* Raw and mapped k rows and v rows (want_kv), raw and mapped q rows (want_q),
 * d_out rows (want_do) of [t0, t0+n). */
static void lb_load(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t n, bool want_kv,
                    bool want_q, bool want_do, lb_scratch *s) {
    const int64_t D = j->D;
    const la_feature f = j->p->feature;
    const float sq = j->p->scale_q;
    if (want_kv) {
        la_gather_bnhd_rows(j->k, b, h, t0, n, s->kr, D);
        la_feature_map_n(f, s->kr, s->kt, n * D, 1.f);
        la_gather_bnhd_rows(j->v, b, h, t0, n, s->vv, j->Dv);
    }
    if (want_q) {
        la_gather_bnhd_rows(j->q, b, h, t0, n, s->qr, D);
        la_feature_map_n(f, s->qr, s->qt, n * D, sq);
    }
    if (want_do) la_gather_bnhd_rows(j->d_out, b, h, t0, n, s->go, j->Dv);
}

/* Rows [t0, t0+n) of head (b, h) of t in place: the f32 row pointer and
 * its row stride (*ld), or NULL where t is not f32 with unit inner stride
 * and a row stride that BLAS takes. */
static const float *lb_rows_f32(const la_tensor *t, int64_t b, int64_t h, int64_t t0, int64_t *ld) {
    if (t->dtype != LA_F32 || t->nb[3] != 1 || t->nb[1] < t->ne[3]) return NULL;
    *ld = t->nb[1];
    return (const float *)t->data + la_off4(t, b, t0, h, 0);
}

/* The non-causal passes' k and v rows [t0, t0+n): k̃ into s->kt; raw k
 * (*kr, row stride *ldk) and v (*vr, *ldv) read in place where the views
 * allow, else gathered into s->kr and s->vv. */
static void lb_load_kv(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t n,
                       lb_scratch *s, const float **kr, int64_t *ldk, const float **vr,
                       int64_t *ldv) {
    const int64_t D = j->D;
    *kr = lb_rows_f32(j->k, b, h, t0, ldk);
    if (*kr) {
        for (int64_t r = 0; r < n; r++)
            la_feature_map_n(j->p->feature, *kr + r * *ldk, s->kt + r * D, D, 1.f);
    } else {
        la_gather_bnhd_rows(j->k, b, h, t0, n, s->kr, D);
        la_feature_map_n(j->p->feature, s->kr, s->kt, n * D, 1.f);
        *kr = s->kr, *ldk = D;
    }
    *vr = lb_rows_f32(j->v, b, h, t0, ldv);
    if (!*vr) {
        la_gather_bnhd_rows(j->v, b, h, t0, n, s->vv, j->Dv);
        *vr = s->vv, *ldv = j->Dv;
    }
}

/* o, den → g (in s->go, replacing dO) and dden for n rows. */
static void lb_g(const lb_job *j, int64_t n, lb_scratch *s) {
    const int64_t Dv = j->Dv;
    if (!j->p->normalize) {
        for (int64_t r = 0; r < n; r++) s->dden[r] = 0.f;
        return;
    }
    for (int64_t r = 0; r < n; r++) {
        const float inv = 1.f / s->den[r];
        float acc = 0.f;
        for (int64_t e = 0; e < Dv; e++) acc += s->go[r * Dv + e] * s->o[r * Dv + e];
        s->dden[r] = -acc * inv * inv; /* −(dO·num/den)/den */
        for (int64_t e = 0; e < Dv; e++) s->go[r * Dv + e] *= inv;
    }
}

/* dq̃ (in s->dqt) → dq rows [t0, t0+n). */
static void lb_store_dq(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t n,
                        lb_scratch *s) {
    la_feature_grad_n(j->p->feature, s->qr, s->dqt, n * j->D, j->p->scale_q);
    la_scatter_bnhd_rows(j->dq, b, h, t0, n, s->dqt, j->D);
}

static void lb_store_dk_dv(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t n,
                           lb_scratch *s) {
    if (j->dk) {
        la_feature_grad_n(j->p->feature, s->kr, s->dkt, n * j->D, 1.f);
        la_scatter_bnhd_rows(j->dk, b, h, t0, n, s->dkt, j->D);
    }
    if (j->dv) la_scatter_bnhd_rows(j->dv, b, h, t0, n, s->dvv, j->Dv);
}

/* dq̃ = g Sᵀ + dden zᵀ (+ the intra-chunk part added by the caller). */
static void lb_dqt_inter(const lb_job *j, int64_t n, lb_scratch *s) {
    const int64_t D = j->D, Dv = j->Dv;
    la_sgemm(false, true, n, D, Dv, 1.f, s->go, Dv, s->S, Dv, 0.f, s->dqt, D);
    if (j->p->normalize)
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) s->dqt[r * D + d] += s->dden[r] * s->z[d];
}

/* dS̄ += Q̃ᵀ G, dz̄ += Q̃ᵀ dden. */
static void lb_accum_dstate(const lb_job *j, int64_t n, lb_scratch *s) {
    const int64_t D = j->D, Dv = j->Dv;
    la_bwd_acc(D, Dv, n, 1.f, s->qt, 1, D, s->go, Dv, s->dS, Dv, 1.f); /* Q̃ᵀ read in place */
    if (j->p->normalize)
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) s->dz[d] += s->dden[r] * s->qt[r * D + d];
}

/* dk̃ = V dS̄ᵀ + dz̄, dv = K̃ dS̄ (the inter-block part). */
static void lb_dk_dv_inter(const lb_job *j, int64_t n, lb_scratch *s) {
    const int64_t D = j->D, Dv = j->Dv;
    la_sgemm(false, true, n, D, Dv, 1.f, s->vv, Dv, s->dS, Dv, 0.f, s->dkt, D);
    for (int64_t r = 0; r < n; r++)
        for (int64_t d = 0; d < D; d++) s->dkt[r * D + d] += s->dz[d];
    la_sgemm(false, false, n, Dv, D, 1.f, s->kt, D, s->dS, Dv, 0.f, s->dvv, Dv);
}

/* The numerator q̃ S of rows [t0, t0+n) into s->o: from the forward's out
 * (times den) when given; else, with noncausal, q̃ S (the causal caller forms
 * its own). Returns whether s->o was filled. */
static bool lb_num(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t n, lb_scratch *s,
                   bool noncausal) {
    const int64_t Dv = j->Dv;
    if (j->out) {
        la_gather_bnhd_rows(j->out, b, h, t0, n, s->o, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t e = 0; e < Dv; e++) s->o[r * Dv + e] *= s->den[r];
        return true;
    }
    if (!noncausal) return false;
    la_sgemm(false, false, n, Dv, j->D, 1.f, s->qt, j->D, s->S, Dv, 0.f, s->o, Dv);
    return true;
}

static void lb_noncausal(const lb_job *j, int64_t b, int64_t h, lb_scratch *s) {
    const int64_t N = j->N, D = j->D, Dv = j->Dv, R = j->R;
    const float eps = j->p->eps;
    memset(s->S, 0, (size_t)(D * Dv) * sizeof(float));
    memset(s->z, 0, (size_t)D * sizeof(float));
    memset(s->dS, 0, (size_t)(D * Dv) * sizeof(float));
    memset(s->dz, 0, (size_t)D * sizeof(float));
    for (int64_t t0 = 0; t0 < N; t0 += R) {
        const int64_t n = N - t0 < R ? N - t0 : R;
        const float *kr, *vr;
        int64_t ldk, ldv;
        lb_load_kv(j, b, h, t0, n, s, &kr, &ldk, &vr, &ldv);
        la_bwd_acc(D, Dv, n, 1.f, s->kt, 1, D, vr, ldv, s->S, Dv, 1.f);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) s->z[d] += s->kt[r * D + d];
    }
    for (int64_t t0 = 0; t0 < N; t0 += R) {
        const int64_t n = N - t0 < R ? N - t0 : R;
        /* q̃ (raw q in place where the view allows) and dO: no k, v */
        int64_t ldq;
        const float *qr = lb_rows_f32(j->q, b, h, t0, &ldq);
        if (qr) {
            for (int64_t r = 0; r < n; r++)
                la_feature_map_n(j->p->feature, qr + r * ldq, s->qt + r * D, D, j->p->scale_q);
            la_gather_bnhd_rows(j->d_out, b, h, t0, n, s->go, Dv);
        } else {
            lb_load(j, b, h, t0, n, false, true, true, s);
            qr = s->qr, ldq = D;
        }
        if (j->p->normalize) { /* o is needed for dden only (normalize off: dden = 0) */
            for (int64_t r = 0; r < n; r++) {
                float acc = 0.f;
                for (int64_t d = 0; d < D; d++) acc += s->qt[r * D + d] * s->z[d];
                s->den[r] = acc + eps;
            }
            lb_num(j, b, h, t0, n, s, true);
        }
        lb_g(j, n, s);
        if (j->dq) {
            lb_dqt_inter(j, n, s);
            for (int64_t r = 0; r < n; r++)
                la_feature_grad_n(j->p->feature, qr + r * ldq, s->dqt + r * D, D, j->p->scale_q);
            la_scatter_bnhd_rows(j->dq, b, h, t0, n, s->dqt, D);
        }
        lb_accum_dstate(j, n, s);
    }
    if (!j->dk && !j->dv) return;
    /* dS̄ᵀ into s->S (S is not needed any more): dk̃ = V·dS̄ᵀ as a plain product */
    float *dST = s->S;
    for (int64_t d = 0; d < D; d++)
        for (int64_t e = 0; e < Dv; e++) dST[e * D + d] = s->dS[d * Dv + e];
    for (int64_t t0 = 0; t0 < N; t0 += R) {
        const int64_t n = N - t0 < R ? N - t0 : R;
        const float *kr, *vr;
        int64_t ldk, ldv;
        lb_load_kv(j, b, h, t0, n, s, &kr, &ldk, &vr, &ldv);
        /* dk̃ = V dS̄ᵀ + dz̄, dv = K̃ dS̄; dk = φ'(k)∘dk̃ */
        la_bwd_acc(n, D, Dv, 1.f, vr, ldv, 1, dST, D, s->dkt, D, 0.f);
        la_bwd_acc(n, Dv, D, 1.f, s->kt, D, 1, s->dS, Dv, s->dvv, Dv, 0.f);
        if (j->dk) {
            for (int64_t r = 0; r < n; r++) {
                float *g = s->dkt + r * D;
                for (int64_t d = 0; d < D; d++) g[d] += s->dz[d];
                la_feature_grad_n(j->p->feature, kr + r * ldk, g, D, 1.f);
            }
            la_scatter_bnhd_rows(j->dk, b, h, t0, n, s->dkt, D);
        }
        if (j->dv) la_scatter_bnhd_rows(j->dv, b, h, t0, n, s->dvv, Dv);
    }
}

/* A = tril(Q̃ K̃ᵀ) and dA = tril(G Vᵀ + dden 1ᵀ) of an n-row chunk. */
static void lb_masked(const lb_job *j, int64_t n, lb_scratch *s, bool want_da) {
    const int64_t R = j->R, D = j->D, Dv = j->Dv;
    la_sgemm(false, true, n, n, D, 1.f, s->qt, D, s->kt, D, 0.f, s->a, R);
    for (int64_t r = 0; r < n; r++)
        for (int64_t c = r + 1; c < n; c++) s->a[r * R + c] = 0.f;
    if (!want_da) return;
    la_sgemm(false, true, n, n, Dv, 1.f, s->go, Dv, s->vv, Dv, 0.f, s->da, R);
    for (int64_t r = 0; r < n; r++) {
        for (int64_t c = 0; c <= r; c++) s->da[r * R + c] += s->dden[r];
        for (int64_t c = r + 1; c < n; c++) s->da[r * R + c] = 0.f;
    }
}

static void lb_causal(const lb_job *j, int64_t b, int64_t h, const la_tensor *S_in,
                      const la_tensor *z_in, const la_tensor *d_S_out, const la_tensor *d_z_out,
                      la_tensor *d_S_in, la_tensor *d_z_in, lb_scratch *s) {
    const int64_t N = j->N, D = j->D, Dv = j->Dv, C = j->R;
    const float eps = j->p->eps;
    for (int64_t d = 0; d < D; d++) {
        for (int64_t e = 0; e < Dv; e++) {
            s->S[d * Dv + e] = S_in ? la_load_f32(S_in, la_off4(S_in, b, h, d, e)) : 0.f;
            s->dS[d * Dv + e] = d_S_out ? la_load_f32(d_S_out, la_off4(d_S_out, b, h, d, e)) : 0.f;
        }
        s->z[d] = z_in ? la_load_f32(z_in, la_off3(z_in, b, h, d)) : 0.f;
        s->dz[d] = d_z_out ? la_load_f32(d_z_out, la_off3(d_z_out, b, h, d)) : 0.f;
    }
    /* forward sweep: o, g, dden, dq */
    for (int64_t c0 = 0; c0 < N; c0 += C) {
        const int64_t n = N - c0 < C ? N - c0 : C;
        lb_load(j, b, h, c0, n, true, true, true, s);
        lb_masked(j, n, s, false);
        if (j->p->normalize) {
            for (int64_t r = 0; r < n; r++) {
                float acc = 0.f;
                for (int64_t d = 0; d < D; d++) acc += s->qt[r * D + d] * s->z[d];
                for (int64_t c = 0; c <= r; c++) acc += s->a[r * C + c];
                s->den[r] = acc + eps;
            }
            if (!lb_num(j, b, h, c0, n, s, false)) {
                la_sgemm(false, false, n, Dv, n, 1.f, s->a, C, s->vv, Dv, 0.f, s->o, Dv);
                la_sgemm(false, false, n, Dv, D, 1.f, s->qt, D, s->S, Dv, 1.f, s->o, Dv);
            }
        }
        lb_g(j, n, s);
        memcpy(s->gall + c0 * Dv, s->go, (size_t)(n * Dv) * sizeof(float));
        memcpy(s->ddall + c0, s->dden, (size_t)n * sizeof(float));
        if (j->dq) {
            lb_masked(j, n, s, true);
            lb_dqt_inter(j, n, s);
            la_sgemm(false, false, n, D, n, 1.f, s->da, C, s->kt, D, 1.f, s->dqt, D);
            lb_store_dq(j, b, h, c0, n, s);
        }
        la_sgemm(true, false, D, Dv, n, 1.f, s->kt, D, s->vv, Dv, 1.f, s->S, Dv);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) s->z[d] += s->kt[r * D + d];
    }
    /* reverse sweep: dk, dv, then the state gradient */
    const int64_t nch = (N + C - 1) / C;
    for (int64_t ci = nch - 1; ci >= 0; ci--) {
        const int64_t c0 = ci * C, n = N - c0 < C ? N - c0 : C;
        lb_load(j, b, h, c0, n, true, true, false, s);
        memcpy(s->go, s->gall + c0 * Dv, (size_t)(n * Dv) * sizeof(float));
        memcpy(s->dden, s->ddall + c0, (size_t)n * sizeof(float));
        if (j->dk || j->dv) {
            lb_masked(j, n, s, true);
            lb_dk_dv_inter(j, n, s);
            la_sgemm(true, false, n, D, n, 1.f, s->da, C, s->qt, D, 1.f, s->dkt, D);
            la_sgemm(true, false, n, Dv, n, 1.f, s->a, C, s->go, Dv, 1.f, s->dvv, Dv);
            lb_store_dk_dv(j, b, h, c0, n, s);
        }
        lb_accum_dstate(j, n, s);
    }
    if (d_S_in)
        for (int64_t d = 0; d < D; d++)
            for (int64_t e = 0; e < Dv; e++)
                la_store_f32(d_S_in, la_off4(d_S_in, b, h, d, e), s->dS[d * Dv + e]);
    if (d_z_in)
        for (int64_t d = 0; d < D; d++) la_store_f32(d_z_in, la_off3(d_z_in, b, h, d), s->dz[d]);
}

la_status la_linear_backward_cpu(const la_linear_params *p, const la_tensor *q,
                                 const la_tensor *k, const la_tensor *v, const la_tensor *out,
                                 const la_tensor *S_in,
                                 const la_tensor *z_in, const la_tensor *d_out,
                                 const la_tensor *d_S_out, const la_tensor *d_z_out,
                                 la_tensor *dq, la_tensor *dk, la_tensor *dv, la_tensor *d_S_in,
                                 la_tensor *d_z_in, la_context *ctx) {
    lb_job j = {p, q, k, v, d_out, out, dq, dk, dv, q->ne[0], q->ne[1], q->ne[2], q->ne[3], v->ne[3], 0};
    const bool causal = p->causal != 0;
    j.R = causal ? (p->chunk < j.N ? p->chunk : j.N) : (LA_LINEAR_BLOCK < j.N ? LA_LINEAR_BLOCK : j.N);
    if (!dq && !dk && !dv && !d_S_in && !d_z_in) return LA_OK;
    const int threads = la_ctx_threads(ctx);
    const size_t per = lb_scratch_floats(&j, causal);
    size_t bytes;
    LA_TRY(la_mul_size(per, (size_t)threads, &bytes, "linear backward workspace"));
    LA_TRY(la_mul_size(bytes, sizeof(float), &bytes, "linear backward workspace"));
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
#pragma omp parallel num_threads(threads)
    {
        lb_scratch s;
        lb_carve(&j, ws + (size_t)la_thread_id() * per, &s);
#pragma omp for schedule(dynamic)
        for (int64_t bh = 0; bh < j.B * j.H; bh++) {
            const int64_t b = bh / j.H, h = bh % j.H;
            if (causal)
                lb_causal(&j, b, h, S_in, z_in, d_S_out, d_z_out, d_S_in, d_z_in, &s);
            else
                lb_noncausal(&j, b, h, &s);
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
