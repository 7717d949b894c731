-- ops_spec.lua — every operation of API.md "Operations", as users call it:
-- values on several shapes (broadcast rows and columns, size-1 and size-0
-- axes), eagerly on arrays and compiled from variables (both must give the
-- same dtype, shape and numbers); gradients checked by finite differences
-- (tgl.verify_grad, float64); bad input, which must raise 'tgl.<name>: ...'
-- at the caller's line, naming the problem.
--
-- Expected numbers are hand-computed or pasted from NumPy 1.24 (the
-- expression is in the comment above each literal).  Inputs are multiples
-- of 1/8 so that float32 holds them exactly.
tgl = tgl or require 'tgl'
local tgl = tgl

local nan, inf = 0 / 0, math.huge

-- The dtypes expected below are those of the default floatX (float32),
-- whatever TGL_FLOATX says.
local saved_floatX
setup(function()
  saved_floatX = tgl.config.floatX
  tgl.config.floatX = 'float32'
end)
teardown(function() tgl.config.floatX = saved_floatX end)

-- ---------------------------------------------------------------------------
-- helpers

-- Relative and absolute tolerance by dtype; integers and bools are exact.
local TOL = {
  float32 = { rel = 2e-6, abs = 1e-6 },
  float64 = { rel = 1e-12, abs = 0 },
}

