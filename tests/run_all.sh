#!/usr/bin/env bash
# Runs every C test binary under BUILD/tests and the Python tests, then
# prints one closing line: "N passed, N failed" (", N skipped" when any).
# Usage: tests/run_all.sh [BUILD]   (default build)
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
export LA_BUILD="$BUILD"
PY=/usr/bin/python3
passed=0; failed=0; skipped=0
failed_names=()
log=$(mktemp -d)

for t in $(find "$BUILD/tests" -type f -perm -u+x -name 'test_*' 2>/dev/null | grep -v '/cuda/' | sort); do
    name=${t#$BUILD/tests/}
    start=$(date +%s.%N)
    out="$log/$(echo "$name" | tr / _).log"
    "$t" >"$out" 2>&1
    rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -1)
    if [ -n "$line" ]; then
        p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/')
        f=$(echo "$line" | sed -E 's/^[0-9]+ passed, ([0-9]+) failed.*/\1/')
    else
        p=0; f=1
    fi
    if [ $rc -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
    passed=$((passed + p)); failed=$((failed + f))
    dur=$(awk -v a="$start" -v b="$(date +%s.%N)" "BEGIN{printf \"%.1f\", b-a}")
    if [ "$f" -ne 0 ]; then
        failed_names+=("$name")
        printf 'FAIL  %-34s %s (exit %d, %ss)\n' "$name" "${line:-no summary line}" $rc "$dur"
        grep -E 'FAIL|ERROR|error|Sanitizer|runtime error' "$out" | head -20 | sed 's/^/      /'
        tail -3 "$out" | sed 's/^/      /'
    else
        printf 'ok    %-34s %s (%ss)\n' "$name" "$line" "$dur"
    fi
done

if [ "${LA_SKIP_PYTHON:-0}" != 1 ]; then
    if [ -x "$PY" ] && $PY -c 'import pytest, numpy' 2>/dev/null && ls tests/python/test_*.py >/dev/null 2>&1; then
        $PY -m pytest -q -p no:cacheprovider tests/python >"$log/pytest.log" 2>&1
        rc=$?
        summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log/pytest.log" | tail -1)
        [ -z "$summary" ] && summary=$(tail -1 "$log/pytest.log")
        p=$(echo "$summary" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
        f=$(echo "$summary" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || true)
        e=$(echo "$summary" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+' || true)
        s=$(echo "$summary" | grep -oE '[0-9]+ skipped' | grep -oE '[0-9]+' || true)
        p=${p:-0}; f=${f:-0}; e=${e:-0}; s=${s:-0}
        f=$((f + e))
        if [ $rc -ne 0 ] && [ $rc -ne 5 ] && [ $f -eq 0 ]; then f=1; fi
        passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
        if [ $f -ne 0 ]; then
            failed_names+=("pytest")
            grep -E '^(FAILED|ERROR)' "$log/pytest.log" | head -30 | sed 's/^/      /'
            printf 'FAIL  %-34s %s\n' "python (pytest)" "$summary"
        else
            printf 'ok    %-34s %s\n' "python (pytest)" "$summary"
        fi
    else
        echo "skip  python tests: /usr/bin/python3 with pytest and numpy not available (run scripts/setup.sh test)"
    fi
fi
rm -rf "$log"
if [ ${#failed_names[@]} -gt 0 ]; then echo "failed: ${failed_names[*]}"; fi
if [ $skipped -gt 0 ]; then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
[ $failed -eq 0 ]
