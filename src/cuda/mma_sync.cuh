/* mma.sync-era tensor-core helpers shared by the linear family's kernels
 * (linfam.cu, linear_causal_tc.cu): 16-byte cp.async with zero fill, its
 * commit/wait, ldmatrix (plain, .trans, x2 .trans) and mma.sync m16n8k16
 * bf16 → fp32. Fragment layouts (PTX ISA), g = lane / 4, c = lane % 4:
 *   A a0..a3 = (g, 2c..+1) (g+8, 2c..+1) (g, 2c+8..+9) (g+8, 2c+8..+9)
 *   B b0, b1 = (k 2c..+1, n g) (k 2c+8..+9, n g)
 *   C c0..c3 = (g, 2c) (g, 2c+1) (g+8, 2c) (g+8, 2c+1)
 * ldmatrix .x4: lane l gives the address of row l % 8 of matrix l / 8 (.x2:
 * lanes 0–15). The host emulator of the causal kernels (dev/emu_causal_tc.cpp)
 * defines the same names with the same semantics. Internal (sm_80+). */
#ifndef LA_CUDA_MMA_SYNC_CUH
#define LA_CUDA_MMA_SYNC_CUH

#include <stdint.h>

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

#endif
