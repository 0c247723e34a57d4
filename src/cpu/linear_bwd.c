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
 * num = out·den; off: o is not needed). No per-token state is stored.
 * Causal: one task per (batch, head), its products la_sgemm calls.
 * Non-causal: three phases over token segments of LB_SEG rows (S, z; then
 * g, dq, dS, dz; then dk, dv), each segment's state sums partial, the totals
 * summed in segment order between phases; tasks per (batch, head, segment),
 * or per (batch, head) over its segments in order when there are enough
 * heads for the threads (no barriers; the same sums, the same bits). The
 * products run on la_bwd_acc; dq, dk, dv of f32 views are written in place.
 * Each gradient element is written by one task. */
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

/* Rows [t0, t0+n) of head (b, h) of an output t to write in place: the f32
 * row pointer and its row stride (*ld), or NULL (then: scratch, scattered). */
static float *lb_out_rows_f32(la_tensor *t, int64_t b, int64_t h, int64_t t0, int64_t *ld) {
    if (!t || t->dtype != LA_F32 || t->nb[3] != 1 || t->nb[1] < t->ne[3]) return NULL;
    *ld = t->nb[1];
    return (float *)t->data + la_off4(t, b, t0, h, 0);
}

/* Non-causal: the per-(batch, head) state sums of one token segment, and
 * their totals. A segment's partial sums are summed over its row blocks in
 * order, the totals over the segments in order: the segments are fixed by N
 * (LB_SEG rows), so the result does not depend on the thread count. */
#define LB_SEG 1024

typedef struct lb_nc_state {
    float *S, *ST, *z;    /* Σ k̃ vᵀ [D×Dv], its transpose [Dv×D], Σ k̃ [D] */
    float *dS, *dST, *dz; /* dS̄ [D×Dv], dS̄ᵀ [Dv×D], dz̄ [D] */
} lb_nc_state;

static size_t lb_nc_state_floats(int64_t D, int64_t Dv) { return (size_t)(4 * D * Dv + 2 * D); }

static void lb_nc_state_carve(float *w, int64_t D, int64_t Dv, lb_nc_state *st) {
    st->S = w, st->ST = w + D * Dv, st->dS = w + 2 * D * Dv, st->dST = w + 3 * D * Dv;
    st->z = w + 4 * D * Dv, st->dz = st->z + D;
}

/* Phase 1 of segment [t0, t1): S_part = Σ k̃ᵀ v, z_part = Σ k̃ (zeroed first). */
static void lb_nc_sums(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t t1,
                       lb_scratch *s, float *S, float *z) {
    const int64_t D = j->D, Dv = j->Dv, R = j->R;
    memset(S, 0, (size_t)(D * Dv) * sizeof(float));
    memset(z, 0, (size_t)D * sizeof(float));
    for (int64_t r0 = t0; r0 < t1; r0 += R) {
        const int64_t n = t1 - r0 < R ? t1 - r0 : R;
        const float *kr, *vr;
        int64_t ldk, ldv;
        lb_load_kv(j, b, h, r0, n, s, &kr, &ldk, &vr, &ldv);
        la_bwd_acc(D, Dv, n, 1.f, s->kt, 1, D, vr, ldv, S, Dv, 1.f);
        for (int64_t r = 0; r < n; r++)
            for (int64_t d = 0; d < D; d++) z[d] += s->kt[r * D + d];
    }
}

/* Phase 2 of segment [t0, t1): dq of its rows (from the totals st) and the
 * partial sums dS_part = Σ q̃ᵀ g, dz_part = Σ dden q̃ (zeroed first). */
