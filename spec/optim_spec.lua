-- spec/optim_spec.lua — tgl.optim.hf: Hessian-free optimisation (Martens 2010).
tgl = tgl or require 'tgl'
local tgl = tgl

describe('tgl.optim.hf', function()
  local saved_floatX
  before_each(function() saved_floatX = tgl.config.floatX; tgl.config.floatX = 'float64' end)
  after_each(function() tgl.config.floatX = saved_floatX end)

  -- y = x W + b + noise: mean squared error, where Gauss-Newton is the
  -- exact Hessian, so one step with tiny damping solves the problem.
  local function least_squares()
    tgl.manual_seed(3)
    local N, D, K = 40, 6, 2
    local X = tgl.randn(N, D)
    local Y = tgl.dot(X, tgl.randn(D, K)) + 0.5 + tgl.randn(N, K) * 0.1
    local W = tgl.shared(tgl.zeros(D, K), 'W')
    local b = tgl.shared(tgl.zeros(K), 'b')
    local x, y = tgl.matrix('x'), tgl.matrix('y')
    local out = x:dot(W) + b
    local cost = tgl.mean(tgl.sqr(out - y))
    return { X = X, Y = Y, W = W, b = b, x = x, y = y, out = out, cost = cost }
  end

  it('solves linear least squares in one step (Gauss-Newton is exact)', function()
    local p = least_squares()
    local opt = tgl.optim.hf { params = { p.W, p.b }, inputs = { p.x, p.y }, out = p.out, cost = p.cost,
                               loss = 'mse', damping = 1e-8 }
    local s = opt:step({ p.X, p.Y })
    -- the least-squares optimum, from the normal equations solved by many gradient steps
    local Xa = tgl.concatenate({ p.X, tgl.ones(p.X:size(1), 1, { dtype = 'float64' }) }, 2)
    local A = tgl.dot(Xa:T(), Xa)
    local rhs = tgl.dot(Xa:T(), p.Y)
    local Wopt = tgl.zeros(7, 2, { dtype = 'float64' })
    for _ = 1, 3000 do Wopt = Wopt - (tgl.dot(A, Wopt) - rhs) * (1 / 60) end
    local resid = tgl.dot(Xa, Wopt) - p.Y
    local best = tgl.mean(tgl.sqr(resid)):get()
    assert.is_true(s.accepted)
    assert.is_true(s.cost_before > 10 * best)
    assert.is_true(math.abs(s.cost - best) < 1e-6 * (1 + best), ('cost %g, optimum %g'):format(s.cost, best))
    assert.is_true(math.abs(s.rho - 1) < 1e-3, 'rho ' .. s.rho)
    assert.is_true(s.cg_iters >= 1 and s.cg_iters <= 250)
    for _, k in ipairs({ 'cost_before', 'cost', 'damping', 'new_damping', 'rho', 'cg_iters', 'cg_chosen',
                         'phi', 'rate', 'step_norm', 'seconds', 'step' }) do
      assert.is_not_nil(s[k], k)
    end
    assert.are.equal(1, s.step)
    assert.is_true(s.new_damping < s.damping)          -- ρ > 3/4: λ × 2/3
  end)

  it('computes G·v = Jᵀ H_L J v for mse', function()
    local p = least_squares()
    local opt = tgl.optim.hf { params = { p.W, p.b }, inputs = { p.x, p.y }, out = p.out, cost = p.cost,
                               loss = 'mse' }
    local vW, vb = tgl.randn(6, 2), tgl.randn(2)
    local gv = opt:gv({ p.X, p.Y }, { vW, vb })
    local jv = tgl.dot(p.X, vW) + vb
    local scale = 2 / (p.X:size(1) * 2)
    assert.is_true(tgl.max(tgl.abs(gv[1] - tgl.dot(p.X:T(), jv) * scale)):get() < 1e-10)
    assert.is_true(tgl.max(tgl.abs(gv[2] - tgl.sum(jv, 1) * scale)):get() < 1e-10)
  end)

  it('lowers a logistic regression cost at every step', function()
    tgl.manual_seed(5)
    local N, D, K = 60, 4, 3
    local X = tgl.randn(N, D)
    local labels = tgl.argmax(tgl.dot(X, tgl.randn(D, K)) + tgl.randn(N, K), 2):astype('int32')
    local W = tgl.shared(tgl.zeros(D, K), 'W')
    local b = tgl.shared(tgl.zeros(K), 'b')
    local x, y = tgl.matrix('x'), tgl.ivector('y')
    local logits = x:dot(W) + b
    local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(logits), y))
    local opt = tgl.optim.hf { params = { W, b }, inputs = { x, y }, out = logits, cost = cost,
                               loss = 'softmax_crossentropy', damping = 1, max_cg_iters = 20 }
    local prev = opt:evaluate({ X, labels })
    assert.is_true(math.abs(prev - math.log(K)) < 1e-9)
    local curv = { X[{ { 1, 30 } }], labels[{ { 1, 30 } }] }     -- curvature on half the batch
    for i = 1, 6 do
      local s = opt:step({ X, labels }, curv)
      assert.is_true(s.cost <= prev + 1e-12, ('step %d: %g -> %g'):format(i, prev, s.cost))
      assert.is_true(math.abs(s.cost - opt:evaluate({ X, labels })) < 1e-9)
      prev = s.cost
    end
    assert.is_true(prev < 0.8 * math.log(K))
    assert.are.equal(6, opt.n_steps)
    opt:reset()
    assert.are.equal(0, opt.n_steps)
    assert.are.equal(1, opt.damping)
  end)

  it('rejects bad options with clear errors', function()
    local p = least_squares()
    local base = { params = { p.W, p.b }, inputs = { p.x, p.y }, out = p.out, cost = p.cost, loss = 'mse' }
    local function with(k, v)
      local t = {}
      for kk, vv in pairs(base) do t[kk] = vv end
      t[k] = v
      return t
    end
    assert.has_error(function() tgl.optim.hf(with('dampnig', 1)) end,
                     nil) -- raised; message checked below
    local ok, err = pcall(tgl.optim.hf, with('dampnig', 1))
    assert.is_false(ok)
    assert.is_truthy(err:find("unknown option 'dampnig' (did you mean 'damping'?)", 1, true), err)
    ok, err = pcall(tgl.optim.hf, with('loss', 'crossentropy'))
    assert.is_false(ok)
    assert.is_truthy(err:find("optim.hf", 1, true) and err:find("'crossentropy'", 1, true), err)
    ok, err = pcall(tgl.optim.hf, with('cost', nil))
    assert.is_truthy(err:find("option 'cost' is required", 1, true), err)
    ok, err = pcall(tgl.optim.hf, with('damping', -1))
    assert.is_truthy(err:find("option 'damping' must be a non-negative", 1, true), err)
    ok, err = pcall(tgl.optim.hf, with('params', { p.W, p.x }))
    assert.is_truthy(err:find('params[2] must be a shared variable', 1, true), err)
    ok, err = pcall(tgl.optim.hf, with('max_cg_iters', 2.5))
    assert.is_truthy(err:find("'max_cg_iters' must be a positive integer", 1, true), err)
    local opt = tgl.optim.hf(base)
    ok, err = pcall(function() opt:step({ p.X }) end)
    assert.is_false(ok)
    assert.is_truthy(err:find('expected 2 input arrays', 1, true), err)
  end)
end)
