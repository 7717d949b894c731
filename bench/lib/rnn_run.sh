#!/usr/bin/env bash
# bench/lib/rnn_run.sh — `bench/run rnn`: the Elman RNN grid of the 2012
# Theano paper, bench/rnn.lua (tgl) and its peers (bench/peers/rnn_jax.py,
# rnn_torch.py, rnn_pytensor.py), alternating; writes
# <out>/rnn.{csv,md,svg,log}, rnn_meta.csv and rnn_profile.csv.
#
#   bench/run rnn [--threads "1 2"] [--hidden 50,100,500,1500] [--vocab 10,54,3000]
#                 [--systems "tgl jax torch pytensor"] [--repeats 5] [--min-time 0.5]
#                 [--budget S] [--baseline-tgl PATH] [--out DIR]
#
# A cell is (hidden H, input/output size V, threads); each (system, cell) is
# its own process, started as bench/lib/peer_run.sh says (thread variables,
# taskset), and for each cell every system runs once, in an order that
# rotates from one cell to the next.  Data and initial weights:
# bench/.data/rnn_V<V>.npz and rnn_H<H>_V<V>.npz (made by `tgl bench/rnn.lua
# --make-data`), the same for every system: the report checks that the
# losses agree and went down.  --budget S (default 20) caps a process's
# timing near S seconds by shortening its repeats (down to one sequence
# each; never the work per step): the slow cells (H 1500 with PyTorch
# eager) then have fewer sequences per repeat.  tgl's processes also run
# a profiled copy of the step (profile = true): rnn_profile.csv has where
# the time goes, the full tables are in rnn.log.
#
# --baseline-tgl PATH also runs PATH (another tgl build, e.g. of the commit
# before an engine change) on this checkout's bench/rnn.lua as system
# 'tgl@base' (without --profile: the profiled copy runs after the timing,
# and rnn_profile.csv is tgl's), each cell right before or after tgl, the
# order alternating; rnn.md then gets tgl@base's columns and a table of
# each variant against the baseline's with a verdict (bench/lib/
# base_compare.lua); rnn_meta.csv records the binary and its checkout's
# commit.  A baseline that cannot run the script, or a failed tgl/tgl@base
# process, makes the run exit 1 (bench/lib/peer_run.sh).
set -euo pipefail
name=rnn; known_cases="rnn"
threads="1 2"; cases=rnn; systems="tgl jax torch pytensor"; repeats=5; min_time=0.5
hidden=50,100,500,1500; vocab=10,54,3000; budget=20; baseline_ok=1
. "$(dirname "$0")/peer_run.sh"
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --hidden|--vocab|--budget) [ $# -ge 2 ] || usage; declare "${1#--}=$2"; shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
peer_parse_args "${rest[@]+"${rest[@]}"}"
[[ "$hidden" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench/run rnn: --hidden needs sizes like 50,100" >&2; exit 2; }
[[ "$vocab" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench/run rnn: --vocab needs sizes like 10,54" >&2; exit 2; }
awk -v s="$budget" 'BEGIN { exit !(s + 0 >= 0 && s ~ /^[0-9.]+$/) }' || { echo "bench/run rnn: --budget needs seconds >= 0" >&2; exit 2; }
peer_check_args
peer_setup
peer_preflight "$here/rnn.lua" --csv --header --vocab none --system tgl@base
"$TGL" "$here/rnn.lua" --make-data "$data" --hidden "$hidden" --vocab "$vocab" >> "$log"
peer_write_meta
echo "budget,$budget" >> "$meta"
prof=$out/rnn_profile.csv
echo "hidden,vocab,threads,op,share_pct,us_per_seq" > "$prof"

run_one() {   # system H V threads -> appends CSV rows to $csv.tmp (tgl: profile rows to $prof)
  local s=$1 h=$2 v=$3 t=$4 cmd
  local common=(--hidden "$h" --vocab "$v" --threads "$t" --data "$data" --repeats "$repeats"
                --min-time "$min_time" --budget "$budget")
  case "$s" in
    tgl) cmd=("$TGL" "$here/rnn.lua" --csv --profile "${common[@]}") ;;
    tgl@base) cmd=("$BASE" "$here/rnn.lua" --csv "${common[@]}" --system tgl@base) ;;
    jax) cmd=("$PY_VENV" "$here/peers/rnn_jax.py" "${common[@]}") ;;
    torch) cmd=("$PY_DEB" "$here/peers/rnn_torch.py" "${common[@]}") ;;
    pytensor) cmd=("$PY_VENV" "$here/peers/rnn_pytensor.py" "${common[@]}") ;;
  esac
  peer_exec "$t" "$s H=$h V=$v threads=$t" "$(printf '%-8s H=%-4d V=%-4d threads=%d' "$s" "$h" "$v" "$t")" "${cmd[@]}"
  if [ "$s" = tgl ]; then grep '^#profile,' "$out/.one.tmp" | cut -d, -f2- >> "$prof" || true; fi
}

peer_start
peer_units
IFS=, read -ra hlist <<< "$hidden"
IFS=, read -ra vlist <<< "$vocab"
rot=0
for t in $threads; do
  for v in "${vlist[@]}"; do
    for h in "${hlist[@]}"; do
      peer_round "$rot" "$h" "$v" "$t"
      rot=$((rot + 1))
    done
  done
done
peer_finish "$("$TGL" "$here/rnn.lua" --csv --header --vocab none)"
