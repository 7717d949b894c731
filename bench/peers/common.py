"""bench/peers/common.py — what the Python peers of bench/mlp.lua share.

The same work as bench/mlp.lua (see bench/lib/mlp_common.lua, whose numbers
are repeated here): models 784-10, 784-500-10, 784-1000x3-10, tanh hidden
units, softmax + negative log-likelihood (mean over the minibatch), plain
SGD with learning rate 0.01, float32, no gradient with respect to the input.
Data and initial weights are read from the .npz files that
`tgl bench/mlp.lua --make-data DIR` wrote, so every system starts from the
same numbers.  Per cell (bench/lib/mlp_common.lua has the protocol): a
warm-up of ceil(600 / batch) steps (at least 2), the weights reset, the
check pass (one pass over the 6000 examples, the loss before and after it),
then `--repeats` timed repeats (default 5) of at least `--min-time` seconds
(default 0.5) each, training on through the data; the figure is the median
rate of the repeats, with min, max and spread.

Threads: set them before the process starts (bench/run does):
OPENBLAS_NUM_THREADS, OMP_NUM_THREADS, MKL_NUM_THREADS; each peer also sets
its own knob (torch.set_num_threads, XLA_FLAGS).  `setup_threads` fills in
the environment variables that are not set yet, before NumPy is imported.

A peer module defines `SYSTEM`, `VARIANTS` (name -> factory) and calls
`main(SYSTEM, VARIANTS)`; a factory `make(model, init, X, y, B, lr)` returns
an object with run(k0, n) (steps k0..k0+n-1, 0-based), sync(), reset() and
eval_loss() (mean loss on all 6000 examples), or raises `Missing(reason)`.
`--system NAME` relabels the rows.
Output: the CSV rows of bench/mlp.lua; `#missing,system,variant,reason`
lines for variants that cannot run here.
"""
import argparse
import gc
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
CSV_HEADER = ('system,variant,model,batch,threads,examples,seconds,examples_per_s,eps_min,eps_max,'
              'spread_pct,repeats,rates,check_examples,loss_before,loss_after,loss_down')
# bench/lib/stats.lua: the same defaults and environment variables
REPEATS = int(os.environ.get('TGL_BENCH_REPEATS', '5'))
MIN_TIME = float(os.environ.get('TGL_BENCH_MIN_TIME', '0.5'))


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
    p.add_argument('--repeats', type=int, default=REPEATS)
    p.add_argument('--min-time', type=float, default=MIN_TIME)
    p.add_argument('--system', default=None)
    p.add_argument('--header', action='store_true')
    return p.parse_args()


def setup_threads(n):
    for k in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS'):
        os.environ.setdefault(k, str(n))
        if os.environ[k] != str(n):
            print(f'warning: {k}={os.environ[k]} but --threads {n}', file=sys.stderr)


def jax_cpu_env(threads):
    """Sets JAX's environment before jax is imported: the CPU platform and,
    for one thread, XLA's own pool switched off."""
    os.environ.setdefault('JAX_PLATFORMS', 'cpu')
    if threads == 1:
        os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') + ' --xla_cpu_multi_thread_eigen=false '
                                   'intra_op_parallelism_threads=1').strip()


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


def check_pass(nb, budget, run, sync):
    """mlp_common.check_pass: one pass in CHUNKS chunks, cut after `budget` s."""
    chunk = max(1, math.ceil(nb / CHUNKS))
    done, t0, dt = 0, time.perf_counter(), 0.0
    while done < nb:
        n = min(chunk, nb - done)
        run(done, n)
        sync()
        done += n
        dt = time.perf_counter() - t0
        if budget > 0 and dt > budget:
            break
    return done, dt


def timed_repeats(nb, B, pos, steps_per_s, repeats, min_time, run, sync):
    """mlp_common.timed_repeats: examples/s of each repeat, total examples, seconds."""
    chunk = max(1, min(nb, int(steps_per_s * min_time / CHUNKS)))
    state = {'pos': pos % nb}

    def one_chunk():
        p = state['pos']
        n = min(chunk, nb - p)
        run(p, n)
        sync()
        state['pos'] = (p + n) % nb
        return n

    one_chunk()
    rates, examples, seconds = [], 0, 0.0
    for _ in range(repeats):
        gc.collect()
        steps, t0 = 0, time.perf_counter()
        while True:
            steps += one_chunk()
            dt = time.perf_counter() - t0
            if dt >= min_time:
                break
        rates.append(steps * B / dt)
        examples += steps * B
        seconds += dt
    return rates, examples, seconds


def median(xs):
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def csv_row(system, variant, model, B, threads, rates, examples, seconds, check_examples, loss0, loss1):
    med, lo, hi = median(rates), min(rates), max(rates)
    spread = 100 * (hi - lo) / med if med else 0.0
    return (f'{system},{variant},{model},{B},{threads},{examples},{seconds:.6f},'
            f'{med:.1f},{lo:.1f},{hi:.1f},{spread:.2f},{len(rates)},{";".join(f"{r:.1f}" for r in rates)},'
            f'{check_examples},{loss0:.6f},{loss1:.6f},{"yes" if loss1 < loss0 else "NO"}')


def main(system, variants, version=''):
    args = parse_args(list(variants))
    system = args.system or system
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
                steps, seconds = check_pass(nb, args.budget, t.run, t.sync)
                loss1 = t.eval_loss()
                rates, examples, tsec = timed_repeats(nb, B, steps, steps / seconds, args.repeats,
                                                      args.min_time, t.run, t.sync)
                print(csv_row(system, variant, model, B, args.threads, rates, examples, tsec,
                              steps * B, loss0, loss1), flush=True)
