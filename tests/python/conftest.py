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
import os
import sys


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
