#!/bin/bash
# A/B step (issue 13): the headline forward rows of docs/PERF.md
# (bench/headline.c, public API only) timed on this tree's library against a
# base commit's, built beside it in the same device call. The base tree is
# unpacked by `scripts/ab_prepare.sh REV DIR` and carried with this one; its
# library is built by its own Makefile in DIR/build-ab, with its own default
# kernels (no variables set). bench/headline.c is linked statically against
# each library (build-gpu/bench/headline_base, build-gpu/bench/headline), and
# the two binaries run interleaved, base then HEAD, LA_AB_ROUNDS times. The
# table: per row the median over rounds of each binary's per-run median, the
# ratio HEAD / base, FLAG where HEAD is slower than LA_AB_TOL × base.
#   bash tests/cuda/gpu_ab.sh            (or as a step: gpu_round.sh ab:SECONDS)
# Env: LA_AB_BASE     the base tree (default ../base, i.e. .wt/base beside .wt/NAME)
#      LA_AB_ROUNDS   rounds, each one base run and one HEAD run (default 3)
#      LA_AB_MIN_TIME seconds of timed calls per row and run (default 0.2)
#      LA_AB_ROWS     comma-separated rows (default all: build-gpu/bench/headline --list)
#      LA_AB_TOL      the FLAG threshold on HEAD / base (default 1.03)
#      LA_AB_ORDER    abab (default: base first in every round) or abba (HEAD first
#                     in the even rounds, so that a drift over the call falls on both)
#      LA_AB_DEADLINE no new round after this many seconds of the step (default 600)
#      LA_SKIP_BUILD=1  HEAD's library is built already (gpu_round.sh sets it);
#                     otherwise it is built here, concurrently with the base's.
# Logs: $OUT/base_build.log, head_build.log, headline_build.log, runs.log
# (every headline line), ab_table.txt (rewritten after each round).
# Exit status 1 when a build fails, a row fails or is missing, or a row is flagged.
. tests/cuda/gpu_common.sh ab
BASE_DIR=${LA_AB_BASE:-../base}
[ -f "$BASE_DIR/Makefile" ] || { say "ab: no base tree at $BASE_DIR (scripts/ab_prepare.sh REV DIR)"; exit 1; }
BASE_DIR=$(cd "$BASE_DIR" && pwd)
BB=build-ab
ROUNDS=${LA_AB_ROUNDS:-3}
MIN_TIME=${LA_AB_MIN_TIME:-0.2}
TOL=${LA_AB_TOL:-1.03}
DEADLINE=${LA_AB_DEADLINE:-600}
ORDER=${LA_AB_ORDER:-abab}
case $ORDER in abab|abba) ;; *) say "ab: LA_AB_ORDER must be abab or abba, not '$ORDER'"; exit 2;; esac
say "# base $(cat "$BASE_DIR/.ab_rev" 2>/dev/null || echo '(no .ab_rev)') at $BASE_DIR; HEAD $([ -e .git ] && git rev-parse HEAD || echo '(no .git here)')"

# ---- builds: the base library (its own Makefile) beside HEAD's ----
( cd "$BASE_DIR" && timeout "${LA_AB_BUILD_S:-300}" make -j16 BUILD=$BB SKIP_DEPS=1 "$BB/liblongattn.a" ) \
  > "$OUT/base_build.log" 2>&1 &
base_pid=$!
rc=0
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout "${LA_AB_BUILD_S:-300}" make -j16 BUILD="$B" SKIP_DEPS=1 "$B/liblongattn.a" > "$OUT/head_build.log" 2>&1 \
    || { say "ab: HEAD library BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/head_build.log" | head -5 | tee -a "$S"; rc=1; }
