-- spec/nn_compile_spec.lua — nn.compile with what the layers added:
-- shared parameters (clone, share, a module added twice) get one update
-- with the sum of every holder's gradient and one optimiser state each,
-- as Torch7's flat getParameters step gives them (the reference: the
-- eager forward/backward over getParameters' flat arrays and optim.sgd
-- or optim.adam, which steps each array once); a LookupTable (repeated
-- indices, maxNorm renormalising in forward before the step, shared
-- weights) equals that eager loop; a bad index through step:step and
-- step:evaluate is an error naming the module, its path and position,
-- changing nothing; model.output and criterion.output after a step.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local optim = require 'optim'
local S = dofile('spec/support.lua')
local maxdiff, next_line, labels, copy_params = S.maxdiff, S.next_line, S.labels, S.copy_params

-- The reference: `steps` steps of Torch7's idiom over getParameters with
-- optim[name] and config cfg; returns the losses and the model.
local function eager_steps(model, crit, x, y, name, cfg, steps)
  local params, grads = model:getParameters()
  local feval = S.feval(model, crit, x, y, grads)
  local state, losses = {}, {}
  for i = 1, steps do
    local _, fs = optim[name](feval, params, cfg, state)
    losses[i] = fs[1]
  end
  return losses, params, state
end

-- Every distinct parameter array of m, in parameters() order.
local function distinct(m)
  local out, seen = {}, {}
  for _, w in ipairs(m:parameters()) do
    if not seen[w] then seen[w] = true; out[#out + 1] = w end
  end
  return out
end

local function state_keys(opt)
  local ks = {}
  for k in pairs(opt.state) do ks[#ks + 1] = k end
  table.sort(ks)
  return table.concat(ks, ' ')
end

-- A container applying each child to the model's input and adding the
-- outputs (for two LookupTables sharing a weight, both on the input).
local Sum = nn.class('CompileSpecSum', nn.Container)
function Sum:__init() nn.Container.__init(self) end
function Sum:graph(x)
  local y
  for i, m in ipairs(self.modules) do
    nn._enter(i)
    local o = m:graph(x)
    nn._record(m, o, x)
    nn._leave()
    y = y and y + o or o
  end
  return y
end

describe('nn.compile with shared parameters', function()
  S.float64(11)

  -- a -> Tanh -> b (b a clone of a sharing weight and bias) -> LogSoftMax
  local function siamese(n, grads_too)
    local a = nn.Linear(n, n)
    local b = grads_too and a:clone('weight', 'bias', 'gradWeight', 'gradBias') or a:clone('weight', 'bias')
    return nn.Sequential():add(a):add(nn.Tanh()):add(b):add(nn.LogSoftMax())
  end

  for _, case in ipairs({ { 'sgd', { learningRate = 0.3, momentum = 0.9 } },
                           { 'adam', { learningRate = 0.05 } },
                           { 'sgd', { learningRate = 0.2, weightDecay = 0.1 } } }) do
    it(('a siamese Linear (clone with gradients) trained with %s equals the flat getParameters loop (3 steps)')
       :format(case[1]), function()
      local model, ref = siamese(4, true), siamese(4, true)
      copy_params(model, ref)
      assert.is_true(rawequal(model:get(1).weight, model:get(3).weight))
      local crit = nn.ClassNLLCriterion()
      local x, y = tgl.randn(6, 4), labels(6, 4)
      local cfg = {}
      for k, v in pairs(case[2]) do cfg[k] = v end
      local opt = nn.optim[case[1]](cfg)
      local step = nn.compile { model = model, criterion = crit, optimizer = opt }
      local losses = eager_steps(ref, nn.ClassNLLCriterion(), x, y, case[1], case[2], 3)
      for i = 1, 3 do assert.near(losses[i], step:step(x, y), 1e-12) end
      -- the sharing survives and both equal the reference's shared arrays
      assert.is_true(rawequal(model:get(1).weight, model:get(3).weight))
      local a, b = distinct(model), distinct(ref)
      assert.equals(2, #a)
      for i = 1, 2 do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
      -- one state per distinct array, at its first position in parameters()
      local want = { sgd = case[2].momentum and 'dfdx.1 dfdx.2 evalCounter' or 'evalCounter',
                     adam = 'm.1 m.2 t v.1 v.2' }
      assert.equals(want[case[1]], state_keys(opt))
    end)
  end

  it('weights shared without their gradients (clone(\'weight\', \'bias\')) step once with the summed gradient', function()
    local model, ref = siamese(3, false), siamese(3, true)
    copy_params(model, ref)
    assert.is_false(rawequal(model:get(1).gradWeight, model:get(3).gradWeight))
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(5, 3), labels(5, 3)
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = 0.5, momentum = 0.5 } }
    local losses = eager_steps(ref, crit, x, y, 'sgd', { learningRate = 0.5, momentum = 0.5 }, 3)
    for i = 1, 3 do assert.near(losses[i], step:step(x, y), 1e-12) end
    local a, b = distinct(model), distinct(ref)
    for i = 1, 2 do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
    -- the gradient fields are not written by the step
    assert.equals(0, tgl.max(tgl.abs(model:get(1).gradWeight)):get())
  end)

  it('a module added twice, and share() between two Linears, equal the flat loop', function()
    local function twice()
      local l = nn.Linear(3, 3)
      return nn.Sequential():add(l):add(nn.Tanh()):add(l):add(nn.LogSoftMax())
    end
    local function shared()
      local a, b = nn.Linear(3, 3), nn.Linear(3, 3)
      b:share(a, 'weight', 'bias', 'gradWeight', 'gradBias')
      return nn.Sequential():add(a):add(nn.Sigmoid()):add(b):add(nn.LogSoftMax())
    end
    for _, make in ipairs({ twice, shared }) do
      local model, ref = make(), make()
      copy_params(model, ref)
      local crit = nn.ClassNLLCriterion()
      local x, y = tgl.randn(4, 3), labels(4, 3)
      local opt = nn.optim.adam { learningRate = 0.1 }
      local step = nn.compile { model = model, criterion = crit, optimizer = opt }
      local losses = eager_steps(ref, crit, x, y, 'adam', { learningRate = 0.1 }, 3)
      for i = 1, 3 do assert.near(losses[i], step:step(x, y), 1e-12) end
      local a, b = distinct(model), distinct(ref)
      assert.equals(2, #a)
      for i = 1, 2 do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
      assert.equals('m.1 m.2 t v.1 v.2', state_keys(opt))
    end
  end)

  it('share() after the step was built: the next step rebuilds and steps the shared array once', function()
    local function make()
      return nn.Sequential():add(nn.Linear(3, 3)):add(nn.Tanh()):add(nn.Linear(3, 3)):add(nn.LogSoftMax())
    end
    local model = make()
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(4, 3), labels(4, 3)
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = 0.4 } }
    step:step(x, y)
    model:get(3):share(model:get(1), 'weight', 'bias', 'gradWeight', 'gradBias')
    local ref = make()
    ref:get(3):share(ref:get(1), 'weight', 'bias', 'gradWeight', 'gradBias')
    copy_params(model, ref)
    local losses = eager_steps(ref, crit, x, y, 'sgd', { learningRate = 0.4 }, 2)
    for i = 1, 2 do assert.near(losses[i], step:step(x, y), 1e-12) end
    local a, b = distinct(model), distinct(ref)
    assert.equals(2, #a)
    for i = 1, 2 do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
  end)

  it('property: a learning rate changed between steps (repeats, back, zero) steps with each step\'s value', function()
    -- the rate reaches the compiled step as a 0-d array nn.compile keeps
    -- and writes only when the value changed (nn.optim._value_arrays)
    for trial = 1, 4 do
      tgl.manual_seed(200 + trial)
      math.randomseed(200 + trial)
      local function make() return nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.Linear(4, 3)):add(nn.LogSoftMax()) end
      local model, ref = make(), make()
      copy_params(model, ref)
      local crit = nn.ClassNLLCriterion()
      local opt = nn.optim.sgd { learningRate = 0.1 }
      local step = nn.compile { model = model, criterion = crit, optimizer = opt }
      local n
      for i = 1, 10 do
        local lr = ({ 0.1, 0.1, 0.3, 0, 0.1, 0.05 * trial })[math.random(6)]
        opt.config.learningRate = lr
        local x, y = tgl.randn(2 + i % 3, 3), labels(2 + i % 3, 3)
        ref:zeroGradParameters()
        local out = ref:forward(x)
        local want = crit:forward(out, y)
        ref:backward(x, crit:backward(out, y))
        ref:updateParameters(lr)
        assert.near(want, step:step(x, y), 1e-12)
        local a, b = model:parameters(), ref:parameters()
        for k = 1, #a do assert.is_true(maxdiff(a[k], b[k]) < 1e-13, ('trial %d step %d lr %g'):format(trial, i, lr)) end
        if i == 3 then n = nn.compiled_count end
      end
      assert.equals(n, nn.compiled_count)
    end
  end)

  it('property: random siamese depths, sizes, batches and rates equal the flat loop', function()
    for trial = 1, 6 do
      tgl.manual_seed(100 + trial)
      local n, batch, lr = 2 + trial % 3, 1 + (trial * 5) % 7, 0.05 * trial
      local function make()
        local a = nn.Linear(n, n)
        local m = nn.Sequential():add(a)
        for _ = 1, 1 + trial % 2 do m:add(nn.Tanh()):add(a:clone('weight', 'bias', 'gradWeight', 'gradBias')) end
        return m:add(nn.LogSoftMax())
      end
      local model, ref = make(), make()
      copy_params(model, ref)
      local crit = nn.ClassNLLCriterion()
      local x, y = tgl.randn(batch, n), labels(batch, n)
      local step = nn.compile { model = model, criterion = crit,
                                optimizer = nn.optim.sgd { lr = lr, momentum = 0.9, nesterov = true, dampening = 0 } }
      local losses = eager_steps(ref, crit, x, y, 'sgd',
                                 { learningRate = lr, momentum = 0.9, nesterov = true, dampening = 0 }, 3)
      for i = 1, 3 do assert.near(losses[i], step:step(x, y), 1e-12) end
      local a, b = distinct(model), distinct(ref)
      for i = 1, #a do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
    end
  end)
end)

