-- array_spec.lua — concrete arrays from Lua (API.md "Arrays", lua/tgl/array.lua):
-- construction, the random generator, every method, printing, bad input
-- (errors that name the function and the problem, at the caller's line)
-- and memory (the collector is told about C-side bytes).
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'
local C = require('tgl.core').C

local nan, inf = 0 / 0, math.huge

-- The error f raises; asserts it is 'tgl.<fname>: ...' raised at a line of
-- this file (the caller's line, not tgl's internals) and mentions each of
-- the plain-text needles.
local function raises(fname, f, ...)
  assert.has_error(f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  err = tostring(err)
  assert.matches('array_spec%.lua:%d+: tgl%.' .. fname .. ': ', err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err)
  end
  return err
end

local function live_bytes() return tonumber(C.tgl_memory_live_bytes()) end

local function full_gc()
  collectgarbage()
  collectgarbage()
end

-- Element i (0-based, C order) of a contiguous float array, as a number.
local function raw(a, i)
  local p = ffi.cast(a.dtype == 'float64' and 'double *' or 'float *', a:data())
  return tonumber(p[i])
end

local DTYPES = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }

describe('tgl.array', function()
  it('builds a float32 matrix from nested tables by default', function()
    local a = tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } })
    assert.equals('float32', a.dtype)
    assert.same({ 2, 3 }, a:shape())
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, a:totable())
  end)

  it('takes the dtype as a string or as {dtype=}', function()
    assert.equals('int32', tgl.array({ 1, 2 }, 'int32').dtype)
    assert.equals('float64', tgl.array({ 1, 2 }, { dtype = 'float64' }).dtype)
    assert.equals('int64', tgl.array({ 1, 2 }, 'long').dtype)
  end)

  it('makes a 0-d scalar from a number', function()
    local a = tgl.array(2.5)
    assert.equals(0, a:dim())
    assert.same({}, a:shape())
    assert.equals(1, a:nelement())
    assert.equals(2.5, a:totable())
    assert.equals(2.5, a:get())
  end)

  it('makes bool arrays from booleans', function()
    local a = tgl.array({ true, false, true })
    assert.equals('bool', a.dtype)
    assert.same({ true, false, true }, a:totable())
    assert.equals('bool', tgl.array(false).dtype)
    assert.is_false(tgl.array(false):totable())
  end)

  it('reads booleans in a numeric table as 1 and 0', function()
    assert.same({ 1, 1, 0 }, tgl.array({ 1, true, false }, 'int32'):totable())
    assert.same({ true, true }, tgl.array({ true, 2 }):totable())
  end)

  it('makes a 1-d empty array from an empty table', function()
    local a = tgl.array({})
    assert.same({ 0 }, a:shape())
    assert.equals(0, a:nelement())
    assert.same({}, a:totable())
  end)

  it('nests to three and more dimensions', function()
    local t = { { { 1, 2 }, { 3, 4 } }, { { 5, 6 }, { 7, 8 } }, { { 9, 10 }, { 11, 12 } } }
    local a = tgl.array(t, 'int64')
    assert.same({ 3, 2, 2 }, a:shape())
    assert.same(t, a:totable())
    assert.equals(7, a:get(2, 2, 1))
  end)

  it('converts values as the engine does (integers saturate, NaN is 0)', function()
    assert.same({ 255, 0, 0, 2 }, tgl.array({ 300, -2.7, nan, 2.9 }, 'uint8'):totable())
    assert.same({ 300, -2, 0, 2147483647 }, tgl.array({ 300, -2.7, nan, 1e20 }, 'int32'):totable())
    assert.same({ false, true, true }, tgl.array({ 0, 0.5, nan }, 'bool'):totable())
  end)

  it('copies an array given as data, converting on request', function()
    local a = tgl.array({ 1.5, 2.5 }, 'float64')
    local b = tgl.array(a)
    local c = tgl.array(a, 'int32')
    a:set(9, 1)
    assert.equals('float64', b.dtype)
    assert.same({ 1.5, 2.5 }, b:totable())
    assert.equals('int32', c.dtype)
    assert.same({ 1, 2 }, c:totable())
  end)

  it('follows tgl.config.floatX for the default float dtype', function()
    local saved = tgl.config.floatX
    tgl.config.floatX = 'float64'
    local ok, a = pcall(tgl.array, { 1, 2 })
    local ok2, z = pcall(tgl.zeros, 2)
    tgl.config.floatX = saved
    assert.is_true(ok and ok2)
    assert.equals('float64', a.dtype)
    assert.equals('float64', z.dtype)
    assert.equals('float32', tgl.array({ 1 }).dtype)
  end)

  it('rejects ragged tables', function()
    raises('array', function() tgl.array({ { 1, 2 }, { 3 } }) end,
           'ragged', 'data[2] has 1 elements, expected 2')
    raises('array', function() tgl.array({ { 1, 2 }, 3 }) end,
           'ragged', 'data[2] is a number where a table of 2 was expected')
  end)

  it('rejects elements that are not numbers or booleans', function()
    raises('array', function() tgl.array({ 1, 'x' }) end, 'data[2] is a string')
    raises('array', function() tgl.array({ 1, { 2 } }) end, 'data[2] is a table')
    raises('array', function() tgl.array({ 'x' }) end, 'numbers or booleans', 'string')
    raises('array', function() tgl.array('abc') end, 'string')
    raises('array', function() tgl.array(nil) end, 'got nil')
  end)

  it('rejects more than eight levels of nesting', function()
    raises('array', function() tgl.array({ { { { { { { { { 1 } } } } } } } } }) end, 'deeper than 8')
  end)

  it('rejects unknown dtypes', function()
    raises('array', function() tgl.array({ 1 }, 'float16') end, "unknown dtype 'float16'")
    raises('array', function() tgl.array({ 1 }, { dtype = 3 }) end, "option 'dtype' must be a string")
  end)
