"""bench/peers/rnn_jax.py — bench/rnn.lua's Elman RNN in JAX (CPU).

  jit   one jitted step per sequence: e = Wx[x] + b, lax.scan forward,
        value_and_grad (BPTT), SGD; parameters donated
  loop  a jitted lax.fori_loop of N such steps on the last sequence (JAX's
        own outer loop: the analogue of tgl's fn{n_calls})
Threads: as bench/peers/scan_jax.py (XLA_FLAGS for 1 thread; bench/run pins).
  bench/.venv/bin/python bench/peers/rnn_jax.py --data DIR [--hidden ..] [--vocab ..] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rnn_common as rc  # noqa: E402


def main():
    args = rc.parse_args()
    system = args.system or 'jax'
    rc.setup_threads(args.threads)
    rc.jax_cpu_env(args.threads)
    import warnings
    warnings.filterwarnings('ignore', message='.*donated buffers.*')
    import jax
    import jax.numpy as jnp
    from jax import lax
    if args.header:
        print(rc.CSV_HEADER)

    def loss_fn(params, x, y):
        Wx, Wh, b, Wy, by = params
        e = Wx[x] + b

        def step(h, e_t):
            h = jax.nn.sigmoid(e_t + h @ Wh)
            return h, h

        _, hs = lax.scan(step, jnp.zeros(Wh.shape[0], jnp.float32), e)
        logp = jax.nn.log_softmax(hs @ Wy + by, axis=-1)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def sgd(params, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        return tuple(p - rc.LR * gp for p, gp in zip(params, g)), loss

    step_jit = jax.jit(sgd, donate_argnums=0)
    evaluate_jit = jax.jit(loss_fn)
    run_n = jax.jit(lambda params, x, y, n: lax.fori_loop(0, n, lambda i, p: sgd(p, x, y)[0], params),
                    donate_argnums=0)

    for V in args.vocab:
        for H in args.hidden:
            x, y, init = rc.load_cell(args.data, H, V)
            xs = [jax.device_put(x[k].astype('int32')) for k in range(rc.NSEQ)]
            ys = [jax.device_put(y[k].astype('int32')) for k in range(rc.NSEQ)]
            st = {}

            def reset():
                st['p'] = tuple(jax.device_put(a.copy()) for a in init)

            def train(k):
                st['p'], _ = step_jit(st['p'], xs[k], ys[k])

            def sync():
                jax.block_until_ready(st['p'])

            reset()
            rc.run_cell(system, 'jit', args, H, V, train, lambda k: evaluate_jit(st['p'], xs[k], ys[k]),
                        reset, sync, variants=2)
            # the loop variant: the same check numbers, then N steps inside one call
            reset()
            loss0 = float(evaluate_jit(st['p'], xs[0], ys[0]))
            st['p'] = run_n(st['p'], xs[0], ys[0], rc.CHECK_STEPS)
            loss1 = float(evaluate_jit(st['p'], xs[0], ys[0]))
            reset()
            import time
            t0 = time.perf_counter()
            st['p'] = run_n(st['p'], xs[1], ys[1], 1)
            sync()
            mt = rc.min_time_for(args, time.perf_counter() - t0, 2)

            def body(n):
                st['p'] = run_n(st['p'], xs[1], ys[1], n)
                sync()

            per, _ = rc.measure(body, args.repeats, mt, warmup=2)
            note = f'repeats of {mt:.3g} s (budget)' if mt < args.min_time else ''
            rc.emit(rc.row(system, 'loop', H, V, args.threads, [rc.T / p for p in per], loss0, loss1, note))


if __name__ == '__main__':
    main()
