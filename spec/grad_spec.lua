-- grad_spec.lua — differentiation from Lua (API.md "Differentiation"):
-- tgl.grad checked against central finite differences computed here (an
-- MLP, through shared variables), its forms and options (several wrt,
-- disconnected, known_grads, broadcasting), its errors, tgl.jacobian and
-- tgl.hessian against known answers, and tgl.verify_grad.
tgl = tgl or require 'tgl'
local tgl = tgl

-- The error f raises; asserts it is 'tgl.<fname>: ...' raised at a line of
-- this file and mentions each of the plain-text needles.
local function raises(fname, f, ...)
  local ok, err = pcall(f)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  assert.matches('grad_spec%.lua:%d+: tgl%.' .. fname:gsub('%p', '%%%0') .. ': ', err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err, 1)
  end
  return err
end

local function f64(t) return tgl.array(t, 'float64') end

-- Elementwise closeness, naming the element (spec/support.lua).
local assert_close = dofile('spec/support.lua').assert_close

-- Central differences of cost() (a Lua function returning a number) with
-- respect to every element of the shared variable v, perturbed through
-- set_value and restored afterwards.
local function numeric_grad(cost, v, eps)
  eps = eps or 1e-6
  local base = v:get_value()
  local g = tgl.zeros(base:shape(), { dtype = 'float64' })
  local gflat = g:reshape(-1)
  for k = 1, base:nelement() do
    local p = base:clone()
    local flat = p:reshape(-1)
    local x0 = flat:get(k)
    flat:set(x0 + eps, k)
    v:set_value(p)
    local fp = cost()
    flat:set(x0 - eps, k)
    v:set_value(p)
    local fm = cost()
    gflat:set((fp - fm) / (2 * eps), k)
  end
  v:set_value(base)
  return g
end

