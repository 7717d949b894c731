-- compile_spec.lua — tgl.compile and calling compiled functions (API.md
-- "Compiling and calling", DESIGN.md "The CVM"): the forms of inputs and
-- outputs, argument conversion and checks, updates (applied together,
-- after the outputs), shared values, givens, the three linkers, trust_input,
-- f.fn{n_calls=}, the lazy ifelse, profiles, debugprint, compile errors,
-- and safety: a call that fails leaves every shared variable as it was.
tgl = tgl or require 'tgl'
local tgl = tgl
local C = require('tgl.core').C

-- The line of the caller: where a node is built, for source:line checks.
local function here() return debug.getinfo(2, 'l').currentline end

-- The error f raises; asserts it is 'tgl.<fname>: ...' raised at a line of
-- this file (the caller's line, not tgl's internals) and mentions each of
-- the plain-text needles.
local function raises(fname, f, ...)
  local ok, err = pcall(f)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  assert.matches('compile_spec%.lua:%d+: tgl%.' .. fname:gsub('%p', '%%%0') .. ': ', err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err, 1)
  end
  return err
end

-- Bitwise equality of two arrays (dtype, shape and every bit).
local function same_bits(a, b)
  return C.tgl_array_equal_bits(a.p, b.p) ~= 0
end

local function assert_bits(want, got, what)
  assert.is_true(same_bits(want, got), (what or 'arrays') .. ' differ:\n' .. tostring(want)
                 .. '\nvs\n' .. tostring(got))
end

local function assert_close(want, got, tol)
  tol = tol or 1e-12
  local w, g = want:reshape(-1), got:reshape(-1)
  assert.equals(w:nelement(), g:nelement())
  for i = 1, w:nelement() do
    local a, b = w:get(i), g:get(i)
    if math.abs(a - b) > tol * math.max(1, math.abs(a)) then
      error(('element %d: expected %.17g, got %.17g'):format(i, a, b), 2)
    end
  end
end

local function f64(t) return tgl.array(t, 'float64') end

-- A small 2-layer tanh MLP training step on float64 data with SGD updates;
-- a fresh set of parameters each time (same values for the same seed).
local function mlp_step(linker, seed)
  tgl.manual_seed(seed or 7)
  local W1 = tgl.shared(tgl.randn(5, 4, { dtype = 'float64' }) * 0.5, 'W1')
  local b1 = tgl.shared(tgl.randn(4, { dtype = 'float64' }) * 0.1, 'b1')
  local W2 = tgl.shared(tgl.randn(4, 3, { dtype = 'float64' }) * 0.5, 'W2')
  local b2 = tgl.shared(tgl.zeros(3, { dtype = 'float64' }), 'b2')
  local x, y = tgl.dmatrix('x'), tgl.ivector('y')
  local h = tgl.tanh(x:dot(W1) + b1)
  local p = tgl.softmax(h:dot(W2) + b2)
  local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
  local params = { W1, b1, W2, b2 }
  local grads = tgl.grad(cost, params)
  local ups = {}
  for i, v in ipairs(params) do ups[i] = { v, v - 0.3 * grads[i] } end
  local f = tgl.compile { inputs = { x, y }, outputs = { cost, p }, updates = ups,
                          linker = linker, name = 'mlp_' .. linker }
  return f, params
end

local function batches(n)
  tgl.manual_seed(99)
  local out = {}
  for k = 1, n do
    local xb = tgl.randn(6, 5, { dtype = 'float64' })
    local yb = tgl.array({ 1, 2, 3, 1 + k % 3, 2, 3 }, 'int32')
    out[k] = { xb, yb }
  end
  return out
end

