#!/bin/bash
# Official TileLang peer, device call 2 of 2 (dev/NOTES_tilelang_peer.md), right after
# gpu_tl1.sh (within ~30 s: the ignored .pylib and build-gpu survive only on a warm machine).
# Installs the wheels of .whl/part2 (apache-tvm-ffi, z3-solver, ml-dtypes, and cloudpickle / psutil /
# tqdm / typing-extensions / packaging only where the image lacks them) into the same .pylib, finishes
# build-gpu (no-op when current), then bench/gpu_tilelang_indexer.py: the official fp8
# lightning indexer (+ torch.topk) and the official HISA indexer (peers/tilelang/examples,
# carried) beside our DSA fp8 / bf16 and HISA, same inputs, with top-k overlaps.
#   run: bash tests/cuda/gpu_tl2.sh          carry [".whl/part2", "peers/tilelang"]
# TileLang JIT-compiles with the local nvcc (cache in /tmp/tl_cache): compile seconds are
# printed apart from the timings. <= 200 s (LA_TL2_CAP); exit 0 whatever the peer does.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
CAP=${LA_TL2_CAP:-200}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# tl2 $(date -u +%FT%TZ) $(python3 -V 2>&1), nvcc: $(nvcc --version 2>&1 | tail -1)"
if [ ! -d .pylib/tilelang ]; then
  echo "TL2: .pylib/tilelang MISSING: call 1 (gpu_tl1.sh) did not run on this machine or it went cold."
  echo "TL2: run gpu_tl1.sh (carry [\".whl/part1\"]) and this script again within ~30 s. Nothing timed."
  exit 0
fi
if ls .whl/part2/*.whl > /dev/null 2>&1; then
  mapfile -t W < <(python3 tests/cuda/tl_pick_wheels.py .whl/part2 --skip-present psutil,tqdm,typing_extensions,cloudpickle,packaging 2> "$OUT/tl2_pick.log")
  cat "$OUT/tl2_pick.log"
  timeout 40 python3 -m pip install --no-index --no-deps --upgrade --disable-pip-version-check --target .pylib "${W[@]}" > "$OUT/tl2_pip.log" 2>&1
  echo "# pip rc=$? at $(el) s; installed: $(for w in "${W[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' ')"
  grep -iE "error|warn" "$OUT/tl2_pip.log" | grep -vE "already exists|as the 'root' user" | head -3
else
  echo "TL2: no wheels in .whl/part2 (carry [\".whl/part2\", \"peers/tilelang\"] missing?): the import will likely fail"
fi
[ -d peers/tilelang/examples/deepseek_v32 ] || echo "TL2: peers/tilelang/examples MISSING (not carried): ours only"
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout 70 make -j16 BUILD=build-gpu SKIP_DEPS=1 all > "$OUT/tl2_build.log" 2>&1
  brc=$?
  echo "# build-gpu (make all, cap 70 s): rc=$brc at $(el) s"
  [ $brc -ne 0 ] && { grep -E "error" "$OUT/tl2_build.log" | head -5; tail -2 "$OUT/tl2_build.log"; }
fi
if [ -z "$CUDA_HOME" ] && command -v nvcc > /dev/null; then
  export CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
fi
export TILELANG_CACHE_DIR=/tmp/tl_cache TVM_FFI_CACHE_DIR=/tmp/tvm_ffi_cache
mkdir -p /tmp/tl_cache
left=$(( CAP - 5 - $(el) )); [ $left -lt 20 ] && left=20
budget=$(( left - 45 )); [ $budget -lt 10 ] && budget=10
echo "# bench: timeout ${left} s, no new L after ${budget} s (CUDA_HOME=$CUDA_HOME)"
PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.pylib:$PWD/peers/tilelang/examples/deepseek_v32:$PWD/peers/tilelang/examples/dsa_hisa \
  LA_BUILD=build-gpu timeout "$left" python3 bench/gpu_tilelang_indexer.py --budget "$budget" ${LA_TL_ARGS:-} \
  > "$OUT/tl_indexer.log" 2>&1
rc=$?
[ $rc -ne 0 ] && echo "# bench rc=$rc (124: the ${left} s timeout hit, e.g. in a JIT compile; lines so far below)"
grep -vE "^\s+File |^\s{4}" "$OUT/tl_indexer.log" | tail -45
echo "TL2 SUMMARY: bench rc=$rc, $(el) s"
exit 0