describe('nn.compile with LookupTable', function()
  S.float64(5)

  -- LookupTable(6, 3 [, 0, maxNorm]) -> Reshape(12) -> Linear(12, 3) -> LogSoftMax
  local function lm(maxNorm)
    return nn.Sequential():add(nn.LookupTable(6, 3, 0, maxNorm)):add(nn.Reshape(12))
                          :add(nn.Linear(12, 3)):add(nn.LogSoftMax())
  end
  -- repeated indices in each row and across rows
  local X = tgl.array({ { 1, 2, 2, 5 }, { 5, 1, 1, 1 }, { 3, 2, 5, 2 } }, 'int64')
  local Y = tgl.array({ 1, 3, 2 }, 'int64')

  for _, case in ipairs({ { nil, 'sgd', { learningRate = 0.5 } },
                           { nil, 'adam', { learningRate = 0.1 } },
                           { 1.0, 'sgd', { learningRate = 0.5 } },
                           { 0.8, 'sgd', { learningRate = 0.3, weightDecay = 0.2, momentum = 0.9 } },
                           { 1.2, 'adagrad', { learningRate = 0.4 } } }) do
    it(('repeated indices%s with %s equal the eager loop (3 steps)')
       :format(case[1] and ', maxNorm ' .. case[1] or '', case[2]), function()
      local model, ref = lm(case[1]), lm(case[1])
      copy_params(model, ref)
      local crit = nn.ClassNLLCriterion()
      local cfg = {}
      for k, v in pairs(case[3]) do cfg[k] = v end
      local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim[case[2]](cfg) }
      local losses = eager_steps(ref, crit, X, Y, case[2], case[3], 3)
      for i = 1, 3 do assert.near(losses[i], step:step(X, Y), 1e-12) end
      local a, b = model:parameters(), ref:parameters()
      for i = 1, #a do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
    end)
  end

  it('maxNorm: the step starts from the renormalised rows (by hand, one sgd step)', function()
    local maxNorm, lr = 1.0, 0.5
    local model = lm(maxNorm)
    local w = model:get(1).weight
    w:copy(tgl.randn(6, 3) * 2)
    local w0 = w:clone()
    local crit = nn.ClassNLLCriterion()
    -- the gradient of the renormalised model, from the eager backward of a
    -- copy whose weight is renormalised by hand
    local used = { [1] = true, [2] = true, [3] = true, [5] = true }
    local wr = w0:clone()
    for r = 1, 6 do
      if used[r] then
        local s = 0
        for c = 1, 3 do s = s + wr:get(r, c) ^ 2 end
        local norm = math.sqrt(s)
        if norm > maxNorm then
          for c = 1, 3 do wr:set(wr:get(r, c) * maxNorm / (norm + 1e-7), r, c) end
        end
      end
    end
    local plain = lm(nil)
    copy_params(model, plain)
    plain:get(1).weight:copy(wr)
    plain:zeroGradParameters()
    local out = plain:forward(X)
    local want_loss = crit:forward(out, Y)
    plain:backward(X, crit:backward(out, Y))
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = lr } }
    assert.near(want_loss, step:step(X, Y), 1e-12)
    local want = wr - plain:get(1).gradWeight * lr
    assert.is_true(maxdiff(w, want) < 1e-13)
    -- rows 4 and 6 were neither looked up nor renormalised
    for c = 1, 3 do
      assert.equals(w0:get(4, c), w:get(4, c))
      assert.equals(w0:get(6, c), w:get(6, c))
    end
  end)

  it('two LookupTables sharing a weight, both with maxNorm: one update (renorm of either\'s rows, then the step)', function()
    local function make()
      -- each on its own half of the input's columns: other rows
      local a = nn.LookupTable(7, 2, 0, 1.0)
      local b = a:clone('weight', 'gradWeight')
      return nn.Sequential():add(nn.CompileSpecSum():add(nn.Sequential():add(nn.Narrow(2, 1, 2)):add(a))
                                                    :add(nn.Sequential():add(nn.Narrow(2, 3, 2)):add(b)))
                            :add(nn.Reshape(4)):add(nn.Linear(4, 2)):add(nn.LogSoftMax())
    end
    local function weight(m) return m:get(1):get(1):get(2).weight end
    local model, ref = make(), make()
    copy_params(model, ref)
    assert.is_true(rawequal(weight(model), model:get(1):get(2):get(2).weight))
    local w = weight(model)
    w:copy(tgl.randn(7, 2) * 2)
    weight(ref):copy(w)
    -- the first lookup gets rows 1, 2, 3; the second 3..6
    local x = tgl.array({ { 1, 2, 3, 4 }, { 3, 1, 5, 6 } }, 'int64')
    local y = tgl.array({ 1, 2 }, 'int64')
    -- the eager forward renormalises the rows of both lookups in one
    -- update: every row looked up has norm <= 1, row 7 is unchanged
    local probe = make()
    copy_params(ref, probe)
    local pw, before = weight(probe), w:clone()
    probe:forward(x)
    for r = 1, 7 do
      local s, s0 = 0, 0
      for c = 1, 2 do s = s + pw:get(r, c) ^ 2; s0 = s0 + before:get(r, c) ^ 2 end
      if r <= 6 and s0 > 1 then
        assert.near(1.0, math.sqrt(s), 1e-6)
      else
        for c = 1, 2 do assert.equals(before:get(r, c), pw:get(r, c)) end
      end
    end
    local crit = nn.ClassNLLCriterion()
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = 0.4, momentum = 0.5 } }
    local losses = eager_steps(ref, crit, x, y, 'sgd', { learningRate = 0.4, momentum = 0.5 }, 3)
    for i = 1, 3 do assert.near(losses[i], step:step(x, y), 1e-12) end
    local a, b = distinct(model), distinct(ref)
    assert.equals(3, #a)
    for i = 1, 3 do assert.is_true(maxdiff(a[i], b[i]) < 1e-13) end
  end)

  it('a bad index through step:step or step:evaluate names the module, path and position; nothing changes', function()
    local model = lm(1.0)
    local crit = nn.ClassNLLCriterion()
    local opt = nn.optim.sgd { lr = 0.5, momentum = 0.9 }
    local step = nn.compile { model = model, criterion = crit, optimizer = opt }
    step:step(X, Y)
    local before = {}
    for i, p in ipairs(model:parameters()) do before[i] = p:clone() end
    local keys, counter, buf = state_keys(opt), opt.state.evalCounter:get(), opt.state['dfdx.1']:clone()
    local out_before = model.output
    local bad = tgl.array({ { 1, 2, 2, 5 }, { 5, 7, 1, 1 }, { 3, 2, 5, 2 } }, 'int64')
    for _, call in ipairs({ 'step', 'evaluate' }) do
      local line = next_line()
      local ok, err = pcall(step[call], step, bad, Y)
      assert.is_false(ok)
      assert.matches('nn_compile_spec.lua:' .. line .. ': step:' .. call
                     .. ': modules%[1%] nn.LookupTable: index 7 at position %(2, 2%) is not in 1..6', err)
    end
    -- a zero and a fractional float index too
    local line = next_line()
    local ok, err = pcall(step.step, step, tgl.array({ { 1, 2, 0, 5 }, { 5, 1, 1, 1 }, { 3, 2, 5, 2 } }, 'int64'), Y)
    assert.is_false(ok)
    assert.matches(':' .. line .. ': step:step: modules%[1%] nn.LookupTable: index 0 at position %(1, 3%)', err)
    for i, p in ipairs(model:parameters()) do assert.equals(0, maxdiff(p, before[i])) end
    assert.equals(keys, state_keys(opt))
    assert.equals(counter, opt.state.evalCounter:get())
    assert.equals(0, maxdiff(buf, opt.state['dfdx.1']))
    assert.is_true(rawequal(out_before, model.output))
    -- and a good step after runs as before
    local l = step:step(X, Y)
    assert.is_true(l == l)
    assert.equals(counter + 1, opt.state.evalCounter:get())
  end)
