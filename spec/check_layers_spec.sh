#!/usr/bin/env bash
# check_layers_spec.sh — scripts/check-layers.sh passes on this tree and,
# on copies of its src/ with one violation planted each, fails naming the
# file, the line and the rule: an engine include of a feature header, an
# engine call by prefix, an engine use of a symbol known only from a
# backend's header or definition, a backend including the other, src/io
# naming a graph type.  Comments do not count; the allow-list lets a listed
# violation pass and fails on an entry that matches nothing.
# Usage: check_layers_spec.sh WORK_DIR   (ctest passes it)
set -euo pipefail
work=$1
repo=$(cd "$(dirname "$0")/.." && pwd)
check=$repo/scripts/check-layers.sh
fail() { echo "check_layers_spec: FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work"

# A fresh copy of src/ (and an empty scripts/) under $work/$1.
tree() {
    rm -rf "${work:?}/$1"
    mkdir -p "$work/$1/scripts"
    cp -r "$repo/src" "$work/$1/src"
    echo "$work/$1"
}
# Appends line $3 to file $2 of tree $1; prints the line number it got.
plant() {
    printf '%s\n' "$3" >>"$1/$2"
    wc -l <"$1/$2" | tr -d ' '
}
# Runs the check on tree $1; it must fail with output containing $2.
expect_fail() {
    local out rc=0
    out=$("$check" "$1" 2>&1) || rc=$?
    [ "$rc" -eq 1 ] || fail "expected exit 1 on $1, got $rc: $out"
    grep -qF -- "$2" <<<"$out" || fail "expected \"$2\" in: $out"
}

# This tree passes, with the one-line summary.
out=$("$check") || fail "the tree itself does not pass: $out"
[ "$(wc -l <<<"$out")" -eq 1 ] || fail "a pass should print one line: $out"
grep -q '^check-layers: OK' <<<"$out" || fail "no summary: $out"

# The engine includes a feature's header.
t=$(tree include)
n=$(plant "$t" src/engine/cvm.c '#include "scan/scan.h"')
expect_fail "$t" "src/engine/cvm.c:$n: layer rule \"engine\": includes src/scan (scan/scan.h)"

# The engine calls a feature function by its prefix.
t=$(tree prefix)
n=$(plant "$t" src/engine/compile.c 'static void f(void) { tgl_rop_anything(); }')
expect_fail "$t" "src/engine/compile.c:$n: layer rule \"engine\": names tgl_rop_anything of src/rop"

# The engine names a symbol that only src/cpu's header declares (no
# tgl_cpu_ prefix: derived from blas_thin.h), and one only its .c defines.
t=$(tree derived)
n=$(plant "$t" src/engine/backend.c 'static void g(void) { tgl_thin_sger(0, 0, 0, 0, 0, 0, 0, 0, 0); }')
expect_fail "$t" "src/engine/backend.c:$n: layer rule \"engine\": names tgl_thin_sger of src/cpu"
n=$(plant "$t" src/engine/backend.h 'extern const tgl_backend tgl_backend_cpu;')
expect_fail "$t" "src/engine/backend.h:$n: layer rule \"engine\": names tgl_backend_cpu of src/cpu"

# Comments and strings may name anything.
t=$(tree comment)
plant "$t" src/engine/cvm.c '/* tgl_scan_exec used to be called here (#include "scan/scan.h") */' >/dev/null
plant "$t" src/engine/cvm.c 'static const char *h = "tgl_cgen_wait_all"; // tgl_cuda_built' >/dev/null
"$check" "$t" >/dev/null || fail "a comment or a string counted as a use"

# A backend includes the other.
t=$(tree backend)
mkdir -p "$t/src/cuda"
n=$(plant "$t" src/cuda/device.c '#include "cpu/blas_thin.h"')
expect_fail "$t" "src/cuda/device.c:$n: layer rule \"backend\": includes src/cpu (cpu/blas_thin.h)"

# src/io names a graph type, and includes a graph header.
t=$(tree io)
n=$(plant "$t" src/io/npy.c 'static tgl_node *k;')
expect_fail "$t" "src/io/npy.c:$n: layer rule \"io\": names tgl_node (a graph type)"
n=$(plant "$t" src/io/idx.c '#include "engine/graph.h"')
expect_fail "$t" "src/io/idx.c:$n: layer rule \"io\": includes engine/graph.h, a graph header"

# The allow-list: a listed violation passes (counted in the summary); an
# entry matching nothing fails with its own line.
t=$(tree allow)
plant "$t" src/engine/cvm.c 'static void f(void) { tgl_cgen_wait_all(); }' >/dev/null
printf '# known\nsrc/engine/cvm.c:tgl_cgen_wait_all   # item 4 removes it\n' >"$t/scripts/layers-allow.txt"
out=$("$check" "$t") || fail "an allowed violation failed: $out"
grep -qF "(1 known, in scripts/layers-allow.txt)" <<<"$out" || fail "allowed not counted: $out"
printf 'src/engine/call.c:tgl_scan_exec   # item 3 removed it\n' >>"$t/scripts/layers-allow.txt"
expect_fail "$t" "scripts/layers-allow.txt:3: stale entry \"src/engine/call.c:tgl_scan_exec\""

echo "check_layers_spec: OK"
