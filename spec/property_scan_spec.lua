-- property_scan_spec.lua — property tests over random programs with loops,
-- indexing and gradients (issue 19; DESIGN.md "How correctness is
-- checked").  property_spec.lua covers elementwise and reduction DAGs;
-- this spec covers the rest of the catalog a training script uses.  A
-- seeded generator builds programs of:
--
--   * indexing outside loops: row and column slices (negative steps,
--     clamped bounds, empty results), integer indices, advanced indexing
--     with repeated indices (constant or an input index vector),
--     set_subtensor and inc_subtensor on slices and on index vectors;
--     leaves read only through indexing (embedding rows gathered by an
--     index vector, a window of a longer sequence);
--   * one or two scans (the second may read the first's results): random
--     bodies of smooth elementwise ops, dot with matrices and vectors,
--     sums, integer and advanced indexing and set/inc_subtensor of the
--     step's values, non-sequences listed or closed over; the step's
--     state a vector or, in batch programs, a B x D matrix (its products
--     with W become GEMMs); sequences with taps {0}, {-1, 0}, {-1},
--     {0, 1}, {-2, 0}; one to three outputs, fed back through tap -1 or
--     taps {-2, -1} or not fed back; n_steps from the sequences, a number
--     or a symbolic input, 0 among the draws (an empty sequence, a too
--     short one, n_steps = 0); go_backwards; truncate_gradient; shared
--     variables updated inside the loop;
--   * indexing and reductions of the loops' results, the gradient of a
--     weighted sum of the results with respect to every float leaf, and
--     SGD steps leaf - lr * gradient as outputs or as updates of shared
--     leaves.
--
-- Each program is compiled in every mode (FAST_RUN, FAST_COMPILE, DEBUG)
-- with every linker (cvm, cvm_nogc, vm) and called three times (the
-- second call binds the loop bodies' steps, the third runs them bound).
-- The forward results must equal the same program evaluated eagerly on
-- arrays, the loops run step by step in Lua (an oracle independent of
-- scan's machinery: taps, buffers, stacking, n_steps, go_backwards); the
-- gradients, the SGD steps and the shared values they update must equal
-- those of FAST_COMPILE with the vm linker, and in float64 programs that
-- reference must equal central finite differences of the eager cost.
-- Shared variables updated inside a loop must hold the loop's last state
-- after the call.
--
-- The generator keeps the comparison meaningful rather than flaky: only
-- smooth ops (no max, abs, switch or comparisons), so finite differences
-- hold and no mode can break a tie differently; an advanced set_subtensor
-- writes distinct indices (with repeats, which write wins is unspecified);
-- fed-back values pass through tanh or sigmoid, so loops stay bounded.
--
-- Reproducing a failure: each case prints its seed; run
--   TGL_PROP_SEED=<seed> TGL_PROP_CASES=1 build/tgl lua/busted_host.lua spec/property_scan_spec.lua
-- ('random' draws a seed from the clock).  TGL_PROP_DEBUG=1 prints each
-- case's recipe on stderr before compiling it.
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'
local C = require('tgl.core').C
local S = dofile('spec/support.lua')
local run_process = S.run_process

local DEFAULT_SEED = 19190519
local DEFAULT_CASES = 240

local BASE_SEED, CASES = S.prop_seed_and_cases(DEFAULT_SEED, DEFAULT_CASES)
local DEBUG_OUT = os.getenv('TGL_PROP_DEBUG') == '1'

local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }
local LINKERS = { 'cvm', 'cvm_nogc', 'vm' }
local REF_MODE, REF_LINKER = 'FAST_COMPILE', 'vm'

-- |got - want| <= abs + rel * |want|.  Forward values: compiled against
-- eager (fused kernels evaluate tanh, exp and sigmoid with vector libm
-- forms, a few ulps per op, carried through a few loop steps).  Gradients:
-- one mode against another (sums of the same terms in another order).
-- Finite differences: central, step 1e-5, float64 only.
local TOL = {
  float32 = { abs = 2e-4, rel = 2e-3 },
  float64 = { abs = 1e-9, rel = 1e-8 },
}
local GRAD_TOL = {
  float32 = { abs = 1e-3, rel = 5e-3 },
  float64 = { abs = 1e-9, rel = 1e-8 },
}
local FD_EPS = 1e-5
local FD_TOL = { abs = 2e-6, rel = 2e-5 }

local saved = {}
setup(function()
  saved.floatX = tgl.config.floatX
  saved.compile = tgl.config.compile
  tgl.config.floatX = 'float32'
  -- libtcc kernels: every fused group of every case compiles in
  -- milliseconds; DEBUG checks them against the reference kernels
  tgl.config.compile = 'tcc'
end)
teardown(function()
  tgl.config.floatX = saved.floatX
  tgl.config.compile = saved.compile
end)

-- ---------------------------------------------------------------------------
-- a small seeded generator (Park-Miller, spec/support.lua), independent of
-- math.random and of tgl's own generator

local new_rng = S.new_rng

-- ---------------------------------------------------------------------------
-- arrays

local PTR = { float32 = 'float *', float64 = 'double *', int32 = 'int32_t *', int64 = 'int64_t *' }

local shape_str = S.shape_str

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- An array of the shape with values from gen() (a contiguous new array).
local function fill_array(shape, dtype, gen)
  if #shape == 0 then return tgl.array(gen(), dtype) end
  local args = {}
  for i, s in ipairs(shape) do args[i] = s end
  args[#args + 1] = { dtype = dtype }
  local a = tgl.zeros(unpack(args))
  local n = numel(shape)
  if n > 0 then
    local p = ffi.cast(PTR[dtype], a:data())
    for i = 0, n - 1 do p[i] = gen() end
  end
  return a
end

local mismatch = S.mismatch

local function same_bits(a, b) return C.tgl_array_equal_bits(a.p, b.p) ~= 0 end

-- ---------------------------------------------------------------------------
-- the program builder
--
-- A record is a value of the program in both forms: var (symbolic) and val
-- (the same expression evaluated eagerly), with its shape and a text for
-- the recipe.  Program:apply runs a Lua function of tgl operations on the
-- variables and on the arrays alike.

local Program = {}
Program.__index = Program

local function new_program(rng)
  local dtype = rng.chance(0.45) and 'float64' or 'float32'
  local p = setmetatable({
    rng = rng, dtype = dtype,
    D = rng.weighted({ { 1, 1 }, { 3, 2 }, { 3, 3 }, { 2, 4 }, { 1, 5 } }),
    T = rng.weighted({ { 1, 0 }, { 2, 1 }, { 3, 2 }, { 4, 3 }, { 3, 5 }, { 1, 8 } }),
    recs = {}, lines = {}, inputs = {}, input_vals = {}, shared = {}, float_leaves = {},
    scans = {}, prefer = {},
  }, Program)
  return p
end

function Program:note(fmt, ...)
  self.lines[#self.lines + 1] = fmt:format(...)
end

function Program:add(var, val, text)
  S.check_forms(var, val, text, self.lines)
  local rec = { var = var, val = val, shape = val:shape(), dtype = val.dtype, id = #self.recs + 1,
                text = text }
  self.recs[#self.recs + 1] = rec
  self:note('r%d = %s  %s %s', rec.id, text, rec.dtype, shape_str(rec.shape))
  return rec
end

local function name_of(a)
  if type(a) == 'table' and a.id then return 'r' .. a.id end
  if tgl.is_array(a) then return 'array' .. shape_str(a:shape()) end
  if type(a) == 'table' then return '{...}' end
  return tostring(a)
end

-- fn applied to records (their var or val) and plain Lua values.
function Program:apply(label, fn, args)
  local s, e, names = {}, {}, {}
  for i, a in ipairs(args) do
    if type(a) == 'table' and a.id then s[i], e[i] = a.var, a.val
    else s[i], e[i] = a, a end
    names[i] = name_of(a)
  end
  local var = fn(unpack(s, 1, #args))
  local val = fn(unpack(e, 1, #args))
  return self:add(var, val, ('%s(%s)'):format(label, table.concat(names, ', ')))
end

-- A float value in [-1.5, 1.5], not on a grid (finite differences and
-- sums see no ties or exact cancellations).
function Program:value() return (self.rng.float() * 3 - 1.5) end

-- A float leaf: an input, a shared variable or a constant.
function Program:leaf(shape, kind, name)
  local val = fill_array(shape, self.dtype, function() return self:value() end)
  kind = kind or self.rng.weighted({ { 6, 'input' }, { 3, 'shared' }, { 1, 'constant' } })
  local var
  if kind == 'input' then
    var = tgl.tensor { dtype = self.dtype, ndim = #shape, name = name }
    self.inputs[#self.inputs + 1] = var
    self.input_vals[#self.input_vals + 1] = val
  elseif kind == 'shared' then
    var = tgl.shared(val:clone(), name)
    self.shared[#self.shared + 1] = { var = var, val = val }
  else
    var = tgl.constant(val)
  end
  local rec = self:add(var, val, kind .. ' ' .. name)
  rec.leaf = kind
  if kind ~= 'constant' then self.float_leaves[#self.float_leaves + 1] = rec end
  return rec
end

-- An int64 index vector of length n over 1..size (repeats allowed unless
-- distinct); an input of the function or a constant.
function Program:index_vector(n, size, distinct)
  local rng = self.rng
  local vals, pool = {}, {}
  for i = 1, size do pool[i] = i end
  for i = 1, n do
    if distinct then vals[i] = table.remove(pool, rng.int(1, #pool))
    else vals[i] = rng.int(1, size) end
    if rng.chance(0.25) then vals[i] = vals[i] - size - 1 end -- negative: counts from the end
  end
  local arr = tgl.array(vals, 'int64')
  if n == 0 then arr = tgl.zeros(0, { dtype = 'int64' }) end
  if rng.chance(0.5) then
    local var = tgl.lvector('idx' .. (#self.inputs + 1))
    self.inputs[#self.inputs + 1] = var
    self.input_vals[#self.input_vals + 1] = arr
    local rec = self:add(var, arr, 'index input {' .. table.concat(vals, ',') .. '}')
    rec.leaf = 'input'
    return rec, vals
  end
  return arr, vals
end

-- ---------------------------------------------------------------------------
-- indexing outside loops

-- A random slice {from, to[, step]} of an axis of size n; its length.
local function random_slice(rng, n)
  local kind = rng.weighted({ { 4, 'range' }, { 1, 'reverse' }, { 1, 'step' }, { 1, 'clamped' } })
  if kind == 'reverse' then return { -1, 1, -1 }, n end
  if n == 0 then return { 1, 2 }, 0 end
  if kind == 'clamped' then
    local a = rng.int(1, n)
    return { a, n + rng.int(1, 3) }, n - a + 1
  end
  local a = rng.int(1, n)
  local b = rng.int(a - 1 >= 1 and a - 1 or a, n) -- b = a - 1: empty
  if kind == 'step' then
    local st = rng.int(2, 3)
    local len = b >= a and math.floor((b - a) / st) + 1 or 0
    return { a, b, st }, len
  end
  local sa, sb = a, b
  if rng.chance(0.3) then sa = a - n - 1 end -- negative bounds count from the end
  if rng.chance(0.3) then sb = b - n - 1 end
  if sb == 0 then sb = b end
  return { sa, sb }, b >= a and b - a + 1 or 0
end

local function slice_text(s) return '{' .. table.concat(s, ',') .. '}' end

-- One indexing step on a record of rank >= 1; the new record or nil.
function Program:indexing(r)
  local rng = self.rng
  local n = r.shape[1]
  local kind = rng.weighted({ { 4, 'slice' }, { 2, 'int' }, { 3, 'adv' }, { 3, 'set' }, { 3, 'inc' },
                              { 2, 'cols' } })
  if kind == 'int' and n >= 1 then
    local k = rng.int(1, n)
    if rng.chance(0.3) then k = k - n - 1 end
    return self:apply('index[' .. k .. ']', function(x) return tgl.index(x, { k }) end, { r })
  elseif kind == 'adv' and n >= 1 then
    local idx, vals = self:index_vector(rng.int(0, n + 2), n, false)
    return self:apply('adv[' .. table.concat(vals, ',') .. ']',
      function(x, i) return tgl.index(x, { i }) end, { r, idx })
  elseif kind == 'cols' and #r.shape == 2 and r.shape[2] >= 1 then
    local idx, vals = self:index_vector(r.shape[2], r.shape[2], rng.chance(0.5))
    return self:apply('cols[' .. table.concat(vals, ',') .. ']',
      function(x, i) return tgl.index(x, { {}, i }) end, { r, idx })
  elseif kind == 'set' or kind == 'inc' then
    local set = kind == 'set'
    local f = set and tgl.set_subtensor or tgl.inc_subtensor
    if n >= 1 and rng.chance(0.5) then
      -- on an index vector: distinct indices for set_subtensor
      local idx, vals = self:index_vector(rng.int(1, n + (set and 0 or 2)), n, set)
      local vshape = { #vals }
      for d = 2, #r.shape do vshape[d] = r.shape[d] end
      local v = self:leaf(vshape, nil, 'v' .. (#self.recs + 1))
      return self:apply(kind .. '_subtensor(adv[' .. table.concat(vals, ',') .. '])',
        function(x, i, y) return f(tgl.index(x, { i }), y) end, { r, idx, v })
    end
    local s, len = random_slice(rng, n)
    local vshape = { len }
    for d = 2, #r.shape do vshape[d] = r.shape[d] end
    local v
    if rng.chance(0.3) then v = rng.int(-4, 4) / 4
    else v = self:leaf(vshape, nil, 'v' .. (#self.recs + 1)) end
    return self:apply(kind .. '_subtensor(' .. slice_text(s) .. ')',
      function(x, y) return f(tgl.index(x, { s }), y) end, { r, v })
  end
  local s = random_slice(rng, n)
  return self:apply('slice' .. slice_text(s), function(x) return tgl.index(x, { s }) end, { r })
end

-- A smooth elementwise op of a record (with a number for mul and add).
function Program:smooth(r)
  local op = self.rng.pick({ 'tanh', 'sigmoid', 'sin', 'mul', 'add', 'softplus' })
  if op == 'mul' or op == 'add' then
    local c = self.rng.int(-6, 6) / 4
    return self:apply(op, tgl[op], { r, c })
  end
  return self:apply(op, tgl[op], { r })
end

-- ---------------------------------------------------------------------------
-- loop bodies
--
-- A body is a list of ops over a list of values whose first entries are
-- fn's arguments.  Every value has a kind: 'vec' (the step's state: D
-- elements, or a B x D batch in batch programs), 'row' (D elements, batch
-- programs only), 'sca' (a scalar) or 'mat' (D x D; only as an argument
-- or an outer value).  The same list runs on the placeholders (building
-- the scan's body) and on arrays (the eager oracle).

local Body = {}
Body.__index = Body

-- The shape of a kind in program p.
local function kind_shape(p, kind)
  if kind == 'vec' then return p.B and { p.B, p.D } or { p.D } end
  if kind == 'row' then return { p.D } end
  if kind == 'mat' then return { p.D, p.D } end
  return {}
end

-- The kind of a record's rows (its shape less the leading axis), or nil.
local function row_kind(p, r)
  local sh = r.shape
  if #sh == 1 then return 'sca' end
  if p.B then
    if #sh == 3 and sh[2] == p.B and sh[3] == p.D then return 'vec' end
    if #sh == 2 and sh[2] == p.D then return 'row' end
  elseif #sh == 2 and sh[2] == p.D then
    return 'vec'
  end
  return nil
end

local RANK = { sca = 0, row = 1, vec = 2 }

local function new_body(p, arg_kinds)
  local b = setmetatable({ p = p, rng = p.rng, D = p.D, B = p.B, ops = {}, kinds = {}, text = {} }, Body)
  for i, k in ipairs(arg_kinds) do b.kinds[i] = k end
  b.nargs = #arg_kinds
  return b
end

function Body:push(kind, text, fn, args)
  self.ops[#self.ops + 1] = { fn = fn, args = args }
  self.kinds[#self.kinds + 1] = kind
  local names = {}
  for i, a in ipairs(args) do names[i] = 'v' .. a end
  self.text[#self.text + 1] = ('v%d = %s(%s) %s'):format(#self.kinds, text, table.concat(names, ','), kind)
  return #self.kinds
end

-- An outer record read by the body through a closure (scan makes it a
-- non-sequence); eager: its value, or the loop's state for a shared
-- variable the loop updates.
function Body:outer(rec, kind)
  self.ops[#self.ops + 1] = { outer = rec }
  self.kinds[#self.kinds + 1] = kind
  self.text[#self.text + 1] = ('v%d = outer r%d %s'):format(#self.kinds, rec.id, kind)
  return #self.kinds
end

function Body:pick(kind)
  local c = {}
  for i = #self.kinds, 1, -1 do if self.kinds[i] == kind then c[#c + 1] = i end end
  if #c == 0 then return nil end
  if self.rng.chance(0.6) then return c[self.rng.int(1, math.min(3, #c))] end
  return c[self.rng.int(1, #c)]
end

function Body:any()
  local want = self.rng.weighted({ { 6, 'vec' }, { self.B and 2 or 0, 'row' }, { 3, 'sca' } })
  return self:pick(want) or self:pick('vec') or self:pick('row') or self:pick('sca')
end

-- One random op.
function Body:step()
  local rng, D, B = self.rng, self.D, self.B
  local kind = rng.weighted({ { 5, 'unary' }, { 6, 'binary' }, { 4, 'dot' }, { 2, 'sum' }, { 2, 'index' },
                              { 2, 'set' }, { 2, 'adv' } })
  local a = self:any()
  if kind == 'unary' then
    local op = rng.pick({ 'tanh', 'sigmoid', 'sin', 'softplus', 'sqr', 'exp_tanh' })
    local f = tgl[op]
    if op == 'sqr' then f = function(x) return x * x * 0.5 end end
    if op == 'exp_tanh' then f = function(x) return tgl.exp(tgl.tanh(x)) end end
    return self:push(self.kinds[a], op, f, { a })
  elseif kind == 'binary' then
    local b = self:any()
    local op = rng.pick({ 'add', 'sub', 'mul', 'gate' })
    local f = tgl[op]
    if op == 'gate' then f = function(x, y) return x * tgl.sigmoid(y) end end
    local k = RANK[self.kinds[a]] >= RANK[self.kinds[b]] and self.kinds[a] or self.kinds[b]
    return self:push(k, op, f, { a, b })
  elseif kind == 'dot' then
    local v = self:pick(B and rng.chance(0.3) and 'row' or 'vec') or self:pick('vec') or self:pick('row')
    if not v then return self:push('sca', 'mul', function(x) return x * 0.5 end, { a }) end
    local m = self:pick('mat')
    if m and rng.chance(0.7) then
      -- a batch times W: a GEMM once specialized
      return self:push(self.kinds[v], 'dot', function(x, w) return tgl.dot(x, w) end, { v, m })
    end
    local w = self:pick(self.kinds[v])
    if self.kinds[v] == 'vec' and B then
      return self:push('sca', 'sum(x*y)', function(x, y) return tgl.sum(x * y) end, { v, w })
    end
    return self:push('sca', 'dot', function(x, y) return tgl.dot(x, y) end, { v, w })
  elseif kind == 'sum' then
    local v = self:pick('vec') or self:pick('row')
    if not v then return self:push('sca', 'tanh', tgl.tanh, { a }) end
    if B and self.kinds[v] == 'vec' and rng.chance(0.5) then
      return self:push('row', 'sum[axis=1]', function(x) return tgl.sum(x, 1) end, { v })
    end
    local op = rng.pick({ 'sum', 'mean' })
    return self:push('sca', op, function(x) return tgl[op](x) end, { v })
  elseif kind == 'index' then
    local v = self:pick('vec') or self:pick('row')
    if not v then return self:push('sca', 'sigmoid', tgl.sigmoid, { a }) end
    -- a batch's row, or a vector's element
    local n = (B and self.kinds[v] == 'vec') and B or D
    local k = rng.int(1, n)
    if rng.chance(0.3) then k = k - n - 1 end
    return self:push((B and self.kinds[v] == 'vec') and 'row' or 'sca', 'index[' .. k .. ']',
      function(x) return tgl.index(x, { k }) end, { v })
  elseif kind == 'set' then
    local v = self:pick('vec')
    if not v then return self:push('sca', 'sin', tgl.sin, { a }) end
    local part = B and (self:pick('row') or self:pick('sca')) or self:pick('sca')
    if part and rng.chance(0.5) then
      local k = rng.int(1, B or D)
      local set = rng.chance(0.5)
      local f = set and tgl.set_subtensor or tgl.inc_subtensor
      return self:push('vec', (set and 'set' or 'inc') .. '[' .. k .. ']',
        function(x, y) return f(tgl.index(x, { k }), y) end, { v, part })
    end
    local w = self:pick('vec')
    local lo = rng.int(1, D)
    local hi = rng.int(lo, D)
    local sl = { lo, hi }
    local spec = B and { {}, sl } or { sl }
    return self:push('vec', 'inc[' .. (B and '{},' or '') .. slice_text(sl) .. ']',
      function(x, y) return tgl.inc_subtensor(tgl.index(x, spec), tgl.index(y, spec)) end, { v, w })
  else -- adv: on the D axis
    local v = self:pick('vec')
    if not v then return self:push('sca', 'tanh', tgl.tanh, { a }) end
    local w = self:pick('vec')
    local idx = {}
    local mode = rng.pick({ 'gather', 'inc', 'set' })
    local pool = {}
    for i = 1, D do pool[i] = i end
    for i = 1, D do idx[i] = mode == 'set' and table.remove(pool, rng.int(1, #pool)) or rng.int(1, D) end
    local arr = tgl.array(idx, 'int64')
    local spec = B and { {}, arr } or { arr }
    local text = mode .. '[' .. (B and '{},' or '') .. table.concat(idx, ',') .. ']'
    if mode == 'gather' then
      return self:push('vec', text, function(x) return tgl.index(x, spec) end, { v })
    end
    local f = mode == 'set' and tgl.set_subtensor or tgl.inc_subtensor
    return self:push('vec', text, function(x, y) return f(tgl.index(x, spec), y) end, { v, w })
  end
end

-- A value of the given kind, bounded (tanh or sigmoid), reading `from`.
function Body:result(kind, from)
  local v = from or self:any()
  local have = self.kinds[v]
  if have ~= kind then
    if kind == 'sca' then
      v = self:push('sca', 'sum', function(x) return tgl.sum(x) end, { v })
    elseif kind == 'row' and have == 'vec' then
      v = self:push('row', 'sum[axis=1]', function(x) return tgl.sum(x, 1) end, { v })
    else
      -- widened by broadcasting against a value of the kind
      v = self:push(kind, 'add', tgl.add, { v, self:pick(kind) })
    end
  end
  local op = self.rng.pick({ 'tanh', 'sigmoid' })
  return self:push(kind, op, tgl[op], { v })
end

-- Runs the body on args (variables or arrays); returns every value.
function Body:run(args, eager, state)
  local vals = {}
  for i = 1, self.nargs do vals[i] = args[i] end
  for _, op in ipairs(self.ops) do
    local v
    if op.outer then
      v = eager and (state and state[op.outer] or op.outer.val) or op.outer.var
    else
      local a = {}
      for i, k in ipairs(op.args) do a[i] = vals[k] end
      v = op.fn(unpack(a, 1, #op.args))
    end
    vals[#vals + 1] = v
  end
  return vals
end

-- ---------------------------------------------------------------------------
-- loops

local SEQ_TAPS = { { 6, { 0 } }, { 3, { -1, 0 } }, { 1, { -1 } }, { 1, { 0, 1 } }, { 1, { -2, 0 } } }

-- Builds one scan over candidates (records); records its results.
function Program:scan_stage(cands, allow_updates)
  local rng, D = self.rng, self.D
  local sc = { seqs = {}, outs = {}, nonseqs = {}, index = #self.scans + 1 }
  local arg_kinds = {}
  -- sequences
  local nseq = rng.weighted({ { 1, 0 }, { 5, 1 }, { 2, 2 } })
  local seqc = {}
  for _, r in ipairs(cands) do if row_kind(self, r) then seqc[#seqc + 1] = r end end
  if #seqc == 0 then nseq = 0 end
  local avail = math.huge
  local span_short = false
  for i = 1, nseq do
    local r = seqc[rng.int(1, #seqc)]
    -- the first loop reads the sparse leaves' windows first
    local pref = sc.index == 1 and self.prefer[i]
    if pref and row_kind(self, pref) and rng.chance(0.8) then r = pref end
    local taps = rng.weighted(SEQ_TAPS)
    local len = r.shape[1]
    -- a sequence too short for its taps runs no step: now and then
    if len <= taps[#taps] - taps[1] and rng.chance(0.7) then taps = { 0 } end
    local span = taps[#taps] - taps[1]
    if len < span then span_short = true end
    avail = math.min(avail, math.max(0, len - span))
    sc.seqs[i] = { rec = r, taps = taps }
    for _ = 1, #taps do arg_kinds[#arg_kinds + 1] = row_kind(self, r) end
  end
  -- outputs: fed back through tap -1 ('fb1'), taps {-2,-1} ('fb2'), or not
  local nout = rng.weighted({ { 4, 1 }, { 4, 2 }, { 2, 3 } })
  for k = 1, nout do
    local how = rng.weighted({ { 5, 'fb1' }, { 2, 'fb2' }, { 3, 'nofb' } })
    local kind = rng.weighted({ { 7, 'vec' }, { self.B and 2 or 0, 'row' }, { 3, 'sca' } })
    sc.outs[k] = { how = how, kind = kind }
  end
  -- n_steps
  local nmode
  if nseq == 0 then nmode = rng.chance(0.5) and 'number' or 'symbolic'
  elseif span_short then nmode = 'zero'
  else nmode = rng.weighted({ { 6, 'auto' }, { 2, 'number' }, { 2, 'symbolic' } }) end
  local n
  if nmode == 'auto' then n = avail
  elseif nmode == 'zero' then n = 0
  else
    local hi = nseq == 0 and 4 or avail
    n = rng.weighted({ { 1, 0 }, { 4, rng.int(0, hi) }, { 3, hi } })
  end
  sc.n, sc.nmode = n, nmode
  sc.go_backwards = nseq > 0 and rng.chance(0.25)
  -- truncated backpropagation (the gradient is then not the cost's:
  -- compared between modes only)
  if self.grads and n >= 2 and rng.chance(0.1) then sc.truncate = rng.int(1, n - 1) end
  -- initial values, in outputs order: a fresh leaf or an indexed record
  for _, o in ipairs(sc.outs) do
    if o.how ~= 'nofb' then
      local shape = kind_shape(self, o.kind)
      local init
      for _, r in ipairs(cands) do
        -- rows 1..2 (or row 1) of a record whose rows have the kind
        if not init and row_kind(self, r) == o.kind and r.shape[1] >= 2 and rng.chance(0.3) then
          if o.how == 'fb2' then
            init = self:apply('slice{1,2}', function(x) return tgl.index(x, { { 1, 2 } }) end, { r })
          else
            init = self:apply('index[1]', function(x) return tgl.index(x, { 1 }) end, { r })
          end
        end
      end
      if o.how == 'fb2' then table.insert(shape, 1, 2) end
      o.init = init or self:leaf(shape, nil, ('init%d_%d'):format(sc.index, #self.recs + 1))
      for _ = 1, o.how == 'fb2' and 2 or 1 do arg_kinds[#arg_kinds + 1] = o.kind end
    end
  end
  -- non-sequences: a matrix and a vector, listed or closed over
  local W = self.W or self:leaf({ D, D }, rng.chance(0.6) and 'shared' or 'input', 'W')
  local bvec = self.b or self:leaf({ D }, rng.weighted({ { 3, 'shared' }, { 2, 'input' }, { 1, 'constant' } }), 'b')
  self.W, self.b = W, bvec
  local bkind = self.B and 'row' or 'vec'
  local listed = rng.chance(0.6)
  if listed then
    sc.nonseqs = { W, bvec }
    arg_kinds[#arg_kinds + 1] = 'mat'
    arg_kinds[#arg_kinds + 1] = bkind
  end
  local body = new_body(self, arg_kinds)
  if not listed then
    body:outer(W, 'mat')
    body:outer(bvec, bkind)
  end
  -- a shared variable the loop updates (its state at every step)
  if allow_updates and rng.chance(0.3) then
    local S = self:leaf(kind_shape(self, 'vec'), 'shared', 'S' .. sc.index)
    sc.update = { rec = S, at = body:outer(S, 'vec') }
  end
  -- every kind an output may need is at hand
  if not body:pick('vec') then
    body:outer(self:leaf(kind_shape(self, 'vec'), nil, 'H' .. sc.index), 'vec')
  end
  if not body:pick('sca') then body:push('sca', 'sum', function(x) return tgl.sum(x) end, { body:pick('vec') }) end
  for _ = 1, rng.int(2, 12) do body:step() end
  -- the arguments no op read, summed (with a vector: a value of the
  -- widest kind), so that the outputs depend on every sequence
  local used = {}
  for _, op in ipairs(body.ops) do for _, a in ipairs(op.args or {}) do used[a] = true end end
  local mix
  for i = 1, body.nargs do
    if not used[i] and body.kinds[i] ~= 'mat' then
      if not mix then mix = i
      else
        local k = RANK[body.kinds[mix]] >= RANK[body.kinds[i]] and body.kinds[mix] or body.kinds[i]
        mix = body:push(k, 'add', tgl.add, { mix, i })
      end
    end
  end
  -- each fed-back output reads its own earlier value: every loop recurs
  local at = 0
  for _, s in ipairs(sc.seqs) do at = at + #s.taps end
  for k, o in ipairs(sc.outs) do
    local from
    if o.how ~= 'nofb' then
      local prev = at + (o.how == 'fb2' and 2 or 1)
      at = prev
      local partner = body:pick(o.kind)
      if RANK[o.kind] > 0 and rng.chance(0.5) then partner = body:any() end
      if RANK[body.kinds[partner]] > RANK[o.kind] then partner = body:pick(o.kind) end
      from = body:push(o.kind, 'add', tgl.add, { prev, partner })
    end
    if not from and rng.chance(0.5) then body:step() end
    if mix and (k == 1 or rng.chance(0.5)) then
      local base = from or body:any()
      local mk = body.kinds[mix]
      if RANK[mk] > RANK[o.kind] then
        -- narrowed to the output's kind
        mix = o.kind == 'sca' and body:push('sca', 'sum', function(x) return tgl.sum(x) end, { mix })
              or body:push('row', 'sum[axis=1]', function(x) return tgl.sum(x, 1) end, { mix })
        mk = body.kinds[mix]
      end
      local bk = body.kinds[base]
      from = body:push(RANK[bk] >= RANK[mk] and bk or mk, 'add', tgl.add, { base, mix })
    end
    o.at = body:result(o.kind, from)
  end
  if sc.update then
    local v = body:push('vec', 'gate', function(x, y) return x * tgl.sigmoid(y) end, { sc.update.at, body:any() })
    sc.update.out = body:result('vec', v)
  end
  sc.body = body
  self:build_scan(sc)
  return sc
end

-- The symbolic scan and its eager twin; records the results.
function Program:build_scan(sc)
  local body = sc.body
  local seqs = {}
  for i, s in ipairs(sc.seqs) do
    seqs[i] = (#s.taps == 1 and s.taps[1] == 0 and self.rng.chance(0.5)) and s.rec.var
              or { input = s.rec.var, taps = s.taps }
  end
  local infos = {}
  for k, o in ipairs(sc.outs) do
    if o.how == 'fb1' then infos[k] = o.init.var
    elseif o.how == 'fb2' then infos[k] = { initial = o.init.var, taps = { -2, -1 } }
    else infos[k] = false end
  end
  local nonseqs = {}
  for i, r in ipairs(sc.nonseqs) do nonseqs[i] = r.var end
  local n_steps
  if sc.nmode == 'number' or sc.nmode == 'zero' then n_steps = sc.n
  elseif sc.nmode == 'symbolic' then
    n_steps = tgl.lscalar('n' .. sc.index)
    self.inputs[#self.inputs + 1] = n_steps
    self.input_vals[#self.input_vals + 1] = tgl.array(sc.n, 'int64')
  end
  local opts = {
    fn = function(...)
      local vals = body:run({ ... }, false)
      local outs = {}
      for k, o in ipairs(sc.outs) do outs[k] = vals[o.at] end
      if sc.update then return outs, { { sc.update.rec.var, vals[sc.update.out] } } end
      return outs
    end,
    sequences = seqs, outputs_info = infos, non_sequences = nonseqs, n_steps = n_steps,
    go_backwards = sc.go_backwards or nil, truncate_gradient = sc.truncate, name = 'loop' .. sc.index,
  }
  local results, updates = tgl.scan(opts)
  if tgl.is_variable(results) then results = { results } end
  sc.updates = updates
  -- the eager twin
  local evals, final = self:eager_scan(sc)
  local desc = {}
  for i, s in ipairs(sc.seqs) do desc[#desc + 1] = ('seq r%d taps {%s}'):format(s.rec.id, table.concat(s.taps, ',')) end
  for k, o in ipairs(sc.outs) do
    desc[#desc + 1] = ('out%d %s %s%s'):format(k, o.how, o.kind, o.init and (' init r' .. o.init.id) or '')
  end
  self:note('loop%d: %s; n_steps %s = %d%s%s%s; nonseqs %s', sc.index, table.concat(desc, ', '), sc.nmode, sc.n,
    sc.go_backwards and ', go_backwards' or '', sc.truncate and (', truncate_gradient ' .. sc.truncate) or '',
    sc.update and (', updates r' .. sc.update.rec.id) or '',
    #sc.nonseqs > 0 and 'listed' or 'closed over')
  for _, t in ipairs(body.text) do self:note('    %s', t) end
  sc.results = {}
  for k, o in ipairs(sc.outs) do
    sc.results[k] = self:add(results[k], evals[k], ('loop%d output %d'):format(sc.index, k))
    sc.results[k].zero_steps = sc.n == 0
    sc.results[k].nofb = o.how == 'nofb'
  end
  if sc.update then sc.update.final = final end
  self.scans[#self.scans + 1] = sc
end

-- The loop run step by step on arrays: scan's meaning, written out.
function Program:eager_scan(sc)
  local D = self.D
  local seqv, mins = {}, {}
  for i, s in ipairs(sc.seqs) do
    local v = s.rec.val
    if sc.go_backwards then v = tgl.index(v, { { -1, 1, -1 } }) end
    seqv[i], mins[i] = v, s.taps[1]
  end
  local bufs = {}
  for k, o in ipairs(sc.outs) do
    if o.how == 'fb1' then bufs[k] = { o.init.val }
    elseif o.how == 'fb2' then bufs[k] = { tgl.index(o.init.val, { 1 }), tgl.index(o.init.val, { 2 }) } end
  end
  local state = {}
  if sc.update then state[sc.update.rec] = sc.update.rec.val end
  local steps = {}
  for k = 1, #sc.outs do steps[k] = {} end
  for t = 0, sc.n - 1 do
    local args = {}
    for i, s in ipairs(sc.seqs) do
      for _, tp in ipairs(s.taps) do args[#args + 1] = tgl.index(seqv[i], { t + tp - mins[i] + 1 }) end
    end
    for k, o in ipairs(sc.outs) do
      if o.how == 'fb1' then args[#args + 1] = bufs[k][#bufs[k]]
      elseif o.how == 'fb2' then
        args[#args + 1] = bufs[k][#bufs[k] - 1]
        args[#args + 1] = bufs[k][#bufs[k]]
      end
    end
    for _, r in ipairs(sc.nonseqs) do args[#args + 1] = r.val end
    local vals = sc.body:run(args, true, state)
    for k, o in ipairs(sc.outs) do
      local v = vals[o.at]
      steps[k][t + 1] = v
      if bufs[k] then bufs[k][#bufs[k] + 1] = v end
    end
    if sc.update then state[sc.update.rec] = vals[sc.update.out] end
  end
  local res = {}
  for k, o in ipairs(sc.outs) do
    if sc.n == 0 then
      local shape = kind_shape(self, o.kind)
      table.insert(shape, 1, 0)
      res[k] = fill_array(shape, self.dtype, function() return 0 end)
    else
      res[k] = tgl.stack(steps[k], 1)
    end
  end
  return res, sc.update and state[sc.update.rec]
end

-- ---------------------------------------------------------------------------
-- a case

local function random_case(seed)
  local rng = new_rng(seed)
  local p = new_program(rng)
  local D, T = p.D, p.T
  -- batch programs: the step's state is a B x D matrix (sequences
  -- T x B x D), so the body's products become GEMMs
  if rng.chance(0.35) then p.B = rng.int(1, 3) end
  local grads = rng.chance(0.75)
  p.grads = grads
  -- leaves and indexing before the loops
  local X = p:leaf(p.B and { T, p.B, D } or { T, D }, rng.chance(0.8) and 'input' or 'shared', 'X')
  local cands = { X }
  if rng.chance(0.5) then cands[#cands + 1] = p:leaf({ T + rng.int(0, 2) }, nil, 'y') end
  if p.B and rng.chance(0.5) then cands[#cands + 1] = p:leaf({ T + rng.int(0, 1), D }, nil, 'z') end
  -- leaves read only through indexing, whose gradients are sparse (an
  -- embedding's rows gathered by an index vector, a window of a longer
  -- sequence): an SGD step of such a leaf is rewritten into an
  -- inc_subtensor of the leaf itself
  if rng.chance(0.4) then
    local V = rng.int(1, 6)
    local E = p:leaf({ V, D }, rng.chance(0.6) and 'shared' or 'input', 'E')
    local idx, vals = p:index_vector(T, V, false)
    cands[#cands + 1] = p:apply('adv[' .. table.concat(vals, ',') .. ']',
      function(x, i) return tgl.index(x, { i }) end, { E, idx })
    p.prefer[#p.prefer + 1] = cands[#cands]
  end
  if rng.chance(0.3) then
    local Y = p:leaf(p.B and { T + 2, p.B, D } or { T + 2, D }, nil, 'Yw')
    local from = rng.int(1, 3)
    local sl = { from, from + T - 1 }
    if T == 0 then sl = { from + 1, from } end -- empty
    cands[#cands + 1] = p:apply('slice' .. slice_text(sl), function(x) return tgl.index(x, { sl }) end, { Y })
    p.prefer[#p.prefer + 1] = cands[#cands]
  end
  for _ = 1, rng.int(1, 4) do
    local r = cands[rng.int(1, #cands)]
    local nr
    if #r.shape >= 1 and rng.chance(0.7) then nr = p:indexing(r)
    elseif #r.shape == 2 and r.shape[2] == D and rng.chance(0.5) then
      p.W = p.W or p:leaf({ D, D }, rng.chance(0.6) and 'shared' or 'input', 'W')
      nr = p:apply('dot', tgl.dot, { r, p.W })
    else nr = p:smooth(r) end
    if nr then cands[#cands + 1] = nr end
  end
  -- one or two loops (updates inside a loop only where no gradient is taken)
  local sc = p:scan_stage(cands, not grads)
  local outs = {}
  for _, r in ipairs(sc.results) do outs[#outs + 1] = r end
  if rng.chance(0.3) then
    local c2 = {}
    for _, r in ipairs(sc.results) do c2[#c2 + 1] = r end
    for _, r in ipairs(cands) do if rng.chance(0.3) then c2[#c2 + 1] = r end end
    local sc2 = p:scan_stage(c2, not grads)
    for _, r in ipairs(sc2.results) do outs[#outs + 1] = r end
  end
  -- indexing and reductions of the results
  local post = {}
  for _, r in ipairs(outs) do
    if rng.chance(0.6) then
      local k = rng.weighted({ { 3, 'index' }, { 1, 'sum' }, { 1, 'dot' }, { 1, 'smooth' } })
      local nr
      if k == 'index' and #r.shape >= 1 then nr = p:indexing(r)
      elseif k == 'sum' and #r.shape >= 1 then
        nr = p:apply('sum[axis=1]', function(x) return tgl.sum(x, 1) end, { r })
      elseif k == 'dot' and #r.shape == 2 and r.shape[2] == D and p.W then
        nr = p:apply('dot', tgl.dot, { r, p.W })
      else nr = p:smooth(r) end
      post[#post + 1] = nr
    end
  end
  for _, r in ipairs(post) do outs[#outs + 1] = r end
  if rng.chance(0.3) then outs[#outs + 1] = cands[rng.int(1, #cands)] end
  p.outputs = outs
  -- the cost: a weighted sum of some results, and its gradients
  if grads then
    local terms = {}
    for _, r in ipairs(outs) do
      if #terms == 0 or rng.chance(0.6) then
        local c = fill_array(r.shape, p.dtype, function() return rng.float() * 2 - 1 end)
        terms[#terms + 1] = p:apply('sum(r*c)', function(x, w) return tgl.sum(x * w) end, { r, c })
      end
    end
    local cost = terms[1]
    for i = 2, #terms do cost = p:apply('add', tgl.add, { cost, terms[i] }) end
    p.cost = cost
    p.wrt = {}
    for _, l in ipairs(p.float_leaves) do p.wrt[#p.wrt + 1] = l end
    local wvars = {}
    for i, l in ipairs(p.wrt) do wvars[i] = l.var end
    p.grad_vars = tgl.grad(cost.var, wvars, { disconnected = 'ignore' })
    if tgl.is_variable(p.grad_vars) then p.grad_vars = { p.grad_vars } end
    local w = {}
    for i, l in ipairs(p.wrt) do w[i] = 'r' .. l.id end
    p:note('cost r%d; gradients with respect to %s', cost.id, table.concat(w, ', '))
    -- SGD steps leaf - lr * gradient, as outputs or as updates of shared
    -- leaves (what a training step computes; rewrites fold the scale into
    -- the gradient's own graph, as in issue 19's slice)
    p.steps, p.hidden = {}, {}
    for i, l in ipairs(p.wrt) do
      if rng.chance(0.4) then
        local lr = rng.pick({ 0.5, 0.1, 1, 2 })
        local as_update = l.leaf == 'shared' and rng.chance(0.6)
        -- the gradient read by the step alone (not an output too), as in
        -- a training step, where rewrites may fold the step into it
        local hidden = rng.chance(0.5)
        p.steps[#p.steps + 1] = { i = i, lr = lr, update = as_update }
        if hidden then p.hidden[i] = true end
        p:note('step r%d - %g * gradient %d%s%s', l.id, lr, i, as_update and ' (an update)' or '',
          hidden and ', the gradient not an output' or '')
      end
    end
  end
  local o = {}
  for i, r in ipairs(outs) do o[i] = 'r' .. r.id end
  p:note('outputs: %s', table.concat(o, ', '))
  return p
end

-- ---------------------------------------------------------------------------
-- running a case

-- What the cases exercised, for the coverage check: programs built
-- (cases), compiled and run (cases_run), and counts of loops or programs
-- with each feature.
local stats = { cases = 0, cases_run = 0, fd_checked = 0, gemm = 0, zero_steps = 0, zero_nofb = 0,
                taps2 = 0, fb2 = 0, nofb = 0, backwards = 0, symbolic = 0, updates = 0, two_loops = 0,
                adv = 0, set = 0, inc = 0, multi_out = 0, no_seq = 0, batch = 0, truncated = 0,
                grads64 = 0, step_out = 0, step_update = 0 }

local function note_stats(p)
  stats.cases = stats.cases + 1
  if #p.scans > 1 then stats.two_loops = stats.two_loops + 1 end
  if p.B then stats.batch = stats.batch + 1 end
  if p.grads and p.dtype == 'float64' then stats.grads64 = stats.grads64 + 1 end
  for _, st in ipairs(p.steps or {}) do
    if st.update then stats.step_update = stats.step_update + 1 else stats.step_out = stats.step_out + 1 end
  end
  for _, sc in ipairs(p.scans) do
    if sc.n == 0 then stats.zero_steps = stats.zero_steps + 1 end
    if sc.go_backwards then stats.backwards = stats.backwards + 1 end
    if sc.nmode == 'symbolic' then stats.symbolic = stats.symbolic + 1 end
    if sc.update then stats.updates = stats.updates + 1 end
    if sc.truncate then stats.truncated = stats.truncated + 1 end
    if #sc.outs > 1 then stats.multi_out = stats.multi_out + 1 end
    if #sc.seqs == 0 then stats.no_seq = stats.no_seq + 1 end
    for _, s in ipairs(sc.seqs) do if #s.taps > 1 then stats.taps2 = stats.taps2 + 1 end end
    for _, o in ipairs(sc.outs) do
      if o.how == 'fb2' then stats.fb2 = stats.fb2 + 1 end
      if o.how == 'nofb' then
        stats.nofb = stats.nofb + 1
        if sc.n == 0 then stats.zero_nofb = stats.zero_nofb + 1 end
      end
    end
  end
  local text = table.concat(p.lines, '\n')
  if text:find('adv%[') or text:find('gather%[') or text:find('cols%[') then stats.adv = stats.adv + 1 end
  if text:find('set_subtensor') or text:find('set%[') then stats.set = stats.set + 1 end
  if text:find('inc_subtensor') or text:find('inc%[') then stats.inc = stats.inc + 1 end
end

-- Central finite differences of the cost, computed by the reference
-- function of the cost alone (FAST_COMPILE, vm), for the float leaves
-- whose positions in p.wrt are keys of want: leaf position -> array.
local function finite_differences(p, want)
  local cf = tgl.compile { inputs = p.inputs, outputs = p.cost.var, mode = REF_MODE, linker = REF_LINKER,
                           name = 'cost' }
  local out = {}
  for i, l in ipairs(p.wrt) do
    if want[i] then
      local g = fill_array(l.shape, 'float64', function() return 0 end)
      local gp = ffi.cast('double *', g:data())
      local base = l.val:clone()
      local bp = ffi.cast('double *', base:data())
      local vals = {}
      for k, v in ipairs(p.input_vals) do vals[k] = v end
      local slot, sh
      for k, v in ipairs(p.inputs) do if v == l.var then slot = k end end
      for _, s in ipairs(p.shared) do if s.var == l.var then sh = s end end
      -- the cost with base as the leaf's value
      local function cost()
        local arr = base:clone()
        if slot then vals[slot] = arr end
        if sh then sh.var:set_value(arr) end
        return tonumber(cf(unpack(vals, 1, #p.inputs)):get())
      end
      for j = 0, numel(l.shape) - 1 do
        local x0 = bp[j]
        bp[j] = x0 + FD_EPS
        local fplus = cost()
        bp[j] = x0 - FD_EPS
        local fminus = cost()
        bp[j] = x0
        gp[j] = (fplus - fminus) / (2 * FD_EPS)
      end
      if sh then sh.var:set_value(sh.val:clone()) end
      out[i] = g
    end
  end
  return out
end

local function run_case(seed)
  local p = random_case(seed)
  note_stats(p)
  stats.cases_run = stats.cases_run + 1
  local empty = false
  for _, sc in ipairs(p.scans) do empty = empty or sc.n == 0 end
  local header = ('property loop case seed=%d (%s, %sD=%d, T=%d, %d loops%s%s); rerun with TGL_PROP_SEED=%d '
    .. 'TGL_PROP_CASES=1'):format(seed, p.dtype, p.B and ('B=' .. p.B .. ', ') or '', p.D, p.T, #p.scans,
    empty and ', a loop runs 0 steps' or '',
    p.grads and ', gradients' or '', seed)
  local recipe = table.concat(p.lines, '\n')
  local function fail(msg, f)
    local prog = ''
    if f then
      local ok, text = pcall(f.program, f)
      if ok then prog = '\nprogram:\n' .. (#text > 6000 and (text:sub(1, 6000) .. '\n...') or text) end
    end
    error(header .. '\n' .. msg .. '\nrecipe:\n' .. recipe .. prog, 0)
  end
  if DEBUG_OUT then io.stderr:write(header, '\n', recipe, '\n') end
  local outvars = {}
  for i, r in ipairs(p.outputs) do outvars[i] = r.var end
  local nfwd = #outvars
  -- after the eager outputs: results the reference gives (gradients, SGD
  -- steps), what each is, and shared variables the steps update
  local derived, derived_leaf, updates, stepped = {}, {}, {}, {}
  local grad_at = {} -- leaf -> position of its gradient in derived
  if p.grads then
    for i, g in ipairs(p.grad_vars) do
      if not p.hidden[i] then
        outvars[#outvars + 1] = g
        derived[#derived + 1] = ('gradient %d (of r%d)'):format(i, p.wrt[i].id)
        derived_leaf[#derived] = p.wrt[i]
        grad_at[i] = #derived
      end
    end
    for _, st in ipairs(p.steps) do
      local leaf = p.wrt[st.i]
      local v = leaf.var - st.lr * p.grad_vars[st.i]
      if st.update then
        updates[#updates + 1] = { leaf.var, v }
        stepped[#stepped + 1] = leaf
      else
        outvars[#outvars + 1] = v
        derived[#derived + 1] = ('step of r%d'):format(leaf.id)
        derived_leaf[#derived] = leaf
      end
    end
  end
  for _, sc in ipairs(p.scans) do
    for _, u in ipairs(sc.updates or {}) do updates[#updates + 1] = u end
  end
  local in_copy = {}
  for i, a in ipairs(p.input_vals) do in_copy[i] = a:clone() end
  local function reset_shared()
    for _, s in ipairs(p.shared) do s.var:set_value(s.val:clone()) end
  end
  -- the reference first: its gradients are what the others must give
  local order = { { REF_MODE, REF_LINKER } }
  for _, m in ipairs(MODES) do
    for _, l in ipairs(LINKERS) do
      if not (m == REF_MODE and l == REF_LINKER) then order[#order + 1] = { m, l } end
    end
  end
  local ref_derived, ref_stepped
  for _, ml in ipairs(order) do
    local mode, linker = ml[1], ml[2]
    local where = ('mode %s, linker %s'):format(mode, linker)
    reset_shared()
    local ok, f = pcall(tgl.compile, { inputs = p.inputs, outputs = outvars, updates = updates, mode = mode,
                                       linker = linker, name = 'prop' })
    if not ok then fail(where .. ': compile failed: ' .. tostring(f)) end
    if mode == 'FAST_RUN' and linker == 'cvm' and f:program():find('gemm', 1, true) then
      stats.gemm = stats.gemm + 1
    end
    local first
    -- call 2 binds the loops' bodies (engine/step.c), call 3 runs them bound
    for call = 1, 3 do
      reset_shared()
      f.trust_input = call >= 2
      local res = { pcall(f, unpack(p.input_vals, 1, #p.inputs)) }
      if not res[1] then fail(('%s, call %d: %s'):format(where, call, tostring(res[2])), f) end
      if #res - 1 ~= #outvars then
        fail(('%s, call %d: %d results for %d outputs'):format(where, call, #res - 1, #outvars), f)
      end
      for i = 1, nfwd do
        local r = p.outputs[i]
        local m = mismatch(r.val, res[i + 1], TOL[p.dtype])
        if m then fail(('%s, call %d, output %d (r%d): %s'):format(where, call, i, r.id, m), f) end
      end
      local after = {}
      for i, leaf in ipairs(stepped) do after[i] = leaf.var:get_value() end
      if not ref_derived then
        -- the reference's gradients and steps have their leaf's dtype and
        -- shape (and hold no NaN)
        for i = 1, #derived do
          local m = mismatch(derived_leaf[i].val, res[nfwd + i + 1], { abs = math.huge, rel = 0 })
          if m then fail(('%s, call %d, %s: %s'):format(where, call, derived[i], m), f) end
        end
      else
        for i = 1, #derived do
          local m = mismatch(ref_derived[i], res[nfwd + i + 1], GRAD_TOL[p.dtype])
          if m then
            fail(('%s, call %d, %s differs from %s/%s: %s'):format(where, call, derived[i], REF_MODE, REF_LINKER, m), f)
          end
        end
        for i, leaf in ipairs(stepped) do
          local m = mismatch(ref_stepped[i], after[i], GRAD_TOL[p.dtype])
          if m then
            fail(('%s, call %d: shared r%d after its SGD update differs from %s/%s: %s'):format(where, call, leaf.id,
              REF_MODE, REF_LINKER, m), f)
          end
        end
      end
      for _, sc in ipairs(p.scans) do
        if sc.update then
          local m = mismatch(sc.update.final, sc.update.rec.var:get_value(), TOL[p.dtype])
          if m then
            fail(('%s, call %d: shared r%d after the call: %s'):format(where, call, sc.update.rec.id, m), f)
          end
        end
      end
      if call == 1 then
        first = {}
        for i = 2, #res do first[i - 1] = res[i]:clone() end
        if not ref_derived then
          ref_derived, ref_stepped = {}, after
          for i = 1, #derived do ref_derived[i] = res[nfwd + i + 1]:clone() end
        end
      else
        for i = 1, #outvars do
          if not same_bits(first[i], res[i + 1]) then
            fail(('%s: result %d of call %d differs from call 1'):format(where, i, call), f)
          end
        end
      end
    end
    for i, a in ipairs(p.input_vals) do
      if not same_bits(in_copy[i], a) then fail(('%s: input %d was written into'):format(where, i), f) end
    end
  end
  reset_shared()
  -- float64: the reference gradient against finite differences
  local truncated = false
  for _, sc in ipairs(p.scans) do truncated = truncated or sc.truncate ~= nil end
  if p.grads and p.dtype == 'float64' and not truncated then
    local ok, fd = pcall(finite_differences, p, grad_at)
    if not ok then fail('finite differences: ' .. tostring(fd)) end
    for i, g in pairs(fd) do
      local m = mismatch(g, ref_derived[grad_at[i]], FD_TOL)
      if m then
        fail(('%s/%s: gradient %d (of r%d) differs from finite differences: %s'):format(REF_MODE, REF_LINKER, i,
          p.wrt[i].id, m))
      end
    end
    stats.fd_checked = stats.fd_checked + 1
  end
end

-- spec/scan_loop_spec.lua reuses the generator (its random programs run
-- there generated and interpreted): loaded with PROPERTY_SCAN_EXPORT set,
-- this file returns it and defines no test.
if PROPERTY_SCAN_EXPORT then return { random_case = random_case } end

-- ---------------------------------------------------------------------------

describe('random programs with loops, indexing and gradients', function()
  for k = 1, CASES do
    local seed = BASE_SEED + k - 1
    it(('case %d (seed %d) gives the eager values and the reference gradients in every mode and linker')
      :format(k, seed), function() run_case(seed) end)
  end

  it('the generator covers what it promises (taps, several outputs, 0-step runs, indexing, gradients)', function()
    -- over the default cases' programs (built, not compiled), so a change
    -- to the generator cannot silently lose coverage
    if stats.cases < CASES then
      for k = stats.cases + 1, CASES do note_stats(random_case(BASE_SEED + k - 1)) end
    end
    local n = math.max(CASES, 40)
    if stats.cases < n then
      for k = stats.cases + 1, n do note_stats(random_case(BASE_SEED + k - 1)) end
    end
    for _, what in ipairs({ 'zero_steps', 'zero_nofb', 'taps2', 'fb2', 'nofb', 'backwards', 'symbolic', 'updates',
                            'two_loops', 'adv', 'set', 'inc', 'multi_out', 'no_seq', 'batch', 'truncated',
                            'grads64', 'step_out', 'step_update' }) do
      assert.is_true(stats[what] > 0, 'the generator made no case with ' .. what)
    end
    -- and, when enough cases ran in this process to tell, a body's
    -- product became a GEMM and finite differences checked gradients
    if stats.cases_run >= 40 then
      assert.is_true(stats.gemm > 0, 'no FAST_RUN program had a gemm')
      assert.is_true(stats.fd_checked > 0, 'no gradient was checked against finite differences')
    end
  end)
end)

describe('DEBUG runs the reference of every fused group (issue 19)', function()
  -- The gradient of a slice: a late rewrite folds x - 0.5 * grad into an
  -- inc_subtensor whose fused mul reads the constant -0.5 padded to a
  -- vector (a dimshuffle of a constant, an immediate of the fused
  -- program); the reference path found no such operand.
  local SRC = [[
local x = tgl.vector('x')
local y = x - 0.5 * tgl.grad(tgl.sum(x[{{2, 3}}]), x)
]]
  local load_src = loadstring or load

  it('computes the gradient of a slice as FAST_RUN does, with every linker', function()
    local env = setmetatable({ tgl = tgl }, { __index = _G })
    local chunk = assert(load_src(SRC .. 'return x, y'))
    setfenv(chunk, env)
    local x, y = chunk()
    local fast = tgl.compile { inputs = { x }, outputs = y }
    assert.are.same({ 1, 1.5, 2.5 }, fast({ 1, 2, 3 }):totable())
    for _, linker in ipairs(LINKERS) do
      local f = tgl.compile { inputs = { x }, outputs = y, mode = 'DEBUG', linker = linker }
      assert.are.same({ 1, 1.5, 2.5 }, f({ 1, 2, 3 }):totable(), linker)
      assert.are.same({ 4, 4.5, 5.5 }, f({ 4, 5, 6 }):totable(), linker)
    end
  end)

  it('runs the same program on reference kernels when no C compiler is found', function()
    -- the reference path is also what FAST_RUN runs without a compiler
    local dir = os.tmpname()
    os.remove(dir)
    local out, err, code = run_process(([[
tgl.config.cache_dir = %q
tgl.config.cc = '/nonexistent/cc'
tgl.config.compile = 'sync'
%s
for _, mode in ipairs({ 'FAST_RUN', 'DEBUG' }) do
  local f = tgl.compile { inputs = { x }, outputs = y, mode = mode }
  print(mode, table.concat(f({ 1, 2, 3 }):totable(), ' '))
end
]]):format(dir, SRC))
    os.execute(('rm -rf %q'):format(dir))
    assert.are.equal(0, code, err)
    assert.are.equal('FAST_RUN\t1 1.5 2.5\nDEBUG\t1 1.5 2.5\n', out)
    -- (on cuda the kernels come from NVRTC, not the C compiler: no warning)
    if tgl.config.device ~= 'cuda' then
      assert.truthy(err:find('no C compiler', 1, true), err)
    end
  end)
end)
