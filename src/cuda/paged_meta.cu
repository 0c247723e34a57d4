/* Device-side metadata of a paged indexer call (paged_meta.cuh): the
 * values of block_table / context_lens / q_seq are checked, clamped and
 * turned into the call's row metadata here, so the paged calls copy none of
 * them to the host (docs/SPARSE.md "Paged serving"). */
#include <stdlib.h>

#include "core/devmem.h"
#include "cpu/paged_index_cpu.h"
#include "cuda/paged_hisa.cuh"
#include "cuda/paged_meta.cuh"

/* pg_meta_kernel: one CTA per sequence: a decode call has few of them (64
 * at the serving shape) and the next kernel waits for this one, so its time is one CTA's
 * chain of dependent global reads: 1024 threads, and each thread's table
 * entries read before any is written (the writes could alias the reads for
 * the compiler), make it two or three round trips instead of a dozen.
 * (pg_meta_packed_kernel, below: the shape where HISA's block scores run
 * beside this kernel instead of after it.) */
enum { PG_META_THREADS = 1024, PG_META_UNROLL = 4 };

namespace {

/* ---- kernel text (dev/emu_paged_meta.sh cuts it between the markers) ---- */
/* PG_META_BEGIN */
__device__ void pg_flag(int32_t *st, int32_t *mirror, int kind, int64_t a, int64_t b, int64_t v, int64_t x) {
    atomicOr(st, kind);
    *(volatile int32_t *)mirror = 1; /* the host's cue to read st (a plain store: any nonzero will do) */
    if (atomicCAS(st + 1, 0, kind) == 0) { /* the first error keeps its values */
        st[2] = (int32_t)a;
        st[3] = (int32_t)b;
        st[4] = (int32_t)v;
        st[5] = (int32_t)x;
    }
}

__global__ void __launch_bounds__(PG_META_THREADS) pg_meta_kernel(pg_meta M) {
    la_pdl_launch_dependents(); /* the block-score kernel may be scheduled (it waits for this one first) */
    const int64_t s = blockIdx.x;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    __shared__ int64_t sh_len;
    __shared__ int wc[PG_META_THREADS / 32];
    if (tid == 0) {
        int64_t L = M.cl[s * M.cl0];
        if (L < 0 || L > M.cap) {
            pg_flag(M.status, M.mirror, LA_PG_BAD_LEN, s, 0, L, M.cap);
            L = L < 0 ? 0 : M.cap;
        }
        if (L > M.lenmax) {
            pg_flag(M.status, M.mirror, LA_PG_BAD_POOL, s, -1, L, M.lenmax);
            L = M.lenmax;
        }
        M.lens[s] = (int32_t)L;
        sh_len = L;
    }
    __syncthreads();
    const int64_t L = sh_len, np = (L + M.ps - 1) / M.ps;
    for (int64_t j0 = 0; j0 < M.maxp; j0 += PG_META_THREADS * PG_META_UNROLL) {
        int64_t v[PG_META_UNROLL];
#pragma unroll
        for (int u = 0; u < PG_META_UNROLL; u++) {
            const int64_t j = j0 + u * PG_META_THREADS + tid;
            v[u] = j < np ? M.bt[s * M.bt0 + j * M.bt1] : 0;
        }
#pragma unroll
        for (int u = 0; u < PG_META_UNROLL; u++) {
            const int64_t j = j0 + u * PG_META_THREADS + tid;
            if (j >= M.maxp) break;
            if (v[u] < 0 || v[u] >= M.num_pages) {
                pg_flag(M.status, M.mirror, LA_PG_BAD_PAGE, s, j, v[u], M.num_pages);
                v[u] = 0;
            }
            M.tab[s * M.maxp + j] = (int32_t)v[u]; /* pages past the length are never read */
        }
    }
    if (M.pcount) {
        const int64_t nb = (L + M.B - 1) / M.B;
        for (int64_t b0 = 0; b0 < nb; b0 += PG_META_THREADS * PG_META_UNROLL) {
            int32_t have[PG_META_UNROLL];
#pragma unroll
            for (int u = 0; u < PG_META_UNROLL; u++) {
                const int64_t b = b0 + u * PG_META_THREADS + tid;
                have[u] = b < nb ? M.pcount[s * M.max_blocks + b] : 0;
            }
#pragma unroll
            for (int u = 0; u < PG_META_UNROLL; u++) {
                const int64_t b = b0 + u * PG_META_THREADS + tid;
                const int64_t want = L - b * M.B < M.B ? L - b * M.B : M.B;
                if (b < nb && have[u] != want) pg_flag(M.status, M.mirror, LA_PG_BAD_POOL, s, b, L, have[u]);
            }
        }
    }
    if (!M.qs) { /* next_n consecutive rows per sequence */
        const int64_t nq = M.next_n, base = s * nq;
        for (int64_t j = tid; j < nq; j += PG_META_THREADS) {
            const int64_t t = base + j, e = L - nq + j + 1;
            M.rows[t] = (int32_t)t;
            M.row_seq[t] = (int32_t)s;
            M.row_end[t] = (int32_t)(e < 0 ? 0 : e);
        }
        if (tid == 0) {
            M.row0[s] = (int32_t)base;
            if (s == M.nseq - 1) M.row0[M.nseq] = (int32_t)M.T;
        }
        return;
    }
    /* q_seq: pass 1 counts the rows of earlier sequences (row0[s]) and of s;
     * pass 2 ranks s's rows in query order (a ballot per warp, warps in order) */
    auto seq_of = [&](int64_t t, bool report) -> int64_t {
        int64_t v = M.qs[t * M.qs0];
        if (v < 0 || v >= M.nseq) {
            if (report) pg_flag(M.status, M.mirror, LA_PG_BAD_QSEQ, t, 0, v, M.nseq);
            v = v < 0 ? 0 : M.nseq - 1;
        }
        return v;
    };
    int64_t before = 0, nq = 0;
    for (int64_t c0 = 0; c0 < M.T; c0 += PG_META_THREADS) {
        const int64_t t = c0 + tid;
        const int64_t v = t < M.T ? seq_of(t, s == 0) : -1;
        before += __syncthreads_count(t < M.T && v < s);
        nq += __syncthreads_count(v == s);
    }
    int64_t run = 0;
    for (int64_t c0 = 0; c0 < M.T; c0 += PG_META_THREADS) {
        const int64_t t = c0 + tid;
        const bool mine = t < M.T && seq_of(t, false) == s;
        const unsigned bal = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) wc[warp] = __popc(bal);
        __syncthreads();
        int64_t j = run + __popc(bal & ((1u << lane) - 1u));
        for (int i = 0; i < warp; i++) j += wc[i];
        if (mine) {
            const int64_t e = L - nq + j + 1;
            M.rows[before + j] = (int32_t)t;
            M.row_seq[t] = (int32_t)s;
            M.row_end[t] = (int32_t)(e < 0 ? 0 : e);
        }
        for (int i = 0; i < PG_META_THREADS / 32; i++) run += wc[i];
        __syncthreads(); /* wc is rewritten by the next chunk */
    }
    if (tid == 0) {
        M.row0[s] = (int32_t)before;
        if (s == M.nseq - 1) M.row0[M.nseq] = (int32_t)(before + nq);
    }
}

