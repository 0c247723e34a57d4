#!/bin/bash
# The pre-Hopper build on the GPU machine: the library and the harness built
# with CUDA_ARCH=ptx80 (compute_80 PTX only, no sm_90a code: what an Ampere or
# Ada GPU loads), run on the H200 through the driver's JIT.
#   1. build $B (default build-ptx80) with CUDA_ARCH=ptx80 (cap LA_BUILD_S;
#      also under gpu_round.sh, whose shared build is another target set:
#      LA_SM80_SKIP_BUILD=1 skips it);
#   2. check the library holds no SASS and only compute_80 PTX (cuobjdump,
#      when installed);
#   3. the harness's CUDA cases (-b cuda) in LA_SHARDS processes (cap
#      LA_HARNESS_S): every portable and mma.sync kernel runs and must match
#      the CPU path; the Hopper-only kernels (wgmma, fp8 mma.sync) are never
#      selected, so a case forcing one is SKIPPED ("variant: ... an sm_90
#      device"), and the fp8 HISA stage-2 test hook, which calls the sm_90a
#      kernel directly, is listed apart (it cannot run without sm_90a code).
#   bash tests/cuda/gpu_sm80.sh [HARNESS ARGS...]   (logs and summary under $OUT)
# The JIT cache is shared by the shards (CUDA_CACHE_PATH, default
# /tmp/la_sm80_jit), and each shard takes a contiguous run of the case list
# (--shard-block: fewer tables, so fewer modules to JIT per process; with
# --shard's round robin every shard JIT-compiled every module at once, and
# the ninth session's run was cut before the end of --small).
# LA_SM80_ARGS: harness arguments when none are given (e.g. --small, detached
# under gpu_round.sh as `sm80+:SECONDS`).
[ $# -eq 0 ] && set -- ${LA_SM80_ARGS:-}
BUILD=${BUILD:-build-ptx80}
. tests/cuda/gpu_common.sh sm80
H=$B/tests/backend/test_backend_ops
if [ "${LA_SM80_SKIP_BUILD:-0}" != 1 ]; then  # its own tree: built even under gpu_round.sh (LA_SKIP_BUILD)
  timeout "${LA_BUILD_S:-400}" make -j16 BUILD=$B SKIP_DEPS=1 CUDA_ARCH=ptx80 all "$H" > "$OUT/build_sm80.log" 2>&1 \
    || { say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build_sm80.log" | head -20 | tee -a "$S"; exit 1; }
  say "# build (CUDA_ARCH=ptx80): $(el) s"
fi
[ -x "$H" ] || { say "missing $H"; exit 1; }
rc=0
CO=$(command -v cuobjdump || ls /usr/local/cuda/bin/cuobjdump 2>/dev/null)
if [ -n "$CO" ]; then
  elf=$("$CO" --list-elf "$B/liblongattn.a" 2>/dev/null | grep -c 'ELF file')
  ptx=$("$CO" --list-ptx "$B/liblongattn.a" 2>/dev/null | grep -c 'sm_80.ptx')
  other=$("$CO" --list-ptx "$B/liblongattn.a" 2>/dev/null | grep 'PTX file' | grep -vc 'sm_80.ptx')
  say "cuobjdump: $elf SASS images, $ptx compute_80 PTX images, $other other PTX"
  [ "$elf" = 0 ] && [ "$ptx" -gt 0 ] && [ "$other" = 0 ] || { say "FAIL: the ptx80 build is not compute_80 PTX only"; rc=1; }
else
  say "cuobjdump: not installed (image check skipped)"
fi
export CUDA_CACHE_PATH=${CUDA_CACHE_PATH:-/tmp/la_sm80_jit} CUDA_CACHE_MAXSIZE=4294967296
mkdir -p "$CUDA_CACHE_PATH"
N=${LA_SHARDS:-4}
pids=()
for i in $(seq 0 $((N - 1))); do
  OMP_NUM_THREADS=$(( $(nproc) / N > 0 ? $(nproc) / N : 1 )) timeout "${LA_HARNESS_S:-400}" \
    "$H" -b cuda --shard-block $i/$N "$@" > "$OUT/harness_sm80_$i.log" 2>&1 &
  pids+=($!)
done
hrc=0
for p in "${pids[@]}"; do wait $p || hrc=1; done
say "test_backend_ops -b cuda $* ($N shards, compute_80 PTX on $(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)): rc=$hrc ($(el) s)"
awk '/^#   [a-z_0-9]+ +[0-9]+ \/ /{t=$2; o[t]+=$3; f[t]+=$5; s[t]+=$7; k[t]+=$9; p[t]+=$10; q[t]+=$12; if (!(t in seen)) {seen[t]=1; ord[++n]=t}}
     END {printf "#   %-10s %5s %5s %5s %5s %8s %6s\n", "table", "ok", "FAIL", "SKIP", "KNOWN", "checks", "failed";
          for (i=1;i<=n;i++){t=ord[i]; printf "#   %-10s %5d %5d %5d %5d %8d %6d\n", t, o[t], f[t], s[t], k[t], p[t], q[t]; P+=p[t]; Q+=q[t]}
          printf "%d passed, %d failed (checks, all shards)\n", P, Q}' "$OUT"/harness_sm80_*.log | tee -a "$S"
# failed checks ("FAIL file:line: ..."), the stage-2 hook's apart (an sm_90a
# kernel the test calls directly), then the failed cases ("FAIL [table] ...")
hook=$(grep -hE '^FAIL [^[]' "$OUT"/harness_sm80_*.log | grep -c 'stage-2 hook')
say "failed checks of the fp8 HISA stage-2 hook (sm_90a only): $hook"
grep -hE '^FAIL [^[]' "$OUT"/harness_sm80_*.log | grep -v 'stage-2 hook' | head -20 | tee -a "$S"
grep -hE '^FAIL \[' "$OUT"/harness_sm80_*.log | head -20 | tee -a "$S"
grep -hE "^  SKIP sub-check|^SKIP" "$OUT"/harness_sm80_*.log | sed -E 's/^ *SKIP (sub-check )?(\[[^]]*\] )?[^:]*: //' | sort | uniq -c | sort -rn | head -8 | tee -a "$S"
for i in $(seq 0 $((N - 1))); do
  tail -1 "$OUT/harness_sm80_$i.log" | grep -qE '^[0-9]+ passed, ' || { say "shard $i: unfinished (cap?) last: $(tail -1 "$OUT/harness_sm80_$i.log" | cut -c1-100)"; hrc=1; }
done
[ $hrc -eq 0 ] || rc=1
say "# sm80 total $(el) s, rc=$rc"
exit $rc
