"""The A/B scripts of issue 13 without a GPU: scripts/ab_prepare.sh unpacks a
commit and refuses a folder it did not make; tests/cuda/gpu_ab.sh, run on a
mock tree (stub Makefiles whose "headline" binaries print fixed timings),
builds, interleaves the runs, prints the table, flags a row above the
threshold and fails on a missing row or a failed base build."""
import os
import shutil
import stat
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _in_git():
    return subprocess.run(["git", "rev-parse", "--verify", "HEAD"], cwd=ROOT,
                          capture_output=True).returncode == 0


@pytest.mark.skipif(not _in_git(), reason="not a git checkout")
def test_ab_prepare_unpacks_and_refuses_foreign_dir(tmp_path):
    dest = tmp_path / "base"
    r = subprocess.run(["bash", "scripts/ab_prepare.sh", "HEAD", str(dest)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    assert (dest / ".ab_rev").read_text().strip() == head
    assert (dest / "Makefile").is_file() and (dest / "include" / "longattn.h").is_file()
    # again over its own folder: allowed, same result
    (dest / "stale").write_text("x")
    r = subprocess.run(["bash", "scripts/ab_prepare.sh", "HEAD", str(dest)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 0 and not (dest / "stale").exists()
    # a non-empty folder it did not make is left alone
    other = tmp_path / "other"
    other.mkdir()
    (other / "keep").write_text("data")
    r = subprocess.run(["bash", "scripts/ab_prepare.sh", "HEAD", str(other)], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 1 and "not touched" in r.stderr
    assert (other / "keep").read_text() == "data"
    r = subprocess.run(["bash", "scripts/ab_prepare.sh", "no-such-rev-xyz", str(tmp_path / "n")],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 1 and "no commit" in r.stderr


STUB = """#!/bin/bash
# stub of bench/headline: fixed timings per tag (SLOW_ROW runs 5% slower on HEAD)
tag=lib; while [ $# -gt 0 ]; do [ "$1" = --tag ] && tag=$2; shift; done
echo "# headline tag=$tag lib=stub min_time=0"
echo "$tag" >> "$(dirname "$0")/order.txt"
for r in linear_32k topk_64k; do
  ms=1.0; [ $tag = head ] && [ $r = "${SLOW_ROW:-none}" ] && ms=1.05
  [ $tag = head ] && [ $r = "${MISSING_ROW:-none}" ] && continue
  echo "headline tag=$tag row=$r ms=$ms reps=10 min=$ms status=ok shape=x"
done
"""


def _mock(tmp_path, base_builds=True):
    head, base = tmp_path / "head", tmp_path / "base"
    (head / "tests" / "cuda").mkdir(parents=True)
    base.mkdir()
    for f in ("gpu_ab.sh", "gpu_common.sh"):
        shutil.copy(os.path.join(ROOT, "tests", "cuda", f), head / "tests" / "cuda" / f)
    stub = tmp_path / "stub.sh"
    stub.write_text(STUB)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    (head / "Makefile").write_text(
        "BUILD ?= build\n"
        "$(BUILD)/liblongattn.a: ; mkdir -p $(BUILD) && touch $@\n"
        f"$(BUILD)/bench/headline: ; mkdir -p $(BUILD)/bench && cp {stub} $@\n"
        f"$(BUILD)/bench/headline_base: $(HEADLINE_BASE)/$(HEADLINE_BASE_BUILD)/liblongattn.a ; cp {stub} $@\n")
    (base / "Makefile").write_text(
        "BUILD ?= build\n$(BUILD)/liblongattn.a: ; "
        + ("mkdir -p $(BUILD) && touch $@\n" if base_builds else "false\n"))
    (base / ".ab_rev").write_text("0" * 40 + "\n")
    return head


def _run(head, tmp_path, **env):
    e = dict(os.environ, OUT=str(tmp_path / "out"), LA_AB_BASE="../base", **env)
    return subprocess.run(["bash", "tests/cuda/gpu_ab.sh"], cwd=head, env=e, capture_output=True,
                          text=True, timeout=120)


def _table(out):
    return {l.split()[0]: l.split() for l in out.splitlines()
            if l.startswith(("linear_32k", "topk_64k"))}


def test_gpu_ab_even_rows_pass(tmp_path):
    head = _mock(tmp_path)
    r = _run(head, tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    t = _table(r.stdout)
    assert t["linear_32k"][1:4] == ["1.0000", "1.0000", "1.000"]
    assert all(row[-1] != "FLAG" for row in t.values()) and "0 flagged or failed" in r.stdout
    order = (head / "build-gpu" / "bench" / "order.txt").read_text().split()
    assert order == ["base", "head"] * 3
    assert (tmp_path / "out" / "ab_table.txt").is_file()


def test_gpu_ab_flags_slow_row_and_abba(tmp_path):
    head = _mock(tmp_path)
    r = _run(head, tmp_path, SLOW_ROW="topk_64k", LA_AB_ORDER="abba", LA_AB_ROUNDS="4")
    assert r.returncode == 1
    t = _table(r.stdout)
    assert t["topk_64k"][3] == "1.050" and t["topk_64k"][-1] == "FLAG"
    assert t["linear_32k"][-1] != "FLAG"
    order = (head / "build-gpu" / "bench" / "order.txt").read_text().split()
    assert order == ["base", "head", "head", "base"] * 2
    # below the threshold given: no flag
    r = _run(_mock(tmp_path / "t2"), tmp_path / "t2", SLOW_ROW="topk_64k", LA_AB_TOL="1.06")
    assert r.returncode == 0 and all(row[-1] != "FLAG" for row in _table(r.stdout).values())


def test_gpu_ab_missing_row_and_failed_build(tmp_path):
    r = _run(_mock(tmp_path), tmp_path, MISSING_ROW="topk_64k")
    assert r.returncode == 1 and "ERROR" in _table(r.stdout)["topk_64k"]
    r = _run(_mock(tmp_path / "b", base_builds=False), tmp_path / "b")
    assert r.returncode == 1 and "base library BUILD FAILED" in r.stdout
    r = _run(_mock(tmp_path / "c"), tmp_path / "c", LA_AB_ROUNDS="2")
    assert r.returncode == 1 and "fewer than 3" in r.stdout
