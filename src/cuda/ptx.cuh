/* PTX helpers of the CUDA kernels: cp.async, ldmatrix, mma.sync, mbarrier,
 * and Hopper's wgmma (the 128-byte-swizzled K-major shared layout, its
 * descriptor, the m64n128 bf16 / e4m3 instructions, the accumulator fences),
 * plus the indexers' ReLU-weighted head sum on a wgmma accumulator.
 *
 * Fragment layouts (PTX ISA), g = lane / 4, c = lane % 4:
 *   A a0..a3 = (g, 2c..+1) (g+8, 2c..+1) (g, 2c+8..+9) (g+8, 2c+8..+9)
 *   B b0, b1 = (k 2c..+1, n g) (k 2c+8..+9, n g)
 *   C c0..c3 = (g, 2c) (g, 2c+1) (g+8, 2c) (g+8, 2c+1)
 * ldmatrix .x4: lane l gives the address of row l % 8 of matrix l / 8 (.x2:
 * lanes 0–15).
 *
 * Some operations come in two forms that compile differently and are kept
 * as the kernels were validated: cp.async with a global-converted source and
 * a "memory" clobber (la_cp16z, la_cp_commit, la_cp_wait) or with a generic
 * source address and no clobber (la_cp16z_n, la_cp16, la_cp_commit_nc,
 * la_cp_wait_all_nc; the kernels using them order shared memory with their
 * barriers). The host emulator of the causal kernels (dev/emu_causal_tc.cpp)
 * defines la_cp16z, la_cp_commit, la_cp_wait, la_ldsm4/4t/2t and la_mma_bf16
 * with the same semantics; softmax_tc.cu keeps its own wrappers, which also
 * compile for its host emulator (dev/emu_softmax_tc.cu). Internal (sm_80+;
 * wgmma, mbarrier.try_wait, setmaxnreg: sm_90a). */
#ifndef LA_CUDA_PTX_CUH
#define LA_CUDA_PTX_CUH

#include <stdint.h>

/* ---- Hopper-only code --------------------------------------------------------
 * wgmma, mbarrier.try_wait, fence.proxy.async, setmaxnreg and the fp8 mma.sync
 * exist for sm_90a only. The library is built for sm_90a, sm_80 and compute_80
 * PTX (Makefile): LA_CU_SM90_CODE is 1 in the sm_90a device pass (and the host
 * pass), 0 in the others, where the kernels using them have a body of one trap.
 * Their selection functions take them only on a compute capability 9.0 device
 * (la_cu_hopper, common.cuh), the one device that loads the sm_90a code. */
#if !defined(__CUDA_ARCH__) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define LA_CU_SM90_CODE 1
#else
#define LA_CU_SM90_CODE 0
#endif

/* ---- NaN-propagating max (torch.relu / torch.max semantics) -----------------
 * fmaxf returns the operand that is not NaN, so fmaxf(NaN, 0) = 0 would
 * swallow a NaN input; max.NaN.f32 (sm_80+, one FMNMX as fmaxf) returns NaN
 * when either operand is NaN. The host fallback serves the host emulators. */
__device__ __forceinline__ float la_relu_nan(float x) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("max.NaN.f32 %0, %1, 0f00000000;" : "=f"(r) : "f"(x));
    return r;
#else
    return x != x ? x : (x > 0.f ? x : 0.f);
#endif
}
__device__ __forceinline__ float la_fmax_nan(float a, float b) {
#if defined(__CUDA_ARCH__)
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
#else
    return a != a ? a : b != b ? b : (a > b ? a : b);
#endif
}

