/* CPU softmax attention (SPEC §1), FlashAttention-style online softmax.
 *
 * Work decomposition: one task = (batch b, query head h, tile of BQ query
 * rows). A task walks the keys of its kv head in tiles of BK:
 *
 *     S   = (scale·Q_tile) K_tileᵀ                 la_sgemm, BQ×BK
 *     m'  = max(m, rowmax S)                        (masked entries are −inf)
 *     P   = exp(S − m'),  α = exp(m − m')
 *     l   = α·l + rowsum P,   O = α·O + P V_tile    la_sgemm, BQ×Dv
 *
 * and finally o = O / l, lse = m + ln l. Memory is O(BQ·BK) per thread plus
 * the packed K/V panels (O(N) per head): the N×N matrix never exists.
 *
 * K and V: a (b, kv head) panel is used by H/Hk query heads and every query
 * tile, so it is packed once: K transposed into zero-padded tiles of
 * LA_SOFTMAX_KT keys (D × KT each), so that S = Q·Kᵀ runs on la_bwd_acc
 * (src/cpu/bwd_gemm.h, register-blocked AVX-512) with no packing copy per
 * call; V into contiguous f32 rows (la_gather_bnhd_rows) — unless it already
 * is f32 with unit inner stride, in which case O += P·V reads it in place.
 * Panels are packed in groups bounded by LA_SOFTMAX_PACK_BUDGET bytes.
 *
 * Causal masking is bottom-right aligned: query row i sees keys
 * s <= i + (Nk − Nq). When Nq > Nk the first Nq − Nk rows see no key at
 * all; such a row gives o = 0 and lse = −inf (never NaN). NaN in the inputs
 * propagates to the affected rows (the row max ignores NaN, but the sums
 * do not), Inf gives NaN as in the textbook formula; nothing crashes.
 *
 * GQA: query head h reads kv head h / (H/Hk) (consecutive query heads share
 * a kv head, as in flash-attn). */
#include "cpu/softmax_cpu.h"
#include "cpu/bwd_gemm.h"

#include <stdlib.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define LA_SOFTMAX_PACK_BUDGET ((size_t)256 << 20)

/* A (b, kv head) panel of K or V as f32 rows: base pointer and row stride. */
typedef struct panel {
    const float *p;
    int64_t ld;
} panel;

/* Read in place when rows are f32 with unit inner stride and a row stride
 * the BLAS interface (int) can take. */
static bool view_is_direct(const la_tensor *t) {
    return t->dtype == LA_F32 && t->nb[3] == 1 && t->nb[1] >= t->ne[3] && t->nb[1] <= INT32_MAX;
}

static panel direct_panel(const la_tensor *t, int64_t b, int64_t h) {
    panel r = {(const float *)t->data + b * t->nb[0] + h * t->nb[2], t->nb[1]};
    return r;
}

/* Row max of n scores, starting from m (NaN entries are skipped). */
static inline float row_max(const float *s, int64_t n, float m) {
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n; j++) m = s[j] > m ? s[j] : m;
    return m;
}

/* s[j] = exp(s[j] − m) in place; returns the sum. */
static inline float exp_sub_sum(float *s, int64_t n, float m) {
    float sum = 0.f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        float e = la_expf_nonpos(s[j] - m);
        s[j] = e;
        sum += e;
    }
    return sum;
}

/* Per-thread scratch, carved from one workspace block. */
typedef struct scratch {
    float *q;     /* BQ × D   (scaled query tile)   */
    float *s;     /* BQ × BK  (scores, then probs)  */
    float *o;     /* BQ × Dv  (unnormalized output) */
    float *m, *l; /* BQ                              */
} scratch;

/* The online-softmax step of one key tile for bq rows: the scores w->s
 * (bq × bk, row stride LA_SOFTMAX_BK) become P = exp(S − m'), and m, l and
 * the rows of O are updated. mask: row i sees columns c <= i + lim0 only.
 * Its own function (not inlined into the OpenMP region), so that GCC keeps
 * the 512-bit vectors LA_VEC512 asks for. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
LA_VEC512 static void softmax_rows(scratch *w, int64_t bq, int64_t bk, int64_t Dv, bool mask,
                                   int64_t lim0) {
    const int64_t BK = LA_SOFTMAX_BK;
    for (int64_t i = 0; i < bq; i++) {
        float *s = w->s + i * BK;
        if (mask) {
            int64_t first_hidden = lim0 + i + 1; /* column index */
            if (first_hidden < 0) first_hidden = 0;
            for (int64_t c = first_hidden; c < bk; c++) s[c] = -INFINITY;
        }
        const float m_old = w->m[i];
        const float m_new = row_max(s, bk, m_old);
        /* All −inf so far (masked, or NaN scores): subtract 0 instead, so
         * masked entries give exp(−inf) = 0 and NaN stays NaN. */
        const float m_use = m_new == -INFINITY ? 0.f : m_new;
        const float rs = exp_sub_sum(s, bk, m_use);
        const float alpha = la_expf_nonpos(m_old - m_use);
        w->l[i] = w->l[i] * alpha + rs;
        w->m[i] = m_new;
        if (alpha != 1.f) {
            float *o = w->o + i * Dv;
            for (int64_t d = 0; d < Dv; d++) o[d] *= alpha;
        }
    }
}

