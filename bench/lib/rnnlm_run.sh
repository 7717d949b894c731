#!/usr/bin/env bash
# bench/lib/rnnlm_run.sh — `bench/run rnnlm`: tgl's RNN language model
# (examples/rnnlm.lua) and Mikolov's RNNLM (a binary built by hand, never
# part of tgl) trained on the same corpus with the same settings,
# alternating; writes <out>/rnnlm.{csv,md,svg,log} and rnnlm_meta.csv.
#
#   bench/run rnnlm [--hidden 50,100,200,500] [--class 100,1]
#                   [--systems "tgl rnnlm"] [--corpus fortunes|zipf|DIR]
#                   [--vocab 10000] [--words N] [--seed 1]
#                   [--max-words N] [--max-words-full 20000]
#                   [--converge H] [--double] [--timeout 3600] [--out DIR]
#
# RNNLM is the binary named by $RNNLM, else `rnnlm` on PATH; otherwise it
# is reported missing (and the tgl side still runs).  Its compiler flags
# go into the meta file from $RNNLM_CFLAGS, else from a build_flags.txt
# next to the binary (bench/README.md: building RNNLM by hand).
#
# Corpus (scripts/corpus.lua, made once under bench/.data/): fortunes
# (--vocab words, default 10000) or zipf (--vocab V --words N --seed S), or
# DIR, a directory holding train.txt and valid.txt in RNNLM's format.
# Every cell is one epoch (-one-iter) at bptt 4, bptt-block 10, rand-seed
# 1, one thread, for each --hidden size and --class count (1: full
# softmax).  --max-words N trains every cell on the first sentences of
# train.txt up to N words (sentence ends counted, as RNNLM counts them);
# --max-words-full N does so for the class-1 cells only (default 20000:
# a full softmax over 10k words is slow in RNNLM; 0: the whole file).
# Both systems read the same (cut) file, so both build the same
# vocabulary from it; validation words outside it are written <unk> (in a
# copy of valid.txt), so both score the same words.  --converge H adds one
# cell trained to convergence with RNNLM's own schedule (lr 0.1, halved once validation stops
# improving, stop when it stops again), at hidden H and the first --class.
# --double runs tgl in float64 (RNNLM is always double).
#
# Each run is its own process, one thread (OPENBLAS_NUM_THREADS=1 etc.,
# tgl -threads 1), pinned to core 0; the order of tgl and RNNLM flips from
# cell to cell.  RNNLM's figure is its own: the last `Words/sec:` it prints
# (training words over its CPU time, clock()), after a one-epoch run the
# validation perplexity of `rnnlm -rnnlm M -test valid.txt`; when it trains
# to convergence, the words/s of its epochs together (harmonic mean of
# their last figures) and the lowest `VALID entropy` (the model it keeps).
# tgl's figures are the `RESULT ...` line examples/rnnlm.lua prints.
set -euo pipefail
name=rnnlm
. "$(dirname "$0")/peer_run.sh"

hidden=50,100,200,500; classes=100,1; systems="tgl rnnlm"; corpus=fortunes
vocab=10000; words=; seed=1; max_words=0; max_words_full=20000; converge=; double=0; tmo=3600
while [ $# -gt 0 ]; do
  case "$1" in
    --double) double=1; shift; continue ;;
  esac
  [ $# -ge 2 ] || usage
  case "$1" in
    --hidden) hidden=$2 ;;
    --class) classes=$2 ;;
    --systems) systems=$2 ;;
    --corpus) corpus=$2 ;;
    --vocab) vocab=$2 ;;
    --words) words=$2 ;;
    --seed) seed=$2 ;;
    --max-words) max_words=$2 ;;
    --max-words-full) max_words_full=$2 ;;
    --converge) converge=$2 ;;
    --timeout) tmo=$2 ;;
    --out) out=$2 ;;
    *) usage ;;
  esac
  shift 2
