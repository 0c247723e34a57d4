"""ctypes bindings for every declaration of include/longattn.h.

The shared library is found, in this order:
  1. the environment variable LONGATTN_LIB (a path to liblongattn.so);
  2. the build tree of the checkout this package lives in
     (<repo>/build/liblongattn.so, i.e. ../../build relative to this file),
     or $LA_BUILD/liblongattn.so when LA_BUILD is set (relative to <repo>);
  3. a copy bundled inside the package by `pip install ./python`;
  4. the system (ctypes.util.find_library("longattn"), e.g. after
     `make install`).

Symbols are resolved lazily: an operator whose C symbol is absent from the
loaded library raises NotImplementedError when called, not at import.
"""
import ctypes
import ctypes.util
import os
import threading

# ---------------------------------------------------------------------------
# enums (values fixed by include/longattn.h)
# ---------------------------------------------------------------------------
LA_OK = 0
LA_ERR_ARG = 1
LA_ERR_SHAPE = 2
LA_ERR_DTYPE = 3
LA_ERR_NOMEM = 4
LA_ERR_OVERFLOW = 5
LA_ERR_UNSUPPORTED = 6
LA_ERR_DEVICE = 7
LA_ERR_IO = 8
LA_ERR_FORMAT = 9
LA_ERR_INTERNAL = 10

STATUS_NAMES = {
    0: "LA_OK", 1: "LA_ERR_ARG", 2: "LA_ERR_SHAPE", 3: "LA_ERR_DTYPE",
    4: "LA_ERR_NOMEM", 5: "LA_ERR_OVERFLOW", 6: "LA_ERR_UNSUPPORTED",
    7: "LA_ERR_DEVICE", 8: "LA_ERR_IO", 9: "LA_ERR_FORMAT", 10: "LA_ERR_INTERNAL",
}

LA_F32, LA_F64, LA_BF16, LA_I32, LA_F16, LA_FP8_E4M3 = 0, 1, 2, 3, 4, 5
LA_DEVICE_CPU, LA_DEVICE_CUDA = 0, 1
LA_MAX_DIMS = 4

FEATURES = {"identity": 0, "relu": 1, "relu_eps": 2, "relu1": 3, "elu1": 4}
FOCUSED_VARIANTS = {"flatten": 0, "blog": 1}
MHLA_NORMALIZE = {"per_query": 0, "none": 1, "released_vision": 2}
MHLA_INIT_KINDS = {"locality": 0, "locality_global": 1, "uniform_causal": 2}
MAP_VARIANTS = {"softmax": 0, "linear": 1, "mhla": 2, "focused_flatten": 3,
                "focused_blog": 4}

la_status = ctypes.c_int
la_enum = ctypes.c_int
c_int64_p = ctypes.POINTER(ctypes.c_int64)


# ---------------------------------------------------------------------------
# structs (field order and types exactly as in the header; ctypes applies
# the platform C alignment rules, and tests/python/test_py_abi.py compares
# every size and offset with a C program compiled against the header)
# ---------------------------------------------------------------------------
class la_tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("dtype", la_enum),
        ("device", la_enum),
        ("ndim", ctypes.c_int),
        ("ne", ctypes.c_int64 * LA_MAX_DIMS),
        ("nb", ctypes.c_int64 * LA_MAX_DIMS),
    ]


la_tensor_p = ctypes.POINTER(la_tensor)


class la_softmax_params(ctypes.Structure):
    _fields_ = [("causal", ctypes.c_int), ("scale", ctypes.c_float)]


class la_linear_params(ctypes.Structure):
    _fields_ = [
        ("feature", la_enum),
        ("causal", ctypes.c_int),
        ("normalize", ctypes.c_int),
        ("eps", ctypes.c_float),
        ("scale_q", ctypes.c_float),
        ("chunk", ctypes.c_int64),
    ]


class la_focused_params(ctypes.Structure):
    _fields_ = [
        ("variant", la_enum),
        ("map_h", ctypes.c_int64),
        ("map_w", ctypes.c_int64),
        ("p", ctypes.c_float),
        ("eps", ctypes.c_float),
    ]


class la_mhla_params(ctypes.Structure):
    _fields_ = [
        ("grid_ndim", ctypes.c_int),
        ("grid", ctypes.c_int64 * 3),
        ("blocks", ctypes.c_int64 * 3),
        ("feature", la_enum),
        ("normalize", la_enum),
        ("eps", ctypes.c_float),
        ("scale_q", ctypes.c_float),
    ]


class la_mhla_causal_params(ctypes.Structure):
    _fields_ = [
        ("chunk", ctypes.c_int64),
        ("feature", la_enum),
        ("normalize", la_enum),
        ("eps", ctypes.c_float),
        ("scale_q", ctypes.c_float),
    ]