end)

describe('constructors', function()
  it('zeros takes sizes as varargs or as a table, with options last', function()
    local a = tgl.zeros(2, 3)
    local b = tgl.zeros({ 2, 3 }, { dtype = 'int32' })
    local c = tgl.zeros(2, 3, { dtype = 'uint8' })
    assert.same({ { 0, 0, 0 }, { 0, 0, 0 } }, a:totable())
    assert.equals('float32', a.dtype)
    assert.same({ 2, 3 }, b:shape())
    assert.equals('int32', b.dtype)
    assert.equals('uint8', c.dtype)
  end)

  it('zeros of bool are false', function()
    assert.same({ false, false }, tgl.zeros(2, { dtype = 'bool' }):totable())
  end)

  it('ones fills with one in the requested dtype', function()
    local a = tgl.ones(2, 3, { dtype = 'int32' })
    assert.equals('int32', a.dtype)
    assert.same({ { 1, 1, 1 }, { 1, 1, 1 } }, a:totable())
    assert.same({ true }, tgl.ones({ 1 }, { dtype = 'bool' }):totable())
  end)

  it('full takes a shape table (or one size) and a value', function()
    assert.same({ { 7, 7, 7 }, { 7, 7, 7 } }, tgl.full({ 2, 3 }, 7):totable())
    assert.same({ 7, 7, 7, 7, 7 }, tgl.full(5, 7):totable())
    assert.same({ 2.5, 2.5 }, tgl.full({ 2 }, 2.5, { dtype = 'float64' }):totable())
    assert.same({ 255 }, tgl.full({ 1 }, 1000, { dtype = 'uint8' }):totable())
    assert.same({ true, true }, tgl.full({ 2 }, true, { dtype = 'bool' }):totable())
    assert.equals(4, tgl.full({}, 4):totable())
  end)

  it('empty has the shape and dtype asked for', function()
    local a = tgl.empty(4, 5, { dtype = 'float64' })
    assert.same({ 4, 5 }, a:shape())
    assert.equals('float64', a.dtype)
    assert.equals(20, a:nelement())
  end)

  it('no sizes make a scalar and zero sizes an empty array', function()
    assert.equals(0, tgl.zeros():dim())
    assert.equals(0, tgl.zeros():totable())
    local e = tgl.ones(3, 0)
    assert.same({ 3, 0 }, e:shape())
    assert.equals(0, e:nelement())
    assert.same({ {}, {}, {} }, e:totable())
  end)

  it('an array of eight dimensions is allowed', function()
    assert.equals(8, tgl.zeros(1, 2, 1, 2, 1, 2, 1, 2):dim())
  end)

  for _, fname in ipairs({ 'zeros', 'ones', 'empty', 'rand', 'randn' }) do
    local f = tgl[fname]
    it(fname .. ' rejects bad sizes, dtypes and options', function()
      raises(fname, function() f(2, -1) end, 'size -1 of dimension 2')
      raises(fname, function() f(1.5) end, 'size 1.5 of dimension 1')
      raises(fname, function() f({ 2, 'x' }) end, 'size x of dimension 2')
      raises(fname, function() f('a') end, 'position 1 must be a number, got string')
      raises(fname, function() f(1, 1, 1, 1, 1, 1, 1, 1, 1) end, '9 dimensions')
      raises(fname, function() f(2, { dtype = 'complex' }) end, "unknown dtype 'complex'")
      raises(fname, function() f({ 2 }, 'float32') end, 'options must be a table')
      raises(fname, function() f(2 ^ 40, 2 ^ 40) end, 'too large')
    end)
  end

  it('full rejects bad shapes and values', function()
    raises('full', function() tgl.full('x', 1) end, 'shape must be a table')
    raises('full', function() tgl.full({ 2 }, 'x') end, 'value must be a number, got string')
    raises('full', function() tgl.full({ 2 }, nil) end, 'value must be a number, got nil')
    raises('full', function() tgl.full({ -2 }, 1) end, 'size -2')
    raises('full', function() tgl.full({ 2 }, 1, { dtype = 'x' }) end, "unknown dtype 'x'")
    raises('full', function() tgl.full({ 2 ^ 40, 2 ^ 40 }, 1) end, 'too large')
  end)
end)

