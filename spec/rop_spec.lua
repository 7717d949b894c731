-- rop_spec.lua — forward mode (issue 11, API.md "Differentiation"):
-- tgl.Rop for every op of the catalog against central finite differences
-- (f(x + eps v) - f(x - eps v)) / 2 eps in float64, on broadcasting and
-- non-broadcasting inputs; Rop through scan (Elman recurrences, backwards,
-- several taps), ifelse and shared variables; tgl.Lop against u' J formed
-- from a finite-difference Jacobian; tgl.gauss_newton_product against
-- J' H_L J v formed explicitly on a small two-layer net, for both named
-- losses and a loss given as a function; tgl.hessian_vector_product
-- against tgl.hessian times v and against finite differences of the
-- gradient; and the errors (mismatched v, integer wrt, disconnected v).
--
-- The catalog walk: CASES below holds at least one case per op name of
-- the engine's catalog (tgl_op_count / tgl_op_name); each case checks the
-- op's pushforward (Rop) and its pullback (the gradient of sum(out * u),
-- through <grad, v> = <u, J v>) against the same finite differences; an
-- op with no case and no exemption fails 'every op of the catalog has a
-- Rop case and a gradient case', so a new op cannot land without both
-- being checked (spec/catalog_spec.lua checks that this file still does).  Exempt: the internal
-- ops (output, fused: built by the engine, not by users; scan: its own
-- tests below, which also cover output; class_xent_delta: built only by
-- class_xent's pullback; class_xent_sgd: a training step, not differentiable).  Ops whose output is integer or
-- boolean (comparisons, argmax, one_hot's labels, shape, axes_size,
-- arange...) have two kinds of case: one where the integer output feeds a
-- float computation (so finite differences check that no tangent leaks
-- through), and NO_TANGENT, which asks Rop for the integer output itself.
--
-- Inputs are random (a fixed seed per case, printed on failure) and kept
-- away from the points where an op is not differentiable (kinks of abs,
-- relu, max, clip; jumps of floor, mod, comparisons).
tgl = tgl or require 'tgl'
local tgl = tgl
local G = require 'tgl.graph'
local core = require 'tgl.core'
local ffi, C = core.ffi, core.C

local EPS = 1e-6
local TOL = 1e-6   -- |Rop - fd| <= TOL * max(1, |fd|)

-- ---------------------------------------------------------------------------
-- helpers

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- An array of shape filled by f() (float64 unless dtype says otherwise).
local function rnd(shape, f, dtype)
  dtype = dtype or 'float64'
  local t = {}
  for i = 1, numel(shape) do t[i] = f() end
  if #shape == 0 then return tgl.full({}, t[1], { dtype = dtype }) end
  return tgl.array(t, dtype):reshape(shape)
end

local function U(lo, hi) return function() return lo + (hi - lo) * math.random() end end
-- |value| in [lo, hi], random sign
local function S(lo, hi)
  return function()
    local v = lo + (hi - lo) * math.random()
    return math.random() < 0.5 and -v or v
  end
end
-- away from integers and from halves (floor, ceil, round are flat there)
local function OFFGRID(kmin, kmax)
  return function()
    local k = math.random(kmin or -3, kmax or 2)
    return k + (math.random() < 0.5 and U(0.1, 0.4)() or U(0.6, 0.9)())
  end
end

-- |value| in [lo, hi], signs alternating from `first` (so a 0-d or 1-element
-- array has a known sign)
local function ALT(lo, hi, first)
  local k = 0
  return function()
    k = k + 1
    local v = lo + (hi - lo) * math.random()
    if (k % 2 == 1) == ((first or 1) < 0) then return -v end
    return v
  end
end

local function N(shape) return rnd(shape, U(-1, 1)) end
local function SG(shape, lo, hi) return rnd(shape, S(lo or 0.3, hi or 1.5)) end
local function POS(shape, lo, hi) return rnd(shape, U(lo or 0.5, hi or 2)) end
local function INT(t) return tgl.array(t, 'int64') end

local M, ROW, COL, SC, VEC, T3 = { 2, 3 }, { 1, 3 }, { 2, 1 }, {}, { 3 }, { 2, 3, 4 }

local function is_float(a) return a.dtype == 'float64' or a.dtype == 'float32' end

-- A symbolic variable of a's type; length-1 axes are broadcastable.
local function var_like(a, name)
  local bc = {}
  for k = 1, a:dim() do bc[k] = a:size(k) == 1 end
  return tgl.tensor { dtype = a.dtype, ndim = a:dim(), broadcastable = bc, name = name }
end

local function flat(a)
  local t = {}
  local f = a:reshape(-1)
  for k = 1, f:nelement() do t[k] = f:get(k) end
  return t
end

local function shape_str(s) return '(' .. table.concat(s, ',') .. ')' end

-- Elementwise |want - got| <= tol * max(1, |want|), naming the element.
local function assert_close(want, got, tol, what)
  tol = tol or TOL
  if tgl.is_array(want) then want = flat(want) end
  if tgl.is_array(got) then got = flat(got) end
  assert(#want == #got, ('%s: %d elements, expected %d'):format(what, #got, #want))
  for k = 1, #want do
    local a, b = want[k], got[k]
    local err = math.abs(a - b) / math.max(1, math.abs(a))
    if not (err <= tol) then
      error(('%s: element %d (C order) is %.12g, expected %.12g (error %.3g > %.3g)')
            :format(what, k, b, a, err, tol), 2)
    end
  end
end

-- The op names in the graph below v (not inside scan bodies).
local function ops_in(v)
  local seen, ops = {}, {}
  local function walk(n)
    local id = tonumber(C.tgl_node_id(n))
    if seen[id] then return end
    seen[id] = true
    if C.tgl_node_kind_of(n) == G.KIND.apply then
      ops[ffi.string(C.tgl_op_name(C.tgl_node_op(n)))] = true
      for k = 0, C.tgl_node_ninputs(n) - 1 do walk(C.tgl_node_input_at(n, k)) end
    end
  end
  walk(v.n)
  return ops
end

-- x + s v, eagerly, in x's dtype
local function axpy(x, s, v) return tgl.add(x, tgl.mul(v, s)) end

-- ---------------------------------------------------------------------------
-- the cases

-- CASES[op] = list of {desc, inputs = function() -> {arrays}, build =
-- function(vars...) -> variable, wrt = {input indices} (default: every
-- float input), zero = true (the tangent is zero: floor, fill_like...),
-- tol, eps, seed}.  NO_TANGENT[op] = list of {desc, inputs, build}: build
-- gives an integer or boolean variable that depends on the float input 1.
local CASES, NO_TANGENT = {}, {}
local function case(op, desc, inputs, build, opts)
  opts = opts or {}
  CASES[op] = CASES[op] or {}
  opts.desc, opts.inputs, opts.build = desc, inputs, build
  CASES[op][#CASES[op] + 1] = opts
end
local function no_tangent(op, desc, inputs, build)
  NO_TANGENT[op] = NO_TANGENT[op] or {}
  NO_TANGENT[op][#NO_TANGENT[op] + 1] = { desc = desc, inputs = inputs, build = build }
end
-- inputs from thunks
local function ins(...)
  local gens = { ... }
  return function()
    local xs = {}
    for i, g in ipairs(gens) do xs[i] = g() end
    return xs
  end
end
local function n_(s) return function() return N(s) end end
local function sg_(s, lo, hi) return function() return SG(s, lo, hi) end end
local function alt_(s, first) return function() return rnd(s, ALT(0.3, 1.5, first)) end end
local function pos_(s, lo, hi) return function() return POS(s, lo, hi) end end
local function const_(a) return function() return a end end

-- elementwise unary: {input generator, zero tangent?}
local UNARY = {
  neg = { n_ }, abs = { alt_ }, sign = { sg_, true }, exp = { n_ }, log = { pos_ },
  log1p = { function(s) return function() return rnd(s, U(-0.5, 1)) end end },
  expm1 = { n_ }, sqrt = { pos_ }, sqr = { n_ },
  recip = { function(s) return sg_(s, 0.5, 2) end },
  tanh = { n_ }, sigmoid = { n_ }, softplus = { n_ }, relu = { alt_ }, sin = { n_ }, cos = { n_ },
  floor = { function(s) return function() return rnd(s, OFFGRID()) end end, true },
  ceil = { function(s) return function() return rnd(s, OFFGRID()) end end, true },
  round = { function(s) return function() return rnd(s, OFFGRID()) end end, true },
}
for name, u in pairs(UNARY) do
  for _, s in ipairs({ M, ROW, SC }) do
    case(name, shape_str(s), ins(u[1](s)), function(x) return tgl[name](x) end, { zero = u[2] })
  end
  -- feeding a nonlinear consumer, so that the tangent's value matters
  case(name, 'inside tanh(2 f(x) * y)', ins(u[1](M), n_(ROW)),
       function(x, y) return tgl.tanh(tgl.mul(tgl[name](x), y) * 2) end)
end

-- elementwise binary: shapes (a, b), broadcasting both ways, 0-d, and a
-- lower-rank operand (left-padded)
local PAIRS = { { M, M }, { M, ROW }, { COL, M }, { ROW, COL }, { SC, M }, { M, SC }, { VEC, M } }
local BINARY = {
  add = { n_, n_ }, sub = { n_, n_ }, mul = { n_, n_ },
  div = { n_, function(s) return sg_(s, 0.5, 2) end },
  pow = { pos_, n_ },
}
for name, g in pairs(BINARY) do
  for _, p in ipairs(PAIRS) do
    case(name, shape_str(p[1]) .. ' and ' .. shape_str(p[2]), ins(g[1](p[1]), g[2](p[2])),
         function(a, b) return tgl[name](a, b) end)
  end
  case(name, 'with a Lua number on the right', ins(g[1](M)), function(a) return tgl[name](a, 1.75) end)
  case(name, 'with a Lua number on the left', ins(g[2](M)), function(b) return tgl[name](1.75, b) end)
  case(name, 'wrt the left operand only', ins(g[1](M), g[2](ROW)),
       function(a, b) return tgl[name](a, b) end, { wrt = { 1 } })
  case(name, 'of one variable with itself', ins(pos_(M)), function(a) return tgl[name](a, a) end,
       { zero = name == 'sub' or name == 'div' })
end

-- a mod b with a / b away from integers: a = b * (k + frac)
for _, p in ipairs({ { M, M }, { M, ROW }, { M, COL }, { M, SC } }) do
  case('mod', shape_str(p[1]) .. ' and ' .. shape_str(p[2]), function()
    local b = SG(p[2], 0.6, 1.5)
    local q = rnd(p[1], function() return math.random(-2, 2) + U(0.15, 0.85)() end)
    return { tgl.mul(b, q), b }
  end, function(a, b) return tgl.mod(a, b) end)
end

-- maximum / minimum with |a - b| >= 0.2
for _, name in ipairs({ 'maximum', 'minimum' }) do
  for _, p in ipairs({ { M, M }, { M, ROW }, { ROW, M }, { M, SC }, { COL, ROW } }) do
    case(name, shape_str(p[1]) .. ' and ' .. shape_str(p[2]), function()
      local a = N(p[1])
      local b = tgl.add(a, SG(p[2], 0.2, 1))
      if b:dim() ~= #p[2] or numel(b:shape()) ~= numel(p[2]) then
        -- b must keep its own shape: draw it against a's broadcast instead
        b = N(p[2])
        a = tgl.add(b, SG(p[1], 0.2, 1))
        if numel(a:shape()) ~= numel(p[1]) then
          -- neither contains the other (a column and a row): spread the rows
          a = rnd(p[1], U(-1, 1))
          b = rnd(p[2], U(-1, 1))
          local af, bf = flat(a), flat(b)
          for i = 1, #af do af[i] = (i - 1) * 4 + af[i] end       -- rows 4 apart
          for j = 1, #bf do bf[j] = 2 + bf[j] * 0.5 end           -- between row 0 and row 1
          a = tgl.array(af, 'float64'):reshape(p[1])
          b = tgl.array(bf, 'float64'):reshape(p[2])
        end
      end
      return { a, b }
    end, function(a, b) return tgl[name](a, b) end)
  end
end

-- comparisons: boolean outputs.  Through floor of off-grid values (stable
-- under the perturbation) so that ties occur and eq / neq are not constant.
for _, name in ipairs({ 'eq', 'neq', 'lt', 'le', 'gt', 'ge' }) do
  for _, p in ipairs({ { M, M }, { M, ROW } }) do
    case(name, 'as a mask: (a + b) * ' .. name .. '(floor a, floor b), ' .. shape_str(p[1]) .. ' and '
         .. shape_str(p[2]),
         ins(function() return rnd(p[1], OFFGRID(-1, 0)) end, function() return rnd(p[2], OFFGRID(-1, 0)) end),
         function(a, b)
           return tgl.mul(tgl.add(a, b), tgl.cast(tgl[name](tgl.floor(a), tgl.floor(b)), 'float64'))
         end)
  end
  no_tangent(name, name .. '(a, b)', ins(n_(M), n_(M)), function(a, b) return tgl[name](a, b) end)
end
for _, name in ipairs({ 'and_', 'or_' }) do
  case(name, 'as a mask', ins(alt_(M, 1), alt_(ROW, -1)), function(a, b)
    return tgl.mul(tgl.mul(a, b), tgl.cast(tgl[name](tgl.gt(a, 0), tgl.lt(b, 0)), 'float64'))
  end)
  no_tangent(name, name .. '(a > 0, b < 0)', ins(sg_(M), sg_(M)),
             function(a, b) return tgl[name](tgl.gt(a, 0), tgl.lt(b, 0)) end)
end
case('not_', 'as a mask', ins(sg_(M)), function(a)
  return tgl.mul(tgl.exp(a), tgl.cast(tgl.not_(tgl.gt(a, 0)), 'float64'))
end)
no_tangent('not_', 'not_(a > 0)', ins(sg_(M)), function(a) return tgl.not_(tgl.gt(a, 0)) end)

-- cast: float64 -> float32 -> float64 (the tangent is rounded to float32),
-- a float32 wrt, and float -> int (no tangent)
case('cast', 'float64 -> float32 -> float64', ins(n_(M)),
     function(x) return tgl.cast(tgl.cast(x, 'float32'), 'float64') end, { eps = 1e-3, tol = 1e-3 })
case('cast', 'a float32 wrt, cast to float64', ins(function() return N(M):astype('float32') end),
     function(x) return tgl.mul(tgl.cast(x, 'float64'), 3) end, { eps = 1e-2, tol = 1e-4 })
case('cast', 'float -> int32 as a factor', ins(function() return rnd(M, OFFGRID()) end),
     function(x) return tgl.mul(x, tgl.cast(tgl.cast(x, 'int32'), 'float64')) end)
no_tangent('cast', 'cast(x, int32)', ins(n_(M)), function(x) return tgl.cast(x, 'int32') end)

-- switch(c > 0, a, b) and switch(bool, a, b); c is a wrt too (its tangent
-- goes nowhere)
for _, p in ipairs({ { M, M, M }, { ROW, M, COL }, { M, SC, M }, { COL, ROW, SC } }) do
  case('switch', shape_str(p[1]) .. ', ' .. shape_str(p[2]) .. ', ' .. shape_str(p[3]),
       ins(sg_(p[1]), n_(p[2]), n_(p[3])),
       function(c, a, b) return tgl.switch(tgl.gt(c, 0), a, b) end, { wrt = { 2, 3 } })
end
-- c reaches the output only through a comparison: disconnected, so
-- {disconnected = 'ignore'}
case('switch', 'wrt the condition too', ins(sg_(M), n_(M), n_(ROW)),
     function(c, a, b) return tgl.switch(tgl.gt(c, 0), a, b) end, { ignore = true })
case('switch', 'a Lua number branch', ins(sg_(M), n_(M)),
     function(c, a) return tgl.switch(tgl.gt(c, 0), a, 0.5) end, { wrt = { 2 } })

-- clip(x, lo, hi) with x away from lo and hi
local function clipped(s)
  return function()
    return rnd(s, function()
      local r = math.random(3)
      return r == 1 and U(-1.2, -0.7)() or r == 2 and U(-0.3, 0.3)() or U(0.7, 1.2)()
    end)
  end
end
local function near(v, s) return function() return rnd(s, U(v - 0.1, v + 0.1)) end end
case('clip', 'x, 0-d bounds', ins(clipped(M), near(-0.5, SC), near(0.5, SC)),
     function(x, lo, hi) return tgl.clip(x, lo, hi) end)
case('clip', 'x, a row and a column of bounds', ins(clipped(M), near(-0.5, ROW), near(0.5, COL)),
     function(x, lo, hi) return tgl.clip(x, lo, hi) end)
case('clip', 'a row x, matrix bounds', ins(clipped(ROW), near(-0.5, M), near(0.5, M)),
     function(x, lo, hi) return tgl.clip(x, lo, hi) end)
case('clip', 'Lua number bounds', ins(clipped(M)), function(x) return tgl.clip(x, -0.5, 0.5) end)

-- reductions on a 2x3x4 tensor: every axis, several, keepdims, a
-- broadcastable axis
local RED_AXES = { { nil, 'all axes' }, { 1, 'axis 1' }, { 2, 'axis 2' }, { { 1, 3 }, 'axes {1,3}' },
                   { -1, 'axis -1, keepdims', true } }
for _, name in ipairs({ 'sum', 'prod', 'max', 'min' }) do
  local g = name == 'prod' and sg_(T3, 0.5, 1.5) or n_(T3)
  for _, a in ipairs(RED_AXES) do
    case(name, a[2], ins(g), function(x)
      if a[3] then return tgl[name](x, a[1], { keepdims = true }) end
      return tgl[name](x, a[1])
    end)
  end
  case(name, 'over a broadcastable axis', ins(name == 'prod' and sg_({ 2, 1, 4 }, 0.5, 1.5) or n_({ 2, 1, 4 })),
       function(x) return tgl[name](x, 2) end)
  case(name, 'of a 0-d tensor', ins(n_(SC)), function(x) return tgl[name](x) end)
end
for _, nz in ipairs({ 1, 2 }) do
  case('prod', ('with %d zero%s in a slice'):format(nz, nz > 1 and 's' or ''), function()
    local x = flat(SG(T3, 0.5, 1.5))
    x[6] = 0
    if nz == 2 then x[7] = 0 end
    return { tgl.array(x, 'float64'):reshape(T3) }
  end, function(x) return tgl.prod(x, 3) end)
  case('prod', ('all axes, %d zero%s'):format(nz, nz > 1 and 's' or ''), function()
    local x = flat(SG(M, 0.5, 1.5))
    x[2] = 0
    if nz == 2 then x[5] = 0 end
    return { tgl.array(x, 'float64'):reshape(M) }
  end, function(x) return tgl.prod(x) end, { zero = nz == 2 })
end
case('sum', 'var and std (ddof 1)', ins(n_(T3)),
     function(x) return tgl.add(tgl.var(x, 2), tgl.std(x, { 1, 3 }, { ddof = 1 }):sum()) end)
for _, name in ipairs({ 'argmax', 'argmin' }) do
  case(name, 'as a factor: sum(x, 2) * ' .. name .. '(x, 2)', ins(n_(M)),
       function(x) return tgl.mul(tgl.sum(x, 2), tgl.cast(tgl[name](x, 2), 'float64')) end)
  no_tangent(name, name .. '(x, 2)', ins(n_(M)), function(x) return tgl[name](x, 2) end)
  no_tangent(name, name .. '(x) over all axes', ins(n_(T3)), function(x) return tgl[name](x) end)
end
case('axes_size', 'mean over axes 1 and 3 (sum / axes_size)', ins(n_(T3)), function(x) return tgl.mean(x, { 1, 3 }) end)
case('axes_size', 'x * size(x, 2)', ins(n_(M)),
     function(x) return tgl.mul(x, tgl.cast(tgl.size(x, 2), 'float64')) end)
no_tangent('axes_size', 'size(x, 1)', ins(n_(M)), function(x) return tgl.size(x, 1) end)

-- linear algebra
local DOTS = { { M, { 3, 4 } }, { VEC, { 3, 4 } }, { M, VEC }, { VEC, VEC }, { ROW, { 3, 2 } }, { M, { 3, 1 } } }
for _, p in ipairs(DOTS) do
  case('dot', shape_str(p[1]) .. ' . ' .. shape_str(p[2]), ins(n_(p[1]), n_(p[2])),
       function(a, b) return tgl.dot(a, b) end)
end
case('dot', 'wrt one side', ins(n_(M), n_({ 3, 4 })), function(a, b) return tgl.dot(a, b) end, { wrt = { 2 } })
case('dot', 'x . x\'', ins(n_(M)), function(a) return tgl.dot(a, a:transpose()) end)
case('batched_dot', '(2,3,4) . (2,4,2)', ins(n_(T3), n_({ 2, 4, 2 })), function(a, b) return tgl.batched_dot(a, b) end)
case('batched_dot', '(2,3) . (2,3)', ins(n_(M), n_(M)), function(a, b) return tgl.batched_dot(a, b) end)

-- gemm, gemv, ger: built by the rewrites; here through the raw apply
local function raw(op, args, p) return G.apply(op, op, args, #args, p) end
case('gemm', '0.7 a.b - 1.3 c', ins(n_(M), n_({ 3, 4 }), n_({ 2, 4 })),
     function(a, b, c) return raw('gemm', { a, b, c }, { f = { 0.7, -1.3 } }) end)
case('gemm', 'a.b (no c)', ins(n_(M), n_({ 3, 4 })), function(a, b) return raw('gemm', { a, b }, { f = { 1.5, 0 } }) end)
case('gemm', 'c a broadcast row', ins(n_(M), n_({ 3, 4 }), n_({ 1, 4 })),
     function(a, b, c) return raw('gemm', { a, b, c }, { f = { -0.5, 2 } }) end)
case('gemv', '0.7 A.x - 1.3 c', ins(n_(M), n_(VEC), n_({ 2 })),
     function(a, x, c) return raw('gemv', { a, x, c }, { f = { 0.7, -1.3 } }) end)
case('gemv', 'A.x (no c)', ins(n_(M), n_(VEC)), function(a, x) return raw('gemv', { a, x }, { f = { 2, 0 } }) end)
case('ger', 'A + 0.7 x y\'', ins(n_(M), n_({ 2 }), n_(VEC)),
     function(a, x, y) return raw('ger', { a, x, y }, { f = { 0.7 } }) end)
case('ger', 'A a broadcast row', ins(n_(ROW), n_({ 2 }), n_(VEC)),
     function(a, x, y) return raw('ger', { a, x, y }, { f = { -1.5 } }) end)

-- shape ops
case('dimshuffle', 'a permutation of a 3-d tensor', ins(n_(T3)), function(x) return tgl.dimshuffle(x, { 3, 1, 2 }) end)
case('dimshuffle', "adding axes {'x', 2, 'x', 1}", ins(n_(M)), function(x) return tgl.dimshuffle(x, { 'x', 2, 'x', 1 }) end)
case('dimshuffle', 'dropping a broadcastable axis', ins(n_({ 2, 1, 3 })), function(x) return tgl.dimshuffle(x, { 3, 1 }) end)
case('dimshuffle', 'transpose inside a product', ins(n_(M), n_(M)),
     function(x, y) return tgl.mul(tgl.transpose(x), tgl.tanh(tgl.transpose(y))) end)
case('reshape', '(2,3,4) -> (6,4)', ins(n_(T3)), function(x) return tgl.reshape(x, 6, 4) end)
case('reshape', '(2,3) -> (-1)', ins(n_(M)), function(x) return tgl.reshape(x, -1) end)
case('reshape', 'flatten(x, 2)', ins(n_(T3)), function(x) return tgl.flatten(x, 2) end)
case('reshape', 'to 0-d', ins(n_({ 1, 1 })), function(x) return tgl.reshape(x, {}) end)
case('shape', "reshape to another input's shape (symbolic)", ins(n_(M), n_({ 3, 2 })),
     function(x, y) return tgl.add(tgl.reshape(x, tgl.shape(y), 2), y) end)
no_tangent('shape', 'shape(x)', ins(n_(M)), function(x) return tgl.shape(x) end)
case('concatenate', 'axis 1, three inputs', ins(n_(M), n_({ 1, 3 }), n_({ 3, 3 })),
     function(a, b, c) return tgl.concatenate({ a, b, c }, 1) end)
case('concatenate', 'axis 2', ins(n_(M), n_(COL)), function(a, b) return tgl.concatenate({ a, b }, 2) end)
case('concatenate', 'one input twice and a wrt left out', ins(n_(M), n_(M)),
     function(a, b) return tgl.concatenate({ a, b, a }, 2) end, { wrt = { 1 } })
case('concatenate', 'stack of vectors', ins(n_(VEC), n_(VEC)), function(a, b) return tgl.stack({ a, b }, 2) end)
local function fill_like(x, value)
  return raw('fill_like', { x }, { i = { G.DTYPE.float64 }, f = { value } })
end
case('fill_like', 'fill_like(x, 2.5)', ins(n_(M)), function(x) return fill_like(x, 2.5) end,
     { zero = true, ignore = true })
case('fill_like', 'x * fill_like(x, 2.5)', ins(n_(M)), function(x) return tgl.mul(x, fill_like(x, 2.5)) end)
case('arange', 'x * arange(1, size(x, 2))', ins(n_(M)),
     function(x) return tgl.mul(x, tgl.cast(tgl.arange(1, tgl.size(x, 2)), 'float64')) end)
no_tangent('arange', 'arange(1, size(x, 1))', ins(n_(M)), function(x) return tgl.arange(1, tgl.size(x, 1)) end)

-- indexing
case('subtensor', 'x[2]', ins(n_(T3)), function(x) return x[2] end)
case('subtensor', 'x[{{1,2}, {2,3}}]', ins(n_(T3)), function(x) return x[{ { 1, 2 }, { 2, 3 } }] end)
case('subtensor', 'x[{{}, {4,1,-2}}] (negative step)', ins(n_({ 2, 5 })), function(x) return x[{ {}, { 4, 1, -2 } }] end)
case('subtensor', 'x[{2, {}, -1}] (0-d result along with a 1-d)', ins(n_(T3)), function(x) return x[{ 2, {}, -1 }] end)
case('subtensor', 'x[i] with a symbolic i', ins(n_(T3), const_(tgl.full({}, 2, { dtype = 'int64' }))),
     function(x, i) return x[i] end)
case('subtensor', 'x[{{i, -1}}] with a symbolic bound', ins(n_({ 4, 2 }), const_(tgl.full({}, 2, { dtype = 'int64' }))),
     function(x, i) return x[{ { i, -1 } }] end)
case('inc_subtensor', 'set_subtensor(x[{{1,2}, 2}], y)', ins(n_({ 3, 3 }), n_({ 2 })),
     function(x, y) return tgl.set_subtensor(x[{ { 1, 2 }, 2 }], y) end)
case('inc_subtensor', 'inc_subtensor(x[{2}], y), y a broadcast row', ins(n_(T3), n_({ 1, 4 })),
     function(x, y) return tgl.inc_subtensor(x[2], y) end)
case('inc_subtensor', 'inc_subtensor with a 0-d y', ins(n_(M), n_(SC)),
     function(x, y) return tgl.inc_subtensor(x[{ {}, { 2, 3 } }], y) end)
case('inc_subtensor', 'set_subtensor wrt y only', ins(n_(M), n_(VEC)),
     function(x, y) return tgl.set_subtensor(x[1], y) end, { wrt = { 2 } })
case('adv_subtensor', 'x[{idx}] with a repeated index', ins(n_({ 4, 3 }), const_(INT({ 3, 1, 3 }))),
     function(x, i) return x[{ i }] end)
case('adv_subtensor', 'x[{{}, idx}]', ins(n_({ 2, 4 }), const_(INT({ 4, 2 }))), function(x, i) return x[{ {}, i }] end)
case('adv_subtensor', 'x[{rows, cols}] (pairs)', ins(n_({ 3, 4 }), const_(INT({ 1, 3, 2 })), const_(INT({ 4, 4, 1 }))),
     function(x, i, j) return x[{ i, j }] end)
case('adv_inc_subtensor', 'inc_subtensor(x[{idx}], y) with a repeated index', ins(n_({ 4, 3 }), n_({ 3, 3 }), const_(INT({ 2, 4, 2 }))),
     function(x, y, i) return tgl.inc_subtensor(x[{ i }], y) end)
case('adv_inc_subtensor', 'set_subtensor(x[{idx}], y)', ins(n_({ 4, 3 }), n_({ 2, 3 }), const_(INT({ 4, 1 }))),
     function(x, y, i) return tgl.set_subtensor(x[{ i }], y) end)
case('adv_inc_subtensor', 'inc_subtensor(x[{{}, idx}], y), y a broadcast column', ins(n_({ 2, 4 }), n_({ 2, 1 }), const_(INT({ 1, 3 }))),
     function(x, y, i) return tgl.inc_subtensor(x[{ {}, i }], y) end)

-- nnet
for _, s in ipairs({ M, T3, ROW }) do
  for _, name in ipairs({ 'softmax', 'log_softmax' }) do
    case(name, shape_str(s) .. ', last axis', ins(function() return rnd(s, U(-2, 2)) end), function(x) return tgl[name](x) end)
  end
end
for _, name in ipairs({ 'softmax', 'log_softmax' }) do
  case(name, 'axis 1', ins(n_(T3)), function(x) return tgl[name](x, 1) end)
  case(name, 'logits of +-30', ins(function() return rnd(M, S(25, 30)) end), function(x) return tgl[name](x) end)
end
case('one_hot', 'x * one_hot(labels, 3)', ins(n_(M), const_(INT({ 3, 1 }))),
     function(x, y) return tgl.mul(x, tgl.one_hot(y, 3, 'float64')) end)
no_tangent('one_hot', 'one_hot(labels from x > 0)', ins(sg_(VEC)),
           function(x) return tgl.one_hot(tgl.add(tgl.cast(tgl.gt(x, 0), 'int64'), 1), 2, 'float64') end)
case('softmax_crossentropy', 'logits (4,3), labels', ins(function() return rnd({ 4, 3 }, U(-2, 2)) end, const_(INT({ 1, 3, 3, 2 }))),
     function(x, y) return raw('softmax_crossentropy', { x, y }) end)
case('softmax_crossentropy', 'a broadcast row of logits', ins(n_(ROW), const_(INT({ 2 }))),
     function(x, y) return raw('softmax_crossentropy', { x, y }) end)
case('softmax_crossentropy_dx', 'dy (4), logits (4,3), labels',
     ins(function() return rnd({ 4 }, U(-2, 2)) end, function() return rnd({ 4, 3 }, U(-2, 2)) end,
         const_(INT({ 1, 3, 3, 2 }))),
     function(d, x, y) return raw('softmax_crossentropy_dx', { d, x, y }) end)
case('softmax_crossentropy_dx', 'the gradient of mean(categorical_crossentropy(softmax(x), y))',
     ins(n_({ 4, 3 }), const_(INT({ 2, 1, 3, 3 }))),
     function(x, y) return tgl.grad(tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x), y)), x) end)
case('softmax_crossentropy', 'categorical_crossentropy(softmax(x), y), rewritten',
     ins(n_({ 4, 3 }), const_(INT({ 2, 1, 3, 3 }))),
     function(x, y) return tgl.optimize(tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x), y))) end)