done
posint() { [[ "$2" =~ ^[1-9][0-9]*$ ]] || { echo "bench/run rnnlm: $1 needs a positive integer, got '$2'" >&2; exit 2; }; }
natint() { [[ "$2" =~ ^[0-9]+$ ]] || { echo "bench/run rnnlm: $1 needs a whole number (0: no limit), got '$2'" >&2; exit 2; }; }
IFS=', ' read -ra hlist <<< "$hidden"
IFS=', ' read -ra klist <<< "$classes"
for h in "${hlist[@]}"; do posint --hidden "$h"; done
for c in "${klist[@]}"; do posint --class "$c"; done
[ ${#hlist[@]} -gt 0 ] && [ ${#klist[@]} -gt 0 ] || { echo "bench/run rnnlm: --hidden and --class need at least one value" >&2; exit 2; }
natint --max-words "$max_words"; natint --max-words-full "$max_words_full"; posint --timeout "$tmo"
[ -z "$converge" ] || posint --converge "$converge"
case "$corpus" in
  fortunes) posint --vocab "$vocab"; cdir=$here/.data/rnnlm-fortunes-v$vocab ;;
  zipf) posint --vocab "$vocab"; [ -n "$words" ] || { echo "bench/run rnnlm: --corpus zipf needs --words N" >&2; exit 2; }
        posint --words "$words"; posint --seed "$seed"; cdir=$here/.data/rnnlm-zipf-v$vocab-w$words-s$seed ;;
  *) [ -f "$corpus/train.txt" ] && [ -f "$corpus/valid.txt" ] ||
       { echo "bench/run rnnlm: --corpus '$corpus' is neither fortunes, zipf nor a directory with train.txt and valid.txt" >&2; exit 2; }
     cdir=$(cd "$corpus" && pwd) ;;
esac
# the cut training files and mapped validation files: beside a corpus made
# here, under bench/.data/ for a DIR corpus (not written into it)
ddir=$cdir
[ "$corpus" = fortunes ] || [ "$corpus" = zipf ] || ddir=$here/.data/rnnlm-dir-$(printf '%s' "$cdir" | cksum | cut -d' ' -f1)
[ -x "$TGL" ] || { echo "bench/run: $TGL not found; build first: scripts/build.sh build" >&2; exit 1; }
example=$root/examples/rnnlm.lua

# Systems: what runs, what is missing and why (never a stand-in).
RNNLM_BIN=
for s in $systems; do
  case "$s" in
    tgl) if [ -f "$example" ]; then version[tgl]=$("$TGL" -v | awk 'NR == 1 {print $2}')
         else missing[tgl]="examples/rnnlm.lua not found"; fi ;;
    rnnlm)
      cand=
      if [ -n "${RNNLM:-}" ]; then
        if [ -f "$RNNLM" ] && [ -x "$RNNLM" ]; then cand=$RNNLM
        else missing[rnnlm]="RNNLM=$RNNLM is not an executable file"; fi
      elif cand=$(command -v rnnlm 2>/dev/null); then :
      else missing[rnnlm]="not found: set RNNLM=/path/to/rnnlm or put rnnlm on PATH (bench/README.md tells how to build RNNLM 0.3e by hand)"; cand=
      fi
      if [ -n "$cand" ]; then
        # RNNLM prints its banner and options when run without arguments
        banner=$("$cand" 2>&1 < /dev/null | head -3 || true)
        if grep -q 'language modeling toolkit' <<< "$banner"; then
          RNNLM_BIN=$(cd "$(dirname "$cand")" && pwd)/$(basename "$cand")
          version[rnnlm]=$(sed -n 's/.*toolkit v *\([^ ]*\).*/\1/p' <<< "$banner" | head -1)
          [ -n "${version[rnnlm]}" ] || version[rnnlm]=unknown
        else
          missing[rnnlm]="$cand does not print RNNLM's banner (not RNNLM?)"
        fi
      fi ;;
    *) echo "bench/run rnnlm: unknown system '$s' (known: tgl rnnlm)" >&2; exit 2 ;;
  esac
done
run_systems=()
for s in $systems; do [ -z "${version[$s]:-}" ] || run_systems+=("$s"); done
rnnlm_cflags=${RNNLM_CFLAGS:-}
if [ -z "$rnnlm_cflags" ] && [ -n "$RNNLM_BIN" ]; then
  f=$(dirname "$RNNLM_BIN")/build_flags.txt
  if [ -f "$f" ]; then rnnlm_cflags=$(head -1 "$f"); else rnnlm_cflags="unknown (set RNNLM_CFLAGS)"; fi
fi
precision=float32; [ $double = 0 ] || precision=float64

