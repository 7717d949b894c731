-- scan_spec.lua — tgl.scan (API.md "Loops: scan"), Theano's semantics:
-- every feature against hand-computed values or the same loop unrolled by
-- hand in the graph (values, and gradients from tgl.grad against the
-- unrolled graph's), tgl.verify_grad (finite differences) through loops,
-- every compile mode and linker, repeated calls, zero steps; the errors
-- (each names the scan, what is wrong, and the user's line); and a
-- property test over random Elman-like recurrences.
--
-- Reproducing a property failure: each case prints its seed; run
--   TGL_PROP_SEED=<seed> TGL_PROP_CASES=1 build/tgl lua/busted_host.lua spec/scan_spec.lua
-- (TGL_PROP_SEED=random draws a seed from the clock.)
tgl = tgl or require 'tgl'
local tgl = tgl

local function f64(t) return tgl.array(t, 'float64') end

-- Elementwise closeness, naming the element (spec/support.lua).
local assert_close = dofile('spec/support.lua').assert_close

-- Compiles inputs -> outputs (a table) and calls it once: the results, in a table.
local function eval(inputs, outputs, args, opts)
  opts = opts or {}
  local f = tgl.compile { inputs = inputs, outputs = outputs, updates = opts.updates,
                          mode = opts.mode, linker = opts.linker, name = opts.name }
  return { f(unpack(args, 1, #inputs)) }
end

-- Values and gradients of a scan against the unrolled graph: `pairs` is a
-- list of {scan_expr, unrolled_expr}; the cost of each side is the sum of
-- its expressions (weighted by position, so that each output counts
-- differently), differentiated with respect to `wrt`.
local function check_vs_unrolled(inputs, args, pairs, wrt, rtol, opts)
  rtol = rtol or 1e-10
  local outs = {}
  local cs, cu
  for k, p in ipairs(pairs) do
    outs[#outs + 1], outs[#outs + 2] = p[1], p[2]
    local ws, wu = tgl.sum(tgl.cast(p[1], 'float64')) * (k + 0.5), tgl.sum(tgl.cast(p[2], 'float64')) * (k + 0.5)
    if p[1].dtype == 'float64' or p[1].dtype == 'float32' then
      -- a nonlinear cost: squares weigh each element by its value
      ws = ws + tgl.sum(tgl.sqr(tgl.cast(p[1], 'float64')))
      wu = wu + tgl.sum(tgl.sqr(tgl.cast(p[2], 'float64')))
    end
    cs = cs and cs + ws or ws
    cu = cu and cu + wu or wu
  end
  local got = eval(inputs, outs, args, opts)
  for k = 1, #pairs do
    assert_close(got[2 * k], got[2 * k - 1], rtol, rtol, ('output %d'):format(k))
  end
  if wrt and #wrt > 0 then
    local gs = tgl.grad(cs, wrt)
    local gu = tgl.grad(cu, wrt)
    local all = {}
    for k = 1, #wrt do all[#all + 1], all[#all + 2] = gs[k], gu[k] end
    local g = eval(inputs, all, args, opts)
    for k = 1, #wrt do
      assert_close(g[2 * k], g[2 * k - 1], rtol, rtol, ('gradient %d'):format(k))
    end
  end
  return got
end

-- The error f raises at build time: 'scan_spec.lua:<line>: tgl.scan: ...'
-- naming the scan (when name is given) and each of the plain-text needles.
local function raises(name, f, ...)
  local ok, err = pcall(f)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  assert.matches('scan_spec%.lua:%d+: tgl%.scan: ', err)
  if name then assert.matches("'" .. name:gsub('%p', '%%%0') .. "'", err) end
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err, 1)
  end
  return err
end

-- The error a compiled function raises at its call: it names the scan and
-- each needle and points at a line of this file (where the scan was built).
local function raises_at_call(name, f, ...)
  local ok, err = pcall(f)
  assert.is_false(ok, 'expected an error')
  err = tostring(err)
  assert.matches("scan '" .. name:gsub('%p', '%%%0') .. "'", err)
  for _, needle in ipairs({ ... }) do
    assert.matches(needle:gsub('%p', '%%%0'), err, 1)
  end
  assert.matches('scan_spec%.lua:%d+', err)
  return err
end

-- h_t = tanh(x_t W + h_{t-1} U + b), unrolled by hand: a table of steps.
local function elman_unrolled(x, h0, W, U, b, T)
  local hs, h = {}, h0
  for t = 1, T do
    h = tgl.tanh(x[t]:dot(W) + h:dot(U) + b)
    hs[t] = h
  end
  return hs
end

describe('tgl.scan values and gradients', function()
  it('a sequence with one tap and a recurrent output (tap -1): hand values, unrolled grads, finite differences', function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    local out = tgl.scan { fn = function(xt, h) return h * 0.5 + xt end, sequences = { x },
                           outputs_info = { h0 }, name = 'acc' }
    local r = eval({ x, h0 }, { out }, { f64 { 1, 2, 3 }, f64(1) })
    assert_close({ 1.5, 2.75, 4.375 }, r[1])
    -- d sum(out) / dx = {1.75, 1.5, 1}, / dh0 = 0.5 + 0.25 + 0.125
    local g = eval({ x, h0 }, tgl.grad(tgl.sum(out), { x, h0 }), { f64 { 1, 2, 3 }, f64(1) })
    assert_close({ 1.75, 1.5, 1 }, g[1])
    assert_close(0.875, g[2])
    local unrolled, h = {}, h0
    for t = 1, 3 do h = h * 0.5 + x[t]; unrolled[t] = h end
    check_vs_unrolled({ x, h0 }, { f64 { 1, 2, 3 }, f64(1) }, { { out, tgl.stack(unrolled) } }, { x, h0 })
    local err = tgl.verify_grad(function(xv, hv)
      return tgl.scan { fn = function(xt, hh) return tgl.tanh(hh * 0.7 + xt) end, sequences = { xv },
                        outputs_info = { hv } }
    end, { f64 { 0.1, -0.4, 0.9, 0.3 }, f64(0.2) })
    assert.is_true(err < 1e-6)
  end)

  it('a sequence with several taps, positive ones included (element t + d - firsttap)', function()
    local x = tgl.dvector('x')
    local out = tgl.scan { fn = function(a, b, c) return a + 10 * b + 100 * c end,
                           sequences = { { input = x, taps = { -1, 0, 2 } } }, name = 'taps' }
    local xv = f64 { 1, 2, 3, 4, 5, 6 }
    -- span 3: 3 steps; step t reads x[t], x[t+1], x[t+3]
    local r = eval({ x }, { out }, { xv })
    assert_close({ 421, 532, 643 }, r[1])
    -- taps given unsorted are sorted: fn gets the slices in increasing tap order
    local out2 = tgl.scan { fn = function(a, b, c) return a + 10 * b + 100 * c end,
                            sequences = { { input = x, taps = { 2, -1, 0 } } } }
    assert_close({ 421, 532, 643 }, eval({ x }, { out2 }, { xv })[1])
    -- two sequences, one with only positive taps: the shortest span decides
    local y = tgl.dvector('y')
    local out3 = tgl.scan { fn = function(a, b, c) return a * b - c end,
                            sequences = { { input = x, taps = { 1, 2 } }, y } }
    local yv = f64 { 1, 1, 2, 3, 5, 8, 13 }
    -- x: 6 - 1 = 5 steps; y: 7 steps -> 5 steps
    local u = {}
    for t = 1, 5 do u[t] = x[t] * x[t + 1] - y[t] end
    check_vs_unrolled({ x, y }, { xv, yv }, { { out3, tgl.stack(u) } }, { x, y })
    local u2 = {}
    for t = 1, 3 do u2[t] = x[t] + 10 * x[t + 1] + 100 * x[t + 3] end
    check_vs_unrolled({ x }, { xv }, { { out, tgl.stack(u2) } }, { x })
    local err = tgl.verify_grad(function(xx)
      return tgl.scan { fn = function(a, b, c) return tgl.sin(a) * b + tgl.tanh(c) end,
                        sequences = { { input = xx, taps = { -2, 0, 1 } } } }
    end, { f64 { 0.3, -0.2, 0.8, 1.1, -0.5, 0.4 } })
    assert.is_true(err < 1e-6)
  end)

  it('a recurrent output with taps {-3,-1}: the initial value holds the earlier steps, oldest first', function()
    local h0 = tgl.dvector('h0')
    local out = tgl.scan { fn = function(a, c) return a + c end,
                           outputs_info = { { initial = h0, taps = { -3, -1 } } }, n_steps = 4, name = 'lag' }
    assert_close({ 4, 6, 9, 13 }, eval({ h0 }, { out }, { f64 { 1, 2, 3 } })[1])
    -- only the last 3 entries are used
    assert_close({ 4, 6, 9, 13 }, eval({ h0 }, { out }, { f64 { 100, 1, 2, 3 } })[1])
    -- gradient wrt the initial value, against the unrolled loop
    local function unrolled(init, T)
      local H = { init[1], init[2], init[3] }
      local u = {}
      for t = 1, T do
        H[3 + t] = tgl.tanh(H[t] * 0.5 + H[2 + t] * 1.3); u[t] = H[3 + t]
      end
      return tgl.stack(u)
    end
    local out2 = tgl.scan { fn = function(a, c) return tgl.tanh(a * 0.5 + c * 1.3) end,
                            outputs_info = { { initial = h0, taps = { -3, -1 } } }, n_steps = 5 }
    check_vs_unrolled({ h0 }, { f64 { 0.2, -0.7, 0.4 } }, { { out2, unrolled(h0, 5) } }, { h0 })
    -- the first of 4 entries gets no gradient
    local g = eval({ h0 }, { tgl.grad(tgl.sum(out2), h0) }, { f64 { 9, 0.2, -0.7, 0.4 } })[1]
    assert.equals(0, g:get(1))
    local g3 = eval({ h0 }, { tgl.grad(tgl.sum(out2), h0) }, { f64 { 0.2, -0.7, 0.4 } })[1]
    assert_close(g3, g[{ { 2, 4 } }])
    local err = tgl.verify_grad(function(hv)
      return tgl.scan { fn = function(a, b, c) return tgl.tanh(a - 0.3 * b + 0.8 * c) end,
                        outputs_info = { { initial = hv, taps = { -3, -2, -1 } } }, n_steps = 4 }
    end, { f64 { 0.1, 0.5, -0.3, 0.7 } })
    assert.is_true(err < 1e-6)
  end)

  it('only the last steps of an output used (the loop may keep a ring of K + 1 entries): values and gradients', function()
    local h0 = tgl.dvector('h0')
    local out = tgl.scan { fn = function(a, c) return tgl.tanh(a * 0.5 + c * 1.3) end,
                           outputs_info = { { initial = h0, taps = { -3, -1 } } }, n_steps = 6 }
    local H = { h0[1], h0[2], h0[3] }
    for t = 1, 6 do H[3 + t] = tgl.tanh(H[t] * 0.5 + H[2 + t] * 1.3) end
    local hv = f64 { 0.2, -0.7, 0.4 }
    check_vs_unrolled({ h0 }, { hv }, { { out[-1], H[9] } }, { h0 })
    check_vs_unrolled({ h0 }, { hv }, { { out[-2], H[8] } }, { h0 })
    check_vs_unrolled({ h0 }, { hv }, { { out[1], H[4] } }, { h0 })
    -- a state of 1 tap, only its final value
    local x, s0 = tgl.dvector('x'), tgl.dscalar('s0')
    local o = tgl.scan { fn = function(xt, h) return tgl.sin(h) + xt end, sequences = { x }, outputs_info = { s0 } }
    local u = s0
    for t = 1, 5 do u = tgl.sin(u) + x[t] end
    check_vs_unrolled({ x, s0 }, { f64 { 0.1, 0.2, -0.3, 0.4, 0.5 }, f64(1) }, { { o[-1], u } }, { x, s0 })
  end)

  it('a matrix-valued state with taps {-2,-1}: the initial value is a 3-d tensor of steps', function()
    local H0, A = tgl.dtensor3('H0'), tgl.dmatrix('A')
    local out = tgl.scan { fn = function(h2, h1, a) return tgl.tanh(h2:dot(a) + h1 * 0.5) end,
                           outputs_info = { { initial = H0, taps = { -2, -1 } } }, non_sequences = { A },
                           n_steps = 3 }
    local H = { H0[1], H0[2] }
    local u = {}
    for t = 1, 3 do H[2 + t] = tgl.tanh(H[t]:dot(A) + H[t + 1] * 0.5); u[t] = H[2 + t] end
    tgl.manual_seed(3)
    local h0v = tgl.randn(2, 2, 3, { dtype = 'float64' })
    local av = tgl.randn(3, 3, { dtype = 'float64' }) * 0.5
    local r = check_vs_unrolled({ H0, A }, { h0v, av }, { { out, tgl.stack(u) } }, { H0, A })
    assert.same({ 3, 2, 3 }, r[1]:shape())
  end)

  it('outputs not fed back: nil in outputs_info, in any position, and false', function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    -- a map: no outputs_info
    local m = tgl.scan { fn = function(xt) return xt * xt end, sequences = { x } }
    assert_close({ 1, 4, 9 }, eval({ x }, { m }, { f64 { 1, 2, 3 } })[1])
    -- {nil, h0}: output 1 is not fed back, output 2 is; fn gets only h
    local nargs
    local r = tgl.scan { fn = function(...)
      nargs = select('#', ...)
      local xt, a = ...
      return { xt * 10 + a, a + xt }
    end, sequences = { x }, outputs_info = { nil, h0 }, name = 'mixed' }
    assert.equals(2, nargs)
    assert.equals(2, #r)
    local v = eval({ x, h0 }, r, { f64 { 1, 2, 3 }, f64(0.5) })
    assert_close({ 10.5, 21.5, 33.5 }, v[1])
    assert_close({ 1.5, 3.5, 6.5 }, v[2])
    -- {h0, false}
    local r2 = tgl.scan { fn = function(xt, a) return { a + xt, a * xt } end, sequences = { x },
                          outputs_info = { h0, false } }
    local v2 = eval({ x, h0 }, r2, { f64 { 1, 2, 3 }, f64(0.5) })
    assert_close({ 1.5, 3.5, 6.5 }, v2[1])
    assert_close({ 0.5, 3, 10.5 }, v2[2])
    -- gradients through both kinds, against the unrolled loop
    local u1, u2, a = {}, {}, h0
    for t = 1, 3 do u1[t] = tgl.sin(x[t]) * a; a = tgl.tanh(a + x[t]); u2[t] = a end
    local r3 = tgl.scan { fn = function(xt, hh) return { tgl.sin(xt) * hh, tgl.tanh(hh + xt) } end,
                          sequences = { x }, outputs_info = { nil, h0 } }
    check_vs_unrolled({ x, h0 }, { f64 { 0.3, -1, 2 }, f64(0.25) },
                      { { r3[1], tgl.stack(u1) }, { r3[2], tgl.stack(u2) } }, { x, h0 })
  end)

  it('several outputs, each fed back or not', function()
    local x, a0, b0 = tgl.dvector('x'), tgl.dscalar('a0'), tgl.dscalar('b0')
    local r = tgl.scan { fn = function(xt, a, b) return { a + b * xt, b * 0.5 + a, xt * 2 } end,
                         sequences = { x }, outputs_info = { a0, b0 }, name = 'three' }
    assert.equals(3, #r)
    local ua, ub, uc, a, b = {}, {}, {}, a0, b0
    for t = 1, 4 do
      a, b = a + b * x[t], b * 0.5 + a
      ua[t], ub[t], uc[t] = a, b, x[t] * 2
    end
    check_vs_unrolled({ x, a0, b0 }, { f64 { 1, -2, 0.5, 3 }, f64(0.1), f64(0.7) },
                      { { r[1], tgl.stack(ua) }, { r[2], tgl.stack(ub) }, { r[3], tgl.stack(uc) } },
                      { x, a0, b0 })
  end)

  it('non_sequences explicit, and shared variables closed over', function()
    local x, h0 = tgl.dmatrix('x'), tgl.dvector('h0')
    local W, U, b = tgl.dmatrix('W'), tgl.dmatrix('U'), tgl.dvector('b')
    local nargs
    local out = tgl.scan { fn = function(...)
      nargs = select('#', ...)
      local xt, h, w, u, bb = ...
      return tgl.tanh(xt:dot(w) + h:dot(u) + bb)
    end, sequences = { x }, outputs_info = { h0 }, non_sequences = { W, U, b }, name = 'rnn' }
    assert.equals(5, nargs)
    tgl.manual_seed(11)
    local args = { tgl.randn(5, 3, { dtype = 'float64' }), tgl.randn(4, { dtype = 'float64' }),
                   tgl.randn(3, 4, { dtype = 'float64' }) * 0.5, tgl.randn(4, 4, { dtype = 'float64' }) * 0.5,
                   tgl.randn(4, { dtype = 'float64' }) }
    local inputs = { x, h0, W, U, b }
    check_vs_unrolled(inputs, args, { { out, tgl.stack(elman_unrolled(x, h0, W, U, b, 5)) } }, inputs)
    -- the same with shared variables closed over (not passed)
    local Ws, Us, bs = tgl.shared(args[3], 'Ws'), tgl.shared(args[4], 'Us'), tgl.shared(args[5], 'bs')
    local out2 = tgl.scan { fn = function(xt, h) return tgl.tanh(xt:dot(Ws) + h:dot(Us) + bs) end,
                            sequences = { x }, outputs_info = { h0 } }
    check_vs_unrolled({ x, h0 }, args, { { out2, tgl.stack(elman_unrolled(x, h0, Ws, Us, bs, 5)) } },
                      { x, h0, Ws, Us, bs })
    -- the shared variables passed as non_sequences give the same
    local out3 = tgl.scan { fn = function(xt, h, w, u, bb) return tgl.tanh(xt:dot(w) + h:dot(u) + bb) end,
                            sequences = { x }, outputs_info = { h0 }, non_sequences = { Ws, Us, bs } }
    local v = eval({ x, h0 }, { out2, out3 }, args)
    assert_close(v[1], v[2])
    -- finite differences through the shared-variable loop (inputs as points)
    local err = tgl.verify_grad(function(xx, hh, w, u)
      return tgl.scan { fn = function(xt, h) return tgl.tanh(xt:dot(w) + h:dot(u)) end,
                        sequences = { xx }, outputs_info = { hh } }
    end, { args[1][{ { 1, 3 } }], args[2], args[3], args[4] })
    assert.is_true(err < 1e-6)
  end)

  it('n_steps as a number, as a symbolic scalar, and inferred (the shortest sequence wins)', function()
    local x, y, h0 = tgl.dvector('x'), tgl.dvector('y'), tgl.dscalar('h0')
    local fn = function(xt, yt, h) return h + xt * yt end
    local inferred = tgl.scan { fn = fn, sequences = { x, y }, outputs_info = { h0 } }
    local fixed = tgl.scan { fn = fn, sequences = { x, y }, outputs_info = { h0 }, n_steps = 2 }
    local n = tgl.lscalar('n')
    local sym = tgl.scan { fn = fn, sequences = { x, y }, outputs_info = { h0 }, n_steps = n }
    local xv, yv = f64 { 1, 2, 3, 4 }, f64 { 10, 20, 30 }
    local r = eval({ x, y, h0, n }, { inferred, fixed, sym }, { xv, yv, f64(0), tgl.array(1, 'int64') })
    assert_close({ 10, 50, 140 }, r[1])
    assert_close({ 10, 50 }, r[2])
    assert_close({ 10 }, r[3])
    -- the symbolic n_steps with several values, one compiled function
    local f = tgl.compile { inputs = { x, y, h0, n }, outputs = sym }
    assert_close({ 10, 50, 140 }, f(xv, yv, 0, 3))
    assert_close({ 10, 50 }, f(xv, yv, 0, 2))
    -- n_steps with no sequences, and an int32 n
    local m = tgl.iscalar('m')
    local pw = tgl.scan { fn = function(h) return h * 3 end, outputs_info = { h0 }, n_steps = m }
    assert_close({ 3, 9, 27, 81 }, eval({ h0, m }, { pw }, { f64(1), tgl.array(4, 'int32') })[1])
    -- gradients with n_steps shorter than the sequences: later elements get 0
    local g = eval({ x, y, h0 }, tgl.grad(tgl.sum(fixed), { x, y }), { xv, yv, f64(0) })
    assert_close({ 20, 20, 0, 0 }, g[1])
    assert_close({ 2, 2, 0 }, g[2])
    local gi = eval({ x, y, h0 }, tgl.grad(tgl.sum(inferred), { x, h0 }), { xv, yv, f64(0) })
    assert_close({ 30, 40, 30, 0 }, gi[1])
    assert_close(3, gi[2])
  end)

  it('go_backwards reverses the sequences; outputs come in processing order', function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    local out = tgl.scan { fn = function(xt, h) return h * 10 + xt end, sequences = { x },
                           outputs_info = { h0 }, go_backwards = true }
    assert_close({ 3, 32, 321 }, eval({ x, h0 }, { out }, { f64 { 1, 2, 3 }, f64(0) })[1])
    -- with taps: step t reads the reversed sequence's element t + d - firsttap
    local out2 = tgl.scan { fn = function(a, b) return a * 10 + b end,
                            sequences = { { input = x, taps = { 0, 1 } } }, go_backwards = true }
    assert_close({ 43, 32, 21 }, eval({ x }, { out2 }, { f64 { 1, 2, 3, 4 } })[1])
    -- gradients against the unrolled reversed loop
    local out3 = tgl.scan { fn = function(xt, h) return tgl.tanh(h * 0.9 + xt) end, sequences = { x },
                            outputs_info = { h0 }, go_backwards = true }
    local u, h = {}, h0
    for t = 1, 4 do h = tgl.tanh(h * 0.9 + x[5 - t]); u[t] = h end
    check_vs_unrolled({ x, h0 }, { f64 { 0.5, -1, 0.25, 2 }, f64(0.1) }, { { out3, tgl.stack(u) } }, { x, h0 })
    local err = tgl.verify_grad(function(xx, hh)
      return tgl.scan { fn = function(a, b, c) return tgl.tanh(c * a - b) end,
                        sequences = { { input = xx, taps = { -1, 0 } } }, outputs_info = { hh },
                        go_backwards = true }
    end, { f64 { 0.5, -1, 0.25, 2, 0.3 }, f64(0.1) })
    assert.is_true(err < 1e-6)
  end)

  it('until_: a do-while loop whose outputs hold the steps that ran', function()
    local k = tgl.dscalar('k')
    local p = tgl.scan { fn = function(prev)
      local v = prev * 2
      return v, nil, tgl.until_(tgl.gt(v, 100))
    end, outputs_info = { k }, n_steps = 1000, name = 'pow2' }
    local f = tgl.compile { inputs = { k }, outputs = p }
    assert_close({ 2, 4, 8, 16, 32, 64, 128 }, f(1))
    -- the condition holds at the first step: one step runs (do-while)
    assert_close({ 400 }, f(200))
    -- n_steps still bounds the loop
    local q = tgl.scan { fn = function(prev) local v = prev * 2; return v, tgl.until_(tgl.gt(v, 100)) end,
                         outputs_info = { k }, n_steps = 3 }
    assert_close({ 2, 4, 8 }, eval({ k }, { q }, { f64(1) })[1])
    -- with a sequence and an output not fed back; until as the second value
    local x = tgl.dvector('x')
    local s = tgl.scan { fn = function(xt, acc) local a = acc + xt; return { a, xt * 2 }, tgl.until_(tgl.ge(a, 6)) end,
                         sequences = { x }, outputs_info = { tgl.constant(0, 'float64') } }
    local v = eval({ x }, s, { f64 { 1, 2, 3, 4, 5 } })
    assert_close({ 1, 3, 6 }, v[1])
    assert_close({ 2, 4, 6 }, v[2])
    -- gradient through the steps that ran
    local g = eval({ x }, { tgl.grad(tgl.sum(s[1]) + tgl.sum(s[2]), x) }, { f64 { 1, 2, 3, 4, 5 } })[1]
    assert_close({ 5, 4, 3, 0, 0 }, g)
    -- gradients wrt the sequence and the initial value: 1*2 = 2, 2*3 = 6 > 5 stops
    local m = tgl.scan { fn = function(xt, a) local v = a * xt; return v, tgl.until_(tgl.gt(tgl.abs(v), 5)) end,
                         sequences = { x }, outputs_info = { k } }
    local v2 = eval({ x, k }, { m, tgl.grad(m[-1], x), tgl.grad(m[-1], k) }, { f64 { 2, 3, 4, 5 }, f64(1) })
    assert_close({ 2, 6 }, v2[1])
    assert_close({ 3, 2, 0, 0 }, v2[2])
    assert_close(6, v2[3])
    -- updates count only the steps that ran; the gradient of the last value
    local c = tgl.shared(tgl.array(0, 'int64'), 'c')
    local p2, ups = tgl.scan { fn = function(prev) local v = prev * 2; return v, { { c, c + 1 } }, tgl.until_(tgl.gt(v, 100)) end,
                               outputs_info = { k }, n_steps = 1000 }
    local fu = tgl.compile { inputs = { k }, outputs = { p2, tgl.grad(p2[-1], k) }, updates = ups }
    local a, gk = fu(1)
    assert.equals(7, a:nelement())
    assert_close(128, gk)
    assert.equals(7, c:get_value():get())
    a = fu(50)
    assert_close({ 100, 200 }, a)
    assert.equals(9, c:get_value():get())
    -- a nested loop whose inner until stops after a different number of steps at each outer step
    local M = tgl.dmatrix('M')
    local o = tgl.scan { fn = function(row)
      local inner = tgl.scan { fn = function(e, acc) local v = acc + e; return v, tgl.until_(tgl.gt(v, 2)) end,
                               sequences = { row }, outputs_info = { tgl.constant(0, 'float64') } }
      return tgl.sum(inner)
    end, sequences = { M } }
    local fn2 = tgl.compile { inputs = { M }, outputs = { o, tgl.grad(tgl.sum(o), M) } }
    for _ = 1, 2 do
      local ov, gm = fn2(f64 { { 1, 1, 1, 1 }, { 3, 0, 0, 0 }, { 0, 0, 0, 0 } })
      assert_close({ 6, 3, 0 }, ov)
      assert_close({ { 3, 2, 1, 0 }, { 1, 0, 0, 0 }, { 4, 3, 2, 1 } }, gm)
    end
  end)

  it('expression non-sequences (slices of a shared matrix, W * 2): values and gradients against the unrolled loop', function()
    -- h_t = tanh(x_t Wx + h_{t-1} Wh + b) with Wx, Wh rows of one shared W
    -- (SeqLSTM's layout) and Wh listed as a non-sequence; the gradient of
    -- W gathers both slices' parts
    local x, h0 = tgl.dmatrix('x'), tgl.dvector('h0')
    local W = tgl.shared(f64 { { 0.3, -0.2 }, { 0.1, 0.4 }, { 0.6, 0.2 }, { -0.5, 0.3 }, { 0.2, 0.1 } }, 'W')
    local b = tgl.shared(f64 { 0.05, -0.1 }, 'b')
    local Wx, Wh = W[{ { 1, 3 } }], W[{ { 4, 5 } }]
    local out = tgl.scan { fn = function(xt, hp, wh, w2) return tgl.tanh(xt:dot(Wx) + hp:dot(wh) + b + w2) end,
                           sequences = { x }, outputs_info = { h0 }, non_sequences = { Wh, b * 2 }, name = 'slices' }
    local hs, h = {}, h0
    for t = 1, 4 do h = tgl.tanh(x[t]:dot(Wx) + h:dot(Wh) + b + b * 2); hs[t] = h end
    local xv = f64 { { 0.1, 0.2, -0.3 }, { 0.4, -0.1, 0.2 }, { -0.2, 0.3, 0.5 }, { 0.3, 0.1, -0.4 } }
    check_vs_unrolled({ x, h0 }, { xv, f64 { 0.1, -0.2 } }, { { out, tgl.stack(hs) } }, { x, h0, W, b })
    -- finite differences, the matrix an input of the function
    local err = tgl.verify_grad(function(w, xs)
      return tgl.scan { fn = function(xt, hp, wh) return tgl.tanh(xt:dot(w[{ { 1, 3 } }]) + hp:dot(wh)) end,
                        sequences = { xs }, outputs_info = { f64 { 0.1, -0.2 } }, non_sequences = { w[{ { 4, 5 } }] } }
    end, { W:get_value(), xv })
    assert.is_true(err < 1e-6)
  end)

  it('an expression non-sequence reading a variable the step updates sees each step\'s value', function()
    local x = tgl.dvector('x')
    local s = tgl.shared(f64 { 1, 2 }, 's')
    local out, ups = tgl.scan { fn = function(xt, s2) return tgl.sum(s2) * xt, { { s, s + 1 } } end,
                                sequences = { x }, non_sequences = { s * 2 }, name = 'upd' }
    local f = tgl.compile { inputs = { x }, outputs = out, updates = ups }
    -- s: {1,2} -> {2,3} -> {3,4}; outputs 2*(1+2)*1, 2*(2+3)*2, 2*(3+4)*3
    assert_close({ 6, 20, 42 }, f({ 1, 2, 3 }))
    assert_close({ 4, 5 }, s:get_value())
  end)

  it('updates to shared variables inside fn: loop state, applied by compile; each step sees the previous value', function()
    local x = tgl.dvector('x')
    local c = tgl.shared(tgl.array(0, 'int64'), 'c')
    local seen, ups = tgl.scan { fn = function(xt) return c * 1, { { c, c + 1 } } end, sequences = { x },
                                 name = 'count' }
    assert.equals(1, #ups)
    assert.equals(c, ups[1][1])
    local f = tgl.compile { inputs = { x }, outputs = seen, updates = ups }
    local r = f({ 5, 6, 7 })
    assert.equals('int64', r.dtype)
    assert.same({ 0, 1, 2 }, { r:get(1), r:get(2), r:get(3) })
    assert.equals(3, c:get_value():get())
    r = f({ 5, 6 })
    assert.same({ 3, 4 }, { r:get(1), r:get(2) })
    assert.equals(5, c:get_value():get())
    -- not applied without the updates: the shared variable keeps its value
    local g = tgl.compile { inputs = { x }, outputs = seen }
    assert_close(tgl.array({ 5, 6 }, 'int64'), g({ 1, 2 }))
    assert.equals(5, c:get_value():get())
    -- the {[W] = e} form, a float state read by the output, and a sequence
    local acc = tgl.shared(f64 { 1, 1 }, 'acc')
    local out, ups2 = tgl.scan { fn = function(xt) return tgl.sum(acc) * xt, { [acc] = acc * 2 + xt } end,
                                 sequences = { x } }
    local h = tgl.compile { inputs = { x }, outputs = out, updates = ups2 }
    -- acc: {1,1} -> {3,3} -> {8,8}; outputs 2*1, 6*2
    assert_close({ 2, 12 }, h({ 1, 2 }))
    assert_close({ 8, 8 }, acc:get_value())
    -- a shared matrix updated in fn and read with the sequence (x_t W): each step reads that
    -- step's W, in every mode (FAST_RUN must not compute x W on the whole sequence at once)
    local xm, hv0 = tgl.dmatrix('xm'), tgl.dvector('hv0')
    local W0 = f64 { { 0.5, 0.1 }, { 0.2, 0.3 } }
    local Wsh = tgl.shared(W0, 'Wsh')
    local o4, ups4 = tgl.scan { fn = function(xt, hh) return tgl.tanh(xt:dot(Wsh) + hh * 0.5), { { Wsh, Wsh * -0.7 } } end,
                                sequences = { xm }, outputs_info = { hv0 } }
    local xv = f64 { { 0.1, 0.2 }, { -0.3, 0.4 }, { 0.5, 0.6 } }
    local want, hh, Wv = {}, f64 { 0, 0 }, W0
    for t = 1, 3 do hh = tgl.tanh(xv[t]:dot(Wv) + hh * 0.5); want[t] = hh; Wv = Wv * -0.7 end
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
      Wsh:set_value(W0)
      local got = tgl.compile { inputs = { xm, hv0 }, outputs = o4, updates = ups4, mode = mode }(xv, f64 { 0, 0 })
      assert_close(tgl.stack(want), got, 1e-12, 1e-14, mode)
      assert_close(Wv, Wsh:get_value(), 1e-12, 1e-14, mode)
    end
    -- a step function that returns only updates
    local total = tgl.shared(f64(0), 'total')
    local none, ups3 = tgl.scan { fn = function(xt) return nil, { { total, total + xt * xt } } end, sequences = { x } }
    assert.same({}, none)
    tgl.compile { inputs = { x }, outputs = {}, updates = ups3 }({ 1, 2, 3 })
    assert_close(14, total:get_value())
  end)

  it('integer outputs: a step counter in int64', function()
    local cnt = tgl.scan { fn = function(i) return i + 1 end, outputs_info = { tgl.constant(0, 'int64') },
                           n_steps = 4, name = 'ctr' }
    local r = eval({}, { cnt }, {})[1]
    assert.equals('int64', r.dtype)
    assert.same({ 1, 2, 3, 4 }, { r:get(1), r:get(2), r:get(3), r:get(4) })
    -- beside a float output, through a sequence; the float gradient ignores the counter
    local x = tgl.dvector('x')
    local r2 = tgl.scan { fn = function(xt, i, s) return { i + 1, s + xt * tgl.cast(i, 'float64') } end,
                          sequences = { x }, outputs_info = { tgl.constant(0, 'int64'), tgl.constant(0, 'float64') } }
    local v = eval({ x }, { r2[1], r2[2], tgl.grad(tgl.sum(r2[2]), x) }, { f64 { 1, 1, 1 } })
    assert.equals('int64', v[1].dtype)
    assert_close({ 0, 1, 3 }, v[2])
    assert_close({ 0, 2, 2 }, v[3])
  end)

  it('a scan inside the step function of a scan: values and gradients', function()
    local M, h0 = tgl.dmatrix('M'), tgl.dscalar('h0')
    local o = tgl.scan { fn = function(row, a)
      local inner = tgl.scan { fn = function(e, s) return s + e * a end, sequences = { row },
                               outputs_info = { tgl.constant(0, 'float64') }, name = 'inner' }
      return inner[-1]
    end, sequences = { M }, outputs_info = { h0 }, name = 'outer' }
    local v = eval({ M, h0 }, { o }, { f64 { { 1, 2 }, { 3, 4 } }, f64(1) })
    assert_close({ 3, 21 }, v[1])
    -- sum(o) = h0 S1 + h0 S1 S2 (S the row sums)
    local g = eval({ M, h0 }, tgl.grad(tgl.sum(o), { M, h0 }), { f64 { { 1, 2 }, { 3, 4 } }, f64(1) })
    assert_close({ { 8, 8 }, { 3, 3 } }, g[1])
    assert_close(24, g[2])
    -- a nonlinear nested loop against its unrolling
    local o2 = tgl.scan { fn = function(row, a)
      local inner = tgl.scan { fn = function(e, s) return tgl.tanh(s * a + e) end, sequences = { row },
                               outputs_info = { a } }
      return tgl.sum(inner) * 0.5
    end, sequences = { M }, outputs_info = { h0 } }
    local u, a = {}, h0
    for t = 1, 3 do
      local s, acc = a, nil
      for j = 1, 2 do s = tgl.tanh(s * a + M[t][j]); acc = acc and acc + s or s end
      a = acc * 0.5
      u[t] = a
    end
    check_vs_unrolled({ M, h0 }, { f64 { { 0.1, 0.2 }, { -0.3, 0.4 }, { 0.5, -0.6 } }, f64(0.8) },
                      { { o2, tgl.stack(u) } }, { M, h0 })
    local err = tgl.verify_grad(function(mm, hh)
      return tgl.scan { fn = function(row, a)
        -- (parenthesized: scan returns its updates second, which sum would take as axes)
        return tgl.sum((tgl.scan { fn = function(e, s) return tgl.tanh(s * a + e) end, sequences = { row },
                                   outputs_info = { a } }))
      end, sequences = { mm }, outputs_info = { hh } }
    end, { f64 { { 0.1, 0.2 }, { -0.3, 0.4 } }, f64(0.3) })
    assert.is_true(err < 1e-6)
  end)

  it('ifelse inside the step function', function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    local o = tgl.scan { fn = function(xt, a) return tgl.ifelse(tgl.gt(xt, 0), a * xt, a - xt) end,
                         sequences = { x }, outputs_info = { h0 } }
    local xv = f64 { 2, -1, 3, -0.5 }
    -- 1*2=2, 2+1=3, 3*3=9, 9.5
    assert_close({ 2, 3, 9, 9.5 }, eval({ x, h0 }, { o }, { xv, f64(1) })[1])
    local u, a = {}, h0
    for t = 1, 4 do a = tgl.ifelse(tgl.gt(x[t], 0), a * x[t], a - x[t]); u[t] = a end
    check_vs_unrolled({ x, h0 }, { xv, f64(1) }, { { o, tgl.stack(u) } }, { x, h0 })
  end)

  it('truncate_gradient = k: the backward pass covers the last k steps only', function()
    local x, h0, w = tgl.dvector('x'), tgl.dscalar('h0'), tgl.dscalar('w')
    local T, K = 5, 2
    local fn = function(xt, h, ww) return tgl.tanh(h * ww + xt) end
    local full = tgl.scan { fn = fn, sequences = { x }, outputs_info = { h0 }, non_sequences = { w } }
    local trunc = tgl.scan { fn = fn, sequences = { x }, outputs_info = { h0 }, non_sequences = { w },
                             truncate_gradient = K, name = 'tbptt' }
    local xv, hv, wv = f64 { 0.5, -0.3, 0.8, 0.1, -0.6 }, f64(0.2), f64(0.9)
    -- the values do not change
    local v = eval({ x, h0, w }, { full, trunc }, { xv, hv, wv })
    assert_close(v[1], v[2])
    -- by hand: the last K steps unrolled from h_{T-K} given as a constant input
    local hk = tgl.dscalar('hk')
    local u, h = {}, hk
    for t = T - K + 1, T do h = tgl.tanh(h * w + x[t]); u[#u + 1] = h end
    local hkv = v[1][{ T - K }]
    for _, cost in ipairs({ 'last', 'sum' }) do
      local cs = cost == 'last' and trunc[-1] or tgl.sum(trunc)
      local cu = cost == 'last' and u[#u] or tgl.sum(tgl.stack(u))
      local gs = eval({ x, h0, w }, tgl.grad(cs, { x, h0, w }), { xv, hv, wv })
      local gu = eval({ x, w, hk }, tgl.grad(cu, { x, w }), { xv, wv, hkv })
      assert_close(gu[1], gs[1], 1e-10, 1e-12, cost .. ': gradient wrt x')
      for t = 1, T - K do assert.equals(0, gs[1]:get(t)) end
      assert_close(0, gs[2], 0, 0, cost .. ': gradient wrt h0')
      assert_close(gu[2], gs[3], 1e-10, 1e-12, cost .. ': gradient wrt w')
    end
    -- k >= the number of steps: the full gradient
    local big = tgl.scan { fn = fn, sequences = { x }, outputs_info = { h0 }, non_sequences = { w },
                           truncate_gradient = 10 }
    local g1 = eval({ x, h0, w }, tgl.grad(tgl.sum(full), { x, h0, w }), { xv, hv, wv })
    local g2 = eval({ x, h0, w }, tgl.grad(tgl.sum(big), { x, h0, w }), { xv, hv, wv })
    for i = 1, 3 do assert_close(g1[i], g2[i]) end
    -- with go_backwards: the last k steps processed are the first elements
    local back = tgl.scan { fn = fn, sequences = { x }, outputs_info = { h0 }, non_sequences = { w },
                            go_backwards = true, truncate_gradient = K }
    local vb = eval({ x, h0, w }, { back }, { xv, hv, wv })[1]
    local ub, hb = {}, hk
    for t = T - K + 1, T do hb = tgl.tanh(hb * w + x[T + 1 - t]); ub[#ub + 1] = hb end
    local gsb = eval({ x, h0, w }, tgl.grad(tgl.sum(back), { x, h0, w }), { xv, hv, wv })
    local gub = eval({ x, w, hk }, tgl.grad(tgl.sum(tgl.stack(ub)), { x, w }), { xv, wv, vb[{ T - K }] })
    assert_close(gub[1], gsb[1], 1e-10, 1e-12, 'go_backwards: gradient wrt x')
    for t = K + 1, T do assert.equals(0, gsb[1]:get(t)) end
    assert_close(0, gsb[2], 0, 0)
    assert_close(gub[2], gsb[3], 1e-10, 1e-12, 'go_backwards: gradient wrt w')
    -- with taps {-2,-1}: the last 2 steps read h_{T-3}, h_{T-2} as constants
    local H0 = tgl.dvector('H0')
    local lag = tgl.scan { fn = function(a, b, ww) return tgl.tanh(a * ww + b) end, non_sequences = { w },
                           outputs_info = { { initial = H0, taps = { -2, -1 } } }, n_steps = 5, truncate_gradient = 2 }
    local lv = eval({ H0, w }, { lag }, { f64 { 0.3, 0.1 }, wv })[1]
    local gl = eval({ H0, w }, tgl.grad(tgl.sum(lag), { H0, w }), { f64 { 0.3, 0.1 }, wv })
    assert_close({ 0, 0 }, gl[1], 0, 0)
    local a, b = tgl.dscalar('a'), tgl.dscalar('b')
    local y1 = tgl.tanh(a * w + b)
    local y2 = tgl.tanh(b * w + y1)
    assert_close(eval({ a, b, w }, { tgl.grad(y1 + y2, w) }, { lv[{ 2 }], lv[{ 3 }], wv })[1], gl[2])
  end)

  it('every compile mode and linker gives the same values and gradients', function()
    local x, h0, W = tgl.dmatrix('x'), tgl.dvector('h0'), tgl.dmatrix('W')
    local out = tgl.scan { fn = function(xt, h, w) return tgl.tanh(xt + h:dot(w)) end, sequences = { x },
                           outputs_info = { h0 }, non_sequences = { W } }
    local cost = tgl.sum(tgl.sqr(out))
    local outs = { out, tgl.grad(cost, x), tgl.grad(cost, h0), tgl.grad(cost, W) }
    tgl.manual_seed(5)
    local args = { tgl.randn(4, 3, { dtype = 'float64' }), tgl.randn(3, { dtype = 'float64' }),
                   tgl.randn(3, 3, { dtype = 'float64' }) * 0.5 }
    local ref
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
      for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
        local r = eval({ x, h0, W }, outs, args, { mode = mode, linker = linker })
        if not ref then ref = r
        else
          for i = 1, #outs do assert_close(ref[i], r[i], 1e-12, 1e-14, mode .. '/' .. linker .. ' output ' .. i) end
        end
      end
    end
  end)

  it('a compiled scan called twice (and with other shapes) keeps no stale state', function()
    local x, h0 = tgl.dmatrix('x'), tgl.dvector('h0')
    local out = tgl.scan { fn = function(xt, h) return h * 0.5 + xt end, sequences = { x }, outputs_info = { h0 } }
    local f = tgl.compile { inputs = { x, h0 }, outputs = { out, tgl.grad(tgl.sum(out), h0) } }
    local a1, g1 = f(f64 { { 1, 2 }, { 3, 4 } }, f64 { 0, 0 })
    local keep = a1:clone()
    local a2, g2 = f(f64 { { 1, 2 }, { 3, 4 } }, f64 { 0, 0 })
    assert_close(keep, a1, 0, 0, 'the first result after the second call')
    assert_close(keep, a2)
    assert_close(g1, g2)
    assert_close({ { 1, 2 }, { 3.5, 5 } }, a2)
    -- longer, wider, shorter
    local a3 = f(f64 { { 1, 1, 1 }, { 1, 1, 1 }, { 2, 2, 2 } }, f64 { 4, 4, 4 })
    assert_close({ { 3, 3, 3 }, { 2.5, 2.5, 2.5 }, { 3.25, 3.25, 3.25 } }, a3)
    local a4 = f(f64 { { 1 } }, f64 { 2 })
    assert_close({ { 2 } }, a4)
    assert_close(keep, a1, 0, 0, 'the first result after later calls')
  end)

  it('a zero-step scan (n_steps = 0, or an empty sequence) gives empty outputs', function()
    local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')
    local o = tgl.scan { fn = function(xt, h) return { h + xt, xt * 2 } end, sequences = { x },
                         outputs_info = { h0 }, n_steps = 0 }
    local v = eval({ x, h0 }, o, { f64 { 1, 2 }, f64(3) })
    assert.same({ 0 }, v[1]:shape())
    assert.same({ 0 }, v[2]:shape())
    local n = tgl.lscalar('n')
    local o2 = tgl.scan { fn = function(h) return h * 2 end, outputs_info = { h0 }, n_steps = n }
    local f = tgl.compile { inputs = { h0, n }, outputs = { o2, tgl.grad(tgl.sum(o2), h0) } }
    local r, g = f(3, 0)
    assert.same({ 0 }, r:shape())
    assert_close(0, g)
    r, g = f(3, 2)
    assert_close({ 6, 12 }, r)
    assert_close(6, g)
    -- an empty sequence
    local o3 = tgl.scan { fn = function(xt, h) return h + xt end, sequences = { x }, outputs_info = { h0 } }
    local e = eval({ x, h0 }, { o3 }, { f64 {}, f64(1) })[1]
    assert.same({ 0 }, e:shape())
    -- a matrix state: the empty output keeps the state's other axes
    local H0 = tgl.dmatrix('H0')
    local o4 = tgl.scan { fn = function(h) return h * 2 end, outputs_info = { H0 }, n_steps = 0 }
    assert.same({ 0, 2, 3 }, eval({ H0 }, { o4 }, { tgl.zeros({ 2, 3 }, { dtype = 'float64' }) })[1]:shape())
  end)
end)

-- Every compile mode and linker, for the zero-step cases below.
local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }
local LINKERS = { 'cvm', 'cvm_nogc', 'vm' }
local function each_mode(body)
  for _, mode in ipairs(MODES) do
    for _, linker in ipairs(LINKERS) do body({ mode = mode, linker = linker }, mode .. '/' .. linker) end
  end
end
local function shape_of(a) return table.concat(a:shape(), 'x') end

describe('tgl.scan with no step', function()
  it('an output not fed back has its step shape (0, ...), and the gradients the variables\' shapes', function()
    local X = tgl.dmatrix('X')
    local W = tgl.shared(tgl.array({ { 1, 0 }, { 0, 1 }, { 1, 1 } }, 'float64'), 'W')
    local V = tgl.shared(tgl.array({ { 1, 2, 3, 4 }, { 0, 1, 0, 1 } }, 'float64'), 'V')
    local b = tgl.shared(tgl.array({ 0.5, -0.5 }, 'float64'), 'b')
    local o = tgl.scan { fn = function(x_t) return tgl.tanh(x_t:dot(W)) end, sequences = { X }, name = 'proj' }
    -- downstream ops that used to see (0, 0): a product with c, a row
    -- bias, the gradient's inc_subtensor of a slice
    local y = o:dot(V) + 1
    local cost = tgl.sum(y) + tgl.sum(o + b) + tgl.sum(o[{ { 1, -1 } }])
    local gW, gV, gb = unpack(tgl.grad(cost, { W, V, b }))
    local x1 = f64 { { 1, 0, 0 }, { 0, 1, 1 } }
    local th = math.tanh
    each_mode(function(opts, what)
      local f = tgl.compile { inputs = { X }, outputs = { o, y, cost, gW, gV, gb }, mode = opts.mode,
                              linker = opts.linker }
      local r = { f(tgl.zeros(0, 3, { dtype = 'float64' })) }
      assert.equals('0x2', shape_of(r[1]), what .. ' o')
      assert.equals('0x4', shape_of(r[2]), what .. ' y')
      assert_close(0, r[3], 0, 0, what .. ' cost')
      assert_close({ { 0, 0 }, { 0, 0 }, { 0, 0 } }, r[4], 0, 0, what .. ' gW')
      assert_close({ { 0, 0, 0, 0 }, { 0, 0, 0, 0 } }, r[5], 0, 0, what .. ' gV')
      assert_close({ 0, 0 }, r[6], 0, 0, what .. ' gb')
      -- and with steps, the same function
      r = { f(x1) }
      assert_close({ { th(1), th(0) }, { th(1), th(2) } }, r[1], 1e-15, 0, what .. ' o, 2 steps')
      -- d cost / d o_t[j] = (row sum j of V) + 1 (the bias term) + 1 (the slice of every step)
      local d = { { 12, 4 }, { 12, 4 } }
      local gw = { { 0, 0 }, { 0, 0 }, { 0, 0 } }
      local o1 = { { th(1), th(0) }, { th(1), th(2) } }
      for t = 1, 2 do
        for j = 1, 2 do
          local delta = d[t][j] * (1 - o1[t][j] ^ 2)
          for i = 1, 3 do gw[i][j] = gw[i][j] + x1:get(t, i) * delta end
        end
      end
      assert_close(gw, r[4], 1e-12, 0, what .. ' gW, 2 steps')
      assert_close({ 2, 2 }, r[6], 0, 0, what .. ' gb, 2 steps')
    end)
  end)

  it('the step shape of an output computed in the body from every kind of input (a state, an index sequence)', function()
    local idx, h0 = tgl.lvector('idx'), tgl.dvector('h0')
    local Emb = tgl.shared(tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } }, 'float64'), 'Emb')
    local outs = tgl.scan { fn = function(i_t, h)
      local e = Emb[i_t]                          -- 1-based row of a (2, 3) table
      return { h * 0.5 + e, tgl.outer(h, e), tgl.sum(e) * h[{ { 1, 2 } }] }
    end, sequences = { idx }, outputs_info = { h0, false, false }, name = 'emb' }
    local cost = tgl.sum(outs[1]) + tgl.sum(outs[2]) + tgl.sum(outs[3])
    local gh0, gE = unpack(tgl.grad(cost, { h0, Emb }))
    each_mode(function(opts, what)
      local f = tgl.compile { inputs = { idx, h0 }, outputs = { outs[1], outs[2], outs[3], gh0, gE },
                              mode = opts.mode, linker = opts.linker }
      local r = { f(tgl.array({}, 'int64'), f64 { 1, 1, 1 }) }
      assert.equals('0x3', shape_of(r[1]), what .. ' state')
      assert.equals('0x3x3', shape_of(r[2]), what .. ' outer product')
      assert.equals('0x2', shape_of(r[3]), what .. ' slice of the state')
      assert_close({ 0, 0, 0 }, r[4], 0, 0, what .. ' gh0')
      assert_close({ { 0, 0, 0 }, { 0, 0, 0 } }, r[5], 0, 0, what .. ' gEmb')
      r = { f(tgl.array({ 2 }, 'int64'), f64 { 1, 1, 1 }) }
      assert_close({ { 4.5, 5.5, 6.5 } }, r[1], 0, 0, what .. ' one step')
      assert_close({ { 15, 15 } }, r[3], 0, 0, what .. ' one step, slice')
    end)
  end)

  it('a scan that updates a shared variable runs no step: a (0,) output, the variable unchanged, gradients zero', function()
    local x = tgl.vector('x')
    local total = tgl.shared(tgl.array(0, 'float32'), 'total')
    local seen, updates = tgl.scan { fn = function(x_t) return total + x_t, { { total, total + x_t } } end,
                                     sequences = { x }, name = 'accumulate' }
    local cost = tgl.sum(seen * seen)
    local gx, gt = unpack(tgl.grad(cost, { x, total }))
    -- the final value itself: its gradient reaches the variable directly
    -- when no step runs, and its tangent along x
    local final = updates[1][2]
    local fx, ft = unpack(tgl.grad(final, { x, total }))
    local v = tgl.vector('v')
    local rv = tgl.Rop(final, x, v)
    each_mode(function(opts, what)
      total:set_value(tgl.array(5, 'float32'))
      local f = tgl.compile { inputs = { x, v }, outputs = { seen, gx, gt, final, fx, ft, rv }, updates = updates,
                              mode = opts.mode, linker = opts.linker }
      local r = { f(tgl.array({}, 'float32'), tgl.array({}, 'float32')) }
      assert.equals('0', shape_of(r[1]), what .. ' seen')
      assert.equals('0', shape_of(r[2]), what .. ' gx')
      assert_close(0, r[3], 0, 0, what .. ' gtotal')
      assert_close(5, r[4], 0, 0, what .. ' the final value')
      assert.equals('0', shape_of(r[5]), what .. ' d final / dx')
      assert_close(1, r[6], 0, 0, what .. ' d final / dtotal')
      assert_close(0, r[7], 0, 0, what .. ' Rop')
      assert_close(5, total:get_value(), 0, 0, what .. ' total unchanged')
      r = { f(tgl.array({ 1, 2 }, 'float32'), tgl.array({ 1, 10 }, 'float32')) }
      assert_close({ 6, 8 }, r[1], 0, 0, what .. ' two steps')
      assert_close({ 28, 16 }, r[2], 0, 0, what .. ' gx, two steps')
      assert_close(28, r[3], 0, 0, what .. ' gtotal, two steps')
      assert_close(8, r[4], 0, 0, what .. ' the final value, two steps')
      assert_close({ 1, 1 }, r[5], 0, 0, what .. ' d final / dx, two steps')
      assert_close(1, r[6], 0, 0, what .. ' d final / dtotal, two steps')
      assert_close(11, r[7], 0, 0, what .. ' Rop, two steps')
      assert_close(8, total:get_value(), 0, 0, what .. ' total after two steps')
      r = { f(tgl.array({}, 'float32'), tgl.array({}, 'float32')) }
      assert.equals('0', shape_of(r[1]), what .. ' seen, again')
      assert_close(8, total:get_value(), 0, 0, what .. ' total unchanged, again')
    end)
  end)

  it('n_steps = 0 with a sequence shorter than its taps span (taps {-1, 0} on 0 or 1 element) runs no step', function()
    local x = tgl.dvector('x')
    local d = tgl.scan { fn = function(prev, cur) return cur - prev end,
                         sequences = { { input = x, taps = { -1, 0 } } }, n_steps = 0, name = 'diff' }
    local n = tgl.lscalar('n')
    local dn = tgl.scan { fn = function(prev, cur) return cur * prev end,
                          sequences = { { input = x, taps = { -1, 0 } } }, n_steps = n, name = 'diffn' }
    local gx = tgl.grad(tgl.sum(d), x)
    local gxn = tgl.grad(tgl.sum(dn), x)
    each_mode(function(opts, what)
      local f = tgl.compile { inputs = { x, n }, outputs = { d, gx, dn, gxn }, mode = opts.mode,
                              linker = opts.linker }
      for _, len in ipairs({ 0, 1, 3 }) do
        local xs = {}
        for i = 1, len do xs[i] = i * i end
        local r = { f(f64(xs), 0) }
        assert.equals('0', shape_of(r[1]), what .. ' d, ' .. len .. ' elements')
        assert_close(len == 0 and {} or tgl.zeros(len, { dtype = 'float64' }), r[2], 0, 0, what .. ' gx')
        assert.equals('0', shape_of(r[3]), what .. ' dn')
        assert.equals(tostring(len), shape_of(r[4]), what .. ' gxn')
      end
      local r = { f(f64 { 1, 4, 9 }, 2) }
      assert_close({ 4, 36 }, r[3], 0, 0, what .. ' two steps')
      assert_close({ 4, 10, 4 }, r[4], 0, 0, what .. ' gxn, two steps')
      -- more steps than the sequence allows is still an error
      local ok, err = pcall(f, f64 { 1, 4 }, 2)
      assert.is_false(ok)
      assert.truthy(tostring(err):find('n_steps is 2 but sequence 1 has 2 elements', 1, true), what .. ': ' .. tostring(err))
    end)
  end)
end)

describe('tgl.scan memory', function()
  -- Full backpropagation through time of h_t = tanh(x_t Wx + h_{t-1} Wh)
  -- over N steps, hidden 100, float64, in a fresh process: the peak
  -- resident memory of the call above what the process held before it
  -- (the input included), in (N, 100) buffers.  Two are needed: the
  -- stored states (the forward scan's buffer, which the backward scan
  -- reads in place) and one sequence of deltas (in the buffer the input
  -- projection X Wx freed, or in place of the output gradients when they
  -- are a sequence of their own).  The loop used to hold seven.  With
  -- the cost sum(h^2) the output gradients are 2 h: the rewrites
  -- (fill_elemwise) leave no (N, 100) array of ones for them.
  local N, H = 30000, 100
  local child = [[
    local N, H, cost_kind = %d, %d, %q
    tgl.config.compile = 'tcc'
    tgl.config.threads = 1
    local F64 = { dtype = 'float64' }
    local function status(key)
      local f = assert(io.open('/proc/self/status'))
      local s = f:read('*a')
      f:close()
      return tonumber(s:match(key .. ':%%s*(%%d+)')) * 1024
    end
    tgl.manual_seed(3)
    local X, h0 = tgl.dmatrix('X'), tgl.dvector('h0')
    local Wx = tgl.shared(tgl.randn(H, H, F64) * 0.1, 'Wx')
    local Wh = tgl.shared(tgl.randn(H, H, F64) * 0.1, 'Wh')
    local h = tgl.scan { fn = function(x_t, h_tm1) return tgl.tanh(x_t:dot(Wx) + h_tm1:dot(Wh)) end,
                         sequences = { X }, outputs_info = { h0 }, name = 'rnn' }
    local cost = cost_kind == 'sum' and tgl.sum(h) or cost_kind == 'square' and tgl.sum(h ^ 2)
                 or tgl.sum(h[-1] ^ 2)
    local g = tgl.grad(cost, { Wx, Wh })
    local f = tgl.compile { inputs = { X, h0 }, outputs = { cost, g[1], g[2] } }
    local z = tgl.zeros(H, F64)
    f(tgl.randn(20, H, F64), z)                 -- kernels made, nothing large held
    local Xa = tgl.randn(N, H, F64)
    collectgarbage(); collectgarbage()
    -- the peak from here on (Linux: 5 resets VmHWM to VmRSS)
    local cr = io.open('/proc/self/clear_refs', 'w')
    if cr then cr:write('5'); cr:close() end
    local before = status('VmRSS')
    local c, gWx, gWh = f(Xa, z)
    local peak = status('VmHWM') - before
    assert(c:get() == c:get() and gWx:get(1, 1) == gWx:get(1, 1) and gWh:get(2, 3) == gWh:get(2, 3))
    print(('%%.6f'):format(peak / (N * H * 8)))
  ]]
  local function run(cost_kind)
    local bin = os.getenv('TGL_BIN') or arg[-1]
    local src = os.tmpname()
    local fh = assert(io.open(src, 'w'))
    fh:write(child:format(N, H, cost_kind))
    fh:close()
    -- ASan's quarantine would keep freed buffers resident: none for this count
    local asan = os.getenv('ASAN_OPTIONS')
    local env = asan and ("ASAN_OPTIONS='" .. asan .. ":quarantine_size_mb=0' ") or ''
    local p = io.popen(env .. ('%q %q 2>&1'):format(bin, src))
    local out = p:read('*a')
    p:close()
    os.remove(src)
    local buffers = tonumber(out:match('^([%d.]+)%s*$'))
    assert.is_not_nil(buffers, 'the child failed:\n' .. out)
    return buffers, out
  end

  it('full BPTT over 30000 steps, hidden 100, float64: two (T, 100) buffers above the inputs at the peak', function()
    for _, cost_kind in ipairs({ 'sum', 'last', 'square' }) do
      local buffers, out = run(cost_kind)
      -- 2 and a little (the call's small arrays, the allocator); 3 would
      -- mean one more sequence of every step
      assert.is_true(buffers > 1.5 and buffers < 2.6,
                     ('cost %s: %.2f buffers of (T, 100) at the peak (%s)'):format(cost_kind, buffers, out))
    end
  end)

  it('an output written over its sequence (a temporary read at one tap): values, views of the slice, go_backwards', function()
    local x = tgl.dmatrix('x')
    local e = tgl.exp(x)                      -- a temporary only the scan reads
    local rev = tgl.scan { fn = function(xt) return xt[{ { -1, 1, -1 } }] * 1 end, sequences = { e }, name = 'rev' }
    local view = tgl.scan { fn = function(xt) return xt[{ { -1, 1, -1 } }] end, sequences = { tgl.exp(x * 2) },
                            name = 'view' }
    local back = tgl.scan { fn = function(xt, acc) return { acc + xt, xt * 3 } end, sequences = { tgl.exp(x * 3) },
                            outputs_info = { tgl.constant({ 0, 0, 0 }, 'float64'), false }, go_backwards = true,
                            name = 'back' }
    local a = f64 { { 0, 1, 2 }, { 3, 4, 5 } }
    for _, linker in ipairs({ 'cvm', 'cvm_nogc', 'vm' }) do
      local r = eval({ x }, { rev, view, back[2] }, { a }, { linker = linker })
      local E = math.exp
      assert_close({ { E(2), E(1), E(0) }, { E(5), E(4), E(3) } }, r[1], 1e-15, 0, linker .. ' rev')
      assert_close({ { E(4), E(2), E(0) }, { E(10), E(8), E(6) } }, r[2], 1e-15, 0, linker .. ' view')
      assert_close({ { 3 * E(9), 3 * E(12), 3 * E(15) }, { 3, 3 * E(3), 3 * E(6) } }, r[3], 1e-15, 0,
                   linker .. ' go_backwards')
    end
  end)

  it('a sequence read elsewhere too keeps its values (an output, a second tap, a non-sequence)', function()
    local x = tgl.dvector('x')
    local e = tgl.exp(x)
    local y = tgl.scan { fn = function(xt) return xt * 2 end, sequences = { e }, name = 'twice' }
    local d = tgl.scan { fn = function(a, b) return b - a end, sequences = { { input = tgl.exp(x * 2), taps = { -1, 0 } } },
                         name = 'diff' }
    local e3 = tgl.exp(x * 3)
    local w = tgl.scan { fn = function(xt, whole) return xt + tgl.sum(whole) end, sequences = { e3 },
                         non_sequences = { e3 }, name = 'whole' }
    local E = math.exp
    local r = eval({ x }, { y, e, d, w }, { f64 { 0, 1 } })
    assert_close({ 2, 2 * E(1) }, r[1], 1e-15, 0, 'y')
    assert_close({ 1, E(1) }, r[2], 1e-15, 0, 'the sequence, an output too')
    assert_close({ E(2) - 1 }, r[3], 1e-15, 0, 'two taps')
    assert_close({ 2 + E(3), 1 + 2 * E(3) }, r[4], 1e-15, 0, 'a non-sequence too')
  end)
end)

describe('tgl.scan errors', function()
  local x, h0 = tgl.dvector('x'), tgl.dscalar('h0')

  it('fn returning fewer outputs than outputs_info has initial values for', function()
    raises('few', function()
      tgl.scan { fn = function(xt, a, b) return a end, sequences = { x }, outputs_info = { h0, h0 }, name = 'few' }
    end, 'the step function returned 1 output where outputs_info declares 2',
       'an initial value for output 2')
  end)

  it('a recurrent output whose dtype changes', function()
    raises('dt', function()
      tgl.scan { fn = function(xt, h) return tgl.cast(h, 'float32') end, sequences = { x },
                 outputs_info = { h0 }, name = 'dt' }
    end, 'output 1 is float32', 'initial value gives float64')
  end)

  it('a recurrent output whose shape changes at run time: an error at the call, shared variables untouched', function()
    local v0 = tgl.dvector('v0')
    local W = tgl.shared(f64 { 1, 2 }, 'W')
    local out = tgl.scan { fn = function(xt, h) return tgl.concatenate({ h, h }) end, sequences = { x },
                           outputs_info = { v0 }, name = 'grow' }
    local f = tgl.compile { inputs = { x, v0 }, outputs = out, updates = { { W, W + 1 } } }
    raises_at_call('grow', function() return f({ 1, 2, 3 }, { 1 }) end,
                   'step 1', 'recurrent output 1 has shape (2,)', '(1,)')
    assert_close({ 1, 2 }, W:get_value())
    -- a shared variable the loop updates is untouched too
    local c = tgl.shared(tgl.array(7, 'int64'), 'c')
    local out2, ups = tgl.scan { fn = function(xt, h) return tgl.concatenate({ h, h }), { { c, c + 1 } } end,
                                 sequences = { x }, outputs_info = { v0 }, name = 'grow2' }
    local g = tgl.compile { inputs = { x, v0 }, outputs = out2, updates = ups }
    raises_at_call('grow2', function() return g({ 1, 2, 3 }, { 1 }) end, 'recurrent output 1 has shape')
    assert.equals(7, c:get_value():get())
    -- the function still runs afterwards (an empty state keeps its shape)
    assert.same({ 3, 0 }, f({ 1, 2, 3 }, f64 {}):shape())
    assert_close({ 2, 3 }, W:get_value())
  end)

  it('an error inside a step names the line of the step function, in every mode', function()
    local xm, Wm = tgl.dmatrix('xm'), tgl.dmatrix('Wm')
    local v0 = tgl.dvector('v0')
    local line = debug.getinfo(1, 'l').currentline + 2
    local o = tgl.scan { fn = function(xt, h)
      return tgl.tanh(xt:dot(Wm) + h)
    end, sequences = { xm }, outputs_info = { v0 }, name = 'badstep' }
    for _, mode in ipairs({ 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }) do
      local f = tgl.compile { inputs = { xm, Wm, v0 }, outputs = o, mode = mode }
      local ok, err = pcall(f, tgl.zeros({ 2, 3 }, { dtype = 'float64' }), tgl.zeros({ 2, 2 }, { dtype = 'float64' }),
                            tgl.zeros({ 2 }, { dtype = 'float64' }))
      assert.is_false(ok)
      assert.matches('inner sizes 3 and 2 differ', err, 1, true)
      assert.matches('scan_spec.lua:' .. line, err, 1, true)
      -- run inside the loop, the error also names the scan and the step
      if mode == 'FAST_COMPILE' then assert.matches("scan 'badstep', step 1", err, 1, true) end
    end
  end)

  it('taps reaching before the start: output tap -2 with an initial value of one entry', function()
    local v0 = tgl.dvector('v0')
    local out = tgl.scan { fn = function(a, b) return a + b end, outputs_info = { { initial = v0, taps = { -2, -1 } } },
                           n_steps = 4, name = 'fib' }
    local f = tgl.compile { inputs = { v0 }, outputs = out }
    assert_close({ 2, 3, 5, 8 }, f({ 1, 1 }))
    raises_at_call('fib', function() return f({ 1 }) end, 'reads 2 steps back', 'tap -2', 'holds 1')
    -- a scalar initial value for several taps is refused when building
    raises('fib0', function()
      tgl.scan { fn = function(a, b) return a + b end, outputs_info = { { initial = h0, taps = { -2, -1 } } },
                 n_steps = 4, name = 'fib0' }
    end, 'leading axis')
  end)

  it('n_steps larger than a sequence', function()
    local out = tgl.scan { fn = function(xt) return xt * 2 end, sequences = { x }, n_steps = 5, name = 'long' }
    local f = tgl.compile { inputs = { x }, outputs = out }
    raises_at_call('long', function() return f({ 1, 2, 3 }) end, 'n_steps is 5', 'sequence 1 has 3 elements')
    local n = tgl.lscalar('n')
    local out2 = tgl.scan { fn = function(a, b) return a + b end, sequences = { { input = x, taps = { 0, 1 } } },
                            n_steps = n, name = 'long2' }
    local g = tgl.compile { inputs = { x, n }, outputs = out2 }
    assert_close({ 3, 5 }, g({ 1, 2, 3 }, 2))
    raises_at_call('long2', function() return g({ 1, 2, 3 }, 3) end, 'n_steps is 3', 'enough for 2 steps')
    -- a second, shorter sequence
    local y = tgl.dvector('y')
    local out3 = tgl.scan { fn = function(a, b) return a * b end, sequences = { x, y }, n_steps = n, name = 'long3' }
    local h = tgl.compile { inputs = { x, y, n }, outputs = out3 }
    raises_at_call('long3', function() return h({ 1, 2, 3 }, { 1, 2 }, 3) end, 'sequence 2 has 2 elements')
  end)

  it('n_steps larger than a sequence whose slices fn does not read', function()
    local n = tgl.lscalar('n')
    local out = tgl.scan { fn = function(a, b) return a * 2 end, sequences = { { input = x, taps = { 0, 1 } } },
                           n_steps = n, name = 'unread' }
    local g = tgl.compile { inputs = { x, n }, outputs = out }
    raises_at_call('unread', function() return g({ 1, 2, 3 }, 3) end, 'n_steps is 3', 'enough for 2 steps')
    local y = tgl.dvector('y')
    local out2 = tgl.scan { fn = function(a, b) return a * 2 end, sequences = { x, y }, n_steps = n, name = 'unread2' }
    local h = tgl.compile { inputs = { x, y, n }, outputs = out2 }
    raises_at_call('unread2', function() return h({ 1, 2, 3 }, { 1 }, 3) end, 'sequence 2 has 1 element')
  end)

  it('an until condition that is not a boolean scalar', function()
    raises('u1', function()
      tgl.scan { fn = function(xt) return xt, nil, tgl.until_(tgl.gt(x, 1)) end, sequences = { x }, name = 'u1' }
    end, 'until condition must be a scalar')
    raises('u2', function()
      tgl.scan { fn = function(xt) return xt, tgl.until_(xt * 2) end, sequences = { x }, name = 'u2' }
    end, 'must be boolean')
    local ok, err = pcall(function() tgl.until_(3) end)
    assert.is_false(ok)
    assert.matches('scan_spec%.lua:%d+: tgl%.until_: ', err)
  end)

  it('an unknown option key (sequence for sequences)', function()
    raises(nil, function()
      tgl.scan { fn = function(xt) return xt end, sequence = { x }, name = 'typo' }
    end, "unknown option 'sequence'", "did you mean 'sequences'")
  end)

  it('a missing fn', function()
    raises(nil, function() tgl.scan { sequences = { x }, name = 'nofn' } end, "'fn'", 'required')
  end)

  it('an unknown option key and a missing fn name the scan', function()
    raises('typo', function()
      tgl.scan { fn = function(xt) return xt end, sequence = { x }, name = 'typo' }
    end, "unknown option 'sequence'")
    raises('nofn', function() tgl.scan { sequences = { x }, name = 'nofn' } end, "'fn'")
  end)
end)

-- Property test: random Elman-like recurrences
--   h_t = tanh(sum_a x_{t+d_a} Wx_a + sum_b h_{t+e_b} Wh_b + bias)
-- with random sizes, dtypes, sequence taps (-2..2), output taps, lengths,
-- n_steps given or inferred, go_backwards, the weights passed as
-- non_sequences or closed over, and a random compile mode and linker: the
-- scan against the same loop unrolled by hand, values and gradients;
-- finite differences on some float64 cases.
local DEFAULT_SEED, DEFAULT_CASES = 20261201, 16
local seed_env = os.getenv('TGL_PROP_SEED')
local BASE_SEED = tonumber(seed_env) or DEFAULT_SEED
if seed_env == 'random' then BASE_SEED = math.floor(tgl.time() * 1000) % 2000000000 end
local CASES = tonumber(os.getenv('TGL_PROP_CASES')) or DEFAULT_CASES

local OUT_TAPS = { { -1 }, { -2, -1 }, { -3, -1 }, { -2 }, { -3, -2, -1 } }

-- A random recipe (plain Lua data).
local function recipe(seed)
  math.randomseed(seed)
  local r = {
    dtype = math.random(2) == 1 and 'float32' or 'float64',
    nin = math.random(1, 3), nh = math.random(1, 3),
    T = math.random(1, 5),
    given = math.random(2) == 1,
    backwards = math.random(3) == 1,
    nonseq = math.random(2) == 1,
    explicit_taps = math.random(2) == 1,
    mode = ({ 'FAST_RUN', 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' })[math.random(4)],
    linker = ({ 'cvm', 'cvm_nogc', 'vm' })[math.random(3)],
  }
  local pool, staps = { -2, -1, 0, 1, 2 }, {}
  for _ = 1, math.random(1, 2) do
    staps[#staps + 1] = table.remove(pool, math.random(#pool))
  end
  table.sort(staps)
  r.staps = staps
  r.otaps = OUT_TAPS[math.random(#OUT_TAPS)]
  r.single = #r.otaps == 1 and r.otaps[1] == -1
  r.K = -r.otaps[1]
  r.L = r.T + (staps[#staps] - staps[1]) + (r.given and math.random(0, 2) or 0)
  r.E = r.single and 1 or r.K + math.random(0, 1)   -- entries in the initial value
  return r
end

local function describe_recipe(r)
  return ('%s/%s %s nin=%d nh=%d T=%d L=%d seq taps {%s} out taps {%s} init entries %d%s%s%s'):format(
    r.mode, r.linker,
    r.dtype, r.nin, r.nh, r.T, r.L, table.concat(r.staps, ','), table.concat(r.otaps, ','), r.E,
    r.given and ' n_steps given' or '', r.backwards and ' go_backwards' or '',
    r.nonseq and ' non_sequences' or ' closed over')
end

-- The scan and the unrolled loop over variables {x, h0, Wx_1.., Wh_1.., b}.
local function build(r, v)
  local x, h0 = v[1], v[2]
  local Wx, Wh = {}, {}
  for a = 1, #r.staps do Wx[a] = v[2 + a] end
  for b = 1, #r.otaps do Wh[b] = v[2 + #r.staps + b] end
  local bias = v[3 + #r.staps + #r.otaps]
  local params = {}
  for a = 1, #Wx do params[#params + 1] = Wx[a] end
  for b = 1, #Wh do params[#params + 1] = Wh[b] end
  params[#params + 1] = bias
  local ns, no = #r.staps, #r.otaps
  local function step(...)
    local args = { ... }
    local W = r.nonseq and { unpack(args, ns + no + 1) } or params
    assert.equals(r.nonseq and ns + no + #params or ns + no, select('#', ...))
    local acc = W[#W]
    for a = 1, ns do acc = acc + args[a]:dot(W[a]) end
    for b = 1, no do acc = acc + args[ns + b]:dot(W[ns + b]) end
    return tgl.tanh(acc)
  end
  local info
  if r.single and not r.explicit_taps then info = h0
  else info = { initial = h0, taps = r.otaps } end
  local out = tgl.scan { fn = step, sequences = { { input = x, taps = r.staps } }, outputs_info = { info },
                         non_sequences = r.nonseq and params or nil, n_steps = r.given and r.T or nil,
                         go_backwards = r.backwards, name = 'elman' }
  -- unrolled
  local function elem(i) return r.backwards and x[r.L + 1 - i] or x[i] end
  local H = {}
  if r.single then H[1] = h0 else for j = 1, r.K do H[j] = h0[r.E - r.K + j] end end
  local u = {}
  for t = 1, r.T do
    local acc = bias
    for a = 1, ns do acc = acc + elem(t + r.staps[a] - r.staps[1]):dot(Wx[a]) end
    for b = 1, no do acc = acc + H[r.K + t + r.otaps[b]]:dot(Wh[b]) end
    H[r.K + t] = tgl.tanh(acc)
    u[t] = H[r.K + t]
  end
  return out, tgl.stack(u)
end

local function random_point(r, dtype)
  local o = { dtype = dtype }
  local pts = { tgl.randn(r.L, r.nin, o) }
  pts[2] = r.single and tgl.randn(r.nh, o) or tgl.randn(r.E, r.nh, o)
  for _ = 1, #r.staps do pts[#pts + 1] = tgl.randn(r.nin, r.nh, o) * 0.6 end
  for _ = 1, #r.otaps do pts[#pts + 1] = tgl.randn(r.nh, r.nh, o) * 0.6 end
  pts[#pts + 1] = tgl.randn(r.nh, o) * 0.3
  return pts
end

describe('property: random Elman-like recurrences, scan against the unrolled loop', function()
  for case = 1, CASES do
    local seed = BASE_SEED + case - 1
    it(('case %d (TGL_PROP_SEED=%d)'):format(case, seed), function()
      local r = recipe(seed)
      tgl.manual_seed(seed)
      local what = describe_recipe(r)
      local vars = {}
      local pts = random_point(r, r.dtype)
      for i, p in ipairs(pts) do
        vars[i] = tgl.tensor { dtype = r.dtype, ndim = p:dim(), name = 'v' .. i }
      end
      local out, unrolled = build(r, vars)
      local tol = r.dtype == 'float32' and 2e-4 or 1e-10
      local ok, err = pcall(check_vs_unrolled, vars, pts, { { out, unrolled } }, vars, tol,
                            { mode = r.mode, linker = r.linker })
      if not ok then error(('seed %d (%s): %s'):format(seed, what, tostring(err)), 0) end
      if r.dtype == 'float64' and case % 2 == 0 then
        local e = tgl.verify_grad(function(...) return (build(r, { ... })) end, random_point(r, 'float64'))
        assert.is_true(e < 1e-5, ('seed %d (%s): verify_grad error %g'):format(seed, what, e))
      end
    end)
  end
end)
