-- op_matrix_cases.lua — the data table of the op matrix
-- (spec/op_matrix_spec.lua, doc/contributing.md "The op matrix"): one
-- entry or more per op of the engine's catalog, saying how a user builds
-- the op, the dtypes it accepts and those it rejects, its shape patterns,
-- its value domains, a float64 reference written in Lua (elementwise ops
-- and reductions), and whether its gradient and Rop are checked against
-- finite differences.  The spec walks the catalog and fails for an op
-- with no entry here, no COVERED line and no UNTESTABLE line.
--
-- An entry: { op = catalog name, desc = what tells it from the op's other
-- entries, family = 'unary' | 'binary' | 'ternary' | 'reduce' | 'other',
-- fn = function(inputs...) -> result (the same call on variables and on
-- arrays; reductions get (x, axis, keepdims)), dtypes = accepted input
-- dtypes, reject = {dtype = what the error must say} (dtypes the op
-- refuses), math = true (integer inputs become floatX first), ref = the
-- Lua float64 reference (elementwise: of the elements and the compute
-- dtype; reduce: of the list of values reduced), patterns = input shapes
-- (reduce: {shape, axis, keepdims}), samples = the inputs of an 'other'
-- entry (below), domain = function(dtype) -> a random value generator (or
-- one per input), special = true (NaN, ±Inf, ±0, huge, subnormal values
-- as inputs), signed_zero = true (the sign of a zero result is checked),
-- grad = 'why not' (no finite-difference check) or nil (Rop and the
-- gradient checked in float64, inputs from gdomain), wrt = the inputs
-- differentiated, produces = {internal ops the FAST_RUN program of the
-- first sample must run}, eager = false (no eager form: FAST_COMPILE is
-- the reference), lua_ref = function(values, shape) -> the float64
-- reference of an 'other' entry }.
local M = {}

local ffi = require 'ffi'
pcall(ffi.cdef, 'double log1p(double); double expm1(double); double round(double);')
pcall(ffi.cdef, 'double floor(double); double ceil(double);')
local Cm = ffi.C

M.ALL = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }
M.FLOATS = { 'float32', 'float64' }
M.NUMERIC = { 'float32', 'float64', 'int32', 'int64', 'uint8' }

local huge = math.huge
-- random values: u(lo, hi) uniform; ints small so nothing overflows
local function u(lo, hi) return function() return lo + (hi - lo) * math.random() end end
local function default_domain(dtype)
  if dtype == 'bool' then return function() return math.random(0, 1) end end
  if dtype == 'uint8' then return function() return math.random(0, 9) end end
  if dtype == 'int32' or dtype == 'int64' then return function() return math.random(-6, 6) end end
  return u(-3, 3)
end
M.default_domain = default_domain
local function positive(dtype)
  if dtype == 'float32' or dtype == 'float64' then return u(0.05, 4) end
  return function() return math.random(1, 9) end
end
-- away from the kinks at 0 (abs, relu, sign) for finite differences
local function off_zero()
  return function() local v = u(0.2, 2)() return math.random() < 0.5 and -v or v end
end
-- away from integers and halves (floor, ceil, round, mod)
local function off_grid()
  return function()
    local k = math.random(-3, 2)
    return k + (math.random() < 0.5 and u(0.1, 0.4)() or u(0.6, 0.9)())
  end
end
local function gdom(f) return function() return f end end

