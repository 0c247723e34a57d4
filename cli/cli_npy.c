/* The CLI's own .npy reader and writer (format 1.0/2.0/3.0, little-endian,
 * C order). The reader trusts nothing: the header dict is parsed strictly
 * and the data must fill the file exactly; the data is read straight into
 * its destination (float64 converted to float32 while it is read), after
 * the size was checked against the memory available. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"

typedef struct {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}
static int eat(cursor *c, char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}
static int parse_str(cursor *c, char *out, size_t n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return 0;
    char q = *c->p++;
    size_t i = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || i + 1 >= n) return 0;
        out[i++] = *c->p++;
    }
    if (c->p >= c->end) return 0;
    c->p++;
    out[i] = '\0';
    return 1;
}
static int parse_word(cursor *c, const char *w) {
    skip_ws(c);
    size_t n = strlen(w);
    if ((size_t)(c->end - c->p) >= n && memcmp(c->p, w, n) == 0) {
        c->p += n;
        return 1;
    }
    return 0;
}
static int parse_uint(cursor *c, int64_t *v) {
    skip_ws(c);
    if (c->p >= c->end || *c->p < '0' || *c->p > '9') return 0;
    int64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (__builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *c->p - '0', &x)) return 0;
        c->p++;
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long suffix */
    *v = x;
    return 1;
}

static int msgf(char *msg, size_t n, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static int msgf(char *msg, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, n, fmt, ap);
    va_end(ap);
    return 2;
}

/* numpy writes headers of a few hundred bytes; a longer one is refused
 * before it is read */
#define CLI_NPY_MAX_HEADER ((size_t)1 << 20)

