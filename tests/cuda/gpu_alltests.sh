#!/bin/bash
# Every GPU test binary in one step of a device call (for tests/cuda/gpu_round.sh):
# run_gpu_tests.sh without the sanitizers unless LA_SKIP_SANITIZER=0.
#   bash tests/cuda/gpu_alltests.sh      (assumes build-gpu is built; ~3-4 min)
OUT=${OUT:-/tmp/la_gpu_out}
LA_SKIP_SANITIZER=${LA_SKIP_SANITIZER:-1} bash tests/cuda/run_gpu_tests.sh build-gpu "$OUT"
