"""NumPy arrays and torch tensors -> la_tensor views, output allocation,
per-thread contexts and the CUDA stream hand-off.

A view describes the caller's memory as it is: data pointer, dtype, device,
extents and strides in elements. Nothing is copied; an array whose strides
cannot be written in elements (a byte stride that is not a multiple of the
item size) is refused with a ValueError rather than copied behind the
caller's back.
"""
import ctypes
import math
import operator
import os
import struct
import sys
import threading

import numpy as np

from . import _lib as L
from ._errors import call, error_from_status

# numpy dtype name -> la_dtype
_NP_DTYPES = {
    "float32": L.LA_F32,
    "float64": L.LA_F64,
    "bfloat16": L.LA_BF16,  # ml_dtypes.bfloat16, when installed
    "int32": L.LA_I32,
    "float16": L.LA_F16,
    "float8_e4m3fn": L.LA_FP8_E4M3,  # ml_dtypes
}
# torch dtype attribute name -> la_dtype
_TORCH_DTYPES = {
    "float32": L.LA_F32,
    "float64": L.LA_F64,
    "bfloat16": L.LA_BF16,
    "int32": L.LA_I32,
    "float16": L.LA_F16,
    "float8_e4m3fn": L.LA_FP8_E4M3,
}


def _torch():
    """torch if it has been imported by anyone (never imported here)."""
    return sys.modules.get("torch")


def is_torch(x):
    t = _torch()
    return t is not None and isinstance(x, t.Tensor)


def is_numpy(x):
    return isinstance(x, np.ndarray)


def is_array(x):
    return is_numpy(x) or is_torch(x)


def is_cuda(x):
    return is_torch(x) and x.is_cuda


_INT_RANGES = {"int64": (-2**63, 2**63 - 1), "int32": (-2**31, 2**31 - 1)}
_F32_MAX = 3.4028234663852886e38


def c_int(value, what, ctype="int64"):
    """`value` as a Python int that fits the C type `ctype` ("int64" or
    "int32"). ctypes would silently keep the low bits (2**64 + 16 -> 16):
    a value outside the range raises OverflowError, a non-integer (float,
    str, None) raises TypeError."""
    if isinstance(value, bool):
        value = int(value)
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError("%s: expected an integer, got %r (%s)"
                        % (what, value, type(value).__name__)) from None
    lo, hi = _INT_RANGES[ctype]
    if not lo <= v <= hi:
        raise OverflowError("%s: %d does not fit in the C type %s_t [%d, %d]"
                            % (what, v, ctype, lo, hi))
    return v


def c_float(value, what):
    """`value` as a float that a C float holds: a finite value beyond the
    float32 range raises OverflowError instead of becoming inf."""
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError("%s: expected a number, got %r (%s)"
                        % (what, value, type(value).__name__)) from None
    if math.isfinite(v) and abs(v) > _F32_MAX:
        raise OverflowError("%s: %r does not fit in a C float (|x| <= %.7g)"
                            % (what, value, _F32_MAX))
    return v


def _la_dtype(x, name):
    if is_numpy(x):
        dt = _NP_DTYPES.get(x.dtype.name)
        what = "numpy dtype " + x.dtype.name
    else:
        dt = None
        for attr, code in _TORCH_DTYPES.items():
            if getattr(_torch(), attr, None) == x.dtype:
                dt = code
                break
        what = str(x.dtype)
    if dt is None:
        raise ValueError("%s: dtype %s is not supported by longattn "
                         "(use float32, float64, bfloat16, float16 or int32)" % (name, what))
    return dt


