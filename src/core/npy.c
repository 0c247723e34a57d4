/* .npy reader/writer. The reader trusts nothing: every header field is
 * parsed by a small strict parser of the Python-literal dict, and the data
 * length must equal the shape's element count times the item size. */
#include "npy.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "memcheck.h"

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}
static bool eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return true;
    }
    return false;
}
/* Python string literal in ' or " quotes, no escapes needed for npy. */
static bool parse_str(cursor *c, char *out, size_t n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
    char q = *c->p++;
    size_t i = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || i + 1 >= n) return false;
        out[i++] = *c->p++;
    }
    if (c->p >= c->end) return false;
    c->p++;
    out[i] = '\0';
    return true;
}
static bool parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return true;
    }
    return false;
}
static bool parse_uint(cursor *c, int64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return false;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *c->p - '0', &x)) return false;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long suffix */
    *v = x;
    return true;
}

/* Header limit of the file reader: numpy writes headers of a few hundred
 * bytes; a longer one is refused before it is read. */
#define NPY_MAX_HEADER ((size_t)1 << 20)

/* Validate the magic, version and header dict held in b[0, len) of a file
 * of `total` bytes (len <= total), and that the data fills the rest of the
 * file exactly. On success out has dtype, ndim, shape and nbytes (no data)
 * and *data_off is where the data starts. When the header is not all in
 * b, returns LA_ERR_IO with *need set to the bytes it needs (reader only). */
static la_status parse_header(const unsigned char *b, size_t len, size_t total, const char *name,
                              la_npy_array *out, size_t *data_off, size_t *need) {
    memset(out, 0, sizeof *out);
    *need = 0;
    if (total < 10) return la_err(LA_ERR_FORMAT, "%s: not a .npy file (only %zu bytes)", name, total);
    if (len < 12 && len < total) {
        *need = total < 12 ? total : 12;
        return LA_ERR_IO;
    }
    if (memcmp(b, "\x93NUMPY", 6) != 0) return la_err(LA_ERR_FORMAT, "%s: not a .npy file (bad magic)", name);
    int major = b[6], minor = b[7];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | ((size_t)b[9] << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (total < 12) return la_err(LA_ERR_FORMAT, "%s: truncated .npy header", name);
        hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        hstart = 12;
    } else {
        return la_err(LA_ERR_FORMAT, "%s: unsupported .npy version %d.%d (1.0, 2.0, 3.0 are)", name, major, minor);
    }
    if (minor != 0) return la_err(LA_ERR_FORMAT, "%s: unsupported .npy version %d.%d", name, major, minor);
    if (hlen > total - hstart) return la_err(LA_ERR_FORMAT, "%s: header length %zu exceeds file size %zu", name, hlen, total);
    if (hlen > len - hstart) {
        if (hlen > NPY_MAX_HEADER)
            return la_err(LA_ERR_FORMAT, "%s: header length %zu is over the %zu bytes accepted", name, hlen, NPY_MAX_HEADER);
        *need = hstart + hlen;
        return LA_ERR_IO;
    }
    cursor c = {(const char *)b + hstart, (const char *)b + hstart + hlen};
    for (const char *q = c.p; q < c.end; q++)
        if (*q == '\0') return la_err(LA_ERR_FORMAT, "%s: NUL byte inside the header", name);

    char descr[32] = {0};
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0;
    int ndim = 0;
    int64_t shape[LA_NPY_MAX_DIMS];
    if (!eat(&c, '{')) return la_err(LA_ERR_FORMAT, "%s: header is not a dict", name);
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_str(&c, key, sizeof key)) return la_err(LA_ERR_FORMAT, "%s: header: expected a key", name);
        if (!eat(&c, ':')) return la_err(LA_ERR_FORMAT, "%s: header: expected ':' after '%s'", name, key);
        if (strcmp(key, "descr") == 0) {
            if (have_descr || !parse_str(&c, descr, sizeof descr))
                return la_err(LA_ERR_FORMAT, "%s: header: bad 'descr' (only simple dtypes are supported)", name);
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran) return la_err(LA_ERR_FORMAT, "%s: header: duplicate fortran_order", name);
            if (parse_word(&c, "False")) fortran = 0;
            else if (parse_word(&c, "True")) fortran = 1;
            else return la_err(LA_ERR_FORMAT, "%s: header: fortran_order must be True or False", name);
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape || !eat(&c, '(')) return la_err(LA_ERR_FORMAT, "%s: header: bad 'shape'", name);
            for (;;) {
                if (eat(&c, ')')) break;
                if (ndim >= LA_NPY_MAX_DIMS)
                    return la_err(LA_ERR_FORMAT, "%s: shape has more than %d dimensions", name, LA_NPY_MAX_DIMS);
                if (!parse_uint(&c, &shape[ndim]))
                    return la_err(LA_ERR_FORMAT, "%s: header: shape entries must be non-negative integers", name);
                ndim++;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')')) return la_err(LA_ERR_FORMAT, "%s: header: unterminated shape", name);
                    break;
                }
            }
            have_shape = 1;
        } else {
            return la_err(LA_ERR_FORMAT, "%s: header: unknown key '%s'", name, key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return la_err(LA_ERR_FORMAT, "%s: header: expected ',' or '}'", name);
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) return la_err(LA_ERR_FORMAT, "%s: header: trailing characters after the dict", name);
    if (!have_descr || !have_fortran || !have_shape)
        return la_err(LA_ERR_FORMAT, "%s: header lacks %s", name,
                      !have_descr ? "'descr'" : !have_fortran ? "'fortran_order'" : "'shape'");
    if (fortran) return la_err(LA_ERR_FORMAT, "%s: fortran_order=True arrays are not supported (save with C order)", name);

    size_t item;
    if (strcmp(descr, "<f4") == 0) { out->dtype = LA_F32; item = 4; }
    else if (strcmp(descr, "<f8") == 0) { out->dtype = LA_F64; item = 8; }
    else if (strcmp(descr, "<i4") == 0) { out->dtype = LA_I32; item = 4; }
    else if (strcmp(descr, "<f2") == 0) { out->dtype = LA_F16; item = 2; }
    else if (descr[0] == '>')
        return la_err(LA_ERR_FORMAT, "%s: big-endian dtype '%s' (only little-endian is supported)", name, descr);
    else
        return la_err(LA_ERR_FORMAT, "%s: dtype '%s' not supported (float32 '<f4', float64 '<f8', float16 '<f2', int32 '<i4')", name, descr);

    size_t count = 1;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(count, (size_t)shape[i], &count))
            return la_err(LA_ERR_OVERFLOW, "%s: shape element count overflows", name);
    size_t nbytes;
    if (__builtin_mul_overflow(count, item, &nbytes)) return la_err(LA_ERR_OVERFLOW, "%s: shape byte size overflows", name);
    size_t avail = total - hstart - hlen;
    if (avail != nbytes)
        return la_err(LA_ERR_FORMAT, "%s: data is %zu bytes but shape and dtype need %zu", name, avail, nbytes);
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
    out->nbytes = nbytes;
    *data_off = hstart + hlen;
    return LA_OK;
}

