-- spec/nn_spatial_spec.lua — lua/nn/spatial.lua: SpatialConvolution,
-- SpatialMaxPooling and SpatialAveragePooling.  Printed text and defaults
-- as Torch7's, forward against tgl.conv2d / the pool ops with the bias
-- added explicitly and against small cases worked by hand, backward
-- against finite differences (float64), and a LeNet-shaped model that
-- runs forward/backward on a batch and learns a toy task with SGD.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff, fd = S.maxdiff, S.fd_at

local function flatget(a, i) return a:reshape(a:nelement()):get(i) end

describe('nn spatial', function()
  S.float64(11)

  it('prints as Torch7 and has its defaults', function()
    assert.equals('nn.SpatialConvolution(1 -> 20, 5x5)', tostring(nn.SpatialConvolution(1, 20, 5, 5)))
    assert.equals('nn.SpatialConvolution(3 -> 8, 3x5, 2,1)', tostring(nn.SpatialConvolution(3, 8, 3, 5, 2, 1)))
    assert.equals('nn.SpatialConvolution(3 -> 8, 3x3, 1,1, 1,0)',
                  tostring(nn.SpatialConvolution(3, 8, 3, 3, 1, 1, 1, 0)))
    assert.equals('nn.SpatialConvolution(3 -> 8, 3x3) without bias',
                  tostring(nn.SpatialConvolution(3, 8, 3, 3):noBias()))
    assert.equals('nn.SpatialMaxPooling(2x2, 2,2)', tostring(nn.SpatialMaxPooling(2, 2)))
    assert.equals('nn.SpatialMaxPooling(3x3, 2,1, 1,1)', tostring(nn.SpatialMaxPooling(3, 3, 2, 1, 1, 1)))
    -- average pooling's stride defaults to 1 (Torch7), max pooling's to the kernel
    assert.equals('nn.SpatialAveragePooling(2x2, 1,1)', tostring(nn.SpatialAveragePooling(2, 2)))
    assert.equals('nn.SpatialAveragePooling(3x3, 2,2, 1,1)',
                  tostring(nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1)))
    local avg = nn.SpatialAveragePooling(2, 2)
    assert.is_true(avg.count_include_pad)
    assert.is_false(avg.ceil_mode)
    assert.equals(avg, avg:setCountExcludePad())
    assert.is_false(avg.count_include_pad)
    local m = nn.Sequential():add(nn.SpatialConvolution(1, 20, 5, 5)):add(nn.SpatialMaxPooling(2, 2))
    assert.equals('nn.Sequential {\n  [input -> (1) -> (2) -> output]\n'
                  .. '  (1): nn.SpatialConvolution(1 -> 20, 5x5)\n  (2): nn.SpatialMaxPooling(2x2, 2,2)\n}',
                  tostring(m))
  end)

  it('SpatialConvolution: weight nOut x nIn x kH x kW, Torch7 init, noBias', function()
    local c = nn.SpatialConvolution(3, 4, 5, 2)
    assert.same({ 4, 3, 2, 5 }, c.weight:shape())
    assert.same({ 4, 3, 2, 5 }, c.gradWeight:shape())
    assert.same({ 4 }, c.bias:shape())
    assert.same({ 4 }, c.gradBias:shape())
    -- uniform in +-1/sqrt(5*2*3): all inside, not all equal
    local stdv = 1 / math.sqrt(30)
    assert.is_true(tgl.max(tgl.abs(c.weight)):get() <= stdv)
    assert.is_true(tgl.max(c.weight):get() - tgl.min(c.weight):get() > stdv)
    assert.is_true(tgl.max(tgl.abs(c.bias)):get() <= stdv)
    c:reset(0.01)   -- Torch7: a given stdv is scaled by sqrt(3)
    assert.is_true(tgl.max(tgl.abs(c.weight)):get() <= 0.01 * math.sqrt(3))
    assert.is_true(tgl.max(tgl.abs(c.weight)):get() > 0.01)
    assert.equals(0, tgl.sum(tgl.abs(c.gradWeight)):get())
    local w, g = c:noBias():parameters()
    assert.equals(1, #w)
    assert.equals(1, #g)
    assert.is_nil(c.bias)
    assert.is_nil(c.gradBias)
  end)

  it('SpatialConvolution forward: a hand case, and tgl.conv2d + bias (batch and one image)', function()
    local c = nn.SpatialConvolution(1, 1, 2, 2)
    c.weight:fill(1)
    c.bias:fill(0.5)
    local x = tgl.arange(1, 9):reshape(1, 1, 3, 3):astype('float64')
    -- windows of 1..9 summed, plus 0.5
    assert.same({ { { { 12.5, 16.5 }, { 24.5, 28.5 } } } }, c:forward(x):totable())
    assert.same({ { { 12.5, 16.5 }, { 24.5, 28.5 } } }, c:forward(x[1]):totable())

    c = nn.SpatialConvolution(3, 5, 3, 2, 2, 1, 1, 0)   -- kW 3, kH 2, dW 2, dH 1, padW 1
    local xb = tgl.randn(2, 3, 6, 7)
    local want = tgl.conv2d(xb, c.weight, { stride = { 1, 2 }, padding = { 0, 1 } })
                 + c.bias:reshape(1, 5, 1, 1)
    local out = c:forward(xb)
    assert.same({ 2, 5, 5, 4 }, out:shape())
    assert.is_true(maxdiff(out, want) < 1e-12)
    assert.equals(out, c.output)
    -- one image: (C, H, W) in, (O, Ho, Wo) out, the same numbers
    local one = c:forward(xb[2])
    assert.same({ 5, 5, 4 }, one:shape())
    assert.is_true(maxdiff(one, want[2]) < 1e-12)
    -- without bias: conv2d alone
    local b = c.bias
    c:noBias()
    assert.is_true(maxdiff(c:forward(xb), want - b:reshape(1, 5, 1, 1)) < 1e-12)
  end)

  it('pooling forward: hand cases and the pool ops, ceil/floor, count_include_pad', function()
    local x = tgl.arange(1, 16):reshape(1, 4, 4):astype('float64')
    local mp = nn.SpatialMaxPooling(2, 2)
    assert.same({ { { 6, 8 }, { 14, 16 } } }, mp:forward(x):totable())
    -- 3x3 stride 2 on 4x4: floor gives 1x1, ceil 2x2 (the last window
    -- clipped); the setter takes effect on the next forward
    local mp3 = nn.SpatialMaxPooling(3, 3, 2, 2)
    assert.same({ { { 11 } } }, mp3:forward(x):totable())
    assert.equals(mp3, mp3:ceil())
    assert.same({ { { 11, 12 }, { 15, 16 } } }, mp3:forward(x):totable())
    mp3:floor()
    assert.same({ 1, 1, 1 }, mp3:forward(x):shape())

    -- doc/symbolic.md's example: kernel 3, stride 2, padding 1, ceil
    local ap = nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1):ceil()
    local out = ap:forward(x)
    local want = { { 14 / 9, 30 / 9, 18 / 9 }, { 57 / 9, 99 / 9, 54 / 9 }, { 27 / 6, 45 / 6, 24 / 6 } }
    for i = 1, 3 do for j = 1, 3 do assert.near(want[i][j], out:get(1, i, j), 1e-12) end end
    -- excluding the padding: the corner window holds 1, 2, 5, 6
    ap:setCountExcludePad()
    assert.near(14 / 4, ap:forward(x):get(1, 1, 1), 1e-12)

    local xb = tgl.randn(3, 2, 7, 6)
    local m = nn.SpatialMaxPooling(3, 2, 2, 1, 1, 1):ceil()
    assert.is_true(maxdiff(m:forward(xb), tgl.max_pool2d(xb, { kernel = { 2, 3 }, stride = { 1, 2 },
                                                             padding = { 1, 1 }, ceil_mode = true })) == 0)
    local a = nn.SpatialAveragePooling(2, 3, 1, 2, 1, 0):setCountExcludePad()
    assert.is_true(maxdiff(a:forward(xb), tgl.avg_pool2d(xb, { kernel = { 3, 2 }, stride = { 2, 1 },
                                                             padding = { 0, 1 },
                                                             count_include_pad = false })) < 1e-12)
  end)

  it('ceil(), setCountExcludePad() and noBias() on a module inside a container change its next forward', function()
    local x = tgl.arange(1, 16):reshape(1, 1, 4, 4):astype('float64')
    local pool = nn.SpatialMaxPooling(3, 3, 2, 2)
    local m = nn.Sequential():add(pool)
    assert.same({ 1, 1, 1, 1 }, m:forward(x):shape())
    pool:ceil()
    assert.same({ { { { 11, 12 }, { 15, 16 } } } }, m:forward(x):totable())
    local avg = nn.SpatialAveragePooling(2, 2, 2, 2, 1, 1)
    m = nn.Sequential():add(avg)
    assert.equals(0.25, m:forward(x):get(1, 1, 1, 1))
    avg:setCountExcludePad()
    assert.equals(1, m:forward(x):get(1, 1, 1, 1))
    local c = nn.SpatialConvolution(1, 1, 1, 1)
    c.weight:fill(2)
    c.bias:fill(3)
    m = nn.Sequential():add(c)
    assert.equals(5, m:forward(x):get(1, 1, 1, 1))
    c:noBias()
    assert.equals(2, m:forward(x):get(1, 1, 1, 1))
    m:zeroGradParameters()
    m:backward(x, tgl.ones(1, 1, 4, 4))
    assert.equals(136, c.gradWeight:get(1, 1, 1, 1))
  end)

  -- L = sum(module(x) * gOut): backward gives dL/dx and adds dL/dW, dL/db.
  it('backward: gradInput, gradWeight, gradBias equal finite differences (float64)', function()
    local c = nn.SpatialConvolution(2, 3, 3, 2, 2, 1, 1, 1)
    local x = tgl.randn(2, 2, 5, 4)
    local gOut = tgl.randn(c:forward(x):shape())
    local function L() return tgl.sum(c:forward(x) * gOut):get() end
    c:zeroGradParameters()
    local gi = c:backward(x, gOut):clone()
    assert.same(x:shape(), gi:shape())
    for i = 1, x:nelement(), 3 do assert.near(fd(L, x, i), flatget(gi, i), 1e-7) end
    for i = 1, c.weight:nelement() do assert.near(fd(L, c.weight, i), flatget(c.gradWeight, i), 1e-7) end
    for i = 1, 3 do assert.near(fd(L, c.bias, i), c.gradBias:get(i), 1e-7) end
    -- the bias gradient is gOut summed over all but the plane axis
    assert.is_true(maxdiff(c.gradBias, tgl.sum(tgl.sum(tgl.sum(gOut, 4), 3), 1)) < 1e-12)

    -- one image (3-d) likewise
    local x1 = tgl.randn(2, 4, 4)
    local g1 = tgl.randn(c:forward(x1):shape())
    assert.same({ 3, 5, 2 }, g1:shape())
    local function L1() return tgl.sum(c:forward(x1) * g1):get() end
    c:zeroGradParameters()
    local gi1 = c:backward(x1, g1):clone()
    for i = 1, x1:nelement(), 2 do assert.near(fd(L1, x1, i), flatget(gi1, i), 1e-7) end
    for i = 1, c.weight:nelement(), 2 do assert.near(fd(L1, c.weight, i), flatget(c.gradWeight, i), 1e-7) end

    -- the pools' gradInput (random inputs: no ties in a window)
    for _, p in ipairs { nn.SpatialMaxPooling(3, 2, 2, 1, 1, 1):ceil(),
                         nn.SpatialAveragePooling(3, 3, 2, 2, 1, 1):ceil(),
                         nn.SpatialAveragePooling(2, 2, 1, 1, 1, 1):setCountExcludePad() } do
      local xp = tgl.randn(2, 2, 5, 6)
      local gp = tgl.randn(p:forward(xp):shape())
      local function Lp() return tgl.sum(p:forward(xp) * gp):get() end
      local gip = p:backward(xp, gp):clone()
      for i = 1, xp:nelement(), 5 do assert.near(fd(Lp, xp, i), flatget(gip, i), 1e-7) end
    end
  end)

  local function lenet()
    return nn.Sequential()
      :add(nn.SpatialConvolution(1, 20, 5, 5)):add(nn.SpatialMaxPooling(2, 2))
      :add(nn.SpatialConvolution(20, 50, 5, 5)):add(nn.SpatialMaxPooling(2, 2))
      :add(nn.View(800)):add(nn.Linear(800, 500)):add(nn.Tanh())
      :add(nn.Linear(500, 10)):add(nn.LogSoftMax())
  end

  it('a LeNet-shaped model runs forward/backward on a batch and learns a toy task', function()
    local model = lenet()
    local crit = nn.ClassNLLCriterion()
    -- toy task: class 1 when the bright square is in the top half, 2 when
    -- in the bottom half
    local x = tgl.randn(4, 1, 28, 28) * 0.1
    local labels = { 1, 2, 1, 2 }
    for n = 1, 4 do
      local r0 = labels[n] == 1 and 3 or 17
      x[{ n, 1, { r0, r0 + 7 }, { 5 + 3 * n, 12 + 3 * n } }]:fill(1)
    end
    local y = tgl.array(labels, 'int64')
    local out = model:forward(x)
    assert.same({ 4, 10 }, out:shape())
    assert.same({ 4, 20, 24, 24 }, model.modules[1].output:shape())
    assert.same({ 4, 50, 4, 4 }, model.modules[4].output:shape())
    -- rows are log-probabilities
    for n = 1, 4 do assert.near(1, tgl.sum(tgl.exp(out[n])):get(), 1e-12) end
    local first = crit:forward(out, y)
    for _ = 1, 5 do
      model:zeroGradParameters()
      local o = model:forward(x)
      crit:forward(o, y)
      local gi = model:backward(x, crit:backward(o, y))
      assert.same({ 4, 1, 28, 28 }, gi:shape())
      model:updateParameters(0.05)
    end
    local last = crit:forward(model:forward(x), y)
    -- 5 steps from ~log(10): the loss falls well below its start
    assert.is_true(last < 0.5 * first, ('loss %g -> %g'):format(first, last))
    -- the loop compiles nothing once it has run (here: 5 rounds already)
    local before = nn.compiled_count
    model:zeroGradParameters()
    model:backward(x, crit:backward(model:forward(x), y))
    model:updateParameters(0.05)
    assert.equals(before, nn.compiled_count)
  end)

  it('errors name the module, the argument and the user line', function()
    local ok, err = pcall(nn.SpatialConvolution, 3, 0, 5, 5)
    assert.is_false(ok)
    assert.matches('nn_spatial_spec.lua:%d+: nn.SpatialConvolution: nOutputPlane must be an integer >= 1, got 0', err)
    ok, err = pcall(nn.SpatialMaxPooling, 2, 2, 2, 2, 2, 0)
    assert.is_false(ok)
    assert.matches("nn.SpatialMaxPooling: padding 2x0 must be at most half the kernel 2x2 %(Torch7's rule%)", err)
    ok, err = pcall(nn.SpatialAveragePooling, 2, 2.5)
    assert.is_false(ok)
    assert.matches('nn.SpatialAveragePooling: kH must be an integer >= 1, got 2.5', err)
    local c = nn.SpatialConvolution(3, 4, 3, 3)
    ok, err = pcall(function() return c:forward(tgl.randn(3, 5)) end)
    assert.is_false(ok)
    assert.matches('nn_spatial_spec.lua:%d+: .*nn.SpatialConvolution%(3 %-> 4, 3x3%): expected a 3%-d %(C, H, W%) '
                   .. 'or 4%-d %(N, C, H, W%) input, got a 2%-d input', err)
    -- 2 channels for a 3-plane convolution: found when it runs, the module named
    local m = nn.Sequential():add(nn.SpatialConvolution(3, 4, 3, 3)):add(nn.Tanh())
    local w0 = m.modules[1].weight:clone()
    ok, err = pcall(function() return m:forward(tgl.randn(1, 2, 5, 5)) end)
    assert.is_false(ok)
    assert.matches('nn_spatial_spec.lua:%d+: nn.Sequential:forward: modules%[1%] nn.SpatialConvolution%(3 %-> 4, 3x3%) '
                   .. 'fails on this input %(float64%(1x2x5x5%)%): .*channels', err)
    assert.equals(0, maxdiff(w0, m.modules[1].weight))
  end)
end)
