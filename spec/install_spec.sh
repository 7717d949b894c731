#!/usr/bin/env bash
# install_spec.sh — `cmake --install` gives C users what they need to build
# against tgl: installs the build tree into a temporary prefix, then builds
# one small C program against it twice, with pkg-config (tgl.pc) and with a
# CMake project (find_package(tgl CONFIG REQUIRED), target tgl::tgl), runs
# both and checks what they print.
# Usage: install_spec.sh BUILD_DIR WORK_DIR   (ctest passes both; TGL_CMAKE
# and TGL_CC name cmake and the C compiler, else those on PATH)
set -euo pipefail
build=$1
work=$2
cmake=${TGL_CMAKE:-cmake}
cc=${TGL_CC:-cc}
fail() { echo "install_spec: FAIL: $*" >&2; exit 1; }
command -v pkg-config >/dev/null || fail "pkg-config is not installed (scripts/install-deps.sh)"

rm -rf "$work"
mkdir -p "$work/src"
prefix=$work/prefix
"$cmake" --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log" >&2; fail "cmake --install failed"; }

pc=$(find "$prefix" -name tgl.pc -path '*/pkgconfig/*' | head -n1)
[ -n "$pc" ] || fail "no pkgconfig/tgl.pc under the prefix"
cfg=$(find "$prefix" -name tglConfig.cmake -path '*/cmake/tgl/*' | head -n1)
[ -n "$cfg" ] || fail "no cmake/tgl/tglConfig.cmake under the prefix"
[ -f "$(dirname "$cfg")/tglConfigVersion.cmake" ] || fail "no tglConfigVersion.cmake next to tglConfig.cmake"
libdir=$(dirname "$(dirname "$pc")")

cat >"$work/src/main.c" <<'C'
#include <tgl.h>
#include <stdio.h>

int main(void)
{
    tgl_ctx *ctx = tgl_ctx_new();
    tgl_array *a = NULL;
    int64_t idx[1] = {2};
    double v = 0;
    if (!ctx || tgl_array_arange(ctx, TGL_FLOAT64, 1, 5, 1, &a) != TGL_OK ||
        tgl_array_get(ctx, a, idx, &v) != TGL_OK) {
        fprintf(stderr, "%s\n", ctx ? tgl_ctx_error(ctx) : "no context");
        return 1;
    }
    printf("tgl %s: a[2] = %g of %lld\n", tgl_version(), v, (long long)a->size);
    tgl_array_release(a);
    tgl_ctx_free(ctx);
    return 0;
}
C
want="tgl $(sed -n 's/^Version: //p' "$pc"): a[2] = 3 of 5"

# A sanitizer build's libtgl needs the ASan runtime loaded first in a
# program that is not itself instrumented (scripts/test.sh --sanitize).
asan=$(ldd "$(find "$prefix" -name 'libtgl.so*' | head -n1)" 2>/dev/null | awk '/libasan/ {print $3}')
if [ -n "$asan" ]; then
  export LD_PRELOAD="$asan"
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
fi

# 1. pkg-config, from a plain compiler command line.
flags=$(PKG_CONFIG_PATH="$(dirname "$pc")" pkg-config --cflags --libs tgl) ||
  fail "pkg-config --cflags --libs tgl failed"
case "$flags" in *"$prefix"*) ;; *) fail "pkg-config flags do not name the prefix: $flags" ;; esac
# shellcheck disable=SC2086
"$cc" -o "$work/app_pc" "$work/src/main.c" $flags || fail "compiling with pkg-config's flags ($flags) failed"
got=$(LD_LIBRARY_PATH="$libdir" "$work/app_pc") || fail "app_pc failed: $got"
[ "$got" = "$want" ] || fail "app_pc printed '$got', want '$want'"
echo "ok: pkg-config ($flags): $got"

# 2. find_package(tgl) and the imported target tgl::tgl.
cat >"$work/src/CMakeLists.txt" <<'CM'
cmake_minimum_required(VERSION 3.20)
project(tgl_install_spec LANGUAGES C)
find_package(tgl 0.1 CONFIG REQUIRED)
if(NOT TARGET tgl::tgl)
  message(FATAL_ERROR "find_package(tgl) did not define tgl::tgl")
endif()
add_executable(app_cmake main.c)
target_link_libraries(app_cmake PRIVATE tgl::tgl)
CM
"$cmake" -S "$work/src" -B "$work/cmake-build" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Release >"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; fail "configuring a project with find_package(tgl) failed"; }
"$cmake" --build "$work/cmake-build" >>"$work/cmake.log" 2>&1 ||
  { cat "$work/cmake.log" >&2; fail "building against tgl::tgl failed"; }
# CMake's build-tree rpath names the installed libtgl: no LD_LIBRARY_PATH.
got=$("$work/cmake-build/app_cmake") || fail "app_cmake failed: $got"
[ "$got" = "$want" ] || fail "app_cmake printed '$got', want '$want'"
echo "ok: find_package(tgl): $got"