-- class_xent (tgl.lm): rows h (3,4), classes Wc (3,4), gathered word rows
-- Ws (5,4) of which rows 1-2 belong to row 1, 3 to row 2, 4-5 to row 3
case('class_xent', 'h, Wc, Ws; three rows, five word rows',
     ins(n_({ 3, 4 }), n_({ 3, 4 }), n_({ 5, 4 }), const_(INT({ 1, 3, 2 })), const_(INT({ 2, 3, 5 })),
         const_(INT({ 1, 1, 2, 3, 3 }))),
     function(h, wc, ws, c, t, o) return raw('class_xent', { h, wc, ws, c, t, o }) end)
case('class_xent', 'one row (batch 1), word rows out of order',
     ins(n_({ 1, 4 }), n_({ 2, 4 }), n_({ 3, 4 }), const_(INT({ 2 })), const_(INT({ 1 })),
         const_(INT({ 1, 1, 1 }))),
     function(h, wc, ws, c, t, o) return raw('class_xent', { h, wc, ws, c, t, o }) end)
-- pooling (random inputs: ties, where max pool is not differentiable,
-- have probability 0); P: kernel 3, stride 2, padding 1, ceil mode on a
-- 5x6 plane (pooled 3x4: ceil mode adds a last column, its window half in the padding)
local P = { i = { 3, 3, 2, 2, 1, 1 }, flags = 1 }
case('max_pool2d', '(2,3,5,6), kernel 3, stride 2, padding 1, ceil', ins(n_({ 2, 3, 5, 6 })),
     function(x) return tgl.max_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true }) end)
