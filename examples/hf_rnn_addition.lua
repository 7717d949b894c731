-- examples/hf_rnn_addition.lua — the "addition" long-term-dependency
-- problem (Hochreiter & Schmidhuber 1997; Martens & Sutskever 2011,
-- "Learning recurrent neural networks with Hessian-free optimization")
-- learned by a tanh RNN built with tgl.scan, trained with Hessian-free
-- optimisation (tgl.optim.hf) and with SGD for the same wall-clock budget;
-- prints both training curves side by side and draws them.
--
--   tgl examples/hf_rnn_addition.lua [--seconds S] [--T STEPS] [--hidden H] [--train N]
--                                    [--lr R] [--momentum M] [--clip C] [--batch B]
--                                    [--grad_batch G] [--curv_batch C] [--max_cg N] [--damping L]
--                                    [--radius R] [--method both|hf|sgd] [--seed S]
--                                    [--threads T] [--out DIR]
--
-- The task: each sequence has T steps of two inputs, a value drawn from
-- U(0, 1) and a marker that is 1 at two positions (one in the first 10% of
-- the steps, one in the second half) and 0 elsewhere.  The target, read
-- at the last step, is the sum of the two marked values.  Predicting the
-- mean (1) gives a mean squared error of 1/6 ≈ 0.167 (the variance of the
-- sum of two U(0, 1)); "solved" is an error well below 0.01.  The
-- information needed sits about T steps before the output, so the
-- gradient has to get through most of the loop.
--
-- The model: h_t = tanh(x_t Wx + h_{t-1} Wh + b) from h_0 = 0 (a
-- tgl.scan over time-major (T, batch, 2) arrays), prediction = h_T Wy + by,
-- mean squared error.  Both optimisers start from the same initial
-- weights: Wh Gaussian with spectral radius about --radius, Wx and Wy
-- Gaussian with standard deviation 1/sqrt(fan-in).
--
-- HF: tgl.optim.hf with the Gauss-Newton matrix of the 'mse' loss;
-- gradient on G sequences (a moving window over the training set),
-- Gauss-Newton products on C of them, CG capped at --max_cg iterations.
-- SGD: one compiled step (data in shared variables, f.fn{n_calls=} runs
-- the steps in C), batch B, learning rate R, momentum M, the gradient's
-- norm clipped to C (as is usual for RNNs).  Each gets --seconds of
-- training time; evaluations (the error on 2000 fixed validation
-- sequences) are not counted.  Kernels are compiled before the clocks
-- start.
--
-- Output: DIR/curve.svg and DIR/history.csv (default DIR /tmp/tgl-hf-rnn).
--
-- Measured (2 cores, seed 1, 50 hidden units; validation MSE, baseline 0.167):
--   T = 100, 60 s each (the defaults: HF 1000/250 sequences, CG <= 50;
--   SGD lr 0.01, momentum 0.9, clip 1, batch 100):
--     time   6s     12s    18s    24s    30s    36s    48s    60s
--     HF     0.171  0.164  0.137  0.045  0.010  0.0031 0.0007 0.0005  (56 steps)
--     SGD    0.116  0.072  0.052  0.052  0.043  0.056  0.046  0.054   (12250 steps)
--   HF sits near the baseline for ~20 s, then solves the task; SGD makes
--   some progress and then wanders around 0.05 (with --lr 0.03 it never
--   leaves the baseline: 0.17 to 0.6 throughout, 0.23 at 60 s).
--   T = 60, 30 s each (HF 2000/500): HF 0.0078 (0.0011 in another run),
--   SGD 0.0029 (lr 0.01) / 0.0008 (lr 0.03): SGD with momentum and
--   clipping wins here.  Without clipping (--clip 0) SGD stays at 0.17.
--   T = 30, 30 s: SGD 0.0003 (solved in 6 s), HF 0.0009.
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. script_dir .. '/../bench/lib/?.lua;' .. package.path
local curves = require 'curves'
local cli = require 'cli'

local opts = { seconds = 60, T = 100, hidden = 50, train = 20000, lr = 0.01, momentum = 0.9, clip = 1,
               batch = 100, grad_batch = 1000, curv_batch = 250, max_cg = 50, damping = 1,
               radius = 1.1, method = 'both', seed = 1, threads = nil, out = '/tmp/tgl-hf-rnn',
               verbose = 0 }
local usage = 'usage: tgl examples/hf_rnn_addition.lua [--seconds S] [--T STEPS] [--hidden H] [--train N] ' ..
              '[--lr R] [--momentum M] [--clip C] [--batch B] [--grad_batch G] [--curv_batch C] ' ..
              '[--max_cg N] [--damping L] [--radius R] [--method both|hf|sgd] [--seed S] [--threads T] ' ..
              '[--out DIR] [--verbose 0|1]\n'
cli.parse_args('hf_rnn_addition', arg, opts, { out = true, method = true }, usage)
if opts.method ~= 'both' and opts.method ~= 'hf' and opts.method ~= 'sgd' then
  cli.die('hf_rnn_addition', usage, '--method must be both, hf or sgd, got %s', opts.method)