describe('tgl.compile inputs and outputs', function()
  it('a single output variable gives one array', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = x * 2 + 1 }
    local r = f(f64 { 1, 2, 3 })
    assert.is_true(tgl.is_array(r))
    assert.same({ 3, 5, 7 }, r:totable())
    assert.equals(1, select('#', f(f64 { 0 })))
  end)

  it('a table of outputs gives one array per output, in order', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = { x + 1, tgl.sum(x), x * x } }
    assert.equals(3, select('#', f(f64 { 1, 2 })))
    local a, s, sq = f(f64 { 1, 2 })
    assert.same({ 2, 3 }, a:totable())
    assert.equals(3, s:totable())
    assert.same({ 1, 4 }, sq:totable())
  end)

  it('a table holding one output still gives one array', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = { -x } }
    assert.same({ -1, -2 }, f(f64 { 1, 2 }):totable())
  end)

  it('a single input may be given without a table', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = x, outputs = x * 3 }
    assert.same({ 3, 6 }, f(f64 { 1, 2 }):totable())
  end)

  it('zero outputs with only updates returns nothing and applies the updates', function()
    local c = tgl.shared(f64 { 1, 2 }, 'c')
    local f = tgl.compile { inputs = {}, outputs = {}, updates = { { c, c * 10 } } }
    assert.equals(0, select('#', f()))
    assert.same({ 10, 20 }, c:get_value():totable())
    f()
    assert.same({ 100, 200 }, c:get_value():totable())
  end)

  it('an output may be an input, a shared variable or a constant', function()
    local x = tgl.dvector('x')
    local W = tgl.shared(f64 { 4, 5 }, 'W')
    local f = tgl.compile { inputs = { x }, outputs = { x, W, tgl.constant(f64 { 7 }) } }
    local a, w, k = f(f64 { 1, 2 })
    assert.same({ 1, 2 }, a:totable())
    assert.same({ 4, 5 }, w:totable())
    assert.same({ 7 }, k:totable())
  end)

  it('the same expression built twice is one node, computed once', function()
    local x = tgl.dvector('x')
    local a, b = tgl.exp(x) * 2, tgl.exp(x) * 2
    -- debugprint names nodes by identity: the second root is the first one
    local roots = {}
    for l in tgl.debugprint({ a, b }):gmatch('[^\n]+') do
      if not l:find('^ ') then roots[#roots + 1] = l end
    end
    assert.equals(2, #roots)
    assert.matches('^mul %[id A%]', roots[1])
    assert.matches('^mul %[id A%]', roots[2])
    local f = tgl.compile { inputs = { x }, outputs = { a, b } }
    local ra, rb = f(f64 { 0, 1 })
    -- (libtcc's kernel calls libm's exp, the system compiler's a vector
    -- exp that may differ in the last bit)
    assert.equals(2, ra:get(1))
    assert.is_true(math.abs(ra:get(2) - 2 * math.exp(1)) <= 1e-15 * 2 * math.exp(1))
    assert.same(ra:totable(), rb:totable())
  end)
end)

describe('calling converts arguments to the declared types', function()
  local x = tgl.dvector('x')
  local f = tgl.compile { inputs = { x }, outputs = x * 2, name = 'double' }

  it('tables become arrays of the input dtype', function()
    local r = f({ 1.25, 2 })
    assert.equals('float64', r.dtype)
    assert.same({ 2.5, 4 }, r:totable())
  end)

  it('arrays of another dtype are converted (float32, int32, bool)', function()
    assert.same({ 2, 4 }, f(tgl.array({ 1, 2 }, 'int32')):totable())
    assert.same({ 3 }, f(tgl.array({ 1.5 }, 'float32')):totable())
    assert.same({ 2, 0 }, f(tgl.array({ true, false })):totable())
  end)

  it('a number becomes a 0-d array for a scalar input', function()
    local s = tgl.dscalar('s')
    local g = tgl.compile { inputs = { s }, outputs = s * s }
    assert.equals(6.25, g(2.5):totable())
    assert.equals(9, g(tgl.array(3, 'int64')):totable())
  end)

  it('an integer input truncates float arguments as astype does', function()
    local i = tgl.ivector('i')
    local g = tgl.compile { inputs = { i }, outputs = i + 1 }
    local r = g(f64 { 1.9, -2.5 })
    assert.equals('int32', r.dtype)
    assert.same({ 2, -1 }, r:totable())
  end)

  it('accepts strided views (transposed, reversed) as they are', function()
    local A, v = tgl.dmatrix('A'), tgl.dvector('v')
    local g = tgl.compile { inputs = { A, v }, outputs = { A:dot(v), A * 2, v * 10 } }
    local M = f64 { { 1, 2, 3 }, { 4, 5, 6 } }
    local rev = f64 { 1, 2, 3 }[{ { -1, 1, -1 } }]
    assert.same({ 3, 2, 1 }, rev:totable())
    local r1, r2 = g(M:T(), f64 { 1, 1 })
    assert.same({ 5, 7, 9 }, r1:totable())
    assert.same({ { 2, 8 }, { 4, 10 }, { 6, 12 } }, r2:totable())
    local r3, _, r4 = g(M:T(), rev[{ { 1, 2 } }])   -- {3, 2}, a negative-stride view
    assert.same({ 1 * 3 + 4 * 2, 2 * 3 + 5 * 2, 3 * 3 + 6 * 2 }, r3:totable())
    assert.same({ 30, 20 }, r4:totable())
  end)

  it('does not change the caller\'s array', function()
    local a = tgl.array({ 1, 2 }, 'float32')
    f(a)
    assert.equals('float32', a.dtype)
    assert.same({ 1, 2 }, a:totable())
  end)

  it('a wrong number of inputs names the function and the counts', function()
    raises('double', function() f() end, 'takes 1 inputs, got 0')
    raises('double', function() f(f64 { 1 }, f64 { 2 }) end, 'takes 1 inputs, got 2')
  end)

  it('an array of the wrong rank names the input, expected and got types', function()
    raises('double', function() f(f64 { { 1, 2 } }) end,
           "input 1 ('x') expects float64 (?,), got float64 (1,2)")
    raises('double', function() f(5) end, "input 1 ('x') expects float64 (?,), got float64 ()")
  end)

  it('the position of the bad input is the one named', function()
    local a, b = tgl.dvector('a'), tgl.dmatrix('b')
    local g = tgl.compile { inputs = { a, b }, outputs = a + b, name = 'pair' }
    raises('pair', function() g(f64 { 1 }, f64 { 1 }) end,
           "input 2 ('b') expects float64 (?,?), got float64 (1,)")
  end)

  it('a broadcastable axis of the input type must have size 1', function()
    local r = tgl.drow('r')
    local g = tgl.compile { inputs = { r }, outputs = r * 1, name = 'rowf' }
    assert.same({ { 2, 3 } }, g(f64 { { 2, 3 } }):totable())
    raises('rowf', function() g(f64 { { 1 }, { 2 } }) end, "input 1 ('r') expects float64 (1,?)",
           'got float64 (2,1)')
  end)

  it('a string or a ragged table is rejected naming the input', function()
    raises('double', function() f('abc') end, 'input 1 must be an array, a number or a table, got string')
    raises('double', function() f({ { 1, 2 }, { 3 } }) end, 'input 1:')
  end)
end)

describe('updates', function()
  it('are applied after the outputs are computed: outputs see the old values', function()
    local c = tgl.shared(f64 { 1 }, 'c')
    local f = tgl.compile { inputs = {}, outputs = c * 10, updates = { { c, c + 1 } } }
    assert.same({ 10 }, f():totable())
    assert.same({ 2 }, c:get_value():totable())
    assert.same({ 20 }, f():totable())
    assert.same({ 3 }, c:get_value():totable())
  end)

  it('all see the old values: {{a, b}, {b, a}} swaps', function()
    local a = tgl.shared(f64 { 1, 2 }, 'a')
    local b = tgl.shared(f64 { 10, 20 }, 'b')
    local f = tgl.compile { inputs = {}, outputs = {}, updates = { { a, b }, { b, a } } }
    f()
    assert.same({ 10, 20 }, a:get_value():totable())
    assert.same({ 1, 2 }, b:get_value():totable())
    f()
    assert.same({ 1, 2 }, a:get_value():totable())
    assert.same({ 10, 20 }, b:get_value():totable())
  end)

  it('{{a, a + 1}, {b, a}} gives b the old a', function()
    local a = tgl.shared(f64 { 5 }, 'a')
    local b = tgl.shared(f64 { 0 }, 'b')
    local f = tgl.compile { inputs = {}, outputs = {}, updates = { { a, a + 1 }, { b, a } } }
    f()
    assert.same({ 6 }, a:get_value():totable())
    assert.same({ 5 }, b:get_value():totable())
    f()
    assert.same({ 7 }, a:get_value():totable())
    assert.same({ 6 }, b:get_value():totable())
  end)

  it('may be given as a {[shared] = expression} table', function()
    local a = tgl.shared(f64 { 1 }, 'a')
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = {}, updates = { [a] = a + x } }
    f(f64 { 4 })
    assert.same({ 5 }, a:get_value():totable())
  end)

  it('a float64 step on a float32 variable is cast to float32', function()
    local w = tgl.shared(tgl.array({ 1, 2 }, 'float32'), 'w')
    local d = tgl.dvector('d')
    local f = tgl.compile { inputs = { d }, outputs = {}, updates = { { w, w - d } } }
    f(f64 { 0.5, 0.25 })
    assert.equals('float32', w:get_value().dtype)
    assert.same({ 0.5, 1.75 }, w:get_value():totable())
  end)

  it('use the inputs of the call', function()
    local acc = tgl.shared(f64 { 0, 0 }, 'acc')
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.sum(acc), updates = { { acc, acc + x } } }
    assert.equals(0, f(f64 { 1, 2 }):totable())
    assert.equals(3, f(f64 { 10, 20 }):totable())
    assert.same({ 11, 22 }, acc:get_value():totable())
  end)
