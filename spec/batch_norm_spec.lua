-- spec/batch_norm_spec.lua — batch normalisation: the engine ops
-- tgl.batch_norm and tgl.batch_norm_stats (engine/ops/batch_norm.c,
-- cpu/kernels/batch_norm.c) against a plain Lua reference over random
-- shapes (2-d to 5-d), float32 and float64, with and without weight and
-- bias, eager and compiled, on strided inputs; their gradients of first
-- and second order (verify_grad) and their tangents (Rop) against finite
-- differences; their errors.  Then the modules nn.BatchNormalization and
-- nn.SpatialBatchNormalization: Torch7's defaults, fields and text, values
-- against the reference, gradInput / gradWeight / gradBias against finite
-- differences, the running statistics after three forwards worked out by
-- hand (Torch7's update: momentum, the unbiased variance), evaluate() using
-- them, backward leaving them alone, and errors naming the module.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local S = dofile('spec/support.lua')

-- ---------------------------------------------------------------------------
-- the reference

-- x: flat table in C order of shape; returns the flat y, and the per-
-- channel mean and biased variance (two-pass, in Lua doubles).
local function ref_bn(x, shape, w, b, eps, mean, var)
  local C = shape[2]
  local inner = 1
  for d = 3, #shape do inner = inner * shape[d] end
  local N = shape[1]
  local M = N * inner
  local function idx(n, c, s) return (n * C + c) * inner + s + 1 end
  if not mean then
    mean, var = {}, {}
    for c = 0, C - 1 do
      local s1 = 0
      for n = 0, N - 1 do for s = 0, inner - 1 do s1 = s1 + x[idx(n, c, s)] end end
      local m = s1 / M
      local s2 = 0
      for n = 0, N - 1 do for s = 0, inner - 1 do s2 = s2 + (x[idx(n, c, s)] - m) ^ 2 end end
      mean[c + 1], var[c + 1] = m, s2 / M
    end
  end
  local y = {}
  for c = 0, C - 1 do
    local inv = 1 / math.sqrt(var[c + 1] + eps)
    local wc, bc = w and w[c + 1] or 1, b and b[c + 1] or 0
    for n = 0, N - 1 do
      for s = 0, inner - 1 do
        local k = idx(n, c, s)
        y[k] = (x[k] - mean[c + 1]) * inv * wc + bc
      end
    end
  end
  return y, mean, var
end

local function close(want, got, rtol, atol, what)
  local g = S.flat(got)
  assert(#g == #want, ('%s: %d elements, expected %d'):format(what, #g, #want))
  for i = 1, #want do
    if not (math.abs(want[i] - g[i]) <= atol + rtol * math.abs(want[i])) then
      error(('%s: element %d is %.12g, expected %.12g'):format(what, i, g[i], want[i]), 2)
    end
  end
end

local function randn(shape, dtype, scale, shift)
  return (tgl.randn(shape, { dtype = 'float64' }) * (scale or 1) + (shift or 0)):astype(dtype or 'float64')
end

describe('tgl.batch_norm', function()
  before_each(function() tgl.manual_seed(5) end)

  it('normalises a small batch as worked by hand (eager)', function()
    local x = tgl.array({ { 1, 2 }, { 3, 5 }, { 4, 9 } }, 'float64')
    local y, mean, var = tgl.batch_norm(x, { eps = 0 })
    -- channel 1: mean 8/3, var (25 + 1 + 16) / 27 = 14/9; channel 2: mean
    -- 16/3, var (100 + 1 + 121) / 27 = 74/9
    S.assert_close({ 8 / 3, 16 / 3 }, mean, 1e-15)
    S.assert_close({ 14 / 9, 74 / 9 }, var, 1e-14)
    S.assert_close({ { -5 / 3 / math.sqrt(14 / 9), -10 / 3 / math.sqrt(74 / 9) },
                     { 1 / 3 / math.sqrt(14 / 9), -1 / 3 / math.sqrt(74 / 9) },
                     { 4 / 3 / math.sqrt(14 / 9), 11 / 3 / math.sqrt(74 / 9) } }, y, 1e-14)
    local w, b = tgl.array({ 2, -1 }, 'float64'), tgl.array({ 0.5, 3 }, 'float64')
    local y2 = tgl.batch_norm(x, w, b, { eps = 0 })
    S.assert_close((y * tgl.array({ { 2, -1 } }, 'float64') + tgl.array({ { 0.5, 3 } }, 'float64')), y2, 1e-14)
    -- given statistics: one output, the same kernel
    local y3 = tgl.batch_norm(x, w, b, { mean = tgl.array({ 1, 2 }, 'float64'), var = tgl.array({ 3, 0 }, 'float64'), eps = 1 })
    S.assert_close({ { 0.5, 3 }, { 2 / 2 * 2 + 0.5, -3 + 3 }, { 3 / 2 * 2 + 0.5, -7 + 3 } }, y3, 1e-15)
  end)

  it('matches the reference over random shapes, dtypes, affine or not, eager and compiled', function()
    local seed, cases = S.prop_seed_and_cases(2101, 40)
    local r = S.new_rng(seed)
    for case = 1, cases do
      local nd = r.int(2, 5)
      local shape = { r.int(1, 4), r.int(1, 5) }
      for d = 3, nd do shape[d] = r.int(1, 4) end
      if shape[1] * (shape[3] or 1) * (shape[4] or 1) * (shape[5] or 1) < 2 then shape[1] = 2 end
      local dtype = r.chance(0.5) and 'float32' or 'float64'
      local affine = r.chance(0.5)
      local eps = r.pick({ 0, 1e-5, 0.1 })
      local what = ('case %d (seed %d): %s %s%s eps %g'):format(case, seed, dtype, S.shape_str(shape),
                                                               affine and ' affine' or '', eps)
      tgl.manual_seed(seed + case)
      -- a large offset in some channels: the one-pass sums must not cancel
      local x = randn(shape, dtype, 1, r.chance(0.3) and 1000 or 0)
      local C = shape[2]
      local w = affine and randn({ C }, dtype) or nil
      local b = affine and randn({ C }, dtype) or nil
      local wt, bt = w and S.flat(w), b and S.flat(b)
      local want, wm, wv = ref_bn(S.flat(x), shape, wt, bt, eps)
      local rtol = dtype == 'float32' and 2e-5 or 1e-11
      local atol = dtype == 'float32' and 2e-4 or 1e-11
      local y, m, v = tgl.batch_norm(x, w, b, { eps = eps })
      assert.equals(dtype, y.dtype)
      close(want, y, rtol, atol, what .. ' eager y')
      close(wm, m, rtol, atol * 10, what .. ' eager mean')
      close(wv, v, rtol * 10, atol, what .. ' eager var')
      local X = tgl.tensor { dtype = dtype, ndim = nd }
      local ins = { X }
      local W, B
      if affine then
        W, B = tgl.tensor { dtype = dtype, ndim = 1 }, tgl.tensor { dtype = dtype, ndim = 1 }
        ins[2], ins[3] = W, B
      end
      local Y, Mn, V = tgl.batch_norm(X, W, B, { eps = eps })
      local f = tgl.compile { inputs = ins, outputs = { Y, Mn, V } }
      local cy, cm, cv
      if affine then cy, cm, cv = f(x, w, b) else cy, cm, cv = f(x) end
      close(want, cy, rtol, atol, what .. ' compiled y')
      close(wm, cm, rtol, atol * 10, what .. ' compiled mean')
      close(wv, cv, rtol * 10, atol, what .. ' compiled var')
      -- the evaluation form: given statistics
      local gm, gv = randn({ C }, dtype), (tgl.rand(C, { dtype = 'float64' }) + 0.5):astype(dtype)
      local we = ref_bn(S.flat(x), shape, wt, bt, eps, S.flat(gm), S.flat(gv))
      close(we, tgl.batch_norm(x, w, b, { eps = eps, mean = gm, var = gv }), rtol, atol, what .. ' given stats')
    end
  end)

  it('reads strided inputs (a transposed x, a permuted one)', function()
    local base = randn({ 6, 5 })
    local xt = base:T()                       -- (5, 6), strides (1, 5)
    local want = ref_bn(S.flat(xt:contiguous()), { 5, 6 }, nil, nil, 1e-5)
    close(want, tgl.batch_norm(xt), 1e-12, 1e-12, 'transposed')
    local X = tgl.dmatrix()
    close(want, tgl.compile { inputs = { X }, outputs = tgl.batch_norm(X) }(xt), 1e-12, 1e-12,
          'transposed, compiled')
    local x4 = randn({ 3, 4, 5, 6 })
    local xs = x4:permute(3, 1, 4, 2)          -- (5, 3, 6, 4): every axis strided
    local sh = xs:shape()
    close(ref_bn(S.flat(xs:contiguous()), sh, nil, nil, 1e-5), tgl.batch_norm(xs), 1e-12, 1e-12, 'permuted')
    local m, v = tgl.batch_norm_stats(xs)
    local _, wm, wv = ref_bn(S.flat(xs:contiguous()), sh, nil, nil, 0)
    close(wm, m, 1e-12, 1e-12, 'permuted mean')
    close(wv, v, 1e-12, 1e-12, 'permuted var')
  end)

  it('splits large inputs over the threads by channels (values as with one thread)', function()
    local saved = tgl.config.threads
    for _, case in ipairs({ { { 40, 7, 16, 16 }, 'float32' }, { { 3000, 37 }, 'float64' },
                            { { 9, 5, 40, 40 }, 'float64' } }) do
      local shape, dt = case[1], case[2]
      local x = randn(shape, dt, 3, 2)
      local C = shape[2]
      local w, b = randn({ C }, dt), randn({ C }, dt)
      local want, wm, wv = ref_bn(S.flat(x), shape, S.flat(w), S.flat(b), 1e-5)
      local tol = dt == 'float32' and 2e-5 or 1e-11
      for _, threads in ipairs({ 1, 3 }) do
        tgl.config.threads = threads
        local what = ('%s %s, %d threads'):format(dt, S.shape_str(shape), threads)
        local y, m, v = tgl.batch_norm(x, w, b)
        close(want, y, tol, tol * 10, what .. ' y')
        close(wm, m, tol, tol * 10, what .. ' mean')
        close(wv, v, tol, tol * 10, what .. ' var')
        local xt = x:permute(1, 2, unpack(#shape > 2 and { 4, 3 } or {}))
        local shp = xt:shape()
        close(ref_bn(S.flat(xt:contiguous()), shp, S.flat(w), S.flat(b), 1e-5), tgl.batch_norm(xt, w, b),
              tol, tol * 10, what .. ' strided')
      end
    end
    tgl.config.threads = saved
  end)

  it('has the gradients of the same normalisation written with plain ops (large, strided, threads)', function()
    local saved = tgl.config.threads
    local function plain(x, w, b, eps)
      local axes = {}
      for d = 1, x.ndim do if d ~= 2 then axes[#axes + 1] = d end end
      local m = tgl.mean(x, axes, { keepdims = true })
      local xc = x - m
      local v = tgl.mean(xc * xc, axes, { keepdims = true })
      local order = { 'x', 1 }
      for d = 3, x.ndim do order[d] = 'x' end
      return xc / tgl.sqrt(v + eps) * w:dimshuffle(order) + b:dimshuffle(order)
    end
    for _, case in ipairs({ { { 40, 7, 16, 16 }, 'float64', false }, { { 3000, 37 }, 'float64', false },
                            { { 6, 5, 3, 4 }, 'float64', true }, { { 50, 6, 20, 20 }, 'float32', true } }) do
      local shape, dt, strided = case[1], case[2], case[3]
      local nd = #shape
      local X, W, B, G = tgl.tensor { dtype = dt, ndim = nd }, tgl.tensor { dtype = dt, ndim = 1 },
                         tgl.tensor { dtype = dt, ndim = 1 }, tgl.tensor { dtype = dt, ndim = nd }
      local outs = {}
      for k, y in ipairs({ tgl.batch_norm(X, W, B), plain(X, W, B, 1e-5) }) do
        local gx, gw, gb = unpack(tgl.grad(tgl.sum(y * G), { X, W, B }))
        outs[k] = tgl.compile { inputs = { X, W, B, G }, outputs = { gx, gw, gb } }
      end
      local x, g = randn(shape, dt, 2, 1), randn(shape, dt)
      if strided then
        x = randn({ shape[1], shape[3], shape[2], shape[4] }, dt, 2, 1):permute(1, 3, 2, 4)
        g = randn({ shape[4], shape[2], shape[3], shape[1] }, dt):permute(4, 2, 3, 1)
      end
      local C = shape[2]
      local w, b = randn({ C }, dt), randn({ C }, dt)
      local want = { outs[2](x, w, b, g) }
      local tol = dt == 'float32' and 1e-3 or 1e-9
      for _, threads in ipairs({ 1, 3 }) do
        tgl.config.threads = threads
        local got = { outs[1](x, w, b, g) }
        for k, name in ipairs({ 'gx', 'gw', 'gb' }) do
          close(S.flat(want[k]), got[k], tol, tol, ('%s %s%s, %d threads: %s')
                :format(dt, S.shape_str(shape), strided and ' strided' or '', threads, name))
        end
      end
    end
    tgl.config.threads = saved
  end)

  it('has first-order gradients in x, weight and bias (verify_grad), and for given statistics', function()
    for _, shape in ipairs({ { 4, 3 }, { 2, 3, 2, 3 }, { 3, 2, 4 } }) do
      local C = shape[2]
      assert(tgl.verify_grad(function(x, w, b) return tgl.batch_norm(x, w, b) end,
                             { randn(shape), randn({ C }), randn({ C }) }) < 1e-6)
      assert(tgl.verify_grad(function(x) return tgl.batch_norm(x, { eps = 0.01 }) end, { randn(shape) }) < 1e-6)
      -- y, mean and var all in the cost: the training form's backward op and
      -- the statistics' own pullback together
      assert(tgl.verify_grad(function(x, w, b)
        local y, m, v = tgl.batch_norm(x, w, b)
        return tgl.sum(y * y) + tgl.sum(m * 3) + tgl.sum(v * m)
      end, { randn(shape), randn({ C }), randn({ C }) }) < 1e-6)
      -- the statistics alone, and through the running-average arithmetic
      assert(tgl.verify_grad(function(x)
        local m, v = tgl.batch_norm_stats(x)
        return m * 3 + v * v
      end, { randn(shape) }) < 1e-6)
      assert(tgl.verify_grad(function(x, m, v, w, b)
        return tgl.batch_norm(x, w, b, { mean = m, var = tgl.abs(v) + 0.5 })
      end, { randn(shape), randn({ C }), randn({ C }), randn({ C }), randn({ C }) }) < 1e-6)
    end
  end)

  it('has second-order gradients (the pullback is ordinary graph ops)', function()
    -- the gradient of sum(bn(x, w, b)^3 * p), as a function of x, w, b
    local shape = { 3, 2, 2, 2 }
    local p = tgl.constant(randn(shape))
    assert(tgl.verify_grad(function(x, w, b)
      local y = tgl.batch_norm(x, w, b)
      local gx, gw = unpack(tgl.grad(tgl.sum(y * y * y * p), { x, w }))
      return tgl.sum(gx * gx) + tgl.sum(gw * gw)
    end, { randn(shape), randn({ 2 }), randn({ 2 }) }, { tol = 1e-5 }) < 1e-5)
  end)

  it('pushes tangents forward (Rop) as finite differences say', function()
    local shape = { 3, 2, 2 }
    local x, w, b = randn(shape), randn({ 2 }), randn({ 2 })
    local vx, vw, vb = randn(shape), randn({ 2 }), randn({ 2 })
    local X, W, B = tgl.dtensor3(), tgl.dvector(), tgl.dvector()
    local Y = tgl.batch_norm(X, W, B)
    local VX, VW, VB = tgl.dtensor3(), tgl.dvector(), tgl.dvector()
    local R = tgl.Rop(Y, { X, W, B }, { VX, VW, VB })
    local fr = tgl.compile { inputs = { X, W, B, VX, VW, VB }, outputs = R }
    local fy = tgl.compile { inputs = { X, W, B }, outputs = Y }
    local e = 1e-6
    local fdv = (fy(x + vx * e, w + vw * e, b + vb * e) - fy(x - vx * e, w - vw * e, b - vb * e)) / (2 * e)
    S.assert_close(fdv, fr(x, w, b, vx, vw, vb), 1e-6, 1e-7, 'Rop')
  end)

  it('runs in a whole step (f.fn{n_calls}) as in separate calls', function()
    local x = tgl.shared(randn({ 8, 3, 4, 4 }), 'x')
    local w0, wb0 = randn({ 3, 3, 1, 1 }) * 0.5, tgl.rand(3, { dtype = 'float64' }) + 0.5
    local w, wb = tgl.shared(w0:clone(), 'w'), tgl.shared(wb0:clone(), 'wb')
    local y, _, v = tgl.batch_norm(tgl.conv2d(x, w))
    local y2 = tgl.batch_norm(y, wb, wb * 0.1)
    local cost = tgl.sum(y2 * y2 * tgl.constant(randn({ 8, 3, 4, 4 }))) + tgl.sum(v)
    local gw, gwb = unpack(tgl.grad(cost, { w, wb }))
    local f = tgl.compile { inputs = {}, outputs = cost, updates = { { w, w - 0.01 * gw }, { wb, wb - 0.01 * gwb } } }
    for _ = 1, 6 do f() end
    local wa, wba = w:get_value():clone(), wb:get_value():clone()
    w:set_value(w0:clone())
    wb:set_value(wb0:clone())
    f()
    f.fn { n_calls = 5 }
    S.assert_close(wa, w:get_value(), 0, 0, 'w')
    S.assert_close(wba, wb:get_value(), 0, 0, 'wb')
    assert.is_true(tgl.max(tgl.abs(wa - w0)):get() > 1e-4)
  end)

  it('gives clear errors for bad inputs', function()
    local x = randn({ 4, 3 })
    local function err(f, pat)
      local ok, e = pcall(f)
      assert.is_false(ok)
      assert(tostring(e):find(pat, 1, true), ('error "%s" lacks "%s"'):format(tostring(e), pat))
      assert(tostring(e):find('batch_norm_spec.lua', 1, true), 'error not at the user line: ' .. tostring(e))
    end
    err(function() tgl.batch_norm(randn({ 4 })) end, 'takes a 2-d (N, C) to 5-d')
    err(function() tgl.batch_norm(x, randn({ 3 })) end, 'weight and bias together')
    err(function() tgl.batch_norm(x, randn({ 4 }), randn({ 4 })) end, 'the weight has 4 entries for 3 channels')
    err(function() tgl.batch_norm(x, { eps = -1 }) end, 'eps must be >= 0')
    err(function() tgl.batch_norm(x, { mean = randn({ 3 }) }) end, 'mean and var together')
    err(function() tgl.batch_norm(x, { mean = randn({ 3 }), var = randn({ 2 }) }) end,
        'the variance has 2 entries for 3 channels')
    err(function() tgl.batch_norm(x, { mean = randn({ 3, 1 }), var = randn({ 3 }) }) end,
        'mean must be a 1-d vector')
    err(function() tgl.batch_norm(randn({ 0, 3 })) end, 'no elements per channel')
    err(function() tgl.batch_norm(x, { epsilon = 1 }) end, "unknown option 'epsilon'")
    -- symbolic: the mismatch is found when the function runs, naming the op
    local X, W, B = tgl.dmatrix(), tgl.dvector(), tgl.dvector()
    local f = tgl.compile { inputs = { X, W, B }, outputs = tgl.batch_norm(X, W, B) }
    err(function() f(x, randn({ 2 }), randn({ 3 })) end, 'the weight has 2 entries for 3 channels')
    -- integers are cast to floatX, as the math functions do
    local yi = tgl.batch_norm(tgl.array({ { 1, 2 }, { 3, 4 } }, 'int64'))
    assert.equals(tgl.config.floatX, yi.dtype)
  end)
end)

-- ---------------------------------------------------------------------------
-- the modules

local fd = S.fd_at   -- central difference of f() in element i of a

describe('nn.BatchNormalization and nn.SpatialBatchNormalization', function()
  S.float64(21)

  it("have Torch7's defaults, fields and text", function()
    local m = nn.BatchNormalization(5)
    assert.equals('nn.BatchNormalization (2D) (5)', tostring(m))
    assert.equals(1e-5, m.eps)
    assert.equals(0.1, m.momentum)
    assert.is_true(m.affine)
    for _, f in ipairs({ 'weight', 'bias', 'gradWeight', 'gradBias', 'running_mean', 'running_var' }) do
      assert.same({ 5 }, m[f]:shape(), f)
    end
    -- reset: weight uniform in [0, 1), bias 0, running mean 0, running var 1
    assert.is_true(tgl.min(m.weight):get() >= 0 and tgl.max(m.weight):get() < 1)
    assert.is_true(tgl.max(m.weight):get() > tgl.min(m.weight):get())
    S.assert_close({ 0, 0, 0, 0, 0 }, m.bias)
    S.assert_close({ 0, 0, 0, 0, 0 }, m.running_mean)
    S.assert_close({ 1, 1, 1, 1, 1 }, m.running_var)
    local s = nn.SpatialBatchNormalization(3, 1e-3, 0.2, false)
    assert.equals('nn.SpatialBatchNormalization (4D) (3)', tostring(s))
    assert.equals(1e-3, s.eps)
    assert.equals(0.2, s.momentum)
    assert.is_false(s.affine)
    assert.is_nil(s.weight)
    assert.is_nil(s.gradBias)
    -- parameters are weight and bias only; the running statistics are state
    local p, g = m:parameters()
    assert.equals(2, #p)
    assert.equals(2, #g)
    assert.equals(m.weight, p[1])
    assert.equals(m.bias, p[2])
    local flat = m:getParameters()
    assert.equals(10, flat:nelement())
    assert.equals(0, #(s:parameters() or {}))
    -- type() converts the running statistics too
    m:float()
    assert.equals('float32', m.running_mean.dtype)
    assert.equals('float32', m.running_var.dtype)
    assert.equals('float32', m.weight.dtype)
    local ok, e = pcall(nn.BatchNormalization, 0)
    assert.is_false(ok)
    assert.truthy(tostring(e):find('nn.BatchNormalization: nOutput must be a positive integer', 1, true))
    ok, e = pcall(nn.BatchNormalization, 3, 1e-5, 0.1, 'yes')
    assert.is_false(ok)
    assert.truthy(tostring(e):find('affine has to be true or false', 1, true))
  end)

  for _, spec in ipairs({ { 'BatchNormalization', { 6, 3 } }, { 'SpatialBatchNormalization', { 3, 2, 3, 2 } } }) do
    local name, shape = spec[1], spec[2]
    local C = shape[2]
    local M = shape[1] * (shape[3] or 1) * (shape[4] or 1)

    it(name .. ': forward in training normalises with the batch statistics (reference), float32 and float64', function()
      for _, dt in ipairs({ 'float64', 'float32' }) do
        for _, affine in ipairs({ true, false }) do
          local m = nn[name](C, 1e-3, 0.1, affine):type(dt)
          if affine then m.bias:copy(randn({ C }, dt)) end
          local x = randn(shape, dt, 2, 1)
          local want = ref_bn(S.flat(x), shape, affine and S.flat(m.weight), affine and S.flat(m.bias), 1e-3)
          local y = m:forward(x)
          assert.equals(dt, y.dtype)
          assert.equals(y, m.output)
          close(want, y, dt == 'float32' and 1e-5 or 1e-12, dt == 'float32' and 1e-5 or 1e-12,
                name .. ' ' .. dt)
        end
      end
    end)

    it(name .. ': gradInput, gradWeight and gradBias match finite differences', function()
      local m = nn[name](C)
      m.bias:copy(randn({ C }))
      local x, go = randn(shape), randn(shape)
      m:zeroGradParameters()
      m:forward(x)
      local gi = m:backward(x, go)
      assert.equals(gi, m.gradInput)
      -- the loss sum(forward(x) * go) at training (the batch statistics)
      local function loss() return tgl.sum(m:forward(x) * go):get() end
      local rm0 = m.running_mean:clone()
      for i = 1, x:nelement() do
        assert.near(fd(loss, x, i), gi:reshape(-1):get(i), 1e-6)
      end
      for i = 1, C do
        assert.near(fd(loss, m.weight, i), m.gradWeight:get(i), 1e-6)
        assert.near(fd(loss, m.bias, i), m.gradBias:get(i), 1e-6)
      end
      -- accGradParameters accumulates with its scale
      m:backward(x, go, 0.5)
      local gw1 = m.gradWeight:clone()
      m:zeroGradParameters()
      m:backward(x, go)
      S.assert_close(m.gradWeight * 1.5, gw1, 1e-12)
      assert.is_not_nil(rm0)
    end)

    it(name .. ': running statistics after three forwards, as worked by hand; evaluate() uses them', function()
      local mom = 0.3
      local m = nn[name](C, 1e-5, mom)
      local rm, rv = {}, {}
      for c = 1, C do rm[c], rv[c] = 0, 1 end
      local xs = {}
      for k = 1, 3 do
        xs[k] = randn(shape, 'float64', k, k - 2)
        m:forward(xs[k])
        local _, bm, bv = ref_bn(S.flat(xs[k]), shape, nil, nil, 0)
        for c = 1, C do
          rm[c] = (1 - mom) * rm[c] + mom * bm[c]
          rv[c] = (1 - mom) * rv[c] + mom * bv[c] * M / (M - 1)   -- the unbiased variance
        end
        close(rm, m.running_mean, 1e-12, 1e-14, name .. ' running_mean after ' .. k)
        close(rv, m.running_var, 1e-12, 1e-14, name .. ' running_var after ' .. k)
      end
      -- backward in training mode leaves them alone (bit for bit)
      local sm, sv = S.flat(m.running_mean), S.flat(m.running_var)
      m:backward(xs[3], randn(shape))
      m:updateGradInput(xs[3], randn(shape))
      m:accGradParameters(xs[3], randn(shape))
      close(sm, m.running_mean, 0, 0, name .. ' running_mean after backward')
      close(sv, m.running_var, 0, 0, name .. ' running_var after backward')
      -- evaluation normalises with them, and changes nothing
      m:evaluate()
      local x = randn(shape)
      local want = ref_bn(S.flat(x), shape, S.flat(m.weight), S.flat(m.bias), 1e-5, rm, rv)
      close(want, m:forward(x), 1e-12, 1e-12, name .. ' evaluate')
      close(sm, m.running_mean, 0, 0, name .. ' running_mean after evaluate')
      -- one sample without the batch axis, in evaluation
      local one = m:forward(x[1])
      assert.same({ unpack(shape, 2) }, one:shape())
      S.assert_close(m:forward(x)[1], one, 1e-14)
      -- its gradients are those of the fixed affine map
      local go = randn(shape)
      local gi = m:backward(x, go)
      local inv = {}
      for c = 1, C do inv[c] = m.weight:get(c) / math.sqrt(rv[c] + 1e-5) end
      local gif, gof = S.flat(gi), S.flat(go)
      local inner = #gof / (shape[1] * C)
      for k = 1, #gof do
        local c = math.floor((k - 1) / inner) % C + 1
        assert.near(gof[k] * inv[c], gif[k], 1e-12)
      end
      -- training again moves them on
      m:training()
      m:forward(x)
      assert.is_true(math.abs(m.running_mean:get(1) - rm[1]) > 0)
    end)

    it(name .. ': a batch of one sample normalises with the running statistics (Torch7)', function()
      local m = nn[name](C)
      m.running_mean:copy(randn({ C }))
      m.running_var:copy(tgl.rand(C) + 0.5)
      local rm, rv = S.flat(m.running_mean), S.flat(m.running_var)
      local s1 = { 1, unpack(shape, 2) }
      local x = randn(s1)
      close(ref_bn(S.flat(x), s1, S.flat(m.weight), S.flat(m.bias), 1e-5, rm, rv), m:forward(x),
            1e-12, 1e-12, name .. ' batch of one')
      close(rm, m.running_mean, 0, 0, name .. ' untouched mean')
      close(rv, m.running_var, 0, 0, name .. ' untouched var')
    end)

    it(name .. ': a wrong channel count or rank is an error naming the module', function()
      local m = nn[name](C + 1)
      local ok, e = pcall(function() m:forward(randn(shape)) end)
      assert.is_false(ok)
      assert.truthy(tostring(e):find(('nn.%s (%dD) (%d): expected %d channels (axis 2 of the input), got %d')
                                       :format(name, #shape, C + 1, C + 1, C), 1, true), tostring(e))
      assert.truthy(tostring(e):find('batch_norm_spec.lua', 1, true), tostring(e))
      local seq = nn.Sequential():add(nn.Identity()):add(nn[name](C + 1))
      ok, e = pcall(function() seq:forward(randn(shape)) end)
      assert.is_false(ok)
      assert.truthy(tostring(e):find('module (2) nn.' .. name, 1, true), tostring(e))
      -- one sample at training: Torch7 takes batches only
      local one = { unpack(shape, 2) }
      ok, e = pcall(function() nn[name](C):forward(randn(one)) end)
      assert.is_false(ok)
      assert.truthy(tostring(e):find(('expected a %d-d input'):format(#shape), 1, true), tostring(e))
      -- the state is unchanged by the failed call
      S.assert_close(tgl.zeros(C + 1), m.running_mean, 0, 0)
    end)
  end

  it('in a model: Linear, BatchNormalization, ReLU learns with SGD; replacing a running array rebuilds', function()
    local model = nn.Sequential():add(nn.Linear(4, 8)):add(nn.BatchNormalization(8)):add(nn.ReLU())
                                 :add(nn.Linear(8, 2))
    local crit = nn.MSECriterion()
    local x = randn({ 16, 4 })
    local t = nn.Linear(4, 2):forward(x):clone()   -- a teacher the model can fit
    local first, last
    for step = 1, 100 do
      model:zeroGradParameters()
      local l = crit:forward(model:forward(x), t)
      model:backward(x, crit:backward(model.output, t))
      model:updateParameters(0.1)
      first = first or l
      last = l
    end
    assert.is_true(last < first * 0.2, ('loss %g -> %g'):format(first, last))
    local bn = model.modules[2]
    assert.is_true(tgl.max(tgl.abs(bn.running_mean)):get() > 0)
    bn.running_mean = tgl.zeros(8)
    bn.running_var = tgl.full({ 8 }, 4.0)
    model:evaluate()
    local h = model.modules[1]:forward(x)
    local want = ref_bn(S.flat(h), { 16, 8 }, S.flat(bn.weight), S.flat(bn.bias), 1e-5,
                        S.flat(bn.running_mean), S.flat(bn.running_var))
    model:forward(x)
    close(want, bn.output, 1e-12, 1e-12, 'the new running arrays')
  end)
end)
