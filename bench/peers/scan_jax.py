"""bench/peers/scan_jax.py — bench/scan.lua's overhead and rnn cases in JAX (CPU).

  overhead/scan     jit of lax.scan(h + 1) for 10^6 steps (carry only), ns per step
  overhead/py_loop  a Python loop calling a jitted h + 1 (dispatch per step);
                    timed per call (n chosen by `measure`), not 10^6 per repeat
  rnn/jit           one jitted step per sequence: lax.scan forward, value_and_grad
                    (BPTT), SGD; parameters donated
  rnn/loop          a jitted lax.fori_loop of N such steps (JAX's C outer loop,
                    the analogue of tgl's fn{n_calls})
Threads: as bench/peers/mlp_jax.py: for 1 thread XLA_FLAGS gets
"--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1" before
jax is imported; bench/run also pins the process with taskset.
  bench/.venv/bin/python bench/peers/scan_jax.py --data DIR [--cases overhead,rnn] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scan_common as sc  # noqa: E402


def main():
    args = sc.parse_args()
    system = args.system or 'jax'
    sc.setup_threads(args.threads)
    sc.jax_cpu_env(args.threads)
    import warnings
    warnings.filterwarnings('ignore', message='.*donated buffers.*')
    import jax
    jax.config.update('jax_enable_x64', True)      # the overhead case is float64
    import jax.numpy as jnp
    import numpy as np
    from jax import lax
    R, S = args.repeats, args.min_time
    cases = args.cases.split(',')
    if args.header:
        print(sc.CSV_HEADER)

    if 'overhead' in cases:
        N = sc.N_OVERHEAD
        h0 = jax.device_put(np.zeros(1, np.float64))

        @jax.jit
        def count(h):
            return lax.scan(lambda c, _: (c + 1, None), h, None, length=N)[0]

        r = count(h0)
        assert float(r[0]) == N, r

        def body(n):
            for _ in range(n):
                r = count(h0)
            r.block_until_ready()

        per, _ = sc.measure(body, R, S)
        sc.emit(sc.row(system, 'scan', 'overhead', args.threads, 'ns/step', [p / N * 1e9 for p in per]))

        inc = jax.jit(lambda h: h + 1)
        st = {'h': inc(h0)}

        def body2(n):
            h = st['h']
            for _ in range(n):
                h = inc(h)
            h.block_until_ready()
            st['h'] = h

        per, _ = sc.measure(body2, R, S, warmup=1000)
        sc.emit(sc.row(system, 'py_loop', 'overhead', args.threads, 'ns/step', [p * 1e9 for p in per]))

    if 'rnn' in cases:
        d = sc.load_rnn(args.data)
        x, y = jax.device_put(d['x']), jax.device_put(d['y'])
        init = tuple(d[k] for k in sc.NAMES)
        lr = sc.LR

        def loss_fn(params, x, y):
            Wx, Wh, b, Wy, by = params

            def step(h, x_t):
                h = jnp.tanh(x_t @ Wx + h @ Wh + b)
                return h, h

            _, hs = lax.scan(step, jnp.zeros(sc.N_H, jnp.float32), x)
            return jnp.mean((hs @ Wy + by - y) ** 2)

        def step(params, x, y):
            loss, g = jax.value_and_grad(loss_fn)(params, x, y)
            return tuple(p - lr * gp for p, gp in zip(params, g)), loss

        train = jax.jit(step, donate_argnums=0)
        evaluate = jax.jit(loss_fn)
        run_n = jax.jit(lambda params, x, y, n: lax.fori_loop(0, n, lambda i, p: step(p, x, y)[0], params),
                        donate_argnums=0)

        def reset():
            return tuple(jax.device_put(a.copy()) for a in init)

        params = reset()
        loss0 = float(evaluate(params, x, y))
        for _ in range(sc.CHECK_STEPS):
            params, _ = train(params, x, y)
        loss1 = float(evaluate(params, x, y))
        st = {'p': params}

        def body(n):
            p = st['p']
            for _ in range(n):
                p, _ = train(p, x, y)
            jax.block_until_ready(p)
            st['p'] = p

        per, _ = sc.measure(body, R, S, warmup=5)
        sc.emit(sc.row(system, 'jit', 'rnn', args.threads, 'steps/s', [sc.T / p for p in per], loss0, loss1))

        st['p'] = reset()

        def body2(n):
            st['p'] = run_n(st['p'], x, y, n)
            jax.block_until_ready(st['p'])

        per, _ = sc.measure(body2, R, S, warmup=5)
        sc.emit(sc.row(system, 'loop', 'rnn', args.threads, 'steps/s', [sc.T / p for p in per], loss0, loss1))


if __name__ == '__main__':
    main()
