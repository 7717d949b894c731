"""bench/peers/mlp_jax.py — the MLP benchmark in JAX (CPU).

Variants:
  jit   one jax.jit step per minibatch, called from Python: the data live on
        the device and the step slices minibatch k itself
        (lax.dynamic_slice), the parameters are donated and returned
  loop  the analogue of tgl's fn{n_calls}: a jitted lax.fori_loop runs a
        chunk of steps without returning to Python
Threads: XLA_FLAGS is set before jax is imported: for 1 thread
"--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"; for
more, XLA's default pool (one thread per core: 2 here).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

_jax = None


def _import(threads):
    global _jax
    if _jax is None:
        common.jax_cpu_env(threads)
        import jax
        _jax = jax
    return _jax


class Jit:
    def __init__(self, model, init, X, y, B, lr):
        jax = _import(int(os.environ.get('OMP_NUM_THREADS', '1')))
        import jax.numpy as jnp
        from jax import lax
        self.jax, self.jnp = jax, jnp
        self.init = init
        self.X = jax.device_put(X)
        self.y = jax.device_put(y.astype('int32'))
        self.B = B
        L = len(init)

        def loss_fn(params, x, t):
            h = x
            for l in range(L):
                W, b = params[l]
                h = h @ W + b
                if l < L - 1:
                    h = jnp.tanh(h)
            logp = jax.nn.log_softmax(h)
            return -jnp.mean(jnp.take_along_axis(logp, t[:, None], axis=1))

        def step(params, X, y, k):
            x = lax.dynamic_slice_in_dim(X, k * B, B)
            t = lax.dynamic_slice_in_dim(y, k * B, B)
            loss, g = jax.value_and_grad(loss_fn)(params, x, t)
            params = jax.tree_util.tree_map(lambda p, gp: p - lr * gp, params, g)
            return params, loss

        self.loss_fn = jax.jit(loss_fn)
        self.step = jax.jit(step, donate_argnums=0)

        def run_n(params, X, y, k0, n):
            return lax.fori_loop(k0, k0 + n, lambda k, p: step(p, X, y, k)[0], params)

        self.run_n = jax.jit(run_n, donate_argnums=0)
        self.reset()

    def reset(self):
        self.params = [(self.jax.device_put(W), self.jax.device_put(b)) for W, b in self.init]

    def run(self, k0, n):
        step, X, y = self.step, self.X, self.y
        p = self.params
        for k in range(k0, k0 + n):
            p, _ = step(p, X, y, k)
        self.params = p

    def sync(self):
        self.jax.block_until_ready(self.params)

    def eval_loss(self):
        return float(self.loss_fn(self.params, self.X, self.y))


class Loop(Jit):
    def run(self, k0, n):
        self.params = self.run_n(self.params, self.X, self.y, k0, n)


if __name__ == '__main__':
    import warnings
    warnings.filterwarnings('ignore', message='.*donated buffers.*')
    common.main('jax', {'jit': Jit, 'loop': Loop})