describe('tgl.arange', function()
  it('arange(n) is 1..n as int64', function()
    local a = tgl.arange(5)
    assert.equals('int64', a.dtype)
    assert.same({ 1, 2, 3, 4, 5 }, a:totable())
  end)

  it('includes stop when the steps reach it, like a numeric for', function()
    local a = tgl.arange(1, 2, 0.25)
    assert.equals('float32', a.dtype)
    assert.same({ 1, 1.25, 1.5, 1.75, 2 }, a:totable())
    assert.same({ 1, 4, 7, 10 }, tgl.arange(1, 10, 3):totable())
    assert.same({ 1, 5, 9 }, tgl.arange(1, 10, 4):totable())
  end)

  it('counts down with a negative step', function()
    assert.same({ 5, 3, 1 }, tgl.arange(5, 1, -2):totable())
  end)

  it('is empty when the step points away from stop', function()
    assert.same({ 0 }, tgl.arange(5, 1):shape())
    assert.same({ 0 }, tgl.arange(1, 5, -1):shape())
    assert.same({ 0 }, tgl.arange(0):shape())
  end)

  it('takes {dtype=} after any number of arguments', function()
    assert.equals('float64', tgl.arange(3, { dtype = 'float64' }).dtype)
    assert.same({ 1, 2, 3 }, tgl.arange(3, { dtype = 'float64' }):totable())
    assert.same({ 2, 3 }, tgl.arange(2, 3, { dtype = 'int32' }):totable())
    assert.same({ 0, 2 }, tgl.arange(0, 3, 2, { dtype = 'uint8' }):totable())
  end)

  it('rejects a zero step and non-finite or missing arguments', function()
    raises('arange', function() tgl.arange(1, 2, 0) end, 'step must not be zero')
    raises('arange', function() tgl.arange(nan) end, 'argument 1 must be a finite number, got nan')
    raises('arange', function() tgl.arange(1, inf) end, 'argument 2 must be a finite number, got inf')
    raises('arange', function() tgl.arange(1, 2, -inf) end, 'argument 3')
    raises('arange', function() tgl.arange('a') end, 'argument 1', 'got a')
    raises('arange', function() tgl.arange() end, 'argument 1', 'got nil')
    raises('arange', function() tgl.arange(1, 1e300) end, 'too many elements')
    raises('arange', function() tgl.arange(3, { dtype = 'nope' }) end, "unknown dtype 'nope'")
  end)
end)

