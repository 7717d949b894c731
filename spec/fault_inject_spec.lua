-- fault_inject_spec.lua — failure injection, SQLite style (issue 24 item 3;
-- doc/contributing.md "Failure injection").  In a build with
-- -DTGL_FAULT_INJECT=ON (the default with the tests) every allocation and
-- every file write of the engine goes through a counting wrapper
-- (src/engine/fault.c).  For each representative operation this spec first
-- counts its K allocations (and K file calls), then for N = 1..K makes the
-- N-th one fail and runs the operation under pcall.  Each run must either
-- succeed with the right values (a failure the engine recovers from: the
-- kernel cache falling back to an uncached kernel) or raise a clear Lua
-- error naming what failed ("out of memory", "No space left on device",
-- "Input/output error"); never crash or abort; shared variables hold
-- exactly their values before the call or after a whole call; a save that
-- fails leaves the old file as it was and no temporary behind.  Afterwards
-- the same operation without injection gives the right values again.  Under
-- the ASan build LSan checks at exit that no failure leaked.
--
-- By default all N up to 200 are tried, then a sample (always the last
-- ones); TGL_FAULT_FULL=1 tries every N, TGL_FAULT_VERBOSE=1 prints each
-- failure and the engine function and line it hit.  Each operation prints
-- how many failures were injected.
local tgl = require 'tgl'
local ffi = require 'ffi'
local S = dofile('spec/support.lua')

-- The hook (src/engine/fault.h); only a TGL_FAULT_INJECT build has it.
ffi.cdef [[
int tgl_fault_arm(int kind, long n);
long tgl_fault_count(int kind);
long tgl_fault_fired(int kind);
const char *tgl_fault_last(int kind);
void *tgl_fault_site(int kind);
typedef struct { const char *dli_fname; void *dli_fbase; const char *dli_sname; void *dli_saddr; } tgl_fault_dl_info;
int dladdr(const void *addr, tgl_fault_dl_info *info);
typedef struct { long tv_sec; long tv_nsec; } tgl_fault_timespec;
int clock_gettime(int clk, tgl_fault_timespec *ts);
]]
local ALLOC, IO = 0, 1
local KIND_NAME = { [ALLOC] = 'allocation', [IO] = 'file call' }
local have_hook = pcall(function() return ffi.C.tgl_fault_arm end)
local H = have_hook and ffi.C or nil

local FULL = os.getenv('TGL_FAULT_FULL') == '1'
local VERBOSE = os.getenv('TGL_FAULT_VERBOSE') == '1' -- one line per injected failure
local FIRST, SAMPLES, LAST = 200, 100, 20

