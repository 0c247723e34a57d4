/* The C side of bench/py_overhead.py: the time of one call of an operator
 * at a tiny size, measured in C (CPU, one thread), so that the Python
 * wrapper's overhead is the Python time minus this.
 * Usage: py_overhead_c OP CALLS   (OP: softmax linear linear_causal mhla
 * mhla_causal topk sparse dsa); prints "OP us_per_call". Sizes match
 * bench/py_overhead.py: B 1, N 64, H 2, D 16 (indexers: T 16, L 256). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "longattn.h"

#define B 1
#define N 64
#define H 2
#define D 16
#define T 16
#define L 256

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts); /* CPU time: robust to a loaded machine */
    return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static float *fill(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 65536.0f - 0.5f;
    }
    return x;
}

static void t4(la_tensor *t, void *data, la_dtype dt, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t ne[4] = {a, b, c, d};
    la_tensor_init(t, data, dt, LA_DEVICE_CPU, 4, ne);
}

static void tn(la_tensor *t, void *data, la_dtype dt, int nd, const int64_t *ne) {
    la_tensor_init(t, data, dt, LA_DEVICE_CPU, nd, ne);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s OP CALLS\n", argv[0]);
        return 2;
    }
    const char *op = argv[1];
    long calls = atol(argv[2]);
    la_context *ctx = NULL;
    la_context_create(&ctx);
    la_context_set_threads(ctx, 1);
    float *q = fill(B * N * H * D, 1), *k = fill(B * N * H * D, 2), *v = fill(B * N * H * D, 3);
    float *o = fill(B * N * H * D, 4), *lse = fill(B * N * H, 5);
    float *W = fill(64 * 64, 6), *sc = fill((size_t)T * L, 7), *kv = fill((size_t)L * 24, 8);
    float *qs = fill(T * H * 24, 9), *os = fill(T * H * 16, 10), *ls = fill(T * H, 11);
    float *w = fill(T * H, 12);
    int32_t *idx = calloc((size_t)T * 64, sizeof *idx);
    for (int i = 0; i < T * 64; i++) idx[i] = i % L;
    for (int i = 0; i < 64 * 64; i++) W[i] = W[i] + 0.5f;
    la_tensor tq, tk, tv, to, tl, tw, ts, ti, tkv, tqs, tos, tls, tww;
    t4(&tq, q, LA_F32, B, N, H, D);
    t4(&tk, k, LA_F32, B, N, H, D);
    t4(&tv, v, LA_F32, B, N, H, D);
    t4(&to, o, LA_F32, B, N, H, D);
    int64_t ne_l[3] = {B, N, H}, ne_w[2] = {4, 4}, ne_s[2] = {T, L}, ne_i[2] = {T, 64};
    int64_t ne_kv[2] = {L, 24}, ne_qs[3] = {T, H, 24}, ne_os[3] = {T, H, 16}, ne_ls[2] = {T, H};
    int64_t ne_qi[3] = {T, H, 16}, ne_ki[2] = {L, 16}, ne_ww[2] = {T, H};
    tn(&tl, lse, LA_F32, 3, ne_l);
    tn(&tw, W, LA_F32, 2, ne_w);
    tn(&ts, sc, LA_F32, 2, ne_s);
    tn(&ti, idx, LA_I32, 2, ne_i);
    tn(&tkv, kv, LA_F32, 2, ne_kv);
    tn(&tqs, qs, LA_F32, 3, ne_qs);
    tn(&tos, os, LA_F32, 3, ne_os);
    tn(&tls, ls, LA_F32, 2, ne_ls);
    tn(&tww, w, LA_F32, 2, ne_ww);
    la_tensor tqi, tki;
    tn(&tqi, qs, LA_F32, 3, ne_qi);
    tn(&tki, kv, LA_F32, 2, ne_ki);

    la_softmax_params sp; la_softmax_params_init(&sp);
    la_linear_params lp; la_linear_params_init(&lp);
    la_linear_params lc; la_linear_params_init(&lc); lc.causal = 1;
    la_mhla_params mp; la_mhla_params_init(&mp);
    mp.grid_ndim = 1; mp.grid[0] = N; mp.blocks[0] = 4;
    la_mhla_causal_params cp; la_mhla_causal_params_init(&cp); cp.chunk = 16;
    la_sparse_attn_params ap; la_sparse_attn_params_init(&ap); ap.dv = 16;
    la_index_params ip; la_index_params_init(&ip); ip.topk = 64;

    la_status st = LA_OK;
    double t0 = 0;
    for (long it = -calls / 10 - 1; it < calls; it++) {
        if (it == 0) t0 = now_us();
        if (!strcmp(op, "softmax")) st = la_softmax_attention(&sp, &tq, &tk, &tv, &to, NULL, ctx);
        else if (!strcmp(op, "linear"))
            st = la_linear_attention(&lp, &tq, &tk, &tv, &to, NULL, NULL, NULL, NULL, ctx);
        else if (!strcmp(op, "linear_causal"))
            st = la_linear_attention(&lc, &tq, &tk, &tv, &to, NULL, NULL, NULL, NULL, ctx);
        else if (!strcmp(op, "mhla")) st = la_mhla_forward(&mp, &tq, &tk, &tv, &tw, &to, ctx);
        else if (!strcmp(op, "mhla_causal"))
            st = la_mhla_causal_forward(&cp, &tq, &tk, &tv, &tw, &to, ctx);
        else if (!strcmp(op, "topk")) st = la_topk(&ts, &ti, ctx);
        else if (!strcmp(op, "sparse"))
            st = la_sparse_attention(&ap, &tqs, &tkv, &ti, &tos, &tls, ctx);
        else if (!strcmp(op, "dsa"))
            st = la_dsa_indexer(&ip, &tqi, &tki, &tww, NULL, NULL, &ti, NULL, ctx);
        else {
            fprintf(stderr, "unknown op %s\n", op);
            return 2;
        }
        if (st != LA_OK) {
            fprintf(stderr, "%s: %s\n", op, la_last_error());
            return 1;
        }
    }
    printf("%s %.3f\n", op, (now_us() - t0) / calls);
    la_context_destroy(ctx);
    return 0;
}