describe('random numbers', function()
  it('manual_seed makes draws reproducible', function()
    tgl.manual_seed(1)
    local a, u = tgl.randn(2, 3), tgl.rand(4)
    tgl.manual_seed(1)
    local b, v = tgl.randn(2, 3), tgl.rand(4)
    assert.same(a:totable(), b:totable())
    assert.same(u:totable(), v:totable())
    assert.equals('float32', a.dtype)
  end)

  it('different seeds and consecutive draws give different numbers', function()
    tgl.manual_seed(1)
    local a = tgl.rand(100):totable()
    local c = tgl.rand(100):totable()
    tgl.manual_seed(2)
    local b = tgl.rand(100):totable()
    local same_ab, same_ac = 0, 0
    for i = 1, 100 do
      if a[i] == b[i] then same_ab = same_ab + 1 end
      if a[i] == c[i] then same_ac = same_ac + 1 end
    end
    assert.equals(0, same_ab)
    assert.equals(0, same_ac)
  end)

  it('get_rng_state gives the seed and the counter, which draws advance', function()
    tgl.manual_seed(3)
    local s0 = tgl.get_rng_state()
    assert.equals(3, tonumber(s0.seed))
    assert.equals(0, tonumber(s0.offset))
    local _ = tgl.rand(2, 3)
    assert.equals(6, tonumber(tgl.get_rng_state().offset))
  end)

  it('set_rng_state replays a draw', function()
    tgl.manual_seed(5)
    local _ = tgl.randn(10)
    local state = tgl.get_rng_state()
    local a = tgl.randn(3, 3)
    tgl.manual_seed(99)
    tgl.set_rng_state(state)
    assert.same(a:totable(), tgl.randn(3, 3):totable())
  end)

  it('element i of a draw depends only on the seed and the offset plus i', function()
    tgl.manual_seed(8)
    local all = tgl.rand(10, { dtype = 'float64' }):totable()
    tgl.set_rng_state({ seed = 8, offset = 6 })
    local tail = tgl.rand(4, { dtype = 'float64' }):totable()
    assert.same({ all[7], all[8], all[9], all[10] }, tail)
  end)

  it('manual_seed accepts a seed from get_rng_state and negative numbers', function()
    tgl.manual_seed(-1)
    local state = tgl.get_rng_state()
    assert.is_true(state.seed == 0xffffffffffffffffULL)
    tgl.manual_seed(state.seed)
    assert.is_true(tgl.get_rng_state().seed == 0xffffffffffffffffULL)
  end)

  it('rand is uniform in [low, high)', function()
    tgl.manual_seed(11)
    local n = 100000
    local a = tgl.rand(n, { low = -2, high = 3 })
    local p = ffi.cast('float *', a:data())
    local sum, lo, hi = 0, inf, -inf
    for i = 0, n - 1 do
      local v = p[i]
      sum = sum + v
      if v < lo then lo = v end
      if v > hi then hi = v end
    end
    assert.is_true(lo >= -2 and hi < 3)
    assert.is_true(lo < -1.99 and hi > 2.99)
    assert.is_true(math.abs(sum / n - 0.5) < 0.03)
  end)

  it('randn has the requested mean and standard deviation', function()
    tgl.manual_seed(12)
    local n = 100000
    local a = tgl.randn(n, { mean = 10, std = 2, dtype = 'float64' })
    assert.equals('float64', a.dtype)
    local sum, sq = 0, 0
    for i = 0, n - 1 do sum = sum + raw(a, i) end
    local mean = sum / n
    for i = 0, n - 1 do sq = sq + (raw(a, i) - mean) ^ 2 end
    assert.is_true(math.abs(mean - 10) < 0.03)
    assert.is_true(math.abs(math.sqrt(sq / (n - 1)) - 2) < 0.03)
  end)

  it('float32 randn is float64 randn rounded', function()
    tgl.manual_seed(13)
    local f = tgl.randn(50)
    tgl.manual_seed(13)
    local d = tgl.randn(50, { dtype = 'float64' })
    for i = 0, 49 do
      assert.equals(tonumber(ffi.cast('float', raw(d, i))), raw(f, i))
    end
  end)

  it('rejects bad bounds, dtypes and options', function()
    raises('rand', function() tgl.rand(2, { low = 1, high = 1 }) end,
           'lower bound 1 is not below the upper bound 1')
    raises('rand', function() tgl.rand(2, { dtype = 'int32' }) end,
           'dtype must be float32 or float64, got int32')
    raises('rand', function() tgl.rand(2, { low = 'a' }) end, "option 'low' must be a number")
    raises('rand', function() tgl.rand(2, { high = nan }) end, 'finite')
    raises('randn', function() tgl.randn(2, { std = -1 }) end, 'standard deviation -1 is negative')
    raises('randn', function() tgl.randn(2, { dtype = 'bool' }) end, 'float32 or float64')
    raises('randn', function() tgl.randn(2, { mean = {} }) end, "option 'mean' must be a number")
  end)

  it('rejects bad seeds and states', function()
    raises('manual_seed', function() tgl.manual_seed(1.5) end, 'seed must be an integer, got 1.5')
    raises('manual_seed', function() tgl.manual_seed('x') end, 'seed must be an integer')
    raises('manual_seed', function() tgl.manual_seed() end, 'got nil')
    raises('set_rng_state', function() tgl.set_rng_state(5) end, 'expected a table {seed=, offset=}')
    raises('set_rng_state', function() tgl.set_rng_state({ seed = 1 }) end, 'expected a table')
    raises('set_rng_state', function() tgl.set_rng_state({ seed = 'a', offset = 0 }) end,
           'seed must be an integer')
    raises('set_rng_state', function() tgl.set_rng_state({ seed = 1, offset = 0.5 }) end,
           'offset must be an integer')
  end)
end)