int cli_npy_header(const unsigned char *b, size_t len, size_t total, cli_array *out,
                   size_t *data_off, size_t *need, char *msg, size_t mn) {
    memset(out, 0, sizeof *out);
    *need = 0;
    if (total < 10) return msgf(msg, mn, "not a .npy file (only %zu bytes)", total);
    if (len < 12 && len < total) {
        *need = total < 12 ? total : 12;
        return 1;
    }
    if (memcmp(b, "\x93NUMPY", 6) != 0) return msgf(msg, mn, "not a .npy file (bad magic)");
    int major = b[6], minor = b[7];
    size_t hlen, hstart;
    if (major == 1) {
        hlen = (size_t)b[8] | ((size_t)b[9] << 8);
        hstart = 10;
    } else if (major == 2 || major == 3) {
        if (total < 12) return msgf(msg, mn, "truncated .npy header");
        hlen = (size_t)b[8] | ((size_t)b[9] << 8) | ((size_t)b[10] << 16) | ((size_t)b[11] << 24);
        hstart = 12;
    } else {
        return msgf(msg, mn, "unsupported .npy version %d.%d (1.0, 2.0, 3.0 are)", major, minor);
    }
    if (minor != 0) return msgf(msg, mn, "unsupported .npy version %d.%d", major, minor);
    if (hlen > total - hstart) return msgf(msg, mn, "header length %zu exceeds file size %zu", hlen, total);
    if (hlen > CLI_NPY_MAX_HEADER)
        return msgf(msg, mn, "header length %zu is over the %zu bytes accepted", hlen, CLI_NPY_MAX_HEADER);
    if (hlen > len - hstart) {
        *need = hstart + hlen;
        return 1;
    }
    cursor c = {(const char *)b + hstart, (const char *)b + hstart + hlen};
    for (const char *q = c.p; q < c.end; q++)
        if (*q == '\0') return msgf(msg, mn, "NUL byte inside the header");

    char descr[32] = {0};
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0, ndim = 0;
    int64_t shape[CLI_NPY_MAX_DIMS];
    if (!eat(&c, '{')) return msgf(msg, mn, "header is not a dict");
    for (;;) {
        if (eat(&c, '}')) break;
        char key[32];
        if (!parse_str(&c, key, sizeof key)) return msgf(msg, mn, "header: expected a key");
        if (!eat(&c, ':')) return msgf(msg, mn, "header: expected ':' after '%s'", key);
        if (strcmp(key, "descr") == 0) {
            if (have_descr || !parse_str(&c, descr, sizeof descr))
                return msgf(msg, mn, "header: bad 'descr' (only simple dtypes are supported)");
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if (have_fortran) return msgf(msg, mn, "header: duplicate fortran_order");
            if (parse_word(&c, "False")) fortran = 0;
            else if (parse_word(&c, "True")) fortran = 1;
            else return msgf(msg, mn, "header: fortran_order must be True or False");
            have_fortran = 1;
        } else if (strcmp(key, "shape") == 0) {
            if (have_shape || !eat(&c, '(')) return msgf(msg, mn, "header: bad 'shape'");
            for (;;) {
                if (eat(&c, ')')) break;
                if (ndim >= CLI_NPY_MAX_DIMS)
                    return msgf(msg, mn, "shape has more than %d dimensions", CLI_NPY_MAX_DIMS);
                if (!parse_uint(&c, &shape[ndim]))
                    return msgf(msg, mn, "header: shape entries must be non-negative integers");
                ndim++;
                if (!eat(&c, ',')) {
                    if (!eat(&c, ')')) return msgf(msg, mn, "header: unterminated shape");
                    break;
                }
            }
            have_shape = 1;
        } else {
            return msgf(msg, mn, "header: unknown key '%s'", key);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}')) return msgf(msg, mn, "header: expected ',' or '}'");
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end) return msgf(msg, mn, "header: trailing characters after the dict");
    if (!have_descr || !have_fortran || !have_shape)
        return msgf(msg, mn, "header lacks %s",
                    !have_descr ? "'descr'" : !have_fortran ? "'fortran_order'" : "'shape'");
    if (fortran) return msgf(msg, mn, "fortran_order=True arrays are not supported (save with C order)");
    size_t item;
    if (strcmp(descr, "<f4") == 0) { out->dtype = LA_F32; item = 4; }
    else if (strcmp(descr, "<f8") == 0) { out->dtype = LA_F64; item = 8; }
    else if (strcmp(descr, "<i4") == 0) { out->dtype = LA_I32; item = 4; }
    else if (strcmp(descr, "<f2") == 0) { out->dtype = LA_F16; item = 2; }
    else if (descr[0] == '>')
        return msgf(msg, mn, "big-endian dtype '%s' (only little-endian is supported)", descr);
    else
        return msgf(msg, mn, "dtype '%s' not supported (float32 '<f4', float64 '<f8', float16 '<f2', int32 '<i4')", descr);
    size_t count = 1, nbytes;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(count, (size_t)shape[i], &count))
            return msgf(msg, mn, "shape element count overflows");
    if (__builtin_mul_overflow(count, item, &nbytes)) return msgf(msg, mn, "shape byte size overflows");
    size_t avail = total - hstart - hlen;
    if (avail != nbytes)
        return msgf(msg, mn, "data is %zu bytes but shape and dtype need %zu", avail, nbytes);
    out->ndim = ndim;
    for (int i = 0; i < ndim; i++) out->shape[i] = shape[i];
    out->nbytes = nbytes;
    *data_off = hstart + hlen;
    return 0;
}

