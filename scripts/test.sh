#!/usr/bin/env bash
# The README's second command: installs what tgl and its tests need, builds,
# and runs every test (C unit tests and busted specs, through ctest).
# Usage: scripts/test.sh [--sanitize]   (--sanitize: ASan + UBSan build in build-asan/,
#                                        then every fuzz target briefly: scripts/fuzz.sh --ci)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --test
# Everything the specs use is installed now: a spec whose tool or data is
# missing fails instead of going pending.
export TGL_TEST_STRICT=1
if [ "${1:-}" = "--sanitize" ]; then
  dir=build-asan
  scripts/build.sh "$dir" -DTGL_TESTS=ON -DTGL_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
  # LuaJIT's allocator and libedit keep a few process-lifetime blocks;
  # suppressions name them so that every other leak still fails the run.
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1"
  export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp:print_suppressions=0"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
else
  dir=build
  scripts/build.sh "$dir" -DTGL_TESTS=ON
fi
ctest --test-dir "$dir" --output-on-failure -j"$(nproc)"
if [ "${1:-}" = "--sanitize" ]; then
  # libFuzzer with ASan and UBSan (clang, build-fuzz/): each target for a
  # few seconds from its seed corpus; any crash, leak or timeout fails.
  scripts/fuzz.sh --ci "${TGL_FUZZ_CI_SECONDS:-5}"
fi