la_status la_npy_parse(const void *buf, size_t len, const char *name, la_npy_array *out) {
    if (!name) name = "<npy>";
    if (!out) return la_err(LA_ERR_ARG, "la_npy_parse: out is NULL");
    memset(out, 0, sizeof *out);
    if (!buf) return la_err(LA_ERR_FORMAT, "%s: not a .npy file (only 0 bytes)", name);
    size_t off = 0, need = 0;
    la_status s = parse_header((const unsigned char *)buf, len, len, name, out, &off, &need);
    if (s != LA_OK) return s; /* the whole image is in memory: never "need more" */
    void *data = malloc(out->nbytes ? out->nbytes : 1);
    if (!data) return la_err(LA_ERR_NOMEM, "%s: cannot allocate %zu bytes", name, out->nbytes);
    memcpy(data, (const unsigned char *)buf + off, out->nbytes);
    out->data = data;
    return LA_OK;
}

/* Read exactly n bytes at the current offset of f. */
static int read_all(FILE *f, void *dst, size_t n) { return n == 0 || fread(dst, 1, n, f) == n; }

la_status la_npy_read(const char *path, la_npy_array *out) {
    if (!path || !out) return la_err(LA_ERR_ARG, "la_npy_read: NULL argument");
    memset(out, 0, sizeof *out);
    FILE *f = fopen(path, "rbe");
    if (!f) return la_err(LA_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return la_err(LA_ERR_IO, "%s: not a regular file", path);
    }
    const size_t total = (size_t)st.st_size;
    /* the header first (grown until parse_header has all of it), then the
     * data straight into its own buffer: no copy of the whole file */
    unsigned char small[256];
    unsigned char *hb = small;
    size_t have = 0, need = total < sizeof small ? total : sizeof small, off = 0;
    la_status s;
    for (;;) {
        if (need > sizeof small && hb == small) {
            hb = (unsigned char *)malloc(need);
            if (!hb) { fclose(f); return la_err(LA_ERR_NOMEM, "%s: cannot allocate the header", path); }
            memcpy(hb, small, have);
        }
        if (need > have && !read_all(f, hb + have, need - have)) {
            s = la_err(LA_ERR_IO, "%s: short read", path);
            break;
        }
        have = need > have ? need : have;
        s = parse_header(hb, have, total, path, out, &off, &need);
        if (s != LA_ERR_IO || need == 0 || need <= have) break;
    }
    if (hb != small) free(hb);
    if (s == LA_ERR_IO && need > 0) s = la_err(LA_ERR_IO, "%s: short read", path);
    if (s != LA_OK) { fclose(f); memset(out, 0, sizeof *out); return s; }
    if (out->nbytes >= LA_MEMCHECK_MIN_BYTES && la_mem_check(out->nbytes, path) != LA_OK) {
        fclose(f);
        memset(out, 0, sizeof *out);
        return LA_ERR_NOMEM;
    }
    void *data = malloc(out->nbytes ? out->nbytes : 1);
    if (!data) { fclose(f); return la_err(LA_ERR_NOMEM, "%s: cannot allocate %zu bytes", path, out->nbytes); }
    /* the header reads may have run into the data: start it from its offset */
    int ok = fseek(f, (long)off, SEEK_SET) == 0;
    ok = ok && read_all(f, data, out->nbytes);
    fclose(f);
    if (!ok) { free(data); memset(out, 0, sizeof *out); return la_err(LA_ERR_IO, "%s: short read", path); }
    out->data = data;
    return LA_OK;
}


