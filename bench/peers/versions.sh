#!/usr/bin/env bash
# Print one line per peer: name, version (and interpreter) or "missing" —
# with the interpreters bench/run uses: Debian's /usr/bin/python3 for numpy
# and torch, bench/.venv (install.sh) for jax and pytensor.
here=$(cd "$(dirname "$0")" && pwd)
deb=/usr/bin/python3
venv=$here/../.venv/bin/python
[ -x "$venv" ] || venv=$deb
for pair in "numpy $deb" "torch $deb" "jax $venv" "pytensor $venv"; do
  set -- $pair
  v=$("$2" -c "import $1; print($1.__version__)" 2>/dev/null) || v=
  if [ -n "$v" ]; then printf '%-9s %s (%s)\n' "$1" "$v" "$2"; else printf '%-9s missing\n' "$1"; fi
done
printf '%-9s %s\n' torch7 "$("$here/torch7.sh" --version 2>/dev/null || "$here/torch7.sh" --why)"
