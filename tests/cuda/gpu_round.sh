#!/bin/bash
# One device call for several device steps: build once, then run each step
# with its own log folder and a wall-clock cap.
#   bash tests/cuda/gpu_round.sh NAME[:SECONDS] ...
# NAME is tests/cuda/gpu_NAME.sh: check (build, the harness, compute-sanitizer
# on its --small cases, the CLI on the device) or bench_FAMILY (softmax,
# linear, causal, focused, decode, sparse, smla: the dev/ driver and the peers)
# or the benchmarks backward and paged, or shapes (issue 15's tables: head dims,
# fp16, the Wan shape, causal MHLA), e.g. `gpu_round.sh check:300 bench_sparse:200`;
# NAME+:SECONDS runs it detached, beside the next steps (e.g. `sm80+:400 check:300`),
# and `collect:SECONDS`, in this call or a later one, gathers it.
# A step gets its cap as LA_STEP_S (gpu_check.sh fits its runs into it).
# Logs go to $OUT/NAME/; each step's own summary is printed under a header;
# every log is packed into $OUT/round_logs.tgz at the end.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
t0=$(date +%s)
echo "# $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv,noheader 2>&1)"
# LA_PREBUILT: a tar.gz of build-gpu binaries made on the host (CUDA_ARCH=sm90a:
# liblongattn.so, longattn, tests/backend/test_backend_ops, gpu_backward_driver),
# used as they are when they run here; else (or without it) the tree is built
# LA_F16_OFF=1: turn off, in this copy of the tree only and before the build, the
# fp16 tensor-core forwards (fp16 then takes the portable engine, as before the
# device harness passed them): the A/B of the fp16 rows against the old path
if [ "${LA_F16_OFF:-0}" = 1 ]; then
  for sw in src/cuda/linfam.cu:lf_f16_tc src/cuda/focused.cu:fo_f16_tc \
            src/cuda/linear_causal_tc.cu:lct_f16_tc src/cuda/mhla_causal_tc.cu:mct_f16_tc; do
    f=${sw%%:*} n=${sw#*:}
    sed -i "s/^constexpr bool $n = true;/constexpr bool $n = false;/" "$f"
    grep -q "^constexpr bool $n = false;" "$f" && echo "# LA_F16_OFF: $n off ($f)" \
      || echo "# LA_F16_OFF: $n not found in $f"
  done
fi
prebuilt=0
if [ -n "${LA_PREBUILT:-}" ] && [ -f "$LA_PREBUILT" ]; then
  mkdir -p build-gpu && tar -xzf "$LA_PREBUILT" -C build-gpu \
    && build-gpu/tests/backend/test_backend_ops --list > /dev/null 2>&1 \
    && build-gpu/longattn --version > /dev/null 2>&1 && prebuilt=1
  echo "# prebuilt $LA_PREBUILT: $([ $prebuilt = 1 ] && echo used || echo 'does not run here, building')"
fi
if [ $prebuilt = 0 ] && ! timeout "${LA_BUILD_S:-200}" make -j16 BUILD=build-gpu SKIP_DEPS=1 all cuda-tests > "$OUT/build.log" 2>&1; then
  echo "BUILD FAILED ($(( $(date +%s) - t0 )) s)"
  grep -E "error" "$OUT/build.log" | head -20
  tail -5 "$OUT/build.log"
  exit 1
fi
echo "# build: $(( $(date +%s) - t0 )) s"
# NAME+ runs a step detached (setsid: it outlives this call while the machine
# is held) with its logs under $BG/NAME; collect[:SECONDS] waits for every
# detached step, prints its summary and copies its logs into $OUT/bg_NAME.
BG=${LA_BG_DIR:-/tmp/la_bg}
collect_bg() {
  local cap=$1 d n r crc=0 end=$(( $(date +%s) + $1 ))
  for d in "$BG"/*/; do
    [ -d "$d" ] || continue
    n=$(basename "$d")
    while [ ! -f "$d/rc" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 1; done
    r=$(cat "$d/rc" 2>/dev/null || echo "still running after the collect cap")
    echo "==== $n (detached): rc=$r"
    { cat "$d/summary.txt" 2>/dev/null || tail -30 "$d/stdout.log"; } | tail -40
    mkdir -p "$OUT/bg_$n" && cp -r "$d"/. "$OUT/bg_$n"/
    [ "$r" = 0 ] || crc=1
  done
  return $crc
}
rc=0
for spec in "$@"; do
  name=${spec%%:*}
  cap=${spec#*:}
  [ "$cap" = "$spec" ] && cap=120
  if [ "$name" = collect ]; then # the detached steps of this machine's earlier steps or calls
    collect_bg "$cap" || rc=1
    continue
  fi
  detach=0
  case $name in *+) name=${name%+}; detach=1 ;; esac
  [ -f "tests/cuda/gpu_$name.sh" ] || { echo "==== $name: no tests/cuda/gpu_$name.sh"; rc=1; continue; }
  if [ $detach = 1 ]; then # beside the next steps, and later calls while this machine is held
    d=$BG/$name
    rm -rf "$d" && mkdir -p "$d"
    OUT=$d LA_STEP_S="$cap" setsid nohup bash -c "timeout $cap nice -n 5 bash tests/cuda/gpu_$name.sh > $d/stdout.log 2>&1; echo \$? > $d/rc" \
      < /dev/null > /dev/null 2>&1 &
    echo "==== $name: detached (cap $cap s, at $(( $(date +%s) - t0 )) s), logs $d; a later 'collect' step gathers it"
    continue
  fi
  echo "==== $name (cap $cap s, at $(( $(date +%s) - t0 )) s) ===="
  mkdir -p "$OUT/$name"
  OUT="$OUT/$name" LA_SKIP_BUILD=1 LA_STEP_S="$cap" timeout "$cap" bash "tests/cuda/gpu_$name.sh" 2>&1 | tail -60
  r=${PIPESTATUS[0]}
  [ "$r" -ne 0 ] && { echo "# $name: rc=$r"; rc=1; }
done
echo "# round total $(( $(date +%s) - t0 )) s"
# the device tool brings back a limited number of files: one archive of every log
( cd "$OUT" && tar czf round_logs.tgz --exclude=round_logs.tgz . 2>/dev/null && \
  find . -mindepth 1 ! -name round_logs.tgz -delete )
exit $rc
