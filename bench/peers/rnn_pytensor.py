"""bench/peers/rnn_pytensor.py — bench/rnn.lua's Elman RNN in PyTensor (Theano's
successor), the paper's own way: pytensor.scan forward, pytensor.grad through
the scan, SGD updates, one compiled function per sequence; mode FAST_RUN (the
C backend, CVM linker), BLAS through -lopenblas as bench/peers/mlp_pytensor.py.

  trust_input  f(x, y) per sequence with f.trust_input = True
Threads: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS (set by bench/run).
Compiled modules are cached in bench/.cache/pytensor (the first run compiles
scan's C code: slow once).
  bench/.venv/bin/python bench/peers/rnn_pytensor.py --data DIR [--hidden ..] [--vocab ..] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rnn_common as rc  # noqa: E402
import mlp_pytensor  # noqa: E402  (its _import: PYTENSOR_FLAGS, cache, BLAS)


def main():
    args = rc.parse_args()
    system = args.system or 'pytensor'
    rc.setup_threads(args.threads)
    pytensor = mlp_pytensor._import()
    import numpy as np
    import pytensor.tensor as pt
    if args.header:
        print(rc.CSV_HEADER)
    for V in args.vocab:
        for H in args.hidden:
            x_np, y_np, init = rc.load_cell(args.data, H, V)
            xs = [np.ascontiguousarray(x_np[k], dtype='int32') for k in range(rc.NSEQ)]
            ys = [np.ascontiguousarray(y_np[k], dtype='int32') for k in range(rc.NSEQ)]
            params = [pytensor.shared(a.copy(), n) for a, n in zip(init, rc.NAMES)]
            Wx, Wh, b, Wy, by = params
            x, y = pt.ivector('x'), pt.ivector('y')
            e = Wx[x] + b
            hs, _ = pytensor.scan(lambda e_t, h, W: pt.sigmoid(e_t + pt.dot(h, W)), sequences=[e],
                                  outputs_info=[pt.zeros((H,), dtype='float32')], non_sequences=[Wh])
            logp = pt.special.log_softmax(pt.dot(hs, Wy) + by, axis=-1)
            cost = -pt.mean(logp[pt.arange(rc.T), y])
            grads = pytensor.grad(cost, params)
            lr = np.float32(rc.LR)
            f = pytensor.function([x, y], cost, updates=[(p, p - lr * g) for p, g in zip(params, grads)])
            f.trust_input = True
            ev = pytensor.function([x, y], cost)

            def reset():
                for p, a in zip(params, init):
                    p.set_value(a.copy())

            rc.run_cell(system, 'trust_input', args, H, V, lambda k: f(xs[k], ys[k]),
                        lambda k: ev(xs[k], ys[k]), reset, lambda: None)


if __name__ == '__main__':
    main()