/* ---- cp.async, ldmatrix, mma.sync ----------------------------------------- */
/* 16-byte async copy; invalid: nothing read, 16 zero bytes written */
__device__ __forceinline__ void la_cp16z(void *smem, const void *gmem, bool valid) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
    const int n = valid ? 16 : 0;
    const size_t gp = __cvta_generic_to_global(gmem);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gp), "r"(n)
                 : "memory");
}
__device__ __forceinline__ void la_cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int Pending> __device__ __forceinline__ void la_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
}
__device__ __forceinline__ void la_ldsm4(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void la_ldsm4t(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void la_ldsm2t(uint32_t *r, const void *p) {
    const unsigned s = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(r[0]), "=r"(r[1]) : "r"(s));
}
__device__ __forceinline__ void la_mma_bf16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* the same with f16 fragments (tc16.cuh; host emulators define their own) */
__device__ __forceinline__ void la_mma_f16(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* 16-byte async copy, generic source address, no clobber; src_bytes 0
 * zero-fills the destination (nothing read) */
__device__ __forceinline__ void la_cp16z_n(void *sdst, const void *gsrc, int src_bytes) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
}
/* the same with the shared address already converted */
__device__ __forceinline__ void la_cp16z_sa(uint32_t sa, const void *gsrc, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
}
/* 16-byte async copy without zero fill (generic source, no clobber) */
__device__ __forceinline__ void la_cp16(void *sdst, const void *gsrc) {
    uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sa), "l"(gsrc));
}
/* 4-byte async copy through L1 (zero fill past src_bytes = 0) */
__device__ __forceinline__ void la_cp4z_n(void *sdst, const void *gsrc, int src_bytes) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(sdst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(sa), "l"(gsrc),
                 "r"(src_bytes));
}
__device__ __forceinline__ void la_cp_commit_nc() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void la_cp_wait_all_nc() { asm volatile("cp.async.wait_group 0;\n" ::); }

/* c += a·b, e4m3 m16n8k32 fragments (a: 4 registers of 4 e4m3), fp32 accumulators */
__device__ __forceinline__ void la_mma_e4m3(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* ---- mbarriers (CTA scope): arrive = release, try_wait = acquire ----------- */
__device__ __forceinline__ void la_mbar_init(uint32_t addr, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(addr), "r"(count) : "memory");
}
__device__ __forceinline__ void la_mbar_arrive(uint32_t addr) {
    asm volatile("{\n.reg .b64 mbst;\nmbarrier.arrive.shared::cta.b64 mbst, [%0];\n}\n" ::"r"(addr)
                 : "memory");
}
__device__ __forceinline__ void la_mbar_wait(uint32_t addr, uint32_t parity) {
    uint32_t ok;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
            "selp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(ok)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!ok);
    __syncwarp(); /* lanes may leave the poll at different times; wgmma needs a converged warp */
}

/* ---- wgmma ------------------------------------------------------------------ */
/* byte offset of 16-byte chunk c of row r in a swizzled [R rows x RB] tile */
__device__ __forceinline__ uint32_t la_wg_off(int R, int r, int c) {
    return (uint32_t)((c >> 3) * R * 128 + r * 128 + (((c & 7) ^ (r & 7)) << 4));
}

/* wgmma shared-memory descriptor: K-major, 128-byte swizzle, SBO = 1024 B
 * (8 rows x 128 B), LBO unused for swizzled K-major (set to 16 B). */
__device__ __forceinline__ uint64_t la_wg_desc(uint32_t saddr) {
    return (uint64_t)((saddr & 0x3FFFFu) >> 4) | ((uint64_t)1 << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}

/* The 64 fp32 accumulators of an m64n128 wgmma: register list and operands. */
#define LA_WG_D64_REGS                                                                     \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "             \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "    \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "    \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
#define LA_WG_D64_OPS(d)                                                                   \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),      \
    "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), \
    "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]),          \
    "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]),          \
    "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),          \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]),          \
    "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]),          \
    "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]),          \
    "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),          \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]),          \
    "+f"(d[62]), "+f"(d[63])

/* D(64x128) (+)= A(64x16) B(16x128), bf16, both from shared memory; TA/TB:
 * 0 = K-major, 1 = transposed (M-/N-major); scale_d = 0 overwrites D. */
