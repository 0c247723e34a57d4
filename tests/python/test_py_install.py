"""`pip install ./python` into a fresh virtual environment bundles
liblongattn.so, and `import longattn` then works from anywhere without
LONGATTN_LIB. Offline: Debian's setuptools, --no-build-isolation."""
import os
import shutil
import subprocess
import sys

import pytest

from test_py_common import LIB, ROOT, lib_loads

PY = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def _have(mod):
    return subprocess.run([PY, "-c", "import " + mod], capture_output=True).returncode == 0


@pytest.mark.skipif(not lib_loads(), reason="liblongattn.so not built")
@pytest.mark.skipif(not all(_have(m) for m in ("venv", "ensurepip", "pip", "setuptools",
                                               "wheel")),
                    reason="python3-venv / pip / setuptools / wheel not installed")
def test_pip_install_bundles_the_library(tmp_path):
    src = tmp_path / "python"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = dict(os.environ, LONGATTN_LIB=LIB, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-deps",
                        str(src)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    env = {k: v for k, v in os.environ.items()
           if k not in ("LONGATTN_LIB", "LA_BUILD", "PYTHONPATH")}
    code = ("import longattn, os, numpy as np; p = longattn.library_path(); "
            "assert p.startswith(os.path.dirname(longattn.__file__)), p; "
            "print(p); print(longattn.build_info())")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "liblongattn.so" in r.stdout and "site-packages" in r.stdout