end)

describe('shared variables', function()
  it('get_value returns a copy: mutating it does not change the variable', function()
    local W = tgl.shared(f64 { 1, 2, 3 }, 'W')
    local v = W:get_value()
    v:set(99, 1)
    assert.same({ 1, 2, 3 }, W:get_value():totable())
    local f = tgl.compile { inputs = {}, outputs = W * 1 }
    assert.same({ 1, 2, 3 }, f():totable())
  end)

  it('get_value{borrow=true} is the value itself', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local v = W:get_value { borrow = true }
    v:set(7, 2)
    assert.same({ 1, 7 }, W:get_value():totable())
  end)

  it('shared(value) copies value; mutating it later does not change the variable', function()
    local a = f64 { 1, 2 }
    local W = tgl.shared(a, 'W')
    a:set(50, 1)
    assert.same({ 1, 2 }, W:get_value():totable())
  end)

  it('set_value copies its argument and is seen by the next call', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local f = tgl.compile { inputs = {}, outputs = W + 0 }
    local a = f64 { 3, 4 }
    W:set_value(a)
    a:set(100, 1)
    assert.same({ 3, 4 }, f():totable())
    W:set_value({ 5, 6, 7 })  -- a table of the variable's dtype; the length may change
    assert.same({ 5, 6, 7 }, f():totable())
  end)

  it('set_value checks dtype and rank, naming the variable and both types', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    raises('set_value', function() W:set_value(tgl.array({ 1, 2 }, 'float32')) end,
           "'W'", 'expects float64 (?,), got float32 (2,)')
    raises('set_value', function() W:set_value(f64 { { 1, 2 } }) end,
           'expects float64 (?,), got float64 (1,2)')
    assert.same({ 1, 2 }, W:get_value():totable())
  end)

  it('set_value checks broadcastable axes', function()
    local r = tgl.shared(f64 { { 1, 2, 3 } }, 'r', { broadcastable = { true, false } })
    raises('set_value', function() r:set_value(f64 { { 1, 2, 3 }, { 4, 5, 6 } }) end,
           'expects float64 (1,?), got float64 (2,3)')
    r:set_value(f64 { { 7, 8 } })
    assert.same({ { 7, 8 } }, r:get_value():totable())
  end)

  it('a shared variable declared broadcastable must have size 1 there', function()
    raises('shared', function() tgl.shared(f64 { { 1 }, { 2 } }, 's', { broadcastable = { true, false } }) end,
           'broadcastable')
  end)

  it('only shared variables have values', function()
    local x = tgl.dvector('x')
    raises('get_value', function() x:get_value() end, 'only shared variables')
    raises('set_value', function() x:set_value(f64 { 1 }) end, 'only shared variables')
  end)
end)

describe('state across functions and calls', function()
  it('a shared variable updated by one function is seen by another', function()
    local W = tgl.shared(f64 { 1 }, 'W')
    local inc = tgl.compile { inputs = {}, outputs = {}, updates = { { W, W + 1 } } }
    local read = tgl.compile { inputs = {}, outputs = W * 10 }
    assert.same({ 10 }, read():totable())
    inc()
    inc()
    assert.same({ 30 }, read():totable())
  end)

  it('repeated calls do not leak array memory, whatever the linker', function()
    local C = require('tgl.core').C
    for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
      local x = tgl.dmatrix('x')
      local S = tgl.shared(tgl.zeros(20, 20, { dtype = 'float64' }), 'S')
      local f = tgl.compile { inputs = { x }, outputs = tgl.sum(tgl.tanh(x:dot(S)) + 1),
                              updates = { { S, S * 0.5 + 0.001 } }, linker = linker }
      local xa = tgl.ones(20, 20, { dtype = 'float64' })
      for _ = 1, 3 do f(xa) end
      collectgarbage()
      collectgarbage()
      local before = tonumber(C.tgl_memory_live_bytes())
      for _ = 1, 100 do f(xa) end
      f.fn { n_calls = 100 }
      collectgarbage()
      collectgarbage()
      -- Dropped outputs wait in the function's pool to be reused by the
      -- next calls (doc/compile.md, "Outputs and their buffers"): a few
      -- hundred bytes each (a scalar here), nothing else may remain.
      local s = f:output_stats()
      local grown = tonumber(C.tgl_memory_live_bytes()) - before
      assert.is_true(grown >= 0 and grown <= (s.free + s.held) * 256, linker .. ': ' .. grown)
      assert.equals(0, s.held, linker)
    end
  end)
end)

