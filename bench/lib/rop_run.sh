#!/usr/bin/env bash
# bench/lib/rop_run.sh — `bench/run rop`: bench/rop.lua (tgl) and its peers
# (bench/peers/rop_jax.py, rop_torch.py), alternating; writes
# <out>/rop.{csv,md,log} and rop_meta.csv.
#
#   bench/run rop [--threads "1 2"] [--cases grad,gn,hvp]
#                 [--systems "tgl jax torch"] [--repeats 5] [--min-time 0.5]
#                 [--out DIR]
#
# For the 784-1000-1000-1000-10 tanh MLP at batch 60, float32: ms per call
# of one gradient, one Gauss-Newton product (softmax-crossentropy loss) and
# one Hessian-vector product; the report gives each product's time over
# the same system's gradient.  Each (system, threads) is its own process,
# started with OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS,
# TGL_NUM_THREADS = N and pinned to cores 0..N-1 (taskset); inside, tgl
# sets tgl.config.threads, PyTorch torch.set_num_threads, JAX XLA_FLAGS (as
# bench/run mlp).  For each thread count every system runs once, in an
# order that rotates from one thread count to the next.  Data, initial
# weights and the direction v are bench/.data/{data,init_mlp3,rop_v}.npz
# (made by `tgl bench/rop.lua --make-data`), the same for every system: the
# report checks that |g|^2, v'Gv and v'Hv agree.
set -euo pipefail
name=rop; known_cases="grad gn hvp"
threads="1 2"; cases=grad,gn,hvp; systems="tgl jax torch"; repeats=5; min_time=0.5
. "$(dirname "$0")/peer_run.sh"
peer_parse_args "$@"
peer_check_args
peer_setup
peer_make_data rop_v.npz
peer_write_meta
v=$(pyver "$PY_DEB" functorch); [ -z "$v" ] || echo "version.functorch,$v" >> "$meta"

run_one() {   # system threads -> appends CSV rows to $csv.tmp
  local s=$1 t=$2 cmd
  local common=(--cases "$cases" --threads "$t" --data "$data" --repeats "$repeats" --min-time "$min_time")
  case "$s" in
    tgl) cmd=("$TGL" "$here/rop.lua" --csv "${common[@]}") ;;
    jax) cmd=("$PY_VENV" "$here/peers/rop_jax.py" "${common[@]}") ;;
    torch) cmd=("$PY_DEB" "$here/peers/rop_torch.py" "${common[@]}") ;;
  esac
  peer_exec "$t" "$s threads=$t" "$(printf '%-6s threads=%d' "$s" "$t")" "${cmd[@]}"
}

peer_start
rot=0
for t in $threads; do
  n=${#run_systems[@]}
  for ((i = 0; i < n; i++)); do run_one "${run_systems[$(((i + rot) % n))]}" "$t"; done
  rot=$((rot + 1))
done
peer_finish 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,check,note'
