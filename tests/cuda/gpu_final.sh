#!/bin/bash
# One GPU-machine call that checks the integration of the CUDA backend:
# build, CLI --device cuda vs cpu on every OP with a kernel, the Python
# package on torch CUDA tensors, and the small CUDA op tests of both families.
#   bash tests/cuda/gpu_final.sh      (OUT=dir for logs)
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/la_gpu_final}; mkdir -p "$OUT"
nvidia-smi -L
t0=$(date +%s)
make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
rc=0
python3 tests/cuda/cli_device_check.py build-gpu 2>&1 | tee "$OUT/cli.log" || rc=1
LA_BUILD=build-gpu timeout 200 python3 -m pytest -q -p no:cacheprovider -m cuda tests/python/test_py_cuda.py 2>&1 | tail -15 | tee "$OUT/pytest.log"
[ "${PIPESTATUS[0]}" = 0 ] || rc=1
LA_CUDA_SMALL=1 timeout 120 build-gpu/tests/cuda/test_cuda_linear > "$OUT/lin.log" 2>&1 || rc=1
echo "test_cuda_linear (small): $(tail -1 "$OUT/lin.log")"
LA_CUDA_SMALL=1 timeout 120 build-gpu/tests/cuda/test_cuda_sparse > "$OUT/sp.log" 2>&1 || rc=1
echo "test_cuda_sparse: $(tail -1 "$OUT/sp.log")"
grep -h FAIL "$OUT/lin.log" "$OUT/sp.log" | head
echo "total: $(( $(date +%s) - t0 )) s, rc=$rc"
exit $rc
