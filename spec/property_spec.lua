-- property_spec.lua — property tests over random graphs (DESIGN.md "How
-- correctness is checked"): a seeded generator builds random DAGs of
-- elementwise ops and reductions (1 to a few hundred nodes; unary, binary
-- and ternary ops; ranks 0 to 3; size-1 axes that broadcast and lower-rank
-- operands that left-pad; float32/float64/int32/int64 mixes; inputs,
-- shared variables and constants as leaves; 1 to ~20 outputs, some cases
-- with more than 16 outputs of one elementwise group).  Every graph is
-- compiled in each mode (FAST_RUN, FAST_COMPILE, DEBUG) with each linker
-- (cvm, cvm_nogc, vm) and called three times (five with system-compiler
-- kernels, which reaches the generated whole step); every output must equal the same
-- expression evaluated eagerly on arrays (the reference kernels, API.md
-- "Every symbolic operation also applies eagerly to arrays"), within a
-- tolerance by dtype (NaN equals NaN), on both calls, and the first call's
-- outputs must not change when the function runs again.  Then long chains
-- z = tanh(z * 2) (25 to 300 ops) compiled in an empty kernel cache.
-- Loops, indexing and gradients: property_scan_spec.lua.
--
-- Reproducing a failure: each case prints its seed; run
--   TGL_PROP_SEED=<seed> TGL_PROP_CASES=1 build/tgl lua/busted_host.lua spec/property_spec.lua
-- TGL_PROP_SEED sets the first case's seed (case k uses seed + k - 1;
-- 'random' draws one from the clock), TGL_PROP_CASES the number of cases.
-- TGL_PROP_CC=1 compiles every case's kernels with the system compiler
-- (by default one case in CC_EVERY does, the others use libtcc, to keep
-- the spec fast).  TGL_PROP_DEBUG=1 prints each case's recipe on stderr
-- before compiling it (a crash prints nothing else) and its FAST_RUN
-- program.
--
-- The generator avoids what would make the comparison flaky rather than
-- wrong: discontinuous ops (comparisons, casts to integers, floor, ceil,
-- round, sign) only read values that are computed exactly (leaves, integer
-- and boolean results, and selections of exact values such as max, abs or
-- switch), so last-bit differences of a rewritten or fused float form
-- never flip them; log, sqrt, division and pow get operands kept in their
-- domains (log(|a| + 0.5), a / (|b| + 0.5), ...); exp gets operands in
-- [-5, 5]; float values larger than 30 pass through tanh or clip and
-- integer values are clipped to [-1000, 1000], so nothing overflows.
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'
local C = require('tgl.core').C
local S = dofile('spec/support.lua')

local DEFAULT_SEED = 20240808
local DEFAULT_CASES = 60
local CC_EVERY = 8

local BASE_SEED, CASES = S.prop_seed_and_cases(DEFAULT_SEED, DEFAULT_CASES)
local ALL_CC = os.getenv('TGL_PROP_CC') == '1'
local DEBUG_OUT = os.getenv('TGL_PROP_DEBUG') == '1'

local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }
local LINKERS = { 'cvm', 'cvm_nogc', 'vm' }

