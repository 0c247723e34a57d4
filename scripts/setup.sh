#!/usr/bin/env bash
# Installs the Debian packages longattn needs, only those missing.
# Idempotent and quiet when everything is present.
#   scripts/setup.sh build   - compiler-side: OpenBLAS, LAPACK, python3-dev (longattn._fastcall)
#   scripts/setup.sh test    - plus python3-numpy, python3-torch, pytest, matplotlib
set -u
want=(libopenblas-dev libopenblas0-pthread liblapack-dev python3-dev)
if [ "${1:-build}" = test ] || [ "${1:-build}" = all ]; then
    want+=(python3-numpy python3-torch python3-pytest python3-matplotlib python3-venv python3-pip python3-setuptools python3-wheel clang libclang-rt-14-dev pkg-config)
fi
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "setup: missing Debian packages: ${missing[*]} (run as root to install)" >&2
    exit 0
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2 || true
apt-get install -y -q --no-install-recommends "${missing[@]}" >&2 || {
    echo "setup: apt-get install failed for: ${missing[*]}" >&2; exit 1; }