mkdir -p "$out"
log=$out/$name.log; csv=$out/$name.csv; meta=$out/${name}_meta.csv
: > "$log"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_rnnlm.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# The corpus, made once (not when nothing can run).
if [ ${#run_systems[@]} -gt 0 ] && ! [ -f "$cdir/train.txt" ]; then
  echo "== corpus: $cdir"
  case "$corpus" in
    fortunes) "$TGL" "$root/scripts/corpus.lua" fortunes "$cdir" --vocab "$vocab" | tee -a "$log" ;;
    zipf) "$TGL" "$root/scripts/corpus.lua" zipf "$cdir" --vocab "$vocab" --words "$words" --seed "$seed" | tee -a "$log" ;;
  esac
fi

train_words() { awk '{ n += NF + 1 } END { print n + 0 }' "$1"; }   # words + sentence ends, as RNNLM counts
train_file() {   # limit (0: none) -> path of train.txt, or of its first sentences up to limit words
  local n=$1 f
  if [ "$n" = 0 ]; then echo "$cdir/train.txt"; return; fi
  mkdir -p "$ddir"
  f=$ddir/train.max$n.txt
  [ "$f" -nt "$cdir/train.txt" ] || awk -v n="$n" '{ print; c += NF + 1; if (c >= n) exit }' "$cdir/train.txt" > "$f"
  echo "$f"
}
# train-file -> valid.txt with every word the training file lacks written
# <unk>: RNNLM leaves such words out of its perplexity (and feeds no input
# for them), tgl maps them to <unk>; mapped beforehand, both score the same
# words (fortunes' full train.txt already has every valid.txt word)
valid_file() {
  local f
  mkdir -p "$ddir"
  f=$ddir/$(basename "${1%.txt}").valid.txt
  [ "$f" -nt "$1" ] && [ "$f" -nt "$cdir/valid.txt" ] || awk 'NR == FNR { for (i = 1; i <= NF; i++) v[$i] = 1; next }
                      { for (i = 1; i <= NF; i++) if (!($i in v)) $i = "<unk>"; print }' "$1" "$cdir/valid.txt" > "$f"
  echo "$f"
}

{
  echo "key,value"
  echo "date,$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "cpu,$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//;s/,/ /g') ($(nproc) cores)"
  echo "tgl_commit,$(cd "$root" && git rev-parse --short HEAD 2>/dev/null)$(cd "$root" && git diff --quiet HEAD -- src include lua host examples CMakeLists.txt 2>/dev/null || echo ' + uncommitted changes')"
  echo "tgl_precision,$precision"
  [ -z "$RNNLM_BIN" ] || { echo "rnnlm_bin,$RNNLM_BIN"; echo "rnnlm_cflags,$(sed 's/,/ /g' <<< "$rnnlm_cflags")"; }
  echo "corpus,$(sed 's/,/ /g' <<< "$corpus")$([ "$corpus" = fortunes ] && echo " (vocab $vocab)")$([ "$corpus" = zipf ] && echo " (vocab $vocab words $words seed $seed)")"
  echo "corpus_dir,$cdir"
  echo "settings,bptt 4 bptt-block 10 rand-seed 1 one thread"
  echo "max_words,$max_words"
  echo "max_words_full,$max_words_full"
  echo "load_before,$(cut -d' ' -f1-3 /proc/loadavg)"
  for s in $systems; do
    [ -z "${version[$s]:-}" ] || echo "version.$s,${version[$s]}"
    [ -z "${missing[$s]:-}" ] || echo "missing.$s,$(sed 's/,/;/g' <<< "${missing[$s]}")"
  done
} > "$meta"

