-- whole_step_spec.lua — the whole-step plan (src/engine/step.c): a
-- straight-line program called twice on the same shapes is bound to fixed
-- buffers and runs as a list of kernel calls; a few runs later the step is
-- generated as one C function (fused kernels inline, the rest called back)
-- and runs as that.  Every case here runs the same graph several ways and
-- wants bit-identical results:
--   generated  tgl.config.whole_step = true (the default), once the
--              function is compiled (compile = 'sync' here, so at once);
--   bound      tgl.config.whole_step = 'bound': the bound step, op by op;
--   cvm        tgl.config.whole_step = false: the CVM with its shape cache;
--   vm         the vm linker: every shape asked of every op, every call.
-- Also: a shape change between calls drops the binding and gives the right
-- result (and binds again); a bad shape gives a clear error and leaves the
-- shared variables as they were; outputs stay the caller's (fresh arrays,
-- never overwritten by a later call, even when an output is a view of an
-- intermediate); a shared variable replaced between calls is read anew; an
-- input with the same shape but another layout is read right; random
-- graphs with updates agree over many calls.
local S = dofile('spec/support.lua')

-- Whether a bound step gets generated: on the cpu (one C function) and on
-- cuda (CUDA Graphs, src/cuda/step.c; the emulated GPU of the emu:* tests
-- too).  A backend without whole steps (the sim device of the sim:* tests,
-- doc/devices.md) runs the bound step op by op, so there every case checks
-- the same values with 'generated' false.
local GEN = tgl.config.device ~= 'sim'

local bits_equal, with_whole_step = S.bits_equal, S.with_whole_step

-- A model: fresh shared variables (seeded) and a compile spec.
local function logreg(seed, nin, nout)
  tgl.manual_seed(seed)
  local x, y = tgl.matrix('x'), tgl.ivector('y')
  local W = tgl.shared(tgl.randn(nin, nout) * 0.1, 'W')
  local b = tgl.shared(tgl.randn(nout) * 0.1, 'b')
  local h = tgl.tanh(x:dot(W) + b)
  local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y)) + tgl.sum(h ^ 2) * 1e-3
  local gW, gb = unpack(tgl.grad(cost, {W, b}))
  return { inputs = {x, y}, outputs = {cost, h}, updates = {{W, W - 0.1 * gW}, {b, b - 0.1 * gb}} },
         W, b
end

local function labels(B, k)
  local t = {}
  for i = 1, B do t[i] = (i * 7 % k) + 1 end
  return tgl.array(t, 'int32')
end

