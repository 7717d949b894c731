#!/usr/bin/env bash
# bench/gpu.sh — the CUDA backend proved on a machine with a GPU, in one run
# of under 8 minutes (GPU time is lent for minutes: prepare, then run once).
#
#   bench/gpu.sh [OUT]        (OUT: the results folder; default $OUT, else
#                              bench/results/gpu)
#
# Steps, each logged to its own file under OUT, with a summary (summary.md)
# written as it goes so that a run cut short still says how far it got:
#   1. the machine: nvidia-smi -L, the CPU, the load average;
#   2. the build: scripts/build.sh build-gpu with -DTGL_CUDA=ON -DTGL_TESTS=ON
#      -DTGL_GPU_TESTS=ON (Release; the GPU's architecture found at run time
#      by NVRTC, nothing compiled for a fixed one);
#   3. the GPU specs: every `gpu:` test (spec/CMakeLists.txt: the sim
#      device's spec list and the spec/cuda_*_spec.lua family specs, run with
#      TGL_DEVICE=cuda: every op with a device kernel against the CPU result,
#      gradients, Rop, scan, the MLP and RNN training steps, the allocator's
#      stress and out-of-memory recovery), in parallel, each under a timeout;
#   4. the benchmarks, each bounded in time: the paper's 784-1000x3-10 MLP at
#      batch 1, 60 and 256 (bench/mlp.lua variants cvm_nogc and n_calls, the
#      latter a bound step replayed as CUDA Graphs) on the GPU, its
#      cuBLAS-bound time per step (bench/gpu.lua: the step's 11 products
#      alone), PyTorch CUDA eager where torch with CUDA is installed
#      (bench/peers/mlp_torch.py with TGL_BENCH_DEVICE=cuda), and the paper's
#      RNN grid at hidden 500 and 1500 (bench/rnn.lua, and rnn_torch.py on
#      CUDA where installed);
#   5. the table (bench/lib/gpu_report.lua) into OUT/gpu.md.
# Exit status: 0 when the build and every GPU spec passed, 1 otherwise (the
# benchmarks run either way).  GPU_SPECS (a ctest regex, default '^gpu:')
# picks fewer specs, e.g. for a dry run of this script on the emulated GPU
# (TGL_CUDA_EMU=1 GPU_SPECS='^gpu:cuda_runtime' bench/gpu.sh /tmp/gpu-dry).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${1:-${OUT:-$root/bench/results/gpu}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
summary=$out/summary.md
t_start=$(date +%s)
say() { echo "- $(date -u +%T) (+$(( $(date +%s) - t_start )) s) $*" | tee -a "$summary"; }
: > "$summary"
echo "# bench/gpu.sh, $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')" >> "$summary"
status=0

# ---- 1. the machine ---------------------------------------------------------
{
  echo "## nvidia-smi -L"; nvidia-smi -L 2>&1 || echo "(no nvidia-smi)"
  echo "## nvidia-smi"; nvidia-smi 2>&1 | head -20 || true
  echo "## CPU"; lscpu 2>/dev/null | grep -E 'Model name|^CPU\(s\)' || true
  echo "## load"; cat /proc/loadavg
  echo "## toolkit"; (command -v nvcc && nvcc --version | tail -2) 2>&1 || echo "(no nvcc on PATH)"
} > "$out/machine.txt" 2>&1
say "machine: $(nvidia-smi -L 2>/dev/null | head -1 || echo 'no nvidia-smi'); load $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- 2. the build -------------------------------------------------------------
jobs=$(nproc 2>/dev/null || echo 4)
if ! scripts/build.sh build-gpu -DTGL_CUDA=ON -DTGL_TESTS=ON -DTGL_GPU_TESTS=ON \
     > "$out/build.log" 2>&1; then
  say "BUILD FAILED (build.log)"; tail -30 "$out/build.log" >> "$summary"; exit 1
