# Shared start of the per-feature GPU scripts (sourced: . tests/cuda/gpu_common.sh NAME).
# Sets OUT (default /tmp/la_gpu_out, created), B=build-gpu, el (seconds since the
# start), S ($OUT/summary.txt, emptied) and say (echo + append to S), and prints
# the header line (NAME, time, commit, GPU and clock).
# gpu_build_driver SRC [SECONDS]: compiles dev/SRC.cu against $B/liblongattn.a into
# $B/SRC in the background (log $OUT/SRC_build.log; with OpenBLAS/LAPACK when they
# link, without otherwise); sets bpid, wait for it before running $B/SRC.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
B=build-gpu
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
S="$OUT/summary.txt"
: > "$S"
say() { echo "$*" | tee -a "$S"; }
say "# ${1:-gpu} $(date -u +%FT%TZ) $(git rev-parse --short HEAD 2>/dev/null) $(nvidia-smi --query-gpu=name,clocks.sm --format=csv,noheader 2>&1 | head -1)"
gpu_build_driver() {
  local src=$1 cap=${2:-45} log="$OUT/$1_build.log"
  ( timeout "$cap" nvcc -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Isrc -c "dev/$src.cu" \
      -o "$B/$src.o" > "$log" 2>&1 &&
    { local nv="nvcc $B/$src.o $B/liblongattn.a -Xcompiler -fopenmp -o $B/$src"
      timeout 20 $nv -lopenblas -llapack >> "$log" 2>&1 || timeout 20 $nv >> "$log" 2>&1; } ) &
  bpid=$!
}
