-- bench/nn_eager.lua — Torch7-style eager nn calls against one compiled
-- step, for issue 21's target "eager module calls within 1.5x of the
-- compiled step at batch 60".
--
-- The model: 784-500-10, tanh, LogSoftMax + ClassNLLCriterion, float32,
-- batch 60 (--batch B), plain SGD (lr 0.01).  Two ways to run one step:
--   eager     model:zeroGradParameters(); out = model:forward(x);
--             crit:forward(out, y); model:backward(x, crit:backward(out, y));
--             model:updateParameters(lr)     (each call a cached compiled function)
--   compiled  one tgl.compile'd function of x and y: forward, loss,
--             gradients and the SGD updates (the shape of nn.compile's step)
-- Figures: milliseconds per step, median of the repeats (bench/lib/stats.lua),
-- with the load average when the run started.  Threads: tgl.config.threads
-- = --threads (default 1; set OPENBLAS_NUM_THREADS to match).  --cpu
-- times with the process's CPU clock (os.clock) instead of the wall
-- clock: on a shared, loaded machine with one thread it is the steadier.
--
-- --calls also prints each call's mean time over 1500 eager steps (the
-- CPU clock).
--
--   tgl bench/nn_eager.lua [--batch 60] [--threads 1] [--repeats R] [--min-time S] [--cpu]
--                          [--calls] [--profile]
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local nn = require 'nn'

local args = stats.parse_args(arg)
local opts = { batch = 60, threads = 1, profile = false, cpu = false, calls = false }
local i = 1
while args[i] do
  local k = args[i]:match('^%-%-([%w-]+)$')
  if k == 'profile' or k == 'cpu' or k == 'calls' then opts[k] = true; i = i + 1
  elseif k and opts[k] ~= nil then opts[k] = tonumber(args[i + 1]); i = i + 2
  else error('unknown argument ' .. tostring(args[i]), 0) end
end
tgl.config.threads = opts.threads

local function loadavg()
  local f = io.open('/proc/loadavg')
  if not f then return '?' end
  local s = f:read('*l'); f:close()
  return s:match('^(%S+ %S+ %S+)')
end

tgl.manual_seed(1)
local B, lr = opts.batch, 0.01
local model = nn.Sequential():add(nn.Linear(784, 500)):add(nn.Tanh()):add(nn.Linear(500, 10))
                             :add(nn.LogSoftMax())
local crit = nn.ClassNLLCriterion()
local x = tgl.randn(B, 784)
local y = tgl.array((function() local t = {} for k = 1, B do t[k] = (k % 10) + 1 end return t end)(), 'int64')

local function eager_step()
  model:zeroGradParameters()
  local out = model:forward(x)
  crit:forward(out, y)
  model:backward(x, crit:backward(out, y))
  model:updateParameters(lr)
end

-- The hand-compiled step on the same parameters (the modules' shared
-- variables): loss, gradients, SGD updates in one function.  (One eager
-- step first: the criterion's graph reads the batch's shape from it.)
eager_step()
local xs, ys = tgl.matrix('x'), tgl.lvector('y')
local out = model:graph(xs)
local loss = crit:graph(out, ys)
local params = {}
for _, m in ipairs(model:listModules()) do
  if m.weight then params[#params + 1] = m:_var('weight'); params[#params + 1] = m:_var('bias') end
end
local grads = tgl.grad(loss, params)
local updates = {}
for k, p in ipairs(params) do updates[k] = { p, p - lr * grads[k] } end
local step = tgl.compile { inputs = { xs, ys }, outputs = loss, updates = updates, name = 'hand_step',
                          profile = opts.profile }
local function compiled_step() step(x, y) end

print(('# nn eager vs compiled step, 784-500-10 tanh, batch %d, float32, threads %d, %s clock; load average %s')
      :format(B, opts.threads, opts.cpu and 'cpu' or 'wall', loadavg()))
print('# ' .. stats.describe())
local clock = opts.cpu and os.clock or tgl.time
local se = stats.measure(function(n) for _ = 1, n do eager_step() end end, clock, { warmup = 5 })
local sc = stats.measure(function(n) for _ = 1, n do compiled_step() end end, clock, { warmup = 5 })
print('eager     ' .. stats.format(se, '%.3f', 1e3, 'ms/step'))
print('compiled  ' .. stats.format(sc, '%.3f', 1e3, 'ms/step'))
print(('ratio eager/compiled: %.2f   (load average now %s)'):format(se.median / sc.median, loadavg()))
if opts.profile then print(step:profile_summary()) end
if opts.calls then
  local o, g
  local calls = {
    { 'zeroGradParameters', function() model:zeroGradParameters() end },
    { 'forward', function() o = model:forward(x) end },
    { 'criterion forward + backward', function() crit:forward(o, y); g = crit:backward(o, y) end },
    { 'backward', function() model:backward(x, g) end },
    { 'updateParameters', function() model:updateParameters(lr) end },
  }
  local N, tot = 1500, {}
  for step_i = 1, N do
    for k, c in ipairs(calls) do
      local t0 = os.clock()
      c[2]()
      if step_i > 1 then tot[k] = (tot[k] or 0) + os.clock() - t0 end
    end
  end
  for k, c in ipairs(calls) do print(('%-30s %.3f ms'):format(c[1], tot[k] / (N - 1) * 1e3)) end
end
