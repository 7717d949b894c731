-- property_fill_spec.lua — property test of the rewrites that remove
-- arrays of ones and zeros from gradients (canonicalize.c: fill_source,
-- fill_elemwise; doc/compile.md "The rules").  The gradient of sum(e)
-- starts from fill_like(e, 1); the rules drop such fills where another
-- operand provably has their shape, and move a fill's shape source to an
-- earlier node of the same shape.  A wrong proof would give a wrong shape
-- or a wrong broadcast, so this spec draws graphs where shapes are easy
-- to get wrong: a seeded generator builds random elementwise graphs over
-- a frame of rank 0 to 3 with axes of size 1 (broadcastable or not),
-- lower-rank operands that left-pad, reductions with keepdims and over
-- leading axes, switch (whose gradient has fills of zeros), floor (a
-- gradient of zeros), x^0 (a fill of ones) and powers; its cost is a sum
-- of sum(e), sum(e^2), sum(e * e'), mean(e) and s * sum(e) terms (s a
-- symbolic scalar), and the outputs are the cost and its gradient with
-- respect to every input.
--
-- Each graph is compiled in FAST_RUN and FAST_COMPILE with the rules on,
-- and in FAST_RUN with them off; every output must have the dtype and
-- shape of FAST_COMPILE with the rules off (the reference) and its values
-- within a tolerance by dtype.  The FAST_RUN program never has more
-- fill_like instructions with the rules on than off, and over the cases
-- the rules must remove some (else the generator lost its coverage).
--
-- Reproducing a failure: each case prints its seed; run
--   TGL_PROP_SEED=<seed> TGL_PROP_CASES=1 build/tgl lua/busted_host.lua spec/property_fill_spec.lua
-- ('random' draws a seed from the clock).  TGL_PROP_DEBUG=1 prints each
-- case's recipe on stderr before compiling it.
tgl = tgl or require 'tgl'
local tgl = tgl

local DEFAULT_SEED = 18050
local DEFAULT_CASES = 150
local seed_env = os.getenv('TGL_PROP_SEED')
local BASE_SEED = tonumber(seed_env) or DEFAULT_SEED
if seed_env == 'random' then BASE_SEED = math.floor(tgl.time() * 1000) % 2000000000 end
local CASES = tonumber(os.getenv('TGL_PROP_CASES')) or DEFAULT_CASES
local DEBUG_OUT = os.getenv('TGL_PROP_DEBUG') == '1'

local RULES = { 'fill_source', 'fill_elemwise' }
-- FAST_RUN fuses and reorders sums: values agree to a few ulps per op
local TOL = { float32 = { abs = 1e-4, rel = 1e-3 }, float64 = { abs = 1e-10, rel = 1e-9 } }

local saved = {}
setup(function()
  saved.exclude, saved.compile = tgl.config.exclude, tgl.config.compile
  tgl.config.compile = 'tcc'
end)
teardown(function()
  tgl.config.exclude, tgl.config.compile = saved.exclude, saved.compile
end)

-- Park-Miller (spec/support.lua), independent of math.random and of tgl's generator
local S = dofile('spec/support.lua')
local new_rng, shape_str = S.new_rng, S.shape_str

local flat = S.flat

local function max_abs(a)
  local m = 0
  for _, v in ipairs(flat(a)) do
    if v ~= v then return math.huge end
    m = math.max(m, math.abs(v))
  end
  return m
end

-- nil when got matches want (dtype, shape, values within TOL)
local function mismatch(want, got) return S.mismatch(want, got, TOL[want.dtype]) end

-- ---------------------------------------------------------------------------
-- the generator: records {var, val (the same expression on arrays, to keep
-- magnitudes bounded), shape, bc, exact (val is exact: leaves and floor of
-- leaves; comparisons read only those)}

local Case = {}
Case.__index = Case

local function leaf_array(rng, shape, dtype)
  local function build(d)
    if d > #shape then return rng.int(-32, 32) / 16 end
    local t = {}
    for i = 1, shape[d] do t[i] = build(d + 1) end
    return t
  end
  return tgl.array(build(1), dtype)
end