# system hidden class mode(one_iter|converge) train-file: one run, one CSV row
run_cell() {
  local s=$1 h=$2 c=$3 mode=$4 train=$5 valid=$6 rc=0
  local env=(env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TGL_NUM_THREADS=1 $(pin 1))
  local common=(-train "$train" -valid "$valid" -hidden "$h" -class "$c" -bptt 4 -bptt-block 10 -rand-seed 1 -debug 2)
  [ "$mode" = converge ] || common+=(-one-iter)
  local cmd vlog=
  rm -f "$tmp"/model*
  case "$s" in
    tgl) cmd=("$TGL" "$example" "${common[@]}" -rnnlm "$tmp/model.npz" -threads 1)
         [ $double = 0 ] || cmd+=(-double) ;;
    rnnlm) cmd=("$RNNLM_BIN" "${common[@]}" -rnnlm "$tmp/model") ;;
  esac
  echo "-- $s hidden=$h class=$c $mode: ${cmd[*]}" >> "$log"
  # bash's `time`: elapsed and CPU seconds, for the share of a core the
  # run had (RNNLM's words/s is over CPU time, tgl's over elapsed time)
  local TIMEFORMAT='%R %U %S'
  { time "${env[@]}" timeout "$tmo" "${cmd[@]}" > "$tmp/train.log" 2>&1; } 2> "$tmp/time.txt" || rc=$?
  local wall=0 cpu=0
  read -r wall cpu < <(awk '{ printf "%.1f %.0f\n", $1, ($1 > 0) ? 100 * ($2 + $3) / $1 : 0 }' "$tmp/time.txt") || true
  if [ "$s" = rnnlm ] && [ "$mode" = one_iter ] && [ $rc = 0 ]; then
    # -one-iter skips RNNLM's validation: score valid.txt with the saved model
    vlog=$tmp/valid.log
    echo "-- rnnlm -test: $RNNLM_BIN -rnnlm $tmp/model -test $valid" >> "$log"
    "${env[@]}" timeout "$tmo" "$RNNLM_BIN" -rnnlm "$tmp/model" -test "$valid" > "$vlog" 2>&1 || rc=$?
  fi
  tr '\r' '\n' < "$tmp/train.log" >> "$log"
  [ -z "$vlog" ] || cat "$vlog" >> "$log"
  "$TGL" "$here/lib/rnnlm_report.lua" --row "$s" "$mode" "$h" "$c" "$(train_words "$train")" "$wall" "$cpu" "$rc" \
    "$tmp/train.log" $vlog >> "$csv.tmp"
  sample_load
  printf '  %-5s hidden=%-4d class=%-4d %-8s %6ss (cpu %s%%)  load %s  %s\n' "$s" "$h" "$c" "$mode" "$wall" "$cpu" \
    "$(cut -d' ' -f1 /proc/loadavg)" "$(tail -1 "$csv.tmp" | awk -F, '{ printf "%s words/s, valid ppl %s%s", $8, $9, ($14 != "" ? "  (" $14 ")" : "") }')"
}

load_max=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load_max" 'BEGIN { exit !(l > 0.5) }'; then
  echo "bench/run: warning: load average $load_max before the run: other work on the machine skews the figures" >&2
fi
echo "== rnnlm: ${run_systems[*]} (missing: ${!missing[*]}); tgl $precision; corpus $cdir"
for s in "${!missing[@]}"; do echo "   $s: missing (${missing[$s]})"; done
: > "$csv.tmp"
start=$SECONDS
flip=0
cell() {   # hidden class mode limit: every system once, the order flipping
  local h=$1 c=$2 mode=$3 train valid i n=${#run_systems[@]}
  train=$(train_file "$4")
  valid=$(valid_file "$train")
  for ((i = 0; i < n; i++)); do run_cell "${run_systems[$(((i + flip) % n))]}" "$h" "$c" "$mode" "$train" "$valid"; done
  flip=$((flip + 1))
}
if [ ${#run_systems[@]} -gt 0 ]; then
  for c in "${klist[@]}"; do
    for h in "${hlist[@]}"; do
      lim=$max_words
      if [ "$c" = 1 ] && [ "$max_words_full" != 0 ] && { [ "$lim" = 0 ] || [ "$max_words_full" -lt "$lim" ]; }; then lim=$max_words_full; fi
      cell "$h" "$c" one_iter "$lim"
    done
  done
  [ -z "$converge" ] || cell "$converge" "${klist[0]}" converge "$max_words"
fi
{ "$TGL" "$here/lib/rnnlm_report.lua" --header; cat "$csv.tmp"; } > "$csv"
rm -f "$csv.tmp"
sample_load
{ echo "load_after,$(cut -d' ' -f1-3 /proc/loadavg)"; echo "load_max,$load_max"; echo "run_seconds,$((SECONDS - start))"; } >> "$meta"
echo "== ran in $((SECONDS - start)) s; wrote $csv"
"$TGL" "$here/lib/rnnlm_report.lua" "$csv" "$meta" "$out/$name.md" "$out/$name.svg"