end)

describe('nn.compile: module state updates of one array', function()
  it('two modules updating one shared state array without a chain: an error naming it, nothing changed', function()
    S.count_module('CompileSpecCount')
    local c1 = nn.CompileSpecCount()
    local c2 = nn.CompileSpecCount():share(c1, 'calls')
    local model = nn.Sequential():add(nn.Linear(3, 2)):add(c1):add(c2):add(nn.LogSoftMax())
    local opt = nn.optim.sgd { lr = 0.1, momentum = 0.9 }
    local step = nn.compile { model = model, criterion = nn.ClassNLLCriterion(), optimizer = opt }
    local keys = state_keys(opt)
    local w = model:get(1).weight:clone()
    local line = next_line()
    local ok, err = pcall(step.step, step, tgl.randn(4, 3), labels(4, 2))
    assert.is_false(ok)
    assert.matches('nn_compile_spec.lua:' .. line .. ': nn.Sequential: two modules update the same array '
                   .. '%(nn.CompileSpecCount.calls%)', err)
    assert.equals(keys, state_keys(opt))
    assert.equals(0, opt.state.evalCounter:get())
    assert.equals(0, maxdiff(w, model:get(1).weight))
    assert.equals(0, c1.calls:get())
    -- the eager forward says the same
    assert.has_error(function() model:forward(tgl.randn(4, 3)) end)
  end)
end)

