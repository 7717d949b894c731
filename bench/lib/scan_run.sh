#!/usr/bin/env bash
# bench/lib/scan_run.sh — `bench/run scan`: bench/scan.lua (tgl) and its
# peers (bench/peers/scan_jax.py, scan_torch.py), alternating; writes
# <out>/scan.{csv,md,log} and scan_meta.csv.
#
#   bench/run scan [--threads "1 2"] [--cases overhead,rnn,memory]
#                  [--systems "tgl jax torch"] [--repeats 5] [--min-time 0.5]
#                  [--baseline-tgl PATH] [--out DIR]
#
# overhead (ns per step of a 10^6-step loop) and memory (peak RSS, tgl only)
# run at the first thread count; rnn (Elman RNN, forward + BPTT + SGD,
# time steps per second) at each.  Each (system, case, threads) is its own
# process, started with OPENBLAS_NUM_THREADS, OMP_NUM_THREADS,
# MKL_NUM_THREADS, TGL_NUM_THREADS = N and pinned to cores 0..N-1
# (taskset); inside, tgl sets tgl.config.threads, PyTorch
# torch.set_num_threads, JAX XLA_FLAGS (as bench/run mlp).  For each
# (threads, case) every system runs once, in an order that rotates from one
# case to the next.  The RNN's data and initial weights are
# bench/.data/scan_rnn.npz (made by `tgl bench/scan.lua --make-data`), the
# same for every system: the report checks that the losses agree.
#
# --baseline-tgl PATH also runs PATH (another tgl build, e.g. of the commit
# before an engine change) on this checkout's bench/scan.lua as system
# 'tgl@base', each (case, threads) right before or after tgl, the order
# alternating (memory too); scan.md then gets a table of each variant
# against the baseline's with a verdict (bench/lib/base_compare.lua), and
# scan_meta.csv records the binary and its checkout's commit.  A baseline
# that cannot run the script, or a failed tgl/tgl@base process, makes the
# run exit 1 (bench/lib/peer_run.sh).
set -euo pipefail
name=scan; known_cases="overhead rnn memory"
threads="1 2"; cases=overhead,rnn,memory; systems="tgl jax torch"; repeats=5; min_time=0.5; baseline_ok=1
. "$(dirname "$0")/peer_run.sh"
peer_parse_args "$@"
peer_check_args
peer_setup
peer_preflight "$here/scan.lua" --csv --header --cases none --system tgl@base
peer_make_data scan_rnn.npz
peer_write_meta

run_one() {   # system case threads -> appends CSV rows to $csv.tmp
  local s=$1 c=$2 t=$3 cmd
  local common=(--cases "$c" --threads "$t" --data "$data" --repeats "$repeats" --min-time "$min_time")
  case "$s" in
    tgl) cmd=("$TGL" "$here/scan.lua" --csv "${common[@]}") ;;
    tgl@base) cmd=("$BASE" "$here/scan.lua" --csv "${common[@]}" --system tgl@base) ;;
    jax) cmd=("$PY_VENV" "$here/peers/scan_jax.py" "${common[@]}") ;;
    torch) cmd=("$PY_DEB" "$here/peers/scan_torch.py" "${common[@]}") ;;
  esac
  peer_exec "$t" "$s $c threads=$t" "$(printf '%-6s %-9s threads=%d' "$s" "$c" "$t")" "${cmd[@]}"
}

peer_start
peer_units
rot=0; first=1
for t in $threads; do
  for c in "${clist[@]}"; do
    case "$c" in
      overhead|memory) [ $first = 1 ] || continue ;;
      *) ;;
    esac
    if [ "$c" = memory ]; then             # tgl (and tgl@base) only: peak RSS of fresh processes
      if [ -n "${version[tgl@base]:-}" ] && [ -n "${version[tgl]:-}" ]; then
        if [ $((pair_flip % 2)) -eq 0 ]; then run_one tgl memory "$t"; run_one tgl@base memory "$t"
        else run_one tgl@base memory "$t"; run_one tgl memory "$t"; fi
        pair_flip=$((pair_flip + 1))
      else
        [ -z "${version[tgl]:-}" ] || run_one tgl memory "$t"
        [ -z "${version[tgl@base]:-}" ] || run_one tgl@base memory "$t"
      fi
      continue
    fi
    peer_round "$rot" "$c" "$t"
    rot=$((rot + 1))
  done
  first=0
done
peer_finish "$("$TGL" "$here/scan.lua" --csv --header --cases none | head -1)"
