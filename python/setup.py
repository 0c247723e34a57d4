"""Install the longattn Python package and bundle liblongattn.so into it.

Build the C library first (`make` at the repository root). At install time
the library is copied into the package from, in order:
  $LONGATTN_LIB, <repo>/$LA_BUILD/liblongattn.so, <repo>/build/liblongattn.so.
The installed package then loads its bundled copy (longattn/liblongattn.so);
LONGATTN_LIB still overrides it at run time. Without a built library the
package installs anyway (with a warning) and looks for the library at run
time (LONGATTN_LIB, or the system, e.g. after `make install`).
An editable install (`pip install -e ./python`) copies nothing: it uses the
checkout's build tree directly.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
LIBNAME = "liblongattn.so"


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


LIB = find_built_library()


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if LIB is None:
            print("longattn: WARNING: liblongattn.so not found (run `make` at the repository "
                  "root first); installing without it: set LONGATTN_LIB at run time")
            return
        dst = os.path.join(self.build_lib, "longattn", LIBNAME)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(LIB, dst)
        print("longattn: bundled %s" % LIB)


class BinaryDistribution(Distribution):
    """A wheel with a bundled .so is platform specific."""

    def has_ext_modules(self):
        return LIB is not None


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution)
