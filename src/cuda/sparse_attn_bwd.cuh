/* Pieces shared by the sparse MLA attention backward engines
 * (sparse_attn_bwd.cu: portable; sparse_attn_bwd_tc.cu: tensor cores): the
 * problem, the int32 copy of the indices and the transposed index (the
 * (t, slot) entries of every key, counted with integer atomics, laid out by
 * a prefix sum and sorted by entry number, so that every key sums its
 * contributions in one fixed order). Internal; included by those two files. */
#ifndef LA_CUDA_SPARSE_ATTN_BWD_CUH
#define LA_CUDA_SPARSE_ATTN_BWD_CUH
#include "cuda/bwd_common.cuh"

namespace {


struct sp_dev {
    int64_t T, Hq, Hkv, Dqk, dv, L, K;
    float scale;
    const float *q, *kv, *dO, *lse, *Dd; /* [Hq,T,Dqk] [Hkv,L,Dqk] [Hq,T,dv] [T*Hq] [T*Hq] */
    const int *idx;                      /* [T,K] */
};

/* idx copied to int32 [T,K], −1 for indices < 0 or >= L */
__global__ void sp_prep_kernel(int64_t total, sp_dev P, const int *idx, int64_t i0, int64_t i1,
                               int *idx_out) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int64_t j = i % P.K, t = i / P.K;
    int s = idx[t * i0 + j * i1];
    if (s < 0 || s >= P.L) s = -1;
    idx_out[i] = s;
}
/* transposed index: count, prefix sum, fill, sort each key's list */
__global__ void sp_zero_kernel(int64_t total, int *x) {
    const int64_t i = bwd_gid();
    if (i < total) x[i] = 0;
}
__global__ void sp_count_kernel(int64_t total, sp_dev P, int64_t e0, int *cnt) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int s = P.idx[e0 + i];
    if (s >= 0) bwd_atomic_inc(&cnt[s]);
}
/* the prefix sum in three steps of parallel work (keys in blocks of
 * SP_SCAN_B; integers, so exact): block sums, one thread's exclusive scan of
 * them (off[L] = total), then off[s] = its block's start + the counts before
 * s in its block */
#define SP_SCAN_B 64
__global__ void sp_bsum_kernel(int64_t total, int64_t L, const int *cnt, int *bsum) {
    const int64_t b = bwd_gid();
    if (b >= total) return;
    int acc = 0;
    for (int64_t s = b * SP_SCAN_B; s < L && s < (b + 1) * SP_SCAN_B; s++) acc += cnt[s];
    bsum[b] = acc;
}
__global__ void sp_bscan_kernel(int64_t total, int64_t nb, int64_t L, int *bsum, int *off) {
    if (bwd_gid() >= total) return;
    int run = 0;
    for (int64_t b = 0; b < nb; b++) {
        const int x = bsum[b];
        bsum[b] = run;
        run += x;
    }
    off[L] = run;
}
__global__ void sp_off_kernel(int64_t total, const int *cnt, const int *bstart, int *off) {
    const int64_t s = bwd_gid();
    if (s >= total) return;
    int acc = bstart[s / SP_SCAN_B];
    for (int64_t r = s / SP_SCAN_B * SP_SCAN_B; r < s; r++) acc += cnt[r];
    off[s] = acc;
}
/* ints of the cnt buffer of sp_transpose_index: the counts and the block sums */
static inline int64_t sp_cnt_size(int64_t L) { return L + (L + SP_SCAN_B - 1) / SP_SCAN_B; }
__global__ void sp_fill_kernel(int64_t total, sp_dev P, int64_t e0, const int *off, int *cnt,
                               int *ent) {
    const int64_t i = bwd_gid();
    if (i >= total) return;
    const int s = P.idx[e0 + i];
    if (s >= 0) ent[off[s] + bwd_atomic_inc(&cnt[s])] = (int)i;
}
/* heapsort of one key's entries (distinct numbers: the order is unique) */
__global__ void sp_sort_kernel(int64_t total, const int *off, int *ent) {
    const int64_t s = bwd_gid();
    if (s >= total) return;
    int *a = ent + off[s];
    const int n = off[s + 1] - off[s];
    for (int start = n / 2 - 1; start >= 0; start--) {
        int r = start;
        while (2 * r + 1 < n) {
            int c = 2 * r + 1;
            if (c + 1 < n && a[c + 1] > a[c]) c++;
            if (a[r] >= a[c]) break;
            const int x = a[r];
            a[r] = a[c];
            a[c] = x;
            r = c;
        }
    }
    for (int end = n - 1; end > 0; end--) {
        const int x = a[0];
        a[0] = a[end];
        a[end] = x;
        int r = 0;
        while (2 * r + 1 < end) {
            int c = 2 * r + 1;
            if (c + 1 < end && a[c + 1] > a[c]) c++;
            if (a[r] >= a[c]) break;
            const int y = a[r];
            a[r] = a[c];
            a[c] = y;
            r = c;
        }
    }
}

/* The transposed index of the entries [e0, e0 + n) of P.idx (numbered from
 * e0): off[s] .. off[s + 1] of ent hold key s's entries in increasing order.
 * cnt: sp_cnt_size(L) ints, off: L + 1, ent: n. */
inline la_status sp_transpose_index(cudaStream_t s, const sp_dev &P, int64_t e0, int64_t n,
                                    int *cnt, int *off, int *ent) {
    const int64_t nb = (P.L + SP_SCAN_B - 1) / SP_SCAN_B;
    int *bsum = cnt + P.L;
    BWD_LAUNCH(sp_zero_kernel, P.L, s, cnt);
    BWD_LAUNCH(sp_count_kernel, n, s, P, e0, cnt);
    BWD_LAUNCH(sp_bsum_kernel, nb, s, P.L, cnt, bsum);
    BWD_LAUNCH(sp_bscan_kernel, 1, s, nb, P.L, bsum, off);
    BWD_LAUNCH(sp_off_kernel, P.L, s, cnt, bsum, off);
    BWD_LAUNCH(sp_zero_kernel, P.L, s, cnt);
    BWD_LAUNCH(sp_fill_kernel, n, s, P, e0, off, cnt, ent);
    BWD_LAUNCH(sp_sort_kernel, P.L, s, off, ent);
    return LA_OK;
}

} // namespace

/* The tensor-core path (sparse_attn_bwd_tc.cu): whether it takes the views
 * (bf16 q, kv, d_out, dq, dkv; Dqk 576, dv 512, one kv head; unit inner
 * stride, 16-byte aligned rows) and the call itself in one of three modes:
 * the default (variant mma), dkv summed with fp32 atomics (mma_atomic, not
 * deterministic), one token per workspace chunk (mma_rowchunk: for tests). */
enum { LA_SPARSE_BWD_TC_DEFAULT = 0, LA_SPARSE_BWD_TC_ATOMIC = 1, LA_SPARSE_BWD_TC_ROWCHUNK = 2 };
int la_sparse_bwd_tc_eligible(const la_sparse_attn_params *p, const la_tensor *q,
                              const la_tensor *kv, const la_tensor *d_out, const la_tensor *dq,
                              const la_tensor *dkv);
la_status la_sparse_bwd_tc(const la_sparse_attn_params *p, const la_tensor *q, const la_tensor *kv,
                           const la_tensor *idx, const la_tensor *out, const la_tensor *lse,
                           const la_tensor *d_out, la_tensor *dq, la_tensor *dkv, int mode,
                           la_context *ctx);
#endif