def view(x, name):
    """la_tensor describing array/tensor `x` (no copy)."""
    if not is_array(x):
        raise TypeError("%s: expected a numpy.ndarray or torch.Tensor, got %s"
                        % (name, type(x).__name__))
    t = L.la_tensor()
    ndim = x.ndim
    if ndim > L.LA_MAX_DIMS:
        raise ValueError("%s: rank %d with shape %s, longattn tensors have at most %d dims"
                         % (name, ndim, tuple(x.shape), L.LA_MAX_DIMS))
    t.dtype = _la_dtype(x, name)
    t.ndim = ndim
    if is_numpy(x):
        if not x.dtype.isnative:
            raise ValueError("%s: numpy dtype %s has non-native byte order (%s-endian data on a "
                             "%s-endian machine); pass %s.astype(%s.dtype.newbyteorder('='))"
                             % (name, x.dtype.str, "big" if x.dtype.byteorder == ">" else
                                "little", sys.byteorder, name, name))
        item = x.itemsize
        for i, (n, s) in enumerate(zip(x.shape, x.strides)):
            if s % item:
                raise ValueError("%s: numpy strides %s (bytes) are not multiples of the item "
                                 "size %d; pass np.ascontiguousarray(%s)"
                                 % (name, x.strides, item, name))
            t.ne[i] = n
            t.nb[i] = s // item
        addr = x.__array_interface__["data"][0]
        item_size = item
        t.device = L.LA_DEVICE_CPU
    else:
        for i, (n, s) in enumerate(zip(x.shape, x.stride())):
            t.ne[i] = n
            t.nb[i] = s
        addr = x.data_ptr()
        item_size = x.element_size()
        if x.is_cuda:
            t.device = L.LA_DEVICE_CUDA
        elif x.device.type == "cpu":
            t.device = L.LA_DEVICE_CPU
        else:
            raise ValueError("%s: device %s is not supported (cpu or cuda)" % (name, x.device))
    if addr % item_size:
        # The C kernels load elements through typed pointers: a misaligned
        # address is undefined behaviour there, so it is refused, not copied
        # (an output could not be copied back in place anyway).
        raise ValueError("%s: data address 0x%x is not aligned to its %d-byte elements (a view "
                         "at an odd byte offset); pass a copy (np.ascontiguousarray / "
                         ".clone())" % (name, addr, item_size))
    t.data = addr or None
    return t


# ---------------------------------------------------------------------------
# fast views of torch tensors: one struct.pack_into writes a whole la_tensor
# into a reused per-thread slot (the call overhead budget of TRAINING.md §3)
# ---------------------------------------------------------------------------
_PACK = struct.Struct("Piii4q4q")  # data, dtype, device, ndim, ne[4], nb[4] (native alignment)
# the same layout per rank r, extents and strides of the missing dims zero
# (struct's pad bytes): one pack_into with the tensor's own shape and strides
_PACK_RANK = tuple(struct.Struct("Piii%dq%dx%dq%dx" % (r, 8 * (4 - r), r, 8 * (4 - r)))
                   for r in range(5))
_FAST = (_PACK.size == ctypes.sizeof(L.la_tensor) and L.la_tensor.ne.offset == 24
         and L.la_tensor.nb.offset == 56 and all(p.size == _PACK.size for p in _PACK_RANK))
_TORCH_CODES = {}  # torch.dtype -> (la_dtype, item size); filled on first use
_ZEROS = ((), (0,), (0, 0), (0, 0, 0), (0, 0, 0, 0))


def _torch_codes():
    global _HAS_IS_CPU
    if not _TORCH_CODES:
        torch = _torch()
        _HAS_IS_CPU = hasattr(torch.Tensor, "is_cpu")
        for attr, code in _TORCH_DTYPES.items():
            dt = getattr(torch, attr, None)
            if dt is not None:
                _TORCH_CODES[dt] = (code, torch.empty((), dtype=dt).element_size())
    return _TORCH_CODES


_HAS_IS_CPU = False  # whether torch.Tensor has is_cpu (torch >= 1.8); set with _TORCH_CODES
_CPU, _CUDA = L.LA_DEVICE_CPU, L.LA_DEVICE_CUDA


def pack_torch(slot, x, name):
    """Write the la_tensor of torch tensor x into `slot` (an la_tensor);
    anything unusual (rank > 4, other dtypes or devices, misalignment)
    goes to view() for its error message."""
    code = _TORCH_CODES.get(x.dtype) or _torch_codes().get(x.dtype)
    shape = x.shape
    nd = len(shape)
    if code is None or nd > L.LA_MAX_DIMS:
        return view(x, name)
    if x.is_cuda:
        dev = L.LA_DEVICE_CUDA
    elif x.is_cpu if _HAS_IS_CPU else x.device.type == "cpu":
        dev = L.LA_DEVICE_CPU
    else:
        return view(x, name)
    addr = x.data_ptr()
    if addr % code[1]:
        return view(x, name)
    pad = _ZEROS[4 - nd]
    _PACK.pack_into(slot, 0, addr, code[0], dev, nd, *shape, *pad, *x.stride(), *pad)
    return slot