fi
TGL=$root/build-gpu/tgl
say "built in $(( $(date +%s) - t_start )) s"
if ! "$TGL" -e "local tgl = require 'tgl'
  assert(tgl.cuda.is_available(), 'no CUDA device: ' .. tostring(tgl.cuda.why and tgl.cuda.why() or '?'))
  print(tgl.cuda.device_name())" > "$out/device.txt" 2>&1; then
  say "NO CUDA DEVICE: $(tail -1 "$out/device.txt")"; exit 1
fi
say "device: $(tail -1 "$out/device.txt")"

# ---- 3. the GPU specs -----------------------------------------------------------
export TGL_CACHE_DIR=$out/kcache
t0=$(date +%s)
(cd build-gpu && ctest -R "${GPU_SPECS:-^gpu:}" -j "$(( jobs < 8 ? jobs : 8 ))" --timeout 240 --output-on-failure) \
  > "$out/specs.log" 2>&1
rc=$?
say "GPU specs: $(grep -E 'tests passed|tests failed' "$out/specs.log" | tail -1) in $(( $(date +%s) - t0 )) s (specs.log)"
if [ $rc -ne 0 ]; then
  status=1
  grep -E '^\s*[0-9]+ - gpu:' "$out/specs.log" | sed 's/^/    /' >> "$summary"
fi

# ---- 4. the benchmarks ------------------------------------------------------------
export TGL_BENCH_REPEATS=${TGL_BENCH_REPEATS:-3} TGL_BENCH_MIN_TIME=${TGL_BENCH_MIN_TIME:-0.3}
data=$out/data
mkdir -p "$data"
"$TGL" bench/mlp.lua --make-data "$data" >> "$out/bench.log" 2>&1
"$TGL" bench/rnn.lua --make-data "$data" --hidden 500,1500 --vocab 10,3000 >> "$out/bench.log" 2>&1
have_torch=0
if python3 -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  have_torch=1
fi
say "PyTorch CUDA: $([ $have_torch = 1 ] && python3 -c 'import torch; print(torch.__version__)' || echo 'not installed here (missing)')"

t0=$(date +%s)
TGL_DEVICE=cuda timeout 150 "$TGL" bench/mlp.lua --models mlp3 --batches 1,60,256 \
  --variants cvm_nogc,n_calls --data "$data" --budget 5 --header \
  > "$out/mlp_tgl.csv" 2>> "$out/bench.log" || say "mlp (tgl) stopped: rc $? (bench.log)"
TGL_DEVICE=cuda timeout 60 "$TGL" bench/gpu.lua --batches 1,60,256 \
  > "$out/bound.csv" 2>> "$out/bench.log" || say "products-only (tgl) stopped: rc $?"
if [ $have_torch = 1 ]; then
  TGL_BENCH_DEVICE=cuda timeout 120 python3 bench/peers/mlp_torch.py --models mlp3 \
    --batches 1,60,256 --variants eager --data "$data" --budget 5 --header \
    > "$out/mlp_torch.csv" 2>> "$out/bench.log" || say "mlp (torch) stopped: rc $?"
fi
say "MLP benchmarks in $(( $(date +%s) - t0 )) s"

t0=$(date +%s)
TGL_DEVICE=cuda timeout 150 "$TGL" bench/rnn.lua --hidden 500,1500 --vocab 10,3000 --data "$data" \
  --budget 8 --csv --header > "$out/rnn_tgl.csv" 2>> "$out/bench.log" || say "rnn (tgl) stopped: rc $?"
if [ $have_torch = 1 ]; then
  TGL_BENCH_DEVICE=cuda timeout 120 python3 bench/peers/rnn_torch.py --hidden 500,1500 --vocab 10,3000 \
    --data "$data" --budget 8 --header > "$out/rnn_torch.csv" 2>> "$out/bench.log" \
    || say "rnn (torch) stopped: rc $?"
fi
say "RNN benchmarks in $(( $(date +%s) - t0 )) s"

# ---- 5. the table ------------------------------------------------------------------
"$TGL" bench/lib/gpu_report.lua "$out" "$(tail -1 "$out/device.txt")" > "$out/gpu.md" 2>> "$out/bench.log" \
  && cat "$out/gpu.md" >> "$summary"
say "done: status $status, $(( $(date +%s) - t_start )) s in all"
exit $status
