-- shape_cache_spec.lua — the CVM's shape-stable fast path (cvm.c, plan.c):
-- a call whose inputs and shared variables have the shapes of the last
-- call takes its instructions' output shapes from the frame's cache.
-- Checked here against the vm linker, which asks every op for every shape
-- on every call: bit-identical results on repeated shapes, right results
-- when shapes change between calls, when a shape depends on an input's
-- value (slicing, arange) or on which branch of an ifelse ran while the
-- input shapes stay the same, when an update changes a shared variable's
-- shape between the runs of n_calls, and inside scan when the loop's
-- shapes change from one call to the next; a bad shape still gives a
-- clear error and leaves the shared variables as they were.
local S = dofile('spec/support.lua')

local bits_equal = S.bits_equal

-- The same graph compiled under cvm (cached shapes) and vm (checked).
local function both(spec)
  local f = tgl.compile(spec)
  local vm = {}
  for k, v in pairs(spec) do vm[k] = v end
  vm.linker = 'vm'
  return f, tgl.compile(vm)
end

describe('the shape-stable fast path', function()
  it('gives bit-identical results to the checked path on repeated and changing shapes', function()
    tgl.manual_seed(1)
    local x, y = tgl.matrix('x'), tgl.ivector('y')
    local W = tgl.shared(tgl.randn(6, 4) * 0.5, 'W')
    local b = tgl.shared(tgl.randn(4) * 0.1, 'b')
    local h = tgl.tanh(x:dot(W) + b)
    local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y)) + tgl.sum(h ^ 2) * 1e-3
    local gW, gb = unpack(tgl.grad(cost, {W, b}))
    local f, g = both{inputs = {x, y}, outputs = {cost, gW, gb}}
    for _, B in ipairs({3, 3, 3, 7, 7, 1, 3, 3, 1, 1}) do
      local xa = tgl.randn(B, 6)
      local ya = tgl.array((function() local t = {} for i = 1, B do t[i] = (i % 4) + 1 end return t end)(), 'int32')
      local c1, w1, b1 = f(xa, ya)
      local c2, w2, b2 = g(xa, ya)
      bits_equal(c2, c1, 'cost at batch ' .. B)
      bits_equal(w2, w1, 'gW at batch ' .. B)
      bits_equal(b2, b1, 'gb at batch ' .. B)
    end
  end)

  it('keeps training updates identical to the checked path (trust_input, n_calls)', function()
    tgl.manual_seed(2)
    local function model()
      local x, y = tgl.matrix('x'), tgl.ivector('y')
      local W = tgl.shared(tgl.full({5, 3}, 0.1), 'W')
      local b = tgl.shared(tgl.zeros(3), 'b')
      local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(x:dot(W) + b), y))
      local gW, gb = unpack(tgl.grad(cost, {W, b}))
      return {inputs = {x, y}, outputs = cost, updates = {{W, W - 0.5 * gW}, {b, b - 0.5 * gb}}}, W, b
    end
    local s1, W1, b1 = model()
    local s2, W2, b2 = model()
    s2.linker = 'vm'
    local f, g = tgl.compile(s1), tgl.compile(s2)
    f.trust_input = true
    local xa, ya = tgl.randn(4, 5), tgl.array({1, 2, 3, 1}, 'int32')
    for _ = 1, 3 do bits_equal(g(xa, ya), f(xa, ya), 'cost') end
    f.fn{n_calls = 5}
    g.fn{n_calls = 5}
    bits_equal(W2:get_value(), W1:get_value(), 'W after 8 steps')
    bits_equal(b2:get_value(), b1:get_value(), 'b after 8 steps')
  end)

  it('recomputes shapes that depend on an input value while the input shapes stay', function()
    local x, n = tgl.vector('x'), tgl.lscalar('n')
    local part = tgl.exp(x[{{1, n}}]) * 2
    local idx = tgl.arange(1, n)
    local f = tgl.compile{inputs = {x, n}, outputs = {part, tgl.sum(part), idx * 10}}
    local xa = tgl.array({0, 1, 2, 3, 4}, 'float32')
    for _, k in ipairs({2, 2, 4, 4, 1, 5, 5}) do
      local p, s, i = f(xa, k)
      assert.same({k}, p:shape())
      local want, tot, iw = {}, 0, {}
      for j = 1, k do
        want[j] = math.exp(j - 1) * 2
        tot = tot + want[j]
        iw[j] = j * 10
      end
      S.assert_close(want, p, 1e-6, 0, 'exp(x[1..' .. k .. ']) * 2')
      S.assert_close(tot, s, 1e-6, 0, 'its sum')
      S.assert_close(iw, i, 0, 0, 'arange(1, ' .. k .. ') * 10')
    end
  end)

  it("recomputes shapes after an ifelse whose branches differ in shape", function()
    local c, x = tgl.lscalar('c'), tgl.vector('x')
    local r = tgl.exp(tgl.ifelse(c, x[{{1, 2}}], x)) + 1
    local f = tgl.compile{inputs = {c, x}, outputs = {tgl.sum(r * r), r * 2}}
    local xa = tgl.array({0, 0.5, 1, 1.5}, 'float64'):astype(tgl.config.floatX)
    local function want(k)
      local t = 0
      for j = 1, k do local v = math.exp((j - 1) * 0.5) + 1; t = t + v * v end
      return t
    end
    for _, cv in ipairs({1, 1, 0, 0, 1, 0, 1}) do
      local k = cv == 1 and 2 or 4
      local s, r2 = f(cv, xa)
      S.assert_close(want(k), s, 1e-5, 0, 'branch ' .. cv)
      assert.same({k}, r2:shape())
    end
  end)

  it('follows a shared variable whose update changes its shape between n_calls runs', function()
    local s = tgl.shared(tgl.array({1, 2}, 'float64'), 's')
    local f = tgl.compile{inputs = {}, outputs = tgl.sum(s * 2), updates = {{s, tgl.concatenate({s, s}, 1)}}}
    S.assert_close(6, f(), 0, 0, 'first call')
    f.fn{n_calls = 3}
    assert.same({32}, s:get_value():shape())
    S.assert_close(96, f(), 0, 0, 'after n_calls: sum(2 s) over 32 elements')
  end)

  it('gives a clear error for bad shapes after cached calls, leaving shared state as it was', function()
    local x = tgl.matrix('x')
    local W = tgl.shared(tgl.full({3, 2}, 0.5), 'W')
    local cost = tgl.sum(tgl.tanh(x:dot(W)))
    local f = tgl.compile{inputs = {x}, outputs = cost, updates = {{W, W - 0.1 * tgl.grad(cost, W)}}}
    local xa = tgl.ones(4, 3)
    f(xa); f(xa)
    local before = W:get_value():clone()
    local ok, err = pcall(f, tgl.ones(4, 5))
    assert.is_false(ok)
    assert.truthy(tostring(err):find('(4,5)', 1, true) or tostring(err):find('4x5', 1, true)
                  or tostring(err):find('5', 1, true), tostring(err))
    assert.truthy(tostring(err):find('dot') or tostring(err):find('gemm') or tostring(err):find('shape'),
                  tostring(err))
    bits_equal(before, W:get_value(), 'W after the failed call')
    -- and the right shapes still work, first checked then cached
    local g = tgl.compile{inputs = {x}, outputs = cost, linker = 'vm'}
    local want = g(xa)
    bits_equal(want, f(xa), 'after the error')
  end)

  it('recomputes a scan body\'s shapes when the loop\'s shapes change between calls', function()
    local X = tgl.matrix('X')
    local h0 = tgl.vector('h0')
    local hs = tgl.scan{fn = function(x_t, h) return tgl.tanh(x_t + h) * 0.5 end,
                        sequences = {X}, outputs_info = {h0}}
    local cost = tgl.sum(hs ^ 2)
    local gX = tgl.grad(cost, X)
    local f, g = both{inputs = {X, h0}, outputs = {cost, gX}}
    tgl.manual_seed(3)
    for _, shp in ipairs({{5, 3}, {5, 3}, {2, 6}, {7, 1}, {5, 3}, {4, 3}}) do
      local T, d = shp[1], shp[2]
      local Xa, ha = tgl.randn(T, d), tgl.randn(d)
      local c1, g1 = f(Xa, ha)
      local c2, g2 = g(Xa, ha)
      bits_equal(c2, c1, ('cost, %dx%d'):format(T, d))
      bits_equal(g2, g1, ('gX, %dx%d'):format(T, d))
    end
  end)
end)
