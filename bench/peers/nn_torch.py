"""bench/peers/nn_torch.py — `bench/run nn` in PyTorch eager: the paper's
three MLPs and the LeNet-style CNN of bench/lib/nn_common.lua as torch.nn
modules (nn.Linear / nn.Tanh / nn.Conv2d / nn.MaxPool2d / nn.LogSoftmax,
nn.NLLLoss, mean), trained with a plain loop: zero_grad, forward, loss,
backward, and an in-place SGD update (p -= lr * grad) under no_grad.
float32; data made here with torch's generator (inputs N(0, 0.3^2), labels
uniform in 0..9) and each module's default initialisation, so the loss
values are not the other systems'; the speed is comparable.  Timing:
bench/peers/common.py (warm-up, check pass on the first 1200 examples'
loss, timed repeats), one CSV row per cell.
Threads: torch.set_num_threads(--threads), set_num_interop_threads(1).
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402

N_EXAMPLES, EVAL_EXAMPLES, EVAL_SLICE = 6000, 1200, 200


def build(torch, name):
    nn = torch.nn
    if name == 'cnn':
        layers = [nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
                  nn.Flatten(), nn.Linear(800, 500), nn.Tanh(), nn.Linear(500, 10)]
    else:
        sizes = common.MODELS[name]
        layers = []
        for i in range(len(sizes) - 1):
            layers.append(nn.Linear(sizes[i], sizes[i + 1]))
            if i < len(sizes) - 2:
                layers.append(nn.Tanh())
    return nn.Sequential(*layers, nn.LogSoftmax(dim=1))


def main():
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument('--models', default='logreg,mlp1,mlp3,cnn')
    p.add_argument('--batches', default='1,10,60,256')
    p.add_argument('--threads', type=int, default=int(os.environ.get('OMP_NUM_THREADS', '1')))
    p.add_argument('--budget', type=float, default=0.0)
    p.add_argument('--repeats', type=int, default=common.REPEATS)
    p.add_argument('--min-time', type=float, default=common.MIN_TIME)
    p.add_argument('--system', default='torch')
    args = p.parse_args()
    common.setup_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    lr = common.LR
    for name in args.models.split(','):
        torch.manual_seed(20120)
        shape = (N_EXAMPLES, 1, 28, 28) if name == 'cnn' else (N_EXAMPLES, 784)
        X = torch.randn(*shape) * 0.3
        Y = torch.randint(0, 10, (N_EXAMPLES,))
        for B in [int(b) for b in args.batches.split(',')]:
            nb = N_EXAMPLES // B
            torch.manual_seed(1000)
            model = build(torch, name)
            crit = torch.nn.NLLLoss()
            params = list(model.parameters())
            init = [q.detach().clone() for q in params]

            def run(k0, n):
                for k in range(k0, k0 + n):
                    x, y = X[k * B:(k + 1) * B], Y[k * B:(k + 1) * B]
                    model.zero_grad()
                    loss = crit(model(x), y)
                    loss.backward()
                    with torch.no_grad():
                        for q in params:
                            q.add_(q.grad, alpha=-lr)

            def sync():
                pass

            def loss():
                total = 0.0
                with torch.no_grad():
                    for i in range(0, EVAL_EXAMPLES, EVAL_SLICE):
                        total += float(crit(model(X[i:i + EVAL_SLICE]), Y[i:i + EVAL_SLICE])) * EVAL_SLICE
                return total / EVAL_EXAMPLES

            run(0, max(2, min(nb, math.ceil(common.WARMUP_EXAMPLES / B))))
            with torch.no_grad():
                for q, q0 in zip(params, init):
                    q.copy_(q0)
            loss0 = loss()
            steps, seconds = common.check_pass(nb, args.budget, run, sync)
            loss1 = loss()
            rates, examples, tsec = common.timed_repeats(nb, B, steps, steps / seconds, args.repeats,
                                                         args.min_time, run, sync)
            print(common.csv_row(args.system, 'eager', name, B, args.threads, rates, examples, tsec,
                                 steps * B, loss0, loss1), flush=True)


if __name__ == '__main__':
    main()