describe('array methods', function()
  local function m23() return tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } }, 'int32') end

  it('shape, size, dim, nelement, numel, dtype and # describe the array', function()
    local a = tgl.zeros(2, 3, 4)
    assert.same({ 2, 3, 4 }, a:shape())
    assert.same({ 2, 3, 4 }, a:size())
    assert.equals(3, a:size(2))
    assert.equals(4, a:size(-1))
    assert.equals(2, a:size(-3))
    assert.equals(3, a:dim())
    assert.equals(24, a:nelement())
    assert.equals(24, a:numel())
    assert.equals('float32', a.dtype)
    assert.equals(2, #a)
    assert.equals(0, #tgl.array(1))
  end)

  it('strides count elements and is_contiguous tells the layout', function()
    local a = tgl.zeros(2, 3, 4)
    assert.same({ 12, 4, 1 }, a:strides())
    assert.is_true(a:is_contiguous())
    assert.same({ 1, 4, 12 }, a:T():strides())
    assert.is_false(a:T():is_contiguous())
  end)

  it('data is the raw pointer to the first element', function()
    local a = tgl.array({ 1.5, 2.5 }, 'float64')
    local p = ffi.cast('double *', a:data())
    assert.equals(2.5, p[1])
    p[0] = 7
    assert.equals(7, a:get(1))
  end)

  it('get and set take 1-based indices, negative from the end', function()
    local a = m23()
    assert.equals(2, a:get(1, 2))
    assert.equals(6, a:get(-1, -1))
    assert.equals(4, a:get(-1, 1))
    assert.equals(1, a:get(-2, -3))
    assert.equals(a, a:set(60, 2, -1))
    assert.equals(60, a:get(2, 3))
    assert.same({ { 1, 2, 3 }, { 4, 5, 60 } }, a:totable())
  end)

  it('set converts as the dtype requires', function()
    local u = tgl.zeros(2, { dtype = 'uint8' })
    u:set(300, 1)
    u:set(-5, 2)
    assert.same({ 255, 0 }, u:totable())
    local b = tgl.zeros(2, { dtype = 'bool' })
    b:set(true, 1)
    b:set(0.5, 2)
    assert.same({ true, true }, b:totable())
    assert.is_true(b:get(1))
  end)

  it('get and set of a scalar take no index', function()
    local s = tgl.array(1.5)
    s:set(4)
    assert.equals(4, s:get())
  end)

  it('totable follows the view, not the storage', function()
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, m23():T():totable())
  end)

  it('clone is an independent contiguous copy', function()
    local a = m23()
    local t = a:T()
    local c = t:clone()
    assert.is_true(c:is_contiguous())
    assert.equals('int32', c.dtype)
    c:set(100, 1, 1)
    assert.equals(1, a:get(1, 1))
    a:set(-1, 1, 2)
    assert.equals(2, c:get(2, 1))
  end)

  it('astype converts between every pair of dtypes', function()
    for _, from in ipairs(DTYPES) do
      for _, to in ipairs(DTYPES) do
        local a = tgl.array({ 0, 1, 2 }, from)
        local b = a:astype(to)
        local want
        if to == 'bool' then want = { false, true, true }
        elseif from == 'bool' then want = { 0, 1, 1 }
        else want = { 0, 1, 2 } end
        assert.equals(to, b.dtype)
        assert.same(want, b:totable())
        b:set(0, 2)
        assert.equals(from == 'bool' and true or 1, a:get(2))  -- a copy
      end
    end
  end)

  it('astype saturates floats into integers and maps NaN to 0', function()
    local a = tgl.array({ 300.5, -2.7, nan, 0.5 }, 'float64')
    assert.same({ 255, 0, 0, 0 }, a:astype('uint8'):totable())
    assert.same({ 300, -2, 0, 0 }, a:astype('int32'):totable())
    assert.same({ 300, -2, 0, 0 }, a:astype('int64'):totable())
    assert.same({ true, true, true, true }, a:astype('bool'):totable())
  end)

  it('astype wraps when narrowing integers', function()
    local a = tgl.array({ 2 ^ 32 + 5, -1, 300 }, 'int64')
    assert.same({ 5, -1, 300 }, a:astype('int32'):totable())
    assert.same({ 5, 255, 44 }, a:astype('uint8'):totable())
    assert.same({ 255, 44 }, tgl.array({ -1, 300 }, 'int32'):astype('uint8'):totable())
  end)

  it('reshape of a contiguous array is a view of the same storage', function()
    local a = tgl.arange(1, 6, { dtype = 'float64' })
    local r = a:reshape(2, 3)
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, r:totable())
    r:set(50, 2, 2)
    assert.equals(50, a:get(5))
    assert.equals(a:data(), r:data())
    assert.same({ 3, 2 }, a:reshape({ 3, 2 }):shape())
    assert.same({ 3, 2 }, a:view(3, 2):shape())
  end)

  it('reshape infers one size given as -1', function()
    local a = tgl.zeros(24)
    assert.same({ 2, 4, 3 }, a:reshape(2, -1, 3):shape())
    assert.same({ 24 }, a:reshape(2, 3, 4):reshape(-1):shape())
  end)

  it('reshape of a non-contiguous array is a copy', function()
    local a = m23()
    local r = a:T():reshape(6)
    assert.same({ 1, 4, 2, 5, 3, 6 }, r:totable())
    r:set(0, 1)
    assert.equals(1, a:get(1, 1))
  end)

  it('T, transpose and permute are views of the same storage', function()
    local a = tgl.arange(1, 24, { dtype = 'float64' }):reshape(2, 3, 4)
    local t = a:T()
    assert.same({ 4, 3, 2 }, t:shape())
    assert.equals(a:get(2, 3, 4), t:get(4, 3, 2))
    local s = a:transpose(1, 3)
    assert.same({ 4, 3, 2 }, s:shape())
    local s2 = a:transpose(-1, 2)
    assert.same({ 2, 4, 3 }, s2:shape())
    assert.equals(a:get(1, 2, 3), s2:get(1, 3, 2))
    local p = a:permute(2, 3, 1)
    assert.same({ 3, 4, 2 }, p:shape())
    assert.equals(a:get(2, 1, 4), p:get(1, 4, 2))
    assert.same({ 3, 4, 2 }, a:permute({ 2, 3, 1 }):shape())
    -- writes through every view land in a
    t:set(-1, 1, 1, 1)
    s:set(-2, 4, 3, 2)
    p:set(-3, 3, 4, 1)
    assert.equals(-1, a:get(1, 1, 1))
    assert.equals(-2, a:get(2, 3, 4))
    assert.equals(-3, a:get(1, 3, 4))
  end)

  it('transpose without axes reverses them', function()
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, m23():transpose():totable())
  end)

  it('copy writes another array into this one, converting, and returns it', function()
    local a = tgl.zeros(2, 3, { dtype = 'float64' })
    assert.equals(a, a:copy(m23()))
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, a:totable())
    -- into a transposed view: the storage under it changes
    local b = tgl.zeros(3, 2, { dtype = 'int32' })
    b:T():copy(m23())
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, b:totable())
  end)

  it('copy between overlapping views of one array reads before it writes', function()
    local a = tgl.arange(1, 4, { dtype = 'float64' }):reshape(2, 2)
    a:copy(a:T())
    assert.same({ { 1, 3 }, { 2, 4 } }, a:totable())
  end)

  it('fill sets every element, through views too, and returns the array', function()
    local a = tgl.zeros(2, 3, { dtype = 'int32' })
    assert.equals(a, a:fill(7))
    assert.same({ { 7, 7, 7 }, { 7, 7, 7 } }, a:totable())
    a:T():fill(300.7)
    assert.same({ { 300, 300, 300 }, { 300, 300, 300 } }, a:totable())
    assert.same({ true, true }, tgl.zeros(2, { dtype = 'bool' }):fill(true):totable())
    assert.same({ 255 }, tgl.zeros(1, { dtype = 'uint8' }):fill(999):totable())
  end)

  it('contiguous returns the array itself when it is contiguous, else a copy', function()
    local a = m23()
    assert.is_true(rawequal(a, a:contiguous()))
    local c = a:T():contiguous()
    assert.is_false(rawequal(a, c))
    assert.is_true(c:is_contiguous())
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, c:totable())
  end)

  it('a view keeps its storage alive after the original is collected', function()
    local v
    do
      local a = tgl.arange(1, 6, { dtype = 'float64' }):reshape(2, 3)
      v = a:T()
    end
    full_gc()
    local _ = tgl.zeros(1000)  -- would reuse a freed buffer
    assert.same({ { 1, 4 }, { 2, 5 }, { 3, 6 } }, v:totable())
  end)

  it('is_array tells arrays from other values', function()
    assert.is_true(tgl.is_array(tgl.zeros(1)))
    assert.is_false(tgl.is_array({}))
    assert.is_false(tgl.is_array(1))
    assert.is_false(tgl.is_array(nil))
  end)