static void lb_nc_q(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t t1,
                    lb_scratch *s, const lb_nc_state *st, float *dS, float *dz) {
    const int64_t D = j->D, Dv = j->Dv, R = j->R;
    const float eps = j->p->eps;
    memset(dS, 0, (size_t)(D * Dv) * sizeof(float));
    memset(dz, 0, (size_t)D * sizeof(float));
    for (int64_t r0 = t0; r0 < t1; r0 += R) {
        const int64_t n = t1 - r0 < R ? t1 - r0 : R;
        /* q̃ (raw q in place where the view allows) and dO: no k, v */
        int64_t ldq;
        const float *qr = lb_rows_f32(j->q, b, h, r0, &ldq);
        if (qr) {
            for (int64_t r = 0; r < n; r++)
                la_feature_map_n(j->p->feature, qr + r * ldq, s->qt + r * D, D, j->p->scale_q);
            la_gather_bnhd_rows(j->d_out, b, h, r0, n, s->go, Dv);
        } else {
            lb_load(j, b, h, r0, n, false, true, true, s);
            qr = s->qr, ldq = D;
        }
        if (j->p->normalize) { /* o is needed for dden only (normalize off: dden = 0) */
            for (int64_t r = 0; r < n; r++) {
                float acc = 0.f;
                for (int64_t d = 0; d < D; d++) acc += s->qt[r * D + d] * st->z[d];
                s->den[r] = acc + eps;
            }
            if (j->out) {
                la_gather_bnhd_rows(j->out, b, h, r0, n, s->o, Dv);
                for (int64_t r = 0; r < n; r++)
                    for (int64_t e = 0; e < Dv; e++) s->o[r * Dv + e] *= s->den[r];
            } else {
                la_bwd_acc(n, Dv, D, 1.f, s->qt, D, 1, st->S, Dv, s->o, Dv, 0.f);
            }
        }
        lb_g(j, n, s);
        if (j->dq) {
            /* dq̃ = g Sᵀ + dden zᵀ, then dq = s·φ'(q)∘dq̃, written in place where it can be */
            int64_t ldo;
            float *dqp = lb_out_rows_f32(j->dq, b, h, r0, &ldo);
            if (!dqp) dqp = s->dqt, ldo = D;
            la_bwd_acc(n, D, Dv, 1.f, s->go, Dv, 1, st->ST, D, dqp, ldo, 0.f);
            for (int64_t r = 0; r < n; r++) {
                float *g = dqp + r * ldo;
                if (j->p->normalize) {
                    const float dd = s->dden[r];
                    for (int64_t d = 0; d < D; d++) g[d] += dd * st->z[d];
                }
                la_feature_grad_n(j->p->feature, qr + r * ldq, g, D, j->p->scale_q);
            }
            if (dqp == s->dqt) la_scatter_bnhd_rows(j->dq, b, h, r0, n, s->dqt, D);
        }
        la_bwd_acc(D, Dv, n, 1.f, s->qt, 1, D, s->go, Dv, dS, Dv, 1.f); /* Q̃ᵀ read in place */
        if (j->p->normalize)
            for (int64_t r = 0; r < n; r++)
                for (int64_t d = 0; d < D; d++) dz[d] += s->dden[r] * s->qt[r * D + d];
    }
}

/* Phase 3 of segment [t0, t1): dk̃ = V dS̄ᵀ + dz̄, dv = K̃ dS̄; dk = φ'(k)∘dk̃. */
static void lb_nc_kv(const lb_job *j, int64_t b, int64_t h, int64_t t0, int64_t t1,
                     lb_scratch *s, const lb_nc_state *st) {
    const int64_t D = j->D, Dv = j->Dv, R = j->R;
    for (int64_t r0 = t0; r0 < t1; r0 += R) {
        const int64_t n = t1 - r0 < R ? t1 - r0 : R;
        const float *kr, *vr;
        int64_t ldk, ldv;
        lb_load_kv(j, b, h, r0, n, s, &kr, &ldk, &vr, &ldv);
        if (j->dk) {
            int64_t ldo;
            float *dkp = lb_out_rows_f32(j->dk, b, h, r0, &ldo);
            if (!dkp) dkp = s->dkt, ldo = D;
            la_bwd_acc(n, D, Dv, 1.f, vr, ldv, 1, st->dST, D, dkp, ldo, 0.f);
            for (int64_t r = 0; r < n; r++) {
                float *g = dkp + r * ldo;
                for (int64_t d = 0; d < D; d++) g[d] += st->dz[d];
                la_feature_grad_n(j->p->feature, kr + r * ldk, g, D, 1.f);
            }
            if (dkp == s->dkt) la_scatter_bnhd_rows(j->dk, b, h, r0, n, s->dkt, D);
        }
        if (j->dv) {
            int64_t ldo;
            float *dvp = lb_out_rows_f32(j->dv, b, h, r0, &ldo);
            if (!dvp) dvp = s->dvv, ldo = Dv;
            la_bwd_acc(n, Dv, D, 1.f, s->kt, D, 1, st->dS, Dv, dvp, ldo, 0.f);
            if (dvp == s->dvv) la_scatter_bnhd_rows(j->dv, b, h, r0, n, s->dvv, Dv);
        }
    }
}

