/* CPU sparse attention backward (TRAINING.md §1, SPEC §8, MQA mode of MLA).
 *
 * With P_j = exp(scale·q·kv_{s_j} − lse) over the selected keys of a query
 * row, Δ = dO·o, dP_j = dO·kv_{s_j}[:dv] and dS_j = P_j (dP_j − Δ):
 *     dq          = scale · Σ_j dS_j kv_{s_j}
 *     dkv_s[:Dqk] = scale · Σ dS_j q      (key role, over every (t, h, j) with s_j = s)
 *     dkv_s[:dv] += Σ P_j dO              (value role)
 * Pass 1, one task per (query, kv head), forms dq with the forward's chunked
 * GEMMs. Pass 2 is the per-key reduction without atomics: the selections are
 * inverted into per-key lists of queries (in query order, then selection
 * order), and one task per (key, kv head) recomputes its P_j, dS_j and sums
 * them in that fixed order: deterministic. Memory: packed f32 inputs, the
 * inverted lists (one int64 per valid selection) and Δ, lse per (t, h). */
#include "cpu/backward_cpu.h"

#include <stdlib.h>

#define SB_CHUNK 128

static inline int64_t first_head(int64_t g, int64_t Hq, int64_t Hkv) {
    return (g * Hq + Hkv - 1) / Hkv;
}

la_status la_sparse_attention_backward_cpu(const la_tensor *q, const la_tensor *kv,
                                           const la_tensor *idx, const la_tensor *out,
                                           const la_tensor *lse, const la_tensor *d_out,
                                           int64_t dv, float scale, la_tensor *dq, la_tensor *dkv,
                                           la_context *ctx) {
    const int64_t T = q->ne[0], Hq = q->ne[1], Dqk = q->ne[2];
    const int64_t L = kv->ne[0], Hkv = kv->ndim == 3 ? kv->ne[1] : 1, K = idx->ne[1];
    const int nth = la_ctx_threads(ctx);
    const int64_t Gmax = (Hq + Hkv - 1) / Hkv;
    if (!dq && !dkv) return LA_OK;

    size_t nq, nd, nk, per, tot, bytes, nsel;
    LA_TRY(la_mul_size((size_t)(T * Hq), (size_t)Dqk, &nq, "sparse-attn backward: q panel"));
    LA_TRY(la_mul_size((size_t)(T * Hq), (size_t)dv, &nd, "sparse-attn backward: d_out panel"));
    LA_TRY(la_mul_size((size_t)(L * Hkv), (size_t)Dqk, &nk, "sparse-attn backward: kv panel"));
    per = (size_t)SB_CHUNK * (size_t)Dqk + 2 * (size_t)Gmax * SB_CHUNK + (size_t)Gmax * (size_t)Dqk +
          (size_t)Dqk + (size_t)Gmax * 4;
    LA_TRY(la_mul_size(per, (size_t)nth, &tot, "sparse-attn backward: tiles"));
    tot += nq + nd + nk + 2 * (size_t)(T * Hq);
    LA_TRY(la_mul_size(tot, sizeof(float), &bytes, "sparse-attn backward: workspace"));
    LA_TRY(la_mul_size((size_t)T, (size_t)K, &nsel, "sparse-attn backward: selections"));
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;
    float *Qp = ws, *Gp = Qp + nq, *KVp = Gp + nd, *Dl = KVp + nk, *Ls = Dl + T * Hq;
    float *tiles = Ls + T * Hq;
    const int32_t *ix = (const int32_t *)idx->data;

#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t t = 0; t < T; t++)
        for (int64_t h = 0; h < Hq; h++) {
            float *qr = Qp + (t * Hq + h) * Dqk, *gr = Gp + (t * Hq + h) * dv;
            for (int64_t d = 0; d < Dqk; d++) qr[d] = la_load_f32(q, la_off3(q, t, h, d));
            double acc = 0;
            for (int64_t e = 0; e < dv; e++) {
                gr[e] = la_load_f32(d_out, la_off3(d_out, t, h, e));
                acc += (double)gr[e] * la_load_f32(out, la_off3(out, t, h, e));
            }
            Dl[t * Hq + h] = (float)acc;
            Ls[t * Hq + h] = la_load_f32(lse, la_off2(lse, t, h));
        }
#pragma omp parallel for num_threads(nth) schedule(static)
    for (int64_t s = 0; s < L; s++)
        for (int64_t g = 0; g < Hkv; g++)
            for (int64_t d = 0; d < Dqk; d++)
                KVp[(s * Hkv + g) * Dqk + d] =
                    la_load_f32(kv, kv->ndim == 3 ? la_off3(kv, s, g, d) : la_off2(kv, s, d));

    /* P and dS of rows r of a head group against n packed key rows. */
    if (dq) {
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) collapse(2)
        for (int64_t t = 0; t < T; t++)
            for (int64_t g = 0; g < Hkv; g++) {
                const int64_t h0 = first_head(g, Hq, Hkv), G = first_head(g + 1, Hq, Hkv) - h0;
                if (G <= 0) continue;
                float *Kp = tiles + (size_t)la_thread_id() * per, *P = Kp + SB_CHUNK * Dqk;
                float *dP = P + Gmax * SB_CHUNK, *acc = dP + Gmax * SB_CHUNK;
                memset(acc, 0, (size_t)(G * Dqk) * sizeof(float));
                int64_t j = 0;
                while (j < K) {
                    int64_t n = 0;
                    for (; j < K && n < SB_CHUNK; j++) {
                        const int32_t s = ix[la_off2(idx, t, j)];
                        if (s < 0 || s >= L) continue;
                        memcpy(Kp + n * Dqk, KVp + (s * Hkv + g) * Dqk, (size_t)Dqk * sizeof(float));
                        n++;
                    }
                    if (n == 0) break;
                    const float *Q = Qp + (t * Hq + h0) * Dqk, *Gd = Gp + (t * Hq + h0) * dv;
                    la_sgemm(false, true, G, n, Dqk, scale, Q, Dqk, Kp, Dqk, 0.f, P, SB_CHUNK);
                    la_sgemm(false, true, G, n, dv, 1.f, Gd, dv, Kp, Dqk, 0.f, dP, SB_CHUNK);
                    for (int64_t r = 0; r < G; r++) {
                        const float l = Ls[t * Hq + h0 + r], dd = Dl[t * Hq + h0 + r];
                        for (int64_t c = 0; c < n; c++) {
                            const float pe = l == -INFINITY ? 0.f : expf(P[r * SB_CHUNK + c] - l);
                            dP[r * SB_CHUNK + c] = pe * (dP[r * SB_CHUNK + c] - dd);
                        }
                    }
                    la_sgemm(false, false, G, Dqk, n, scale, dP, SB_CHUNK, Kp, Dqk, 1.f, acc, Dqk);
                }
                for (int64_t r = 0; r < G; r++)
                    for (int64_t d = 0; d < Dqk; d++)
                        la_store_f32(dq, la_off3(dq, t, h0 + r, d), acc[r * Dqk + d]);
            }
    }
    if (dkv) {
        int64_t *start = la_ws_alloc(ctx, ((size_t)L + 1 + nsel) * sizeof(int64_t));
        if (!start) {
            la_ws_free(ctx, ws);
            return LA_ERR_NOMEM;
        }
        int64_t *list = start + L + 1;
        for (int64_t s = 0; s <= L; s++) start[s] = 0;
        for (int64_t t = 0; t < T; t++)
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = ix[la_off2(idx, t, j)];
                if (s >= 0 && s < L) start[s + 1]++;
            }
        for (int64_t s = 0; s < L; s++) start[s + 1] += start[s];
        for (int64_t t = 0; t < T; t++) /* in query order: fills each list in that order */
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = ix[la_off2(idx, t, j)];
                if (s >= 0 && s < L) list[start[s]++] = t;
            }
        for (int64_t s = L; s > 0; s--) start[s] = start[s - 1];
        start[0] = 0;