describe('nn.compile: what step:step sets', function()
  S.float64(3)

  it('model.output and criterion.output are the forward before the update; gradWeight is not written', function()
    local function make() return nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.Linear(4, 2)):add(nn.LogSoftMax()) end
    local model, ref = make(), make()
    copy_params(model, ref)
    local crit = nn.ClassNLLCriterion()
    local x, y = tgl.randn(5, 3), labels(5, 2)
    local step = nn.compile { model = model, criterion = crit, optimizer = nn.optim.sgd { lr = 0.5 } }
    local want = ref:forward(x)
    local loss = step:step(x, y)
    assert.is_true(maxdiff(model.output, want) < 1e-14)
    assert.equals(loss, crit.output)
    -- the inner modules' fields and the gradients are left alone
    assert.equals(0, model:get(1).output:nelement())
    assert.equals(0, tgl.max(tgl.abs(model:get(1).gradWeight)):get())
    -- the next step's output is a new array (the first one is kept)
    local first = model.output
    step:step(x, y)
    assert.is_false(rawequal(first, model.output))
    assert.is_true(maxdiff(first, want) < 1e-14)
    local l2, out = step:evaluate(x, y)
    assert.is_true(rawequal(out, model.output))
    assert.equals(l2, crit.output)
  end)
end)