end)

describe('array methods given bad input', function()
  local a = tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } })

  it('get and set reject wrong index counts, out-of-range and non-integer indices', function()
    raises('get', function() a:get(1) end, 'a 2-d array needs 2 indices, got 1')
    raises('get', function() a:get(3, 1) end, 'index 3 is out of range for dimension 1 of size 2')
    raises('get', function() a:get(1, 0) end, 'index 0 is out of range for dimension 2 of size 3')
    raises('get', function() a:get(1, -4) end, 'index -4 is out of range for dimension 2')
    raises('get', function() a:get(1.5, 1) end, 'index 1 must be an integer, got 1.5')
    raises('get', function() a:get('1', 1) end, 'index 1 must be an integer')
    raises('set', function() a:set(1, 1, 4) end, 'index 4 is out of range for dimension 2 of size 3')
    raises('set', function() a:set('x', 1, 1) end, 'value must be a number, got string')
    raises('set', function() a:set(1, 1) end, 'needs 2 indices, got 1')
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, a:totable())
  end)

  it('size rejects axes out of range and non-integers', function()
    raises('size', function() a:size(3) end, 'axis 3 is out of range for a 2-d array')
    raises('size', function() a:size(-3) end, 'out of range for a 2-d array')
    raises('size', function() a:size(0) end, 'axis 0 is out of range')
    raises('size', function() a:size('x') end, 'axis must be an integer, got x')
  end)

  it('astype rejects unknown or missing dtypes', function()
    raises('astype', function() a:astype('float16') end, "unknown dtype 'float16'")
    raises('astype', function() a:astype() end, 'dtype must be a string, got nil')
  end)

  it('reshape rejects sizes that do not fit', function()
    raises('reshape', function() a:reshape(4) end, 'cannot reshape 6 elements into a shape of 4 elements')
    raises('reshape', function() a:reshape(-1, -1) end, 'more than one dimension is -1')
    raises('reshape', function() a:reshape(4, -1) end, 'cannot infer')
    raises('reshape', function() a:reshape(-2, 3) end, 'size -2 of dimension 1')
    raises('reshape', function() a:reshape('x') end, 'size x of dimension 1')
    raises('reshape', function() a:reshape(1, 1, 1, 1, 1, 1, 1, 1, 6) end, '9 dimensions')
  end)

  it('transpose and permute reject bad axes', function()
    raises('transpose', function() a:transpose(1, 3) end, 'axis 3 is out of range for a 2-d array')
    raises('transpose', function() a:transpose(1) end, 'axis must be an integer, got nil')
    raises('permute', function() a:permute(1, 1) end, 'not a permutation of 2 axes')
    raises('permute', function() a:permute(1) end, 'a 2-d array needs 2 axes, got 1')
    raises('permute', function() a:permute(1, 3) end, 'axis 3 is out of range')
  end)

  it('copy rejects non-arrays and other shapes', function()
    raises('copy', function() a:copy(5) end, 'source must be an array, got number')
    raises('copy', function() a:copy({ 1, 2 }) end, 'source must be an array, got table')
    raises('copy', function() a:copy(tgl.zeros(3, 2)) end, 'shapes differ', '2x3', '3x2')
    assert.same({ { 1, 2, 3 }, { 4, 5, 6 } }, a:totable())
  end)

  it('fill rejects non-numbers', function()
    raises('fill', function() a:fill('x') end, 'value must be a number, got string')
    raises('fill', function() a:fill() end, 'got nil')
  end)

  it('unknown fields are errors that name the field', function()
    local ok, err = pcall(function() return a.nosuch end)
    assert.is_false(ok)
    assert.matches("no field or method 'nosuch'", err)
  end)
