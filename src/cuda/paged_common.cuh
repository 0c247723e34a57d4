/* The paged index-key cache's device view and key loads, shared by
 * paged_index.cu (the indexers) and paged_cache.cu (appends, pooled sums,
 * gathers): in an anonymous namespace, one copy per file. */
#ifndef LA_CUDA_PAGED_COMMON_CUH
#define LA_CUDA_PAGED_COMMON_CUH

#include "cuda/common.cuh"
#include "cuda/paged_index.cuh"

namespace {


struct pg_cache {
    const unsigned char *pages;
    int64_t page_bytes, ps, dI;
    int dt;
};

pg_cache pg_of(const la_paged_index_cache *c) {
    pg_cache g;
    g.pages = c->pages;
    g.page_bytes = c->page_bytes;
    g.ps = c->p.page_size;
    g.dI = c->p.head_dim;
    g.dt = (int)c->p.dtype;
    return g;
}

__device__ __forceinline__ float pg_e4m3(unsigned b) {
    const unsigned e = (b >> 3) & 15u, m = b & 7u;
    float v;
    if (e == 0) v = (float)m * 0.001953125f; /* m·2^-9 */
    else if (e == 15 && m == 7) v = __int_as_float(0x7fc00000);
    else v = __int_as_float((int)(((e + 120u) << 23) | (m << 20)));
    return (b & 0x80u) ? -v : v;
}

__device__ __forceinline__ unsigned pg_to_e4m3(float x) {
    const unsigned sign = signbit(x) ? 0x80u : 0u;
    const float a = fabsf(x);
    if (a >= 448.f) return sign | 0x7Eu;
    if (a < 0.015625f) return sign | (unsigned)rintf(a * 512.f);
    int E;
    const float f = frexpf(a, &E);
    int e = E - 1 + 7;
    int m = (int)rintf((2.f * f - 1.f) * 8.f);
    if (m == 8) {
        m = 0;
        e++;
    }
    if (e > 15 || (e == 15 && m == 7)) return sign | 0x7Eu;
    return sign | (unsigned)(e << 3 | m);
}

__device__ __forceinline__ float pg_load(const pg_cache &C, int64_t slot, int64_t d) {
    const int64_t page = slot / C.ps, off = slot % C.ps;
    const unsigned char *pg = C.pages + page * C.page_bytes;
    if (C.dt == LA_FP8_E4M3) {
        const float scale = *(const float *)(pg + C.ps * C.dI + off * 4);
        /* __fmul_rn: the product is rounded on its own, as the CPU stores it;
         * a plain `*` inlined into the pooling sum contracts to an FMA. */
        return __fmul_rn(pg_e4m3(pg[off * C.dI + d]), scale);
    }
    if (C.dt == LA_BF16) return __bfloat162float(((const __nv_bfloat16 *)pg)[off * C.dI + d]);
    return ((const float *)pg)[off * C.dI + d];
}

/* q element: e4m3 queries (fp8 caches) decoded exactly, other floats as la_cu_ld */
__device__ __forceinline__ float pg_ldq(const la_cu_view &q, int64_t off) {
    if (q.dt == LA_FP8_E4M3) return pg_e4m3(((const unsigned char *)q.data)[off]);
    return la_cu_ld(q.data, q.dt, off);
}

}  // namespace

#endif
