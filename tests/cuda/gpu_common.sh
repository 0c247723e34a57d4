# shellcheck shell=bash
# Shared start of the device steps (sourced: . tests/cuda/gpu_common.sh NAME).
# Sets OUT (default /tmp/la_gpu_out, created), B (the build tree, default
# build-gpu), el (seconds since the start), S ($OUT/summary.txt, emptied), say
# (echo + append to S), and prints the header line (NAME, time, commit, GPU
# and clock).
#   gpu_build_driver SRC [SECONDS]   builds $B/dev/SRC (make's dev-cuda rule: dev/SRC.cu
#                                    against $B/liblongattn.a; log $OUT/SRC_build.log)
#   gpu_bench SRC SECONDS ARGS...    runs $B/dev/SRC ARGS (log $OUT/SRC[_ARG1].log), says rc
#   gpu_peer SCRIPT SECONDS ARGS...  runs python3 bench/SCRIPT.py ARGS the same way
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=${BUILD:-build-gpu}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "# ${1:-gpu} $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | head -1)"
gpu_build_driver() {
  local src=$1 cap=${2:-90} log="$OUT/$1_build.log"
  timeout "$cap" make -j16 BUILD="$B" SKIP_DEPS=1 "$B/dev/$src" > "$log" 2>&1 \
    || { say "$src: BUILD FAILED ($(el) s)"; grep -E "error" "$log" | head -5 | tee -a "$S"; return 1; }
}
gpu_bench() {
  local src=$1 cap=$2; shift 2
  local log="$OUT/$src${1:+_$1}.log"
  gpu_build_driver "$src" || return 1
  timeout "$cap" "$B/dev/$src" "$@" > "$log" 2>&1
  local rc=$?
  say "$src $*: rc=$rc ($(el) s)"
  grep -E "FAIL|failed" "$log" | head -5 | tee -a "$S"
  return $rc
}
gpu_peer() {
  local script=$1 cap=$2; shift 2
  local log="$OUT/peer_$script${1:+_${1#--}}.log"
  PYTHONUNBUFFERED=1 timeout "$cap" python3 "bench/$script.py" "$@" > "$log" 2>&1
  local rc=$?
  say "bench/$script.py $*: rc=$rc ($(el) s)"
  grep -E " ms |failed|Error" "$log" | cut -c1-120 | head -12 | tee -a "$S"
  return $rc
}
