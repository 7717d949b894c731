"""bench/peers/mlp_numpy.py — the MLP benchmark written by hand in NumPy.

Forward, backward and the SGD update written out with np.dot (OpenBLAS
sgemm) and in-place updates, as a careful NumPy user would.  No gradient
with respect to the input.  See common.py for the protocol.
  python mlp_numpy.py --data DIR [--models ..] [--batches ..] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402


class Trainer:
    def __init__(self, model, init, X, y, B, lr):
        import numpy as np
        self.np = np
        self.init = init
        self.X, self.y, self.B, self.lr = X, y, B, np.float32(lr)
        self.params = [(W.copy(), b.copy()) for W, b in init]
        self.onehot = np.zeros((B, common.N_OUT), np.float32)

    def reset(self):
        for (W, b), (W0, b0) in zip(self.params, self.init):
            W[...] = W0
            b[...] = b0

    def forward(self, x):
        np = self.np
        hs = [x]
        L = len(self.params)
        for l, (W, b) in enumerate(self.params):
            a = np.dot(hs[-1], W)
            a += b
            if l < L - 1:
                np.tanh(a, out=a)
            hs.append(a)
        z = hs[-1]
        z -= z.max(axis=1, keepdims=True)
        np.exp(z, out=z)
        z /= z.sum(axis=1, keepdims=True)          # softmax probabilities
        return hs

    def step(self, k):
        np, B = self.np, self.B
        x = self.X[k * B:(k + 1) * B]
        t = self.y[k * B:(k + 1) * B]
        hs = self.forward(x)
        p = hs[-1]
        loss = -np.log(p[np.arange(B), t]).mean()
        delta = p                                   # d loss / d logits = (p - onehot) / B
        delta[np.arange(B), t] -= 1
        delta *= np.float32(1.0 / B)
        lr = self.lr
        for l in range(len(self.params) - 1, -1, -1):
            W, b = self.params[l]
            h = hs[l]
            gW = np.dot(h.T, delta)
            gb = delta.sum(axis=0)
            if l > 0:
                delta = np.dot(delta, W.T)
                delta *= 1 - h * h                  # tanh'
            gW *= lr
            W -= gW
            gb *= lr
            b -= gb
        return loss

    def run(self, k0, n):
        for k in range(k0, k0 + n):
            self.step(k)

    def sync(self):
        pass

    def eval_loss(self):
        np = self.np
        p = self.forward(self.X)[-1]
        return float(-np.log(p[np.arange(len(self.y)), self.y]).mean(dtype=np.float64))


if __name__ == '__main__':
    common.main('numpy', {'numpy': Trainer})
