-- bench/compile.lua — how long compiling takes: the 3-hidden-layer tanh
-- MLP training function (784-1000-1000-1000-10, the paper's largest
-- model), cold with each compile mode (empty kernel cache) and warm (the
-- cache filled by a previous process).  Each figure comes from a fresh
-- process, so nothing is cached in memory.
--   tgl bench/compile.lua            (the table)
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

local base = os.tmpname()
os.remove(base)
print('compile time of the 784-1000-1000-1000-10 tanh MLP training function (ms)')
print(('%-22s %10s %12s %14s %16s'):format('case', 'graph', 'tgl.compile', 'first call', 'all kernels ready'))
for _, case in ipairs({ { 'cold, tiered', 'tiered', true }, { 'cold, sync (cc -O3)', 'sync', true },
                        { 'cold, tcc only', 'tcc', true }, { 'warm (disk cache)', 'sync', false } }) do
  local name, mode, cold = case[1], case[2], case[3]
  local dir = base .. '-' .. mode .. (cold and '-cold' or '-warm')
  if not cold then child('sync', dir) end -- fill the cache first
  local g, c, f1, r = child(mode, dir)
  print(('%-22s %10.1f %12.1f %14.1f %16.1f'):format(name, g * 1e3, c * 1e3, f1 * 1e3, r * 1e3))
  os.execute(('rm -rf %q'):format(dir))
end
