-- bench/overhead.lua — the cost of calling a tiny compiled function from
-- Lua: y = x + 1 on a 1-element float32 vector, per call, in ns.  Variants:
-- plain calls (conversion and checks), trust_input, the cvm_nogc linker,
-- and f.fn{n_calls = N} (the loop in C).  Also: CVM cost per instruction
-- (a chain of 64 unfused 1-element ops: dispatch, shape, buffer, kernel).
--   tgl bench/overhead.lua [calls]
tgl.config.threads = 1
tgl.config.compile = 'sync'
local N = tonumber(arg and arg[1]) or 200000

local function timeit(label, n, body)
  body(math.min(n, 1000))            -- warm up (JIT traces, buffers)
  collectgarbage()
  local t0 = tgl.time()
  body(n)
  local dt = tgl.time() - t0
  print(('%-34s %9.1f ns/call'):format(label, dt / n * 1e9))
  return dt / n * 1e9
end

local x = tgl.vector('x')
local xa = tgl.ones(1)
local results = {}

for _, linker in ipairs({ 'cvm', 'cvm_nogc' }) do
  local f = tgl.compile { inputs = { x }, outputs = x + 1, linker = linker, name = 'tiny' }
  results[linker] = timeit('call (' .. linker .. ')', N, function(n)
    for _ = 1, n do f(xa) end
  end)
  f.trust_input = true
  results[linker .. '+trust'] = timeit('call, trust_input (' .. linker .. ')', N, function(n)
    for _ = 1, n do f(xa) end
  end)
  results[linker .. '+ncalls'] = timeit('fn{n_calls} (' .. linker .. ')', N, function(n)
    f.fn { n_calls = n }
  end)
end

-- Per instruction: a chain of K cheap ops on a 1-element vector, run in C.
-- (Fusion and the rewrites would fold the chain into one kernel: they are
-- switched off for this measurement.)
local K = 64
local y = x
for k = 1, K do y = k % 2 == 1 and tgl.exp(y) or tgl.log(y) end
tgl.config.exclude = { 'elemwise_fusion' }
local g = tgl.compile { inputs = { x }, outputs = y, linker = 'cvm_nogc', name = 'chain' }
tgl.config.exclude = {}
g.trust_input = true
g(xa)
local per_call = timeit(('fn{n_calls}, %d-op chain'):format(K), N / 10, function(n)
  g.fn { n_calls = n }
end)
print(('%-34s %9.1f ns/instruction'):format('CVM cost per instruction',
      (per_call - results['cvm_nogc+ncalls']) / (K - 1)))
