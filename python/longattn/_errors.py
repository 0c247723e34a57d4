"""C status codes -> Python exceptions carrying la_last_error()."""
from . import _lib as L


class LongattnError(Exception):
    """Base of every error raised from a C status. `.status` is the la_status
    code, `.status_name` its name ("LA_ERR_SHAPE"), `.function` the C entry
    point and `.message` the library's message (la_last_error())."""

    def __init__(self, function, status, message):
        self.function = function
        self.status = status
        self.status_name = L.STATUS_NAMES.get(status, "LA_ERR_%d" % status)
        self.message = message
        super().__init__("%s: %s: %s" % (function, self.status_name, message))


class LongattnValueError(LongattnError, ValueError):
    """Bad argument, shape, dtype, or a size that would overflow."""


class LongattnUnsupportedError(LongattnError, NotImplementedError):
    """A valid request this build or backend cannot do (a RuntimeError)."""


class LongattnRuntimeError(LongattnError, RuntimeError):
    """Out of memory, CUDA/device error, I/O, or an internal error."""


_VALUE = {L.LA_ERR_ARG, L.LA_ERR_SHAPE, L.LA_ERR_DTYPE, L.LA_ERR_OVERFLOW}


def error_from_status(function, status):
    msg = L.lib.la_last_error()
    msg = msg.decode("utf-8", "replace") if msg else ""
    if status in _VALUE:
        cls = LongattnValueError
    elif status == L.LA_ERR_UNSUPPORTED:
        cls = LongattnUnsupportedError
    else:
        cls = LongattnRuntimeError
    return cls(function, status, msg)


def call(name, *args):
    """Call C function `name` and raise on a non-LA_OK status."""
    fn = getattr(L.lib, name)
    status = fn(*args)
    if status != L.LA_OK:
        raise error_from_status(name, status)