/* Totals of head x from its nseg partial sums (part: [nseg][D·Dv + D] each
 * for S/z or dS/dz), summed in segment order, and the transpose. */
static void lb_nc_total(int64_t nseg, const float *part, int64_t D, int64_t Dv, float *S,
                        float *ST, float *z) {
    const size_t stride = (size_t)(D * Dv + D);
    memcpy(S, part, (size_t)(D * Dv) * sizeof(float));
    memcpy(z, part + D * Dv, (size_t)D * sizeof(float));
    for (int64_t g = 1; g < nseg; g++) {
        const float *P = part + g * stride;
        for (int64_t x = 0; x < D * Dv; x++) S[x] += P[x];
        for (int64_t d = 0; d < D; d++) z[d] += P[D * Dv + d];
    }
    for (int64_t d = 0; d < D; d++)
        for (int64_t e = 0; e < Dv; e++) ST[e * D + d] = S[d * Dv + e];
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

/* All phases of head bh, its segments in order (st: its totals, P: its
 * nseg partial sums). */
static void lb_nc_head(const lb_job *j, int64_t bh, int64_t nseg, lb_scratch *s, float *stw,
                       float *P) {
    const int64_t b = bh / j->H, h = bh % j->H, D = j->D, Dv = j->Dv;
    const size_t pstride = (size_t)(D * Dv + D);
    lb_nc_state st;
    lb_nc_state_carve(stw, D, Dv, &st);
    for (int64_t g = 0; g < nseg; g++) {
        const int64_t t0 = g * LB_SEG, t1 = t0 + LB_SEG < j->N ? t0 + LB_SEG : j->N;
        lb_nc_sums(j, b, h, t0, t1, s, P + g * pstride, P + g * pstride + D * Dv);
    }
    lb_nc_total(nseg, P, D, Dv, st.S, st.ST, st.z);
    for (int64_t g = 0; g < nseg; g++) {
        const int64_t t0 = g * LB_SEG, t1 = t0 + LB_SEG < j->N ? t0 + LB_SEG : j->N;
        lb_nc_q(j, b, h, t0, t1, s, &st, P + g * pstride, P + g * pstride + D * Dv);
    }
    if (!j->dk && !j->dv) return;
    lb_nc_total(nseg, P, D, Dv, st.dS, st.dST, st.dz);
    for (int64_t g = 0; g < nseg; g++) {
        const int64_t t0 = g * LB_SEG, t1 = t0 + LB_SEG < j->N ? t0 + LB_SEG : j->N;
        lb_nc_kv(j, b, h, t0, t1, s, &st);
    }
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
    const int64_t BH = j.B * j.H, nseg = causal ? 1 : (j.N + LB_SEG - 1) / LB_SEG;
    /* non-causal: the totals per head and the partial sums per (head, segment) */
    size_t shared = 0, part = 0, bytes;
    if (!causal) {
        LA_TRY(la_mul_size((size_t)BH, lb_nc_state_floats(j.D, j.Dv), &shared,
                           "linear backward state"));
        LA_TRY(la_mul_size((size_t)(BH * nseg), (size_t)(j.D * j.Dv + j.D), &part,
                           "linear backward partial sums"));
        if (shared + part < shared) return la_err(LA_ERR_OVERFLOW, "linear backward workspace overflows");
        shared += part;
    }
    LA_TRY(la_mul_size(per, (size_t)threads, &bytes, "linear backward workspace"));
    if (bytes + shared < bytes) return la_err(LA_ERR_OVERFLOW, "linear backward workspace overflows");
    bytes += shared;
    LA_TRY(la_mul_size(bytes, sizeof(float), &bytes, "linear backward workspace"));
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    float *states = ws + (size_t)threads * per, *parts = states + (shared - part);
    const size_t stf = lb_nc_state_floats(j.D, j.Dv), pstride = (size_t)(j.D * j.Dv + j.D);
#pragma omp parallel num_threads(threads)
    {
        lb_scratch s;
        lb_carve(&j, ws + (size_t)la_thread_id() * per, &s);
        if (causal) {
#pragma omp for schedule(dynamic)
            for (int64_t bh = 0; bh < BH; bh++)
                lb_causal(&j, bh / j.H, bh % j.H, S_in, z_in, d_S_out, d_z_out, d_S_in, d_z_in, &s);
        } else if (BH >= 2 * threads) {
            /* enough heads for the threads: one task per head runs the same
             * phases over its segments (the same sums in the same order as
             * below, so the same bits), with no barrier in between */
#pragma omp for schedule(dynamic)
            for (int64_t bh = 0; bh < BH; bh++)
                lb_nc_head(&j, bh, nseg, &s, states + (size_t)bh * stf, parts + (size_t)(bh * nseg) * pstride);
        } else {
            /* three phases over (head, segment) tasks, the totals in between */
#pragma omp for schedule(dynamic)
            for (int64_t x = 0; x < BH * nseg; x++) {
                const int64_t bh = x / nseg, g = x % nseg, t0 = g * LB_SEG;
                float *P = parts + (size_t)x * pstride;
                lb_nc_sums(&j, bh / j.H, bh % j.H, t0, t0 + LB_SEG < j.N ? t0 + LB_SEG : j.N, &s,
                           P, P + j.D * j.Dv);
            }
#pragma omp for schedule(static)
            for (int64_t bh = 0; bh < BH; bh++) {
                lb_nc_state st;
                lb_nc_state_carve(states + (size_t)bh * stf, j.D, j.Dv, &st);
                lb_nc_total(nseg, parts + (size_t)(bh * nseg) * pstride, j.D, j.Dv, st.S, st.ST, st.z);
            }
#pragma omp for schedule(dynamic)
            for (int64_t x = 0; x < BH * nseg; x++) {
                const int64_t bh = x / nseg, g = x % nseg, t0 = g * LB_SEG;
                lb_nc_state st;
                lb_nc_state_carve(states + (size_t)bh * stf, j.D, j.Dv, &st);
                float *P = parts + (size_t)x * pstride;
                lb_nc_q(&j, bh / j.H, bh % j.H, t0, t0 + LB_SEG < j.N ? t0 + LB_SEG : j.N, &s, &st,
                        P, P + j.D * j.Dv);
            }
            if (j.dk || j.dv) {
#pragma omp for schedule(static)
                for (int64_t bh = 0; bh < BH; bh++) {
                    lb_nc_state st;
                    lb_nc_state_carve(states + (size_t)bh * stf, j.D, j.Dv, &st);
                    lb_nc_total(nseg, parts + (size_t)(bh * nseg) * pstride, j.D, j.Dv, st.dS,
                                st.dST, st.dz);
                }
#pragma omp for schedule(dynamic)
                for (int64_t x = 0; x < BH * nseg; x++) {
                    const int64_t bh = x / nseg, g = x % nseg, t0 = g * LB_SEG;
                    lb_nc_state st;
                    lb_nc_state_carve(states + (size_t)bh * stf, j.D, j.Dv, &st);
                    lb_nc_kv(&j, bh / j.H, bh % j.H, t0, t0 + LB_SEG < j.N ? t0 + LB_SEG : j.N, &s,
                             &st);
                }
            }
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
