#!/bin/bash
# The Python package on the device (torch with CUDA, >= 2.4 there), in one
# device call of at most ~300 s of its own (issues 16 and 14):
#   0. the build: liblongattn.so and longattn._fastcall for this python3
#      (make pyext PYTHON=python3; the package falls back to ctypes without it);
#   1. bench/py_overhead.py --device cuda (call overhead per op; first, so
#      that a cut later step still leaves the table), LA_OVH_RUNS (2) times,
#      each in its own process (the spread between runs is the variance),
#      LA_OVH_ALT (2) alternations of the timed paths per op, with the host
#      time of each piece of the call (--breakdown);
#   1b. bench/py_backward.py --device cuda (host time per fwd+bwd step at
#      small sizes: the package against the bare C calls and torch's own
#      autograd floor), cap LA_PYBWD_S (30; 0 skips);
#   2. pytest, the fast tests (custom ops, fake tensors, opcheck, CUDA-graph
#      replay of every op forward and backward, the layers on CUDA against
#      float64 references, varlen, autograd, examples/vit_swap.py on CUDA);
#   3. pytest, the torch.compile tests (mark compile_heavy: fullgraph=True and
#      mode="reduce-overhead" training steps of 2-block models per layer);
#   4. examples/vit_swap.py, a few training steps per layer on CPU and CUDA;
#   5. bench/gpu_backward.py: ours through the package's autograd (ours_py),
#      fla's chunk_linear_attn, plain-PyTorch autograd eager and compiled.
#   bash tests/cuda/gpu_python.sh        (logs and summary.txt under $OUT)
# Each step has its own cap (seconds): LA_OVH_S (30), LA_PYTEST_S (60),
# LA_COMPILE_S (80), LA_VIT_S (20), LA_BWD_S (what is left of LA_TOTAL_S =
# 295 s since the start, at least 60); 0 skips the step. LA_PYTEST_K and
# LA_COMPILE_K: a pytest -k expression for the two pytest steps (default
# none); LA_VIT_STEPS (3) the training steps of step 4. The two
# pytest steps run in LA_PYTEST_N (4) and LA_COMPILE_N (6) processes where
# pytest-xdist is installed (it is on the device): one torch.compile of a
# 2-block model takes ~10 s there, mostly single-threaded host work. Each
# xdist worker gets nproc / workers OpenMP threads (tests/python/conftest.py:
# with every worker starting two OpenMP teams of all 16 cores, 4 workers ran
# the fast tests slower than one process did).
# LA_BWD_PEERS: the peers of step 5 (default ours_py,fla,mhla,focused,linear).
# LA_STUDY_S > 0 adds the training-study pilot (studies/train) with that cap.
# Wheels: every *.whl in $LA_WHEELS (default .whl; e.g. fla-core, which is
# not on the device) is installed into /tmp/la_site first.
# The build (the .so only) is skipped with LA_SKIP_BUILD=1 (gpu_round.sh).
. tests/cuda/gpu_common.sh python
if [ "${LA_SKIP_BUILD:-0}" != 1 ]; then
  timeout 200 make -j16 BUILD=$B SKIP_DEPS=1 PYTHON=python3 "$B/liblongattn.so" pyext \
    > "$OUT/build.log" 2>&1 \
    || { say "BUILD FAILED ($(el) s)"; grep -E "error" "$OUT/build.log" | head -10 | tee -a "$S"; exit 1; }
  say "build: $(el) s"
  grep "^pyext" "$OUT/build.log" | tee -a "$S"
