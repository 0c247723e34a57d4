/* Focused linear attention on the CPU (SPEC §4, both variants).
 *
 * Per batch element: v is read once into contiguous f32 rows, then three
 * passes over the tokens:
 *   1. feature maps over all C = H*d channels of each token (the flatten
 *      norms span every head, so a token's whole row is needed at once; f_p
 *      in float, la_flatten_focus_row_f32, the backward's own rows);
 *      blog: phi(K) then the depthwise conv over the Hm x Wm map, times focus.
 *   2. per-head summaries S = sum_n k~_n v_n^T and z = sum_n k~_n, formed as
 *      fixed-size token chunks (one la_bwd_acc tile product each) whose
 *      partial sums are added in float64 in chunk order: the result does not
 *      depend on the thread count, and a sum over a million tokens keeps its
 *      digits.
 *   3. outputs in row tiles: q~ S, the normalizer, and (flatten) the
 *      depthwise conv of v with its bias.
 * Everything is fp32 except the partial-sum reduction and the normalizer dot
 * products, which are float64 (they are cheap and they grow with N).
 */
#include "cpu/focused_cpu.h"
#include "cpu/bwd_gemm.h" /* LA_VEC512 */


#define FOC_TILE 64 /* output rows per task in pass 3 */

void la_flatten_focus_row(const double *x, const double *inv_sp, int64_t C, double p,
                          double *out) {
    const double inv_ln2 = 1.0 / log(2.0); /* softplus(0) = ln 2 */
    double mx = 0.0, n2 = 0.0;
    for (int64_t c = 0; c < C; c++) {
        double xp = (la_relu_f64(x[c]) + 1e-6) * (inv_sp ? inv_sp[c] : inv_ln2);
        out[c] = xp;
        n2 += xp * xp;
        if (xp > mx) mx = xp;
    }
    const double norm = sqrt(n2);
    /* integer powers (p = 3 is the default) by multiplication: exact and fast */
    const int ip = (p == floor(p) && p >= 1 && p <= 8) ? (int)p : 0;
    double np2 = 0.0;
    const double inv_mx = 1.0 / mx;
    for (int64_t c = 0; c < C; c++) {
        double u = out[c] * inv_mx, up;
        if (ip) {
            up = u;
            for (int e = 1; e < ip; e++) up *= u;
        } else {
            up = pow(u, p);
        }
        out[c] = up;
        np2 += up * up;
    }
    /* the largest u is 1, so np2 >= 1: no division by zero */
    const double f = norm / sqrt(np2);
    for (int64_t c = 0; c < C; c++) out[c] *= f;
}

/* f_p of one token in float (the forward's q̃, k̃ and the backward's rebuild
 * of them): x (C), isp =
 * 1/softplus(s) per channel, ip > 0 an integer power (else powf of p);
 * y = ‖x'‖·x'^p/‖x'^p‖, x' = (relu(x)+1e-6)·isp. Every term of the sums is
 * non-negative and the largest u is 1, so float loses nothing that matters
 * against the 1e-4 gradient bound. A NaN in x makes ‖x'‖ and so the whole
 * row NaN (the forward's NaN rule). */
LA_VEC512 void la_flatten_focus_row_f32(const float *x, const float *isp, int64_t C, int ip,
                                        float p, float *y) {
    float nx2 = 0.f, mx = 0.f;
#pragma omp simd reduction(+ : nx2) reduction(max : mx)
    for (int64_t c = 0; c < C; c++) {
        const float xp = ((x[c] < 0.f ? 0.f : x[c]) + 1e-6f) * isp[c]; /* NaN stays NaN */
        y[c] = xp;
        nx2 += xp * xp;
        mx = xp > mx ? xp : mx;
    }
    const float imx = 1.f / mx;
    float nu2 = 0.f;
    if (ip == 3) {
#pragma omp simd reduction(+ : nu2)
        for (int64_t c = 0; c < C; c++) {
            const float u = y[c] * imx, up = u * u * u;
            y[c] = up;
            nu2 += up * up;
        }
    } else {
        for (int64_t c = 0; c < C; c++) {
            const float u = y[c] * imx;
            float up = u;
            if (ip)
                for (int e = 1; e < ip; e++) up *= u;
            else
                up = powf(u, p);
            y[c] = up;
            nu2 += up * up;
        }
    }
    const float f = sqrtf(nx2) / sqrtf(nu2);
#pragma omp simd
    for (int64_t c = 0; c < C; c++) y[c] *= f;
}