describe('givens', function()
  it('replaces an input by an expression over a shared dataset with a symbolic index', function()
    -- the logreg pattern (examples/logreg.lua): minibatch `index` of the data
    tgl.manual_seed(3)
    local X = tgl.randn(12, 4, { dtype = 'float64' })
    local Y = tgl.array({ 1, 2, 3, 1, 2, 3, 3, 2, 1, 1, 1, 2 }, 'int32')
    local x, y = tgl.dmatrix('x'), tgl.ivector('y')
    local W = tgl.shared(tgl.zeros(4, 3, { dtype = 'float64' }), 'W')
    local b = tgl.shared(tgl.zeros(3, { dtype = 'float64' }), 'b')
    local p = tgl.softmax(x:dot(W) + b)
    local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
    local gW, gb = unpack(tgl.grad(cost, { W, b }))
    local ups = { { W, W - 0.5 * gW }, { b, b - 0.5 * gb } }
    local Xs, Ys = tgl.shared(X, 'Xs'), tgl.shared(Y, 'Ys')
    local index, B = tgl.lscalar('index'), 4
    local train = tgl.compile {
      inputs = { index }, outputs = cost, updates = ups, name = 'train',
      givens = { [x] = Xs[{ { index * B + 1, (index + 1) * B } }],
                 [y] = Ys[{ { index * B + 1, (index + 1) * B } }] },
    }
    local costs = {}
    for k = 0, 2 do costs[k + 1] = train(k):totable() end
    local Wg, bg = W:get_value(), b:get_value()
    -- the same steps with the minibatches passed in
    W:set_value(tgl.zeros(4, 3, { dtype = 'float64' }))
    b:set_value(tgl.zeros(3, { dtype = 'float64' }))
    local direct = tgl.compile { inputs = { x, y }, outputs = cost, updates = ups }
    for k = 0, 2 do
      local rows = { { k * B + 1, (k + 1) * B } }
      assert.equals(costs[k + 1], direct(X[rows], Y[rows]):totable())
    end
    assert_bits(W:get_value(), Wg, 'W')
    assert_bits(b:get_value(), bg, 'b')
    assert.near(math.log(3), costs[1], 1e-12)  -- zero weights: uniform predictions
    assert.is_true(costs[3] < costs[1] + 0.5)
  end)

  it('the replaced input need not be listed in inputs', function()
    local x = tgl.dvector('x')
    local data = tgl.shared(f64 { 1, 2, 3 }, 'data')
    local f = tgl.compile { inputs = {}, outputs = tgl.sum(x * x), givens = { [x] = data * 2 } }
    assert.equals(56, f():totable())
  end)

  it('replacement by a number or array becomes a constant', function()
    local x, y = tgl.dscalar('x'), tgl.dscalar('y')
    local f = tgl.compile { inputs = { y }, outputs = x * y, givens = { [x] = tgl.array(4, 'float64') } }
    assert.equals(12, f(3):totable())
  end)
end)

describe('linkers', function()
  it("'cvm', 'cvm_nogc' and 'vm' give bitwise identical results on an MLP step with updates", function()
    local data = batches(4)
    local results = {}
    for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
      local f, params = mlp_step(linker)
      assert.equals(linker, f.linker)
      local r = { costs = {}, probs = {} }
      for k, b in ipairs(data) do
        local cost, p = f(b[1], b[2])
        r.costs[k], r.probs[k] = cost, p
      end
      r.params = {}
      for i, v in ipairs(params) do r.params[i] = v:get_value() end
      results[linker] = r
    end
    local ref = results.cvm
    -- training did something
    assert.is_true(ref.costs[4]:get() ~= ref.costs[1]:get())
    for _, linker in ipairs({ 'cvm_nogc', 'vm' }) do
      local r = results[linker]
      for k = 1, #data do
        assert_bits(ref.costs[k], r.costs[k], linker .. ' cost ' .. k)
        assert_bits(ref.probs[k], r.probs[k], linker .. ' probabilities ' .. k)
      end
      for i = 1, 4 do assert_bits(ref.params[i], r.params[i], linker .. ' parameter ' .. i) end
    end
  end)

  it('cvm_nogc does not let a returned output change when called again', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = { tgl.exp(x) + 1, (x * 2)[{ { 1, 2 } }] },
                            linker = 'cvm_nogc' }
    local o1, v1 = f(f64 { 0, 0, 0 })
    local keep1, keepv1 = o1:clone(), v1:clone()
    local o2, v2 = f(f64 { 1, 2, 3 })
    local o3 = f(f64 { 5, 5, 5 })
    assert_bits(keep1, o1, 'first output')
    assert_bits(keepv1, v1, 'first view output')
    assert.same({ 2, 2, 2 }, o1:totable())
    assert.same({ 2, 4 }, v2:totable())
    assert.is_true(o2:get(1) ~= o3:get(1))
  end)

  it('cvm_nogc reuses its buffers when the outputs are dropped and stays right', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.sum(tgl.exp(x) * x), linker = 'cvm_nogc' }
    for k = 1, 5 do
      local v = f(f64 { k, 0 }):totable()
      assert.near(math.exp(k) * k, v, 1e-9)
    end
  end)

  it('an unknown linker or mode is a compile error', function()
    local x = tgl.dvector('x')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, linker = 'c' } end,
           "linker must be 'cvm', 'cvm_nogc' or 'vm'")
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, mode = 'FAST' } end,
           'mode must be')
  end)
end)