class la_index_params(ctypes.Structure):
    _fields_ = [
        ("topk", ctypes.c_int64),
        ("block", ctypes.c_int64),
        ("block_topk", ctypes.c_int64),
        ("k_scale", la_tensor_p),
        ("q_scale", la_tensor_p),
    ]


class la_sparse_attn_params(ctypes.Structure):
    _fields_ = [("dv", ctypes.c_int64), ("scale", ctypes.c_float)]


class la_attn_map_params(ctypes.Structure):
    _fields_ = [
        ("variant", la_enum),
        ("feature", la_enum),
        ("scale", ctypes.c_float),
        ("mhla", la_mhla_params),
        ("focused", la_focused_params),
    ]


# Every struct of the header, by its C name (used by the ABI test).
STRUCTS = {
    "la_tensor": la_tensor,
    "la_softmax_params": la_softmax_params,
    "la_linear_params": la_linear_params,
    "la_focused_params": la_focused_params,
    "la_mhla_params": la_mhla_params,
    "la_mhla_causal_params": la_mhla_causal_params,
    "la_index_params": la_index_params,
    "la_sparse_attn_params": la_sparse_attn_params,
    "la_attn_map_params": la_attn_map_params,
}

# Opaque handles.
la_context_p = ctypes.c_void_p
la_mhla_state_p = ctypes.c_void_p
la_index_cache_p = ctypes.c_void_p

la_alloc_fn = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
la_free_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)

P = ctypes.POINTER
_T = la_tensor_p
_S = la_status

# name -> (restype, argtypes): every function of include/longattn.h.
SIGNATURES = {
    # status
    "la_status_string": (ctypes.c_char_p, [la_status]),
    "la_last_error": (ctypes.c_char_p, []),
    "la_version": (ctypes.c_char_p, []),
    "la_memory_available": (_S, [P(ctypes.c_size_t)]),
    "la_build_info": (ctypes.c_char_p, []),
    "la_cuda_available": (_S, [P(ctypes.c_int)]),
    # tensors
    "la_tensor_init": (_S, [_T, ctypes.c_void_p, la_enum, la_enum, ctypes.c_int, c_int64_p]),
    "la_tensor_init_strided": (_S, [_T, ctypes.c_void_p, la_enum, la_enum, ctypes.c_int,
                                    c_int64_p, c_int64_p]),
    "la_dtype_size": (ctypes.c_size_t, [la_enum]),
    "la_dtype_name": (ctypes.c_char_p, [la_enum]),
    # context
    "la_context_create": (_S, [P(la_context_p)]),
    "la_context_destroy": (_S, [la_context_p]),
    "la_context_set_threads": (_S, [la_context_p, ctypes.c_int]),
    "la_context_get_threads": (_S, [la_context_p, P(ctypes.c_int)]),
    "la_context_set_allocator": (_S, [la_context_p, la_alloc_fn, la_free_fn, ctypes.c_void_p]),
    "la_context_set_cuda_stream": (_S, [la_context_p, ctypes.c_void_p]),
    "la_context_get_cuda_stream": (_S, [la_context_p, P(ctypes.c_void_p)]),
    # feature maps
    "la_feature_from_name": (_S, [ctypes.c_char_p, P(la_enum)]),
    "la_feature_name": (ctypes.c_char_p, [la_enum]),
    # §1 softmax
    "la_softmax_params_init": (_S, [P(la_softmax_params)]),
    "la_softmax_attention": (_S, [P(la_softmax_params), _T, _T, _T, _T, _T, la_context_p]),
    # §3 linear
    "la_linear_params_init": (_S, [P(la_linear_params)]),
    "la_linear_attention": (_S, [P(la_linear_params), _T, _T, _T, _T, _T, _T, _T, _T,
                                 la_context_p]),
    # §4 focused
    "la_focused_params_init": (_S, [P(la_focused_params)]),
    "la_focused_attention": (_S, [P(la_focused_params), _T, _T, _T, _T, _T, _T, _T, _T,
                                  la_context_p]),
    # §5 MHLA
    "la_mhla_params_init": (_S, [P(la_mhla_params)]),
    "la_mhla_forward": (_S, [P(la_mhla_params), _T, _T, _T, _T, _T, la_context_p]),
    "la_mhla_causal_params_init": (_S, [P(la_mhla_causal_params)]),
    "la_mhla_causal_forward": (_S, [P(la_mhla_causal_params), _T, _T, _T, _T, _T,
                                    la_context_p]),
    "la_mhla_state_create": (_S, [P(la_mhla_causal_params), ctypes.c_int64, ctypes.c_int64,
                                  ctypes.c_int64, ctypes.c_int64, _T, P(la_mhla_state_p)]),
    "la_mhla_state_append": (_S, [la_mhla_state_p, _T, _T, _T, _T, la_context_p]),
    "la_mhla_state_length": (_S, [la_mhla_state_p, c_int64_p]),
    "la_mhla_state_destroy": (_S, [la_mhla_state_p]),
    "la_mhla_init": (_S, [la_enum, ctypes.c_int, c_int64_p, _T]),
    "la_mhla_project": (_S, [_T, ctypes.c_int]),
    # §6–§7 indexers
    "la_index_params_init": (_S, [P(la_index_params)]),
    "la_dsa_indexer": (_S, [P(la_index_params), _T, _T, _T, _T, _T, _T, _T, la_context_p]),
    "la_hisa_indexer": (_S, [P(la_index_params), _T, _T, _T, _T, _T, _T, la_context_p]),
    "la_blocksparse_indexer": (_S, [P(la_index_params), _T, _T, _T, _T, _T, _T,
                                    la_context_p]),
    "la_topk": (_S, [_T, _T, la_context_p]),
    "la_index_cache_create": (_S, [ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                   P(la_index_cache_p)]),
    "la_index_cache_append": (_S, [la_index_cache_p, _T]),
    "la_index_cache_length": (_S, [la_index_cache_p, c_int64_p]),
    "la_index_cache_hisa": (_S, [la_index_cache_p, P(la_index_params), _T, _T, _T, _T, _T,
                                 la_context_p]),
    "la_index_cache_destroy": (_S, [la_index_cache_p]),
    # §8 sparse attention
    "la_sparse_attn_params_init": (_S, [P(la_sparse_attn_params)]),
    "la_sparse_attention": (_S, [P(la_sparse_attn_params), _T, _T, _T, _T, _T,
                                 la_context_p]),
    # backward passes (shared/TRAINING.md §1)
    "la_softmax_backward": (_S, [P(la_softmax_params)] + [_T] * 9 + [la_context_p]),
    "la_linear_backward": (_S, [P(la_linear_params)] + [_T] * 14 + [la_context_p]),
    "la_mhla_backward": (_S, [P(la_mhla_params)] + [_T] * 10 + [la_context_p]),
    "la_mhla_causal_backward": (_S, [P(la_mhla_causal_params)] + [_T] * 10 + [la_context_p]),
    "la_focused_backward": (_S, [P(la_focused_params)] + [_T] * 16 + [la_context_p]),
    "la_sparse_attention_backward": (_S, [P(la_sparse_attn_params)] + [_T] * 8
                                     + [la_context_p]),
    # §9 analysis
    "la_attn_map_params_init": (_S, [P(la_attn_map_params)]),
    "la_attention_map": (_S, [P(la_attn_map_params), _T, _T, _T, _T, _T, la_context_p]),
    "la_map_rank_entropy": (_S, [_T, ctypes.c_double, c_int64_p, P(ctypes.c_double)]),
}


