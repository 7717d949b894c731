-- bench/peers/mlp_torch7.lua — the MLP benchmark in Torch7 (th), run by
-- bench/peers/torch7.sh --run when a Torch7 with nn is installed.
--
-- UNTESTED HERE: no Torch7 exists on Debian 12, where this was written.
-- Torch7 cannot read .npz without extra packages, so it makes its own data
-- and initial weights with the same distributions (inputs N(0, 0.3^2),
-- random labels, Glorot-uniform weights, zero biases) from torch.manualSeed:
-- the speed is comparable, the loss values are not identical to the others.
-- nn.Linear + nn.Tanh, nn.LogSoftMax + nn.ClassNLLCriterion (mean), plain
-- SGD (updateParameters), no gradient w.r.t. the input (the first layer's
-- gradInput is switched off).  Threads: torch.setnumthreads(--threads).
-- Timing as bench/lib/mlp_common.lua: warm-up, the check pass (cut by
-- --budget), then --repeats timed repeats of at least --min-time seconds.
require 'torch'
require 'nn'

local opts = { models = 'logreg,mlp1,mlp3', batches = '1,10,60,256', threads = 1, budget = 0,
  repeats = tonumber(os.getenv('TGL_BENCH_REPEATS')) or 5,
  ['min-time'] = tonumber(os.getenv('TGL_BENCH_MIN_TIME')) or 0.5, system = 'torch7' }
local i = 1
while arg[i] do
  local k = arg[i]:match('^%-%-([%w-]+)$')
  if k == 'header' then i = i + 1
  elseif k and arg[i + 1] then opts[k] = tonumber(arg[i + 1]) or arg[i + 1]; i = i + 2
  else i = i + 1 end
end
torch.setnumthreads(opts.threads)
torch.setdefaulttensortype('torch.FloatTensor')

local N, LR, WARM, CHUNKS = 6000, 0.01, 600, 20
local MODELS = { logreg = { 784, 10 }, mlp1 = { 784, 500, 10 }, mlp3 = { 784, 1000, 1000, 1000, 10 } }
local function split(s) local t = {} for w in tostring(s):gmatch('[^,]+') do t[#t + 1] = tonumber(w) or w end return t end

torch.manualSeed(20120)
local X = torch.randn(N, 784):mul(0.3)
local Y = torch.LongTensor(N):random(1, 10)

for _, name in ipairs(split(opts.models)) do
  local sizes = MODELS[name]
  torch.manualSeed(1000)
  local model = nn.Sequential()
  for l = 1, #sizes - 1 do
    local lin = nn.Linear(sizes[l], sizes[l + 1])
    local r = math.sqrt(6 / (sizes[l] + sizes[l + 1]))
    lin.weight:uniform(-r, r); lin.bias:zero()
    if l == 1 then lin.gradInput = nil end
    model:add(lin)
    if l < #sizes - 1 then model:add(nn.Tanh()) end
  end
  model:add(nn.LogSoftMax())
  local crit = nn.ClassNLLCriterion()
  local init = model:getParameters():clone()
  local params = model:getParameters()
  local function step(k, B)
    local x, y = X:narrow(1, k * B + 1, B), Y:narrow(1, k * B + 1, B)
    local out = model:forward(x)
    crit:forward(out, y)
    model:zeroGradParameters()
    model:backward(x, crit:backward(out, y))
    model:updateParameters(LR)
  end
  local function eval() return crit:forward(model:forward(X), Y) end
  for _, B in ipairs(split(opts.batches)) do
    local nb = math.floor(N / B)
    for k = 0, math.max(2, math.min(nb, math.ceil(WARM / B))) - 1 do step(k % nb, B) end
    params:copy(init)
    local loss0 = eval()
    local chunk, done, timer = math.max(1, math.ceil(nb / CHUNKS)), 0, torch.Timer()
    local dt = 0
    while done < nb do
      for k = done, math.min(nb, done + chunk) - 1 do step(k, B) end
      done = math.min(nb, done + chunk)
      dt = timer:time().real
      if opts.budget > 0 and dt > opts.budget then break end
    end
    local loss1 = eval()
    -- the timed repeats: on through the data from where the check pass
    -- stopped, chunks of about min-time / CHUNKS seconds, one untimed first
    local rchunk = math.max(1, math.min(nb, math.floor(done / dt * opts['min-time'] / CHUNKS)))
    local pos = done % nb
    local function one_chunk()
      local n = math.min(rchunk, nb - pos)
      for k = pos, pos + n - 1 do step(k, B) end
      pos = (pos + n) % nb
      return n
    end
    one_chunk()
    local rates, examples, seconds = {}, 0, 0
    for r = 1, opts.repeats do
      collectgarbage()
      local steps, t0, d = 0, timer:time().real, 0
      repeat
        steps = steps + one_chunk()
        d = timer:time().real - t0
      until d >= opts['min-time']
      rates[r] = steps * B / d
      examples, seconds = examples + steps * B, seconds + d
    end
    local sorted = {}
    for r, v in ipairs(rates) do sorted[r] = v end
    table.sort(sorted)
    local nr = #sorted
    local med = nr % 2 == 1 and sorted[(nr + 1) / 2] or (sorted[nr / 2] + sorted[nr / 2 + 1]) / 2
    local rs = {}
    for r, v in ipairs(rates) do rs[r] = ('%.1f'):format(v) end
    print(('%s,nn,%s,%d,%d,%d,%.6f,%.1f,%.1f,%.1f,%.2f,%d,%s,%d,%.6f,%.6f,%s'):format(opts.system, name, B,
          opts.threads, examples, seconds, med, sorted[1], sorted[nr], 100 * (sorted[nr] - sorted[1]) / med, nr,
          table.concat(rs, ';'), done * B, loss0, loss1, loss1 < loss0 and 'yes' or 'NO'))
    params:copy(init)
  end
end
