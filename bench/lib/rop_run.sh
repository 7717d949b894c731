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
here=$(cd "$(dirname "$0")/.." && pwd)         # bench/
root=$(dirname "$here")
TGL=${TGL:-$root/build/tgl}
usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }

threads="1 2"; cases=grad,gn,hvp; systems="tgl jax torch"
repeats=5; min_time=0.5; out=$here/results
while [ $# -gt 0 ]; do
  [ $# -ge 2 ] || usage
  case "$1" in
    --threads) threads=$2; shift 2 ;;
    --cases) cases=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --min-time) min_time=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) usage ;;
  esac
done
[ -x "$TGL" ] || { echo "bench/run: $TGL not found; build first: scripts/build.sh build" >&2; exit 1; }
[[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "bench/run: --repeats needs a positive integer" >&2; exit 2; }
awk -v s="$min_time" 'BEGIN { exit !(s + 0 > 0) }' || { echo "bench/run: --min-time needs a positive number of seconds" >&2; exit 2; }
if [ "$repeats" -lt 5 ] || awk -v s="$min_time" 'BEGIN { exit !(s < 0.5) }'; then
  echo "bench/run: warning: --repeats $repeats --min-time $min_time is below the protocol (5 repeats of 0.5 s): a quick look, not figures to publish" >&2
fi
IFS=, read -ra clist <<< "$cases"
for c in "${clist[@]}"; do
  case "$c" in grad|gn|hvp) ;; *) echo "bench/run rop: unknown case '$c' (known: grad gn hvp)" >&2; exit 2 ;; esac
done
mkdir -p "$out"
data=$here/.data
log=$out/rop.log; csv=$out/rop.csv; meta=$out/rop_meta.csv
: > "$log"

PY_DEB=/usr/bin/python3
PY_VENV=$here/.venv/bin/python
[ -x "$PY_VENV" ] || PY_VENV=$PY_DEB
pyver() { "$1" -c "import $2; print($2.__version__)" 2>/dev/null || true; }
declare -A version missing
for s in $systems; do
  case "$s" in
    tgl) version[tgl]=$("$TGL" -v | head -1 | awk '{print $2}') ;;
    torch) v=$(pyver "$PY_DEB" torch); [ -n "$v" ] && version[torch]=$v || missing[torch]="python3-torch not installed (bench/peers/install.sh)" ;;
    jax) v=$(pyver "$PY_VENV" jax); [ -n "$v" ] && version[jax]=$v || missing[jax]="jax not installed in bench/.venv (bench/peers/install.sh)" ;;
    *) echo "bench/run rop: unknown system '$s' (known: tgl jax torch)" >&2; exit 2 ;;
  esac
done
run_systems=()
for s in $systems; do [ -n "${version[$s]:-}" ] && run_systems+=("$s"); done

[ -f "$data/rop_v.npz" ] || "$TGL" "$here/rop.lua" --make-data "$data" >> "$log"

{
  echo "key,value"
  echo "date,$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/,/ /g') ($(nproc) cores)"
  echo "blas,$("$TGL" -v | grep '^BLAS' | cut -d' ' -f2- | sed 's/,/ /g')"
  echo "tgl_commit,$(cd "$root" && git rev-parse --short HEAD 2>/dev/null)$(cd "$root" && git diff --quiet HEAD -- src include lua host CMakeLists.txt 2>/dev/null || echo ' + uncommitted engine changes')"
  echo "repeats,$repeats"
  echo "min_time,$min_time"
  echo "load_before,$(cut -d' ' -f1-3 /proc/loadavg)"
  for s in $systems; do
    [ -n "${version[$s]:-}" ] && echo "version.$s,${version[$s]}"
    [ -n "${missing[$s]:-}" ] && echo "missing.$s,$(echo "${missing[$s]}" | sed 's/,/;/g')"
  done
  v=$(pyver "$PY_DEB" functorch); [ -n "$v" ] && echo "version.functorch,$v"
} > "$meta"

pin() { if command -v taskset >/dev/null && [ "$1" -le "$(nproc)" ]; then echo taskset -c "0-$(($1 - 1))"; fi; }
load_max=$(cut -d' ' -f1 /proc/loadavg)
sample_load() {
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  load_max=$(awk -v a="$load_max" -v b="$l" 'BEGIN { print (b > a) ? b : a }')
}

run_one() {   # system threads -> appends CSV rows to $csv.tmp
  local s=$1 t=$2 cmd rc=0 t0=$SECONDS
  local env=(env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" TGL_NUM_THREADS="$t"
             TGL_BENCH_REPEATS="$repeats" TGL_BENCH_MIN_TIME="$min_time")
  env+=($(pin "$t"))
  local common=(--cases "$cases" --threads "$t" --data "$data" --repeats "$repeats" --min-time "$min_time")
  case "$s" in
    tgl) cmd=("$TGL" "$here/rop.lua" --csv "${common[@]}") ;;
    jax) cmd=("$PY_VENV" "$here/peers/rop_jax.py" "${common[@]}") ;;
    torch) cmd=("$PY_DEB" "$here/peers/rop_torch.py" "${common[@]}") ;;
  esac
  echo "-- $s threads=$t: ${cmd[*]}" >> "$log"
  "${env[@]}" timeout 900 "${cmd[@]}" > "$out/.one.tmp" 2>> "$log" || rc=$?
  grep -v '^#' "$out/.one.tmp" >> "$csv.tmp" || true
  grep '^#missing' "$out/.one.tmp" | sort -u >> "$out/.missing.tmp" || true
  sample_load
  printf '  %-6s threads=%d  %3ds  load %s%s\n' "$s" "$t" $((SECONDS - t0)) \
    "$(cut -d' ' -f1 /proc/loadavg)" "$([ $rc -ne 0 ] && echo "  FAILED (rc $rc, see $log)")"
}

load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then
  echo "bench/run: warning: load average $load before the run: other work on the machine skews the figures" >&2
fi
echo "== rop: ${run_systems[*]} (missing: ${!missing[*]}); $repeats repeats of >= $min_time s per figure"
: > "$csv.tmp"; : > "$out/.missing.tmp"
start=$SECONDS; rot=0
for t in $threads; do
  n=${#run_systems[@]}
  for ((i = 0; i < n; i++)); do run_one "${run_systems[$(((i + rot) % n))]}" "$t"; done
  rot=$((rot + 1))
done
{ echo 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,check,note'; cat "$csv.tmp"; } > "$csv"
sample_load
{ echo "load_after,$(cut -d' ' -f1-3 /proc/loadavg)"; echo "load_max,$load_max"; echo "run_seconds,$((SECONDS - start))"; } >> "$meta"
sort -u "$out/.missing.tmp" | sed 's/^#missing,\([^,]*\),\([^,]*\),\(.*\)$/missing_variant.\1\/\2,\3/' | sed 's/;/ /g' >> "$meta"
rm -f "$csv.tmp" "$out/.one.tmp" "$out/.missing.tmp"
echo "== ran in $((SECONDS - start)) s; wrote $csv"
"$TGL" "$here/lib/rop_report.lua" "$csv" "$meta" "$out/rop.md"
