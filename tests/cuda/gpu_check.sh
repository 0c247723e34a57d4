#!/bin/bash
# The correctness step of a device call (GPU machine):
#   1. build: the library, the CLI and the harness in $BUILD (default
#      build-gpu; skipped when LA_SKIP_BUILD=1, as under gpu_round.sh);
#   2. the harness, every case (tests/backend/test_backend_ops: CUDA vs the
#      CPU path, CPU vs float64; summary per table);
#   3. compute-sanitizer: memcheck on the --small cases and the --san
#      selection (one case per distinct kernel at its smallest multi-tile
#      shape) beside step 2, then racecheck on the --san selection in
#      LA_SAN_SHARDS processes (caps LA_SAN_MEM_S, LA_SAN_RACE_S: a run cut
#      by its cap reports how many cases it did; the --san line says how many
#      of the table's kernels the selection covers);
#   4. the CLI's --device cuda against --device cpu (tests/cuda/cli_device_check.py;
#      LA_CHECK_CLI=0 leaves it out).
# LA_SHARDS (4) harness processes; caps LA_HARNESS_S, LA_SAN_MEM_S, LA_SAN_RACE_S,
# LA_CLI_S, each cut to what is left before LA_CHECK_DEADLINE (seconds) if set.
#   bash tests/cuda/gpu_check.sh [HARNESS ARGS...]   (e.g. -o dsa; logs under $OUT)
# Extra arguments go to the harness run of step 2 (not to the sanitizer runs).
. tests/cuda/gpu_common.sh check
H=$B/tests/backend/test_backend_ops
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_BUILD_S:-200}" make -j16 BUILD=$B SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 \
    || { say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
  say "# build: $(el) s"
fi
[ -x "$H" ] || { say "missing $H"; exit 1; }
rc=0
# cap of a step: its own, or what is left before LA_CHECK_DEADLINE (seconds
# since the start) when that is sooner; at least 5
cap() { local c=$1; if [ -n "${LA_CHECK_DEADLINE:-}" ]; then local l=$(( LA_CHECK_DEADLINE - $(el) )); [ $l -lt $c ] && c=$l; fi; [ $c -lt 5 ] && c=5; echo $c; }
san() { # tool cap log [harness args]: one sanitizer run of a selection (--small, --san)
  local tool=$1 c=$2 log=$3; shift 3
  if ! command -v compute-sanitizer >/dev/null; then say "compute-sanitizer $tool: not installed"; return 0; fi
  timeout "$c" compute-sanitizer --tool "$tool" --error-exitcode 3 "$H" "$@" > "$OUT/$log" 2>&1
  local r=$?
  say "compute-sanitizer $tool ($*): rc=$r$([ $r = 124 ] && echo ' (cap reached)')  $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/$log" | tail -1)  $(grep -cE '^(ok|SKIP|FAIL|KNOWN-FAIL) ' "$OUT/$log") cases done  $(grep -E '^[0-9]+ passed, ' "$OUT/$log" | tail -1)  ($(el) s)"
  grep -E '^# --san: ' "$OUT/$log" | tail -1 | tee -a "$S"
  grep -E "^FAIL|Invalid|Race reported|Error:" "$OUT/$log" | head -5 | tee -a "$S"
  [ $r -eq 0 ] || [ $r -eq 124 ]
}
# 2 and 3a side by side on the one GPU: memcheck and the harness in LA_SHARDS
# processes (--shard i/N: the float64 references are single-threaded). On the
# H200 (16 cores) the harness takes ~90 s so; with racecheck beside it too it
# ran ~2.5x slower, so racecheck (3b) comes after it.
spids=()
( san memcheck "$(cap "${LA_SAN_MEM_S:-150}")" sanitizer_memcheck.log --small --san ) & spids+=($!)
N=${LA_SHARDS:-4}
pids=()
for i in $(seq 0 $((N - 1))); do
  OMP_NUM_THREADS=$(( $(nproc) / N > 0 ? $(nproc) / N : 1 )) timeout "$(cap "${LA_HARNESS_S:-300}")" \
    "$H" --shard $i/$N "$@" > "$OUT/harness_$i.log" 2>&1 &
  pids+=($!)
