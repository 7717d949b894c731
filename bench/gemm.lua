-- bench/gemm.lua — the products of bench/gemm_shapes.c through tgl's own
-- eager a:dot(b) (transposed operands as views, a:T()), so the figure
-- includes tgl's dispatch (src/cpu/gemm_pick.c: OpenBLAS or BLIS per
-- shape) and the array allocation of the result, one thread.
--
--   TGL_BLAS_PICK=openblas|blis|auto taskset -c 0 tgl bench/gemm.lua [rounds] [min_seconds]
--
-- Prints the CSV of gemm_shapes.c (lib = "tgl:<TGL_BLAS_PICK>"): GFLOP/s
-- per second of process CPU time (os.clock), median of the rounds with the
-- min-max.  Run it alternately with each TGL_BLAS_PICK for an A/B.
local rounds, min_t = tonumber(arg[1]) or 5, tonumber(arg[2]) or 0.1
tgl.config.threads = 1
local shapes = {
  {'mlp1 b60 fwd  X.W1', 'N', 'N', 60, 500, 784},
  {"mlp1 b60 dW1  X'.d", 'T', 'N', 784, 500, 60},
  {"mlp1 b60 dX   d.W1'", 'N', 'T', 60, 784, 500},
  {'mlp1 b60 fwd  H.W2', 'N', 'N', 60, 10, 500},
  {"mlp1 b60 dW2  H'.d", 'T', 'N', 500, 10, 60},
  {"mlp1 b60 dH   d.W2'", 'N', 'T', 60, 500, 10},
  {'mlp1 b256 fwd X.W1', 'N', 'N', 256, 500, 784},
  {"mlp1 b256 dW1 X'.d", 'T', 'N', 784, 500, 256},
  {"mlp1 b256 dX  d.W1'", 'N', 'T', 256, 784, 500},
  {'rnn 100x50x3000 fwd', 'N', 'N', 100, 3000, 50},
  {'rnn 100x50x3000 dH', 'N', 'T', 100, 50, 3000},
  {'rnn 100x50x3000 dV', 'T', 'N', 50, 3000, 100},
}
local lib = 'tgl:' .. (os.getenv('TGL_BLAS_PICK') or 'auto')
print('shape,lib,m,n,k,gflops_median,gflops_min,gflops_max')
tgl.manual_seed(3)
for _, s in ipairs(shapes) do
  local name, ta, tb, m, n, k = s[1], s[2], s[3], s[4], s[5], s[6]
  local a = ta == 'N' and tgl.randn(m, k) or tgl.randn(k, m):T()
  local b = tb == 'N' and tgl.randn(k, n) or tgl.randn(n, k):T()
  a:dot(b) -- warm-up (and the one-time pick for this shape)
  local flop, r = 2 * m * n * k, {}
  for i = 1, rounds do
    local cnt, t0, t = 0, os.clock(), 0
    repeat
      a:dot(b)
      cnt = cnt + 1
      t = os.clock() - t0
    until t >= min_t
    r[i] = flop * cnt / t / 1e9
  end
  table.sort(r)
  print(('%s,%s,%d,%d,%d,%.1f,%.1f,%.1f'):format(name, lib, m, n, k, r[math.floor(rounds / 2) + 1],
                                              r[1], r[rounds]))
end
