/* Device memory helpers (src/core/devmem.h) for the CLI and tests, plus the
 * device probe behind la_cuda_available. Every CUDA error becomes
 * LA_ERR_DEVICE with the CUDA error string. */
#include "common.cuh"
#include "core/devmem.h"

#include <cstdlib>
#include <cstring>
#include <mutex>

/* One pool per device, created on first use (std::call_once: thread-safe);
 * immutable afterwards. Failure to create one falls back to the device's
 * current pool (NULL). */
cudaMemPool_t la_cu_pool(void) {
    constexpr int MAXDEV = 64;
    static std::once_flag once[MAXDEV];
    static cudaMemPool_t pools[MAXDEV];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAXDEV) {
        cudaGetLastError();
        return nullptr;
    }
    std::call_once(once[dev], [dev] {
        pools[dev] = nullptr;
        const char *mode = getenv("LA_CUDA_POOL");
        if (mode && !strcmp(mode, "default")) return;
        cudaMemPoolProps props;
        memset(&props, 0, sizeof props);
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaMemPool_t p = nullptr;
        if (cudaMemPoolCreate(&p, &props) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        const char *keep = getenv("LA_CUDA_POOL_KEEP_MB");
        unsigned long long mb = keep ? strtoull(keep, nullptr, 10) : 1024ull;
        uint64_t thr = (uint64_t)mb << 20; /* the attribute is a cuuint64_t */
        cudaMemPoolSetAttribute(p, cudaMemPoolAttrReleaseThreshold, &thr);
        cudaGetLastError();
        pools[dev] = p;
    });
    return pools[dev];
}

int la_cu_device_attr(cudaDeviceAttr attr, int fallback) {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) == cudaSuccess && cudaDeviceGetAttribute(&n, attr, dev) == cudaSuccess && n > 0)
        return n;
    cudaGetLastError();
    return fallback;
}

/* The context's slot of kernel fn (claimed when free), or -1 when all
 * slots hold other kernels. */
static int attr_slot(la_context *c, const void *fn) {
    for (int i = 0; i < LA_CUDA_ATTR_SLOTS; i++) {
        const void *f = __atomic_load_n(&c->cuda_attr_fn[i], __ATOMIC_ACQUIRE);
        if (f == fn) return i;
        if (f) continue;
        const void *expected = nullptr;
        if (__atomic_compare_exchange_n(&c->cuda_attr_fn[i], &expected, fn, false,
                                        __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) ||
            expected == fn)
            return i;
    }
    return -1;
}

la_status la_cu_func_smem(const la_context *ctx, const void *fn, size_t need, size_t cap,
                          bool carveout_max) {
    if (cap < need) cap = need;
    int dev = 0;
    LA_CU(cudaGetDevice(&dev));
    la_context *c = (la_context *)ctx; /* the cache is the only field written */
    const int slot = c ? attr_slot(c, fn) : -1;
    const long long tag = (long long)(dev + 1) << 32;
    if (slot >= 0 && cap < (1ull << 31)) {
        const long long v = __atomic_load_n(&c->cuda_attr_val[slot], __ATOMIC_ACQUIRE);
        if (v == (tag | (long long)cap)) return LA_OK;
        if (cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)cap) ==
            cudaSuccess) {
            if (carveout_max)
                LA_CU(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                           (int)cudaSharedmemCarveoutMaxShared));
            __atomic_store_n(&c->cuda_attr_val[slot], tag | (long long)cap, __ATOMIC_RELEASE);
            return LA_OK;
        }
        cudaGetLastError(); /* cap does not fit this device: set need, every call */
    }
    LA_CU(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    if (carveout_max)
        LA_CU(cudaFuncSetAttribute(fn, cudaFuncAttributePreferredSharedMemoryCarveout,
                                   (int)cudaSharedmemCarveoutMaxShared));
    return LA_OK;
}

extern "C" {

la_status la_dev_malloc(void **ptr, size_t bytes) {
    if (!ptr) return la_err(LA_ERR_ARG, "la_dev_malloc: ptr is NULL");
    *ptr = nullptr;
    cudaError_t e = cudaMalloc(ptr, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        cudaGetLastError();
        *ptr = nullptr;
        return la_err(e == cudaErrorMemoryAllocation ? LA_ERR_NOMEM : LA_ERR_DEVICE,
                      "cudaMalloc of %zu bytes failed: %s", bytes, cudaGetErrorString(e));
    }
    return LA_OK;
}

la_status la_dev_free(void *ptr) {
    if (!ptr) return LA_OK;
    LA_CU(cudaFree(ptr));
    return LA_OK;
}

la_status la_dev_upload(void *dst_dev, const void *src_host, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemcpy(dst_dev, src_host, bytes, cudaMemcpyHostToDevice));
    return LA_OK;
}

la_status la_dev_download(void *dst_host, const void *src_dev, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemcpy(dst_host, src_dev, bytes, cudaMemcpyDeviceToHost));
    return LA_OK;
}

la_status la_dev_memset(void *dst_dev, int byte, size_t bytes) {
    if (bytes == 0) return LA_OK;
    LA_CU(cudaMemset(dst_dev, byte, bytes));
    return LA_OK;
}

la_status la_dev_synchronize(void) {
    LA_CU(cudaDeviceSynchronize());
    return LA_OK;
}

/* 1 if at least one CUDA device is usable. No device (or no driver) is not an
 * error: it answers 0. */
la_status la_cuda_probe(int *available) {
    if (!available) return la_err(LA_ERR_ARG, "la_cuda_probe: available is NULL");
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        cudaGetLastError();
        n = 0;
    }
    *available = n > 0;
    return LA_OK;
}

}  // extern "C"
