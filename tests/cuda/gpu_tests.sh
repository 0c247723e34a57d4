#!/bin/bash
# Some GPU test binaries as one gpu_round.sh step: LA_GPU_TESTS (default:
# "softmax smla sparse dsa_fp8"), no sanitizers.
OUT=${OUT:-/tmp/la_gpu_out}
LA_GPU_TESTS=${LA_GPU_TESTS:-"softmax smla sparse dsa_fp8"} LA_SKIP_SANITIZER=1 \
  bash tests/cuda/run_gpu_tests.sh build-gpu "$OUT"
