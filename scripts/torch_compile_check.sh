#!/usr/bin/env bash
# Optional check: the torch.compile / custom-op / fake-tensor tests
# (tests/python/test_compile.py, plus test_nn.py and test_varlen.py on the
# custom-op path) under a current PyPI torch (>= 2.4) in a virtual
# environment, on a machine whose system torch is older (Debian's 1.13).
# Skipped, with the reason printed and exit status 0, when the venv or the
# install fails (no network, no space, too slow: LA_TORCH_INSTALL_S, default
# 600 s). Usage: scripts/torch_compile_check.sh [BUILD]   (default build)
set -u
BUILD=${1:-build}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VENV=${LA_TORCH_VENV:-$ROOT/$BUILD/venv-torch}
LIMIT=${LA_TORCH_INSTALL_S:-300}
PY=/usr/bin/python3
skip() { echo "torch-compile check: skipped: $*"; exit 0; }

[ -f "$ROOT/$BUILD/liblongattn.so" ] || skip "$BUILD/liblongattn.so not built"
if [ ! -x "$VENV/bin/python" ]; then
    $PY -m venv --system-site-packages "$VENV" >/dev/null 2>&1 || skip "python3 -m venv failed"
fi
have() {
    "$VENV/bin/python" - <<'PY' 2>/dev/null
import torch, sys
v = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2])
sys.exit(0 if v >= (2, 4) else 1)
PY
}
if ! have; then
    echo "torch-compile check: installing torch from PyPI into $VENV (limit ${LIMIT}s)"
    timeout "$LIMIT" "$VENV/bin/pip" install -q --disable-pip-version-check \
        --index-url https://download.pytorch.org/whl/cpu --extra-index-url https://pypi.org/simple \
        --ignore-installed torch sympy typing-extensions >"$VENV/install.log" 2>&1 ||
        skip "pip install torch failed or took over ${LIMIT}s (see $VENV/install.log)"
    have || skip "the installed torch is still < 2.4 or does not import"
fi
cd "$ROOT"
echo "torch-compile check: $("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')"
LA_BUILD="$BUILD" "$VENV/bin/python" -m pytest -q -p no:cacheprovider -rs \
    tests/python/test_compile.py tests/python/test_nn.py tests/python/test_varlen.py
