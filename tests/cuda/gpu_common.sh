# Shared start of the device steps (sourced: . tests/cuda/gpu_common.sh NAME).
# Sets OUT (default /tmp/la_gpu_out, created), B (the build tree, default
# build-gpu), el (seconds since the start), S ($OUT/summary.txt, emptied), say
# (echo + append to S), and prints the header line (NAME, time, commit, GPU
# and clock).
#   gpu_build_driver SRC [SECONDS]   compiles dev/SRC.cu against $B/liblongattn.a
#                                    into $B/SRC (log $OUT/SRC_build.log); 0 when built
#   gpu_bench SRC SECONDS ARGS...    runs $B/SRC ARGS (log $OUT/SRC[_ARG1].log), says rc
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
GPU_LIBS=$(for l in openblas lapack; do ls /usr/lib/x86_64-linux-gnu/lib$l.so >/dev/null 2>&1 && echo -l$l; done)
gpu_build_driver() {
  local src=$1 cap=${2:-60} log="$OUT/$1_build.log"
  [ -x "$B/$src" ] && [ "$B/$src" -nt "dev/$src.cu" ] && [ "$B/$src" -nt "$B/liblongattn.a" ] && return 0
  timeout "$cap" nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc "dev/$src.cu" \
    "$B/liblongattn.a" -Xcompiler -fopenmp $GPU_LIBS -ldl -o "$B/$src" > "$log" 2>&1 \
    || { say "$src: BUILD FAILED ($(el) s)"; tail -5 "$log" | tee -a "$S"; return 1; }
}
gpu_bench() {
  local src=$1 cap=$2; shift 2
  local log="$OUT/$src${1:+_$1}.log"
  gpu_build_driver "$src" || return 1
  timeout "$cap" "$B/$src" "$@" > "$log" 2>&1
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