describe('tgl.grad matches finite differences', function()
  it('through a 3-layer tanh MLP with softmax and cross-entropy, for every parameter', function()
    tgl.manual_seed(2024)
    local function param(name, ...)
      return tgl.shared(tgl.randn(...) * 0.7, name)
    end
    local opts = { dtype = 'float64' }
    local W1, b1 = param('W1', 4, 6, opts), param('b1', 6, opts)
    local W2, b2 = param('W2', 6, 5, opts), param('b2', 5, opts)
    local W3, b3 = param('W3', 5, 3, opts), param('b3', 3, opts)
    local params = { W1, b1, W2, b2, W3, b3 }
    local x, y = tgl.dmatrix('x'), tgl.ivector('y')
    local h1 = tgl.tanh(x:dot(W1) + b1)
    local h2 = tgl.tanh(h1:dot(W2) + b2)
    local p = tgl.softmax(h2:dot(W3) + b3)
    local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
    local grads = tgl.grad(cost, params)
    assert.equals(6, #grads)
    local f = tgl.compile { inputs = { x, y }, outputs = grads, name = 'grads' }
    local fc = tgl.compile { inputs = { x, y }, outputs = cost, name = 'cost' }
    local xa = tgl.randn(5, 4, opts)
    local ya = tgl.array({ 1, 3, 2, 3, 1 }, 'int32')
    local analytic = { f(xa, ya) }
    assert.equals(6, #analytic)
    local function c() return fc(xa, ya):get() end
    for i, v in ipairs(params) do
      local num = numeric_grad(c, v)
      assert.same(v:get_value():shape(), analytic[i]:shape())
      assert_close(num, analytic[i], 1e-6, 1e-9, v.name)
    end
  end)

  it('for a float64 cost with a variable used several times', function()
    local w = tgl.shared(f64 { 0.3, -1.2, 2.0 }, 'w')
    local cost = tgl.sum(tgl.sin(w) * w + tgl.exp(w * 0.5) * tgl.sqr(w))
    local g = tgl.compile { inputs = {}, outputs = tgl.grad(cost, w) }()
    local fc = tgl.compile { inputs = {}, outputs = cost }
    local num = numeric_grad(function() return fc():get() end, w)
    assert_close(num, g, 1e-7, 1e-9, 'w')
  end)
end)

describe('tgl.grad forms', function()
  local x = tgl.dvector('x')
  local A = tgl.shared(f64 { { 1, 2 }, { 3, 4 }, { 5, 6 } }, 'A')

  it('a single wrt gives one variable, a table of wrt a table in order', function()
    local cost = tgl.sum(x * x) + tgl.sum(A)
    local gx = tgl.grad(cost, x)
    assert.is_true(tgl.is_variable(gx))
    local gs = tgl.grad(cost, { A, x })
    assert.equals('table', type(gs))
    assert.equals(2, #gs)
    local f = tgl.compile { inputs = { x }, outputs = { gx, gs[1], gs[2] } }
    local a, b, c = f(f64 { 1, -2 })
    assert.same({ 2, -4 }, a:totable())
    assert.same({ { 1, 1 }, { 1, 1 }, { 1, 1 } }, b:totable())
    assert.same({ 2, -4 }, c:totable())
    local single = tgl.grad(cost, { x })
    assert.equals('table', type(single))
    assert.equals(1, #single)
  end)

  it('the gradient of a matrix product is the product with the transposed other factor', function()
    local v = tgl.dvector('v')
    local gA = tgl.grad(tgl.sum(A:dot(v)), A)
    local f = tgl.compile { inputs = { v }, outputs = gA }
    assert.same({ { 7, 8 }, { 7, 8 }, { 7, 8 } }, f(f64 { 7, 8 }):totable())
  end)

  it('keeps the dtype of the variable (float32 in, float32 gradient)', function()
    local xf = tgl.fvector('xf')
    local g = tgl.grad(tgl.sum(xf * xf), xf)
    assert.equals('float32', g.dtype)
    assert.same({ 2, 6 }, tgl.compile { inputs = { xf }, outputs = g }(tgl.array({ 1, 3 }, 'float32')):totable())
  end)

  it('with respect to an intermediate result', function()
    local h = tgl.tanh(x)
    local gh = tgl.grad(tgl.sum(h * h), h)
    local r = tgl.compile { inputs = { x }, outputs = gh }(f64 { 0.5, 1 })
    assert_close({ 2 * math.tanh(0.5), 2 * math.tanh(1) }, r, 1e-12)
  end)

  it('disconnected = raise (the default) names the variable', function()
    local z = tgl.dvector('zed')
    raises('grad', function() tgl.grad(tgl.sum(x * x), z) end,
           "the cost does not depend on 'zed' (wrt 1)", "disconnected='ignore'")
    raises('grad', function() tgl.grad(tgl.sum(x * x), { x, z }, { disconnected = 'raise' }) end,
           "'zed' (wrt 2)")
  end)

  it('disconnected = ignore gives zeros of the variable\'s shape', function()
    local z = tgl.dvector('z')
    local gz = tgl.grad(tgl.sum(x * x), z, { disconnected = 'ignore' })
    local gA, gx = unpack(tgl.grad(tgl.sum(x * x), { A, x }, { disconnected = 'ignore' }))
    local f = tgl.compile { inputs = { x, z }, outputs = { gz, gA, gx } }
    local a, b, c = f(f64 { 1, 2 }, f64 { 5, 6, 7 })
    assert.same({ 0, 0, 0 }, a:totable())
    assert.same({ { 0, 0 }, { 0, 0 }, { 0, 0 } }, b:totable())
    assert.same({ 2, 4 }, c:totable())
  end)

  it('a path through an integer op is disconnected', function()
    local cost = tgl.sum(tgl.cast(tgl.argmax(x), 'float64'))
    raises('grad', function() tgl.grad(cost, x) end, 'does not depend on')
    local g = tgl.grad(cost, x, { disconnected = 'ignore' })
    assert.same({ 0, 0, 0 }, tgl.compile { inputs = { x }, outputs = g }(f64 { 1, 5, 3 }):totable())
  end)

  it('known_grads seeds backprop: grad(nil, x, {known_grads={[y]=u}}) is the vector-Jacobian product', function()
    local u = tgl.dvector('u')
    local y = A:dot(x)                 -- y = A x, so u' J = A' u
    local vjp = tgl.grad(nil, x, { known_grads = { [y] = u } })
    local f = tgl.compile { inputs = { x, u }, outputs = vjp }
    assert.same({ 1 * 1 + 3 * 10 + 5 * 100, 2 * 1 + 4 * 10 + 6 * 100 }, f(f64 { 9, 9 }, f64 { 1, 10, 100 }):totable())
    -- through a nonlinearity: y = 3 tanh(x), u' J = 3 (1 - tanh^2 x) u
    local y2 = tgl.tanh(x) * 3
    local v2 = tgl.grad(nil, x, { known_grads = { [y2] = u } })
    local r = tgl.compile { inputs = { x, u }, outputs = v2 }(f64 { 0.5, -1 }, f64 { 1, 2 })
    assert_close({ 3 * (1 - math.tanh(0.5) ^ 2), 6 * (1 - math.tanh(-1) ^ 2) }, r, 1e-12)
  end)

  it('known gradients of several variables add up', function()
    local u = tgl.dvector('u')
    local y = x * 3
    local g = tgl.grad(nil, x, { known_grads = { [y] = u, [x] = u } })
    assert.same({ 4, 8 }, tgl.compile { inputs = { x, u }, outputs = g }(f64 { 0, 0 }, f64 { 1, 2 }):totable())
  end)

  it('a known gradient of the wrong rank is rejected', function()
    local y = x * 3
    raises('grad', function() tgl.grad(nil, x, { known_grads = { [y] = tgl.dmatrix('m') } }) end,
           'has 2 dimensions, the variable 1')
  end)

  it('the gradient of a bias added to a matrix has the bias\'s shape', function()
    local M = tgl.dmatrix('M')
    local b = tgl.shared(f64 { 1, 2, 3 }, 'b')
    local gb = tgl.grad(tgl.sum((M + b) ^ 2), b)
    assert.equals(1, gb.ndim)
    local r = tgl.compile { inputs = { M }, outputs = gb }(f64 { { 0, 0, 0 }, { 1, 1, 1 } })
    -- sum over rows of 2 (M + b)
    assert.same({ 2 * (1 + 2), 2 * (2 + 3), 2 * (3 + 4) }, r:totable())
  end)

  it('the gradient of a broadcastable row keeps its broadcastable axis', function()
    local M = tgl.dmatrix('M')
    local r = tgl.shared(f64 { { 1, 2, 3 } }, 'r', { broadcastable = { true, false } })
    local gr = tgl.grad(tgl.sum(M * r), r)
    assert.same({ true, false }, gr.broadcastable)
    local v = tgl.compile { inputs = { M }, outputs = gr }(f64 { { 1, 2, 3 }, { 10, 20, 30 } })
    assert.same({ { 11, 22, 33 } }, v:totable())
  end)

  it('the gradient of a scalar broadcast over a matrix is a scalar', function()
    local M = tgl.dmatrix('M')
    local s = tgl.dscalar('s')
    local gs = tgl.grad(tgl.sum(M * s), s)
    assert.equals(0, gs.ndim)
    assert.equals(21, tgl.compile { inputs = { M, s }, outputs = gs }(f64 { { 1, 2, 3 }, { 4, 5, 6 } }, 2):totable())
  end)

  it('flows through the branch an ifelse takes', function()
    local c = tgl.bscalar('c')
    local g = tgl.grad(tgl.sum(tgl.ifelse(c, x * x, x * x * x)), x)
    local f = tgl.compile { inputs = { c, x }, outputs = g }
    assert.same({ 2, 4 }, f(true, f64 { 1, 2 }):totable())
    assert.same({ 3, 12 }, f(false, f64 { 1, 2 }):totable())
  end)

  it('a constant wrt is allowed and gets its gradient', function()
    local k = tgl.constant(f64 { 1, 2 })
    local gk = tgl.grad(tgl.sum(x * k), k)
    assert.same({ 3, 4 }, tgl.compile { inputs = { x }, outputs = gk }(f64 { 3, 4 }):totable())
  end)
end)

describe('tgl.grad errors', function()
  local x = tgl.dvector('x')

  it('an integer wrt raises naming it and its dtype', function()
    local i = tgl.ivector('idx')
    raises('grad', function() tgl.grad(tgl.sum(tgl.cast(i, 'float64')), i) end,
           "cannot differentiate with respect to 'idx' of dtype int32")
  end)

  it('a non-scalar cost without known_grads raises', function()
    raises('grad', function() tgl.grad(x * x, x) end,
           'the cost must be a scalar, got float64 (?,)', 'known_grads')
  end)

  it('an integer cost raises', function()
    raises('grad', function() tgl.grad(tgl.sum(tgl.ivector('i')), x) end, 'the cost must be a float, got int64')
  end)

  it('bad arguments are named', function()
    raises('grad', function() tgl.grad(tgl.sum(x), { x, 3 }) end, 'wrt 2 is a number, not a variable')
    raises('grad', function() tgl.grad(tgl.sum(x), 'x') end, 'wrt must be a variable or a table')
    raises('grad', function() tgl.grad(5, x) end, 'cost must be a variable, got number')
    raises('grad', function() tgl.grad(tgl.sum(x), x, { disconnected = 'maybe' }) end,
           "disconnected must be 'raise', 'ignore' or 'warn'")
    raises('grad', function() tgl.grad(nil, x) end, 'no cost and no known gradients')
  end)
end)

describe('tgl.jacobian and tgl.hessian', function()
  local x = tgl.dvector('x')
  local A = f64 { { 1, 2, 0 }, { 0, 3, 4 }, { 5, 0, 6 } }

  it('the jacobian of a vector function matches finite differences', function()
    local Ak = tgl.constant(A)
    local fx = tgl.tanh(Ak:dot(x)) * x        -- R^3 -> R^3
    local J = tgl.jacobian(fx, x, { size = 3 })
    local fJ = tgl.compile { inputs = { x }, outputs = J }
    local ff = tgl.compile { inputs = { x }, outputs = fx }
    local x0 = f64 { 0.1, -0.2, 0.3 }
    local got = fJ(x0)
    assert.same({ 3, 3 }, got:shape())
    local eps = 1e-6
    local num = tgl.zeros(3, 3, { dtype = 'float64' })
    for j = 1, 3 do
      local xp, xm = x0:clone(), x0:clone()
      xp:set(x0:get(j) + eps, j)
      xm:set(x0:get(j) - eps, j)
      local fp, fm = ff(xp), ff(xm)
      for i = 1, 3 do num:set((fp:get(i) - fm:get(i)) / (2 * eps), i, j) end
    end
    assert_close(num, got, 1e-7, 1e-10, 'jacobian')
  end)

  it('the jacobian of a vector with several wrt gives one per wrt', function()
    local y = tgl.dvector('y')
    local Js = tgl.jacobian(x * y, { x, y }, { size = 2 })
    assert.equals(2, #Js)
    local a, b = tgl.compile { inputs = { x, y }, outputs = Js }(f64 { 1, 2 }, f64 { 3, 4 })
    assert.same({ { 3, 0 }, { 0, 4 } }, a:totable())
    assert.same({ { 1, 0 }, { 0, 2 } }, b:totable())
  end)

  it('the jacobian of a scalar is its gradient', function()
    local J = tgl.jacobian(tgl.sum(x * x), x)
    assert.same({ 2, 4 }, tgl.compile { inputs = { x }, outputs = J }(f64 { 1, 2 }):totable())
  end)

  it('the jacobian of a vector of length known only at run time is a scan over its rows', function()
    local J = tgl.jacobian(tgl.tanh(x) * 2, x)
    local v = f64 { 0.5, -1, 2 }
    local got = tgl.compile { inputs = { x }, outputs = J }(v)
    for i = 1, 3 do
      for j = 1, 3 do
        local want = i == j and 2 * (1 - math.tanh(v:get(i)) ^ 2) or 0
        assert.is_true(math.abs(got:get(i, j) - want) < 1e-12)
      end
    end
    raises('jacobian', function() tgl.jacobian(tgl.dmatrix('m'), x) end, 'f must be a scalar or a vector')
  end)

  it("the hessian of x' A x is A + A'", function()
    local cost = tgl.dot(x, tgl.constant(A):dot(x))
    local H = tgl.hessian(cost, x, { size = 3 })
    local got = tgl.compile { inputs = { x }, outputs = H }(f64 { 1, -2, 0.5 })
    assert.same({ { 2, 2, 5 }, { 2, 6, 4 }, { 5, 4, 12 } }, got:totable())
  end)

  it('the hessian with respect to a shared vector reads its size from the value', function()
    local xs = tgl.shared(f64 { 1, 1, 1 }, 'xs')
    local H = tgl.hessian(tgl.dot(xs, tgl.constant(A):dot(xs)), xs)
    local got = tgl.compile { inputs = {}, outputs = H }()
    assert.same({ { 2, 2, 5 }, { 2, 6, 4 }, { 5, 4, 12 } }, got:totable())
  end)

  it('the hessian of a non-quadratic cost matches finite differences of the gradient', function()
    local cost = tgl.sum(tgl.exp(x) * tgl.sin(x:sum() * x))
    local g = tgl.grad(cost, x)
    local H = tgl.hessian(cost, x, { size = 2 })
    local fH = tgl.compile { inputs = { x }, outputs = H }
    local fg = tgl.compile { inputs = { x }, outputs = g }
    local x0 = f64 { 0.3, -0.4 }
    local got = fH(x0)
    local eps = 1e-6
    for j = 1, 2 do
      local xp, xm = x0:clone(), x0:clone()
      xp:set(x0:get(j) + eps, j)
      xm:set(x0:get(j) - eps, j)
      local gp, gm = fg(xp), fg(xm)
      for i = 1, 2 do
        assert.near((gp:get(i) - gm:get(i)) / (2 * eps), got:get(i, j), 1e-6)
      end
    end
    -- a hessian is symmetric
    assert.near(got:get(1, 2), got:get(2, 1), 1e-12)
  end)
end)

describe('the crossentropy gradient op (softmax_crossentropy_dx)', function()
  local y = tgl.array({ 2, 1, 3 }, 'int32')
  local function cost(x) return tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x), y)) end

  it('gives (softmax(x) - onehot(y)) / rows, computed by hand', function()
    local xa = tgl.array({ { 0, 1, 2 }, { -1, 0, 1 }, { 3, 0, -3 } }, 'float64')
    local x = tgl.dmatrix('x')
    local g = tgl.compile{ inputs = { x }, outputs = tgl.grad(cost(x), x) }(xa)
    for i = 1, 3 do
      local row, z = {}, 0
      for j = 1, 3 do row[j] = math.exp(xa:get(i, j)); z = z + row[j] end
      for j = 1, 3 do
        local want = (row[j] / z - (j == y:get(i) and 1 or 0)) / 3
        assert.is_true(math.abs(g:get(i, j) - want) < 1e-14, ('(%d,%d)'):format(i, j))
      end
    end
    -- logits of +-1000 stay finite
    local big = tgl.compile{ inputs = { x }, outputs = tgl.grad(cost(x), x) }(xa * 1000)
    for i = 1, 3 do for j = 1, 3 do assert.is_true(big:get(i, j) == big:get(i, j)) end end
  end)

  it('has second derivatives that match finite differences (float32 and float64 kernels)', function()
    tgl.manual_seed(7)
    local C = tgl.randn(3, 3, { dtype = 'float64' })
    local err = tgl.verify_grad(function(x) return tgl.sum(tgl.grad(cost(x), x) * C) end,
                                { tgl.randn(3, 3, { dtype = 'float64' }) })
    assert.is_true(err < 1e-6, tostring(err))
    local xf = tgl.matrix('xf')
    local gf = tgl.compile{ inputs = { xf }, outputs = tgl.grad(cost(xf), xf) }
    local xd = tgl.dmatrix('xd')
    local gd = tgl.compile{ inputs = { xd }, outputs = tgl.grad(cost(xd), xd) }
    local xa = tgl.randn(3, 3, { dtype = 'float64' })
    dofile('spec/support.lua').assert_close(gd(xa), gf(xa:astype('float32')), 1e-5, 1e-7, 'float32 vs float64')
  end)
end)

describe('tgl.verify_grad', function()
  it('passes on correct functions and returns the worst error', function()
    tgl.manual_seed(8)
    local err = tgl.verify_grad(function(a, b) return tgl.tanh(a:dot(b)) end,
                                { tgl.randn(2, 3, { dtype = 'float64' }), tgl.randn(3, { dtype = 'float64' }) })
    assert.is_true(err >= 0 and err < 1e-5)
    err = tgl.verify_grad(function(p) return tgl.softmax(p) end, { tgl.randn(3, 4, { dtype = 'float64' }) })
    assert.is_true(err < 1e-5)
    err = tgl.verify_grad(function(a) return tgl.sum(a * a) end, { { 1, 2, 3 } })
    assert.is_true(err < 1e-5)
  end)

  it('raises naming the input and the 1-based position when the tolerance is not met', function()
    -- Only element (2,1) of the second input matters: it is the worst.
    local a = f64 { 0.5 }
    local b = f64 { { 0, 0 }, { 0.7, 0 } }
    local err = raises('verify_grad', function()
      tgl.verify_grad(function(p, q) return p * tgl.exp(q[{ 2, 1 }] * 3) end, { a, b }, { tol = -1 })
    end, 'the gradient of input 2 is wrong at (2,1)', 'tgl gives', 'finite differences')
    assert.matches('tol %-1', err)
  end)

  it('rejects bad arguments', function()
    raises('verify_grad', function() tgl.verify_grad(5, { f64 { 1 } }) end, 'fn must be a function')
    raises('verify_grad', function() tgl.verify_grad(function(p) return p end, {}) end, 'points must be')
    raises('verify_grad', function() tgl.verify_grad(function(p) return 3 end, { f64 { 1 } }) end,
           'fn must return a variable')
  end)
end)

describe('regressions (bugs found and fixed)', function()
    it('grad(cost, x, {known_grads=...}) adds the cost\'s own gradient', function()
    local x, u = tgl.dvector('x'), tgl.dvector('u')
    local y = x * 3
    local g = tgl.grad(tgl.sum(x * x), x, { known_grads = { [y] = u } })
    -- d/dx sum(x^2) + 3 u = 2x + 3u
    local r = tgl.compile { inputs = { x, u }, outputs = g }(f64 { 1, 2 }, f64 { 1, 1 })
    assert.same({ 5, 7 }, r:totable())
  end)

  it('the branch an ifelse does not take gets zeros of its own shape when the branches broadcast differently', function()
    local c = tgl.lscalar('c')
    local a = tgl.tensor { dtype = 'float64', ndim = 2, broadcastable = { true, false }, name = 'a' }
    local b, u = tgl.dmatrix('b'), tgl.dmatrix('u')
    local g = tgl.grad(tgl.sum(tgl.ifelse(c, a, b) * u), { a, b })
    local f = tgl.compile { inputs = { c, a, b, u }, outputs = g }
    local one = function(m, n) return tgl.ones(m, n, { dtype = 'float64' }) end
    local ga, gb = f(1, one(1, 3), one(2, 3), one(1, 3) * 2)
    assert.same({ { 2, 2, 2 } }, ga:totable())
    assert.same({ { 0, 0, 0 }, { 0, 0, 0 } }, gb:totable())
    ga, gb = f(0, one(1, 3), one(2, 3), one(2, 3) * 2)
    assert.same({ { 0, 0, 0 } }, ga:totable())
    assert.same({ { 2, 2, 2 }, { 2, 2, 2 } }, gb:totable())
  end)

  it('the gradient of a lazy ifelse does not compute the branch not taken', function()
    -- x:reshape(3) fails for a 2-vector x; the forward pass never runs it
    -- when c is true, and neither does the gradient (the branch not taken
    -- gets zeros shaped like the output gradient, never its own value).
    local x, c = tgl.dvector('x'), tgl.bscalar('c')
    local y = tgl.ifelse(c, x * x, x:reshape(3))
    local g = tgl.grad(tgl.sum(y), x)
    local f = tgl.compile { inputs = { c, x }, outputs = { y, g } }
    local ok, yv, gv = pcall(f, true, f64 { 1, 2 })
    assert.is_true(ok, tostring(yv))
    assert.same({ 1, 4 }, yv:totable())
    assert.same({ 2, 4 }, gv:totable())
    -- chosen, the failing branch does fail, naming reshape
    local bad = pcall(f, false, f64 { 1, 2 })
    assert.is_false(bad)
  end)
end)
