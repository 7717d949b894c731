-- support.lua — helpers the busted specs share (loaded with
-- dofile('spec/support.lua'); specs run from the repository root).
local M = {}

-- True in CI (CI set) and under scripts/test.sh (TGL_TEST_STRICT=1): a
-- dependency of the suite that is missing fails the test there, and makes
-- it pending elsewhere (scripts/install-deps.sh --test installs them all).
function M.strict_deps()
  local ci = os.getenv('CI')
  return os.getenv('TGL_TEST_STRICT') == '1'
      or (ci ~= nil and ci ~= '' and ci ~= 'false' and ci ~= '0')
end

-- Fails (strict) or marks pending a test whose dependency `what` is missing.
function M.missing_dep(what)
  local msg = what .. ' is not installed (scripts/install-deps.sh --test installs it)'
  if M.strict_deps() then error(msg, 2) end
  -- busted gives `pending` to the spec's environment, not to _G
  getfenv(2).pending(msg)
end

-- Runs a chunk of Lua in a new tgl process (a crash there fails one test
-- instead of ending the run); returns stdout, stderr and the exit status
-- (read from the shell: LuaJIT's close gives none).
function M.run_process(chunk)
  local bin = os.getenv('TGL_BIN') or arg[-1]
  local src, errf = os.tmpname(), os.tmpname()
  local f = assert(io.open(src, 'w'))
  f:write(chunk)
  f:close()
  local p = io.popen(('%q %q 2>%q; echo "exit status $?"'):format(bin, src, errf))
  local out = p:read('*a')
  p:close()
  f = io.open(errf)
  local err = f and f:read('*a') or ''
  if f then f:close() end
  os.remove(errf)
  os.remove(src)
  local code = tonumber(out:match('exit status (%d+)%s*$'))
  out = out:gsub('exit status %d+%s*$', '')
  return out, err, code
end

-- A fresh scratch directory for spec `name` under TGL_TEST_TMP (ctest
-- sets it), else under the system's temporary directory.
function M.tmpdir(name)
  local base = os.getenv('TGL_TEST_TMP')
  if not base then base = os.tmpname(); os.remove(base) end      -- tmpname makes a file
  -- the same spec may run on the cpu and on the sim device at once (ctest
  -- -j): each device gets its own directory
  local dev = os.getenv('TGL_DEVICE')
  local dir = base .. '/' .. name .. ((dev and dev ~= '' and dev ~= 'cpu') and '-' .. dev or '')
  os.execute("rm -rf '" .. dir .. "'; mkdir -p '" .. dir .. "'")
  return dir
end

-- Runs a shell command; returns its output (stdout and stderr) and exit status.
function M.sh(cmd)
  local p = assert(io.popen(cmd .. ' 2>&1; echo "exit status $?"'))
  local out = p:read('*a')
  p:close()
  local code = tonumber(out:match('exit status (%d+)%s*$'))
  return out:gsub('exit status %d+%s*$', ''), code
end

-- Elementwise |want - got| <= atol + rtol * |want| (defaults 1e-9, 1e-12),
-- naming the first element that is not; want may be a number or a Lua
-- table (made float64 arrays).  Raises at the caller's level.
function M.assert_close(want, got, rtol, atol, what)
  local tgl = require 'tgl'
  rtol, atol, what = rtol or 1e-9, atol or 1e-12, what or 'arrays'
  local function arr(x)
    if type(x) == 'number' or (type(x) == 'table' and not tgl.is_array(x)) then
      return tgl.array(x, 'float64')
    end
    return x
  end
  want, got = arr(want), arr(got)
  if not tgl.is_array(got) then error(what .. ': expected an array, got ' .. type(got), 2) end
  local ws, gs = table.concat(want:shape(), 'x'), table.concat(got:shape(), 'x')
  if ws ~= gs then error(('%s: shapes differ: expected %s, got %s'):format(what, ws, gs), 2) end
  local w, g = want:reshape(-1), got:reshape(-1)
  for i = 1, w:nelement() do
    local a, b = w:get(i), g:get(i)
    if not (math.abs(a - b) <= atol + rtol * math.abs(a)) then
      error(('%s: element %d: expected %.12g, got %.12g'):format(what, i, a, b), 2)
    end
  end
end

-- Sets tgl.config keys (a table) for the calling describe block and puts
-- the old values back after it (busted's setup/teardown).
function M.with_config(settings)
  local env = getfenv(2)
  local tgl = require 'tgl'
  local saved = {}
  env.setup(function()
    for k, v in pairs(settings) do saved[k] = tgl.config[k]; tgl.config[k] = v end
  end)
  env.teardown(function()
    for k in pairs(settings) do tgl.config[k] = saved[k] end
  end)
end

-- fn() run with the tgl.config keys of `settings` set, the old values put
-- back whatever happens; returns fn's results and raises its error.
function M.with_settings(settings, fn)
  local tgl = require 'tgl'
  local saved = {}
  for k, v in pairs(settings) do saved[k] = tgl.config[k]; tgl.config[k] = v end
  local res = { pcall(fn) }
  for k in pairs(settings) do tgl.config[k] = saved[k] end
  if not res[1] then error(res[2], 0) end
  return unpack(res, 2, table.maxn(res))
end

-- fn() run with tgl.config.whole_step = on and compile = 'sync' (kernels
-- get their final code at once), as with_settings.
function M.with_whole_step(on, fn)
  return M.with_settings({ whole_step = on, compile = 'sync' }, fn)
end

-- fn() run with tgl.config.device = device (compiles and shared variables
-- made inside go there), as with_settings.  (The cuda_*_spec files compare
-- one device with another this way.)
function M.on_device(device, fn)
  return M.with_settings({ device = device }, fn)
end

-- Raises unless want and got hold the same values, bit for bit (what names
-- the comparison).
function M.bits_equal(want, got, what)
  M.assert_close(want, got, 0, 0, what)
end

-- A file's bytes; a missing file raises, or gives nil when optional.
function M.read_file(path, optional)
  local f, err = io.open(path, 'rb')
  if not f then
    if optional then return nil end
    error(err, 2)
  end
  local s = f:read('*a')
  f:close()
  return s
end

-- Writes s to path (replacing it).
function M.write_file(path, s)
  local f = assert(io.open(path, 'wb'))
  f:write(s)
  f:close()
end

-- ---------------------------------------------------------------------------
-- What the random-program property specs share.

-- A small seeded generator (Park-Miller), independent of math.random and
-- of tgl's own generator: r.int(a, b), r.float(), r.chance(p), r.pick(t),
-- r.weighted({{weight, value}, ...}).
function M.new_rng(seed)
  local s = seed % 2147483646 + 1
  local r = {}
  local function step()
    s = (s * 48271) % 2147483647
    return s
  end
  for _ = 1, 8 do step() end
  function r.int(a, b) return a + step() % (b - a + 1) end
  function r.float() return (step() - 1) / 2147483646 end
  function r.chance(p) return r.float() < p end
  function r.pick(t) return t[r.int(1, #t)] end
  function r.weighted(t)
    local total = 0
    for _, e in ipairs(t) do total = total + e[1] end
    local x = r.float() * total
    for _, e in ipairs(t) do
      x = x - e[1]
      if x < 0 then return e[2] end
    end
    return t[#t][2]
  end
  return r
end

-- A shape as NumPy prints it: (), (3,), (2,3).
function M.shape_str(s)
  if #s == 0 then return '()' end
  return '(' .. table.concat(s, ',') .. (#s == 1 and ',)' or ')')
end

local PTR = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *',
              uint8 = 'uint8_t *', bool = 'uint8_t *' }

-- nil when the array got matches want: dtype, shape, and values equal
-- (tol nil) or within tol = {abs =, rel =} (NaN matches NaN, an infinity
-- only itself); otherwise a message naming the first mismatch.
function M.mismatch(want, got, tol)
  local ffi, tgl = require 'ffi', require 'tgl'
  if not tgl.is_array(got) then return 'not an array: ' .. tostring(got) end
  if want.dtype ~= got.dtype then return ('dtype %s, expected %s'):format(got.dtype, want.dtype) end
  local ws, gs = want:shape(), got:shape()
  if M.shape_str(ws) ~= M.shape_str(gs) then
    return ('shape %s, expected %s'):format(M.shape_str(gs), M.shape_str(ws))
  end
  local wc, gc = want:contiguous(), got:contiguous()
  local n = wc:nelement()
  if n == 0 then return nil end
  local wp, gp = ffi.cast(PTR[wc.dtype], wc:data()), ffi.cast(PTR[gc.dtype], gc:data())
  for i = 0, n - 1 do
    local w, g = tonumber(wp[i]), tonumber(gp[i])
    local ok
    if w ~= w then ok = g ~= g
    elseif tol == nil then ok = g == w
    elseif w == math.huge or w == -math.huge then ok = g == w
    else ok = g == g and math.abs(g - w) <= tol.abs + tol.rel * math.abs(w) end
    if not ok then
      return ('flat element %d (1-based, C order) is %.10g, expected %.10g (%s %s)'):format(i + 1, g, w,
        want.dtype, M.shape_str(ws))
    end
  end
  return nil
end

-- The random-program specs' seed and case count: TGL_PROP_SEED (a number,
-- or 'random' for one from the clock) and TGL_PROP_CASES, else the spec's
-- defaults.
function M.prop_seed_and_cases(default_seed, default_cases)
  local seed_env = os.getenv('TGL_PROP_SEED')
  local seed = tonumber(seed_env) or default_seed
  if seed_env == 'random' then seed = math.floor(require('tgl').time() * 1000) % 2000000000 end
  return seed, tonumber(os.getenv('TGL_PROP_CASES')) or default_cases
end

-- An array's elements as a flat Lua table (row-major).
function M.flat(a)
  if a:dim() == 0 then return { a:get() } end
  local v = a:contiguous():reshape(-1)
  local t = {}
  for i = 1, v:nelement() do t[i] = v:get(i) end
  return t
end

-- A random program's value in both forms must agree on dtype and rank (a
-- property in itself); on a mismatch, the error shows the recipe `lines`.
function M.check_forms(var, val, text, lines)
  local tgl = require 'tgl'
  assert(tgl.is_variable(var), text .. ': the symbolic form is not a variable')
  assert(tgl.is_array(val), text .. ': the eager form is not an array')
  if var.dtype ~= val.dtype or var.ndim ~= val:dim() then
    error(('%s: the symbolic form is %s %d-d, the eager one %s %d-d\n%s'):format(text, var.dtype,
      var.ndim, val.dtype, val:dim(), table.concat(lines, '\n')), 0)
  end
end

-- ---------------------------------------------------------------------------
-- What the nn specs share (spec/nn_*_spec.lua, batch_norm_spec.lua).

-- Largest absolute difference between two arrays of the same shape (the
-- shapes are asserted equal).
function M.maxdiff(a, b)
  local tgl = require 'tgl'
  require('luassert').same(a:shape(), b:shape())
  return tgl.max(tgl.abs(a:astype('float64') - b:astype('float64'))):get()
end

local FD_EPS = 1e-6

-- Central difference of f() (a number) in element i of the flat view of
-- array a (changed in place and restored, so compiled functions that
-- borrow a see the change).
function M.fd_at(f, a, i)
  local flat = a:reshape(a:nelement())
  local v = flat:get(i)
  flat:set(v + FD_EPS, i); local lp = f()
  flat:set(v - FD_EPS, i); local lm = f()
  flat:set(v, i)
  return (lp - lm) / (2 * FD_EPS)
end

-- Central differences of f() in every element of a, as a float64 array
-- of a's shape.
function M.fd(f, a)
  local tgl = require 'tgl'
  local n = a:nelement()
  local g = tgl.zeros(n, { dtype = 'float64' })
  for i = 1, n do g:set(M.fd_at(f, a, i), i) end
  return g:reshape(a:shape())
end

-- For the calling describe block: before each test, floatX float64 and
-- tgl.manual_seed(seed); after it, the old floatX back.
function M.float64(seed)
  local env = getfenv(2)
  local tgl = require 'tgl'
  local saved
  env.before_each(function() saved = tgl.config.floatX; tgl.config.floatX = 'float64'; tgl.manual_seed(seed) end)
  env.after_each(function() tgl.config.floatX = saved end)
end

-- The line after the one calling it (for error locations).
function M.next_line() return debug.getinfo(2, 'l').currentline + 1 end

-- n class labels in 1..C (int64), spread over the classes.
function M.labels(n, C)
  local t = {}
  for i = 1, n do t[i] = (i * 7) % C + 1 end
  return require('tgl').array(t, 'int64')
end

-- A module class registered as nn.<name> that counts the calls of the
-- compiled functions it is in: its array `calls` (0-d float64) goes up by
-- one per call through a module state update (nn._add_update).
function M.count_module(name)
  local nn = require 'nn'
  local Count = nn.class(name, nn.Module)
  function Count:__init()
    nn.Module.__init(self)
    self.calls = require('tgl').array(0, 'float64')
  end
  function Count:graph(x)
    local c = self:_var('calls')
    nn._add_update(c, c + 1)
    return x
  end
  return Count
end

-- Torch7's feval for optim over getParameters' flat arrays: zeroes grads,
-- runs model and criterion forward and backward on x, y; returns the loss
-- and grads.
function M.feval(model, crit, x, y, grads)
  return function()
    grads:zero()
    local out = model:forward(x)
    local loss = crit:forward(out, y)
    model:backward(x, crit:backward(out, y))
    return loss, grads
  end
end

-- The parameters of `from` copied into `to` (same structure, arrays
-- matched by position in parameters(); a shared array is copied once per
-- holder, the same values).
function M.copy_params(from, to)
  local a, b = from:parameters(), to:parameters()
  require('luassert').equals(#a, #b)
  for i = 1, #a do b[i]:copy(a[i]) end
end

return M
