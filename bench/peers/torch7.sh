#!/usr/bin/env bash
# bench/peers/torch7.sh — Torch7 detection for bench/run.
#   torch7.sh --version   print Torch7's interpreter and exit 0, or exit 1
#   torch7.sh --why       say why Torch7 is missing
#   torch7.sh --run ARGS  run bench/peers/mlp_torch7.lua under Torch7
# Torch7 counts as installed when `th` is on PATH, or a `luajit` can
# require both 'torch' and 'nn'.  Debian 12 packages neither (lua-torch-*
# left Debian after buster), so there it is reported missing.
here=$(cd "$(dirname "$0")" && pwd)
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
  *) echo "usage: $0 --version | --why | --run ARGS" >&2; exit 2 ;;
esac
