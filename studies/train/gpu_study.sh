#!/bin/bash
# The training study on the device (H200), one call per step:
#   bash studies/train/gpu_study.sh pilot        lr × setting sweep, one seed, + timing of
#                                                 both precisions at the longest setting
#   bash studies/train/gpu_study.sh full SEEDS   the full suite with SEEDS (e.g. 0,1,2),
#                                                 then the timing pass (one process alone)
# Environment: STUDY_JOBS (worker processes, default 15), STUDY_DEADLINE (seconds
# after which no run starts), STUDY_RUN_LIMIT (wall seconds a run may train),
# STUDY_TIMING_S (seconds since the start past which the timing pass stops),
# STUDY_ARGS (more run_study.py arguments). Logs and results.json under $OUT.
set -o pipefail
OUT=${OUT:-/tmp/la_study_out}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# study $1 $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,memory.used --format=csv,noheader)"
timeout 200 make -j16 BUILD=$B CUDA_ARCH=sm90a SKIP_DEPS=1 "$B/liblongattn.so" > "$OUT/build.log" 2>&1 \
  || { echo "BUILD FAILED"; grep -E "error" "$OUT/build.log" | head; exit 1; }
echo "build: $(el) s"
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
J=${STUDY_JOBS:-15}
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
    run --suite full --seeds "$2" --deadline "${STUDY_DEADLINE:-250}" \
        --run-limit "${STUDY_RUN_LIMIT:-120}" --timing-steps 20 \
        --timing-deadline "${STUDY_TIMING_S:-330}" --out "$OUT/full" 2>&1 | grep -v Warning \
        | tee "$OUT/full.log" | grep -E "runs in|timing|FAIL|Error" | tail -n 60
    ;;
esac
echo "total $(el) s"
