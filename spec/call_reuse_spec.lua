-- call_reuse_spec.lua — outputs of a compiled function lent to the caller
-- and their buffers reused once dropped (issue 23 item 6; doc/compile.md,
-- "Outputs and their buffers"): an output the caller holds is never
-- changed by later calls (directly or through a view), dropped outputs go
-- back to the function's pool (f:output_stats() counts them, and the
-- engine's live bytes stop growing), results equal the values computed by
-- hand, on the plain, trust_input and n_calls paths, under garbage
-- collection in the loop; a failed call leaves the pool consistent.
tgl = tgl or require 'tgl'
local tgl = tgl
local C = require('tgl.core').C

local function live() return tonumber(C.tgl_memory_live_bytes()) end

describe('outputs lent by a compiled function', function()
  before_each(function() tgl.config.compile = 'sync' end)

  for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
    for _, trust in ipairs({ false, true }) do
      it(('held outputs never change (%s, trust_input %s)'):format(linker, tostring(trust)), function()
        local x = tgl.vector('x')
        local f = tgl.compile { inputs = { x }, outputs = x * 2 + 1, linker = linker }
        f.trust_input = trust
        local held, views = {}, {}
        for i = 1, 400 do
          local y = f(tgl.array({ i, -i, 0.5 * i }))
          if i % 7 == 0 then
            held[i] = y
            views[i] = y:reshape(3, 1)
          end
          if i % 50 == 0 then collectgarbage() end
        end
        collectgarbage()
        for _ = 1, 200 do f(tgl.array({ 9, 9, 9 })) end
        for i, y in pairs(held) do
          assert.same({ 2 * i + 1, -2 * i + 1, i + 1 }, y:totable())
          assert.same({ { 2 * i + 1 }, { -2 * i + 1 }, { i + 1 } }, views[i]:totable())
        end
      end)
    end
  end

  it('dropped outputs are reused: recycled counts them, live bytes stop growing', function()
    local x = tgl.vector('x')
    local f = tgl.compile { inputs = { x }, outputs = tgl.exp(x) }
    local xa = tgl.zeros(1000)
    for _ = 1, 100 do f(xa) end
    collectgarbage(); collectgarbage()
    local before = live()
    for i = 1, 3000 do
      f(xa)
      if i % 100 == 0 then collectgarbage() end
    end
    collectgarbage(); collectgarbage()
    local s = f:output_stats()
    assert.is_true(s.recycled >= 2500, 'recycled ' .. s.recycled)
    -- what the pool and the still-uncollected outputs hold: a few buffers
    assert.is_true(live() - before < 200 * 4000, 'grew by ' .. (live() - before))
    assert.is_true(s.held <= 2, 'held ' .. s.held)
    assert.same(1, f(xa):get(1))
  end)

  it('an output held across many calls, passed back as an input, stays itself', function()
    local x = tgl.vector('x')
    local f = tgl.compile { inputs = { x }, outputs = x + 1 }
    f.trust_input = true
    local y = f(tgl.zeros(2))
    local first = y
    for i = 1, 500 do
      y = f(y)
      if i % 37 == 0 then collectgarbage() end
    end
    assert.same({ 501, 501 }, y:totable())
    assert.same({ 1, 1 }, first:totable())
  end)

  it('several outputs: each held one keeps its value, results equal the plain path', function()
    local a, b = tgl.vector('a'), tgl.vector('b')
    local f = tgl.compile { inputs = { a, b }, outputs = { a + b, a * b, a - b } }
    local g = tgl.compile { inputs = { a, b }, outputs = { a + b, a * b, a - b } }
    g.trust_input = true
    local keep = {}
    for i = 1, 300 do
      local u, v = tgl.array({ i, 2 }), tgl.array({ 3, i })
      local s, p, d = f(u, v)
      local s2, p2, d2 = g(u, v)
      assert.same(s:totable(), s2:totable())
      assert.same(p:totable(), p2:totable())
      assert.same(d:totable(), d2:totable())
      if i % 10 == 0 then keep[#keep + 1] = { i, s, p, d } end
      if i % 30 == 0 then collectgarbage() end
    end
    for _, k in ipairs(keep) do
      local i = k[1]
      assert.same({ i + 3, 2 + i }, k[2]:totable())
      assert.same({ 3 * i, 2 * i }, k[3]:totable())
      assert.same({ i - 3, 2 - i }, k[4]:totable())
    end
  end)

  it('n_calls after lent calls: the lent outputs keep their values', function()
    local x = tgl.vector('x')
    local acc = tgl.shared(tgl.zeros(1, { dtype = 'float64' }), 'acc')
    local f = tgl.compile { inputs = { x }, outputs = acc + x, updates = { { acc, acc + x } } }
    local one = tgl.ones(1, { dtype = 'float64' })
    local y1 = f(one)
    collectgarbage()
    local y2 = f(one)
    local last = f.fn { n_calls = 10 }
    assert.same({ 1 }, y1:totable())
    assert.same({ 2 }, y2:totable())
    assert.same({ 12 }, last:totable())
    assert.same({ 13 }, f(one):totable())
  end)

  it('a wrong input is a clear error and leaves the pool consistent', function()
    local x = tgl.vector('x')
    local f = tgl.compile { inputs = { x }, outputs = x * 3, name = 'triple' }
    local held = f(tgl.array({ 1, 2 }))
    for _ = 1, 50 do f(tgl.array({ 5 })) end
    collectgarbage()
    f.trust_input = true
    local ok, err = pcall(f, tgl.zeros(2, 2))
    assert.is_false(ok)
    assert.matches('tgl%.triple: input 1', tostring(err))
    ok, err = pcall(f, tgl.zeros(2, { dtype = 'int32' }))
    assert.is_false(ok)
    assert.matches('expects float32', tostring(err))
    f.trust_input = false
    ok, err = pcall(f, 'text')
    assert.is_false(ok)
    assert.matches('must be an array', tostring(err))
    assert.same({ 3, 6 }, held:totable())
    assert.same({ 12 }, f(tgl.array({ 4 })):totable())
    assert.same({ 3, 6 }, held:totable())
  end)

  it('outputs outlive their function', function()
    local x = tgl.vector('x')
    local f = tgl.compile { inputs = { x }, outputs = x + 10 }
    local ys = {}
    for i = 1, 20 do ys[i] = f(tgl.array({ i })) end
    for _ = 1, 20 do f(tgl.array({ 0 })) end
    f = nil
    collectgarbage(); collectgarbage()
    -- another function's calls scan the orphan list
    local g = tgl.compile { inputs = { x }, outputs = x - 1 }
    for _ = 1, 10 do g(tgl.array({ 1 })); collectgarbage() end
    for i = 1, 20 do assert.same({ i + 10 }, ys[i]:totable()) end
    ys = nil
    collectgarbage(); collectgarbage()
    g(tgl.array({ 1 }))
  end)

  it('property: random shapes and dtypes, GC stress, held values intact', function()
    math.randomseed(23)
    for _, dt in ipairs({ 'float32', 'float64' }) do
      local x = tgl.matrix('x', dt)
      local f = tgl.compile { inputs = { x }, outputs = { x * x, tgl.sum(x) } }
      local kept = {}
      for i = 1, 120 do
        local r, c = math.random(1, 6), math.random(1, 6)
        local t = {}
        for a = 1, r do t[a] = {}; for b = 1, c do t[a][b] = math.random(-5, 5) end end
        local sq, s = f(tgl.array(t, dt))
        if math.random() < 0.3 then kept[#kept + 1] = { t, sq, s } end
        if math.random() < 0.2 then collectgarbage() end
      end
      for _, k in ipairs(kept) do
        local t, total = k[1], 0
        for a = 1, #t do for b = 1, #t[1] do
          assert.same(t[a][b] * t[a][b], k[2]:get(a, b))
          total = total + t[a][b]
        end end
        assert.same(total, k[3]:totable())
      end
    end
  end)
end)
