-- spec/nn_optim_spec.lua — nn.optim (sgd, adam, rmsprop, adagrad),
-- nn.compile's training step and Torch7's closure API `require 'optim'`.
-- Each optimiser runs 3 steps against its formula computed element by
-- element on the host in float64 (Lua numbers: momentum, dampening,
-- Nesterov, weight decay, learning-rate decay, Adam's bias correction,
-- rmsprop's initial mean); nn.compile's step against the eager
-- forward/backward/updateParameters loop; the errors (what and where)
-- and that a failed step changes nothing.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local optim = require 'optim'
local S = dofile('spec/support.lua')
local maxdiff, next_line, labels, copy_params = S.maxdiff, S.next_line, S.labels, S.copy_params
local flat_table = S.flat   -- an array's elements as a flat Lua table

-- The reference: one step of optimiser name on Lua tables x (updated) and
-- g (the gradient), with state st (a Lua table, as Torch7's), in float64.
local REF = {}
function REF.sgd(c, st, x, g)
  local lr, lrd, wd = c.learningRate or 1e-3, c.learningRateDecay or 0, c.weightDecay or 0
  local mom = c.momentum or 0
  local damp = c.dampening or mom
  local n = st.evalCounter or 0
  local d = {}
  for i = 1, #x do d[i] = g[i] + wd * x[i] end
  if mom ~= 0 then
    if not st.dfdx then
      st.dfdx = {}
      for i = 1, #x do st.dfdx[i] = d[i] end
    else
      for i = 1, #x do st.dfdx[i] = mom * st.dfdx[i] + (1 - damp) * d[i] end
    end
    for i = 1, #x do d[i] = c.nesterov and d[i] + mom * st.dfdx[i] or st.dfdx[i] end
  end
  local clr = lr / (1 + n * lrd)
  for i = 1, #x do x[i] = x[i] - clr * d[i] end
  st.evalCounter = n + 1
end
function REF.adam(c, st, x, g)
  local lr, lrd, wd = c.learningRate or 1e-3, c.learningRateDecay or 0, c.weightDecay or 0
  local b1, b2, eps = c.beta1 or 0.9, c.beta2 or 0.999, c.epsilon or 1e-8
  st.t = st.t or 0
  st.m = st.m or {}
  st.v = st.v or {}
  local clr = lr / (1 + st.t * lrd)
  st.t = st.t + 1
  local step = clr * math.sqrt(1 - b2 ^ st.t) / (1 - b1 ^ st.t)
  for i = 1, #x do
    local d = g[i] + wd * x[i]
    st.m[i] = b1 * (st.m[i] or 0) + (1 - b1) * d
    st.v[i] = b2 * (st.v[i] or 0) + (1 - b2) * d * d
    x[i] = x[i] - step * st.m[i] / (math.sqrt(st.v[i]) + eps)
  end
end
function REF.rmsprop(c, st, x, g)
  local lr, alpha, eps, wd = c.learningRate or 1e-2, c.alpha or 0.99, c.epsilon or 1e-8, c.weightDecay or 0
  st.m = st.m or {}
  for i = 1, #x do
    local d = g[i] + wd * x[i]
    st.m[i] = alpha * (st.m[i] or c.initialMean or 0) + (1 - alpha) * d * d
    x[i] = x[i] - lr * d / (math.sqrt(st.m[i]) + eps)
  end
end
function REF.adagrad(c, st, x, g)
  local lr, lrd, wd = c.learningRate or 1e-3, c.learningRateDecay or 0, c.weightDecay or 0
  local n = st.evalCounter or 0
  st.paramVariance = st.paramVariance or {}
  local clr = lr / (1 + n * lrd)
  for i = 1, #x do
    local d = g[i] + wd * x[i]
    st.paramVariance[i] = (st.paramVariance[i] or 0) + d * d
    x[i] = x[i] - clr * d / (math.sqrt(st.paramVariance[i]) + 1e-10)
  end
  st.evalCounter = n + 1
end

-- The configurations every optimiser is checked with.
local CASES = {
  { 'sgd', { learningRate = 0.1 } },
  { 'sgd', { lr = 0.05, learningRateDecay = 0.3, weightDecay = 0.01 } },
  { 'sgd', { learningRate = 0.1, momentum = 0.9 } },                        -- dampening = momentum
  { 'sgd', { learningRate = 0.1, momentum = 0.8, dampening = 0.1, weightDecay = 0.05 } },
  { 'sgd', { learningRate = 0.1, momentum = 0.9, dampening = 0, nesterov = true, learningRateDecay = 0.5 } },
  { 'adam', { learningRate = 0.01 } },
  { 'adam', { learningRate = 0.02, learningRateDecay = 0.2, beta1 = 0.8, beta2 = 0.9, epsilon = 1e-4,
              weightDecay = 0.1 } },
  { 'rmsprop', { learningRate = 0.01 } },
  { 'rmsprop', { learningRate = 0.02, alpha = 0.9, epsilon = 1e-3, weightDecay = 0.1, initialMean = 0.5 } },
  { 'adagrad', { learningRate = 0.1 } },
  { 'adagrad', { learningRate = 0.1, learningRateDecay = 0.4, weightDecay = 0.2 } },
}

local function case_name(c)
  local keys = {}
  for k, v in pairs(c[2]) do keys[#keys + 1] = k .. '=' .. tostring(v) end
  table.sort(keys)
  return c[1] .. '{' .. table.concat(keys, ', ') .. '}'
end

local function copy(t)
  local o = {}
  for k, v in pairs(t) do o[k] = v end
  return o
end

-- A small MLP in float64 with a Linear's weight and bias in each layer.
local function mlp(nin, nh, nout, dropout)
  local m = nn.Sequential():add(nn.Linear(nin, nh)):add(nn.Tanh())
  if dropout then m:add(nn.Dropout(0.5)) end
  return m:add(nn.Linear(nh, nout)):add(nn.LogSoftMax())
end

describe('nn.optim', function()
  S.float64(5)

  it('makes optimisers with Torch7 names and defaults; lr is learningRate', function()
    local o = nn.optim.sgd { lr = 0.5 }
    assert.equals('sgd', o.name)
    assert.same({ learningRate = 0.5, learningRateDecay = 0, weightDecay = 0, momentum = 0, nesterov = false },
                o.config)
    assert.same({}, o.state)
    assert.same({ learningRate = 1e-3, learningRateDecay = 0, beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8,
                  weightDecay = 0 }, nn.optim.adam().config)
    assert.same({ learningRate = 1e-2, alpha = 0.99, epsilon = 1e-8, weightDecay = 0, initialMean = 0 },
                nn.optim.rmsprop {}.config)
    assert.same({ learningRate = 1e-3, learningRateDecay = 0, weightDecay = 0 }, nn.optim.adagrad {}.config)
    assert.equals(tgl.optim.hf, nn.optim.hf)
  end)

  it('names an unknown config key, a bad value, lr given twice, Nesterov without momentum, at the caller', function()
    local cases = {
      { function() local o = nn.optim.sgd { lr = 0.1, momentun = 0.9 }; return o end,
        "nn.optim.sgd: unknown config key 'momentun' (sgd takes dampening, learningRate, learningRateDecay, "
        .. 'momentum, nesterov, weightDecay)' },
      { function() local o = nn.optim.adam { learningRate = 0.1, beta = 0.9 }; return o end, "unknown config key 'beta'" },
      { function() local o = nn.optim.rmsprop { momentum = 0.9 }; return o end, "nn.optim.rmsprop: unknown config key 'momentum'" },
      { function() local o = nn.optim.adagrad { epsilon = 1 }; return o end, "nn.optim.adagrad: unknown config key 'epsilon'" },
      { function() local o = nn.optim.sgd { lr = 'fast' }; return o end, 'nn.optim.sgd: config.learningRate must be a number, got fast' },
      { function() local o = nn.optim.sgd { lr = 0 / 0 }; return o end, 'config.learningRate must be a number' },
      { function() local o = nn.optim.sgd { nesterov = 1 }; return o end, 'config.nesterov must be a boolean, got number' },
      { function() local o = nn.optim.sgd { lr = 0.1, learningRate = 0.2 }; return o end, 'both lr (0.1) and learningRate (0.2)' },
      { function() local o = nn.optim.sgd { momentum = 0.9, nesterov = true }; return o end,
        'Nesterov momentum requires a momentum and zero dampening (got momentum 0.9, dampening 0.9)' },
      { function() local o = nn.optim.sgd { learningRates = tgl.ones(3) }; return o end,
        'per-element learning rates (config.learningRates) are not supported' },
      { function() local o = nn.optim.sgd(3); return o end, 'nn.optim.sgd: the config must be a table, got number' },
    }
    for _, c in ipairs(cases) do
      local line = debug.getinfo(c[1], 'S').linedefined
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      err = tostring(err)
      assert.truthy(err:find(c[2], 1, true), err)
      assert.truthy(err:find('nn_optim_spec.lua:' .. line .. ': ', 1, true), err)
    end
  end)
end)

-- One step of the eager loop: zeroGradParameters, forward, backward,
-- updateParameters(lr); returns the loss before the update.
local function eager_sgd_step(m, crit, x, y, lr)
  m:zeroGradParameters()
  local out = m:forward(x)
  local l = crit:forward(out, y)
  m:backward(x, crit:backward(out, y))
  m:updateParameters(lr)
  return l
end

describe('nn.compile', function()
  S.float64(7)

  -- 3 steps of optimiser case c through nn.compile on a 3-5-4 MLP,
  -- against the reference formula applied to every parameter, with the
  -- gradients from the eager forward/backward of a copy of the model
  -- (at the reference's parameters).
  for _, case in ipairs(CASES) do
    it('steps ' .. case_name(case) .. ' as the formula by hand (3 steps, float64)', function()
      local name, cfg = case[1], case[2]
      local model, ref = mlp(3, 5, 4), mlp(3, 5, 4)
      copy_params(model, ref)
      local crit = nn.ClassNLLCriterion()
      local x, y = tgl.randn(6, 3), labels(6, 4)
      local opt = nn.optim[name](copy(cfg))
      local step = nn.compile { model = model, criterion = crit, optimizer = opt }
      local rw, rg = ref:parameters()
      local xs, sts = {}, {}
      for i = 1, #rw do xs[i], sts[i] = flat_table(rw[i]), {} end
      local rcfg = copy(cfg)
      if rcfg.lr then rcfg.learningRate, rcfg.lr = rcfg.lr, nil end
      for s = 1, 3 do
        -- the reference: gradients at the reference's parameters
        for i = 1, #rw do rw[i]:copy(tgl.array(xs[i], 'float64'):reshape(rw[i]:shape())) end
        ref:zeroGradParameters()
        local out = ref:forward(x)
        local want_loss = crit:forward(out, y)
        ref:backward(x, crit:backward(out, y))
        for i = 1, #rw do REF[name](rcfg, sts[i], xs[i], flat_table(rg[i])) end
        local loss = step:step(x, y)
        assert.near(want_loss, loss, 1e-12)
        local w = model:parameters()
        for i = 1, #w do
          local got = flat_table(w[i])
          for k = 1, #got do assert.near(xs[i][k], got[k], 1e-12 * (1 + math.abs(xs[i][k]))) end
        end
      end
      -- the state: the counter, and the per-parameter arrays against the reference's
      local def = nn.optim._defs[name]
      if def.counter then
        assert.equals(0, opt.state[def.counter]:dim())
        assert.equals(3, opt.state[def.counter]:get())
      end
      for _, slot in ipairs(def.slots(nn.optim._resolve(name, opt.config, 'x'))) do
        for i = 1, #rw do
          local got = flat_table(opt.state[slot .. '.' .. i])
          for k = 1, #got do assert.near(sts[i][slot][k], got[k], 1e-12 * (1 + math.abs(got[k]))) end
        end
      end
    end)
  end

  it('equals the eager forward/backward/updateParameters loop (sgd, no momentum): an MLP', function()
    local model, eager = mlp(7, 9, 5), mlp(7, 9, 5)
    copy_params(model, eager)
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(8, 7), labels(8, 5)
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = 0.3 } }
    for _ = 1, 3 do
      local l = eager_sgd_step(eager, crit, x, y, 0.3)
      assert.near(l, step:step(x, y), 1e-13)
      local a, b = model:parameters(), eager:parameters()
      for i = 1, #a do assert.is_true(maxdiff(a[i], b[i]) < 1e-14) end
    end
    -- model:forward after the steps sees the new weights
    local loss, out = step:evaluate(x, y)
    assert.is_true(maxdiff(out, eager:forward(x)) < 1e-14)
    assert.near(crit:forward(eager:forward(x), y), loss, 1e-13)
    assert.is_true(maxdiff(model:forward(x), out) == 0)
  end)

  it('equals the eager loop for a model with Dropout in evaluate mode; evaluate updates nothing', function()
    local model, eager = mlp(4, 6, 3, true), mlp(4, 6, 3, true)
    copy_params(model, eager)
    model:evaluate(); eager:evaluate()
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(5, 4), labels(5, 3)
    local opt = nn.optim.sgd { lr = 0.2 }
    local step = nn.compile { model = model, criterion = crit, optimizer = opt }
    for _ = 1, 3 do
      local l = eager_sgd_step(eager, crit, x, y, 0.2)
      assert.near(l, step:step(x, y), 1e-13)
    end
    local a, b = model:parameters(), eager:parameters()
    for i = 1, #a do assert.is_true(maxdiff(a[i], b[i]) < 1e-14) end
    local before = {}
    for i = 1, #a do before[i] = a[i]:clone() end
    local counter = opt.state.evalCounter:get()
    local l1 = step:evaluate(x, y)
    local l2 = step:evaluate(x, y)
    assert.equals(l1, l2)
    for i = 1, #a do assert.equals(0, maxdiff(a[i], before[i])) end
    assert.equals(counter, opt.state.evalCounter:get())
  end)

  it('a Dropout in training mode draws new noise for each step (the hook runs)', function()
    local model = mlp(4, 50, 3, true)
    local step = nn.compile { model = model, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0 } }
    local x, y = tgl.randn(5, 4), labels(5, 3)
    local l1, l2 = step:step(x, y), step:step(x, y)
    assert.is_true(l1 == l1 and l2 == l2)
    assert.is_not.equals(l1, l2)            -- lr 0: only the noise differs
  end)

  it('keeps getParameters views shared; a new learning rate needs no recompile', function()
    local model = mlp(3, 4, 2)
    local flat = model:getParameters()
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(4, 3), labels(4, 2)
    local opt = nn.optim.sgd { lr = 0.1 }
    local step = nn.compile { model = model, criterion = crit, optimizer = opt }
    local before = flat:clone()
    step:step(x, y)
    assert.is_true(maxdiff(flat, before) > 0)
    local w = model:parameters()
    assert.equals(w[1]:get(1, 1), flat:get(1))
    local n = nn.compiled_count
    -- lr 0 leaves everything; a rate back again moves it; nothing compiled
    opt.config.learningRate = 0
    local snap = flat:clone()
    step:step(x, y)
    assert.equals(0, maxdiff(flat, snap))
    opt.config.learningRate = 0.1
    step:step(x, y)
    assert.is_true(maxdiff(flat, snap) > 0)
    assert.equals(n, nn.compiled_count)
    -- a momentum changes the graph: one more function
    opt.config.momentum = 0.9
    step:step(x, y)
    assert.equals(n + 1, nn.compiled_count)
    assert.is_true(tgl.is_array(opt.state['dfdx.1']))
  end)

  it("includes the modules' state updates (nn._add_update) in the step, not in evaluate", function()
    -- a module that counts the forward calls of its compiled functions
    S.count_module('OptimSpecCount')
    local model = nn.Sequential():add(nn.Linear(3, 2)):add(nn.OptimSpecCount()):add(nn.LogSoftMax())
    local step = nn.compile { model = model, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.adam {} }
    local x, y = tgl.randn(4, 3), labels(4, 2)
    for _ = 1, 3 do step:step(x, y) end
    step:evaluate(x, y)
    assert.equals(3, model:get(2).calls:get())
  end)

  it('trains: the loss of a 2-class problem falls with each optimiser', function()
    local x = tgl.randn(40, 2)
    local t = {}
    for i = 1, 40 do t[i] = (x:get(i, 1) + x:get(i, 2) > 0) and 1 or 2 end
    local y = tgl.array(t, 'int64')
    for _, o in ipairs({ nn.optim.sgd { lr = 0.5, momentum = 0.5 }, nn.optim.adam { lr = 0.05 },
                          nn.optim.rmsprop { lr = 0.01 }, nn.optim.adagrad { lr = 0.3 } }) do
      local model = mlp(2, 8, 2)
      local step = nn.compile { model = model, criterion = nn.ClassNLLCriterion(), optimizer = o }
      local first = step:step(x, y)
      local last
      for _ = 1, 60 do last = step:step(x, y) end
      assert.is_true(last < 0.6 * first, o.name .. ': ' .. first .. ' -> ' .. last)
    end
  end)

  it('property: equals the eager loop over random sizes, batches and learning rates', function()
    for _ = 1, 8 do
      local nin, nh, nout, b = math.random(1, 6), math.random(1, 7), math.random(2, 5), math.random(1, 9)
      local lr = math.random() * 0.5
      local model, eager = mlp(nin, nh, nout), mlp(nin, nh, nout)
      copy_params(model, eager)
      local crit = math.random() < 0.5 and nn.ClassNLLCriterion() or nn.CrossEntropyCriterion()
      local x, y = tgl.randn(b, nin), labels(b, nout)
      local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = lr } }
      for _ = 1, 2 do
        local l = eager_sgd_step(eager, crit, x, y, lr)
        assert.near(l, step:step(x, y), 1e-12)
      end
      local a, c = model:parameters(), eager:parameters()
      for i = 1, #a do assert.is_true(maxdiff(a[i], c[i]) < 1e-13) end
    end
  end)

  it('names a wrong target, a wrong input, a bad config or state, at the caller; a failed step changes nothing', function()
    local model = mlp(3, 4, 2)
    local crit = nn.ClassNLLCriterion()
    local opt = nn.optim.sgd { lr = 0.1, momentum = 0.9 }
    local step = nn.compile { model = model, criterion = crit, optimizer = opt }
    local x, y = tgl.randn(5, 3), labels(5, 2)
    step:step(x, y)
    step:step(x, y)
    local w = model:parameters()
    -- the parameters and the state arrays (the objects, as they are now)
    local function snapshot()
      local s = { w = {}, st = {} }
      for i = 1, #w do s.w[i] = { w[i], w[i]:clone() } end
      for k, a in pairs(opt.state) do s.st[k] = { a, a:clone() } end
      return s
    end
    local function unchanged(s)
      for _, p in ipairs(s.w) do assert.equals(0, maxdiff(p[1], p[2])) end
      for _, p in pairs(s.st) do assert.equals(0, maxdiff(p[1], p[2])) end
    end
    local before = snapshot()
    local function fails(f, ...)
      local line = debug.getinfo(f, 'S').linedefined
      local ok, err = pcall(f)
      assert.is_false(ok)
      err = tostring(err)
      for _, needle in ipairs({ ... }) do assert.truthy(err:find(needle, 1, true), err) end
      assert.truthy(err:find('nn_optim_spec.lua:' .. line .. ': ', 1, true), err)
      unchanged(before)
    end
    fails(function() step:step(x, labels(4, 2)) end,
          "step:step: the target does not fit the model's output (float64(5x2)): ", '4 labels for 5 examples')
    fails(function() step:step(x, tgl.array({ 1, 2, 3, 1, 2 }, 'int64')) end,
          'label 3 at position 3 is not in 1..2')
    fails(function() step:step(tgl.randn(5, 4), y) end,
          'modules[1] nn.Linear(3 -> 4) fails on this input (float64(5x4))')
    fails(function() step:step('x', y) end, 'step:step: the input must be an array, got string')
    fails(function() step:evaluate(x, labels(6, 2)) end, 'step:evaluate: the target does not fit')
    opt.config.momentun = 0.5
    fails(function() step:step(x, y) end, "step:step: unknown config key 'momentun'")
    opt.config.momentun = nil
    opt.config.learningRate = 'big'
    fails(function() step:step(x, y) end, 'step:step: config.learningRate must be a number, got big')
    opt.config.learningRate = 0.1
    local saved = opt.state['dfdx.1']
    opt.state['dfdx.1'] = tgl.zeros(2, 2)
    fails(function() step:step(x, y) end, 'optimizer.state["dfdx.1"] must be a float64 array of shape 4x3')
    opt.state['dfdx.1'] = saved
    -- and then it steps on as before
    step:step(x, y)
    assert.equals(3, opt.state.evalCounter:get())
  end)

  it('names bad arguments to nn.compile', function()
    local model = mlp(3, 4, 2)
    local crit = nn.ClassNLLCriterion()
    local cases = {
      { function() nn.compile { model = model, criterion = crit } end, 'nn.compile: optimizer must be made by nn.optim' },
      { function() nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd {}, lr = 1 } end,
        "nn.compile: unknown key 'lr'" },
      { function() nn.compile { model = crit, criterion = crit, optimizer = nn.optim.sgd {} } end,
        'nn.compile: model must be an nn module, got nn.ClassNLLCriterion' },
      { function() nn.compile { model = model, criterion = model, optimizer = nn.optim.sgd {} } end,
        'nn.compile: criterion must be an nn criterion, got nn.Sequential' },
      { function() nn.compile { model = nn.Tanh(), criterion = crit, optimizer = nn.optim.sgd {} } end,
        'has no parameters to train' },
    }
    local opt = nn.optim.adam {}
    nn.compile { model = model, criterion = crit, optimizer = opt }
    -- the state is there before any step
    assert.equals(0, opt.state.t:get())
    assert.same({ 4, 3 }, opt.state['m.1']:shape())
    assert.same({ 2 }, opt.state['v.4']:shape())
    local restored = nn.optim.adam {}
    restored.state['m.1'] = tgl.zeros(3, 4)
    cases[#cases + 1] = { function() nn.compile { model = mlp(3, 4, 2), criterion = crit, optimizer = restored } end,
                          'nn.compile: optimizer.state["m.1"] must be a float64 array of shape 4x3' }
    cases[#cases + 1] = { function() nn.compile { model = mlp(3, 4, 2), criterion = crit, optimizer = opt } end,
                          'this optimizer already trains another model' }
    for _, c in ipairs(cases) do
      local line = debug.getinfo(c[1], 'S').linedefined
      local ok, err = pcall(c[1])
      assert.is_false(ok)
      assert.truthy(tostring(err):find(c[2], 1, true), tostring(err))
      assert.truthy(tostring(err):find('nn_optim_spec.lua:' .. line .. ': ', 1, true), tostring(err))
    end
  end)

  it('runs the step as a bound whole step on the CPU (one compiled function per shape)', function()
    if tgl.config.device ~= 'cpu' then return end
    local model = mlp(6, 8, 3)
    local step = nn.compile { model = model, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.adam {} }
    local x, y = tgl.randn(4, 6), labels(4, 3)
    local n = nn.compiled_count
    for _ = 1, 4 do step:step(x, y) end
    assert.equals(n + 1, nn.compiled_count)
    local fns = 0
    for _, e in pairs(step._graphs) do
      for _, f in pairs(e.fns) do
        fns = fns + 1
        assert.is_table(f.f:whole_step())
      end
    end
    assert.equals(1, fns)
  end)
