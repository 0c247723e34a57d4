#!/usr/bin/env python3
"""Print the wheels of a folder that this interpreter can install, one path a line.

Used by tests/cuda/gpu_tl1.sh / gpu_tl2.sh (the official TileLang peer, no network on the
GPU machine): the wheel folders hold one file per CPython version for version-specific
dependencies (cp310..cp313) and one abi3 / py3-none file otherwise. Per distribution the
best match is kept: an exact cpXY tag, else the newest abi3 wheel with cpXY <= ours, else
py3-none. Wheels of `--skip-present` distributions are left out when their module
already imports (e.g. psutil, tqdm, typing_extensions: the image's copies are kept rather
than shadowed through PYTHONPATH).
  python3 tests/cuda/tl_pick_wheels.py .whl/part1 [--skip-present psutil,tqdm]
LA_PYTAG=cp311 simulates another interpreter (for testing on a machine without it).
"""
import argparse
import importlib.util
import os
import sys

# distribution (wheel file name, normalised) -> module name, for --skip-present
MODULES = {"typing_extensions": "typing_extensions", "tqdm": "tqdm", "psutil": "psutil",
           "cloudpickle": "cloudpickle", "ml_dtypes": "ml_dtypes", "packaging": "packaging"}


def score(pytag, abitag, ours):
    """Higher is better; None: not installable here."""
    best = None
    for py in pytag.split("."):
        s = None
        if py == ours and abitag != "abi3":
            s = 3
        elif abitag == "abi3" and py.startswith("cp") and py[2:].isdigit() and ours[2:].isdigit():
            v = int(py[2:])
            # cp39 vs cp310: compare as (major, minor)
            if (int(str(v)[0]), int(str(v)[1:])) <= (int(ours[2]), int(ours[3:])):
                s = 2 + v / 1000.0
        elif py in ("py3", "py2.py3") and abitag == "none":
            s = 1
        if s is not None and (best is None or s > best):
            best = s
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--skip-present", default="")
    a = ap.parse_args()
    ours = os.environ.get("LA_PYTAG") or f"cp{sys.version_info[0]}{sys.version_info[1]}"
    skip = {x for x in a.skip_present.split(",") if x}
    pick = {}
    for fn in sorted(os.listdir(a.folder)):
        if not fn.endswith(".whl"):
            continue
        parts = fn[:-4].split("-")
        if len(parts) < 5:
            continue
        dist, pytag, abitag = parts[0].lower().replace("-", "_"), parts[-3], parts[-2]
        s = score(pytag, abitag, ours)
        if s is None:
            continue
        if dist in pick and pick[dist][0] >= s:
            continue
        pick[dist] = (s, fn)
    for dist, (s, fn) in sorted(pick.items()):
        if dist in skip and not os.environ.get("LA_PYTAG"):
            mod = MODULES.get(dist, dist)
            if importlib.util.find_spec(mod) is not None:
                print(f"# {fn}: {mod} already importable, kept", file=sys.stderr)
                continue
        print(os.path.join(a.folder, fn))
    if not pick:
        print(f"# no wheel in {a.folder} fits {ours}", file=sys.stderr)


if __name__ == "__main__":
    main()