case('max_pool2d', '(3,4,4), kernel {2,1}', ins(n_({ 3, 4, 4 })),
     function(x) return tgl.max_pool2d(x, { kernel = { 2, 1 } }) end)
case('avg_pool2d', '(2,3,5,6), kernel 3, stride 2, padding 1, ceil', ins(n_({ 2, 3, 5, 6 })),
     function(x) return tgl.avg_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true }) end)
case('avg_pool2d', '(3,5,6), count_include_pad false', ins(n_({ 3, 5, 6 })),
     function(x) return tgl.avg_pool2d(x, { kernel = 3, stride = 2, padding = 1, count_include_pad = false }) end)
case('max_pool2d_grad', 'x (2,3,5,6), gout (2,3,3,4)', ins(n_({ 2, 3, 5, 6 }), n_({ 2, 3, 3, 4 })),
     function(x, g) return raw('max_pool2d_grad', { x, g }, P) end)
case('avg_pool2d_grad', 'x (2,3,5,6), gout (2,3,3,4)', ins(n_({ 2, 3, 5, 6 }), n_({ 2, 3, 3, 4 })),
     function(x, g) return raw('avg_pool2d_grad', { x, g }, { i = P.i, flags = 3 }) end)
case('max_pool2d_gather', 'x (3,5,6), h (3,5,6)', ins(n_({ 3, 5, 6 }), n_({ 3, 5, 6 })),
     function(x, h) return raw('max_pool2d_gather', { x, h }, P) end)