end)

describe("require 'optim' (Torch7's closure API)", function()
  S.float64(9)

  it('defines the global optim with sgd, adam, rmsprop, adagrad', function()
    assert.equals(optim, _G.optim)
    assert.equals(optim, require 'optim')
    for _, n in ipairs({ 'sgd', 'adam', 'rmsprop', 'adagrad' }) do assert.is_function(optim[n]) end
    -- the rest of Torch7's package says it is not there yet, at the caller's line
    local line = next_line()
    local ok, err = pcall(function() local f = optim.lbfgs; return f end)
    assert.is_false(ok)
    assert.matches('nn_optim_spec.lua:' .. line .. ": optim.lbfgs is Torch7's but not in tgl's optim yet", err, 1, true)
    assert.is_nil(optim.no_such_thing)
  end)

  it("is found by a script the host runs: require 'optim' as in Torch7", function()
    local out, err, code = S.run_process("require 'optim'\n"
      .. "local x = tgl.array({1, 2}, 'float64')\n"
      .. "local _, fs = optim.sgd(function(p) return 7, p * 1 end, x, {learningRate = 0.5})\n"
      .. "print(fs[1], x:get(1), x:get(2))\n")
    assert.equals(0, code, err)
    assert.equals('7\t0.5\t1\n', out)
  end)

  -- f(x) = sum(a x² / 2 + c x): the gradient a x + c, by hand
  local a = { 1, 2, 0.5, 3, 1.5, 0.25, 4 }
  local cc = { 0.3, -0.2, 0.1, 0, -0.5, 0.7, 0.2 }
  local function quad(x)
    local g = x * tgl.array(a, 'float64') + tgl.array(cc, 'float64')
    local f = tgl.sum(x * x * tgl.array(a, 'float64') * 0.5 + x * tgl.array(cc, 'float64')):get()
    return f, g
  end

  for _, case in ipairs(CASES) do
    it(case_name(case) .. ' equals the formula by hand (3 steps), state as Torch7 keeps it', function()
      local name, cfg = case[1], copy(case[2])
      if cfg.lr then cfg.learningRate, cfg.lr = cfg.lr, nil end
      local x0 = { 0.5, -1, 2, 0.1, -0.3, 1.2, -0.7 }
      local x = tgl.array(x0, 'float64')
      local want = copy(x0)
      local st, rst = {}, {}
      for _ = 1, 3 do
        local g = {}
        for i = 1, #want do g[i] = a[i] * want[i] + cc[i] end
        local wf = 0
        for i = 1, #want do wf = wf + a[i] * want[i] ^ 2 / 2 + cc[i] * want[i] end
        REF[name](cfg, rst, want, g)
        local x2, fs = optim[name](quad, x, cfg, st)
        assert.equals(x, x2)
        assert.near(wf, fs[1], 1e-12)
        local got = flat_table(x)
        for i = 1, #got do assert.near(want[i], got[i], 1e-13 * (1 + math.abs(want[i]))) end
      end
      for k, v in pairs(rst) do
        if type(v) == 'number' then
          assert.equals(v, st[k])
        else
          local got = flat_table(st[k])
          for i = 1, #got do assert.near(v[i], got[i], 1e-13 * (1 + math.abs(v[i]))) end
        end
      end
    end)
  end

  it('property: random optimisers, configs and sizes equal the formula by hand (4 steps)', function()
    local FIELDS = {
      sgd = { 'learningRate', 'learningRateDecay', 'weightDecay', 'momentum', 'dampening' },
      adam = { 'learningRate', 'learningRateDecay', 'beta1', 'beta2', 'epsilon', 'weightDecay' },
      rmsprop = { 'learningRate', 'alpha', 'epsilon', 'weightDecay', 'initialMean' },
      adagrad = { 'learningRate', 'learningRateDecay', 'weightDecay' },
    }
    local names = { 'sgd', 'adam', 'rmsprop', 'adagrad' }
    for _ = 1, 24 do
      local name = names[math.random(#names)]
      local cfg = {}
      for _, f in ipairs(FIELDS[name]) do
        if math.random() < 0.6 then cfg[f] = math.random() * 0.9 + 0.01 end
      end
      if name == 'sgd' and math.random() < 0.3 then
        cfg.momentum, cfg.dampening, cfg.nesterov = math.random() * 0.9 + 0.05, 0, true
      end
      local n = math.random(1, 12)
      local x0, av, cv = {}, {}, {}
      for i = 1, n do x0[i], av[i], cv[i] = math.random() * 4 - 2, math.random() * 3, math.random() - 0.5 end
      local A, Cc = tgl.array(av, 'float64'), tgl.array(cv, 'float64')
      local function feval(p) return tgl.sum(p * p * A * 0.5 + p * Cc):get(), p * A + Cc end
      local x, want, st, rst = tgl.array(x0, 'float64'), copy(x0), {}, {}
      for _ = 1, 4 do
        local g = {}
        for i = 1, n do g[i] = av[i] * want[i] + cv[i] end
        REF[name](cfg, rst, want, g)
        optim[name](feval, x, cfg, st)
      end
      local got = flat_table(x)
      for i = 1, n do
        assert.near(want[i], got[i], 1e-12 * (1 + math.abs(want[i])), name .. ' ' .. tostring(i))
      end
    end
  end)

  it('keeps the state in config when no state is given (Torch7), and a float32 x', function()
    local cfg = { learningRate = 0.1, momentum = 0.9 }
    local x = tgl.array({ 1, 2, 3 }, 'float32')
    local function feval(p) return 0, p * 2 end
    optim.sgd(feval, x, cfg)
    optim.sgd(feval, x, cfg)
    assert.equals(2, cfg.evalCounter)
    assert.is_true(tgl.is_array(cfg.dfdx))
    assert.equals('float32', x.dtype)
    -- by hand: x1 = x0 - 0.1 * 2 x0 = 0.8 x0; buf = 0.9 * 2 x0 + 0.1 * 1.6 x0 = 1.96 x0; x2 = x1 - 0.196 x0
    local want = { 0.604, 1.208, 1.812 }
    for i = 1, 3 do assert.near(want[i], x:get(i), 1e-6) end
  end)

  it("Torch7's idiom over getParameters equals nn.compile with the same optimiser", function()
    local m1, m2 = mlp(4, 6, 3), mlp(4, 6, 3)
    copy_params(m1, m2)
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(7, 4), labels(7, 3)
    local params, gradParams = m1:getParameters()
    local feval = S.feval(m1, crit, x, y, gradParams)
    local state = { learningRate = 0.05, beta1 = 0.8 }
    local step = nn.compile { model = m2, criterion = crit, optimizer = nn.optim.adam { learningRate = 0.05, beta1 = 0.8 } }
    for _ = 1, 3 do
      local _, fs = optim.adam(feval, params, state)
      assert.near(step:step(x, y), fs[1], 1e-13)
    end
    local p2 = m2:getParameters()
    assert.is_true(maxdiff(params, p2) < 1e-14)
    assert.equals(3, state.t)
  end)

  it('compiles once per x and state arrays: a new learning rate recompiles nothing', function()
    local x = tgl.array({ 1, 2 }, 'float64')
    local function feval(p) return 0, p * 1 end
    local state = {}
    optim.adagrad(feval, x, { learningRate = 0.1 }, state)
    local n = nn.compiled_count
    for i = 1, 3 do optim.adagrad(feval, x, { learningRate = 0.1 * i }, state) end
    assert.equals(4, state.evalCounter)
    assert.equals(n, nn.compiled_count)
    -- a new state table with its own arrays: built again on them
    optim.adagrad(feval, x, { learningRate = 0.1 }, {})
    assert.equals(n + 1, nn.compiled_count)
  end)

  it('names a bad call at the caller and leaves x and the state as they were', function()
    local x = tgl.array({ 1, 2, 3 }, 'float64')
    local state = { learningRate = 0.1, momentum = 0.5 }
    optim.sgd(function(p) return 1, p * 1 end, x, state)
    local xs, buf = x:clone(), state.dfdx:clone()
    local function fails(f, needle)
      local line = debug.getinfo(f, 'S').linedefined
      local ok, err = pcall(f)
      assert.is_false(ok)
      err = tostring(err)
      assert.truthy(err:find(needle, 1, true), err)
      assert.truthy(err:find('nn_optim_spec.lua:' .. line .. ': ', 1, true), err)
      assert.equals(0, maxdiff(x, xs))
      assert.equals(0, maxdiff(state.dfdx, buf))
      assert.equals(1, state.evalCounter)
    end
    fails(function() optim.sgd(function() return 1, tgl.zeros(4) end, x, state) end,
          "optim.sgd: feval must return f(x) and df/dx, a float64 array of x's shape 3; got float64 4")
    fails(function() optim.sgd(function() return 1, nil end, x, state) end, 'got nil')
    fails(function() optim.sgd(function(p) return 1, p end, x, { learningRate = 0.1, momentun = 1 }, state) end,
          "optim.sgd: unknown config key 'momentun'")
    fails(function() optim.sgd(function(p) return 1, p end, x, { dfdx = 1 }, state) end,
          "optim.sgd: unknown config key 'dfdx'")
    fails(function() optim.sgd(function(p) return 1, p end, tgl.array({ 1, 2 }, 'int64'), state) end,
          'optim.sgd: x must be a floating-point array, got int64 array')
    fails(function() optim.sgd(nil, x, state) end, 'optim.sgd: expected a function feval(x)')
    local bad = { learningRate = 0.1, momentum = 0.5, dfdx = tgl.zeros(2, 2), evalCounter = 1 }
    fails(function() optim.sgd(function(p) return 1, p end, x, bad) end,
          "optim.sgd: state.dfdx must be a float64 array of x's shape 3, got float64 2x2")
    fails(function() optim.adam(function() error('feval failed') end, x, {}) end, 'feval failed')
  end)
end)
