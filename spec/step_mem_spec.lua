-- step_mem_spec.lua — the memory of a bound step (src/engine/step.c,
-- "Memory"; the planner is src/engine/step_mem.c, tested alone in
-- spec/c/test_step_mem.c): the fixed buffers of a bound step share one
-- arena where their lifetimes are disjoint, so the step holds the planned
-- peak of its intermediates instead of their sum, and the budget (the L2
-- cache) is checked against that peak.  A buffer reused while anything can
-- still read it would change results, so every case here runs the same
-- program three ways and wants bit-identical results and shared values:
--   generated  tgl.config.whole_step = true (compile = 'sync');
--   bound      tgl.config.whole_step = 'bound';
--   cvm        tgl.config.whole_step = false (the reference).
-- Random straight-line training steps draw many intermediates of mixed
-- dtypes (float32, float64, integer and boolean masks), views (transposes,
-- reshapes, slices read by reductions, an output that is a view of an
-- intermediate), in-place steps, value-dependent shapes and deferred
-- updates, under FAST_RUN (fused kernels) and FAST_COMPILE (an op, a
-- buffer); scan bodies with several outputs and views bind per run of the
-- loop.  f:whole_step().bytes (the arena) is never above .sum (a buffer
-- each) and is below it where lifetimes are disjoint; a chain whose
-- buffers add up to more than any L2 cache binds, its peak fitting.
local S = dofile('spec/support.lua')

local bits_equal, with_whole_step = S.bits_equal, S.with_whole_step

local WAYS = { true, 'bound', false }

