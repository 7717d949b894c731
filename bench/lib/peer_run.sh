# bench/lib/peer_run.sh — the shared part of the `bench/run <name>` drivers
# that run one tgl benchmark script and its Python peers (jax, torch) in
# alternation: bench/lib/scan_run.sh, rop_run.sh and rnn_run.sh source it.
#
# The driver sets, before sourcing: name (scan, rop: bench/<name>.lua,
# bench/lib/<name>_report.lua, <out>/<name>.{csv,md,log}, <name>_meta.csv),
# known_cases (space-separated) and the defaults threads, cases, systems,
# repeats, min_time; then it calls, in order: peer_parse_args "$@",
# peer_check_args, peer_setup, peer_make_data FILE, peer_write_meta,
# peer_start, peer_exec (once a process) and peer_finish HEADER.
#
# --baseline-tgl PATH (scan and rnn: the driver sets baseline_ok=1 before
# sourcing) adds system 'tgl@base': PATH, another tgl binary (e.g. of the
# commit before an engine change), run on this checkout's bench script
# with --system tgl@base.  tgl and tgl@base are one unit of the rotation
# (peer_units, peer_round): for each cell the two run back to back, in an
# order that alternates from one cell to the next, as in bench/run mlp.
# peer_preflight runs the baseline once on a cheap command first, and any
# failed tgl or tgl@base process makes peer_finish exit 1 after the report:
# a baseline that lacks something the current script uses fails clearly.
here=$(cd "$(dirname "$0")/.." && pwd)         # bench/
root=$(dirname "$here")
TGL=${TGL:-$root/build/tgl}
out=$here/results
BASE=
failed_tgl=()             # labels of the tgl / tgl@base processes that failed
declare -A version missing

usage() { awk 'NR > 1 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0" >&2; exit 2; }

peer_parse_args() {   # "$@" -> threads cases systems repeats min_time out
  while [ $# -gt 0 ]; do
    [ $# -ge 2 ] || usage
    case "$1" in
      --threads) threads=$2; shift 2 ;;
      --cases) cases=$2; shift 2 ;;
      --systems) systems=$2; shift 2 ;;
      --repeats) repeats=$2; shift 2 ;;
      --min-time) min_time=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --baseline-tgl) [ "${baseline_ok:-0}" = 1 ] || usage; BASE=$2; shift 2 ;;
      *) usage ;;
    esac
  done
}

peer_check_args() {   # -> clist (the cases, an array)
  [ -x "$TGL" ] || { echo "bench/run: $TGL not found; build first: scripts/build.sh build" >&2; exit 1; }
  [[ "$repeats" =~ ^[1-9][0-9]*$ ]] || { echo "bench/run: --repeats needs a positive integer" >&2; exit 2; }
  awk -v s="$min_time" 'BEGIN { exit !(s + 0 > 0) }' || { echo "bench/run: --min-time needs a positive number of seconds" >&2; exit 2; }
  if [ "$repeats" -lt 5 ] || awk -v s="$min_time" 'BEGIN { exit !(s < 0.5) }'; then
    echo "bench/run: warning: --repeats $repeats --min-time $min_time is below the protocol (5 repeats of 0.5 s): a quick look, not figures to publish" >&2
  fi
  IFS=, read -ra clist <<< "$cases"
  local c k ok
  for c in "${clist[@]}"; do
    ok=0
    for k in $known_cases; do [ "$c" != "$k" ] || ok=1; done
    [ $ok = 1 ] || { echo "bench/run $name: unknown case '$c' (known: $known_cases)" >&2; exit 2; }
  done
  if [ -n "$BASE" ]; then
    [ -x "$BASE" ] && [ -f "$BASE" ] || { echo "bench/run $name: --baseline-tgl $BASE is not an executable" >&2; exit 1; }
    BASE=$(cd "$(dirname "$BASE")" && pwd)/$(basename "$BASE")
    case " $systems " in *" tgl "*) ;; *) echo "bench/run $name: warning: --baseline-tgl without tgl in --systems" >&2 ;; esac
    systems="$systems tgl@base"
  fi
}

# Python interpreters: Debian's for torch, bench/.venv's for jax and pytensor (as
# bench/run mlp).
PY_DEB=/usr/bin/python3
PY_VENV=$here/.venv/bin/python
[ -x "$PY_VENV" ] || PY_VENV=$PY_DEB
pyver() { "$1" -c "import $2; print($2.__version__)" 2>/dev/null || true; }

