"""bench/peers/mlp_pytensor.py — the MLP benchmark in PyTensor (Theano's
successor), default backend: mode FAST_RUN, the C backend with the CVM
linker, BLAS through -lopenblas (Debian's OpenBLAS, the one tgl uses).

The Theano tutorial way, as bench/mlp.lua: data in shared variables, a
symbolic minibatch index through `givens`.  Variants (the paper's):
  cvm          f(k) from Python, with PyTensor's input checks
  trust_input  f.trust_input = True, index arrays made once
  n_calls      no inputs: a shared step counter i (update i = i + 1) picks the
               minibatch, and f.vm(n_calls=N) runs N steps in PyTensor's C VM
Threads: OPENBLAS_NUM_THREADS / OMP_NUM_THREADS (PyTensor's own elementwise
ops are single-threaded unless openmp is on; it is off by default).
Compiled modules are cached in bench/.cache/pytensor.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

_here = os.path.dirname(os.path.abspath(__file__))
_pt = None


def _import():
    global _pt
    if _pt is None:
        flags = os.environ.get('PYTENSOR_FLAGS', '')
        cache = os.path.join(os.path.dirname(_here), '.cache', 'pytensor')
        extra = f'floatX=float32,base_compiledir={cache}'
        if 'blas__ldflags' not in flags:
            extra += ',blas__ldflags=-lopenblas'
        os.environ['PYTENSOR_FLAGS'] = (flags + ',' + extra).strip(',')
        import pytensor
        _pt = pytensor
    return _pt


class Cvm:
    variant = 'cvm'

    def __init__(self, model, init, X, y, B, lr):
        pytensor = _import()
        import numpy as np
        import pytensor.tensor as pt
        self.np = np
        self.init = init
        self.B = B
        if not hasattr(Cvm, '_data') or Cvm._data[0] is not X:
            Cvm._data = (X, pytensor.shared(X, 'X', borrow=True),
                         pytensor.shared(y.astype('int32'), 'y', borrow=True))
        _, Xs, ys = Cvm._data
        x, t = pt.matrix('x', dtype='float32'), pt.ivector('t')
        self.params = []
        h = x
        for l, (W, b) in enumerate(init):
            Ws = pytensor.shared(W.copy(), f'W{l + 1}')
            bs = pytensor.shared(b.copy(), f'b{l + 1}')
            self.params += [Ws, bs]
            h = pt.dot(h, Ws) + bs
            if l < len(init) - 1:
                h = pt.tanh(h)
        p = pt.special.softmax(h, axis=-1)
        cost = -pt.mean(pt.log(p)[pt.arange(t.shape[0]), t])
        grads = pytensor.grad(cost, self.params)
        updates = [(q, q - np.float32(lr) * g) for q, g in zip(self.params, grads)]
        self.eval = pytensor.function([], cost, givens={x: Xs, t: ys})
        self.build(pytensor, pt, x, t, Xs, ys, cost, updates)

    def build(self, pytensor, pt, x, t, Xs, ys, cost, updates):
        B = self.B
        k = pt.lscalar('k')
        self.f = pytensor.function([k], cost, updates=updates,
                                   givens={x: Xs[k * B:(k + 1) * B], t: ys[k * B:(k + 1) * B]})

    def run(self, k0, n):
        f = self.f
        for k in range(k0, k0 + n):
            f(k)

    def sync(self):
        pass

    def reset(self):
        for l, (W, b) in enumerate(self.init):
            self.params[2 * l].set_value(W.copy())
            self.params[2 * l + 1].set_value(b.copy())

    def eval_loss(self):
        return float(self.eval())


class TrustInput(Cvm):
    def build(self, *a):
        super().build(*a)
        self.f.trust_input = True
        np = self.np
        self.idx = [np.array(k, dtype='int64') for k in range(common.N_EXAMPLES // self.B)]

    def run(self, k0, n):
        f, idx = self.f, self.idx
        for k in range(k0, k0 + n):
            f(idx[k])


class NCalls(Cvm):
    def build(self, pytensor, pt, x, t, Xs, ys, cost, updates):
        B = self.B
        i = self.i = pytensor.shared(self.np.array(0, dtype='int64'), 'i')
        self.f = pytensor.function([], cost, updates=[(i, i + 1)] + updates,
                                   givens={x: Xs[i * B:(i + 1) * B], t: ys[i * B:(i + 1) * B]})
        if not hasattr(self.f, 'vm') or 'CVM' not in type(self.f.vm).__name__:
            raise common.Missing(f'the function is not run by the C VM ({type(getattr(self.f, "vm", None)).__name__})')

    def run(self, k0, n):
        if k0 == 0:
            self.i.set_value(self.np.array(0, dtype='int64'))
        self.f.vm(n_calls=n)


if __name__ == '__main__':
    common.main('pytensor', {'cvm': Cvm, 'trust_input': TrustInput, 'n_calls': NCalls})