/* pg_meta_kernel's values (the same checks, flags and outputs) for rows
 * next_n consecutive ones a sequence (no q_seq), one warp a sequence,
 * PG_PACK_SEQ sequences a CTA of at most 64 registers a thread: where
 * HISA's block scores run beside this kernel (family "paged_meta_overlap":
 * they derive the rows themselves, are launched first, and this kernel
 * follows as their programmatic dependent, M.after_scores), its CTAs must
 * fit in the SM resources those leave. The decode grid (64 sequences of
 * 128K: 512 score CTAs in 528 slots of 4 a SM, each of the four fill an
 * SM's registers) leaves 16 slots; these 8 CTAs take one each (a CTA's
 * 256 x 64 registers), where pg_meta_kernel's 1024-thread CTAs (56
 * registers a thread) would find no room until score CTAs finish. Its time
 * (more round trips: a warp reads its table and counts in batches of
 * 32 x PG_PACK_UNROLL entries, four and two at 2048 pages of 64 and 1024
 * blocks; 64 registers a thread bound the batch) is off the critical path
 * there. Launched second, not first: a programmatic dependent starts some
 * microseconds after its primary does, about what this kernel takes, so
 * the block scores must be the primary for the overlap to save anything. */
enum { PG_PACK_SEQ = 8, PG_PACK_UNROLL = 16 };
/* pg_meta_packed_kernel's work for sequence s (one warp) */
__device__ __forceinline__ void pg_meta_packed_seq(const pg_meta &M, int64_t s, int lane) {
    int64_t L = M.cl[s * M.cl0]; /* every lane's (one transaction): no shared broadcast, no barrier */
    if (L < 0 || L > M.cap) {
        if (lane == 0) pg_flag(M.status, M.mirror, LA_PG_BAD_LEN, s, 0, L, M.cap);
        L = L < 0 ? 0 : M.cap;
    }
    if (L > M.lenmax) {
        if (lane == 0) pg_flag(M.status, M.mirror, LA_PG_BAD_POOL, s, -1, L, M.lenmax);
        L = M.lenmax;
    }
    if (lane == 0) M.lens[s] = (int32_t)L;
    const int64_t np = (L + M.ps - 1) / M.ps;
    for (int64_t j0 = 0; j0 < M.maxp; j0 += 32 * PG_PACK_UNROLL) {
        int32_t v[PG_PACK_UNROLL];
#pragma unroll
        for (int u = 0; u < PG_PACK_UNROLL; u++) {
            const int64_t j = j0 + u * 32 + lane;
            v[u] = j < np ? M.bt[s * M.bt0 + j * M.bt1] : 0;
        }
#pragma unroll
        for (int u = 0; u < PG_PACK_UNROLL; u++) {
            const int64_t j = j0 + u * 32 + lane;
            if (j >= M.maxp) break;
            if (v[u] < 0 || v[u] >= M.num_pages) {
                pg_flag(M.status, M.mirror, LA_PG_BAD_PAGE, s, j, v[u], M.num_pages);
                v[u] = 0;
            }
            M.tab[s * M.maxp + j] = v[u]; /* pages past the length are never read */
        }
    }
    if (M.pcount) {
        const int64_t nb = (L + M.B - 1) / M.B;
        for (int64_t b0 = 0; b0 < nb; b0 += 32 * PG_PACK_UNROLL) {
            int32_t have[PG_PACK_UNROLL];
#pragma unroll
            for (int u = 0; u < PG_PACK_UNROLL; u++) {
                const int64_t b = b0 + u * 32 + lane;
                have[u] = b < nb ? M.pcount[s * M.max_blocks + b] : 0;
            }
#pragma unroll
            for (int u = 0; u < PG_PACK_UNROLL; u++) {
                const int64_t b = b0 + u * 32 + lane;
                const int64_t want = L - b * M.B < M.B ? L - b * M.B : M.B;
                if (b < nb && have[u] != want) pg_flag(M.status, M.mirror, LA_PG_BAD_POOL, s, b, L, have[u]);
            }
        }
    }
    const int64_t nq = M.next_n, base = s * nq;
    for (int64_t j = lane; j < nq; j += 32) {
        const int64_t t = base + j, e = L - nq + j + 1;
        M.rows[t] = (int32_t)t;
        M.row_seq[t] = (int32_t)s;
        M.row_end[t] = (int32_t)(e < 0 ? 0 : e);
    }
    if (lane == 0) {
        M.row0[s] = (int32_t)base;
        if (s == M.nseq - 1) M.row0[M.nseq] = (int32_t)M.T;
    }
}