-- Where the engine made the failed call: function and file:line, by
-- addr2line (the build's debug information), for TGL_FAULT_VERBOSE.
local function site_name(p)
  local info = ffi.new('tgl_fault_dl_info')
  if p == nil or ffi.C.dladdr(p, info) == 0 then return '?' end
  local off = ffi.cast('uintptr_t', p) - ffi.cast('uintptr_t', info.dli_fbase) - 1
  local cmd = ('addr2line -f -s -e %q 0x%x 2>/dev/null'):format(ffi.string(info.dli_fname), tonumber(off))
  local h = io.popen(cmd)
  local out = h and h:read('*a') or ''
  if h then h:close() end
  return (out:gsub('\n', ' '):gsub('%s+$', ''))
end

-- The N to try for K counted calls: all of them under TGL_FAULT_FULL=1 or
-- when K is small; else 1..first, about `samples` more spread evenly, and
-- the `last` last ones (an operation may ask for fewer than the defaults:
-- one whose every trial runs the system compiler).
local function plan(K, op)
  local first, samples, last = op.first or FIRST, op.samples or SAMPLES, LAST
  local ns = {}
  if FULL or K <= first + samples + last then
    for n = 1, K do ns[#ns + 1] = n end
    return ns
  end
  for n = 1, first do ns[#ns + 1] = n end
  local step = math.ceil((K - last - first) / samples)
  for n = first + step, K - last, step do ns[#ns + 1] = n end
  for n = K - last + 1, K do ns[#ns + 1] = n end
  return ns
end

-- What a clear error says for an injected failure of each kind.
local CLEAR = {
  [ALLOC] = { 'out of memory', 'Cannot allocate memory' },
  [IO] = { 'No space left on device', 'Input/output error', 'out of memory', 'Cannot allocate memory' },
}
local function assert_clear(kind, err, what)
  err = tostring(err)
  for _, bad in ipairs { 'tgl bug', 'internal error', 'assertion', 'NULL' } do
    assert(not err:find(bad, 1, true), what .. ': an unclear error: ' .. err)
  end
  for _, p in ipairs(CLEAR[kind]) do
    if err:find(p, 1, true) then return end
  end
  error(what .. ': the error does not say what failed: ' .. err, 2)
end

local totals = {}

local function now()
  local ts = ffi.new('tgl_fault_timespec')
  ffi.C.clock_gettime(1, ts) -- CLOCK_MONOTONIC
  return tonumber(ts.tv_sec) + tonumber(ts.tv_nsec) * 1e-9
end

-- Runs op under failure injection of kind.  op = {
--   name,
--   setup(trial) -> ctx      untimed preparation (fresh names, directories)
--   run(ctx) -> result       the operation counted and failed
--   check(ctx, result)       raises unless result holds the right values
--   after(ctx, ok, err)      raises unless the state is right after a run
--                            that succeeded (ok) or failed
-- }
local function inject(kind, op)
  local t0 = now()
  local trial = 0
  local function fresh() trial = trial + 1; return op.setup and op.setup(trial) or {} end
  -- Warm: one run uncounted, so that one-time work (tuning files, lazily
  -- built tables) is not in K.
  do
    local c = fresh()
    op.check(c, op.run(c))
  end
  local c = fresh()
  H.tgl_fault_arm(kind, 0)
  local ok, res = pcall(op.run, c)
  local K = tonumber(H.tgl_fault_count(kind))
  assert(ok, op.name .. ': the counting run failed: ' .. tostring(res))
  op.check(c, res)
  if op.after then op.after(c, true) end
  local ns = plan(K, op)
  local fired, failed, recovered = 0, 0, 0
  for _, n in ipairs(ns) do
    c = fresh()
    H.tgl_fault_arm(kind, n)
    ok, res = pcall(op.run, c)
    local f = tonumber(H.tgl_fault_fired(kind))
    local last = ffi.string(H.tgl_fault_last(kind))
    local site = H.tgl_fault_site(kind)
    H.tgl_fault_arm(kind, 0)
    local what = ('%s, %s %d of %d (%s) failed'):format(op.name, KIND_NAME[kind], n, K, last)
    fired = fired + f
    if VERBOSE then
      print(('  %s %d (%s at %s): %s'):format(KIND_NAME[kind], n, last, site_name(site),
                                       ok and (f == 1 and 'recovered' or 'not reached') or tostring(res)))
    end
    if ok then
      recovered = recovered + f
      local cok, cerr = pcall(op.check, c, res)
      assert(cok, what .. ', yet the call succeeded with wrong values: ' .. tostring(cerr))
    else
      failed = failed + 1
      assert(f == 1, what .. ': an error without an injected failure: ' .. tostring(res))
      assert_clear(kind, res, what)
    end
    if op.after then
      local aok, aerr = pcall(op.after, c, ok, res)
      assert(aok, what .. ': ' .. tostring(aerr))
    end
  end
  -- Healthy again.
  c = fresh()
  op.check(c, op.run(c))
  if op.after then op.after(c, true) end
  local line = ('fault injection: %-28s %-10s K=%-5d tried %-4d fired %-4d errors %-4d recovered %-4d %.1f s')
      :format(op.name, KIND_NAME[kind], K, #ns, fired, failed, recovered, now() - t0)
  print(line)
  totals[#totals + 1] = { fired = fired }
  return K, fired
end

-- ---- helpers ----------------------------------------------------------------

local root = S.tmpdir('fault_inject')

local function listdir(dir)
  local p = assert(io.popen(('ls -A %q 2>/dev/null'):format(dir)))
  local names = {}
  for l in p:lines() do names[#names + 1] = l end
  p:close()
  table.sort(names)
  return names
end

local function bytes(path)
  local f = assert(io.open(path, 'rb'))
  local s = f:read('*a')
  f:close()
  return s
end

local function close(want, got, what, tol)
  S.assert_close(want, got, tol or 1e-6, tol or 1e-6, what)
end

-- ---- the operations --------------------------------------------------------

local A = { { 1, 2, 3 }, { 4, 5, 6 } }

local eager = {
  name = 'eager arithmetic',
  run = function()
    local a = tgl.array(A, 'float64')
    local b = tgl.array({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, 'float64')
    local c = (a * 2 + 1):sum()
    local d = a:dot(b)
    local e = tgl.exp(a - 3):max()
    return { c, d, e, tgl.zeros(2, 3) + a:T():T() }
  end,
  check = function(_, r)
    close(2 * 21 + 6, r[1], 'sum')
    close({ { 4, 5 }, { 10, 11 } }, r[2], 'dot')
    close(math.exp(3), r[3], 'max')
    close(A, r[4], 'add')
  end,
}

local eager_more = {
  name = 'eager indexing, softmax',
  run = function()
    local a = tgl.array({ { 1, 5, 3 }, { 4, 2, 6 } }, 'float64')
    return { tgl.argmax(a, 2), tgl.softmax(a), tgl.concatenate({ a, a }, 1), a[{ {}, 2 }],
             (a + tgl.array({ 10, 20, 30 }, 'float64')):sum(1), a:astype('int32') }
  end,
  check = function(_, r)
    close({ 2, 3 }, r[1], 'argmax')
    local function sm(row)
      local z, out = 0, {}
      for _, v in ipairs(row) do z = z + math.exp(v) end
      for i, v in ipairs(row) do out[i] = math.exp(v) / z end
      return out
    end
    close({ sm { 1, 5, 3 }, sm { 4, 2, 6 } }, r[2], 'softmax', 1e-12)
    close({ { 1, 5, 3 }, { 4, 2, 6 }, { 1, 5, 3 }, { 4, 2, 6 } }, r[3], 'concatenate')
    close({ 5, 2 }, r[4], 'column')
    close({ 25, 47, 69 }, r[5], 'broadcast sum')
    close({ { 1, 5, 3 }, { 4, 2, 6 } }, r[6], 'astype')
  end,
}

-- tgl.Rop: J v of y = 2 x^2 + sin x, with y, compiled.
local rop = {
  name = 'Rop compiled',
  run = function()
    local x, v = tgl.dvector('x'), tgl.dvector('v')
    local y = x * x * 2 + tgl.sin(x)
    local f = tgl.compile { inputs = { x, v }, outputs = { y, tgl.Rop(y, x, v) } }
    return { f(tgl.array({ 0.5, -1, 2 }, 'float64'), tgl.array({ 1, 2, -1 }, 'float64')) }
  end,
  check = function(_, r)
    local xs, vs, y, jv = { 0.5, -1, 2 }, { 1, 2, -1 }, {}, {}
    for i, x in ipairs(xs) do
      y[i] = 2 * x * x + math.sin(x)
      jv[i] = (4 * x + math.cos(x)) * vs[i]
    end
    close(y, r[1], 'y', 1e-12)
    close(jv, r[2], 'Rop', 1e-12)
  end,
}

-- A save over an existing file: the old file stays byte for byte when the
-- save fails, and the directory holds no temporary either way.
local function saver(kind_name, file, new, load_check)
  local dir = root .. '/' .. kind_name
  os.execute(('mkdir -p %q'):format(dir))
  local path = dir .. '/' .. file
  local old = file:match('%.npz$') and { old = tgl.array({ 7, 8, 9 }, 'float64') }
      or tgl.array({ 7, 8, 9 }, 'float64')
  -- replace: over an old file (kept byte for byte on failure); else a new
  -- file (none there on failure)
  local function save(replace)
    return {
      name = kind_name .. (replace and ' save over a file' or ' save to a new file'),
      setup = function()
        os.remove(path)
        if not replace then return {} end
        tgl.save(path, old)
        return { before = bytes(path) }
      end,
      run = function() tgl.save(path, new()); return true end,
      check = function() load_check(tgl.load(path)) end,
      after = function(c, ok)
        local names = listdir(dir)
        if not ok and not replace then
          assert(#names == 0, 'the failed save left ' .. table.concat(names, ', '))
          return
        end
        assert(#names == 1 and names[1] == file,
               'the directory holds ' .. table.concat(names, ', ') .. ' (a temporary left behind?)')
        if not ok then
          assert(bytes(path) == c.before, 'the failed save changed the old file')
        else
          load_check(tgl.load(path))
        end
      end,
    }
  end
  return save(true), save(false), {
    name = kind_name .. ' load',
    setup = function()
      os.remove(path)
      tgl.save(path, new())
      return {}
    end,
    run = function() return tgl.load(path) end,
    check = function(_, r) load_check(r) end,
  }
end

local npy_save, npy_new, npy_load = saver('npy', 'a.npy', function() return tgl.array(A, 'float32') end,
  function(r) close(A, r, 'loaded npy') end)
local npz_save, npz_new, npz_load = saver('npz', 'a.npz',
  function() return { a = tgl.array(A, 'float32'), b = tgl.array({ 1, 2 }, 'int32') } end,
  function(r)
    close(A, r.a, 'loaded npz a')
    close({ 1, 2 }, r.b, 'loaded npz b')
    assert(r.old == nil, 'the old archive\'s array is still there')
  end)

-- A cold compile: a fresh cache directory and a constant of its own each
-- trial (the kernel's source differs, so nothing is reused from the process
-- either): the code generator runs, the system compiler builds the kernel
-- and the cache stores it.  A cache write that fails is recovered from (the
-- kernel runs uncached); anything else fails the compile with a clear error.
local compile_cold = {
  name = 'compile (codegen, cache)',
  first = 100, samples = 60, -- each trial past the code generator runs cc
  setup = function(trial)
    local dir = root .. '/cache-' .. trial
    os.execute(('rm -rf %q'):format(dir))
    tgl.config.cache_dir = dir
    return { dir = dir, k = 1 + trial / 4096 } -- exact in float32
  end,
  run = function(c)
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x * c.k - 0.25) * 0.75 }
    return f(tgl.array(A, 'float32'))
  end,
  check = function(c, r)
    local want = {}
    for i, row in ipairs(A) do
      want[i] = {}
      for j, v in ipairs(row) do want[i][j] = math.tanh(v * c.k - 0.25) * 0.75 end
    end
    close(want, r, 'compiled values', 1e-5)
  end,
  after = function(c)
    for _, name in ipairs(listdir(c.dir)) do
      assert(name:match('^%x+%.so$') or name:match('^tune%-%x+%.txt$'),
             'the cache directory holds ' .. name .. ' (a temporary left behind?)')
    end
  end,
}

-- A training step with updates on shared variables: the graph, its
-- gradient and its compile, then three calls on the same shapes (the whole
-- step is bound on the second call and its C function generated) and one
-- on another batch size (the binding dropped).  The shared variables must
-- hold exactly the values of a whole number of calls (0 to 4).  With cold, each trial's learning rate is its own, so that the
-- kernels and the whole step's function are generated and stored anew
-- (the file-call loop); else the process's compiled code is reused.
local X = { { 1, 2, 3 }, { 0, 1, 0 }, { 2, 0, 1 }, { 1, 1, 1 } }
local Y = { 1, 0, 1, 0 }
local X2, Y2 = { { 1, -1, 0 }, { 0.5, 0, 2 } }, { 0, 1 }
local CALLS = 4 -- three on X (bound on the second), then one on X2 (a new shape)
local function call(f, i)
  if i <= 3 then return f(tgl.array(X, 'float32'), tgl.array(Y, 'float32')):get() end
  return f(tgl.array(X2, 'float32'), tgl.array(Y2, 'float32')):get()
end
local function train_op(cold)
  local ref = {}           -- learning rate -> the values after 0..3 calls
  local function shared()
    return tgl.shared(tgl.array({ { 0.1 }, { -0.2 }, { 0.3 } }, 'float32'), 'W'),
           tgl.shared(tgl.array(0.05, 'float32'), 'b')
  end
  local function step_fn(W, b, lr)
    local x, y = tgl.matrix('x'), tgl.vector('y')
    local p = tgl.sigmoid(x:dot(W):flatten() + b)
    local loss = tgl.mean(tgl.sqr(p - y)) + 0.01 * tgl.sum(tgl.sqr(W))
    local gW, gb = unpack(tgl.grad(loss, { W, b }))
    return tgl.compile { inputs = { x, y }, outputs = loss,
                         updates = { { W, W - lr * gW }, { b, b - lr * gb } } }
  end
  local function steps(W, b, lr)
    local f = step_fn(W, b, lr)
    local l = {}
    for i = 1, CALLS do l[i] = call(f, i) end
    return l
  end
  -- The values after 0..3 calls for learning rate lr, the same step compiled
  -- once more without injection; computed after a trial's run, so that a
  -- cold trial's kernels are generated by the run itself.
  local function reference(lr)
    if ref[lr] then return ref[lr] end
    local W, b = shared()
    local r = { W = { [0] = W:get_value() }, b = { [0] = b:get_value() }, loss = {} }
    local f = step_fn(W, b, lr)
    for i = 1, CALLS do
      r.loss[i] = call(f, i)
      r.W[i], r.b[i] = W:get_value(), b:get_value()
    end
    ref[lr] = r
    return r
  end
  return {
    name = 'training step x4' .. (cold and ' (cold)' or ''),
    setup = function(trial)
      local lr = cold and 0.5 + trial / 1024 or 0.5
      if cold then tgl.config.cache_dir = root .. '/train-cache-' .. trial end
      local W, b = shared()
      return { W = W, b = b, lr = lr }
    end,
    run = function(c) return steps(c.W, c.b, c.lr) end,
    check = function(c, l)
      c.ref = reference(c.lr)
      for i = 1, CALLS do close(c.ref.loss[i], l[i], 'loss of call ' .. i, 1e-6) end
      S.bits_equal(c.ref.W[CALLS], c.W:get_value(), 'W after the calls')
      S.bits_equal(c.ref.b[CALLS], c.b:get_value(), 'b after the calls')
    end,
    after = function(c, ok)
      if ok then return end
      c.ref = reference(c.lr)
      local W, b = c.W:get_value(), c.b:get_value()
      for i = 0, CALLS do
        if pcall(S.bits_equal, c.ref.W[i], W) and pcall(S.bits_equal, c.ref.b[i], b) then return end
      end
      error('the shared variables hold values of no whole call: W = '
            .. table.concat(W:flatten():totable(), ' ') .. ', b = ' .. tostring(b:get()))
    end,
  }
end
local train, train_cold = train_op(false), train_op(true)

-- A scan (h_t = 0.5 h_{t-1} + x_t) and its gradient, built and compiled.
local function f64(t) return tgl.array(t, 'float64') end
local scan = {
  name = 'scan forward and grad',
  run = function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    local out = tgl.scan { fn = function(xt, h) return h * 0.5 + xt end, sequences = { x },
                           outputs_info = { h0 }, name = 'acc' }
    local g = tgl.grad(tgl.sum(out), { x, h0 })
    local f = tgl.compile { inputs = { x, h0 }, outputs = { out, g[1], g[2] } }
    return { f(f64 { 1, 2, 3 }, f64(1)) }
  end,
  check = function(_, r)
    close({ 1.5, 2.75, 4.375 }, r[1], 'scan values', 1e-12)
    close({ 1.75, 1.5, 1 }, r[2], 'd/dx', 1e-12)
    close(0.875, r[3], 'd/dh0', 1e-12)
  end,
}

-- An eager nn training step (Torch7 style, lua/nn): forward, criterion,
-- backward, updateParameters.  A failed step leaves every parameter as it
-- was, bit for bit; a step that succeeds gives the reference's values.
local nn_step
do
  local nn = require 'nn'
  local function model()
    tgl.manual_seed(3)
    local m = nn.Sequential():add(nn.Linear(5, 4)):add(nn.Tanh()):add(nn.Linear(4, 3))
    return m, tgl.randn(2, 5), tgl.randn(2, 3)
  end
  local crit = nn.MSECriterion()
  local function params(m)
    local t = {}
    for _, i in ipairs { 1, 3 } do
      t[#t + 1] = m.modules[i].weight:clone()
      t[#t + 1] = m.modules[i].bias:clone()
    end
    return t
  end
  local ref
  nn_step = {
    name = 'nn training step (eager)',
    setup = function()
      if not ref then
        local m, x, y = model()
        ref = { before = params(m) }
        m:zeroGradParameters()
        local out = m:forward(x)
        ref.loss = crit:forward(out, y)
        m:backward(x, crit:backward(out, y))
        m:updateParameters(0.1)
        ref.after = params(m)
      end
      local m, x, y = model()
      return { m = m, x = x, y = y }
    end,
    run = function(c)
      c.m:zeroGradParameters()
      local out = c.m:forward(c.x)
      local l = crit:forward(out, c.y)
      c.m:backward(c.x, crit:backward(out, c.y))
      c.m:updateParameters(0.1)
      return l
    end,
    check = function(c, l)
      close(ref.loss, l, 'loss', 1e-6)
      for i, p in ipairs(params(c.m)) do S.bits_equal(ref.after[i], p, 'parameter ' .. i) end
    end,
    after = function(c, ok)
      if ok then return end
      for i, p in ipairs(params(c.m)) do
        S.bits_equal(ref.before[i], p, 'parameter ' .. i .. ' after the failed step')
      end
    end,
  }
end

-- ---- the spec ---------------------------------------------------------------

describe('failure injection', function()
  if not have_hook then
    it('needs a build with -DTGL_FAULT_INJECT=ON', function()
      local msg = 'this tgl was built without failure injection (-DTGL_FAULT_INJECT=ON; '
          .. 'the default with -DTGL_TESTS=ON): nothing was injected'
      print(msg)
      if os.getenv('TGL_FAULT_BUILD') == 'ON' and S.strict_deps() then error(msg) end
      pending(msg)
    end)
    return
  end

  local saved
  setup(function()
    saved = { compile = tgl.config.compile, cache_dir = tgl.config.cache_dir,
              whole_step = tgl.config.whole_step, cflags = tgl.config.cflags }
    -- kernels built by the system compiler at once (the cache written in the
    -- call); -O0 keeps the compiles of the cold loop short
    tgl.config.compile = 'sync'
    tgl.config.whole_step = true
    tgl.config.cflags = '-O0'
  end)
  teardown(function()
    H.tgl_fault_arm(ALLOC, 0)
    H.tgl_fault_arm(IO, 0)
    for k, v in pairs(saved) do tgl.config[k] = v end
  end)

  it('the hook counts and fails the N-th call once', function()
    H.tgl_fault_arm(ALLOC, 0)
    tgl.array({ 1, 2 })
    local n = tonumber(H.tgl_fault_count(ALLOC))
    assert.is_true(n > 0)
    H.tgl_fault_arm(ALLOC, 1)
    local ok, err = pcall(tgl.array, { 1, 2 })
    assert.is_false(ok)
    assert.matches('out of memory', err)
    assert.equals(1, tonumber(H.tgl_fault_fired(ALLOC)))
    assert.is_true(#ffi.string(H.tgl_fault_last(ALLOC)) > 0)
    H.tgl_fault_arm(ALLOC, 0)
    close({ 1, 2 }, tgl.array({ 1, 2 }), 'after the failure')
  end)

  for _, op in ipairs { eager, eager_more, npy_save, npy_new, npy_load, npz_save, npz_new, npz_load,
                       compile_cold, train, scan, rop, nn_step } do
    it(op.name .. ': every allocation failing gives a clear error or right values', function()
      inject(ALLOC, op)
    end)
  end
  for _, op in ipairs { npy_save, npy_new, npz_save, npz_new, compile_cold, train_cold } do
    it(op.name .. ': every file call failing gives a clear error or right values', function()
      inject(IO, op)
    end)
  end
  it('totals', function()
    local n = 0
    for _, t in ipairs(totals) do n = n + t.fired end
    print(('fault injection: %d failures injected in all'):format(n))
    assert.is_true(n > 0)
  end)
end)
