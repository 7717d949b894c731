-- bench/fusion.lua — what elementwise fusion buys: y = tanh(a*x + b) * c on
-- 10^6 float32, as one generated kernel (compiled, fused; per call from Lua,
-- and the kernel alone through fn{n_calls}), as the same compiled graph
-- with fusion switched off (one reference kernel per op), and op by op on
-- arrays (eager).  Threads: tgl.config.threads (argument).  Each figure is
-- the median of R repeats of at least S seconds of calls, with the min–max
-- and the spread in % of the median (bench/lib/stats.lua).
--   tgl bench/fusion.lua [threads] [--repeats R] [--min-time S]
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
local threads = tonumber(rest[1]) or 1
tgl.config.threads = threads
tgl.config.compile = 'sync'
local N = 1000000
tgl.manual_seed(1)
local xa = tgl.randn(N)
local a, b, c = 1.5, -0.25, 0.75

local x = tgl.vector('x')
local expr = tgl.tanh(a * x + b) * c
local fused = tgl.compile { inputs = { x }, outputs = expr, name = 'fused', linker = 'cvm_nogc' }
fused:wait_compiled()
fused.trust_input = true
tgl.config.exclude = { 'elemwise_fusion' }
local unfused = tgl.compile { inputs = { x }, outputs = expr, name = 'unfused', linker = 'cvm_nogc' }
tgl.config.exclude = {}
unfused.trust_input = true

local ref = (tgl.tanh(xa * a + b) * c)
local got = fused(xa)
local worst = tgl.max(tgl.abs(got - ref)):get()

local function per_call(fn)
  return stats.measure(function(n) for _ = 1, n do fn() end end, tgl.time)
end
local t_fused = per_call(function() fused(xa) end)
local t_alone = stats.measure(function(n) fused.fn { n_calls = n } end, tgl.time)  -- inputs of the last call
local t_unfused = per_call(function() unfused(xa) end)
local t_eager = per_call(function() local _ = tgl.tanh(xa * a + b) * c end)
print(('tanh(a*x+b)*c on %d float32, %d thread(s); per call, %s'):format(N, threads, stats.describe()))
print(('  fused kernel          %s'):format(stats.format(t_fused, '%8.3f', 1e3, 'ms')))
print(('  kernel alone (fn)     %s'):format(stats.format(t_alone, '%8.3f', 1e3, 'ms')))
print(('  compiled, unfused     %s   %.1fx the fused time'):format(stats.format(t_unfused, '%8.3f', 1e3, 'ms'),
      t_unfused.median / t_fused.median))
print(('  eager, op by op       %s   %.1fx the fused time'):format(stats.format(t_eager, '%8.3f', 1e3, 'ms'),
      t_eager.median / t_fused.median))
print(('  largest difference from eager: %.3g'):format(worst))
print(tgl.debugprint(fused))
