"""bench/peers/rop_torch.py — bench/rop.lua's cases in PyTorch (eager, CPU).

PyTorch 2's torch.func.jvp / vjp are not in Debian's torch 1.13; its
functorch (the same API before it moved into torch.func) is, when
installed.  Variants:
  grad/autograd            torch.autograd.grad(cost, params)
  gn/functorch             functorch.jvp (forward-mode AD) for J v, then
                           functorch.vjp for J'(H_L J v)
  gn/double_backward       the double-backward trick (no forward mode): J v =
                           d/du <J'u, v> with a dummy u, then J'(H_L J v) by
                           autograd.grad; one forward pass
  hvp/functorch            functorch.jvp of functorch.grad (forward-over-reverse)
  hvp/double_backward      autograd.grad of <grad(create_graph), v>
Threads: torch.set_num_threads(--threads), set_num_interop_threads(1).
  /usr/bin/python3 bench/peers/rop_torch.py --data DIR [--cases grad,gn,hvp] [--threads N]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rop_common as rc  # noqa: E402


def main():
    args = rc.parse_args()
    system = args.system or 'torch'
    rc.setup_threads(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    try:
        import functorch
    except ImportError:
        functorch = None
    x_np, y_np, p_np, v_np = rc.load(args.data)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)
    params = [torch.from_numpy(p.copy()).requires_grad_(True) for p in p_np]
    v = [torch.from_numpy(a) for a in v_np]
    if args.header:
        print(rc.CSV_HEADER)

    def logits(ps):
        h = x
        n = len(ps) // 2
        for l in range(n):
            h = h @ ps[2 * l] + ps[2 * l + 1]
            if l < n - 1:
                h = torch.tanh(h)
        return h

    def cost_of(z):
        # logsumexp - the label's logit rather than cross_entropy or
        # log_softmax: their backwards have no forward-mode derivative in
        # torch 1.13 (hvp/functorch needs one)
        return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()

    def hl(z, w):
        p = torch.softmax(z, dim=1)
        return (p * w - p * (p * w).sum(dim=1, keepdim=True)) / z.shape[0]

    def grad():
        return torch.autograd.grad(cost_of(logits(params)), params)

    def gn_functorch():
        z, jv = functorch.jvp(lambda *ps: logits(ps), tuple(p.detach() for p in params), tuple(v))
        _, pullback = functorch.vjp(lambda *ps: logits(ps), *[p.detach() for p in params])
        return pullback(hl(z, jv))

    def gn_double_backward():
        z = logits(params)
        u = torch.zeros_like(z, requires_grad=True)
        g = torch.autograd.grad(z, params, u, create_graph=True)
        jv = torch.autograd.grad(g, u, v)[0]
        return torch.autograd.grad(z, params, hl(z.detach(), jv))

    def hvp_functorch():
        gfun = functorch.grad(lambda *ps: cost_of(logits(ps)), argnums=tuple(range(len(params))))
        return functorch.jvp(gfun, tuple(p.detach() for p in params), tuple(v))[1]

    def hvp_double_backward():
        g = torch.autograd.grad(cost_of(logits(params)), params, create_graph=True)
        return torch.autograd.grad(g, params, v)

    variants = [('grad', 'autograd', grad),
                ('gn', 'functorch', gn_functorch if functorch else None),
                ('gn', 'double_backward', gn_double_backward),
                ('hvp', 'functorch', hvp_functorch if functorch else None),
                ('hvp', 'double_backward', hvp_double_backward)]
    cases = args.cases.split(',')
    for case, variant, fn in variants:
        if case not in cases or (args.variants and variant not in args.variants.split(',')):
            continue
        if fn is None:
            print(f'#missing,{system},{variant},functorch is not installed', flush=True)
            continue
        try:
            out = fn()
        except Exception as e:  # an op without forward-mode AD in this version
            msg = str(e).splitlines()[0].replace(',', ';')[:200]
            print(f'#missing,{system},{case}/{variant},{msg}', flush=True)
            continue
        out = [o.detach().numpy() for o in out]
        chk = rc.dot(out, out) if case == 'grad' else rc.dot(v_np, out)

        def body(n, fn=fn):
            for _ in range(n):
                fn()

        per, _ = rc.measure(body, args.repeats, args.min_time)
        rc.emit(rc.row(system, variant, case, args.threads, per, chk))


if __name__ == '__main__':
    main()
