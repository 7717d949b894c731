"""bench/peers/mlp_fashion_torch.py — examples/mlp_fashion.lua in PyTorch,
with the same hyperparameters: 784-500-10 tanh MLP, Glorot-uniform weights
and zero biases, minibatch SGD (batch 32, learning rate 0.1 decaying
linearly per epoch: lr * (1 - (epoch - 1) / epochs)), a new shuffle each
epoch, mean cross-entropy; pixels scaled to [0, 1].  Prints the same lines
as the tgl example and the training time at which the test accuracy first
reached --target.

  python3 bench/peers/mlp_fashion_torch.py [--epochs 10] [--lr 0.1] [--batch 32]
          [--threads N] [--target 0.87] [--data /usr/share/datasets/fashion-mnist]
Runs under Debian's python3-torch (bench/peers/install.sh).
"""
import argparse
import gzip
import os
import time

import numpy as np


def read_idx(path):
    with gzip.open(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--epochs', type=int, default=10)
    p.add_argument('--lr', type=float, default=0.1)
    p.add_argument('--batch', type=int, default=32)
    p.add_argument('--hidden', type=int, default=500)
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--seed', type=int, default=1)
    p.add_argument('--target', type=float, default=0.87)
    p.add_argument('--data', default='/usr/share/datasets/fashion-mnist')
    a = p.parse_args()

    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)

    t_start = time.perf_counter()
    d = a.data
    Xtr = torch.from_numpy(read_idx(f'{d}/train-images-idx3-ubyte.gz').reshape(-1, 784).astype(np.float32) / 255)
    Ytr = torch.from_numpy(read_idx(f'{d}/train-labels-idx1-ubyte.gz').astype(np.int64))
    Xte = torch.from_numpy(read_idx(f'{d}/t10k-images-idx3-ubyte.gz').reshape(-1, 784).astype(np.float32) / 255)
    Yte = torch.from_numpy(read_idx(f'{d}/t10k-labels-idx1-ubyte.gz').astype(np.int64))
    N, B = Xtr.shape[0], a.batch
    nb = N // B
    print(f'loaded {N} training and {Xte.shape[0]} test images in {time.perf_counter() - t_start:.1f} s '
          f'(torch {torch.__version__}, {torch.get_num_threads()} threads)')

    def glorot(i, o):
        r = (6 / (i + o)) ** 0.5
        return (torch.rand(i, o) * 2 - 1) * r

    H = a.hidden
    params = [glorot(784, H), torch.zeros(H), glorot(H, 10), torch.zeros(10)]
    for q in params:
        q.requires_grad_(True)
    W1, b1, W2, b2 = params

    def logits(x):
        return torch.addmm(b2, torch.tanh(torch.addmm(b1, x, W1)), W2)

    reached = None
    train_secs = 0.0
    for epoch in range(1, a.epochs + 1):
        lr = a.lr * (1 - (epoch - 1) / a.epochs)
        perm = torch.randperm(N)
        t0 = time.perf_counter()
        total = 0.0
        for k in range(nb):
            idx = perm[k * B:(k + 1) * B]
            loss = F.cross_entropy(logits(Xtr[idx]), Ytr[idx])
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for q, g in zip(params, grads):
                    q.add_(g, alpha=-lr)
            total += loss.item()
        secs = time.perf_counter() - t0
        train_secs += secs
        with torch.no_grad():
            acc = (logits(Xte).argmax(1) == Yte).float().mean().item()
        print(f'epoch {epoch:2d}  train loss {total / nb:.4f}  test accuracy {100 * acc:.2f}%  '
              f'({secs:.1f} s, {nb * B / secs:.0f} examples/s)', flush=True)
        if reached is None and acc >= a.target:
            reached = (epoch, train_secs)
    msg = (f'reached {100 * a.target:.0f}% after epoch {reached[0]} ({reached[1]:.1f} s of training)'
           if reached else f'did not reach {100 * a.target:.0f}%')
    print(f'trained {a.epochs} epochs in {train_secs:.1f} s of training '
          f'({time.perf_counter() - t_start:.1f} s in all); test accuracy {100 * acc:.2f}%; {msg}')


if __name__ == '__main__':
    main()
