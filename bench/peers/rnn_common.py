"""bench/peers/rnn_common.py — what the Python peers of bench/rnn.lua share.

The work (bench/rnn.lua has the details; the numbers are repeated here):
an Elman network, per cell hidden H x input/output V; 100 sequences of
T = 100 word ids; batch 1, float32; e = Wx[x] + b for all steps (a row
lookup: the numbers of one_hot(x) . Wx), h_t = sigmoid(e_t + h_{t-1} Wh),
h_0 = 0, cost = mean over t of -log softmax(h_t Wy + by)[y_t]; plain SGD
(lr 0.01), one update per sequence (full BPTT), the sequences in turn.
Data DIR/rnn_V<V>.npz (x, y: 100 x 100 int32, 0-based) and initial weights
DIR/rnn_H<H>_V<V>.npz, written by `tgl bench/rnn.lua --make-data DIR`.
Check: the loss of sequence 1 before and after CHECK_STEPS SGD steps on it.
Timing: scan_common.measure (bench/lib/stats.lua's rules), repeats
shortened under --budget as bench/rnn.lua does (`min_time_for`).
Output: CSV rows (CSV_HEADER, as bench/rnn.lua --csv).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import REPEATS, MIN_TIME, jax_cpu_env, median, setup_threads  # noqa: E402,F401
from scan_common import measure, emit  # noqa: E402,F401

T, NSEQ, LR, CHECK_STEPS = 100, 100, 0.01, 10
NAMES = ['Wx', 'Wh', 'b', 'Wy', 'by']
CSV_HEADER = ('system,variant,hidden,vocab,threads,unit,median,min,max,spread_pct,repeats,values,'
              'loss_before,loss_after,note')


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument('--hidden', default='50,100,500,1500')
    p.add_argument('--vocab', default='10,54,3000')
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--data', required=True)
    p.add_argument('--repeats', type=int, default=REPEATS)
    p.add_argument('--min-time', type=float, default=MIN_TIME)
    p.add_argument('--budget', type=float, default=0.0)
    p.add_argument('--system', default=None)
    p.add_argument('--header', action='store_true')
    a = p.parse_args()
    a.hidden = [int(v) for v in a.hidden.split(',')]
    a.vocab = [int(v) for v in a.vocab.split(',')]
    return a


def load_cell(data_dir, H, V):
    """(x, y, weights): x, y NSEQ x T int64 0-based; weights float32 in NAMES order."""
    import numpy as np
    s = np.load(os.path.join(data_dir, f'rnn_V{V}.npz'))
    w = np.load(os.path.join(data_dir, f'rnn_H{H}_V{V}.npz'))
    x = np.ascontiguousarray(s['x'], dtype=np.int64)
    y = np.ascontiguousarray(s['y'], dtype=np.int64)
    return x, y, [np.ascontiguousarray(w[k], dtype=np.float32) for k in NAMES]


def min_time_for(args, sec_per_seq, variants=1):
    """bench/rnn.lua's min_time_for: the repeats' length under --budget."""
    mt = args.min_time
    if args.budget > 0:
        mt = min(mt, args.budget / (variants * (args.repeats + 1.5)))
    return max(mt, sec_per_seq * 0.5)


def row(system, variant, H, V, threads, values, loss0, loss1, note=''):
    med, lo, hi = median(values), min(values), max(values)
    spread = 100 * (hi - lo) / abs(med) if med else 0.0
    return (f'{system},{variant},{H},{V},{threads},steps/s,{med:.6g},{lo:.6g},{hi:.6g},{spread:.2f},'
            f'{len(values)},{";".join(f"{v:.6g}" for v in values)},{loss0:.6f},{loss1:.6f},{note}')


def run_cell(system, variant, args, H, V, train, evaluate, reset, sync, variants=1):
    """The check and the timing of one cell: train(k) one SGD step on
    sequence k (0-based), evaluate(k) its loss, reset() the initial weights,
    sync() waits for queued work.  Emits the row."""
    import time
    loss0 = float(evaluate(0))
    for _ in range(CHECK_STEPS):
        train(0)
    loss1 = float(evaluate(0))
    reset()
    t0 = time.perf_counter()
    train(1)
    sync()
    mt = min_time_for(args, time.perf_counter() - t0, variants)
    st = {'pos': 0}

    def body(n):
        p = st['pos']
        for _ in range(n):
            p = (p + 1) % NSEQ
            train(p)
        sync()
        st['pos'] = p

    per, _ = measure(body, args.repeats, mt, warmup=2)
    note = f'repeats of {mt:.3g} s (budget)' if mt < args.min_time else ''
    emit(row(system, variant, H, V, args.threads, [T / p for p in per], loss0, loss1, note))