end
if opts.threads then tgl.config.threads = opts.threads end
local T, H = opts.T, opts.hidden
if T < 4 then cli.die('hf_rnn_addition', usage, '--T must be at least 4, got %s', T) end

-- ---------------------------------------------------------------------------
-- Data: N training and 2000 validation sequences, time-major (T, N, 2),
-- targets (N, 1).
tgl.manual_seed(opts.seed)
math.randomseed(opts.seed)
local function make(n)
  local X = tgl.zeros(T, n, 2)
  X[{ {}, {}, 1 }] = tgl.rand(T, n)
  local Y = tgl.zeros(n, 1)
  local first = math.max(1, math.floor(T / 10))
  local half = math.floor(T / 2)
  for j = 1, n do
    local p1, p2 = math.random(1, first), math.random(half + 1, T)
    X:set(1, p1, j, 2)
    X:set(1, p2, j, 2)
    Y:set(X:get(p1, j, 1) + X:get(p2, j, 1), j, 1)
  end
  return X, Y
end
local N = opts.train
local X, Y = make(N)
local Xval, Yval = make(2000)

-- ---------------------------------------------------------------------------
-- The model.
local function gauss(r, c, sd) return tgl.randn(r, c) * sd end
local init = {
  gauss(2, H, 1 / math.sqrt(2)),                  -- Wx
  gauss(H, H, opts.radius / math.sqrt(H)),        -- Wh: spectral radius about opts.radius
  tgl.zeros(H),                                   -- b
  gauss(H, 1, 1 / math.sqrt(H)),                  -- Wy
  tgl.zeros(1) + 1,                               -- by: starts at the mean of the target
}
local names = { 'Wx', 'Wh', 'b', 'Wy', 'by' }
local params = {}
for k, v in ipairs(init) do params[k] = tgl.shared(v, names[k]) end
local Wx, Wh, b, Wy, by = unpack(params)
local function reset() for k, p in ipairs(params) do p:set_value(init[k]) end end

local x, y = tgl.tensor3('x'), tgl.matrix('y')
local h0 = x[1]:dot(tgl.constant(tgl.zeros(2, H)))   -- zeros, (batch, H)
local hs = tgl.scan {
  fn = function(x_t, h_prev) return tgl.tanh(x_t:dot(Wx) + h_prev:dot(Wh) + b) end,
  sequences = { x }, outputs_info = { h0 }, name = 'rnn',
}
local out = hs[-1]:dot(Wy) + by                   -- (batch, 1)
local cost = tgl.mean(tgl.sqr(out - y))
local f_err = tgl.compile { inputs = { x, y }, outputs = cost, name = 'val_mse' }

local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:get_value():nelement() end
print(('addition problem, T = %d: tanh RNN with %d hidden units (%d parameters), %d training sequences; '
       .. '%.0f s of training for each optimiser'):format(T, H, nparams, N, opts.seconds))
print(('predicting the mean: validation MSE %.4f'):format(tgl.mean(tgl.sqr(Yval - 1)):get()))

-- ---------------------------------------------------------------------------
-- SGD with momentum and gradient-norm clipping: one compiled step over
-- shared data, minibatch i of a fixed order.
local Xs, Ys = tgl.shared(X, 'X', { borrow = true }), tgl.shared(Y, 'Y', { borrow = true })
local step = tgl.shared(tgl.array(0, 'int64'), 'step')
local B = opts.batch
local nb = math.floor(N / B)
local grads = tgl.grad(cost, params)
local scale = 1
if opts.clip > 0 then
  local sq
  for _, g in ipairs(grads) do sq = sq and sq + tgl.sum(tgl.sqr(g)) or tgl.sum(tgl.sqr(g)) end
  scale = tgl.minimum(1, opts.clip / (tgl.sqrt(sq) + 1e-12))