-- control
for _, c in ipairs({ 1, 0 }) do
  case('ifelse', ('condition %d'):format(c), ins(const_(tgl.full({}, c, { dtype = 'int64' })), n_(M), n_(M)),
       function(cond, a, b) return tgl.ifelse(cond, tgl.tanh(a), tgl.mul(b, b)) end)
  case('ifelse', ('condition %d, branches of different broadcasting'):format(c),
       ins(const_(tgl.full({}, c, { dtype = 'int64' })), n_(ROW), n_(M)),
       function(cond, a, b) return tgl.ifelse(cond, a, b) end)
end
case('ifelse', 'a condition computed from a float', ins(sg_(SC), n_(M), n_(M)),
     function(c, a, b) return tgl.ifelse(tgl.gt(c, 0), a, b) end, { wrt = { 2, 3 } })
case('ifelse', 'wrt a condition computed from a float', ins(sg_(SC), n_(M), n_(M)),
     function(c, a, b) return tgl.ifelse(tgl.gt(c, 0), a, b) end, { ignore = true })

-- rop_direction (what tgl.Rop puts in front of each direction): the
-- identity on its first input once that has the second's shape (a
-- broadcastable axis of size 1 broadcasts); the second is read for its
-- shape only, so its tangent does not pass through
case('rop_direction', 'tanh(rop_direction(x, y) * y)', ins(n_(M), n_(M)),
     function(x, y) return tgl.tanh(raw('rop_direction', { x, y }, { i = { 1, 0 } }) * y) end)
case('rop_direction', 'a broadcast row for a matrix', ins(n_(ROW), n_(M)),
     function(x, y) return tgl.tanh(raw('rop_direction', { x, y }, { i = { 2, 1 } }) * y) end)

-- conv2d and its pullback ops (bilinear; input 3 of the pullback ops is
-- read for its shape only, so Rop and the gradient are taken wrt 1 and 2)
local CONV_P = { i = { 2, 1, 1, 0, 1, 2, 2 } } -- stride {2,1}, padding {1,0}, dilation {1,2}, groups 2
case('conv2d', '(2,4,5,6) * (4,2,3,2), stride 2x1, padding 1x0, dilation 1x2, 2 groups',
     ins(n_({ 2, 4, 5, 6 }), n_({ 4, 2, 3, 2 })), function(x, w) return raw('conv2d', { x, w }, CONV_P) end)
case('conv2d', 'tgl.conv2d (2,3,4,4) * (2,3,3,3), padding 1', ins(n_({ 2, 3, 4, 4 }), n_({ 2, 3, 3, 3 })),
     function(x, w) return tgl.conv2d(x, w, { padding = 1 }) end)
case('conv2d_grad_input', 'g (2,4,3,4), w (4,2,3,2), x (2,4,5,6)',
     ins(n_({ 2, 4, 3, 4 }), n_({ 4, 2, 3, 2 }), n_({ 2, 4, 5, 6 })),
     function(g, w, x) return raw('conv2d_grad_input', { g, w, x }, CONV_P) end, { wrt = { 1, 2 } })
case('conv2d_grad_weight', 'x (2,4,5,6), g (2,4,3,4), w (4,2,3,2)',
     ins(n_({ 2, 4, 5, 6 }), n_({ 2, 4, 3, 4 }), n_({ 4, 2, 3, 2 })),
     function(x, g, w) return raw('conv2d_grad_weight', { x, g, w }, CONV_P) end, { wrt = { 1, 2 } })

-- batch normalisation: the training form (the batch's statistics: the
-- stats op and the normalisation chained), the evaluation form (mean and
-- var given), and the statistics alone (both outputs used)
case('batch_norm', 'tgl.batch_norm (4,3) with weight and bias', ins(n_({ 4, 3 }), n_({ 3 }), n_({ 3 })),
     function(x, w, b) return tgl.batch_norm(x, w, b) end)
case('batch_norm', 'tgl.batch_norm (2,3,2,3), no affine, eps 0.1', ins(n_({ 2, 3, 2, 3 })),
     function(x) return tgl.batch_norm(x, { eps = 0.1 }) end)
case('batch_norm', 'given mean and var (3,2,4), weight and bias',
     ins(n_({ 3, 2, 4 }), n_({ 2 }), pos_({ 2 }), n_({ 2 }), n_({ 2 })),
     function(x, m, v, w, b) return tgl.batch_norm(x, w, b, { mean = m, var = v }) end)
case('batch_norm_stats', '(3,2,4): mean * 2 + var^2', ins(n_({ 3, 2, 4 })),
     function(x) local m, v = tgl.batch_norm_stats(x); return m * 2 + v * v end)
case('batch_norm_stats', '(5,3): the variance alone', ins(n_({ 5, 3 })),
     function(x) local _, v = tgl.batch_norm_stats(x); return v end)