def ptr(t):
    """ctypes pointer to an la_tensor, or None."""
    return None if t is None else ctypes.pointer(t)


# ---------------------------------------------------------------------------
# contexts: one la_context per Python thread, created on first use
# ---------------------------------------------------------------------------
_num_threads = 0  # 0 = all cores; set by set_num_threads()

# Testing aid: LONGATTN_POISON=1 fills every new output with NaN (floats) or
# -7 (int32) before the C call, so tests see any element the C code skips.
_POISON = os.environ.get("LONGATTN_POISON", "") not in ("", "0")


def set_num_threads(n: int) -> None:
    """Threads used by CPU operators from now on (0 = all cores)."""
    global _num_threads
    n = c_int(n, "set_num_threads: n", "int32")
    if n < 0:
        raise ValueError("set_num_threads: n must be >= 0, got %d" % n)
    _num_threads = n


def get_num_threads() -> int:
    """The value set by set_num_threads (0 = all cores)."""
    return _num_threads


class Context:
    """An la_context owned by Python (destroyed with the object)."""

    def __init__(self):
        self.handle = ctypes.c_void_p()
        call("la_context_create", ctypes.byref(self.handle))
        self.addr = self.handle.value  # the la_context * as an int (longattn._fastcall)
        self._destroy = L.lib.la_context_destroy
        self.threads = None
        self.stream = None        # the stream last handed to the context
        self.slots = []           # reused la_tensor views (see Call)
        self.slot_refs = []       # ctypes.byref of each slot, made once
        self.slots_busy = False

    def prepare(self, stream):
        if self.threads != _num_threads:
            call("la_context_set_threads", self.handle, _num_threads)
            self.threads = _num_threads
        if stream != self.stream:
            call("la_context_set_cuda_stream", self.handle, stream)
            self.stream = stream
        return self.handle

    def __del__(self):
        h = getattr(self, "handle", None)
        if h:
            try:
                self._destroy(h)
            except Exception:
                pass
            self.handle = None


_tls = threading.local()


def thread_context():
    ctx = getattr(_tls, "ctx", None)
    if ctx is None:
        ctx = _tls.ctx = Context()
    return ctx


# ---------------------------------------------------------------------------
# CUDA availability of the loaded library (constant for a process)
# ---------------------------------------------------------------------------
_cuda_state = []


def cuda_available() -> bool:
    """Whether liblongattn was built with CUDA and sees a device."""
    if not _cuda_state:
        flag = ctypes.c_int(0)
        call("la_cuda_available", ctypes.byref(flag))
        _cuda_state.append(bool(flag.value))
    return _cuda_state[0]


def build_info() -> str:
    s = L.lib.la_build_info()
    return s.decode() if s else ""