end)

describe('printing', function()
  it('an int32 matrix is right-aligned columns and a footer', function()
    assert.equals('  1 -2  3\n 40  5  6\n[tgl.array int32 of size 2x3]',
                  tostring(tgl.array({ { 1, -2, 3 }, { 40, 5, 6 } }, 'int32')))
  end)

  it('a float matrix gets four decimals when one value is fractional', function()
    assert.equals('   1.5000  -2.0000\n   3.2500 100.0000\n[tgl.array float32 of size 2x2]',
                  tostring(tgl.array({ { 1.5, -2 }, { 3.25, 100 } })))
  end)

  it('whole floats print without decimals; huge or tiny ones in scientific form', function()
    assert.equals(' 1 2 3\n[tgl.array float64 of size 3]',
                  tostring(tgl.array({ 1, 2, 3 }, 'float64')))
    assert.equals(' 1.0000e-05 2.5000e-05\n[tgl.array float32 of size 2]',
                  tostring(tgl.array({ 1e-5, 2.5e-5 })))
    assert.equals(' 2.5000e+00 1.0000e+06\n[tgl.array float64 of size 2]',
                  tostring(tgl.array({ 2.5, 1e6 }, 'float64')))
    -- tiny values next to moderate ones show as 0.0000, as in Torch7
    assert.equals(' 0.0000 2.5000\n[tgl.array float32 of size 2]',
                  tostring(tgl.array({ 1e-5, 2.5 })))
    assert.equals('  nan  inf -inf    1\n[tgl.array float32 of size 4]',
                  tostring(tgl.array({ nan, inf, -inf, 1 })))
  end)

  it('a 3-d array prints one titled block per leading index, as Torch7', function()
    local a = tgl.arange(1, 8):reshape(2, 2, 2)
    assert.equals('(1,.,.) = \n 1 2\n 3 4\n\n(2,.,.) = \n 5 6\n 7 8\n\n'
                  .. '[tgl.array int64 of size 2x2x2]', tostring(a))
  end)

  it('a bool array prints true and false', function()
    assert.equals('  true false\n[tgl.array bool of size 2]', tostring(tgl.array({ true, false })))
  end)

  it('a scalar prints its value and "scalar"', function()
    assert.equals('3.5000\n[tgl.array float32 scalar]', tostring(tgl.array(3.5)))
    assert.equals('7\n[tgl.array int32 scalar]', tostring(tgl.array(7, 'int32')))
  end)

  it('an empty array prints [empty] and its shape', function()
    assert.equals('[empty]\n[tgl.array float32 of size 0x3]', tostring(tgl.zeros(0, 3)))
  end)

  it('a transposed view prints its own layout', function()
    assert.equals(' 1 4\n 2 5\n 3 6\n[tgl.array int64 of size 3x2]',
                  tostring(tgl.arange(1, 6):reshape(2, 3):T()))
  end)

  it('a large array is elided with ... keeping three rows at each end', function()
    local a = tgl.arange(1, 6000):reshape(2000, 3):astype('float32')
    local s = tostring(a)
    assert.is_truthy(s:find('...', 1, true))
    assert.equals('    1    2    3\n    4    5    6\n    7    8    9\n ...\n'
                  .. ' 5992 5993 5994\n 5995 5996 5997\n 5998 5999 6000\n'
                  .. '[tgl.array float32 of size 2000x3]', s)
  end)

  it('a long vector is elided within its row', function()
    assert.equals('    1    2    3  ... 4998 4999 5000\n[tgl.array int64 of size 5000]',
                  tostring(tgl.arange(5000)))
  end)

  it('int64 extremes print exactly', function()
    local a = tgl.array({ -2 ^ 63, 2 ^ 63 }, 'int64')  -- 2^63 saturates to 2^63 - 1
    assert.equals(' -9223372036854775808  9223372036854775807\n[tgl.array int64 of size 2]',
                  tostring(a))
  end)
end)