__global__ void __launch_bounds__(32 * PG_PACK_SEQ, 4) pg_meta_packed_kernel(pg_meta M) {
    const int64_t s = (int64_t)blockIdx.x * PG_PACK_SEQ + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (s < M.nseq) pg_meta_packed_seq(M, s, lane);
    /* after the block scores (M.after_scores): this grid completes after
     * theirs, so the plain launches after it see the scores too */
    if (M.after_scores) la_pdl_wait();
}


/* PG_META_END */

} // namespace

la_status la_pg_meta_launch(const pg_meta &M, cudaStream_t s) {
    if (M.nseq <= 0) return LA_OK;
    /* the packed kernel where HISA's block scores may run beside this one
     * (paged_index.cu's ov_ok: the pooled sums, no q_seq, no means pass; a
     * shape rule: this launch has no context) */
    if (!M.qs && M.pcount && !la_ph_means_pass(M.T, M.nseq)) {
        const dim3 grid((unsigned)((M.nseq + PG_PACK_SEQ - 1) / PG_PACK_SEQ));
        LA_CU(la_cu_launch_pdl(M.after_scores != 0, pg_meta_packed_kernel, grid, dim3(32 * PG_PACK_SEQ), 0, s, M));
        LA_CU_LAUNCH("paged metadata");
        return LA_OK;
    }
    pg_meta_kernel<<<(unsigned)M.nseq, PG_META_THREADS, 0, s>>>(M);
    LA_CU_LAUNCH("paged metadata");
    return LA_OK;
}

la_status la_pg_max_rows(const la_tensor *qs, int64_t nseq, int64_t *maxnq) {
    const int64_t T = qs->ne[0];
    int32_t *h = (int32_t *)malloc(sizeof(int32_t) * (size_t)(T * qs->nb[0] - qs->nb[0] + 1));
    int64_t *cnt = (int64_t *)calloc((size_t)nseq, sizeof(int64_t));
    if (!h || !cnt) {
        free(h), free(cnt);
        return la_err(LA_ERR_NOMEM, "paged (cuda): out of memory counting q_seq's rows");
    }
    la_status st = la_dev_download(h, qs->data, sizeof(int32_t) * (size_t)(T * qs->nb[0] - qs->nb[0] + 1));
    *maxnq = 1;
    for (int64_t t = 0; st == LA_OK && t < T; t++) {
        int64_t v = h[t * qs->nb[0]];
        v = v < 0 ? 0 : v >= nseq ? nseq - 1 : v;
        if (++cnt[v] > *maxnq) *maxnq = cnt[v];
    }
    free(h), free(cnt);
    return st;
}

