-- bench/nn_step.lua — one SGD training step of the 784-500-10 tanh MLP
-- (LogSoftMax + ClassNLLCriterion, batch 60, float32, one thread), four
-- ways: nn.compile's step (one compiled function: forward, loss,
-- gradients, update), the same step written by hand with tgl.compile
-- (shared W1, b1, W2, b2 and their updates), the eager nn loop
-- (zeroGradParameters, forward, criterion forward/backward, backward,
-- updateParameters: five compiled calls) and Torch7's closure idiom
-- (optim.sgd over getParameters' flat arrays, feval running the eager
-- forward/backward).  Random inputs and labels; each figure is the median
-- of R repeats of at least S seconds of steps (bench/lib/stats.lua), in
-- wall-clock and in CPU time, with the load average before and after.
--   tgl bench/nn_step.lua [--repeats R] [--min-time S]     (default 5, 0.5)
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
if #rest > 0 then
  io.stderr:write('usage: tgl bench/nn_step.lua [--repeats R] [--min-time S]\n')
  os.exit(2)
end
tgl.config.threads = 1
tgl.config.floatX = 'float32'
local nn = require 'nn'
require 'optim'

local function loadavg()
  local f = io.open('/proc/loadavg')
  if not f then return '?' end
  local s = f:read('*l')
  f:close()
  return s:match('^(%S+ %S+ %S+)')
end

local B, NIN, NH, NOUT, LR = 60, 784, 500, 10, 0.01
tgl.manual_seed(1)
local x = tgl.randn(B, NIN)
local lab = {}
for i = 1, B do lab[i] = (i * 7) % NOUT + 1 end
local y = tgl.array(lab, 'int64')

local function mlp()
  tgl.manual_seed(2)
  return nn.Sequential():add(nn.Linear(NIN, NH)):add(nn.Tanh()):add(nn.Linear(NH, NOUT)):add(nn.LogSoftMax())
end
local crit = nn.ClassNLLCriterion()

-- 1. nn.compile
local m1 = mlp()
local step = nn.compile { model = m1, criterion = crit, optimizer = nn.optim.sgd { lr = LR } }

-- 2. by hand: the same model's arrays as shared variables
local m2 = mlp()
local W1 = tgl.shared(m2:get(1).weight, 'W1', { borrow = true })
local b1 = tgl.shared(m2:get(1).bias, 'b1', { borrow = true })
local W2 = tgl.shared(m2:get(3).weight, 'W2', { borrow = true })
local b2 = tgl.shared(m2:get(3).bias, 'b2', { borrow = true })
local xs, ys = tgl.matrix('x'), tgl.lvector('y')
local h = tgl.tanh(xs:dot(W1:T()) + b1)
local logp = tgl.log_softmax(h:dot(W2:T()) + b2)
local cost = -tgl.mean(tgl.sum(logp * tgl.one_hot(ys, NOUT, 'float32'), 2))
local params = { W1, b1, W2, b2 }
local grads = tgl.grad(cost, params)
local ups = {}
for i, p in ipairs(params) do ups[i] = { p, p - LR * grads[i] } end
local hand = tgl.compile { inputs = { xs, ys }, outputs = cost, updates = ups, name = 'mlp_step' }

-- 3. the eager nn loop
local m3 = mlp()
local function eager_step()
  m3:zeroGradParameters()
  local out = m3:forward(x)
  local loss = crit:forward(out, y)
  m3:backward(x, crit:backward(out, y))
  m3:updateParameters(LR)
  return loss
end

-- 4. Torch7's closure idiom
local m4 = mlp()
local p4, g4 = m4:getParameters()
local function feval()
  g4:zero()
  local out = m4:forward(x)
  local loss = crit:forward(out, y)
  m4:backward(x, crit:backward(out, y))
  return loss, g4
end
local ostate = { learningRate = LR }

-- the four start from the same weights: their first losses agree
local l1, l2, l3 = step:step(x, y), hand(x, y):get(), eager_step()
local _, f4 = optim.sgd(feval, p4, ostate)
assert(math.abs(l1 - l2) < 1e-4 and math.abs(l1 - l3) < 1e-4 and math.abs(l1 - f4[1]) < 1e-4,
       ('first losses differ: %g %g %g %g'):format(l1, l2, l3, f4[1]))

local la0 = loadavg()
print(('784-500-10 tanh MLP, SGD step, batch %d, float32, 1 thread; %s'):format(B, stats.describe()))
local rows = {
  { 'nn.compile step', function(n) for _ = 1, n do step:step(x, y) end end },
  { 'tgl.compile by hand', function(n) for _ = 1, n do hand(x, y) end end },
  { 'eager nn loop', function(n) for _ = 1, n do eager_step() end end },
  { 'optim.sgd closure', function(n) for _ = 1, n do optim.sgd(feval, p4, ostate) end end },
}
-- wall-clock time, and the process's CPU time (os.clock: one thread, so
-- on a busy machine it is the steadier figure; it excludes waiting)
for _, clock in ipairs({ { 'wall', tgl.time }, { 'cpu', os.clock } }) do
  local res = {}
  for i, r in ipairs(rows) do
    res[i] = stats.measure(r[2], clock[2], { warmup = 5 })
    print(('  %-22s %-4s %s'):format(r[1], clock[1], stats.format(res[i], '%8.3f', 1e3, 'ms/step')))
  end
  print(('  %s: nn.compile / by hand: %.2f; eager / nn.compile: %.2f; closure / nn.compile: %.2f')
        :format(clock[1], res[1].median / res[2].median, res[3].median / res[1].median,
                res[4].median / res[1].median))
end
print(('  load average before: %s, after: %s'):format(la0, loadavg()))
