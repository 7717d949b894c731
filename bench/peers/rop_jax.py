"""bench/peers/rop_jax.py — bench/rop.lua's cases in JAX (CPU, jit).

  grad/jit  jax.jit(jax.grad(cost))
  gn/jit    jax.jit of: logits and J v by jax.jvp, H_L (J v), then J'(.) by
            jax.vjp (the product the issue names: jax.jvp + jax.vjp)
  hvp/jit   jax.jit of jax.jvp(jax.grad(cost)) (forward-over-reverse)
Threads: as bench/peers/mlp_jax.py (XLA_FLAGS for 1 thread, set before jax
is imported; bench/run pins the process with taskset).
  bench/.venv/bin/python bench/peers/rop_jax.py --data DIR [--cases grad,gn,hvp] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rop_common as rc  # noqa: E402


def main():
    args = rc.parse_args()
    system = args.system or 'jax'
    rc.setup_threads(args.threads)
    rc.jax_cpu_env(args.threads)
    import jax
    import jax.numpy as jnp
    x_np, y_np, p_np, v_np = rc.load(args.data)
    x, y = jnp.asarray(x_np), jnp.asarray(y_np)
    params = [jnp.asarray(p) for p in p_np]
    v = [jnp.asarray(a) for a in v_np]
    if args.header:
        print(rc.CSV_HEADER)

    def logits(ps, x):
        h = x
        n = len(ps) // 2
        for l in range(n):
            h = h @ ps[2 * l] + ps[2 * l + 1]
            if l < n - 1:
                h = jnp.tanh(h)
        return h

    def cost(ps, x, y):
        z = logits(ps, x)
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(z), y[:, None], axis=1))

    grad = jax.jit(jax.grad(cost))

    @jax.jit
    def gn(ps, v, x):
        f = lambda q: logits(q, x)  # noqa: E731
        z, jv = jax.jvp(f, (ps,), (v,))
        p = jax.nn.softmax(z)
        hjv = (p * jv - p * jnp.sum(p * jv, axis=1, keepdims=True)) / z.shape[0]
        _, pullback = jax.vjp(f, ps)
        return pullback(hjv)[0]

    @jax.jit
    def hvp(ps, v, x, y):
        return jax.jvp(lambda q: jax.grad(cost)(q, x, y), (ps,), (v,))[1]

    calls = {
        'grad': (lambda: grad(params, x, y), lambda out: rc.dot(out, out)),
        'gn': (lambda: gn(params, v, x), lambda out: rc.dot(v_np, out)),
        'hvp': (lambda: hvp(params, v, x, y), lambda out: rc.dot(v_np, out)),
    }
    for case in args.cases.split(','):
        call, check = calls[case]
        out = call()
        jax.block_until_ready(out)
        chk = check([jax.device_get(a) for a in out])

        def body(n):
            for _ in range(n):
                r = call()
            jax.block_until_ready(r)

        per, _ = rc.measure(body, args.repeats, args.min_time)
        rc.emit(rc.row(system, 'jit', case, args.threads, per, chk))


if __name__ == '__main__':
    main()