template <int TA, int TB>
__device__ __forceinline__ void la_wg_m64n128k16_bf16_t(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 " LA_WG_D64_REGS
                 "%64, %65, p, 1, 1, %67, %68;\n}\n"
                 : LA_WG_D64_OPS(d)
                 : "l"(da), "l"(db), "r"(scale_d), "n"(TA), "n"(TB));
}
__device__ __forceinline__ void la_wg_m64n128k16_bf16(float *d, uint64_t da, uint64_t db, int scale_d) {
    la_wg_m64n128k16_bf16_t<0, 0>(d, da, db, scale_d);
}
__device__ __forceinline__ void la_wg_m64n128k32_e4m3(float *d, uint64_t da, uint64_t db, int scale_d) {
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 " LA_WG_D64_REGS
                 "%64, %65, p, 1, 1;\n}\n"
                 : LA_WG_D64_OPS(d)
                 : "l"(da), "l"(db), "r"(scale_d));
}

/* keep the compiler from moving accumulator accesses across wgmma issue/wait */
template <int N> __device__ __forceinline__ void la_wg_fence_acc(float *d) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void la_wg_fence_acc64(float *d) { la_wg_fence_acc<64>(d); }
template <int N> __device__ __forceinline__ void la_wg_wait(float *acc) {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
    la_wg_fence_acc64(acc);
}

/* ---- wgmma of the sparse-attention kernel (sparse_attn.cu, m64n32 / m64n256) ---- */
/* smem matrix descriptor: K-major, 128-byte swizzle, 8-row groups 1024 B
 * apart (SBO), LBO unused for swizzled K-major (1), base offset 0 (atoms
 * 1024-byte aligned). */
__device__ __forceinline__ uint64_t la_wg_desc_ptr(const void *p) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((sa & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
           ((uint64_t)1 << 62);
}
__device__ __forceinline__ void la_wg_m64n32k16_bf16_acc(float (*d)[4], uint64_t da, uint64_t db) {
    /* D += A B (scale-d predicate true), no negation, both K-major */
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
                 "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                 : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]),
                   "+f"(d[1][1]), "+f"(d[1][2]), "+f"(d[1][3]), "+f"(d[2][0]), "+f"(d[2][1]),
                   "+f"(d[2][2]), "+f"(d[2][3]), "+f"(d[3][0]), "+f"(d[3][1]), "+f"(d[3][2]),
                   "+f"(d[3][3])
                 : "l"(da), "l"(db));
}
/* smem matrix descriptor of the P·V B operand: N-major (V read transposed),
 * 128-byte swizzle, LBO 8192 B (next 64-dim block), SBO 1024 B (next 8 keys) */
__device__ __forceinline__ uint64_t la_wg_desc_nmajor(const void *p) {
    const uint32_t sa = (uint32_t)__cvta_generic_to_shared(p);
    return (uint64_t)((sa & 0x3FFFF) >> 4) | ((uint64_t)(8192 >> 4) << 16) |
           ((uint64_t)(1024 >> 4) << 32) | ((uint64_t)1 << 62);
}
/* The 128 fp32 accumulators of an m64n256 wgmma (o[32][4]): register list
 * and operands. */
#define LA_WG_O128_REGS \
    "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31," \
    "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63," \
    "%64,%65,%66,%67,%68,%69,%70,%71,%72,%73,%74,%75,%76,%77,%78,%79,%80,%81,%82,%83,%84,%85,%86,%87,%88,%89,%90,%91,%92,%93,%94,%95," \
    "%96,%97,%98,%99,%100,%101,%102,%103,%104,%105,%106,%107,%108,%109,%110,%111,%112,%113,%114,%115,%116,%117,%118,%119,%120,%121,%122,%123,%124,%125,%126,%127"
