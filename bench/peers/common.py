"""bench/peers/common.py — what the Python peers of bench/mlp.lua share.

The same work as bench/mlp.lua (see bench/lib/mlp_common.lua, whose numbers
are repeated here): models 784-10, 784-500-10, 784-1000x3-10, tanh hidden
units, softmax + negative log-likelihood (mean over the minibatch), plain
SGD with learning rate 0.01, float32, no gradient with respect to the input.
Data and initial weights are read from the .npz files that
`tgl bench/mlp.lua --make-data DIR` wrote, so every system starts from the
same numbers.  A pass over the 6000 examples is timed after a warm-up of
ceil(600 / batch) steps (at least 2), after which the weights are reset.

Threads: set them before the process starts (bench/run does):
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS; each peer also sets
its own knob (torch.set_num_threads, XLA_FLAGS).  `setup_threads` fills in
the environment variables that are not set yet, before NumPy is imported.

A peer module defines `SYSTEM`, `VARIANTS` (name -> factory) and calls
`main(SYSTEM, VARIANTS)`; a factory `make(model, init, X, y, B, lr)` returns
an object with run(k0, n) (steps k0..k0+n-1, 0-based), sync(), reset() and
eval_loss() (mean loss on all 6000 examples), or raises `Missing(reason)`.
Output: the CSV rows of bench/mlp.lua; `#missing,system,variant,reason`
lines for variants that cannot run here.
"""
import argparse
import math
import os
import sys
import time

N_EXAMPLES, N_IN, N_OUT = 6000, 784, 10
LR = 0.01
WARMUP_EXAMPLES = 600
CHUNKS = 20
MODELS = {
    'logreg': [784, 10],
    'mlp1': [784, 500, 10],
    'mlp3': [784, 1000, 1000, 1000, 10],
}
CSV_HEADER = ('system,variant,model,batch,threads,examples,seconds,examples_per_s,'
              'loss_before,loss_after,loss_down')


class Missing(Exception):
    """A variant that cannot run on this machine (reported, never faked)."""


def parse_args(variants):
    p = argparse.ArgumentParser()
    p.add_argument('--models', default='logreg,mlp1,mlp3')
    p.add_argument('--batches', default='1,10,60,256')
    p.add_argument('--variants', default=','.join(variants))
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--data', required=True)
    p.add_argument('--budget', type=float, default=0.0)
    p.add_argument('--header', action='store_true')
    return p.parse_args()


def setup_threads(n):
    for k in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ.setdefault(k, str(n))
        if os.environ[k] != str(n):
            print(f'warning: {k}={os.environ[k]} but --threads {n}', file=sys.stderr)


def load_data(data_dir):
    import numpy as np
    d = np.load(os.path.join(data_dir, 'data.npz'))
    X = np.ascontiguousarray(d['X'], dtype=np.float32)
    y = np.ascontiguousarray(d['y'], dtype=np.int64)          # 0-based labels
    return X, y


def load_init(data_dir, model):
    import numpy as np
    d = np.load(os.path.join(data_dir, f'init_{model}.npz'))
    n = len(MODELS[model]) - 1
    return [(np.array(d[f'W{l}'], np.float32), np.array(d[f'b{l}'], np.float32)) for l in range(1, n + 1)]


def timed_pass(nb, budget, run, sync):
    chunk = max(1, math.ceil(nb / CHUNKS))
    done, t0, dt = 0, time.perf_counter(), 0.0
    while done < nb:
        n = min(chunk, nb - done)
        run(done, n)
        done += n
        sync()
        dt = time.perf_counter() - t0
        if budget > 0 and dt > budget:
            break
    return done, dt


def csv_row(system, variant, model, B, threads, examples, seconds, loss0, loss1):
    return (f'{system},{variant},{model},{B},{threads},{examples},{seconds:.6f},'
            f'{examples / seconds:.1f},{loss0:.6f},{loss1:.6f},{"yes" if loss1 < loss0 else "NO"}')


def main(system, variants, version=''):
    args = parse_args(list(variants))
    setup_threads(args.threads)
    X, y = load_data(args.data)
    if args.header:
        print(CSV_HEADER)
    sys.stdout.flush()
    for model in args.models.split(','):
        init = load_init(args.data, model)
        for B in [int(b) for b in args.batches.split(',')]:
            nb = N_EXAMPLES // B
            for variant in args.variants.split(','):
                try:
                    t = variants[variant](model, init, X, y, B, LR)
                except Missing as e:
                    print(f'#missing,{system},{variant},{e}', flush=True)
                    continue
                nwarm = max(2, min(nb, math.ceil(WARMUP_EXAMPLES / B)))
                t.run(0, nwarm)
                t.sync()
                t.reset()
                loss0 = t.eval_loss()
                steps, seconds = timed_pass(nb, args.budget, t.run, t.sync)
                loss1 = t.eval_loss()
                print(csv_row(system, variant, model, B, args.threads, steps * B, seconds, loss0, loss1),
                      flush=True)
