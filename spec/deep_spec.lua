-- deep_spec.lua — deep graphs (DESIGN.md "How correctness is checked":
-- deep chains, 10^5): chains of 10^5 elementwise nodes and of 10^4 matrix
-- products compile in every mode, give the right values, differentiate
-- (tgl.grad, and the gradient compiles), and every walk over them (the
-- rewrites, the memory plan, tgl.debugprint, tgl.todot, givens, which
-- clone and replace the graph) works without overflowing the C or the Lua
-- stack.  Values are checked against closed forms (z + 1 repeated n times
-- is x + n), recurrences computed in Lua doubles, or the same computation
-- done eagerly on arrays.
--
-- Kernels are compiled with libtcc only (tgl.config.compile = 'tcc'): a
-- fused group of 10^5 ops is valid input for the system compiler too, but
-- takes it minutes, which is not what these specs measure.
-- TGL_DEEP_N (default 100000) and TGL_DEEP_NDOT (default 10000) set the
-- chain lengths.
tgl = tgl or require 'tgl'
local tgl = tgl

local N = tonumber(os.getenv('TGL_DEEP_N')) or 100000
local NDOT = tonumber(os.getenv('TGL_DEEP_NDOT')) or 10000

local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }

dofile('spec/support.lua').with_config { floatX = 'float32', compile = 'tcc' }

-- want and got agree element by element within abs + rel * |want|.
local function assert_close(want, got, abs, rel, what)
  assert.is_true(tgl.is_array(got), what .. ': not an array')
  assert.same(want:shape(), got:shape(), what .. ': shape')
  local w, g = want:contiguous():reshape(-1), got:contiguous():reshape(-1)
  for i = 1, w:nelement() do
    local a, b = w:get(i), g:get(i)
    if not (math.abs(a - b) <= abs + rel * math.abs(a)) then
      error(('%s: element %d is %.17g, expected %.17g'):format(what, i, b, a), 2)
    end
  end
end

local function count(text, pattern)
  local n = 0
  for _ in text:gmatch(pattern) do n = n + 1 end
  return n
end