/* Read exactly n bytes at offset off; 0 or errno (EIO for a short file). */
static int pread_all(int fd, void *dst, size_t n, off_t off) {
    unsigned char *p = (unsigned char *)dst;
    while (n > 0) {
        ssize_t r = pread(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n, off);
        if (r < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (r == 0) return EIO;
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return 0;
}

int cli_npy_read(const char *opt, const char *path, int to_f32, cli_array *out) {
    memset(out, 0, sizeof *out);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) return cli_fail("--%s %s: cannot open: %s", opt, path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return cli_fail("--%s %s: not a regular file", opt, path);
    }
    const size_t total = (size_t)st.st_size;
    unsigned char small[512], *hb = small;
    size_t have = 0, need = total < sizeof small ? total : sizeof small, off = 0;
    char msg[256];
    int r, e = 0;
    for (;;) {
        if (need > sizeof small && hb == small) {
            hb = (unsigned char *)malloc(need);
            if (!hb) { close(fd); return cli_fail("--%s %s: cannot allocate the header", opt, path); }
            memcpy(hb, small, have);
        }
        if (need > have && (e = pread_all(fd, hb + have, need - have, (off_t)have)) != 0) break;
        if (need > have) have = need;
        r = cli_npy_header(hb, have, total, out, &off, &need, msg, sizeof msg);
        if (r != 1) break;
    }
    if (hb != small) free(hb);
    if (e) {
        close(fd);
        return cli_fail("--%s %s: cannot read: %s", opt, path, strerror(e));
    }
    if (r != 0) {
        close(fd);
        memset(out, 0, sizeof *out);
        return cli_fail("--%s %s: %s", opt, path, msg);
    }
    const int convert = to_f32 && out->dtype == LA_F64;
    const size_t count = out->nbytes / (out->dtype == LA_F64 ? 8 : 4);
    const size_t dst_bytes = convert ? count * 4 : out->nbytes;
    char what[64];
    snprintf(what, sizeof what, "--%s", opt);
    if (cli_mem_check(dst_bytes, what)) {
        close(fd);
        memset(out, 0, sizeof *out);
        return 2;
    }
    void *data = cli_big_alloc(dst_bytes);
    if (!data) {
        close(fd);
        memset(out, 0, sizeof *out);
        return cli_fail("--%s %s: cannot allocate %zu bytes", opt, path, dst_bytes);
    }
    if (!convert) {
        e = pread_all(fd, data, out->nbytes, (off_t)off);
    } else {
        /* float64 in blocks through a small buffer, stored as float32 */
        double blk[4096];
        float *dst = (float *)data;
        for (size_t i = 0; !e && i < count;) {
            size_t n = count - i < 4096 ? count - i : 4096;
            e = pread_all(fd, blk, n * 8, (off_t)(off + i * 8));
            for (size_t j = 0; !e && j < n; j++) dst[i + j] = (float)blk[j];
            i += n;
        }
        out->dtype = LA_F32;
        out->nbytes = dst_bytes;
    }
    close(fd);
    if (e) {
        free(data);
        memset(out, 0, sizeof *out);
        return cli_fail("--%s %s: cannot read: %s", opt, path, strerror(e));
    }
    out->data = data;
    return 0;
}

static int write_all(int fd, const void *src, size_t n) {
    const unsigned char *p = (const unsigned char *)src;
    while (n > 0) {
        ssize_t w = write(fd, p, n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        if (w == 0) return EIO;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int cli_npy_write_fd(int fd, la_dtype dtype, int ndim, const int64_t *shape, const void *data) {
    const char *descr;
    size_t item;
    switch (dtype) {
    case LA_F32: descr = "<f4"; item = 4; break;
    case LA_F64: descr = "<f8"; item = 8; break;
    case LA_I32: descr = "<i4"; item = 4; break;
    case LA_F16: descr = "<f2"; item = 2; break;
    default: return EINVAL;
    }
    if (ndim < 0 || ndim > CLI_NPY_MAX_DIMS) return EINVAL;
    char hdr[512];
    int n = snprintf(hdr, sizeof hdr, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
    size_t count = 1;
    for (int i = 0; i < ndim; i++) {
        n += snprintf(hdr + n, sizeof hdr - (size_t)n, "%lld%s", (long long)shape[i],
                      (ndim == 1 || i < ndim - 1) ? ", " : "");
        if (shape[i] < 0 || __builtin_mul_overflow(count, (size_t)shape[i], &count)) return EOVERFLOW;
    }
    n += snprintf(hdr + n, sizeof hdr - (size_t)n, "), }");
    /* pad with spaces so that magic + length + header is a multiple of 64, ending in \n */
    size_t total = 10 + (size_t)n + 1, pad = (64 - total % 64) % 64;
    for (size_t i = 0; i < pad; i++) hdr[n++] = ' ';
    hdr[n++] = '\n';
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(n & 0xff),
                             (unsigned char)(n >> 8)};
    int e = write_all(fd, pre, 10);
    if (!e) e = write_all(fd, hdr, (size_t)n);
    if (!e) e = write_all(fd, data, count * item);
    return e;
}

void cli_array_free(cli_array *a) {
    if (!a) return;
    free(a->data);
    a->data = NULL;
}
