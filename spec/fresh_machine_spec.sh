#!/usr/bin/env bash
# fresh_machine_spec.sh — scripts/fresh-machine.sh gives its bare root the
# host's Debian sources: the mirror it bootstraps from and the suites apt
# gets are read from the host's sources.list (one-line format) and
# sources.list.d/debian.sources (deb822), bookworm suites only, deb lines
# only, disabled stanzas left out.  Reads test files through
# TGL_FRESH_APT_DIR with --print-sources, which needs no root and touches
# nothing; the check itself (root, debootstrap, a mirror) is run by .ci/run.
# Usage: fresh_machine_spec.sh WORK_DIR   (ctest passes it)
set -euo pipefail
work=$1
script=$(cd "$(dirname "$0")/.." && pwd)/scripts/fresh-machine.sh
fail() { echo "fresh_machine_spec: FAIL: $*" >&2; exit 1; }
rm -rf "$work"
mkdir -p "$work/apt/sources.list.d"
export TGL_FRESH_APT_DIR=$work/apt
unset TGL_FRESH_MIRROR

# Both files, with everything that must be left out.  The hosts are under
# .invalid, reserved for names that exist nowhere.
cat >"$work/apt/sources.list" <<'EOF'
# deb http://commented.invalid/debian bookworm main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://one.invalid/debian bookworm main contrib
deb-src http://one.invalid/debian bookworm main
deb http://one.invalid/debian bullseye main
deb http://one.invalid/debian bookworm-updates main contrib # updates
EOF
cat >"$work/apt/sources.list.d/debian.sources" <<'EOF'
# a comment
Types: deb deb-src
URIs: http://two.invalid/debian-security
Suites: bookworm-security trixie-security
Components: main

Types: deb
URIs: http://disabled.invalid/debian
Suites: bookworm
Components: main
Enabled: no

Types: deb-src
URIs: http://src.invalid/debian
Suites: bookworm
Components: main
EOF
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
expected="mirror: http://one.invalid/debian
# Written by tgl's scripts/fresh-machine.sh from the host's apt sources.

Types: deb
URIs: http://one.invalid/debian
Suites: bookworm
Components: main contrib
Signed-By: $keyring

Types: deb
URIs: http://one.invalid/debian
Suites: bookworm-updates
Components: main contrib
Signed-By: $keyring

Types: deb
URIs: http://two.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: $keyring"
got=$("$script" --print-sources) || fail "--print-sources exited $?"
[ "$got" = "$expected" ] || fail "sources from both files:
--- expected
$expected
--- got
$got"

# deb822 alone: the mirror is the stanza with the bookworm suite itself.
rm "$work/apt/sources.list"
cat >"$work/apt/sources.list.d/debian.sources" <<'EOF'
Types: deb
URIs: http://three.invalid/debian
Suites: bookworm bookworm-updates
Components: main
EOF
got=$("$script" --print-sources | sed -n '1p;/^Suites:/p' | tr '\n' ' ')
[ "$got" = "mirror: http://three.invalid/debian Suites: bookworm Suites: bookworm-updates " ] ||
  fail "deb822 alone gave: $got"

# No bookworm suite: a clear error that says how to name a mirror.
printf 'deb http://one.invalid/debian bullseye main\n' >"$work/apt/sources.list"
rm "$work/apt/sources.list.d/debian.sources"
rc=0
err=$("$script" --print-sources 2>&1 >/dev/null) || rc=$?
[ "$rc" = 2 ] || fail "no bookworm suite: exit status $rc, expected 2"
case $err in
  *"name no 'bookworm' suite; set TGL_FRESH_MIRROR"*) ;;
  *) fail "no bookworm suite: the message was: $err" ;;
esac
# ... and TGL_FRESH_MIRROR is then the root's only source.
got=$(TGL_FRESH_MIRROR=http://four.invalid/debian "$script" --print-sources | sed -n '1p;/^URIs:/p;/^Suites:/p' | tr '\n' ' ')
[ "$got" = "mirror: http://four.invalid/debian URIs: http://four.invalid/debian Suites: bookworm " ] ||
  fail "TGL_FRESH_MIRROR gave: $got"

# An unknown option is refused with the usage.
rc=0
err=$("$script" --epochs 1 2>&1) || rc=$?
if [ "$rc" != 2 ] || [[ $err != *"unknown option '--epochs'"* ]]; then
  fail "unknown option: status $rc, message: $err"
fi
echo "fresh_machine_spec: 5 passed, 0 failed"
