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
import sys
import threading

import numpy as np

from . import _lib as L
from ._errors import call

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
                         "(use float32, float64, bfloat16 or int32)" % (name, what))
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
        self._destroy = L.lib.la_context_destroy
        self.threads = None

    def prepare(self, stream):
        if self.threads != _num_threads:
            call("la_context_set_threads", self.handle, _num_threads)
            self.threads = _num_threads
        call("la_context_set_cuda_stream", self.handle, stream)
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
    the C call (the arrays themselves by the caller)."""

    def __init__(self, op, like, like_name="q"):
        if not is_array(like):
            raise TypeError("%s: %s: expected a numpy.ndarray or torch.Tensor, got %s"
                            % (op, like_name, type(like).__name__))
        if is_numpy(like) and not like.dtype.isnative:
            view(like, like_name)  # raises the byte-order error under the input's name
        self.op = op
        self.like = like
        self.cuda = is_cuda(like)
        self._keep = []

    def view(self, x, name, optional=False):
        if x is None:
            if optional:
                return None
            raise TypeError("%s: %s is required (a numpy.ndarray or torch.Tensor, got None)"
                            % (self.op, name))
        if is_cuda(x) and self.cuda and x.device != self.like.device:
            raise ValueError("%s: %s is on %s but the other inputs are on %s"
                             % (self.op, name, x.device, self.like.device))
        if is_cuda(x) and not self.cuda:
            self.cuda = True
        t = view(x, name)
        p = ctypes.pointer(t)
        self._keep.append(t)
        return p

    def empty(self, shape, dtype=None):
        """New output on like's device; dtype None = like's dtype, or
        'float32' / 'int32'."""
        shape = tuple(max(int(s), 0) for s in shape)
        x = self.like
        if is_torch(x):
            torch = _torch()
            dt = x.dtype if dtype is None else getattr(torch, dtype)
            out = torch.empty(shape, dtype=dt, device=x.device)
            if _POISON:
                out.fill_(float("nan") if out.is_floating_point() else -7)
            return out
        dt = x.dtype if dtype is None else np.dtype(dtype)
        out = np.empty(shape, dtype=dt)
        if _POISON:
            out.fill(np.nan if out.dtype.kind == "f" else -7)
        return out

    def out(self, shape, name, dtype=None):
        """(array, view pointer) of a new output."""
        a = self.empty(shape, dtype)
        return a, self.view(a, name)

    def run(self, fn_name, *args):
        """Call fn_name(*args, ctx) with a prepared context."""
        ctx = thread_context()
        if self.cuda:
            torch = _torch()
            if not cuda_available():
                raise RuntimeError(
                    "%s: the inputs are CUDA tensors but liblongattn was built without CUDA "
                    "or sees no GPU (build info: %s). Rebuild with nvcc on PATH, or move "
                    "the inputs to the CPU." % (self.op, build_info()))
            dev = self.like.device if is_cuda(self.like) else None
            with torch.cuda.device(dev):
                stream = torch.cuda.current_stream(dev).cuda_stream
                handle = ctx.prepare(stream)
                call(fn_name, *args, handle)
        else:
            handle = ctx.prepare(None)
            call(fn_name, *args, handle)
        self._keep.clear()