#pragma omp parallel for num_threads(nth) schedule(dynamic, 16) collapse(2)
        for (int64_t s = 0; s < L; s++)
            for (int64_t g = 0; g < Hkv; g++) {
                const int64_t h0 = first_head(g, Hq, Hkv), G = first_head(g + 1, Hq, Hkv) - h0;
                float *acc = tiles + (size_t)la_thread_id() * per;
                const float *kr = KVp + (s * Hkv + g) * Dqk;
                memset(acc, 0, (size_t)Dqk * sizeof(float));
                for (int64_t e = start[s]; e < start[s + 1] && G > 0; e++) {
                    const int64_t t = list[e];
                    for (int64_t r = 0; r < G; r++) {
                        const int64_t h = h0 + r;
                        const float l = Ls[t * Hq + h];
                        if (l == -INFINITY) continue;
                        const float *qr = Qp + (t * Hq + h) * Dqk, *gr = Gp + (t * Hq + h) * dv;
                        float sc = 0.f, dp = 0.f;
#pragma omp simd reduction(+ : sc)
                        for (int64_t d = 0; d < Dqk; d++) sc += qr[d] * kr[d];
#pragma omp simd reduction(+ : dp)
                        for (int64_t d = 0; d < dv; d++) dp += gr[d] * kr[d];
                        const float pe = expf(scale * sc - l);
                        const float ds = scale * pe * (dp - Dl[t * Hq + h]);
#pragma omp simd
                        for (int64_t d = 0; d < dv; d++) acc[d] += ds * qr[d] + pe * gr[d];
#pragma omp simd
                        for (int64_t d = dv; d < Dqk; d++) acc[d] += ds * qr[d];
                    }
                }
                for (int64_t d = 0; d < Dqk; d++)
                    la_store_f32(dkv, kv->ndim == 3 ? la_off3(dkv, s, g, d) : la_off2(dkv, s, d), acc[d]);
            }
        la_ws_free(ctx, start);
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