#define LA_WG_O128_OPS(o) \
    "+f"(o[0][0]), "+f"(o[0][1]), "+f"(o[0][2]), "+f"(o[0][3]), "+f"(o[1][0]), "+f"(o[1][1]), "+f"(o[1][2]), "+f"(o[1][3]), \
    "+f"(o[2][0]), "+f"(o[2][1]), "+f"(o[2][2]), "+f"(o[2][3]), "+f"(o[3][0]), "+f"(o[3][1]), "+f"(o[3][2]), "+f"(o[3][3]), \
    "+f"(o[4][0]), "+f"(o[4][1]), "+f"(o[4][2]), "+f"(o[4][3]), "+f"(o[5][0]), "+f"(o[5][1]), "+f"(o[5][2]), "+f"(o[5][3]), \
    "+f"(o[6][0]), "+f"(o[6][1]), "+f"(o[6][2]), "+f"(o[6][3]), "+f"(o[7][0]), "+f"(o[7][1]), "+f"(o[7][2]), "+f"(o[7][3]), \
    "+f"(o[8][0]), "+f"(o[8][1]), "+f"(o[8][2]), "+f"(o[8][3]), "+f"(o[9][0]), "+f"(o[9][1]), "+f"(o[9][2]), "+f"(o[9][3]), \
    "+f"(o[10][0]), "+f"(o[10][1]), "+f"(o[10][2]), "+f"(o[10][3]), "+f"(o[11][0]), "+f"(o[11][1]), "+f"(o[11][2]), "+f"(o[11][3]), \
    "+f"(o[12][0]), "+f"(o[12][1]), "+f"(o[12][2]), "+f"(o[12][3]), "+f"(o[13][0]), "+f"(o[13][1]), "+f"(o[13][2]), "+f"(o[13][3]), \
    "+f"(o[14][0]), "+f"(o[14][1]), "+f"(o[14][2]), "+f"(o[14][3]), "+f"(o[15][0]), "+f"(o[15][1]), "+f"(o[15][2]), "+f"(o[15][3]), \
    "+f"(o[16][0]), "+f"(o[16][1]), "+f"(o[16][2]), "+f"(o[16][3]), "+f"(o[17][0]), "+f"(o[17][1]), "+f"(o[17][2]), "+f"(o[17][3]), \
    "+f"(o[18][0]), "+f"(o[18][1]), "+f"(o[18][2]), "+f"(o[18][3]), "+f"(o[19][0]), "+f"(o[19][1]), "+f"(o[19][2]), "+f"(o[19][3]), \
    "+f"(o[20][0]), "+f"(o[20][1]), "+f"(o[20][2]), "+f"(o[20][3]), "+f"(o[21][0]), "+f"(o[21][1]), "+f"(o[21][2]), "+f"(o[21][3]), \
    "+f"(o[22][0]), "+f"(o[22][1]), "+f"(o[22][2]), "+f"(o[22][3]), "+f"(o[23][0]), "+f"(o[23][1]), "+f"(o[23][2]), "+f"(o[23][3]), \
    "+f"(o[24][0]), "+f"(o[24][1]), "+f"(o[24][2]), "+f"(o[24][3]), "+f"(o[25][0]), "+f"(o[25][1]), "+f"(o[25][2]), "+f"(o[25][3]), \
    "+f"(o[26][0]), "+f"(o[26][1]), "+f"(o[26][2]), "+f"(o[26][3]), "+f"(o[27][0]), "+f"(o[27][1]), "+f"(o[27][2]), "+f"(o[27][3]), \
    "+f"(o[28][0]), "+f"(o[28][1]), "+f"(o[28][2]), "+f"(o[28][3]), "+f"(o[29][0]), "+f"(o[29][1]), "+f"(o[29][2]), "+f"(o[29][3]), \
    "+f"(o[30][0]), "+f"(o[30][1]), "+f"(o[30][2]), "+f"(o[30][3]), "+f"(o[31][0]), "+f"(o[31][1]), "+f"(o[31][2]), "+f"(o[31][3])
__device__ __forceinline__ void la_wg_m64n256k16_bf16_rs(float (*o)[4], const uint32_t *pa, uint64_t db) {
    /* O(64 x 256) += P(64 x 16, registers) V(16 x 256, N-major smem) */
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" LA_WG_O128_REGS
                 "}, {%128,%129,%130,%131}, %132, p, 1, 1, 1;\n}\n"
                 : LA_WG_O128_OPS(o)
                 : "r"(pa[0]), "r"(pa[1]), "r"(pa[2]), "r"(pa[3]), "l"(db));
}
/* LA_WG_M64N256K16_SS(NAME, T) defines NAME(o, da, db): O(64 x 256) +=
 * P(64 x 16, K-major smem) V(16 x 256, N-major smem) with 16-bit operands of
 * PTX type T ("bf16" here; "f16" in mhla_causal_mix_wg.cuh): one asm text
 * for both types, so they differ in the type alone. */
