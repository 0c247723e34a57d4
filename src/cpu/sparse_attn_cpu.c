/* Sparse attention over selected keys, MQA mode of MLA (SPEC §8), on the CPU.
 *
 *   o[t,h] = Σ_{s∈T_t} softmax_s(scale · q[t,h]·kv[s]) · kv[s][:dv]
 *
 * Work item = (query t, kv head g). All query heads that read kv head g (all
 * Hq heads in MQA mode) share the gathered latent rows, so each chunk of up to
 * 128 selected rows is gathered once into an f32 panel and used twice: as keys
 * (S = Q_g · Kᵀ over Dqk) and, through its first dv columns, as values
 * (O += P · K[:, :dv]). Online softmax across chunks keeps memory O(chunk).
 * Indices < 0 or >= L are skipped before any read. NaN propagates: a NaN
 * query or selected row gives NaN out and lse (−inf is only "no valid key"). */
#include <stdint.h>
#include <stdlib.h>

#include "cpu/sparse_cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define SA_CHUNK 128

/* First query head that uses kv head g: smallest h with ⌊h·Hkv/Hq⌋ >= g. */
static inline int64_t first_head(int64_t g, int64_t Hq, int64_t Hkv) {
    return (g * Hq + Hkv - 1) / Hkv;
}

la_status la_sparse_attn_cpu(const la_tensor *q, const la_tensor *kv, const la_tensor *idx,
                             int64_t dv, float scale, la_tensor *out, la_tensor *lse,
                             la_context *ctx) {
    const int64_t T = q->ne[0], Hq = q->ne[1], Dqk = q->ne[2];
    const int64_t L = kv->ne[0], Hkv = kv->ndim == 3 ? kv->ne[1] : 1;
    const int64_t K = idx->ne[1];
    const int nth = la_ctx_threads(ctx);
    const int64_t Gmax = (Hq + Hkv - 1) / Hkv; /* largest group of query heads per kv head */

    /* per thread: Q panel [Gmax][Dqk], KV panel [SA_CHUNK][Dqk], S [Gmax][SA_CHUNK],
     * O [Gmax][dv], m and l [Gmax], the valid positions of one row [K] */
    size_t per = 0, t1;
    LA_TRY(la_mul_size((size_t)Gmax, (size_t)Dqk, &t1, "sparse-attn: q panel"));
    per += t1;
    LA_TRY(la_mul_size((size_t)SA_CHUNK, (size_t)Dqk, &t1, "sparse-attn: kv panel"));
    per += t1;
    per += (size_t)Gmax * SA_CHUNK;
    LA_TRY(la_mul_size((size_t)Gmax, (size_t)dv, &t1, "sparse-attn: accumulator"));
    per += t1 + 2u * (size_t)Gmax + (size_t)K + 16u;
    size_t bytes;
    LA_TRY(la_mul_size(per, (size_t)nth * sizeof(float), &bytes, "sparse-attn: workspace"));
    float *ws = la_ws_alloc(ctx, bytes);
    if (!ws) return LA_ERR_NOMEM;

    const int32_t *ix = (const int32_t *)idx->data;
#pragma omp parallel for num_threads(nth) schedule(dynamic, 1) collapse(2)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t g = 0; g < Hkv; g++) {
            const int tid = la_thread_id();
            const int64_t h0 = first_head(g, Hq, Hkv), h1 = first_head(g + 1, Hq, Hkv);
            const int64_t G = h1 - h0;
            if (G <= 0) continue; /* kv head used by no query head */
            float *Qp = ws + (size_t)tid * per;
            float *Kp = Qp + Gmax * Dqk;
            float *S = Kp + SA_CHUNK * Dqk;
            float *O = S + Gmax * SA_CHUNK;
            float *mx = O + Gmax * dv;
            float *sum = mx + Gmax;
            int32_t *pos = (int32_t *)(sum + Gmax);

            int64_t nv = 0; /* valid selected keys, in the order given */
            for (int64_t j = 0; j < K; j++) {
                const int32_t s = ix[la_off2(idx, t, j)];
                if (s >= 0 && s < L) pos[nv++] = s;
            }
            for (int64_t r = 0; r < G; r++) {
                for (int64_t d = 0; d < Dqk; d++) Qp[r * Dqk + d] = la_load_f32(q, la_off3(q, t, h0 + r, d));
                for (int64_t d = 0; d < dv; d++) O[r * dv + d] = 0.f;
                mx[r] = -INFINITY;
                sum[r] = 0.f;
            }
            for (int64_t c0 = 0; c0 < nv; c0 += SA_CHUNK) {
                const int64_t n = nv - c0 < SA_CHUNK ? nv - c0 : SA_CHUNK;
                for (int64_t j = 0; j < n; j++) {
                    const int64_t s = pos[c0 + j];
                    float *dst = Kp + j * Dqk;
                    if (kv->dtype == LA_F32 && kv->nb[kv->ndim - 1] == 1) {
                        const float *src = (const float *)kv->data +
                                           (kv->ndim == 3 ? la_off3(kv, s, g, 0) : la_off2(kv, s, 0));
                        memcpy(dst, src, (size_t)Dqk * sizeof(float));
                    } else {
                        for (int64_t d = 0; d < Dqk; d++)
                            dst[d] = la_load_f32(kv, kv->ndim == 3 ? la_off3(kv, s, g, d) : la_off2(kv, s, d));
                    }
                }
                /* S = scale · Q Kᵀ */
                la_sgemm(false, true, G, n, Dqk, scale, Qp, Dqk, Kp, Dqk, 0.f, S, SA_CHUNK);
                for (int64_t r = 0; r < G; r++) {
                    float *sr = S + r * SA_CHUNK;
                    float m_new = mx[r];
                    for (int64_t j = 0; j < n; j++) m_new = sr[j] > m_new ? sr[j] : m_new;
                    /* rescale what was accumulated under the old maximum */
                    const float alpha = mx[r] == -INFINITY ? 0.f : expf(mx[r] - m_new);
                    float ls = 0.f;
                    for (int64_t j = 0; j < n; j++) {
                        sr[j] = expf(sr[j] - m_new);
                        ls += sr[j];
                    }
                    sum[r] = sum[r] * alpha + ls;
                    mx[r] = m_new;
                    if (alpha != 1.f)
                        for (int64_t d = 0; d < dv; d++) O[r * dv + d] *= alpha;
                }
                /* O += P · V, V = the first dv columns of the same panel */
                la_sgemm(false, false, G, dv, n, 1.f, S, SA_CHUNK, Kp, Dqk, 1.f, O, dv);
            }
            for (int64_t r = 0; r < G; r++) {
                const int64_t h = h0 + r;
                /* no valid key (sum = 0): o = 0, lse = −inf. A NaN score (a NaN
                 * in q or in a selected row) makes sum NaN, so o and lse are
                 * NaN, as torch's softmax gives. */
                const float inv = sum[r] == 0.f ? 0.f : 1.f / sum[r];
                for (int64_t d = 0; d < dv; d++) la_store_f32(out, la_off3(out, t, h, d), O[r * dv + d] * inv);
                if (lse)
                    la_store_f32(lse, la_off2(lse, t, h), sum[r] == 0.f ? -INFINITY : mx[r] + logf(sum[r]));
            }
        }
    }
    la_ws_free(ctx, ws);
    return LA_OK;
}
