#!/bin/bash
# Unpack commit REV of this repository into DIR (git archive: tracked files
# only, no .git), for the A/B of tests/cuda/gpu_ab.sh: the base tree is built
# beside the current one on the GPU machine. DIR should be an ignored folder
# of the tree that is carried to the device, e.g.
#   bash scripts/ab_prepare.sh 8918189 /work/main/.wt/base
# DIR is emptied first, but only if it is empty or was made by this script
# (it holds .ab_rev, the full commit id, read by gpu_ab.sh's header).
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 REV DIR" >&2; exit 2; }
rev=$1 dir=$2
full=$(git rev-parse --verify --quiet "$rev^{commit}") || { echo "ab_prepare: no commit '$rev'" >&2; exit 1; }
if [ -e "$dir" ]; then
  if [ -n "$(ls -A "$dir")" ] && [ ! -f "$dir/.ab_rev" ]; then
    echo "ab_prepare: $dir exists, is not empty and was not made by ab_prepare.sh: not touched" >&2
    exit 1
  fi
  rm -rf "$dir"
fi
mkdir -p "$dir"
git archive "$full" | tar -x -C "$dir"
echo "$full" > "$dir/.ab_rev"
echo "ab_prepare: $(git log -1 --format='%h %s' "$full") -> $dir ($(du -sh "$dir" | cut -f1))"
