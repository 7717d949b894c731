-- bench/overhead.lua — the cost of calling a tiny compiled function from
-- Lua: y = x + 1 on a 1-element float32 vector, per call, in ns.  Variants:
-- plain calls (conversion and checks), trust_input, the cvm_nogc linker,
-- and f.fn{n_calls = N} (the loop in C).  Also: CVM cost per instruction
-- (a chain of 64 unfused 1-element ops: dispatch, shape, buffer, kernel).
-- Each figure is the median of R repeats of at least S seconds of calls,
-- with the min–max over the repeats and the spread in % of the median
-- (bench/lib/stats.lua; "!" marks a spread above 10%).
--   tgl bench/overhead.lua [--repeats R] [--min-time S]     (default 5, 0.5)
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
if #rest > 0 then
  io.stderr:write('usage: tgl bench/overhead.lua [--repeats R] [--min-time S]\n')
  os.exit(2)
end
tgl.config.threads = 1
tgl.config.compile = 'sync'

local function timeit(label, body)
  local s = stats.measure(body, tgl.time, { warmup = 1000 })  -- warm-up: JIT traces, buffers
  print(('%-34s %s'):format(label, stats.format(s, '%9.1f', 1e9, 'ns/call')))
  return s
end

print(('y = x + 1 on 1 float32, 1 thread; %s'):format(stats.describe()))
local x = tgl.vector('x')
local xa = tgl.ones(1)
local results = {}

-- Each variant calls its own function: LuaJIT compiles a loop's calls for
-- the mode it first sees, so a function switched to trust_input after
-- thousands of plain calls would measure the switch's side trace, not the
-- call.  (Outputs carry no ffi.gc finalizer since issue 23 item 6: one
-- running while LuaJIT recorded used to abort the trace, and the trace was
-- then blacklisted, leaving the trust_input loop on the interpreter.)  A
-- dropped output's buffer is reused once the collector has seen it dropped
-- (doc/compile.md, "Outputs and their buffers"); f:output_stats() counts.
for _, linker in ipairs({ 'cvm', 'cvm_nogc' }) do
  local f = tgl.compile { inputs = { x }, outputs = x + 1, linker = linker, name = 'tiny' }
  results[linker] = timeit('call (' .. linker .. ')', function(n)
    for _ = 1, n do f(xa) end
  end)
  local ft = tgl.compile { inputs = { x }, outputs = x + 1, linker = linker, name = 'tiny' }
  ft.trust_input = true
  results[linker .. '+trust'] = timeit('call, trust_input (' .. linker .. ')', function(n)
    for _ = 1, n do ft(xa) end
  end)
  results[linker .. '+ncalls'] = timeit('fn{n_calls} (' .. linker .. ')', function(n)
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
local chain = timeit(('fn{n_calls}, %d-op chain'):format(K), function(n)
  g.fn { n_calls = n }
end)
-- The difference of two medians; the range pairs the extremes (the
-- chain's fastest repeat with the 1-op program's slowest, and back).
local one = results['cvm_nogc+ncalls']
print(('%-34s %9.1f ns/instruction (%.1f–%.1f from the extremes)'):format('CVM cost per instruction',
      (chain.median - one.median) / (K - 1) * 1e9, (chain.min - one.max) / (K - 1) * 1e9,
      (chain.max - one.min) / (K - 1) * 1e9))
