-- spec/nn_more_spec.lua — lua/nn beyond the core: the criterions
-- BCECriterion, AbsCriterion, SmoothL1Criterion and the layers
-- MulConstant, AddConstant, LeakyReLU, ELU, SoftPlus, Abs, Dropout.
-- Values against explicit computations on the host (Torch7's formulas and
-- defaults), gradInput against finite differences in float64, Dropout's
-- mean, scale and evaluate() identity.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff, fd = S.maxdiff, S.fd

-- An array from a Lua function of each element of a (host computation).
local function map(a, fn)
  local flat = a:reshape(a:nelement())
  local out = tgl.zeros(a:nelement()):astype('float64')
  for i = 1, a:nelement() do out:set(fn(flat:get(i), i), i) end
  return out:reshape(a:shape())
end

describe('nn (more modules and criterions)', function()
  S.float64(11)

  -- a criterion's forward against want(x_i, t_i) summed (and averaged),
  -- its backward against finite differences of its forward
  local function check_criterion(crit, x, t, term, n)
    local want = 0
    local xf, tf = x:reshape(x:nelement()), t:reshape(t:nelement())
    for i = 1, x:nelement() do want = want + term(xf:get(i), tf:get(i), i) end
    if crit.sizeAverage then want = want / n end
    assert.near(want, crit:forward(x, t), 1e-12)
    assert.near(want, crit.output, 1e-12)
    local gi = crit:backward(x, t)
    assert.same(x:shape(), gi:shape())
    assert.is_true(maxdiff(gi, fd(function() return crit:forward(x, t) end, x)) < 1e-6)
  end

  it('BCECriterion: Torch7 loss with eps 1e-12, sizeAverage, weights (full and per column)', function()
    local x = tgl.rand(3, 4, { low = 0.05, high = 0.95 })
    local t = tgl.lt(tgl.rand(3, 4), 0.5):astype('float64')
    local function term(p, y) return -(y * math.log(p + 1e-12) + (1 - y) * math.log(1 - p + 1e-12)) end
    check_criterion(nn.BCECriterion(), x, t, term, 12)
    local c = nn.BCECriterion(nil, false)
    assert.is_false(c.sizeAverage)
    check_criterion(c, x, t, term, 12)
    local w = tgl.rand(4, { low = 0.5, high = 2 })
    check_criterion(nn.BCECriterion(w), x, t, function(p, y, i) return w:get((i - 1) % 4 + 1) * term(p, y) end, 12)
    local wf = tgl.rand(3, 4, { low = 0.5, high = 2 })
    local wflat = wf:reshape(12)
    local cw = nn.BCECriterion(wf)
    check_criterion(cw, x, t, function(p, y, i) return wflat:get(i) * term(p, y) end, 12)
    -- the weights are borrowed: an in-place write changes the next loss
    wf:copy(wf * 2)
    check_criterion(cw, x, t, function(p, y, i) return wflat:get(i) * term(p, y) end, 12)
    assert.has_error(function() nn.BCECriterion(tgl.ones(5)):forward(x, t) end)
    local ok, err = pcall(function() nn.BCECriterion(tgl.ones(5)):forward(x, t) end)
    assert.is_false(ok)
    assert.matches('nn_more_spec.lua:%d+: nn.BCECriterion:forward: weights of 5 elements do not fit an input of shape 3x4', err)
  end)

  it('AbsCriterion: sum |x - t| (averaged), gradient +1 where x == t as Torch7', function()
    local x, t = tgl.randn(2, 5), tgl.randn(2, 5)
    local function term(a, b) return math.abs(a - b) end
    check_criterion(nn.AbsCriterion(), x, t, term, 10)
    check_criterion(nn.AbsCriterion(false), x, t, term, 10)
    local g = nn.AbsCriterion():backward(tgl.array({ 1, 2, 3 }), tgl.array({ 1, 3, 2 }))
    assert.same({ 1 / 3, -1 / 3, 1 / 3 }, g:totable())
  end)

  it('SmoothL1Criterion: 0.5 z^2 below 1, z - 0.5 above (averaged)', function()
    local x, t = tgl.randn(3, 3) * 2, tgl.randn(3, 3)
    local function term(a, b)
      local z = math.abs(a - b)
      return z < 1 and 0.5 * z * z or z - 0.5
    end
    check_criterion(nn.SmoothL1Criterion(), x, t, term, 9)
    check_criterion(nn.SmoothL1Criterion(false), x, t, term, 9)
    -- both regions are exercised
    local zs = tgl.abs(x - t)
    assert.is_true(tgl.min(zs):get() < 1 and tgl.max(zs):get() > 1)
    local g = nn.SmoothL1Criterion(false):backward(tgl.array({ 0.5, 3, -4 }), tgl.array({ 0, 0, 0 }))
    assert.same({ 0.5, 1, -1 }, g:totable())
  end)

  -- a layer's forward against fn elementwise, backward against finite
  -- differences, in a Sequential with a Linear (so the gradient flows on)
  local function check_layer(m, x, fn)
    local out = m:forward(x)
    assert.is_true(maxdiff(out, map(x, fn)) < 1e-12)
    local g = tgl.randn(unpack(x:shape()))
    local gi = m:backward(x, g)
    local want = fd(function() return tgl.sum(m:forward(x) * g):get() end, x)
    assert.is_true(maxdiff(gi, want) < 1e-6)
    local seq = nn.Sequential():add(nn.Linear(x:size(2), 3)):add(m)
    seq:zeroGradParameters()
    local g3 = tgl.randn(x:size(1), 3)
    seq:backward(x, g3)
    local l = seq.modules[1]
    local wantW = fd(function() return tgl.sum(seq:forward(x) * g3):get() end, l.weight)
    assert.is_true(maxdiff(l.gradWeight, wantW) < 1e-6)
  end

  it('MulConstant and AddConstant', function()
    local x = tgl.randn(4, 3)
    check_layer(nn.MulConstant(-2.5), x, function(v) return v * -2.5 end)
    check_layer(nn.AddConstant(1.5), x, function(v) return v + 1.5 end)
    local ok, err = pcall(function() return nn.MulConstant('a') end)
    assert.is_false(ok)
    assert.matches('nn.MulConstant: the constant must be a number, got string', err)
  end)

  it('LeakyReLU (negval 1/100 by default), ELU (alpha 1), Abs', function()
    local x = tgl.randn(4, 3)
    assert.equals(1 / 100, nn.LeakyReLU().negval)
    check_layer(nn.LeakyReLU(), x, function(v) return v > 0 and v or v / 100 end)
    check_layer(nn.LeakyReLU(0.3), x, function(v) return v > 0 and v or 0.3 * v end)
    assert.equals(1, nn.ELU().alpha)
    check_layer(nn.ELU(), x, function(v) return v > 0 and v or math.exp(v) - 1 end)
    check_layer(nn.ELU(0.7), x, function(v) return v > 0 and v or 0.7 * (math.exp(v) - 1) end)
    check_layer(nn.Abs(), x, math.abs)
    -- gradients at 0 as Torch7's: LeakyReLU negval, ELU alpha, Abs +1
    local z, one = tgl.zeros(2), tgl.ones(2)
    assert.same({ 0.3, 0.3 }, nn.LeakyReLU(0.3):backward(z, one):totable())
    assert.same({ 0.7, 0.7 }, nn.ELU(0.7):backward(z, one):totable())
    assert.same({ 1, 1 }, nn.Abs():backward(z, one):totable())
  end)

  it('SoftPlus: log(1 + exp(beta x)) / beta, linear above threshold 20 (finite gradients there)', function()
    local m = nn.SoftPlus()
    assert.equals(1, m.beta)
    assert.equals(20, m.threshold)
    local x = tgl.randn(4, 3) * 3
    check_layer(m, x, function(v) return math.log(1 + math.exp(v)) end)
    check_layer(nn.SoftPlus(2), x, function(v)
      return 2 * v > 20 and v or math.log(1 + math.exp(2 * v)) / 2 end)
    local big = tgl.array({ 15, 25, 800 })
    assert.same({ 15, 25, 800 }, nn.SoftPlus(2):forward(big):totable())
    local g = nn.SoftPlus(2):backward(big, tgl.ones(3)):totable()
    assert.near(1 / (1 + math.exp(-30)), g[1], 1e-12)
    assert.same({ 1, 1 }, { g[2], g[3] })
  end)

  it('Dropout: scales kept units by 1/(1-p) at training, mean kept, new noise each forward, identity in evaluate()', function()
    local m = nn.Dropout()
    assert.equals(0.5, m.p)
    assert.equals('nn.Dropout(0.500000)', tostring(m))
    local d = nn.Dropout(0.25)
    local x = tgl.ones(200, 50)
    local y = d:forward(x)
    -- each value is 0 or 1/(1-p)
    local zeros = tgl.sum(tgl.eq(y, 0)):get()
    local kept = tgl.sum(tgl.eq(y, 1 / 0.75)):get()
    assert.equals(10000, zeros + kept)
    assert.is_true(math.abs(zeros / 10000 - 0.25) < 0.03)
    assert.is_true(math.abs(tgl.mean(y):get() - 1) < 0.05)
    -- backward uses the last forward's noise
    local g = tgl.randn(200, 50)
    assert.is_true(maxdiff(d:backward(x, g), g * d.noise) == 0)
    assert.is_true(maxdiff(y, d.noise) == 0)
    local y2 = d:forward(x)
    assert.is_true(maxdiff(y, y2) > 0)
    -- same seed, same noise
    tgl.manual_seed(3); local a = d:forward(x):clone()
    tgl.manual_seed(3); local b = d:forward(x)
    assert.equals(0, maxdiff(a, b))
    -- evaluate(): the identity, its gradient too; training() again drops
    local seq = nn.Sequential():add(nn.Linear(50, 4)):add(d)
    local xr = tgl.randn(7, 50)
    seq:evaluate()
    assert.is_false(d.train)
    local lin = seq.modules[1]
    assert.is_true(maxdiff(seq:forward(xr), xr:dot(lin.weight:T()) + lin.bias) < 1e-12)
    assert.is_true(maxdiff(d:forward(xr), xr) == 0)
    assert.is_true(maxdiff(d:backward(xr, xr), xr) == 0)
    seq:training()
    local yt = seq:forward(tgl.randn(300, 50))
    assert.is_true(tgl.sum(tgl.eq(yt, 0)):get() > 100)
    local ok, err = pcall(function() return nn.Dropout(1) end)
    assert.is_false(ok)
    assert.matches('nn.Dropout: illegal percentage 1, must be 0 <= p < 1', err)
  end)
end)
