-- sim_device_spec.lua — the sim device (doc/devices.md), a backend for
-- testing whose memory the host cannot read outside the backend's own
-- calls: a direct read of it from the host is killed by SIGSEGV (and the
-- same read of a cpu array is not); a function compiled with
-- device = 'sim' gives the cpu's values (training with updates, a loop, a
-- value-dependent shape, lazy ifelse); eager ops on sim arrays run there;
-- shared variables made while
-- device = 'sim' live there and read back right; inputs and outputs move
-- automatically; a:cpu() and a.device as API.md ("Devices") says; a bad
-- device is a clear error.  The op, property, whole-step and scan specs
-- run on sim too (the sim:* tests of spec/CMakeLists.txt).
local S = dofile('spec/support.lua')

local function on(device, fn)
  local was = tgl.config.device
  tgl.config.device = device
  local ok, err = pcall(fn)
  tgl.config.device = was
  if not ok then error(err, 0) end
end

-- A child that reads element 2 of a shared variable's value (made on
-- device) through the backend, then straight from its data pointer.
local function poke(device)
  return S.run_process(([[
    local tgl, ffi = require 'tgl', require 'ffi'
    tgl.config.device = '%s'
    local a = tgl.shared(tgl.array({ 1, 2, 3 }), 'a'):get_value { borrow = true }
    print('device', a.device)
    print('get', a:get(2))
    io.stdout:flush()
    print('poke', ffi.cast('float *', a:data())[1])
  ]]):format(device))
end

