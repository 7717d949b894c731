-- compile_workers_spec.lua — background compiles (compile = 'tiered') run
-- on a bounded set of worker threads taking jobs from one queue, not on a
-- thread per kernel: compiling a few hundred distinct functions keeps the
-- process's thread count within max(1, CPUs - 1) workers of what it was,
-- every function gets its system compiler's code with the right values,
-- and the workers exit once the queue is empty.  Functions dropped before
-- their compile runs do not hold threads either, and a function compiled
-- after them still gets its code.  A child of fork() waits for none of
-- the parent's compiles and compiles its own.  (doc/compile.md, "How
-- kernels are compiled"; src/cgen/compile.c, "Background compiles".)
local tgl = require 'tgl'
local ffi = require 'ffi'
local support = dofile('spec/support.lua')

pcall(ffi.cdef, 'long sysconf(int name); int usleep(unsigned usec);')
local SC_NPROCESSORS_ONLN = 84 -- glibc on Linux

-- The workers' bound that doc/compile.md states.
local function bound()
  local n = tonumber(ffi.C.sysconf(SC_NPROCESSORS_ONLN))
  return n > 2 and n - 1 or 1
end

local function threads()
  local f = assert(io.open('/proc/self/status'))
  local s = f:read('*a')
  f:close()
  return tonumber(s:match('Threads:%s*(%d+)'))
end

-- The thread count once it has come down to at most `want` (a worker
-- exits just after its last job is done), or what it is after 10 s.
local function settle(want)
  local t0 = tgl.time()
  while threads() > want and tgl.time() - t0 < 10 do ffi.C.usleep(10000) end
  return threads()
end

local function tier(f) return f:program():match('%[(%a+)%]') end

local XS = { -2, -0.5, 0, 0.75, 3 }

local function tanh(v) local e = math.exp(2 * v); return (e - 1) / (e + 1) end

describe('background compiles', function()
  local saved = {}
  setup(function()
    for _, k in ipairs({ 'compile', 'cflags', 'cache_dir' }) do saved[k] = tgl.config[k] end
    -- the thresholds' calibration (doc/calibration.md) starts the
    -- process's worker pool, whose threads stay: run it before any
    -- thread count is taken, so that only compile workers come and go
    tgl.calibrate()
  end)
  teardown(function()
    for k, v in pairs(saved) do tgl.config[k] = v end
  end)
  before_each(function()
    tgl.config.compile = 'tiered'
    -- the queue is under test, not the optimizer: cc -O0 compiles faster
    tgl.config.cflags = '-O0'
  end)

  it('run a few hundred distinct functions on at most max(1, CPUs - 1) threads, with the right values once ready', function()
    tgl.config.cache_dir = support.tmpdir('compile_workers-many')
    local N = 300
    local base = threads()
    local x = tgl.dvector('x')
    local xa = tgl.array(XS, 'float64')
    local fs, most = {}, base
    for i = 1, N do
      fs[i] = tgl.compile { inputs = { x }, outputs = tgl.tanh(x * (1 + i / 512)) + i }
      most = math.max(most, threads())
    end
    -- one thread per queued kernel would be base + N here
    assert.is_true(most > base, 'no compile worker was ever seen running')
    assert.is_true(most <= base + bound(),
                   ('%d threads while compiling, %d before, bound %d'):format(most, base, bound()))
    for i, f in ipairs(fs) do
      f:wait_compiled()
      assert.are.equal('cc', tier(f), 'function ' .. i)
      local want = {}
      for k, v in ipairs(XS) do want[k] = tanh(v * (1 + i / 512)) + i end
      support.assert_close(want, f(xa), 1e-12, 1e-12, 'function ' .. i)
    end
    assert.are.equal(base, settle(base), 'the workers did not exit once the queue was empty')
  end)

  it('keep threads bounded for functions dropped before their compile runs; one compiled after them gets its code', function()
    tgl.config.cache_dir = support.tmpdir('compile_workers-dropped')
    collectgarbage(); collectgarbage()
    local base, kbase = threads(), tgl.kernels_live()
    local x = tgl.dvector('x')
    local most = base
    for i = 1, 500 do
      local f = tgl.compile { inputs = { x }, outputs = tgl.exp(x * (i / 1024)) * 2 + i }
      assert.are.equal(2 + i, f({ 0 }):get(1))
      if i % 50 == 0 then collectgarbage() end
      most = math.max(most, threads())
    end
    collectgarbage(); collectgarbage()
    assert.are.equal(kbase, tgl.kernels_live())
    assert.is_true(most <= base + bound(),
                   ('%d threads while compiling, %d before, bound %d'):format(most, base, bound()))
    local g = tgl.compile { inputs = { x }, outputs = tgl.sin(x) * 5 - 1 }
    g:wait_compiled()
    assert.are.equal('cc', tier(g))
    local want = {}
    for k, v in ipairs(XS) do want[k] = math.sin(v) * 5 - 1 end
    support.assert_close(want, g(tgl.array(XS, 'float64')), 1e-12, 1e-12, 'the live function')
    assert.are.equal(base, settle(base))
  end)

  it('are the parent\'s alone after fork: the child waits for none of them and compiles its own', function()
    local dir = support.tmpdir('compile_workers-fork')
    local script = dir .. '/fork.lua'
    -- the parent queues more kernels than it has workers, then forks at once
    support.write_file(script, [=[
local tgl = require 'tgl'
local ffi = require 'ffi'
ffi.cdef [[int fork(void); int waitpid(int pid, int *status, int options); void _exit(int status);]]
tgl.config.compile = 'tiered'
tgl.config.cflags = '-O0'
local x = tgl.dvector('x')
local xa = tgl.array({ 1, 2, 3 }, 'float64')
local function tier(f) return f:program():match('%[(%a+)%]') end
local function right(f, k)
  local y = f(xa)
  for i = 1, 3 do
    local want = math.exp(i * k / 8) - k
    if math.abs(y:get(i) - want) > 1e-12 * math.abs(want) + 1e-12 then return false end
  end
  return true
end
local fs = {}
for k = 1, 8 do fs[k] = tgl.compile { inputs = { x }, outputs = tgl.exp(x * (k / 8)) - k } end
local pid = ffi.C.fork()
if pid == 0 then
  local code = 0
  for k, f in ipairs(fs) do
    f:wait_compiled()
    if not right(f, k) then code = 3 end
  end
  local g = tgl.compile { inputs = { x }, outputs = tgl.exp(x * (9 / 8)) - 9 }
  g:wait_compiled()
  if tier(g) ~= 'cc' or not right(g, 9) then code = code + 4 end
  ffi.C._exit(code)
end
local status = ffi.new('int[1]')
assert(ffi.C.waitpid(pid, status, 0) == pid)
print('child ' .. status[0])
for k, f in ipairs(fs) do
  f:wait_compiled()
  print(tier(f), right(f, k))
end
]=])
    local out, code = support.sh(('TGL_CACHE_DIR=%q timeout 120 %q %q'):format(
      dir .. '/cache', os.getenv('TGL_BIN') or arg[-1], script))
    assert.are.equal(0, code, out)
    -- exit status 0: every wait returned (no timeout), values right, the child's own kernel is cc code
    assert.matches('^child 0\n', out)
    local _, n = out:gsub('cc\ttrue\n', '')
    assert.are.equal(8, n, out)
  end)
end)
