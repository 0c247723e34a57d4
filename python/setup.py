"""Install the longattn Python package with liblongattn.so bundled into it.

At install time the library is taken from, in order:
  $LONGATTN_LIB, <repo>/$LA_BUILD/liblongattn.so, <repo>/build/liblongattn.so.
When none exists and the package sits in a checkout (../Makefile), it is
built by running `make` there (`make -j<cores> <build>/liblongattn.so`; set
CUDA=0 in the environment to skip the CUDA backend). When that fails, or the
package is not in a checkout, the install stops with an error saying what to
do: a package without its library is never installed silently.
The installed package loads its bundled copy (longattn/liblongattn.so);
LONGATTN_LIB still overrides it at run time. The compiled call path
(longattn._fastcall, python/longattn/_fastcall.c) is bundled beside it when
it is built for the installing interpreter: found next to the library, or
built with `make pyext PYTHON=<this interpreter>` in a checkout. It is
optional: without it (no Python.h, a failed compile) the package calls
through ctypes, and the install says so.
An editable install (`pip install -e ./python`) copies nothing: it uses the
checkout's build tree directly (built the same way if missing).
"""
import os
import shutil
import subprocess
import sys
import sysconfig

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIBNAME = "liblongattn.so"


def _build_dir():
    return os.environ.get("LA_BUILD") or "build"


def find_built_library():
    cands = []
    if os.environ.get("LONGATTN_LIB"):
        cands.append(os.environ["LONGATTN_LIB"])
    if os.environ.get("LA_BUILD"):
        cands.append(os.path.join(REPO, os.environ["LA_BUILD"], LIBNAME))
    cands.append(os.path.join(REPO, "build", LIBNAME))
    for c in cands:
        if os.path.isfile(c):
            return c
    return None


def build_library():
    """Run `make` in the checkout; return the built library's path or stop."""
    if os.environ.get("LONGATTN_LIB"):
        raise SystemExit("longattn: LONGATTN_LIB=%s does not exist; point it at a built "
                         "liblongattn.so or unset it to build one" % os.environ["LONGATTN_LIB"])
    makefile = os.path.join(REPO, "Makefile")
    if not os.path.isfile(makefile):
        raise SystemExit(
            "longattn: liblongattn.so was not found and %s is not a longattn checkout (no "
            "Makefile), so it cannot be built here. Install from the repository "
            "(`make && pip install ./python` at its root) or set LONGATTN_LIB=/path/to/"
            "liblongattn.so." % REPO)
    target = os.path.join(_build_dir(), LIBNAME)
    cmd = ["make", "-C", REPO, "-j%d" % (os.cpu_count() or 1), "SKIP_DEPS=1",
           "BUILD=" + _build_dir(), target]
    print("longattn: liblongattn.so not built yet; running: " + " ".join(cmd), flush=True)
    try:
        r = subprocess.run(cmd)
    except OSError as e:
        raise SystemExit("longattn: could not run make (%s). Install make and a C compiler "
                         "(Debian: apt-get install build-essential libopenblas-dev), or build "
                         "the library yourself and set LONGATTN_LIB." % e) from None
    path = os.path.join(REPO, target)
    if r.returncode != 0 or not os.path.isfile(path):
        raise SystemExit(
            "longattn: building liblongattn.so failed (`%s` exited with status %d). See the "
            "compiler output above; `make` at the repository root installs missing Debian "
            "packages (needs root), or set LONGATTN_LIB to a built library."
            % (" ".join(cmd), r.returncode))
    return path


def find_or_build_fastcall(lib):
    """longattn._fastcall for this interpreter beside lib, built there with
    `make pyext` when lib lies in the checkout's build tree; None when it
    cannot be had (the package then calls through ctypes)."""
    name = "_fastcall" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so")
    path = os.path.join(os.path.dirname(os.path.abspath(lib)), name)
    build = os.path.join(REPO, _build_dir())
    if (not os.path.isfile(path) and os.path.isfile(os.path.join(REPO, "Makefile"))
            and os.path.dirname(os.path.abspath(lib)) == os.path.abspath(build)):
        cmd = ["make", "-C", REPO, "SKIP_DEPS=1", "BUILD=" + _build_dir(),
               "PYTHON=" + sys.executable, "pyext"]
        try:
            subprocess.run(cmd, check=False)
        except OSError:
            pass
    return path if os.path.isfile(path) else None


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        lib = find_built_library() or build_library()
        if getattr(self, "editable_mode", False):
            return
        dst = os.path.join(self.build_lib, "longattn", LIBNAME)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(lib, dst)
        print("longattn: bundled %s" % lib)
        ext = find_or_build_fastcall(lib)
        if ext:
            shutil.copy2(ext, os.path.join(self.build_lib, "longattn", os.path.basename(ext)))
            print("longattn: bundled %s (the compiled call path)" % ext)
        else:
            print("longattn: longattn._fastcall not built for %s; the package calls through "
                  "ctypes (Debian: apt-get install python3-dev, then reinstall)" % sys.executable)


class BinaryDistribution(Distribution):
    """A wheel with a bundled .so is platform specific."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
