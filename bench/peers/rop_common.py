"""bench/peers/rop_common.py — what the Python peers of bench/rop.lua share.

The work (bench/rop.lua has the details; the numbers are repeated here):
the 784-1000-1000-1000-10 tanh MLP (bench/mlp.lua's mlp3) on its first 60
examples, float32; logits = the last layer's output, cost = mean over rows
of the softmax crossentropy.  Cases, each one call timed:
  grad  the gradient of the cost wrt the 8 parameters
  gn    the Gauss-Newton product J' H_L J v (H_L: softmax crossentropy's
        Hessian wrt the logits, (p*w - p*sum(p*w)) / rows)
  hvp   the exact Hessian-vector product H v
Data: DIR/data.npz, DIR/init_mlp3.npz (tgl bench/mlp.lua --make-data DIR)
and the direction DIR/rop_v.npz (tgl bench/rop.lua --make-data DIR).
Timing: scan_common.measure (bench/lib/stats.lua's rules), ms per call.
Check column: grad |g|^2, gn v'Gv, hvp v'Hv (float64 sums), which
bench/run rop compares with tgl's.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPEATS, MIN_TIME, jax_cpu_env, median, setup_threads  # noqa: E402,F401
from scan_common import measure  # noqa: E402,F401

SIZES = [784, 1000, 1000, 1000, 10]
BATCH = 60
CSV_HEADER = 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,check,note'


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument('--cases', default='grad,gn,hvp')
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--data', required=True)
    p.add_argument('--variants', default=None)
    p.add_argument('--repeats', type=int, default=REPEATS)
    p.add_argument('--min-time', type=float, default=MIN_TIME)
    p.add_argument('--system', default=None)
    p.add_argument('--header', action='store_true')
    return p.parse_args()


def load(data_dir):
    """x (60, 784) float32, labels (60,) int64 0-based, params [W1, b1, ...], v likewise."""
    import numpy as np
    d = np.load(os.path.join(data_dir, 'data.npz'))
    x = np.ascontiguousarray(d['X'][:BATCH], dtype=np.float32)
    y = np.ascontiguousarray(d['y'][:BATCH], dtype=np.int64)
    init = np.load(os.path.join(data_dir, 'init_mlp3.npz'))
    vv = np.load(os.path.join(data_dir, 'rop_v.npz'))
    params, v = [], []
    for l in range(1, len(SIZES)):
        for k in ('W', 'b'):
            params.append(np.array(init[f'{k}{l}'], np.float32))
            v.append(np.array(vv[f'{k}{l}'], np.float32))
    return x, y, params, v


def dot(a, b):
    import numpy as np
    return float(sum(np.sum(np.asarray(p, np.float64) * np.asarray(q, np.float64)) for p, q in zip(a, b)))


def row(system, variant, case, threads, per_s, check, note=''):
    ms = [p * 1e3 for p in per_s]
    med, lo, hi = median(ms), min(ms), max(ms)
    spread = 100 * (hi - lo) / abs(med) if med else 0.0
    return (f'{system},{variant},{case},{threads},ms/call,{med:.6g},{lo:.6g},{hi:.6g},{spread:.2f},'
            f'{len(ms)},{";".join(f"{v:.6g}" for v in ms)},{check:.9g},{note}')


def emit(line):
    print(line, flush=True)
