#!/usr/bin/env bash
# The README's first command: installs what tgl needs (Debian packages),
# builds it, and runs the main example.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh build
exec build/tgl examples/mlp_fashion.lua "$@"
