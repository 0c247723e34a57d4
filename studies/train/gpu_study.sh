#!/bin/bash
# The training study on the device (H200), in one call:
#   bash studies/train/gpu_study.sh pilot   lr × setting sweep, one seed, and the timing of
#                                            both precisions at the longest setting
#   bash studies/train/gpu_study.sh full    the full suite with seeds 0,1,2 (the lr grid),
#                                            again with seeds 3,4,5 at each row's best lr
#                                            of the first, then the timing pass alone
#   bash studies/train/gpu_study.sh check   MQAR recipe check: softmax dim 64, seed 0
#   bash studies/train/gpu_study.sh cells   STUDY_CELLS of MQAR, both seed sets
#   bash studies/train/gpu_study.sh grid    in STUDY_BUDGET seconds (default 400): the timing
#                                            pass alone with the backward path of every
#                                            configuration (LA_VERBOSE), MQAR 64x4 dim 64
#                                            (softmax seed 0 is the recipe check) and the
#                                            focused 2-D cell with both seed sets, then
#                                            MQAR 256x16 dim 64 as far as the budget goes
#   bash studies/train/gpu_study.sh mqar-rest   what grid's call left cut: MQAR 64x4 dim 64
#                                            seeds 3,4,5 at the best lr of the committed
#                                            seeds 0,1,2, then 256x16 dim 64, both seed sets
#   bash studies/train/gpu_study.sh graph-check   the graph loop against the plain loop
#                                            (graph_check.py): losses over 50 steps per
#                                            variant at 64x4 dim 64 and 1024x64 dim 256,
#                                            then steps/s of 1..16 runs at once
#   The full grid on the graph loop (suite "grid": 3 MQAR settings x dims 64/128/256
#   x softmax/linear/MHLA x seeds 0,1,2 x lr {1e-3, 3e-3}, 2000 steps of 16384 tokens; the
#   2-D task at dims 64 and 128), one process, STUDY_STREAMS runs at once (default 18), in
#   three commands of at most STUDY_BUDGET seconds each (default 540, the library included):
#   bash studies/train/gpu_study.sh mqar-a    MQAR 64x4 and 256x16 (108 runs)
#   bash studies/train/gpu_study.sh mqar-b    MQAR 1024x64 (54 runs)
#   bash studies/train/gpu_study.sh nearest   the 2-D task, seeds 0,1,2 then 3,4,5 at the best
#                                            lr, then the timing pass (plain and graph loop)
#   STUDY_LR_FROM=a.json,b.json bash studies/train/gpu_study.sh mqar-s345
#                                            MQAR seeds 3,4,5 at the best lr of those files
#                                            (the results.json of mqar-a and mqar-b)
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
# LA_VERBOSE output: one line per forward/backward family and variant under each timing line
paths() { awk '/^la: /{k=$2" "$3; if(!(k in s)){s[k]=1; o[++n]=k; if($3=="portable") w[k]=$0}; next}
  /^timing /{print; for(i=1;i<=n;i++) print "    " o[i] (o[i] in w ? "  <- " w[o[i]] : "");
             delete s; delete w; n=0; next} {print}'; }
run() { python3 studies/train/run_study.py --device cuda --amp bf16 --jobs "$J" "$@" $STUDY_ARGS; }
case "$1" in
  graph-check)   # in STUDY_BUDGET seconds (default 80) after the library: the first part whole
    gc() { python3 studies/train/graph_check.py "$@" 2>&1 | grep -v -i warn | tee -a "$OUT/graph_check.log"; }
    gc --out "$OUT/a" --equality 64x4:64 --bench "64x4:64@1,4,8,16" --bench-steps 60
    echo "part a: $(el) s"
    gc --out "$OUT/b" --equality 1024x64:256 --no-repeat --bench-steps 40 \
       --bench "${GC_BENCH:-256x16:128@16;1024x64:64/64@16;1024x64:256/64@16;1024x64:256@4}" \
       --deadline $(( ${STUDY_BUDGET:-80} - $(el) ))
    ;;
  mqar-a|mqar-b|mqar-c|nearest|mqar-s345)
    T=${STUDY_BUDGET:-540}
    # every run still training 25 s before the command's end is cut (--end); none starts
    # later than STUDY_RUN_S (the expected length of one run, default 60 s) before that.
    # (At 150 s the first runs of mqar-a and mqar-b left half their runs unstarted: with
    # 18 streams the second wave starts only when the first ends, ~80-180 s in.)
    grid() {  # name run_study-arguments...
      local name=$1 end; shift
      end=$(( T - $(el) - 25 ))
      python3 studies/train/run_study.py --device cuda --amp bf16 --suite grid --jobs 1 \
          --streams "${STUDY_STREAMS:-18}" --end "$end" \
          --deadline $(( end - ${STUDY_RUN_S:-60} )) --out "$OUT/$name" "$@" $STUDY_ARGS 2>&1 \
        | grep -v -i warn > "$OUT/$name.log"
      grep -h -E "runs in|FAIL|Error" "$OUT/$name.log" | head -n 5; echo "$name: $(el) s"
    }
    case "$1" in
      mqar-a) grid mqar_a --only mqar --settings 64x4,256x16 --seeds 0,1,2 ;;
      mqar-b) grid mqar_b --only mqar --settings 1024x64 --seeds 0,1,2 ;;
      mqar-s345) grid mqar_s345 --only mqar --seeds 3,4,5 --lr-from "$STUDY_LR_FROM" ;;
      mqar-c)   # the cells mqar-a and mqar-b left unstarted (256x16 and 1024x64 at dims 64
                # and 128), then seeds 3,4,5 of them and of 64x4 dim 64, whose seeds 0,1,2 are
                # the committed recipe run (the same configuration, the plain loop)
        grid mqar_c --only mqar --settings 256x16,1024x64 --dims 64,128 --seeds 0,1,2
        grid mqar_c_s345 --only mqar --seeds 3,4,5 \
             --lr-from "docs/training_study/recipe/mqar64x4_s012.json,$OUT/mqar_c/results.json"
        # the timing pass again if 130 s are left (peak memory net of what earlier
        # configurations of the pass left allocated)
        if [ $(( T - $(el) )) -ge 130 ]; then
          LA_VERBOSE=1 grid timing --timing-only --timing-steps 20 \
              --timing-deadline $(( T - $(el) - 20 ))
          paths < "$OUT/timing.log" | grep -v "^la: " > "$OUT/timing_paths.log"; rm -f "$OUT/timing.log"
        fi ;;
      nearest)   # batches drawn outside the graph: the 2-D task's generator was not
                 # captured on the GPU yet (MQAR's was, graph-check)
        grid nearest_s012 --only nearest --seeds 0,1,2 --graph-data eager
        grid nearest_s345 --only nearest --seeds 3,4,5 --graph-data eager \
             --lr-from "$OUT/nearest_s012/results.json"
        # ms/step and peak memory of every configuration, one run alone, both loops, with
        # the library's kernel variants (LA_VERBOSE: the eager steps print them)
        LA_VERBOSE=1 grid timing --timing-only --timing-steps 20 \
            --timing-deadline $(( T - $(el) - 20 ))
        paths < "$OUT/timing.log" | grep -v "^la: " > "$OUT/timing_paths.log"
        grep "^timing" "$OUT/timing.log" | cut -c1-150 ;;
    esac
    for f in "$OUT"/*/results.json; do
      python3 studies/train/report.py "$f" 2>&1 | grep -E "^\| (mqar|nearest) " | cut -c1-150 | head -n 40
    done
    ;;
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
  grid|mqar-rest)
    T=${STUDY_BUDGET:-400}
    left() { echo $(( T - $(el) - $1 )); }   # seconds left, less a reserve
    # no run starts after 40 s; a run trains for at most RL seconds (then cut, left out)
    part() {  # name jobs run_study-arguments...
      local name=$1 jobs=$2; shift 2
      run --suite full --jobs "$jobs" --deadline 40 --run-limit "$RL" --out "$OUT/$name" "$@" \
        2>&1 | grep -v -i warn > "$OUT/$name.log"
    }
    LR64=docs/training_study/recipe/mqar64x4_s012.json   # mqar-rest: the committed seeds 0,1,2
    if [ "$1" = grid ]; then
      LR64="$OUT/mqar64_s012/results.json"
      LA_VERBOSE=1 run --suite full --timing-only --dims 64 --timing-steps 20 --timing-deadline 60 \
          --jobs 1 --out "$OUT/timing" 2>&1 | grep -v -i warn | paths | tee "$OUT/timing.log"
      echo "timing: $(el) s"
      # MQAR 64x4 dim 64, every variant, the lr grid, seeds 0,1,2 (softmax seed 0: the recipe
      # check), and the focused 2-D cell
      RL=$(left 60); [ "$RL" -gt 240 ] && RL=240
      part mqar64_s012 18 --only mqar --settings 64x4 --dims 64 --seeds 0,1,2 &
      part focused_s012 6 --only nearest --cells focused@64 --seeds 0,1,2 &
      wait
      grep -h "runs in" "$OUT/mqar64_s012.log" "$OUT/focused_s012.log"; echo "seeds 0,1,2: $(el) s"
    fi
    # seeds 3,4,5 at the best lr of seeds 0,1,2. More processes than the 16 CPU cores
    # lower the throughput, so MQAR 256x16 runs after them, not beside them.
    RL=$(left 45)
    if [ "$RL" -gt 30 ]; then
      part mqar64_s345 9 --only mqar --settings 64x4 --dims 64 --seeds 3,4,5 --lr-from "$LR64" &
      [ "$1" = grid ] && part focused_s345 3 --only nearest --cells focused@64 --seeds 3,4,5 \
          --lr-from "$OUT/focused_s012/results.json" &
      wait
      grep -h "runs in" "$OUT"/*_s345.log; echo "seeds 3,4,5: $(el) s"
    fi
    RL=$(left 45)
    if [ "$RL" -gt 60 ]; then
      part mqar256_s012 18 --only mqar --settings 256x16 --dims 64 --seeds 0,1,2
      grep -h "runs in" "$OUT/mqar256_s012.log"; echo "256x16 seeds 0,1,2: $(el) s"
    fi
    RL=$(left 30)
    if [ "$RL" -gt 60 ] && [ -f "$OUT/mqar256_s012/results.json" ]; then
      part mqar256_s345 9 --only mqar --settings 256x16 --dims 64 --seeds 3,4,5 \
          --lr-from "$OUT/mqar256_s012/results.json"
      grep -h "runs in" "$OUT/mqar256_s345.log"; echo "256x16 seeds 3,4,5: $(el) s"
    fi
    SA=""; SB=""   # every part of each seed set, and the timing pass (report.py joins commas)
    for p in mqar64 focused mqar256; do
      [ -f "$OUT/${p}_s012/results.json" ] && SA="$SA,$OUT/${p}_s012/results.json"
      [ -f "$OUT/${p}_s345/results.json" ] && SB="$SB,$OUT/${p}_s345/results.json"
    done
    [ "$1" = mqar-rest ] && SA="$SA,$LR64"
    [ -f "$OUT/timing/results.json" ] && SA="$SA,$OUT/timing/results.json"
    [ -n "$SA" ] && python3 studies/train/report.py "${SA#,}" ${SB:+"${SB#,}"} 2>&1 \
      | grep -E "^\| (mqar|nearest|A|B) |held|Error" | cut -c1-160 | head -n 60
    (cd "$OUT" && tar czf study_grid.tgz --exclude study_grid.tgz ./*_s012 ./*_s345 timing ./*.log \
       2>/dev/null; rm -rf ./*_s012 ./*_s345 timing)
    ;;
esac
echo "total $(el) s"
