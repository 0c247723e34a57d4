/* .npy reader/writer: round trips for every dtype and rank, and rejection
 * (LA_ERR_FORMAT / OVERFLOW, with a message) of malformed headers. */
#include <unistd.h>

#include "test_util.h"
#include "core/npy.h"

static size_t make_npy(unsigned char *buf, int major, const char *header, const void *data, size_t nbytes) {
    size_t hl = strlen(header), o = 0;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)major;
    buf[7] = 0;
    if (major == 1) {
        buf[8] = hl & 0xff; buf[9] = (hl >> 8) & 0xff; o = 10;
    } else {
        buf[8] = hl & 0xff; buf[9] = (hl >> 8) & 0xff; buf[10] = (hl >> 16) & 0xff; buf[11] = 0; o = 12;
    }
    memcpy(buf + o, header, hl);
    o += hl;
    if (nbytes) memcpy(buf + o, data, nbytes);
    return o + nbytes;
}

static void expect_reject(const char *what, int major, const char *hdr, size_t nbytes, la_status want) {
    static unsigned char buf[8192];
    static unsigned char zeros[4096];
    size_t n = make_npy(buf, major, hdr, zeros, nbytes);
    la_npy_array a;
    la_status s = la_npy_parse(buf, n, "x.npy", &a);
    CHECK(s == want, "%s: got %s, want %s (%s)", what, la_status_string(s), la_status_string(want), la_last_error());
    CHECK(strstr(la_last_error(), "x.npy") != NULL, "%s: message does not name the file: %s", what, la_last_error());
    if (s == LA_OK) la_npy_free(&a);
}