/* Small parameter arrays (conv weights, bias, softplus, focus) copied to
 * contiguous f32/f64 so the inner loops do not go through strides. */
static void load_conv(const la_tensor *conv, float *w /* [k*k][Cc] */) {
    const int64_t Cc = conv->ne[0];
    for (int64_t c = 0; c < Cc; c++)
        for (int64_t a = 0; a < conv->ne[1]; a++)
            for (int64_t b = 0; b < conv->ne[2]; b++)
                w[(a * conv->ne[2] + b) * Cc + c] = la_load_f32(conv, la_off3(conv, c, a, b));
}

/* One output row of pass 3: o (Dv, holding q̃·S) divided by the normalizer
 * q̃·z + eps (float64 dot), then with Wc (flatten's conv), o += bias +
 * Σ_taps w ∘ v over token n's k×k window of the map (v: this head's rows,
 * row stride ld; D = Dv). Its own function so that GCC keeps the 512-bit
 * vectors LA_VEC512 asks for. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
LA_VEC512 static void foc_out_row(float *restrict o, const float *restrict qr,
                                  const float *restrict z, int64_t D, int64_t Dv, float eps,
                                  const float *Wc, const float *bias, const float *v, int64_t ld,
                                  int64_t n, int64_t Hm, int64_t Wm, int64_t ks) {
    double den = 0.0;
#pragma omp simd reduction(+ : den)
    for (int64_t j = 0; j < D; j++) den += (double)qr[j] * z[j];
    const float inv = (float)(1.0 / (den + eps));
    for (int64_t e = 0; e < Dv; e++) o[e] *= inv;
    if (!Wc) return;
    for (int64_t j = 0; j < D; j++) o[j] += bias[j];
    la_dwconv_acc(o, v, ld, Wc, n / Wm, n % Wm, Hm, Wm, ks, D);
}

la_status la_focused_cpu(const la_focused_params *p, const la_tensor *q, const la_tensor *k,
                         const la_tensor *v, const la_tensor *conv, const la_tensor *conv_bias,
                         const la_tensor *softplus_param, const la_tensor *focus, la_tensor *out,
                         la_context *ctx) {
    const int64_t B = q->ne[0], N = q->ne[1], H = q->ne[2], D = q->ne[3], Dv = v->ne[3];
    const int64_t C = H * D, Hm = p->map_h, Wm = p->map_w;
    const int blog = p->variant == LA_FOCUSED_BLOG;
    const int64_t ks = conv ? conv->ne[1] : 1, Cc = blog ? C : D;
    const int nt = la_ctx_threads(ctx);

    /* chunking of pass 2: depends on N only (deterministic sums) */
    int64_t chunk = (N + 63) / 64;
    if (chunk < 256) chunk = 256;
    const int64_t nchunk = (N + chunk - 1) / chunk;
    const int64_t sz = D * Dv + D; /* one partial: S then z */

    /* workspace sizes, overflow-checked */
    size_t nc, nv, feat, part, thr, tmp, wsz;
    LA_TRY(la_mul_size((size_t)N, (size_t)C, &nc, "focused: N*H*D"));
    LA_TRY(la_mul_size((size_t)N, (size_t)(H * Dv), &nv, "focused: N*H*Dv"));
    LA_TRY(la_mul_size(nc, 2, &feat, "focused: feature workspace"));
    if (feat + nv < feat) return la_err(LA_ERR_OVERFLOW, "focused: workspace size overflows");
    feat += nv;
    LA_TRY(la_mul_size((size_t)(H * nchunk), (size_t)sz, &part, "focused: partial sums"));
    size_t per_thread = (size_t)FOC_TILE * (size_t)(D + Dv + 1);
    LA_TRY(la_mul_size(per_thread, (size_t)nt, &thr, "focused: thread workspace"));
    size_t params = (size_t)(ks * ks * Cc) + (size_t)D + (size_t)H + (size_t)C;
    tmp = feat + part + thr + params + (size_t)H * (size_t)sz;
    if (tmp < feat) return la_err(LA_ERR_OVERFLOW, "focused: workspace size overflows");
    LA_TRY(la_mul_size(tmp, sizeof(float), &wsz, "focused: workspace bytes"));
    float *ws = (float *)la_ws_alloc(ctx, wsz);
    if (!ws) return LA_ERR_NOMEM;
    /* flatten: 1/softplus(s) [C], then per-thread float64 rows x and f_p(x) */
    size_t dwn, dwb;
    la_status st = la_mul_size((size_t)nt * 2 + 1, (size_t)C, &dwn, "focused: row workspace");
    if (st == LA_OK) st = la_mul_size(dwn, sizeof(double), &dwb, "focused: row workspace bytes");
    double *DW = st == LA_OK ? (double *)la_ws_alloc(ctx, dwb) : NULL;
    if (!DW) {
        la_ws_free(ctx, ws);
        return st != LA_OK ? st : LA_ERR_NOMEM;
    }

    float *F1 = ws;                         /* flatten: q~ [N,C];  blog: phi(K) [N,C] */
    float *F2 = F1 + nc;                    /* flatten: k~ [N,C];  blog: K^ [N,C]     */
    float *F3 = F2 + nc;                    /* v as f32 [N, H*Dv] (contiguous rows)  */
    float *P = F3 + nv;                     /* partials [H][nchunk][sz]               */
    float *Sz = P + (size_t)(H * nchunk) * sz; /* summaries [H][sz]                 */
    float *TW = Sz + (size_t)H * sz;        /* per-thread buffers                     */
    float *Wc = TW + (size_t)nt * per_thread; /* conv weights [k*k][Cc]              */
    float *bias = Wc + ks * ks * Cc;        /* [D]                                    */
    float *foc = bias + D;                  /* focus [H]                              */
    float *isp = foc + H;                   /* flatten: 1/softplus(s) [C] in float    */

    if (conv) load_conv(conv, Wc);
    for (int64_t j = 0; j < D; j++)
        bias[j] = conv_bias ? la_load_f32(conv_bias, conv_bias->nb[0] * j) : 0.f;
    for (int64_t c = 0; c < C; c++) {
        double s = softplus_param ? la_load_f32(softplus_param, softplus_param->nb[0] * c) : 0.0;
        DW[c] = 1.0 / la_softplus(s);
        isp[c] = (float)DW[c];
    }
    for (int64_t h = 0; h < H; h++)
        foc[h] = focus ? la_load_f32(focus, focus->nb[0] * h) : 2.0f;

    const double qscale = 1.0 / sqrt((double)D); /* blog: q <- q * d^-1/2 */
    const double p_focus = p->p;
    const float eps = p->eps;
    const int64_t HDv = H * Dv;
    for (int64_t b = 0; b < B; b++) {
        /* ---- v of this batch element as contiguous f32 rows: read once,
         * then used by the summaries (pass 2) and the flatten conv (pass 3) */
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t task = 0; task < H * nchunk; task++) {
            const int64_t h = task / nchunk, n0 = (task % nchunk) * chunk;
            const int64_t len = (n0 + chunk <= N) ? chunk : N - n0;
            la_gather_bnhd_rows(v, b, h, n0, len, F3 + (size_t)n0 * HDv + h * Dv, HDv);
        }

        /* ---- pass 1: feature maps -------------------------------------- */
        if (!blog) {
            /* f_p in float, from the rows in place where q, k are f32 with
             * unit inner stride (else read into a per-thread row) */
            const int ip = (p_focus == floor(p_focus) && p_focus >= 1 && p_focus <= 8) ? (int)p_focus : 0;
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++) {
                float *row = (float *)(DW + C + (size_t)la_thread_id() * 2 * C);
                for (int w = 0; w < 2; w++) {
                    const la_tensor *t = w ? k : q;
                    float *dst = (w ? F2 : F1) + (size_t)n * C;
                    const float *x = row;
                    if (t->dtype == LA_F32 && t->nb[3] == 1 && t->nb[2] == D) {
                        x = (const float *)t->data + la_off4(t, b, n, 0, 0);
                    } else {
                        for (int64_t h = 0; h < H; h++)
                            for (int64_t j = 0; j < D; j++)
                                row[h * D + j] = la_load_f32(t, la_off4(t, b, n, h, j));
                    }
                    la_flatten_focus_row_f32(x, isp, C, ip, (float)p_focus, dst);
                }
            }
        } else {
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++) {
                float *dst = F1 + (size_t)n * C;
                for (int64_t h = 0; h < H; h++)
                    for (int64_t j = 0; j < D; j++) {
                        float x = la_load_f32(k, la_off4(k, b, n, h, j));
                        dst[h * D + j] = la_relu(x) + 1.f; /* relu1 */
                    }
            }
            /* K^ = focus[h] * DWConv(phi(K)) per channel, zero padding k//2
             * (padding is with zeros of phi(K): torch pads the conv input) */
            #pragma omp parallel for num_threads(nt) schedule(static)
            for (int64_t n = 0; n < N; n++) {
                const int64_t y = n / Wm, x = n % Wm;
                float *dst = F2 + (size_t)n * C;
                if (!conv) memcpy(dst, F1 + (size_t)n * C, sizeof(float) * (size_t)C);
                else la_dwconv_row(dst, F1, Wc, y, x, Hm, Wm, ks, C);
                for (int64_t h = 0; h < H; h++)
                    for (int64_t j = 0; j < D; j++) dst[h * D + j] *= foc[h];
            }
        }

        /* ---- pass 2: per-head summaries in fixed chunks ------------------ */
        #pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int64_t task = 0; task < H * nchunk; task++) {
            const int64_t h = task / nchunk, ci = task % nchunk;
            const int64_t n0 = ci * chunk, len = (n0 + chunk <= N) ? chunk : N - n0;
            float *part = P + (size_t)task * sz;
            const float *kt = F2 + (size_t)n0 * C + h * D;
            const float *vt = F3 + (size_t)n0 * HDv + h * Dv;
            la_bwd_acc(D, Dv, len, 1.0f, kt, 1, C, vt, HDv, part, Dv, 0.0f); /* k̃ᵀ in place */
            float *zp = part + D * Dv;
            for (int64_t j = 0; j < D; j++) zp[j] = 0.f;
            for (int64_t n = 0; n < len; n++)
                for (int64_t j = 0; j < D; j++) zp[j] += kt[(size_t)n * C + j];
        }
        /* reduce in chunk order, float64; flatten keeps the mean (S/N, z/N),
         * which is what the released code stores to stay bounded in fp16 */
        const double red_scale = blog ? 1.0 : 1.0 / (double)N;
        #pragma omp parallel for num_threads(nt) schedule(static)
        for (int64_t e = 0; e < H * sz; e++) {
            const int64_t h = e / sz, i = e % sz;
            double acc = 0.0;
            for (int64_t ci = 0; ci < nchunk; ci++) acc += P[(size_t)(h * nchunk + ci) * sz + i];
            Sz[e] = (float)(acc * red_scale);
        }

        /* ---- pass 3: outputs in row tiles --------------------------------- */
        const int64_t ntile = (N + FOC_TILE - 1) / FOC_TILE;
        #pragma omp parallel for num_threads(nt) schedule(dynamic, 1)
        for (int64_t task = 0; task < H * ntile; task++) {
            const int64_t h = task / ntile, n0 = (task % ntile) * FOC_TILE;
            const int64_t len = (n0 + FOC_TILE <= N) ? FOC_TILE : N - n0;
            float *tw = TW + (size_t)la_thread_id() * per_thread;
            float *qt = tw;                        /* blog q~ [TILE, D] */
            float *ot = qt + FOC_TILE * D;         /* [TILE, Dv]        */
            const float *qp;
            int64_t ldq;
            if (blog) {
                for (int64_t i = 0; i < len; i++)
                    for (int64_t j = 0; j < D; j++) {
                        float x = (float)(la_load_f32(q, la_off4(q, b, n0 + i, h, j)) * qscale);
                        qt[i * D + j] = la_relu(x) + 1.f;
                    }
                qp = qt;
                ldq = D;
            } else {
                qp = F1 + (size_t)n0 * C + h * D;
                ldq = C;
            }
            const float *S = Sz + (size_t)h * sz, *z = S + D * Dv;
            la_bwd_acc(len, Dv, D, 1.0f, qp, ldq, 1, S, Dv, ot, Dv, 0.0f);
            for (int64_t i = 0; i < len; i++)
                foc_out_row(ot + i * Dv, qp + i * ldq, z, D, Dv, eps,
                            !blog && conv ? Wc : NULL, bias, F3 + h * Dv, HDv, n0 + i, Hm, Wm, ks);
            la_scatter_bnhd_rows(out, b, h, n0, len, ot, Dv);
        }
    }
    la_ws_free(ctx, DW);
    la_ws_free(ctx, ws);
    return LA_OK;
}
