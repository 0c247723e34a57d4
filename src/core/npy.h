/* .npy reader/writer (format 1.0/2.0/3.0, little-endian, C order).
 * The reader validates every header field and the file size against the
 * shape, so a malformed file is rejected with LA_ERR_FORMAT and a message
 * naming the file and the field at fault. */
#ifndef LA_NPY_H
#define LA_NPY_H

#include "longattn.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LA_NPY_MAX_DIMS 8

typedef struct la_npy_array {
    la_dtype dtype;     /* LA_F32, LA_F64, LA_F16, LA_I32 (never LA_BF16: numpy has none) */
    int ndim;           /* 0..LA_NPY_MAX_DIMS */
    int64_t shape[LA_NPY_MAX_DIMS];
    void *data;         /* malloc'd, contiguous C order; free with la_npy_free */
    size_t nbytes;
} la_npy_array;

/* Parse a .npy image held in memory (used by the fuzzer and by la_npy_read). */
la_status la_npy_parse(const void *buf, size_t len, const char *name, la_npy_array *out);
/* Read a file: the header, then the data straight into its buffer (no
 * whole-file copy); a large array is checked against la_memory_available. */
la_status la_npy_read(const char *path, la_npy_array *out);
/* Write a file atomically: data goes to a new "<path>.tmp.XXXXXX" (mkstemp)
 * and is renamed to path only when complete. dtype: LA_F32, LA_F64, LA_F16, LA_I32. */
la_status la_npy_write(const char *path, la_dtype dtype, int ndim, const int64_t *shape,
                       const void *data);
/* Write to an explicit temporary path (caller renames later). */
la_status la_npy_write_raw(const char *path, la_dtype dtype, int ndim, const int64_t *shape,
                           const void *data);
void la_npy_free(la_npy_array *a);
/* Convert in place to float32 (from f64, f16 or f32; int32 rejected). */
la_status la_npy_to_f32(la_npy_array *a, const char *name);

#ifdef __cplusplus
}
#endif
#endif