# ---------------------------------------------------------------------------
# loading
# ---------------------------------------------------------------------------
_HERE = os.path.dirname(os.path.abspath(__file__))
_LIBNAME = "liblongattn.so"


def candidate_paths():
    """The paths tried, in order, to load liblongattn.so (see module doc)."""
    paths = []
    env = os.environ.get("LONGATTN_LIB")
    if env:
        paths.append(("LONGATTN_LIB", env))
    repo = os.path.normpath(os.path.join(_HERE, "..", ".."))
    if os.path.exists(os.path.join(repo, "include", "longattn.h")):
        build = os.environ.get("LA_BUILD")
        if build:
            paths.append(("LA_BUILD", os.path.join(repo, build, _LIBNAME)))
        paths.append(("build tree", os.path.join(repo, "build", _LIBNAME)))
    paths.append(("bundled", os.path.join(_HERE, _LIBNAME)))
    found = ctypes.util.find_library("longattn")
    if found:
        paths.append(("system", found))
    return paths


class Library:
    """The loaded liblongattn with lazily typed symbols.

    `lib.la_softmax_attention(...)` resolves and types the symbol on first
    use; `lib.has("la_x")` says whether the symbol exists in this build.
    """

    def __init__(self):
        self._dll = None
        self.path = None
        self._lock = threading.Lock()
        self._tried = []

    def _load(self):
        with self._lock:
            if self._dll is not None:
                return self._dll
            tried = []
            for origin, path in candidate_paths():
                if origin == "LONGATTN_LIB" or origin == "system" or os.path.exists(path):
                    try:
                        self._dll = ctypes.CDLL(path)
                        self.path = path
                        return self._dll
                    except OSError as e:
                        tried.append("%s (%s): %s" % (path, origin, e))
                        if origin == "LONGATTN_LIB":
                            break  # an explicit choice that fails is an error
                else:
                    tried.append("%s (%s): not found" % (path, origin))
            raise OSError(
                "longattn: could not load %s. Build it with `make` at the repository root, "
                "set LONGATTN_LIB=/path/to/liblongattn.so, or reinstall the package after "
                "`make` so that it bundles the library. Tried:\n  %s"
                % (_LIBNAME, "\n  ".join(tried)))

    @property
    def dll(self):
        return self._dll if self._dll is not None else self._load()

    def has(self, name):
        try:
            getattr(self.dll, name)
            return True
        except AttributeError:
            return False

    def __getattr__(self, name):
        if not name.startswith("la_"):
            raise AttributeError(name)
        dll = self.dll
        try:
            fn = getattr(dll, name)
        except AttributeError:
            raise NotImplementedError(
                "longattn: %s is not in %s: this build of the C library does not implement "
                "it (yet). Rebuild with `make` after the operator has landed." % (name, self.path)
            ) from None
        restype, argtypes = SIGNATURES[name]
        fn.restype = restype
        fn.argtypes = argtypes
        self.__dict__[name] = fn  # cache: later lookups skip __getattr__
        return fn


