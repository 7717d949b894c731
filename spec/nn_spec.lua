-- spec/nn_spec.lua — lua/nn: Torch7's modules on the compiler.  Values of
-- forward against explicit tgl computations, backward against finite
-- differences (float64), accumulation and scale, getParameters sharing,
-- training, criterions and their label errors, and the compile cache.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff = S.maxdiff

local function mlp()
  return nn.Sequential():add(nn.Linear(4, 5)):add(nn.Tanh()):add(nn.Linear(5, 6)):add(nn.Sigmoid())
           :add(nn.Linear(6, 3, false)):add(nn.ReLU()):add(nn.Linear(3, 3)):add(nn.LogSoftMax())
end

describe('nn', function()
  S.float64(7)

  it("loads with require 'nn' and prints models as Torch7 does", function()
    assert.equals(nn, require('nn'))
    local m = nn.Sequential():add(nn.Linear(784, 500)):add(nn.Tanh()):add(nn.Linear(500, 10, false))
                :add(nn.LogSoftMax())
    assert.equals('nn.Sequential {\n  [input -> (1) -> (2) -> (3) -> (4) -> output]\n'
                  .. '  (1): nn.Linear(784 -> 500)\n  (2): nn.Tanh\n'
                  .. '  (3): nn.Linear(500 -> 10) without bias\n  (4): nn.LogSoftMax\n}', tostring(m))
    local nested = nn.Sequential():add(nn.Sequential():add(nn.Identity())):add(nn.View(2, 3))
    assert.equals('nn.Sequential {\n  [input -> (1) -> (2) -> output]\n'
                  .. '  (1): nn.Sequential {\n    [input -> (1) -> output]\n    (1): nn.Identity\n  }\n'
                  .. '  (2): nn.View(2, 3)\n}', tostring(nested))
    assert.equals('nn.Reshape(2x3)', tostring(nn.Reshape(2, 3)))
    assert.equals(4, m:size())
    assert.equals(m.modules[3], m:get(3))
    assert.equals(5, #m:listModules())
    assert.equals(m, m:listModules()[1])
  end)

  it('Linear: weight out x in, Torch7 default init, forward = x W^T + b (batch and vector)', function()
    local l = nn.Linear(4, 3)
    assert.same({ 3, 4 }, l.weight:shape())
    assert.same({ 3 }, l.bias:shape())
    assert.same({ 3, 4 }, l.gradWeight:shape())
    -- uniform in +-1/sqrt(4): all inside, not all equal
    assert.is_true(tgl.max(tgl.abs(l.weight)):get() <= 0.5)
    assert.is_true(tgl.max(l.weight):get() - tgl.min(l.weight):get() > 0.1)
    assert.equals(0, tgl.sum(tgl.abs(l.gradWeight)):get())
    local x = tgl.randn(5, 4)
    local want = x:dot(l.weight:T()) + l.bias
    local out = l:forward(x)
    assert.is_true(maxdiff(out, want) < 1e-12)
    assert.equals(out, l.output)
    local v = tgl.randn(4)
    assert.is_true(maxdiff(l:forward(v), l.weight:dot(v) + l.bias) < 1e-12)
    local nb = nn.Linear(4, 2, false)
    assert.is_nil(nb.bias)
    assert.is_true(maxdiff(nb:forward(x), x:dot(nb.weight:T())) < 1e-12)
    assert.has_error(function() nn.Linear(0, 3) end)
  end)

  it('activations, SoftMax, LogSoftMax, Identity, Reshape and View compute what tgl does', function()
    local x = tgl.randn(3, 4)
    assert.is_true(maxdiff(nn.Tanh():forward(x), tgl.tanh(x)) < 1e-15)
    assert.is_true(maxdiff(nn.Sigmoid():forward(x), tgl.sigmoid(x)) < 1e-15)
    assert.is_true(maxdiff(nn.ReLU():forward(x), tgl.maximum(x, 0)) < 1e-15)
    assert.is_true(maxdiff(nn.Identity():forward(x), x) == 0)
    local e = tgl.exp(x)
    local sm = e / tgl.sum(e, 2, { keepdims = true })
    assert.is_true(maxdiff(nn.SoftMax():forward(x), sm) < 1e-14)
    assert.is_true(maxdiff(nn.LogSoftMax():forward(x), tgl.log(sm)) < 1e-14)
    assert.same({ 3, 2, 2 }, nn.Reshape(2, 2):forward(x):shape())       -- a batch of 3
    assert.same({ 2, 6 }, nn.Reshape(2, 6):forward(x):shape())
    assert.same({ 12 }, nn.View(-1):forward(x):shape())
    assert.same({ 3, 4 }, nn.View(4):setNumInputDims(1):forward(x):shape())
    assert.same({ 3, 2, 2 }, nn.View(2, 2):setNumInputDims(1):forward(x):shape())
    assert.equals(x:get(2, 3), nn.View(-1):forward(x):get(7))
    -- a module without parameters: backward is gradInput alone
    local g = tgl.randn(3, 4)
    assert.is_true(maxdiff(nn.Tanh():backward(x, g), g * (1 - tgl.sqr(tgl.tanh(x)))) < 1e-15)
    assert.is_true(maxdiff(nn.Reshape(2, 2):backward(x, g:reshape(3, 2, 2)), g) == 0)
  end)

  it("forward fills every module's output; the model's output is the last one", function()
    local m = mlp()
    local x = tgl.randn(2, 4)
    local out = m:forward(x)
    local h = x:dot(m.modules[1].weight:T()) + m.modules[1].bias
    assert.is_true(maxdiff(m.modules[1].output, h) < 1e-12)
    assert.is_true(maxdiff(m.modules[2].output, tgl.tanh(h)) < 1e-12)
    assert.equals(out, m.output)
    assert.is_true(maxdiff(m.modules[8].output, out) == 0)
    assert.is_true(maxdiff(m.modules[8]:forward(m.modules[7].output), out) < 1e-12)
  end)

  -- L(x) = sum(model(x) * gOut): backward(x, gOut) is dL/dx, and it adds
  -- dL/dW to every gradWeight.  Finite differences through forward, with
  -- the weights perturbed in place (the compiled forward sees them).
  it('backward: gradInput and parameter gradients equal finite differences (float64)', function()
    local m = mlp()
    local x = tgl.randn(3, 4)
    local gOut = tgl.randn(3, 3)
    local function L() return tgl.sum(m:forward(x) * gOut):get() end
    m:zeroGradParameters()
    local gi = m:backward(x, gOut):clone()
    assert.equals(m.gradInput, m.gradInput)
    local eps = 1e-6
    local function fd(a, ...)
      local v = a:get(...)
      a:set(v + eps, ...); local lp = L()
      a:set(v - eps, ...); local lm = L()
      a:set(v, ...)
      return (lp - lm) / (2 * eps)
    end
    for i = 1, 3 do for j = 1, 4 do
      assert.near(fd(x, i, j), gi:get(i, j), 1e-7)
    end end
    local params, grads = m:parameters()
    assert.equals(7, #params)      -- 4 weights, 3 biases (one Linear has none)
    for k, p in ipairs(params) do
      local n = p:nelement()
      local flat = p:reshape(n)
      local gflat = grads[k]:reshape(n)
      for i = 1, n, 3 do
        assert.near(fd(flat, i), gflat:get(i), 1e-7)
      end
    end
  end)

  it('backward accumulates into gradWeight/gradBias with scale; zeroGradParameters clears', function()
    local m = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Tanh())
    local l = m.modules[1]
    local x, g = tgl.randn(4, 3), tgl.randn(4, 2)
    m:zeroGradParameters()
    m:backward(x, g)
    local gw1, gb1 = l.gradWeight:clone(), l.gradBias:clone()
    -- explicit: dL/dW = (g * (1 - tanh^2))^T x
    local d = g * (1 - tgl.sqr(tgl.tanh(x:dot(l.weight:T()) + l.bias)))
    assert.is_true(maxdiff(gw1, d:T():dot(x)) < 1e-12)
    assert.is_true(maxdiff(gb1, tgl.sum(d, 1)) < 1e-12)
    m:backward(x, g)
    assert.is_true(maxdiff(l.gradWeight, gw1 * 2) < 1e-12)
    m:backward(x, g, 0.5)
    assert.is_true(maxdiff(l.gradWeight, gw1 * 2.5) < 1e-12)
    assert.is_true(maxdiff(l.gradBias, gb1 * 2.5) < 1e-12)
    m:zeroGradParameters()
    assert.equals(0, tgl.sum(tgl.abs(l.gradWeight)):get())
    assert.equals(0, tgl.sum(tgl.abs(l.gradBias)):get())
    -- exactly zero, even after a NaN or an infinity
    l.gradWeight:set(0 / 0, 1, 1)
    l.gradBias:set(1 / 0, 2)
    m:zeroGradParameters()
    assert.equals(0, tgl.sum(tgl.abs(l.gradWeight)):get())
    assert.equals(0, tgl.sum(tgl.abs(l.gradBias)):get())
    -- updateGradInput leaves the gradients alone; accGradParameters adds only
    local gi = m:updateGradInput(x, g)
    assert.is_true(maxdiff(gi, d:dot(l.weight)) < 1e-12)
    assert.equals(0, tgl.sum(tgl.abs(l.gradWeight)):get())
    m:accGradParameters(x, g, 2)
    assert.is_true(maxdiff(l.gradWeight, gw1 * 2) < 1e-12)
  end)

  it('updateParameters: weight <- weight - lr * gradWeight, seen by the next forward', function()
    local l = nn.Linear(3, 2)
    local x, g = tgl.randn(4, 3), tgl.randn(4, 2)
    l:zeroGradParameters()
    l:backward(x, g)
    local w0, b0 = l.weight:clone(), l.bias:clone()
    local want_w = w0 - l.gradWeight * 0.1
    l:updateParameters(0.1)
    assert.is_true(maxdiff(l.weight, want_w) < 1e-15)
    assert.is_true(maxdiff(l.bias, b0 - l.gradBias * 0.1) < 1e-15)
    assert.is_true(maxdiff(l:forward(x), x:dot(want_w:T()) + l.bias) < 1e-12)
    local ok, err = pcall(function() return l:updateParameters('0.1') end)
    assert.is_false(ok)
    assert.matches('nn_spec%.lua:%d+: nn%.Linear:updateParameters: the learning rate must be a number, got string', err)
    -- no parameters: nothing to do
    nn.Tanh():zeroGradParameters()
    nn.Tanh():updateParameters(0.1)
  end)

  it('getParameters: flat views shared with the modules, surviving updates', function()
    local m = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Tanh()):add(nn.Linear(2, 2))
    local x, g = tgl.randn(4, 3), tgl.randn(4, 2)
    local before = m:forward(x):clone()
    local w1 = m.modules[1].weight:clone()
    local p, gp = m:getParameters()
    assert.equals(6 + 2 + 4 + 2, p:nelement())
    assert.equals(p:nelement(), gp:nelement())
    -- values kept, in parameters() order
    assert.is_true(maxdiff(m.modules[1].weight, w1) == 0)
    assert.equals(w1:get(1, 1), p:get(1))
    assert.equals(m.modules[3].bias:get(2), p:get(14))
    assert.is_true(maxdiff(m:forward(x), before) < 1e-15)
    -- the flat array writes through to the modules and the compiled forward
    p:set(0.25, 1)
    assert.equals(0.25, m.modules[1].weight:get(1, 1))
    p:fill(0)
    assert.equals(0, tgl.sum(tgl.abs(m:forward(x))):get())
    tgl.manual_seed(3)
    p:copy(tgl.randn(14))
    local l1, l3 = m.modules[1], m.modules[3]
    local want = tgl.tanh(x:dot(l1.weight:T()) + l1.bias):dot(l3.weight:T()) + l3.bias
    assert.is_true(maxdiff(m:forward(x), want) < 1e-12)
    -- backward fills the flat gradient; updateParameters moves the flat array
    gp:fill(0)
    m:backward(x, g)
    assert.equals(l1.gradWeight:get(2, 3), gp:get(6))
    assert.is_true(tgl.sum(tgl.abs(gp)):get() > 0)
    local p0, g0 = p:clone(), gp:clone()
    m:updateParameters(0.5)
    assert.is_true(maxdiff(p, p0 - g0 * 0.5) < 1e-15)
    assert.is_true(maxdiff(l1.weight:reshape(6), (p0 - g0 * 0.5)[{ { 1, 6 } }]) < 1e-15)
    -- and an optimiser step on the flat arrays reaches forward
    p:copy(p - gp * 0.1)
    want = tgl.tanh(x:dot(l1.weight:T()) + l1.bias):dot(l3.weight:T()) + l3.bias
    assert.is_true(maxdiff(m:forward(x), want) < 1e-12)
  end)

  it('trains a small MLP on a toy problem: the loss goes down', function()
    tgl.manual_seed(11)
    -- two Gaussian blobs in 2-d, labels 1 and 2
    local n = 40
    local x = tgl.randn(n, 2)
    local y = tgl.zeros(n, { dtype = 'int64' })
    for i = 1, n do
      local c = i <= n / 2 and 1 or 2
      y:set(c, i)
      x:set(x:get(i, 1) + (c == 1 and 2 or -2), i, 1)
    end
    local m = nn.Sequential():add(nn.Linear(2, 8)):add(nn.Tanh()):add(nn.Linear(8, 2))
    local crit = nn.CrossEntropyCriterion()
    local first, last
    for step = 1, 60 do
      local out = m:forward(x)
      local loss = crit:forward(out, y)
      m:zeroGradParameters()
      m:backward(x, crit:backward(out, y))
      m:updateParameters(0.2)
      first = first or loss
      last = loss
    end
    assert.is_true(last < first / 4, ('loss %g -> %g'):format(first, last))
    local pred = tgl.argmax(m:forward(x), 2)
    local right = 0
    for i = 1, n do if pred:get(i) == y:get(i) then right = right + 1 end end
    assert.is_true(right >= n - 1, right .. ' of ' .. n)
  end)

  it('criterions: values and gradients of ClassNLL, CrossEntropy and MSE', function()
    local x = tgl.randn(3, 4)
    local y = tgl.array({ 2, 4, 1 }, 'int64')
    local lsm = tgl.log_softmax(x)
    local nll = nn.ClassNLLCriterion()
    local picked = x:get(1, 2) + x:get(2, 4) + x:get(3, 1)
    assert.near(-picked / 3, nll:forward(x, y), 1e-12)
    assert.near(-picked / 3, nll.output, 1e-12)
    local g = nll:backward(x, y)
    assert.equals(-1 / 3, g:get(2, 4))
    assert.equals(0, g:get(2, 3))
    assert.near(-picked, nn.ClassNLLCriterion(nil, false):forward(x, y), 1e-12)
    -- float labels (Torch7's DoubleTensor labels) and one example with a number
    assert.near(-picked / 3, nll:forward(x, tgl.array({ 2, 4, 1 })), 1e-12)
    assert.near(-x:get(1, 3), nll:forward(x[1], 3), 1e-12)
    local ce = nn.CrossEntropyCriterion()
    assert.near(-(lsm:get(1, 2) + lsm:get(2, 4) + lsm:get(3, 1)) / 3, ce:forward(x, y), 1e-12)
    local sm = tgl.exp(lsm)
    local want = (sm - tgl.one_hot(y, 4, 'float64')) / 3
    assert.is_true(maxdiff(ce:backward(x, y), want) < 1e-12)
    local t = tgl.randn(3, 4)
    local mse = nn.MSECriterion()
    assert.near(tgl.sum(tgl.sqr(x - t)):get() / 12, mse:forward(x, t), 1e-12)
    assert.is_true(maxdiff(mse:backward(x, t), (x - t) * (2 / 12)) < 1e-12)
    mse.sizeAverage = false
    assert.near(tgl.sum(tgl.sqr(x - t)):get(), mse:forward(x, t), 1e-12)
    assert.is_true(maxdiff(mse:backward(x, t), (x - t) * 2) < 1e-12)
  end)

  it('criterions: a 0 or out-of-range label is an error that says so', function()
    local x = tgl.randn(3, 4)
    local nll = nn.ClassNLLCriterion()
    local ok, err = pcall(nll.forward, nll, x, tgl.array({ 1, 0, 2 }, 'int64'))
    assert.is_false(ok)
    assert.matches('nn.ClassNLLCriterion:forward: label 0 at position 2 is not in 1..4 '
                   .. '(labels count from 1, as in Torch7)', err, 1, true)
    ok, err = pcall(nll.backward, nll, x, tgl.array({ 1, 2, 5 }, 'int64'))
    assert.is_false(ok)
    assert.matches('label 5 at position 3 is not in 1..4', err, 1, true)
    ok, err = pcall(nn.CrossEntropyCriterion().forward, nn.CrossEntropyCriterion(), x, tgl.array({ 1, 2 }, 'int64'))
    assert.is_false(ok)
    assert.matches('2 labels for 3 examples', err, 1, true)
    ok, err = pcall(nll.forward, nll, x, tgl.array({ 1, 2.5, 2 }))
    assert.is_false(ok)
    assert.matches('label 2.5 at position 2', err, 1, true)
  end)

  it('property: labels of every dtype, strided, with one bad label at a random position, through forward and a compiled step', function()
    -- (the labels are read through their pointer when the dtype allows:
    -- the same errors and losses as element by element)
    math.randomseed(77)
    for trial = 1, 24 do
      local dtype = ({ 'int64', 'int32', 'float64', 'float32' })[trial % 4 + 1]
      local n, C = math.random(1, 9), math.random(2, 6)
      local lab = {}
      for i = 1, 2 * n do lab[i] = math.random(1, C) end
      -- every other element of a vector of 2n: a strided view of n labels
      local t = tgl.array(lab, dtype)[{ { 1, 2 * n, 2 } }]
      local x = tgl.randn(n, C)
      local nll = nn.ClassNLLCriterion()
      local want = 0
      for i = 1, n do want = want - x:get(i, lab[2 * i - 1]) end
      assert.near(want / n, nll:forward(x, t), 1e-5)
      local bad = math.random(1, n)
      local v = ({ 0, C + 1, -3, 2.5 })[math.random(dtype:match('^float') and 4 or 3)]
      lab[2 * bad - 1] = v
      local tb = tgl.array(lab, dtype)[{ { 1, 2 * n, 2 } }]
      local ok, err = pcall(nll.forward, nll, x, tb)
      assert.is_false(ok)
      assert.matches(('label %s at position %d is not in 1..%d'):format(tostring(v), bad, C), err, 1, true)
      local m = nn.Linear(C, C)
      local step = nn.compile { model = m, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      local w0 = m.weight:clone()
      ok, err = pcall(step.step, step, x, tb)
      assert.is_false(ok)
      assert.matches(('label %s at position %d'):format(tostring(v), bad), err, 1, true)
      assert.equals(0, maxdiff(w0, m.weight))
      assert.is_number(step:step(x, t))
    end
  end)

  it('compiles once per input shape and dtype and reuses the function', function()
    local m = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Tanh())
    local n0 = nn.compiled_count
    m:forward(tgl.randn(4, 3))
    assert.equals(n0 + 1, nn.compiled_count)
    m:forward(tgl.randn(4, 3))
    m:forward(tgl.randn(4, 3))
    assert.equals(n0 + 1, nn.compiled_count)
    m:forward(tgl.randn(5, 3))                       -- a new shape
    assert.equals(n0 + 2, nn.compiled_count)
    m:forward(tgl.randn(4, 3, { dtype = 'float32' })) -- a new dtype
    assert.equals(n0 + 3, nn.compiled_count)
    m:backward(tgl.randn(4, 3), tgl.randn(4, 2))
    m:backward(tgl.randn(4, 3), tgl.randn(4, 2))
    assert.equals(n0 + 4, nn.compiled_count)
    local crit = nn.MSECriterion()
    crit:forward(tgl.randn(4, 2), tgl.randn(4, 2))
    crit:forward(tgl.randn(4, 2), tgl.randn(4, 2))
    assert.equals(n0 + 5, nn.compiled_count)
    -- getParameters replaces the arrays: the next forward builds again, once
    m:getParameters()
    m:forward(tgl.randn(4, 3))
    m:forward(tgl.randn(4, 3))
    assert.equals(n0 + 6, nn.compiled_count)
  end)

  it('type, float and double convert the parameters and the outputs', function()
    local m = nn.Sequential():add(nn.Linear(3, 2))
    assert.equals('float64', m.modules[1].weight.dtype)
    local w = m.modules[1].weight:clone()
    m:float()
    assert.equals('float32', m.modules[1].weight.dtype)
    assert.equals('float32', m.modules[1].gradBias.dtype)
    assert.equals('float32', m:forward(tgl.randn(2, 3, { dtype = 'float32' })).dtype)
    m:double()
    assert.equals('float64', m.modules[1].weight.dtype)
    assert.is_true(maxdiff(m.modules[1].weight, w) < 1e-6)
    assert.equals('torch.DoubleTensor', m:type())
    assert.has_error(function() m:type('int32') end)
  end)

  it('training and evaluate set train on every module', function()
    local m = mlp()
    assert.is_true(m.modules[3].train)
    m:evaluate()
    assert.is_false(m.train)
    assert.is_false(m.modules[3].train)
    m:training()
    assert.is_true(m.modules[5].train)
  end)

  it('a module that cannot take the input says which module and why, at the line of the call', function()
    local m = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Linear(2, 2))
    local ok, err = pcall(function() return m:forward(tgl.randn(2, 2, 2)) end)
    assert.is_false(ok)
    assert.matches('^[^ ]*nn_spec%.lua:%d+: nn%.Sequential: module %(1%)', err)
    assert.matches('nn.Sequential: module (1) nn.Linear(3 -> 2): nn.Linear(3 -> 2): expected a vector '
                   .. 'or a matrix (batch x 3), got a 3-d input', err, 1, true)
    ok, err = pcall(m.forward, m, 'x')
    assert.is_false(ok)
    assert.matches('nn.Sequential:forward: the input must be an array, got string', err, 1, true)
    -- a size mismatch found when the compiled function runs: the module's path
    local bad = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Tanh())
                  :add(nn.Sequential():add(nn.Linear(4, 2)))
    local w = bad.modules[1].weight:clone()
    ok, err = pcall(function() return bad:forward(tgl.randn(2, 3)) end)
    assert.is_false(ok)
    assert.matches('^[^ ]*nn_spec%.lua:%d+: nn%.Sequential:forward: modules%[3%]%.modules%[1%] '
                   .. 'nn%.Linear%(4 %-> 2%) fails on this input %(float64%(2x3%)%): ', err)
    assert.matches('inner sizes 2 and 4 differ', err, 1, true)
    ok = pcall(function() return bad:backward(tgl.randn(2, 3), tgl.randn(2, 2)) end)
    assert.is_false(ok)
    assert.is_true(maxdiff(bad.modules[1].weight, w) == 0)
    assert.equals(0, tgl.sum(tgl.abs(bad.modules[1].gradWeight)):get())
    ok, err = pcall(function() return nn.Linear(0, 3) end)
    assert.matches('^[^ ]*nn_spec%.lua:%d+: nn%.Linear: expected nn%.Linear%(inputSize, outputSize%)', err)
  end)

  it("backward sets the gradInput of every module inside, as Torch7's does", function()
    local m = nn.Sequential():add(nn.Linear(3, 2)):add(nn.Tanh()):add(nn.Linear(2, 2))
    local x, g = tgl.randn(4, 3), tgl.randn(4, 2)
    m:forward(x)
    local gi = m:backward(x, g)
    local l1, l3 = m.modules[1], m.modules[3]
    local h = x:dot(l1.weight:T()) + l1.bias
    local g3 = g:dot(l3.weight)                        -- at Linear 3's input
    local g2 = g3 * (1 - tgl.sqr(tgl.tanh(h)))         -- at Tanh's input
    assert.is_true(maxdiff(m.modules[3].gradInput, g3) < 1e-12)
    assert.is_true(maxdiff(m.modules[2].gradInput, g2) < 1e-12)
    assert.is_true(maxdiff(m.modules[1].gradInput, g2:dot(l1.weight)) < 1e-12)
    assert.is_true(maxdiff(gi, g2:dot(l1.weight)) < 1e-12)
  end)
end)
