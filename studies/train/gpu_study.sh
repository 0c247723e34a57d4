#!/bin/bash
# The training study on the device (H200), in one call:
#   bash studies/train/gpu_study.sh pilot   lr × setting sweep, one seed, and the timing of
#                                            both precisions at the longest setting
#   bash studies/train/gpu_study.sh full    the full suite with seeds 0,1,2 (the lr grid),
#                                            again with seeds 3,4,5 at each row's best lr
#                                            of the first, then the timing pass alone
#   bash studies/train/gpu_study.sh check   MQAR recipe check: softmax dim 64, seed 0
#   bash studies/train/gpu_study.sh cells   STUDY_CELLS of MQAR, both seed sets
# Environment: STUDY_JOBS (worker processes, default 12), STUDY_D1 / STUDY_D2 (seconds
# after which no run of the first / second seed set starts), STUDY_RUN_LIMIT (wall
# seconds a run may train; then it is cut and left out), STUDY_ARGS (more
# run_study.py arguments). A carried build-gpu/liblongattn.so is used when it
# loads, else the library is built here. Logs and results under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/la_study_out}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# study $1 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader)"
if [ -f "$B/liblongattn.so" ] && python3 -c "import ctypes; ctypes.CDLL('$B/liblongattn.so')"; then
  echo "carried $B/liblongattn.so"
else
  rm -f "$B/liblongattn.so"
  timeout 200 make -j16 BUILD=$B CUDA_ARCH=sm90a SKIP_DEPS=1 "$B/liblongattn.so" > "$OUT/build.log" 2>&1 \
    || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head; exit 1; }
fi
echo "library: $(el) s"
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
J=${STUDY_JOBS:-12}
run() { python3 studies/train/run_study.py --device cuda --amp bf16 --jobs "$J" "$@" $STUDY_ARGS; }
case "$1" in
  pilot)
    run --suite pilot --only mqar --timing-only --settings 1024x64 --dims 64,256 \
        --timing-steps 8 --timing-amps bf16,none --timing-deadline 20 --out "$OUT/timing" 2>&1 \
        | grep -v Warning | tail -n 14
    echo "timing: $(el) s"
    run --suite pilot --deadline "${STUDY_DEADLINE:-30}" --run-limit "${STUDY_RUN_LIMIT:-35}" \
        --out "$OUT/pilot" 2>&1 | grep -v Warning
    ;;
  full)
    RL=${STUDY_RUN_LIMIT:-100}
    run --suite full --seeds 0,1,2 --deadline "${STUDY_D1:-140}" --run-limit "$RL" \
        --out "$OUT/s012" 2>&1 | grep -v -i warn > "$OUT/s012.log"
    tail -n 1 "$OUT/s012.log"; echo "seeds 0,1,2: $(el) s"
    run --suite full --seeds 3,4,5 --lr-from "$OUT/s012/results.json" --deadline "${STUDY_D2:-60}" \
        --run-limit "$RL" --timing-steps 20 --timing-deadline "${STUDY_TIMING_S:-200}" \
        --out "$OUT/s345" 2>&1 | grep -v -i warn > "$OUT/s345.log"
    grep -E "runs in|FAIL|Error" "$OUT/s345.log"; grep timing "$OUT/s345.log" | tail -n 16
    echo "seeds 3,4,5 + timing: $(el) s"
    python3 studies/train/report.py "$OUT/s012/results.json" "$OUT/s345/results.json" \
      | grep -E "^\| (mqar|nearest)" | cut -c1-150 | head -n 60
    ;;
  check)   # the MQAR recipe check: softmax at dim 64, every MQAR setting, the lr grid, seed 0
    run --suite full --only mqar --cells softmax@64 --seeds 0 --run-limit "${STUDY_RUN_LIMIT:-240}" \
        --out "$OUT/check" 2>&1 | grep -v -i warn > "$OUT/check.log"
    grep -E "^mqar|runs in|FAIL|Error" "$OUT/check.log"
    ;;
  cells)   # more cells of the full suite (STUDY_CELLS, e.g. mhla@64,softmax@128), both seed sets
    RL=${STUDY_RUN_LIMIT:-90}
    run --suite full --only mqar --cells "$STUDY_CELLS" --seeds 0,1,2 --deadline "${STUDY_D1:-70}" \
        --run-limit "$RL" --out "$OUT/s012b" 2>&1 | grep -v -i warn > "$OUT/s012b.log"
    tail -n 1 "$OUT/s012b.log"; echo "seeds 0,1,2: $(el) s"
    run --suite full --only mqar --cells "$STUDY_CELLS" --seeds 3,4,5 \
        --lr-from "$OUT/s012b/results.json" --deadline "${STUDY_D2:-40}" --run-limit "$RL" \
        --out "$OUT/s345b" 2>&1 | grep -v -i warn > "$OUT/s345b.log"
    tail -n 1 "$OUT/s345b.log"; echo "seeds 3,4,5: $(el) s"
    python3 studies/train/report.py "$OUT/s012b/results.json" "$OUT/s345b/results.json" \
      | grep -E "^\| mqar" | cut -c1-150 | head -n 40
    ;;
esac
echo "total $(el) s"