lib = Library()


def _pointer_type(t):
    return t is ctypes.c_void_p or (isinstance(t, type) and issubclass(t, ctypes._Pointer))


_UNCHECKED = {}


def unchecked(name):
    """lib.<name> without argtypes where every parameter of its signature is
    a pointer (ctypes then converts no argument: about 1 µs less per call of
    an operator), else lib.<name> itself. Callers pass only ctypes pointer
    objects (byref, pointer, c_void_p) or None: without argtypes a Python int
    would be passed as a C int (tests/python/test_py_hardening.py checks the
    operators' calls)."""
    fn = _UNCHECKED.get(name)
    if fn is None:
        fn = getattr(lib, name)
        if all(_pointer_type(t) for t in fn.argtypes) and fn.restype is la_status:
            fn = lib.dll[name]  # a new function object of the symbol, without argtypes
            fn.restype = la_status
        _UNCHECKED[name] = fn
    return fn


# ---------------------------------------------------------------------------
# paged serving (include/longattn.h "Paged serving")
# ---------------------------------------------------------------------------
class la_paged_cache_params(ctypes.Structure):
    _fields_ = [
        ("num_pages", ctypes.c_int64),
        ("page_size", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("dtype", la_enum),
        ("block", ctypes.c_int64),
        ("max_seqs", ctypes.c_int64),
        ("max_seq_len", ctypes.c_int64),
        ("device", la_enum),
    ]


class la_paged_query(ctypes.Structure):
    _fields_ = [
        ("block_table", la_tensor_p),
        ("context_lens", la_tensor_p),
        ("q_seq", la_tensor_p),
        ("next_n", ctypes.c_int64),
        ("return_slots", ctypes.c_int),
    ]


la_paged_index_cache_p = ctypes.c_void_p
STRUCTS.update({"la_paged_cache_params": la_paged_cache_params, "la_paged_query": la_paged_query})
SIGNATURES.update({
    "la_paged_cache_params_init": (_S, [P(la_paged_cache_params)]),
    "la_paged_index_cache_create": (_S, [P(la_paged_cache_params), P(la_paged_index_cache_p)]),
    "la_paged_index_cache_destroy": (_S, [la_paged_index_cache_p]),
    "la_paged_index_cache_get_params": (_S, [la_paged_index_cache_p, P(la_paged_cache_params)]),
    "la_paged_index_cache_storage": (_S, [la_paged_index_cache_p, P(ctypes.c_void_p),
                                          P(ctypes.c_size_t)]),
    "la_paged_index_cache_append": (_S, [la_paged_index_cache_p, _T, _T, _T, _T, la_context_p]),
    "la_paged_index_cache_gather": (_S, [la_paged_index_cache_p, _T, ctypes.c_int64,
                                         ctypes.c_int64, _T]),
    "la_paged_index_cache_pooled": (_S, [la_paged_index_cache_p, ctypes.c_int64, ctypes.c_int64,
                                         _T]),
    "la_paged_query_init": (_S, [P(la_paged_query)]),
    "la_paged_index_cache_check": (_S, [la_paged_index_cache_p, la_context_p]),
    "la_dsa_topk_paged": (_S, [P(la_index_params), _T, _T, la_paged_index_cache_p,
                               P(la_paged_query), _T, la_context_p]),
    "la_hisa_topk_paged": (_S, [P(la_index_params), _T, _T, la_paged_index_cache_p,
                                P(la_paged_query), _T, la_context_p]),
    "la_sparse_attention_paged": (_S, [P(la_sparse_attn_params), _T, _T, _T, _T, _T,
                                       la_context_p]),
})
