-- spec/nn_table_spec.lua — table inputs and outputs in lua/nn: the
-- containers Concat, ConcatTable, Parallel, ParallelTable and the table
-- modules JoinTable, SplitTable, CAddTable, CSubTable, CMulTable.  Values
-- against explicit tgl computations, gradients (gradInput tables and
-- parameter gradients) against float64 central differences, every inner
-- module's output and gradInput fields, nested tables, Torch7's batch
-- rules and negative dimensions, the compile cache's keys, and errors.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff = S.maxdiff

-- The leaves of an array or a nested table of arrays, depth-first.
local function leaves(v, out)
  out = out or {}
  if tgl.is_array(v) then out[#out + 1] = v; return out end
  for _, e in ipairs(v) do leaves(e, out) end
  return out
end

-- Asserts that two values (arrays or nested tables) have the same
-- structure and agree within tol.
local function same_value(a, b, tol)
  if tgl.is_array(b) then
    assert.is_true(tgl.is_array(a), 'expected an array')
    assert.is_true(maxdiff(a, b) <= tol, ('differs by %g'):format(maxdiff(a, b)))
    return
  end
  assert.equals('table', type(a))
  assert.equals(#b, #a)
  for i = 1, #b do same_value(a[i], b[i], tol) end
end

-- A random array, or nested table of them, of the structure and shapes of v.
local function randn_like(v)
  if tgl.is_array(v) then return tgl.randn(unpack(v:shape())) end
  local t = {}
  for i, e in ipairs(v) do t[i] = randn_like(e) end
  return t
end

-- Checks backward(x, g) of m against central differences of
-- L = sum_i sum(y_i * g_i) in every input leaf and every parameter.
local function check_grads(m, x, g)
  local function L()
    local s = 0
    local ys, gs = leaves(m:forward(x)), leaves(g)
    for i = 1, #ys do s = s + tgl.sum(ys[i] * gs[i]):get() end
    return s
  end
  m:zeroGradParameters()
  local gi = m:backward(x, g)
  local gil = leaves(gi)
  local xl = leaves(x)
  assert.equals(#xl, #gil)
  local function fd(a, i) return S.fd_at(L, a, i) end
  for k, a in ipairs(xl) do
    local gf = gil[k]:reshape(gil[k]:nelement())
    for i = 1, a:nelement() do assert.near(fd(a, i), gf:get(i), 1e-7) end
  end
  local params, grads = m:parameters()
  for k, p in ipairs(params or {}) do
    local gf = grads[k]:reshape(grads[k]:nelement())
    for i = 1, p:nelement(), 2 do assert.near(fd(p, i), gf:get(i), 1e-7) end
  end
  return gi
end

describe('nn tables', function()
  S.float64(3)

  it('prints the branching containers as Torch7 does', function()
    local m = nn.Sequential()
      :add(nn.ConcatTable():add(nn.Linear(4, 2)):add(nn.Sequential():add(nn.Identity()):add(nn.Tanh())))
      :add(nn.ParallelTable():add(nn.Identity()):add(nn.Identity()))
      :add(nn.JoinTable(2))
    assert.equals(table.concat({
      'nn.Sequential {',
      '  [input -> (1) -> (2) -> (3) -> output]',
      '  (1): nn.ConcatTable {',
      '    input',
      '      |`-> (1): nn.Linear(4 -> 2)',
      '       `-> (2): nn.Sequential {',
      '             [input -> (1) -> (2) -> output]',
      '             (1): nn.Identity',
      '             (2): nn.Tanh',
      '           }',
      '       ... -> output',
      '  }',
      '  (2): nn.ParallelTable {',
      '    input',
      '      |`-> (1): nn.Identity',
      '       `-> (2): nn.Identity',
      '       ... -> output',
      '  }',
      '  (3): nn.JoinTable',
      '}' }, '\n'), tostring(m))
    assert.equals('nn.Concat {\n  input\n     `-> (1): nn.Tanh\n     ... -> output\n}',
                  tostring(nn.Concat(1):add(nn.Tanh())))
    assert.equals('nn.Parallel {\n  input\n    |`-> (1): nn.Tanh\n     `-> (2): nn.Tanh\n     ... -> output\n}',
                  tostring(nn.Parallel(1, 1):add(nn.Tanh()):add(nn.Tanh())))
    assert.equals('nn.CAddTable', tostring(nn.CAddTable()))
    -- Torch7's fields before the first call: tables where the module's are
    assert.same({}, nn.ConcatTable().output)
    assert.same({}, nn.ParallelTable().gradInput)
    assert.same({}, nn.JoinTable(1).gradInput)
    assert.same({}, nn.CMulTable().gradInput)
    assert.same({}, nn.SplitTable(1).output)
    assert.equals('nn.SplitTable', tostring(nn.SplitTable(1)))
  end)

  it('ConcatTable + CAddTable (a residual block): values, per-branch gradInput, finite differences', function()
    local lin = nn.Linear(3, 3)
    local id = nn.Identity()
    local ct = nn.ConcatTable():add(lin):add(id)
    local add = nn.CAddTable()
    local m = nn.Sequential():add(ct):add(add)
    local x, g = tgl.randn(4, 3), tgl.randn(4, 3)
    local out = m:forward(x)
    local z = x:dot(lin.weight:T()) + lin.bias
    assert.is_true(maxdiff(out, z + x) < 1e-12)
    -- every module's output field
    same_value(ct.output, { z, x }, 1e-12)
    assert.is_true(maxdiff(lin.output, z) < 1e-12)
    assert.is_true(maxdiff(id.output, x) == 0)
    assert.is_true(maxdiff(add.output, z + x) < 1e-12)
    m:zeroGradParameters()
    local gi = m:backward(x, g)
    -- Torch7's: each branch's gradInput is the gradient through it alone
    assert.is_true(maxdiff(gi, g:dot(lin.weight) + g) < 1e-12)
    assert.is_true(maxdiff(lin.gradInput, g:dot(lin.weight)) < 1e-12)
    assert.is_true(maxdiff(id.gradInput, g) < 1e-12)
    assert.is_true(maxdiff(ct.gradInput, gi) < 1e-12)
    same_value(add.gradInput, { g, g }, 1e-12)
    assert.is_true(maxdiff(lin.gradWeight, g:T():dot(x)) < 1e-12)
    assert.is_true(maxdiff(lin.gradBias, tgl.sum(g, 1)) < 1e-12)
    check_grads(m, x, g)
  end)

  it('ConcatTable gives a table output; a table gradOutput; the same input to every branch', function()
    local a, b = nn.Linear(3, 2), nn.Tanh()
    local m = nn.ConcatTable():add(a):add(b)
    local x = tgl.randn(5, 3)
    local out = m:forward(x)
    same_value(out, { x:dot(a.weight:T()) + a.bias, tgl.tanh(x) }, 1e-12)
    assert.equals(out, m.output)
    local g = { tgl.randn(5, 2), tgl.randn(5, 3) }
    local gi = check_grads(m, x, g)
    local t = tgl.tanh(x)
    assert.is_true(maxdiff(gi, g[1]:dot(a.weight) + g[2] * (1 - t * t)) < 1e-12)
    assert.is_true(maxdiff(b.gradInput, g[2] * (1 - t * t)) < 1e-12)
    assert.is_true(maxdiff(a.gradInput, g[1]:dot(a.weight)) < 1e-12)
  end)

  it('Concat joins the branches along its dimension, batch (2) and single example (1)', function()
    local a, b = nn.Linear(3, 2), nn.Linear(3, 4)
    local m = nn.Concat(2):add(a):add(b)
    local x = tgl.randn(6, 3)
    local ya, yb = x:dot(a.weight:T()) + a.bias, x:dot(b.weight:T()) + b.bias
    local out = m:forward(x)
    assert.same({ 6, 6 }, out:shape())
    assert.is_true(maxdiff(out, tgl.concatenate({ ya, yb }, 2)) < 1e-12)
    assert.is_true(maxdiff(a.output, ya) < 1e-12)
    local g = tgl.randn(6, 6)
    local gi = check_grads(m, x, g)
    local ga, gb = g[{ {}, { 1, 2 } }], g[{ {}, { 3, 6 } }]
    assert.is_true(maxdiff(gi, ga:dot(a.weight) + gb:dot(b.weight)) < 1e-12)
    assert.is_true(maxdiff(a.gradInput, ga:dot(a.weight)) < 1e-12)
    assert.is_true(maxdiff(b.gradInput, gb:dot(b.weight)) < 1e-12)
    -- one example: a vector, joined along dimension 1
    local m1 = nn.Concat(1):add(nn.Linear(3, 2)):add(nn.Identity())
    local v = tgl.randn(3)
    local o1 = m1:forward(v)
    local l1 = m1.modules[1]
    assert.is_true(maxdiff(o1, tgl.concatenate({ l1.weight:dot(v) + l1.bias, v }, 1)) < 1e-12)
    check_grads(m1, v, tgl.randn(5))
    -- 3-d outputs joined along the middle
    local m3 = nn.Concat(2):add(nn.Tanh()):add(nn.Sigmoid())
    local x3 = tgl.randn(2, 3, 2)
    assert.is_true(maxdiff(m3:forward(x3), tgl.concatenate({ tgl.tanh(x3), tgl.sigmoid(x3) }, 2)) < 1e-14)
    check_grads(m3, x3, tgl.randn(2, 6, 2))
  end)

  it('ParallelTable + JoinTable on a table input: values, gradInput tables, finite differences', function()
    local a, b = nn.Linear(3, 2), nn.Linear(4, 3)
    local p = nn.ParallelTable():add(a):add(b)
    local j = nn.JoinTable(2)
    local m = nn.Sequential():add(p):add(j)
    local x = { tgl.randn(5, 3), tgl.randn(5, 4) }
    local ya, yb = x[1]:dot(a.weight:T()) + a.bias, x[2]:dot(b.weight:T()) + b.bias
    local out = m:forward(x)
    assert.is_true(maxdiff(out, tgl.concatenate({ ya, yb }, 2)) < 1e-12)
    same_value(p.output, { ya, yb }, 1e-12)
    local g = tgl.randn(5, 5)
    local gi = check_grads(m, x, g)
    local ga, gb = g[{ {}, { 1, 2 } }], g[{ {}, { 3, 5 } }]
    same_value(gi, { ga:dot(a.weight), gb:dot(b.weight) }, 1e-12)
    same_value(j.gradInput, { ga, gb }, 1e-12)
    same_value(p.gradInput, gi, 0)
    assert.is_true(maxdiff(a.gradInput, ga:dot(a.weight)) < 1e-12)
    -- the same array twice is two inputs
    local s = nn.ParallelTable():add(nn.Identity()):add(nn.Identity())
    local z = tgl.randn(2, 2)
    local gz = s:backward({ z, z }, { tgl.ones(2, 2), tgl.full({ 2, 2 }, 2) })
    same_value(gz, { tgl.ones(2, 2), tgl.full({ 2, 2 }, 2) }, 0)
  end)

  it('nested tables: a ConcatTable inside a ParallelTable, every field, finite differences', function()
    local l1, t1, l2 = nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 2)
    local inner = nn.ConcatTable():add(l1):add(t1)
    local p = nn.ParallelTable():add(inner):add(l2)
    local x = { tgl.randn(4, 3), tgl.randn(4, 2) }
    local out = p:forward(x)
    local want = { { x[1]:dot(l1.weight:T()) + l1.bias, tgl.tanh(x[1]) }, x[2]:dot(l2.weight:T()) + l2.bias }
    same_value(out, want, 1e-12)
    same_value(inner.output, want[1], 1e-12)
    assert.is_true(maxdiff(t1.output, want[1][2]) < 1e-14)
    local g = randn_like(out)
    local gi = check_grads(p, x, g)
    local th = tgl.tanh(x[1])
    same_value(gi, { g[1][1]:dot(l1.weight) + g[1][2] * (1 - th * th), g[2]:dot(l2.weight) }, 1e-12)
    same_value(inner.gradInput, gi[1], 0)
    assert.is_true(maxdiff(t1.gradInput, g[1][2] * (1 - th * th)) < 1e-12)
    assert.is_true(maxdiff(l2.gradInput, gi[2]) == 0)
    -- nested input: {{a, b}, c} through ParallelTable{CAddTable, Identity}, then JoinTable-free output
    local q = nn.ParallelTable():add(nn.CAddTable()):add(nn.Identity())
    local xi = { { tgl.randn(2, 3), tgl.randn(2, 3) }, tgl.randn(2, 3) }
    same_value(q:forward(xi), { xi[1][1] + xi[1][2], xi[2] }, 1e-14)
    local gq = check_grads(q, xi, { tgl.randn(2, 3), tgl.randn(2, 3) })
    assert.equals(2, #gq[1])
    -- a ConcatTable of ConcatTables: each inner branch's own gradient
    local i1, i2, i3 = nn.Identity(), nn.MulConstant(2), nn.Identity()
    local cc = nn.ConcatTable():add(nn.ConcatTable():add(i1):add(i2)):add(i3)
    local v = tgl.randn(3)
    local gv = { { tgl.randn(3), tgl.randn(3) }, tgl.randn(3) }
    local gcc = check_grads(cc, v, gv)
    assert.is_true(maxdiff(gcc, gv[1][1] + gv[1][2] * 2 + gv[2]) < 1e-12)
    assert.is_true(maxdiff(i1.gradInput, gv[1][1]) == 0)
    assert.is_true(maxdiff(i2.gradInput, gv[1][2] * 2) < 1e-15)
    assert.is_true(maxdiff(cc.modules[1].gradInput, gv[1][1] + gv[1][2] * 2) < 1e-12)
    assert.is_true(maxdiff(i3.gradInput, gv[2]) == 0)
  end)

  it('Parallel: module i takes slice i along inputDimension; outputs joined along outputDimension', function()
    local a, b = nn.Linear(3, 2), nn.Linear(3, 4)
    local m = nn.Parallel(1, 1):add(a):add(b)
    local x = tgl.randn(2, 3)
    local out = m:forward(x)
    local ya, yb = a.weight:dot(x[1]) + a.bias, b.weight:dot(x[2]) + b.bias
    assert.is_true(maxdiff(out, tgl.concatenate({ ya, yb }, 1)) < 1e-12)
    assert.is_true(maxdiff(b.output, yb) < 1e-12)
    local g = tgl.randn(6)
    local gi = check_grads(m, x, g)
    assert.is_true(maxdiff(gi, tgl.stack({ a.weight:T():dot(g[{ { 1, 2 } }]), b.weight:T():dot(g[{ { 3, 6 } }]) }, 1)) < 1e-12)
    -- a batch: N x 2 x 3, the modules on dimension 2, joined on 2
    local mb = nn.Parallel(2, 2):add(nn.Linear(3, 2)):add(nn.Tanh())
    local xb = tgl.randn(4, 2, 3)
    local ob = mb:forward(xb)
    local l = mb.modules[1]
    local s1, s2 = xb[{ {}, 1, {} }], xb[{ {}, 2, {} }]
    assert.is_true(maxdiff(ob, tgl.concatenate({ s1:dot(l.weight:T()) + l.bias, tgl.tanh(s2) }, 2)) < 1e-12)
    check_grads(mb, xb, tgl.randn(4, 5))
    -- fewer slices than modules: only the first ones run (Torch7)
    local m3 = nn.Parallel(1, 1):add(nn.Tanh()):add(nn.Tanh()):add(nn.Tanh())
    assert.same({ 6 }, m3:forward(tgl.randn(2, 3)):shape())
  end)

  it('JoinTable and SplitTable: dimensions, nInputDims batch rule, negative dimensions', function()
    local a, b = tgl.randn(3), tgl.randn(2)
    local j = nn.JoinTable(1, 1)
    assert.is_true(maxdiff(j:forward({ a, b }), tgl.concatenate({ a, b }, 1)) == 0)
    local A, B = tgl.randn(4, 3), tgl.randn(4, 2)
    -- a batch (nInputDims + 1 dimensions): dimension 1 of an example is 2
    local jb = j:forward({ A, B })
    assert.same({ 4, 5 }, jb:shape())
    assert.is_true(maxdiff(jb, tgl.concatenate({ A, B }, 2)) == 0)
    local gj = check_grads(j, { A, B }, tgl.randn(4, 5))
    assert.same({ 4, 3 }, gj[1]:shape())
    -- without nInputDims, dimension 1 is the first
    assert.same({ 8, 3 }, nn.JoinTable(1):forward({ A, A }):shape())
    -- negative: from the end
    assert.is_true(maxdiff(nn.JoinTable(-1):forward({ A, B }), tgl.concatenate({ A, B }, 2)) == 0)
    assert.same({ 8, 3 }, nn.JoinTable(-2):forward({ A, A }):shape())
    -- SplitTable
    local s = nn.SplitTable(1)
    local parts = s:forward(A)
    assert.equals(4, #parts)
    for i = 1, 4 do assert.is_true(maxdiff(parts[i], A[i]) == 0) end
    local sb = nn.SplitTable(1, 1):forward(A)      -- a batch of vectors: split each along its dim 1
    assert.equals(3, #sb)
    for i = 1, 3 do assert.is_true(maxdiff(sb[i], A[{ {}, i }]) == 0) end
    local sv = nn.SplitTable(1, 1):forward(a)      -- one example
    assert.equals(3, #sv)
    assert.equals(a:get(2), sv[2]:get())
    local sn = nn.SplitTable(-1):forward(A)
    assert.equals(3, #sn)
    assert.is_true(maxdiff(sn[3], A[{ {}, 3 }]) == 0)
    local gs = { tgl.randn(4), tgl.randn(4), tgl.randn(4) }
    local gi = check_grads(nn.SplitTable(2), A, gs)
    assert.is_true(maxdiff(gi, tgl.stack(gs, 2)) == 0)
    -- split then join: the rows one after the other
    local sj = nn.Sequential():add(nn.SplitTable(1)):add(nn.JoinTable(1))
    local r = tgl.randn(3, 2)
    assert.is_true(maxdiff(sj:forward(r), r:reshape(6)) == 0)
    assert.equals(3, #sj.modules[1].output)
  end)

  it('CAddTable, CSubTable, CMulTable: values and gradients', function()
    local x = { tgl.randn(3, 2), tgl.randn(3, 2), tgl.randn(3, 2) }
    assert.is_true(maxdiff(nn.CAddTable():forward(x), x[1] + x[2] + x[3]) < 1e-15)
    assert.is_true(maxdiff(nn.CMulTable():forward(x), x[1] * x[2] * x[3]) < 1e-15)
    assert.is_true(maxdiff(nn.CSubTable():forward({ x[1], x[2] }), x[1] - x[2]) == 0)
    local g = tgl.randn(3, 2)
    local ga = check_grads(nn.CAddTable(), x, g)
    same_value(ga, { g, g, g }, 0)
    local gs = check_grads(nn.CSubTable(), { x[1], x[2] }, g)
    same_value(gs, { g, -g }, 0)
    local gm = check_grads(nn.CMulTable(), x, g)
    same_value(gm, { g * x[2] * x[3], g * x[1] * x[3], g * x[1] * x[2] }, 1e-14)
    assert.is_true(nn.CAddTable(true).inplace)   -- accepted, changes nothing
  end)

  it('updateGradInput and accGradParameters take tables; scale', function()
    local a, b = nn.Linear(2, 2), nn.Linear(3, 2)
    local m = nn.Sequential():add(nn.ParallelTable():add(a):add(b)):add(nn.CAddTable())
    local x, g = { tgl.randn(4, 2), tgl.randn(4, 3) }, tgl.randn(4, 2)
    m:zeroGradParameters()
    local gi = m:updateGradInput(x, g)
    same_value(gi, { g:dot(a.weight), g:dot(b.weight) }, 1e-12)
    assert.equals(0, tgl.sum(tgl.abs(a.gradWeight)):get())
    m:accGradParameters(x, g, 0.5)
    assert.is_true(maxdiff(a.gradWeight, g:T():dot(x[1]) * 0.5) < 1e-12)
    assert.is_true(maxdiff(b.gradBias, tgl.sum(g, 1) * 0.5) < 1e-12)
    m:backward(x, g, 2)
    assert.is_true(maxdiff(b.gradWeight, g:T():dot(x[2]) * 2.5) < 1e-12)
  end)

  it('compiles once per structure, dtypes and shapes of the leaves', function()
    local m = nn.Sequential():add(nn.ParallelTable():add(nn.Tanh()):add(nn.Tanh())):add(nn.JoinTable(1))
    m:forward({ tgl.randn(2), tgl.randn(3) })
    local n = nn.compiled_count
    m:forward({ tgl.randn(2), tgl.randn(3) })
    assert.equals(n, nn.compiled_count)
    m:forward({ tgl.randn(3), tgl.randn(2) })
    assert.equals(n + 1, nn.compiled_count)
    m:forward({ tgl.randn(2), tgl.randn(3):astype('float32') })
    assert.equals(n + 2, nn.compiled_count)
  end)

  it('graph takes a table of symbolic variables; nn._build builds table inputs', function()
    local l = nn.Linear(3, 2)
    local m = nn.Sequential():add(nn.ParallelTable():add(l):add(nn.Identity())):add(nn.CAddTable())
    local a, b = tgl.matrix('a', 'float64'), tgl.matrix('b', 'float64')
    local y = m:graph({ a, b })
    local f = tgl.compile { inputs = { a, b }, outputs = y }
    local xa, xb = tgl.randn(4, 3), tgl.randn(4, 2)
    assert.is_true(maxdiff(f(xa, xb), m:forward({ xa, xb })) < 1e-12)
    local c = nn.ConcatTable():add(nn.Identity()):add(nn.Tanh())
    local ys = c:graph(a)
    assert.equals(2, #ys)
    local bld = nn._build(c, a, xa)
    local fc = tgl.compile { inputs = { a }, outputs = bld.y }
    local o1, o2 = fc(xa)
    assert.is_true(maxdiff(o1, xa) == 0)
    assert.is_true(maxdiff(o2, tgl.tanh(xa)) < 1e-15)
  end)

  -- Random models over tables: containers and table modules nested at
  -- random, on a batch of B.  A value is described as {d = n} (a B x n
  -- array) or a list of descriptions (a table).  Checks: gradients
  -- against finite differences, and Torch7's relations between the
  -- gradInput fields (a Concat/ConcatTable's is the sum of its branches',
  -- a Sequential's its first module's, a ParallelTable's element i its
  -- module i's) -- each branch's own share, not the total.
  it('random nested models: finite differences and the gradInput fields\' relations', function()
    local B = 2
    local cases = tonumber(os.getenv('TGL_PROP_CASES')) or 12
    local gen
    local function all_arrays(desc)
      for _, v in ipairs(desc) do if not v.d then return false end end
      return true
    end
    local function branches(depth, desc, want_array)
      local ms, outs = {}, {}
      for k = 1, math.random(2, 3) do
        local m, o
        repeat m, o = gen(depth - 1, desc) until not want_array or o.d
        ms[k], outs[k] = m, o
      end
      return ms, outs
    end
    gen = function(depth, desc)
      local r = math.random(depth > 0 and 6 or 2)
      if desc.d then
        if r == 1 then local n = math.random(1, 3); return nn.Linear(desc.d, n), { d = n } end
        if r == 2 then return nn.Tanh(), desc end
        if r == 3 then
          local ms, outs = branches(depth, desc, false)
          local c = nn.ConcatTable()
          for _, m in ipairs(ms) do c:add(m) end
          return c, outs
        end
        if r == 4 then
          local ms, outs = branches(depth, desc, true)
          local c, n = nn.Concat(2), 0
          for k, m in ipairs(ms) do c:add(m); n = n + outs[k].d end
          return c, { d = n }
        end
        if r == 5 then return nn.Identity(), desc end
        local m1, o1 = gen(depth - 1, desc)
        local m2, o2 = gen(depth - 1, o1)
        return nn.Sequential():add(m1):add(m2), o2
      end
      -- a table
      if all_arrays(desc) and r <= 2 then
        local n = 0
        for _, v in ipairs(desc) do n = n + v.d end
        return nn.JoinTable(2), { d = n }
      end
      if all_arrays(desc) and r == 3 then
        local m = nn.ParallelTable()
        for _, v in ipairs(desc) do m:add(nn.Linear(v.d, 2)) end
        return nn.Sequential():add(m):add(nn.CAddTable()), { d = 2 }
      end
      local m, outs = nn.ParallelTable(), {}
      for k, v in ipairs(desc) do
        local mk, ok = gen(math.max(depth - 1, 0), v)
        m:add(mk); outs[k] = ok
      end
      return m, outs
    end
    local function value(desc)
      if desc.d then return tgl.randn(B, desc.d) end
      local t = {}
      for k, v in ipairs(desc) do t[k] = value(v) end
      return t
    end
    local function add_values(a, b)
      if tgl.is_array(a) then return a + b end
      local t = {}
      for k = 1, #a do t[k] = add_values(a[k], b[k]) end
      return t
    end
    local function relations(m)
      local t = nn.type(m)
      if t == 'nn.Concat' or t == 'nn.ConcatTable' then
        local sum = m.modules[1].gradInput
        for k = 2, #m.modules do sum = add_values(sum, m.modules[k].gradInput) end
        same_value(m.gradInput, sum, 1e-12)
      elseif t == 'nn.Sequential' then
        same_value(m.gradInput, m.modules[1].gradInput, 0)
      elseif t == 'nn.ParallelTable' then
        for k = 1, #m.modules do same_value(m.gradInput[k], m.modules[k].gradInput, 0) end
      end
      for _, c in ipairs(m.modules or {}) do relations(c) end
    end
    math.randomseed(5)
    for _ = 1, cases do
      local desc = math.random(2) == 1 and { d = math.random(1, 3) }
                   or { { d = math.random(1, 3) }, { d = math.random(1, 3) } }
      local m, out = gen(3, desc)
      local x = value(desc)
      local g = value(out)
      check_grads(m, x, g)
      relations(m)
    end
  end)

  it('integer leaves (LookupTable indices): checked before each call, zero gradInput, also through ConcatTable', function()
    local lt, lin = nn.LookupTable(5, 3), nn.Linear(4, 3)
    local m = nn.Sequential():add(nn.ParallelTable():add(lin):add(lt)):add(nn.CAddTable())
    local idx, x, g = tgl.array({ 1, 3 }, 'int64'), tgl.randn(2, 4), tgl.randn(2, 3)
    local y = m:forward({ x, idx })
    local lin_y = x:dot(lin.weight:T()) + lin.bias
    assert.is_true(maxdiff(y[1], lin_y[1] + lt.weight[1]) < 1e-12)
    assert.is_true(maxdiff(y[2], lin_y[2] + lt.weight[3]) < 1e-12)
    m:zeroGradParameters()
    local gi = m:backward({ x, idx }, g)
    assert.equals('int64', gi[2].dtype)
    assert.same({ 2 }, gi[2]:shape())
    assert.equals(0, tgl.sum(tgl.abs(gi[2])):get())
    assert.is_true(maxdiff(gi[1], g:dot(lin.weight)) < 1e-12)
    assert.is_true(maxdiff(lt.gradWeight[1], g[1]) < 1e-12)
    assert.is_true(maxdiff(lt.gradWeight[3], g[2]) < 1e-12)
    assert.equals(0, tgl.sum(tgl.abs(lt.gradWeight[2])):get())
    -- a bad index in the second leaf: the error names the module, nothing changes
    local gw = lt.gradWeight:clone()
    local ok, e = pcall(function() m:backward({ x, tgl.array({ 2, 6 }, 'int64') }, g) end)
    assert.is_false(ok)
    assert.matches('nn_table_spec.lua:%d+: nn.Sequential:backward: modules%[1%].modules%[2%] nn.LookupTable: index 6 at position 2 is not in 1..5', e)
    assert.equals(0, maxdiff(lt.gradWeight, gw))
    -- two LookupTables on the same indices (ConcatTable's aliases of an integer input)
    local a, b = nn.LookupTable(5, 2), nn.LookupTable(5, 2)
    local m2 = nn.Sequential():add(nn.ConcatTable():add(a):add(b)):add(nn.CSubTable())
    local g2 = tgl.randn(2, 2)
    m2:zeroGradParameters()
    local gi2 = m2:backward(idx, g2)
    assert.equals('int64', gi2.dtype)
    assert.equals(0, tgl.sum(tgl.abs(gi2)):get())
    assert.equals(0, tgl.sum(tgl.abs(m2.modules[1].gradInput)):get())
    assert.is_true(maxdiff(a.gradWeight[3], g2[2]) < 1e-12)
    assert.is_true(maxdiff(b.gradWeight[3], -g2[2]) < 1e-12)
    ok, e = pcall(function() m2:forward(tgl.array({ 0, 1 }, 'int64')) end)
    assert.matches('nn_table_spec.lua:%d+: nn.Sequential:forward: modules%[1%].modules%[1%] nn.LookupTable: index 0 at position 1', e)
  end)

  it('shared parameters across Concat branches: one update per array with every branch\'s part', function()
    local a = nn.Linear(4, 2)
    local b = a:clone('weight', 'bias', 'gradWeight', 'gradBias')
    local m = nn.Concat(2):add(a):add(b)
    local x, g = tgl.randn(3, 4), tgl.randn(3, 4)
    local g1, g2 = g[{ {}, { 1, 2 } }], g[{ {}, { 3, 4 } }]
    local dW = g1:T():dot(x) + g2:T():dot(x)
    m:zeroGradParameters()
    local gi = m:backward(x, g)
    assert.is_true(rawequal(a.gradWeight, b.gradWeight))
    assert.is_true(maxdiff(a.gradWeight, dW) < 1e-12)
    assert.is_true(maxdiff(a.gradBias, tgl.sum(g1, 1) + tgl.sum(g2, 1)) < 1e-12)
    assert.is_true(maxdiff(gi, (g1 + g2):dot(a.weight)) < 1e-12)
    -- accUpdateGradParameters: the weight moves once, by the summed gradient
    local w0, gw0 = a.weight:clone(), a.gradWeight:clone()
    m:accUpdateGradParameters(x, g, 0.1)
    assert.is_true(maxdiff(a.weight, w0 - dW * 0.1) < 1e-12)
    assert.equals(0, maxdiff(a.gradWeight, gw0))
    -- updateParameters steps the shared weight once per holder, as Torch7's
    w0 = a.weight:clone()
    m:updateParameters(0.5)
    assert.is_true(maxdiff(a.weight, w0 - gw0 * 1.0) < 1e-12)
  end)

  it('errors name the module and the user\'s line', function()
    local ok, err = pcall(function() nn.Linear(3, 2):forward({ tgl.randn(3), tgl.randn(3) }) end)
    assert.is_false(ok)
    assert.matches('^[^ ]*nn_table_spec%.lua:%d+: nn%.Linear%(3 %-> 2%): expected an array, got a table of 2', err)
    local m = nn.Sequential():add(nn.ConcatTable():add(nn.Identity()):add(nn.Identity())):add(nn.Tanh())
    ok, err = pcall(function() m:forward(tgl.randn(3)) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.Sequential: module %(2%) nn%.Tanh: nn%.Tanh: expected an array, got a table of 2', err)
    ok, err = pcall(function() nn.JoinTable(1):forward(tgl.randn(3)) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.JoinTable: expected a table of arrays, got an array %(1%-d%)', err)
    ok, err = pcall(function() nn.CAddTable():forward({ tgl.randn(3), 4 }) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.CAddTable:forward: the input%[2%] must be an array, got number', err)
    ok, err = pcall(function() nn.CAddTable():forward({}) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.CAddTable:forward: the input is an empty table', err)
    ok, err = pcall(function() nn.JoinTable(1):forward({ { tgl.randn(2) }, tgl.randn(2) }) end)
    assert.matches('nn%.JoinTable: expected a table of arrays, element 1 is a table of 1', err)
    ok, err = pcall(function() nn.CSubTable():forward({ tgl.randn(2), tgl.randn(2), tgl.randn(2) }) end)
    assert.matches('nn%.CSubTable: expected a table of 2 arrays, got 3', err)
    ok, err = pcall(function() nn.ParallelTable():add(nn.Tanh()):add(nn.Tanh()):forward({ tgl.randn(2) }) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.ParallelTable: the input is a table of 1, but there are 2 modules', err)
    ok, err = pcall(function() nn.Parallel(1, 1):add(nn.Tanh()):forward(tgl.randn(2, 3)) end)
    assert.matches('nn%.Parallel: the input has 2 slices along dimension 1, but there are 1 modules', err)
    ok, err = pcall(function() nn.JoinTable(3):forward({ tgl.randn(2), tgl.randn(2) }) end)
    assert.matches('nn%.JoinTable: dimension 3 is outside the 1 dimensions of the input', err)
    ok, err = pcall(function() nn.Concat(1):forward(tgl.randn(2)) end)
    assert.matches('nn%.Concat: has no modules', err)
    ok, err = pcall(function() nn.Concat(0) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.Concat: the dimension must be a positive integer, got 0', err)
    ok, err = pcall(function() nn.JoinTable(0) end)
    assert.matches('nn%.JoinTable: the dimension must be a non%-zero integer, got 0', err)
    ok, err = pcall(function() nn.SplitTable(1):graph(tgl.matrix('x')) end)
    assert.matches('nn%.SplitTable: the number of slices is the input\'s size', err)
    -- gradOutput of the wrong structure
    local c = nn.ConcatTable():add(nn.Identity()):add(nn.Identity())
    local x = tgl.randn(3)
    c:forward(x)
    ok, err = pcall(function() c:backward(x, tgl.randn(3)) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.ConcatTable:backward: gradOutput must have the output\'s '
                   .. 'structure, a table of 2 %(an array, an array%); got an array', err)
    ok, err = pcall(function() c:backward(x, { tgl.randn(3), tgl.randn(3), tgl.randn(3) }) end)
    assert.matches('got a table of 3', err)
    ok, err = pcall(function() c:updateGradInput(x, { tgl.randn(3) }) end)
    assert.matches('nn_table_spec%.lua:%d+: nn%.ConcatTable:updateGradInput: gradOutput must have the output\'s '
                   .. 'structure, a table of 2 %(an array, an array%); got a table of 1 %(an array%)', err)
    -- a size mismatch found when the function runs names the module by its path
    local s = nn.Sequential():add(nn.ParallelTable():add(nn.Linear(3, 2)):add(nn.Linear(3, 3))):add(nn.CAddTable())
    ok, err = pcall(function() s:forward({ tgl.randn(2, 3), tgl.randn(2, 3) }) end)
    assert.is_false(ok)
    assert.matches('nn_table_spec%.lua:%d+: nn%.Sequential:forward: modules%[2%] nn%.CAddTable fails on '
                   .. 'this input %(float64%(2x3%), float64%(2x3%)%): add: sizes 2 and 3 differ', err)
    local state = s.modules[1].modules[1].weight:clone()
    ok = pcall(function() s:backward({ tgl.randn(2, 3), tgl.randn(2, 3) }, tgl.randn(2, 2)) end)
    assert.is_false(ok)
    assert.is_true(maxdiff(s.modules[1].modules[1].weight, state) == 0)
  end)
end)