# ---------------------------------------------------------------------------
# one operator call: views of the inputs, outputs like the lead input,
# context and device guard
# ---------------------------------------------------------------------------
class Call:
    """Collects the views of one operator call.

    `like` is the tensor whose kind (numpy/torch), device and dtype the
    outputs follow. Views are kept alive by the Call for the duration of
    the C call (the arrays themselves by the caller).

    Per-call cost (the call overhead budget of TRAINING.md §3): a torch
    tensor is written into one of the thread context's reused la_tensor
    slots (one struct.pack_into) and passed through the slot's reused
    ctypes.byref; outputs are `like.new_empty`."""

    __slots__ = ("torch", "is_torch", "op", "like", "cuda", "like_index", "_keep", "ctx",
                 "_slots", "_refs", "_n", "_plain")

    def __init__(self, op, like, like_name="q"):
        self._slots = None
        self.torch = t = _torch()
        if t is not None and isinstance(like, t.Tensor):
            self.is_torch = True
            # a plain tensor's new_empty is a plain tensor; a subclass
            # (Parameter, ...) allocates through torch.empty instead
            self._plain = type(like) is t.Tensor
            cuda = like.is_cuda
            # like's CUDA device index (None unless like is a CUDA tensor):
            # compared as an int per view instead of building torch.device objects
            self.like_index = like.get_device() if cuda else None
        else:
            if not is_numpy(like):
                raise TypeError("%s: %s: expected a numpy.ndarray or torch.Tensor, got %s"
                                % (op, like_name, type(like).__name__))
            if not like.dtype.isnative:
                view(like, like_name)  # raises the byte-order error under the input's name
            self.is_torch = self._plain = cuda = False
            self.like_index = None
        self.op = op
        self.like = like
        self.cuda = cuda
        self._keep = []
        # The context's reusable view slots, unless another Call of this
        # thread holds them (then this Call allocates its own views).
        self.ctx = ctx = thread_context()
        if _FAST and not ctx.slots_busy:
            ctx.slots_busy = True
            self._slots = ctx.slots
            self._refs = ctx.slot_refs
        self._n = 0

    def _release(self):
        if self._slots is not None:
            self._slots = None
            self.ctx.slots_busy = False

    def __del__(self):
        self._release()

    def view(self, x, name, optional=False):
        if x is None:
            if optional:
                return None
            self._release()
            raise TypeError("%s: %s is required (a numpy.ndarray or torch.Tensor, got None)"
                            % (self.op, name))
        try:
            t = self.torch
            if t is not None and isinstance(x, t.Tensor):
                cuda = x.is_cuda
                if cuda:
                    if self.like_index is not None and x.get_device() != self.like_index:
                        raise ValueError("%s: %s is on %s but the other inputs are on %s"
                                         % (self.op, name, x.device, self.like.device))
                    self.cuda = True
                slots = self._slots
                if slots is not None:
                    n = self._n
                    if n == len(slots):
                        s = L.la_tensor()
                        slots.append(s)
                        self._refs.append(ctypes.byref(s))
                    self._n = n + 1
                    # the common case inline (rank <= 4, a known dtype, on the
                    # CPU or CUDA, aligned); anything else: pack_torch
                    code = _TORCH_CODES.get(x.dtype)
                    shape = x.shape
                    nd = len(shape)
                    if code is not None and nd <= 4 and (cuda or _HAS_IS_CPU and x.is_cpu):
                        addr = x.data_ptr()
                        if not addr % code[1]:
                            _PACK_RANK[nd].pack_into(slots[n], 0, addr, code[0],
                                                     _CUDA if cuda else _CPU, nd, *shape,
                                                     *x.stride())
                            return self._refs[n]
                    v = pack_torch(slots[n], x, name)
                    if v is slots[n]:
                        return self._refs[n]  # the slot lives in the context
                else:
                    v = view(x, name)
            else:
                v = view(x, name)
        except BaseException:
            # a traceback keeps this Call alive: free the slots now
            self._release()
            raise
        self._keep.append(v)
        return ctypes.byref(v)

    def view_field(self, x, name, optional=False):
        """As view(), as a pointer for a struct field (la_index_params.k_scale,
        la_paged_query.block_table): the view stays alive with this Call."""
        v = self.view(x, name, optional)
        return None if v is None else ctypes.pointer(v._obj)

    def empty(self, shape, dtype=None):
        """New output on like's device; dtype None = like's dtype, or
        'float32' / 'int32'. A negative extent (from a bad argument) becomes
        0, so that the C library reports the argument with its own message."""
        x = self.like
        if self.is_torch:
            dt = x.dtype if dtype is None else _torch_dtype(dtype)
            try:
                if self._plain:
                    # like's device (and dtype) without an argument to parse
                    out = x.new_empty(shape) if dtype is None else x.new_empty(shape, dtype=dt)
                else:  # a subclass (Parameter, ...): a plain tensor, not its new_empty
                    out = self.torch.empty(shape, dtype=dt, device=x.device)
            except (RuntimeError, TypeError, ValueError):
                if min(shape, default=0) >= 0:
                    raise
                # clamped to 0: the C library names the argument
                return self.empty(tuple([max(int(s), 0) for s in shape]), dtype)
            if _POISON:
                out.fill_(float("nan") if out.is_floating_point() else -7)
            return out
        dt = x.dtype if dtype is None else np.dtype(dtype)
        out = np.empty(tuple([max(int(s), 0) for s in shape]), dtype=dt)
        if _POISON:
            out.fill(np.nan if out.dtype.kind == "f" else -7)
        return out

    def out(self, shape, name, dtype=None):
        """(array, view pointer) of a new output."""
        a = self.empty(shape, dtype)
        return a, self.view(a, name)

    def launch(self, fn_name, lead, names, *xs):
        """Call fn_name(lead, view(x) for x in xs, ctx): through
        longattn._fastcall where it is loaded and every x is a plain torch
        tensor on like's device, else through ctypes (run()), which also
        raises the argument errors with their messages.

        lead: a ctypes params struct (passed by address), an int (a state
        handle, passed as a pointer) or None (no leading argument). names: one
        per x, ending in '?' where x may be None (a NULL view)."""
        fc = _FASTCALL[0] if _FASTCALL else fastcall_module()
        if fc is not None and self.is_torch:
            ctx = self.ctx
            try:
                if self.cuda:
                    handle = _cuda_handle(self, ctx)
                    device = self.like_index
                else:
                    handle = ctx.prepare(None)
                    device = -1
                status = None
                if handle is not None:
                    fn, nparams = _ADDRESSES.get(fn_name) or _address(fn_name)
                    status = fc.call(fn, nparams, ctx.addr, device,
                                     _TORCH_CODES or _torch_codes(), names, lead, *xs)
            except BaseException:
                # a traceback keeps this Call alive: free the slots now
                self._keep.clear()
                self._release()
                raise
            if status is not None:
                if self._keep:  # view_field() views (index params with scales)
                    self._keep.clear()
                self._release()
                if status:
                    raise error_from_status(fn_name, status)
                return
        if lead is None:
            args = []
        elif isinstance(lead, int):
            args = [ctypes.c_void_p(lead)]
        else:
            args = [ctypes.byref(lead)]
        for x, name in zip(xs, names):
            if name[-1] == "?":
                args.append(self.view(x, name[:-1], True))
            else:
                args.append(self.view(x, name))
        self.run(fn_name, *args)

    def run(self, fn_name, *args):
        """Call fn_name(*args, ctx) with a prepared context."""
        ctx = self.ctx
        try:
            if self.cuda:
                handle = _cuda_handle(self, ctx)
                if handle is None:  # tensors on another device than the current one
                    with self.torch.cuda.device(self.like_index):
                        stream = self.torch.cuda.current_stream(self.like_index).cuda_stream
                        call(fn_name, *args, ctx.prepare(stream))
                    return
            else:
                handle = ctx.prepare(None)
            fn = L._UNCHECKED.get(fn_name) or L.unchecked(fn_name)
            status = fn(*args, handle)
            if status:
                raise error_from_status(fn_name, status)
        finally:
            self._keep.clear()
            self._release()