done
hrc=0
for p in "${pids[@]}"; do wait $p || hrc=1; done
cat "$OUT"/harness_*.log > "$OUT/harness.log"
say "test_backend_ops $* ($N shards): rc=$hrc ($(el) s)"
# per table: cases ok / FAIL / SKIP / KNOWN-FAIL, checks passed / failed, summed over the shards
awk '/^#   [a-z_0-9]+ +[0-9]+ \/ /{t=$2; o[t]+=$3; f[t]+=$5; s[t]+=$7; k[t]+=$9; p[t]+=$10; q[t]+=$12; if (!(t in seen)) {seen[t]=1; ord[++n]=t}}
     END {printf "#   %-10s %5s %5s %5s %5s %8s %6s\n", "table", "ok", "FAIL", "SKIP", "KNOWN", "checks", "failed";
          for (i=1;i<=n;i++){t=ord[i]; printf "#   %-10s %5d %5d %5d %5d %8d %6d\n", t, o[t], f[t], s[t], k[t], p[t], q[t]; P+=p[t]; Q+=q[t]}
          printf "%d passed, %d failed (checks, all shards)\n", P, Q}' "$OUT"/harness_*.log | tee -a "$S"
grep -hE "^FAIL|^KNOWN-FAIL" "$OUT"/harness_*.log | head -20 | tee -a "$S"
grep -hE "^SKIP" "$OUT"/harness_*.log | sed -E 's/^SKIP \[[^]]*\] [^:]*: //' | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
grep -hE "^  SKIP sub-check" "$OUT"/harness_*.log | sed -E 's/^  //' | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
for i in $(seq 0 $((N - 1))); do # a shard cut by its cap has no summary: count its case lines
  tail -1 "$OUT/harness_$i.log" | grep -qE '^[0-9]+ passed, 0 failed' || {
    say "shard $i: unfinished or failed: $(grep -c '^ok \[' "$OUT/harness_$i.log") ok, $(grep -c '^KNOWN-FAIL \[' "$OUT/harness_$i.log") known, $(grep -c '^FAIL \[' "$OUT/harness_$i.log") FAIL, $(grep -c '^SKIP \[' "$OUT/harness_$i.log") skipped; last: $(tail -1 "$OUT/harness_$i.log" | cut -c1-100)"
    hrc=1; }
done
[ $hrc -eq 0 ] || rc=1
for p in "${spids[@]}"; do wait $p || rc=1; done
# 3b. racecheck on the --san selection in LA_SAN_SHARDS processes
spids=()
RN=${LA_SAN_SHARDS:-6}
"$H" --san --list | grep -E '^# --san: ' | sed 's/ cases here, one per kernel;/ cases, one per kernel:/' | tee -a "$S"
for i in $(seq 0 $((RN - 1))); do
  ( san racecheck "$(cap "${LA_SAN_RACE_S:-150}")" sanitizer_racecheck_$i.log --san --shard $i/$RN ) & spids+=($!)
done
for p in "${spids[@]}"; do wait $p || rc=1; done
# 4. the CLI on the device
if [ "${LA_CHECK_CLI:-1}" = 1 ]; then
  timeout "$(cap "${LA_CLI_S:-90}")" python3 tests/cuda/cli_device_check.py "$B" > "$OUT/cli.log" 2>&1
  r=$?
  say "cli_device_check.py: rc=$r  $(tail -1 "$OUT/cli.log") ($(el) s)"
  grep -E "FAIL" "$OUT/cli.log" | head -5 | tee -a "$S"
  [ $r -eq 0 ] || rc=1
fi
say "# check total $(el) s, rc=$rc"
exit $rc
