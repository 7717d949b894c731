"""bench/peers/mlp_torch.py — the MLP benchmark in PyTorch.

Variants:
  eager    the model as torch ops: addmm + tanh, F.cross_entropy (log-softmax
           + NLL, mean), torch.autograd.grad w.r.t. the parameters only, and
           an in-place SGD update under no_grad
  compile  the same step through torch.compile (PyTorch >= 2.0); reported as
           missing where torch has no torch.compile (Debian 12's 1.13)
Threads: torch.set_num_threads(--threads) and set_num_interop_threads(1),
plus OMP/OPENBLAS/MKL_NUM_THREADS in the environment.
Device: TGL_BENCH_DEVICE=cuda runs on the GPU (data, weights and steps on
the device; float32 products exact: TF32 off, as tgl's default; a chunk
of steps ends with torch.cuda.synchronize()), for bench/gpu.sh.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


_THREADS_SET = False


def _torch(threads):
    global _THREADS_SET
    import torch
    if not _THREADS_SET:           # interop threads can be set only once per process
        torch.set_num_threads(threads)
        torch.set_num_interop_threads(1)
        _THREADS_SET = True
    return torch


class Eager:
    compiled = False

    def __init__(self, model, init, X, y, B, lr):
        torch = self.torch = _torch(int(os.environ.get('OMP_NUM_THREADS', '1')))
        import torch.nn.functional as F
        self.F = F
        self.init = init
        dev = self.device = os.environ.get('TGL_BENCH_DEVICE', 'cpu')
        if dev == 'cuda':
            if not torch.cuda.is_available():
                raise common.Missing('torch has no CUDA device here')
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.backends.cudnn.allow_tf32 = False
        self.X = torch.from_numpy(X).to(dev)
        self.y = torch.from_numpy(y).to(dev)
        self.B, self.lr = B, lr
        self.params = []
        for W, b in init:
            self.params += [torch.tensor(W, requires_grad=True, device=dev),
                            torch.tensor(b, requires_grad=True, device=dev)]
        self.step = self.make_step()

    def make_step(self):
        torch, F, params, lr = self.torch, self.F, self.params, self.lr
        L = len(params) // 2

        def loss_fn(x, t):
            h = x
            for l in range(L):
                h = torch.addmm(params[2 * l + 1], h, params[2 * l])
                if l < L - 1:
                    h = torch.tanh(h)
            return F.cross_entropy(h, t)

        def step(x, t):
            loss = loss_fn(x, t)
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.add_(g, alpha=-lr)
            return loss

        self.loss_fn = loss_fn
        return step

    def run(self, k0, n):
        B, X, y, step = self.B, self.X, self.y, self.step
        for k in range(k0, k0 + n):
            step(X[k * B:(k + 1) * B], y[k * B:(k + 1) * B])

    def sync(self):
        if self.device == 'cuda':
            self.torch.cuda.synchronize()

    def reset(self):
        with self.torch.no_grad():
            for l, (W, b) in enumerate(self.init):
                self.params[2 * l].copy_(self.torch.from_numpy(W).to(self.device))
                self.params[2 * l + 1].copy_(self.torch.from_numpy(b).to(self.device))

    def eval_loss(self):
        with self.torch.no_grad():
            return float(self.loss_fn(self.X, self.y))


class Compiled(Eager):
    def make_step(self):
        torch = self.torch
        if not hasattr(torch, 'compile'):
            raise common.Missing(f'torch {torch.__version__} has no torch.compile (PyTorch >= 2.0)')
        step = super().make_step()
        try:
            return torch.compile(step)
        except Exception as e:  # pragma: no cover - depends on the installed torch
            raise common.Missing(f'torch.compile failed: {type(e).__name__}: {e}')


if __name__ == '__main__':
    common.main('torch', {'eager': Eager, 'compile': Compiled})
