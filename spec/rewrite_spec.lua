-- rewrite_spec.lua — the graph rewrites (DESIGN.md "Rewrites as small named
-- rules", src/engine/opt): for every rule that tgl.rules() lists, a graph
-- where it applies gives the same values with the rule on and off (and the
-- same as the expression evaluated eagerly on arrays), the rule's form is
-- in the rewritten graph (or the compiled program) with it on, and
-- switching it off by name (tgl.config.exclude) removes that form.  Then
-- the stability cases (log(sigmoid), softmax cross-entropy and its
-- gradient, logsumexp at +-1000), the tanh MLP training function's
-- program, the three modes, and TGL_EXCLUDE.
tgl = tgl or require 'tgl'
local tgl = tgl

local F64 = { dtype = 'float64' }

-- ---------------------------------------------------------------------------
-- helpers

-- An array's elements as a flat Lua table (row-major), and its shape.
local flat = dofile('spec/support.lua').flat

local function shape_str(a) return table.concat(a:shape(), 'x') end

-- want and got are arrays of one shape whose elements agree within tol
-- (relative, absolute below 1); NaN matches NaN, inf matches the same inf.
local function assert_close(want, got, tol, what)
  tol = tol or 1e-10
  what = what or 'value'
  assert(tgl.is_array(got), what .. ': not an array')
  assert.equals(shape_str(want), shape_str(got), what .. ': shapes differ')
  local w, g = flat(want), flat(got)
  for i = 1, #w do
    local a, b = w[i], g[i]
    local ok
    if a ~= a then ok = b ~= b
    elseif a == math.huge or a == -math.huge then ok = a == b
    else ok = b == b and math.abs(a - b) <= tol * math.max(1, math.abs(a)) end
    if not ok then
      error(('%s: element %d: expected %.17g, got %.17g'):format(what, i, a, b), 2)
    end
  end
end

local function all_finite(a)
  for _, v in ipairs(flat(a)) do
    if v ~= v or v == math.huge or v == -math.huge then return false end
  end
  return true
end

-- The nodes of a tgl.debugprint(graph) text: a list of {op=, id=, children=}
-- in print order, and a map id -> node (a repeated node keeps the children
-- of its first, expanded, appearance).  Leaves are 'input', 'shared' and
-- 'constant' (a scalar constant's value is in node.label).
local function parse_graph(text)
  local list, by_id, expanding = {}, {}, {}
  for line in text:gmatch('[^\n]+') do
    local prefix, label, id = line:match('^([ |]*)(%S+) %[id (%w+)%]')
    if label then
      local depth = select(2, prefix:gsub('|', ''))
      local node = by_id[id]
      local first = node == nil
      if first then
        node = { op = label:match('^constant') and 'constant' or label, label = label, id = id,
                 children = {} }
        by_id[id] = node
        list[#list + 1] = node
      end
      local parent = depth > 0 and expanding[depth - 1]
      if parent then parent.children[#parent.children + 1] = node end
      -- only a node's first appearance lists its inputs under it
      expanding[depth] = first and node or false
      for d = depth + 1, #expanding do expanding[d] = nil end
    end
  end
  return list, by_id
end

-- Distinct node counts per op of a graph text.
local function graph_ops(text)
  local counts = {}
  for _, n in ipairs((parse_graph(text))) do counts[n.op] = (counts[n.op] or 0) + 1 end
  return counts
end

-- Instruction counts per op of a compiled program (tgl.debugprint(f)):
-- '  3  t5 = gemm(A, B, C) ...' counts gemm, 'fused#2{...}' counts fused.
local function program_ops(text)
  local counts = {}
  for line in text:gmatch('[^\n]+') do
    local op = line:match('^%s*%d+%s+[%w_, ]+ = ([%w_]+)[(#]')
    if op then counts[op] = (counts[op] or 0) + 1 end
  end
  return counts
end

local function view_text(view, outs, f)
  if view == 'program' then return tgl.debugprint(f) end
  return tgl.debugprint(tgl.optimize(outs, view == 'graph' and 'FAST_COMPILE' or 'FAST_RUN'))
end

local function as_list(x)
  if type(x) == 'table' and not tgl.is_variable(x) and not tgl.is_array(x) then return x end
  return { x }
end

-- Builds c.build(vars...) (one variable or a table of them), compiles it
-- with rule c.rule on and then off, runs both on c.args() (random arrays,
-- drawn after tgl.manual_seed(c.seed)), and checks:
--   * values on == values off == the reference (c.ref(args...) or
--     c.build(args...) evaluated eagerly on the arrays), within c.tol;
--   * in the rewritten form (c.view: 'graph' = tgl.optimize(outs,
--     'FAST_COMPILE'), 'graph_run' = FAST_RUN, 'program' = the compiled
--     program): each op of c.on is there with the rule on and not with it
--     off; each op of c.off is there off and not on; each plain substring
--     of c.text_on is there on and not off; c.count = {op = {on, off}}
--     counts distinct nodes (instructions); c.check_on(text) and
--     c.check_off(text) must hold; c.same: the rule must not fire (the
--     form is the same on and off).
local function check_rule(c)
  tgl.manual_seed(c.seed or 1234)
  local args = c.args()
  local outs = as_list(c.build(unpack(c.vars)))
  local ref = c.ref and as_list(c.ref(unpack(args))) or as_list(c.build(unpack(args)))
  local function run()
    local f = tgl.compile { inputs = c.vars, outputs = outs, mode = c.mode, name = 'r_' .. c.rule }
    local vals = { f(unpack(args)) }
    return vals, view_text(c.view or 'graph', outs, f)
  end
  tgl.config.exclude = {}
  local on_vals, on_text = run()
  tgl.config.exclude = { c.rule }
  local off_vals, off_text = run()
  tgl.config.exclude = {}
  local ctx = function(what, mode, text)
    return ('%s (rule %s %s):\n%s'):format(what, c.rule, mode, text)
  end
  assert.equals(#outs, #on_vals)
  for i = 1, #outs do
    assert_close(ref[i], on_vals[i], c.tol, ('%s on, output %d vs reference'):format(c.rule, i))
    assert_close(ref[i], off_vals[i], c.tol, ('%s off, output %d vs reference'):format(c.rule, i))
    assert_close(on_vals[i], off_vals[i], c.tol, ('%s on vs off, output %d'):format(c.rule, i))
  end
  local count = (c.view == 'program') and program_ops or graph_ops
  local on_ops, off_ops = count(on_text), count(off_text)
  for _, op in ipairs(c.on or {}) do
    assert.is_true((on_ops[op] or 0) > 0, ctx("expected '" .. op .. "'", 'on', on_text))
    assert.is_true((off_ops[op] or 0) == 0, ctx("unexpected '" .. op .. "'", 'off', off_text))
  end
  for _, op in ipairs(c.off or {}) do
    assert.is_true((off_ops[op] or 0) > 0, ctx("expected '" .. op .. "'", 'off', off_text))
    assert.is_true((on_ops[op] or 0) == 0, ctx("unexpected '" .. op .. "'", 'on', on_text))
  end
  for _, s in ipairs(c.text_on or {}) do
    assert.is_truthy(on_text:find(s, 1, true), ctx("expected '" .. s .. "'", 'on', on_text))
    assert.is_falsy(off_text:find(s, 1, true), ctx("unexpected '" .. s .. "'", 'off', off_text))
  end
  for op, n in pairs(c.count or {}) do
    assert.equals(n[1], on_ops[op] or 0, ctx('count of ' .. op, 'on', on_text))
    assert.equals(n[2], off_ops[op] or 0, ctx('count of ' .. op, 'off', off_text))
  end
  if c.same then assert.equals(off_text, on_text, ctx('the rule fired', 'on', on_text)) end
  if c.check_on then assert.is_true(c.check_on(on_text), ctx('form', 'on', on_text)) end
  if c.check_off then assert.is_true(c.check_off(off_text), ctx('form', 'off', off_text)) end
end

local function randn(...) return tgl.randn(...) end
local function with_f64(...)
  local t = { ... }
  t[#t + 1] = F64
  return unpack(t)
end
local function rd(...) return tgl.randn(with_f64(...)) end
-- uniform in [0.5, 1.5): for log, sqrt, pow
local function pos(...) return tgl.rand(with_f64(...)) + 0.5 end

-- ---------------------------------------------------------------------------
-- the cases, by rule name (each rule of tgl.rules() needs at least one)

local cases = {}
local function case(c)
  cases[c.rule] = cases[c.rule] or {}
  local list = cases[c.rule]
  list[#list + 1] = c
end

local X, Y = tgl.dmatrix('x'), tgl.dmatrix('y')
local V = tgl.dvector('v')

-- canonicalize ------------------------------------------------------------

case { rule = 'constant_fold', what = 'x + 2 * 3 and exp of a constant vector',
  vars = { X, V }, args = function() return { rd(3, 4), rd(3) } end,
  build = function(x, v)
    return { x + tgl.constant(2, 'float64') * tgl.constant(3, 'float64'),
             v * tgl.exp(tgl.constant(tgl.array({ 0, 1, 2 }, 'float64'))) }
  end,
  ref = function(x, v) return { x + 6, v * tgl.exp(tgl.array({ 0, 1, 2 }, 'float64')) } end,
  on = {}, off = { 'exp' }, text_on = { 'constant{6}' }, count = { mul = { 1, 2 } } }

case { rule = 'add_zero', what = 'x + 0 and 0 + x',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return { tgl.exp(x + 0), tgl.exp(0 + x) } end,
  off = { 'add' } }

case { rule = 'sub_zero', what = 'x - 0',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.exp(x - 0) end,
  off = { 'sub' } }

case { rule = 'sub_zero_left', what = '0 - x',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.exp(0 - x) end,
  on = { 'neg' }, off = { 'sub' } }

case { rule = 'mul_one', what = 'x * 1, 1 * x, x * -1',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return { tgl.exp(x * 1), tgl.exp(1 * x), tgl.exp(x * -1) } end,
  on = { 'neg' }, off = { 'mul' } }

case { rule = 'div_one', what = 'x / 1',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.exp(x / 1) end,
  off = { 'div' } }

case { rule = 'neg_neg', what = '-(-x)',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.exp(-(-x)) end,
  off = { 'neg' } }

case { rule = 'mul_self', what = 'x * x',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return { tgl.exp(x) * tgl.exp(x), x * x } end,
  on = { 'sqr' }, off = { 'mul' } }

case { rule = 'pow_special', what = 'x^1, x^2, x^0.5, x^-1, x^3, x^0 (x^2.5 stays pow)',
  vars = { X }, args = function() return { pos(3, 4) } end,
  build = function(x) return { x ^ 1, x ^ 2, x ^ 0.5, x ^ -1, x ^ 3, x ^ 0, x ^ 2.5 } end,
  on = { 'sqr', 'sqrt', 'recip', 'fill_like' }, count = { pow = { 1, 7 } } }

case { rule = 'mul_consts', what = '2 * (3 * x)',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return 2 * (3 * x) end,
  text_on = { 'constant{6}' }, count = { mul = { 1, 2 } } }

-- every sum sums the input itself (the scalar work moved out) / not
local function sums_of_input(text)
  local any = false
  for _, n in ipairs((parse_graph(text))) do
    if n.op == 'sum' then
      any = true
      if n.children[1].op ~= 'input' then return false end
    end
  end
  return any
end
case { rule = 'sum_scalar', what = 'sum(2x), sum(-x), sum(x/4), sum(3x, axis), keepdims',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x)
    return { tgl.sum(2 * x), tgl.sum(-x), tgl.sum(x / 4), tgl.sum(3 * x, 2),
             tgl.sum(x * 0.5, 1, { keepdims = true }) }
  end,
  check_on = sums_of_input, check_off = function(t) return not sums_of_input(t) end }

local X3 = tgl.dtensor3('x3')
case { rule = 'dimshuffle_chain', what = 'x.T.T and a 3-d permutation of a permutation',
  vars = { X, X3 }, args = function() return { rd(3, 4), rd(2, 3, 4) } end,
  build = function(x, x3)
    return { tgl.exp(x:T():T()), tgl.dimshuffle(tgl.dimshuffle(x3, { 3, 1, 2 }), { 3, 1, 'x', 2 }) }
  end,
  ref = function(x, x3)
    return { tgl.exp(x), tgl.dimshuffle(tgl.dimshuffle(x3, { 3, 1, 2 }), { 3, 1, 'x', 2 }) }
  end,
  count = { dimshuffle = { 1, 4 } } }

case { rule = 'reshape_chain', what = 'x:reshape(-1):reshape(3, 4)',
  vars = { X }, args = function() return { rd(4, 3) } end,
  build = function(x) return tgl.exp(x:reshape(-1):reshape(3, 4)) end,
  count = { reshape = { 1, 2 } } }

local FM, IV = tgl.fmatrix('f'), tgl.ivector('i')
case { rule = 'cast_chain', what = 'f32->f64->f32, i32->f64->i32 (i32->f32->i32 is kept)',
  vars = { FM, IV },
  args = function() return { randn(3, 4), tgl.array({ 16777217, -5, 7 }, 'int32') } end,
  build = function(f, i)
    return { tgl.exp(tgl.cast(tgl.cast(f, 'float64'), 'float32')),
             tgl.cast(tgl.cast(i, 'float64'), 'int32') * 2,
             tgl.cast(tgl.cast(i, 'float32'), 'int32') }
  end,
  tol = 1e-6, count = { cast = { 2, 6 } } }

case { rule = 'subtensor_whole', what = 'x[{{}, {}}], x[{{}}] (a reversed axis is kept)',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x)
    return { tgl.exp(x[{ {}, {} }]), tgl.exp(x[{ {} }]), tgl.exp(x[{ {}, { nil, nil, -1 } }]) }
  end,
  count = { subtensor = { 1, 3 } } }

-- A gradient through sum(e) starts from fill_like(e, 1) (an array of ones
-- shaped like e) times the output gradient; x^0 is fill_like(x, 1) too.
-- The fill's (first) source node: 'input' when it takes an input's shape.
local function fill_sources(text)
  local src = {}
  for _, n in ipairs((parse_graph(text))) do
    if n.op == 'fill_like' then src[#src + 1] = n.children[1].op end
  end
  return src
end
local function fills_of(op) return function(t) local s = fill_sources(t); return #s > 0 and s[1] == op end end
local S, CO = tgl.dscalar('s'), tgl.tensor { dtype = 'float64', ndim = 2, broadcastable = { false, true }, name = 'col' }
local function ones(r, c) return tgl.ones(r, c, F64) end

case { rule = 'fill_elemwise', what = 'grad(sum(x^2), x) is 2 x: no array of ones',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.grad(tgl.sum(x ^ 2), x) end,
  ref = function(x) return x * 2 end,
  off = { 'fill_like' },
  -- on: mul(constant{2}, x) and nothing else
  check_on = function(t) local o = graph_ops(t); return o.mul == 1 and o.constant == 1 and o.input == 1 end }

case { rule = 'fill_elemwise', what = 'grad(s * sum(x^2), x): the fill a level down, (ones * s) * 2x -> s * 2x',
  vars = { X, S }, args = function() return { rd(3, 4), tgl.array(-1.5, 'float64') } end,
  build = function(x, s) return tgl.grad(s * tgl.sum(x ^ 2), x) end,
  ref = function(x, s) return x * 2 * s:get() end,
  off = { 'fill_like' } }

case { rule = 'fill_elemwise', what = 'grad(sum(floor(x) + x*x), x): zeros (floor\'s) + 2x -> 2x',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.grad(tgl.sum(tgl.floor(x) + x * x), x) end,
  ref = function(x) return x * 2 end,
  off = { 'fill_like', 'add' } }

case { rule = 'fill_elemwise', what = 'x^0 * exp(x), sin(x) - (3x)^0, x^0 / (x + 1): the fill becomes its value',
  vars = { X }, args = function() return { pos(3, 4) } end,
  build = function(x) return { x ^ 0 * tgl.exp(x), tgl.sin(x) - (x * 3) ^ 0, x ^ 0 / (x + 1) } end,
  ref = function(x) return { tgl.exp(x), tgl.sin(x) - 1, 1 / (x + 1) } end,
  off = { 'fill_like' } }

case { rule = 'fill_elemwise', what = 'x^0 * row: not fired (the row broadcasts; the fill gives the rows)',
  vars = { X, V }, args = function() return { rd(3, 4), rd(4) } end,
  build = function(x, v) return x ^ 0 * v end,
  ref = function(x, v) return ones(3, 4) * v end,
  same = true, check_on = fills_of('input') }

case { rule = 'fill_elemwise', what = 'x^0 * y of two inputs of one type: not fired (equal shapes not provable)',
  vars = { X, Y }, args = function() return { rd(3, 4), rd(3, 4) } end,
  build = function(x, y) return x ^ 0 * y end,
  ref = function(x, y) return y end,
  same = true, check_on = fills_of('input') }

case { rule = 'fill_elemwise', what = 'grad(sum(col + row), col): not fired (no input has the (?, ?) shape)',
  vars = { CO, V }, args = function() return { rd(3, 1), rd(4) } end,
  build = function(c, v) return tgl.grad(tgl.sum(c + v), c) end,
  ref = function(c, v) return tgl.ones(3, 1, F64) * 4 end,
  same = true, check_on = fills_of('add') }

case { rule = 'fill_source', what = '(x * x)^0 * row: the fill takes x\'s shape, x * x is not computed',
  vars = { X, V }, args = function() return { rd(3, 4), rd(4) } end,
  build = function(x, v) return (x * x) ^ 0 * v end,
  ref = function(x, v) return ones(3, 4) * v end,
  off = { 'sqr' }, check_on = fills_of('input'), check_off = fills_of('sqr') }

case { rule = 'fill_source', what = '(x^0)^0 * row: a fill of a fill takes the inner one\'s source',
  vars = { X, V }, args = function() return { rd(3, 4), rd(4) } end,
  build = function(x, v) return (x ^ 0) ^ 0 * v end,
  ref = function(x, v) return ones(3, 4) * v end,
  count = { fill_like = { 1, 2 } }, check_on = fills_of('input'), check_off = fills_of('fill_like') }

case { rule = 'fill_source', what = 'grad(sum(x + row), row): the sum of a fill shaped like x, not like x + row',
  vars = { X, V }, args = function() return { rd(3, 4), rd(4) } end,
  build = function(x, v) return tgl.grad(tgl.sum(x + v), v) end,
  ref = function(x, v) return tgl.ones(4, F64) * 3 end,
  off = { 'add' }, check_on = fills_of('input'), check_off = fills_of('add') }

case { rule = 'fill_source', what = 'grad(sum(col + row), col): not fired (no input has the (?, ?) shape)',
  vars = { CO, V }, args = function() return { rd(3, 1), rd(4) } end,
  build = function(c, v) return tgl.grad(tgl.sum(c + v), c) end,
  ref = function(c, v) return tgl.ones(3, 1, F64) * 4 end,
  same = true, check_on = fills_of('add') }

case { rule = 'fill_source', what = 'grad(sum(tanh(x . y) + row), row): not fired (tanh\'s result is read by the add alone)',
  vars = { X, Y, V }, args = function() return { rd(3, 4), rd(4, 5), rd(5) } end,
  build = function(x, y, v) return tgl.grad(tgl.sum(tgl.tanh(x:dot(y)) + v), v) end,
  ref = function(x, y, v) return tgl.ones(5, F64) * 3 end,
  same = true, check_on = fills_of('add') }

-- stabilize ---------------------------------------------------------------

local LY = tgl.ivector('labels')
local function labels(n, k)
  local t = {}
  for r = 1, n do t[r] = 1 + (r * 7) % k end
  return tgl.array(t, 'int32')
end

case { rule = 'softmax_xent', what = 'categorical_crossentropy(softmax(x), labels)',
  vars = { X, LY }, args = function() return { rd(5, 4) * 3, labels(5, 4) } end,
  build = function(x, y) return tgl.categorical_crossentropy(tgl.softmax(x), y) end,
  on = { 'softmax_crossentropy' }, off = { 'log_softmax', 'adv_subtensor' } }

case { rule = 'softmax_xent', what = 'log_softmax(x)[{rows, labels}], in FAST_RUN',
  vars = { X, LY }, args = function() return { rd(5, 4) * 3, labels(5, 4) } end,
  build = function(x, y)
    local rows = tgl.arange(1, x:size(1))
    return tgl.mean(-tgl.index(tgl.log_softmax(x), { rows, y }))
  end,
  ref = function(x, y) return tgl.mean(-tgl.index(tgl.log_softmax(x), { tgl.arange(1, 5), y })) end,
  view = 'program', on = { 'softmax_crossentropy' }, off = { 'adv_subtensor' } }

case { rule = 'log_sigmoid', what = 'log(sigmoid(x))',
  vars = { X }, args = function() return { rd(3, 4) * 4 } end,
  build = function(x) return tgl.log(tgl.sigmoid(x)) end,
  on = { 'softplus' }, off = { 'log', 'sigmoid' } }

case { rule = 'log1m_sigmoid', what = 'log(1 - sigmoid(x))',
  vars = { X }, args = function() return { rd(3, 4) * 4 } end,
  build = function(x) return tgl.log(1 - tgl.sigmoid(x)) end,
  on = { 'softplus' }, off = { 'log', 'sigmoid', 'sub' } }

case { rule = 'log1p_exp', what = 'log(1 + exp(x)) and log(exp(x) + 1)',
  vars = { X }, args = function() return { rd(3, 4) * 4 } end,
  build = function(x) return { tgl.log(1 + tgl.exp(x)), tgl.log(tgl.exp(x) + 1) } end,
  on = { 'softplus' }, off = { 'log', 'exp' } }

case { rule = 'log1p', what = 'log(1 + x) and log(x + 1)',
  vars = { X }, args = function() return { tgl.rand(3, 4, F64) * 1e-3 } end,
  build = function(x) return { tgl.log(1 + x), tgl.log(x + 1) } end,
  tol = 1e-9, on = { 'log1p' }, off = { 'log', 'add' } }

case { rule = 'expm1', what = 'exp(x) - 1',
  vars = { X }, args = function() return { rd(3, 4) * 1e-3 } end,
  build = function(x) return tgl.exp(x) - 1 end,
  tol = 1e-9, on = { 'expm1' }, off = { 'exp', 'sub' } }

case { rule = 'log_softmax', what = 'log(softmax(x)) on the last axis and on axis 1',
  vars = { X }, args = function() return { rd(3, 4) * 3 } end,
  build = function(x) return { tgl.log(tgl.softmax(x)), tgl.log(tgl.softmax(x, 1)) } end,
  on = { 'log_softmax' }, off = { 'log', 'softmax' } }

local RI = tgl.ivector('rows')
case { rule = 'log_gather', what = 'log(softmax(x)[{rows, labels}]) and log(softmax(x)[2])',
  vars = { X, RI, LY },
  args = function()
    return { rd(5, 4) * 3, tgl.array({ 2, 2, 5 }, 'int32'), tgl.array({ 1, 4, 3 }, 'int32') }
  end,
  build = function(x, r, y)
    return { tgl.log(tgl.index(tgl.softmax(x), { r, y })), tgl.log(tgl.index(tgl.softmax(x), 2)) }
  end,
  on = { 'log_softmax' }, off = { 'log', 'softmax' } }

case { rule = 'logsumexp', what = 'log(sum(exp(x), 2)) and log(sum(exp(v)))',
  vars = { X, V }, args = function() return { rd(3, 4) * 3, rd(5) * 3 } end,
  build = function(x, v) return { tgl.log(tgl.sum(tgl.exp(x), 2)), tgl.log(tgl.sum(tgl.exp(v))) } end,
  on = { 'max' } }

case { rule = 'logsumexp', what = 'log(sum(exp(x), 1, keepdims))',
  vars = { X }, args = function() return { rd(3, 4) * 3 } end,
  build = function(x) return tgl.log(tgl.sum(tgl.exp(x), 1, { keepdims = true })) end,
  on = { 'max' } }

-- specialize (in the compiled program, FAST_RUN) --------------------------

local A, B, Cm = tgl.dmatrix('A'), tgl.dmatrix('B'), tgl.dmatrix('C')
local U, W = tgl.dvector('u'), tgl.dvector('w')
local BV = tgl.dvector('b')

case { rule = 'ger_add', what = 'C + outer(u, w)',
  vars = { Cm, U, W }, args = function() return { rd(3, 4), rd(3), rd(4) } end,
  build = function(c, u, w) return c + tgl.outer(u, w) end,
  view = 'program', on = { 'ger' }, off = { 'fused' } }

case { rule = 'ger_add', what = 'outer(u, w) * 0.5 + C.T',
  vars = { Cm, U, W }, args = function() return { rd(4, 3), rd(3), rd(4) } end,
  build = function(c, u, w) return 0.5 * tgl.outer(u, w) + c:T() end,
  view = 'program', on = { 'ger' }, text_on = { 'alpha=0.5' } }

case { rule = 'ger_sub', what = 'C - 0.5 * outer(u, w)',
  vars = { Cm, U, W }, args = function() return { rd(3, 4), rd(3), rd(4) } end,
  build = function(c, u, w) return c - 0.5 * tgl.outer(u, w) end,
  view = 'program', on = { 'ger' }, off = { 'fused' }, text_on = { 'alpha=-0.5' } }

case { rule = 'gemm_add', what = 'C + A.B',
  vars = { A, B, Cm }, args = function() return { rd(3, 5), rd(5, 4), rd(3, 4) } end,
  build = function(a, b, c) return c + tgl.dot(a, b) end,
  view = 'program', on = { 'gemm' }, off = { 'dot' }, text_on = { 'gemm(A, B, C)' } }

case { rule = 'gemm_add', what = 'A.B + bias row (broadcast accumulator)',
  vars = { A, B, BV }, args = function() return { rd(3, 5), rd(5, 4), rd(4) } end,
  build = function(a, b, bias) return tgl.dot(a, b) + bias end,
  view = 'program', on = { 'gemm' }, off = { 'dot' } }

case { rule = 'gemm_add', what = 'A.B + 1 (scalar accumulator)',
  vars = { A, B }, args = function() return { rd(3, 5), rd(5, 4) } end,
  build = function(a, b) return tgl.dot(a, b) + 1 end,
  ref = function(a, b) return tgl.dot(a, b) + 1 end,
  view = 'program', on = { 'gemm' }, off = { 'dot' } }

case { rule = 'gemm_add', what = 'A.T.B + C (transposed operand)',
  vars = { A, B, Cm }, args = function() return { rd(5, 3), rd(5, 4), rd(3, 4) } end,
  build = function(a, b, c) return tgl.dot(a:T(), b) + c end,
  view = 'program', on = { 'gemm' }, off = { 'dot' } }

case { rule = 'gemm_add', what = 'w + A.u and u.A + w (gemv)',
  vars = { A, U, W }, args = function() return { rd(4, 4), rd(4), rd(4) } end,
  build = function(a, u, w) return { w + tgl.dot(a, u), tgl.dot(u, a * 1) + w } end,
  ref = function(a, u, w) return { w + tgl.dot(a, u), tgl.dot(u, a) + w } end,
  view = 'program', on = { 'gemv' }, off = { 'dot' } }

-- a row lookup's gradient in an SGD step (rows 2 and 5, row 2 twice)
local rows_used = tgl.constant(tgl.array({ 2, 5, 2, 1 }, 'int64'))
local function lookup_step_ref(w, y, sign)
  local r = w:clone()
  for k, i in ipairs({ 2, 5, 2, 1 }) do
    for j = 1, 3 do r:set(r:get(i, j) + sign * 0.1 * y:get(k, j), i, j) end
  end
  return r
end
case { rule = 'sparse_sub', what = 'W - 0.1 * grad(sum(W[rows] * y), W): only the rows used change',
  vars = { X, Y }, args = function() return { rd(5, 3), rd(4, 3) } end,
  build = function(w, y) return w - 0.1 * tgl.grad(tgl.sum(w[{ rows_used }] * y), w) end,
  ref = function(w, y) return lookup_step_ref(w, y, -1) end,
  view = 'program', text_on = { 'adv_inc_subtensor(x, ' } }
case { rule = 'sparse_sub', what = '2W - 0.1 * grad(sum((2W)[rows] * y), 2W): zeros shaped like W (fill_source) match 2W',
  vars = { X, Y }, args = function() return { rd(5, 3), rd(4, 3) } end,
  build = function(w, y)
    local w2 = w * 2
    return w2 - 0.1 * tgl.grad(tgl.sum(w2[{ rows_used }] * y), w2)
  end,
  ref = function(w, y) return lookup_step_ref(w * 2, y, -1) end,
  view = 'program', off = { 'fill_like' }, count = { adv_inc_subtensor = { 1, 1 } } }
case { rule = 'sparse_add', what = 'W + grad(...) * 0.1, a slice: inc_subtensor on W',
  vars = { X, Y }, args = function() return { rd(5, 3), rd(2, 3) } end,
  build = function(w, y) return w + tgl.grad(tgl.sum(w[{ { 2, 3 } }] * y), w) * 0.1 end,
  ref = function(w, y)
    local r = w:clone()
    for k = 1, 2 do for j = 1, 3 do r:set(r:get(k + 1, j) + 0.1 * y:get(k, j), k + 1, j) end end
    return r
  end,
  view = 'program', text_on = { ' inc_subtensor(x, ' } }

case { rule = 'gemm_sub', what = "c - s x'd with one inner index (a batch-1 weight gradient: runs as a rank-1 update)",
  vars = { X, Y }, args = function() return { rd(1, 5), rd(1, 4) } end,
  build = function(x, d) return tgl.constant(tgl.ones(5, 4, { dtype = 'float64' })) - x:T():dot(d) * 0.25 end,
  ref = function(x, d) return tgl.ones(5, 4, { dtype = 'float64' }) - tgl.dot(x:T(), d) * 0.25 end,
  view = 'program', text_on = { 'alpha=-0.25 beta=1' } }

case { rule = 'gemm_sub', what = 'C - 0.1 * A.B',
  vars = { A, B, Cm }, args = function() return { rd(3, 5), rd(5, 4), rd(3, 4) } end,
  build = function(a, b, c) return c - 0.1 * tgl.dot(a, b) end,
  view = 'program', text_on = { 'gemm(A, B, C)', 'alpha=-0.1 beta=1' }, off = { 'fused' } }

case { rule = 'gemm_sub', what = 'A.B - C',
  vars = { A, B, Cm }, args = function() return { rd(3, 5), rd(5, 4), rd(3, 4) } end,
  build = function(a, b, c) return tgl.dot(a, b) - c end,
  view = 'program', on = { 'gemm' }, off = { 'dot' }, text_on = { 'alpha=1 beta=-1' } }

local LR = tgl.dscalar('lr')
case { rule = 'gemm_sub', what = 'C - lr * A.B with lr an input: lr scales A, one gemm into C',
  vars = { A, B, Cm, LR }, args = function() return { rd(3, 5), rd(5, 4), rd(3, 4), tgl.array(0.3, 'float64') } end,
  build = function(a, b, c, lr) return c - lr * tgl.dot(a, b) end,
  ref = function(a, b, c, lr) return c - tgl.dot(a, b) * lr:get() end,
  view = 'program', on = { 'gemm' }, off = { 'dot' }, text_on = { 'alpha=-1 beta=1' } }

case { rule = 'gemm_add', what = 'C + A.B * lr with lr an input (either order)',
  vars = { A, B, Cm, LR }, args = function() return { rd(3, 5), rd(5, 4), rd(3, 4), tgl.array(-0.7, 'float64') } end,
  build = function(a, b, c, lr) return tgl.dot(a, b) * lr + c end,
  ref = function(a, b, c, lr) return c + tgl.dot(a, b) * lr:get() end,
  view = 'program', on = { 'gemm' }, off = { 'dot' }, text_on = { 'alpha=1 beta=1' } }

case { rule = 'dot_transposed', what = "C - lr (A'.B)' with lr an input: the product computed as B'.A, the update reads it by rows",
  vars = { A, B, Cm, LR }, args = function() return { rd(5, 3), rd(5, 4), rd(4, 3), tgl.array(0.3, 'float64') } end,
  build = function(a, b, c, lr) return c - lr * a:T():dot(b):T() end,
  ref = function(a, b, c, lr) return c - tgl.dot(b:T(), a) * lr:get() end,
  -- on: B' (one view, A'' is A); off: A' and the product's transpose
  view = 'program', count = { dimshuffle = { 2, 3 } } }

case { rule = 'dot_transposed', what = "C - 0.1 (A'.B)' (a linear layer's weight update): one gemm into C",
  vars = { A, B, Cm }, args = function() return { rd(5, 3), rd(5, 4), rd(4, 3) } end,
  build = function(a, b, c) return c - 0.1 * a:T():dot(b):T() end,
  view = 'program', on = { 'gemm' }, off = { 'dot', 'fused' }, text_on = { 'alpha=-0.1 beta=1' } }

case { rule = 'dot_transposed', what = "(A.B)' used twice: both read the one product",
  vars = { A, B }, args = function() return { rd(4, 5), rd(5, 3) } end,
  build = function(a, b) local t = tgl.dot(a, b):T(); return { tgl.exp(t), t * 2 } end,
  ref = function(a, b) local t = tgl.dot(a, b):T(); return { tgl.exp(t), t * 2 } end,
  view = 'program', count = { dot = { 1, 1 } } }

case { rule = 'gemm_scale', what = '2 * A.B and A.B * 0.25',
  vars = { A, B, Cm }, args = function() return { rd(3, 5), rd(5, 4), rd(5, 4) } end,
  build = function(a, b, c) return { 2 * tgl.dot(a, b), tgl.dot(a, c) * 0.25 } end,
  view = 'program', on = { 'gemm' }, off = { 'dot' }, text_on = { 'alpha=2 beta=0', 'alpha=0.25' } }

-- fuse --------------------------------------------------------------------

case { rule = 'elemwise_fusion', what = 'tanh(x) * 2 + exp(x)',
  vars = { X }, args = function() return { rd(3, 4) } end,
  build = function(x) return tgl.tanh(x) * 2 + tgl.exp(x) end,
  view = 'program', on = { 'fused' }, off = { 'tanh', 'exp', 'add' }, count = { fused = { 1, 0 } } }

case { rule = 'elemwise_fusion', what = 'sum((x - y)^2): the reduction folds in',
  vars = { X, Y }, args = function() return { rd(3, 4), rd(3, 4) } end,
  build = function(x, y) return tgl.sum((x - y) ^ 2) end,
  view = 'program', on = { 'fused' }, off = { 'sum', 'sub' }, count = { fused = { 1, 0 } } }

case { rule = 'elemwise_fusion', what = 'a bias row stays outside the matrix group',
  vars = { X, V }, args = function() return { rd(3, 4), rd(4) } end,
  build = function(x, v) return tgl.tanh(x + tgl.exp(v)) end,
  view = 'graph_run', on = { 'fused' }, off = { 'tanh', 'add' } }

-- scan -------------------------------------------------------------------
-- A recurrence h_t = tanh(x_t . A + h_{t-1} . B + exp(c)) computed eagerly,
-- step by step, as the reference.
local A_, B_ = rd(3, 2), rd(2, 2) * 0.5
local function rnn_ref(x, h0, c)
  local hs, h = {}, h0
  for t = 1, x:size(1) do
    h = tgl.tanh(tgl.dot(x[t], A_) + tgl.dot(h, B_) + tgl.exp(c))
    hs[t] = h
  end
  return hs
end
local H0, C = tgl.dvector('h0'), tgl.dvector('c')
local function rnn(x, h0, c, name)
  return tgl.scan { fn = function(xt, h, a, b)
    return tgl.tanh(xt:dot(a) + h:dot(b) + tgl.exp(c)) end,
    sequences = { x }, outputs_info = { h0 }, non_sequences = { tgl.constant(A_), tgl.constant(B_) },
    name = name }
end
local function rnn_args() return { rd(5, 3), rd(2), rd(2) } end

case { rule = 'scan_dead_outputs', what = 'an output nobody reads is not computed',
  vars = { X }, args = function() return { rd(4, 3) } end,
  build = function(x)
    local outs = tgl.scan { fn = function(xt) return { xt * 2, tgl.exp(xt) } end,
      sequences = { x }, name = 'dead' }
    return outs[1]
  end,
  ref = function(x) return x * 2 end,
  view = 'program', text_on = { ' 0 rec, 1 out, 1 nonseq}' } }

case { rule = 'scan_merge', what = 'a running sum and a running product over one sequence: one loop',
  vars = { V }, args = function() return { rd(5) } end,
  build = function(v)
    local a = tgl.scan { fn = function(xt, h) return h + xt end, sequences = { v },
      outputs_info = { tgl.constant(0, 'float64') }, name = 'm_sum' }
    local b = tgl.scan { fn = function(xt, h) return h * xt end, sequences = { v },
      outputs_info = { tgl.constant(1, 'float64') }, name = 'm_prod' }
    return { a, b }
  end,
  ref = function(v)
    local s, p, ss, ps = 0, 1, {}, {}
    for t = 1, v:size(1) do s = s + v:get(t); p = p * v:get(t); ss[t] = s; ps[t] = p end
    return { tgl.array(ss, 'float64'), tgl.array(ps, 'float64') }
  end,
  view = 'program', text_on = { '{m_sum+m_prod:' }, count = { scan = { 1, 2 } } }

case { rule = 'scan_hoist', what = 'exp(c) of an outer vector leaves the body',
  vars = { X, H0, C }, args = rnn_args,
  build = function(x, h0, c) return rnn(x, h0, c, 'hoist') end,
  ref = function(x, h0, c) return tgl.stack(rnn_ref(x, h0, c), 1) end,
  view = 'program', text_on = { 'hoisted' } }

case { rule = 'scan_seq_whole', what = 'x_t . A for every t becomes one product before the loop',
  vars = { X, H0, C }, args = rnn_args,
  build = function(x, h0, c) return rnn(x, h0, c, 'whole') end,
  ref = function(x, h0, c) return tgl.stack(rnn_ref(x, h0, c), 1) end,
  view = 'program', text_on = { 'whole[t]' } }

local Wb = tgl.constant(tgl.array({ { 0.5, -0.3 }, { 0.2, 0.1 }, { -0.4, 0.6 } }, 'float64'))
case { rule = 'scan_seq_whole', what = 'a batch X_t . W for every t: one product over (T*batch) rows',
  vars = { tgl.dtensor3('xb'), tgl.dmatrix('hb') }, args = function() return { rd(4, 2, 3), rd(2, 2) } end,
  build = function(x, h0)
    return tgl.scan { fn = function(xt, h) return tgl.tanh(xt:dot(Wb) + h * 0.5) end,
      sequences = { x }, outputs_info = { h0 }, name = 'batch' }
  end,
  ref = function(x, h0)
    local hs, h = {}, h0
    for t = 1, x:size(1) do h = tgl.tanh(tgl.dot(x[t], tgl.array({ { 0.5, -0.3 }, { 0.2, 0.1 }, { -0.4, 0.6 } }, 'float64')) + h * 0.5); hs[t] = h end
    return tgl.stack(hs, 1)
  end,
  view = 'program', text_on = { 'whole[t]' } }

case { rule = 'scan_save_mem', what = 'only h[-1] is read: the scan keeps the last step',
  vars = { X, H0, C }, args = rnn_args,
  build = function(x, h0, c) return rnn(x, h0, c, 'last')[-1] end,
  ref = function(x, h0, c) local hs = rnn_ref(x, h0, c); return hs[#hs] end,
  view = 'program', text_on = { 'last only: 1}' } }

local Ws = tgl.shared(tgl.array({ { 0.3, -0.2 }, { 0.1, 0.4 } }, 'float64'), 'Ws')
case { rule = 'scan_grad_gemm', what = 'the gradient of W accumulated per step becomes one product',
  vars = { X, H0 }, args = function() return { rd(6, 2), rd(2) } end,
  build = function(x, h0)
    local H = tgl.scan { fn = function(xt, h) return tgl.tanh(xt + h:dot(Ws)) end,
      sequences = { x }, outputs_info = { h0 }, name = 'gg' }
    return tgl.grad(tgl.sum(H * H), Ws)
  end,
  ref = function(x, h0)
    -- backpropagation through time by hand
    local W = Ws:get_value()
    local hs, h = { [0] = h0 }, h0
    for t = 1, x:size(1) do h = tgl.tanh(x[t] + tgl.dot(h, W)); hs[t] = h end
    local gW, carry = tgl.zeros(2, 2, F64), tgl.zeros(2, F64)
    for t = x:size(1), 1, -1 do
      local d = (hs[t] * 2 + carry) * (1 - hs[t] * hs[t])
      gW = gW + tgl.outer(hs[t - 1], d)
      carry = tgl.dot(W, d)
    end
    return gW
  end,
  view = 'program', text_on = { '{grad of gg: 2 seq, 1 rec, 1 out,' },
  -- one stacked output (the delta); the states h_{t-1} are read where the
  -- forward scan keeps them, not copied into a second one
  check_on = function(text)
    local fwd = text:match('(t%d+) = scan#%d+{gg:')
    return fwd ~= nil and text:find('= subtensor%(' .. fwd .. ', ') ~= nil and text:find('= dot%(') ~= nil
  end }

-- The gradient of sum(H): the backward scan reads the states, then fills
-- the output gradient (ones) per step instead of reading a (T, 2) array of ones.
local function bptt_ref(x, h0, gh)
  local W = Ws:get_value()
  local hs, h = { [0] = h0 }, h0
  for t = 1, x:size(1) do h = tgl.tanh(x[t] + tgl.dot(h, W)); hs[t] = h end
  local gW, carry = tgl.zeros(2, 2, F64), tgl.zeros(2, F64)
  for t = x:size(1), 1, -1 do
    local d = (gh(hs[t]) + carry) * (1 - hs[t] * hs[t])
    gW = gW + tgl.outer(hs[t - 1], d)
    carry = tgl.dot(W, d)
  end
  return gW
end
case { rule = 'scan_seq_fill', what = 'the gradient of a sum reaches every step as a fill made per step',
  vars = { X, H0 }, args = function() return { rd(6, 2), rd(2) } end,
  build = function(x, h0)
    local H = tgl.scan { fn = function(xt, h) return tgl.tanh(xt + h:dot(Ws)) end,
      sequences = { x }, outputs_info = { h0 }, name = 'fill' }
    return tgl.grad(tgl.sum(H), Ws)
  end,
  ref = function(x, h0) return bptt_ref(x, h0, function(h) return h * 0 + 1 end) end,
  view = 'program', text_on = { 'fill_like(g_t)' } }

case { rule = 'scan_share_states', what = 'the backward scan reads the forward states in place, not a joined copy',
  vars = { X, H0 }, args = function() return { rd(6, 2), rd(2) } end,
  build = function(x, h0)
    local H = tgl.scan { fn = function(xt, h) return tgl.tanh(xt + h:dot(Ws)) end,
      sequences = { x }, outputs_info = { h0 }, name = 'share' }
    return tgl.grad(tgl.sum(H * H), Ws)
  end,
  ref = function(x, h0) return bptt_ref(x, h0, function(h) return h * 2 end) end,
  view = 'program', text_on = { 'with initial values: 1}' },
  check_off = function(text) return text:find('concatenate', 1, true) ~= nil end,
  check_on = function(text) return text:find('concatenate', 1, true) == nil end }

-- In a process that has not joined a job (tgl.dist), the allreduces stay
-- in the program (as the identity): the stage groups them into buckets,
-- started in the order the backward pass produces their gradients and
-- waited for by the updates.
do
  local W1 = tgl.shared(tgl.randn({ 4, 3 }, { dtype = 'float64' }), 'ar_W1')
  local W2 = tgl.shared(tgl.randn({ 3, 2 }, { dtype = 'float64' }), 'ar_W2')
  case { rule = 'allreduce_buckets', what = 'allreduces become buckets: start, then wait',
    vars = { X }, args = function() return { rd(5, 4) } end,
    build = function(x)
      local cost = tgl.sum(tgl.tanh(x:dot(W1)):dot(W2) ^ 2)
      local g1, g2 = unpack(tgl.grad(cost, { W1, W2 }))
      return { tgl.allreduce(g1, 'mean') * 2, tgl.allreduce(g2, 'sum') }
    end,
    ref = function(x) -- the same gradients without allreduce (a job of one)
      local cost = tgl.sum(tgl.tanh(X:dot(W1)):dot(W2) ^ 2)
      local g1, g2 = unpack(tgl.grad(cost, { W1, W2 }))
      local f = tgl.compile { inputs = { X }, outputs = { g1 * 2, g2 }, mode = 'FAST_COMPILE' }
      return { f(x) }
    end,
    view = 'program', on = { 'allreduce_start', 'allreduce_wait' }, off = { 'allreduce' },
    -- sum and mean never share a bucket: two of each
    count = { allreduce_start = { 2, 0 }, allreduce_wait = { 2, 0 } },
    -- the start of the last layer's bucket (sum, W2) comes first
    check_on = function(text)
      local s1 = text:find('allreduce_start', 1, true)
      local s2 = text:find('allreduce_start', s1 + 1, true)
      local w1 = text:find('allreduce_wait', 1, true)
      return s1 and s2 and w1 and s2 < w1
    end }
end

-- ---------------------------------------------------------------------------

describe('rewrite rules', function()
  after_each(function() tgl.config.exclude = {} end)

  it('every rule listed by tgl.rules() has a spec here, and every spec names a listed rule', function()
    local listed = {}
    local missing = {}
    for _, r in ipairs(tgl.rules()) do
      listed[r.name] = true
      assert.is_string(r.stage)
      assert.is_string(r.synopsis)
      if not cases[r.name] then missing[#missing + 1] = r.name end
    end
    assert.are.same({}, missing, 'rules without a spec: ' .. table.concat(missing, ', '))
    for name in pairs(cases) do
      assert.is_true(listed[name] == true, 'spec for a rule tgl.rules() does not list: ' .. name)
    end
  end)

  it('lists the rules by stage, in driver order', function()
    local stages, order = {}, { canonicalize = 1, stabilize = 2, scan = 3, dist = 4, specialize = 5,
                                fuse = 6 }
    local last = 0
    for _, r in ipairs(tgl.rules()) do
      assert.is_not_nil(order[r.stage], 'unknown stage ' .. r.stage)
      assert.is_true(order[r.stage] >= last, r.name .. ' is out of stage order')
      last = order[r.stage]
      stages[r.stage] = true
    end
    assert.are.same({ canonicalize = true, stabilize = true, scan = true, dist = true,
                      specialize = true, fuse = true }, stages)
  end)

  local names = {}
  for name in pairs(cases) do names[#names + 1] = name end
  table.sort(names)
  for _, name in ipairs(names) do
    for k, c in ipairs(cases[name]) do
      it(('%s: %s'):format(name, c.what or tostring(k)), function() check_rule(c) end)
    end
  end

  it('tgl.config.exclude takes a list, reads back, and matches whole names only', function()
    tgl.config.exclude = { 'log1p', 'gemm_add' }
    assert.are.same({ 'log1p', 'gemm_add' }, tgl.config.exclude)
    local x = tgl.dmatrix('x')
    -- 'log1p' off does not switch off 'log1p_exp' (a name it prefixes)
    local t = tgl.debugprint(tgl.optimize({ tgl.log(1 + tgl.exp(x)), tgl.log(1 + x) }, 'FAST_COMPILE'))
    local ops = graph_ops(t)
    assert.is_true((ops.softplus or 0) > 0, t)
    assert.is_nil(ops.log1p, t)
    -- and 'log1p_exp' off does not switch off 'log1p'
    tgl.config.exclude = { 'log1p_exp' }
    ops = graph_ops(tgl.debugprint(tgl.optimize({ tgl.log(1 + tgl.exp(x)), tgl.log(1 + x) }, 'FAST_COMPILE')))
    assert.is_nil(ops.softplus)
    assert.equals(1, ops.log1p)
    tgl.config.exclude = {}
    assert.are.same({}, tgl.config.exclude)
  end)

  it('a rule off in one compile does not stay off in the next', function()
    local a, b, c = tgl.dmatrix('a'), tgl.dmatrix('b'), tgl.dmatrix('c')
    local e = c + tgl.dot(a, b)
    tgl.config.exclude = { 'gemm_add' }
    local f1 = tgl.compile { inputs = { a, b, c }, outputs = e }
    tgl.config.exclude = {}
    local f2 = tgl.compile { inputs = { a, b, c }, outputs = e }
    assert.is_nil(program_ops(tgl.debugprint(f1)).gemm)
    assert.equals(1, program_ops(tgl.debugprint(f2)).gemm)
    -- the first function keeps its program
    assert.is_nil(program_ops(tgl.debugprint(f1)).gemm)
  end)
end)

-- ---------------------------------------------------------------------------

describe('numerical stability', function()
  after_each(function() tgl.config.exclude = {} end)

  for _, dt in ipairs({ 'float64', 'float32' }) do
    local tol = dt == 'float64' and 1e-12 or 1e-6

    it(dt .. ': log(sigmoid(x)) at -1000 is -1000 and its gradient is finite', function()
      local x = tgl.tensor { dtype = dt, ndim = 1, name = 'x' }
      local ls = tgl.log(tgl.sigmoid(x))
      local g = tgl.grad(tgl.sum(ls), x)
      local f = tgl.compile { inputs = { x }, outputs = { ls, g } }
      local v, gv = f(tgl.array({ -1000, -30, 0, 30, 1000 }, dt))
      -- log(sigmoid(x)) = -softplus(-x); d/dx = 1 - sigmoid(x)
      local want = { -1000, -30 - math.log(1 + math.exp(-30)), -math.log(2),
                     -math.log(1 + math.exp(-30)), 0 }
      assert_close(tgl.array(want, dt), v, tol, 'log(sigmoid(x))')
      assert.is_true(all_finite(gv), tostring(gv))
      local s = function(z) return 1 / (1 + math.exp(-z)) end
      assert_close(tgl.array({ 1, 1 - s(-30), 0.5, 1 - s(30), 0 }, dt), gv, tol, 'gradient')
    end)

    it(dt .. ': log(1 - sigmoid(x)) at 1000 is -1000', function()
      local x = tgl.tensor { dtype = dt, ndim = 1, name = 'x' }
      local f = tgl.compile { inputs = { x }, outputs = tgl.log(1 - tgl.sigmoid(x)) }
      assert_close(tgl.array({ -1000, 0, -math.log(2) }, dt), f(tgl.array({ 1000, -1000, 0 }, dt)), tol)
    end)

    it(dt .. ': softmax cross-entropy and its gradient at logits of +-1000 are finite and exact', function()
      local x = tgl.tensor { dtype = dt, ndim = 2, name = 'x' }
      local y = tgl.ivector('y')
      local xent = tgl.categorical_crossentropy(tgl.softmax(x), y)
      local cost = tgl.mean(xent)
      local g = tgl.grad(cost, x)
      local f = tgl.compile { inputs = { x, y }, outputs = { xent, cost, g } }
      local logits = { { 1000, -1000, 0 }, { -1000, 1000, 0 }, { 1000, 1000, -1000 },
                       { -1000, -1000, -1000 }, { 1, 2, 3 } }
      local lab = { 1, 1, 2, 3, 2 }
      local xv, cv, gv = f(tgl.array(logits, dt), tgl.array(lab, 'int32'))
      -- by hand, in double: lse(row) - row[label]; (softmax - onehot) / N
      local N, K = #logits, 3
      local want_x, want_g, total = {}, {}, 0
      for r = 1, N do
        local row = logits[r]
        local m = math.max(unpack(row))
        local se = 0
        for k = 1, K do se = se + math.exp(row[k] - m) end
        local lse = m + math.log(se)
        want_x[r] = lse - row[lab[r]]
        total = total + want_x[r]
        want_g[r] = {}
        for k = 1, K do
          want_g[r][k] = (math.exp(row[k] - lse) - (k == lab[r] and 1 or 0)) / N
        end
      end
      assert.is_true(all_finite(xv) and all_finite(cv) and all_finite(gv))
      assert_close(tgl.array(want_x, dt), xv, tol, 'cross-entropy')
      assert_close(tgl.array(total / N, dt), cv, tol, 'mean cross-entropy')
      assert_close(tgl.array(want_g, dt), gv, tol, 'gradient')
      assert.equals(2000, xv:get(2))
    end)

    it(dt .. ': log(sum(exp(x))) at x = 1000 is finite', function()
      local v = tgl.tensor { dtype = dt, ndim = 1, name = 'v' }
      local m = tgl.tensor { dtype = dt, ndim = 2, name = 'm' }
      local f = tgl.compile { inputs = { v, m },
        outputs = { tgl.log(tgl.sum(tgl.exp(v))), tgl.log(tgl.sum(tgl.exp(m), 2)) } }
      local a, b = f(tgl.array({ 1000, 1000, 999 }, dt), tgl.array({ { 1000, 1000 }, { -1000, -1001 } }, dt))
      assert_close(tgl.array(1000 + math.log(2 + math.exp(-1)), dt), a, tol, 'vector')
      assert_close(tgl.array({ 1000 + math.log(2), -1000 + math.log(1 + math.exp(-1)) }, dt), b, tol, 'rows')
    end)

    it(dt .. ': with the stabilizing rules off, the same graphs overflow (the specs above test the rules)', function()
      tgl.config.exclude = { 'log_sigmoid', 'logsumexp' }
      local x = tgl.tensor { dtype = dt, ndim = 1, name = 'x' }
      local f = tgl.compile { inputs = { x }, outputs = { tgl.log(tgl.sigmoid(x)), tgl.log(tgl.sum(tgl.exp(x))) } }
      local a, b = f(tgl.array({ -1000 }, dt))
      assert.equals(-math.huge, a:get(1))
      local _, c = f(tgl.array({ 1000 }, dt))
      assert.equals(math.huge, c:get())
    end)
  end

  it('gradients through the stabilized forms equal those of the plain forms at moderate inputs', function()
    local x, y = tgl.dmatrix('x'), tgl.ivector('y')
    local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x), y))
                 + tgl.sum(tgl.log(tgl.sigmoid(x))) + tgl.sum(tgl.log(1 - tgl.sigmoid(x)))
                 + tgl.sum(tgl.log(tgl.sum(tgl.exp(x), 2))) + tgl.sum(tgl.log(1 + tgl.exp(x)))
                 + tgl.sum(tgl.log(tgl.softmax(x))) + tgl.sum(tgl.exp(x) - 1) + tgl.sum(tgl.log(1 + x * x))
    tgl.manual_seed(21)
    local xa, ya = rd(4, 5) * 2, tgl.array({ 1, 5, 3, 2 }, 'int32')
    local function grads()
      local g = tgl.grad(cost, x)
      return tgl.compile { inputs = { x, y }, outputs = { cost, g } }(xa, ya)
    end
    local c1, g1 = grads()
    tgl.config.exclude = { 'softmax_xent', 'log_sigmoid', 'log1m_sigmoid', 'log1p_exp', 'log1p',
                           'expm1', 'log_softmax', 'log_gather', 'logsumexp' }
    local c2, g2 = grads()
    assert_close(c2, c1, 1e-12, 'cost')
    assert_close(g2, g1, 1e-10, 'gradient')
  end)

  it('the stable forms hold in FAST_COMPILE too', function()
    local x, y = tgl.dmatrix('x'), tgl.ivector('y')
    local f = tgl.compile { inputs = { x, y }, mode = 'FAST_COMPILE',
      outputs = { tgl.log(tgl.sigmoid(x)), tgl.categorical_crossentropy(tgl.softmax(x), y) } }
    local a, b = f(tgl.array({ { -1000, 1000 } }, 'float64'), tgl.array({ 2 }, 'int32'))
    assert_close(tgl.array({ { -1000, 0 } }, 'float64'), a)
    assert_close(tgl.array({ 0 }, 'float64'), b)
  end)
end)

-- ---------------------------------------------------------------------------

-- A tanh MLP (sizes[1] inputs, three tanh layers, softmax output) and its
-- SGD training function; the same initial weights for the same seed.
local function mlp(sizes, dt, opts)
  opts = opts or {}
  tgl.manual_seed(opts.seed or 5)
  local x, y = tgl.tensor { dtype = dt, ndim = 2, name = 'x' }, tgl.ivector('y')
  local params, h = {}, x
  for l = 1, #sizes - 1 do
    local W = tgl.shared(tgl.randn(sizes[l], sizes[l + 1], { dtype = dt }) * (1 / math.sqrt(sizes[l])), 'W' .. l)
    local b = tgl.shared(tgl.zeros(sizes[l + 1], { dtype = dt }), 'b' .. l)
    params[#params + 1] = W
    params[#params + 1] = b
    local a = h:dot(W) + b
    h = l < #sizes - 1 and tgl.tanh(a) or a
  end
  local p = tgl.softmax(h)
  local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
  local grads = tgl.grad(cost, params)
  local ups = {}
  for i, v in ipairs(params) do ups[i] = { v, v - 0.1 * grads[i] } end
  local f = tgl.compile { inputs = { x, y }, outputs = cost, updates = ups, mode = opts.mode,
                          name = 'train' }
  return f, params, cost, grads
end

-- True when a graph text has a log node over a softmax (directly or
-- through indexing or a dimshuffle).
local function log_over_softmax(text)
  local through = { subtensor = true, adv_subtensor = true, dimshuffle = true }
  for _, n in ipairs((parse_graph(text))) do
    if n.op == 'log' then
      local c = n.children[1]
      while c and through[c.op] do c = c.children[1] end
      if c and c.op == 'softmax' then return true end
    end
  end
  return false
end

-- The slots a program's instructions of op `op` write.
local function slots_of(text, op)
  local s = {}
  for line in text:gmatch('[^\n]+') do
    local lhs = line:match('^%s*%d+%s+([%w_, ]+) = ' .. op .. '%(')
    if lhs then for slot in lhs:gmatch('[%w_]+') do s[slot] = true end end
  end
  return s
end

-- Instructions (op and argument list) that read one of the slots.
local function readers(text, slots)
  local r = {}
  for line in text:gmatch('[^\n]+') do
    local op, body, args = line:match('^%s*%d+%s+[%w_, ]+ = ([%w_]+)([^(]*)%(([^)]*)%)')
    if op then
      for a in args:gmatch('[%w_]+') do
        if slots[a] then r[#r + 1] = op .. body end
      end
    end
  end
  return r
end

describe('the 3-hidden-layer tanh MLP training function', function()
  after_each(function() tgl.config.exclude = {} end)
  local sizes = { 64, 32, 32, 32, 10 }

  local function data(dt)
    tgl.manual_seed(11)
    local xa = tgl.randn(16, sizes[1], { dtype = dt })
    local lab = {}
    for i = 1, 16 do lab[i] = 1 + (i * 3) % sizes[#sizes] end
    return xa, tgl.array(lab, 'int32')
  end

  it('has GEMMs, fused elementwise kernels, softmax_crossentropy and no log of a softmax', function()
    local f, _, cost, grads = mlp(sizes, 'float32')
    local text = tgl.debugprint(f)
    local ops = program_ops(text)
    assert.is_true((ops.gemm or 0) >= 4, text)        -- 4 forward layers at least
    assert.is_truthy(text:find('fused#', 1, true), text)
    assert.is_true((ops.fused or 0) > 0, text)
    assert.equals(1, ops.softmax_crossentropy, text)
    assert.is_nil(ops.log, text)
    assert.is_nil(ops.log_softmax, text)
    -- no instruction reads a softmax and takes its log (plain or in a kernel)
    for _, r in ipairs(readers(text, slots_of(text, 'softmax'))) do
      assert.is_falsy(r:match('^log') or r:match('^fused.*[{ ]log[ }]'), 'log of a softmax: ' .. r .. '\n' .. text)
    end
    -- the SGD weight updates are GEMMs that accumulate into the weights
    for l = 1, 4 do
      assert.is_truthy(text:match('= gemm%([^)\n]*, W' .. l .. '%)[^\n]*alpha=%-0%.1 beta=1'),
                       'W' .. l .. ' update is not one gemm:\n' .. text)
    end
    -- and the optimized graphs of the cost and gradients have no log over a
    -- softmax (in FAST_RUN, and before fusion in FAST_COMPILE) ...
    local roots = { cost, unpack(grads) }
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE' }) do
      local g = tgl.debugprint(tgl.optimize(roots, mode))
      assert.is_false(log_over_softmax(g), mode .. ':\n' .. g)
    end
    -- ... which they have with the stabilizing rules off (the check sees it)
    tgl.config.exclude = { 'softmax_xent', 'log_gather', 'log_softmax' }
    assert.is_true(log_over_softmax(tgl.debugprint(tgl.optimize(cost, 'FAST_COMPILE'))))
  end)

  it('784-100-100-100-10 float32 compiles to the same form and trains', function()
    local f = mlp({ 784, 100, 100, 100, 10 }, 'float32')
    local text = tgl.debugprint(f)
    local ops = program_ops(text)
    assert.is_true((ops.gemm or 0) >= 4 and (ops.fused or 0) > 0 and ops.softmax_crossentropy == 1, text)
    tgl.manual_seed(3)
    local xa = tgl.randn(32, 784)
    local ya = tgl.array((function() local t = {} for i = 1, 32 do t[i] = 1 + i % 10 end return t end)(), 'int32')
    local c1 = f(xa, ya):get()
    for _ = 1, 8 do f(xa, ya) end
    local c2 = f(xa, ya):get()
    assert.is_true(c1 == c1 and c2 < c1, ('cost %g -> %g'):format(c1, c2))
  end)

  it('trains to the same costs with every rewrite rule off (float64)', function()
    local xa, ya = data('float64')
    local f = mlp(sizes, 'float64')
    local on = {}
    for i = 1, 5 do on[i] = f(xa, ya):get() end
    local all = {}
    for _, r in ipairs(tgl.rules()) do all[#all + 1] = r.name end
    tgl.config.exclude = all
    local g = mlp(sizes, 'float64')
    local text = tgl.debugprint(g)
    assert.is_nil(program_ops(text).gemm, text)
    assert.is_nil(program_ops(text).fused, text)
    for i = 1, 5 do
      local c = g(xa, ya):get()
      assert.is_true(math.abs(c - on[i]) <= 1e-10 * math.max(1, math.abs(c)),
                     ('step %d: %.17g (rules on) vs %.17g (all off)'):format(i, on[i], c))
    end
    assert.is_true(on[5] < on[1])
  end)
end)

-- ---------------------------------------------------------------------------

describe('modes', function()
  after_each(function() tgl.config.exclude = {} end)

  local function graph()
    local x, a, b = tgl.dmatrix('x'), tgl.dmatrix('a'), tgl.dmatrix('b')
    local y = tgl.ivector('y')
    local out = { tgl.tanh(x * 2 + 1) * tgl.exp(x), b + tgl.dot(x, a),
                  tgl.categorical_crossentropy(tgl.softmax(x), y), tgl.log(tgl.sigmoid(x)) }
    return { x, a, b, y }, out
  end
  local function args()
    tgl.manual_seed(8)
    return rd(3, 3), rd(3, 3), rd(3, 3), tgl.array({ 1, 3, 2 }, 'int32')
  end

  it('FAST_COMPILE runs only the cheap stages: no gemm, no fused kernels; same values', function()
    local ins, out = graph()
    local fast = tgl.compile { inputs = ins, outputs = out }
    local cheap = tgl.compile { inputs = ins, outputs = out, mode = 'FAST_COMPILE' }
    local text = tgl.debugprint(cheap)
    local ops = program_ops(text)
    assert.is_nil(ops.gemm, text)
    assert.is_nil(ops.gemv, text)
    assert.is_nil(ops.fused, text)
    assert.is_falsy(text:find('fused#', 1, true), text)
    -- canonicalize and stabilize did run
    assert.equals(1, ops.softmax_crossentropy, text)
    assert.equals(1, ops.softplus, text)
    assert.is_nil(ops.log, text)
    local fo = program_ops(tgl.debugprint(fast))
    assert.is_true(fo.gemm == 1 and (fo.fused or 0) > 0)
    local r1, r2 = { fast(args()) }, { cheap(args()) }
    for i = 1, #r1 do assert_close(r1[i], r2[i], 1e-12, 'output ' .. i) end
    -- and tgl.optimize's FAST_COMPILE graph agrees
    local gops = graph_ops(tgl.debugprint(tgl.optimize(out, 'FAST_COMPILE')))
    assert.is_nil(gops.gemm)
    assert.is_nil(gops.fused)
  end)

  it('DEBUG compiles (vm linker) and gives the FAST_RUN values', function()
    local ins, out = graph()
    local fast = tgl.compile { inputs = ins, outputs = out }
    local dbg = tgl.compile { inputs = ins, outputs = out, mode = 'DEBUG' }
    assert.equals('vm', dbg.linker)
    assert.equals('DEBUG', dbg.mode)
    local r1, r2 = { fast(args()) }, { dbg(args()) }
    assert.equals(#out, #r2)
    for i = 1, #r1 do assert_close(r1[i], r2[i], 1e-12, 'output ' .. i) end
    -- the MLP too
    local xa = tgl.randn(4, 6, F64)
    local ya = tgl.array({ 1, 2, 3, 1 }, 'int32')
    local f1 = mlp({ 6, 5, 5, 5, 3 }, 'float64')
    local f2 = mlp({ 6, 5, 5, 5, 3 }, 'float64', { mode = 'DEBUG' })
    for _ = 1, 3 do assert_close(f1(xa, ya), f2(xa, ya), 1e-12, 'MLP cost') end
  end)

  it('honours TGL_EXCLUDE from the environment', function()
    local bin = os.getenv('TGL_BIN') or (arg and arg[-1])
    assert.is_string(bin, 'TGL_BIN is not set')
    local chunk = [[
local tgl = require 'tgl'
io.write('exclude=', table.concat(tgl.config.exclude, ';'), '\n')
local a, b, c = tgl.dmatrix('a'), tgl.dmatrix('b'), tgl.dmatrix('c')
local x = tgl.dmatrix('x')
local f = tgl.compile{inputs = {a, b, c}, outputs = c + tgl.dot(a, b)}
io.write(tgl.debugprint(f), '\n')
io.write(tgl.debugprint(tgl.optimize(tgl.log(tgl.sigmoid(x)), 'FAST_COMPILE')), '\n')
]]
    local function sh(str) return "'" .. str:gsub("'", "'\\''") .. "'" end
    local function run(env)
      local p = io.popen(('%s %s -e %s 2>&1'):format(env, sh(bin), sh(chunk)))
      local out = p:read('*a')
      p:close()
      return out
    end
    local off = run('TGL_EXCLUDE=gemm_add,log_sigmoid')
    assert.is_truthy(off:find('exclude=gemm_add;log_sigmoid', 1, true), off)
    assert.is_nil(program_ops(off).gemm, off)
    assert.is_truthy(program_ops(off).dot, off)
    assert.is_truthy(off:find('sigmoid [id', 1, true), off)
    local on = run('TGL_EXCLUDE=')
    assert.is_truthy(on:find('exclude=\n', 1, true), on)
    assert.equals(1, program_ops(on).gemm, on)
    assert.is_falsy(on:find('sigmoid [id', 1, true), on)
  end)
end)

-- ---------------------------------------------------------------------------

describe('in-place steps of rewritten forms never clobber what is still read', function()
  after_each(function() tgl.config.exclude = {} end)
  local C, B, Wv = tgl.dmatrix('C'), tgl.dmatrix('B'), tgl.dvector('w')
  local cases_ip = {
    { 'gemm accumulating into one of its operands', function(c, b) local t = tgl.exp(c); return t + tgl.dot(t, b) end },
    { 'gemm accumulating into its right operand', function(c, b) local t = tgl.exp(c); return t + tgl.dot(b, t) end },
    { 'gemm into the transpose of an operand', function(c, b) local t = tgl.exp(c); return t - 0.5 * tgl.dot(t:T(), b) end },
    { 'gemm accumulator read again after', function(c, b) local t = tgl.exp(c); return (t + tgl.dot(c, b)) * t end },
    { 'ger with x a row of A', function(c, b, w) local t = tgl.exp(c); return t + tgl.outer(t[1], w) end },
    { 'ger with y a column of A', function(c, b, w) local t = tgl.exp(c); return t + tgl.outer(w, t[{ {}, 2 }]) end },
    { 'gemv accumulating into its vector', function(c, b, w) local t = tgl.exp(w); return t + tgl.dot(c, t) end },
    { 'fused kernel reading its input transposed', function(c) local t = tgl.exp(c); return t + t:T() end },
    { 'fused kernel, two uses', function(c) local t = tgl.exp(c) * 2; return tgl.exp(t) * t:T() end },
  }
  for _, ip in ipairs(cases_ip) do
    it(ip[1], function()
      tgl.manual_seed(3)
      local ca, ba, wa = rd(3, 3), rd(3, 3), rd(3)
      local want = ip[2](ca, ba, wa)
      local f = tgl.compile { inputs = { C, B, Wv }, outputs = ip[2](C, B, Wv) }
      assert_close(want, f(ca, ba, wa), 1e-12, tgl.debugprint(f))
    end)
  end

  it('the MLP program runs steps in place', function()
    local text = tgl.debugprint((mlp({ 6, 5, 5, 5, 3 }, 'float32')))
    assert.is_truthy(text:find('[in place of t', 1, true), text)
  end)
end)

describe('the fill rules keep shape errors', function()
  -- fill_elemwise drops a fill only where the graph proves its shape is the
  -- other operand's; static types alone would let x^0 * y run on a y of
  -- another shape and return y
  local x, y = tgl.dmatrix('x'), tgl.dmatrix('y')
  local function fails_both(build, args)
    for _, ex in ipairs({ {}, { 'fill_source', 'fill_elemwise' } }) do
      tgl.config.exclude = ex
      local f = tgl.compile { inputs = { x, y }, outputs = build(x, y) }
      tgl.config.exclude = {}
      local ok, err = pcall(f, unpack(args))
      assert.is_false(ok, 'no error with the rules ' .. (#ex == 0 and 'on' or 'off'))
      assert.truthy(tostring(err):find('differ on axis', 1, true), tostring(err))
    end
  end
  after_each(function() tgl.config.exclude = {} end)

  it('x^0 * y with y of another shape', function()
    fails_both(function(a, b) return a ^ 0 * b end, { tgl.randn(3, 4, F64), tgl.randn(3, 5, F64) })
  end)

  it('grad(sum(x * y), x) with y of another shape', function()
    fails_both(function(a, b) return tgl.grad(tgl.sum(a * b), a) end, { tgl.randn(3, 4, F64), tgl.randn(2, 4, F64) })
  end)
end)

describe('regressions (bugs found and fixed)', function()
  after_each(function() tgl.config.exclude = {} end)

  -- logsumexp matches its own replacement (m + log(sum(exp(x - m))) holds
  -- log(sum(exp(...))) again), so it fires again on it until the driver's
  -- depth limit (MAX_DEPTH 64): 64 nested shifts, 128 max nodes, and a
  -- ~190-instruction program instead of ~5.  The values stay right (every
  -- shift after the first subtracts 0).
  it('logsumexp rewrites log(sum(exp(x), 2)) once (one max shift)', function()
    local x = tgl.dmatrix('x')
    local e = tgl.log(tgl.sum(tgl.exp(x), 2))
    local ops = graph_ops(tgl.debugprint(tgl.optimize(e, 'FAST_COMPILE')))
    assert.is_true((ops.max or 0) <= 2, ('%d distinct max nodes (expected at most 2)'):format(ops.max or 0))
    local f = tgl.compile { inputs = { x }, outputs = e }
    local instructions = tonumber(tgl.debugprint(f):match('(%d+) instructions'))
    assert.is_true(instructions <= 8, instructions .. ' instructions (expected at most 8)')
  end)
  -- logsumexp shifts by m = max(x) without guarding m = -inf (PyTensor's
  -- local_log_sum_exp uses switch(eq(m, -inf), 0, m), which also breaks the
  -- self-match above): a row of all -inf gives NaN instead of log(0) = -inf,
  -- and a row holding +inf gives NaN instead of +inf.  With the rule off:
  -- -inf and +inf.
  it('logsumexp keeps log(sum(exp(x))) = -inf on a row of -inf (and +inf with a +inf)', function()
    local x = tgl.dmatrix('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.log(tgl.sum(tgl.exp(x), 2)) }
    local inf = math.huge
    local got = f(tgl.array({ { -inf, -inf }, { inf, 0 }, { 1, 2 } }, 'float64'))
    assert_close(tgl.array({ -inf, inf, 2 + math.log(1 + math.exp(-1)) }, 'float64'), got, 1e-12,
                 'log(sum(exp(x), 2))')
  end)

  -- gemm_add / gemm_sub (and their gemv forms) fold c into the product when
  -- the product has a broadcastable axis that c does not (a 1xN product of
  -- a row, added to an MxN c).  The graph is valid (the product broadcasts
  -- over c's rows), but the gemm computes into the product's 1xN shape and
  -- fails at run time: "dot: c does not broadcast to 1x3".  With the rule
  -- off the function returns the right values.
  it('gemm_add: row.B + C, where the product broadcasts over C', function()
    local v, B, C = tgl.dvector('v'), tgl.dmatrix('B'), tgl.dmatrix('C')
    tgl.manual_seed(4)
    local va, ba, ca = rd(3), rd(3, 3), rd(3, 3)
    local build = function(v_, b, c) return tgl.dot(tgl.dimshuffle(v_, { 'x', 1 }), b) + c end
    local want = build(va, ba, ca)
    tgl.config.exclude = { 'gemm_add' }
    assert_close(want, tgl.compile { inputs = { v, B, C }, outputs = build(v, B, C) }(va, ba, ca), 1e-12, 'off')
    tgl.config.exclude = {}
    local f = tgl.compile { inputs = { v, B, C }, outputs = build(v, B, C) }
    local ok, got = pcall(f, va, ba, ca)
    assert.is_true(ok, tostring(got) .. '\n' .. tgl.debugprint(f))
    assert_close(want, got, 1e-12, 'on')
  end)

  it('gemm_sub: C - 0.5 * B.col, where the product broadcasts over C', function()
    local v, B, C = tgl.dvector('v'), tgl.dmatrix('B'), tgl.dmatrix('C')
    tgl.manual_seed(4)
    local va, ba, ca = rd(3), rd(3, 3), rd(3, 3)
    local build = function(v_, b, c) return c - 0.5 * tgl.dot(b, tgl.dimshuffle(v_, { 1, 'x' })) end
    local want = build(va, ba, ca)
    local f = tgl.compile { inputs = { v, B, C }, outputs = build(v, B, C) }
    local ok, got = pcall(f, va, ba, ca)
    assert.is_true(ok, tostring(got) .. '\n' .. tgl.debugprint(f))
    assert_close(want, got, 1e-12, 'on')
  end)

  it('gemm_add (gemv form): w + row.u, where the 1-element product broadcasts over w', function()
    local v, u, w = tgl.dvector('v'), tgl.dvector('u'), tgl.dvector('w')
    tgl.manual_seed(4)
    local va, ua, wa = rd(3), rd(3), rd(4)
    local build = function(v_, u_, w_) return w_ + tgl.dot(tgl.dimshuffle(v_, { 'x', 1 }), u_) end
    local want = build(va, ua, wa)
    local f = tgl.compile { inputs = { v, u, w }, outputs = build(v, u, w) }
    local ok, got = pcall(f, va, ua, wa)
    assert.is_true(ok, tostring(got) .. '\n' .. tgl.debugprint(f))
    assert_close(want, got, 1e-12, 'on')
  end)
end)
