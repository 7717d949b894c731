-- spec/nn_layers_spec.lua — lua/nn's shape and lookup layers (Transpose,
-- Narrow, Select, Squeeze, Replicate, LookupTable), class weights and
-- ignoreIndex of ClassNLLCriterion/CrossEntropyCriterion, and the module
-- methods clone(...), share, reset on containers and
-- accUpdateGradParameters.  Values against explicit element-by-element
-- computations on the host (Torch7's rules), gradients against central
-- finite differences in float64, sharing through forward, backward,
-- updateParameters and getParameters, and the errors' words and lines.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff, fd = S.maxdiff, S.fd

-- The element of a at the 1-based position list pos.
local function at(a, pos) return a:get(unpack(pos)) end

-- Every position of a shape, in row-major order.
local function positions(shape)
  local out, cur = {}, {}
  local function rec(d)
    if d > #shape then out[#out + 1] = { unpack(cur) }; return end
    for i = 1, shape[d] do cur[d] = i; rec(d + 1) end
  end
  rec(1)
  return out
end

-- out[p] == x[src(p)] for every position p of out, exactly.
local function check_map(out, x, src)
  for _, p in ipairs(positions(out:shape())) do
    assert.equals(at(x, src(p)), at(out, p))
  end
end

-- gradInput of m at x against finite differences of sum(forward(x) * g).
local function check_grad(m, x)
  local y = m:forward(x)
  local g = tgl.randn(unpack(y:shape()))
  local gi = m:backward(x, g)
  local want = fd(function() return tgl.sum(m:forward(x) * g):get() end, x)
  assert.is_true(maxdiff(gi, want) < 1e-7)
end

-- The error of f, which must fail.
local function err_of(f)
  local ok, err = pcall(f)
  assert.is_false(ok)
  return tostring(err)
end

describe('nn layers (shape, lookup) and module methods', function()
  S.float64(5)

  it('Transpose: the swaps in order, setNumInputDims for batches, gradient', function()
    local x = tgl.randn(2, 3, 4)
    local m = nn.Transpose({ 1, 3 }, { 1, 2 })
    assert.equals('nn.Transpose', tostring(m))
    local y = m:forward(x)
    -- swap 1,3: (4,3,2) with y1[a,b,c] = x[c,b,a]; then swap 1,2: y[b,a,c] = y1[a,b,c]
    assert.same({ 3, 4, 2 }, y:shape())
    check_map(y, x, function(p) return { p[3], p[1], p[2] } end)
    check_grad(m, x)
    local t = nn.Transpose({ 1, 2 }):setNumInputDims(2)
    local b = tgl.randn(5, 2, 3)
    check_map(t:forward(b), b, function(p) return { p[1], p[3], p[2] } end)
    check_map(t:forward(b[1]), b[1], function(p) return { p[2], p[1] } end)
    check_grad(t, b)
    local e = err_of(function() nn.Transpose({ 1, 3 }):forward(tgl.randn(2, 2)) end)
    assert.matches('nn_layers_spec.lua:%d+: .*nn.Transpose: cannot swap dimensions 1 and 3 of a 2%-d input', e)
    e = err_of(function() nn.Transpose({ 0, 1 }) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Transpose: permutation 1 must be a pair of positive dimensions', e)
  end)

  it('Narrow: Torch7 examples, negative dimension, length and offset, gradient', function()
    local x = tgl.randn(4, 5)
    local function narrowed(m, d, from, len)
      local y = m:forward(x)
      local shape = x:shape()
      shape[d] = len
      assert.same(shape, y:shape())
      check_map(y, x, function(p)
        local q = { p[1], p[2] }
        q[d] = q[d] + from - 1
        return q
      end)
    end
    assert.equals('nn.Narrow', tostring(nn.Narrow(1, 2, 3)))
    narrowed(nn.Narrow(1, 2, 3), 1, 2, 3)
    narrowed(nn.Narrow(1, 2, -1), 1, 2, 3)   -- to the end
    narrowed(nn.Narrow(1, 2, -2), 1, 2, 2)   -- all but the last
    narrowed(nn.Narrow(2, 2, 3), 2, 2, 3)
    narrowed(nn.Narrow(2, 2, -2), 2, 2, 3)
    narrowed(nn.Narrow(-1, 3), 2, 3, 1)      -- length 1 by default
    -- Torch7: a negative offset means offset 1 and length size - length
    narrowed(nn.Narrow(1, -1), 1, 1, 3)
    narrowed(nn.Narrow(2, -3, 2), 2, 1, 3)
    check_grad(nn.Narrow(2, 2, -2), x)
    check_grad(nn.Narrow(1, 3, 2), x)
    -- inside a Sequential, after a Linear
    local seq = nn.Sequential():add(nn.Linear(5, 6)):add(nn.Narrow(2, 2, 3))
    check_grad(seq, x)
    local e = err_of(function() nn.Sequential():add(nn.Narrow(1, 3, 3)):forward(x) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential: module %(1%) nn.Narrow: .*offset 3 and length 3 do not fit dimension 1 of size 4', e)
    e = err_of(function() nn.Narrow(3, 1):forward(x) end)
    assert.matches('nn_layers_spec.lua:%d+: .*nn.Narrow: dimension 3 is out of range for a 2%-d input', e)
    e = err_of(function() nn.Narrow(1) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Narrow: expected nn.Narrow%(dimension, offset %[, length%]%)', e)
  end)

  it('Select: drops the dimension, negative dimension and index, gradient', function()
    local x = tgl.randn(3, 4, 2)
    assert.equals('nn.Select', tostring(nn.Select(1, 1)))
    local y = nn.Select(2, 3):forward(x)
    assert.same({ 3, 2 }, y:shape())
    check_map(y, x, function(p) return { p[1], 3, p[2] } end)
    check_map(nn.Select(-1, -1):forward(x), x, function(p) return { p[1], p[2], 2 } end)
    check_map(nn.Select(1, -2):forward(x), x, function(p) return { 2, p[1], p[2] } end)
    check_grad(nn.Select(2, -1), x)
    -- gradInput is gradOutput placed at the index, zeros elsewhere
    local gi = nn.Select(1, 2):backward(tgl.randn(3, 2), tgl.array({ 5, 7 }))
    assert.same({ { 0, 0 }, { 5, 7 }, { 0, 0 } }, gi:totable())
    local e = err_of(function() nn.Select(2, 5):forward(x) end)
    assert.matches('nn_layers_spec.lua:%d+: .*nn.Select: index 5 is out of range for dimension 2 of size 4', e)
    e = err_of(function() nn.Sequential():add(nn.Select(4, 1)):forward(x) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential: module %(1%) nn.Select: .*dimension 4 is out of range for a 3%-d input', e)
  end)

  it('Squeeze: all size-1 dimensions or one, numInputDims keeps a batch of one, gradient', function()
    local x = tgl.randn(1, 3, 1, 2)
    local y = nn.Squeeze():forward(x)
    assert.same({ 3, 2 }, y:shape())
    check_map(y, x, function(p) return { 1, p[1], 1, p[2] } end)
    assert.same({ 1, 3, 2 }, nn.Squeeze(3):forward(x):shape())
    assert.same({ 1, 3, 1, 2 }, nn.Squeeze(2):forward(x):shape())   -- size 3: unchanged
    assert.same({ 1 }, nn.Squeeze():forward(tgl.randn(1, 1)):shape())
    -- numInputDims 3: a 4-d input is a batch; dim counts within an example
    assert.same({ 1, 3, 2 }, nn.Squeeze(nil, 3):forward(x):shape())
    assert.same({ 1, 3, 2 }, nn.Squeeze(2, 3):forward(x):shape())
    assert.same({ 3, 2 }, nn.Squeeze(nil, 2):forward(x):shape())   -- not a batch
    local gi = nn.Squeeze():backward(x, tgl.randn(3, 2))
    assert.same(x:shape(), gi:shape())
    check_grad(nn.Squeeze(), x)
  end)

  it('Replicate: nFeature copies along dim (ndim for batches), gradient sums the copies', function()
    local x = tgl.randn(3, 4)
    local y = nn.Replicate(5):forward(x)
    assert.same({ 5, 3, 4 }, y:shape())
    check_map(y, x, function(p) return { p[2], p[3] } end)
    local y2 = nn.Replicate(2, 2):forward(x)
    assert.same({ 3, 2, 4 }, y2:shape())
    check_map(y2, x, function(p) return { p[1], p[3] } end)
    assert.same({ 3, 4, 2 }, nn.Replicate(2, 3):forward(x):shape())
    -- ndim 1: a 2-d input is a batch, dim 1 is after the batch axis
    local y3 = nn.Replicate(2, 1, 1):forward(x)
    assert.same({ 3, 2, 4 }, y3:shape())
    assert.same({ 2, 4 }, nn.Replicate(2, 1, 1):forward(x[1]):shape())
    local g = tgl.randn(3, 2, 4)
    local gi = nn.Replicate(2, 2):backward(x, g)
    assert.is_true(maxdiff(gi, g[{ {}, 1 }] + g[{ {}, 2 }]) < 1e-12)
    check_grad(nn.Replicate(3, 2), x)
    local e = err_of(function() nn.Replicate(2, 4):forward(x) end)
    assert.matches('nn_layers_spec.lua:%d+: .*nn.Replicate: not enough input dimensions %(2%) to replicate along dimension 4', e)
    e = err_of(function() nn.Replicate(2, 0) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Replicate: can only replicate across positive dimensions, got 0', e)
  end)

  it('LookupTable: N(0,1) rows, vector and batch of indices (int64 and float), gradWeight accumulates repeats', function()
    local big = nn.LookupTable(1000, 20)
    assert.equals('nn.LookupTable', tostring(big))
    assert.same({ 1000, 20 }, big.weight:shape())
    assert.is_true(math.abs(tgl.mean(big.weight):get()) < 0.03)
    assert.is_true(math.abs(tgl.std(big.weight):get() - 1) < 0.03)
    big:reset(0.1)
    assert.is_true(math.abs(tgl.std(big.weight):get() - 0.1) < 0.003)
    local lt = nn.LookupTable(6, 3)
    local W = lt.weight
    local idx = tgl.array({ 2, 5, 2, 1 }, 'int64')
    local y = lt:forward(idx)
    assert.same({ 4, 3 }, y:shape())
    local rows = { 2, 5, 2, 1 }
    check_map(y, W, function(p) return { rows[p[1]], p[2] } end)
    local b = tgl.array({ { 1, 6, 6 }, { 3, 3, 4 } }, 'int64')
    local yb = lt:forward(b)
    assert.same({ 2, 3, 3 }, yb:shape())
    check_map(yb, W, function(p) return { b:get(p[1], p[2]), p[3] } end)
    -- float arrays of integers are indices too
    assert.equals(0, maxdiff(lt:forward(b:astype('float64')), yb))
    -- gradWeight: row r gets the sum of the gradOutput rows at r's positions
    lt:zeroGradParameters()
    local g = tgl.randn(2, 3, 3)
    local gi = lt:backward(b, g, 0.5)
    assert.same({ 2, 3 }, gi:shape())
    assert.equals('int64', gi.dtype)
    assert.equals(0, tgl.sum(tgl.abs(gi)):get())
    local want = tgl.zeros(6, 3)
    for i = 1, 2 do for j = 1, 3 do
      local r = b:get(i, j)
      for k = 1, 3 do want:set(want:get(r, k) + 0.5 * g:get(i, j, k), r, k) end
    end end
    assert.is_true(maxdiff(lt.gradWeight, want) < 1e-12)
    assert.equals(0, tgl.sum(tgl.abs(lt.gradWeight[2])):get())   -- index 2 unused
    -- against finite differences through a Linear
    local seq = nn.Sequential():add(nn.LookupTable(5, 4)):add(nn.Linear(4, 2))
    local ix = tgl.array({ 1, 2, 2, 5, 1, 2 }, 'int64')
    local go = tgl.randn(6, 2)
    seq:zeroGradParameters()
    seq:backward(ix, go)
    local function L() return tgl.sum(seq:forward(ix) * go):get() end
    assert.is_true(maxdiff(seq.modules[1].gradWeight, fd(L, seq.modules[1].weight)) < 1e-7)
    assert.is_true(maxdiff(seq.modules[2].gradWeight, fd(L, seq.modules[2].weight)) < 1e-7)
  end)

  it('LookupTable: paddingValue rows are looked up but get no gradient', function()
    local lt = nn.LookupTable(4, 2, 3)
    assert.equals(3, lt.paddingValue)
    local idx = tgl.array({ 3, 1, 3, 4 }, 'int64')
    local y = lt:forward(idx)
    check_map(y, lt.weight, function(p) return { idx:get(p[1]), p[2] } end)
    lt:zeroGradParameters()
    local g = tgl.array({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } })
    lt:backward(idx, g)
    assert.same({ { 3, 4 }, { 0, 0 }, { 0, 0 }, { 7, 8 } }, lt.gradWeight:totable())
    -- setPadding(0): no padding (no index is 0)
    lt:setPadding(0)
    lt:zeroGradParameters()
    lt:backward(idx, g)
    assert.same({ { 3, 4 }, { 0, 0 }, { 6, 8 }, { 7, 8 } }, lt.gradWeight:totable())
  end)

  it('LookupTable maxNorm and scaleGradByFreq: forward scales the rows looked up (in the weight) by maxNorm / (norm + 1e-7), gradient plain', function()
    for _, case in ipairs({ { 2, nil }, { 1, 1 }, { 3, 3 } }) do
      local p = case[2] or 2
      local lt = nn.LookupTable(6, 3, 0, 1.2, case[2])
      lt.weight:copy(tgl.randn(6, 3) * 2)
      local W0 = lt.weight:clone()
      local idx = tgl.array({ { 2, 5 }, { 2, 6 } }, 'int64')
      local y = lt:forward(idx)
      local want = W0:clone()
      for _, r in ipairs({ 2, 5, 6 }) do
        local n = 0
        for k = 1, 3 do n = n + math.abs(W0:get(r, k)) ^ p end
        n = n ^ (1 / p)
        if n > 1.2 then
          for k = 1, 3 do want:set(W0:get(r, k) * (1.2 / (n + 1e-7)), r, k) end
        end
      end
      assert.is_true(maxdiff(lt.weight, want) < 1e-15)
      -- rows not looked up are untouched, and some rows were scaled
      assert.equals(0, maxdiff(lt.weight[1], W0[1]))
      assert.is_true(maxdiff(lt.weight, W0) > 0)
      check_map(y, lt.weight, function(q) return { idx:get(q[1], q[2]), q[3] } end)
      -- the gradient is the plain lookup's (Torch7 does not differentiate the renorm)
      lt:zeroGradParameters()
      lt:backward(idx, tgl.ones(2, 2, 3))
      assert.same({ { 0, 0, 0 }, { 2, 2, 2 }, { 0, 0, 0 }, { 0, 0, 0 }, { 1, 1, 1 }, { 1, 1, 1 } },
                  lt.gradWeight:totable())
    end
    -- with padding: the padding row is scaled too, and gets no gradient
    local lp = nn.LookupTable(3, 2, 2, 0.5)
    lp.weight:copy(tgl.array({ { 3, 4 }, { 6, 8 }, { 0.1, 0.1 } }))
    local yp = lp:forward(tgl.array({ 2, 1, 3 }, 'int64'))
    local s1, s2 = 0.5 / (5 + 1e-7), 0.5 / (10 + 1e-7)
    assert.is_true(maxdiff(yp, tgl.array({ { 6 * s2, 8 * s2 }, { 3 * s1, 4 * s1 }, { 0.1, 0.1 } })) < 1e-15)
    lp:zeroGradParameters()
    lp:backward(tgl.array({ 2, 1, 3 }, 'int64'), tgl.ones(3, 2))
    assert.same({ { 1, 1 }, { 0, 0 }, { 1, 1 } }, lp.gradWeight:totable())
    -- scaleGradByFreq: each position's gradient over its index's count
    local lf = nn.LookupTable(4, 2):scaleGradByFreq()
    local fi = tgl.array({ { 1, 3, 1 }, { 1, 4, 3 } }, 'int64')
    local w0 = lf.weight:clone()
    assert.equals(0, maxdiff(lf:forward(fi)[{ 2, 2 }], w0[4]))
    lf:zeroGradParameters()
    local fg = tgl.randn(2, 3, 2)
    lf:backward(fi, fg)
    local wantf = tgl.zeros(4, 2)
    for i = 1, 2 do for j = 1, 3 do
      local r = fi:get(i, j)
      local n = ({ 3, 0, 2, 1 })[r]
      for k = 1, 2 do wantf:set(wantf:get(r, k) + fg:get(i, j, k) / n, r, k) end
    end end
    assert.is_true(maxdiff(lf.gradWeight, wantf) < 1e-12)
    local e = err_of(function() nn.LookupTable(4, 2, 0, -1) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.LookupTable: maxNorm must be a positive number, got %-1', e)
  end)

  it('LookupTable: an index out of range, 0 or not an integer is an error naming it and its position', function()
    local lt = nn.LookupTable(5, 2)
    local e = err_of(function() lt:forward(tgl.array({ 1, 6, 2 }, 'int64')) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.LookupTable:forward: index 6 at position 2 is not in 1..5', e)
    e = err_of(function() lt:forward(tgl.array({ { 1, 2 }, { 0, 3 } }, 'int64')) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.LookupTable:forward: index 0 at position %(2, 1%) is not in 1..5', e)
    e = err_of(function() lt:forward(tgl.array({ 1, 2.5 })) end)
    assert.matches('index 2.5 at position 2 is not in 1..5', e)
    local seq = nn.Sequential():add(lt):add(nn.Linear(2, 2))
    e = err_of(function() seq:backward(tgl.array({ -1 }, 'int64'), tgl.ones(1, 2)) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential:backward: modules%[1%] nn.LookupTable: index %-1 at position 1', e)
    e = err_of(function() lt:forward(tgl.ones(2, 2, 2)) end)
    assert.matches('nn_layers_spec.lua:%d+: .*nn.LookupTable: the input must be a vector or a matrix of indices, got a 3%-d input', e)
    -- indices computed inside the model are checked by the gather
    local inner = nn.Sequential():add(nn.AddConstant(-3)):add(nn.LookupTable(5, 2))
    assert.same({ 2, 2 }, inner:forward(tgl.array({ 4, 8 })):shape())
    e = err_of(function() inner:forward(tgl.array({ 4, 1 })) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential:forward: .*index 0 on axis 1', e)
    e = err_of(function() inner:forward(tgl.array({ 4, 9 })) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential:forward: .*index 6', e)
    -- the failed calls changed nothing
    lt:zeroGradParameters()
    local w = lt.weight:clone()
    err_of(function() seq:backward(tgl.array({ 9 }, 'int64'), tgl.ones(1, 2)) end)
    assert.equals(0, maxdiff(w, lt.weight))
    assert.equals(0, tgl.sum(tgl.abs(lt.gradWeight)):get())
  end)

  it('ClassNLLCriterion with class weights: the weighted sum over the sum of the weights, sizeAverage, ignoreIndex', function()
    local x = tgl.log_softmax(tgl.randn(5, 4))
    local t = tgl.array({ 2, 4, 1, 2, 3 }, 'int64')
    local w = tgl.array({ 0.5, 2, 1.5, 3 })
    local num, den = 0, 0
    for i = 1, 5 do
      local c = t:get(i)
      num = num - w:get(c) * x:get(i, c)
      den = den + w:get(c)
    end
    local crit = nn.ClassNLLCriterion(w)
    assert.near(num / den, crit:forward(x, t), 1e-12)
    local gi = crit:backward(x, t)
    local want = tgl.zeros(5, 4)
    for i = 1, 5 do want:set(-w:get(t:get(i)) / den, i, t:get(i)) end
    assert.is_true(maxdiff(gi, want) < 1e-12)
    assert.is_true(maxdiff(gi, fd(function() return crit:forward(x, t) end, x)) < 1e-7)
    local sum = nn.ClassNLLCriterion(w, false)
    assert.near(num, sum:forward(x, t), 1e-12)
    assert.is_true(maxdiff(sum:backward(x, t), want * den) < 1e-12)
    -- one example (a vector)
    assert.near(-x:get(2, 4), crit:forward(x[2], 4), 1e-12)
    assert.near(-3 * x:get(2, 4), sum:forward(x[2], 4), 1e-12)
    -- the weights are read at each call
    w:set(10, 1)
    den = den + 9.5
    num = num - 9.5 * x:get(3, 1)
    assert.near(num / den, crit:forward(x, t), 1e-12)
    -- ignoreIndex: those examples count nowhere
    local ig = nn.ClassNLLCriterion(nil, true, 2)
    local t2 = tgl.array({ 2, 4, 1, 2, 3 }, 'int64')
    assert.near(-(x:get(2, 4) + x:get(3, 1) + x:get(5, 3)) / 3, ig:forward(x, t2), 1e-12)
    local gig = ig:backward(x, t2)
    assert.equals(0, tgl.sum(tgl.abs(gig[1])):get())
    assert.near(-1 / 3, gig:get(2, 4), 1e-15)
    -- a default ignoreIndex of -100, as Torch7's
    assert.equals(-100, nn.ClassNLLCriterion().ignoreIndex)
    local e = err_of(function() nn.ClassNLLCriterion(tgl.ones(3)):forward(x, t) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.ClassNLLCriterion:forward: 3 class weights for an input of 4 classes', e)
    e = err_of(function() nn.ClassNLLCriterion(tgl.ones(2, 2)) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.ClassNLLCriterion: weights must be a vector %(one weight per class%), got 2%-d array', e)
    e = err_of(function() nn.ClassNLLCriterion(w):forward(x, tgl.array({ 1, 2, 5, 1, 1 }, 'int64')) end)
    assert.matches('label 5 at position 3 is not in 1..4', e)
  end)

  it('CrossEntropyCriterion with class weights and sizeAverage', function()
    local x = tgl.randn(4, 3)
    local t = tgl.array({ 3, 1, 1, 2 }, 'int64')
    local w = tgl.array({ 1, 0.25, 4 })
    local num, den = 0, 0
    for i = 1, 4 do
      local m, s = -math.huge, 0
      for j = 1, 3 do m = math.max(m, x:get(i, j)) end
      for j = 1, 3 do s = s + math.exp(x:get(i, j) - m) end
      local c = t:get(i)
      num = num - w:get(c) * (x:get(i, c) - m - math.log(s))
      den = den + w:get(c)
    end
    local ce = nn.CrossEntropyCriterion(w)
    assert.near(num / den, ce:forward(x, t), 1e-12)
    assert.is_true(maxdiff(ce:backward(x, t), fd(function() return ce:forward(x, t) end, x)) < 1e-7)
    local ces = nn.CrossEntropyCriterion(w, false)
    assert.is_false(ces.sizeAverage)
    assert.near(num, ces:forward(x, t), 1e-12)
    assert.is_true(maxdiff(ces:backward(x, t), fd(function() return ces:forward(x, t) end, x)) < 1e-7)
  end)

  it('property: Narrow, Select and Transpose over random shapes and arguments, values and gradInput by the rule', function()
    math.randomseed(tonumber(os.getenv('TGL_PROP_SEED') or '21'))
    for case = 1, 25 do
      local nd = math.random(1, 4)
      local shape = {}
      for i = 1, nd do shape[i] = math.random(1, 4) end
      local x = tgl.randn(unpack(shape))
      local d = math.random(1, nd)
      local dneg = math.random() < 0.5 and d - nd - 1 or d          -- a negative dimension half the time
      local size = shape[d]
      local off = math.random(1, size)
      local len = math.random(1, size - off + 1)
      local larg = math.random() < 0.5 and len or len - size + off - 2   -- Torch7's negative length
      local m = nn.Narrow(dneg, off, larg)
      local y = m:forward(x)
      local ys = { unpack(shape) }
      ys[d] = len
      assert.same(ys, y:shape(), 'case ' .. case)
      check_map(y, x, function(p) local q = { unpack(p) }; q[d] = q[d] + off - 1; return q end)
      local g = tgl.randn(unpack(ys))
      local gi = m:backward(x, g)
      for _, p in ipairs(positions(shape)) do
        local inside = p[d] >= off and p[d] < off + len
        local q = { unpack(p) }
        q[d] = q[d] - off + 1
        assert.equals(inside and at(g, q) or 0, at(gi, p))
      end
      if nd >= 2 then
        local idx = math.random(1, size)
        local sel = nn.Select(dneg, math.random() < 0.5 and idx or idx - size - 1)
        check_map(sel:forward(x), x, function(p) local q = { unpack(p) }; table.insert(q, d, idx); return q end)
        local e = math.random(1, nd)
        local t = nn.Transpose({ d, e })
        check_map(t:forward(x), x, function(p) local q = { unpack(p) }; q[d], q[e] = p[e], p[d]; return q end)
      end
    end
  end)

  it('clone(): a deep copy with new arrays; clone(names): those fields are the same arrays', function()
    local m = nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.Linear(4, 2))
    local x = tgl.randn(5, 3)
    local y = m:forward(x):clone()
    local c = m:clone()
    assert.equals(nn.type(m), nn.type(c))
    assert.equals(tostring(m), tostring(c))
    for i, mod in ipairs(m.modules) do
      assert.is_false(rawequal(mod, c.modules[i]))
      if mod.weight then
        assert.is_false(rawequal(mod.weight, c.modules[i].weight))
        assert.equals(0, maxdiff(mod.weight, c.modules[i].weight))
      end
    end
    assert.equals(0, maxdiff(c:forward(x), y))
    c.modules[1].weight:copy(c.modules[1].weight * 2)
    assert.equals(0, maxdiff(m:forward(x), y))   -- the original is untouched
    assert.is_true(maxdiff(c:forward(x), y) > 0)

    -- shared weights and gradients
    local s = m:clone('weight', 'bias', 'gradWeight', 'gradBias')
    for i, f in ipairs({ 'weight', 'bias', 'gradWeight', 'gradBias' }) do
      assert.is_true(rawequal(m.modules[1][f], s.modules[1][f]), f)
      assert.is_true(rawequal(m.modules[3][f], s.modules[3][f]), f)
    end
    assert.is_false(rawequal(m.modules[1].output, s.modules[1].output))
    -- an update through one is seen by the other, also by compiled functions built before
    m:zeroGradParameters()
    local g = tgl.randn(5, 2)
    m:backward(x, g)
    local g1 = m.modules[1].gradWeight:clone()
    s:backward(x, g)    -- accumulates into the same arrays
    assert.is_true(maxdiff(m.modules[1].gradWeight, g1 * 2) < 1e-12)
    s:updateParameters(0.1)
    local y2 = m:forward(x)
    assert.is_true(maxdiff(y2, s:forward(x)) == 0)
    assert.is_true(maxdiff(y2, y) > 0)
    -- clone('weight', 'bias') alone: gradients are the clone's own
    local wb = m:clone('weight', 'bias')
    assert.is_true(rawequal(m.modules[1].weight, wb.modules[1].weight))
    assert.is_false(rawequal(m.modules[1].gradWeight, wb.modules[1].gradWeight))
    -- criterions clone too, their class weights with them
    local w = tgl.array({ 1, 2 })
    local crit = nn.ClassNLLCriterion(w)
    local cc = crit:clone()
    assert.is_false(rawequal(crit.weights, cc.weights))
    local lx = tgl.log(tgl.array({ { 0.5, 0.5 }, { 0.2, 0.8 } }))
    assert.near(crit:forward(lx, tgl.array({ 1, 2 }, 'int64')), cc:forward(lx, tgl.array({ 1, 2 }, 'int64')), 1e-15)
  end)

  it('shared modules in one model: each holder adds its part, updateParameters steps once per holder (Torch7), getParameters keeps them shared', function()
    local a = nn.Linear(3, 3)
    local b = a:clone('weight', 'bias', 'gradWeight', 'gradBias')
    local model = nn.Sequential():add(a):add(nn.Tanh()):add(b)
    local x = tgl.randn(4, 3)
    local g = tgl.randn(4, 3)
    model:zeroGradParameters()
    model:backward(x, g)
    -- the gradient of sum(y * g) with respect to the one shared weight
    local function L() return tgl.sum(model:forward(x) * g):get() end
    assert.is_true(maxdiff(a.gradWeight, fd(L, a.weight)) < 1e-7)
    assert.is_true(maxdiff(a.gradBias, fd(L, a.bias)) < 1e-7)
    local w0, gw = a.weight:clone(), a.gradWeight:clone()
    model:updateParameters(0.1)    -- Torch7: once per module holding it
    assert.is_true(maxdiff(a.weight, w0 - gw * 0.2) < 1e-12)
    -- getParameters: one place for the shared arrays, the sharing kept
    local flat, gflat = model:getParameters()
    assert.same({ 12 }, flat:shape())
    assert.is_true(rawequal(a.weight, b.weight))
    assert.is_true(rawequal(a.gradWeight, b.gradWeight))
    flat:copy(flat * 0.5)
    assert.is_true(maxdiff(b.weight, (w0 - gw * 0.2) * 0.5) < 1e-12)
    model:zeroGradParameters()
    model:backward(x, g)
    assert.is_true(maxdiff(gflat[{ { 1, 9 } }]:reshape(3, 3), fd(L, a.weight)) < 1e-7)
    local before = flat:clone()
    model:updateParameters(0.01)
    assert.is_true(maxdiff(flat, before - gflat * 0.02) < 1e-12)
    -- weights shared, gradients not: getParameters cannot lay them out
    local c = nn.Linear(3, 3)
    local d = c:clone('weight', 'bias')
    local m2 = nn.Sequential():add(c):add(d)
    m2:zeroGradParameters()
    m2:backward(x, g)
    -- each holder's own part (Torch7's per-module accumulation)
    local gc, gd = c.gradWeight:clone(), d.gradWeight:clone()
    local h = x:dot(c.weight:T()) + c.bias
    assert.is_true(maxdiff(gd, g:T():dot(h)) < 1e-12)
    assert.is_true(maxdiff(gc, g:dot(d.weight):T():dot(x)) < 1e-12)
    -- type() keeps the sharing
    model:float()
    assert.equals('float32', a.weight.dtype)
    assert.is_true(rawequal(a.weight, b.weight))
    assert.is_true(rawequal(a.gradBias, b.gradBias))
    model:double()
    local e = err_of(function() m2:getParameters() end)
    assert.matches('nn_layers_spec.lua:%d+: getParameters: nn.Linear.weight is shared with another module but its gradWeight is not', e)
  end)

  it('a module added twice: its gradient counts both uses once each, as Torch7', function()
    local l = nn.Linear(3, 3)
    local model = nn.Sequential():add(l):add(nn.Tanh()):add(l)
    local x, g = tgl.randn(2, 3), tgl.randn(2, 3)
    model:zeroGradParameters()
    model:backward(x, g)
    local function L() return tgl.sum(model:forward(x) * g):get() end
    assert.is_true(maxdiff(l.gradWeight, fd(L, l.weight)) < 1e-7)
    local w0, gw = l.weight:clone(), l.gradWeight:clone()
    -- fd's last forward ran at a perturbed weight; accUpdateGradParameters
    -- reads the last forward's outputs (as Torch7's does), so forward again
    model:forward(x)
    model:accUpdateGradParameters(x, g, 0.1)
    assert.is_true(maxdiff(l.weight, w0 - gw * 0.1) < 1e-12)
    assert.is_true(maxdiff(l.gradWeight, gw) == 0)
  end)

  it('share(mlp, names): the fields become the other module\'s arrays; containers share child by child', function()
    local a = nn.Sequential():add(nn.Linear(2, 3)):add(nn.ReLU())
    local b = nn.Sequential():add(nn.Linear(2, 3)):add(nn.ReLU())
    local x = tgl.randn(4, 2)
    b:forward(x)   -- a compiled function built before the sharing
    assert.equals(b, b:share(a, 'weight', 'bias'))
    assert.is_true(rawequal(a.modules[1].weight, b.modules[1].weight))
    assert.is_false(rawequal(a.modules[1].gradWeight, b.modules[1].gradWeight))
    assert.is_true(b.modules[1].shared)
    assert.equals(0, maxdiff(a:forward(x), b:forward(x)))
    a.modules[1].bias:fill(3)
    assert.equals(0, maxdiff(a:forward(x), b:forward(x)))
    local e = err_of(function() b:share(nn.Sequential(), 'weight') end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential:share: expected a container of 2 modules to share with', e)
    e = err_of(function() nn.Linear(2, 2):share(nn.Tanh(), 'weight') end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Linear:share: the module to share with %(nn.Tanh%) has no array weight', e)
  end)

  it('accUpdateGradParameters: weight -= lr * gradient, gradWeight untouched', function()
    local m = nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.Linear(4, 2))
    local ref = m:clone()
    local x, g = tgl.randn(5, 3), tgl.randn(5, 2)
    m:zeroGradParameters()
    ref:zeroGradParameters()
    ref:backward(x, g)
    m:accUpdateGradParameters(x, g, 0.3)
    for i = 1, 3, 2 do
      local l, r = m.modules[i], ref.modules[i]
      assert.is_true(maxdiff(l.weight, r.weight - r.gradWeight * 0.3) < 1e-12)
      assert.is_true(maxdiff(l.bias, r.bias - r.gradBias * 0.3) < 1e-12)
      assert.equals(0, tgl.sum(tgl.abs(l.gradWeight)):get())
    end
    -- a LookupTable: the looked-up rows move, repeats add up
    local lt = nn.LookupTable(4, 2)
    local w0 = lt.weight:clone()
    lt:accUpdateGradParameters(tgl.array({ 2, 2, 4 }, 'int64'), tgl.ones(3, 2), 0.5)
    assert.is_true(maxdiff(lt.weight, w0 - tgl.array({ { 0, 0 }, { 1, 1 }, { 0, 0 }, { 0.5, 0.5 } })) < 1e-12)
    local e = err_of(function() m:accUpdateGradParameters(x, g) end)
    assert.matches('nn_layers_spec.lua:%d+: nn.Sequential:accUpdateGradParameters: the learning rate must be a number, got nil', e)
  end)

  it('reset(): containers reset every child; reset(stdv) passes stdv on', function()
    local m = nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.LookupTable(2, 2))
    local w1, w3 = m.modules[1].weight:clone(), m.modules[3].weight:clone()
    assert.equals(m, m:reset())
    assert.is_true(maxdiff(m.modules[1].weight, w1) > 0)
    assert.is_true(maxdiff(m.modules[3].weight, w3) > 0)
    m:reset(0.01)
    assert.is_true(tgl.max(tgl.abs(m.modules[1].weight)):get() <= 0.01)
    local t = nn.Tanh()
    assert.equals(t, t:reset())
  end)
end)