end
local updates = { { step, (step + 1) % nb } }
local vel = {}
for k, p in ipairs(params) do
  vel[k] = tgl.shared(init[k] * 0, 'vel_' .. names[k])
  local v_new = vel[k] * opts.momentum - (opts.lr * scale) * grads[k]
  updates[#updates + 1] = { vel[k], v_new }
  updates[#updates + 1] = { p, p + v_new }
end
local sgd_step = tgl.compile {
  inputs = {}, outputs = cost, updates = updates, name = 'sgd_step',
  givens = { [x] = Xs[{ {}, { step * B + 1, (step + 1) * B } }], [y] = Ys[{ { step * B + 1, (step + 1) * B } }] },
}

-- HF.
local hf = tgl.optim.hf {
  params = params, inputs = { x, y }, out = out, cost = cost, loss = 'mse',
  damping = opts.damping, max_cg_iters = opts.max_cg, cg_decay = 0.95, name = 'hf',
  verbose = opts.verbose > 0,
}
local GB, CB = math.min(opts.grad_batch, N), math.min(opts.curv_batch, opts.grad_batch, N)
local gpos = 0
local function next_batches()
  if gpos + GB > N then gpos = 0 end
  local g = { X[{ {}, { gpos + 1, gpos + GB } }]:contiguous(), Y[{ { gpos + 1, gpos + GB } }]:contiguous() }
  gpos = gpos + GB
  -- the curvature batch: a random window of the gradient batch
  local c0 = math.random(0, GB - CB)
  return g, { g[1][{ {}, { c0 + 1, c0 + CB } }]:contiguous(), g[2][{ { c0 + 1, c0 + CB } }]:contiguous() }
end

-- Compile every kernel before the clocks start (a throwaway call of each).
do
  local g, c = next_batches()
  gpos = 0
  f_err(Xval, Yval)
  sgd_step()
  reset(); step:set_value(tgl.array(0, 'int64'))
  hf:gradient(g)
  hf:gv(c, hf:get_params())
  hf:evaluate(g)
end

-- ---------------------------------------------------------------------------
-- Training runs; evaluation and batch slicing are not on the clock.
local function run_sgd()
  reset()
  step:set_value(tgl.array(0, 'int64'))
  for _, v in ipairs(vel) do v:set_value(v:get_value() * 0) end
  local curve = { { t = 0, err = f_err(Xval, Yval):get() } }
  local t, chunk = 0, math.max(1, math.min(50, math.floor(nb / 4)))
  local steps = 0
  while t < opts.seconds do
    local t0 = tgl.time()
    sgd_step.fn { n_calls = chunk }
    t = t + (tgl.time() - t0)
    steps = steps + chunk
    curve[#curve + 1] = { t = t, err = f_err(Xval, Yval):get(), steps = steps }
  end
  return curve, ('%d steps of batch %d (%.1f epochs)'):format(steps, B, steps * B / N)
end

local function run_hf()
  reset()
  hf:reset()
  gpos = 0
  local curve = { { t = 0, err = f_err(Xval, Yval):get() } }
  local t, cg = 0, 0
  while t < opts.seconds do
    local g, c = next_batches()
    local t0 = tgl.time()
    local s = hf:step(g, c)
    t = t + (tgl.time() - t0)
    cg = cg + s.cg_iters
    curve[#curve + 1] = { t = t, err = f_err(Xval, Yval):get() }
    print(('  HF step %3d  %5.1fs  cost %.4f -> %.4f  validation %.4f  λ %-8.3g ρ %5.2f  CG %d (used %d)%s')
          :format(s.step, t, s.cost_before, s.cost, curve[#curve].err, s.damping, s.rho, s.cg_iters,
                  s.cg_chosen, s.accepted and '' or '  rejected'))
  end
  return curve, ('%d steps, %d CG iterations (gradient batch %d, curvature batch %d)')
                :format(hf.n_steps, cg, GB, CB)
end

local skipped = { { t = 0, err = f_err(Xval, Yval):get() } }
local hf_curve, hf_note, sgd_curve, sgd_note = skipped, 'not run', skipped, 'not run'
if opts.method ~= 'sgd' then
  print(('HF (%d-sequence gradient batches, %d-sequence curvature batches, CG <= %d):'):format(GB, CB, opts.max_cg))
  hf_curve, hf_note = run_hf()
end
if opts.method ~= 'hf' then
  print(('SGD (batch %d, learning rate %g, momentum %g, gradient norm clipped to %g):')
        :format(B, opts.lr, opts.momentum, opts.clip))
  sgd_curve, sgd_note = run_sgd()
end

-- ---------------------------------------------------------------------------
-- The curves side by side: the validation error each had reached at the same times.
curves.print_table(hf_curve, sgd_curve, opts.seconds, 'MSE', '%12.4f')
local hf_final, sgd_final = curves.final(hf_curve), curves.final(sgd_curve)
print(('\nHF:  %s; validation MSE %.4f'):format(hf_note, hf_final))
print(('SGD: %s; validation MSE %.4f'):format(sgd_note, sgd_final))
print(('at the end of the %.0f s budget: %s'):format(opts.seconds, hf_final < sgd_final
  and ('HF reached a %.1fx lower validation MSE than SGD (%.4f vs %.4f)'):format(sgd_final / hf_final, hf_final, sgd_final)
  or ('SGD reached a lower validation MSE than HF (%.4f vs %.4f)'):format(sgd_final, hf_final)))

-- ---------------------------------------------------------------------------
-- Outputs: history.csv and curve.svg.
curves.write_csv(opts.out, 'mse', hf_curve, sgd_curve)

curves.write_svg({
  script = 'hf_rnn_addition', dir = opts.out, seconds = opts.seconds,
  title = ('Addition problem, T = %d, tanh RNN (%d units): HF vs SGD'):format(T, H),
  ylabel = 'validation mean squared error', tick_fmt = '%.3g', final_fmt = '%.4f',
  floor = 1e-6, min_hi = 1 / 6,
  decorate = function(doc, PX, PY, ml, pw)   -- the baseline: predicting the mean
    doc:line(ml, PY(1 / 6), ml + pw, PY(1 / 6), { stroke = '#999', dash = '4,3' })
    doc:text(ml + 6, PY(1 / 6) - 4, 'predicting the mean (1/6)', { size = 10 })
  end,
}, hf_curve, sgd_curve)
print(('wrote %s/curve.svg, %s/history.csv'):format(opts.out, opts.out))
return hf_final, sgd_final
