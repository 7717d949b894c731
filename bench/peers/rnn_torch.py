"""bench/peers/rnn_torch.py — bench/rnn.lua's Elman RNN in PyTorch (eager, CPU).

  eager  per sequence: e = Wx[x] + b, a Python loop over the 100 steps
         (h = sigmoid(e[t] + h @ Wh)), the readout, cross_entropy (mean),
         torch.autograd.grad (BPTT by autograd), in-place SGD under no_grad
Threads: torch.set_num_threads(--threads), set_num_interop_threads(1).
Device: TGL_BENCH_DEVICE=cuda runs it on the GPU (TF32 off; each timed
chunk ends with torch.cuda.synchronize()), for bench/gpu.sh.
  /usr/bin/python3 bench/peers/rnn_torch.py --data DIR [--hidden ..] [--vocab ..] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rnn_common as rc  # noqa: E402


def main():
    args = rc.parse_args()
    system = args.system or 'torch'
    rc.setup_threads(args.threads)
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    dev = os.environ.get('TGL_BENCH_DEVICE', 'cpu')
    if dev == 'cuda':
        if not torch.cuda.is_available():
            sys.exit('rnn_torch: TGL_BENCH_DEVICE=cuda but torch has no CUDA device here')
        torch.backends.cuda.matmul.allow_tf32 = False
    sync = torch.cuda.synchronize if dev == 'cuda' else (lambda: None)
    if args.header:
        print(rc.CSV_HEADER)
    for V in args.vocab:
        for H in args.hidden:
            x, y, init = rc.load_cell(args.data, H, V)
            xs = [torch.from_numpy(x[k]).to(dev) for k in range(rc.NSEQ)]
            ys = [torch.from_numpy(y[k]).to(dev) for k in range(rc.NSEQ)]
            params = [torch.from_numpy(a.copy()).to(dev).requires_grad_(True) for a in init]
            Wx, Wh, b, Wy, by = params

            def loss_fn(k):
                e = Wx[xs[k]] + b
                h = torch.zeros(H, device=dev)
                hs = []
                for t in range(rc.T):
                    h = torch.sigmoid(e[t] + h @ Wh)
                    hs.append(h)
                return F.cross_entropy(torch.stack(hs) @ Wy + by, ys[k])

            def train(k):
                grads = torch.autograd.grad(loss_fn(k), params)
                with torch.no_grad():
                    for p, g in zip(params, grads):
                        p.sub_(rc.LR * g)

            def evaluate(k):
                with torch.no_grad():
                    return loss_fn(k)

            def reset():
                with torch.no_grad():
                    for p, a in zip(params, init):
                        p.copy_(torch.from_numpy(a).to(dev))

            rc.run_cell(system, 'eager', args, H, V, train, evaluate, reset, sync)


if __name__ == '__main__':
    main()
