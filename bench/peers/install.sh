#!/usr/bin/env bash
# bench/peers/install.sh — install the peer systems of bench/run mlp.
#
#   - Debian: python3-numpy, python3-torch (PyTorch 1.13, CPU; far smaller
#     than PyPI's CUDA wheels), python3-venv, g++ and python3-dev (PyTensor's
#     C backend compiles modules against Python.h and links OpenBLAS).
#   - PyPI, into bench/.venv (made from Debian's /usr/bin/python3 with
#     --system-site-packages so Debian's torch and numpy stay visible):
#     jax[cpu] and pytensor, with numpy kept below 2 (Debian's torch 1.13 is
#     built against the NumPy 1.x ABI).
#   - Torch7 (th / luajit with nn) is not packaged for Debian 12: it is only
#     detected (bench/peers/torch7.sh), never installed.
#
# Each step may fail on its own (no network, no root): the peers that did
# not install are reported as missing by bench/run, never faked.
#   bench/peers/install.sh [--no-apt] [--no-pip]
set -u
here=$(cd "$(dirname "$0")" && pwd)
bench=$(dirname "$here")
venv="$bench/.venv"
do_apt=1; do_pip=1
for a in "$@"; do
  case "$a" in
    --no-apt) do_apt=0 ;;
    --no-pip) do_pip=0 ;;
    *) echo "usage: $0 [--no-apt] [--no-pip]" >&2; exit 2 ;;
  esac
done
SUDO=; [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null && SUDO=sudo

if [ $do_apt = 1 ]; then
  echo "== apt: python3-numpy python3-torch python3-venv python3-dev g++ libopenblas-dev"
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq || echo "apt-get update failed" >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq \
    --no-install-recommends python3-numpy python3-torch python3-venv python3-dev g++ \
    libopenblas-dev >/dev/null || echo "apt-get install failed: some peers will be missing" >&2
fi

if [ $do_pip = 1 ]; then
  if [ ! -x "$venv/bin/python" ]; then
    echo "== venv: $venv (from /usr/bin/python3, --system-site-packages)"
    /usr/bin/python3 -m venv --system-site-packages "$venv" || { echo "venv failed" >&2; exit 1; }
  fi
  cons="$venv/constraints.txt"
  echo 'numpy<2' > "$cons"
  echo "== pip: jax[cpu] pytensor (numpy<2)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$cons" 'jax[cpu]' \
    || echo "pip install jax[cpu] failed: jax will be missing" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -c "$cons" pytensor \
    || echo "pip install pytensor failed: pytensor will be missing" >&2
fi

echo "== installed peers"
"$here/versions.sh"