describe('memory', function()
  it('the collector frees dropped arrays before live bytes pass ~512 MB', function()
    full_gc()
    local start = live_bytes()
    local peak = 0
    for _ = 1, 200 do
      local a = tgl.empty(2 * 1024 * 1024)  -- 8 MB of float32
      assert.equals(8 * 1024 * 1024, a:nelement() * 4)
      local live = live_bytes()
      if live > peak then peak = live end
    end
    assert.is_true(peak - start < 512 * 1024 * 1024,
                   ('peak %.0f MB above the start'):format((peak - start) / 2 ^ 20))
    full_gc()
    assert.is_true(live_bytes() <= start)
  end)

  it('views and copies made in a loop are freed as well', function()
    full_gc()
    local start = live_bytes()
    local peak = 0
    for _ = 1, 100 do
      local a = tgl.zeros(1024, 1024):T():reshape(-1)  -- a 4 MB copy via a view
      assert.equals(1024 * 1024, a:nelement())
      local live = live_bytes()
      if live > peak then peak = live end
    end
    assert.is_true(peak - start < 512 * 1024 * 1024)
    full_gc()
    assert.is_true(live_bytes() <= start)
  end)
end)

describe('devices', function()
  it('arrays, their views and copies live in cpu memory (device 0)', function()
    local a = tgl.zeros(2, 3)
    assert.equals(0, a.p.device)
    assert.equals(0, a:T().p.device)
    assert.equals(0, a:clone().p.device)
    assert.equals('cpu', ffi.string(C.tgl_device_name(0)))
    assert.equals('cuda', ffi.string(C.tgl_device_name(1)))
    assert.is_true(C.tgl_device_name(99) == nil)
  end)

  -- A descriptor relabelled by hand with a device no build has a backend
  -- for (test only: users never write the fields).  Its memory is really
  -- the host's, so a read that slipped through would go unnoticed; every
  -- path must refuse instead.
  local function elsewhere()
    local a = tgl.array({ { 1, 2 }, { 3, 4 } })
    a.p.device = 9
    return a
  end

  it('Lua reads no element of an array on another device', function()
    local a = elsewhere()
    raises('totable', function() a:totable() end, 'invalid device 9')
    raises('cpu', function() a:cpu() end, 'invalid device 9')
    raises('get', function() a:get(1, 1) end, 'invalid device 9')
    assert.equals('[tgl.array float32 of size 2x2 on device 9]', tostring(a))
    assert.is_true(a:data() ~= nil)  -- the raw pointer, as API.md defines it
  end)

  it('engine calls that touch the elements refuse it too', function()
    local a = elsewhere()
    raises('set', function() a:set(5, 1, 1) end, 'invalid device 9')
    raises('clone', function() a:clone() end, 'invalid device 9')
    raises('copy', function() tgl.zeros(2, 2):copy(a) end, 'invalid device 9')
    a.p.device = 0
    assert.same({ { 1, 2 }, { 3, 4 } }, a:totable())
  end)
end)