fi
wait "$base_pid" || { say "ab: base library BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/base_build.log" | head -5 | tee -a "$S"; rc=1; }
[ $rc -eq 0 ] || exit 1
{ make BUILD="$B" SKIP_DEPS=1 "$B/bench/headline" &&
  make BUILD="$B" SKIP_DEPS=1 HEADLINE_BASE="$BASE_DIR" HEADLINE_BASE_BUILD=$BB "$B/bench/headline_base"; } \
  > "$OUT/headline_build.log" 2>&1 \
  || { say "ab: headline BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/headline_build.log" | head -5 | tee -a "$S"; exit 1; }
say "# builds done ($(el) s)"

# ---- interleaved runs ----
args=(--min-time "$MIN_TIME")
[ -n "${LA_AB_ROWS:-}" ] && args+=(--rows "$LA_AB_ROWS")
: > "$OUT/runs.log"
table() { # the A/B table from runs.log (python3: the device's)
  python3 - "$OUT/runs.log" "$TOL" <<'EOF'
import sys, statistics
log, tol = sys.argv[1], float(sys.argv[2])
runs, order = {}, []
for line in open(log):
    if not line.startswith("headline "):
        continue
    kv = dict(t.split("=", 1) for t in line.split()[1:] if "=" in t)
    if "row" not in kv:
        continue
    row, tag = kv["row"], kv["tag"]
    if row not in order:
        order.append(row)
    ms = float(kv["ms"]) if kv.get("status") == "ok" else float("nan")
    runs.setdefault(row, {}).setdefault(tag, []).append(ms)
bad = 0
want = max((len(v) for t in runs.values() for v in t.values()), default=0)  # runs per binary
print(f"{'row':<20} {'base ms':>9} {'HEAD ms':>9} {'HEAD/base':>9}  {'base runs (ms)':<27} {'HEAD runs (ms)':<27}")
for row in order:
    a, b = runs[row].get("base", []), runs[row].get("head", [])
    ok = len(a) == want and len(b) == want and all(x == x for x in a + b)
    if not ok:
        bad += 1
        print(f"{row:<20} {'-':>9} {'-':>9} {'-':>9}  ERROR (a run failed or is missing: base {a}, HEAD {b})")
        continue
    ma, mb = statistics.median(a), statistics.median(b)
    r = mb / ma
    flag = "FLAG" if r > tol else ""
    bad += flag != ""
    fa = " ".join(f"{x:.4f}" for x in a)
    fb = " ".join(f"{x:.4f}" for x in b)
    print(f"{row:<20} {ma:9.4f} {mb:9.4f} {r:9.3f}  {fa:<27} {fb:<27} {flag}")
n = len(order)
print(f"# {n} rows, {want} runs each, {bad} flagged or failed (FLAG: HEAD > {tol:.2f} x base, medians over rounds)")
sys.exit(1 if bad or not n else 0)
EOF
}
done_rounds=0
for r in $(seq 1 "$ROUNDS"); do
  if [ "$(el)" -gt "$DEADLINE" ]; then say "ab: deadline ${DEADLINE} s reached after $done_rounds rounds"; break; fi
  sides="base head"
  [ "$ORDER" = abba ] && [ $((r % 2)) -eq 0 ] && sides="head base"
  for side in $sides; do
    bin="$B/bench/headline"
    [ $side = base ] && bin="$B/bench/headline_base"
    t1=$(date +%s)
    timeout "${LA_AB_RUN_S:-120}" "$bin" --tag $side "${args[@]}" >> "$OUT/runs.log" 2>> "$OUT/runs.err"
    run_rc=$?
    say "# round $r $side: rc=$run_rc ($(( $(date +%s) - t1 )) s)"
  done
  done_rounds=$r
  table > "$OUT/ab_table.txt" 2>&1
done
grep -h "^# headline" "$OUT/runs.log" | sort -u | tee -a "$S"
table > "$OUT/ab_table.txt" 2>&1
trc=$?
tee -a "$S" < "$OUT/ab_table.txt"
[ "$done_rounds" -lt 3 ] && say "ab: only $done_rounds rounds (fewer than 3)" && trc=1
say "# ab total $(el) s, $done_rounds rounds, rc=$trc"
exit $trc