int main(void) {
    la_rng rng = la_test_rng("test_npy");
    char path[256];
    snprintf(path, sizeof path, "/tmp/la_test_npy_%ld.npy", (long)getpid());

    /* round trips */
    int64_t shapes[][4] = {{7, 0, 0, 0}, {3, 5, 0, 0}, {2, 3, 4, 0}, {2, 1, 3, 5}};
    for (int r = 1; r <= 4; r++) {
        int64_t *sh = shapes[r - 1];
        size_t n = 1;
        for (int i = 0; i < r; i++) n *= (size_t)sh[i];
        float *f = malloc(n * 4);
        double *d = malloc(n * 8);
        int32_t *k = malloc(n * 4);
        for (size_t i = 0; i < n; i++) { f[i] = (float)la_rng_normal(&rng); d[i] = la_rng_normal(&rng); k[i] = (int32_t)(la_rng_next(&rng) & 0xffff) - 5000; }
        const void *src[3] = {f, d, k};
        la_dtype dts[3] = {LA_F32, LA_F64, LA_I32};
        size_t item[3] = {4, 8, 4};
        for (int j = 0; j < 3; j++) {
            CHECK_OK(la_npy_write(path, dts[j], r, sh, src[j]));
            la_npy_array a;
            CHECK_OK(la_npy_read(path, &a));
            CHECK(a.dtype == dts[j] && a.ndim == r, "round trip rank %d dtype %d: got rank %d dtype %d", r, j, a.ndim, a.dtype);
            int same = a.nbytes == n * item[j] && memcmp(a.data, src[j], n * item[j]) == 0;
            for (int i = 0; i < r; i++) same = same && a.shape[i] == sh[i];
            CHECK(same, "round trip rank %d dtype %d: data or shape differ", r, j);
            la_npy_free(&a);
        }
        free(f); free(d); free(k);
    }
    /* f64 -> f32 conversion */
    {
        double d[3] = {1.5, -2.25, 1e10};
        int64_t sh[1] = {3};
        CHECK_OK(la_npy_write(path, LA_F64, 1, sh, d));
        la_npy_array a;
        CHECK_OK(la_npy_read(path, &a));
        CHECK_OK(la_npy_to_f32(&a, path));
        CHECK(a.dtype == LA_F32 && ((float *)a.data)[1] == -2.25f && ((float *)a.data)[2] == 1e10f, "f64->f32");
        la_npy_free(&a);
    }
    /* float16: read as LA_F16, written back as '<f2', converted exactly to f32 */
    {
        const uint16_t h[4] = {0x3c00, 0xc500, 0x7bff, 0x0001}; /* 1, -5, 65504, 2^-24 */
        int64_t sh[1] = {4};
        CHECK_OK(la_npy_write(path, LA_F16, 1, sh, h));
        la_npy_array a;
        CHECK_OK(la_npy_read(path, &a));
        CHECK(a.dtype == LA_F16 && a.nbytes == 8 && !memcmp(a.data, h, 8), "f16 round trip");
        CHECK_OK(la_npy_to_f32(&a, path));
        const float *f = (const float *)a.data;
        CHECK(a.dtype == LA_F32 && f[0] == 1.f && f[1] == -5.f && f[2] == 65504.f && f[3] == 0x1p-24f,
              "f16->f32");
        la_npy_free(&a);
    }
    /* writer output is readable by the strict parser and 64-byte aligned */
    {
        FILE *fp = fopen(path, "rb");
        unsigned char hdr[10];
        CHECK(fp && fread(hdr, 1, 10, fp) == 10, "read back header");
        if (fp) fclose(fp);
        CHECK(((10 + (hdr[8] | hdr[9] << 8)) % 64) == 0, "header not 64-byte aligned");
    }
    unlink(path);

    /* a good v1 and v2 header */
    float one[6] = {1, 2, 3, 4, 5, 6};
    {
        unsigned char buf[512];
        la_npy_array a;
        size_t n = make_npy(buf, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }\n", one, 24);
        CHECK_OK(la_npy_parse(buf, n, "good.npy", &a));
        la_npy_free(&a);
        n = make_npy(buf, 2, "{\"descr\":\"<f4\",\"fortran_order\":False,\"shape\":(6,)}", one, 24);
        CHECK_OK(la_npy_parse(buf, n, "good2.npy", &a));
        CHECK(a.ndim == 1 && a.shape[0] == 6, "v2 header shape");
        la_npy_free(&a);
        n = make_npy(buf, 3, "{'descr': '<i4', 'fortran_order': False, 'shape': (), }", one, 4);
        CHECK_OK(la_npy_parse(buf, n, "scalar.npy", &a));
        CHECK(a.ndim == 0, "scalar rank 0");
        la_npy_free(&a);
    }
    /* malformed */
    expect_reject("fortran order", 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", 24, LA_ERR_FORMAT);
    expect_reject("big endian", 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 3), }", 24, LA_ERR_FORMAT);
    expect_reject("complex64", 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", 48, LA_ERR_FORMAT);
    expect_reject("float16 short data", 1, "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }", 10, LA_ERR_FORMAT);
    expect_reject("object dtype", 1, "{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }", 48, LA_ERR_FORMAT);
    expect_reject("structured dtype", 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", 8, LA_ERR_FORMAT);
    expect_reject("short data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 20, LA_ERR_FORMAT);
    expect_reject("long data", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", 28, LA_ERR_FORMAT);
    expect_reject("negative dim", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-2, 3), }", 24, LA_ERR_FORMAT);
    expect_reject("missing shape", 1, "{'descr': '<f4', 'fortran_order': False, }", 24, LA_ERR_FORMAT);
    expect_reject("unknown key", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,), 'x': 1}", 24, LA_ERR_FORMAT);
    expect_reject("not a dict", 1, "['descr', '<f4']", 24, LA_ERR_FORMAT);
    expect_reject("unterminated", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (6,", 0, LA_ERR_FORMAT);
    expect_reject("overflowing shape", 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296, 4294967296), }", 0, LA_ERR_OVERFLOW);
    expect_reject("huge int", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,), }", 0, LA_ERR_FORMAT);
    expect_reject("too many dims", 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1), }", 4, LA_ERR_FORMAT);
    {
        unsigned char buf[64] = "\x93NUMPX\x01\x00";
        la_npy_array a;
        CHECK_STATUS(la_npy_parse(buf, 40, "bad.npy", &a), LA_ERR_FORMAT);
        memcpy(buf, "\x93NUMPY\x09\x00", 8);
        CHECK_STATUS(la_npy_parse(buf, 40, "bad.npy", &a), LA_ERR_FORMAT);
        memcpy(buf, "\x93NUMPY\x01\x00\xff\x7f", 10); /* header longer than file */
        CHECK_STATUS(la_npy_parse(buf, 40, "bad.npy", &a), LA_ERR_FORMAT);
        CHECK_STATUS(la_npy_parse(buf, 3, "bad.npy", &a), LA_ERR_FORMAT);
        CHECK_STATUS(la_npy_read("/nonexistent/dir/x.npy", &a), LA_ERR_IO);
        CHECK_STATUS(la_npy_read("/tmp", &a), LA_ERR_IO);
    }
    /* writing where it cannot leaves nothing behind */
    {
        int64_t sh[1] = {3};
        CHECK_STATUS(la_npy_write("/nonexistent/dir/y.npy", LA_F32, 1, sh, one), LA_ERR_IO);
        CHECK_STATUS(la_npy_write(path, LA_BF16, 1, sh, one), LA_ERR_DTYPE);
        CHECK(access(path, F_OK) != 0, "no file left after a refused write");
    }
    return la_test_finish();
}