# ---------------------------------------------------------------------------
# the compiled call path: longattn._fastcall (python/longattn/_fastcall.c),
# built by the Makefile beside liblongattn.so for the interpreter that ran
# make (`make pyext`). Where it is absent, was built for another Python
# (another EXT_SUFFIX), fails to load or has another API, calls take the
# ctypes path silently; fastcall_status() says which path is in use and why.
# ---------------------------------------------------------------------------
FASTCALL_API = 2
_FASTCALL = []      # [the module or None], decided on the first call
_FASTCALL_WHY = []  # [why the module is not in use] when it is not
_ADDRESSES = {}     # C function name -> (its address in the loaded library, its arity)


def _address(fn_name):
    """(address, number of parameters) of a C function whose parameters are
    all pointers and which returns an la_status: the only kind that
    longattn._fastcall calls."""
    fn = getattr(L.lib, fn_name)
    restype, argtypes = L.SIGNATURES[fn_name]
    if restype is not L.la_status or not all(L._pointer_type(t) for t in argtypes):
        raise TypeError("%s: not a pointers-only function; call it through ctypes" % fn_name)
    entry = _ADDRESSES[fn_name] = (ctypes.cast(fn, ctypes.c_void_p).value, len(argtypes))
    return entry


def fastcall_paths():
    """Where longattn._fastcall is looked for, in order: beside the loaded
    liblongattn.so, then in the package directory (a bundled copy)."""
    import sysconfig
    name = "_fastcall" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    dirs = []
    L.lib.dll  # loads the library (sets L.lib.path)
    lib_path = L.lib.path
    if lib_path and os.path.dirname(lib_path):
        dirs.append(os.path.dirname(os.path.abspath(lib_path)))
    dirs.append(os.path.dirname(os.path.abspath(__file__)))
    return [os.path.join(d, name) for d in dirs]


