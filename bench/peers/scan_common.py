"""bench/peers/scan_common.py — what the Python peers of bench/scan.lua share.

The work (bench/scan.lua has the details; the numbers are repeated here):
  overhead  h = h + 1 on a 1-element float64 vector, ns per step
  rnn       Elman RNN 100-100-10, 100 time steps, batch 1, float32,
            cost = mean((h Wy + by - y)^2), forward + BPTT + SGD (lr 0.01)
            per call; steps/s = 100 x sequences per second.  Data and
            initial weights from DIR/scan_rnn.npz (`tgl bench/scan.lua
            --make-data DIR`); the loss before and after 20 SGD steps is
            reported so that bench/run can compare it with tgl's.
Timing: `measure` repeats bench/lib/stats.lua's M.measure: body(n) runs n
iterations; n doubles from 1 until a run takes min_time / 4, is scaled up
with a 20% margin to min_time, then R repeats; the figure is the median.
Output: CSV rows (CSV_HEADER, the same as bench/scan.lua --csv), and
`#missing,system,variant,reason` lines for variants that cannot run.
"""
import argparse
import gc
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPEATS, MIN_TIME, jax_cpu_env, median, setup_threads  # noqa: E402,F401

N_OVERHEAD = 1000000
T, N_IN, N_H, N_OUT = 100, 100, 100, 10
LR, CHECK_STEPS = 0.01, 20
NAMES = ['Wx', 'Wh', 'b', 'Wy', 'by']
CSV_HEADER = ('system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,'
              'loss_before,loss_after,note')


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument('--cases', default='overhead,rnn')
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--data', default=None)
    p.add_argument('--repeats', type=int, default=REPEATS)
    p.add_argument('--min-time', type=float, default=MIN_TIME)
    p.add_argument('--system', default=None)
    p.add_argument('--header', action='store_true')
    return p.parse_args()


def load_rnn(data_dir):
    import numpy as np
    if data_dir is None:
        raise SystemExit('--data DIR is needed for the rnn case (tgl bench/scan.lua --make-data DIR)')
    d = np.load(os.path.join(data_dir, 'scan_rnn.npz'))
    return {k: np.ascontiguousarray(d[k], dtype=np.float32) for k in d.files}


def measure(body, repeats, min_time, warmup=1):
    """Seconds per iteration of each repeat, and n (iterations per repeat)."""
    body(warmup)
    gc.collect()
    n = 1
    while True:
        t0 = time.perf_counter()
        body(n)
        dt = time.perf_counter() - t0
        if dt >= min_time / 4 or n >= 2 ** 40:
            break
        n *= 2
    if dt < min_time:
        n = math.ceil(n * 1.2 * min_time / max(dt, 1e-9))
    per = []
    for _ in range(repeats):
        gc.collect()
        t0 = time.perf_counter()
        body(n)
        per.append((time.perf_counter() - t0) / n)
    return per, n


def row(system, variant, case, threads, unit, values, loss_before=None, loss_after=None, note=''):
    med, lo, hi = median(values), min(values), max(values)
    spread = 100 * (hi - lo) / abs(med) if med else 0.0
    lb = '' if loss_before is None else f'{loss_before:.6f}'
    la = '' if loss_after is None else f'{loss_after:.6f}'
    return (f'{system},{variant},{case},{threads},{unit},{med:.6g},{lo:.6g},{hi:.6g},{spread:.2f},'
            f'{len(values)},{";".join(f"{v:.6g}" for v in values)},{lb},{la},{note}')


def emit(line):
    print(line, flush=True)
