-- bench/conv.lua — tgl.conv2d's CPU kernels on the layers doc/performance.md
-- quotes ("Convolutions"): per call of a compiled function, float32, one
-- thread, the forward alone and the forward with both gradients of
-- sum(y^2).  The kernel picks its path itself (im2col + GEMM from 256
-- multiply-adds per image and group, else direct loops), so this measures
-- what users get.  Each figure is the median of R repeats of at least S
-- seconds of calls, with the min–max over the repeats (bench/lib/stats.lua).
-- --cpu times with the process's CPU time (os.clock) instead of the wall
-- clock: on a machine shared with other work it counts only this process's
-- own time (one thread, so the two agree on an idle machine).
--   tgl bench/conv.lua [--repeats R] [--min-time S] [--cpu]     (default 5, 0.5)
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
local clock, clock_name = tgl.time, 'wall clock'
if rest[1] == '--cpu' then
  clock, clock_name = os.clock, 'process CPU time'
  table.remove(rest, 1)
end
if #rest > 0 then
  io.stderr:write('usage: tgl bench/conv.lua [--repeats R] [--min-time S] [--cpu]\n')
  os.exit(2)
end
tgl.config.threads = 1
tgl.config.compile = 'sync'

-- {label, x shape, w shape, options}
local LAYERS = {
  { 'LeNet 1: 60x1x28x28 by 20x1x5x5', { 60, 1, 28, 28 }, { 20, 1, 5, 5 }, {} },
  { 'LeNet 2: 60x20x12x12 by 50x20x5x5', { 60, 20, 12, 12 }, { 50, 20, 5, 5 }, {} },
  { '8x8x16x16 by 16x8x3x3, padding 1', { 8, 8, 16, 16 }, { 16, 8, 3, 3 }, { padding = 1 } },
  { 'depthwise 8x16x16x16 by 16x1x3x3, 16 groups', { 8, 16, 16, 16 }, { 16, 1, 3, 3 },
    { padding = 1, groups = 16 } },
}

print(('tgl.conv2d, float32, 1 thread, %s; %s'):format(clock_name, stats.describe()))
for _, l in ipairs(LAYERS) do
  local label, xs, ws, opts = l[1], l[2], l[3], l[4]
  local x = tgl.tensor { dtype = 'float32', ndim = 4, name = 'x' }
  local w = tgl.tensor { dtype = 'float32', ndim = 4, name = 'w' }
  local y = tgl.conv2d(x, w, opts)
  local fwd = tgl.compile { inputs = { x, w }, outputs = y, name = 'conv_fwd' }
  local cost = tgl.sum(y * y)
  local gx, gw = unpack(tgl.grad(cost, { x, w }))
  local both = tgl.compile { inputs = { x, w }, outputs = { cost, gx, gw }, name = 'conv_grad' }
  local xa = tgl.randn(unpack(xs)):astype('float32')
  local wa = tgl.randn(unpack(ws)):astype('float32')
  local function run(f) return function(n) for _ = 1, n do f(xa, wa) end end end
  local s1 = stats.measure(run(fwd), clock, { warmup = 3 })
  local s2 = stats.measure(run(both), clock, { warmup = 3 })
  print(label)
  print(('  %-20s %s'):format('forward', stats.format(s1, '%9.3f', 1e3, 'ms/call')))
  print(('  %-20s %s'):format('forward + grads', stats.format(s2, '%9.3f', 1e3, 'ms/call')))
end
