-- scan_loop_spec.lua — the whole loop in C (src/scan/scan_loop.c): a scan
-- whose body is straight-line runs its steps after the first two as one
-- generated C function (the taps' pointers, the body's kernels inline, the
-- products called back, the stores, the until test).  Every case here runs
-- the same compiled function two ways and wants bit-identical results and
-- shared values:
--   generated  tgl.config.whole_step = 'on' (the default), compile = 'sync'
--              so the loop's code is there at the first run;
--   interpreted  tgl.config.whole_step = 'bound': the loop step by step,
--              the body's bound step op by op (scan.c run_steps).
-- tgl_scan_loop_steps() (a counter of the steps the generated loops ran)
-- tells that the generated loop did run.  A property case at the end
-- draws random scan programs (spec/property_scan_spec.lua's generator,
-- forward and gradient) and compares the two ways the same.
local ffi = require 'ffi'
local C = require('tgl.core').C
local S = dofile('spec/support.lua')

pcall(ffi.cdef, 'int64_t tgl_scan_loop_steps(void);')

-- The cpu backend has the generated loop; another device runs the loop
-- interpreted (the comparison then holds trivially, the counter stays).
local GEN = tgl.config.device == 'cpu'

local function steps_run() return tonumber(C.tgl_scan_loop_steps()) end

local function same_bits(a, b, what)
  assert(C.tgl_array_equal_bits(a.p, b.p) ~= 0,
    ('%s: generated and interpreted differ:\n%s\n%s'):format(what, tostring(a), tostring(b)))
end

local with = S.with_whole_step

-- Compiles with compile = 'sync': the body's kernels get their final code
-- at once (the generated loop waits for it, as a whole step does).
local function compile(t) return with(true, function() return tgl.compile(t) end) end