-- tgl.debugprint(v) must return without a stack overflow; the text has a
-- line per node visit (at least min_lines), names the leaf, and stays of
-- a size linear in the graph (a line is not indented by its depth without
-- bound: 10^5 levels of ' |' would make 10^10 characters).
local function check_debugprint(v, min_lines, leaf)
  local ok, text = pcall(tgl.debugprint, v)
  assert.is_true(ok, 'tgl.debugprint: ' .. tostring(text))
  local lines = count(text, '[^\n]+')
  assert.is_true(lines >= min_lines, ('%d lines for a graph of %d nodes'):format(lines, min_lines))
  assert.is_truthy(text:find("'" .. leaf .. "'", 1, true), 'the leaf ' .. leaf .. ' is not printed')
  assert.is_true(#text <= 400 * lines, ('%d characters for %d lines: indentation grows with depth')
    :format(#text, lines))
end

-- tgl.todot(v) must return the graph: a node and an edge per node.
local function check_todot(v, min_nodes)
  local ok, text = pcall(tgl.todot, v)
  assert.is_true(ok, 'tgl.todot: ' .. tostring(text))
  assert.is_truthy(text:match('^digraph tgl {'), 'not a dot graph')
  local nodes = count(text, '\n  n%d+ %[label=')
  local edges = count(text, '\n  n%d+ %-> n%d+;')
  assert.is_true(nodes >= min_nodes, ('%d nodes in the dot text, expected at least %d'):format(nodes, min_nodes))
  assert.is_true(edges >= min_nodes - 1, ('%d edges in the dot text'):format(edges))
end

describe(('a chain of %d additions z = z + 1'):format(N), function()
  local x, z
  local xa = tgl.array({ 0.5, -2, 3, 0 })
  local want
  setup(function()
    x = tgl.vector('x')
    z = x
    for _ = 1, N do z = z + 1 end
    want = xa + N -- exact in float32
  end)

  for _, mode in ipairs(MODES) do
    it(('compiles in %s and gives x + %d, on two calls'):format(mode, N), function()
      local f = tgl.compile { inputs = { x }, outputs = z, mode = mode, name = 'adds' }
      assert_close(want, f(xa), 0, 0, mode .. ' call 1')
      assert_close(want, f(xa), 0, 0, mode .. ' call 2')
    end)
  end

  it('runs with the cvm_nogc and vm linkers too (FAST_COMPILE)', function()
    for _, linker in ipairs({ 'cvm_nogc', 'vm' }) do
      local f = tgl.compile { inputs = { x }, outputs = z, mode = 'FAST_COMPILE', linker = linker }
      assert_close(want, f(xa), 0, 0, linker .. ' call 1')
      assert_close(want, f(xa), 0, 0, linker .. ' call 2')
    end
  end)

  local g
  for _, mode in ipairs(MODES) do
    it(('differentiates (d sum(z) / dx is all ones) and the gradient compiles in %s'):format(mode), function()
      g = g or tgl.grad(tgl.sum(z), x)
      local f = tgl.compile { inputs = { x }, outputs = { z, g }, mode = mode, name = 'adds_grad' }
      local zv, gv = f(xa)
      assert_close(want, zv, 0, 0, mode .. ' value')
      assert_close(tgl.ones(4), gv, 0, 0, mode .. ' gradient')
    end)
  end

  it('tgl.debugprint returns the graph without overflowing the stack', function()
    check_debugprint(z, N + 1, 'x')
  end)

  it('tgl.todot returns the graph without overflowing the stack', function()
    check_todot(z, N + 1)
  end)

  for _, mode in ipairs({ 'FAST_COMPILE', 'FAST_RUN' }) do
    it(('tgl.debugprint and tgl.todot of the compiled function work (%s)'):format(mode), function()
      local f = tgl.compile { inputs = { x }, outputs = z, mode = mode, name = 'adds' }
      local ok, text = pcall(tgl.debugprint, f)
      assert.is_true(ok, mode .. ': tgl.debugprint(f): ' .. tostring(text))
      assert.is_truthy(text:match('^function adds:'), text:sub(1, 200))
      local ok2, dot = pcall(tgl.todot, f)
      assert.is_true(ok2, mode .. ': tgl.todot(f): ' .. tostring(dot))
      assert.is_truthy(dot:match('^digraph tgl {'))
    end)

    it(('givens replace the input throughout the chain (clone and replace, %s)'):format(mode), function()
      local y = tgl.vector('y')
      local f = tgl.compile { inputs = { y }, outputs = z, givens = { [x] = y * 2 }, mode = mode }
      assert_close(xa * 2 + N, f(xa), 0, 0, mode)
    end)

    it(('tgl.optimize rewrites the chain (%s)'):format(mode), function()
      local ok, o = pcall(tgl.optimize, z, mode)
      assert.is_true(ok, mode .. ': ' .. tostring(o))
      local f = tgl.compile { inputs = { x }, outputs = o, mode = 'FAST_COMPILE' }
      assert_close(want, f(xa), 0, 0, 'tgl.optimize(z, ' .. mode .. ')')
    end)
  end
end)

describe(('a chain of %d links z = tanh(z * w) (float64)'):format(N), function()
  -- With w = 1.5 the chain goes to a fixed point of z = tanh(1.5 z) (for
  -- x ~= 0), a contraction, so rounding differences do not grow.  The
  -- oracle is the recurrence in Lua doubles, with its derivatives:
  --   z_k = tanh(w z_{k-1}),  dz_k/dw = (1 - z_k^2)(z_{k-1} + w dz_{k-1}/dw),
  --   dz_k/dx = (1 - z_k^2) w dz_{k-1}/dx.
  local x, w, z
  -- (not 0: the fixed point 0 is unstable, d z_N/dx = 1.5^N overflows,
  -- and inf * 0 makes the gradient of w NaN, rightly)
  local xs = { 0.5, -2, 3, 1e-3, -0.25 }
  local W0 = 1.5
  local want_z, want_gw, want_gx
  setup(function()
    x = tgl.dvector('x')
    w = tgl.shared(tgl.array(W0, 'float64'), 'w')
    z = x
    for _ = 1, N do z = tgl.tanh(z * w) end
    want_z, want_gx, want_gw = {}, {}, 0
    for i, x0 in ipairs(xs) do
      local zk, s, d = x0, 0, 1
      for _ = 1, N do
        local zn = math.tanh(W0 * zk)
        s = (1 - zn * zn) * (zk + W0 * s)
        d = (1 - zn * zn) * W0 * d
        zk = zn
      end
      want_z[i], want_gx[i] = zk, d
      want_gw = want_gw + s
    end
  end)

  for _, mode in ipairs(MODES) do
    it(('compiles in %s with its gradient, and both match the recurrence'):format(mode), function()
      local gw, gx = unpack(tgl.grad(tgl.sum(z), { w, x }))
      local f = tgl.compile { inputs = { x }, outputs = { z, gw, gx }, mode = mode, name = 'tanh_chain' }
      for call = 1, 2 do
        local zv, gwv, gxv = f(tgl.array(xs, 'float64'))
        local what = ('%s call %d'):format(mode, call)
        assert_close(tgl.array(want_z, 'float64'), zv, 1e-12, 1e-9, what .. ': z')
        assert_close(tgl.array(want_gw, 'float64'), gwv, 1e-12, 1e-9, what .. ': d sum(z)/dw')
        assert_close(tgl.array(want_gx, 'float64'), gxv, 1e-12, 1e-9, what .. ': d sum(z)/dx')
      end
    end)
  end

  it('tgl.debugprint and tgl.todot return the graph without overflowing the stack', function()
    check_debugprint(z, N + 1, 'x')
    check_todot(z, N + 1)
  end)
end)

describe(('a chain of %d products z = tanh(z:dot(W))'):format(NDOT), function()
  -- W is a rotation (two 2x2 blocks), so the chain decays slowly toward 0
  -- and its gradients stay well above rounding.  The oracle is the same
  -- chain computed eagerly on arrays, and backpropagation done by hand:
  --   a_k = z_k-1 W, z_k = tanh(a_k); d a_k = d z_k * (1 - z_k^2);
  --   dW += z_k-1' d a_k; d z_k-1 = d a_k W'.
  local x, W, z, cost
  local c, s = math.cos(0.3), math.sin(0.3)
  local Wv = tgl.array({ { c, -s, 0, 0 }, { s, c, 0, 0 }, { 0, 0, c, -s }, { 0, 0, s, c } }, 'float64')
  local xa = tgl.array({ { 0.5, -1, 2, 0.25 }, { -3, 0.125, 1, -0.5 } }, 'float64')
  local want_z, want_gW, want_gx
  setup(function()
    x = tgl.dmatrix('x')
    W = tgl.shared(Wv, 'W')
    z = x
    for _ = 1, NDOT do z = tgl.tanh(z:dot(W)) end
    cost = tgl.sum(z)
    local zs = { [0] = xa }
    for k = 1, NDOT do zs[k] = tgl.tanh(zs[k - 1]:dot(Wv)) end
    local g = tgl.ones(2, 4, { dtype = 'float64' })
    local gW = tgl.zeros(4, 4, { dtype = 'float64' })
    for k = NDOT, 1, -1 do
      local ga = g * (1 - zs[k] * zs[k])
      gW = gW + zs[k - 1]:T():dot(ga)
      g = ga:dot(Wv:T())
    end
    want_z, want_gW, want_gx = zs[NDOT], gW, g
  end)

  for _, mode in ipairs(MODES) do
    it(('compiles in %s with its gradient, and both match the eager computation'):format(mode), function()
      local gW, gx = unpack(tgl.grad(cost, { W, x }))
      local f = tgl.compile { inputs = { x }, outputs = { z, gW, gx }, mode = mode, name = 'dot_chain' }
      for call = 1, 2 do
        local zv, gWv, gxv = f(xa)
        local what = ('%s call %d'):format(mode, call)
        assert_close(want_z, zv, 1e-12, 1e-8, what .. ': z')
        assert_close(want_gW, gWv, 1e-12, 1e-8, what .. ': d cost/dW')
        assert_close(want_gx, gxv, 1e-12, 1e-8, what .. ': d cost/dx')
      end
    end)
  end

  it('an SGD step on W (FAST_RUN: gemm, update in place) compiles and runs', function()
    local Ws = tgl.shared(Wv, 'Ws')
    local zz = x
    for _ = 1, NDOT do zz = tgl.tanh(zz:dot(Ws)) end
    local gW = tgl.grad(tgl.sum(zz), Ws)
    local f = tgl.compile { inputs = { x }, outputs = tgl.sum(zz), updates = { { Ws, Ws - 0.5 * gW } },
                            name = 'dot_sgd' }
    local c1 = f(xa)
    assert_close(tgl.sum(want_z), c1, 1e-12, 1e-8, 'cost before the step')
    assert_close(Wv - want_gW * 0.5, Ws:get_value(), 1e-12, 1e-8, 'W after one step')
  end)

  it('tgl.debugprint and tgl.todot return the graph without overflowing the stack', function()
    check_debugprint(z, 2 * NDOT, 'x')
    check_todot(z, 2 * NDOT)
  end)
end)