fi
export LA_BUILD=$B PYTHONPATH=python PYTHONUNBUFFERED=1
W=${LA_WHEELS:-.whl}
if ls "$W"/*.whl > /dev/null 2>&1; then
  if python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
       --target /tmp/la_site "$W"/*.whl > /tmp/la_wheels.log 2>&1; then
    export PYTHONPATH=python:/tmp/la_site
    say "wheels: $(cd "$W" && ls *.whl | tr '\n' ' ')"
  else
    say "wheels: install failed: $(tail -2 /tmp/la_wheels.log)"
  fi
else
  say "wheels: none in $W (fla peer skipped; pip download --no-deps -d .whl fla-core==0.6.0)"
fi
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())" 2>&1 \
  | tee -a "$S"
LA_BUILD=$B python3 -c "import torch, longattn; from longattn import _tensor; \
print('call path:', _tensor.fastcall_status())" 2>&1 | tail -1 | tee -a "$S"
files=${LA_PYTEST_FILES:-"tests/python/test_py_fastcall.py tests/python/test_compile.py \
  tests/python/test_py_cuda.py tests/python/test_nn.py tests/python/test_varlen.py \
  tests/python/test_py_backward.py tests/python/test_py_bwd_paths.py"}
popts="-v -p no:cacheprovider -rfEs --durations=12"
python3 -c "import pytest_timeout" 2> /dev/null && popts="$popts --timeout=${LA_TEST_TIMEOUT:-90}"
xdist=0
python3 -c "import xdist" 2> /dev/null && xdist=1
pytest_step() {   # NAME CAP MARK-EXPRESSION WORKERS [-k EXPRESSION] (xdist processes, where installed)
  local name=$1 cap=$2 mark=$3 n=$4 k=${5:-} rc par=""
  [ "$cap" = 0 ] && { say "$name: skipped (cap 0)"; return; }
  [ "$xdist" = 1 ] && [ "$n" -gt 1 ] && par="-n $n --dist worksteal"
  timeout "$cap" python3 -m pytest $popts $par -m "$mark" ${k:+-k "$k"} $files \
    > "$OUT/$name.log" 2>&1
  rc=$?
  [ $rc = 124 ] && say "$name: CUT by its ${cap} s cap, after $(grep -c ' PASSED' \
    "$OUT/$name.log") passing tests; last: $(grep -E 'PASSED|FAILED|SKIPPED' "$OUT/$name.log" \
    | tail -1 | cut -c1-120)"
  say "$name (${par:-1 process}): rc=$rc $(grep -E '(passed|failed|error)' "$OUT/$name.log" \
    | tail -1) ($(el) s)"
  grep -E "^(FAILED|ERROR)" "$OUT/$name.log" | cut -c1-200 | head -20 | tee -a "$S"
  grep -E "^[0-9.]+s (call|setup)" "$OUT/$name.log" | head -5 | tee -a "$S"
}
cap=${LA_OVH_S:-30}
if [ "$cap" != 0 ]; then
  for run in $(seq 1 "${LA_OVH_RUNS:-2}"); do
    timeout "$cap" python3 bench/py_overhead.py --device cuda --calls 1000 --breakdown \
      --alternations "${LA_OVH_ALT:-2}" \
      > "$OUT/py_overhead_$run.log" 2>&1
    say "bench/py_overhead.py --device cuda (run $run): rc=$? ($(el) s)"
    grep -v -E "Warning|_warn_once" "$OUT/py_overhead_$run.log" | tail -24 | tee -a "$S"
  done
fi
cap=${LA_PYBWD_S:-30}
if [ "$cap" != 0 ]; then
  timeout "$cap" python3 bench/py_backward.py --device cuda --calls 100 > "$OUT/py_backward.log" 2>&1
  say "bench/py_backward.py --device cuda: rc=$? ($(el) s)"
  grep -v -E "Warning|_warn_once" "$OUT/py_backward.log" | tail -12 | tee -a "$S"
fi
pytest_step pytest "${LA_PYTEST_S:-60}" "not compile_heavy" "${LA_PYTEST_N:-4}" "${LA_PYTEST_K:-}"
# Inductor's compile workers per process: few, as several pytest processes compile at once
export TORCHINDUCTOR_COMPILE_THREADS=${LA_INDUCTOR_THREADS:-2}
pytest_step pytest_compile "${LA_COMPILE_S:-80}" "compile_heavy" "${LA_COMPILE_N:-6}" \
  "${LA_COMPILE_K:-}"
unset TORCHINDUCTOR_COMPILE_THREADS

cap=${LA_VIT_S:-20}
if [ "$cap" != 0 ]; then
  st=${LA_VIT_STEPS:-3}
  timeout "$cap" python3 examples/vit_swap.py --steps "$st" > "$OUT/vit_swap.log" 2>&1
  say "examples/vit_swap.py --steps $st (cpu, cuda): rc=$? ($(el) s)"
  grep -E "step $((st - 1))|did not|Error" "$OUT/vit_swap.log" | head -12 | tee -a "$S"
fi
# the benchmark step gets what is left of LA_TOTAL_S (default 295 s), at least 60 s
left=$(( ${LA_TOTAL_S:-295} - $(el) ))
cap=${LA_BWD_S:-$(( left > 60 ? left : 60 ))}
if [ "$cap" != 0 ]; then
  timeout "$cap" python3 bench/gpu_backward.py --driver none --timeout $((cap - 5)) \
    --peers "${LA_BWD_PEERS:-ours_py,fla,mhla,focused,linear}" > "$OUT/gpu_backward.log" 2>&1
  say "bench/gpu_backward.py: rc=$? ($(el) s)"
  grep -E "ms|skipped|failed|timeout|Error" "$OUT/gpu_backward.log" | cut -c1-160 | head -30 \
    | tee -a "$S"
fi
cap=${LA_STUDY_S:-0}
if [ "$cap" != 0 ]; then
  timeout "$cap" python3 studies/train/run_study.py --suite pilot --device cuda \
    --out "$OUT/study" > "$OUT/study.log" 2>&1
  say "study pilot: rc=$? ($(el) s)"
  grep -E "ms/step" "$OUT/study.log" | tail -12 | tee -a "$S"
fi
say "total $(el) s"
