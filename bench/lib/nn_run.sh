#!/usr/bin/env bash
# bench/lib/nn_run.sh — `bench/run nn`: Torch7's nn against tgl's, side by
# side; writes <out>/nn.{csv,md,svg,log} and nn_meta.csv.
#
#   bench/run nn [--threads "1 2"] [--models logreg,mlp1,mlp3,cnn]
#                [--batches 1,10,60,256] [--systems "torch7 t7script tgl torch"]
#                [--repeats 5] [--min-time 0.5] [--budget 2] [--out DIR]
#
# Models: the 2012 paper's MLPs (logreg 784-10, mlp1 784-500-10, mlp3
# 784-1000x3-10, tanh) and a LeNet-style CNN (28x28: conv 5x5x20, max pool
# 2, conv 5x5x50, max pool 2, 800-500 tanh, 10), LogSoftMax +
# ClassNLLCriterion, plain SGD (lr 0.01), float32 (bench/lib/nn_common.lua).
# Systems (the report's columns):
#   torch7    bench/peers/nn_torch7.lua, a plain Torch7 nn training script,
#             under Torch7 (bench/peers/torch7.sh: TORCH7_PREFIX, or a th /
#             luajit that can require 'nn'; reported missing otherwise)
#   t7script  the SAME file run unchanged by tgl (tgl's torch and nn)
#   tgl       bench/nn.lua: tgl's nn with tgl arrays, variants eager (module
#             calls) and compile (nn.compile; missing where this tgl has none)
#   torch     bench/peers/nn_torch.py: PyTorch eager (torch.nn modules)
# Each cell is the median of --repeats timed repeats of at least --min-time
# seconds after a warm-up and a check pass (bench/lib/mlp_common.lua,
# stats.lua); --budget S (default 2) cuts each check pass after S seconds
# (0: a whole pass of 6000 examples, minutes for the CNN at batch 1).  Each
# (system, model, threads) is its own process covering every batch size,
# started with the thread count in its environment and pinned to cores
# 0..N-1 (bench/lib/peer_run.sh's peer_exec); for each thread count and
# model every system runs once, in an order that rotates from one model to
# the next.  Every system makes its own data and weights from its own
# generator (Torch7 cannot read .npz): speeds compare, loss values do not
# (except t7script and tgl, which draw the same numbers from tgl's
# generator).
set -euo pipefail
name=nn; known_cases="logreg mlp1 mlp3 cnn"
threads="1 2"; cases=logreg,mlp1,mlp3,cnn; systems="torch7 t7script tgl torch"; repeats=5; min_time=0.5
batches=1,10,60,256; budget=2
. "$(dirname "$0")/peer_run.sh"
rest=()
while [ $# -gt 0 ]; do
  case "$1" in
    --batches) [ $# -ge 2 ] || usage; batches=$2; shift 2 ;;
    --budget) [ $# -ge 2 ] || usage; budget=$2; shift 2 ;;
    --models) [ $# -ge 2 ] || usage; rest+=(--cases "$2"); shift 2 ;;
    *) rest+=("$1"); shift ;;
  esac
