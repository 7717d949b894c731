#!/usr/bin/env bash
# bench/lib/compare_base.sh — "did an engine change make anything slower?"
# in one command: `bench/run mlp`, `rnn` and `scan` with --baseline-tgl on
# a small grid (tgl alone against the baseline, one thread), the three
# "tgl against tgl@base" tables printed one after the other, and a last
# line that counts the verdicts (issue 20: no cell slower beyond its
# spread).  About 10 minutes on 2 cores.
#
#   bench/lib/compare_base.sh --baseline-tgl PATH [--out DIR] [--repeats 5]
#                             [--min-time 0.5] [--threads 1]
#   bench/lib/compare_base.sh --report-only [--out DIR]   # the tables of a past run again
#
# TGL (default build/tgl of this checkout) is the tgl under test; PATH
# another tgl build, typically of the commit before the change:
#   git worktree add --detach ../base <commit>; (cd ../base && scripts/build.sh build)
#   bench/lib/compare_base.sh --baseline-tgl ../base/build/tgl --out /tmp/ab
# The grid: mlp: models mlp1 and mlp3 at batch 1 and 60, the check pass
# cut after 2 s (--budget 2: a whole pass of mlp3 at batch 1 is minutes on
# a busy machine; the loss check then compares no passes of different
# lengths); rnn: hidden 50 and 500 at input/output 54 (its --budget 20);
# scan: overhead, rnn, memory; every variant of each.  Each bench/run writes its files under DIR/mlp, DIR/rnn, DIR/scan
# (default DIR: bench/results/compare_base); the tables are DIR/*/*.md.
# The verdict rule is bench/lib/base_compare.lua's: min–max ranges of the
# repeats that overlap are "within spread".  On a busy machine seconds
# between the two processes are enough for the load to change, and an
# A/A run (the same code twice) can read "slower" or "faster": two A/A runs
# at load 9-14 on 2 cores read so in 7 and 9 of mlp's 16 rows, different
# rows each time.  The last lines say when the load seen exceeded the
# cores; rerun on a quiet machine before believing a verdict then.  Exit
# status: 0 when every row is within spread or
# better, 1 when a row is worse or lacks a figure (a failed process), 2 on
# a usage error.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)         # bench/
usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }
BASE=; out=$here/results/compare_base; repeats=5; min_time=0.5; threads=1; report_only=0
while [ $# -gt 0 ]; do
  if [ "$1" = --report-only ]; then report_only=1; shift; continue; fi
  [ $# -ge 2 ] || usage
  case "$1" in
    --baseline-tgl) BASE=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -n "$BASE" ] || [ $report_only = 1 ] || usage
mkdir -p "$out"
common=(--systems tgl --threads "$threads" --repeats "$repeats" --min-time "$min_time" --baseline-tgl "$BASE")
start=$SECONDS
status=0
run() {   # name args...: one bench/run, its output to DIR/<name>.out; a failure is remembered
  local n=$1 rc=0 t0=$SECONDS
  shift
  echo "== bench/run $n $* --out $out/$n"
  "$here/run" "$n" "$@" --out "$out/$n" > "$out/$n.out" 2>&1 || rc=$?
  grep -E '^  |^bench/run|warning' "$out/$n.out" | grep -v '^  *|' || true
  echo "   ($((SECONDS - t0)) s$([ $rc -ne 0 ] && echo ", exit $rc: see $out/$n.out"))"
  [ $rc -eq 0 ] || status=1
}
if [ $report_only = 0 ]; then
  run mlp "${common[@]}" --models mlp1,mlp3 --batches 1,60 --budget 2
  run rnn "${common[@]}" --hidden 50,500 --vocab 54
  run scan "${common[@]}"
fi

# The three comparison tables, then the count over all of them.
within=0; worse=0; better=0; missing=0; load_max=0; secs=0
for n in mlp rnn scan; do
  if [ -f "$out/$n/${n}_meta.csv" ]; then        # the highest load seen, the run's length
    l=$(sed -n 's/^load_max,//p' "$out/$n/${n}_meta.csv")
    load_max=$(awk -v a="$load_max" -v b="${l:-0}" 'BEGIN { print (b > a) ? b : a }')
    secs=$((secs + $(sed -n 's/^run_seconds,//p' "$out/$n/${n}_meta.csv" | grep . || echo 0)))
  fi
  md=$out/$n/$n.md
  echo
  echo "######## $n ($md)"
  if [ ! -f "$md" ]; then echo "no table: bench/run $n failed (see $out/$n.out)"; status=1; continue; fi
  grep -m1 '^- Load average' "$md" || true
  awk '/^## tgl against tgl@base/ { on = 1 } on && /^## / && !/tgl against tgl@base/ { exit } on' "$md"
  line=$(grep '^\*\*tgl against tgl@base:' "$md" || true)
  if [ -z "$line" ]; then echo "no tgl against tgl@base table in $md"; status=1; continue; fi
  set -- $(echo "$line" | sed 's/[^0-9 ]//g')     # rows within worse better missing
  within=$((within + $2)); worse=$((worse + $3)); better=$((better + $4)); missing=$((missing + $5))
done
[ $worse -eq 0 ] && [ $missing -eq 0 ] || status=1
echo
echo "== all three: $within within spread, $worse worse (slower or more memory), $better better, $missing without both figures; the three grids ran $secs s; highest 1-min load seen $load_max on $(nproc) cores"
if awk -v l="$load_max" -v n="$(nproc)" 'BEGIN { exit !(l > n) }'; then
  echo "== warning: the load exceeded the cores: the two processes of a row, seconds apart, met different loads, and a verdict other than 'within spread' may be the load's; rerun on a quiet machine before believing one"
fi
exit $status
