"""bench/peers/gemm_jax.py — the shapes of bench/gemm_shapes.c through JAX
(jax.jit of jnp.dot on the transposed operands, float32, CPU).  One thread
under `taskset -c 0` with
XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".

Prints the same CSV as gemm_shapes.c (lib = "jax"): median GFLOP/s per
second of process CPU time (the machine is shared; CPU time leaves out the
waits for a core) of ROUNDS rounds of at least MIN_T seconds each, with
the min-max spread.  The call overhead of a jitted function (a few us) is
included, as it is in a training step's product.

    taskset -c 0 python bench/peers/gemm_jax.py [rounds] [min_seconds]
"""
import sys
import time

import numpy as np
import jax
import jax.numpy as jnp

SHAPES = [
    ("mlp1 b60 fwd  X.W1", "N", "N", 60, 500, 784),
    ("mlp1 b60 dW1  X'.d", "T", "N", 784, 500, 60),
    ("mlp1 b60 dX   d.W1'", "N", "T", 60, 784, 500),
    ("mlp1 b60 fwd  H.W2", "N", "N", 60, 10, 500),
    ("mlp1 b60 dW2  H'.d", "T", "N", 500, 10, 60),
    ("mlp1 b60 dH   d.W2'", "N", "T", 60, 500, 10),
    ("mlp1 b256 fwd X.W1", "N", "N", 256, 500, 784),
    ("mlp1 b256 dW1 X'.d", "T", "N", 784, 500, 256),
    ("mlp1 b256 dX  d.W1'", "N", "T", 256, 784, 500),
    ("mlp1 b256 fwd H.W2", "N", "N", 256, 10, 500),
    ("mlp1 b256 dW2 H'.d", "T", "N", 500, 10, 256),
    ("mlp1 b256 dH  d.W2'", "N", "T", 256, 500, 10),
    ("rnn 100x50x3000 fwd", "N", "N", 100, 3000, 50),
    ("rnn 100x50x3000 dH", "N", "T", 100, 50, 3000),
    ("rnn 100x50x3000 dV", "T", "N", 50, 3000, 100),
]


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 7
    min_t = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    only = sys.argv[3] if len(sys.argv) > 3 else None
    rng = np.random.default_rng(0)
    print("shape,lib,m,n,k,gflops_median,gflops_min,gflops_max")
    for name, ta, tb, m, n, k in SHAPES:
        if only and only not in name:
            continue
        a = jnp.asarray(rng.standard_normal((m, k) if ta == "N" else (k, m), dtype=np.float32))
        b = jnp.asarray(rng.standard_normal((k, n) if tb == "N" else (n, k), dtype=np.float32))
        f = jax.jit(lambda a, b, ta=ta, tb=tb: jnp.dot(a if ta == "N" else a.T,
                                                       b if tb == "N" else b.T))
        f(a, b).block_until_ready()
        flop = 2.0 * m * n * k
        r = []
        for _ in range(rounds):
            cnt = 0
            t0 = time.process_time()
            while True:
                f(a, b).block_until_ready()
                cnt += 1
                t = time.process_time() - t0
                if t >= min_t:
                    break
            r.append(flop * cnt / t * 1e-9)
        r.sort()
        print(f"{name},jax,{m},{n},{k},{r[len(r)//2]:.1f},{r[0]:.1f},{r[-1]:.1f}", flush=True)


if __name__ == "__main__":
    main()
