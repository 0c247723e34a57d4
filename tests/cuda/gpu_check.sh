#!/bin/bash
# The correctness step of a device call (GPU machine):
#   1. build: the library, the CLI and the harness in $BUILD (default
#      build-gpu; skipped when LA_SKIP_BUILD=1, as under gpu_round.sh);
#   2. the harness, every case (tests/backend/test_backend_ops: CUDA vs the
#      CPU path, CPU vs float64; summary per table), and beside it
#      compute-sanitizer memcheck on the CUDA cases of --small and --san;
#   3. compute-sanitizer racecheck on the --san selection (one case per
#      distinct kernel at its smallest multi-tile shape);
#   4. the CLI's --device cuda against --device cpu (tests/cuda/cli_device_check.py;
#      LA_CHECK_CLI=0 leaves it out).
# Steps 2 and 3 run each selection as a queue of slices (`--shard i/S` of the
# list; the cases named LA_HEAVY, default the two 128K-context paged cases, go
# first, one process each), W processes at a time. A run has a wall-clock
# budget: a slice not started by then is left out, one still running is cut.
# Each run says "N of M cases" (cases done of the selection) and its slices
# complete / cut / not started.
#   LA_HARNESS_S, LA_SAN_MEM_S, LA_SAN_RACE_S (150 each), LA_CLI_S (90): budgets,
#   each cut to what is left before LA_CHECK_DEADLINE (seconds since the start;
#   default: the step's cap LA_STEP_S from gpu_round.sh less 15 s);
#   LA_HARNESS_W, LA_SAN_MEM_W (3/4 and 1/4 of the cores, side by side),
#   LA_SAN_RACE_W (every core): processes; LA_SLICES_PER_W (harness 4,
#   sanitizers 2): slices per process.
#   bash tests/cuda/gpu_check.sh [HARNESS ARGS...]   (e.g. -o dsa; logs under $OUT)
# Extra arguments go to the harness run of step 2 (not to the sanitizer runs).
. tests/cuda/gpu_common.sh check
H=$B/tests/backend/test_backend_ops
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_BUILD_S:-200}" make -j16 BUILD="$B" SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1 \
    || { say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -20 | tee -a "$S"; exit 1; }
  say "# build: $(el) s"
fi
[ -x "$H" ] || { say "missing $H"; exit 1; }
SANITIZER=${LA_SANITIZER:-compute-sanitizer}
NPROC=$(nproc)
HEAVY=${LA_HEAVY:-128K contexts}
DEADLINE=${LA_CHECK_DEADLINE:-}
[ -z "$DEADLINE" ] && [ "${LA_STEP_S:-0}" -gt 0 ] && DEADLINE=$(( LA_STEP_S - 15 ))
rc=0
# budget of a run: its own, or what is left before DEADLINE when that is
# sooner; at least 5
cap() { local c=$1; if [ -n "$DEADLINE" ]; then local l=$(( DEADLINE - $(el) )); [ "$l" -lt "$c" ] && c=$l; fi; [ "$c" -lt 5 ] && c=5; echo "$c"; }
# cases in a selection (the harness's --list count)
count() { "$H" --list "$@" 2>/dev/null | sed -n 's/^# \([0-9]*\) cases$/\1/p'; }