describe('trust_input and f.fn{n_calls=}', function()
  it('trust_input = true works with arrays of the right types', function()
    local x, y = tgl.dmatrix('x'), tgl.dvector('y')
    local f = tgl.compile { inputs = { x, y }, outputs = x:dot(y) }
    local a, b = f64 { { 1, 2 }, { 3, 4 } }, f64 { 1, 1 }
    local want = f(a, b)
    f.trust_input = true
    local got = f(a, b)
    assert_bits(want, got)
    assert.same({ 3, 7 }, got:totable())
    assert.same({ 5, 11 }, f(a, f64 { 1, 2 }):totable())
  end)

  it('trust_input still counts the arguments, for every number of inputs', function()
    for nin = 1, 5 do
      local vars, args = {}, {}
      for i = 1, nin do vars[i] = tgl.dvector('v' .. i); args[i] = f64 { i, i } end
      local sum = vars[1]
      for i = 2, nin do sum = sum + vars[i] end
      local f = tgl.compile { inputs = vars, outputs = sum, name = 'sum' .. nin }
      f.trust_input = true
      assert.same({ nin * (nin + 1) / 2, nin * (nin + 1) / 2 }, f(unpack(args, 1, nin)):totable())
      local ok, err = pcall(f, unpack(args, 1, nin + 1))
      assert.is_false(ok)
      assert.truthy(tostring(err):find(('takes %d inputs, got %d'):format(nin, nin + 1), 1, true), tostring(err))
      ok, err = pcall(f, unpack(args, 1, nin - 1))
      assert.is_false(ok)
      assert.truthy(tostring(err):find(('takes %d inputs, got %d'):format(nin, nin - 1), 1, true), tostring(err))
      args[nin] = { nin, nin }
      ok, err = pcall(f, unpack(args, 1, nin))
      assert.is_false(ok)
      assert.truthy(tostring(err):find(('input %d must be an array with trust_input'):format(nin), 1, true), tostring(err))
    end
  end)

  it('f.fn{n_calls = N} advances a counter by N', function()
    local c = tgl.shared(tgl.array(0, 'int64'), 'c')
    local f = tgl.compile { inputs = {}, outputs = c * 1, updates = { { c, c + 1 } } }
    assert.equals(0, f():totable())
    f.fn { n_calls = 100 }
    assert.equals(101, c:get_value():totable())
    -- the outputs of the last run come back
    assert.equals(101, f.fn { n_calls = 1 }:totable())
    assert.equals(102, c:get_value():totable())
    f.fn { n_calls = 0 }
    assert.equals(102, c:get_value():totable())
  end)

  it('f.fn reuses the inputs of the last call', function()
    local acc = tgl.shared(f64 { 0, 0 }, 'acc')
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = {}, updates = { { acc, acc + x } } }
    f(f64 { 1, 2 })
    f.fn { n_calls = 3 }
    assert.same({ 4, 8 }, acc:get_value():totable())
    raises('function', function() f.fn { n_calls = -1 } end, 'n_calls must be a non-negative integer')
    raises('function', function() f.fn { n_calls = 1.5 } end, 'n_calls must be a non-negative integer')
  end)

  it('f.fn before any call of a function with inputs is an error', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = x + 1, name = 'fresh' }
    raises('fresh', function() f.fn { n_calls = 2 } end, 'call it once with its inputs')
  end)

  it('batches indexed by a step counter: n_calls runs equal separate calls', function()
    -- the paper's pattern: all batches in a shared variable, index = step
    local data = batches(5)
    local Xall = tgl.concatenate({ data[1][1], data[2][1], data[3][1], data[4][1], data[5][1] }, 1)
    local Yall = tgl.concatenate({ data[1][2], data[2][2], data[3][2], data[4][2], data[5][2] }, 1)
    local function build()
      tgl.manual_seed(11)
      local W = tgl.shared(tgl.randn(5, 3, { dtype = 'float64' }), 'W')
      local x, y = tgl.dmatrix('x'), tgl.ivector('y')
      local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x:dot(W)), y))
      return W, x, y, cost, tgl.grad(cost, W)
    end
    -- separate calls with the batches passed in
    local W1, x1, y1, cost1, g1 = build()
    local f1 = tgl.compile { inputs = { x1, y1 }, outputs = cost1, updates = { { W1, W1 - 0.2 * g1 } } }
    for k = 1, 5 do f1(data[k][1], data[k][2]) end
    -- one call, then four more inside C
    local W2, x2, y2, cost2, g2 = build()
    local Xs, Ys = tgl.shared(Xall, 'Xall'), tgl.shared(Yall, 'Yall')
    local step = tgl.shared(tgl.array(0, 'int64'), 'step')
    local rows = { { step * 6 + 1, (step + 1) * 6 } }
    local f2 = tgl.compile { inputs = {}, outputs = cost2,
                             updates = { { W2, W2 - 0.2 * g2 }, { step, step + 1 } },
                             givens = { [x2] = Xs[rows], [y2] = Ys[rows] } }
    f2()
    f2.fn { n_calls = 4 }
    assert.equals(5, step:get_value():totable())
    assert_bits(W1:get_value(), W2:get_value(), 'W after 5 steps')
  end)

  it('a failure in the middle of n_calls keeps the runs before it', function()
    local X = tgl.shared(f64 { { 1, 2 }, { 3, 4 }, { 5, 6 } }, 'X')
    local step = tgl.shared(tgl.array(1, 'int64'), 'step')
    local acc = tgl.shared(f64 { 0, 0 }, 'acc')
    local f = tgl.compile { inputs = {}, outputs = X[step],
                            updates = { { acc, acc + X[step] }, { step, step + 1 } }, name = 'walk' }
    f()
    raises('walk', function() f.fn { n_calls = 4 } end, 'index 4 is out of range')
    assert.equals(4, step:get_value():totable())
    assert.same({ 9, 12 }, acc:get_value():totable())
  end)
end)

