-- spec/nn_stress_spec.lua — nn at sizes and in combinations no other spec
-- picks by hand, run under the sanitizers in CI like every spec: a
-- 302-module Sequential trained by nn.compile against the eager loop;
-- random ConcatTable/CAddTable/CMulTable models on transposed
-- (non-contiguous) inputs of random batch sizes, against the same input
-- made contiguous; a model of 122 parameter arrays (60 branches) stepped
-- 20 times by adam; random convolution + batch-norm + ceil max-pool
-- models, nn.compile's step against Torch7's optim idiom over
-- getParameters (running statistics included); an LSTM over 37 steps.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local optim = require 'optim'
local S = dofile('spec/support.lua')
local maxdiff = S.maxdiff

describe('nn at sizes no hand-picked spec reaches', function()
  S.float64(7)
  local crit
  before_each(function() crit = nn.ClassNLLCriterion() end)

  it('a Sequential of 302 modules: nn.compile equals the eager loop over 3 steps', function()
    local deep = nn.Sequential()
    for _ = 1, 150 do deep:add(nn.Linear(6, 6)):add(nn.Tanh()) end
    deep:add(nn.Linear(6, 3)):add(nn.LogSoftMax())
    local x, y = tgl.randn(5, 6), tgl.array({ 1, 2, 3, 1, 2 }, 'int64')
    local eager = deep:clone()
    local step = nn.compile { model = deep, criterion = crit, optimizer = nn.optim.sgd { lr = 0.05 } }
    for _ = 1, 3 do
      local l1 = step:step(x, y)
      local out = eager:forward(x)
      local l2 = crit:forward(out, y)
      eager:zeroGradParameters()
      eager:backward(x, crit:backward(out, y))
      eager:updateParameters(0.05)
      assert.is_true(math.abs(l1 - l2) < 1e-10)
    end
    local p1, p2 = deep:parameters(), eager:parameters()
    assert.equals(302, #deep.modules)
    for i = 1, #p1 do assert.is_true(maxdiff(p1[i], p2[i]) < 1e-10) end
  end)

  it('random table models on transposed inputs equal the same on contiguous copies', function()
    for _ = 1, 30 do
      local n, a, b = math.random(1, 7), math.random(1, 5), math.random(1, 5)
      local m = nn.Sequential()
        :add(nn.ConcatTable():add(nn.Linear(a, b))
                             :add(nn.Sequential():add(nn.Linear(a, b)):add(nn.Sigmoid())))
        :add(math.random() < 0.5 and nn.CAddTable() or nn.CMulTable())
        :add(nn.Tanh())
      local xt = tgl.randn(a, n):T()
      local g = tgl.randn(n, b)
      local out = m:forward(xt):clone()
      m:zeroGradParameters()
      local gi = m:backward(xt, g):clone()
      local gw = m.modules[1].modules[1].gradWeight:clone()
      local xc = xt:clone()
      -- a transposed input may take another BLAS path: rounding only
      assert.is_true(maxdiff(out, m:forward(xc)) < 1e-13)
      m:zeroGradParameters()
      assert.is_true(maxdiff(gi, m:backward(xc, g)) < 1e-13)
      assert.is_true(maxdiff(gw, m.modules[1].modules[1].gradWeight) < 1e-13)
    end
  end)

  it('an empty batch gives an empty output', function()
    local out = nn.Linear(4, 3):forward(tgl.zeros(0, 4))
    assert.same({ 0, 3 }, out:shape())
  end)

  it('122 parameter arrays in 60 branches, 20 adam steps through nn.compile', function()
    local wide = nn.Sequential():add(nn.ConcatTable())
    for _ = 1, 60 do wide.modules[1]:add(nn.Linear(4, 2)) end
    wide:add(nn.JoinTable(2)):add(nn.Linear(120, 3)):add(nn.LogSoftMax())
    local ref = wide:clone()
    local opt = nn.optim.adam { lr = 1e-2 }
    local st = nn.compile { model = wide, criterion = crit, optimizer = opt }
    local x, y = tgl.randn(9, 4), S.labels(9, 3)
    local p, gp = ref:getParameters()
    local feval = S.feval(ref, crit, x, y, gp)
    local state = {}
    for _ = 1, 20 do
      local l1 = st:step(x, y)
      local _, fs = optim.adam(feval, p, { learningRate = 1e-2 }, state)
      assert.is_true(math.abs(l1 - fs[1]) < 1e-9)
    end
    local p1, p2 = wide:parameters(), ref:parameters()
    assert.equals(122, #p1)
    for i = 1, #p1 do assert.is_true(maxdiff(p1[i], p2[i]) < 1e-9) end
  end)

  it('random conv + batch norm + ceil max-pool models: nn.compile equals Torch7 optim over getParameters', function()
    for trial = 1, 5 do
      local C, H = math.random(1, 3), math.random(6, 11)
      local m = nn.Sequential():add(nn.SpatialConvolution(C, 4, 3, 3, 1, 1, 1, 1))
        :add(nn.SpatialBatchNormalization(4)):add(nn.ReLU())
        :add(nn.SpatialMaxPooling(2, 2, 2, 2):ceil())
      local s = m:forward(tgl.randn(3, C, H, H)):shape()
      local k = s[2] * s[3] * s[4]
      m:add(nn.View(k)):add(nn.Linear(k, 3)):add(nn.LogSoftMax())
      local ev = m:clone()
      local step = nn.compile { model = m, criterion = crit,
                                optimizer = nn.optim.sgd { lr = 0.1, momentum = 0.9 } }
      local p, gp = ev:getParameters()
      local x, y = tgl.randn(3, C, H, H), tgl.array({ 1, 3, 2 }, 'int64')
      local feval = S.feval(ev, crit, x, y, gp)
      local state = {}
      for _ = 1, 3 do
        local l1 = step:step(x, y)
        local _, fs = optim.sgd(feval, p, { learningRate = 0.1, momentum = 0.9 }, state)
        assert.is_true(math.abs(l1 - fs[1]) < 1e-9, ('trial %d: %g vs %g'):format(trial, l1, fs[1]))
      end
      local bn, ebn = m.modules[2], ev.modules[2]
      assert.is_true(maxdiff(bn.running_mean, ebn.running_mean) < 1e-10)
      assert.is_true(maxdiff(bn.running_var, ebn.running_var) < 1e-10)
    end
  end)

  it('an LSTM over 37 steps trained by rmsprop through nn.compile: the loss falls', function()
    local lstm = nn.Sequential():add(nn.LSTM(3, 5)):add(nn.View(-1, 5))
                                :add(nn.Linear(5, 4)):add(nn.LogSoftMax())
    local x, y = tgl.randn(37, 3, 3), S.labels(37 * 3, 4)
    local st = nn.compile { model = lstm, criterion = crit, optimizer = nn.optim.rmsprop { lr = 1e-2 } }
    local first, last = st:step(x, y), nil
    for _ = 1, 30 do last = st:step(x, y) end
    assert.is_true(last < 0.8 * first)
  end)
end)