# pool NAME TOOL WORKERS SLICES BUDGET [HARNESS ARGS...]: the selection ARGS
# as a queue (the HEAVY cases one per process first, then SLICES shards of the
# rest), WORKERS processes at a time, under compute-sanitizer --tool TOOL
# unless TOOL is "-". Logs $OUT/NAME_<slice>.log, exit codes beside them
# (.rc, written when a slice ends; 124 when cut); a summary line "NAME: N of M
# cases ...". Returns 1 when a slice failed (a failed check, a sanitizer
# error); a cut or unstarted slice fails the harness run only (TOOL "-").
pool() {
  local name=$1 tool=$2 w=$3 slices=$4 budget=$5; shift 5
  local pre=() m nh=0 dl ids=() pids=() id
  [ "$tool" != - ] && pre=("$SANITIZER" --tool "$tool" --error-exitcode 3)
  m=$(count "$@")
  [ -n "$m" ] || { say "$name: the harness lists no cases for: $*"; return 1; }
  case " $* " in *" -n "*) ;; *) nh=$(count -n "$HEAVY" "$@") ;; esac # a -n of the caller: no split
  for id in $(seq 0 $(( ${nh:-0} - 1 ))); do ids+=("h$id"); done
  for id in $(seq 0 $(( slices - 1 ))); do ids+=("s$id"); done
  rm -f "$OUT/${name}"_[hs]*.log "$OUT/${name}"_[hs]*.rc
  dl=$(( $(date +%s) + budget ))
  local threads=$(( NPROC / w > 0 ? NPROC / w : 1 )) started=0 ended
  for id in "${ids[@]}"; do
    while :; do # slices running = started - ended (an ended slice has its .rc)
      ended=$(find "$OUT" -maxdepth 1 -name "${name}_[hs]*.rc" | wc -l)
      [ $(( started - ended )) -lt "$w" ] && break
      sleep 0.2
    done
    local left=$(( dl - $(date +%s) ))
    [ $left -ge 1 ] || break
    local sel=(-x "$HEAVY" --shard "${id#s}/$slices")
    [ "${id:0:1}" = h ] && sel=(-n "$HEAVY" --shard "${id#h}/$nh")
    ( OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads timeout -k 10 "$left" \
        "${pre[@]}" "$H" "${sel[@]}" "$@" > "$OUT/${name}_$id.log" 2>&1
      echo $? > "$OUT/${name}_$id.rc" ) &
    pids+=($!)
    started=$(( started + 1 ))
  done
  [ ${#pids[@]} -eq 0 ] || wait "${pids[@]}"
  local logs=("$OUT/${name}"_[hs]*.log) ndone nfail ok=0 cut=0 bad=0 r f checks san=""
  ndone=$(cat "${logs[@]}" 2>/dev/null | grep -cE '^(ok|FAIL|SKIP|KNOWN-FAIL) \[')
  nfail=$(cat "${logs[@]}" 2>/dev/null | grep -cE '^FAIL \[')
  for f in "$OUT/${name}"_[hs]*.rc; do
    [ -f "$f" ] || continue
    r=$(cat "$f")
    case $r in 0) ok=$((ok + 1)) ;; 124|137) cut=$((cut + 1)) ;; *) bad=$((bad + 1)) ;; esac
  done
  checks=$(cat "${logs[@]}" 2>/dev/null | awk '/^[0-9]+ passed, [0-9]+ failed$/{p+=$1; q+=$3} END{printf "%d passed, %d failed", p, q}')
  [ "$tool" = memcheck ] && san=$(cat "${logs[@]}" 2>/dev/null | awk '/ERROR SUMMARY:/{e+=$(NF-1)} END{printf ", %d memcheck errors", e}')
  [ "$tool" = racecheck ] && san=$(cat "${logs[@]}" 2>/dev/null | awk '/RACECHECK SUMMARY:/{for(i=2;i<=NF;i++) if($i ~ /^hazard/) h+=$(i-1)} END{printf ", %d racecheck hazards", h}')
  say "$name: $ndone of $m cases done ($nfail FAIL), checks $checks$san; ${#ids[@]} slices: $ok complete, $bad failed, $cut cut, $(( ${#ids[@]} - started )) not started ($(el) s)"
  cat "${logs[@]}" 2>/dev/null | grep -E "^FAIL|Invalid|Race reported|Error:" | head -5 | tee -a "$S"
  for f in "$OUT/${name}"_[hs]*.rc; do # a failed or cut slice: where it stopped
    [ -f "$f" ] || continue
    r=$(cat "$f"); [ "$r" = 0 ] && continue
    say "  $name slice $(basename "$f" .rc | sed "s/^${name}_//"): rc=$r, $(grep -cE '^(ok|FAIL|SKIP|KNOWN-FAIL) \[' "${f%.rc}.log") cases done; last: $(grep -E '^(# \[|ok |FAIL |SKIP |KNOWN-FAIL )' "${f%.rc}.log" | tail -1 | cut -c1-100)"
  done
  [ $bad -eq 0 ] || return 1
  [ "$tool" != - ] || [ $(( cut + ${#ids[@]} - started )) -eq 0 ]
}

if ! command -v "$SANITIZER" >/dev/null; then SAN_OK=0; say "compute-sanitizer: not installed"; else SAN_OK=1; fi
HW=${LA_HARNESS_W:-$(( NPROC * 3 / 4 > 0 ? NPROC * 3 / 4 : 1 ))}
MW=${LA_SAN_MEM_W:-$(( NPROC / 4 > 0 ? NPROC / 4 : 1 ))}
RW=${LA_SAN_RACE_W:-$NPROC}
# 2. the harness and memcheck side by side (racecheck beside them slowed the
# harness ~2.5x, so it comes after)
mpid=
if [ $SAN_OK = 1 ]; then
  ( pool memcheck memcheck "$MW" $(( MW * ${LA_SLICES_PER_W:-2} )) "$(cap "${LA_SAN_MEM_S:-150}")" \
      -b cuda --small --san ) & mpid=$!
fi
hbudget=$(cap "${LA_HARNESS_S:-150}")
pool harness - "$HW" $(( HW * ${LA_SLICES_PER_W:-4} )) "$hbudget" "$@" || rc=1
# per table: cases ok / FAIL / SKIP / KNOWN-FAIL, checks passed / failed, summed over the slices
awk '/^#   [a-z_0-9]+ +[0-9]+ \/ /{t=$2; o[t]+=$3; f[t]+=$5; s[t]+=$7; k[t]+=$9; p[t]+=$10; q[t]+=$12; if (!(t in seen)) {seen[t]=1; ord[++n]=t}}
     END {printf "#   %-16s %5s %5s %5s %5s %8s %6s\n", "table", "ok", "FAIL", "SKIP", "KNOWN", "checks", "failed";
          for (i=1;i<=n;i++){t=ord[i]; printf "#   %-16s %5d %5d %5d %5d %8d %6d\n", t, o[t], f[t], s[t], k[t], p[t], q[t]; P+=p[t]; Q+=q[t]}
          printf "%d passed, %d failed (checks, finished slices)\n", P, Q}' "$OUT"/harness_s*.log "$OUT"/harness_h*.log 2>/dev/null | tee -a "$S"
grep -hE "^KNOWN-FAIL" "$OUT"/harness_[hs]*.log | head -10 | tee -a "$S"
grep -hE "^SKIP" "$OUT"/harness_[hs]*.log | sed -E 's/^SKIP \[[^]]*\] [^:]*: //' | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
grep -hE "^  SKIP sub-check" "$OUT"/harness_[hs]*.log | sed -E 's/^  //' | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
[ -n "$mpid" ] && { wait "$mpid" || rc=1; }
# 3. racecheck on the --san selection
if [ $SAN_OK = 1 ]; then
  "$H" --san --list | grep -E '^# --san: ' | sed 's/ cases here, one per kernel;/ cases, one per kernel:/' | tee -a "$S"
  pool racecheck racecheck "$RW" $(( RW * ${LA_SLICES_PER_W:-2} )) "$(cap "${LA_SAN_RACE_S:-150}")" --san || rc=1
fi
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