describe('lazy ifelse', function()
  -- `bad` fails at run time: M is 2x3 and v has 2 elements.
  local c = tgl.bscalar('c')
  local M, v = tgl.dmatrix('M'), tgl.dvector('v')
  local bad = M:dot(v)
  local bad_line = here() - 1
  local good = v * 2
  local M23 = tgl.zeros(2, 3, { dtype = 'float64' })

  it('evaluated eagerly on arrays, picks the branch the condition names', function()
    local a, b = f64 { 1, 2 }, f64 { 3, 4 }
    assert.same({ 1, 2 }, tgl.ifelse(tgl.array(1), a, b):totable())
    assert.same({ 3, 4 }, tgl.ifelse(tgl.array(0), a, b):totable())
    assert.same({ 1, 2 }, tgl.ifelse(tgl.array(-0.5), a, b):totable())
    assert.same({ 3, 4 }, tgl.ifelse(tgl.array(false), a, b):totable())
    assert.has_error(function() tgl.ifelse(tgl.array({ 1, 0 }), a, b) end)
  end)

  it('does not compute the branch not taken', function()
    for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
      local f = tgl.compile { inputs = { c, M, v }, outputs = tgl.ifelse(c, good, bad), linker = linker }
      assert.same({ 2, 4 }, f(true, M23, f64 { 1, 2 }):totable())
      local f2 = tgl.compile { inputs = { c, M, v }, outputs = tgl.ifelse(c, bad, good), linker = linker }
      assert.same({ 6, 8 }, f2(false, M23, f64 { 3, 4 }):totable())
    end
  end)

  it('computes the chosen branch, and the failing one does fail when chosen', function()
    local f = tgl.compile { inputs = { c, M, v }, outputs = tgl.ifelse(c, good, bad), name = 'pick' }
    raises('pick', function() f(false, M23, f64 { 1, 2 }) end, 'dot', 'inner sizes',
           'compile_spec.lua:' .. bad_line)
    assert.same({ 3, 3 }, f(false, tgl.ones(2, 2, { dtype = 'float64' }), f64 { 1, 2 }):totable())
    assert.same({ 2, 4 }, f(true, tgl.ones(2, 2, { dtype = 'float64' }), f64 { 1, 2 }):totable())
  end)

  it('an out-of-range index in the branch not taken is never evaluated', function()
    local x, i = tgl.dvector('x'), tgl.lscalar('i')
    local inrange = tgl.lt(i, x:size(1) + 1)
    local f = tgl.compile { inputs = { x, i }, outputs = tgl.ifelse(inrange, x[i], tgl.constant(-1, 'float64')) }
    assert.equals(20, f(f64 { 10, 20 }, 2):totable())
    assert.equals(-1, f(f64 { 10, 20 }, 7):totable())
  end)

  it('nests: each of the three leaves is chosen, the others are not computed', function()
    local c1, c2 = tgl.bscalar('c1'), tgl.bscalar('c2')
    local out = tgl.ifelse(c1, tgl.ifelse(c2, good, bad), v + 100)
    local f = tgl.compile { inputs = { c1, c2, M, v }, outputs = out, name = 'nested' }
    assert.same({ 2, 4 }, f(true, true, M23, f64 { 1, 2 }):totable())
    assert.same({ 101, 102 }, f(false, true, M23, f64 { 1, 2 }):totable())
    assert.same({ 101, 102 }, f(false, false, M23, f64 { 1, 2 }):totable())
    raises('nested', function() f(true, false, M23, f64 { 1, 2 }) end, 'inner sizes')
    local out2 = tgl.ifelse(c1, v - 1, tgl.ifelse(c2, bad, good))
    local g = tgl.compile { inputs = { c1, c2, M, v }, outputs = out2 }
    assert.same({ 0, 1 }, g(true, true, M23, f64 { 1, 2 }):totable())
    assert.same({ 2, 4 }, g(false, false, M23, f64 { 1, 2 }):totable())
  end)

  it('a value used by a branch and by another output is computed once for both', function()
    local s = tgl.exp(v)
    local f = tgl.compile { inputs = { c, v }, outputs = { tgl.ifelse(c, s + 1, v), s * 2 } }
    local a, b = f(true, f64 { 0 })
    assert.same({ 2 }, a:totable())
    assert.same({ 2 }, b:totable())
    a, b = f(false, f64 { 0 })
    assert.same({ 0 }, a:totable())
    assert.same({ 2 }, b:totable())
  end)

  it('chooses again at each of n_calls runs', function()
    -- count up to 3, then a branch that would fail if it ran: it does not
    local n = tgl.shared(tgl.array(0, 'int64'), 'n')
    local acc = tgl.shared(f64 { 0, 0 }, 'acc')
    local Mbad = tgl.shared(tgl.zeros(2, 3, { dtype = 'float64' }), 'Mbad')
    local step = tgl.ifelse(tgl.lt(n, 3), tgl.constant(f64 { 1, 1 }), Mbad:dot(acc))
    local f = tgl.compile { inputs = {}, outputs = {}, updates = { { acc, acc + step }, { n, n + 1 } } }
    f()
    f.fn { n_calls = 2 }
    assert.same({ 3, 3 }, acc:get_value():totable())
    assert.has_error(function() f() end)
    assert.same({ 3, 3 }, acc:get_value():totable())
    assert.equals(3, n:get_value():totable())
  end)

  it('the program shows the jump around each branch', function()
    local f = tgl.compile { inputs = { c, M, v }, outputs = tgl.ifelse(c, good, bad) }
    local prog = f:program()
    assert.matches('if not c goto %d+', prog)
    assert.matches('goto %d+', prog)
  end)

  it('on arrays it picks the chosen value', function()
    assert.same({ 1 }, tgl.ifelse(true, f64 { 1 }, f64 { 2 }):totable())
    assert.same({ 2 }, tgl.ifelse(tgl.array(false), f64 { 1 }, f64 { 2 }):totable())
  end)
end)

