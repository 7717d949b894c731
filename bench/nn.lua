-- bench/nn.lua — `bench/run nn` for tgl's own nn calls: the paper's three
-- MLPs and a LeNet-style CNN (bench/lib/nn_common.lua) trained with plain
-- SGD (learning rate 0.01, float32), LogSoftMax + ClassNLLCriterion, on
-- 6000 random examples (inputs N(0, 0.3^2), labels uniform in 1..10).
-- Variants:
--   eager    tgl arrays and nn module calls, minibatches as views
--            (x[{{a, b}}]): zeroGradParameters / forward / backward /
--            updateParameters, each call one compiled function of the
--            module's cache
--   compile  nn.compile{model=, criterion=, optimizer=nn.optim.sgd{lr=}}:
--            one compiled call per step (reported missing when this tgl
--            has no nn.compile)
-- The same timing protocol as bench/mlp.lua (bench/lib/mlp_common.lua,
-- stats.lua): a warm-up, a check pass from the initial weights (the loss on
-- the first 1200 examples before and after it; --budget S cuts it), then
-- --repeats timed repeats of at least --min-time seconds; one CSV row per
-- cell (mlp_common's columns) on stdout.  (The same models as a Torch7
-- script are bench/peers/nn_torch7.lua, which bench/run nn also runs under
-- tgl: variant t7script.)
--
--   tgl bench/nn.lua [--models logreg,mlp1,mlp3,cnn] [--batches 1,10,60,256]
--                    [--variants eager,compile] [--threads N] [--budget S]
--                    [--repeats R] [--min-time S] [--system NAME] [--header]
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local common = require 'mlp_common'
local nnc = require 'nn_common'
local nn = require 'nn'

local opts = {
  models = 'logreg,mlp1,mlp3,cnn', batches = '1,10,60,256', variants = 'eager,compile',
  threads = tonumber(os.getenv('TGL_NUM_THREADS')) or 1, budget = 0, header = false,
  repeats = stats.REPEATS, ['min-time'] = stats.MIN_TIME, system = 'tgl',
}
do
  local i = 1
  while arg[i] do
    local k = arg[i]:match('^%-%-([%w-]+)$')
    if k == 'header' then
      opts.header = true; i = i + 1
    elseif k and opts[k] ~= nil and arg[i + 1] then
      opts[k] = tonumber(arg[i + 1]) or arg[i + 1]; i = i + 2
    else
      error(('bench/nn.lua: unknown or incomplete argument %s'):format(arg[i]), 0)
    end
  end
end
local function split(s) local t = {} for w in tostring(s):gmatch('[^,]+') do t[#t + 1] = tonumber(w) or w end return t end
tgl.config.threads = opts.threads
if opts.header then print(common.CSV_HEADER) end

local N, LR = nnc.N_EXAMPLES, common.LR

-- One variant's trainer: run(k0, n) steps k0..k0+n-1 (0-based minibatch
-- indices), loss() on the check examples, reset() to the initial weights.
local function trainer(variant, model, X, Y, B)
  local crit = nn.ClassNLLCriterion()
  local params = model:parameters()
  local init = {}
  for i, p in ipairs(params) do init[i] = p:clone() end
  local function slice(k, b) return X[{ { k + 1, k + b } }], Y[{ { k + 1, k + b } }] end
  local t = {}
  function t.reset() for i, p in ipairs(params) do p:copy(init[i]) end end
  if variant == 'eager' then
    function t.run(k0, n)
      for k = k0, k0 + n - 1 do
        local x, y = slice(k * B, B)
        local out = model:forward(x)
        crit:forward(out, y)
        model:zeroGradParameters()
        model:backward(x, crit:backward(out, y))
        model:updateParameters(LR)
      end
    end
    function t.loss_of(x, y) return crit:forward(model:forward(x), y) end
  else
    if type(nn.compile) ~= 'function' or type(nn.optim) ~= 'table' or type(nn.optim.sgd) ~= 'function' then
      return nil, 'nn.compile is not in this tgl'
    end
    local step = nn.compile{ model = model, criterion = crit, optimizer = nn.optim.sgd{ lr = LR } }
    function t.run(k0, n)
      for k = k0, k0 + n - 1 do step:step(slice(k * B, B)) end
    end
    function t.loss_of(x, y) return (step:evaluate(x, y)) end
  end
  function t.loss()
    local total, n = 0, math.min(N, nnc.EVAL_EXAMPLES)
    for i = 0, n - 1, nnc.EVAL_SLICE do
      local m = math.min(nnc.EVAL_SLICE, n - i)
      total = total + t.loss_of(slice(i, m)) * m
    end
    return total / n
  end
  return t
end

local function nosync() end
tgl.manual_seed(20120)
local data = {}
for _, name in ipairs(split(opts.models)) do
  local shape = { N }
  for _, d in ipairs(nnc.input_shape(name)) do shape[#shape + 1] = d end
  local key = table.concat(shape, 'x')
  data[key] = data[key] or { X = tgl.randn(shape, { dtype = 'float32', std = nnc.X_STD }),
                             Y = tgl.floor(tgl.rand(N, { dtype = 'float64' }) * 10 + 1):astype('int64') }
  for _, B in ipairs(split(opts.batches)) do
    local nb = math.floor(N / B)
    for _, variant in ipairs(split(opts.variants)) do
      tgl.manual_seed(1000)
      local model = nnc.build(nn, name):float()
      local t, why = trainer(variant, model, data[key].X, data[key].Y, B)
      if not t then
        print(('#missing,%s,%s,%s'):format(opts.system, variant, why))
      else
        t.run(0, math.max(2, math.min(nb, math.ceil(common.WARMUP_EXAMPLES / B))))
        t.reset()
        local loss0 = t.loss()
        local check = common.check_pass(nb, opts.budget, tgl.time, t.run, nosync)
        local loss1 = t.loss()
        local r = common.timed_repeats(nb, B, check.steps, check.steps / check.seconds, opts.repeats,
                                       opts['min-time'], tgl.time, t.run, nosync)
        print(common.csv_row({ system = opts.system, variant = variant, model = name, batch = B,
                               threads = opts.threads, rates = r.rates, examples = r.examples,
                               seconds = r.seconds, check_examples = check.steps * B, loss0 = loss0,
                               loss1 = loss1 }))
      end
      io.stdout:flush()
    end
  end
end
