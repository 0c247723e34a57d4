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