done
peer_parse_args "${rest[@]+"${rest[@]}"}"
peer_check_args
[[ "$batches" =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "bench/run nn: --batches needs sizes like 1,10,60" >&2; exit 2; }
awk -v s="$budget" 'BEGIN { exit !(s + 0 >= 0) }' || { echo "bench/run nn: --budget needs seconds" >&2; exit 2; }

# Torch7: bench/peers/torch7.sh finds it (TORCH7_PREFIX, or th / luajit
# with nn on PATH) and runs the script (`torch7.sh --lua FILE ARGS`).  For a
# torch7.sh that predates TORCH7_PREFIX or --lua, t7env puts the prefix's
# Lua paths in the environment of the Torch7 commands only (tgl puts its
# own lua/ first anyway) and the interpreter torch7.sh names runs the file.
T7=$here/peers/torch7.sh
t7env=(env)
if [ -n "${TORCH7_PREFIX:-}" ] && ! grep -q TORCH7_PREFIX "$T7"; then
  p=$TORCH7_PREFIX
  t7env+=("LUA_PATH=$p/share/lua/5.1/?.lua;$p/share/lua/5.1/?/init.lua;$p/lua/?.lua;$p/lua/?/init.lua;${LUA_PATH:-;}"
          "LUA_CPATH=$p/lib/lua/5.1/?.so;$p/lib/?.so;${LUA_CPATH:-;}" "PATH=$p/bin:$PATH")
fi

mkdir -p "$out"
data=$here/.data
log=$out/nn.log; csv=$out/nn.csv; meta=$out/nn_meta.csv
: > "$log"
for s in $systems; do
  case "$s" in
    tgl|t7script) version[$s]=$("$TGL" -v | awk 'NR == 1 {print $2}') ;;
    torch) v=$(pyver "$PY_DEB" torch); [ -n "$v" ] && version[torch]=$v || missing[torch]="python3-torch not installed (bench/peers/install.sh)" ;;
    torch7) if v=$("${t7env[@]}" "$T7" --version 2>/dev/null); then version[torch7]=$v
            else missing[torch7]=$("${t7env[@]}" "$T7" --why 2>&1 || true); fi ;;
    *) echo "bench/run nn: unknown system '$s' (known: torch7 t7script tgl torch)" >&2; exit 2 ;;
  esac
done
run_systems=()
for s in $systems; do [ -z "${version[$s]:-}" ] || run_systems+=("$s"); done
peer_write_meta
{ echo "budget,$budget"; echo "batches,$batches"
  if [ -n "${TORCH7_PREFIX:-}" ]; then
    echo "torch7_prefix,$TORCH7_PREFIX"
    [ -r "$TORCH7_PREFIX/COMMITS" ] && echo "torch7_commits,$(tr ',\n' '; ' < "$TORCH7_PREFIX/COMMITS" | sed 's/ *$//')"
  fi; } >> "$meta"

run_one() {   # system model threads
  local s=$1 m=$2 t=$3 cmd
  local t7args=(-model "$m" -batches "$batches" -threads "$t" -budget "$budget" -repeats "$repeats" -mintime "$min_time")
  case "$s" in
    torch7) if grep -q -- '--lua)' "$T7"; then cmd=("${t7env[@]}" "$T7" --lua)
            else cmd=("${t7env[@]}" "$("${t7env[@]}" "$T7" --version | awk '{print $1}')"); fi
            cmd+=("$here/peers/nn_torch7.lua" "${t7args[@]}") ;;
    t7script) cmd=("$TGL" "$here/peers/nn_torch7.lua" "${t7args[@]}" -system tgl -variant t7script) ;;
    tgl) cmd=("$TGL" "$here/nn.lua" --models "$m" --batches "$batches" --threads "$t" --budget "$budget"
              --repeats "$repeats" --min-time "$min_time") ;;
    torch) cmd=("$PY_DEB" "$here/peers/nn_torch.py" --models "$m" --batches "$batches" --threads "$t"
                --budget "$budget" --repeats "$repeats" --min-time "$min_time") ;;
  esac
  peer_exec "$t" "$s $m threads=$t" "$(printf '%-9s %-6s threads=%d' "$s" "$m" "$t")" "${cmd[@]}"
}

peer_start
rot=0
for t in $threads; do
  for m in "${clist[@]}"; do
    n=${#run_systems[@]}
    for ((i = 0; i < n; i++)); do run_one "${run_systems[$(((i + rot) % n))]}" "$m" "$t"; done
    rot=$((rot + 1))
  done
done
peer_finish "$("$TGL" -e "package.path = '$here/lib/?.lua;' .. package.path; print(require('mlp_common').CSV_HEADER)")"