describe('profile and debugprint', function()
  -- The op rows of a profile: name -> {nodes, calls, ms}.
  local function profile_rows(s)
    local rows, n = {}, 0
    local body = s:match('us/call\n(.*)$') or ''
    for name, nodes, calls, ms in body:gmatch('%s+([%w_]+)%s+(%d+)%s+(%d+)%s+([%d%.]+)') do
      rows[name] = { nodes = tonumber(nodes), calls = tonumber(calls), ms = tonumber(ms) }
      n = n + 1
    end
    return rows, n
  end

  it('profile = true: profile_summary lists each op with its calls and times', function()
    local M = tgl.dmatrix('M')
    local f = tgl.compile { inputs = { M }, outputs = tgl.sum(tgl.tanh(M:dot(M))), profile = true,
                            name = 'prof' }
    local a = tgl.ones(4, 4, { dtype = 'float64' })
    for _ = 1, 3 do assert.near(16 * math.tanh(4), f(a):get(), 1e-12) end
    local s = f:profile_summary()
    assert.matches('Function profile: prof', s, 1, true)
    assert.matches('calls: 3,', s, 1, true)
    local total = tonumber(s:match('total ([%d%.]+) ms'))
    assert.is_not_nil(total)
    local rows, n = profile_rows(s)
    assert.is_true(n >= 1, 'no op rows in\n' .. s)
    local sum_ms = 0
    for name, r in pairs(rows) do
      assert.is_true(r.nodes >= 1, name)
      assert.equals(3 * r.nodes, r.calls, name .. ' in\n' .. s)
      assert.is_true(r.ms >= 0)
      sum_ms = sum_ms + r.ms
    end
    assert.is_true(sum_ms <= total + 0.01 * n)
  end)

  it('n_calls runs count in the profile', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.exp(x), profile = true }
    f(f64 { 1 })
    f.fn { n_calls = 9 }
    local s = f:profile_summary()
    assert.matches('calls: 10,', s, 1, true)
    local rows, n = profile_rows(s)
    assert.equals(1, n)
    local _, r = next(rows)
    assert.same({ nodes = 1, calls = 10 }, { nodes = r.nodes, calls = r.calls })
  end)

  it('without profile, profile_summary raises a clear error', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = x + 1, name = 'plain' }
    raises('profile_summary', function() f:profile_summary() end,
           'plain was not compiled with profile = true')
  end)

  it('debugprint of a variable shows the tree with names, types and source lines', function()
    local x = tgl.dmatrix('x')
    local W = tgl.shared(tgl.zeros(3, 2, { dtype = 'float64' }), 'W')
    local y = tgl.tanh(x:dot(W))
    local line = here() - 1
    local s = tgl.debugprint(y)
    local lines = {}
    for l in s:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.equals(4, #lines)
    assert.matches('^tanh %[id A%] float64 %(%?,%?%)%s+%S*compile_spec%.lua:' .. line .. '$', lines[1])
    assert.matches('^ |dot %[id B%] float64 %(%?,%?%)%s+%S*compile_spec%.lua:' .. line .. '$', lines[2])
    assert.matches("^ | |input %[id C%] 'x' float64 %(%?,%?%)$", lines[3])
    assert.matches("^ | |shared %[id D%] 'W' float64 %(%?,%?%)$", lines[4])
  end)

  it('debugprint prints a repeated subtree once and refers to it by id', function()
    local x = tgl.dvector('x')
    local e = tgl.exp(x)
    local s = tgl.debugprint(e * e)
    local _, nexp = s:gsub('exp %[id B%]', '')
    local _, nx = s:gsub("input %[id C%] 'x'", '')
    assert.equals(2, nexp)
    assert.equals(1, nx)
  end)

  it('debugprint of a compiled function shows its program', function()
    local x = tgl.dvector('x')
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local f = tgl.compile { inputs = { x }, outputs = tgl.tanh(x * W), updates = { { W, W + x } },
                            name = 'shown' }
    local s = tgl.debugprint(f)
    assert.equals(f:program(), s)
    assert.matches('^function shown: 1 inputs, 1 outputs, 1 updates, %d+ instructions %(cvm%)\n', s)
    assert.matches('%(x, W%)', s)
    assert.matches('compile_spec%.lua:%d+', s)
    assert.matches('output 1: t%d+', s)
    assert.matches('update W <%- t%d+', s)
  end)
end)

describe('safety: a failed call changes nothing', function()
  -- A training step with updates whose first layer fails at run time when
  -- x has the wrong number of columns.
  local function model()
    tgl.manual_seed(5)
    local W = tgl.shared(tgl.randn(4, 3, { dtype = 'float64' }), 'W')
    local b = tgl.shared(tgl.randn(3, { dtype = 'float64' }), 'b')
    local n = tgl.shared(tgl.array(0, 'int64'), 'n')
    local x = tgl.dmatrix('x')
    local h = x:dot(W)
    local line = here() - 1
    local cost = tgl.sum(tgl.tanh(h + b) ^ 2)
    local gW, gb = unpack(tgl.grad(cost, { W, b }))
    local f = tgl.compile { inputs = { x }, outputs = cost, name = 'train',
                            updates = { { W, W - 0.1 * gW }, { b, b - 0.1 * gb }, { n, n + 1 } } }
    return f, { W, b, n }, line
  end

  local function snapshot(vars)
    local s = {}
    for i, v in ipairs(vars) do s[i] = v:get_value() end
    return s
  end

  local function unchanged(vars, before)
    for i, v in ipairs(vars) do assert_bits(before[i], v:get_value(), v.name) end
  end

  it('a shape mismatch inside the graph names the op, shapes, dtypes and the source line', function()
    local f, vars, line = model()
    f(tgl.ones(2, 4, { dtype = 'float64' }))
    local before = snapshot(vars)
    local err = raises('train', function() f(tgl.ones(2, 5, { dtype = 'float64' })) end,
                       'dot', 'inner sizes 5 and 4 differ', 'float64 (2,5)', 'float64 (4,3)')
    assert.matches('built at %S*compile_spec%.lua:' .. line .. '$', err)
    unchanged(vars, before)
    -- and it still works with good input
    local c = f(tgl.ones(2, 4, { dtype = 'float64' }))
    assert.is_true(c:get() > 0)
    assert.equals(2, vars[3]:get_value():get())
    assert.is_false(same_bits(before[1], vars[1]:get_value()))
  end)

  it('every linker leaves the state unchanged after a run-time failure', function()
    for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
      local W = tgl.shared(f64 { { 1, 2 }, { 3, 4 } }, 'W')
      local x = tgl.dmatrix('x')
      local f = tgl.compile { inputs = { x }, outputs = tgl.sum(x:dot(W)), linker = linker,
                              updates = { { W, W * 2 } }, name = 'g_' .. linker }
      assert.equals(10, f(f64 { { 1, 1 } }):get())
      local before = W:get_value()
      raises('g_' .. linker, function() f(f64 { { 1, 1, 1 } }) end, 'dot')
      assert_bits(before, W:get_value(), linker)
      assert.equals(20, f(f64 { { 1, 1 } }):get())
    end
  end)

  it('a failure in an update expression (after the outputs) applies no update', function()
    local a = tgl.shared(f64 { 1, 2 }, 'a')
    local M = tgl.shared(f64 { { 1, 0 }, { 0, 1 } }, 'M')
    local v = tgl.dvector('v')
    local f = tgl.compile { inputs = { v }, outputs = tgl.sum(v),
                            updates = { { a, a + 1 }, { M, M + tgl.outer(M:dot(v), v) } },
                            name = 'late' }
    raises('late', function() f(f64 { 1, 2, 3 }) end, 'dot')
    assert.same({ 1, 2 }, a:get_value():totable())
    assert.same({ { 1, 0 }, { 0, 1 } }, M:get_value():totable())
    assert.equals(3, f(f64 { 1, 2 }):totable())
    assert.same({ 2, 3 }, a:get_value():totable())
  end)

  it('wrong input count or type leaves the state unchanged', function()
    local f, vars = model()
    f(tgl.ones(2, 4, { dtype = 'float64' }))
    local before = snapshot(vars)
    raises('train', function() f() end, 'takes 1 inputs, got 0')
    raises('train', function() f(tgl.ones(2, 4, { dtype = 'float64' }), 1) end, 'takes 1 inputs, got 2')
    raises('train', function() f(tgl.ones(4, { dtype = 'float64' })) end,
           "input 1 ('x') expects float64 (?,?), got float64 (4,)")
    raises('train', function() f('x') end, 'input 1 must be')
    unchanged(vars, before)
    f(tgl.ones(2, 4, { dtype = 'float64' }))
    assert.equals(2, vars[3]:get_value():get())
  end)

  it('the output of the last good call is kept after a failed call', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.sum(x:dot(x) * x), name = 'keep' }
    local c = f(f64 { 1, 2 })
    raises('keep', function() f(f64 { { 1 } }) end, 'expects')
    assert.equals(15, c:get())
    assert.equals(15, f:output(1):get())
  end)