describe('the sim device', function()
  it('keeps its memory from the host: a direct read is killed by SIGSEGV, a cpu one is not', function()
    local out, err, code = poke('sim')
    assert.matches('device\tsim', out)
    assert.matches('get\t2\n', out)              -- through the backend: fine
    assert.is_nil(out:match('poke'), out)
    -- killed by the signal; under AddressSanitizer its handler reports the
    -- SEGV and exits 1
    local killed = code == 128 + 11 or (code ~= 0 and err:match('AddressSanitizer: SEGV') ~= nil)
    assert.is_true(killed, 'exit status ' .. tostring(code) .. ': ' .. err)
    out, err, code = poke('cpu')
    assert.matches('device\tcpu', out)
    assert.matches('poke\t2\n', out)
    assert.are.equal(0, code, err)
  end)

  it('runs a compiled function to the cpu values: a training step with updates, a loop, a computed shape, ifelse', function()
    local function train(device)
      local res = {}
      on(device, function()
        local x, y, n = tgl.matrix('x'), tgl.ivector('y'), tgl.lscalar('n')
        local W = tgl.shared(tgl.array({ { 0.1, -0.2, 0.3 }, { 0.4, 0.5, -0.6 } }), 'W')
        local b = tgl.shared(tgl.array({ 0.01, 0.02, 0.03 }), 'b')
        local U = tgl.shared(tgl.array({ { 0.5, -0.1, 0 }, { 0.2, 0.3, -0.4 }, { 0, 0.1, 0.6 } }), 'U')
        local p = tgl.softmax(tgl.dot(x, W) + b)
        local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
        local gW, gb = unpack(tgl.grad(cost, { W, b }))
        local h = tgl.scan { fn = function(xt, hp) return tgl.tanh(tgl.dot(hp, U) + xt) end,
                             sequences = { x:dot(W) }, outputs_info = { b * 0 },
                             name = 'rnn' }
        local r = tgl.reshape(h, tgl.stack({ n, n * 3 }), 2)  -- a shape computed at run time
        local lazy = tgl.ifelse(tgl.gt(n, 1), tgl.sum(r), tgl.sum(r) * 0)
        local f = tgl.compile { inputs = { x, y, n }, outputs = { cost, r, lazy },
                                updates = { { W, W - gW * 0.5 }, { b, b - gb * 0.5 } } }
        local xs, ys = tgl.array({ { 1, 2 }, { -1, 0.5 }, { 0.3, -2 }, { 2, 1 } }), tgl.array({ 1, 3, 2, 2 }, 'int32')
        res.outs = {}
        for call = 1, 4 do
          local c, rr, l = f(xs, ys, tgl.array(2, 'int64'))
          assert.are.equal('cpu', c.device)   -- outputs come back to the host
          assert.are.equal('cpu', rr.device)
          res.outs[call] = { c:totable(), rr:totable(), l:totable() }
        end
        res.W, res.b = W:get_value():totable(), b:get_value():totable()
        res.Wdev = W:get_value { borrow = true }.device
      end)
      return res
    end
    local cpu, sim = train('cpu'), train('sim')
    assert.are.equal('cpu', cpu.Wdev)
    assert.are.equal('sim', sim.Wdev)
    for call = 1, 4 do
      for k = 1, 3 do
        S.assert_close(cpu.outs[call][k], sim.outs[call][k], 1e-6, 1e-7, 'call ' .. call .. ' output ' .. k)
      end
    end
    assert.are.same({ 2, 6 }, { #sim.outs[4][2], #sim.outs[4][2][1] })
    S.assert_close(cpu.W, sim.W, 1e-6, 1e-7, 'W')
    S.assert_close(cpu.b, sim.b, 1e-6, 1e-7, 'b')
    -- training moved the weights
    assert.is_true(math.abs(sim.W[1][1] - 0.1) > 1e-3)
  end)

  it('keeps shared variables on sim, read back right through the backend', function()
    on('sim', function()
      local W = tgl.shared(tgl.array({ { 1, 2 }, { 3, 4 } }), 'W')
      local v = W:get_value { borrow = true }
      assert.are.equal('sim', v.device)
      assert.are.same({ { 1, 2 }, { 3, 4 } }, v:totable())
      assert.are.equal(3, v:get(2, 1))
      assert.matches('4\n%[tgl.array float32 of size 2x2 on sim%]$', tostring(v))
      local c = W:get_value()
      assert.are.equal('cpu', c.device)
      assert.are.same({ { 1, 2 }, { 3, 4 } }, c:totable())
      -- a transposed view of sim memory copies to the host as a view reads
      assert.are.same({ { 1, 3 }, { 2, 4 } }, v:T():totable())
      assert.are.same({ { 1, 3 }, { 2, 4 } }, v:T():clone():cpu():totable())
      -- set_value: the same shape is written into the variable's storage,
      -- a new shape replaces it, on sim either way
      W:set_value(tgl.array({ { 5, 6 }, { 7, 8 } }))
      assert.are.same({ { 5, 6 }, { 7, 8 } }, v:totable())
      W:set_value(tgl.array({ { 1, 2, 3 } }))
      assert.are.equal('sim', W:get_value { borrow = true }.device)
      assert.are.same({ { 1, 2, 3 } }, W:get_value():totable())
      -- an update through a compiled function
      local f = tgl.compile { outputs = W * 1, updates = { { W, W + 1 } } }
      assert.are.same({ { 1, 2, 3 } }, f():totable())
      assert.are.same({ { 2, 3, 4 } }, W:get_value():totable())
    end)
  end)

  it('moves inputs and outputs: host and sim inputs both run, a cpu function refuses sim ones', function()
    local x = tgl.vector('x')
    local s
    on('sim', function()
      s = tgl.shared(tgl.array({ 1, 2, 3 }), 's'):get_value { borrow = true }
      local f = tgl.compile { inputs = { x }, outputs = x * 2 }
      assert.are.same({ 2, 4, 6 }, f(tgl.array({ 1, 2, 3 })):totable())
      assert.are.same({ 2, 4, 6 }, f(s):totable())
      assert.are.same({ 2, 4, 6 }, f:output(1):totable())
    end)
    local g = tgl.compile { inputs = { x }, outputs = x * 2 }
    local ok, err = pcall(g, s)
    assert.is_false(ok)
    assert.matches('input 1 is on device sim; the function runs on cpu', err)
  end)

  it('gives a:cpu() and a.device as API.md says', function()
    local a = tgl.array({ 1, 2 })
    assert.are.equal('cpu', a.device)
    assert.are.equal(a, a:cpu())                 -- a cpu array is its own host copy
    on('sim', function()
      local v = tgl.shared(a, 'v'):get_value { borrow = true }
      assert.are.equal('sim', v.device)
      local h = v:cpu()
      assert.are.equal('cpu', h.device)
      assert.are.same({ 1, 2 }, h:totable())
      h:set(9, 1)                                -- a copy: the variable keeps its value
      assert.are.same({ 1, 2 }, v:totable())
    end)
    if not tgl.cuda.built() then
      local ok, err = pcall(function() return a:cuda() end)
      assert.is_false(ok)
      assert.matches('no backend for device cuda', err)
    end
  end)

  it('runs eager ops on sim arrays on sim, host operands copied there', function()
    on('sim', function()
      local v = tgl.shared(tgl.array({ 1, 2, 3 }), 'v'):get_value { borrow = true }
      for _, r in ipairs({ v + 1, 1 + v, v + tgl.array({ 1, 1, 1 }), tgl.array({ 1, 1, 1 }) + v }) do
        assert.are.equal('sim', r.device)
        assert.are.same({ 2, 3, 4 }, r:totable())
      end
      local s = tgl.sum(v * v)
      assert.are.equal('sim', s.device)
      assert.are.equal(14, s:totable())
      assert.are.same({ { 1 }, { 2 }, { 3 } }, v:reshape(3, 1):totable())
      assert.are.same({ 1, 2, 3 }, v:astype('float64'):totable())
    end)
  end)

  it('is chosen only by name: a bad device is a clear error and changes nothing', function()
    local was = tgl.config.device
    local ok, err = pcall(function() tgl.config.device = 'gpu0' end)
    assert.is_false(ok)
    assert.matches("device must be one of this build's devices %(cpu, .*sim%), got 'gpu0'", err)
    assert.are.equal(was, tgl.config.device)
  end)
end)
