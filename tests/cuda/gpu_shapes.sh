#!/bin/bash
# Issue 15's "Must show" tables in one device step, on the round's build:
#   bash tests/cuda/gpu_round.sh shapes:240        (or alone, after a build of $B)
#   LA_SHAPES_DRY=1 bash tests/cuda/gpu_shapes.sh  (prints the commands, runs nothing)
# Sub-steps, each under its own timeout (a failure is said and the step goes on;
# logs under $OUT), in this order so that a short cap cuts the peers last:
#   build    the dev drivers dev/cuda/linear_heads, dev/cuda/softmax and
#            dev/bench_gpu_mhla_causal (make's dev-cuda rule against the round's
#            $B/liblongattn.a, kept as it is; an LA_PREBUILT archive without it
#            means a library build here) and longattn._fastcall for python3;
#   heads    linear_heads time both default: linear (non-causal, causal), MHLA
#            M 16 / 150, focused flatten ± 5×5 conv at D 128 / 64 / 32 and Dv ≠ D,
#            H·D = 1536, N = 32K, bf16 and f16;
#   wan_c    linear_heads wan both: MHLA at the Wan shape, C API, bf16 and f16;
#   softmax  dev/cuda/softmax fwd: forward, D 128 / 64 / 32 and Dv ≠ D, N 8K / 32K,
#            causal and not, bf16 and f16;
#   causal_bf16, causal_f16
#            dev/bench_gpu_mhla_causal: causal MHLA with a random lower-triangular
#            W (the default pick, mma_bf16s, mma) beside causal linear attention,
#            N = 32K (C 64, M 512) and 128K (M 2048);
#   sdpa     dev/cuda/softmax_sdpa.py: PyTorch SDPA forward (default and the flash
#            backend) on the softmax shapes;
#   wan_py   bench/gpu_linear.py --peer wan: the Wan shape through the package
#            (CUDA events around longattn.mhla), torch.compile and eager of
#            bench/gpu_backward.py's mhla_torch;
#   official_eager, official_compile
#            the official MHLA NLP chunk loop (DAGroup-PKU/MHLA,
#            mhla_nlp/fla/ops/mhla/naive.py) at N = 32K, eager, then under its own
#            torch.compile with what is left of the cap, when the file was carried
#            (LA_MHLA_OFFICIAL, else peers/mhla/... or .wt/peers/mhla/...);
#   tables   tests/cuda/gpu_shapes_tables.py: the compact tables from the logs
#            (also $OUT/tables.txt), printed last.
# Caps (seconds; LA_STEP_S, the round's cap, bounds them all with 15 s kept for
# the tables): LA_SHAPES_BUILD_S (90), LA_SHAPES_HEADS_S (45), LA_SHAPES_WANC_S
# (20), LA_SHAPES_SOFTMAX_S (45), LA_SHAPES_CAUSAL_S (30), LA_SHAPES_CAUSAL16_S
# (20), LA_SHAPES_SDPA_S (50), LA_SHAPES_WANPY_S (75), LA_SHAPES_OFFICIAL_S (30),
# LA_SHAPES_COMPILE_S (what is left, at most 120); 0 skips a sub-step. Expected:
# ~130 s before the official loop's torch.compile, which then gets the rest.
. tests/cuda/gpu_common.sh shapes
DRY=${LA_SHAPES_DRY:-0}
CAP=${LA_STEP_S:-240}
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
# the official chunk loop: a file of DAGroup-PKU/MHLA, carried in an ignored folder
# (never committed), e.g. on the CPU machine before the device call:
#   mkdir -p peers/mhla && git -C <clone of DAGroup-PKU/MHLA> archive HEAD mhla_nlp/fla/ops/mhla \
#     | tar -x -C peers/mhla          (then carry peers/mhla)
OFF=${LA_MHLA_OFFICIAL:-}
for p in peers/mhla/mhla_nlp/fla/ops/mhla/naive.py .wt/peers/mhla/mhla_nlp/fla/ops/mhla/naive.py; do
  [ -z "$OFF" ] && [ -f "$p" ] && OFF=$p
done

