-- nn_eager_spec.lua — the eager nn path's memory shortcuts hold their
-- values: zeroGradParameters' memsets (plain modules, getParameters'
-- flat arrays, shared gradients, a strided gradient, NaN), and the
-- deferred in-place update into a borrowed variable (nn's parameters)
-- when another array of the same call overlaps it (an input that is the
-- variable's own array, or a view of the same flat array): the result
-- must be the one computed from the old values; updateParameters (the
-- axpy form over column views, and the elementwise form it falls back
-- to for shared and strided weights).
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'

dofile('spec/support.lua').with_config { floatX = 'float64', compile = 'tcc' }

local function flat(a)
  local v = a:contiguous():reshape(-1)
  local t = {}
  for i = 1, v:nelement() do t[i] = v:get(i) end
  return t
end

local function assert_close(want, got, what, tol)
  tol = tol or 1e-12
  assert.same(want:shape(), got:shape(), what .. ': shape')
  local w, g = flat(want), flat(got)
  for i = 1, #w do
    if not (math.abs(w[i] - g[i]) <= tol * (1 + math.abs(w[i]))) then
      error(('%s: element %d is %.17g, expected %.17g'):format(what, i, g[i], w[i]), 2)
    end
  end
end

local function all_zero(a, what)
  for i, v in ipairs(flat(a)) do
    if v ~= 0 then error(('%s: element %d is %.17g, expected 0'):format(what, i, v), 2) end
  end
end

local function mlp()
  return nn.Sequential():add(nn.Linear(5, 4)):add(nn.Tanh()):add(nn.Linear(4, 3))
end

local function train_grads(m, x)
  m:zeroGradParameters()
  m:forward(x)
  m:backward(x, tgl.randn(x:shape()[1], 3))
end

describe('zeroGradParameters', function()
  it('zeroes every gradient of a plain model and leaves the weights', function()
    local m = mlp()
    local x = tgl.randn(2, 5)
    train_grads(m, x)
    local w = m.modules[1].weight:clone()
    m:zeroGradParameters()
    for _, i in ipairs({ 1, 3 }) do
      all_zero(m.modules[i].gradWeight, 'modules[' .. i .. '].gradWeight')
      all_zero(m.modules[i].gradBias, 'modules[' .. i .. '].gradBias')
    end
    assert_close(w, m.modules[1].weight, 'weight untouched', 0)
  end)

  it('zeroes the flat gradient of getParameters, NaN included, and nothing else', function()
    local m = mlp()
    local p, g = m:getParameters()
    local x = tgl.randn(3, 5)
    train_grads(m, x)
    g:set(0 / 0, 1)
    g:set(0 / 0, g:nelement())
    local before = p:clone()
    m:zeroGradParameters()
    all_zero(g, 'gradParameters')
    assert_close(before, p, 'parameters untouched', 0)
    -- gradients accumulate from 0 again: one backward equals the
    -- gradient computed fresh on a copy
    train_grads(m, x)
    assert.is_true(flat(g)[1] == flat(g)[1], 'not NaN after a backward')
  end)

  it('zeroes a shared gradient once and a strided (transposed) gradient', function()
    local a = nn.Linear(3, 3)
    local b = a:clone('weight', 'bias', 'gradWeight', 'gradBias')
    local m = nn.Sequential():add(a):add(b)
    local x = tgl.randn(2, 3)
    m:forward(x)
    m:backward(x, tgl.randn(2, 3))
    -- a gradient the user replaced with a transposed (strided) view
    local c = nn.Linear(4, 4)
    c.gradWeight = tgl.randn(4, 4):T()
    m:add(c)
    m:zeroGradParameters()
    all_zero(a.gradWeight, 'shared gradWeight')
    all_zero(b.gradBias, 'shared gradBias')
    all_zero(c.gradWeight, 'strided gradWeight')
    all_zero(c.gradBias, 'gradBias')
  end)
end)

describe('a deferred in-place update into a borrowed variable', function()
  -- a variable borrowing a host array, made as nn makes its parameters'
  -- (on the cpu device also under TGL_DEVICE=sim, where a function
  -- copies it in and writes its update back)
  local function borrowed(arr, name)
    local dev = tgl.config.device
    tgl.config.device = 'cpu'
    local v = tgl.shared(arr, name, { borrow = true })
    tgl.config.device = dev
    return v
  end

  -- W <- W + a . b, the gemm accumulating into W's buffer; W borrows arr
  -- (the user holds arr, as nn's modules hold their parameters).
  local function build(W)
    local a = tgl.tensor { dtype = 'float64', ndim = 2, name = 'a' }
    local b = tgl.tensor { dtype = 'float64', ndim = 2, name = 'b' }
    return tgl.compile { inputs = { a, b }, updates = { { W, W + tgl.dot(a, b) } } }
  end

  it('is right when the inputs are other arrays, and the borrowed array sees it', function()
    local arr = tgl.randn(3, 3)
    local W = borrowed(arr, 'W')
    local f = build(W)
    local a, b = tgl.randn(3, 2), tgl.randn(2, 3)
    local want = arr + a:dot(b)
    f(a, b)
    assert_close(want, arr, 'W')
    want = arr + a:dot(b)
    f(a, b)
    assert_close(want, arr, 'W after a second call')
  end)

  it('reads the old values when an input is the variable\'s own array', function()
    local arr = tgl.randn(3, 3)
    local W = borrowed(arr, 'W')
    local f = build(W)
    local a = tgl.randn(3, 3)
    for call = 1, 3 do
      local want = arr + a:dot(arr)
      f(a, arr)
      assert_close(want, arr, 'W, call ' .. call)
      want = arr + arr:dot(a)
      f(arr, a)
      assert_close(want, arr, 'W (first factor), call ' .. call)
    end
  end)

  it('reads the old values when an input is a view overlapping the variable', function()
    -- two variables over two halves of one flat array (getParameters'
    -- layout); the second update reads a view of the first's memory
    local flatarr = tgl.randn(18)
    local w1 = flatarr[{ { 1, 9 } }]:reshape({ 3, 3 })
    local w2 = flatarr[{ { 10, 18 } }]:reshape({ 3, 3 })
    local W1 = borrowed(w1, 'W1')
    local W2 = borrowed(w2, 'W2')
    local a = tgl.tensor { dtype = 'float64', ndim = 2, name = 'a' }
    local b = tgl.tensor { dtype = 'float64', ndim = 2, name = 'b' }
    local f = tgl.compile { inputs = { a, b },
                            updates = { { W1, W1 + tgl.dot(a, a) }, { W2, W2 + tgl.dot(a, b) } } }
    local av = tgl.randn(3, 3)
    for call = 1, 3 do
      local view = flatarr[{ { 1, 9 } }]:reshape({ 3, 3 })   -- w1's memory
      local want1, want2 = w1 + av:dot(av), w2 + av:dot(view)
      f(av, view)
      assert_close(want1, w1, 'W1, call ' .. call)
      assert_close(want2, w2, 'W2, call ' .. call)
    end
  end)

  it('gives nn the same gradients with and without getParameters (batch 1 and 4)', function()
    for _, n in ipairs({ 1, 4 }) do
      local m1 = mlp()
      local m2 = m1:clone()
      m2:getParameters()
      local x = tgl.randn(n, 5)
      local go = tgl.randn(n, 3)
      for step = 1, 3 do
        for _, m in ipairs({ m1, m2 }) do
          m:forward(x)
          m:backward(x, go)
        end
        for _, i in ipairs({ 1, 3 }) do
          assert_close(m1.modules[i].gradWeight, m2.modules[i].gradWeight,
                       ('batch %d step %d modules[%d].gradWeight'):format(n, step, i))
          assert_close(m1.modules[i].gradBias, m2.modules[i].gradBias,
                       ('batch %d step %d modules[%d].gradBias'):format(n, step, i))
        end
      end
      -- and the accumulation is the sum of 3 equal gradients
      local m3 = m1:clone()
      m3:zeroGradParameters()
      m3:forward(x)
      m3:backward(x, go)
      assert_close(m3.modules[1].gradWeight * 3, m1.modules[1].gradWeight, 'three backwards', 1e-10)
    end
  end)
end)

describe('updateParameters', function()
  -- every weight w - lr * (its gradients' sum), as computed here
  local function check(m, lr, what)
    local w, g = m:parameters()
    local want, seen = {}, {}
    for i, a in ipairs(w) do
      if not seen[a] then seen[a] = { a = a, want = a:clone() } end
      seen[a].want = seen[a].want - g[i] * lr
    end
    for _, s in pairs(seen) do want[#want + 1] = s end
    m:updateParameters(lr)
    for i, s in ipairs(want) do assert_close(s.want, s.a, what .. ': weight ' .. i) end
  end

  it('steps a plain model, a getParameters model and its flat array', function()
    for _, flatten in ipairs({ false, true }) do
      local m = mlp()
      local p = flatten and m:getParameters() or nil
      local x = tgl.randn(2, 5)
      for step = 1, 3 do
        train_grads(m, x)
        local before = p and p:clone()
        check(m, 0.1 * step, ('getParameters %s step %d'):format(tostring(flatten), step))
        if p then
          -- the flat array moved by -lr * the flat gradient
          assert.is_true(tgl.max(tgl.abs(p - before)):get() > 0, 'flat parameters moved')
        end
      end
    end
  end)

  it('steps a shared weight once per holder and a strided weight', function()
    local a = nn.Linear(3, 3)
    local b = a:clone('weight', 'bias')       -- shared weights, own gradients
    local c = nn.Linear(3, 3)
    c.weight = tgl.randn(3, 3):T()             -- a strided weight
    local m = nn.Sequential():add(a):add(b):add(c)
    local x = tgl.randn(2, 3)
    m:zeroGradParameters()
    m:forward(x)
    m:backward(x, tgl.randn(2, 3))
    check(m, 0.05, 'shared and strided')
    check(m, 0.05, 'a second step')
  end)

  it('steps a weight that torch\'s resize moved to new memory', function()
    require 'torch'
    local m = nn.Linear(3, 3)
    local x = tgl.randn(2, 3)
    m:zeroGradParameters()
    m:forward(x)
    m:backward(x, tgl.randn(2, 3))
    check(m, 0.1, 'first step')
    m.weight:resize(10)      -- another count: new memory
    m.weight:resize(3, 3)    -- and again
    check(m, 0.1, 'after the resizes')
  end)

  it('steps float32 parameters', function()
    local m = mlp():float()
    m:getParameters()
    local x = tgl.randn(1, 5):astype('float32')
    m:zeroGradParameters()
    m:forward(x)
    m:backward(x, tgl.randn(1, 3):astype('float32'))
    local w, g = m.modules[1].weight:clone(), m.modules[1].gradWeight
    local want = w - g * 0.5
    m:updateParameters(0.5)
    assert_close(want, m.modules[1].weight, 'float32 weight', 1e-6)
  end)
end)
