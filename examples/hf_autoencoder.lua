-- examples/hf_autoencoder.lua — a deep auto-encoder on Fashion-MNIST
-- trained with Hessian-free optimisation (tgl.optim.hf, Martens 2010) and
-- with plain minibatch SGD for the same wall-clock budget; prints both
-- training curves side by side and draws them.
--
--   tgl examples/hf_autoencoder.lua [--seconds S] [--layers 784,400,...] [--train N]
--                                   [--lr R] [--batch B] [--momentum M]
--                                   [--grad_batch G] [--curv_batch C] [--max_cg N]
--                                   [--seed S] [--threads T] [--data DIR] [--out DIR]
--
-- The model is Martens' "CURVES" auto-encoder on Fashion-MNIST:
-- 784-400-200-100-50-25-6 and back (logistic hidden units, a linear 6-unit
-- code, logistic output with
-- the cross-entropy loss), "sparse" initialisation (each unit gets 15
-- nonzero incoming weights drawn from N(0, 1); Martens' choice) shared by
-- both optimisers.  Deep logistic auto-encoders are the textbook case
-- where first-order methods stall on a plateau (the network outputs the
-- mean image) while curvature information gets through.
--
-- HF: gradient on a batch of G images (a moving window over the shuffled
-- training set), Gauss-Newton products on C images of it, CG capped at
-- --max_cg iterations.  The Gauss-Newton matrix uses the loss's own
-- curvature (logistic output + cross-entropy: H_L·w = p(1-p)w / rows),
-- given to tgl.optim.hf as a function.  SGD: one compiled step (data in
-- shared variables, f.fn{n_calls=} runs the steps in C), batch B, learning
-- rate R (optionally momentum M).  Each gets --seconds of training time
-- (default 25); evaluations (reconstruction error on 2000 training
-- images, and on the test set at the end) are not counted.  Kernels are
-- compiled before the clocks start.
--
-- Reported error: squared reconstruction error per image (the sum over
-- the 784 pixels, averaged over images), as in Martens' tables.
--
-- Output: DIR/curve.svg and DIR/history.csv (default DIR /tmp/tgl-hf).
--
-- Measured (2 cores, defaults, 25 s each; error on 2000 training images):
--   time    2.5s  5s    10s   15s   20s   25s   test
--   HF      68.6  55.7  36.1  33.6  30.7  29.1  28.7  (62 steps, 620 CG iterations)
--   SGD     48.6  33.7  28.9  25.4  23.3  22.2  22.0  (6170 steps, lr 0.01, batch 100)
-- At this budget HF does NOT beat a tuned SGD.  SGD with a learning rate
-- one notch too high (--lr 0.1) does sit on the mean-image plateau
-- (error about 68.7, where HF also spends its first seconds) for most of
-- the run, which is the behaviour Martens' comparison is about; but plain
-- SGD at 0.01 leaves it within a second, and with momentum (--lr 0.003
-- --momentum 0.9) it reaches about 19 in 20 s.  HF's advantage in Martens'
-- experiments shows over hours and with his diagonal preconditioner, which
-- tgl.optim.hf does not have; here each HF step costs about 40 SGD steps.
-- HF settings tried (20 s): CG capped at 10 iterations did best (31.5),
-- 20 -> 37.3, 100 -> 48.5; 5000/1000-image batches -> 57.2.
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. script_dir .. '/../bench/lib/?.lua;' .. package.path
local curves = require 'curves'
local cli = require 'cli'

local opts = { seconds = 25, layers = '784,400,200,100,50,25,6', train = 20000, lr = 0.01, batch = 100,
               momentum = 0, grad_batch = 2000, curv_batch = 500, max_cg = 10, damping = 10, method = 'both', seed = 1, threads = nil,
               data = '/usr/share/datasets/fashion-mnist', out = '/tmp/tgl-hf' }
local usage = 'usage: tgl examples/hf_autoencoder.lua [--seconds S] [--layers 784,400,200,100,50,25,6] ' ..
              '[--train N] [--lr R] [--batch B] [--momentum M] [--grad_batch G] [--curv_batch C] ' ..
              '[--max_cg N] [--damping L] [--method both|hf|sgd] [--seed S] [--threads T] [--data DIR] [--out DIR]\n'
cli.parse_args('hf_autoencoder', arg, opts, { data = true, out = true, layers = true, method = true }, usage)
if opts.threads then tgl.config.threads = opts.threads end
local sizes = {}
for s in opts.layers:gmatch('%d+') do sizes[#sizes + 1] = tonumber(s) end
if sizes[1] ~= 784 or #sizes < 2 then cli.die('hf_autoencoder', usage, '--layers must start with 784, got %s', opts.layers) end

-- ---------------------------------------------------------------------------
-- Data: N training images in a fixed random order, pixels in [0, 1].
tgl.manual_seed(opts.seed)
math.randomseed(opts.seed)
local function load(file)
  local x = tgl.io.read_idx(opts.data .. '/' .. file)
  return x:reshape(x:size(1), 784):astype('float32') / 255
end
local t_load = tgl.time()
local all = cli.try('hf_autoencoder', load, 'train-images-idx3-ubyte.gz')
local Xtest = cli.try('hf_autoencoder', load, 't10k-images-idx3-ubyte.gz')
local N = math.min(opts.train, all:size(1))
local order = {}
for i = 1, all:size(1) do order[i] = i end
for i = #order, 2, -1 do local j = math.random(i); order[i], order[j] = order[j], order[i] end
for i = #order, N + 1, -1 do order[i] = nil end
local X = all[{ tgl.array(order, 'int64') }]:contiguous()
local Xeval = X[{ { 1, math.min(2000, N) } }]:contiguous()
all = nil
print(('loaded %d training images (%d used), %d test images in %.1f s'):format(60000, N, Xtest:size(1),
      tgl.time() - t_load))

-- ---------------------------------------------------------------------------
-- The model: encoder sizes[1] -> ... -> sizes[#sizes] (linear code), the
-- mirror image back; logistic units elsewhere, logits at the output.
local dims = {}
for i = 1, #sizes do dims[i] = sizes[i] end
for i = #sizes - 1, 1, -1 do dims[#dims + 1] = sizes[i] end
local nlayers = #dims - 1
local code_layer = #sizes - 1

-- Martens' sparse initialisation: 15 nonzero N(0, 1) incoming weights per unit.
local function sparse_init(fan_in, fan_out)
  local W = tgl.zeros(fan_in, fan_out)
  local k = math.min(15, fan_in)
  local pick = {}
  for j = 1, fan_out do
    for i = 1, fan_in do pick[i] = i end
    for i = 1, k do
      local r = math.random(i, fan_in)
      pick[i], pick[r] = pick[r], pick[i]
      W:set(tgl.randn(1):get(1), pick[i], j)
    end
  end
  return W
end

local init, params = {}, {}
for l = 1, nlayers do
  init[2 * l - 1] = sparse_init(dims[l], dims[l + 1])
  init[2 * l] = tgl.zeros(dims[l + 1])
  params[2 * l - 1] = tgl.shared(init[2 * l - 1], 'W' .. l)
  params[2 * l] = tgl.shared(init[2 * l], 'b' .. l)
end
local function reset() for k, p in ipairs(params) do p:set_value(init[k]) end end

local x = tgl.matrix('x')
local h = x
for l = 1, nlayers do
  h = h:dot(params[2 * l - 1]) + params[2 * l]
  if l ~= code_layer and l ~= nlayers then h = tgl.sigmoid(h) end
end
local logits = h
-- cross-entropy of the logistic output, from the logits (stable): summed over
-- the pixels, averaged over the images
local cost = tgl.mean(tgl.sum(tgl.softplus(logits) - x * logits, 2))
local sq_err = tgl.mean(tgl.sum(tgl.sqr(tgl.sigmoid(logits) - x), 2))
local f_err = tgl.compile { inputs = { x }, outputs = sq_err, name = 'sq_err' }
-- H_L for the logistic output with cross-entropy: diagonal, p(1 - p) / rows
local function logistic_ce_curvature(out, w)
  local p = tgl.sigmoid(out)
  return p * (1 - p) * w / tgl.cast(out:size(1), out.dtype)
end

local nparams = 0
for _, p in ipairs(params) do nparams = nparams + p:get_value():nelement() end
print(('auto-encoder %s: %d layers, %d parameters; %.0f s of training for each optimiser')
      :format(table.concat(dims, '-'), nlayers, nparams, opts.seconds))

-- ---------------------------------------------------------------------------
-- SGD: one compiled step over shared data, minibatch i of a fixed order.
local Xs = tgl.shared(X, 'X', { borrow = true })
local step = tgl.shared(tgl.array(0, 'int64'), 'step')
local nb = math.floor(N / opts.batch)
local B = opts.batch
local lr = tgl.shared(opts.lr, 'lr')
local grads = tgl.grad(cost, params)
local updates = { { step, (step + 1) % nb } }
local vel = {}
for k, p in ipairs(params) do
  if opts.momentum > 0 then
    vel[k] = tgl.shared(init[k] * 0, 'vel' .. k)
    local v_new = vel[k] * opts.momentum - lr * grads[k]
    updates[#updates + 1] = { vel[k], v_new }
    updates[#updates + 1] = { p, p + v_new }
  else
    updates[#updates + 1] = { p, p - lr * grads[k] }
  end
end
local sgd_step = tgl.compile {
  inputs = {}, outputs = cost, updates = updates, name = 'sgd_step',
  givens = { [x] = Xs[{ { step * B + 1, (step + 1) * B } }] },
}

-- HF.
local hf = tgl.optim.hf {
  params = params, inputs = { x }, out = logits, cost = cost, loss = logistic_ce_curvature,
  damping = opts.damping, max_cg_iters = opts.max_cg, cg_decay = 0.95, name = 'hf',
}
local GB, CB = math.min(opts.grad_batch, N), math.min(opts.curv_batch, opts.grad_batch, N)
local gpos = 0
local function next_batches()
  if gpos + GB > N then gpos = 0 end
  local g = X[{ { gpos + 1, gpos + GB } }]
  gpos = gpos + GB
  -- the curvature batch: a random window of the gradient batch
  local c0 = math.random(0, GB - CB)
  return g, g[{ { c0 + 1, c0 + CB } }]
end

-- Compile every kernel before the clocks start (a throwaway call of each).
do
  local g, c = next_batches()
  gpos = 0
  f_err(Xeval)
  sgd_step()
  reset(); step:set_value(tgl.array(0, 'int64'))
  hf:gradient({ g })
  hf:gv({ c }, hf:get_params())
  hf:evaluate({ g })
  f_err(Xeval)
end

-- ---------------------------------------------------------------------------
-- Training runs; evaluation time is excluded from the clock.
local function run_sgd()
  reset()
  step:set_value(tgl.array(0, 'int64'))
  for _, v in ipairs(vel) do v:set_value(v:get_value() * 0) end
  local curve = { { t = 0, err = f_err(Xeval):get() } }
  local t, chunk = 0, math.max(1, math.floor(nb / 20))
  local steps = 0
  while t < opts.seconds do
    local t0 = tgl.time()
    sgd_step.fn { n_calls = chunk }
    t = t + (tgl.time() - t0)
    steps = steps + chunk
    curve[#curve + 1] = { t = t, err = f_err(Xeval):get(), steps = steps }
  end
  return curve, ('%d steps of batch %d (%.1f epochs)'):format(steps, B, steps * B / N)
end

local function run_hf()
  reset()
  hf:reset()
  gpos = 0
  local curve = { { t = 0, err = f_err(Xeval):get() } }
  local t, cg = 0, 0
  while t < opts.seconds do
    local g, c = next_batches()
    local t0 = tgl.time()
    local s = hf:step({ g }, { c })
    t = t + (tgl.time() - t0)
    cg = cg + s.cg_iters
    curve[#curve + 1] = { t = t, err = f_err(Xeval):get(), steps = s.step, lambda = s.damping, rho = s.rho,
                          cg = s.cg_iters }
    print(('  HF step %3d  %5.1fs  cost %.2f -> %.2f  error %.2f  λ %-8.3g ρ %5.2f  CG %d (used %d)%s')
          :format(s.step, t, s.cost_before, s.cost, curve[#curve].err, s.damping, s.rho, s.cg_iters,
                  s.cg_chosen, s.accepted and '' or '  rejected'))
  end
  return curve, ('%d steps, %d CG iterations (gradient batch %d, curvature batch %d)')
                :format(hf.n_steps, cg, GB, CB)
end

local skipped = { { t = 0, err = f_err(Xeval):get() } }
local hf_curve, hf_note, hf_test, sgd_curve, sgd_note, sgd_test = skipped, 'not run', 0, skipped, 'not run', 0
if opts.method ~= 'sgd' then
  print(('HF (%d-image gradient batches, %d-image curvature batches):'):format(GB, CB))
  hf_curve, hf_note = run_hf()
  hf_test = f_err(Xtest):get()
end
if opts.method ~= 'hf' then
  print(('SGD (batch %d, learning rate %g%s):'):format(B, opts.lr,
        opts.momentum > 0 and (', momentum %g'):format(opts.momentum) or ''))
  sgd_curve, sgd_note = run_sgd()
  sgd_test = f_err(Xtest):get()
end

-- ---------------------------------------------------------------------------
-- The curves side by side: the error each had reached at the same times.
curves.print_table(hf_curve, sgd_curve, opts.seconds, 'error', '%12.2f')
local hf_final, sgd_final = curves.final(hf_curve), curves.final(sgd_curve)
print(('\nHF:  %s; training error %.2f, test error %.2f'):format(hf_note, hf_final, hf_test))
print(('SGD: %s; training error %.2f, test error %.2f'):format(sgd_note, sgd_final, sgd_test))
print(('at the end of the %.0f s budget: %s'):format(opts.seconds, hf_final < sgd_final
  and ('HF reached a %.1fx lower reconstruction error than SGD'):format(sgd_final / hf_final)
  or ('SGD reached a lower reconstruction error than HF (%.2f vs %.2f)'):format(sgd_final, hf_final)))

-- ---------------------------------------------------------------------------
-- Outputs: history.csv and curve.svg.
curves.write_csv(opts.out, 'error', hf_curve, sgd_curve)

curves.write_svg({
  script = 'hf_autoencoder', dir = opts.out, seconds = opts.seconds,
  title = ('Auto-encoder %s on Fashion-MNIST: Hessian-free vs SGD (tgl)'):format(table.concat(dims, '-')),
  ylabel = 'squared reconstruction error per image', tick_fmt = '%.1f', final_fmt = '%.2f',
}, hf_curve, sgd_curve)
print(('wrote %s/curve.svg, %s/history.csv'):format(opts.out, opts.out))
return hf_final, sgd_final