/* One task: query rows [i0, i0+bq) of head h in batch b, against the kv
 * panel of length Nk: kt its transposed key tiles, vp its value rows. */
static void softmax_tile(int causal, float scale, const la_tensor *q, const float *kt,
                         panel vp,
                         int64_t Nk, la_tensor *out, la_tensor *lse, int64_t b, int64_t h,
                         int64_t i0, int64_t bq, scratch *w) {
    const int64_t D = q->ne[3], Dv = out->ne[3], Nq = q->ne[1];
    const int64_t BK = LA_SOFTMAX_BK;
    const int64_t off = Nk - Nq; /* row i sees keys s <= i + off when causal */

    la_gather_bnhd_rows(q, b, h, i0, bq, w->q, D);
    for (int64_t x = 0; x < bq * D; x++) w->q[x] *= scale;
    for (int64_t i = 0; i < bq; i++) {
        w->m[i] = -INFINITY;
        w->l[i] = 0.f;
    }
    memset(w->o, 0, (size_t)(bq * Dv) * sizeof(float));

    /* Keys past the last row's limit are invisible to the whole tile. */
    int64_t kend = Nk;
    if (causal) {
        int64_t last = i0 + bq - 1 + off + 1;
        kend = last < Nk ? (last > 0 ? last : 0) : Nk;
    }
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        const int64_t bk = kend - j0 < BK ? kend - j0 : BK;
        /* S = Q·Kᵀ against the transposed tiles (all KT columns of each: the
         * padding past Nk is zero and never read below) */
        for (int64_t c0 = 0; c0 < bk; c0 += LA_SOFTMAX_KT)
            la_bwd_acc(bq, LA_SOFTMAX_KT, D, 1.f, w->q, D, 1,
                       kt + ((j0 + c0) / LA_SOFTMAX_KT) * D * LA_SOFTMAX_KT, LA_SOFTMAX_KT,
                       w->s + c0, BK, 0.f);
        softmax_rows(w, bq, bk, Dv, causal && j0 + bk - 1 > i0 + off, i0 + off - j0);
        la_bwd_acc(bq, Dv, bk, 1.f, w->s, BK, 1, vp.p + j0 * vp.ld, vp.ld, w->o, Dv, 1.f);
    }

    for (int64_t i = 0; i < bq; i++) {
        float *o = w->o + i * Dv;
        const float l = w->l[i];
        float row_lse;
        if (l == 0.f) { /* no visible key (causal with Nq > Nk) */
            for (int64_t d = 0; d < Dv; d++) o[d] = 0.f;
            row_lse = -INFINITY;
        } else {
            const float inv = 1.f / l;
            for (int64_t d = 0; d < Dv; d++) o[d] *= inv;
            row_lse = (w->m[i] == -INFINITY ? 0.f : w->m[i]) + logf(l);
        }
        if (lse) la_store_f32(lse, la_off3(lse, b, i0 + i, h), row_lse);
    }
    la_scatter_bnhd_rows(out, b, h, i0, bq, w->o, Dv);
}

