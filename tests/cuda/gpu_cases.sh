#!/bin/bash
# Chosen harness selections, each in its own process at once, no sanitizer:
# the cases a device call must not lose to the check step's cap (its slices
# can cut a long case in the middle).
#   LA_CASES='-n N=256K;-o f16tc --shard-block 0/2;-o f16tc --shard-block 1/2' \
#     bash tests/cuda/gpu_round.sh cases:200
# LA_CASES: selections separated by ';', shell-quoted within (default: the N = 256K no-overflow
# check and the fp16 table in 4 blocks); each gets -b cuda and the step's cap.
# Logs $OUT/cases_<i>.log; says each selection's tables and failed checks.
. tests/cuda/gpu_common.sh cases
H=$B/tests/backend/test_backend_ops
CAP=$(( ${LA_STEP_S:-200} - 10 ))
IFS=';' read -r -a sels <<< "${LA_CASES:--n N=256K;-o f16tc --shard-block 0/4;-o f16tc --shard-block 1/4;-o f16tc --shard-block 2/4;-o f16tc --shard-block 3/4}"
pids=()
for i in "${!sels[@]}"; do
  eval "args=(${sels[$i]})" # quotes group a name with spaces: -n 'paged tc'
  OMP_NUM_THREADS=2 timeout -k 5 "$CAP" "$H" -b cuda "${args[@]}" > "$OUT/cases_$i.log" 2>&1 &
  pids+=($!)
done
rc=0
for i in "${!sels[@]}"; do
  wait "${pids[$i]}"; r=$?
  [ $r = 0 ] || rc=1
  say "[${sels[$i]}] rc=$r$([ $r = 124 ] && echo ' (cut by the cap)'): $(tail -1 "$OUT/cases_$i.log" | cut -c1-80)"
  grep -E "^FAIL|finite ok|FAIL \(non-finite\)" "$OUT/cases_$i.log" | head -12 | tee -a "$S"
done
say "# cases total $(el) s, rc=$rc"
exit $rc
