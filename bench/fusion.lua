-- bench/fusion.lua — what elementwise fusion buys: y = tanh(a*x + b) * c on
-- 10^6 float32, as one generated kernel (compiled, fused), as the same
-- compiled graph with fusion switched off (one reference kernel per op),
-- and op by op on arrays (eager).  Threads: tgl.config.threads (argument).
--   tgl bench/fusion.lua [threads]
local threads = tonumber(arg and arg[1]) or 1
tgl.config.threads = threads
tgl.config.compile = 'sync'
local N = 1000000
tgl.manual_seed(1)
local xa = tgl.randn(N)
local a, b, c = 1.5, -0.25, 0.75

local function best(fn, reps)
  fn()
  local t = math.huge
  for _ = 1, reps do
    local t0 = tgl.time()
    fn()
    t = math.min(t, tgl.time() - t0)
  end
  return t
end

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

local t_fused = best(function() fused(xa) end, 20)
local t_unfused = best(function() unfused(xa) end, 10)
local t_eager = best(function() local _ = tgl.tanh(xa * a + b) * c end, 10)
print(('tanh(a*x+b)*c on %d float32, %d thread(s):'):format(N, threads))
print(('  fused kernel          %8.3f ms'):format(t_fused * 1e3))
print(('  compiled, unfused     %8.3f ms   (%.1fx the fused time)'):format(t_unfused * 1e3, t_unfused / t_fused))
print(('  eager, op by op       %8.3f ms   (%.1fx the fused time)'):format(t_eager * 1e3, t_eager / t_fused))
print(('  largest difference from eager: %.3g'):format(worst))
print(tgl.debugprint(fused))
