#!/bin/bash
# The focused backward on the GPU machine (variant "mma", issue 14): the
# harness's focused_backward cases (16 shards at once: the float64
# references are CPU work) and the focused rows of bench/gpu_backward.py
# (the C-level driver, ours through the package, the plain-PyTorch peers).
# Uses a build tree made beforehand (B, default build-gpu: liblongattn.so,
# tests/backend/test_backend_ops, gpu_backward_driver), so that no device
# time goes to compiling:
#   make CUDA_ARCH=sm90a BUILD=build-gpu build-gpu/tests/backend/test_backend_ops  (+ the driver)
# (LA_PREBUILT=FILE.tgz: unpacked first; where the carried binaries do not
# run, the tree is built here instead).
#   bash tests/cuda/gpu_focused_bwd.sh      (logs under $OUT; summary in $OUT/summary.txt)
# Knobs: LA_CHECK_S (harness cap per shard), LA_BENCH_S / LA_PEER_S (bench caps),
# LA_BENCH_ARGS (" ": the torch.compile peer too), LA_OURS_PY (package rows),
# LA_TIMELINE (rows whose step is traced: kernel list, gaps, host calls).
. tests/cuda/gpu_common.sh focused_bwd
T=$B/tests/backend/test_backend_ops
[ -n "${LA_PREBUILT:-}" ] && tar xzf "$LA_PREBUILT"
if ! "$T" --list > /dev/null 2>&1; then
  say "# prebuilt harness does not run here: building ($(el) s)"
  timeout 300 make -j16 SKIP_DEPS=1 CUDA_ARCH=sm90a BUILD="$B" "$B/liblongattn.a" "$B/liblongattn.so" "$T" \
    > "$OUT/build.log" 2>&1 || { say "build FAILED"; tail -5 "$OUT/build.log" | tee -a "$S"; exit 1; }
  nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -Iinclude -Isrc \
    bench/gpu_backward_driver.cu "$B/liblongattn.a" -o "$B/gpu_backward_driver" -Xcompiler -fopenmp \
    -lopenblas -llapack -lgomp -lm -ldl >> "$OUT/build.log" 2>&1
  say "# built ($(el) s)"
fi
if [ "${LA_NCU:-0}" = 1 ]; then
  # per-kernel device time of focused128 (two forwards, two backwards): name, calls, µs per call
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum "$B/gpu_backward_driver" focused128 1 \
    > "$OUT/ncu.log" 2>&1
  awk '/Context [0-9]+, Stream/ {n = $0; gsub(/\(anonymous namespace\)::/, "", n); sub(/^ *(void )?/, "", n)
                                 sub(/\(.*/, "", n); gsub(/ /, "", n)}
       /gpu__time_duration.sum/ {u = $(NF-1); x = $NF; gsub(/,/, "", x)
                                 x = u == "ms" ? x * 1000 : u == "ns" ? x / 1000 : u == "s" ? x * 1e6 : x
                                 t[n] += x; c[n]++}
       END {for (k in t) printf "%-44s %2d calls %9.1f us/call\n", k, c[k], t[k] / c[k]}' "$OUT/ncu.log" \
    | sort -k4 -rn | tee -a "$S"
  say "# ncu ($(el) s)"
fi
# LA_CHECK_NAMES: only the cases whose names hold one of these words (default all)
names=${LA_CHECK_NAMES:-focused}
per=$(( 16 / $(echo $names | wc -w) ))
for nm in $names; do
  for i in $(seq 0 $((per - 1))); do
    timeout "${LA_CHECK_S:-60}" "$T" -o focused_backward -b cuda -n "$nm" --shard "$i/$per" \
      > "$OUT/shard_${nm}_$i.log" 2>&1 &
  done
done
wait
cat "$OUT"/shard_*.log > "$OUT/check.log" && rm -f "$OUT"/shard_*.log
say "# check: $(grep -c '^ok \[' "$OUT/check.log") ok, $(grep -c '^FAIL \[' "$OUT/check.log") failed, $(grep -c '^SKIP ' "$OUT/check.log") skipped cases; $(grep -E '^[0-9]+ passed' "$OUT/check.log" | awk '{p+=$1; f+=$3} END {print p " checks passed, " f " failed"}') ($(el) s)"
grep -E "^(FAIL|SKIP)|FAILED|rel Frobenius err" "$OUT/check.log" | head -20 | tee -a "$S"
if [ "${LA_BENCH:-1}" = 0 ]; then # the C-level driver alone
  timeout 30 "$B/gpu_backward_driver" focused128 5 2>&1 | tail -1 | tee -a "$S"
  exit 0
fi
LA_BUILD=$B LA_OURS_PY=${LA_OURS_PY:-focused} PYTHONUNBUFFERED=1 timeout "${LA_BENCH_S:-150}" python3 bench/gpu_backward.py \
    --driver "$B/gpu_backward_driver" --ours focused128 --peers "${LA_PEERS:-ours_py,focused}" --reps 5 \
    --timeout "${LA_PEER_S:-90}" ${LA_BENCH_ARGS:---no-compile} > "$OUT/bench.log" 2>&1
say "# bench rc=$? ($(el) s)"
grep -v '^timeline' "$OUT/bench.log" | cut -c1-220 | tail -12 | tee -a "$S"
# LA_TIMELINE=flatten: one package step's device events and host calls (bench/gpu_backward.py timeline)
grep '^timeline' "$OUT/bench.log" | cut -c10-110 | tee -a "$S"
