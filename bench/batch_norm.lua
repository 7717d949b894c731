-- bench/batch_norm.lua — batch normalisation at the sizes doc/performance.md
-- quotes: SpatialBatchNormalization(20) on 60x20x24x24 and
-- BatchNormalization(500) on 60x500, float32, one thread.  Per call:
--   op          tgl.batch_norm (x, weight, bias) compiled: the forward
--               (y, mean, var), and forward + gradients of sum(y * g)
--               with respect to x, weight and bias;
--   plain ops   the same normalisation written with tgl.mean and
--               elementwise ops (what a user writes without the op), for
--               comparison;
--   module      the nn module's forward (training: running statistics
--               updated) and forward + backward, as a Torch7 loop calls
--               them.
-- Each figure is the median of R repeats of at least S seconds of calls,
-- with the min–max over the repeats (bench/lib/stats.lua).
-- --cpu times with the process's CPU time (os.clock) instead of the wall
-- clock: on a machine other jobs share, the CPU time of the one thread
-- working is the steadier figure.  The header gives the load average.
--   tgl bench/batch_norm.lua [--repeats R] [--min-time S] [--cpu]     (default 5, 0.5)
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local nn = require 'nn'
local rest = stats.parse_args(arg)
local clock, clock_name = tgl.time, 'wall clock'
if rest[1] == '--cpu' then clock, clock_name = os.clock, 'CPU time'; table.remove(rest, 1) end
if #rest > 0 then
  io.stderr:write('usage: tgl bench/batch_norm.lua [--repeats R] [--min-time S] [--cpu]\n')
  os.exit(2)
end
local function loadavg()
  local f = io.open('/proc/loadavg')
  local l = f and f:read('*l') or 'unknown'
  if f then f:close() end
  return l:match('^(%S+ %S+ %S+)') or l
end
tgl.config.threads = 1
tgl.config.compile = 'sync'
tgl.config.floatX = 'float32'

-- {label, x shape, module}
local CASES = {
  { 'SpatialBatchNormalization(20), 60x20x24x24', { 60, 20, 24, 24 }, nn.SpatialBatchNormalization },
  { 'BatchNormalization(500), 60x500', { 60, 500 }, nn.BatchNormalization },
}

-- x normalised per channel (axis 2) with plain ops: mean over the other
-- axes, the biased variance as the mean of the squared deviation.
local function plain_bn(x, w, b, eps)
  local axes = {}
  for d = 1, x.ndim do if d ~= 2 then axes[#axes + 1] = d end end
  local m = tgl.mean(x, axes, { keepdims = true })
  local xc = x - m
  local v = tgl.mean(xc * xc, axes, { keepdims = true })
  local order = { 'x', 1 }
  for d = 3, x.ndim do order[d] = 'x' end
  return xc / tgl.sqrt(v + eps) * w:dimshuffle(order) + b:dimshuffle(order)
end

print(('batch normalisation, float32, 1 thread, %s; %s; load average %s'):format(clock_name, stats.describe(), loadavg()))
for _, c in ipairs(CASES) do
  local label, shape, Module = c[1], c[2], c[3]
  local C = shape[2]
  local x = tgl.tensor { dtype = 'float32', ndim = #shape, name = 'x' }
  local w = tgl.tensor { dtype = 'float32', ndim = 1, name = 'w' }
  local b = tgl.tensor { dtype = 'float32', ndim = 1, name = 'b' }
  local g = tgl.tensor { dtype = 'float32', ndim = #shape, name = 'g' }
  local xa = tgl.randn(unpack(shape)):astype('float32')
  local ga = tgl.randn(unpack(shape)):astype('float32')
  local wa, ba = tgl.rand(C):astype('float32'), tgl.zeros(C):astype('float32')
  local function run(f, ...)
    local args = { ... }
    return function(n) for _ = 1, n do f(unpack(args)) end end
  end
  local rows = {}
  for _, form in ipairs({ 'op', 'plain ops' }) do
    local y, mean, var
    if form == 'op' then y, mean, var = tgl.batch_norm(x, w, b)
    else y = plain_bn(x, w, b, 1e-5) end
    local fwd = tgl.compile { inputs = { x, w, b }, outputs = form == 'op' and { y, mean, var } or y,
                              name = 'bn_fwd' }
    local gx, gw, gb = unpack(tgl.grad(tgl.sum(y * g), { x, w, b }))
    local both = tgl.compile { inputs = { x, w, b, g }, outputs = { y, gx, gw, gb }, name = 'bn_grad' }
    rows[#rows + 1] = { form .. ', forward', stats.measure(run(fwd, xa, wa, ba), clock, { warmup = 3 }) }
    rows[#rows + 1] = { form .. ', forward + grads',
                        stats.measure(run(both, xa, wa, ba, ga), clock, { warmup = 3 }) }
  end
  local m = Module(C):float()
  rows[#rows + 1] = { 'module, forward', stats.measure(function(n)
    for _ = 1, n do m:forward(xa) end
  end, clock, { warmup = 3 }) }
  rows[#rows + 1] = { 'module, forward + backward', stats.measure(function(n)
    for _ = 1, n do m:forward(xa); m:backward(xa, ga) end
  end, clock, { warmup = 3 }) }
  print(label .. ' (load average ' .. loadavg() .. ')')
  for _, r in ipairs(rows) do print(('  %-28s %s'):format(r[1], stats.format(r[2], '%9.3f', 1e3, 'ms/call'))) end
end