#define LA_WG_M64N256K16_SS(NAME, T)                                                             \
    __device__ __forceinline__ void NAME(float (*o)[4], uint64_t da, uint64_t db) {              \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                  \
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32." T "." T " {" LA_WG_O128_REGS \
                     "}, %128, %129, p, 1, 1, 0, 1;\n}\n"                                        \
                     : LA_WG_O128_OPS(o)                                                         \
                     : "l"(da), "l"(db));                                                        \
    }
LA_WG_M64N256K16_SS(la_wg_m64n256k16_bf16_ss, "bf16")

/* The indexer's ReLU-weighted head sum over one m64n128 accumulator holding
 * 2 queries × 64 heads (columns 64q + h) for this thread's two key rows:
 * Σ_h w[q,h]·ReLU(acc) (ReLU propagates NaN: la_relu_nan), reduced over the
 * 4 lanes of a quad. Lane qd of the
 * quad returns query qd >> 1, key row g + 8·(qd & 1). Written once for the
 * DSA v2 kernel and HISA's block-major stage 2 (bf16 and e4m3), so that
 * their scores are the same bit for bit (HISA == DSA when every block is
 * kept).
 * la_wg_headsum_w loads this thread's weights from wst (the 2 × 64 weights
 * in shared memory) into registers, once per chunk for both m-tiles:
 * wr[8 qi + jj] = the float2 at wst + 64 qi + 8 jj + 2 qd.
 * la_wg_relu_headsum_wr: 4 FMA chains (2 key rows × 2 queries), then the
 * quad reduction in 3 shuffles: each lane sums only what it returns, lane
 * qd returning V[qd] of V = {s0, s1 of query 0, s0, s1 of query 1} as
 * (V(qd) + V(qd^1)) + (V(qd^2) + V(qd^3)), V(l) = lane l's partial. */
__device__ __forceinline__ void la_wg_headsum_w(float2 *wr, const float *wst, int qd) {
#pragma unroll
    for (int j = 0; j < 16; j++) wr[j] = *(const float2 *)(wst + 64 * (j >> 3) + 8 * (j & 7) + 2 * qd);
}
__device__ __forceinline__ float la_wg_relu_headsum_wr(const float *acc, const float2 *wr, int qd) {
    constexpr int NQ = 2, HI = 64;
    float v[2 * NQ]; /* v[2 qi + row]: this lane's partial sums */
#pragma unroll
    for (int qi = 0; qi < NQ; qi++) {
        float s0 = 0.f, s1 = 0.f;
#pragma unroll
        for (int jj = 0; jj < HI / 8; jj++) {
            const int j = (HI / 8) * qi + jj;
            const float2 wv = wr[j];
            s0 = fmaf(wv.x, la_relu_nan(acc[4 * j + 0]), s0);
            s0 = fmaf(wv.y, la_relu_nan(acc[4 * j + 1]), s0);
            s1 = fmaf(wv.x, la_relu_nan(acc[4 * j + 2]), s1);
            s1 = fmaf(wv.y, la_relu_nan(acc[4 * j + 3]), s1);
        }
        v[2 * qi] = s0;
        v[2 * qi + 1] = s1;
    }
    /* over lane ^ 1: keep the values of this lane's row parity (v[odd],
     * v[2 + odd]), send the other parity's */
    const bool odd = qd & 1, upper = qd & 2;
    float k0 = odd ? v[1] : v[0], k1 = odd ? v[3] : v[2];
    const float x0 = odd ? v[0] : v[1], x1 = odd ? v[2] : v[3];
    k0 += __shfl_xor_sync(0xffffffffu, x0, 1);
    k1 += __shfl_xor_sync(0xffffffffu, x1, 1);
    /* over lane ^ 2: keep this lane's query (k0: query 0, k1: query 1) */
    float keep = upper ? k1 : k0;
    const float send = upper ? k0 : k1;
    keep += __shfl_xor_sync(0xffffffffu, send, 2);
    return keep;
}

#endif
