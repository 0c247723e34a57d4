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
    # the compiled call path travels with it when it was built beside the library
    import sysconfig
    ext = os.path.join(os.path.dirname(LIB), "_fastcall" + sysconfig.get_config_var("EXT_SUFFIX"))
    if os.path.isfile(ext):
        code = "from longattn import _tensor; print(_tensor.fastcall_status())"
        r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env,
                           capture_output=True, text=True, cwd=tmp_path)
        assert r.returncode == 0, r.stdout + r.stderr
        assert r.stdout.startswith("longattn._fastcall (") and "site-packages" in r.stdout, r.stdout
    # the license and the typing marker travel with the package
    code = ("import importlib.metadata as m, longattn, os; md = m.metadata('longattn'); "
            "print(md.get('License')); print(md.get_all('Classifier')); "
            "print(os.path.exists(os.path.join(os.path.dirname(longattn.__file__), 'py.typed')))")
    r = subprocess.run([str(venv / "bin" / "python"), "-c", code], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "MIT" and "MIT License" in lines[1] and lines[2] == "True", r.stdout
    dist = [d for d in os.listdir(venv / "lib" / os.listdir(venv / "lib")[0] / "site-packages")
            if d.startswith("longattn-") and d.endswith(".dist-info")]
    assert dist, "no dist-info"


@pytest.mark.skipif(not all(_have(m) for m in ("venv", "ensurepip", "pip", "setuptools",
                                               "wheel")),
                    reason="python3-venv / pip / setuptools / wheel not installed")
def test_pip_install_without_a_library_stops_with_a_clear_error(tmp_path):
    """Outside a checkout (no ../Makefile) and without LONGATTN_LIB, the
    install fails and says what to do, instead of installing a package that
    cannot load its library."""
    src = tmp_path / "python"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "*.so"))
    venv = tmp_path / "venv"
    subprocess.run([PY, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("LONGATTN_LIB", "LA_BUILD")}
    env.update(PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "--no-build-isolation", "--no-deps",
                        str(src)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0
    assert "liblongattn.so was not found" in r.stdout + r.stderr
    assert "LONGATTN_LIB" in r.stdout + r.stderr
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import longattn"], env=env,
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode != 0  # nothing was installed


def test_license_is_mit_and_shipped_with_the_python_package():
    with open(os.path.join(ROOT, "LICENSE")) as f:
        text = f.read()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the longattn authors" in text
    assert os.path.samefile(os.path.join(ROOT, "python", "LICENSE"), os.path.join(ROOT, "LICENSE"))
    assert os.path.exists(os.path.join(ROOT, "python", "longattn", "py.typed"))
