#!/bin/bash
# The Python package on the device (torch with CUDA, >= 2.4 there): the
# tests that need CUDA tensors or a current torch (custom ops and
# torch.compile, CUDA-graph replay, the nn layers, autograd on CUDA), then a
# short pilot of the training study (studies/train, MQAR), timing per step.
#   bash tests/cuda/gpu_python.sh        (logs and summary under $OUT)
# LA_PY_TESTS: the test files (default below); LA_STUDY_S: the pilot's cap.
. tests/cuda/gpu_common.sh python
[ "${LA_SKIP_BUILD:-0}" = 1 ] || timeout 200 make -j16 BUILD=$B SKIP_DEPS=1 all > "$OUT/build.log" 2>&1 \
  || { say "BUILD FAILED"; exit 1; }
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
tests=${LA_PY_TESTS:-$(ls tests/python/test_compile.py tests/python/test_nn.py tests/python/test_py_cuda.py \
  tests/python/test_varlen.py tests/python/test_py_backward.py 2>/dev/null)}
timeout "${LA_PYTEST_S:-150}" python3 -m pytest -q -p no:cacheprovider -x -rs $tests > "$OUT/pytest.log" 2>&1
say "pytest ($(echo $tests | wc -w) files): rc=$? $(tail -1 "$OUT/pytest.log") ($(el) s)"
grep -E "^(FAILED|ERROR|SKIPPED)" "$OUT/pytest.log" | head -20 | tee -a "$S"
timeout "${LA_STUDY_S:-90}" python3 studies/train/run_study.py --suite pilot --device cuda \
  --out "$OUT/study" > "$OUT/study.log" 2>&1
say "study pilot: rc=$? ($(el) s)"
tail -25 "$OUT/study.log" | tee -a "$S"