-- Tolerance by dtype: |got - want| <= abs + rel * |want|.  The generated
-- kernels may evaluate a rewritten form (softplus for log(1 + exp), sqr
-- for x * x, libmvec's vector exp and tanh), so float32 results agree to a
-- few units in the last place per op; errors grow with the depth of the
-- graph, hence the loose float32 bounds.  Integers and booleans are exact.
local TOL = {
  float32 = { abs = 2e-3, rel = 2e-3 },
  float64 = { abs = 1e-9, rel = 1e-9 },
}
-- (A float64 result that went through inexact float32 values, such as
-- float64 + tanh(float32), gets float32's tolerance: the fused kernel's
-- float32 intermediate may differ from the reference's by an ulp.)

local saved = {}
setup(function()
  saved.floatX = tgl.config.floatX
  saved.compile = tgl.config.compile
  saved.cache_dir = tgl.config.cache_dir
  saved.exclude = tgl.config.exclude
  tgl.config.floatX = 'float32'
  tgl.config.exclude = {}
end)
teardown(function()
  tgl.config.floatX = saved.floatX
  tgl.config.compile = saved.compile
  tgl.config.cache_dir = saved.cache_dir
  tgl.config.exclude = saved.exclude
end)

-- A fresh, empty kernel cache directory.
local function fresh_cache_dir()
  local p = io.popen('mktemp -d /tmp/tgl-prop-cache.XXXXXX')
  local dir = p:read('*l')
  p:close()
  assert(dir and dir ~= '', 'mktemp -d failed')
  return dir
end

local function rm_rf(dir)
  if dir and dir:match('^/tmp/tgl%-prop%-cache%.') then os.execute(('rm -rf %q'):format(dir)) end
end

-- ---------------------------------------------------------------------------
-- a small seeded generator (Park-Miller, spec/support.lua), independent of
-- math.random and of tgl's own generator

local new_rng = S.new_rng

-- ---------------------------------------------------------------------------
-- reading arrays

local PTR = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *',
              uint8 = 'uint8_t *', bool = 'uint8_t *' }

-- Calls fn(i, v) for each element of a (C order, 0-based i); returns the
-- contiguous array read (keep it alive while reading).
local function each(a, fn)
  local c = a:contiguous()
  local n = c:nelement()
  if n == 0 then return c end
  local p = ffi.cast(PTR[c.dtype], c:data())
  for i = 0, n - 1 do fn(i, tonumber(p[i])) end
  return c
end

local function max_abs(a)
  local m = 0
  each(a, function(_, v)
    if v ~= v then m = math.huge
    elseif math.abs(v) > m then m = math.abs(v) end
  end)
  return m
end

local shape_str = S.shape_str

-- nil when got matches want (dtype, shape, values within tol, by default
-- TOL of the dtype); otherwise a message naming the first mismatch.
local function mismatch(want, got, tol) return S.mismatch(want, got, tol or TOL[want.dtype]) end

-- ---------------------------------------------------------------------------
-- the generator
--
-- A graph g holds its nodes: each is {var = the variable, val = the same
-- expression evaluated eagerly (the oracle), dtype, shape, bc (the
-- variable's broadcastable flags), exact (its value is computed exactly,
-- so comparisons and casts to integers may read it), id, text}.  g.lines
-- is the recipe, printed when a case fails.

local FLOATS = { float32 = true, float64 = true }
local INTS = { int32 = true, int64 = true, uint8 = true }

local Graph = {}
Graph.__index = Graph

local function new_graph(rng)
  return setmetatable({ rng = rng, nodes = {}, pool = {}, inputs = {}, input_vals = {},
                        shared = {}, lines = {}, napply = 0 }, Graph)
end

function Graph:describe(rec)
  return ('n%d = %s  %s %s%s%s'):format(rec.id, rec.text, rec.dtype, shape_str(rec.shape),
    rec.exact and '  exact' or '', rec.lowp and rec.dtype == 'float64' and '  (float32 precision)' or '')
end

-- Records a node from its variable and eager value; checks that both
-- agree on dtype and rank (a property in itself).
function Graph:add(var, val, text, exact, in_pool, lowp)
  S.check_forms(var, val, text, self.lines)
  local bc = var.broadcastable
  local shape = val:shape()
  for i = 1, #bc do
    if bc[i] and shape[i] ~= 1 then
      error(('%s: axis %d is broadcastable but has size %d'):format(text, i, shape[i]), 0)
    end
  end
  local rec = { var = var, val = val, dtype = val.dtype, shape = shape, bc = bc, exact = exact,
                id = #self.nodes + 1, text = text, big = max_abs(val),
                lowp = lowp or (val.dtype == 'float32' and not exact) }
  self.nodes[#self.nodes + 1] = rec
  self.lines[#self.lines + 1] = self:describe(rec)
  if in_pool ~= false then self.pool[#self.pool + 1] = rec end
  return rec
end

local function name_of(a)
  if type(a) == 'table' then return 'n' .. a.id end
  return tostring(a)
end

-- Applies fn (a Lua function of variables or arrays) to the records and
-- numbers in args, symbolically and eagerly.
function Graph:apply(label, fn, args, exact, in_pool)
  local s, e, names = {}, {}, {}
  local lowp = false
  for i, a in ipairs(args) do
    if type(a) == 'table' then
      s[i], e[i] = a.var, a.val
      lowp = lowp or a.lowp
    else
      s[i], e[i] = a, a
    end
    names[i] = name_of(a)
  end
  local var = fn(unpack(s, 1, #args))
  local val = fn(unpack(e, 1, #args))
  self.napply = self.napply + 1
  local rec = self:add(var, val, ('%s(%s)'):format(label, table.concat(names, ', ')), exact, false, lowp)
  -- keep magnitudes where every op stays accurate and nothing overflows
  if FLOATS[rec.dtype] and rec.big > 30 then
    if self.rng.chance(0.5) then
      rec = self:apply('tanh', tgl.tanh, { rec }, false, false)
    else
      rec = self:apply('clip', function(x) return tgl.clip(x, -30, 30) end, { rec }, rec.exact, false)
    end
  elseif INTS[rec.dtype] and rec.big > 1000 then
    rec = self:apply('clip', function(x) return tgl.clip(x, -1000, 1000) end, { rec }, true, false)
  end
  if in_pool ~= false then self.pool[#self.pool + 1] = rec end
  return rec
end

-- Can a and b (records) meet in an elementwise op?  Shapes align on the
-- right; an axis matches when the sizes are equal or one side is
-- broadcastable (a missing leading axis is).
local function compatible(a, b)
  local na, nb = #a.shape, #b.shape
  local n = math.max(na, nb)
  for k = 0, n - 1 do
    local ia, ib = na - k, nb - k
    local sa, sb = a.shape[ia] or 1, b.shape[ib] or 1
    local ba = ia < 1 or a.bc[ia]
    local bb = ib < 1 or b.bc[ib]
    if sa ~= sb and not ba and not bb then return false end
  end
  return true
end

-- A random value for a leaf: multiples of 1/8 in [-3, 3] for floats (exact
-- in float32), integers in [-5, 5].
local function leaf_value(rng, dtype)
  if FLOATS[dtype] then return rng.int(-24, 24) / 8 end
  return rng.int(-5, 5)
end

local function build_table(rng, shape, dtype, d)
  d = d or 1
  if d > #shape then return leaf_value(rng, dtype) end
  local t = {}
  for i = 1, shape[d] do t[i] = build_table(rng, shape, dtype, d + 1) end
  return t
end

local function random_array(rng, shape, dtype)
  if #shape == 0 then return tgl.array(leaf_value(rng, dtype), dtype) end
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  if n > 4096 then
    -- large leaves: filled through the data pointer
    local args = {}
    for i, s in ipairs(shape) do args[i] = s end
    args[#args + 1] = { dtype = dtype }
    local a = tgl.zeros(unpack(args))
    local p = ffi.cast(PTR[dtype], a:data())
    for i = 0, n - 1 do p[i] = leaf_value(rng, dtype) end
    return a
  end
  return tgl.array(build_table(rng, shape, dtype), dtype)
end

-- A leaf of rank <= #frame whose shape is the frame's right end, some axes
-- made size-1 and broadcastable.
-- full: the frame's shape, no broadcastable axis, float32.
function Graph:leaf(frame, full, kind)
  local rng = self.rng
  local rank = rng.int(math.max(0, #frame - 2), #frame)
  if full or rng.chance(0.6) then rank = #frame end
  local shape, bc = {}, {}
  for i = 1, rank do
    local fs = frame[#frame - rank + i]
    if fs ~= 1 and not full and rng.chance(0.2) then shape[i], bc[i] = 1, true
    else shape[i], bc[i] = fs, fs == 1 and not full and rng.chance(0.5) end
  end
  local dtype = full and 'float32' or
                rng.weighted({ { 5, 'float32' }, { 2, 'float64' }, { 2, 'int32' }, { 1, 'int64' } })
  local val = random_array(rng, shape, dtype)
  kind = kind or rng.weighted({ { 6, 'input' }, { 3, 'shared' }, { 1, 'constant' } })
  local k = #self.nodes + 1
  local var
  if kind == 'input' then
    var = tgl.tensor { dtype = dtype, ndim = rank, broadcastable = bc, name = 'in' .. k }
    self.inputs[#self.inputs + 1] = var
    self.input_vals[#self.input_vals + 1] = val
  elseif kind == 'shared' then
    var = tgl.shared(val, 'sh' .. k, { broadcastable = bc })
    self.shared[#self.shared + 1] = { var = var, val = val }
  else
    var = tgl.constant(val)
  end
  return self:add(var, val, kind, true)
end

-- The operand for an op: recent nodes more often (deep chains), else any.
function Graph:operand(filter)
  local pool, rng = self.pool, self.rng
  local cands = {}
  for i = #pool, 1, -1 do
    if not filter or filter(pool[i]) then cands[#cands + 1] = pool[i] end
  end
  if #cands == 0 then return nil end
  if rng.chance(0.6) then return cands[rng.int(1, math.min(4, #cands))] end
  return cands[rng.int(1, #cands)]
end

function Graph:partner(a, filter)
  return self:operand(function(b) return compatible(a, b) and (not filter or filter(b)) end)
end

local function is_exact(r) return r.exact end
local function is_bool(r) return r.dtype == 'bool' end
local function is_float(r) return FLOATS[r.dtype] end

-- A boolean node compatible with a, or nil when no exact value is (a
-- comparison of inexact floats could flip on a last-bit difference).
function Graph:condition(a)
  local c = self:partner(a, is_bool)
  if c and self.rng.chance(0.7) then return c end
  local x = a.exact and a or self:partner(a, is_exact)
  if not x then return c end
  return self:compare(x, a)
end

-- A comparison of the exact node x with an exact partner or a number; with
-- `also`, the partner is compatible with it too, so that the result is
-- (compatibility is not transitive: x (3,1) meets a (3,3) and y (3,4), but
-- their comparison, (3,4), does not meet a).
function Graph:compare(x, also)
  local cmp = self.rng.pick({ 'lt', 'le', 'gt', 'ge', 'eq', 'neq' })
  local y = self:partner(x, function(r) return is_exact(r) and (not also or compatible(also, r)) end)
  if y and self.rng.chance(0.6) then return self:apply(cmp, tgl[cmp], { x, y }, true) end
  return self:apply(cmp, tgl[cmp], { x, self.rng.int(-4, 4) / 2 }, true)
end

-- Booleans take no arithmetic (tgl.neg: not defined for bool): an
-- integer view of them.
function Graph:numeric(r)
  if r and r.dtype == 'bool' then
    return self:apply('cast_int32', function(x) return tgl.cast(x, 'int32') end, { r }, true)
  end
  return r
end

local UNARY = { 'tanh', 'sigmoid', 'softplus', 'relu', 'abs', 'neg', 'exp', 'log', 'sqrt',
                'log1p', 'expm1', 'sin', 'cos', 'sqr' }

-- One new elementwise or reduction node (and the helper nodes it needs).
function Graph:step()
  local rng = self.rng
  local kinds = {
    { 30, 'unary' }, { 34, 'binary' }, { 6, 'compare' }, { 3, 'logic' }, { 5, 'switch' },
    { 5, 'clip' }, { 5, 'cast' }, { 2, 'discrete' }, { 3, 'const' },
  }
  kinds[#kinds + 1] = { 10, 'reduce' }
  local kind = rng.weighted(kinds)
  local a = self:operand()
  if kind ~= 'logic' and kind ~= 'cast' and kind ~= 'compare' then a = self:numeric(a) end
  if kind == 'unary' then
    local op = rng.pick(UNARY)
    if op == 'exp' or op == 'expm1' then
      if a.big > 5 then a = self:apply('clip', function(x) return tgl.clip(x, -5, 5) end, { a }, a.exact) end
      return self:apply(op, tgl[op], { a }, false)
    elseif op == 'log' then
      return self:apply('log(|a|+0.5)', function(x) return tgl.log(tgl.abs(x) + 0.5) end, { a }, false)
    elseif op == 'log1p' then
      return self:apply('log1p(|a|)', function(x) return tgl.log1p(tgl.abs(x)) end, { a }, false)
    elseif op == 'sqrt' then
      return self:apply('sqrt(|a|+0.25)', function(x) return tgl.sqrt(tgl.abs(x) + 0.25) end, { a }, false)
    elseif op == 'neg' then
      return self:apply('neg', function(x) return -x end, { a }, a.exact or INTS[a.dtype])
    elseif op == 'abs' or op == 'relu' then
      return self:apply(op, tgl[op], { a }, a.exact)
    elseif op == 'sqr' then
      return self:apply('a*a', function(x) return x * x end, { a }, INTS[a.dtype] ~= nil)
    end
    return self:apply(op, tgl[op], { a }, false)
  elseif kind == 'binary' then
    local b = self:numeric(self:partner(a))
    local op = rng.weighted({ { 6, '+' }, { 5, '-' }, { 6, '*' }, { 3, '/' }, { 2, '^' },
                              { 3, 'maximum' }, { 3, 'minimum' } })
    local bnum = b == nil or rng.chance(0.25)
    local other = bnum and (rng.int(-12, 12) / 4) or b
    local both_int = INTS[a.dtype] ~= nil and ((bnum and other == math.floor(other)) or
                                               (not bnum and INTS[b.dtype] ~= nil))
    if op == '+' then
      return self:apply('add', function(x, y) return x + y end, { a, other }, both_int)
    elseif op == '-' then
      return self:apply('sub', function(x, y) return x - y end, { a, other }, both_int)
    elseif op == '*' then
      return self:apply('mul', function(x, y) return x * y end, { a, other }, both_int)
    elseif op == '/' then
      return self:apply('a/(|b|+0.5)', function(x, y) return x / (tgl.abs(y) + 0.5) end,
                        { a, other }, false)
    elseif op == '^' then
      if bnum then
        local e = rng.pick({ 2, 0.5, 3, -1, 1.5 })
        return self:apply('(|a|+0.5)^' .. e, function(x) return (tgl.abs(x) + 0.5) ^ e end, { a }, false)
      end
      return self:apply('(|a|+0.5)^clip(b,-2,2)',
                        function(x, y) return (tgl.abs(x) + 0.5) ^ tgl.clip(y, -2, 2) end, { a, b }, false)
    else
      return self:apply(op, tgl[op], { a, other }, a.exact and (bnum or b.exact) or false)
    end
  elseif kind == 'compare' then
    return self:compare(a.exact and a or self:operand(is_exact))
  elseif kind == 'logic' then
    local c = self:condition(a) or self:compare(self:operand(is_exact))
    local op = rng.pick({ 'and_', 'or_', 'not_' })
    local d = self:condition(c)
    if op == 'not_' or not d then return self:apply('not_', tgl.not_, { c }, true) end
    return self:apply(op, tgl[op], { c, d }, true)
  elseif kind == 'switch' then
    local c = self:condition(a)
    if not c then return self:apply('tanh', tgl.tanh, { a }, false) end
    local b = self:numeric(self:partner(a, function(r) return compatible(c, r) end)) or a
    local other = rng.chance(0.2) and rng.int(-4, 4) / 2 or b
    return self:apply('switch', tgl.switch, { c, a, other },
                      a.exact and (type(other) == 'number' or other.exact) or false)
  elseif kind == 'clip' then
    if rng.chance(0.3) then
      -- bounds from the graph, ordered (clip with lo > hi is not specified)
      local l = self:numeric(self:partner(a))
      local h = l and self:numeric(self:partner(l, function(r) return compatible(a, r) end))
      if l and h then
        return self:apply('clip(a, minimum(l,h), maximum(l,h))',
          function(x, p, q) return tgl.clip(x, tgl.minimum(p, q), tgl.maximum(p, q)) end,
          { a, l, h }, a.exact and l.exact and h.exact)
      end
    end
    local lo = rng.int(-8, 2) / 4
    local hi = lo + rng.int(0, 12) / 4
    return self:apply('clip', function(x) return tgl.clip(x, lo, hi) end, { a }, a.exact)
  elseif kind == 'cast' then
    local to = rng.weighted({ { 4, 'float32' }, { 3, 'float64' }, { 3, 'int32' }, { 2, 'int64' }, { 1, 'bool' } })
    if not FLOATS[to] and not a.exact then
      a = self:operand(is_exact) or a
      if not a.exact then to = 'float64' end
    end
    return self:apply('cast_' .. to, function(x) return tgl.cast(x, to) end, { a }, a.exact or not FLOATS[to])
  elseif kind == 'discrete' then
    local x = self:numeric(self:operand(is_exact)) or a
    local op = rng.pick({ 'floor', 'ceil', 'round', 'sign' })
    if not x.exact then return self:apply('tanh', tgl.tanh, { x }, false) end
    return self:apply(op, tgl[op], { x }, true)
  elseif kind == 'const' then
    -- a constant array operand, which constant folding may combine
    local shape = {}
    for i = 1, #a.shape do shape[i] = a.bc[i] and 1 or a.shape[i] end
    local cv = random_array(rng, shape, a.dtype == 'bool' and 'float32' or a.dtype)
    local crec = self:add(tgl.constant(cv), cv, 'constant', true, false)
    return self:apply('add', function(x, y) return x + y end, { a, crec }, a.exact and INTS[a.dtype] ~= nil)
  else -- reduce
    if a.dtype == 'bool' then a = self:apply('cast_int32', function(x) return tgl.cast(x, 'int32') end, { a }, true) end
    local op = rng.weighted({ { 4, 'sum' }, { 3, 'mean' }, { 3, 'max' }, { 3, 'min' }, { 2, 'prod' } })
    local rank = #a.shape
    local axis
    if rank == 0 or rng.chance(0.2) then
      axis = nil
    else
      local list = {}
      for d = 1, rank do if rng.chance(0.5) then list[#list + 1] = d end end
      if #list == 0 then list[1] = rng.int(1, rank) end
      if #list == 1 and rng.chance(0.5) then
        axis = list[1]
        if rng.chance(0.3) then axis = axis - rank - 1 end -- negative: counts from the end
      else
        axis = list
      end
    end
    -- a float32 sum of many terms rounds differently in another order
    -- (by up to sqrt(n) ulps of the terms, much more than of the sum when
    -- they cancel): many terms are averaged instead
    local nred = 1
    for d = 1, rank do
      local reduced = axis == nil
      if type(axis) == 'number' then reduced = d == axis or d == axis + rank + 1 end
      if type(axis) == 'table' then for _, ax in ipairs(axis) do if ax == d then reduced = true end end end
      if reduced then nred = nred * a.shape[d] end
    end
    if op == 'sum' and a.dtype == 'float32' and nred > 256 then op = 'mean' end
    local keep = rng.chance(0.4)
    local opts2 = keep and { keepdims = true } or nil
    if op == 'prod' then
      -- keep products bounded: tanh for floats, clip to [-2, 2] for integers of few elements
      local n = 1
      for _, s in ipairs(a.shape) do n = n * s end
      if FLOATS[a.dtype] then
        if a.big > 1.2 then a = self:apply('tanh', tgl.tanh, { a }, false) end
      elseif n <= 12 then
        a = self:apply('clip', function(x) return tgl.clip(x, -2, 2) end, { a }, true)
      else
        op = 'sum'
      end
    end
    local exact = (op == 'max' or op == 'min') and a.exact or (INTS[a.dtype] and op ~= 'mean')
    local txt = ('%s[axis=%s%s]'):format(op, type(axis) == 'table' and ('{' .. table.concat(axis, ',') .. '}')
      or tostring(axis), keep and ',keepdims' or '')
    return self:apply(txt, function(x) return tgl[op](x, axis, opts2) end, { a }, exact and true or false)
  end
end

-- One link of a chain in the frame's space (the 'wide' style): the
-- previous link through a unary op, or combined with a leaf or a number.
-- A chain is one fused group, whose links are all outputs.
function Graph:link(prev, leaves)
  local rng = self.rng
  local kind = rng.weighted({ { 4, 'unary' }, { 5, 'binary' }, { 1, 'clip' } })
  if kind == 'unary' then
    local op = rng.pick({ 'tanh', 'sigmoid', 'softplus', 'relu', 'abs', 'sin', 'cos' })
    return self:apply(op, tgl[op], { prev }, false)
  elseif kind == 'binary' then
    local op = rng.pick({ 'add', 'sub', 'mul', 'maximum', 'minimum' })
    local other = rng.chance(0.5) and rng.pick(leaves) or rng.int(-8, 8) / 4
    return self:apply(op, tgl[op], { prev, other }, false)
  end
  return self:apply('clip', function(x) return tgl.clip(x, -1.5, 2) end, { prev }, false)
end

-- A random frame shape: the iteration space most nodes live in.
local function random_frame(rng, large)
  if large then
    return rng.pick({ { 200, 200 }, { 40, 30, 40 }, { 70000 }, { 3, 128, 100 }, { 300, 1, 130 } })
  end
  local rank = rng.weighted({ { 1, 0 }, { 3, 1 }, { 4, 2 }, { 3, 3 } })
  local frame = {}
  for i = 1, rank do frame[i] = rng.weighted({ { 2, 1 }, { 3, 2 }, { 3, 3 }, { 2, 4 }, { 2, 5 } }) end
  return frame
end

-- Builds one random case: {g, outputs = {records}, kind = text}.
local function random_case(seed)
  local rng = new_rng(seed)
  local g = new_graph(rng)
  local style = rng.weighted({ { 6, 'mixed' }, { 2, 'wide' }, { 1, 'large' }, { 1, 'tiny' } })
  local frame = random_frame(rng, style == 'large')
  local target
  if style == 'tiny' then target = rng.int(1, 3)
  elseif style == 'large' then target = rng.int(5, 30)
  elseif style == 'wide' then target = rng.int(20, 60)
  else target = rng.weighted({ { 5, rng.int(2, 40) }, { 3, rng.int(40, 120) }, { 1, rng.int(120, 300) } }) end
  local nleaves = rng.int(1, style == 'tiny' and 2 or 6)
  local leaves = {}
  for k = 1, nleaves do
    -- a chain starts from an input (a chain of constants would be folded)
    leaves[k] = g:leaf(frame, style == 'wide', (style == 'wide' and k == 1) and 'input' or nil)
  end
  if style == 'wide' then
    local z = leaves[1]
    while g.napply < target do z = g:link(z, leaves) end
  else
    while g.napply < target do
      g:step()
      if rng.chance(0.03) then g:leaf(frame) end
    end
  end
  -- outputs: 1 to ~20 nodes; the wide style outputs 17 to 20 of the
  -- elementwise nodes of the frame's space (one fused group, mostly)
  local outs = {}
  local nodes = g.nodes
  if style == 'wide' then
    local cands = {}
    for _, r in ipairs(nodes) do
      if r.text ~= 'input' and r.text ~= 'shared' and r.text ~= 'constant' then cands[#cands + 1] = r end
    end
    local want = math.min(#cands, rng.int(17, 20))
    local step = #cands / want
    for k = 0, want - 1 do outs[#outs + 1] = cands[math.floor(k * step) + 1] end
  else
    local k = rng.weighted({ { 3, 1 }, { 4, rng.int(2, 5) }, { 3, rng.int(6, 20) } })
    outs[1] = nodes[#nodes]
    for _ = 2, k do
      local r
      if rng.chance(0.1) then r = outs[rng.int(1, #outs)]           -- the same output twice
      else r = nodes[rng.int(1, #nodes)] end                           -- leaves included
      outs[#outs + 1] = r
    end
  end
  return { g = g, outputs = outs, style = style, frame = frame,
           cc = ALL_CC or (seed % CC_EVERY == 0) }
end

-- ---------------------------------------------------------------------------
-- running a case

local function recipe(case)
  local lines = case.g.lines
  local text
  if #lines > 400 then
    local head = {}
    for i = 1, 200 do head[i] = lines[i] end
    head[#head + 1] = ('... (%d lines left out)'):format(#lines - 400)
    for i = #lines - 199, #lines do head[#head + 1] = lines[i] end
    text = table.concat(head, '\n')
  else
    text = table.concat(lines, '\n')
  end
  local o = {}
  for i, r in ipairs(case.outputs) do o[i] = 'n' .. r.id end
  return text .. '\noutputs: ' .. table.concat(o, ', ')
end

local function bits_copy(a) return a:clone() end
local function same_bits(a, b) return C.tgl_array_equal_bits(a.p, b.p) ~= 0 end

-- What the cases exercised, for the coverage check.
local stats = { cases_run = 0, max_fused_results = 0, generated = 0 }

local function run_case(seed)
  stats.cases_run = stats.cases_run + 1
  local case = random_case(seed)
  local g = case.g
  local header = ('property case seed=%d (%s, frame %s, %d nodes, %d outputs%s); rerun with '
    .. 'TGL_PROP_SEED=%d TGL_PROP_CASES=1'):format(seed, case.style, shape_str(case.frame), #g.nodes,
    #case.outputs, case.cc and ', cc kernels' or '', seed)
  local function fail(msg, f)
    local prog = ''
    if f then
      local ok, p = pcall(f.program, f)
      if ok then prog = '\nprogram:\n' .. (#p > 6000 and (p:sub(1, 6000) .. '\n...') or p) end
    end
    error(header .. '\n' .. msg .. '\nrecipe:\n' .. recipe(case) .. prog, 0)
  end
  tgl.config.compile = case.cc and 'sync' or 'tcc'
  -- a crash ends the process before any message: TGL_PROP_DEBUG=1 prints
  -- the recipe first (and each FAST_RUN program)
  if DEBUG_OUT then io.stderr:write(header, '\n', recipe(case), '\n') end
  local outvars = {}
  for i, r in ipairs(case.outputs) do outvars[i] = r.var end
  -- the caller's arrays and the shared values, to check nothing writes into them
  local in_copy, sh_copy = {}, {}
  for i, a in ipairs(g.input_vals) do in_copy[i] = bits_copy(a) end
  for i, s in ipairs(g.shared) do sh_copy[i] = bits_copy(s.val) end
  for _, mode in ipairs(MODES) do
    for _, linker in ipairs(LINKERS) do
      local where = ('mode %s, linker %s'):format(mode, linker)
      local ok, f = pcall(tgl.compile, { inputs = g.inputs, outputs = outvars, mode = mode,
                                         linker = linker, name = 'prop' })
      if not ok then fail(where .. ': compile failed: ' .. tostring(f)) end
      if mode == 'FAST_RUN' and linker == 'cvm' then
        for lhs in f:program():gmatch('\n%s*%d+%s+([%w_, ]+) = fused') do
          local _, commas = lhs:gsub(',', '')
          stats.max_fused_results = math.max(stats.max_fused_results, commas + 1)
        end
        if DEBUG_OUT then io.stderr:write(f:program(), '\n') end
      end
      local first, last
      -- with optimized kernels, calls 4 and 5 reach the whole step's
      -- generated function (src/engine/step.c: bound at call 2, recorded at 4)
      for call = 1, case.cc and 5 or 3 do
        -- call 2 skips the conversions (trust_input); call 3 follows the
        -- writes into call 2's outputs below
        f.trust_input = call >= 2
        local res = { pcall(f, unpack(g.input_vals, 1, #g.inputs)) }
        if not res[1] then fail(('%s, call %d: %s'):format(where, call, tostring(res[2])), f) end
        if #res - 1 ~= #outvars then
          fail(('%s, call %d: %d results for %d outputs'):format(where, call, #res - 1, #outvars), f)
        end
        for i, r in ipairs(case.outputs) do
          -- a float64 result computed through float32 values has float32's precision
          local m = mismatch(r.val, res[i + 1], r.lowp and FLOATS[r.dtype] and TOL.float32 or nil)
          if m then fail(('%s, call %d, output %d (n%d): %s'):format(where, call, i, r.id, m), f) end
        end
        last = { unpack(res, 2) }
        if call == 1 then
          first = { arrays = last }
          for i = 1, #outvars do first[i] = bits_copy(last[i]) end
        elseif call == 2 then
          -- an output already returned never changes
          for i = 1, #outvars do
            if not same_bits(first[i], first.arrays[i]) then
              fail(('%s: output %d of call 1 changed during call 2'):format(where, i), f)
            end
          end
          -- writing into an output changes no other output (nor an input,
          -- a shared value or a constant: checked below and by call 3)
          local before = {}
          for i = 1, #last do before[i] = bits_copy(last[i]) end
          for i = 1, #last do
            local o = last[i]
            if o:nelement() > 0 then
              local idx = {}
              for d = 1, o:dim() do idx[d] = 1 end
              local v = o:get(unpack(idx))
              if o.dtype == 'bool' then v = v and 0 or 1 else v = (v == 77) and 78 or 77 end
              o:set(v, unpack(idx))
              for j = 1, #last do
                if j ~= i and not same_bits(before[j], last[j]) then
                  fail(('%s: writing into output %d changed output %d'):format(where, i, j), f)
                end
              end
              before[i] = bits_copy(o)
            end
          end
        end
      end
      local ws = f:whole_step()
      if ws and ws.generated then stats.generated = stats.generated + 1 end
      for i, a in ipairs(g.input_vals) do
        if not same_bits(in_copy[i], a) then fail(('%s: input %d was written into'):format(where, i), f) end
      end
      for i, s in ipairs(g.shared) do
        if not same_bits(sh_copy[i], s.var:get_value { borrow = true }:cpu()) then
          fail(('%s: shared variable %s changed'):format(where, s.var.name), f)
        end
      end
    end
  end
end

-- ---------------------------------------------------------------------------

describe('random elementwise and reduction graphs', function()
  local dir
  setup(function()
    dir = fresh_cache_dir()
    tgl.config.cache_dir = dir
  end)
  teardown(function()
    tgl.config.cache_dir = saved.cache_dir
    rm_rf(dir)
  end)

  for k = 1, CASES do
    local seed = BASE_SEED + k - 1
    it(('case %d (seed %d) gives the eager values in every mode and linker, on two calls'):format(k, seed),
      function() run_case(seed) end)
  end

  it('the generator covers what it promises (kinds of ops, ranks, dtypes, many outputs)', function()
    -- a statistic over the default cases' graphs (built, not compiled): the
    -- generator itself must not silently lose coverage
    local seen = { rank = {}, dtype = {}, op = {} }
    local max_outputs, max_nodes, broadcast = 0, 0, false
    for k = 1, math.max(CASES, 40) do
      local c = random_case(BASE_SEED + k - 1)
      max_outputs = math.max(max_outputs, #c.outputs)
      max_nodes = math.max(max_nodes, #c.g.nodes)
      for _, r in ipairs(c.g.nodes) do
        seen.rank[#r.shape] = true
        seen.dtype[r.dtype] = true
        local op = r.text:match('^([%w_]+)')
        if op then seen.op[op] = true end
        for _, b in ipairs(r.bc) do if b then broadcast = true end end
      end
    end
    for r = 0, 3 do assert.is_true(seen.rank[r] or false, 'no node of rank ' .. r) end
    for _, d in ipairs({ 'float32', 'float64', 'int32', 'int64', 'bool' }) do
      assert.is_true(seen.dtype[d] or false, 'no node of dtype ' .. d)
    end
    for _, op in ipairs({ 'input', 'shared', 'constant', 'add', 'sub', 'mul', 'switch', 'clip', 'tanh',
                          'sum', 'mean', 'max', 'min', 'prod', 'lt', 'cast_int32', 'maximum' }) do
      assert.is_true(seen.op[op] or false, 'the generator made no ' .. op)
    end
    assert.is_true(broadcast, 'no broadcastable axis')
    assert.is_true(max_outputs > 16, 'no case with more than 16 outputs')
    assert.is_true(max_nodes >= 100, 'no case of 100 nodes or more')
    -- and the compiled programs had a fused instruction with more than 16
    -- results (when enough cases ran in this process to tell)
    if stats.cases_run >= 20 then
      assert.is_true(stats.max_fused_results > 16,
        'no fused instruction had more than 16 results (at most ' .. stats.max_fused_results .. ')')
      -- (the sim device runs no generated whole steps: doc/devices.md)
      if tgl.config.device == 'cpu' then
        assert.is_true(stats.generated > 0, 'no case reached a generated whole step')
      end
    end
  end)
end)

-- Runs a chunk in a new tgl process (spec/support.lua).
local run_process = S.run_process

-- The chain z = tanh(z * 2), n links, in every mode and linker, two calls
-- and one after the optimized kernels are in; prints 'ok' at the end.
local CHAIN = [[
local n, dir = %d, %q
tgl.config.cache_dir = dir
tgl.config.compile = 'tiered'
local x = tgl.vector('x')
local xa = tgl.array({ 0.1, -0.2, 0.3, 0, 1.5, -3 })
local z, want = x, xa
for _ = 1, n do
  z = tgl.tanh(z * 2)
  want = tgl.tanh(want * 2)
end
local function check(got, what)
  for i = 1, 6 do
    local w, g = want:get(i), got:get(i)
    if math.abs(w - g) > 1e-5 + 1e-4 * math.abs(w) then
      error(('%%s: element %%d is %%.9g, expected %%.9g'):format(what, i, g, w))
    end
  end
end
for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
  for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
    local f = tgl.compile { inputs = { x }, outputs = z, mode = mode, linker = linker }
    check(f(xa), mode .. '/' .. linker .. ' call 1')
    check(f(xa), mode .. '/' .. linker .. ' call 2')
    f:wait_compiled()
    check(f(xa), mode .. '/' .. linker .. ' after wait_compiled')
  end
end
print('ok')
]]

describe('long elementwise chains', function()
  -- z = tanh(z * 2), n times: one fused group of 2n ops.  The issue
  -- reported heap corruption in the fusion pass from 25 links up, in an
  -- empty kernel cache.  Each runs in its own process with its own cache.
  for _, n in ipairs({ 25, 33, 100, 300 }) do
    it(('z = tanh(z * 2) repeated %d times compiles in an empty cache and gives the eager values'):format(n),
      function()
        local dir = fresh_cache_dir()
        local out, err, code = run_process(CHAIN:format(n, dir))
        rm_rf(dir)
        assert(code == 0 and out:match('ok'), ('chain of %d: exit status %s\nstdout:\n%s\nstderr:\n%s')
          :format(n, tostring(code), out, err:sub(1, 6000)))
      end)
  end
end)
