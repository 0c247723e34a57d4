"""pytest configuration for the Python tests: the `cuda` mark (GPU-machine
tests, skipped where torch sees no CUDA device)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "cuda: needs a CUDA GPU (run on the GPU machine, not in CI)")
    config.addinivalue_line("markers", "compile_heavy: compiles a model with torch.compile "
                            "(seconds per test; tests/cuda/gpu_python.sh runs these last)")
