"""bench/peers/scan_torch.py — bench/scan.lua's overhead and rnn cases in PyTorch (eager, CPU).

  overhead/py_loop  a Python loop of h = h + 1 on a 1-element float64 tensor
                    (eager dispatch per step); timed per step, n chosen by `measure`
  rnn/eager         a Python loop over the 100 time steps (tanh(x_t Wx + h Wh + b)),
                    the readout and loss, torch.autograd.grad (BPTT by autograd),
                    in-place SGD under no_grad
Threads: torch.set_num_threads(--threads), set_num_interop_threads(1).
  /usr/bin/python3 bench/peers/scan_torch.py --data DIR [--cases overhead,rnn] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import scan_common as sc  # noqa: E402


def main():
    args = sc.parse_args()
    system = args.system or 'torch'
    sc.setup_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    R, S = args.repeats, args.min_time
    cases = args.cases.split(',')
    if args.header:
        print(sc.CSV_HEADER)

    if 'overhead' in cases:
        st = {'h': torch.zeros(1, dtype=torch.float64)}

        def body(n):
            h = st['h']
            for _ in range(n):
                h = h + 1
            st['h'] = h

        per, _ = sc.measure(body, R, S, warmup=1000)
        sc.emit(sc.row(system, 'py_loop', 'overhead', args.threads, 'ns/step', [p * 1e9 for p in per]))

    if 'rnn' in cases:
        d = sc.load_rnn(args.data)
        x, y = torch.from_numpy(d['x']), torch.from_numpy(d['y'])
        params = [torch.from_numpy(d[k].copy()).requires_grad_(True) for k in sc.NAMES]
        Wx, Wh, b, Wy, by = params
        lr = sc.LR

        def loss_fn():
            h = torch.zeros(sc.N_H)
            hs = []
            for t in range(sc.T):
                h = torch.tanh(x[t] @ Wx + h @ Wh + b)
                hs.append(h)
            out = torch.stack(hs) @ Wy + by
            return ((out - y) ** 2).mean()

        def train():
            loss = loss_fn()
            grads = torch.autograd.grad(loss, params)
            with torch.no_grad():
                for p, g in zip(params, grads):
                    p.sub_(lr * g)

        with torch.no_grad():
            loss0 = float(loss_fn())
        for _ in range(sc.CHECK_STEPS):
            train()
        with torch.no_grad():
            loss1 = float(loss_fn())

        def body(n):
            for _ in range(n):
                train()

        per, _ = sc.measure(body, R, S, warmup=5)
        sc.emit(sc.row(system, 'eager', 'rnn', args.threads, 'steps/s', [sc.T / p for p in per], loss0, loss1))


if __name__ == '__main__':
    main()