end)

describe('compile errors', function()
  it('an input the outputs need but not listed is named', function()
    local x, y = tgl.dvector('x'), tgl.dvector('yy')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x + y } end,
           "the outputs need the input 'yy' (float64 (?,)), which is not in the inputs list")
  end)

  it('an input needed only by an update is named too', function()
    local x, y = tgl.dvector('x'), tgl.dvector('z')
    local a = tgl.shared(f64 { 1 }, 'a')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, updates = { { a, a + y } } } end,
           "input 'z'")
  end)

  it('an update target that is not shared', function()
    local x, y = tgl.dvector('x'), tgl.dvector('y')
    raises('compile', function() tgl.compile { inputs = { x, y }, outputs = x, updates = { { y, x } } } end,
           "update 1 targets 'y', which is not a shared variable")
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, updates = { { 3, x } } } end,
           'update 1: the target is not a shared variable')
  end)

  it('an update of the wrong dtype or rank', function()
    local x = tgl.dvector('x')
    local a = tgl.shared(f64 { 1, 2 }, 'a')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, updates = { { a, tgl.sum(x) } } } end,
           "update 1 of 'a' gives float64 (), the variable is float64 (?,)")
    raises('compile', function()
      tgl.compile { inputs = { x }, outputs = x, updates = { { a, tgl.cast(x, 'int32') } } }
    end, "update 1 of 'a' gives int32 (?,), the variable is float64 (?,)")
  end)

  it('an update may not lose a broadcastable axis', function()
    local r = tgl.shared(f64 { { 1, 2 } }, 'r', { broadcastable = { true, false } })
    local M = tgl.dmatrix('M')
    raises('compile', function() tgl.compile { inputs = { M }, outputs = {}, updates = { { r, M } } } end,
           "update 1 of 'r' gives float64 (?,?), the variable is float64 (1,?)")
  end)

  it('a variable updated twice', function()
    local x = tgl.dvector('x')
    local a = tgl.shared(f64 { 1 }, 'a')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, updates = { { a, x }, { a, x } } } end,
           "'a' is updated twice (updates 1 and 2)")
  end)

  it('a repeated input', function()
    local x = tgl.dvector('x')
    raises('compile', function() tgl.compile { inputs = { x, x }, outputs = x } end, 'input 2 repeats input 1')
  end)

  it('an input that is not a symbolic input', function()
    local a = tgl.shared(f64 { 1 }, 'a')
    raises('compile', function() tgl.compile { inputs = { a }, outputs = a } end,
           'input 1 is not a symbolic input')
    raises('compile', function() tgl.compile { inputs = { 3 }, outputs = a } end,
           'input 1 is a number, not a variable')
  end)

  it('bad outputs and specs', function()
    local x = tgl.dvector('x')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = { x, 'y' } } end,
           'output 2 is a string, not a variable')
    raises('compile', function() tgl.compile(5) end, 'expected a table')
    raises('compile', function() tgl.compile { inputs = { x }, outputs = x, givens = { [1] = x } } end,
           'givens keys must be variables')
  end)
end)

describe('regressions (bugs found and fixed)', function()
  -- Each of these documents a defect found while writing this spec; the
  -- test states the intended behaviour and fails until it is fixed.

  it('an output that is a shared variable does not alias its value', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local f = tgl.compile { inputs = {}, outputs = W }
    local o = f()
    o:set(99, 1)
    assert.same({ 1, 2 }, W:get_value():totable())
  end)

  it('an output that is a view of a shared variable does not alias its value', function()
    local W = tgl.shared(f64 { { 1, 2 }, { 3, 4 } }, 'W')
    local f = tgl.compile { inputs = {}, outputs = W:T() }
    local o = f()
    o:set(100, 1, 1)
    assert.same({ { 1, 2 }, { 3, 4 } }, W:get_value():totable())
  end)

  it('an update from an input does not alias the caller\'s array', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = {}, updates = { { W, x } } }
    local a = f64 { 5, 6 }
    f(a)
    a:set(77, 1)
    assert.same({ 5, 6 }, W:get_value():totable())
  end)

  it('an output that is also an update\'s value does not alias the new value', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local f = tgl.compile { inputs = {}, outputs = W + 1, updates = { { W, W + 1 } } }
    local o = f()
    o:set(99, 1)
    assert.same({ 2, 3 }, W:get_value():totable())
  end)

  it('an output that is a constant does not alias the constant', function()
    local k = tgl.constant(f64 { 1, 2 })
    local f = tgl.compile { inputs = {}, outputs = k }
    local o = f()
    o:set(9, 1)
    assert.same({ 1, 2 }, f():totable())
    assert.same({ 1, 2 }, k:value():totable())
  end)

  it('the set_value error has one space between the name and the types', function()
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local err = raises('set_value', function() W:set_value(f64 { { 1 } }) end, 'expects')
    assert.matches("tgl.set_value: 'W' expects float64", err, 1, true)
  end)

  it('an output that is an input is not the caller\'s array', function()
    local x = tgl.dvector('x')
    local f = tgl.compile { inputs = { x }, outputs = x }
    local a = f64 { 1, 2 }
    local o = f(a)
    o:set(55, 1)
    assert.same({ 1, 2 }, a:totable())
  end)
end)
