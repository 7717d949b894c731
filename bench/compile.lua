-- bench/compile.lua — how long compiling takes: the 3-hidden-layer tanh
-- MLP training function (784-1000-1000-1000-10, the paper's largest
-- model), cold with each compile mode (empty kernel cache) and warm (the
-- cache filled by a previous process).  Each measurement comes from a
-- fresh process, so nothing is cached in memory; each figure is the median
-- of R such processes (the cases take turns, R rounds), with the min–max
-- and the spread of the "all kernels ready" column (bench/lib/stats.lua).
-- A compile happens once per process, so there is no minimum time here.
--   tgl bench/compile.lua [--repeats R]          (the table; default 5)
--   tgl bench/compile.lua --child MODE CACHE_DIR   (one measurement)

local function build_and_compile(mode)
  local t0 = tgl.time()
  local x, y = tgl.matrix('x'), tgl.ivector('y')
  local sizes = { 784, 1000, 1000, 1000, 10 }
  local params, h = {}, x
  for i = 1, #sizes - 1 do
    local W = tgl.shared(tgl.zeros(sizes[i], sizes[i + 1]), 'W' .. i)
    local b = tgl.shared(tgl.zeros(sizes[i + 1]), 'b' .. i)
    params[#params + 1], params[#params + 2] = W, b
    local a = h:dot(W) + b
    h = i < #sizes - 1 and tgl.tanh(a) or a
  end
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
  local grads = tgl.grad(cost, params)
  local updates = {}
  for i, p in ipairs(params) do updates[i] = { p, p - 0.01 * grads[i] } end
  local t1 = tgl.time()
  tgl.config.compile = mode
  local f = tgl.compile { inputs = { x, y }, outputs = cost, updates = updates, name = 'train' }
  local t2 = tgl.time()
  -- callable at once: one call (tiered: on the libtcc kernels)
  f(tgl.zeros(2, 784), tgl.array({ 1, 2 }, 'int32'))
  local t3 = tgl.time()
  f:wait_compiled()
  local t4 = tgl.time()
  return t1 - t0, t2 - t1, t3 - t2, t4 - t1
end

if arg[1] == '--child' then
  tgl.config.cache_dir = arg[3]
  local graph, compile, first_call, ready = build_and_compile(arg[2])
  print(('%.6f %.6f %.6f %.6f'):format(graph, compile, first_call, ready))
  return
end

package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/lib/?.lua;' .. package.path
local stats = require 'stats'
local rest = stats.parse_args(arg)
if #rest > 0 then
  io.stderr:write('usage: tgl bench/compile.lua [--repeats R]\n')
  os.exit(2)
end

local tgl_bin = arg[-1] or 'tgl'
local script = arg[0]
local function child(mode, dir)
  local p = assert(io.popen(('%q %q --child %s %q'):format(tgl_bin, script, mode, dir)))
  local out = p:read('*a')
  p:close()
  local g, c, f1, r = out:match('([%d.]+) ([%d.]+) ([%d.]+) ([%d.]+)')
  if not g then error('child failed: ' .. out) end
  return tonumber(g), tonumber(c), tonumber(f1), tonumber(r)
end

local CASES = { { 'cold, tiered', 'tiered', true }, { 'cold, sync (cc -O3)', 'sync', true },
                { 'cold, tcc only', 'tcc', true }, { 'warm (disk cache)', 'sync', false } }
local base = os.tmpname()
os.remove(base)
local warm_dir = base .. '-warm'
child('sync', warm_dir)                       -- fill the warm case's cache first
local times = {}                              -- times[case][column] = list of seconds
for ci = 1, #CASES do times[ci] = { {}, {}, {}, {} } end
for r = 1, stats.REPEATS do
  for ci, case in ipairs(CASES) do
    local mode, cold = case[2], case[3]
    local dir = cold and ('%s-%s-cold-%d'):format(base, mode, r) or warm_dir
    local m = { child(mode, dir) }
    for k = 1, 4 do times[ci][k][r] = m[k] end
    if cold then os.execute(('rm -rf %q'):format(dir)) end
  end
end
os.execute(('rm -rf %q'):format(warm_dir))

print(('compile time of the 784-1000-1000-1000-10 tanh MLP training function (ms): median of %d fresh ' ..
       'processes per case (min–max); spread of the last column in %% of its median, ! above %d%%'):format(
       stats.REPEATS, stats.FLAG_PCT))
print(('%-22s %20s %20s %20s %20s %7s'):format('case', 'graph', 'tgl.compile', 'first call', 'all kernels ready',
      'spread'))
local function cell(s) return ('%.1f (%.1f–%.1f)'):format(s.median * 1e3, s.min * 1e3, s.max * 1e3) end
for ci, case in ipairs(CASES) do
  local s = {}
  for k = 1, 4 do s[k] = stats.summary(times[ci][k]) end
  print(('%-22s %20s %20s %20s %20s %6.0f%%%s'):format(case[1], cell(s[1]), cell(s[2]), cell(s[3]), cell(s[4]),
        s[4].spread_pct, s[4].spread_pct > stats.FLAG_PCT and ' !' or ''))
end