-- Calls f(args) `calls` times both ways (shared values reset before each
-- call from `shared`: {{var, value}, ...}); compares every result and the
-- shared values after each call.  Returns the steps the generated loop ran.
local function compare(f, args, shared, calls, what)
  shared = shared or {}
  calls = calls or 3
  local function run(ws)
    local out = {}
    with(ws, function()
      for c = 1, calls do
        for _, sv in ipairs(shared) do sv[1]:set_value(sv[2]:clone()) end
        local r = { f(unpack(args)) }
        for i = 1, #r do r[i] = r[i]:clone() end
        for _, sv in ipairs(shared) do r[#r + 1] = sv[1]:get_value():clone() end
        out[c] = r
      end
    end)
    return out
  end
  -- the body's kernels compiled with the optimizing compiler first (the
  -- loop waits for their final code, as a whole step does)
  f:wait_compiled()
  -- a first call makes the body's kernels (compile = 'sync': at once)
  with(true, function() f(unpack(args)) end)
  local ref = run('bound')
  local before = steps_run()
  local got = run(true)
  local ran = steps_run() - before
  for c = 1, calls do
    assert.are.equal(#ref[c], #got[c])
    for i = 1, #ref[c] do same_bits(ref[c][i], got[c][i], ('%s, call %d, result %d'):format(what, c, i)) end
  end
  if GEN then assert.is_true(ran > 0, what .. ': the generated loop ran no step') end
  return ran
end

describe('the whole loop in C (scan_loop.c)', function()
  it('runs a one-op body as the interpreted loop does, and counts its steps', function()
    local h0 = tgl.dvector('h0')
    local hs = tgl.scan { fn = function(h) return h + 1 end, outputs_info = { h0 }, n_steps = 1000,
                          name = 'count' }
    local f = compile { inputs = { h0 }, outputs = { hs, hs[-1] } }
    local ran = compare(f, { tgl.array({ 0.5, -2 }, 'float64') }, nil, 3, 'count')
    -- the first two steps of each run are interpreted, the rest generated
    if GEN then assert.are.equal(3 * 998, ran) end
    local r = with(true, function() return f(tgl.array({ 0.5, -2 }, 'float64')) end)
    assert.are.same({ 1000.5, 998 }, r:totable()[1000])
  end)

  for _, back in ipairs({ false, true }) do
    it(('takes several and negative taps, several outputs and non-sequences (go_backwards = %s)')
      :format(tostring(back)), function()
      local x = tgl.matrix('x')
      local y = tgl.vector('y')
      local h0 = tgl.matrix('h0')
      local g0 = tgl.vector('g0')
      local W = tgl.matrix('W')
      local c = tgl.scalar('c')
      local outs = tgl.scan {
        fn = function(x_m2, x_t, x_p1, y_t, h_m3, h_m1, g_m1, W_, c_)
          local h = tgl.tanh(h_m1 * 0.5 + h_m3 * 0.25 + (x_m2 - x_p1) * c_ + x_t:dot(W_) * 0.1)
          local g = tgl.sigmoid(g_m1 + y_t * h:sum(1))
          return { h, g, h:sum() * c_ + y_t:sum() }
        end,
        sequences = { { input = x, taps = { -2, 0, 1 } }, y },
        outputs_info = { { initial = h0, taps = { -3, -1 } }, g0, false },
        non_sequences = { W, c },
        go_backwards = back, name = 'taps',
      }
      local f = compile { inputs = { x, y, h0, g0, W, c }, outputs = { outs[1], outs[2], outs[3] } }
      tgl.manual_seed(3)
      local T = 40
      local xa = tgl.randn(T + 3, 3)
      local ya = tgl.randn(T + 3)
      local h0a = tgl.randn(4, 3)
      local g0a = tgl.randn(1)
      local Wa = tgl.randn(3, 3)
      compare(f, { xa, ya, h0a, g0a, Wa, tgl.array(0.3, 'float32') }, nil, 3, 'taps')
    end)
  end

  it('keeps only the last state in a ring (hs[-1]) as the interpreted loop does', function()
    local h0 = tgl.dvector('h0')
    local W = tgl.dmatrix('W')
    local hs = tgl.scan { fn = function(h_m2, h_m1) return tgl.tanh(h_m1:dot(W) + h_m2 * 0.5) end,
                          outputs_info = { { initial = h0:reshape({ 2, 3 }), taps = { -2, -1 } } },
                          n_steps = 50, name = 'ring' }
    local f = compile { inputs = { h0, W }, outputs = hs[-1] }
    tgl.manual_seed(4)
    compare(f, { tgl.randn(6):astype('float64'), tgl.randn(3, 3):astype('float64') }, nil, 3, 'ring')
  end)

  it('stops with until_ at the same step', function()
    local k = tgl.dscalar('k')
    local lim = tgl.dscalar('lim')
    local p = tgl.scan { fn = function(v)
      local nv = v * 1.5 + 0.25
      return nv, tgl.until_(tgl.gt(nv, lim))
    end, outputs_info = { k }, n_steps = 1000, name = 'until' }
    local f = compile { inputs = { k, lim }, outputs = p }
    for _, l in ipairs({ 1e3, 1e9, 1e300 }) do
      compare(f, { tgl.array(1, 'float64'), tgl.array(l, 'float64') }, nil, 2, 'until ' .. l)
    end
    local r = with(true, function() return f(tgl.array(1, 'float64'), tgl.array(1e9, 'float64')) end)
    assert.is_true(r:get(r:size(1)) > 1e9 and r:get(r:size(1) - 1) <= 1e9)
  end)

  it('updates shared variables inside the loop as the interpreted loop does', function()
    local acc = tgl.shared(tgl.zeros(3), 'acc')
    local x = tgl.matrix('x')
    local outs, upd = tgl.scan { fn = function(x_t, h)
      local nh = tgl.tanh(h + x_t)
      return nh, { { acc, acc + nh * 0.5 } }
    end, sequences = { x }, outputs_info = { tgl.zeros(3) }, name = 'upd' }
    local f = compile { inputs = { x }, outputs = outs, updates = upd }
    tgl.manual_seed(5)
    compare(f, { tgl.randn(30, 3) }, { { acc, tgl.zeros(3) } }, 3, 'shared updates')
  end)

  it('runs the gradient (BPTT) scan of an Elman RNN as the interpreted loop does', function()
    tgl.manual_seed(6)
    local X = tgl.matrix('X')
    local Y = tgl.matrix('Y')
    local Wx = tgl.shared(tgl.randn(8, 16) * 0.3, 'Wx')
    local Wh = tgl.shared(tgl.randn(16, 16) * 0.3, 'Wh')
    local b = tgl.shared(tgl.zeros(16), 'b')
    local Wy = tgl.shared(tgl.randn(16, 4) * 0.3, 'Wy')
    local h0 = tgl.zeros(16)
    local h = tgl.scan { fn = function(x_t, h_tm1) return tgl.tanh(x_t:dot(Wx) + h_tm1:dot(Wh) + b) end,
                         sequences = { X }, outputs_info = { h0 }, name = 'elman' }
    local cost = tgl.mean((h:dot(Wy) - Y) ^ 2)
    local params = { Wx, Wh, b, Wy }
    local grads = tgl.grad(cost, params)
    local upd = {}
    for i, p in ipairs(params) do upd[i] = { p, p - 0.01 * grads[i] } end
    local f = compile { inputs = { X, Y }, outputs = { cost, grads[1], grads[2] }, updates = upd }
    local shared = {}
    for i, p in ipairs(params) do shared[i] = { p, p:get_value():clone() } end
    compare(f, { tgl.randn(25, 8), tgl.randn(25, 4) }, shared, 3, 'elman bptt')
  end)

  it('falls back to the interpreted loop for a body it cannot generate (a nested scan)', function()
    local x = tgl.dmatrix('x')
    local outs = tgl.scan { fn = function(row)
      local s = tgl.scan { fn = function(e, a) return a + e end, sequences = { row },
                           outputs_info = { tgl.constant(0, 'float64') }, name = 'inner' }
      return s[-1]
    end, sequences = { x }, name = 'outer' }
    local f = compile { inputs = { x }, outputs = outs }
    local xa = tgl.array({ { 1, 2 }, { 3, 4 }, { 5, 6 }, { 7, 8 } }, 'float64')
    f:wait_compiled()
    local ref = with('bound', function() return f(xa):clone() end)
    local got = with(true, function() return f(xa):clone() end)
    same_bits(ref, got, 'nested')
    assert.are.same({ 3, 7, 11, 15 }, got:totable())
  end)
end)

-- ---------------------------------------------------------------------------
-- random scan programs: property_scan_spec.lua's generator

describe('random scan programs: the generated loop equals the interpreted one', function()
  -- loaded in this file's environment (busted's setup and teardown)
  local chunk = assert(loadfile('spec/property_scan_spec.lua'))
  setfenv(chunk, setmetatable({ PROPERTY_SCAN_EXPORT = true }, { __index = getfenv(1) }))
  local P = chunk()
  local BASE_SEED, CASES = S.prop_seed_and_cases(23230001, 12)
  local total = 0
  for k = 1, CASES do
    local seed = BASE_SEED + k - 1
    it(('case %d (seed %d)'):format(k, seed), function()
      local p = P.random_case(seed)
      local outvars = {}
      for i, r in ipairs(p.outputs) do outvars[i] = r.var end
      local updates = {}
      if p.grads then
        for i, g in ipairs(p.grad_vars) do
          if not p.hidden[i] then outvars[#outvars + 1] = g end
        end
        for _, st in ipairs(p.steps) do
          local leaf = p.wrt[st.i]
          local v = leaf.var - st.lr * p.grad_vars[st.i]
          if st.update then updates[#updates + 1] = { leaf.var, v } else outvars[#outvars + 1] = v end
        end
      end
      for _, sc in ipairs(p.scans) do
        for _, u in ipairs(sc.updates or {}) do updates[#updates + 1] = u end
      end
      local f = with(true, function()
        return tgl.compile { inputs = p.inputs, outputs = outvars, updates = updates, name = 'prop_loop' }
      end)
      local shared = {}
      for i, s in ipairs(p.shared) do shared[i] = { s.var, s.val } end
      local args = {}
      for i = 1, #p.inputs do args[i] = p.input_vals[i] end
      -- the loops of a random case may run too few steps to be generated:
      -- the comparison holds either way, the counter is summed below
      f:wait_compiled()
      for _, sv in ipairs(shared) do sv[1]:set_value(sv[2]:clone()) end
      with(true, function() f(unpack(args)) end)
      local before = steps_run()
      local ok, err = pcall(function()
        local function run(ws)
          local out = {}
          with(ws, function()
            for c = 1, 3 do
              for _, sv in ipairs(shared) do sv[1]:set_value(sv[2]:clone()) end
              local r = { f(unpack(args)) }
              for i = 1, #r do r[i] = r[i]:clone() end
              for _, sv in ipairs(shared) do r[#r + 1] = sv[1]:get_value():clone() end
              out[c] = r
            end
          end)
          return out
        end
        local ref, got = run('bound'), run(true)
        for c = 1, 3 do
          for i = 1, #ref[c] do
            same_bits(ref[c][i], got[c][i], ('seed %d, call %d, result %d'):format(seed, c, i))
          end
        end
      end)
      total = total + steps_run() - before
      if not ok then
        error(('%s\nrecipe:\n%s\nrerun: TGL_PROP_SEED=%d TGL_PROP_CASES=1'):format(tostring(err),
          table.concat(p.lines, '\n'), seed), 0)
      end
    end)
  end
  it('ran the generated loop in some of the random cases', function()
    if GEN and CASES >= 8 then assert.is_true(total > 0, 'no random case ran a generated loop') end
  end)
end)
