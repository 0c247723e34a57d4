/* longattn._fastcall: one operator call of liblongattn from CPython without
 * ctypes (issue 16: the call overhead budget of shared/TRAINING.md §3).
 *
 *   call(fn, nparams, ctx, device, dtypes, names, lead, *tensors)
 *       -> int status | None
 *
 * fn      address of the C entry point (taken from the ctypes-loaded library,
 *         so this module links against nothing but libpython);
 * nparams its number of parameters (from the header's signature): a call
 *         with another number of arguments raises TypeError, calling nothing;
 * ctx     address of the la_context, already prepared by the caller (threads,
 *         CUDA stream);
 * device  -1: every tensor must be a CPU tensor; >= 0: every tensor must be a
 *         CUDA tensor on that device index;
 * dtypes  dict torch.dtype -> (la_dtype, element size);
 * names   one str per tensor; a name ending in '?' marks an optional tensor
 *         (None is passed as NULL), None elsewhere is not accepted. Two
 *         prefixes (module attribute FIELDS = 1 says they are understood)
 *         serve entry points with a handle or a struct of views among the
 *         tensors (la_{dsa,hisa}_topk_paged):
 *           "*name": not a tensor but a pointer argument: an int (an address,
 *                    e.g. a handle) is passed as a pointer; an object with
 *                    the buffer protocol (a ctypes struct, at most
 *                    FIELD_STRUCT_MAX bytes, read by the callee only) is
 *                    copied onto this function's stack and the copy's
 *                    address passed;
 *           "@K:name" (or "@K:name?"): a tensor that is a field of the last
 *                    "*" struct before it: its view's address (NULL for an
 *                    optional None) is written at byte offset K of the
 *                    struct's copy; it is not an argument of its own;
 * lead    None (no leading argument), an int (passed as a pointer: a state
 *         handle) or an object with the buffer protocol (a ctypes params
 *         struct: its address is passed);
 * tensors torch tensors (or None where optional).
 *
 * The call is fn(lead, &view_0, ..., &view_n-1, ctx), or fn(&view_0, ...,
 * ctx) without a lead ("@" entries left out of the list). Views and struct
 * copies are on this function's stack (no shared slots: thread-safe; the
 * caller's struct is never written). Returns the la_status, or None without
 * calling anything when an argument is anything but the common case (not a
 * tensor, a dtype outside `dtypes`, rank > 4, another device, a misaligned
 * address, a required None): the caller then takes the ctypes path, which
 * raises the error with its message or handles the case.
 *
 * The GIL is released around CPU calls (they compute; ctypes released it
 * too) and kept for CUDA calls (they enqueue kernels and return: releasing
 * and taking it back would cost more than the call).
 *
 * Every C entry point called here takes only pointers (params struct, tensor
 * views, context, state handles) and returns an la_status: it is called
 * through a function type of the same number of void * parameters, the same
 * machine-level call as its own prototype on every supported ABI (it is what
 * ctypes does through libffi).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

#include "longattn.h"

/* Bumped when call()'s contract changes: longattn._tensor refuses another. */
#define FASTCALL_API 2
#define MAX_TENSORS 20
#define MAX_ARGS (MAX_TENSORS + 2)
#define FIELD_STRUCT_MAX 256 /* bytes of a "*" struct copied onto the stack */
#define MAX_STRUCTS 2

typedef struct {
    PyObject *s_dtype, *s_is_cuda, *s_is_cpu, *s_data_ptr, *s_shape, *s_stride, *s_get_device;
} fc_state;

static fc_state *state_of(PyObject *m) { return (fc_state *)PyModule_GetState(m); }

/* 1: x was written into *t; 0: not the common case (the caller falls back);
 * -1: a Python error that is not about x (memory). Clears x's own errors. */