function Case:note(fmt, ...) self.lines[#self.lines + 1] = fmt:format(...) end

function Case:add(var, val, text, exact)
  local r = { var = var, val = val, shape = val:shape(), bc = var.broadcastable, exact = exact,
              id = #self.nodes + 1 }
  self.nodes[#self.nodes + 1] = r
  self:note('n%d = %s  %s%s', r.id, text, shape_str(r.shape), exact and '  exact' or '')
  -- keep magnitudes where products and powers stay accurate
  if not exact and max_abs(val) > 8 then
    return self:add(tgl.tanh(var), tgl.tanh(val), ('tanh(n%d)'):format(r.id), false)
  end
  return r
end

function Case:apply(label, fn, args, exact)
  local s, e, names = {}, {}, {}
  for i, a in ipairs(args) do
    if type(a) == 'table' then s[i], e[i], names[i] = a.var, a.val, 'n' .. a.id
    else s[i], e[i], names[i] = a, a, tostring(a) end
  end
  return self:add(fn(unpack(s, 1, #args)), fn(unpack(e, 1, #args)),
                  ('%s(%s)'):format(label, table.concat(names, ', ')), exact or false)
end

-- An input whose shape is the frame's right end, some axes size 1.
function Case:leaf(full)
  local rng, frame = self.rng, self.frame
  local rank = (full or rng.chance(0.7)) and #frame or rng.int(0, #frame)
  local shape, bc = {}, {}
  for i = 1, rank do
    local fs = frame[#frame - rank + i]
    if not full and fs ~= 1 and rng.chance(0.25) then shape[i], bc[i] = 1, true
    else shape[i], bc[i] = fs, fs == 1 and not full and rng.chance(0.5) end
  end
  local k = #self.inputs + 1
  local var = tgl.tensor { dtype = self.dtype, ndim = rank, broadcastable = bc, name = 'in' .. k }
  local val = leaf_array(rng, shape, self.dtype)
  self.inputs[k], self.vals[k] = var, val
  return self:add(var, val, 'input', true)
end

-- Two records meet in an elementwise op when their shapes align on the
-- right (both are frame-aligned, so only a reduction's result can break it).
local function compatible(a, b)
  local na, nb = #a.shape, #b.shape
  for k = 0, math.max(na, nb) - 1 do
    local sa, sb = a.shape[na - k] or 1, b.shape[nb - k] or 1
    local ba, bb = na - k < 1 or a.bc[na - k], nb - k < 1 or b.bc[nb - k]
    if sa ~= sb and not ba and not bb then return false end
  end
  return true
end

function Case:operand(filter)
  local cands = {}
  for i = #self.nodes, 1, -1 do
    if not filter or filter(self.nodes[i]) then cands[#cands + 1] = self.nodes[i] end
  end
  if #cands == 0 then return nil end
  if self.rng.chance(0.6) then return cands[self.rng.int(1, math.min(3, #cands))] end
  return cands[self.rng.int(1, #cands)]
end

function Case:partner(a, filter)
  return self:operand(function(b) return compatible(a, b) and (not filter or filter(b)) end)
end

local function is_exact(r) return r.exact end

function Case:step()
  local rng = self.rng
  local a = self:operand()
  local kind = rng.pick({ 'unary', 'unary', 'unary', 'binary', 'binary', 'binary', 'binary', 'switch',
                          'floor', 'pow0', 'reduce' })
  if kind == 'unary' then
    local op = rng.pick({ 'tanh', 'sigmoid', 'sin', 'cos', 'softplus', 'sqr', 'pow2', 'pow3', 'neg',
                          'exp', 'scale' })
    if op == 'sqr' then return self:apply('a*a', function(x) return x * x end, { a }) end
    if op == 'pow2' then return self:apply('a^2', function(x) return x ^ 2 end, { a }) end
    if op == 'pow3' then return self:apply('a^3', function(x) return x ^ 3 end, { a }) end
    if op == 'neg' then return self:apply('neg', function(x) return -x end, { a }, a.exact) end
    if op == 'exp' then return self:apply('exp(tanh)', function(x) return tgl.exp(tgl.tanh(x)) end, { a }) end
    if op == 'scale' then
      local c = rng.int(-8, 8) / 4
      return self:apply('a*' .. c, function(x) return x * c end, { a })
    end
    return self:apply(op, tgl[op], { a })
  elseif kind == 'binary' then
    local b = self:partner(a) or a
    local op = rng.pick({ 'add', 'sub', 'mul', 'mul', 'div' })
    if op == 'div' then
      return self:apply('a/(b*b+0.5)', function(x, y) return x / (y * y + 0.5) end, { a, b })
    end
    local f = ({ add = function(x, y) return x + y end, sub = function(x, y) return x - y end,
                 mul = function(x, y) return x * y end })[op]
    return self:apply(op, f, { a, b }, a.exact and b.exact and op ~= 'mul')
  elseif kind == 'switch' then
    -- the condition compares exact values only (a last-bit difference
    -- of a fused form must not flip it)
    local p = self:operand(is_exact)
    local q = self:partner(p, is_exact)
    local b = self:partner(a, function(r) return compatible(r, p) and (not q or compatible(r, q)) end)
    if not compatible(a, p) or (q and not compatible(a, q)) or not b then return self:apply('tanh', tgl.tanh, { a }) end
    if q then
      return self:apply('switch(p > q, a, b)', function(x, y, u, v) return tgl.switch(tgl.gt(x, y), u, v) end, { p, q, a, b })
    end
    return self:apply('switch(p > 0.25, a, b)', function(x, u, v) return tgl.switch(tgl.gt(x, 0.25), u, v) end, { p, a, b })
  elseif kind == 'floor' then
    local p = self:operand(is_exact)
    return self:apply('floor', tgl.floor, { p }, true)
  elseif kind == 'pow0' then
    -- x^0 is fill_like(x, 1); times a partner
    local b = self:partner(a) or a
    return self:apply('a^0 * b', function(x, y) return x ^ 0 * y end, { a, b })
  else
    local rank = #a.shape
    if rank == 0 then return self:apply('tanh', tgl.tanh, { a }) end
    if rng.chance(0.5) then
      -- keepdims over some axes: stays aligned with the frame
      local axes = {}
      for d = 1, rank do if rng.chance(0.5) then axes[#axes + 1] = d end end
      if #axes == 0 then axes[1] = rng.int(1, rank) end
      local op = rng.pick({ 'sum', 'mean' })
      return self:apply(('%s[{%s},keepdims]'):format(op, table.concat(axes, ',')),
                        function(x) return tgl[op](x, axes, { keepdims = true }) end, { a })
    end
    -- over leading axes: the result stays right-aligned
    local k = rng.int(1, rank)
    local axes = {}
    for d = 1, k do axes[d] = d end
    return self:apply(('sum[1..%d]'):format(k), function(x) return tgl.sum(x, axes) end, { a })
  end
end

local function random_case(seed)
  local rng = new_rng(seed)
  local c = setmetatable({ rng = rng, nodes = {}, inputs = {}, vals = {}, lines = {} }, Case)
  c.dtype = rng.chance(0.25) and 'float32' or 'float64'
  c.frame = {}
  for i = 1, rng.int(0, 3) do c.frame[i] = rng.pick({ 1, 2, 3, 3, 4 }) end
  c:note('%s, frame %s', c.dtype, shape_str(c.frame))
  c:leaf(true)
  for _ = 2, rng.int(1, 4) do c:leaf(false) end
  for _ = 1, rng.int(2, 24) do c:step() end
  -- the cost: a sum of terms over random nodes
  local terms, cost, cval = {}, nil, nil
  local s = tgl.tensor { dtype = c.dtype, ndim = 0, name = 's' }
  local sval = tgl.array(rng.int(-8, 8) / 4, c.dtype)
  local used_s = false
  for t = 1, rng.int(1, 3) do
    local e = t == 1 and c.nodes[#c.nodes] or c:operand()
    local kind = rng.pick({ 'sum', 'sum2', 'prod', 'mean', 'scaled' })
    local v, w, text
    if kind == 'sum' then v, w, text = tgl.sum(e.var), tgl.sum(e.val), ('sum(n%d)'):format(e.id)
    elseif kind == 'sum2' then v, w, text = tgl.sum(e.var ^ 2), tgl.sum(e.val ^ 2), ('sum(n%d^2)'):format(e.id)
    elseif kind == 'mean' then v, w, text = tgl.mean(e.var), tgl.mean(e.val), ('mean(n%d)'):format(e.id)
    elseif kind == 'prod' then
      local f = c:partner(e) or e
      v, w, text = tgl.sum(e.var * f.var), tgl.sum(e.val * f.val), ('sum(n%d * n%d)'):format(e.id, f.id)
    else
      used_s = true
      v, w, text = s * tgl.sum(e.var), sval * tgl.sum(e.val), ('s * sum(n%d)'):format(e.id)
    end
    cost = cost and cost + v or v
    cval = cval and cval + w or w
    terms[#terms + 1] = text
  end
  c:note('cost = %s', table.concat(terms, ' + '))
  c.cost = cost
  c.wrt = {}
  for i, var in ipairs(c.inputs) do c.wrt[i] = var end
  if used_s then
    c.inputs[#c.inputs + 1], c.vals[#c.vals + 1] = s, sval
    c.wrt[#c.wrt + 1] = s
  end
  return c
end

-- ---------------------------------------------------------------------------

local function fills(f)
  local n = 0
  for _ in tgl.debugprint(f):gmatch('= fill_like%(') do n = n + 1 end
  return n
end

local stats = { cases = 0, fewer = 0, fills_off = 0, fills_on = 0 }

local function run_case(seed)
  local c = random_case(seed)
  local header = ('fill property case seed=%d; rerun with TGL_PROP_SEED=%d TGL_PROP_CASES=1'):format(seed, seed)
  local recipe = table.concat(c.lines, '\n')
  if DEBUG_OUT then io.stderr:write(header, '\n', recipe, '\n') end
  local grads = tgl.grad(c.cost, c.wrt, { disconnected = 'ignore' })
  local outs = { c.cost }
  for i, g in ipairs(grads) do outs[i + 1] = g end
  local function compiled(mode, rules_on)
    tgl.config.exclude = rules_on and {} or RULES
    local ok, f = pcall(tgl.compile, { inputs = c.inputs, outputs = outs, mode = mode, name = 'fillprop' })
    tgl.config.exclude = {}
    if not ok then error(('%s\n%s, rules %s: compile failed: %s\n%s'):format(header, mode,
      rules_on and 'on' or 'off', tostring(f), recipe), 0) end
    return f
  end
  local ref_f = compiled('FAST_COMPILE', false)
  local ref = { ref_f(unpack(c.vals)) }
  local fast_on = compiled('FAST_RUN', true)
  local variants = { { 'FAST_RUN, rules on', fast_on }, { 'FAST_RUN, rules off', compiled('FAST_RUN', false) },
                     { 'FAST_COMPILE, rules on', compiled('FAST_COMPILE', true) } }
  for _, v in ipairs(variants) do
    local got = { v[2](unpack(c.vals)) }
    for i = 1, #outs do
      local m = mismatch(ref[i], got[i])
      if m then
        error(('%s\n%s, output %d (%s): %s\nrecipe:\n%s\nprogram:\n%s\nreference program:\n%s'):format(header, v[1], i,
          i == 1 and 'the cost' or ('gradient ' .. (i - 1)), m, recipe, tgl.debugprint(v[2]), tgl.debugprint(ref_f)), 0)
      end
    end
  end
  local on, off = fills(fast_on), fills(variants[2][2])
  if on > off then
    error(('%s\nthe rules added fills: %d on, %d off\nrecipe:\n%s\n%s'):format(header, on, off, recipe,
      tgl.debugprint(fast_on)), 0)
  end
  stats.cases = stats.cases + 1
  stats.fills_on, stats.fills_off = stats.fills_on + on, stats.fills_off + off
  if on < off then stats.fewer = stats.fewer + 1 end
end

describe('gradients of sum-costs over random elementwise graphs, fill rules on and off', function()
  after_each(function() tgl.config.exclude = {} end)
  for k = 1, CASES do
    local seed = BASE_SEED + k - 1
    it(('case %d (seed %d): FAST_RUN and FAST_COMPILE, rules on and off, give the reference shapes and values'):format(k, seed),
      function() run_case(seed) end)
  end
  it('the rules removed fills in some cases (the generator keeps its coverage)', function()
    if stats.cases < 40 then return end -- a single reproduced case says nothing here
    assert.is_true(stats.fewer >= stats.cases / 5,
      ('fewer fills in %d of %d cases (%d on, %d off)'):format(stats.fewer, stats.cases, stats.fills_on, stats.fills_off))
    assert.is_true(stats.fills_on > 0, 'no fill was left: the cases never exercise a fill the rules must keep')
  end)
end)