peer_setup() {   # -> data log csv meta, version[] missing[] run_systems
  mkdir -p "$out"
  data=$here/.data
  log=$out/$name.log; csv=$out/$name.csv; meta=$out/${name}_meta.csv
  : > "$log"
  local s v
  for s in $systems; do
    case "$s" in
      tgl) version[tgl]=$("$TGL" -v | awk 'NR == 1 {print $2}') ;;
      tgl@base) [ -n "$BASE" ] || { echo "bench/run $name: system tgl@base comes with --baseline-tgl PATH" >&2; exit 2; }
                version[tgl@base]=$("$BASE" -v 2>/dev/null | head -1 | awk '{print $2}' || true)
                [ -n "${version[tgl@base]}" ] || { echo "bench/run $name: --baseline-tgl $BASE: '$BASE -v' printed no version: not a tgl binary?" >&2; exit 1; } ;;
      torch) v=$(pyver "$PY_DEB" torch); [ -n "$v" ] && version[torch]=$v || missing[torch]="python3-torch not installed (bench/peers/install.sh)" ;;
      jax) v=$(pyver "$PY_VENV" jax); [ -n "$v" ] && version[jax]=$v || missing[jax]="jax not installed in bench/.venv (bench/peers/install.sh)" ;;
      pytensor) v=$(pyver "$PY_VENV" pytensor); [ -n "$v" ] && version[pytensor]=$v || missing[pytensor]="pytensor not installed in bench/.venv (bench/peers/install.sh)" ;;
      *) echo "bench/run $name: unknown system '$s' (known: tgl jax torch pytensor)" >&2; exit 2 ;;
    esac
  done
  run_systems=()
  for s in $systems; do [ -z "${version[$s]:-}" ] || run_systems+=("$s"); done
}

peer_make_data() {   # file: made by `tgl bench/<name>.lua --make-data` unless there
  [ -f "$data/$1" ] || "$TGL" "$here/$name.lua" --make-data "$data" >> "$log"
}

peer_write_meta() {
  local s
  {
    echo "key,value"
    echo "date,$(date -u '+%Y-%m-%d %H:%M UTC')"
    echo "cpu,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/,/ /g') ($(nproc) cores)"
    echo "blas,$("$TGL" -v | grep '^BLAS' | cut -d' ' -f2- | sed 's/,/ /g')"
    echo "tgl_commit,$(cd "$root" && git rev-parse --short HEAD 2>/dev/null)$(cd "$root" && git diff --quiet HEAD -- src include lua host CMakeLists.txt 2>/dev/null || echo ' + uncommitted engine changes')"
    if [ -n "$BASE" ]; then
      echo "baseline_tgl,$BASE"
      # the commit of the checkout that holds the binary (the binary itself
      # may be older; its Lua files are that checkout's lua/), as bench/run mlp
      local bdir
      bdir=$(cd "$(dirname "$BASE")" && git rev-parse --show-toplevel 2>/dev/null || true)
      if [ -n "$bdir" ]; then
        echo "baseline_commit,$(git -C "$bdir" rev-parse --short HEAD)$(git -C "$bdir" diff --quiet HEAD -- src include lua host CMakeLists.txt 2>/dev/null || echo ' + uncommitted engine changes')"
      fi
    fi
    echo "repeats,$repeats"
    echo "min_time,$min_time"
    echo "load_before,$(cut -d' ' -f1-3 /proc/loadavg)"
    for s in $systems; do
      [ -z "${version[$s]:-}" ] || echo "version.$s,${version[$s]}"
      [ -z "${missing[$s]:-}" ] || echo "missing.$s,$(echo "${missing[$s]}" | sed 's/,/;/g')"
    done
  } > "$meta"
}

# Pin a run with t threads to cores 0..t-1 (as bench/run mlp).
pin() { if command -v taskset >/dev/null && [ "$1" -le "$(nproc)" ]; then echo taskset -c "0-$(($1 - 1))"; fi; }
sample_load() {   # keeps the highest 1-minute load average seen between processes
  local l; l=$(cut -d' ' -f1 /proc/loadavg)
  load_max=$(awk -v a="$load_max" -v b="$l" 'BEGIN { print (b > a) ? b : a }')
}

peer_start() {   # the load warning, the header line; -> load_max, start, empty temporary files
  local load
  load_max=$(cut -d' ' -f1 /proc/loadavg)
  load=$(cut -d' ' -f1 /proc/loadavg)
  if awk -v l="$load" 'BEGIN { exit !(l > 0.5) }'; then
    echo "bench/run: warning: load average $load before the run: other work on the machine skews the figures" >&2
  fi
  echo "== $name: ${run_systems[*]} (missing: ${!missing[*]}); $repeats repeats of >= $min_time s per figure"
  : > "$csv.tmp"; : > "$out/.missing.tmp"
  start=$SECONDS
}