# sub NAME CAP CMD...: CMD under timeout min(CAP, what the step has left - 15 s),
# output in $OUT/NAME.log; says rc and the time (DRY: says the command)
sub() {
  local name=$1 cap=$2; shift 2
  local left=$(( CAP - $(el) - 15 ))
  [ "$cap" -gt "$left" ] && cap=$left
  if [ "$DRY" = 1 ]; then say "[dry] $name (cap $cap s): $*"; return 0; fi
  if [ "$cap" -le 0 ]; then say "$name: skipped (no time left, $(el) s)"; return 1; fi
  timeout -k 5 "$cap" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  if [ $rc = 0 ]; then  # one line for all of them before the tables (the round shows 60 lines)
    echo "$name: rc=0 ($(el) s)" >> "$S"
    ok_steps="$ok_steps $name@$(el)s"
    return 0
  fi
  say "$name: rc=$rc$([ $rc = 124 ] && echo " (its $cap s cap)") ($(el) s)"
  grep -E "FAIL|rror|refused" "$OUT/$name.log" | head -3 | cut -c1-160 | tee -a "$S"
  return $rc
}
ok_steps=""
rc=0
drv="$B/dev/cuda/linear_heads $B/dev/cuda/softmax $B/dev/bench_gpu_mhla_causal"
if [ "${LA_SHAPES_BUILD_S:-90}" != 0 ]; then
  # the round's library as it is (-o: not remade, whatever the sources' times)
  keep=""; [ -f "$B/liblongattn.a" ] && keep="-o $B/liblongattn.a"
  sub build "${LA_SHAPES_BUILD_S:-90}" make -k -j16 BUILD="$B" SKIP_DEPS=1 PYTHON=python3 $keep $drv pyext || rc=1
fi
[ "${LA_SHAPES_HEADS_S:-45}" != 0 ] && { sub heads "${LA_SHAPES_HEADS_S:-45}" "$B/dev/cuda/linear_heads" time both default || rc=1; }
[ "${LA_SHAPES_WANC_S:-20}" != 0 ] && { sub wan_c "${LA_SHAPES_WANC_S:-20}" "$B/dev/cuda/linear_heads" wan both || rc=1; }
[ "${LA_SHAPES_SOFTMAX_S:-45}" != 0 ] && { sub softmax "${LA_SHAPES_SOFTMAX_S:-45}" "$B/dev/cuda/softmax" fwd || rc=1; }
if [ "${LA_SHAPES_CAUSAL_S:-30}" != 0 ]; then
  sub causal_bf16 "${LA_SHAPES_CAUSAL_S:-30}" "$B/dev/bench_gpu_mhla_causal" --variants default,mma_bf16s,mma || rc=1
  sub causal_f16 "${LA_SHAPES_CAUSAL16_S:-20}" "$B/dev/bench_gpu_mhla_causal" --dtype f16 --no-check --variants default || rc=1
  # where causal MHLA's time goes: W prep, pass 1, the mixing (v1, v2, wgmma) and pass 3, each
  # against its floor, and the mixing GEMM alone (family mhla_causal_mix)
  [ "${LA_SHAPES_PASSES_S:-25}" != 0 ] && { sub causal_passes "${LA_SHAPES_PASSES_S:-25}" "$B/dev/bench_gpu_mhla_causal" --passes || rc=1; }
fi
[ "${LA_SHAPES_SDPA_S:-50}" != 0 ] && { sub sdpa "${LA_SHAPES_SDPA_S:-50}" python3 dev/cuda/softmax_sdpa.py --passes fwd \
  --backends default,flash --ns 32768,8192 --dtypes bf16,f16 || rc=1; }
[ "${LA_SHAPES_WANPY_S:-75}" != 0 ] && { sub wan_py "${LA_SHAPES_WANPY_S:-75}" python3 bench/gpu_linear.py --peer wan \
  --dtypes bf16,f16 --reps 50 || rc=1; }
if [ -z "$OFF" ] || [ ! -f "$OFF" ]; then
  say "official MHLA chunk loop: not carried (no ${OFF:-peers/mhla/mhla_nlp/fla/ops/mhla/naive.py}; see this script's head)"
else
  say "official MHLA chunk loop: $OFF"
  python3 -c "import einops" 2> /dev/null || say "official MHLA chunk loop: einops is not installed here (its import will fail)"
  [ "${LA_SHAPES_OFFICIAL_S:-30}" != 0 ] && { sub official_eager "${LA_SHAPES_OFFICIAL_S:-30}" python3 \
    dev/bench_mhla_causal_torch.py --official "$OFF" --eager --ns 32768 --reps 4 || rc=1; }
  [ "${LA_SHAPES_COMPILE_S:-120}" != 0 ] && { sub official_compile "${LA_SHAPES_COMPILE_S:-120}" python3 \
    dev/bench_mhla_causal_torch.py --official "$OFF" --ns 32768 --reps 4 || rc=1; }
fi
say "# sub-steps with rc=0 (finished at):${ok_steps:- none}"
if [ "$DRY" = 1 ]; then
  say "[dry] tables: python3 tests/cuda/gpu_shapes_tables.py $OUT"
else
  python3 tests/cuda/gpu_shapes_tables.py "$OUT" > "$OUT/tables.txt" 2>&1 || rc=1
  cat "$OUT/tables.txt" | tee -a "$S"
fi
say "# shapes total $(el) s, rc=$rc"
exit $rc