la_status la_npy_write_raw(const char *path, la_dtype dtype, int ndim, const int64_t *shape,
                           const void *data) {
    const char *descr;
    size_t item;
    switch (dtype) {
    case LA_F32: descr = "<f4"; item = 4; break;
    case LA_F64: descr = "<f8"; item = 8; break;
    case LA_I32: descr = "<i4"; item = 4; break;
    case LA_F16: descr = "<f2"; item = 2; break;
    default: return la_err(LA_ERR_DTYPE, "%s: cannot write dtype %s", path, la_dtype_name(dtype));
    }
    if (ndim < 0 || ndim > LA_NPY_MAX_DIMS) return la_err(LA_ERR_SHAPE, "%s: bad rank %d", path, ndim);
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld%s", (long long)shape[i], (ndim == 1 || i < ndim - 1) ? ", " : "");
        if (__builtin_mul_overflow(count, (size_t)shape[i], &count)) return la_err(LA_ERR_OVERFLOW, "%s: size overflows", path);
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    /* pad with spaces so that magic+len+header is a multiple of 64, ending in \n */
    size_t total = 10 + (size_t)n + 1;
    size_t pad = (64 - total % 64) % 64;
    for (size_t i = 0; i < pad; i++) hdr[n++] = ' ';
    hdr[n++] = '\n';
    FILE *f = fopen(path, "wb");
    if (!f) return la_err(LA_ERR_IO, "%s: cannot create: %s", path, strerror(errno));
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff), (unsigned char)(n >> 8)};
    size_t nbytes = count * item;
    int ok = fwrite(pre, 1, 10, f) == 10 && fwrite(hdr, 1, (size_t)n, f) == (size_t)n &&
             (nbytes == 0 || fwrite(data, 1, nbytes, f) == nbytes);
    ok = (fclose(f) == 0) && ok;
    if (!ok) {
        unlink(path);
        return la_err(LA_ERR_IO, "%s: write failed: %s", path, strerror(errno));
    }
    return LA_OK;
}

la_status la_npy_write(const char *path, la_dtype dtype, int ndim, const int64_t *shape,
                       const void *data) {
    /* an unpredictable name created with O_EXCL beside the target (mkstemp),
     * so that rename() is atomic and no planted link is ever followed */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.XXXXXX", path) >= (int)sizeof tmp)
        return la_err(LA_ERR_ARG, "%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return la_err(LA_ERR_IO, "%s: cannot create a temporary beside it: %s", path, strerror(errno));
    close(fd);
    la_status s = la_npy_write_raw(tmp, dtype, ndim, shape, data);
    if (s != LA_OK) {
        unlink(tmp);
        return s;
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return la_err(LA_ERR_IO, "%s: cannot rename into place: %s", path, strerror(e));
    }
    return LA_OK;
}

void la_npy_free(la_npy_array *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
}

la_status la_npy_to_f32(la_npy_array *a, const char *name) {
    if (a->dtype == LA_F32) return LA_OK;
    if (a->dtype != LA_F64 && a->dtype != LA_F16)
        return la_err(LA_ERR_DTYPE, "%s: dtype %s, expected float32, float64 or float16", name,
                      la_dtype_name(a->dtype));
    const size_t n = a->nbytes / la_dtype_size(a->dtype);
    float *f = (float *)malloc(n ? n * 4 : 1);
    if (!f) return la_err(LA_ERR_NOMEM, "%s: cannot allocate", name);
    if (a->dtype == LA_F64) {
        const double *d = (const double *)a->data;
        for (size_t i = 0; i < n; i++) f[i] = (float)d[i];
    } else {
        const uint16_t *h = (const uint16_t *)a->data;
        for (size_t i = 0; i < n; i++) f[i] = la_f16_to_f32(h[i]);
    }
    free(a->data);
    a->data = f;
    a->dtype = LA_F32;
    a->nbytes = n * 4;
    return LA_OK;
}