la_status la_softmax_cpu(int causal, float scale, const la_tensor *q, const la_tensor *k,
                         const la_tensor *v, la_tensor *out, la_tensor *lse, la_context *ctx) {
    const int64_t B = q->ne[0], Nq = q->ne[1], H = q->ne[2], D = q->ne[3];
    const int64_t Nk = k->ne[1], Hk = k->ne[2], Dv = v->ne[3];
    const int64_t rep = H / Hk; /* query heads per kv head */
    const int64_t BQ = LA_SOFTMAX_BQ, BK = LA_SOFTMAX_BK;
    const int nthreads = la_ctx_threads(ctx);

    /* Per-thread scratch (floats): BQ·D + BQ·BK + BQ·Dv + 2·BQ. */
    size_t per_thread, t1, t2, ws_bytes;
    LA_TRY(la_mul_size((size_t)BQ, (size_t)D + (size_t)BK + (size_t)Dv + 2, &per_thread,
                       "softmax scratch"));
    per_thread = (per_thread + 15) & ~(size_t)15; /* slices 64 bytes apart: no false sharing */
    LA_TRY(la_mul_size(per_thread, (size_t)nthreads, &t1, "softmax scratch"));

    /* Packed panels, in groups of `group` (b, kv head) pairs: the transposed
     * key tiles, and V unless it is read in place. */
    const bool v_direct = view_is_direct(v), k_f32 = k->dtype == LA_F32 && k->nb[3] == 1;
    const int64_t nkt = (Nk + LA_SOFTMAX_KT - 1) / LA_SOFTMAX_KT;
    size_t panel_floats, kt_floats, v_floats = 0, panel_bytes;
    int64_t npanels = B * Hk, group = npanels;
    LA_TRY(la_mul_size((size_t)nkt * LA_SOFTMAX_KT, (size_t)D, &kt_floats, "softmax K panel"));
    if (!v_direct) LA_TRY(la_mul_size((size_t)Nk, (size_t)Dv, &v_floats, "softmax V panel"));
    panel_floats = kt_floats + v_floats;
    if (panel_floats < kt_floats) return la_err(LA_ERR_OVERFLOW, "softmax K/V panel size overflows");
    LA_TRY(la_mul_size(panel_floats, sizeof(float), &panel_bytes, "softmax K/V panel"));
    if (panel_bytes > 0) {
        int64_t fit = (int64_t)(LA_SOFTMAX_PACK_BUDGET / panel_bytes);
        if (fit < 1) fit = 1;
        group = npanels < fit ? npanels : fit;
    }
    LA_TRY(la_mul_size(panel_floats, (size_t)(group > 0 ? group : 1), &t2, "softmax K/V panels"));
    if (t1 + t2 < t1) return la_err(LA_ERR_OVERFLOW, "softmax workspace size overflows");
    LA_TRY(la_mul_size(t1 + t2, sizeof(float), &ws_bytes, "softmax workspace"));

    float *ws = (float *)la_ws_alloc(ctx, ws_bytes);
    if (!ws) return LA_ERR_NOMEM;
    float *packed = ws + t1;

    const int64_t nqt = (Nq + BQ - 1) / BQ;
    for (int64_t g0 = 0; g0 < npanels; g0 += group) {
        const int64_t gn = npanels - g0 < group ? npanels - g0 : group;
        const int64_t ntasks = gn * rep * nqt;
#pragma omp parallel num_threads(nthreads)
        {
            const int tid = la_thread_id();
            float *base = ws + (size_t)tid * per_thread;
            scratch w = {base, base + BQ * D, base + BQ * (D + BK), base + BQ * (D + BK + Dv),
                         base + BQ * (D + BK + Dv) + BQ};
#pragma omp for schedule(static)
            for (int64_t p = 0; p < gn; p++) {
                const int64_t b = (g0 + p) / Hk, hk = (g0 + p) % Hk;
                float *kt = packed + (size_t)p * panel_floats;
                for (int64_t t = 0; t < nkt; t++) {
                    float *tile = kt + t * D * LA_SOFTMAX_KT;
                    const int64_t s0 = t * LA_SOFTMAX_KT;
                    const int64_t bk = Nk - s0 < LA_SOFTMAX_KT ? Nk - s0 : LA_SOFTMAX_KT;
                    memset(tile, 0, (size_t)(D * LA_SOFTMAX_KT) * sizeof(float));
                    for (int64_t c = 0; c < bk; c++) {
                        const int64_t ob = la_off4(k, b, s0 + c, hk, 0);
                        if (k_f32) {
                            const float *kr = (const float *)k->data + ob;
                            for (int64_t d = 0; d < D; d++) tile[d * LA_SOFTMAX_KT + c] = kr[d];
                        } else {
                            for (int64_t d = 0; d < D; d++)
                                tile[d * LA_SOFTMAX_KT + c] = la_load_f32(k, ob + d * k->nb[3]);
                        }
                    }
                }
                if (!v_direct) la_gather_bnhd_rows(v, b, hk, 0, Nk, kt + kt_floats, Dv);
            }
            /* Task order: the last query tiles (the most keys under a causal
             * mask) first, so dynamic scheduling balances the tail. */
#pragma omp for schedule(dynamic, 1)
            for (int64_t t = 0; t < ntasks; t++) {
                const int64_t qt = nqt - 1 - t / (gn * rep);
                const int64_t ph = t % (gn * rep);
                const int64_t p = ph / rep, r = ph % rep;
                const int64_t b = (g0 + p) / Hk, hk = (g0 + p) % Hk, h = hk * rep + r;
                const float *kt = packed + (size_t)p * panel_floats;
                panel vp = v_direct ? direct_panel(v, b, hk) : (panel){kt + kt_floats, Dv};
                const int64_t i0 = qt * BQ, bq = Nq - i0 < BQ ? Nq - i0 : BQ;
                softmax_tile(causal, scale, q, kt, vp, Nk, out, lse, b, h, i0, bq, &w);
            }
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