-- A random training step: R x K float32 and float64 values built from the
-- inputs and shared K x K weights, then a cost whose gradient updates the
-- weights.  Returns the compile spec and the shared variables.
local function random_step(R, K, nops)
  local x, x64 = tgl.matrix('x'), tgl.matrix('x64', 'float64')
  local y = tgl.ivector('y')
  local W = tgl.shared(tgl.randn(K, K) * 0.3, 'W')
  local V = tgl.shared((tgl.randn(K, K) * 0.3):astype('float64'), 'V')
  local f32 = { x, tgl.tanh(x:dot(W)) }
  local f64 = { x64, x64:dot(V) }
  local function pick(t) return t[math.random(#t)] end
  local steps = {
    function() return tgl.tanh(pick(f32)) end,
    function() return pick(f32) * 1.25 - pick(f32) end,
    function() return tgl.sigmoid(pick(f32)):dot(W) end,
    function() return pick(f32):T():T() * 0.5 end,
    function() -- reshapes to computed shapes (checked on every bound call)
      local a = pick(f32)
      return a:reshape(tgl.stack({ a:size(1) * a:size(2) }), 1):reshape(a:shape(), 2) + 0.125
    end,
    function() -- a slice read by a reduction, broadcast back
      local a = pick(f32)
      return a + tgl.sum(a[{ { 1, math.max(1, R - 1) } }], 1, { keepdims = true }) * 0.1
    end,
    function() return tgl.switch(tgl.gt(pick(f32), pick(f32)), pick(f32), pick(f32) * 0.5) end,
    function() -- an integer mask
      return pick(f32) * tgl.cast(tgl.ge(pick(f32), 0), 'int32'):astype('float32')
    end,
    function() return tgl.exp(tgl.clip(pick(f32), -2, 2)) end,
    function() return pick(f32):dot(pick(f32):T():dot(pick(f32))) * 0.1 end,
    function() return tgl.cast(pick(f64), 'float32') end,
    function() return tgl.cast(pick(f32), 'float64') * pick(f64) end,
    function() return tgl.tanh(pick(f64)):dot(V) end,
    function() return pick(f64) - tgl.mean(pick(f64), 2, { keepdims = true }) end,
  }
  for _ = 1, nops do
    local k = math.random(#steps)
    local r = steps[k]()
    if r.dtype == 'float64' then f64[#f64 + 1] = r else f32[#f32 + 1] = r end
  end
  local top, top64 = f32[#f32], f64[#f64]
  local cost = tgl.mean(top ^ 2) + tgl.mean(tgl.cast(top64 ^ 2, 'float32'))
    + tgl.mean(tgl.categorical_crossentropy(tgl.softmax(f32[#f32 - 1] or top), y))
  local gW, gV = unpack(tgl.grad(cost, { W, V }, { disconnected = 'ignore' }))
  return { inputs = { x, x64, y },
           outputs = { cost, top, top:T(), tgl.sum(top64, 1) },
           updates = { { W, W - 0.01 * gW }, { V, V - 0.01 * gV } } }, W, V
end

local function labels(R, K)
  local t = {}
  for i = 1, R do t[i] = (i * 5 % K) + 1 end
  return tgl.array(t, 'int32')
end

describe('the memory of a bound step', function()
  it('is bit-identical to the CVM on random steps of mixed dtypes, views and in-place ops', function()
    local shared_less = 0
    for case = 1, 24 do
      local results = {}
      local mode = case % 2 == 0 and 'FAST_COMPILE' or 'FAST_RUN'
      local linker = case % 3 == 0 and 'cvm_nogc' or 'cvm'
      for _, on in ipairs(WAYS) do
        with_whole_step(on, function()
          math.randomseed(7000 + case)
          tgl.manual_seed(case)
          local R, K = math.random(2, 9), math.random(2, 8)
          local spec, W, V = random_step(R, K, math.random(4, 24))
          spec.mode, spec.linker = mode, linker
          local f = tgl.compile(spec)
          local outs = {}
          for call = 1, 7 do
            local rows = call <= 5 and R or R + 1      -- a new shape drops and rebinds
            outs[call] = { f(tgl.randn(rows, K), tgl.randn(rows, K):astype('float64'), labels(rows, K)) }
            local ws = f:whole_step()
            if ws then
              assert.is_true(ws.bytes <= ws.sum, ('case %d: arena %d above the sum %d'):format(case, ws.bytes, ws.sum))
              if on ~= false and ws.bytes < ws.sum then shared_less = shared_less + 1 end
            end
            if on ~= false and call >= 3 and call ~= 6 then
              assert.is_table(ws, ('case %d (%s) call %d: not bound'):format(case, tostring(on), call))
            end
          end
          results[on] = { outs = outs, W = W:get_value(), V = V:get_value() }
        end)
      end
      for _, on in ipairs({ true, 'bound' }) do
        for call, o in ipairs(results[on].outs) do
          for k = 1, #o do
            bits_equal(results[false].outs[call][k], o[k],
                       ('case %d %s (%s) call %d output %d'):format(case, mode, tostring(on), call, k))
          end
        end
        bits_equal(results[false].W, results[on].W, 'case ' .. case .. ' W')
        bits_equal(results[false].V, results[on].V, 'case ' .. case .. ' V')
      end
    end
    assert.is_true(shared_less > 0, 'no step shared any bytes')
  end)

  it('binds a chain whose buffers add up past any L2 cache: the budget is the peak', function()
    -- 40 float64 buffers of 100 x 100 (80000 bytes) written one after the
    -- other, each read only by the next: 3.2 MB in all, two alive at once
    local res = {}
    for _, on in ipairs(WAYS) do
      with_whole_step(on, function()
        tgl.manual_seed(3)
        local x = tgl.matrix('x', 'float64')
        local h = x
        for i = 1, 40 do h = i % 2 == 0 and tgl.tanh(h) * 1.01 or tgl.sin(h) + 0.5 end
        local f = tgl.compile{ inputs = { x }, outputs = tgl.sum(h), mode = 'FAST_COMPILE' }
        local a = tgl.randn(100, 100):astype('float64')
        local outs = {}
        for call = 1, 4 do outs[call] = f(a) end
        res[on] = outs
        if on ~= false then
          local ws = f:whole_step()
          assert.is_table(ws, 'the chain did not bind')
          assert.is_true(ws.sum >= 40 * 80000, 'sum ' .. ws.sum)
          assert.is_true(ws.bytes <= 3 * 80000 + 1024, 'peak ' .. ws.bytes)
          local m = f:step_memory()
          assert.are.same({ steps = 1, sum = ws.sum, bytes = ws.bytes }, m)
        end
      end)
    end
    for call = 1, 4 do
      bits_equal(res[false][call], res[true][call], 'generated, call ' .. call)
      bits_equal(res[false][call], res['bound'][call], 'bound, call ' .. call)
    end
  end)

  it('shares the bytes of a scan body\'s intermediates, its outputs kept to the end', function()
    for case = 1, 6 do
      local res = {}
      for _, on in ipairs(WAYS) do
        with_whole_step(on, function()
          math.randomseed(900 + case)
          tgl.manual_seed(case)
          local D = math.random(3, 12)
          local x, y = tgl.matrix('x'), tgl.ivector('y')
          local Wh = tgl.shared(tgl.randn(D, D) * 0.3, 'Wh')
          local Wy = tgl.shared(tgl.randn(D, 4) * 0.3, 'Wy')
          local r = tgl.scan{
            fn = function(e, h, s, W)
              local a = tgl.tanh(e + h:dot(W))
              local b = tgl.sigmoid(a * 1.5 - h):dot(W:T():T())
              local c = tgl.switch(tgl.gt(a, b), a, b * 0.5)
              local d = tgl.cast(tgl.cast(c, 'float64') * 2, 'float32')
              local hn = tgl.sigmoid(d + a * 0.25 - b)
              return { hn, s + tgl.sum(hn[{ { 1, math.max(1, D - 1) } }] ^ 2) }
            end,
            sequences = { x }, outputs_info = { tgl.zeros(D), tgl.zeros(1)[1] },
            non_sequences = { Wh } }
          local hs, ss = r[1], r[2]
          local cost = tgl.mean(tgl.categorical_crossentropy(tgl.softmax(hs:dot(Wy)), y))
            + ss[-1] * 1e-3
          local gWh, gWy = unpack(tgl.grad(cost, { Wh, Wy }))
          local f = tgl.compile{ inputs = { x, y }, outputs = { cost, hs, ss },
                                 mode = case % 2 == 0 and 'FAST_COMPILE' or 'FAST_RUN',
                                 updates = { { Wh, Wh - 0.1 * gWh }, { Wy, Wy - 0.1 * gWy } } }
          local outs = {}
          for call, T in ipairs({ 6, 6, 3, 8 }) do
            local l = {}
            for i = 1, T do l[i] = (i * 3 % 4) + 1 end
            outs[call] = { f(tgl.randn(T, D), tgl.array(l, 'int32')) }
            if on ~= false then
              local m = f:step_memory()
              assert.is_true(m.steps >= 1, 'case ' .. case .. ': no scan body bound')
              assert.is_true(m.bytes <= m.sum and m.bytes > 0, ('case %d: %d of %d'):format(case, m.bytes, m.sum))
            end
          end
          res[on] = { outs = outs, Wh = Wh:get_value(), Wy = Wy:get_value() }
        end)
      end
      for _, on in ipairs({ true, 'bound' }) do
        for call, o in ipairs(res[on].outs) do
          for k = 1, 3 do
            bits_equal(res[false].outs[call][k], o[k], ('case %d (%s) call %d output %d'):format(case, tostring(on), call, k))
          end
        end
        bits_equal(res[false].Wh, res[on].Wh, 'case ' .. case .. ' Wh')
        bits_equal(res[false].Wy, res[on].Wy, 'case ' .. case .. ' Wy')
      end
    end
  end)

  it('reports nothing bound on the CVM', function()
    with_whole_step(false, function()
      local x = tgl.matrix('x')
      local f = tgl.compile{ inputs = { x }, outputs = tgl.sum(tgl.tanh(x:dot(x:T()))) }
      local a = tgl.randn(4, 3)
      f(a); f(a); f(a)
      assert.is_nil(f:whole_step())
      assert.are.same({ steps = 0, sum = 0, bytes = 0 }, f:step_memory())
    end)
  end)
end)