# threads "log label" "progress label" command... : runs the command as its
# own process with the thread count in its environment, pinned; appends its
# CSV rows to $csv.tmp and prints a progress line.
# A failed process's last line on stderr is shown with FAILED; a failed tgl
# or tgl@base process is remembered (failed_tgl) for peer_finish.
peer_exec() {
  local t=$1 label=$2 shown=$3 rc=0 t0=$SECONDS why=
  shift 3
  local env=(env OPENBLAS_NUM_THREADS="$t" OMP_NUM_THREADS="$t" MKL_NUM_THREADS="$t" TGL_NUM_THREADS="$t"
             TGL_BENCH_REPEATS="$repeats" TGL_BENCH_MIN_TIME="$min_time")
  env+=($(pin "$t"))
  echo "-- $label: $*" >> "$log"
  "${env[@]}" timeout 900 "$@" > "$out/.one.tmp" 2> "$out/.err.tmp" || rc=$?
  cat "$out/.err.tmp" >> "$log"
  grep -v '^#' "$out/.one.tmp" >> "$csv.tmp" || true
  grep '^#missing' "$out/.one.tmp" | sort -u >> "$out/.missing.tmp" || true
  sample_load
  if [ $rc -ne 0 ]; then
    why=$(grep -v '^[[:space:]]*$' "$out/.err.tmp" | grep -v '^stack traceback:' | grep -v '^[[:space:]]' | tail -1 | cut -c1-160)
    case "$label" in tgl\ *|tgl@base\ *) failed_tgl+=("$label: ${why:-rc $rc}") ;; esac
  fi
  printf '  %s  %3ds  load %s%s\n' "$shown" $((SECONDS - t0)) \
    "$(cut -d' ' -f1 /proc/loadavg)" "$([ $rc -ne 0 ] && echo "  FAILED (rc $rc${why:+: $why}; see $log)")"
}

# --baseline-tgl: before the grid, the baseline runs this checkout's script
# once on a command that costs nothing (its arguments), so that a baseline
# that cannot run the script at all stops the run at once, with its error.
peer_preflight() {
  [ -n "$BASE" ] && [ -n "${version[tgl@base]:-}" ] || return 0
  local rc=0
  "$BASE" "$@" > "$out/.one.tmp" 2> "$out/.err.tmp" || rc=$?
  if [ $rc -ne 0 ]; then
    echo "bench/run $name: the baseline $BASE cannot run this checkout's bench script (rc $rc):" >&2
    echo "  $BASE $*" >&2
    sed 's/^/  /' "$out/.err.tmp" | head -20 >&2
    echo "bench/run $name: the baseline lacks something the script uses; compare with a newer baseline, or by hand" >&2
    exit 1
  fi
  rm -f "$out/.one.tmp" "$out/.err.tmp"
}

# The rotation's units: each system of run_systems, but tgl and tgl@base
# (both there) as one unit 'pair'.
peer_units() {   # -> units
  local s
  units=()
  for s in "${run_systems[@]}"; do
    case "$s" in
      tgl) if [ -n "${version[tgl@base]:-}" ]; then units+=(pair); else units+=(tgl); fi ;;
      tgl@base) [ -n "${version[tgl]:-}" ] || units+=(tgl@base) ;;
      *) units+=("$s") ;;
    esac
  done
}

# One round of the rotation for one cell: every unit once, starting at unit
# rot; run_one SYSTEM ARGS... runs one process.  The pair runs tgl and
# tgl@base back to back, tgl first on every other call (pair_flip).
pair_flip=0
peer_round() {   # rot args...
  local rot=$1 n=${#units[@]} i u
  shift
  for ((i = 0; i < n; i++)); do
    u=${units[$(((i + rot) % n))]}
    if [ "$u" = pair ]; then
      if [ $((pair_flip % 2)) -eq 0 ]; then run_one tgl "$@"; run_one tgl@base "$@"
      else run_one tgl@base "$@"; run_one tgl "$@"; fi
      pair_flip=$((pair_flip + 1))
    else
      run_one "$u" "$@"
    fi
  done
}

peer_finish() {   # CSV header line: writes the CSV, the rest of the meta, the report
  { echo "$1"; cat "$csv.tmp"; } > "$csv"
  sample_load
  { echo "load_after,$(cut -d' ' -f1-3 /proc/loadavg)"; echo "load_max,$load_max"; echo "run_seconds,$((SECONDS - start))"; } >> "$meta"
  sort -u "$out/.missing.tmp" | sed 's/^#missing,\([^,]*\),\([^,]*\),\(.*\)$/missing_variant.\1\/\2,\3/' | sed 's/;/ /g' >> "$meta"
  rm -f "$csv.tmp" "$out/.one.tmp" "$out/.err.tmp" "$out/.missing.tmp"
  echo "== ran in $((SECONDS - start)) s; wrote $csv"
  "$TGL" "$here/lib/${name}_report.lua" "$csv" "$meta" "$out/$name.md"
  if [ -n "$BASE" ] && [ ${#failed_tgl[@]} -gt 0 ]; then
    echo "bench/run $name: ${#failed_tgl[@]} tgl/tgl@base process(es) failed, the comparison is incomplete (see $log):" >&2
    printf '  %s\n' "${failed_tgl[@]}" >&2
    exit 1
  fi
}
