#!/usr/bin/env bash
# Installs every Debian package tgl needs to build, test and run its examples.
# Usage: scripts/install-deps.sh [--test]   (--test adds what the test suite uses)
# Idempotent; safe to run as root on a fresh Debian 12 machine.
set -euo pipefail
pkgs=(build-essential cmake pkg-config luajit libluajit-5.1-dev libopenblas-dev
      lua-busted libedit-dev zlib1g-dev libssl-dev libtcc-dev tcc dataset-fashion-mnist
      fortunes libblis4 libopenmpi-dev openmpi-bin)
# Open MPI (libopenmpi-dev to build tgl.dist, openmpi-bin for mpirun):
# data parallelism between processes (doc/distributed.md); a build without
# it still runs every script as a job of one process.
# libblis4 (BLIS) is optional: tgl builds and runs without it; when it is
# there, tgl dlopens it and runs each product shape on whichever of
# OpenBLAS and BLIS measured faster on the machine (src/cpu/gemm_pick.c).
# The suite adds NumPy (interop fixtures), cmocka (C unit tests), tmux (the
# REPL on a terminal), gzip (IDX files), strace (what the REPL opens), and
# clang with its runtime libraries (libFuzzer, the sanitizers: the fuzz
# targets, scripts/fuzz.sh; clang only recommends libclang-rt-14-dev, which
# --no-install-recommends leaves out, so it is named here).
# Specs that need one fail without it in CI and under scripts/test.sh.
if [ "${1:-}" = "--test" ]; then
  pkgs+=(python3-numpy libcmocka-dev tmux gzip strace clang libclang-rt-14-dev)
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get -o DPkg::Lock::Timeout=600 update -q
  $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -q --no-install-recommends "${missing[@]}"
  # apt-get interrupted by Ctrl-C may still exit 0: what is not installed
  # now is named here, instead of a build failing later on a missing tool.
  still=()
  for p in "${missing[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || still+=("$p")
  done
  if [ "${#still[@]}" -gt 0 ]; then
    echo "install-deps.sh: not installed: ${still[*]} (apt-get was interrupted or failed; run it again)" >&2
    exit 1
  fi
fi
