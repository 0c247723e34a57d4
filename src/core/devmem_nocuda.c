/* Device memory stubs for builds without nvcc: every call is refused with a
 * message, so `--device cuda` fails cleanly instead of crashing. */
#include "devmem.h"
#include "internal.h"

static la_status no_cuda(void) {
    return la_err(LA_ERR_UNSUPPORTED, "--device cuda: this build of longattn has no CUDA backend "
                                      "(nvcc was not found when it was built)");
}
la_status la_dev_malloc(void **ptr, size_t bytes) { (void)ptr; (void)bytes; return no_cuda(); }
la_status la_dev_free(void *ptr) { (void)ptr; return LA_OK; }
la_status la_dev_upload(void *d, const void *s, size_t n) { (void)d; (void)s; (void)n; return no_cuda(); }
la_status la_dev_download(void *d, const void *s, size_t n) { (void)d; (void)s; (void)n; return no_cuda(); }
la_status la_dev_memset(void *d, int b, size_t n) { (void)d; (void)b; (void)n; return no_cuda(); }
la_status la_dev_synchronize(void) { return no_cuda(); }