-- batch_norm_grad (built by batch_norm's pullback): its three outputs
-- (dx, sum g, sum g (x - mean)) combined, with and without the weight
local function bn_grad_out(args)
  local node = raw('batch_norm_grad', args, { f = { 0.01 } })
  local o = {}
  for k = 0, 2 do
    local out = ffi.new('tgl_node *[1]')
    assert(C.tgl_node_output(core.ctx, node.n, k, out) == 0)
    o[k + 1] = G.wrap_node(out[0])
  end
  return o[1] + (o[2] * 0.5 + o[3] * o[3]):dimshuffle { 'x', 1, 'x' }
end
case('batch_norm_grad', 'x, g (3,2,4), mean, var, weight',
     ins(n_({ 3, 2, 4 }), n_({ 3, 2, 4 }), n_({ 2 }), pos_({ 2 }), n_({ 2 })),
     function(x, g, m, v, w) return bn_grad_out({ x, g, m, v, w }) end)
case('batch_norm_grad', 'x, g (4,2,3), mean, var', ins(n_({ 4, 2, 3 }), n_({ 4, 2, 3 }), n_({ 2 }), pos_({ 2 })),
     function(x, g, m, v) return bn_grad_out({ x, g, m, v }) end)

-- allreduce: in this process (it has not joined a job) the identity; its
-- tangent and its pullback are allreduces of theirs
case('allreduce', "tgl.allreduce(tanh(x), 'sum')", ins(n_(M)),
     function(x) return tgl.allreduce(tgl.tanh(x), 'sum') end)
case('allreduce', "tgl.allreduce(x * y, {op = 'mean'})", ins(n_(M), n_(M)),
     function(x, y) return tgl.allreduce(x * y, { op = 'mean' }) end)

-- Internal ops: not built from Lua; how each is covered.
local INTERNAL = {
  allreduce_start = "built by the allreduce_buckets rewrite at compile time, after tgl.grad and "
    .. 'tgl.Rop have run (spec/dist_spec.lua, rewrite_spec.lua)',
  allreduce_wait = "built by the allreduce_buckets rewrite at compile time, after tgl.grad and "
    .. 'tgl.Rop have run (spec/dist_spec.lua, rewrite_spec.lua)',
  output = 'multi-output nodes: covered by the scan tests (scan results are outputs)',
  fused = 'built by the fuse stage from elementwise chains, not from Lua',
  scan = 'covered by "Rop through scan" below',
  class_xent_delta = "built only by class_xent's pullback, which Rop transposes (the class_xent "
    .. 'cases above); it has no pullback itself (second derivatives of class_xent are not '
    .. 'implemented, a clear error: spec/lm_spec.lua)',
  class_xent_sgd = "RNNLM's per-word output step (tgl.lm.class_xent_sgd), a training step and not "
    .. 'a function to differentiate: tgl.grad through it is a clear error '
    .. '(spec/lm_class_xent_sgd_spec.lua checks its values against a hand-written sequence)',
}

-- ---------------------------------------------------------------------------
-- running a case

local case_count = 0
local check_pullback

-- The gradient case of the same op: the pullback (tgl.grad of
-- sum(out * u), u random) against the same finite differences, through
-- <grad, v> = <u, J v>.  fd is J v (flat), y the output at xs.
check_pullback = function(c, vars, out, xs, wrt, va, fd, y, what)
  local ua = rnd(y:shape(), U(-1, 1))
  local wv = {}
  for k, i in ipairs(wrt) do wv[k] = vars[i] end
  local cost = tgl.sum(tgl.mul(tgl.cast(out, 'float64'), ua))
  local gs = tgl.grad(cost, wv, { disconnected = 'ignore' })
  local dot = nil
  for k, g in ipairs(gs) do
    local term = tgl.sum(tgl.mul(tgl.cast(g, 'float64'), va[k]))
    dot = dot and dot + term or term
  end
  local f = tgl.compile { inputs = vars, outputs = dot, name = 'pullback' }
  local got = f(unpack(xs)):get()
  local want, size = 0, 0
  local uf = flat(ua)
  for k = 1, #fd do
    want = want + uf[k] * fd[k]
    size = size + math.abs(uf[k] * fd[k])
  end
  local tol = c.tol or TOL
  assert(math.abs(got - want) <= tol * math.max(1, size),
         ('%s: the pullback gives <grad, v> = %.12g, finite differences <u, J v> = %.12g')
         :format(what, got, want))
end

-- Checks Rop(out, wrt, v) for one case, and the op's pullback
-- (check_pullback); returns nothing, raises on a mismatch (naming the case
-- and its seed).
local function run_case(op, c)
  case_count = case_count + 1
  local seed = c.seed or (1000 + case_count)
  math.randomseed(seed)
  local xs = c.inputs()
  local vars = {}
  for i, x in ipairs(xs) do vars[i] = var_like(x, 'x' .. i) end
  local out = c.build(unpack(vars))
  assert(ops_in(out)[op], ('case "%s" does not use %s'):format(c.desc, op))
  local wrt = c.wrt
  if not wrt then
    wrt = {}
    for i, x in ipairs(xs) do if is_float(x) then wrt[#wrt + 1] = i end end
  end
  -- v: arrays in every third case, variables otherwise; a single wrt
  -- passed without a table in every other case
  local as_arrays = case_count % 3 == 0
  local single = #wrt == 1 and case_count % 2 == 0
  local wv, va, vv = {}, {}, {}
  for k, i in ipairs(wrt) do
    wv[k] = vars[i]
    va[k] = rnd(xs[i]:shape(), U(-1, 1), xs[i].dtype)
    vv[k] = as_arrays and va[k] or var_like(va[k], 'v' .. k)
  end
  local r
  local ropts = c.ignore and { disconnected = 'ignore' } or nil
  if single then r = tgl.Rop(out, wv[1], vv[1], ropts) else r = tgl.Rop(out, wv, vv, ropts) end
  assert(tgl.is_variable(r), ('Rop gave a %s, not a variable'):format(type(r)))
  local inputs = {}
  for i, v in ipairs(vars) do inputs[i] = v end
  if not as_arrays then for k, v in ipairs(vv) do inputs[#inputs + 1] = v end end
  local f = tgl.compile { inputs = inputs, outputs = { out, r }, name = 'rop_' .. op }
  local function call(xs_)
    local args = {}
    for i, x in ipairs(xs_) do args[i] = x end
    if not as_arrays then for k, v in ipairs(va) do args[#args + 1] = v end end
    return f(unpack(args))
  end
  local y, jv = call(xs)
  assert.same(y:shape(), jv:shape(), 'Rop: shape')
  assert.equals(y.dtype, jv.dtype, 'Rop: dtype')
  local eps = c.eps or EPS
  local xp, xm = {}, {}
  for i, x in ipairs(xs) do xp[i], xm[i] = x, x end
  for k, i in ipairs(wrt) do
    xp[i] = axpy(xs[i], eps, va[k])
    xm[i] = axpy(xs[i], -eps, va[k])
  end
  local yp, ym = call(xp), call(xm)
  local fp, fm = flat(yp), flat(ym)
  local fd, biggest = {}, 0
  for k = 1, #fp do
    fd[k] = (fp[k] - fm[k]) / (2 * eps)
    biggest = math.max(biggest, math.abs(fd[k]))
  end
  local what = ('Rop of %s, %s (seed %d)'):format(op, c.desc, seed)
  if c.zero then
    assert(biggest <= 1e-5, what .. ": finite differences are not zero; the case is not on a flat part")
  else
    assert(biggest > 1e-3, what .. ': finite differences are all about zero; the case checks nothing')
  end
  assert_close(fd, jv, c.tol, what)
  check_pullback(c, vars, out, xs, wrt, va, fd, y, what)
end

-- What Rop gives for an integer or boolean output (doc/rop.md: integer and
-- boolean values carry no tangent; a result with no tangent is zeros of
-- its shape): zeros (false for booleans) of the output's shape and dtype,
-- with the default disconnected policy (the input is connected).
local function run_no_tangent(op, c)
  case_count = case_count + 1
  math.randomseed(2000 + case_count)
  local xs = c.inputs()
  local vars = {}
  for i, x in ipairs(xs) do vars[i] = var_like(x, 'x' .. i) end
  local out = c.build(unpack(vars))
  assert(ops_in(out)[op], ('case "%s" does not use %s'):format(c.desc, op))
  local v = N(xs[1]:shape())
  local r = tgl.Rop(out, vars[1], v)
  assert(tgl.is_variable(r), 'Rop of an integer output: expected a variable of zeros')
  assert.equals(out.dtype, r.dtype, 'Rop of an integer output: dtype')
  local f = tgl.compile { inputs = vars, outputs = { out, r } }
  local y, z = f(unpack(xs))
  assert.same(y:shape(), z:shape(), 'Rop of an integer output: shape')
  for k, e in ipairs(flat(z)) do
    assert(e == 0 or e == false,
           ('Rop of %s (%s): element %d is %s, expected 0'):format(op, c.desc, k, tostring(e)))
  end
end

-- ---------------------------------------------------------------------------

describe('tgl.Rop over the op catalog', function()
  it('every op of the catalog has a Rop case and a gradient case (or is internal and covered elsewhere)', function()
    local missing = {}
    local n = C.tgl_op_count()
    assert(n > 60, 'the catalog has only ' .. n .. ' ops')
    local names = {}
    for i = 0, n - 1 do
      local name = ffi.string(C.tgl_op_name(i))
      names[name] = true
      if not CASES[name] and not INTERNAL[name] then missing[#missing + 1] = name end
    end
    assert(#missing == 0, 'ops with no Rop and gradient case in spec/rop_spec.lua: ' .. table.concat(missing, ', '))
    -- and no case names an op the catalog lacks
    for name in pairs(CASES) do assert(names[name], 'a case for an op the catalog lacks: ' .. name) end
    for name in pairs(NO_TANGENT) do assert(names[name], 'a case for an op the catalog lacks: ' .. name) end
  end)

  local order = {}
  for name in pairs(CASES) do order[#order + 1] = name end
  table.sort(order, function(a, b) return C.tgl_op_lookup(a) < C.tgl_op_lookup(b) end)
  for _, op in ipairs(order) do
    it(op .. ' matches finite differences (' .. #CASES[op] .. ' cases)', function()
      for _, c in ipairs(CASES[op]) do run_case(op, c) end
    end)
  end

  local norder = {}
  for name in pairs(NO_TANGENT) do norder[#norder + 1] = name end
  table.sort(norder)
  for _, op in ipairs(norder) do
    it(op .. ': an integer or boolean output has a zero tangent', function()
      for _, c in ipairs(NO_TANGENT[op]) do run_no_tangent(op, c) end
    end)
  end
end)

-- ---------------------------------------------------------------------------
-- Rop through scan

-- Rop of outs = build(vars) wrt the inputs listed in wrt against finite
-- differences; xs arrays.
local function check_rop(xs, build, wrt, what, tol)
  local vars = {}
  for i, x in ipairs(xs) do vars[i] = var_like(x, 'x' .. i) end
  local out = build(unpack(vars))
  local wv, va, vv = {}, {}, {}
  for k, i in ipairs(wrt) do
    wv[k] = vars[i]
    va[k] = N(xs[i]:shape())
    vv[k] = var_like(va[k], 'v' .. k)
  end
  local r = tgl.Rop(out, wv, vv)
  local inputs = {}
  for i, v in ipairs(vars) do inputs[i] = v end
  for _, v in ipairs(vv) do inputs[#inputs + 1] = v end
  local f = tgl.compile { inputs = inputs, outputs = { out, r } }
  local function call(p)
    local args = {}
    for i, x in ipairs(p) do args[i] = x end
    for _, v in ipairs(va) do args[#args + 1] = v end
    return f(unpack(args))
  end
  local y, jv = call(xs)
  assert.same(y:shape(), jv:shape(), what .. ': shape')
  local xp, xm = {}, {}
  for i, x in ipairs(xs) do xp[i], xm[i] = x, x end
  for k, i in ipairs(wrt) do
    xp[i] = axpy(xs[i], EPS, va[k])
    xm[i] = axpy(xs[i], -EPS, va[k])
  end
  local fp, fm = flat((call(xp))), flat((call(xm)))
  local fd = {}
  for k = 1, #fp do fd[k] = (fp[k] - fm[k]) / (2 * EPS) end
  assert_close(fd, jv, tol, what)
  return out, r
end

describe('tgl.Rop through scan', function()
  local T, B, I, H = 5, 2, 3, 4
  local function elman(gb)
    return function(x, h0, W, Uw, b)
      return tgl.scan { fn = function(x_t, h) return tgl.tanh(tgl.dot(x_t, W) + tgl.dot(h, Uw) + b) end,
                        sequences = { x }, outputs_info = { h0 }, go_backwards = gb, name = 'elman' }
    end
  end
  local function data()
    math.randomseed(77)
    return { N({ T, B, I }), N({ B, H }), rnd({ I, H }, U(-0.7, 0.7)), rnd({ H, H }, U(-0.7, 0.7)), N({ H }) }
  end

  it('an Elman recurrence, wrt the sequence, the initial state and a weight', function()
    local xs = data()
    check_rop(xs, elman(false), { 1 }, 'wrt the sequence')
    check_rop(xs, elman(false), { 2 }, 'wrt the initial state')
    check_rop(xs, elman(false), { 4 }, 'wrt the recurrent weight')
    check_rop(xs, elman(false), { 1, 2, 3, 4, 5 }, 'wrt everything at once')
  end)

  it('go_backwards', function()
    check_rop(data(), elman(true), { 1, 2, 3, 4, 5 }, 'go_backwards')
  end)

  it('of the last state only, and of a cost of the states', function()
    local xs = data()
    check_rop(xs, function(...) return elman(false)(...)[T] end, { 1, 3, 4 }, 'last state')
    check_rop(xs, function(...) return tgl.sum(tgl.sqr(elman(false)(...))) end, { 1, 2, 4 }, 'a cost')
  end)

  it('several taps on the sequence and on the state, two outputs', function()
    math.randomseed(78)
    local xs = { N({ T, B, I }), N({ 2, B, H }), rnd({ I, H }, U(-0.6, 0.6)), rnd({ I, H }, U(-0.6, 0.6)),
                 rnd({ H, H }, U(-0.5, 0.5)), rnd({ H, H }, U(-0.5, 0.5)) }
    local function build(x, H0, W1, W2, U1, U2)
      local outs = tgl.scan {
        fn = function(x_tm1, x_t, h_tm2, h_tm1)
          local h = tgl.tanh(tgl.dot(x_tm1, W1) + tgl.dot(x_t, W2) + tgl.dot(h_tm2, U1) + tgl.dot(h_tm1, U2))
          return { h, tgl.sum(tgl.sqr(h), 2) }
        end,
        sequences = { { input = x, taps = { -1, 0 } } },
        outputs_info = { { initial = H0, taps = { -2, -1 } }, false },
        name = 'taps',
      }
      local hs, ys = outs[1], outs[2]
      return tgl.concatenate({ tgl.flatten(hs), tgl.flatten(ys) })
    end
    check_rop(xs, build, { 1, 2, 3, 4, 5, 6 }, 'taps')
    check_rop(xs, build, { 2 }, 'taps, wrt the initial steps only')
  end)

  it('a non-sequence used inside the body and outside', function()
    math.randomseed(79)
    local xs = { N({ T, H }), N({ H }), rnd({ H, H }, U(-0.6, 0.6)) }
    check_rop(xs, function(x, h0, W)
      local hs = tgl.scan { fn = function(x_t, h) return tgl.sin(x_t + tgl.dot(h, W)) end,
                            sequences = { x }, outputs_info = { h0 } }
      return tgl.dot(hs, W)
    end, { 1, 2, 3 }, 'non-sequence')
  end)
end)

describe('tgl.Rop of an optimized graph (the internal ops)', function()
  it('fused elementwise groups and gemm, as tgl.optimize leaves them', function()
    math.randomseed(80)
    local xs = { N({ 3, 4 }), N({ 4, 2 }) }
    local seen
    check_rop(xs, function(x, W)
      local o = tgl.optimize(tgl.tanh(tgl.dot(x, W) * 2 + 1) * tgl.exp(tgl.sum(x[{ {}, { 1, 2 } }])))
      seen = ops_in(o)
      return o
    end, { 1, 2 }, 'optimized graph')
    assert(seen.fused and seen.gemm, 'the optimized graph has no fused group or no gemm')
  end)
end)

describe('tgl.Rop forms', function()
  it('a table of outputs gives a table of tangents, each matching finite differences', function()
    math.randomseed(81)
    local xa, Wa = N(M), N({ 3, 2 })
    local x, W = var_like(xa, 'x'), var_like(Wa, 'W')
    local f1, f2 = tgl.tanh(tgl.dot(x, W)), tgl.sum(tgl.sqr(x), 2)
    local vx, vW = N(M), N({ 3, 2 })
    local rs = tgl.Rop({ f1, f2 }, { x, W }, { vx, vW })
    assert(type(rs) == 'table' and #rs == 2, 'a table of f gives a table')
    local f = tgl.compile { inputs = { x, W }, outputs = { f1, f2, rs[1], rs[2] } }
    local _, _, r1, r2 = f(xa, Wa)
    local p1, p2 = f(axpy(xa, EPS, vx), axpy(Wa, EPS, vW))
    local m1, m2 = f(axpy(xa, -EPS, vx), axpy(Wa, -EPS, vW))
    local fd1, fd2 = tgl.div(tgl.sub(p1, m1), 2 * EPS), tgl.div(tgl.sub(p2, m2), 2 * EPS)
    assert_close(fd1, r1, 1e-6, 'Rop of output 1')
    assert_close(fd2, r2, 1e-6, 'Rop of output 2')
  end)

  it('float32: Rop of a float32 graph is float32 and close to float64 finite differences', function()
    math.randomseed(82)
    local xa, Wa, va = N(M), N({ 3, 2 }), N(M)
    local x, W, v = tgl.fmatrix('x'), tgl.fmatrix('W'), tgl.fmatrix('v')
    local r = tgl.Rop(tgl.softmax(tgl.tanh(tgl.dot(x, W))), x, v)
    assert.equals('float32', r.dtype)
    local got = tgl.compile { inputs = { x, W, v }, outputs = r }(xa:astype('float32'), Wa:astype('float32'),
                                                                 va:astype('float32'))
    local x64, W64 = tgl.dmatrix(), tgl.dmatrix()
    local f = tgl.compile { inputs = { x64, W64 }, outputs = tgl.softmax(tgl.tanh(tgl.dot(x64, W64))) }
    local fd = tgl.div(tgl.sub(f(axpy(xa, EPS, va), Wa), f(axpy(xa, -EPS, va), Wa)), 2 * EPS)
    assert_close(fd, got, 1e-5, 'float32 Rop')
  end)
end)

describe('tgl.hessian_vector_product through scan', function()
  it('of a cost of an Elman recurrence (the pushforward of a backward scan) matches finite differences of the gradient', function()
    math.randomseed(83)
    local xa, h0a, Wa, Ua = N({ 4, 2, 3 }), N({ 2, 3 }), rnd({ 3, 3 }, U(-0.7, 0.7)), rnd({ 3, 3 }, U(-0.7, 0.7))
    local x, h0, W, Uw = var_like(xa, 'x'), var_like(h0a, 'h0'), var_like(Wa, 'W'), var_like(Ua, 'U')
    local hs = tgl.scan { fn = function(x_t, h) return tgl.tanh(tgl.dot(x_t, W) + tgl.dot(h, Uw)) end,
                          sequences = { x }, outputs_info = { h0 } }
    local cost = tgl.sum(tgl.sqr(hs)) + tgl.sum(hs[-1])
    local vW, vU = N({ 3, 3 }), N({ 3, 3 })
    local hv = tgl.hessian_vector_product(cost, { W, Uw }, { vW, vU })
    local got = { tgl.compile { inputs = { x, h0, W, Uw }, outputs = hv }(xa, h0a, Wa, Ua) }
    local g = tgl.compile { inputs = { x, h0, W, Uw }, outputs = tgl.grad(cost, { W, Uw }) }
    local gp = { g(xa, h0a, axpy(Wa, EPS, vW), axpy(Ua, EPS, vU)) }
    local gm = { g(xa, h0a, axpy(Wa, -EPS, vW), axpy(Ua, -EPS, vU)) }
    for i = 1, 2 do
      assert_close(tgl.div(tgl.sub(gp[i], gm[i]), 2 * EPS), got[i], 1e-6, 'H v through scan, parameter ' .. i)
    end
  end)
end)

-- ---------------------------------------------------------------------------
-- Lop

-- u' J by finite differences: fn is compiled with inputs xs and outputs
-- fs (a list); for input i of wrt, d/dx_k sum_j <u_j, f_j> for every k.
local function fd_lop(fn, xs, wrt, us)
  local res = {}
  for r, i in ipairs(wrt) do
    local x = xs[i]:clone()
    local fx = x:reshape(-1)
    local col = {}
    for k = 1, fx:nelement() do
      local v0 = fx:get(k)
      local args = {}
      for j, a in ipairs(xs) do args[j] = a end
      args[i] = x
      fx:set(v0 + EPS, k)
      local fp = { fn(unpack(args)) }
      fx:set(v0 - EPS, k)
      local fm = { fn(unpack(args)) }
      fx:set(v0, k)
      local s = 0
      for j, u in ipairs(us) do
        local a, b, w = flat(fp[j]), flat(fm[j]), flat(u)
        for e = 1, #w do s = s + w[e] * (a[e] - b[e]) / (2 * EPS) end
      end
      col[k] = s
    end
    res[r] = col
  end
  return res
end

describe('tgl.Lop', function()
  it("matches u' J from a finite-difference Jacobian, one f and one wrt", function()
    math.randomseed(90)
    local xa, Wa, ua = N(M), N({ 3, 2 }), N({ 2, 2 })
    local x, W = var_like(xa, 'x'), var_like(Wa, 'W')
    local f = tgl.tanh(tgl.dot(x, W))
    local u = var_like(ua, 'u')
    local l = tgl.Lop(f, W, u)
    assert(tgl.is_variable(l), 'a single wrt gives one variable')
    local got = tgl.compile { inputs = { x, W, u }, outputs = l }(xa, Wa, ua)
    assert.same({ 3, 2 }, got:shape())
    local fn = tgl.compile { inputs = { x, W }, outputs = f }
    assert_close(fd_lop(fn, { xa, Wa }, { 2 }, { ua })[1], got, 1e-6, 'Lop wrt W')
  end)

  it('tables on both sides: two outputs, two wrt; u as arrays', function()
    math.randomseed(91)
    local xa, Wa = N(M), N({ 3, 2 })
    local x, W = var_like(xa, 'x'), var_like(Wa, 'W')
    local f1, f2 = tgl.tanh(tgl.dot(x, W)), tgl.sum(tgl.sqr(x), 2)
    local u1, u2 = N({ 2, 2 }), N({ 2 })
    local ls = tgl.Lop({ f1, f2 }, { x, W }, { u1, u2 })
    assert(type(ls) == 'table' and #ls == 2, 'a table of wrt gives a table')
    local gx, gW = tgl.compile { inputs = { x, W }, outputs = ls }(xa, Wa)
    assert.same(M, gx:shape())
    assert.same({ 3, 2 }, gW:shape())
    local fn = tgl.compile { inputs = { x, W }, outputs = { f1, f2 } }
    local want = fd_lop(fn, { xa, Wa }, { 1, 2 }, { u1, u2 })
    assert_close(want[1], gx, 1e-6, 'Lop wrt x')
    assert_close(want[2], gW, 1e-6, 'Lop wrt W')
  end)

  it('a 3-d output through softmax and a reduction, wrt a broadcast row', function()
    math.randomseed(92)
    local xa, ba, ua = N(T3), N({ 1, 4 }), N({ 2, 3 })
    local x, b, u = var_like(xa, 'x'), var_like(ba, 'b'), var_like(ua, 'u')
    local f = tgl.max(tgl.softmax(x + b), 3)
    local gb = tgl.compile { inputs = { x, b, u }, outputs = tgl.Lop(f, b, u) }(xa, ba, ua)
    assert.same({ 1, 4 }, gb:shape())
    local fn = tgl.compile { inputs = { x, b }, outputs = f }
    assert_close(fd_lop(fn, { xa, ba }, { 2 }, { ua })[1], gb, 1e-6, 'Lop wrt b')
  end)
end)

-- ---------------------------------------------------------------------------
-- Gauss-Newton and Hessian-vector products

-- A 3-5-4 tanh net on 6 rows, float64: logits (6, 4).
local function small_net()
  math.randomseed(100)
  local P = { rnd({ 3, 5 }, U(-1, 1)), rnd({ 5 }, U(-0.5, 0.5)), rnd({ 5, 4 }, U(-1, 1)), rnd({ 4 }, U(-0.5, 0.5)) }
  local xa = N({ 6, 3 })
  local vars = {}
  for i, p in ipairs(P) do vars[i] = var_like(p, 'p' .. i) end
  local out = tgl.dot(tgl.tanh(tgl.dot(tgl.constant(xa), vars[1]) + vars[2]), vars[3]) + vars[4]
  local vs = {}
  for i, p in ipairs(P) do vs[i] = N(p:shape()) end
  return P, vars, out, vs
end

-- J' (H_L (J v)) with J by finite differences; hl(w, y) takes and gives
-- flat Lua lists (y: the outputs at P).
local function explicit_gn(P, vars, out, vs, hl)
  local fn = tgl.compile { inputs = vars, outputs = out }
  local y = flat(fn(unpack(P)))
  -- columns of J, one per parameter element
  local cols, owner = {}, {}
  for i, p in ipairs(P) do
    local fx = p:reshape(-1)
    for k = 1, fx:nelement() do
      local v0 = fx:get(k)
      fx:set(v0 + EPS, k)
      local a = flat(fn(unpack(P)))
      fx:set(v0 - EPS, k)
      local b = flat(fn(unpack(P)))
      fx:set(v0, k)
      local col = {}
      for e = 1, #a do col[e] = (a[e] - b[e]) / (2 * EPS) end
      cols[#cols + 1] = col
      owner[#owner + 1] = { i, k }
    end
  end
  local jv = {}
  for e = 1, #y do jv[e] = 0 end
  local vflat = {}
  for i, v in ipairs(vs) do vflat[i] = flat(v) end
  for c, col in ipairs(cols) do
    local vc = vflat[owner[c][1]][owner[c][2]]
    for e = 1, #y do jv[e] = jv[e] + col[e] * vc end
  end
  local hw = hl(jv, y)
  local res = {}
  for i = 1, #P do res[i] = {} end
  for c, col in ipairs(cols) do
    local s = 0
    for e = 1, #y do s = s + col[e] * hw[e] end
    res[owner[c][1]][owner[c][2]] = s
  end
  return res
end

describe('tgl.gauss_newton_product', function()
  local rows, classes = 6, 4

  local function check(loss, hl, what)
    local P, vars, out, vs = small_net()
    local vvars = {}
    for i, v in ipairs(vs) do vvars[i] = var_like(v, 'v' .. i) end
    local gv = tgl.gauss_newton_product(out, vars, vvars, loss)
    assert(type(gv) == 'table' and #gv == #vars, what .. ': a table of params gives a table')
    local ins = {}
    for i, v in ipairs(vars) do ins[#ins + 1] = v end
    for i, v in ipairs(vvars) do ins[#ins + 1] = v end
    local args = {}
    for i, p in ipairs(P) do args[#args + 1] = p end
    for i, v in ipairs(vs) do args[#args + 1] = v end
    local got = { tgl.compile { inputs = ins, outputs = gv }(unpack(args)) }
    local want = explicit_gn(P, vars, out, vs, hl)
    for i = 1, #P do
      assert.same(P[i]:shape(), got[i]:shape(), what .. ': shape of product ' .. i)
      assert_close(want[i], got[i], 1e-6, ('%s: product for parameter %d'):format(what, i))
    end
  end

  it("'softmax_crossentropy' (mean over rows) matches J' H_L J v formed explicitly", function()
    check('softmax_crossentropy', function(w, y)
      -- per row: (diag(p) - p p') w / rows
      local r = {}
      for n = 0, rows - 1 do
        local m, s = -math.huge, 0
        for k = 1, classes do m = math.max(m, y[n * classes + k]) end
        local p = {}
        for k = 1, classes do p[k] = math.exp(y[n * classes + k] - m); s = s + p[k] end
        local pw = 0
        for k = 1, classes do p[k] = p[k] / s; pw = pw + p[k] * w[n * classes + k] end
        for k = 1, classes do r[n * classes + k] = (p[k] * w[n * classes + k] - p[k] * pw) / rows end
      end
      return r
    end, 'softmax_crossentropy')
  end)

  it("'mse' (mean of squares) matches J' (2/n) J v", function()
    check('mse', function(w)
      local r = {}
      for e = 1, #w do r[e] = 2 * w[e] / (rows * classes) end
      return r
    end, 'mse')
  end)

  it('a loss given as a function returning H_L w', function()
    check(function(o, w) return tgl.mul(w, 3) end, function(w)
      local r = {}
      for e = 1, #w do r[e] = 3 * w[e] end
      return r
    end, 'function loss')
  end)

  it('v as arrays, one parameter', function()
    local P, vars, out, vs = small_net()
    local gv = tgl.gauss_newton_product(out, vars[3], vs[3], 'mse')
    assert(tgl.is_variable(gv), 'a single param gives one variable')
    local got = tgl.compile { inputs = vars, outputs = gv }(unpack(P))
    local zero = {}
    for i, p in ipairs(P) do zero[i] = i == 3 and vs[3] or tgl.zeros(p:shape(), { dtype = 'float64' }) end
    local want = explicit_gn(P, vars, out, zero, function(w)
      local r = {}
      for e = 1, #w do r[e] = 2 * w[e] / (rows * classes) end
      return r
    end)
    assert_close(want[3], got, 1e-6, 'one parameter')
  end)
end)

describe('tgl.hessian_vector_product', function()
  it('matches tgl.hessian times v, for a vector and for a matrix', function()
    math.randomseed(110)
    local xa = N({ 4, 3 })
    local wa, Wa = N({ 3 }), N({ 3, 2 })
    local w, W = var_like(wa, 'w'), var_like(Wa, 'W')
    local cost1 = tgl.sum(tgl.sqr(tgl.tanh(tgl.dot(tgl.constant(xa), w)))) + tgl.sum(tgl.pow(w, 3))
    local cost2 = tgl.sum(tgl.log_softmax(tgl.dot(tgl.constant(xa), W)) * tgl.constant(N({ 4, 2 })))
    for _, cse in ipairs({ { cost1, w, wa, 3 }, { cost2, W, Wa, 6 } }) do
      local cost, p, pa, n = unpack(cse)
      local va = N(pa:shape())
      local vv = var_like(va, 'v')
      local hv = tgl.hessian_vector_product(cost, p, vv)
      assert(tgl.is_variable(hv), 'a single param gives one variable')
      local got, Hm = tgl.compile { inputs = { p, vv }, outputs = { hv, tgl.hessian(cost, p) } }(pa, va)
      assert.same(pa:shape(), got:shape())
      local Hf, vf = flat(Hm), flat(va)
      local want = {}
      for i = 1, n do
        local s = 0
        for j = 1, n do s = s + Hf[(i - 1) * n + j] * vf[j] end
        want[i] = s
      end
      assert_close(want, got, 1e-9, 'H v for a ' .. p.ndim .. '-d parameter')
    end
  end)

  it('a table of parameters (cross terms included) matches finite differences of the gradient', function()
    local P, vars, out, vs = small_net()
    local cost = tgl.mean(tgl.sqr(out))
    local hv = tgl.hessian_vector_product(cost, vars, vs)
    assert(type(hv) == 'table' and #hv == #vars)
    local got = { tgl.compile { inputs = vars, outputs = hv }(unpack(P)) }
    local g = tgl.compile { inputs = vars, outputs = tgl.grad(cost, vars) }
    local pp, pm = {}, {}
    for i, p in ipairs(P) do pp[i], pm[i] = axpy(p, EPS, vs[i]), axpy(p, -EPS, vs[i]) end
    local gp, gm = { g(unpack(pp)) }, { g(unpack(pm)) }
    for i = 1, #P do
      local a, b, fd = flat(gp[i]), flat(gm[i]), {}
      for k = 1, #a do fd[k] = (a[k] - b[k]) / (2 * EPS) end
      assert_close(fd, got[i], 1e-6, 'H v, parameter ' .. i)
    end
  end)
end)

-- ---------------------------------------------------------------------------
-- shared variables, and errors

describe('tgl.Rop wrt a shared variable', function()
  it('of a cost, compiled with the shared variable implicit', function()
    math.randomseed(120)
    local Wa, xa, va = N({ 3, 2 }), N({ 4, 3 }), N({ 3, 2 })
    local W = tgl.shared(Wa, 'W')
    local x = var_like(xa, 'x')
    local cost = tgl.sum(tgl.sqr(tgl.tanh(tgl.dot(x, W))))
    local f = tgl.compile { inputs = { x }, outputs = { cost, tgl.Rop(cost, W, va) } }
    local _, jv = f(xa)
    W:set_value(axpy(Wa, EPS, va))
    local cp = f(xa)
    W:set_value(axpy(Wa, -EPS, va))
    local cm = f(xa)
    assert_close({ (cp:get() - cm:get()) / (2 * EPS) }, jv, 1e-6, 'Rop wrt a shared variable')
  end)
end)

describe('tgl.Rop and tgl.Lop errors', function()
  -- the message names the function and this file's line, and contains
  -- each needle (plain text)
  local function raises(fname, f, ...)
    local ok, err = pcall(f)
    assert(not ok, 'expected an error from tgl.' .. fname)
    err = tostring(err)
    assert.matches('rop_spec%.lua:%d+: tgl%.' .. fname .. ': ', err)
    for _, needle in ipairs({ ... }) do
      assert(err:find(needle, 1, true), ('the message "%s" does not mention "%s"'):format(err, needle))
    end
    return err
  end

  it('v of the wrong rank, count or dtype, named by its position', function()
    local x, y = tgl.dmatrix('x'), tgl.dvector('y')
    local f = tgl.sum(x) + tgl.sum(y)
    raises('Rop', function() tgl.Rop(f, { x, y }, { tgl.dmatrix(), tgl.dmatrix() }) end,
           "v 2 has 2 dimensions, wrt 2 ('y') has 1")
    raises('Rop', function() tgl.Rop(f, { x, y }, { N(M), N({ 2, 2 }) }) end,
           "v 2 has 2 dimensions, wrt 2 ('y') has 1")
    raises('Rop', function() tgl.Rop(f, x, tgl.dvector()) end, "v 1 has 1 dimensions, wrt 1 ('x') has 2")
    raises('Rop', function() tgl.Rop(f, { x, y }, { N(M) }) end, 'v has 1 entries for 2 variables')
    raises('Rop', function() tgl.Rop(f, { x, y }, { tgl.dmatrix(), tgl.ivector() }) end,
           'v 2 is int32; directions are floats')
    raises('Rop', function() tgl.Rop(f, { x, y }, { N(M), INT({ 1, 2 }) }) end,
           'v 2 is int64; directions are floats')
    -- a direction of another float dtype is accepted (doc/rop.md: "a float
    -- dtype"); the tangent has the output's dtype
    assert.equals('float64', tgl.Rop(f, x, tgl.fmatrix()).dtype)
    local xf = tgl.fmatrix('xf')
    assert.equals('float32', tgl.Rop(tgl.sum(xf), xf, tgl.dmatrix()).dtype)
  end)

  it('an array direction for a shared variable must have its shape', function()
    local W = tgl.shared(tgl.zeros({ 2, 3 }, { dtype = 'float64' }), 'W')
    raises('Rop', function() tgl.Rop(tgl.sum(W), W, tgl.zeros({ 3, 2 }, { dtype = 'float64' })) end,
           "direction 1 for 'W' has shape (3,2), W has (2,3)")
  end)

  it('an array direction of the wrong length for a symbolic input is an error at run time', function()
    local y = tgl.dvector('y')
    local f = tgl.compile { inputs = { y }, outputs = tgl.Rop(tgl.sum(y), y, tgl.array({ 1, 2, 3, 4 }, 'float64')) }
    assert.equals(10, f(tgl.array({ 0, 0, 0, 0 }, 'float64')):get())
    local ok, err = pcall(f, tgl.array({ 1, 2, 3 }, 'float64'))
    assert.is_false(ok)
    assert.matches("Rop direction 1 for 'y' has shape (4,), y has (3,); tgl.Rop was called at ",
                   tostring(err), 1, true)
    assert.matches('was called at [^ ]*rop_spec%.lua:%d+$', tostring(err))
  end)

  it('an integer wrt', function()
    local i = tgl.ivector('i')
    local f = tgl.sum(tgl.cast(i, 'float64'))
    raises('Rop', function() tgl.Rop(f, i, tgl.dvector()) end,
           "wrt 1 ('i') is int32: only float variables have a derivative")
  end)

  it("a v for a variable f does not depend on: 'raise' by default, 'ignore' gives no contribution", function()
    local x, y = tgl.dvector('x'), tgl.dvector('unused_y')
    local f = tgl.tanh(x)
    raises('Rop', function() tgl.Rop(f, { x, y }, { tgl.dvector(), tgl.dvector() }) end,
           "the output does not depend on 'unused_y' (wrt 2); pass disconnected='ignore' to allow it")
    local vx, vy = tgl.dvector('vx'), tgl.dvector('vy')
    local r = tgl.Rop(f, { x, y }, { vx, vy }, { disconnected = 'ignore' })
    local fr = tgl.compile { inputs = { x, vx, y, vy }, outputs = r }
    local xa, va = N({ 3 }), N({ 3 })
    local want = tgl.compile { inputs = { x, vx }, outputs = tgl.Rop(f, x, vx) }(xa, va)
    assert_close(want, fr(xa, va, N({ 3 }), N({ 3 })), 1e-12, 'ignore')
    -- every wrt disconnected: zeros of f's shape
    local z = tgl.compile { inputs = { x, y, vy }, outputs = tgl.Rop(f, y, vy, { disconnected = 'ignore' }) }
    assert.same({ 0, 0, 0 }, flat(z(xa, N({ 3 }), N({ 3 }))))
    -- a bad policy name
    raises('Rop', function() tgl.Rop(f, x, vx, { disconnected = 'maybe' }) end, 'disconnected')
  end)

  it('Lop: u of the wrong count or rank', function()
    local x = tgl.dmatrix('x')
    local f1, f2 = tgl.tanh(x), tgl.sum(x, 2)
    raises('Lop', function() tgl.Lop({ f1, f2 }, x, { tgl.dmatrix() }) end, 'u has 1 entries for 2')
    raises('Lop', function() tgl.Lop(f1, x, tgl.dvector()) end, 'u')
  end)
end)