-- ---------------------------------------------------------------------------
-- elementwise references (float64, on the inputs' values)

local function sign(x) if x ~= x then return x end if x > 0 then return 1 elseif x < 0 then return -1 end return x end
local function round(x) return Cm.round(x) end
local function truthy(x) return x ~= 0 end  -- NaN ~= 0 is true, as doc/arrays.md says
local function b2n(b) return b and 1 or 0 end
local function sigmoid(x) return 1 / (1 + math.exp(-x)) end
local function softplus(x)
  if x ~= x then return x end
  if x > 0 then return x + Cm.log1p(math.exp(-x)) end
  return Cm.log1p(math.exp(x))
end
local function lmax(a, b) if a ~= a or b ~= b then return 0 / 0 end return a >= b and a or b end
local function lmin(a, b) if a ~= a or b ~= b then return 0 / 0 end return a <= b and a or b end
local function lmod(a, b, dtype)
  if dtype ~= 'float32' and dtype ~= 'float64' then
    if b == 0 then return 0 end  -- integer a % 0 is 0 (no trap)
    return a - math.floor(a / b) * b
  end
  return a - math.floor(a / b) * b
end
-- a * b as the kernels compute it (in uint64_t, wrapping): exact modulo
-- 2^32 for int32 and uint8 (the spec wraps the result into the dtype's
-- range); int64 operands stay small enough for doubles
local function imul(a, b, dtype)
  if dtype ~= 'int32' and dtype ~= 'uint8' then return a * b end
  local m = 2 ^ 32
  a, b = a % m, b % m
  local lo = b % 65536
  local hi = (b - lo) / 65536
  return ((a * lo) % m + ((a * hi) % 65536) * 65536) % m
end
-- integer power: 2 ^ -1 is 0 (doc/symbolic.md "Integer math"), by
-- squaring, wrapping
local function lpow(a, b, dtype)
  if dtype == 'float32' or dtype == 'float64' then return a ^ b end
  if b < 0 then
    if a == 1 then return 1 elseif a == -1 then return (b % 2 == 0) and 1 or -1 end
    return 0
  end
  local r, x = 1, a
  while b > 0 do
    if b % 2 == 1 then r = imul(r, x, dtype) end
    x = imul(x, x, dtype)
    b = math.floor(b / 2)
  end
  return r
end

-- The float specials: NaN, ±Inf, ±0, ±1, halves (round), huge, subnormal.
function M.specials(dtype)
  if dtype == 'float32' then
    return { 0 / 0, huge, -huge, 0, -0.0, 1, -1, 0.5, -2.5, 3e38, -3e38, 1e-45, -1e-40, 1.5e-39, 88.5, -104 }
  end
  return { 0 / 0, huge, -huge, 0, -0.0, 1, -1, 0.5, -2.5, 1e300, -1e300, 5e-324, -1e-310, 2.2e-308, 709.5, -745.5 }
end
-- integers with a zero and the ends of small ranges
function M.int_specials(dtype)
  if dtype == 'bool' then return { 0, 1 } end
  if dtype == 'uint8' then return { 0, 1, 255, 128, 7 } end
  if dtype == 'int32' then return { 0, 1, -1, 7, -8, 2147483647, -2147483648 } end
  return { 0, 1, -1, 7, -8 }
end

-- shapes (the first: rows long enough for the generated kernels' vector
-- loops and their remainders; then the pairs of specials (16,1) (1,16)):
-- unary inputs; binary pairs (broadcasting on each axis of each
-- operand, a lower-rank operand, a 0-d one, 0-size axes); ternary triples
local U1 = { { { 5, 9 } }, { { 2, 3 } }, { {} }, { { 0, 3 } }, { { 4 } }, { { 1, 3 } }, { { 2, 3, 2 } } }
local B2 = {
  { { 5, 9 }, { 5, 9 } }, { { 16, 1 }, { 1, 16 } }, { { 2, 3 }, { 2, 3 } }, { {}, {} }, { { 1, 3 }, { 2, 3 } }, { { 2, 3 }, { 1, 3 } },
  { { 2, 1 }, { 2, 3 } }, { { 2, 3 }, { 2, 1 } }, { { 3 }, { 2, 3 } }, { {}, { 2, 3 } },
  { { 0, 3 }, { 1, 3 } }, { { 2, 0 }, { 2, 1 } },
}
local T3 = { { { 5, 9 }, { 5, 9 }, { 5, 9 } }, { { 2, 3 }, { 2, 3 }, { 2, 3 } }, { { 1, 3 }, { 2, 1 }, {} }, { { 2, 3 }, {}, { 3 } },
             { { 0, 3 }, { 1, 3 }, { 0, 1 } } }
M.U1, M.B2, M.T3 = U1, B2, T3

M.entries = {}
local function add(e) M.entries[#M.entries + 1] = e; return e end

-- unary: name, ref, dtypes rejected, domain, gradient domain (nil: no
-- gradient check, with the reason in gnote), signed zero
local UN = {
  { 'neg', function(x) return -x end, sz = true, rej = { bool = 'not defined for bool' } },
  { 'abs', function(x) return math.abs(x) end, sz = true, rej = { bool = 'not defined for bool' }, g = off_zero },
  { 'sign', sign, rej = { bool = 'not defined for bool' }, g = off_zero },
  { 'exp', function(x) return math.exp(x) end },
  { 'log', function(x) return math.log(x) end, dom = positive, g = function() return u(0.3, 3) end },
  { 'log1p', function(x) return Cm.log1p(x) end, dom = function(dt) return dt:match('float') and u(-0.9, 3) or positive(dt) end,
    g = function() return u(-0.5, 2) end },
  { 'expm1', function(x) return Cm.expm1(x) end },
  { 'sqrt', function(x) return math.sqrt(x) end, dom = positive, g = function() return u(0.3, 3) end, sz = true },
  { 'sqr', function(x, dt) return imul(x, x, dt) end },
  { 'recip', function(x) return 1 / x end, g = function() local f = off_zero(); return function() return f() * 2 end end },
  { 'tanh', function(x) return math.tanh(x) end, sz = true },
  { 'sigmoid', sigmoid },
  { 'softplus', softplus },
  { 'relu', function(x) if x ~= x then return x end return x > 0 and x or 0 end, g = off_zero },
  { 'sin', function(x) return math.sin(x) end, sz = true },
  { 'cos', function(x) return math.cos(x) end },
  { 'floor', function(x) return Cm.floor(x) end, sz = true, g = off_grid },
  { 'ceil', function(x) return Cm.ceil(x) end, sz = true, g = off_grid },
  { 'round', round, sz = true, g = off_grid },
}
-- integer inputs are cast to floatX first (doc/symbolic.md "Integer math
-- gives floatX")
local MATH = { exp = true, log = true, log1p = true, expm1 = true, sqrt = true, recip = true, tanh = true,
               sigmoid = true, softplus = true, sin = true, cos = true, div = true }
for _, d in ipairs(UN) do
  local name = d[1]
  local dtypes = {}
  for _, dt in ipairs(M.ALL) do if not (d.rej and d.rej[dt]) then dtypes[#dtypes + 1] = dt end end
  add { op = name, family = 'unary', fn = function(x) return tgl[name](x) end, ref = d[2], dtypes = dtypes,
        reject = d.rej, patterns = U1, domain = d.dom, special = true, signed_zero = d.sz, math = MATH[name],
        gdomain = d.g and d.g() or u(-2, 2) }
end
add { op = 'not_', family = 'unary', fn = function(x) return tgl.not_(x) end,
      ref = function(x) return not truthy(x) end, dtypes = M.ALL, patterns = U1, special = true,
      grad = 'a bool output carries no tangent (spec/rop_spec.lua NO_TANGENT)' }
-- cast to each dtype: floats truncate toward zero and saturate, NaN gives
-- 0, anything nonzero (NaN too) is true (doc/arrays.md)
local RANGE = { int32 = { -2147483648, 2147483647 }, uint8 = { 0, 255 },
                int64 = { -9223372036854775808, 9223372036854775807 } }
for _, to in ipairs(M.ALL) do
  add { op = 'cast', desc = 'cast to ' .. to, family = 'unary', fn = function(x) return tgl.cast(x, to) end,
        ref = function(x, from)
          if to == 'bool' then return truthy(x) end
          -- integer to integer wraps (the spec's to_dtype wraps)
          if RANGE[to] and not from:match('float') then return x end
          if RANGE[to] then
            if x ~= x then return 0 end
            local r = x >= 0 and math.floor(x) or math.ceil(x)
            return math.max(RANGE[to][1], math.min(RANGE[to][2], r))
          end
          return x
        end,
        dtypes = M.ALL, patterns = U1, special = true, signed_zero = to:match('float') ~= nil,
        grad = to ~= 'float64' and 'float64 to ' .. to .. ': a narrower or integer result (rop_spec\'s cast cases)' or nil,
        gdomain = u(-2, 2) }
end

-- binary
local BIN = {
  { 'add', function(a, b) return a + b end, sz = true },
  { 'sub', function(a, b) return a - b end, sz = true },
  { 'mul', function(a, b, dt) return imul(a, b, dt) end, sz = true },
  { 'div', function(a, b) return a / b end, sz = true,
    g = { u(-2, 2), function() local v = u(0.5, 2)() return math.random() < 0.5 and -v or v end } },
  { 'pow', lpow, dom = { nil, function(dt) if dt:match('float') then return u(-3, 3) end
                                           return function() return math.random(0, 3) end end },
    fdom = function(dt) return dt:match('float') and u(0.1, 3) or default_domain(dt) end,
    g = { u(0.3, 2), u(-2, 2) } },
  { 'mod', lmod, dom = { nil, function(dt) if dt == 'uint8' then return function() return math.random(0, 4) end end
                                           return default_domain(dt) end },
    g = { off_grid(), function() return 1 end } },
  { 'maximum', lmax }, { 'minimum', lmin },
  { 'eq', function(a, b) return a == b end, cmp = true }, { 'neq', function(a, b) return a ~= b end, cmp = true },
  { 'lt', function(a, b) return a < b end, cmp = true }, { 'le', function(a, b) return a <= b end, cmp = true },
  { 'gt', function(a, b) return a > b end, cmp = true }, { 'ge', function(a, b) return a >= b end, cmp = true },
  { 'and_', function(a, b) return truthy(a) and truthy(b) end, cmp = true },
  { 'or_', function(a, b) return truthy(a) or truthy(b) end, cmp = true },
}
for _, d in ipairs(BIN) do
  local name = d[1]
  add { op = name, family = 'binary', fn = function(a, b) return tgl[name](a, b) end, ref = d[2], dtypes = M.ALL,
        patterns = B2, domain = d.dom and d.dom[2] and { d.fdom, d.dom[2] } or d.fdom, special = true,
        signed_zero = d.sz, math = MATH[name],
        grad = d.cmp and 'a bool output carries no tangent (spec/rop_spec.lua NO_TANGENT)' or nil,
        -- maximum and minimum: ties have probability 0 with random inputs
        gdomain = d.g or { u(-2, 2), u(-2, 2) } }
end
-- ternary
add { op = 'switch', family = 'ternary', fn = function(c, a, b) return tgl.switch(c, a, b) end,
      ref = function(c, a, b) if truthy(c) then return a end return b end, dtypes = M.ALL,
      in_dtypes = function(dt) return { 'bool', dt, dt } end, patterns = T3, special = true, signed_zero = true,
      wrt = { 2, 3 }, gdomain = { function() return math.random(0, 1) end, u(-2, 2), u(-2, 2) } }
add { op = 'clip', family = 'ternary', fn = function(x, lo, hi) return tgl.clip(x, lo, hi) end,
      ref = function(x, lo, hi) return lmin(lmax(x, lo), hi) end, dtypes = M.ALL, patterns = T3, special = true,
      domain = { nil, function(dt) return dt == 'uint8' and function() return math.random(0, 3) end
                                    or dt == 'bool' and function() return 0 end
                                    or dt:match('int') and function() return math.random(-3, -1) end or u(-2, -1) end,
                 function(dt) return dt == 'uint8' and function() return math.random(4, 9) end
                                    or dt == 'bool' and function() return 1 end
                                    or dt:match('int') and function() return math.random(1, 3) end or u(1, 2) end },
      -- x away from the bounds (-1.5, 1.5 by gdomain)
      gdomain = { function() local r = math.random(3) return r == 1 and u(-3, -1.8)() or r == 2 and u(-1, 1)() or u(1.8, 3)() end,
                  u(-1.6, -1.4), u(1.4, 1.6) } }

-- ---------------------------------------------------------------------------
-- reductions: ref(list of values) -> value; patterns: {shape, axis, keepdims}

local function rsum(t) local s = 0 for _, v in ipairs(t) do s = s + v end return s end
local function rprod(t) local s = 1 for _, v in ipairs(t) do s = s * v end return s end
local function rmax(t) local m = -huge for _, v in ipairs(t) do if v ~= v then return v end if v > m then m = v end end return m end
local function rmin(t) local m = huge for _, v in ipairs(t) do if v ~= v then return v end if v < m then m = v end end return m end
-- first position of the max (a NaN wins, as NumPy)
local function rarg(better)
  return function(t)
    local k = 1
    for i = 1, #t do
      if t[i] ~= t[i] then return i end
      if better(t[i], t[k]) then k = i end
    end
    return k
  end
end
local RED_P = { { { 5, 9 }, 2 }, { { 2, 3 } }, { { 2, 3 }, 1 }, { { 2, 3 }, 2 }, { { 2, 3 }, -1, true }, { {} }, { { 4 }, 1 },
                { { 2, 3, 4 }, { 1, 3 } }, { { 2, 1, 3 }, 2 }, { { 0, 3 }, 1 }, { { 0, 3 }, 2 }, { { 0, 3 } } }
-- max, min, argmax, argmin of an empty axis are errors (doc/symbolic.md)
local NONEMPTY_P = {}
for _, p in ipairs(RED_P) do if not (p[1][1] == 0 and p[2] ~= 2) then NONEMPTY_P[#NONEMPTY_P + 1] = p end end
local ARG_P = { { { 5, 9 }, 2 }, { { 2, 3 }, 1 }, { { 2, 3 }, 2 }, { { 2, 3 } }, { { 2, 3 }, -1, true }, { { 5 }, 1 }, { { 2, 3, 4 }, 3 },
                { { 0, 3 }, 2 } }
M.RED_P, M.NONEMPTY_P, M.ARG_P = RED_P, NONEMPTY_P, ARG_P
for _, d in ipairs({ { 'sum', rsum, RED_P }, { 'prod', rprod, RED_P }, { 'max', rmax, NONEMPTY_P },
                     { 'min', rmin, NONEMPTY_P } }) do
  local name = d[1]
  add { op = name, family = 'reduce', ref = d[2], dtypes = M.ALL, patterns = d[3], special = true,
        fn = function(x, axis, keep) return tgl[name](x, axis, keep and { keepdims = true } or nil) end,
        empty_error = name == 'max' or name == 'min',
        domain = name == 'prod' and function(dt) return dt:match('float') and u(0.5, 1.5) or default_domain(dt) end or nil,
        gdomain = name == 'prod' and function() local v = u(0.5, 1.5)() return math.random() < 0.5 and -v or v end
                  or u(-2, 2) }
end
for _, d in ipairs({ { 'argmax', function(a, b) return a > b end }, { 'argmin', function(a, b) return a < b end } }) do
  local name = d[1]
  add { op = name, family = 'reduce', ref = rarg(d[2]), dtypes = M.ALL, patterns = ARG_P, special = true,
        fn = function(x, axis, keep) return tgl[name](x, axis, keep and { keepdims = true } or nil) end,
        empty_error = true, grad = 'an int64 output carries no tangent (spec/rop_spec.lua NO_TANGENT)' }
end
-- mean = sum / axes_size(x): the reference is the mean
add { op = 'axes_size', desc = 'mean', family = 'reduce', dtypes = M.ALL, patterns = RED_P, special = true,
      ref = function(t) return rsum(t) / #t end, mean = true,
      fn = function(x, axis, keep) return tgl.mean(x, axis, keep and { keepdims = true } or nil) end,
      gdomain = u(-2, 2) }

-- ---------------------------------------------------------------------------
-- the other ops: compared with the eager result (the CPU reference
-- kernels), or FAST_COMPILE's where the op has no eager form, on every
-- layout of their float inputs.  samples: lists of inputs, each a shape
-- (random values of the entry's dtype) or {int = {...}} (fixed int64
-- labels or indices), and error = 'what every mode must raise' where the
-- op refuses such inputs; wrt: the inputs differentiated (default: the
-- shaped ones).

local function I(t, shape) return { int = t, shape = shape } end
local G = require 'tgl.graph'
local function raw(op, args, p) return G.apply(op, op, args, #args, p) end
M.raw = raw

local function other(e) e.family = 'other'; return add(e) end
other { op = 'dot', dtypes = M.ALL, fn = function(a, b) return tgl.dot(a, b) end,
        samples = { { { 2, 3 }, { 3, 4 } }, { { 3 }, { 3, 4 } }, { { 2, 3 }, { 3 } }, { { 3 }, { 3 } },
                    { { 2, 0 }, { 0, 4 } }, { { 0, 3 }, { 3, 4 } }, { { 1, 3 }, { 3, 1 } }, { { 5, 7 }, { 7, 6 } },
                    { { 3, 0 }, { 0 } }, { { 0 }, { 0 } } } }
-- the BLAS forms the rewrites make of dot (FAST_RUN)
other { op = 'dot', desc = 'gemm form 2 a.b + c', dtypes = M.FLOATS, produces = { 'gemm' },
        fn = function(a, b, c) return tgl.dot(a, b) * 2 + c end,
        samples = { { { 2, 3 }, { 3, 4 }, { 2, 4 } }, { { 4, 5 }, { 5, 3 }, { 1, 3 } }, { { 2, 0 }, { 0, 3 }, { 2, 3 } } } }
other { op = 'dot', desc = 'gemv form 2 A.x + c', dtypes = M.FLOATS, produces = { 'gemv' },
        fn = function(a, x, c) return tgl.dot(a, x) * 2 + c end,
        samples = { { { 2, 3 }, { 3 }, { 2 } }, { { 4, 5 }, { 5 }, { 4 } }, { { 0, 3 }, { 3 }, { 0 } } } }
other { op = 'dot', desc = 'ger form A + 0.5 outer(x, y)', dtypes = M.FLOATS, produces = { 'ger' },
        fn = function(a, x, y) return a + tgl.outer(x, y) * 0.5 end,
        samples = { { { 2, 3 }, { 2 }, { 3 } }, { { 4, 5 }, { 4 }, { 5 } } } }
other { op = 'batched_dot', dtypes = M.ALL, fn = function(a, b) return tgl.batched_dot(a, b) end,
        samples = { { { 2, 3, 4 }, { 2, 4, 2 } }, { { 2, 3 }, { 2, 3 } }, { { 0, 3, 4 }, { 0, 4, 2 } }, { { 3, 2, 0 }, { 3, 0, 2 } } } }
other { op = 'dimshuffle', dtypes = M.ALL, fn = function(x) return tgl.dimshuffle(x, { 3, 1, 2 }) end,
        samples = { { { 2, 3, 4 } }, { { 0, 3, 2 } } } }
other { op = 'dimshuffle', desc = "{'x', 2, 'x', 1}", dtypes = M.ALL,
        fn = function(x) return tgl.dimshuffle(x, { 'x', 2, 'x', 1 }) end, samples = { { { 2, 3 } }, { { 3, 0 } } } }
other { op = 'dimshuffle', desc = 'transpose inside a product', dtypes = M.NUMERIC,
        fn = function(x, y) return tgl.mul(x:T(), y:T()) end, samples = { { { 2, 3 }, { 2, 3 } }, { { 1, 3 }, { 1, 3 } } } }
other { op = 'reshape', dtypes = M.ALL, fn = function(x) return tgl.reshape(x, 6, -1) end,
        samples = { { { 2, 3, 4 } }, { { 3, 2 } }, { { 2, 3, 0 } } } }
other { op = 'reshape', desc = 'flatten and to 0-d', dtypes = M.ALL,
        fn = function(x, y) return tgl.flatten(x, 1) + tgl.reshape(y, {}) end, samples = { { { 2, 3 }, { 1, 1 } } } }
other { op = 'shape', dtypes = M.ALL, fn = function(x) return tgl.shape(x) end, eager = false,
        samples = { { { 2, 3 } }, { {} }, { { 0, 4, 1 } } }, grad = 'an int64 output (rop_spec NO_TANGENT)' }
other { op = 'shape', desc = "reshape to another input's shape", dtypes = M.FLOATS,
        fn = function(x, y) return tgl.add(tgl.reshape(x, tgl.shape(y), 2), y) end, samples = { { { 2, 3 }, { 3, 2 } } } }
other { op = 'concatenate', dtypes = M.ALL, fn = function(a, b, c) return tgl.concatenate({ a, b, c }, 1) end,
        samples = { { { 2, 3 }, { 1, 3 }, { 3, 3 } }, { { 2, 3 }, { 0, 3 }, { 1, 3 } }, { { 0, 2 }, { 0, 2 }, { 0, 2 } } } }
other { op = 'concatenate', desc = 'axis 2 and stack', dtypes = M.ALL,
        fn = function(a, b) return tgl.concatenate({ tgl.stack({ a, b }, 2), tgl.stack({ b, a }, 2) }, 2) end,
        samples = { { { 3 }, { 3 } }, { { 0 }, { 0 } } } }
other { op = 'fill_like', dtypes = M.ALL, eager = false,
        fn = function(x) return tgl.mul(x, raw('fill_like', { x }, { i = { G.DTYPE.float64 }, f = { 2.5 } })) end,
        samples = { { { 2, 3 } }, { { 0, 3 } }, { {} } } }
other { op = 'arange', dtypes = M.FLOATS,
        fn = function(x) return tgl.mul(x, tgl.cast(tgl.arange(1, tgl.size(x, 2)), x.dtype)) end,
        samples = { { { 2, 3 } }, { { 2, 0 } }, { { 1, 5 } } } }
other { op = 'subtensor', dtypes = M.ALL, fn = function(x) return x[{ { 1, 2 }, { 4, 1, -2 } }] end,
        samples = { { { 3, 5 } }, { { 2, 4 } } } }
other { op = 'subtensor', desc = 'x[2], x[{2, {}, -1}]', dtypes = M.ALL,
        fn = function(x) return tgl.concatenate({ x[2][1], x[{ 2, {}, -1 }] }, 1) end, samples = { { { 2, 3, 3 } } } }
other { op = 'inc_subtensor', dtypes = M.ALL,
        fn = function(x, y) return tgl.set_subtensor(x[{ { 1, 2 }, 2 }], y) end, samples = { { { 3, 3 }, { 2 } } } }
other { op = 'inc_subtensor', desc = 'inc_subtensor, a broadcast row', dtypes = M.ALL,
        fn = function(x, y) return tgl.inc_subtensor(x[2], y) end, samples = { { { 2, 3, 4 }, { 1, 4 } }, { { 2, 0, 4 }, { 1, 4 } } } }
other { op = 'adv_subtensor', dtypes = M.ALL, fn = function(x, i) return x[{ i }] end,
        reject_input = 2, reject_name = 'index',
        reject = { float32 = 'index tensors must be integers', float64 = 'index tensors must be integers' },
        samples = { { { 4, 3 }, I({ 3, 1, 3 }) }, { { 4, 0 }, I({ 2, 2 }) }, { { 4, 3 }, I({}, { 0 }) } } }
other { op = 'adv_subtensor', desc = 'x[{rows, cols}]', dtypes = M.ALL, fn = function(x, i, j) return x[{ i, j }] end,
        samples = { { { 3, 4 }, I({ 1, 3, 2 }), I({ 4, 4, 1 }) } } }
other { op = 'adv_inc_subtensor', dtypes = M.ALL, fn = function(x, y, i) return tgl.inc_subtensor(x[{ i }], y) end,
        samples = { { { 4, 3 }, { 3, 3 }, I({ 2, 4, 2 }) }, { { 4, 3 }, { 1, 3 }, I({ 1, 1, 1 }) } } }
other { op = 'adv_inc_subtensor', desc = 'set_subtensor', dtypes = M.ALL,
        fn = function(x, y, i) return tgl.set_subtensor(x[{ i }], y) end, samples = { { { 4, 3 }, { 2, 3 }, I({ 4, 1 }) } } }
-- softmax and log_softmax along the last axis in float64: shifted by the
-- row's maximum (a NaN or +Inf in the row makes it NaN; a row of -Inf is
-- NaN too, exp(-Inf - -Inf))
local function softmax_ref(log)
  return function(vals, shape)
    local n = shape[#shape] or 1
    local out = {}
    for r = 0, #vals / math.max(n, 1) - 1 do
      local m = -huge
      for j = 1, n do local v = vals[r * n + j]; m = (v ~= v or m ~= m) and 0 / 0 or math.max(m, v) end
      local sum = 0
      for j = 1, n do sum = sum + math.exp(vals[r * n + j] - m) end
      for j = 1, n do
        local v = vals[r * n + j] - m
        out[r * n + j] = log and v - math.log(sum) or math.exp(v) / sum
      end
    end
    return out
  end
end
for _, name in ipairs({ 'softmax', 'log_softmax' }) do
  other { op = name, dtypes = M.ALL, fn = function(x) return tgl[name](x) end, special = true,
          lua_ref = softmax_ref(name == 'log_softmax'),
          samples = { { { 2, 3 } }, { { 1, 4 } }, { { 0, 3 } }, { { 2, 3, 4 } } } }
  other { op = name, desc = 'axis 1, logits of +-1000', dtypes = M.FLOATS, scale = 1000,
          fn = function(x) return tgl[name](x, 1) end, samples = { { { 3, 2 } } } }
end
other { op = 'one_hot', dtypes = { 'float64' }, reject_input = 2,
        reject = { float32 = 'labels must be integers', float64 = 'labels must be integers', bool = 'labels must be integers' }, fn = function(x, y) return tgl.mul(x, tgl.one_hot(y, 3, 'float64')) end,
        samples = { { { 2, 3 }, I({ 3, 1 }) }, { { 0, 3 }, I({}, { 0 }) } } }
other { op = 'softmax', desc = 'categorical_crossentropy(softmax(x), y)', dtypes = M.FLOATS,
        produces = { 'softmax_crossentropy' },
        fn = function(x, y) return tgl.categorical_crossentropy(tgl.softmax(x), y) end,
        samples = { { { 4, 3 }, I({ 1, 3, 3, 2 }) }, { { 1, 3 }, I({ 2 }) } } }
other { op = 'conv2d', dtypes = M.ALL, fn = function(x, w) return tgl.conv2d(x, w, { padding = 1 }) end,
        samples = { { { 2, 3, 4, 4 }, { 2, 3, 3, 3 } }, { { 0, 3, 4, 4 }, { 2, 3, 3, 3 } } } }
other { op = 'conv2d', desc = 'stride {2,1}, padding {1,0}, dilation {1,2}, 2 groups', dtypes = M.FLOATS,
        fn = function(x, w) return tgl.conv2d(x, w, { stride = { 2, 1 }, padding = { 1, 0 }, dilation = { 1, 2 }, groups = 2 }) end,
        samples = { { { 2, 4, 5, 6 }, { 4, 2, 3, 2 } } } }
other { op = 'max_pool2d', dtypes = M.ALL, special = true,
        fn = function(x) return tgl.max_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true }) end,
        samples = { { { 2, 3, 5, 6 } }, { { 3, 4, 4 } }, { { 0, 3, 5, 6 } } } }
other { op = 'avg_pool2d', dtypes = M.ALL,
        fn = function(x) return tgl.avg_pool2d(x, { kernel = 3, stride = 2, padding = 1, count_include_pad = false }) end,
        samples = { { { 2, 3, 5, 6 } }, { { 3, 4, 4 } }, { { 2, 0, 4, 4 } } } }
other { op = 'batch_norm', dtypes = M.ALL, fn = function(x, w, b) return tgl.batch_norm(x, w, b) end,
        samples = { { { 4, 3 }, { 3 }, { 3 } }, { { 5, 0 }, { 0 }, { 0 } }, { { 0, 3 }, { 3 }, { 3 }, error = 'no elements per channel' } } }
other { op = 'batch_norm', desc = 'given mean and var', dtypes = M.FLOATS,
        domain = { nil, nil, function() return u(0.5, 2) end },
        fn = function(x, m, v, w, b) return tgl.batch_norm(x, w, b, { mean = m, var = v }) end,
        samples = { { { 3, 2, 4 }, { 2 }, { 2 }, { 2 }, { 2 } } } }
other { op = 'batch_norm_stats', dtypes = M.ALL,
        fn = function(x) local m, v = tgl.batch_norm_stats(x); return m * 2 + v * v end,
        samples = { { { 3, 2, 4 } }, { { 5, 3 } } } }
other { op = 'ifelse', dtypes = M.ALL, wrt = { 2, 3 },
        fn = function(c, a, b) return tgl.ifelse(c, a, b) end,
        samples = { { I(1, {}), { 2, 3 }, { 2, 3 } }, { I(0, {}), { 2, 3 }, { 2, 3 } }, { I(1, {}), { 0, 3 }, { 0, 3 } } } }
other { op = 'class_xent', dtypes = { 'float64' }, eager = false,
        fn = function(h, wc, ws, c, t, o) return raw('class_xent', { h, wc, ws, c, t, o }) end,
        samples = { { { 3, 4 }, { 3, 4 }, { 5, 4 }, I({ 1, 3, 2 }), I({ 2, 3, 5 }), I({ 1, 1, 2, 3, 3 }) } } }
-- In a process that has not joined a job (tgl.dist) allreduce is the
-- identity, but it stays in the program (FAST_RUN: as bucket ops).
other { op = 'allreduce', dtypes = { 'float32', 'float64', 'int32', 'int64' },
        fn = function(x) return tgl.allreduce(x, 'sum') end,
        samples = { { { 3, 4 } }, { {} }, { { 0, 2 } } } }
other { op = 'allreduce', desc = 'mean', dtypes = M.FLOATS,
        fn = function(x) return tgl.allreduce(x, { op = 'mean' }) end,
        samples = { { { 2, 3, 2 } } } }
other { op = 'allreduce', desc = 'max', dtypes = { 'float32', 'float64', 'int32', 'int64' }, grad = false,
        fn = function(x) return tgl.allreduce(x, 'max') end,
        samples = { { { 5 } } } }

-- Internal ops, built by the engine from a public op: the spec checks that
-- the program (FAST_RUN, or the unoptimised graph) of `build` holds the op;
-- its values are checked by the named entry's cases (and gradients).
-- (An entry's `produces` is checked on its first sample.)
M.COVERED = {
  gemm = { via = "dot's 'gemm form' entry (FAST_RUN rewrites 2 a.b + c to gemm)" },
  gemv = { via = "dot's 'gemv form' entry" },
  ger = { via = "dot's 'ger form' entry" },
  softmax_crossentropy = { via = "softmax's 'categorical_crossentropy(softmax(x), y)' entry" },
  output = { via = 'the batch_norm_stats entry (two outputs)', graph = true, build = function()
    local x = tgl.dmatrix('x')
    local m, v = tgl.batch_norm_stats(x)
    return { x }, m * 2 + v * v end },
  fused = { via = 'every elementwise entry (FAST_RUN fuses elementwise chains)' },
  softmax_crossentropy_dx = { via = "the gradient check of softmax's categorical_crossentropy entry",
    build = function()
      local x, y = tgl.dmatrix('x'), tgl.lvector('y')
      return { x, y }, tgl.grad(tgl.sum(tgl.categorical_crossentropy(tgl.softmax(x), y)), x)
    end },
  conv2d_grad_input = { via = "the gradient check of conv2d's entries", build = function()
    local x, w = tgl.tensor { dtype = 'float64', ndim = 4 }, tgl.tensor { dtype = 'float64', ndim = 4 }
    return { x, w }, tgl.grad(tgl.sum(tgl.conv2d(x, w)), x) end },
  conv2d_grad_weight = { via = "the gradient check of conv2d's entries", build = function()
    local x, w = tgl.tensor { dtype = 'float64', ndim = 4 }, tgl.tensor { dtype = 'float64', ndim = 4 }
    return { x, w }, tgl.grad(tgl.sum(tgl.conv2d(x, w)), w) end },
  max_pool2d_grad = { via = "the gradient check of max_pool2d's entry", build = function()
    local x = tgl.tensor { dtype = 'float64', ndim = 4 }
    return { x }, tgl.grad(tgl.sum(tgl.max_pool2d(x, { kernel = 2 })), x) end },
  avg_pool2d_grad = { via = "the gradient check of avg_pool2d's entry", build = function()
    local x = tgl.tensor { dtype = 'float64', ndim = 4 }
    return { x }, tgl.grad(tgl.sum(tgl.avg_pool2d(x, { kernel = 2 })), x) end },
  max_pool2d_gather = { via = "the Rop check of max_pool2d's entry", build = function()
    local x, v = tgl.tensor { dtype = 'float64', ndim = 4 }, tgl.tensor { dtype = 'float64', ndim = 4 }
    return { x, v }, tgl.Rop(tgl.max_pool2d(x, { kernel = 2 }), x, v) end },
  batch_norm_grad = { via = "the gradient check of batch_norm's entries", build = function()
    local x, w, b = tgl.dmatrix('x'), tgl.dvector('w'), tgl.dvector('b')
    return { x, w, b }, tgl.grad(tgl.sum(tgl.sqr(tgl.batch_norm(x, w, b))), x) end },
  class_xent_delta = { via = "the gradient check of class_xent's entry (its pullback)", build = function()
    local h, wc, ws = tgl.dmatrix('h'), tgl.dmatrix('wc'), tgl.dmatrix('ws')
    local c, t, o = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o')
    return { h, wc, ws, c, t, o }, tgl.grad(tgl.sum(raw('class_xent', { h, wc, ws, c, t, o })), h) end },
  allreduce_start = { via = "allreduce's entries (FAST_RUN groups a function's allreduces into buckets)",
    build = function()
      local x = tgl.dmatrix('x')
      return { x }, tgl.allreduce(tgl.sqr(x), 'sum') * 2 end },
  allreduce_wait = { via = "allreduce's entries (FAST_RUN groups a function's allreduces into buckets)",
    build = function()
      local x = tgl.dmatrix('x')
      return { x }, tgl.allreduce(tgl.sqr(x), 'sum') * 2 end },
  rop_direction = { via = 'every Rop check of this matrix (tgl.Rop puts it in front of each direction)',
    graph = true, build = function()
      local x, v = tgl.dmatrix('x'), tgl.dmatrix('v')
      return { x, v }, tgl.Rop(tgl.tanh(x), x, v) end },
}
-- Ops no row of this matrix can run, and why (each is tested elsewhere).
M.UNTESTABLE = {
  scan = 'a loop over a body graph, not a function of its inputs alone: every case needs its own '
    .. 'body (spec/scan_spec.lua, property_scan_spec.lua: random loops against unrolled graphs, '
    .. 'gradients and Rop)',
  class_xent_sgd = "a training step that updates its weight operands in place (tgl.lm.class_xent_sgd): "
    .. 'spec/lm_class_xent_sgd_spec.lua checks it against a hand-written sequence',
}

return M
