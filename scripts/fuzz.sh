#!/usr/bin/env bash
# Runs tgl's libFuzzer targets (spec/fuzz; doc/contributing.md, "Fuzzing").
# Usage: scripts/fuzz.sh --list                 the targets
#        scripts/fuzz.sh TARGET [SECONDS] [--merge]
#                 fuzz one target (default 60 s) on a scratch copy of its
#                 seed corpus and regression inputs; --merge adds the new
#                 inputs that reach new coverage to spec/fuzz/corpus/TARGET
#        scripts/fuzz.sh --ci [SECONDS]
#                 every target for SECONDS (default 20) each; fails on any
#                 crash, leak, timeout or sanitizer report
# Builds (clang, -DTGL_FUZZ=ON) in build-fuzz/ ($TGL_FUZZ_BUILD) first when
# needed.  A failing input is saved as spec/fuzz/crashes/TARGET/<kind>-<sha1>;
# once fixed, keep it in spec/fuzz/regress/TARGET/ (ctest replays it).
# The final line per target gives execs, cov (edges) and ft (features).
set -euo pipefail
cd "$(dirname "$0")/.."
targets=(npy npz idx cache_entry graph host_args)
dir=${TGL_FUZZ_BUILD:-build-fuzz}
nice_level=${TGL_FUZZ_NICE:-10}

die() { echo "fuzz.sh: $*" >&2; exit 2; }

is_target() {
  local t
  for t in "${targets[@]}"; do [ "$t" = "$1" ] && return 0; done
  return 1
}

build() {
  command -v clang >/dev/null ||
    die "clang is not installed (scripts/install-deps.sh --test installs it)"
  if ! grep -qs '^TGL_FUZZ:BOOL=ON' "$dir/CMakeCache.txt"; then
    cmake -S . -B "$dir" -DCMAKE_C_COMPILER=clang -DTGL_FUZZ=ON -DTGL_CUDA=OFF \
          -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  fi
  cmake --build "$dir" -j"$(nproc)" --target "$@" >/dev/null ||
    { cmake --build "$dir" -j1 --target "$@" 2>&1 | tail -40; die "the build failed"; }
}

# run TARGET SECONDS MERGE: one fuzzing session; returns libFuzzer's status.
run() {
  local t=$1 secs=$2 merge=$3
  local scratch crashes log rc=0
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/tgl-fuzz-$t.XXXXXX")
  crashes=spec/fuzz/crashes/$t
  mkdir -p "$scratch/corpus" "$dir/kcache" "$crashes"
  cp -r "spec/fuzz/corpus/$t/." "$scratch/corpus/"
  [ -d "spec/fuzz/regress/$t" ] && cp -r "spec/fuzz/regress/$t/." "$scratch/corpus/"
  log=$scratch/log
  # The sanitizers as in scripts/test.sh --sanitize; a kernel cache of the
  # build directory's (the calibration record is measured once, not per run).
  TGL_CACHE_DIR=$PWD/$dir/kcache \
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0:halt_on_error=1" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    nice -n "$nice_level" "$dir/fuzz/fuzz_$t" -max_total_time="$secs" -print_final_stats=1 \
      -timeout="${TGL_FUZZ_TIMEOUT:-20}" -rss_limit_mb="${TGL_FUZZ_RSS_MB:-3072}" \
      -artifact_prefix="$crashes/" "$scratch/corpus" >"$log" 2>&1 || rc=$?
  local done_line execs
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  if [ "$rc" -ne 0 ]; then
    tail -60 "$log" >&2
    echo "fuzz.sh: $t FAILED after ${execs:-?} execs; input saved under $crashes/:" >&2
    grep -o "Test unit written to .*" "$log" >&2 || true
    echo "fuzz.sh: the log: $log" >&2
    return "$rc"
  fi
  local cov ft
  cov=$(sed -n 's/.* cov: \([0-9]*\) .*/\1/p' <<<"$done_line")
  ft=$(sed -n 's/.* ft: \([0-9]*\) .*/\1/p' <<<"$done_line")
  echo "fuzz.sh: $t: ${secs} s, execs ${execs:-?}, cov ${cov:-?}, ft ${ft:-?}, no crash"
  if [ "$merge" = 1 ]; then
    "$dir/fuzz/fuzz_$t" -merge=1 "spec/fuzz/corpus/$t" "$scratch/corpus" >"$scratch/merge.log" 2>&1 ||
      { tail -20 "$scratch/merge.log" >&2; die "the merge failed"; }
    echo "fuzz.sh: $t: merged into spec/fuzz/corpus/$t ($(ls "spec/fuzz/corpus/$t" | wc -l) files)"
  fi
  rm -rf "$scratch"
}

case "${1:-}" in
  --list)
    printf '%s\n' "${targets[@]}"
    ;;
  --ci)
    secs=${2:-20}
    build fuzz
    failed=()
    for t in "${targets[@]}"; do
      run "$t" "$secs" 0 || failed+=("$t")
    done
    if [ "${#failed[@]}" -gt 0 ]; then
      echo "fuzz.sh: failing targets: ${failed[*]}" >&2
      exit 1
    fi
    ;;
  ""|-h|--help)
    sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  *)
    t=$1
    is_target "$t" || die "no target '$t' (scripts/fuzz.sh --list names them)"
    secs=60 merge=0
    shift
    for a in "$@"; do
      case "$a" in
        --merge) merge=1 ;;
        *[!0-9]*|"") die "'$a' is neither SECONDS nor --merge" ;;
        *) secs=$a ;;
      esac
    done
    build "fuzz_$t"
    run "$t" "$secs" "$merge"
    ;;
esac
