/* Device memory helpers used by the CLI and tests to stage host arrays on
 * the GPU. Implemented by the CUDA backend (src/cuda/devmem.cu); a build
 * without CUDA links src/core/devmem_nocuda.c, which answers
 * LA_ERR_UNSUPPORTED with a clear message. */
#ifndef LA_DEVMEM_H
#define LA_DEVMEM_H
#include "longattn.h"
#ifdef __cplusplus
extern "C" {
#endif
la_status la_dev_malloc(void **ptr, size_t bytes);
la_status la_dev_free(void *ptr);
la_status la_dev_upload(void *dst_dev, const void *src_host, size_t bytes);
la_status la_dev_download(void *dst_host, const void *src_dev, size_t bytes);
la_status la_dev_memset(void *dst_dev, int byte, size_t bytes);
la_status la_dev_synchronize(void);
#ifdef __cplusplus
}
#endif
#endif
