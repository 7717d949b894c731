#!/usr/bin/env bash
# bench/peers/torch7.sh — Torch7 detection for bench/run.
#   torch7.sh --version   print Torch7's interpreter and exit 0, or exit 1
#   torch7.sh --why       say why Torch7 is missing
#   torch7.sh --run ARGS  run bench/peers/mlp_torch7.lua under Torch7
#   torch7.sh --lua FILE ARGS   run any Lua script under Torch7
#   torch7.sh --refs [DIR]      regenerate the reference numbers
#                               (bench/peers/torch7_refs.lua -> DIR, default
#                               spec/fixtures/torch7)
# Torch7 counts as installed when `th` is on PATH, or a `luajit` can
# require both 'torch' and 'nn'.  Debian 12 packages neither (lua-torch-*
# left Debian after buster), so there it is reported missing.
# TORCH7_PREFIX names a Torch7 built by hand (doc/torch7_reference.md):
# its Lua and C module directories are put on LUA_PATH/LUA_CPATH, and its
# bin/th, when there is one, comes first.
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${TORCH7_PREFIX:-}" ]; then
  p=$TORCH7_PREFIX
  export LUA_PATH="$p/share/lua/5.1/?.lua;$p/share/lua/5.1/?/init.lua;$p/lua/?.lua;$p/lua/?/init.lua;${LUA_PATH:-;}"
  export LUA_CPATH="$p/lib/lua/5.1/?.so;$p/lib/?.so;${LUA_CPATH:-;}"
  export PATH="$p/bin:$PATH"
  # provenance for the fixtures' headers, and the rnn sources (SeqLSTM/SeqGRU)
  [ -r "$p/COMMITS" ] && export TORCH7_COMMITS="${TORCH7_COMMITS:-$(cat "$p/COMMITS")}"
  [ -d "$p/src/rnn" ] && export TORCH7_RNN_SRC="${TORCH7_RNN_SRC:-$p/src/rnn}"
fi
find_th() {
  if command -v th >/dev/null 2>&1 && th -e "require 'nn'" >/dev/null 2>&1; then
    echo th; return 0
  fi
  if command -v luajit >/dev/null 2>&1 && luajit -e "require 'torch'; require 'nn'" >/dev/null 2>&1; then
    echo luajit; return 0
  fi
  return 1
}
case "${1:-}" in
  --version)
    th=$(find_th) || exit 1
    echo "$th ($(command -v "$th"))" ;;
  --why)
    if find_th >/dev/null; then echo "installed"; exit 0; fi
    msg="no Torch7: no 'th' on PATH and luajit cannot require 'torch' and 'nn'"
    [ -r /etc/debian_version ] && msg="$msg (Debian $(cat /etc/debian_version) packages no Torch7)"
    echo "$msg" ;;
  --run)
    shift
    th=$(find_th) || { echo "#missing,torch7,nn,$("$0" --why)"; exit 0; }
    exec "$th" "$here/mlp_torch7.lua" "$@" ;;
  --lua)
    shift
    th=$(find_th) || { echo "torch7.sh: $("$0" --why)" >&2; exit 1; }
    exec "$th" "$@" ;;
  --refs)
    shift
    th=$(find_th) || { echo "torch7.sh: $("$0" --why)" >&2; exit 1; }
    exec "$th" "$here/torch7_refs.lua" "${1:-$here/../../spec/fixtures/torch7}" ;;
  *) echo "usage: $0 --version | --why | --run ARGS | --lua FILE ARGS | --refs [DIR]" >&2; exit 2 ;;
esac