local function flat(t, out)
  out = out or {}
  if type(t) == 'table' then
    for _, v in ipairs(t) do flat(v, out) end
  else
    out[#out + 1] = t
  end
  return out
end

-- The shape of a (non-empty) nested table; {} for a number.
local function shape_of(t)
  local s = {}
  while type(t) == 'table' do
    s[#s + 1] = #t
    t = t[1]
  end
  return s
end

local function close(want, got, dtype)
  if type(want) == 'boolean' then return got == want end
  if want ~= want then return got ~= got end
  if want == inf or want == -inf then return got == want end
  if type(got) ~= 'number' then return false end
  local tol = TOL[dtype]
  if not tol then return got == want end
  return math.abs(got - want) <= tol.abs + tol.rel * math.abs(want)
end

-- Asserts that a is an array of this dtype and shape (default: the nested
-- table's shape) whose elements match values (nested or flat, C order).
local function expect(a, dtype, values, shape, what)
  what = what or 'result'
  assert.is_true(tgl.is_array(a), ('%s: expected an array, got %s'):format(what, tostring(a)))
  assert.equals(dtype, a.dtype, what .. ': dtype')
  shape = shape or shape_of(values)
  assert.same(shape, a:shape(), what .. ': shape')
  local want, got = flat(values), flat(a:totable())
  assert.equals(#want, #got, what .. ': number of elements')
  for i = 1, #want do
    if not close(want[i], got[i], dtype) then
      assert.is_true(false, ('%s: element %d (C order) is %s, expected %s (%s)'):format(what, i,
                     tostring(got[i]), tostring(want[i]), dtype))
    end
  end
end

local function arr(t, dtype) return tgl.array(t, dtype or 'float32') end
local function d(t) return tgl.array(t, 'float64') end

-- A symbolic variable of a's type; length-1 axes are declared broadcastable
-- (as a Theano user declares a row), so compiled code broadcasts as eager
-- code does.
local function var_like(a)
  local bc = {}
  for k = 1, a:dim() do bc[k] = a:size(k) == 1 end
  return tgl.tensor { dtype = a.dtype, ndim = a:dim(), broadcastable = bc }
end

-- Runs fn eagerly on args and compiled (the arrays in args become inputs;
-- numbers and other values are passed as they are) and checks both results.
local function both(fn, args, dtype, values, shape)
  local eager = fn(unpack(args, 1, #args))
  expect(eager, dtype, values, shape, 'eager')
  local vars, ins, vals = {}, {}, {}
  for i = 1, #args do
    local a = args[i]
    if tgl.is_array(a) then
      vars[i] = var_like(a)
      ins[#ins + 1], vals[#vals + 1] = vars[i], a
    else
      vars[i] = a
    end
  end
  local f = tgl.compile { inputs = ins, outputs = fn(unpack(vars, 1, #args)) }
  local compiled = f(unpack(vals, 1, #vals))
  expect(compiled, dtype, values, shape, 'compiled')
  return eager, compiled
end

-- Asserts f raises 'tgl.<fname>: ...' from a line of this file and that the
-- message contains each plain-text needle.  Returns the message.
local function raises(fname, f, ...)
  local ok, err = pcall(f)
  assert(not ok, 'expected an error from tgl.' .. fname)
  err = tostring(err)
  assert.matches('ops_spec%.lua:%d+: tgl%.' .. fname:gsub('%p', '%%%0') .. ': ', err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err)
  end
  return err
end

-- ---------------------------------------------------------------------------
-- test data (multiples of 1/8, exact in float32)

local A = { { 0.5, -1.25, 2.0 }, { -0.75, 1.5, 3.0 } }   -- 2x3
local R = { { 1.0, -2.0, 0.25 } }                      -- a 1x3 row
local Cv = { 0.5, -4.0 }                               -- made a column with dimshuffle
local B = { { 2.0, 0.5, -1.0 }, { 4.0, -0.25, 1.5 } }  -- no zeros
local P = { { 0.5, 1.25, 2.0 }, { 0.75, 1.5, 3.0 } }    -- positive
local M34 = { { 0.5, -1, 2, 0.25 }, { 1.5, 0.75, -0.5, 1 }, { -2, 0.125, 1, 3 } }
local v3 = { 0.5, -1.5, 2.0 }
-- ((np.arange(24) * 7) % 11 - 5) * 0.5, reshaped (2,3,4): no ties along any one axis
local T3 = { { { -2.5, 1, -1, 2.5 }, { 0.5, -1.5, 2, 0 }, { -2, 1.5, -0.5, -2.5 } },
             { { 1, -1, 2.5, 0.5 }, { -1.5, 2, 0, -2 }, { 1.5, -0.5, -2.5, 1 } } }
local X = { -2.5, -1.25, -0.5, 0.0, 0.25, 0.5, 1.5, 3.0 }
local Ppos = { 0.125, 0.5, 1.0, 2.5, 10.0 }
local L1 = { -0.5, 0.0, 0.25, 3.0 }

-- Math functions: {input, NumPy in float64 (printed %.15g)}; the comment
-- above each entry is the NumPy expression.
local MATH = {
  -- np.exp(X)
  exp = { X, { 0.0820849986238988, 0.28650479686019, 0.606530659712633, 1, 1.28402541668774, 1.64872127070013, 4.48168907033807, 20.0855369231877 } },
  -- np.expm1(X)
  expm1 = { X, { -0.917915001376101, -0.71349520313981, -0.393469340287367, 0, 0.284025416687742, 0.648721270700128, 3.48168907033806, 19.0855369231877 } },
  -- np.tanh(X)
  tanh = { X, { -0.98661429815143, -0.848283639957513, -0.46211715726001, 0, 0.244918662403709, 0.46211715726001, 0.905148253644867, 0.99505475368673 } },
  -- 1/(1+np.exp(-X))
  sigmoid = { X, { 0.0758581800212435, 0.222700138825309, 0.377540668798145, 0.5, 0.562176500885798, 0.622459331201855, 0.817574476193644, 0.952574126822433 } },
  -- np.log1p(np.exp(X))
  softplus = { X, { 0.0788897342925496, 0.251929081345373, 0.474076984180107, 0.693147180559945, 0.825939419878843, 0.974076984180107, 1.70141327798275, 3.04858735157374 } },
  -- np.sin(X)
  sin = { X, { -0.598472144103956, -0.948984619355586, -0.479425538604203, 0, 0.247403959254523, 0.479425538604203, 0.997494986604054, 0.141120008059867 } },
  -- np.cos(X)
  cos = { X, { -0.801143615546934, 0.315322362395269, 0.877582561890373, 1, 0.968912421710645, 0.877582561890373, 0.0707372016677029, -0.989992496600445 } },
  -- np.abs(X)
  abs = { X, { 2.5, 1.25, 0.5, 0, 0.25, 0.5, 1.5, 3 } },
  -- np.sign(X)
  sign = { X, { -1, -1, -1, 0, 1, 1, 1, 1 } },
  -- np.maximum(X, 0)
  relu = { X, { 0, 0, 0, 0, 0.25, 0.5, 1.5, 3 } },
  -- np.floor(X)
  floor = { X, { -3, -2, -1, 0, 0, 0, 1, 3 } },
  -- np.ceil(X)
  ceil = { X, { -2, -1, -0, 0, 1, 1, 2, 3 } },
  -- np.log(Ppos)
  log = { Ppos, { -2.07944154167984, -0.693147180559945, 0, 0.916290731874155, 2.30258509299405 } },
  -- np.sqrt(Ppos)
  sqrt = { Ppos, { 0.353553390593274, 0.707106781186548, 1, 1.58113883008419, 3.16227766016838 } },
  -- np.log1p(L1)
  log1p = { L1, { -0.693147180559945, 0, 0.22314355131421, 1.38629436111989 } },
}

-- NumPy: np.<op>(T3, axis=<axis - 1>) for op in sum, mean, max, min, var, std (ddof=0);
-- keep is the keepdims=True shape.
local REDUCTIONS = {
  { axis = nil, np_axis = 'None', keep = { 1, 1, 1 },
    sum = -1.5,
    mean = -0.0625,
    max = 2.5,
    min = -2.5,
    var = 2.58984375,
    std = 1.60929915,
  },
  { axis = 1, np_axis = '0', keep = { 1, 3, 4 },
    sum = { { -1.5, 0, 1.5, 3 }, { -1, 0.5, 2, -2 }, { -0.5, 1, -3, -1.5 } },
    mean = { { -0.75, 0, 0.75, 1.5 }, { -0.5, 0.25, 1, -1 }, { -0.25, 0.5, -1.5, -0.75 } },
    max = { { 1, 1, 2.5, 2.5 }, { 0.5, 2, 2, 0 }, { 1.5, 1.5, -0.5, 1 } },
    min = { { -2.5, -1, -1, 0.5 }, { -1.5, -1.5, 0, -2 }, { -2, -0.5, -2.5, -2.5 } },
    var = { { 3.0625, 1, 3.0625, 1 }, { 1, 3.0625, 1, 1 }, { 3.0625, 1, 1, 3.0625 } },
    std = { { 1.75, 1, 1.75, 1 }, { 1, 1.75, 1, 1 }, { 1.75, 1, 1, 1.75 } },
  },
  { axis = 2, np_axis = '1', keep = { 2, 1, 4 },
    sum = { { -4, 1, 0.5, 0 }, { 1, 0.5, 0, -0.5 } },
    mean = { { -1.33333333, 0.333333333, 0.166666667, 0 }, { 0.333333333, 0.166666667, 0, -0.166666667 } },
    max = { { 0.5, 1.5, 2, 2.5 }, { 1.5, 2, 2.5, 1 } },
    min = { { -2.5, -1.5, -1, -2.5 }, { -1.5, -1, -2.5, -2 } },
    var = { { 1.72222222, 1.72222222, 1.72222222, 4.16666667 }, { 1.72222222, 1.72222222, 4.16666667, 1.72222222 } },
    std = { { 1.31233465, 1.31233465, 1.31233465, 2.04124145 }, { 1.31233465, 1.31233465, 2.04124145, 1.31233465 } },
  },
  { axis = -1, np_axis = '-1', keep = { 2, 3, 1 },
    sum = { { 0, 1, -3.5 }, { 3, -1.5, -0.5 } },
    mean = { { 0, 0.25, -0.875 }, { 0.75, -0.375, -0.125 } },
    max = { { 2.5, 2, 1.5 }, { 2.5, 2, 1.5 } },
    min = { { -2.5, -1.5, -2.5 }, { -1, -2, -2.5 } },
    var = { { 3.625, 1.5625, 2.421875 }, { 1.5625, 2.421875, 2.421875 } },
    std = { { 1.90394328, 1.25, 1.55623745 }, { 1.25, 1.55623745, 1.55623745 } },
  },
  { axis = { 1, 3 }, np_axis = '(0, 2)', keep = { 1, 3, 1 },
    sum = { 3, -0.5, -4 },
    mean = { 0.375, -0.0625, -0.5 },
    max = { 2.5, 2, 1.5 },
    min = { -2.5, -2, -2.5 },
    var = { 2.734375, 2.08984375, 2.5625 },
    std = { 1.65359457, 1.44562919, 1.60078106 },
  },
  { axis = { 2, 3 }, np_axis = '(1, 2)', keep = { 2, 1, 1 },
    sum = { -2.5, 1 },
    mean = { -0.208333333, 0.0833333333 },
    max = { 2.5, 2.5 },
    min = { -2.5, -2.5 },
    var = { 2.76909722, 2.36805556 },
    std = { 1.66406046, 1.53884878 },
  },
}

-- ===========================================================================
describe('arithmetic', function()
  it('adds, subtracts and multiplies a matrix and a broadcast row', function()
    -- A + R
    both(function(a, r) return a + r end, { arr(A), arr(R) }, 'float32',
         { { 1.5, -3.25, 2.25 }, { 0.25, -0.5, 3.25 } })
    -- A - R
    both(function(a, r) return a - r end, { arr(A), arr(R) }, 'float32',
         { { -0.5, 0.75, 1.75 }, { -1.75, 3.5, 2.75 } })
    -- A * R
    both(function(a, r) return a * r end, { arr(A), arr(R) }, 'float32',
         { { 0.5, 2.5, 0.5 }, { -0.75, -3, 0.75 } })
    -- the row on the left
    both(function(a, r) return tgl.sub(r, a) end, { arr(A), arr(R) }, 'float32',
         { { 0.5, -0.75, -1.75 }, { 1.75, -3.5, -2.75 } })
  end)

  it('broadcasts a column made with dimshuffle(v, {1, "x"})', function()
    -- A + Cv[:, None]
    both(function(a, c) return a + tgl.dimshuffle(c, { 1, 'x' }) end, { arr(A), arr(Cv) }, 'float32',
         { { 1, -0.75, 2.5 }, { -4.75, -2.5, -1 } })
    -- A * Cv[:, None]
    both(function(a, c) return tgl.mul(a, tgl.dimshuffle(c, { 1, 'x' })) end, { arr(A), arr(Cv) },
         'float32', { { 0.25, -0.625, 1 }, { 3, -6, -12 } })
  end)

  it('broadcasts a column against a row into a matrix', function()
    -- Cv[:, None] + R
    both(function(c, r) return tgl.dimshuffle(c, { 1, 'x' }) + r end, { arr(Cv), arr(R) }, 'float32',
         { { 1.5, -1.5, 0.75 }, { -3, -6, -3.75 } })
  end)

  it('divides elementwise (true division)', function()
    -- A / B
    both(function(a, b) return a / b end, { arr(A), arr(B) }, 'float32',
         { { 0.25, -2.5, -2 }, { -0.1875, -6, 2 } })
    both(function(a, b) return tgl.div(a, b) end, { arr(A, 'float64'), arr(B, 'float64') }, 'float64',
         { { 0.25, -2.5, -2 }, { -0.1875, -6, 2 } })
  end)

  it('raises to a power with ^ and tgl.pow, broadcasting the exponent', function()
    -- P ** R
    local want = { { 0.5, 0.64, 1.18920712 }, { 0.75, 0.444444444, 1.31607401 } }
    both(function(p, r) return p ^ r end, { arr(P), arr(R) }, 'float32', want)
    both(function(p, r) return tgl.pow(p, r) end, { arr(P), arr(R) }, 'float32', want)
    both(function(p) return p ^ 2 end, { arr(P) }, 'float32',
         { { 0.25, 1.5625, 4 }, { 0.5625, 2.25, 9 } })
    -- negative bases: odd integer powers keep the sign, fractional ones are NaN
    both(function(x) return x ^ 3 end, { arr({ -2, 0.5 }) }, 'float32', { -8, 0.125 })
    expect(arr({ -2, 4 }) ^ 0.5, 'float32', { nan, 2 })
  end)

  it('negates with unary minus', function()
    both(function(a) return -a end, { arr(A) }, 'float32', { { -0.5, 1.25, -2 }, { 0.75, -1.5, -3 } })
    both(function(a) return -a end, { arr({ 3, -4 }, 'int32') }, 'int32', { -3, 4 })
  end)

  it('gives Lua numbers the tensor dtype (weak scalars): float32 stays float32', function()
    -- 2 - A / 4
    both(function(a) return 2 - a / 4 end, { arr(A) }, 'float32',
         { { 1.875, 2.3125, 1.5 }, { 2.1875, 1.625, 1.25 } })
    both(function(a) return a * 0.5 + 1 end, { arr(A, 'float64') }, 'float64',
         { { 1.25, 0.375, 2 }, { 0.625, 1.75, 2.5 } })
  end)

  it('keeps integer tensors integer with integer Lua numbers, floatX with fractions', function()
    both(function(i) return i * 2 - 1 end, { arr({ 1, 2, 3 }, 'int32') }, 'int32', { 1, 3, 5 })
    both(function(i) return i + 1.5 end, { arr({ 1, 2 }, 'int32') }, 'float32', { 2.5, 3.5 })
    both(function(i) return i + 300 end, { arr({ 1, 2 }, 'uint8') }, 'int32', { 301, 302 })
    both(function(i) return i + 1 end, { arr({ true, false }, 'bool') }, 'int64', { 2, 1 })
    both(function(i) return i ^ 2 end, { arr({ -3, 5 }, 'int64') }, 'int64', { 9, 25 })
  end)

  it('divides integers as floatX', function()
    both(function(i) return i / 2 end, { arr({ -3, 1, 4 }, 'int32') }, 'float32', { -1.5, 0.5, 2 })
    both(function(i, j) return i / j end, { arr({ -3, 1, 5 }, 'int32'), arr({ 1, 4, 8 }, 'int64') },
         'float32', { -3, 0.25, 0.625 })
  end)

  it('promotes mixed dtypes as NumPy does', function()
    both(function(a, b) return a + b end, { arr({ 1, 2 }, 'int32'), arr({ 0.5, 1 }, 'float64') },
         'float64', { 1.5, 3 })
    both(function(a, b) return a * b end, { arr({ 1, 2 }, 'int32'), arr({ 3, 4 }, 'int64') },
         'int64', { 3, 8 })
    both(function(a, b) return a + b end, { arr({ 1, 2 }, 'uint8'), arr({ -3, 4 }, 'int32') },
         'int32', { -2, 6 })
    both(function(a, b) return a - b end, { arr({ 1, 2 }, 'float32'), arr({ 0.5, 1 }, 'float64') },
         'float64', { 0.5, 1 })
  end)

  it('promotes an integer with a float to that float (int64 + float32 is float32, unlike NumPy)', function()
    both(function(a, b) return a + b end, { arr({ 1, 2 }, 'int64'), arr({ 0.5, 1 }, 'float32') },
         'float32', { 1.5, 3 })
  end)

  it('gives a number the dtype its tensor arguments promote to', function()
    -- int64 with float32 promotes to float32, so 2.5 is a float32 constant
    both(function(x, lo) return tgl.clip(x, lo, 2.5) end,
         { arr({ 1, 5 }, 'int64'), arr({ 1.5, 1.5 }, 'float32') }, 'float32', { 1.5, 2.5 })
    -- bool with uint8 is uint8, which cannot hold 300: int32
    both(function(b, u) return tgl.clip(b, u, 300) end,
         { arr({ true, false }, 'bool'), arr({ 0, 0 }, 'uint8') }, 'int32', { 1, 0 })
  end)

  it('computes on 0-d scalars', function()
    both(function(a, b) return a * b + 1 end, { arr(2.5), arr(4) }, 'float32', 11, {})
    expect(tgl.add(1, 2), 'float32', 3, {})
  end)

  it('keeps size-0 axes, also when broadcasting against a row', function()
    both(function(z, r) return z + r end, { tgl.zeros(0, 3), arr(R) }, 'float32', {}, { 0, 3 })
    both(function(z) return z * 2 - 1 end, { tgl.zeros(3, 0) }, 'float32', {}, { 3, 0 })
  end)

  it('broadcasts size-1 axes both ways', function()
    -- np.array([[5]]) + np.array([[1, 2, 3]]) ; np.ones((2, 1)) * [[1, 2, 3]]
    both(function(a, r) return a + r end, { arr({ { 5 } }), arr({ { 1, 2, 3 } }) }, 'float32', { { 6, 7, 8 } })
    both(function(c, r) return c * r end, { arr({ { 1 }, { 2 } }), arr({ { 1, 2, 3 } }) }, 'float32',
         { { 1, 2, 3 }, { 2, 4, 6 } })
  end)
end)

-- ===========================================================================
describe('maximum, minimum, clip', function()
  it('takes the elementwise maximum and minimum, broadcasting', function()
    -- np.maximum(A, R)
    both(function(a, r) return tgl.maximum(a, r) end, { arr(A), arr(R) }, 'float32',
         { { 1, -1.25, 2 }, { 1, 1.5, 3 } })
    -- np.minimum(A, B)
    both(function(a, b) return tgl.minimum(a, b) end, { arr(A), arr(B) }, 'float32',
         { { 0.5, -1.25, -1 }, { -0.75, -0.25, 1.5 } })
    both(function(a) return a:maximum(0) end, { arr(A) }, 'float32', { { 0.5, 0, 2 }, { 0, 1.5, 3 } })
    both(function(i) return tgl.minimum(i, 1) end, { arr({ -3, 0, 2, 5 }, 'int32') }, 'int32', { -3, 0, 1, 1 })
  end)

  it('clips into [lo, hi] with numbers or tensors as bounds', function()
    -- np.clip(A, -1, 1.75)
    both(function(a) return tgl.clip(a, -1, 1.75) end, { arr(A) }, 'float32',
         { { 0.5, -1, 1.75 }, { -0.75, 1.5, 1.75 } })
    both(function(a) return a:clip(0, 1) end, { arr(A, 'float64') }, 'float64', { { 0.5, 0, 1 }, { 0, 1, 1 } })
    -- np.clip(A, R - 1, R + 1) with row bounds
    both(function(a, lo, hi) return tgl.clip(a, lo, hi) end,
         { arr(A), arr({ { 0, -3, -0.75 } }), arr({ { 2, -1, 1.25 } }) }, 'float32',
         { { 0.5, -1.25, 1.25 }, { 0, -1, 1.25 } })
    both(function(i) return tgl.clip(i, -1, 2) end, { arr({ -3, -1, 0, 2, 5 }, 'int32') }, 'int32',
         { -1, -1, 0, 2, 2 })
  end)
end)

-- ===========================================================================
describe('comparisons and logic', function()
  local E = { { 0.5, 0, 2 }, { 1, 1.5, -3 } }

  it('compares elementwise into bool tensors', function()
    local T, F = true, false
    both(function(a, e) return tgl.eq(a, e) end, { arr(A), arr(E) }, 'bool', { { T, F, T }, { F, T, F } })
    both(function(a, e) return tgl.neq(a, e) end, { arr(A), arr(E) }, 'bool', { { F, T, F }, { T, F, T } })
    both(function(a, e) return tgl.lt(a, e) end, { arr(A), arr(E) }, 'bool', { { F, T, F }, { T, F, F } })
    both(function(a, e) return tgl.le(a, e) end, { arr(A), arr(E) }, 'bool', { { T, T, T }, { T, T, F } })
    both(function(a, e) return tgl.gt(a, e) end, { arr(A), arr(E) }, 'bool', { { F, F, F }, { F, F, T } })
    both(function(a, e) return tgl.ge(a, e) end, { arr(A), arr(E) }, 'bool', { { T, F, T }, { F, T, T } })
  end)

  it('compares against Lua numbers, broadcast rows and mixed dtypes', function()
    local T, F = true, false
    both(function(a) return tgl.gt(a, 0) end, { arr(A) }, 'bool', { { T, F, T }, { F, T, T } })
    both(function(a) return a:le(1.5) end, { arr(A) }, 'bool', { { T, T, F }, { T, T, F } })
    -- A < R
    both(function(a, r) return tgl.lt(a, r) end, { arr(A), arr(R) }, 'bool', { { T, F, F }, { T, F, F } })
    both(function(i, f) return tgl.eq(i, f) end, { arr({ 1, 2, 3 }, 'int32'), arr({ 1, 2.5, 3 }, 'float64') },
         'bool', { T, F, T })
  end)

  it('combines bools with and_, or_, not_, broadcasting', function()
    local T, F = true, false
    local m, r = arr({ { T, F }, { T, T } }, 'bool'), arr({ { T, F } }, 'bool')
    both(function(a, b) return tgl.and_(a, b) end, { m, r }, 'bool', { { T, F }, { T, F } })
    both(function(a, b) return tgl.or_(a, b) end, { m, r }, 'bool', { { T, F }, { T, T } })
    both(function(a) return tgl.not_(a) end, { m }, 'bool', { { F, T }, { F, F } })
    -- 0 < A < 2.5
    both(function(a) return tgl.and_(tgl.gt(a, 0), tgl.lt(a, 2.5)) end, { arr(A) }, 'bool',
         { { T, F, T }, { F, T, F } })
  end)

  it('treats nonzero numbers as true in logic ops', function()
    local T, F = true, false
    both(function(a, b) return tgl.and_(a, b) end, { arr({ 0, 2, -1, 0 }, 'int32'), arr({ 1, 0, 3, 0 }, 'int32') },
         'bool', { F, F, T, F })
    both(function(a) return tgl.not_(a) end, { arr({ 0, 0.5, -2 }) }, 'bool', { T, F, F })
  end)
end)

-- ===========================================================================
describe('switch and ifelse', function()
  it('switch picks elementwise, broadcasting the condition and the branches', function()
    local T, F = true, false
    both(function(c, a, b) return tgl.switch(c, a, b) end,
         { arr({ T, F, T }, 'bool'), arr({ 1, 2, 3 }), arr({ 10, 20, 30 }) }, 'float32', { 1, 20, 3 })
    -- np.where(A > 0, A, R)
    both(function(a, r) return tgl.switch(tgl.gt(a, 0), a, r) end, { arr(A), arr(R) }, 'float32',
         { { 0.5, -2, 2 }, { 1, 1.5, 3 } })
    -- a column condition and a Lua number branch
    both(function(c, a) return tgl.switch(tgl.dimshuffle(c, { 1, 'x' }), a, 0) end,
         { arr({ F, T }, 'bool'), arr(A) }, 'float32', { { 0, 0, 0 }, { -0.75, 1.5, 3 } })
    -- a numeric condition: nonzero is true
    both(function(c, a) return tgl.switch(c, a, -1) end,
         { arr({ 1, 0, 2 }, 'int32'), arr({ 5, 6, 7 }) }, 'float32', { 5, -1, 7 })
  end)

  it('ifelse picks a whole branch by a scalar condition', function()
    local c = tgl.bscalar('c')
    local x, y = tgl.matrix('x'), tgl.matrix('y')
    local f = tgl.compile { inputs = { c, x, y }, outputs = tgl.ifelse(c, x, y * 2) }
    expect(f(true, arr(A), arr(B)), 'float32', A)
    expect(f(false, arr(A), arr(B)), 'float32', { { 4, 1, -2 }, { 8, -0.5, 3 } })
    -- eagerly, on arrays and numbers
    expect(tgl.ifelse(tgl.array(true), arr(A), arr(B)), 'float32', A)
    expect(tgl.ifelse(0, arr({ 1, 2 }), arr({ 3, 4 })), 'float32', { 3, 4 })
  end)

  it('ifelse computes only the branch taken', function()
    -- v[3] is out of range for a 2-vector: it must not run when not taken
    local v = tgl.vector('v')
    local f = tgl.compile { inputs = { v }, outputs = tgl.ifelse(tgl.gt(v:size(1), 2), v[3], v[1]) }
    expect(f(arr({ 7, 8 })), 'float32', 7, {})
    expect(f(arr({ 7, 8, 9 })), 'float32', 9, {})
  end)

  it('ifelse takes a numeric condition and number branches', function()
    local s = tgl.scalar('s')
    local f = tgl.compile { inputs = { s }, outputs = tgl.ifelse(tgl.lt(s, 0), -s, s) }
    expect(f(-2.5), 'float32', 2.5, {})
    expect(f(1.25), 'float32', 1.25, {})
    local g = tgl.compile { inputs = { s }, outputs = tgl.ifelse(s, s, 7) }
    expect(g(0), 'float32', 7, {})
    expect(g(3), 'float32', 3, {})
  end)
end)

-- ===========================================================================
describe('math functions', function()
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    for _, name in ipairs({ 'exp', 'expm1', 'log', 'log1p', 'sqrt', 'tanh', 'sigmoid', 'softplus',
                            'sin', 'cos', 'abs', 'sign', 'relu', 'floor', 'ceil' }) do
      it(('computes %s on %s, eagerly and compiled'):format(name, dtype), function()
        local case = MATH[name]
        both(function(x) return tgl[name](x) end, { arr(case[1], dtype) }, dtype, case[2])
        -- also as a method of arrays and variables
        both(function(x) return x[name](x) end, { arr(case[1], dtype) }, dtype, case[2])
      end)
    end
  end

  it('applies on matrices with size-0 and size-1 axes', function()
    both(function(x) return tgl.tanh(x) end, { tgl.zeros(0, 3) }, 'float32', {}, { 0, 3 })
    both(function(x) return tgl.exp(x) end, { arr({ { 0 } }) }, 'float32', { { 1 } })
    both(function(x) return tgl.sqrt(x) end, { arr(4) }, 'float32', 2, {})
  end)

  it('rounds half away from zero', function()
    both(function(x) return tgl.round(x) end, { arr({ -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6 }) },
         'float32', { -3, -2, -1, 1, 2, 3, 2, -3 })
    both(function(x) return x:round() end, { arr({ 0.49, -0.51 }, 'float64') }, 'float64', { 0, -1 })
  end)

  it('gives floatX for integer input to exp, log, sqrt, tanh, sigmoid, ...', function()
    both(function(i) return tgl.exp(i) end, { arr({ 0, 1 }, 'int32') }, 'float32', { 1, 2.71828183 })
    both(function(i) return tgl.sqrt(i) end, { arr({ 4, 9 }, 'int64') }, 'float32', { 2, 3 })
    both(function(i) return tgl.sigmoid(i) end, { arr({ 0 }, 'uint8') }, 'float32', { 0.5 })
    both(function(b) return tgl.tanh(b) end, { arr({ false }, 'bool') }, 'float32', { 0 })
  end)

  it('keeps integers integer for abs, sign, relu, floor, ceil, round', function()
    local i = arr({ -3, -1, 0, 2, 5 }, 'int32')
    both(function(x) return tgl.abs(x) end, { i }, 'int32', { 3, 1, 0, 2, 5 })
    both(function(x) return tgl.sign(x) end, { i }, 'int32', { -1, -1, 0, 1, 1 })
    both(function(x) return tgl.relu(x) end, { i }, 'int32', { 0, 0, 0, 2, 5 })
    both(function(x) return tgl.floor(x) end, { i }, 'int32', { -3, -1, 0, 2, 5 })
    both(function(x) return tgl.ceil(x) end, { arr({ -3, 7 }, 'int64') }, 'int64', { -3, 7 })
    both(function(x) return tgl.round(x) end, { arr({ -3, 7 }, 'int64') }, 'int64', { -3, 7 })
  end)

  it('is accurate near zero and stable at large magnitudes', function()
    -- np.log1p(1e-10), np.expm1(1e-10)
    both(function(x) return tgl.log1p(x) end, { arr({ 1e-10 }, 'float64') }, 'float64', { 9.9999999995e-11 })
    both(function(x) return tgl.expm1(x) end, { arr({ 1e-10 }, 'float64') }, 'float64', { 1.00000000005e-10 })
    both(function(x) return tgl.sigmoid(x) end, { arr({ -1000, 0, 1000 }) }, 'float32', { 0, 0.5, 1 })
    both(function(x) return tgl.softplus(x) end, { arr({ -1000, 1000 }) }, 'float32', { 0, 1000 })
    -- 1/(1+np.exp(20)), np.log1p(np.exp(-40))
    both(function(x) return tgl.sigmoid(x) end, { arr({ -20 }, 'float64') }, 'float64', { 2.06115361819020e-09 })
    both(function(x) return tgl.softplus(x) end, { arr({ -40 }, 'float64') }, 'float64', { 4.24835425529159e-18 })
    both(function(x) return tgl.tanh(x) end, { arr({ -50, 50 }) }, 'float32', { -1, 1 })
  end)

  it('propagates NaN and infinities', function()
    both(function(x) return tgl.exp(x) end, { arr({ -inf, inf, nan }) }, 'float32', { 0, inf, nan })
    both(function(x) return tgl.log(x) end, { arr({ 0, -1, inf }) }, 'float32', { -inf, nan, inf })
  end)
end)

-- ===========================================================================
describe('cast', function()
  it('converts floats to integers by truncation toward zero', function()
    both(function(x) return tgl.cast(x, 'int32') end, { arr({ -1.75, -0.5, 1.75, 2.5, 300 }) }, 'int32',
         { -1, 0, 1, 2, 300 })
    both(function(x) return tgl.cast(x, 'int64') end, { arr({ -3.5, 1e10 }, 'float64') }, 'int64', { -3, 1e10 })
    both(function(x) return tgl.cast(x, 'uint8') end, { arr({ 0, 1.9, 255 }) }, 'uint8', { 0, 1, 255 })
  end)

  it('converts to bool as nonzero, and bools to 1 and 0', function()
    both(function(x) return tgl.cast(x, 'bool') end, { arr({ 0, 0.5, -2 }) }, 'bool', { false, true, true })
    both(function(x) return tgl.cast(x, 'float64') end, { arr({ true, false }, 'bool') }, 'float64', { 1, 0 })
    both(function(x) return tgl.cast(x, 'int32') end, { arr({ true, false }, 'bool') }, 'int32', { 1, 0 })
  end)

  it('converts between float widths and from integers', function()
    both(function(x) return tgl.cast(x, 'float64') end, { arr(A) }, 'float64', A)
    both(function(x) return tgl.cast(x, 'float32') end, { arr({ 1 / 3 }, 'float64') }, 'float32', { 0.333333343 })
    both(function(x) return x:astype('float32') end, { arr({ -7, 2 ^ 20 }, 'int64') }, 'float32', { -7, 2 ^ 20 })
  end)

  it('returns the input itself when the dtype already matches', function()
    local x = tgl.matrix('x')
    assert.equals(x, tgl.cast(x, 'float32'))
    local a = arr(A)
    assert.equals(a, tgl.cast(a, 'float32'))
  end)
end)

-- ===========================================================================
describe('reductions', function()
  for _, op in ipairs({ 'sum', 'mean', 'max', 'min', 'var', 'std' }) do
    for _, case in ipairs(REDUCTIONS) do
      local ax = type(case.axis) == 'table' and ('{' .. table.concat(case.axis, ',') .. '}') or tostring(case.axis)
      it(('%s over axis %s of a 3-d tensor, with and without keepdims'):format(op, ax), function()
        local t = arr(T3)
        both(function(x) return tgl[op](x, case.axis) end, { t }, 'float32', case[op])
        both(function(x) return tgl[op](x, case.axis, { keepdims = true }) end, { t }, 'float32', case[op], case.keep)
        -- as a method
        both(function(x) return x[op](x, case.axis) end, { t }, 'float32', case[op])
      end)
    end
  end

  it('takes {keepdims=true} in the axis position for a reduction over all axes', function()
    both(function(x) return tgl.sum(x, { keepdims = true }) end, { arr(A) }, 'float32', { { 5 } })
    both(function(x) return x:mean({ keepdims = true }) end, { arr({ { 1, 2 }, { 3, 5 } }) }, 'float32', { { 2.75 } })
    -- np.std([[1, 2], [3, 5]], keepdims=True)
    both(function(x) return tgl.std(x, { keepdims = true }) end, { arr({ { 1, 2 }, { 3, 5 } }) }, 'float32',
         { { 1.47901995 } })
  end)

  it('multiplies with prod over an axis and over all', function()
    -- A.prod(axis=1), A.prod()
    both(function(x) return tgl.prod(x, 2) end, { arr(A) }, 'float32', { -1.25, -3.375 })
    both(function(x) return x:prod() end, { arr(A, 'float64') }, 'float64', 4.21875, {})
    both(function(x) return tgl.prod(x, 1, { keepdims = true }) end, { arr(A) }, 'float32',
         { { -0.375, -1.875, 6 } })
  end)

  it('sums integers and bools into int64 and keeps max/min in the input dtype', function()
    local m = arr({ { 3, 1, 3 }, { 0, 5, 5 } }, 'int32')
    both(function(x) return tgl.sum(x) end, { m }, 'int64', 17, {})
    both(function(x) return tgl.sum(x, 2) end, { m }, 'int64', { 7, 10 })
    both(function(x) return tgl.prod(x, 2) end, { m }, 'int64', { 9, 0 })
    both(function(x) return tgl.max(x, 1) end, { m }, 'int32', { 3, 5, 5 })
    both(function(x) return tgl.min(x) end, { m }, 'int32', 0, {})
    both(function(x) return tgl.sum(x) end, { arr({ true, true, false }, 'bool') }, 'int64', 2, {})
    both(function(x) return tgl.sum(x) end, { arr({ 200, 100 }, 'uint8') }, 'int64', 300, {})
  end)

  it('gives floatX for mean, var and std of integers', function()
    local m = arr({ { 3, 1, 3 }, { 0, 5, 5 } }, 'int32')
    -- np.mean(m), np.var(m, axis=1), np.std(m, axis=0)
    both(function(x) return tgl.mean(x) end, { m }, 'float32', 2.83333333, {})
    both(function(x) return tgl.var(x, 2) end, { m }, 'float32', { 0.888888889, 5.55555556 })
    both(function(x) return tgl.std(x, 1) end, { m }, 'float32', { 1.5, 2, 1 })
  end)

  it('computes var and std with ddof', function()
    -- np.var([1, 2, 3, 4], ddof=1), np.std(A, axis=1, ddof=1)
    both(function(x) return tgl.var(x, nil, { ddof = 1 }) end, { arr({ 1, 2, 3, 4 }) }, 'float32', 1.66666667, {})
    both(function(x) return tgl.std(x, 2, { ddof = 1 }) end, { arr(A, 'float64') }, 'float64',
         { 1.62660177466193, 1.88745860881769 })
  end)

  it('reduces size-0 axes to the identity (sum 0, prod 1) and size-1 axes away', function()
    local z = tgl.zeros(0, 3)
    both(function(x) return tgl.sum(x, 1) end, { z }, 'float32', { 0, 0, 0 })
    both(function(x) return tgl.sum(x, 2) end, { z }, 'float32', {}, { 0 })
    both(function(x) return tgl.sum(x) end, { z }, 'float32', 0, {})
    both(function(x) return tgl.prod(x, 1) end, { z }, 'float32', { 1, 1, 1 })
    both(function(x) return tgl.mean(x, 2) end, { z }, 'float32', {}, { 0 })
    -- np.mean(np.zeros(0)) is nan
    both(function(x) return tgl.mean(x) end, { tgl.zeros(0) }, 'float32', nan, {})
    both(function(x) return tgl.max(x, 2) end, { arr({ { 1 }, { -2 } }) }, 'float32', { 1, -2 })
    both(function(x) return tgl.sum(x, 1) end, { arr({ { 1, 2, 3 } }) }, 'float32', { 1, 2, 3 })
  end)

  it('argmax and argmin give 1-based int64 positions along an axis', function()
    local t = arr(T3)
    -- T3.argmax(axis=k) + 1, T3.argmin(axis=k) + 1
    both(function(x) return tgl.argmax(x, 1) end, { t }, 'int64', { { 2, 1, 2, 1 }, { 1, 2, 1, 1 }, { 2, 1, 1, 2 } })
    both(function(x) return tgl.argmin(x, 1) end, { t }, 'int64', { { 1, 2, 1, 2 }, { 2, 1, 2, 2 }, { 1, 2, 2, 1 } })
    both(function(x) return tgl.argmax(x, 2) end, { t }, 'int64', { { 2, 3, 2, 1 }, { 3, 2, 1, 3 } })
    both(function(x) return x:argmin(2) end, { t }, 'int64', { { 1, 2, 1, 3 }, { 2, 1, 3, 2 } })
    both(function(x) return tgl.argmax(x, 3) end, { t }, 'int64', { { 4, 3, 2 }, { 3, 2, 1 } })
    both(function(x) return tgl.argmin(x, -1) end, { t }, 'int64', { { 1, 2, 4 }, { 2, 4, 3 } })
  end)

  it('argmax and argmin over all axes give a position in the flattened tensor', function()
    -- T3.argmax() + 1, T3.argmin() + 1 (the first of tied maxima)
    both(function(x) return tgl.argmax(x) end, { arr(T3) }, 'int64', 4, {})
    both(function(x) return tgl.argmin(x) end, { arr(T3) }, 'int64', 1, {})
  end)

  it('argmax picks the first of ties and keeps dims on request', function()
    local m = arr({ { 3, 1, 3 }, { 0, 5, 5 } }, 'int32')
    both(function(x) return tgl.argmax(x, 2) end, { m }, 'int64', { 1, 2 })
    both(function(x) return tgl.argmax(x, 2, { keepdims = true }) end, { m }, 'int64', { { 1 }, { 2 } })
    both(function(x) return tgl.argmin(x, 1, { keepdims = true }) end, { m }, 'int64', { { 2, 1, 1 } })
  end)
end)

-- ===========================================================================
describe('linear algebra', function()
  it('multiplies matrix by matrix, matrix by vector, vector by matrix, vector by vector', function()
    -- A @ M34
    both(function(a, b) return tgl.dot(a, b) end, { arr(A), arr(M34) }, 'float32',
         { { -5.625, -1.1875, 3.625, 4.875 }, { -4.125, 2.25, 0.75, 10.3125 } })
    -- A @ v3
    both(function(a, b) return tgl.dot(a, b) end, { arr(A), arr(v3) }, 'float32', { 6.125, 3.375 })
    -- v3 @ M34
    both(function(a, b) return a:dot(b) end, { arr(v3), arr(M34) }, 'float32', { -6, -1.375, 3.75, 4.625 })
    -- v3 @ v3 is 0-d
    both(function(a, b) return tgl.dot(a, b) end, { arr(v3), arr(v3) }, 'float32', 6.5, {})
    both(function(a, b) return tgl.dot(a, b) end, { arr(A, 'float64'), arr(M34, 'float64') }, 'float64',
         { { -5.625, -1.1875, 3.625, 4.875 }, { -4.125, 2.25, 0.75, 10.3125 } })
  end)

  it('multiplies transposed operands (strided views)', function()
    -- A.T @ A
    both(function(a) return tgl.dot(a:T(), a) end, { arr(A) }, 'float32',
         { { 0.8125, -1.75, -1.25 }, { -1.75, 3.8125, 2 }, { -1.25, 2, 13 } })
    -- M34.T @ v3
    both(function(m, v) return tgl.dot(m:T(), v) end, { arr(M34), arr(v3) }, 'float32', { -6, -1.375, 3.75, 4.625 })
  end)

  it('keeps integer products integer', function()
    both(function(a, b) return tgl.dot(a, b) end,
         { arr({ { 1, 2 }, { 3, 4 } }, 'int32'), arr({ { 5 }, { -6 } }, 'int32') }, 'int32', { { -7 }, { -9 } })
    both(function(a, b) return tgl.dot(a, b) end, { arr({ 1, 2, 3 }, 'int64'), arr({ 4, 5, 6 }, 'int64') },
         'int64', 32, {})
  end)

  it('handles size-0 and size-1 dimensions', function()
    -- a (2,0)·(0,3) product is all zeros
    both(function(a, b) return tgl.dot(a, b) end, { tgl.zeros(2, 0), tgl.zeros(0, 3) }, 'float32',
         { { 0, 0, 0 }, { 0, 0, 0 } })
    both(function(a, b) return tgl.dot(a, b) end, { tgl.zeros(0, 3), arr(M34) }, 'float32', {}, { 0, 4 })
    both(function(a, b) return tgl.dot(a, b) end, { arr({ { 2 } }), arr({ { 1, -1, 3 } }) }, 'float32',
         { { 2, -2, 6 } })
  end)

  it('batched_dot multiplies stacks of matrices and rows of vectors', function()
    -- BA = T3[:, :, :3] * 0.5 ; BB = T3[:, 1:, :].transpose(0, 2, 1)[:, :3, :] ; np.matmul(BA, BB)
    local BA = { { { -1.25, 0.5, -0.5 }, { 0.25, -0.75, 1 }, { -1, 0.75, -0.25 } },
                 { { 0.5, -0.5, 1.25 }, { -0.75, 1, 0 }, { 0.75, -0.25, -1.25 } } }
    local BB = { { { 0.5, -2 }, { -1.5, 1.5 }, { 2, -0.5 } }, { { -1.5, 1.5 }, { 2, -0.5 }, { 0, -2.5 } } }
    both(function(a, b) return tgl.batched_dot(a, b) end, { arr(BA), arr(BB) }, 'float32',
         { { { -2.375, 3.5 }, { 3.25, -2.125 }, { -2.125, 3.25 } },
           { { -1.75, -2.125 }, { 3.125, -1.625 }, { -1.625, 4.375 } } })
    -- (A * B).sum(1)
    both(function(a, b) return tgl.batched_dot(a, b) end, { arr(A), arr(B) }, 'float32', { -1.625, 1.125 })
  end)

  it('outer makes the outer product of two vectors', function()
    -- np.outer(v3, Cv)
    both(function(a, b) return tgl.outer(a, b) end, { arr(v3), arr(Cv) }, 'float32',
         { { 0.25, -2 }, { -0.75, 6 }, { 1, -8 } })
    both(function(a, b) return tgl.outer(a, b) end, { arr({ 1, 2 }, 'int32'), arr({ 3 }, 'int32') }, 'int32',
         { { 3 }, { 6 } })
  end)
end)

-- ===========================================================================
describe('shape operations', function()
  -- T3 with its axes reversed, by hand: out[k][j][i] = T3[i][j][k]
  local T3_T = {}
  for k = 1, 4 do
    T3_T[k] = {}
    for j = 1, 3 do
      T3_T[k][j] = {}
      for i = 1, 2 do T3_T[k][j][i] = T3[i][j][k] end
    end
  end

  it('T transposes a matrix, reverses a 3-d tensor and leaves a vector', function()
    both(function(a) return a:T() end, { arr(A) }, 'float32', { { 0.5, -0.75 }, { -1.25, 1.5 }, { 2, 3 } })
    both(function(a) return tgl.transpose(a) end, { arr(T3) }, 'float32', T3_T)
    both(function(a) return tgl.transpose(a) end, { arr(v3) }, 'float32', v3)
    both(function(a) return tgl.transpose(a) end, { tgl.zeros(0, 3) }, 'float32', {}, { 3, 0 })
  end)

  it('dimshuffle permutes axes and inserts broadcastable ones with "x"', function()
    -- T3.transpose(2, 0, 1)[:, None]
    both(function(a) return tgl.dimshuffle(a, { 3, 'x', 1, 2 }) end, { arr(T3) }, 'float32',
         { { { { -2.5, 0.5, -2 }, { 1, -1.5, 1.5 } } }, { { { 1, -1.5, 1.5 }, { -1, 2, -0.5 } } },
           { { { -1, 2, -0.5 }, { 2.5, 0, -2.5 } } }, { { { 2.5, 0, -2.5 }, { 0.5, -2, 1 } } } })
    both(function(a) return a:dimshuffle({ 'x', 1, 'x' }) end, { arr({ 1, 2 }) }, 'float32', { { { 1 }, { 2 } } })
    both(function(a) return tgl.dimshuffle(a, { -1, 1 }) end, { arr(A) }, 'float32',
         { { 0.5, -0.75 }, { -1.25, 1.5 }, { 2, 3 } })
    local x = tgl.dimshuffle(tgl.vector(), { 'x', 1 })
    assert.same({ true, false }, x.broadcastable)
  end)

  it('dimshuffle drops broadcastable (length-1) axes', function()
    both(function(r) return tgl.dimshuffle(r, { 2 }) end, { arr(R) }, 'float32', { 1, -2, 0.25 })
    local r = tgl.row('r')
    assert.equals(1, tgl.dimshuffle(r, { 2 }).ndim)
  end)

  it('reshape takes sizes as arguments or a table, with one -1 inferred', function()
    local flat6 = { 0.5, -1.25, 2, -0.75, 1.5, 3 }
    both(function(a) return a:reshape(3, 2) end, { arr(A) }, 'float32', { { 0.5, -1.25 }, { 2, -0.75 }, { 1.5, 3 } })
    both(function(a) return a:reshape({ 6 }) end, { arr(A) }, 'float32', flat6)
    both(function(a) return tgl.reshape(a, -1) end, { arr(A) }, 'float32', flat6)
    both(function(a) return a:reshape(-1, 1, 2) end, { arr(A) }, 'float32',
         { { { 0.5, -1.25 } }, { { 2, -0.75 } }, { { 1.5, 3 } } })
    both(function(a) return tgl.reshape(a, { 2, 3, 4 }) end, { arr(flat(T3)) }, 'float32', T3)
    both(function(a) return a:reshape(-1, 3) end, { tgl.zeros(0, 3) }, 'float32', {}, { 0, 3 })
    both(function(a) return a:reshape({}) end, { arr({ 7 }) }, 'float32', 7, {})
  end)

  it('reshape of a transposed (non-contiguous) tensor reads in C order', function()
    both(function(a) return a:T():reshape(6) end, { arr({ { 1, 2, 3 }, { 4, 5, 6 } }) }, 'float32', { 1, 4, 2, 5, 3, 6 })
  end)

  it('reshape takes a symbolic shape vector and its length', function()
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = x:reshape(x:shape()[{ { -1, 1, -1 } }], 2) }
    expect(f(arr(A)), 'float32', { { 0.5, -1.25 }, { 2, -0.75 }, { 1.5, 3 } })
  end)

  it('flatten keeps the first ndim-1 axes and merges the rest', function()
    both(function(a) return tgl.flatten(a) end, { arr(A) }, 'float32', { 0.5, -1.25, 2, -0.75, 1.5, 3 })
    -- T3.reshape(2, 12)
    both(function(a) return tgl.flatten(a, 2) end, { arr(T3) }, 'float32',
         { { -2.5, 1, -1, 2.5, 0.5, -1.5, 2, 0, -2, 1.5, -0.5, -2.5 },
           { 1, -1, 2.5, 0.5, -1.5, 2, 0, -2, 1.5, -0.5, -2.5, 1 } })
    both(function(a) return a:flatten(3) end, { arr(T3) }, 'float32', T3)
    both(function(a) return tgl.flatten(a:T()) end, { arr({ { 1, 2, 3 }, { 4, 5, 6 } }) }, 'float32', { 1, 4, 2, 5, 3, 6 })
    both(function(a) return tgl.flatten(a) end, { tgl.zeros(0, 3) }, 'float32', {}, { 0 })
  end)

  it('concatenate joins along an axis, negative axes too', function()
    both(function(a, r) return tgl.concatenate({ a, r }) end, { arr(A), arr({ { 1, -2, 0.25 } }) }, 'float32',
         { { 0.5, -1.25, 2 }, { -0.75, 1.5, 3 }, { 1, -2, 0.25 } })
    both(function(a, b) return tgl.concatenate({ a, b, a }, 2) end, { arr({ { 1 }, { 2 } }), arr({ { 3, 4 }, { 5, 6 } }) },
         'float32', { { 1, 3, 4, 1 }, { 2, 5, 6, 2 } })
    both(function(a, b) return tgl.concatenate({ a, b }, -1) end, { arr({ 1, 2 }), arr({ 3 }) }, 'float32', { 1, 2, 3 })
    both(function(a, b) return tgl.concatenate({ a, b }, 1) end, { tgl.zeros(0, 2), arr({ { 7, 8 } }) }, 'float32',
         { { 7, 8 } })
    both(function(a, b) return tgl.concatenate({ a, b }) end, { arr({ 1, 2 }, 'int32'), arr({ 3 }, 'int32') },
         'int32', { 1, 2, 3 })
  end)

  it('stack joins along a new axis', function()
    both(function(a, b) return tgl.stack({ a, b }) end, { arr({ 1, 2 }), arr({ 3, 4 }) }, 'float32', { { 1, 2 }, { 3, 4 } })
    both(function(a, b) return tgl.stack({ a, b }, 2) end, { arr({ 1, 2 }), arr({ 3, 4 }) }, 'float32', { { 1, 3 }, { 2, 4 } })
    both(function(a, b) return tgl.stack({ a, b, a }, -1) end, { arr({ 1, 2 }), arr({ 3, 4 }) }, 'float32',
         { { 1, 3, 1 }, { 2, 4, 2 } })
    both(function(a, b) return tgl.stack({ a, b }) end, { arr(2), arr(5) }, 'float32', { 2, 5 })
    both(function(a, b) return tgl.stack({ a, b }, 2) end, { arr(A), arr(B) }, 'float32',
         { { { 0.5, -1.25, 2 }, { 2, 0.5, -1 } }, { { -0.75, 1.5, 3 }, { 4, -0.25, 1.5 } } })
  end)

  it('shape is a symbolic int64 vector and size(d) an int64 scalar; arrays answer at once', function()
    local t = tgl.tensor3('t')
    local f = tgl.compile { inputs = { t }, outputs = { t:shape(), t:size(2), t:size(-1), tgl.shape(t), tgl.size(t, 1) } }
    local shp, s2, slast, shp2, s1 = f(tgl.zeros(2, 0, 4))
    expect(shp, 'int64', { 2, 0, 4 })
    expect(s2, 'int64', 0, {})
    expect(slast, 'int64', 4, {})
    expect(shp2, 'int64', { 2, 0, 4 })
    expect(s1, 'int64', 2, {})
    assert.same({ 2, 3 }, tgl.shape(arr(A)))
    assert.equals(3, tgl.size(arr(A), 2))
    local s = tgl.compile { inputs = { t }, outputs = t:shape() }(arr({ { { 1 } } }))
    expect(s, 'int64', { 1, 1, 1 })
  end)
end)

-- ===========================================================================
describe('indexing', function()
  -- G = np.arange(1, 13).reshape(3, 4)
  local G = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }

  local function idx(spec) return function(x) return x[spec] end end

  it('x[i] takes a row; negative indices count from the end', function()
    both(idx(2), { arr(G) }, 'float32', { 5, 6, 7, 8 })
    both(idx(-1), { arr(G) }, 'float32', { 9, 10, 11, 12 })
    both(idx({ -3 }), { arr(G, 'int64') }, 'int64', { 1, 2, 3, 4 })
  end)

  it('x[{i, j}] takes an element (a number eagerly, a 0-d tensor compiled)', function()
    assert.equals(7, arr(G)[{ 2, 3 }])
    assert.equals(12, arr(G)[{ -1, -1 }])
    local x = tgl.matrix('x')
    expect(tgl.compile { inputs = { x }, outputs = x[{ 2, 3 }] }(arr(G)), 'float32', 7, {})
    expect(tgl.compile { inputs = { x }, outputs = x[{ -1, -2 }] }(arr(G)), 'float32', 11, {})
  end)

  it('slices {from, to} include both ends; {} takes a whole axis', function()
    both(idx({ {}, 2 }), { arr(G) }, 'float32', { 2, 6, 10 })
    both(idx({ { 1, 2 }, { 2, 4 } }), { arr(G) }, 'float32', { { 2, 3, 4 }, { 6, 7, 8 } })
    both(idx({ 2, { 1, 3 } }), { arr(G) }, 'float32', { 5, 6, 7 })
    both(idx({ { -2, -1 } }), { arr(G) }, 'float32', { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    both(idx({ { 2 } }), { arr(G) }, 'float32', { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    both(idx({ {}, { 3, 3 } }), { arr(G) }, 'float32', { { 3 }, { 7 }, { 11 } })
  end)

  it('slices clip to the axis and may be empty', function()
    both(idx({ { 1, 10 } }), { arr(G) }, 'float32', G)
    both(idx({ { 3, 2 } }), { arr(G) }, 'float32', {}, { 0, 4 })
    both(idx({ {}, { 5, 9 } }), { arr(G) }, 'float32', { {}, {}, {} }, { 3, 0 })
  end)

  it('slices take steps, negative ones walking backwards', function()
    both(idx({ {}, { 1, -1, 2 } }), { arr(G) }, 'float32', { { 1, 3 }, { 5, 7 }, { 9, 11 } })
    both(idx({ { -1, 1, -1 } }), { arr(G) }, 'float32', { { 9, 10, 11, 12 }, { 5, 6, 7, 8 }, { 1, 2, 3, 4 } })
    both(idx({ 1, { 4, 1, -2 } }), { arr(G) }, 'float32', { 4, 2 })
    both(idx({ { nil, nil, 2 }, { nil, nil, -3 } }), { arr(G) }, 'float32', { { 4, 1 }, { 12, 9 } })
  end)

  it('indexes a 3-d tensor on leading axes', function()
    both(idx({ 2, { 2, 3 } }), { arr(T3) }, 'float32', { { -1.5, 2, 0, -2 }, { 1.5, -0.5, -2.5, 1 } })
    both(idx({ {}, -1, 2 }), { arr(T3) }, 'float32', { 1.5, -0.5 })
  end)

  it('takes symbolic integer scalars as indices and slice bounds', function()
    local x, i, j = tgl.matrix('x'), tgl.lscalar('i'), tgl.iscalar('j')
    local f = tgl.compile { inputs = { x, i, j },
                            outputs = { x[i], x[{ { i, j } }], x[{ {}, { i, j } }], x[{ { i } }], x[{ { nil, j } }],
                                        x[{ i, j }] } }
    local r = { f(arr(G), 2, 3) }
    expect(r[1], 'float32', { 5, 6, 7, 8 })
    expect(r[2], 'float32', { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    expect(r[3], 'float32', { { 2, 3 }, { 6, 7 }, { 10, 11 } })
    expect(r[4], 'float32', { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    expect(r[5], 'float32', G)
    expect(r[6], 'float32', 7, {})
  end)

  it('takes a symbolic step, positive or negative', function()
    local x, s = tgl.matrix('x'), tgl.lscalar('s')
    local f = tgl.compile { inputs = { x, s }, outputs = { x[{ { nil, nil, s } }], x[{ {}, { nil, nil, s } }] } }
    local r1, r2 = f(arr(G), -1)
    expect(r1, 'float32', { { 9, 10, 11, 12 }, { 5, 6, 7, 8 }, { 1, 2, 3, 4 } })
    expect(r2, 'float32', { { 4, 3, 2, 1 }, { 8, 7, 6, 5 }, { 12, 11, 10, 9 } })
    r1, r2 = f(arr(G), 2)
    expect(r1, 'float32', { { 1, 2, 3, 4 }, { 9, 10, 11, 12 } })
    expect(r2, 'float32', { { 1, 3 }, { 5, 7 }, { 9, 11 } })
  end)

  it('takes slice bounds computed from the shape', function()
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = x[{ { 2, x:size(1) }, { 1, x:size(2) - 1 } }] }
    expect(f(arr(G)), 'float32', { { 5, 6, 7 }, { 9, 10, 11 } })
  end)

  it('picks p[{arange(n), y}] with integer (advanced) indices', function()
    local p = { { 0.125, 0.25, 0.625 }, { 0.375, 0.375, 0.25 } }
    both(function(a, y) return a[{ tgl.arange(2), y }] end, { arr(p), arr({ 3, 1 }, 'int32') }, 'float32', { 0.625, 0.375 })
    local pm, y = tgl.matrix('p'), tgl.lvector('y')
    local f = tgl.compile { inputs = { pm, y }, outputs = pm[{ tgl.arange(pm:size(1)), y }] }
    expect(f(arr(p), arr({ 2, -1 }, 'int64')), 'float32', { 0.25, 0.25 })
  end)

  it('takes whole rows or columns by integer vectors, with repeats and negatives', function()
    both(function(a, i) return a[{ i }] end, { arr(G), arr({ 3, 1, 3 }, 'int64') }, 'float32',
         { { 9, 10, 11, 12 }, { 1, 2, 3, 4 }, { 9, 10, 11, 12 } })
    both(function(a, i) return a[{ i }] end, { arr(G), arr({ -1 }, 'int32') }, 'float32', { { 9, 10, 11, 12 } })
    both(function(a, i) return a[{ {}, i }] end, { arr(G), arr({ 4, 1 }, 'int64') }, 'float32',
         { { 4, 1 }, { 8, 5 }, { 12, 9 } })
    both(function(a, i) return a[{ i }] end, { arr(G), arr({}, 'int64') }, 'float32', {}, { 0, 4 })
  end)

  it('an integer matrix as index gives its shape to the result', function()
    both(function(a, i) return a[{ i }] end, { arr({ 10, 20, 30 }), arr({ { 1, 2 }, { 3, 3 } }, 'int64') }, 'float32',
         { { 10, 20 }, { 30, 30 } })
    both(function(a, i) return a[{ i }] end, { arr(G), arr({ { 1 }, { 3 } }, 'int64') }, 'float32',
         { { { 1, 2, 3, 4 } }, { { 9, 10, 11, 12 } } })
  end)

  it('set_subtensor and inc_subtensor build an updated copy, leaving the input as it was', function()
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = {
      tgl.set_subtensor(x[{ 2, { 2, 3 } }], tgl.constant({ 100, 200 })),
      tgl.inc_subtensor(x[{ {}, 1 }], 10),
      tgl.set_subtensor(x[{ { -1, 1, -2 } }], tgl.constant({ { 0 }, { 0 } })),
      tgl.inc_subtensor(x[{ {}, { -2, -1 } }], tgl.constant({ { 10, 20 } })),
    } }
    local a = arr(G)
    local r1, r2, r3, r4 = f(a)
    expect(r1, 'float32', { { 1, 2, 3, 4 }, { 5, 100, 200, 8 }, { 9, 10, 11, 12 } })
    expect(r2, 'float32', { { 11, 2, 3, 4 }, { 15, 6, 7, 8 }, { 19, 10, 11, 12 } })
    expect(r3, 'float32', { { 0, 0, 0, 0 }, { 5, 6, 7, 8 }, { 0, 0, 0, 0 } })
    expect(r4, 'float32', { { 1, 2, 13, 24 }, { 5, 6, 17, 28 }, { 9, 10, 21, 32 } })
    expect(a, 'float32', G)
  end)

  it('set_subtensor and inc_subtensor take symbolic values and bounds', function()
    local x, v, i = tgl.matrix('x'), tgl.vector('v'), tgl.lscalar('i')
    local f = tgl.compile { inputs = { x, v, i }, outputs = { tgl.set_subtensor(x[i], v), tgl.inc_subtensor(x[{ {}, i }], v:reshape(3) * 2) } }
    local r1, r2 = f(arr({ { 1, 2, 3 }, { 4, 5, 6 }, { 7, 8, 9 } }), arr({ -1, -2, -3 }), 2)
    expect(r1, 'float32', { { 1, 2, 3 }, { -1, -2, -3 }, { 7, 8, 9 } })
    expect(r2, 'float32', { { 1, 0, 3 }, { 4, 1, 6 }, { 7, 2, 9 } })
  end)

  it('set_subtensor with advanced indices writes one element per row', function()
    local p, y = tgl.matrix('p'), tgl.lvector('y')
    local f = tgl.compile { inputs = { p, y }, outputs = tgl.set_subtensor(p[{ tgl.arange(p:size(1)), y }], 1) }
    expect(f(tgl.zeros(2, 3), arr({ 3, 1 }, 'int64')), 'float32', { { 0, 0, 1 }, { 1, 0, 0 } })
  end)

  it('inc_subtensor with repeated advanced indices accumulates every increment', function()
    local v, i = tgl.vector('v'), tgl.lvector('i')
    local f = tgl.compile { inputs = { v, i }, outputs = {
      tgl.inc_subtensor(v[{ i }], 1),
      tgl.inc_subtensor(v[{ i }], tgl.constant({ 1, 2, 3, 4 })),
      tgl.set_subtensor(v[{ i }], 5),
    } }
    local r1, r2, r3 = f(tgl.zeros(4), arr({ 1, 3, 1, 1 }, 'int64'))
    expect(r1, 'float32', { 3, 0, 1, 0 })
    expect(r2, 'float32', { 8, 0, 2, 0 })
    expect(r3, 'float32', { 5, 0, 5, 0 })
    local m, r = tgl.matrix('m'), tgl.lvector('r')
    local g = tgl.compile { inputs = { m, r }, outputs = tgl.inc_subtensor(m[{ r }], tgl.constant({ { 1, 2 } })) }
    expect(g(tgl.ones(3, 2), arr({ 2, 2, -1 }, 'int64')), 'float32', { { 1, 1 }, { 3, 5 }, { 2, 3 } })
  end)
end)

-- ===========================================================================
describe('nnet', function()
  it('softmax normalizes along the last axis by default, or the one given', function()
    -- softmax(A, axis=-1): e = np.exp(A - A.max(-1, keepdims=True)); e / e.sum(-1, keepdims=True)
    both(function(a) return tgl.softmax(a) end, { arr(A) }, 'float32',
         { { 0.176820182, 0.0307267403, 0.792453078 }, { 0.0188647859, 0.178984105, 0.802151109 } })
    -- softmax(A, axis=0)
    both(function(a) return a:softmax(1) end, { arr(A) }, 'float32',
         { { 0.777299861, 0.0600866502, 0.268941421 }, { 0.222700139, 0.93991335, 0.731058579 } })
    both(function(a) return tgl.softmax(a) end, { arr({ 2 }) }, 'float32', { 1 })
    both(function(a) return tgl.softmax(a) end, { tgl.zeros(0, 3) }, 'float32', {}, { 0, 3 })
  end)

  it('softmax and log_softmax work along a middle axis of a 3-d tensor', function()
    -- softmax(T3, axis=1)
    both(function(t) return tgl.softmax(t, 2) end, { arr(T3) }, 'float32',
         { { { 0.0439864803, 0.366192216, 0.0439864803, 0.918422967 }, { 0.883492074, 0.0300588876, 0.883492074, 0.075388748 },
             { 0.0725214457, 0.603748896, 0.0725214457, 0.00618828527 } },
           { { 0.366192216, 0.0439864803, 0.918422967, 0.366192216 }, { 0.0300588876, 0.883492074, 0.075388748, 0.0300588876 },
             { 0.603748896, 0.0725214457, 0.00618828527, 0.603748896 } } })
    -- log_softmax(T3, axis=1)
    both(function(t) return tgl.log_softmax(t, 2) end, { arr(T3) }, 'float32',
         { { { -3.12387296, -1.0045969, -3.12387296, -0.0850972464 }, { -0.123872958, -3.5045969, -0.123872958, -2.58509725 },
             { -2.62387296, -0.504596902, -2.62387296, -5.08509725 } },
           { { -1.0045969, -3.12387296, -0.0850972464, -1.0045969 }, { -3.5045969, -0.123872958, -2.58509725, -3.5045969 },
             { -0.504596902, -2.62387296, -5.08509725, -0.504596902 } } })
  end)

  it('log_softmax is log(softmax) and stays finite for large inputs', function()
    -- x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
    both(function(a) return tgl.log_softmax(a) end, { arr(A) }, 'float32',
         { { -1.73262198, -3.48262198, -0.232621983 }, { -3.97045827, -1.72045827, -0.220458274 } })
    both(function(a) return tgl.log_softmax(a) end, { arr({ 1000, 1001, 990 }) }, 'float32',
         { -1.3132739, -0.313273897, -11.3132739 })
    both(function(a) return tgl.softmax(a) end, { arr({ 1000, 1001 }) }, 'float32', { 0.268941421, 0.731058579 })
    both(function(a) return a:log_softmax() end, { arr({ -1000, 0 }, 'float64') }, 'float64', { -1000, 0 })
  end)

  it('softmax of integers is floatX', function()
    both(function(a) return tgl.softmax(a) end, { arr({ 0, 0 }, 'int32') }, 'float32', { 0.5, 0.5 })
  end)

  it('categorical_crossentropy takes 1-based labels or one-hot/probability targets', function()
    local S = tgl.softmax(arr(A))
    -- -np.log(softmax(A)[[0, 1], [2, 0]])
    both(function(p, y) return tgl.categorical_crossentropy(p, y) end, { S, arr({ 3, 1 }, 'int32') }, 'float32',
         { 0.232621983, 3.97045827 })
    both(function(p, y) return tgl.categorical_crossentropy(p, y) end, { S, arr({ 3, 1 }, 'int64') }, 'float32',
         { 0.232621983, 3.97045827 })
    -- -(Tg * np.log(softmax(A))).sum(-1), Tg = [[0.25, 0.25, 0.5], [1, 0, 0]]
    both(function(p, t) return tgl.categorical_crossentropy(p, t) end, { S, arr({ { 0.25, 0.25, 0.5 }, { 1, 0, 0 } }) },
         'float32', { 1.42012198, 3.97045827 })
    -- one_hot targets agree with labels
    both(function(p, y) return tgl.categorical_crossentropy(p, tgl.one_hot(y, 3)) end, { S, arr({ 3, 1 }, 'int32') },
         'float32', { 0.232621983, 3.97045827 })
  end)

  it('binary_crossentropy is -(t log p + (1 - t) log(1 - p))', function()
    -- Pb = [0.25, 0.5, 0.875, 0.125], Tb = [1, 0, 1, 0.25]; -(Tb*np.log(Pb) + (1-Tb)*np.log(1-Pb))
    both(function(p, t) return tgl.binary_crossentropy(p, t) end, { arr({ 0.25, 0.5, 0.875, 0.125 }), arr({ 1, 0, 1, 0.25 }) },
         'float32', { 1.38629436, 0.693147181, 0.133531393, 0.62000893 })
    both(function(p) return tgl.binary_crossentropy(tgl.sigmoid(p), 1) end, { arr({ 0 }, 'float64') }, 'float64',
         { 0.693147180559945 })
  end)

  it('one_hot encodes 1-based labels as floatX rows, or in the dtype given', function()
    both(function(y) return tgl.one_hot(y, 3) end, { arr({ 1, 3, 2 }, 'int32') }, 'float32',
         { { 1, 0, 0 }, { 0, 0, 1 }, { 0, 1, 0 } })
    both(function(y) return tgl.one_hot(y, 4, 'int64') end, { arr({ 4 }, 'int64') }, 'int64', { { 0, 0, 0, 1 } })
    both(function(y) return tgl.one_hot(y, 2) end, { arr({ { 1, 2 }, { 2, 2 } }, 'uint8') }, 'float32',
         { { { 1, 0 }, { 0, 1 } }, { { 0, 1 }, { 0, 1 } } })
    both(function(y) return tgl.one_hot(y, 3, 'bool') end, { arr({}, 'int32') }, 'bool', {}, { 0, 3 })
  end)
end)

-- ===========================================================================
describe('compiled functions and eager calls agree', function()
  it('on strided (transposed and stepped) input views', function()
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = { x * 2 + 1, tgl.sum(x, 2), tgl.dot(x, x:T()) } }
    local a = arr({ { 1, 2, 3 }, { 4, 5, 6 } })
    local r1, r2, r3 = f(a:T())
    expect(r1, 'float32', { { 3, 9 }, { 5, 11 }, { 7, 13 } })
    expect(r2, 'float32', { 5, 7, 9 })
    -- A.T @ A for A = [[1, 2, 3], [4, 5, 6]]
    expect(r3, 'float32', { { 17, 22, 27 }, { 22, 29, 36 }, { 27, 36, 45 } })
    r1 = f(a[{ {}, { 1, -1, 2 } }])
    expect(r1, 'float32', { { 3, 7 }, { 9, 13 } })
  end)

  it('when one compiled function is called with changing shapes', function()
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = { tgl.tanh(x) * 2 + 1, tgl.sum(x, 1), tgl.dot(x, x:T()), tgl.softmax(x) } }
    tgl.manual_seed(7)
    for _, shp in ipairs({ { 2, 3 }, { 4, 5 }, { 1, 1 }, { 0, 2 }, { 3, 3 }, { 2, 3 } }) do
      local a = tgl.randn(shp[1], shp[2])
      local got = { f(a) }
      local want = { tgl.tanh(a) * 2 + 1, tgl.sum(a, 1), tgl.dot(a, a:T()), tgl.softmax(a) }
      for k = 1, #want do
        expect(got[k], 'float32', want[k]:totable(), want[k]:shape(), ('output %d for %dx%d'):format(k, shp[1], shp[2]))
      end
    end
  end)

  it('in every mode and linker', function()
    local x, y = tgl.matrix('x'), tgl.matrix('y')
    local out = tgl.tanh(x * 2 + y) * tgl.exp(-x) + tgl.dot(tgl.dot(x, y:T()), x) - tgl.sum(x, 2, { keepdims = true })
    local a, b = arr(A), arr(B)
    local want = tgl.tanh(a * 2 + b) * tgl.exp(-a) + tgl.dot(tgl.dot(a, b:T()), a) - tgl.sum(a, 2, { keepdims = true })
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
      for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
        local f = tgl.compile { inputs = { x, y }, outputs = out, mode = mode, linker = linker }
        expect(f(a, b), 'float32', want:totable(), { 2, 3 }, mode .. '/' .. linker)
      end
    end
  end)

  it('leaving input arrays and shared values unchanged, and earlier results intact', function()
    local x, y = tgl.matrix('x'), tgl.matrix('y')
    local W = tgl.shared(arr(M34):reshape(4, 3), 'W')
    local outs = { x + 1, tgl.dot(x, y:T()) + x, tgl.set_subtensor(x[1], 0), tgl.inc_subtensor(x[{ {}, 1 }], 5),
                   tgl.inc_subtensor(x[{ tgl.array({ 1, 1 }, 'int64') }], 1), tgl.softmax(x), x:T() + 1,
                   tgl.dot(W, x) + 1, tgl.set_subtensor(W[{ 1, {} }], 7) * 1, tgl.switch(tgl.gt(x, 0), x, y) }
    local f = tgl.compile { inputs = { x, y }, outputs = outs }
    local a, b = arr({ { 1, -2, 3 }, { -4, 5, -6 }, { 0.5, 0.25, -0.125 } }), arr(M34):reshape(4, 3)[{ { 1, 3 } }]
    local a0, b0, w0 = a:totable(), b:totable(), W:get_value():totable()
    local first = { f(a, b) }
    local keep = {}
    for k, r in ipairs(first) do keep[k] = r:totable() end
    local second = { f(a * -1, b * 2) }
    assert.same(a0, a:totable())
    assert.same(b0, b:totable())
    assert.same(w0, W:get_value():totable())
    for k, r in ipairs(first) do assert.same(keep[k], r:totable(), 'output ' .. k .. ' was overwritten') end
    expect(second[1], 'float32', { { 0, 3, -2 }, { 5, -4, 7 }, { 0.5, 0.75, 1.125 } })
  end)

  it('on a composite graph: a logistic-regression cost and its gradient', function()
    -- W = [[0.5, -1], [0.25, 0.75], [-0.5, 1]], b = [0.125, -0.25], X = A, y = [2, 1]
    -- cost = mean(-log(softmax(X @ W + b)[[0, 1], y - 1]))
    local Xv, Wv, bv = d(A), d({ { 0.5, -1 }, { 0.25, 0.75 }, { -0.5, 1 } }), d({ 0.125, -0.25 })
    local y = arr({ 2, 1 }, 'int64')
    local X, W, b, ys = tgl.dmatrix('X'), tgl.dmatrix('W'), tgl.dvector('b'), tgl.lvector('y')
    local function cost_of(Xa, Wa, ba, ya)
      return tgl.mean(tgl.categorical_crossentropy(tgl.softmax(tgl.dot(Xa, Wa) + tgl.dimshuffle(ba, { 'x', 1 })), ya))
    end
    local eager = cost_of(Xv, Wv, bv, y)
    local c = cost_of(X, W, b, ys)
    local f = tgl.compile { inputs = { X, W, b, ys }, outputs = { c, tgl.grad(c, b) } }
    local cv, gb = f(Xv, Wv, bv, y)
    expect(eager, 'float64', 3.12720238324155, {})
    expect(cv, 'float64', 3.12720238324155, {})
    -- mean over rows of softmax(...) - one_hot(y)
    expect(gb, 'float64', { -0.387413619009028, 0.387413619009028 })
  end)
end)

-- ===========================================================================
describe('gradients (tgl.verify_grad in float64)', function()
  -- T3 made tie-free for max/min/prod: + 0.001 * (flat index), so no zeros either
  local T3u = {}
  do
    local k = 0
    for i = 1, 2 do
      T3u[i] = {}
      for j = 1, 3 do
        T3u[i][j] = {}
        for l = 1, 4 do
          k = k + 1
          T3u[i][j][l] = T3[i][j][l] + 0.001 * k
        end
      end
    end
  end
  local Y = { 3, 1 }           -- labels for 2-row probabilities
  local U = { { 0.25, 0.375, 0.875 }, { 0.625, 0.125, 0.5 } }  -- in (0, 1)

  -- {title, fn, points [, opts]}; points are tables (made float64) or arrays
  local CASES = {
    -- elementwise, away from kinks (A has no zeros, P is positive)
    { 'exp', function(x) return tgl.exp(x) end, { A } },
    { 'expm1', function(x) return tgl.expm1(x) end, { A } },
    { 'log', function(x) return tgl.log(x) end, { P } },
    { 'log1p', function(x) return tgl.log1p(x) end, { P } },
    { 'sqrt', function(x) return tgl.sqrt(x) end, { P } },
    { 'tanh', function(x) return tgl.tanh(x) end, { A } },
    { 'sigmoid', function(x) return tgl.sigmoid(x) end, { A } },
    { 'softplus', function(x) return tgl.softplus(x) end, { A } },
    { 'sin and cos', function(x) return tgl.sin(x) * tgl.cos(x * 2) end, { A } },
    { 'abs away from 0', function(x) return tgl.abs(x) end, { A } },
    { 'relu away from 0', function(x) return tgl.relu(x) end, { A } },
    { 'unary minus', function(x) return -x end, { A } },
    { 'sign (zero gradient) times x', function(x) return tgl.sign(x) * x end, { A } },
    { 'floor, ceil, round (zero gradient) away from their jumps', function(x)
        return (tgl.floor(x) + tgl.ceil(x) + tgl.round(x)) * x end, { { 0.3, 1.6, -2.2 } } },
    { 'cast to float32 and back', function(x) return tgl.cast(x, 'float32') * 2 end, { A }, { eps = 1e-2, tol = 1e-4 } },
    -- arithmetic with broadcasting
    { 'a matrix plus a broadcast row', function(x, r) return x + tgl.dimshuffle(r, { 'x', 1 }) end, { A, v3 } },
    { 'a matrix minus a broadcast column', function(x, c) return x - tgl.dimshuffle(c, { 1, 'x' }) end, { A, Cv } },
    { 'a matrix times a row and a column', function(x, r, c)
        return x * tgl.dimshuffle(r, { 'x', 1 }) * tgl.dimshuffle(c, { 1, 'x' }) end, { A, v3, Cv } },
    { 'division', function(x, y) return x / y end, { A, B } },
    { 'a number divided by a tensor', function(x) return 3 / x end, { B } },
    { 'pow with positive base, both arguments', function(p, a) return p ^ a end, { P, A } },
    { 'pow with a broadcast exponent', function(p, r) return tgl.pow(p, tgl.dimshuffle(r, { 'x', 1 })) end, { P, v3 } },
    { 'x ^ 2.5 and 2 ^ x', function(p) return p ^ 2.5 + 2 ^ p end, { P } },
    { 'maximum and minimum without ties', function(a, b) return tgl.maximum(a, b) + tgl.minimum(a, b) * 3 end, { A, B } },
    { 'maximum with a number', function(a) return tgl.maximum(a, 1) end, { A } },
    { 'clip with number bounds', function(a) return tgl.clip(a, -1, 1.75) end, { A } },
    { 'clip with tensor bounds', function(a, lo, hi) return tgl.clip(a, lo, hi) end,
      { { -2, 0.5, 2 }, { -1, -1, -1 }, { 1, 1, 1 } } },
    { 'switch', function(a, p) return tgl.switch(tgl.gt(a, 0), a * p, p) end, { A, P } },
    { 'switch with a broadcast condition', function(a, c)
        return tgl.switch(tgl.dimshuffle(tgl.gt(c, 0), { 1, 'x' }), a, a * c:dimshuffle({ 1, 'x' })) end, { A, Cv } },
    { 'ifelse, branch taken', function(a, p) return tgl.ifelse(tgl.gt(tgl.sum(a), 0), a * p, p) end, { A, P } },
    { 'ifelse, branch not taken', function(a, p) return tgl.ifelse(tgl.lt(tgl.sum(a), 0), a * p, p * 2) end, { A, P } },
    -- reductions
    { 'sum over all', function(t) return tgl.sum(t) end, { T3u } },
    { 'sum over one axis', function(t) return tgl.sum(t, 2) end, { T3u } },
    { 'sum over two axes, keepdims', function(t) return tgl.sum(t, { 1, 3 }, { keepdims = true }) end, { T3u } },
    { 'mean over two axes', function(t) return tgl.mean(t, { 2, 3 }) end, { T3u } },
    { 'mean over one axis, keepdims', function(t) return tgl.mean(t, -1, { keepdims = true }) end, { T3u } },
    { 'max over one axis', function(t) return tgl.max(t, 1) end, { T3u } },
    { 'max over all', function(t) return tgl.max(t) end, { T3u } },
    { 'max over two axes, keepdims', function(t) return tgl.max(t, { 1, 3 }, { keepdims = true }) end, { T3u } },
    { 'min over one axis, keepdims', function(t) return tgl.min(t, 2, { keepdims = true }) end, { T3u } },
    { 'min over two axes', function(t) return tgl.min(t, { 2, 3 }) end, { T3u } },
    { 'prod over one axis', function(t) return tgl.prod(t, 3) end, { T3u } },
    { 'prod over two axes, keepdims', function(t) return tgl.prod(t, { 1, 2 }, { keepdims = true }) end, { T3u } },
    { 'prod over all', function(a) return tgl.prod(a) end, { A } },
    { 'var over one axis', function(t) return tgl.var(t, 2) end, { T3u } },
    { 'var over two axes, keepdims, ddof=1', function(t) return tgl.var(t, { 1, 3 }, { keepdims = true, ddof = 1 }) end, { T3u } },
    { 'std over all', function(t) return tgl.std(t) end, { T3u } },
    { 'std over one axis, keepdims', function(t) return tgl.std(t, 1, { keepdims = true }) end, { T3u } },
    -- linear algebra
    { 'dot matrix·matrix', function(a, b) return tgl.dot(a, b) end, { A, M34 } },
    { 'dot matrix·vector', function(a, b) return tgl.dot(a, b) end, { A, v3 } },
    { 'dot vector·matrix', function(a, b) return a:dot(b) end, { v3, M34 } },
    { 'dot vector·vector', function(a, b) return tgl.dot(a, b) end, { v3, { 1, 0.5, -2 } } },
    { 'dot of transposed operands', function(a, b) return tgl.dot(a:T(), b) end, { A, B } },
    { 'batched_dot of 3-d stacks', function(a, b) return tgl.batched_dot(a, b) end,
      { T3u, { { { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }, { { -1, 0.5 }, { 2, 1 }, { 0.3, 0.2 }, { 0.1, 0 } } } } },
    { 'batched_dot of rows', function(a, b) return tgl.batched_dot(a, b) end, { A, P } },
    { 'outer', function(a, b) return tgl.outer(a, b) end, { v3, Cv } },
    -- shape
    { 'T', function(a) return a:T() * tgl.constant({ { 1 }, { 2 }, { 3 } }) end, { A } },
    { 'dimshuffle with "x"', function(t) return tgl.dimshuffle(t, { 3, 'x', 1, 2 }) end, { T3u } },
    { 'dimshuffle dropping a broadcastable axis', function(a)
        return tgl.dimshuffle(tgl.sum(a, 1, { keepdims = true }), { 2 }) * tgl.constant({ 1, 2, 3 }) end, { A } },
    { 'reshape with -1', function(a) return a:reshape(3, -1) * tgl.constant({ 1, 2 }) end, { A } },
    { 'reshape to a symbolic shape', function(a) return a:reshape(a:shape()[{ { -1, 1, -1 } }], 2) end, { A } },
    { 'flatten', function(t) return tgl.flatten(t, 2) end, { T3u } },
    { 'concatenate along axis 1', function(a, r) return tgl.concatenate({ a, r:dimshuffle({ 'x', 1 }), a }, 1) end, { A, v3 } },
    { 'concatenate along axis 2', function(a, b) return tgl.concatenate({ a, b }, 2) end, { A, P } },
    { 'stack', function(a, b) return tgl.stack({ a, b }, 2) end, { A, P } },
    -- indexing
    { 'x[i]', function(a) return a[2] end, { A } },
    { 'x[{i, j}]', function(a) return a[{ 2, -1 }] end, { A } },
    { 'a slice with a step', function(a) return a[{ {}, { 1, -1, 2 } }] end, { A } },
    { 'a slice with a negative step', function(t) return t[{ { -1, 1, -1 }, 2 }] end, { T3u } },
    { 'symbolic slice bounds', function(a) return a[{ { 2, a:size(1) }, { 1, a:size(2) - 1 } }] end, { M34 } },
    { 'a symbolic index', function(a) return a[a:size(1) - 1] end, { M34 } },
    { 'advanced p[{arange(n), y}]', function(a) return a[{ tgl.arange(2), tgl.array(Y, 'int64') }] end, { A } },
    { 'advanced indexing with repeated rows', function(a) return a[{ tgl.array({ 1, 1, 2 }, 'int64') }] end, { A } },
    { 'set_subtensor (x and the value)', function(a, b) return tgl.set_subtensor(a[{ {}, { 2, 3 } }], b) end,
      { A, { { 1, 2 }, { 3, 4 } } } },
    { 'inc_subtensor', function(a, v) return tgl.inc_subtensor(a[2], v) end, { A, v3 } },
    { 'inc_subtensor with repeated advanced indices', function(a, b)
        return tgl.inc_subtensor(a[{ tgl.array({ 1, 1 }, 'int64') }], b) end, { A, B } },
    { 'set_subtensor with advanced indices', function(a, v)
        return tgl.set_subtensor(a[{ tgl.array({ 2 }, 'int64') }], v:dimshuffle({ 'x', 1 })) end, { A, v3 } },
    { 'advanced indices on the second axis', function(a) return a[{ {}, tgl.array({ 3, 1, 3 }, 'int64') }] end, { A } },
    { 'an integer matrix as index', function(a) return a[{ tgl.array({ { 1, 2 }, { 2, 2 } }, 'int64') }] end, { A } },
    { 'inc_subtensor on repeated columns', function(a, b)
        return tgl.inc_subtensor(a[{ {}, tgl.array({ 3, 3 }, 'int64') }], b) end, { A, { { 1, 2 }, { 3, 4 } } } },
    { 'negative symbolic index and slice bounds', function(a)
        local i, j = tgl.constant(-2, 'int64'), tgl.constant(-1, 'int64')
        return tgl.concatenate({ a[{ {}, { i, j } }], a[j]:dimshuffle({ 1, 'x' })[{ { 1, 2 } }] }, 2) end, { A } },
    { 'set_subtensor at a negative symbolic index', function(a, v)
        return tgl.set_subtensor(a[tgl.constant(-1, 'int64')], v) end, { A, v3 } },
    { 'indices from argmax', function(a) return a[{ tgl.arange(2), tgl.argmax(a, 2) }] end, { A } },
    { 'a 0-d input broadcast against a matrix', function(a, s) return tgl.maximum(a, s) * s end, { A, tgl.array(0.75, 'float64') } },
    { 'stack along the last axis', function(a, b) return tgl.stack({ a, b }, -1) end, { A, B } },
    { 'nested ifelse', function(a)
        return tgl.ifelse(tgl.gt(tgl.max(a), 2.5), tgl.ifelse(tgl.lt(tgl.min(a), 0), a * a, a), -a) end, { A } },
    -- nnet
    { 'softmax along the last axis', function(a) return tgl.softmax(a) end, { A } },
    { 'softmax along axis 1', function(a) return tgl.softmax(a, 1) end, { A } },
    { 'softmax of a 3-d tensor', function(t) return tgl.softmax(t, 2) end, { T3u } },
    { 'log_softmax', function(a) return tgl.log_softmax(a) end, { A } },
    { 'log_softmax of a 3-d tensor', function(t) return tgl.log_softmax(t, 1) end, { T3u } },
    { 'categorical_crossentropy with labels', function(a)
        return tgl.categorical_crossentropy(tgl.softmax(a), tgl.array(Y, 'int64')) end, { A } },
    { 'categorical_crossentropy with probability targets', function(a, t)
        return tgl.categorical_crossentropy(tgl.softmax(a), t) end, { A, U } },
    { 'binary_crossentropy (predictions and targets)', function(p, t) return tgl.binary_crossentropy(p, t) end,
      { U, { { 1, 0, 1 }, { 0, 1, 0.5 } } } },
    { 'binary_crossentropy of a sigmoid', function(a) return tgl.binary_crossentropy(tgl.sigmoid(a), 1) end, { A } },
  }

  for _, case in ipairs(CASES) do
    local title, fn, pts, opts = case[1], case[2], case[3], case[4]
    it('matches finite differences through ' .. title, function()
      local arrays = {}
      for i, p in ipairs(pts) do arrays[i] = tgl.is_array(p) and p or d(p) end
      local err = tgl.verify_grad(fn, arrays, opts)
      assert.is_number(err)
      assert.is_true(err <= ((opts and opts.tol) or 1e-5), 'worst error ' .. tostring(err))
    end)
  end

  it('sums the gradient of a broadcast row over the broadcast axis', function()
    local W, r = tgl.dmatrix('W'), tgl.drow('r')
    local g = tgl.grad(tgl.sum(W * r), r)
    assert.same({ true, false }, g.broadcastable)
    local f = tgl.compile { inputs = { W, r }, outputs = g }
    expect(f(d(A), d(R)), 'float64', { { -0.25, 0.25, 5 } })
  end)

  it('sends the gradient of max to the maximum only', function()
    local W = tgl.dmatrix('W')
    local f = tgl.compile { inputs = { W }, outputs = tgl.grad(tgl.sum(tgl.max(W, 2)), W) }
    expect(f(d({ { 1, 5, 3 }, { 7, 2, 0 } })), 'float64', { { 0, 1, 0 }, { 1, 0, 0 } })
  end)

  it('accumulates the gradient of repeated advanced indices', function()
    local W, i = tgl.dmatrix('W'), tgl.lvector('i')
    local f = tgl.compile { inputs = { W, i }, outputs = tgl.grad(tgl.sum(W[{ i }]), W) }
    expect(f(tgl.zeros(3, 2, { dtype = 'float64' }), arr({ 1, 1, 3 }, 'int64')), 'float64',
           { { 2, 2 }, { 0, 0 }, { 1, 1 } })
    -- d/dv sum(inc_subtensor(x[{i}], v) * w) = w[i]
    local x, v, w = tgl.dvector('x'), tgl.dvector('v'), tgl.dvector('w')
    local g = tgl.compile { inputs = { x, v, w, i }, outputs = tgl.grad(tgl.sum(tgl.inc_subtensor(x[{ i }], v) * w), v) }
    expect(g(d({ 0, 0, 0 }), d({ 5, 6, 7 }), d({ 1, 2, 3 }), arr({ 1, 1, 3 }, 'int64')), 'float64', { 1, 1, 3 })
  end)

  it('gives the softmax cross-entropy gradient softmax - one_hot', function()
    local a, y = tgl.dmatrix('a'), tgl.lvector('y')
    local cost = tgl.sum(tgl.categorical_crossentropy(tgl.softmax(a), y))
    local f = tgl.compile { inputs = { a, y }, outputs = tgl.grad(cost, a) }
    -- softmax(A) - np.eye(3)[[2, 0]]
    expect(f(d(A), arr(Y, 'int64')), 'float64',
           { { 0.176820182107444, 0.0307267403264364, -0.207546922433881 },
             { -0.981135214086723, 0.178984105354632, 0.802151108732091 } })
  end)
end)

-- ===========================================================================
describe('tgl.verify_grad', function()
  it('returns the worst relative error, which is tiny for a correct gradient', function()
    local err = tgl.verify_grad(function(x, y) return tgl.tanh(x) * y end, { d(A), d(B) })
    assert.is_true(err >= 0 and err < 1e-7, tostring(err))
  end)

  it('raises naming the input and the position where finite differences disagree', function()
    -- floor jumps at 2: finite differences see a huge slope, the graph says 0
    local err = raises('verify_grad', function()
      tgl.verify_grad(function(a, b) return tgl.sum(a) * 2 + tgl.floor(b) end, { d({ 1, 2 }), d({ 0.5, 2.0, 0.25 }) })
    end, 'the gradient of input 2 is wrong at (2)', 'tgl gives 0', 'finite differences')
    assert.matches('error [%d.e+]+ > tol 1e%-05', err)
  end)

  it('raises with the worst element of a matrix input when tol is absurdly small', function()
    local err = raises('verify_grad', function()
      tgl.verify_grad(function(x) return tgl.tanh(x) * tgl.constant({ { 1, 2 }, { 3, 4 } }) end,
                      { d({ { 0.1, 0.5 }, { 0.7, 2 } }) }, { tol = 1e-30 })
    end, 'the gradient of input 1 is wrong at (', 'tol 1e-30')
    local i, j = err:match('wrong at %((%d+),(%d+)%)')
    assert.is_truthy(i and j)
    assert.is_true(tonumber(i) >= 1 and tonumber(i) <= 2 and tonumber(j) >= 1 and tonumber(j) <= 2)
  end)

  it('rejects a function that does not return a variable, and empty points', function()
    raises('verify_grad', function() tgl.verify_grad(function() return 1 end, { d({ 1 }) }) end,
           'fn must return a variable')
    raises('verify_grad', function() tgl.verify_grad(function(x) return x end, {}) end, 'points must be a non-empty table')
  end)
end)

-- ===========================================================================
describe('bad input', function()
  local x, v, s = tgl.matrix('x'), tgl.vector('v'), tgl.scalar('s')

  it('arithmetic rejects non-tensors and shapes that do not broadcast', function()
    raises('add', function() local _ = tgl.add(x, 'a') end, 'expected an array, a variable or a number, got string')
    raises('mul', function() local _ = tgl.mul(x, function() end) end, 'got function')
    raises('add', function() local _ = arr(A) + tgl.ones(2, 2) end,
           'sizes 3 and 2 differ on axis 2', '(inputs: float32 (2,3), float32 (2,2))')
    raises('pow', function() local _ = tgl.pow(x, 'q') end, 'got string')
    raises('div', function() local _ = tgl.ones(3) / tgl.ones(2) end, 'sizes 3 and 2 differ on axis 1')
  end)

  it('a compiled elementwise op names the op, the shapes and the line at run time', function()
    local y = tgl.matrix('y')
    local f = tgl.compile { inputs = { x, y }, outputs = x + y, name = 'fwd' }
    local err = raises('fwd', function() local _ = f(tgl.ones(2, 3), tgl.ones(1, 3)) end,
                       'add: sizes 2 and 1 differ on axis 1', 'declared broadcastable',
                       'float32 (2,3), float32 (1,3)', 'built at ')
    assert.matches('built at [^\n]*ops_spec%.lua:%d+', err)
    local r = tgl.row('r')
    local g = tgl.compile { inputs = { x, r }, outputs = x + r, name = 'fwd_row' }
    raises('fwd_row', function() local _ = g(tgl.ones(2, 3), tgl.ones(2, 3)) end, "input 2 ('r')", '(1,?)', '(2,3)')
  end)

  it('math functions reject non-tensors', function()
    raises('exp', function() local _ = tgl.exp('a') end, 'got string')
    raises('tanh', function() local _ = tgl.tanh(nil) end, 'got nil')
    raises('relu', function() local _ = tgl.relu('a') end, 'got string')
  end)

  it('maximum, minimum, clip, comparisons and logic check shapes', function()
    raises('maximum', function() local _ = tgl.maximum(tgl.ones(2), tgl.ones(3)) end, 'sizes 2 and 3 differ')
    raises('minimum', function() local _ = tgl.minimum(tgl.ones(2), tgl.ones(3)) end, 'sizes 2 and 3 differ')
    raises('clip', function() local _ = tgl.clip(x, 'q', 1) end, 'got string')
    raises('clip', function() local _ = tgl.clip(tgl.ones(3), tgl.zeros(2), 1) end, 'differ')
    raises('eq', function() local _ = tgl.eq(tgl.ones(2), tgl.ones(3)) end, 'sizes 2 and 3 differ')
    raises('ge', function() local _ = tgl.ge(tgl.ones(2, 2), tgl.ones(3, 2)) end, 'sizes 2 and 3 differ on axis 1')
    raises('and_', function() local _ = tgl.and_(tgl.ones(2), tgl.ones(3)) end, 'sizes 2 and 3 differ')
    raises('or_', function() local _ = tgl.or_(x, 'a') end, 'got string')
  end)

  it('switch checks shapes and ifelse needs a scalar condition and matching branches', function()
    raises('switch', function() local _ = tgl.switch(arr({ true, false }, 'bool'), tgl.ones(3), tgl.ones(3)) end,
           'sizes 2 and 3 differ', 'bool (2,)')
    raises('ifelse', function() local _ = tgl.ifelse(tgl.bvector(), x, x) end, 'the condition must be a scalar')
    raises('ifelse', function() local _ = tgl.ifelse(s, x, v) end, 'the branches have 2 and 1 dimensions')
  end)

  it('cast rejects unknown dtypes', function()
    raises('cast', function() local _ = tgl.cast(x, 'float16') end, "unknown dtype 'float16'")
    raises('cast', function() local _ = tgl.cast(arr(A), 5) end, 'dtype must be a string, got number')
  end)

  it('reductions check the axis and the input', function()
    raises('sum', function() local _ = tgl.sum(x, 3) end, 'axis 3 is out of range for a 2-d tensor')
    raises('sum', function() local _ = tgl.sum(x, 0) end, 'axis 0 is out of range')
    raises('mean', function() local _ = tgl.mean(x, -3) end, 'axis -3 is out of range')
    raises('max', function() local _ = tgl.max(arr(A), { 1, -2 }) end, 'axis -2 is given twice')
    raises('var', function() local _ = tgl.var(x, 1.5) end, 'axis must be an integer, got 1.5')
    raises('prod', function() local _ = tgl.prod('x') end, 'expected an array or a variable, got string')
    raises('argmax', function() local _ = tgl.argmax(x, { 1, 2 }) end, 'axis must be one integer')
    raises('argmin', function() local _ = tgl.argmin(x, 3) end, 'axis 3 is out of range')
  end)

  it('max, min and argmax of nothing raise instead of inventing a value', function()
    raises('max', function() local _ = tgl.max(tgl.zeros(0)) end, 'zero-size reduction', 'float32 (0,)')
    raises('min', function() local _ = tgl.min(tgl.zeros(2, 0), 2) end, 'zero-size reduction', '(2,0)')
    raises('argmax', function() local _ = tgl.argmax(tgl.zeros(0)) end, 'zero-size reduction')
    local f = tgl.compile { inputs = { x }, outputs = tgl.max(x, 1), name = 'colmax' }
    raises('colmax', function() local _ = f(tgl.zeros(0, 3)) end, 'max', 'zero-size reduction', 'built at ')
  end)

  it('dot takes vectors and matrices whose inner sizes agree', function()
    raises('dot', function() local _ = tgl.dot(tgl.ones(2, 2, 2), tgl.ones(2, 2)) end,
           'takes vectors and matrices, got 3-d and 2-d inputs')
    raises('dot', function() local _ = tgl.dot(tgl.tensor3(), x) end, '3-d and 2-d')
    raises('dot', function() local _ = tgl.dot(tgl.ones(2, 3), tgl.ones(2, 3)) end,
           'inner sizes 3 and 2 differ', 'float32 (2,3), float32 (2,3)')
    raises('dot', function() local _ = tgl.dot(tgl.ones(2), tgl.ones(3)) end, 'inner sizes 2 and 3 differ')
    raises('dot', function() local _ = tgl.dot(x, 'w') end, 'got string')
    local f = tgl.compile { inputs = { x }, outputs = tgl.dot(x, x), name = 'gram' }
    local err = raises('gram', function() local _ = f(tgl.ones(2, 3)) end, 'dot: inner sizes 3 and 2 differ',
                       'float32 (2,3)', 'built at ')
    assert.matches('built at [^\n]*ops_spec%.lua:%d+', err)
  end)

  it('batched_dot takes two 3-d or two 2-d tensors with matching batch and inner sizes', function()
    raises('batched_dot', function() local _ = tgl.batched_dot(tgl.ones(2, 3), tgl.ones(2, 3, 4)) end,
           'got 2-d and 3-d')
    raises('batched_dot', function() local _ = tgl.batched_dot(tgl.ones(2), tgl.ones(2)) end, 'got 1-d and 1-d')
    raises('batched_dot', function() local _ = tgl.batched_dot(tgl.ones(2, 3, 4), tgl.ones(3, 4, 5)) end,
           'batch sizes 2 and 3 differ')
    raises('batched_dot', function() local _ = tgl.batched_dot(tgl.ones(2, 3, 4), tgl.ones(2, 3, 5)) end,
           'inner sizes 4 and 3 differ')
  end)

  it('dimshuffle checks its order', function()
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, { 3, 1 }) end, 'axis 3 is out of range for a 2-d tensor')
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, { 1 }) end, 'axis 2 is dropped but is not broadcastable')
    raises('dimshuffle', function() local _ = tgl.dimshuffle(tgl.ones(2, 3), { 2 }) end, 'axis 1 is dropped')
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, { 1, 1 }) end, 'axis 1 appears twice')
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, { 'y', 1 }) end, "entries must be axes or 'x', got y")
    raises('dimshuffle', function() local _ = tgl.dimshuffle(x, 1) end, 'order must be a table')
  end)

  it('reshape takes one -1 at most and keeps the number of elements', function()
    raises('reshape', function() local _ = x:reshape(-1, -1) end, 'more than one size is -1')
    raises('reshape', function() local _ = tgl.ones(2, 3):reshape(-1, -1) end, 'more than one dimension is -1')
    raises('reshape', function() local _ = tgl.ones(2, 3):reshape(4, 2) end,
           'cannot reshape 6 elements into a shape of 8 elements')
    raises('reshape', function() local _ = tgl.ones(2, 3):reshape(4, -1) end, 'cannot infer the -1 dimension')
    raises('reshape', function() local _ = x:reshape(-2, 3) end, 'size -2 of dimension 1 is not valid')
    raises('reshape', function() local _ = x:reshape(1.5, 3) end, 'size 1.5 of dimension 1 is not valid')
    raises('reshape', function() local _ = x:reshape(v:shape()) end, 'needs its length')
    local f = tgl.compile { inputs = { x }, outputs = x:reshape(4, -1), name = 'resh' }
    raises('resh', function() local _ = f(tgl.ones(2, 3)) end, 'reshape: cannot infer the -1 dimension',
           'float32 (2,3)', 'built at ')
    local g = tgl.compile { inputs = { x }, outputs = x:reshape(4, 2), name = 'resh2' }
    raises('resh2', function() local _ = g(tgl.ones(2, 3)) end, 'cannot reshape 6 elements into a shape of 8')
  end)

  it('flatten takes ndim from 1 to the rank', function()
    raises('flatten', function() local _ = tgl.flatten(x, 3) end, 'ndim must be from 1 to 2, got 3')
    raises('flatten', function() local _ = tgl.flatten(arr(A), 0) end, 'got 0')
  end)

  it('concatenate and stack need tensors of one rank and matching sizes', function()
    raises('concatenate', function() local _ = tgl.concatenate({}) end, 'expected a non-empty table of tensors')
    raises('concatenate', function() local _ = tgl.concatenate(x) end, 'expected a non-empty table')
    raises('concatenate', function() local _ = tgl.concatenate({ x, v }) end, 'input 2 has 1 dimensions, input 1 has 2')
    raises('concatenate', function() local _ = tgl.concatenate({ tgl.ones(2, 3), tgl.ones(2, 2) }, 1) end,
           'input 2 has size 2 on axis 2, input 1 has 3', 'float32 (2,3), float32 (2,2)')
    raises('concatenate', function() local _ = tgl.concatenate({ x, x }, 3) end, 'axis 3 is out of range')
    local y = tgl.matrix('y')
    local f = tgl.compile { inputs = { x, y }, outputs = tgl.concatenate({ x, y }), name = 'cat' }
    raises('cat', function() local _ = f(tgl.ones(2, 3), tgl.ones(2, 2)) end, 'concatenate: input 2 has size 2 on axis 2',
           'built at ')
    raises('stack', function() local _ = tgl.stack({}) end, 'expected a non-empty table of tensors')
    raises('stack', function() local _ = tgl.stack({ v, v }, 3) end, 'axis 3 is out of range')
  end)

  it('size checks its axis', function()
    raises('size', function() local _ = x:size(3) end, 'axis 3 is out of range for a 2-d tensor')
    raises('size', function() local _ = x:size('a') end, 'axis must be an integer')
  end)

  it('basic indexing checks indices when building', function()
    raises('index', function() local _ = x[0] end, 'index 0 on axis 1 is not valid (indices start at 1)')
    raises('index', function() local _ = x[1.5] end, 'index 1.5 on axis 1 is not valid')
    raises('index', function() local _ = x[{ 1, 2, 3 }] end, '3 indices for a 2-d tensor')
    raises('index', function() local _ = x[s] end, 'symbolic indices must be integer scalars')
    raises('index', function() local _ = x[{ { 1, 2, 0 } }] end, 'step on axis 1 must be a nonzero integer')
    raises('index', function() local _ = x[{ { 0, 2 } }] end, 'slice start on axis 1 is not valid')
    raises('index', function() local _ = x[{ {}, { 1, 0 } }] end, 'slice stop on axis 2 is not valid')
    raises('index', function() local _ = x[{ true }] end, 'index 1 must be a number, a slice table or a tensor, got boolean')
  end)

  it('indexing out of range raises, eagerly and at run time naming the op, the shapes and the line', function()
    raises('index', function() local _ = tgl.ones(3, 4)[4] end, 'subtensor: index 4 is out of range for axis 1 of size 3',
           'float32 (3,4)')
    raises('index', function() local _ = tgl.ones(3, 4)[{ {}, -5 }] end, 'out of range for axis 2 of size 4')
    local f = tgl.compile { inputs = { v }, outputs = v[5], name = 'pick' }
    local err = raises('pick', function() local _ = f(tgl.ones(3)) end,
                       'subtensor: index 5 is out of range for axis 1 of size 3', 'float32 (3,)', 'built at ')
    assert.matches('built at [^\n]*ops_spec%.lua:%d+', err)
  end)

  it('a failed call leaves shared variables as they were', function()
    local W = tgl.shared(arr({ 1, 2 }), 'W')
    local f = tgl.compile { inputs = { v }, outputs = v[3], updates = { { W, W + 1 } }, name = 'upd' }
    expect(f(arr({ 1, 2, 3 })), 'float32', 3, {})
    expect(W:get_value(), 'float32', { 2, 3 })
    raises('upd', function() local _ = f(arr({ 1, 2 })) end, 'out of range')
    expect(W:get_value(), 'float32', { 2, 3 })
  end)

  it('advanced indexing needs integer tensors and checks them at run time', function()
    raises('index', function() local _ = x[{ arr({ 1.5 }) }] end, 'index tensors must be integers')
    raises('index', function() local _ = x[{ arr({ 1 }, 'int64'), 2 }] end, 'mixing integer tensors with numbers')
    raises('index', function() local _ = tgl.ones(3, 4)[{ arr({ 4 }, 'int64') }] end,
           'adv_subtensor: index 4 is out of range for axis 1 of size 3')
    raises('index', function() local _ = tgl.ones(2, 3)[{ tgl.arange(2), arr({ 1, 2, 3 }, 'int64') }] end,
           'do not broadcast together')
    local p, y = tgl.matrix('p'), tgl.ivector('y')
    local f = tgl.compile { inputs = { p, y }, outputs = p[{ tgl.arange(p:size(1)), y }], name = 'pick_y' }
    raises('pick_y', function() local _ = f(tgl.ones(2, 3), arr({ 4, 1 }, 'int32')) end,
           'adv_subtensor: index 4 is out of range for axis 2 of size 3', 'float32 (2,3)', 'built at ')
    raises('pick_y', function() local _ = f(tgl.ones(2, 3), arr({ 0, 1 }, 'int32')) end,
           'index 0 on axis 2: indices count from 1')
  end)

  it('set_subtensor and inc_subtensor need an indexing expression and a fitting value', function()
    raises('set_subtensor', function() local _ = tgl.set_subtensor(x, 1) end, 'the first argument must be an indexing expression')
    raises('set_subtensor', function() local _ = tgl.set_subtensor(x[1], x) end,
           'v has 2 dimensions, more than the 1 of the region x[idx]')
    local f = tgl.compile { inputs = { x, v }, outputs = tgl.set_subtensor(x[{ { 1, 2 } }], v), name = 'setrows' }
    raises('setrows', function() local _ = f(tgl.ones(3, 3), tgl.ones(2)) end,
           'v has size 2 on its axis 1 where x[idx] has size 3', 'built at ')
    local i = tgl.lvector('i')
    local g = tgl.compile { inputs = { v, i }, outputs = tgl.inc_subtensor(v[{ i }], 1), name = 'scatter' }
    raises('scatter', function() local _ = g(tgl.ones(3), arr({ 4 }, 'int64')) end,
           'adv_inc_subtensor: index 4 is out of range for axis 1 of size 3')
  end)

  it('softmax and log_softmax check the axis and the input', function()
    raises('softmax', function() local _ = tgl.softmax(x, 3) end, 'axis 3 is out of range for a 2-d tensor')
    raises('softmax', function() local _ = tgl.softmax(arr(A), 0) end, 'axis 0 is out of range')
    raises('softmax', function() local _ = tgl.softmax(s) end, 'out of range for a 0-d tensor')
    raises('softmax', function() local _ = tgl.softmax('x') end, 'expected an array or a variable, got string')
    raises('log_softmax', function() local _ = tgl.log_softmax(x, -3) end, 'axis -3 is out of range')
  end)

  it('one_hot needs integer labels from 1 to n and a positive n', function()
    raises('one_hot', function() local _ = tgl.one_hot(tgl.ivector(), 0) end, 'n must be a positive integer, got 0')
    raises('one_hot', function() local _ = tgl.one_hot(tgl.ivector(), 2.5) end, 'got 2.5')
    raises('one_hot', function() local _ = tgl.one_hot(v, 3) end, 'labels must be integers', 'got float32')
    raises('one_hot', function() local _ = tgl.one_hot(arr({ 1, 4 }, 'int32'), 3) end,
           'label 4 at position (2) is outside 1..3 (labels count from 1)')
    raises('one_hot', function() local _ = tgl.one_hot(arr({ 0 }, 'int32'), 3) end, 'label 0 at position (1) is outside 1..3')
    raises('one_hot', function() local _ = tgl.one_hot(arr({ 1 }, 'int32'), 3, 'float16') end, "unknown dtype 'float16'")
  end)

  it('categorical_crossentropy with labels needs a matrix of probabilities', function()
    raises('categorical_crossentropy', function() local _ = tgl.categorical_crossentropy(tgl.tensor3(), tgl.imatrix()) end,
           'integer labels need a matrix of probabilities')
    raises('categorical_crossentropy', function() local _ = tgl.categorical_crossentropy('p', tgl.ivector()) end,
           'got string')
  end)

  it('grad needs a scalar cost and float variables', function()
    raises('grad', function() local _ = tgl.grad(x, x) end, 'the cost must be a scalar')
    local iv = tgl.ivector('iv')
    raises('grad', function() local _ = tgl.grad(tgl.sum(tgl.cast(iv, 'float32')), iv) end,
           "cannot differentiate with respect to 'iv' of dtype int32")
  end)
end)

-- ===========================================================================
-- Bugs this spec found, kept as regression tests.
describe('regressions (bugs found and fixed)', function()
  -- G = np.arange(1, 13).reshape(3, 4)
  local G = { { 1, 2, 3, 4 }, { 5, 6, 7, 8 }, { 9, 10, 11, 12 } }

  it('a negative symbolic index counts from the end, as a negative number does', function()
    -- graph.lua basic_index: a symbolic index i becomes i - 1 even when i < 0
    local x, i = tgl.matrix('x'), tgl.lscalar('i')
    local f = tgl.compile { inputs = { x, i }, outputs = x[i] }
    expect(f(arr(G), -1), 'float32', { 9, 10, 11, 12 })
    expect(f(arr(G), -2), 'float32', { 5, 6, 7, 8 })
  end)

  it('negative symbolic slice bounds are inclusive and count from the end', function()
    -- x[{{i, j}}] with i = -2, j = -1 must be x[{{-2, -1}}]: the last two rows
    local x, i, j = tgl.matrix('x'), tgl.lscalar('i'), tgl.lscalar('j')
    local f = tgl.compile { inputs = { x, i, j }, outputs = { x[{ { i, j } }], x[{ { nil, j } }], x[{ {}, { i } }] } }
    local r1, r2, r3 = f(arr(G), -2, -1)
    expect(r1, 'float32', { { 5, 6, 7, 8 }, { 9, 10, 11, 12 } })
    expect(r2, 'float32', G)
    expect(r3, 'float32', { { 3, 4 }, { 7, 8 }, { 11, 12 } })
  end)

  it('the gradient of prod is finite when an input is zero', function()
    -- d prod(x) / d x_k is the product of the others; reduce.c builds g * prod / x
    local err = tgl.verify_grad(function(a) return tgl.prod(a, 2) end, { d({ { 1, 0, 3 }, { 4, -5, 7 } }) })
    assert.is_true(err < 1e-5)
    local W = tgl.dvector('W')
    local f = tgl.compile { inputs = { W }, outputs = tgl.grad(tgl.prod(W), W) }
    expect(f(d({ 2, 0, 3 })), 'float64', { 0, 6, 0 })
    expect(f(d({ 0, 0, 3 })), 'float64', { 0, 0, 0 })
  end)

  it('argmax over all axes with keepdims keeps every axis (NumPy: shape (1, 1))', function()
    both(function(a) return tgl.argmax(a, { keepdims = true }) end, { arr(A) }, 'int64', { { 6 } })
  end)

  it('stack names itself when the shapes differ', function()
    raises('stack', function() local _ = tgl.stack({ tgl.ones(2), tgl.ones(3) }) end, '(2,)', '(3,)')
  end)

  it('outer names itself when given a matrix', function()
    raises('outer', function() local _ = tgl.outer(tgl.ones(2, 2), tgl.ones(2)) end, 'vector')
  end)

  it('categorical_crossentropy names itself for mismatched targets and bad labels', function()
    raises('categorical_crossentropy', function()
      local _ = tgl.categorical_crossentropy(tgl.ones(2, 3), tgl.ones(2, 4))
    end, '(2,3)', '(2,4)')
    raises('categorical_crossentropy', function()
      local _ = tgl.categorical_crossentropy(tgl.ones(2, 3), arr({ 1, 4 }, 'int32'))
    end, 'label 4')
  end)

  it('binary_crossentropy names itself when shapes differ', function()
    raises('binary_crossentropy', function()
      local _ = tgl.binary_crossentropy(tgl.ones(2) * 0.5, tgl.ones(3))
    end, '(2,)', '(3,)')
  end)

  it('categorical_crossentropy rejects integer labels that are not one per row', function()
    -- a 3-d p with an integer vector is silently taken as one-hot targets and broadcast
    raises('categorical_crossentropy', function()
      local _ = tgl.categorical_crossentropy(tgl.tensor3(), tgl.ivector())
    end, 'labels')
  end)
  it('std names itself for a bad axis', function()
    -- graph.lua M.std calls M.var, so the message says tgl.var
    raises('std', function() local _ = tgl.std(tgl.matrix(), 4) end, 'axis 4 is out of range')
  end)

  it('compiled outputs do not alias the input arrays (as Theano without borrow)', function()
    -- a view op's output (x:T(), x itself) shares the caller's input storage, so
    -- writing to the input afterwards changes results already returned
    local x = tgl.matrix('x')
    local f = tgl.compile { inputs = { x }, outputs = { x:T(), x } }
    local a = arr({ { 1, 2 }, { 3, 4 } })
    local t, same = f(a)
    a:set(100, 1, 2)
    expect(t, 'float32', { { 1, 3 }, { 2, 4 } })
    expect(same, 'float32', { { 1, 2 }, { 3, 4 } })
  end)

  it('set_subtensor and inc_subtensor apply eagerly to arrays, as every operation does', function()
    -- API.md: every operation also applies eagerly; on arrays they raise
    -- 'the first argument must be an indexing expression of a variable'
    local a = arr({ { 1, 2, 3 }, { 4, 5, 6 } })
    expect(tgl.set_subtensor(a[{ 2, { 1, 2 } }], 0), 'float32', { { 1, 2, 3 }, { 0, 0, 6 } })
    expect(tgl.inc_subtensor(a[{ {}, 3 }], 10), 'float32', { { 1, 2, 13 }, { 4, 5, 16 } })
    expect(a, 'float32', { { 1, 2, 3 }, { 4, 5, 6 } })
  end)
end)

describe('products at the edges', function()
  it('A (3x0) . x (0) - c is -c (gemv with an empty inner extent scales c by beta)', function()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      local A, x, c = tgl.matrix('A', dt), tgl.vector('x', dt), tgl.vector('c', dt)
      local f = tgl.compile { inputs = { A, x, c }, outputs = { tgl.dot(A, x) - c } }
      assert.is_truthy(tgl.debugprint(f):find(' = gemv%('))
      local got = f(tgl.zeros(3, 0, { dtype = dt }), tgl.zeros(0, { dtype = dt }),
                    tgl.array({ 1, -2, 3 }, dt))
      assert.are.same({ -1, 2, -3 }, got:totable())
    end
  end)

  it('a float32 dot product sums in double and rounds once', function()
    local ffi = require 'ffi'
    tgl.manual_seed(7)
    for _, n in ipairs({ 1000, 4097 }) do
      local x, y = tgl.randn(n, { dtype = 'float32' }), tgl.randn(n, { dtype = 'float32' })
      local exact = tgl.dot(x:astype('float64'), y:astype('float64')):get()
      local want = tonumber(ffi.new('float[1]', exact)[0])
      assert.are.equal(want, tgl.dot(x, y):get())
      -- a reversed view walks the vector from its far end
      local xr, yr = x[{ { n, 1, -1 } }], y[{ { n, 1, -1 } }]
      assert.are.equal(want, tgl.dot(xr, yr):get())
    end
  end)
end)