static int pack_view(fc_state *st, PyObject *x, long device, PyObject *dtypes, la_tensor *t)
{
    int ok = 0;
    PyObject *dt = NULL, *shape = NULL, *stride = NULL, *addr = NULL, *flag = NULL;
    dt = PyObject_GetAttr(x, st->s_dtype);
    if (!dt) goto fallback;
    PyObject *entry = PyDict_GetItemWithError(dtypes, dt); /* borrowed */
    if (!entry || !PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2) goto fallback;
    long code = PyLong_AsLong(PyTuple_GET_ITEM(entry, 0));
    long item = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1));
    if (PyErr_Occurred() || item <= 0) goto fallback;

    /* one device query per tensor: is_cpu for a CPU call, is_cuda and the
     * device index for a CUDA call (anything else: not the common case) */
    const int cuda = device >= 0;
    flag = PyObject_GetAttr(x, cuda ? st->s_is_cuda : st->s_is_cpu);
    if (!flag || flag != Py_True) goto fallback;
    if (cuda) {
        PyObject *idx = PyObject_CallMethodNoArgs(x, st->s_get_device);
        if (!idx) goto fallback;
        long d = PyLong_AsLong(idx);
        Py_DECREF(idx);
        if (d != device) goto fallback;
    }

    shape = PyObject_GetAttr(x, st->s_shape);
    if (!shape || !PyTuple_Check(shape)) goto fallback;
    Py_ssize_t nd = PyTuple_GET_SIZE(shape);
    if (nd > LA_MAX_DIMS) goto fallback;
    stride = PyObject_CallMethodNoArgs(x, st->s_stride);
    if (!stride || !PyTuple_Check(stride) || PyTuple_GET_SIZE(stride) != nd) goto fallback;
    addr = PyObject_CallMethodNoArgs(x, st->s_data_ptr);
    if (!addr) goto fallback;
    void *data = PyLong_AsVoidPtr(addr);
    if (PyErr_Occurred() || (uintptr_t)data % (uintptr_t)item) goto fallback;

    memset(t, 0, sizeof *t);
    t->data = data;
    t->dtype = (la_dtype)code;
    t->device = cuda ? LA_DEVICE_CUDA : LA_DEVICE_CPU;
    t->ndim = (int)nd;
    for (Py_ssize_t i = 0; i < nd; i++) {
        t->ne[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shape, i));
        t->nb[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(stride, i));
    }
    if (PyErr_Occurred()) goto fallback;
    ok = 1;
    goto done;
fallback:
    if (PyErr_Occurred()) {
        if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
            ok = -1;
            goto done;
        }
        PyErr_Clear();
    }
done:
    Py_XDECREF(dt);
    Py_XDECREF(flag);
    Py_XDECREF(shape);
    Py_XDECREF(stride);
    Py_XDECREF(addr);
    return ok;
}

typedef void *P;
typedef la_status (*fn1)(P);
typedef la_status (*fn2)(P, P);
typedef la_status (*fn3)(P, P, P);
typedef la_status (*fn4)(P, P, P, P);
typedef la_status (*fn5)(P, P, P, P, P);
typedef la_status (*fn6)(P, P, P, P, P, P);
typedef la_status (*fn7)(P, P, P, P, P, P, P);
typedef la_status (*fn8)(P, P, P, P, P, P, P, P);
typedef la_status (*fn9)(P, P, P, P, P, P, P, P, P);
typedef la_status (*fn10)(P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn11)(P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn12)(P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn13)(P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn14)(P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn15)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn16)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn17)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn18)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn19)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn20)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn21)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);
typedef la_status (*fn22)(P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P, P);

static la_status invoke(void *f, int n, P *a)
{
    switch (n) {
    case 1: return ((fn1)f)(a[0]);
    case 2: return ((fn2)f)(a[0], a[1]);
    case 3: return ((fn3)f)(a[0], a[1], a[2]);
    case 4: return ((fn4)f)(a[0], a[1], a[2], a[3]);
    case 5: return ((fn5)f)(a[0], a[1], a[2], a[3], a[4]);
    case 6: return ((fn6)f)(a[0], a[1], a[2], a[3], a[4], a[5]);
    case 7: return ((fn7)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6]);
    case 8: return ((fn8)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    case 9: return ((fn9)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
    case 10: return ((fn10)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9]);
    case 11: return ((fn11)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10]);
    case 12: return ((fn12)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11]);
    case 13: return ((fn13)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12]);
    case 14: return ((fn14)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13]);
    case 15: return ((fn15)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14]);
    case 16: return ((fn16)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15]);
    case 17: return ((fn17)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16]);
    case 18: return ((fn18)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16], a[17]);
    case 19: return ((fn19)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18]);
    case 20: return ((fn20)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19]);
    case 21: return ((fn21)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19],
                              a[20]);
    case 22: return ((fn22)f)(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                              a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19],
                              a[20], a[21]);
    default: return LA_ERR_INTERNAL; /* unreachable: call() bounds n */
    }
}

static int optional_name(PyObject *name)
{
    if (!PyUnicode_Check(name)) return 0;
    Py_ssize_t n = PyUnicode_GET_LENGTH(name);
    return n > 0 && PyUnicode_READ_CHAR(name, n - 1) == '?';
}

