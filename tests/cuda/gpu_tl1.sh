#!/bin/bash
# Official TileLang peer, device call 1 of 2 (dev/NOTES_tilelang_peer.md): the GPU machine
# has no network, so TileLang comes as wheels carried in two parts (64 MiB carry limit).
# This call: interpreter / pip / nvcc versions, then the wheels of .whl/part1 (tilelang,
# torch-c-dlpack-ext) that fit this interpreter into the ignored .pylib
# (pip --target, --no-index --no-deps), then (unless LA_SKIP_BUILD=1, i.e. under
# gpu_round.sh, which has built already) a capped build of build-gpu, so that call 2
# (gpu_tl2.sh, within ~30 s while the machine is warm) finds both.
#   run: bash tests/cuda/gpu_tl1.sh                 carry [".whl/part1"]
#   or:  bash tests/cuda/gpu_round.sh tl1:60        carry [".whl/part1"]   (builds first)
# <= 60 s; logs under $OUT; the summary is the last lines.
OUT=${OUT:-/tmp/la_gpu_out}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
echo "# tl1 $(date -u +%FT%TZ) $(python3 -V 2>&1), $(python3 -m pip --version 2>&1 | cut -d' ' -f1-2), nvcc: $(nvcc --version 2>&1 | tail -1)"
echo "# torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1 | tail -1)"
for m in ml_dtypes psutil tqdm typing_extensions cloudpickle tvm_ffi z3 tilelang; do
  printf '%s=%s ' "$m" "$(python3 -c "import $m; print(getattr($m, '__version__', 'yes'))" 2>/dev/null || echo no)"
done; echo " (present in the image)"
if ! ls .whl/part1/*.whl > /dev/null 2>&1; then
  echo "TL1: NO WHEELS in .whl/part1 (carry [\".whl/part1\"] missing?): nothing installed"
  exit 0
fi
rm -rf .pylib
mapfile -t W < <(python3 tests/cuda/tl_pick_wheels.py .whl/part1 --skip-present psutil,tqdm,typing_extensions,cloudpickle,packaging 2> "$OUT/tl1_pick.log")
cat "$OUT/tl1_pick.log"
if [ ${#W[@]} -eq 0 ]; then echo "TL1: no wheel of .whl/part1 fits $(python3 -V 2>&1)"; exit 0; fi
timeout 40 python3 -m pip install --no-index --no-deps --disable-pip-version-check --target .pylib "${W[@]}" > "$OUT/tl1_pip.log" 2>&1
prc=$?
grep -v "as the .root. user" "$OUT/tl1_pip.log" | tail -2
echo "# pip rc=$prc at $(el) s; installed: $(for w in "${W[@]}"; do basename "$w" | cut -d- -f1-2; done | tr '\n' ' ')"
echo "# .pylib: $(du -sh .pylib 2>/dev/null | cut -f1), top level: $(ls .pylib 2>/dev/null | grep -v dist-info | tr '\n' ' ')"
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  # our library for call 2 (no-op when current); capped so the call stays <= 60 s
  left=$(( 55 - $(el) )); [ $left -lt 5 ] && left=5
  timeout $left make -j16 BUILD=build-gpu SKIP_DEPS=1 all > "$OUT/tl1_build.log" 2>&1
  echo "# build-gpu (make all, cap ${left} s): rc=$? at $(el) s (gpu_tl2.sh finishes it if cut short)"
fi
echo "TL1 SUMMARY: $(python3 -V 2>&1); part1 pip rc=$prc; ${#W[@]} wheels into .pylib; $(el) s. Next: gpu_tl2.sh within ~30 s."
exit 0