describe('the whole-step plan', function()
  it('binds a straight-line training step on the second call of a shape', function()
    local spec = logreg(1, 5, 3)
    local f = tgl.compile(spec)
    local x, y = tgl.randn(4, 5), labels(4, 3)
    assert.is_nil(f:whole_step())
    f(x, y)
    assert.is_nil(f:whole_step())          -- the first call fills the shape cache
    f(x, y)
    local ws = f:whole_step()
    assert.is_table(ws)
    assert.is_true(ws.fixed > 0)
    assert.is_true(ws.bytes > 0)
    f(tgl.randn(6, 5), labels(6, 3))       -- a new shape: back to the CVM
    assert.is_nil(f:whole_step())
    with_whole_step(false, function()
      local g = tgl.compile((logreg(1, 5, 3)))
      for _ = 1, 3 do g(x, y) end
      assert.is_nil(g:whole_step())
    end)
  end)

  it('trains bit-identically generated, bound, on the CVM and the vm linker, shapes changing between calls', function()
    local runs = {}
    local setting = { generated = true, bound = 'bound', cvm = false, vm = true }
    local shapes = {3, 3, 3, 3, 3, 3, 3, 5, 5, 5, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3}
    for _, how in ipairs({'generated', 'bound', 'cvm', 'vm'}) do
      local spec, W, b = logreg(7, 6, 4)
      if how == 'vm' then spec.linker = 'vm' end
      local f
      with_whole_step(setting[how], function()
        f = tgl.compile(spec)
        -- kernels an earlier case compiled in the background must be the
        -- optimizing compiler's before a step is generated
        f:wait_compiled()
        local outs, gen = {}, false
        tgl.manual_seed(99)
        for i, B in ipairs(shapes) do
          local c, h = f(tgl.randn(B, 6), labels(B, 4))
          outs[i] = { c, h }
          local ws = f:whole_step()
          gen = gen or (ws and ws.generated)
        end
        runs[how] = { outs = outs, W = W:get_value(), b = b:get_value(), f = f, gen = gen }
      end)
    end
    assert.are.equal(GEN, not not runs.generated.gen, 'the generated function ran')
    assert.is_false(runs.bound.gen, 'bound only')
    for how, r in pairs(runs) do
      if how ~= 'cvm' then
        for i, o in ipairs(r.outs) do
          bits_equal(runs.cvm.outs[i][1], o[1], how .. ' cost, call ' .. i)
          bits_equal(runs.cvm.outs[i][2], o[2], how .. ' h, call ' .. i)
        end
        bits_equal(runs.cvm.W, r.W, how .. ' W')
        bits_equal(runs.cvm.b, r.b, how .. ' b')
      end
    end
    assert.is_table(runs.bound.f:whole_step())
    assert.is_nil(runs.vm.f:whole_step())
    assert.is_nil(runs.cvm.f:whole_step())
  end)

  it('runs n_calls and trust_input on the bound step, bit-identically', function()
    local res = {}
    for _, on in ipairs({true, 'bound', false}) do
      with_whole_step(on, function()
        local spec, W, b = logreg(3, 8, 5)
        local f = tgl.compile(spec)
        f:wait_compiled()
        local x, y = tgl.randn(2, 8), labels(2, 5)
        f(x, y)
        f.trust_input = true
        f(x, y)
        f.fn{n_calls = 25}
        res[on] = { W = W:get_value(), b = b:get_value(), c = f:output(1), bound = f:whole_step() }
      end)
    end
    for _, on in ipairs({true, 'bound'}) do
      bits_equal(res[false].W, res[on].W, 'W after n_calls')
      bits_equal(res[false].b, res[on].b, 'b after n_calls')
      bits_equal(res[false].c, res[on].c, 'last cost')
      assert.is_table(res[on].bound)
    end
    assert.are.equal(GEN, res[true].bound.generated)
    assert.is_false(res['bound'].bound.generated)
    assert.is_nil(res[false].bound)
  end)

  it('gives a clear error on a bad shape after bound calls, and changes no shared variable', function()
    local spec, W, b = logreg(4, 5, 3)
    local f = tgl.compile(spec)
    local x, y = tgl.randn(4, 5), labels(4, 3)
    for _ = 1, 3 do f(x, y) end
    assert.is_table(f:whole_step())
    local W0, b0 = W:get_value(), b:get_value()
    local ok, err = pcall(f, tgl.randn(4, 6), y)
    assert.is_false(ok)
    assert.matches('dot', tostring(err))
    assert.matches('6', tostring(err))
    bits_equal(W0, W:get_value(), 'W after the failed call')
    bits_equal(b0, b:get_value(), 'b after the failed call')
    ok, err = pcall(f, x, labels(5, 3))
    assert.is_false(ok)
    bits_equal(W0, W:get_value(), 'W after the second failed call')
    -- and the next good call is right (against a CVM twin that made the same calls)
    local spec2, W2 = logreg(4, 5, 3)
    local c1, c2
    with_whole_step(false, function()
      local g = tgl.compile(spec2)
      for _ = 1, 3 do g(x, y) end
      c2 = g(x, y)
    end)
    c1 = f(x, y)
    bits_equal(c2, c1, 'cost after the errors')
    bits_equal(W2:get_value(), W:get_value(), 'W after the errors')
  end)

  -- The deferred update over a fused kernel (plan.c): b - lr g with a
  -- runtime learning rate writes into b's own buffer, after the outputs.
  local function in_place_lines(f)
    local got = {}
    for line in tgl.debugprint(f):gmatch('[^\n]+') do
      local v = line:match('= fused#.*%[in place of (%w+)%]')
      if v then got[v] = true end
    end
    return got
  end

  it('runs an update through a fused kernel in the variable\'s own buffer, with a runtime learning rate', function()
    for _, how in ipairs({true, 'bound', false}) do
      with_whole_step(how, function()
        tgl.manual_seed(11)
        local x, y, lr = tgl.matrix('x'), tgl.ivector('y'), tgl.scalar('lr')
        local W0, b0 = tgl.randn(5, 3) * 0.1, tgl.randn(3) * 0.1
        local W, b = tgl.shared(W0, 'W'), tgl.shared(b0, 'b')
        local h = x:dot(W) + b
        local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
        local gW, gb = unpack(tgl.grad(cost, {W, b}))
        local f = tgl.compile{inputs = {x, y, lr}, outputs = {cost, h},
                              updates = {{W, W - lr * gW}, {b, b - lr * gb}}}
        local inpl = in_place_lines(f)
        assert.is_true(inpl.b, 'b in place:\n' .. tgl.debugprint(f))
        -- the eager twin: the same gradient, by hand (softmax - onehot) / B
        local Wv, bv = W0, b0
        for call = 1, 8 do
          local B = call <= 5 and 4 or 2
          local xa, ya, r = tgl.randn(B, 5), labels(B, 3), 0.05 * call
          local c, hh = f(xa, ya, r)
          local he = xa:dot(Wv) + bv
          S.assert_close(he, hh, 1e-5, 1e-6, 'h, call ' .. call)
          local p = tgl.softmax(he)
          local onehot = tgl.zeros(B, 3)
          for i = 1, B do onehot[{i, ya[i]}] = 1 end
          local d = (p - onehot) / B
          Wv = Wv - xa:T():dot(d) * r
          bv = bv - tgl.sum(d, 1) * r
          S.assert_close(Wv, W:get_value(), 1e-5, 1e-6, tostring(how) .. ' W, call ' .. call)
          S.assert_close(bv, b:get_value(), 1e-5, 1e-6, tostring(how) .. ' b, call ' .. call)
        end
      end)
    end
  end)

  it('checks every deferred update\'s shape before the first one writes: a failing call changes nothing', function()
    for _, how in ipairs({true, 'bound', false}) do
      with_whole_step(how, function()
        local x, s = tgl.matrix('x'), tgl.vector('s')
        local M = tgl.shared(tgl.array({{1, 2, 3}, {4, 5, 6}}), 'M')
        local v = tgl.shared(tgl.array({1, 2, 3}), 'v')
        local f = tgl.compile{inputs = {x, s}, updates = {{M, M - 0.5 * x}, {v, v + s}}}
        local inpl = in_place_lines(f)
        assert.is_true(inpl.M and inpl.v, tgl.debugprint(f))
        local xa, sa = tgl.array({{2, 2, 2}, {0, 0, 4}}), tgl.array({1, 1, 1})
        for _ = 1, 3 do f(xa, sa) end
        -- (no array of M or v kept here: a second holder of the value
        -- makes the update write a new buffer, and this is about the
        -- in-place one)
        local M0, v0 = tgl.array({{-2, -1, 0}, {4, 5, 0}}), tgl.array({4, 5, 6})
        S.assert_close(M0, M:get_value(), 0, 0, 'M')
        S.assert_close(v0, v:get_value(), 0, 0, 'v')
        collectgarbage()
        local ok, err = pcall(f, xa, tgl.array({1, 1, 1, 1}))
        assert.is_false(ok)
        assert.matches('4', tostring(err))
        bits_equal(M0, M:get_value(), tostring(how) .. ': M after the failed call')
        bits_equal(v0, v:get_value(), tostring(how) .. ': v after the failed call')
        collectgarbage()
        f(xa, sa)
        S.assert_close(tgl.array({{-3, -2, -1}, {4, 5, -2}}), M:get_value(), 0, 0, 'M after')
        S.assert_close(tgl.array({5, 6, 7}), v:get_value(), 0, 0, 'v after')
      end)
    end
  end)

  it('hands out fresh outputs: a later call never writes into an earlier one', function()
    local x = tgl.matrix('x')
    local t = tgl.exp(x * 2) + 1
    -- outputs: an intermediate's view (transpose, reshape), a reduction, the value itself
    local f = tgl.compile{inputs = {x}, outputs = {t:T(), t:reshape(-1), tgl.sum(t, 1), t * 3}}
    local a = tgl.randn(3, 4)
    local kept = {}
    for i = 1, 5 do
      local o = { f(a * i) }
      kept[i] = { arrays = o, copies = {} }
      for k, v in ipairs(o) do kept[i].copies[k] = v:clone() end
    end
    assert.is_table(f:whole_step())
    for i = 1, 5 do
      for k = 1, 4 do bits_equal(kept[i].copies[k], kept[i].arrays[k], ('call %d output %d'):format(i, k)) end
      local want = tgl.exp(a * i * 2) + 1
      S.assert_close(want:T(), kept[i].arrays[1], 1e-6, 1e-6, 'transpose output')
    end
  end)

  it('reads a shared variable replaced between calls, and inputs of another layout', function()
    local x = tgl.matrix('x')
    local W = tgl.shared(tgl.randn(4, 3), 'W')
    local f = tgl.compile{inputs = {x}, outputs = tgl.tanh(x:dot(W:T():T()) * 2) + tgl.sum(W, 1)}
    local a = tgl.randn(2, 4)
    for _ = 1, 3 do f(a) end
    assert.is_table(f:whole_step())
    W:set_value(tgl.randn(4, 3))
    local want = tgl.tanh(a:dot(W:get_value()) * 2) + tgl.sum(W:get_value(), 1)
    S.assert_close(want, f(a), 1e-5, 1e-5, 'after set_value')
    -- same shape, another layout: a transposed view of a 4 x 2 array
    local at = tgl.randn(4, 2):T()
    want = tgl.tanh(at:dot(W:get_value()) * 2) + tgl.sum(W:get_value(), 1)
    S.assert_close(want, f(at), 1e-5, 1e-5, 'transposed input')
    S.assert_close(want, f(at:clone()), 1e-5, 1e-5, 'contiguous input again')
  end)

  it('reads each call\'s input through views of it', function()
    local x = tgl.matrix('x')
    local f = tgl.compile{inputs = {x}, outputs = tgl.exp(x:T()) * 2 + x:reshape(-1):sum()}
    for i = 1, 6 do
      local a = tgl.randn(3, 2) * (i / 3)
      if i == 5 then a = tgl.randn(2, 3):T() * (i / 3) end
      local want = tgl.exp(a:T()) * 2 + a:reshape(-1):sum()
      S.assert_close(want, f(a), 1e-6, 1e-6, 'call ' .. i)
      if i >= 3 then assert.is_table(f:whole_step()) end
    end
  end)

  it('binds a scan body for the steps of each run of the loop, bit-identically', function()
    local res = {}
    for _, on in ipairs({true, 'bound', false}) do
      with_whole_step(on, function()
        tgl.manual_seed(11)
        local x, y = tgl.matrix('x'), tgl.ivector('y')
        local Wh = tgl.shared(tgl.randn(6, 6) * 0.3, 'Wh')
        local Wy = tgl.shared(tgl.randn(6, 4) * 0.3, 'Wy')
        local hs = tgl.scan{
          fn = function(e, h, W) return tgl.sigmoid(e + h:dot(W:T():T()) * 1.5) end,
          sequences = {x}, outputs_info = {tgl.zeros(6)}, non_sequences = {Wh}}
        local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(hs:dot(Wy)), y))
        local gWh, gWy = unpack(tgl.grad(cost, {Wh, Wy}))
        local outs = {}
        for _, linker in ipairs({'cvm', 'cvm_nogc'}) do
          local f = tgl.compile{inputs = {x, y}, outputs = {cost, hs}, linker = linker,
                                updates = {{Wh, Wh - 0.1 * gWh}, {Wy, Wy - 0.1 * gWy}}}
          for _, T in ipairs({5, 5, 5, 2, 2, 7}) do
            outs[#outs + 1] = { f(tgl.randn(T, 6), labels(T, 4)) }
          end
        end
        res[on] = { outs = outs, Wh = Wh:get_value(), Wy = Wy:get_value() }
      end)
    end
    for _, on in ipairs({true, 'bound'}) do
      for i, o in ipairs(res[on].outs) do
        bits_equal(res[false].outs[i][1], o[1], 'cost, call ' .. i)
        bits_equal(res[false].outs[i][2], o[2], 'hidden states, call ' .. i)
      end
      bits_equal(res[false].Wh, res[on].Wh, 'Wh')
      bits_equal(res[false].Wy, res[on].Wy, 'Wy')
    end
  end)

  it('binds a givens minibatch (a slice with computed bounds) and follows its last, shorter batch', function()
    local runs = {}
    for _, on in ipairs({true, 'bound', false}) do
      with_whole_step(on, function()
        tgl.manual_seed(5)
        local B = 4
        local x, y = tgl.matrix('x'), tgl.ivector('y')
        local Xs = tgl.shared(tgl.randn(34, 6), 'Xs')      -- 8 full batches and one of 2
        local t = {}
        for k = 1, 34 do t[k] = k % 3 + 1 end
        local Ys = tgl.shared(tgl.array(t, 'int32'), 'Ys')
        local W = tgl.shared(tgl.randn(6, 3) * 0.1, 'W')
        local h = tgl.tanh(x:dot(W))
        local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(h), y))
        local gW = tgl.grad(cost, {W})[1]
        local i = tgl.shared(tgl.array(0, 'int64'), 'i')
        local f = tgl.compile{inputs = {}, outputs = {cost, h}, linker = 'cvm_nogc',
          updates = {{i, (i + 1) % 9}, {W, W - 0.1 * gW}},
          givens = {[x] = Xs[{{i * B + 1, (i + 1) * B}}], [y] = Ys[{{i * B + 1, (i + 1) * B}}]}}
        f:wait_compiled()
        local outs, bound, gen = {}, false, false
        for call = 1, 30 do
          local c, hh = f()
          outs[call] = {c, hh}
          local ws = f:whole_step()
          bound = bound or ws ~= nil
          gen = gen or (ws ~= nil and ws.generated)
        end
        f.fn{n_calls = 12}
        runs[on] = {outs = outs, W = W:get_value(), last = f:output(1), bound = bound, gen = gen}
      end)
    end
    for _, on in ipairs({true, 'bound'}) do
      assert.is_true(runs[on].bound)
      for call, o in ipairs(runs[on].outs) do
        bits_equal(runs[false].outs[call][1], o[1], 'cost, call ' .. call)
        bits_equal(runs[false].outs[call][2], o[2], 'h, call ' .. call)
      end
      bits_equal(runs[false].W, runs[on].W, 'W')
      bits_equal(runs[false].last, runs[on].last, 'cost after n_calls')
    end
    assert.are.equal(GEN, not not runs[true].gen)
    assert.are.equal(2, runs[false].outs[9][2]:size(1))   -- the short batch was seen
  end)

  it('checks value-dependent shapes on every bound call (reshape to a computed shape, arange)', function()
    with_whole_step(true, function()
      local x, shp = tgl.vector('x'), tgl.lvector('shp')
      local r = (x * 2):reshape(shp, 2)                         -- the shape is a value
      local f = tgl.compile{inputs = {x, shp}, outputs = {tgl.exp(r) + 1, tgl.sum(r, 2)}}
      local a = tgl.randn(12)
      for _, k in ipairs({2, 2, 2, 2, 3, 3, 4, 2, 6, 6, 6}) do
        local e, s2 = f(a, tgl.array({k, 12 / k}, 'int64'))
        local want = (a * 2):reshape(k, 12 / k)
        S.assert_close(tgl.exp(want) + 1, e, 1e-6, 1e-6, 'exp, rows ' .. k)
        S.assert_close(tgl.sum(want, 2), s2, 1e-5, 1e-5, 'sum, rows ' .. k)
      end
    end)
  end)

  it('keeps profile = true truthful on the bound step and in the generated function', function()
    for _, on in ipairs({'bound', true}) do
      with_whole_step(on, function()
        local x = tgl.matrix('x')
        local W = tgl.shared(tgl.randn(3, 3), 'W')
        local t = tgl.exp(x:dot(W)) * 2
        local f = tgl.compile{inputs = {x}, outputs = (t * t + 1):dot(W), profile = true}
        f:wait_compiled()
        local a = tgl.randn(3, 3)
        for _ = 1, 10 do f(a) end
        assert.is_table(f:whole_step())
        assert.are.equal(on == true and GEN, f:whole_step().generated)
        local text = f:profile_summary()
        assert.matches('calls: 10', text)
        assert.matches('fused%s+%d+%s+%d+', text)
        local calls = text:match('\n%s*fused%s+%d+%s+(%d+)')
        assert.is_true(tonumber(calls) >= 10, text)
      end)
    end
  end)

  it('reads inputs of a new layout right after the step is generated', function()
    local x = tgl.matrix('x')
    local W = tgl.shared(tgl.randn(3, 2), 'W')
    with_whole_step(true, function()
      local f = tgl.compile{inputs = {x}, outputs = tgl.sum(tgl.tanh(x * 2 + 1) * 3, 1):dot(W)}
      f:wait_compiled()
      local a = tgl.randn(4, 3)
      for _ = 1, 6 do f(a) end
      assert.are.equal(GEN, f:whole_step().generated)
      for i = 1, 4 do
        local b = i % 2 == 0 and tgl.randn(3, 4):T() or tgl.randn(4, 3)
        local want = tgl.sum(tgl.tanh(b * 2 + 1) * 3, 1):dot(W:get_value())
        S.assert_close(want, f(b), 1e-5, 1e-5, 'call ' .. i)
      end
      assert.are.equal(GEN, f:whole_step().generated)
    end)
  end)

  it('agrees with the CVM with 100 updates, 11 outputs, empty and transposed inputs', function()
    local x = tgl.matrix('x')
    local vars, ups, outs = {}, {}, {}
    for k = 1, 100 do vars[k] = tgl.shared(tgl.zeros(3), 'v' .. k) end
    local h = x
    for k = 1, 100 do
      h = tgl.tanh(h + vars[k])
      if k % 10 == 0 then outs[#outs + 1] = tgl.sum(h, 1) end
    end
    local cost = tgl.sum(h ^ 2)
    local g = tgl.grad(cost, vars)
    for k = 1, 100 do ups[k] = {vars[k], vars[k] - 0.01 * g[k]} end
    outs[#outs + 1] = cost
    local function run(on)
      local res, vals, ws = {}, {}, nil
      with_whole_step(on, function()
        tgl.manual_seed(3)
        for k = 1, 100 do vars[k]:set_value(tgl.randn(3) * 0.1) end
        local f = tgl.compile{inputs = {x}, outputs = outs, updates = ups}
        for _, rows in ipairs({0, 0, 0, 4, 4, 4, 4, 4, 4, 0, 2, 2, 2}) do
          local a = rows == 2 and tgl.randn(3, 2):T() or tgl.randn(rows, 3)
          res[#res + 1] = { f(a) }
          ws = ws or f:whole_step()
        end
        for k = 1, 100 do vals[k] = vars[k]:get_value() end
      end)
      return res, vals, ws
    end
    local r1, v1, w1 = run(true)
    local r2, v2 = run(false)
    assert.is_table(w1)
    for i = 1, #r1 do
      for j = 1, #r1[i] do bits_equal(r2[i][j], r1[i][j], ('call %d output %d'):format(i, j)) end
    end
    for k = 1, 100 do bits_equal(v2[k], v1[k], 'v' .. k) end
  end)

  it('agrees with the CVM on random straight-line graphs with updates, over many calls', function()
    local ops = {
      function(a) return tgl.tanh(a) end,
      function(a) return a * 1.5 + 0.25 end,
      function(a) return tgl.exp(tgl.clip(a, -3, 3)) end,
      function(a) return tgl.sigmoid(a) - a end,
      function(a, b) return a + b end,
      function(a, b) return a * b end,
      function(a, b) return tgl.maximum(a, b) end,
    }
    for case = 1, 12 do
      local results = {}
      for _, on in ipairs({true, 'bound', false}) do
        with_whole_step(on, function()
          math.randomseed(1000 + case)
          tgl.manual_seed(case)
          local R, K = math.random(1, 9), math.random(1, 7)
          local x = tgl.matrix('x')
          local W = tgl.shared(tgl.randn(K, K) * 0.3, 'W')
          local v = tgl.shared(tgl.randn(K) * 0.3, 'v')
          local pool = { x, x:dot(W), x + v }
          for _ = 1, math.random(3, 30) do
            local op = ops[math.random(#ops)]
            local a = pool[math.random(#pool)]
            local b = pool[math.random(#pool)]
            local r = op(a, b)
            if math.random() < 0.15 then r = r:dot(W) end
            if math.random() < 0.1 then r = r:T():T() end
            pool[#pool + 1] = r
          end
          local top = pool[#pool]
          local cost = tgl.mean(top ^ 2) + tgl.sum(tgl.tanh(pool[#pool - 1])) + tgl.sum(v ^ 2) * 1e-3
            + tgl.sum(W ^ 2) * 1e-3
          local gW, gv = unpack(tgl.grad(cost, {W, v}))
          local f = tgl.compile{inputs = {x}, outputs = {cost, top, tgl.sum(top, 1)},
                                updates = {{W, W - 0.01 * gW}, {v, v - 0.01 * gv}}}
          local outs = {}
          for call = 1, 9 do
            local rows = call <= 6 and R or R + 1
            outs[call] = { f(tgl.randn(rows, K)) }
          end
          results[on] = { outs = outs, W = W:get_value(), v = v:get_value() }
        end)
      end
      for _, on in ipairs({true, 'bound'}) do
        for call, o in ipairs(results[on].outs) do
          for k = 1, 3 do
            bits_equal(results[false].outs[call][k], o[k],
                       ('case %d (%s) call %d output %d'):format(case, tostring(on), call, k))
          end
        end
        bits_equal(results[false].W, results[on].W, 'case ' .. case .. ' W')
        bits_equal(results[false].v, results[on].v, 'case ' .. case .. ' v')
      end
    end
  end)
end)
