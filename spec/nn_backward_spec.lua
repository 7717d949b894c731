-- spec/nn_backward_spec.lua — how nn's backward runs: after a forward on
-- the same input array it reads that forward's outputs (as Torch7's
-- backward reads the modules' output fields) instead of computing them
-- again; otherwise it computes them.  Both give the same gradients; the
-- scale-1 form (gemm accumulating into gradWeight) and the general scale
-- agree with each other and with explicit formulas.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')
local maxdiff = S.maxdiff

local function mlp()
  return nn.Sequential():add(nn.Linear(5, 7)):add(nn.Tanh()):add(nn.Linear(7, 3)):add(nn.LogSoftMax())
end

describe('nn backward', function()
  S.float64(11)

  -- gradInput and gradients of the MLP, explicitly
  local function explicit(m, x, g, scale)
    local l1, l2 = m.modules[1], m.modules[3]
    local h = tgl.tanh(x:dot(l1.weight:T()) + l1.bias)
    local z = h:dot(l2.weight:T()) + l2.bias
    local y = tgl.log_softmax(z)
    local gz = g - tgl.exp(y) * tgl.sum(g, 2, { keepdims = true })
    local gh = gz:dot(l2.weight) * (1 - h * h)
    return { gi = gh:dot(l1.weight), gW1 = gh:T():dot(x) * scale, gb1 = tgl.sum(gh, 1) * scale,
             gW2 = gz:T():dot(h) * scale, gb2 = tgl.sum(gz, 1) * scale, gh = gh }
  end

  it('after forward on the same array, reads its outputs; same values as computing them again', function()
    local m = mlp()
    local x, g = tgl.randn(4, 5), tgl.randn(4, 3)
    for _, scale in ipairs({ 1, 0.25 }) do
      m:forward(x)
      m:zeroGradParameters()
      local n = nn.compiled_count
      local gi = m:backward(x, g, scale):clone()
      local want = explicit(m, x, g, scale)
      assert.is_true(maxdiff(gi, want.gi) < 1e-12)
      assert.is_true(maxdiff(m.modules[1].gradWeight, want.gW1) < 1e-12)
      assert.is_true(maxdiff(m.modules[1].gradBias, want.gb1) < 1e-12)
      assert.is_true(maxdiff(m.modules[3].gradWeight, want.gW2) < 1e-12)
      assert.is_true(maxdiff(m.modules[3].gradBias, want.gb2) < 1e-12)
      assert.is_true(maxdiff(m.modules[2].gradInput, want.gh) < 1e-12)
      -- the function that reads the forward's outputs: built once, reused
      assert.equals(n + 1, nn.compiled_count)
      m:forward(x); m:backward(x, g, scale)
      assert.equals(n + 1, nn.compiled_count)
      -- another array with the same values: no forward on it, so the
      -- outputs are computed again; the same gradients
      m:zeroGradParameters()
      local gi2 = m:backward(x:clone(), g, scale)
      assert.is_true(maxdiff(gi2, gi) < 1e-13)
      assert.is_true(maxdiff(m.modules[1].gradWeight, want.gW1) < 1e-12)
      assert.equals(n + 2, nn.compiled_count)
    end
  end)

  it('a forward on another input in between: backward computes the outputs for its own input', function()
    local m = mlp()
    local x, x2, g = tgl.randn(4, 5), tgl.randn(4, 5), tgl.randn(4, 3)
    m:forward(x)
    m:forward(x2)
    m:zeroGradParameters()
    local gi = m:backward(x, g)
    local want = explicit(m, x, g, 1)
    assert.is_true(maxdiff(gi, want.gi) < 1e-12)
    assert.is_true(maxdiff(m.modules[1].gradWeight, want.gW1) < 1e-12)
    -- evaluate() after forward changes the function: computed again
    local d = nn.Sequential():add(nn.Linear(5, 5)):add(nn.Dropout(0.5))
    d:forward(x)
    d:evaluate()
    d:zeroGradParameters()
    local gd = d:backward(x, tgl.ones(4, 5))
    assert.is_true(maxdiff(gd, tgl.ones(4, 5):dot(d.modules[1].weight)) < 1e-12)
  end)

  it('updateGradInput then accGradParameters after one forward, as Torch7 scripts call them', function()
    local m = mlp()
    local x, g = tgl.randn(3, 5), tgl.randn(3, 3)
    m:forward(x)
    m:zeroGradParameters()
    local gi = m:updateGradInput(x, g)
    m:accGradParameters(x, g, 2)
    local want = explicit(m, x, g, 2)
    assert.is_true(maxdiff(gi, want.gi) < 1e-12)
    assert.is_true(maxdiff(m.modules[1].gradWeight, want.gW1) < 1e-12)
    assert.is_true(maxdiff(m.modules[3].gradBias, want.gb2) < 1e-12)
  end)

  it('Dropout: backward after forward uses that forward\'s noise', function()
    local m = nn.Sequential():add(nn.Linear(5, 6)):add(nn.Dropout(0.5))
    local x = tgl.randn(4, 5)
    m:forward(x)
    local noise = m.modules[2].noise:clone()
    local gi = m:backward(x, tgl.ones(4, 6))
    assert.is_true(maxdiff(gi, noise:dot(m.modules[1].weight)) < 1e-12)
  end)
end)
