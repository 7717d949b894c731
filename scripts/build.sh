#!/usr/bin/env bash
# Configures and builds tgl into a build directory.
# Usage: scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DTGL_WERROR=ON "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
