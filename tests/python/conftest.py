"""pytest configuration for the Python tests: the `cuda` mark (GPU-machine
tests, skipped where torch sees no CUDA device), and one share of the cores
per pytest-xdist worker.

Threads per xdist worker: every worker process holds two OpenMP runtimes
(torch's bundled libgomp and the system one liblongattn links), and each
would start a team of all the machine's cores. With W workers on C cores
that is 2·W·C threads whose idle members spin after every parallel region,
so the tiny problems of these tests ran slower the more workers there were
(on the 16-core GPU machine: 147 tests in 30 s in one process, 101 in 55 s
with 4 workers). Each worker therefore gets C / W threads: OMP_THREAD_LIMIT
and OMP_NUM_THREADS are set (unless the caller set them) before either
runtime is loaded, i.e. before any test module imports torch or longattn."""
import ctypes
import os
import sys

import pytest


def _limit_threads_per_xdist_worker():
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers or not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        share = max(1, (os.cpu_count() or 1) // max(1, int(workers)))
    except ValueError:
        return
    for var in ("OMP_THREAD_LIMIT", "OMP_NUM_THREADS"):
        os.environ.setdefault(var, str(share))
    # a runtime loaded already (a plugin imported torch) has read its
    # environment: set the thread counts through the APIs as well
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(share)
    longattn = sys.modules.get("longattn")
    if longattn is not None:
        longattn.set_num_threads(share)


_limit_threads_per_xdist_worker()


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (run on the GPU machine, not in CI)")
    config.addinivalue_line("markers", "compile_heavy: compiles a model with torch.compile "
                            "(seconds per test; tests/cuda/gpu_python.sh runs these last)")


@pytest.fixture(autouse=True, scope="session")
def _operator_calls_pass_only_pointers():
    """Call.run calls the operators' C functions without ctypes argtypes
    where every parameter is a pointer (longattn._lib.unchecked), so ctypes
    checks neither the count nor the kinds of the arguments there: every
    such call of the test session is checked here instead (the signature's
    count; each argument a ctypes pointer object or None)."""
    try:
        from longattn import _lib, _tensor
    except Exception:  # pragma: no cover - the package does not import here
        yield
        return
    pointer_kinds = (type(ctypes.byref(ctypes.c_int(0))), ctypes.c_void_p, ctypes._Pointer)
    orig = _tensor.Call.run

    def run(self, fn_name, *args):
        restype, argtypes = _lib.SIGNATURES[fn_name]
        if all(_lib._pointer_type(t) for t in argtypes):
            assert len(args) + 1 == len(argtypes), \
                "%s: %d arguments (+ ctx) for %d parameters" % (fn_name, len(args), len(argtypes))
            for i, a in enumerate(args):
                assert a is None or isinstance(a, pointer_kinds), \
                    "%s: argument %d is %r, not a ctypes pointer" % (fn_name, i, type(a))
        return orig(self, fn_name, *args)
    _tensor.Call.run = run
    yield
    _tensor.Call.run = orig