/* The first character of a name ('*', '@' or another), 0 if not a str. */
static Py_UCS4 name_kind(PyObject *name)
{
    if (!PyUnicode_Check(name) || PyUnicode_GET_LENGTH(name) == 0) return 0;
    return PyUnicode_READ_CHAR(name, 0);
}

/* K of an "@K:name" entry, or -1 (with TypeError) when malformed. */
static Py_ssize_t field_offset(PyObject *name)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(name), k = 0, i = 1;
    for (; i < n && i < 8; i++) {
        Py_UCS4 ch = PyUnicode_READ_CHAR(name, i);
        if (ch == ':') break;
        if (ch < '0' || ch > '9') break;
        k = k * 10 + (Py_ssize_t)(ch - '0');
    }
    if (i == 1 || i >= n || PyUnicode_READ_CHAR(name, i) != ':') {
        PyErr_Format(PyExc_TypeError, "call: field entry %R: expected \"@OFFSET:name\"", name);
        return -1;
    }
    return k;
}

static PyObject *fc_call(PyObject *m, PyObject *const *args, Py_ssize_t nargs)
{
    enum { FIXED = 7 };
    if (nargs < FIXED) {
        PyErr_SetString(PyExc_TypeError, "call(fn, nparams, ctx, device, dtypes, names, lead, "
                                         "*tensors): too few arguments");
        return NULL;
    }
    Py_ssize_t nt = nargs - FIXED;
    PyObject *dtypes = args[4], *names = args[5], *lead = args[6];
    if (nt > MAX_TENSORS) {
        PyErr_Format(PyExc_TypeError, "call: %zd tensors, at most %d", nt, MAX_TENSORS);
        return NULL;
    }
    if (!PyDict_Check(dtypes) || !PyTuple_Check(names) || PyTuple_GET_SIZE(names) != nt) {
        PyErr_SetString(PyExc_TypeError, "call: dtypes must be a dict and names a tuple with "
                                         "one name per tensor");
        return NULL;
    }
    void *fn = PyLong_AsVoidPtr(args[0]);
    if (!fn && !PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "call: fn is a NULL address");
    long nparams = PyLong_AsLong(args[1]);
    void *ctx = PyLong_AsVoidPtr(args[2]);
    long device = PyLong_AsLong(args[3]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t nfields = 0; /* "@" entries: struct fields, not arguments */
    for (Py_ssize_t i = 0; i < nt; i++)
        nfields += name_kind(PyTuple_GET_ITEM(names, i)) == '@';
    if (nparams != (lead != Py_None) + nt - nfields + 1) {
        PyErr_Format(PyExc_TypeError, "call: %ld parameters, called with %zd arguments",
                     nparams, (Py_ssize_t)(lead != Py_None) + nt - nfields + 1);
        return NULL;
    }

    fc_state *st = state_of(m);
    la_tensor views[MAX_TENSORS];
    P a[MAX_ARGS];
    int n = 0;
    Py_buffer buf;
    int have_buf = 0;
    if (lead != Py_None) {
        if (PyLong_Check(lead)) {
            a[n++] = PyLong_AsVoidPtr(lead);
            if (PyErr_Occurred()) return NULL;
        } else {
            if (PyObject_GetBuffer(lead, &buf, PyBUF_SIMPLE) < 0) return NULL;
            have_buf = 1;
            a[n++] = buf.buf;
        }
    }
    PyObject *result = NULL;
    /* "*" struct copies (pointer-aligned); cur: the last one, its size */
    void *copies[MAX_STRUCTS][FIELD_STRUCT_MAX / sizeof(void *)];
    int ncopies = 0;
    unsigned char *cur = NULL;
    Py_ssize_t cur_len = 0;
    for (Py_ssize_t i = 0; i < nt; i++) {
        PyObject *x = args[FIXED + i], *name = PyTuple_GET_ITEM(names, i);
        const Py_UCS4 kind = name_kind(name);
        if (kind == '*') { /* a pointer argument: an address, or a struct copied */
            if (PyLong_Check(x)) {
                a[n] = PyLong_AsVoidPtr(x);
                if (PyErr_Occurred()) goto done;
                n++;
                continue;
            }
            Py_buffer sb;
            if (ncopies == MAX_STRUCTS || PyObject_GetBuffer(x, &sb, PyBUF_SIMPLE) < 0) {
                PyErr_Clear();
                goto fallback;
            }
            const Py_ssize_t len = sb.len;
            if (len > FIELD_STRUCT_MAX) {
                PyBuffer_Release(&sb);
                goto fallback;
            }
            cur = (unsigned char *)copies[ncopies++];
            memcpy(cur, sb.buf, (size_t)len);
            PyBuffer_Release(&sb);
            cur_len = len;
            a[n++] = cur;
            continue;
        }
        void *field = NULL; /* where an "@" entry's view address goes */
        if (kind == '@') {
            const Py_ssize_t k = field_offset(name);
            if (k < 0) goto done;
            if (!cur || k % (Py_ssize_t)sizeof(void *) || k + (Py_ssize_t)sizeof(void *) > cur_len) {
                PyErr_Format(PyExc_TypeError, "call: field entry %R: no struct before it holds a pointer "
                                              "at that offset", name);
                goto done;
            }
            field = cur + k;
        }
        void *v;
        if (x == Py_None) {
            if (!optional_name(name)) goto fallback;
            v = NULL;
        } else {
            int r = pack_view(st, x, device, dtypes, &views[i]);
            if (r < 0) goto done;
            if (r == 0) goto fallback;
            v = &views[i];
        }
        if (field)
            memcpy(field, &v, sizeof v);
        else
            a[n++] = v;
    }
    a[n++] = ctx;
    la_status status;
    if (device < 0) {
        Py_BEGIN_ALLOW_THREADS
        status = invoke(fn, n, a);
        Py_END_ALLOW_THREADS
    } else {
        status = invoke(fn, n, a);
    }
    result = PyLong_FromLong((long)status);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    if (have_buf) PyBuffer_Release(&buf);
    return result;
}

static PyMethodDef fc_methods[] = {
    {"call", (PyCFunction)(void (*)(void))fc_call, METH_FASTCALL,
     "call(fn, nparams, ctx, device, dtypes, names, lead, *tensors) -> status or None\n\n"
     "One liblongattn call with torch tensor views packed here (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static int fc_exec(PyObject *m)
{
    fc_state *st = state_of(m);
    if (!(st->s_dtype = PyUnicode_InternFromString("dtype"))) return -1;
    if (!(st->s_is_cuda = PyUnicode_InternFromString("is_cuda"))) return -1;
    if (!(st->s_is_cpu = PyUnicode_InternFromString("is_cpu"))) return -1;
    if (!(st->s_data_ptr = PyUnicode_InternFromString("data_ptr"))) return -1;
    if (!(st->s_shape = PyUnicode_InternFromString("shape"))) return -1;
    if (!(st->s_stride = PyUnicode_InternFromString("stride"))) return -1;
    if (!(st->s_get_device = PyUnicode_InternFromString("get_device"))) return -1;
    if (PyModule_AddIntConstant(m, "API", FASTCALL_API) < 0) return -1;
    if (PyModule_AddIntConstant(m, "TENSOR_SIZE", (long)sizeof(la_tensor)) < 0) return -1;
    if (PyModule_AddIntConstant(m, "MAX_TENSORS", MAX_TENSORS) < 0) return -1;
    if (PyModule_AddIntConstant(m, "FIELDS", 1) < 0) return -1; /* "*" and "@K:" names */
    if (PyModule_AddIntConstant(m, "FIELD_STRUCT_MAX", FIELD_STRUCT_MAX) < 0) return -1;
    return 0;
}

static int fc_traverse(PyObject *m, visitproc visit, void *arg)
{
    (void)visit;
    (void)arg;
    (void)m; /* interned strings only: no cycles through the state */
    return 0;
}

static void fc_free(void *m)
{
    fc_state *st = state_of((PyObject *)m);
    if (!st) return;
    Py_CLEAR(st->s_dtype);
    Py_CLEAR(st->s_is_cuda);
    Py_CLEAR(st->s_is_cpu);
    Py_CLEAR(st->s_data_ptr);
    Py_CLEAR(st->s_shape);
    Py_CLEAR(st->s_stride);
    Py_CLEAR(st->s_get_device);
}

static PyModuleDef_Slot fc_slots[] = {
    {Py_mod_exec, (void *)fc_exec},
    {0, NULL},
};

static struct PyModuleDef fc_module = {
    PyModuleDef_HEAD_INIT,
    "longattn._fastcall",
    "liblongattn calls from CPython without ctypes (see longattn/_fastcall.c).",
    sizeof(fc_state),
    fc_methods,
    fc_slots,
    fc_traverse,
    NULL,
    fc_free,
};

PyMODINIT_FUNC PyInit__fastcall(void) { return PyModuleDef_Init(&fc_module); }