def _load_fastcall():
    import importlib.machinery
    import importlib.util
    why = []
    for path in fastcall_paths():
        if not os.path.isfile(path):
            why.append("%s: not built" % path)
            continue
        try:
            loader = importlib.machinery.ExtensionFileLoader("longattn._fastcall", path)
            spec = importlib.util.spec_from_file_location("longattn._fastcall", path,
                                                          loader=loader)
            mod = importlib.util.module_from_spec(spec)
            loader.exec_module(mod)
        except (ImportError, OSError) as e:
            why.append("%s: %s" % (path, e))
            continue
        if (getattr(mod, "API", None) != FASTCALL_API
                or getattr(mod, "TENSOR_SIZE", None) != ctypes.sizeof(L.la_tensor)):
            why.append("%s: API %s / la_tensor size %s, expected %d / %d (rebuild: make pyext)"
                       % (path, getattr(mod, "API", None), getattr(mod, "TENSOR_SIZE", None),
                          FASTCALL_API, ctypes.sizeof(L.la_tensor)))
            continue
        return mod, None
    return None, "; ".join(why)


def fastcall_module():
    """The loaded longattn._fastcall, or None (the ctypes path)."""
    if not _FASTCALL:
        mod, why = _load_fastcall()
        _FASTCALL_WHY[:] = [why]
        _FASTCALL[:] = [mod]
    return _FASTCALL[0]


def use_fastcall(enabled: bool = True) -> bool:
    """Turn the compiled call path on (loading it if built) or off (every
    call through ctypes); returns whether it is in use now. For tests and
    comparisons: both paths give the same results and errors."""
    if enabled:
        _FASTCALL[:] = []
        return fastcall_module() is not None
    _FASTCALL[:] = [None]
    _FASTCALL_WHY[:] = ["turned off by use_fastcall(False)"]
    return False


def fastcall_status() -> str:
    """'longattn._fastcall (PATH)' when the compiled path is in use, else
    'ctypes (' + why + ')'."""
    mod = fastcall_module()
    if mod is not None:
        return "longattn._fastcall (%s)" % mod.__file__
    return "ctypes (%s)" % (_FASTCALL_WHY[0] if _FASTCALL_WHY else "")


_TORCH_DTYPE_BY_NAME = {}  # "float32" -> torch.float32


def _torch_dtype(name):
    dt = _TORCH_DTYPE_BY_NAME.get(name)
    if dt is None:
        dt = _TORCH_DTYPE_BY_NAME[name] = getattr(_torch(), name)
    return dt


# torch's raw device and stream queries (torch._C), looked up once per process
_CUDA_QUERIES = []


def _cuda_queries(torch):
    if not _CUDA_QUERIES:
        get_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
        _CUDA_QUERIES.append((get_device, getattr(torch._C, "_cuda_getCurrentRawStream", None)))
    return _CUDA_QUERIES[0]


def _cuda_handle(c, ctx):
    """The context handle prepared with torch's current stream of the current
    device, or None when c's tensors are on another device (the caller then
    switches devices)."""
    if not cuda_available():
        raise RuntimeError(
            "%s: the inputs are CUDA tensors but liblongattn was built without CUDA "
            "or sees no GPU (build info: %s). Rebuild with nvcc on PATH, or move "
            "the inputs to the CPU." % (c.op, build_info()))
    get_device, raw = _cuda_queries(c.torch)
    # a CUDA tensor exists, so torch's CUDA state is initialized: the raw
    # device query skips torch.cuda.current_device()'s lazy-init check
    cur = get_device()
    idx = c.like_index
    if (idx is None or idx == cur) and raw is not None:
        # the common case: the tensors are on the current device; the raw
        # stream lookup is what torch's own generated code uses
        return ctx.prepare(raw(cur) or None)
    return None
