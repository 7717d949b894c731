-- bench/peers/nn_torch7.lua — a plain Torch7 nn training script: the
-- models of `bench/run nn` (the 2012 paper's three MLPs and a LeNet-style
-- CNN) trained with a zeroGradParameters / forward / backward /
-- updateParameters loop.  The SAME file runs under Torch7 (`th
-- nn_torch7.lua ...`, system torch7) and, unchanged, under tgl (`tgl
-- nn_torch7.lua ... -system tgl -variant t7script`): it uses only Torch7's
-- names (torch.CmdLine, torch.randn, LongTensor labels, :narrow
-- minibatches, torch.Timer, nn modules), as the user's script would.
--
-- The one thing it borrows from the bench is the timing protocol
-- (bench/lib/mlp_common.lua and stats.lua: plain Lua, no tgl), so that its
-- figures are made as every other system's: a warm-up, a check pass from
-- the initial weights (the loss on the first 1200 examples before and
-- after it; cut after -budget seconds), then -repeats timed repeats of at
-- least -mintime seconds; one CSV row per batch size (mlp_common's
-- columns).  Its data (inputs N(0, 0.3^2), labels uniform in 1..10) and
-- weights (each module's own reset) come from torch.manualSeed, so the
-- loss values are not those of the other systems; the speed is
-- comparable.
--
--   th nn_torch7.lua -model mlp1 -batches 1,10,60,256 -threads 1
--   tgl nn_torch7.lua -model cnn -batches 60 -system tgl -variant t7script
require 'torch'
require 'nn'

local cmd = torch.CmdLine()
cmd:text('Train one model with SGD and print examples/s (bench/run nn)')
cmd:option('-model', 'mlp1', 'logreg | mlp1 | mlp3 | cnn')
cmd:option('-batches', '1,10,60,256', 'minibatch sizes, comma-separated')
cmd:option('-threads', 1, 'torch.setnumthreads')
cmd:option('-examples', 6000, 'examples in the data set')
cmd:option('-lr', 0.01, 'learning rate')
cmd:option('-budget', 0, 'cut the check pass after this many seconds (0: a whole pass)')
cmd:option('-repeats', tonumber(os.getenv('TGL_BENCH_REPEATS')) or 5, 'timed repeats')
cmd:option('-mintime', tonumber(os.getenv('TGL_BENCH_MIN_TIME')) or 0.5, 'seconds per repeat, at least')
cmd:option('-system', 'torch7', 'the CSV rows\' system')
cmd:option('-variant', 'nn', 'the CSV rows\' variant')
local opt = cmd:parse(arg)

-- the bench's shared timing rules
local dir = arg[0]:match('^(.*)/[^/]*$') or '.'
package.path = dir .. '/../lib/?.lua;' .. package.path
local common = require 'mlp_common'

torch.setnumthreads(opt.threads)
torch.setdefaulttensortype('torch.FloatTensor')

local function build(name)
  local model = nn.Sequential()
  if name == 'cnn' then
    model:add(nn.SpatialConvolution(1, 20, 5, 5))        -- 20 x 24 x 24
    model:add(nn.SpatialMaxPooling(2, 2, 2, 2))          -- 20 x 12 x 12
    model:add(nn.SpatialConvolution(20, 50, 5, 5))       -- 50 x 8 x 8
    model:add(nn.SpatialMaxPooling(2, 2, 2, 2))          -- 50 x 4 x 4
    model:add(nn.View(800):setNumInputDims(3))
    model:add(nn.Linear(800, 500))
    model:add(nn.Tanh())
    model:add(nn.Linear(500, 10))
  else
    local sizes = ({ logreg = { 784, 10 }, mlp1 = { 784, 500, 10 },
                     mlp3 = { 784, 1000, 1000, 1000, 10 } })[name]
    assert(sizes, 'unknown model ' .. name)
    for l = 1, #sizes - 1 do
      model:add(nn.Linear(sizes[l], sizes[l + 1]))
      if l < #sizes - 1 then model:add(nn.Tanh()) end
    end
  end
  model:add(nn.LogSoftMax())
  return model
end

torch.manualSeed(20120)
local N = opt.examples
local X
if opt.model == 'cnn' then X = torch.randn(N, 1, 28, 28):mul(0.3) else X = torch.randn(N, 784):mul(0.3) end
local Y = torch.LongTensor(N):random(1, 10)

torch.manualSeed(1000)
local model = build(opt.model)
local criterion = nn.ClassNLLCriterion()
local params = model:getParameters()
local init = params:clone()

local B
local function step(k)
  local x = X:narrow(1, k * B + 1, B)
  local y = Y:narrow(1, k * B + 1, B)
  local output = model:forward(x)
  criterion:forward(output, y)
  model:zeroGradParameters()
  model:backward(x, criterion:backward(output, y))
  model:updateParameters(opt.lr)
end
local function run(k0, n) for k = k0, k0 + n - 1 do step(k) end end
local function sync() end

-- the mean loss on the first 1200 examples, in slices of 200
local function loss()
  local total, n = 0, math.min(N, 1200)
  for i = 1, n, 200 do
    local m = math.min(200, n - i + 1)
    total = total + criterion:forward(model:forward(X:narrow(1, i, m)), Y:narrow(1, i, m)) * m
  end
  return total / n
end

local timer = torch.Timer()
local function clock() return timer:time().real end

for b in tostring(opt.batches):gmatch('[^,]+') do
  B = tonumber(b)
  local nb = math.floor(N / B)
  run(0, math.max(2, math.min(nb, math.ceil(common.WARMUP_EXAMPLES / B))))
  params:copy(init)
  local loss0 = loss()
  local check = common.check_pass(nb, opt.budget, clock, run, sync)
  local loss1 = loss()
  local r = common.timed_repeats(nb, B, check.steps, check.steps / check.seconds, opt.repeats,
                                 opt.mintime, clock, run, sync)
  print(common.csv_row({ system = opt.system, variant = opt.variant, model = opt.model, batch = B,
                         threads = opt.threads, rates = r.rates, examples = r.examples,
                         seconds = r.seconds, check_examples = check.steps * B, loss0 = loss0,
                         loss1 = loss1 }))
  io.stdout:flush()
  params:copy(init)
end
