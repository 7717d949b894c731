-- pool_spec.lua — tgl.max_pool2d and tgl.avg_pool2d (issue 21), Torch7's
-- SpatialMaxPooling / SpatialAveragePooling: values against a plain Lua
-- loop over many random configurations (kernel, stride, padding, ceil
-- mode, count_include_pad, 3-d and 4-d inputs, float32 and float64, eager
-- arrays, compiled functions and strided inputs), small cases computed by
-- hand (ties, the windows ceil mode adds or drops), gradients and second
-- derivatives with tgl.verify_grad, Rop against finite differences, and
-- the errors.  Runs on the sim device too (spec/CMakeLists.txt).
tgl = tgl or require 'tgl'
local tgl = tgl

-- ---------------------------------------------------------------------------
-- the reference: Torch7's loops, written out

local function out_size(n, k, d, p, ceil)
  local span = n + 2 * p - k
  local o = (ceil and math.ceil(span / d) or math.floor(span / d)) + 1
  if ceil and (o - 1) * d >= n + p then o = o - 1 end
  return o
end

-- x: flat table in C order of shape {P, H, W} (planes); returns the flat
-- pooled table and {Ho, Wo}.
local function ref_pool(x, P, H, W, o)
  local Ho = out_size(H, o.kh, o.dh, o.ph, o.ceil)
  local Wo = out_size(W, o.kw, o.dw, o.pw, o.ceil)
  local y = {}
  for q = 0, P - 1 do
    for i = 0, Ho - 1 do
      for j = 0, Wo - 1 do
        local hs, ws = i * o.dh - o.ph, j * o.dw - o.pw
        local he, we = math.min(hs + o.kh, H + o.ph), math.min(ws + o.kw, W + o.pw)
        local count = (he - hs) * (we - ws)
        local h0, w0, h1, w1 = math.max(hs, 0), math.max(ws, 0), math.min(he, H), math.min(we, W)
        if o.exclude then count = (h1 - h0) * (w1 - w0) end
        local m, s = -math.huge, 0
        for h = h0, h1 - 1 do
          for w = w0, w1 - 1 do
            local v = x[q * H * W + h * W + w + 1]
            if v > m then m = v end
            s = s + v
          end
        end
        y[#y + 1] = o.avg and s / count or m
      end
    end
  end
  return y, Ho, Wo
end

local function flat(a)
  local t, f = {}, a:contiguous():reshape(-1)
  for k = 1, f:nelement() do t[k] = f:get(k) end
  return t
end

local function assert_close(want, got, tol, what)
  assert(#want == #got, ('%s: %d values, expected %d'):format(what, #got, #want))
  for k = 1, #want do
    if not (math.abs(want[k] - got[k]) <= tol * math.max(1, math.abs(want[k]))) then
      error(('%s: value %d is %.10g, expected %.10g'):format(what, k, got[k], want[k]), 2)
    end
  end
end

local function opts_of(o)
  local t = { kernel = { o.kh, o.kw }, stride = { o.dh, o.dw }, padding = { o.ph, o.pw },
              ceil_mode = o.ceil }
  if o.avg then t.count_include_pad = not o.exclude end
  return t
end

local function describe_cfg(o, shape, dtype)
  return ('%s %s x(%s) kernel %dx%d stride %dx%d pad %dx%d%s%s'):format(
    o.avg and 'avg' or 'max', dtype, table.concat(shape, ','), o.kh, o.kw, o.dh, o.dw, o.ph, o.pw,
    o.ceil and ' ceil' or '', o.exclude and ' exclude_pad' or '')
end

-- A random configuration whose windows fit the input.
local function random_cfg(rng)
  local o = { kh = rng(1, 4), kw = rng(1, 4), avg = rng(0, 1) == 1, ceil = rng(0, 1) == 1 }
  o.dh, o.dw = rng(1, 3), rng(1, 3)
  o.ph, o.pw = rng(0, math.floor(o.kh / 2)), rng(0, math.floor(o.kw / 2))
  o.exclude = o.avg and rng(0, 1) == 1
  local H = rng(math.max(1, o.kh - 2 * o.ph), 9)
  local W = rng(math.max(1, o.kw - 2 * o.pw), 9)
  local shape = rng(0, 1) == 1 and { rng(1, 3), rng(1, 3), H, W } or { rng(1, 3), H, W }
  return o, shape
end

describe('tgl.max_pool2d and tgl.avg_pool2d', function()
  it('match the reference loop over 60 random configurations (eager, compiled, strided)', function()
    local state = 20211
    local function rng(lo, hi)
      state = (state * 16807) % 2147483647  -- exact in doubles
      return lo + state % (hi - lo + 1)
    end
    local checked = 0
    for c = 1, 60 do
      local o, shape = random_cfg(rng)
      local dtype = c % 3 == 0 and 'float32' or 'float64'
      local tol = dtype == 'float32' and 1e-5 or 1e-12
      local n = 1
      for _, s in ipairs(shape) do n = n * s end
      local t = {}
      -- integers in a small range: ties are common, the values exact
      for k = 1, n do t[k] = rng(-20, 20) / 4 end
      local nd = #shape
      local H, W = shape[nd - 1], shape[nd]
      local want, Ho, Wo = ref_pool(t, n / (H * W), H, W, o)
      local what = describe_cfg(o, shape, dtype)
      local fn = o.avg and tgl.avg_pool2d or tgl.max_pool2d
      local x = tgl.array(t, dtype):reshape(shape)
      local y = fn(x, opts_of(o))
      local oshape = y:shape()
      assert.same(Ho, oshape[nd - 1], what)
      assert.same(Wo, oshape[nd], what)
      assert.equals(dtype, y.dtype)
      assert_close(want, flat(y), tol, what .. ' (eager)')
      -- a strided array: the transpose of a contiguous (.., W, H) copy
      local xs = x:transpose(nd - 1, nd):contiguous():transpose(nd - 1, nd)
      assert_close(want, flat(fn(xs, opts_of(o))), tol, what .. ' (eager, strided)')
      -- compiled, from a variable and from a dimshuffled one
      local v = tgl.tensor { dtype = dtype, ndim = nd }
      local perm = {}
      for d = 1, nd do perm[d] = d end
      perm[nd - 1], perm[nd] = nd, nd - 1
      local w = tgl.tensor { dtype = dtype, ndim = nd }
      local f = tgl.compile { inputs = { v, w }, outputs = { fn(v, opts_of(o)), fn(w:dimshuffle(perm), opts_of(o)) } }
      local a, b = f(x, x:transpose(nd - 1, nd):contiguous())
      assert_close(want, flat(a), tol, what .. ' (compiled)')
      assert_close(want, flat(b), tol, what .. ' (compiled, dimshuffled)')
      checked = checked + 1
    end
    assert.equals(60, checked)
    -- tall planes (the kernels walk 16 output rows at a time)
    for _, o in ipairs({ { kh = 3, kw = 2, dh = 1, dw = 1, ph = 1, pw = 0 },
                         { kh = 4, kw = 3, dh = 3, dw = 2, ph = 2, pw = 1, ceil = true, avg = true },
                         { kh = 3, kw = 3, dh = 1, dw = 2, ph = 1, pw = 1, avg = true, exclude = true } }) do
      local t = {}
      for k = 1, 2 * 70 * 9 do t[k] = rng(-50, 50) / 8 end
      local want = ref_pool(t, 2, 70, 9, o)
      local y = (o.avg and tgl.avg_pool2d or tgl.max_pool2d)(tgl.array(t, 'float64'):reshape({ 2, 70, 9 }), opts_of(o))
      assert_close(want, flat(y), 1e-12, describe_cfg(o, { 2, 70, 9 }, 'float64'))
    end
  end)

  it('computes small cases by hand: windows, ties, ceil mode', function()
    local x = tgl.array({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 }, 'float64'):reshape({ 1, 1, 4, 4 })
    assert.same({ 6, 8, 14, 16 }, flat(tgl.max_pool2d(x, { kernel = 2 })))
    assert.same({ 3.5, 5.5, 11.5, 13.5 }, flat(tgl.avg_pool2d(x, { kernel = 2 })))
    -- kernel 3, stride 2, padding 1, ceil: 3x3 windows from (-1,-1); the
    -- last row and column are half padding; count_include_pad divides the
    -- corner window by 9 (3x3 of the padded input) and the right edge by
    -- 6 (3 rows of 2 columns: the window stops at W + padding)
    local y = tgl.avg_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true })
    assert.same({ 1, 1, 3, 3 }, y:shape())
    assert_close({ 14 / 9, 30 / 9, 12 / 6, 57 / 9, 99 / 9, 36 / 6, 27 / 6, 45 / 6, 16 / 4 }, flat(y), 1e-15, 'avg ceil')
    y = tgl.avg_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true, count_include_pad = false })
    assert_close({ 14 / 4, 30 / 6, 12 / 2, 57 / 6, 99 / 9, 36 / 3, 27 / 2, 45 / 3, 16 / 1 }, flat(y), 1e-15, 'avg exclude')
    assert.same({ 6, 8, 8, 14, 16, 16, 14, 16, 16 },
                flat(tgl.max_pool2d(x, { kernel = 3, stride = 2, padding = 1, ceil_mode = true })))
    -- without ceil mode the last row and column go
    assert.same({ 6, 8, 14, 16 }, flat(tgl.max_pool2d(x, { kernel = 3, stride = 2, padding = 1 })))
    -- H = 5, kernel 2, stride 2, padding 1: (5 + 2 - 2) / 2 = 2.5; ceil
    -- would give 4 windows, but the 4th would start at 6 - 1 = 5 = H, in
    -- the right padding, so it is dropped: 3, as without ceil
    local x5 = tgl.arange(1, 25):astype('float64'):reshape({ 1, 5, 5 })
    local m5 = tgl.max_pool2d(x5, { kernel = 2, stride = 2, padding = 1, ceil_mode = true })
    assert.same({ 1, 3, 3 }, m5:shape())
    assert.same({ 1, 3, 5, 11, 13, 15, 21, 23, 25 }, flat(m5))
    -- H = 5, kernel 2, stride 2, no padding: ceil keeps a 1-wide last window
    local c5 = tgl.max_pool2d(x5, { kernel = 2, stride = 2, ceil_mode = true })
    assert.same({ 7, 9, 10, 17, 19, 20, 22, 24, 25 }, flat(c5))
    assert.same({ 7, 9, 17, 19 }, flat(tgl.max_pool2d(x5, { kernel = 2 })))
    -- the windows ceil mode adds are clipped to the input: with no
    -- padding, count_include_pad or not, the last column's windows are
    -- divided by 2 (and the corner's by 1), as Torch7 does
    local want = { 4, 6, 15 / 2, 14, 16, 35 / 2, 43 / 2, 47 / 2, 25 }
    assert.same(want, flat(tgl.avg_pool2d(x5, { kernel = 2, ceil_mode = true, count_include_pad = false })))
    assert.same(want, flat(tgl.avg_pool2d(x5, { kernel = 2, ceil_mode = true })))
    -- kernel {1, 2}, stride {1, 2}: pairs along W
    assert.same({ 2, 4, 6, 8, 10, 12, 14, 16 }, flat(tgl.max_pool2d(x:reshape({ 1, 4, 4 }), { kernel = { 1, 2 } })))
  end)

  it('routes the gradient to the first of tied maxima (Torch7), and sums where windows share one', function()
    local v = tgl.tensor { dtype = 'float64', ndim = 3 }
    local y = tgl.max_pool2d(v, { kernel = 2, stride = 1 })
    local u = tgl.tensor { dtype = 'float64', ndim = 3 }
    local f = tgl.compile { inputs = { v, u }, outputs = { y, tgl.grad(tgl.sum(y * u), v) } }
    -- all equal: each window's first element, (i, j), takes its gradient
    local a, g = f(tgl.full({ 1, 3, 3 }, 2.0, { dtype = 'float64' }),
                   tgl.array({ 1, 10, 100, 1000 }, 'float64'):reshape({ 1, 2, 2 }))
    assert.same({ 2, 2, 2, 2 }, flat(a))
    assert.same({ 1, 10, 0, 100, 1000, 0, 0, 0, 0 }, flat(g))
    -- a tie inside one window: the first in row-major order; the centre 9
    -- is the max of all four windows and gets all four gradients
    a, g = f(tgl.array({ 5, 5, 1, 5, 9, 5, 1, 5, 1 }, 'float64'):reshape({ 1, 3, 3 }),
             tgl.array({ 1, 10, 100, 1000 }, 'float64'):reshape({ 1, 2, 2 }))
    assert.same({ 9, 9, 9, 9 }, flat(a))
    assert.same({ 0, 0, 0, 0, 1111, 0, 0, 0, 0 }, flat(g))
    -- avg pool's gradient: gout / count over each window (here 1/4 each)
    local ya = tgl.avg_pool2d(v, { kernel = 2, stride = 1 })
    local fa = tgl.compile { inputs = { v, u }, outputs = tgl.grad(tgl.sum(ya * u), v) }
    assert_close({ 0.25, 2.75, 2.5, 25.25, 277.75, 252.5, 25, 275, 250 },
                 flat(fa(tgl.zeros(1, 3, 3, { dtype = 'float64' }),
                         tgl.array({ 1, 10, 100, 1000 }, 'float64'):reshape({ 1, 2, 2 }))), 1e-15, 'avg grad')
  end)

  it('2x2 stride 2 max pool (the kernel\'s fast path) equals the general loops: values, ties, NaN, odd sizes, gradients', function()
    -- the fast path takes contiguous rows; a dimshuffled input (column
    -- stride != 1) runs the general loops, which the tests above check
    local state = 4242
    local function rng(lo, hi)
      state = (state * 16807) % 2147483647
      return lo + state % (hi - lo + 1)
    end
    local function same(a, b, what)
      assert(#a == #b, what .. ': sizes differ')
      for k = 1, #a do
        local ok = a[k] == b[k] or (a[k] ~= a[k] and b[k] ~= b[k])
        if not ok then error(('%s: value %d is %.10g, the general loops give %.10g'):format(what, k, a[k], b[k]), 2) end
      end
    end
    for c = 1, 40 do
      local dtype = c % 2 == 0 and 'float32' or 'float64'
      local H, W, P, N = rng(2, 9), rng(2, 9), rng(1, 3), rng(1, 2)
      local ceil = rng(0, 3) == 0
      local o = { kernel = 2, stride = 2, ceil_mode = ceil }
      local t = {}
      for k = 1, N * P * H * W do
        -- small integers: ties in most windows; a few NaN
        t[k] = rng(0, 30) == 0 and 0 / 0 or rng(-3, 3)
      end
      local what = ('%s x(%d,%d,%d,%d)%s'):format(dtype, N, P, H, W, ceil and ' ceil' or '')
      local x = tgl.array(t, dtype):reshape({ N, P, H, W })
      local v, w = tgl.tensor { dtype = dtype, ndim = 4 }, tgl.tensor { dtype = dtype, ndim = 4 }
      local u = tgl.tensor { dtype = dtype, ndim = 4 }
      local yv = tgl.max_pool2d(v, o)
      local yw = tgl.max_pool2d(w:dimshuffle { 1, 2, 4, 3 }, o)
      local f = tgl.compile { inputs = { v, w, u },
                              outputs = { yv, yw, tgl.grad(tgl.sum(yv * u), v), tgl.grad(tgl.sum(yw * u), w) } }
      local Ho, Wo = out_size(H, 2, 2, 0, ceil), out_size(W, 2, 2, 0, ceil)
      local ut = {}
      for k = 1, N * P * Ho * Wo do ut[k] = k end
      local a, b, ga, gb = f(x, x:transpose(3, 4):contiguous(), tgl.array(ut, dtype):reshape({ N, P, Ho, Wo }))
      same(flat(a), flat(b), what .. ' (values)')
      same(flat(ga), flat(gb:transpose(3, 4)), what .. ' (gradient)')
    end
  end)

  it('passes NaN through max pool', function()
    local x = tgl.array({ 1, 0 / 0, 3, 4 }, 'float64'):reshape({ 1, 2, 2 })
    local y = tgl.max_pool2d(x, { kernel = 2 }):get(1, 1, 1)
    assert.is_true(y ~= y)
  end)

  it('has gradients and second derivatives (verify_grad)', function()
    tgl.manual_seed(7)
    local cfgs = {
      { kernel = 3, stride = 2, padding = 1, ceil_mode = true },
      { kernel = { 2, 3 }, stride = { 1, 2 }, padding = { 1, 0 } },
      { kernel = 2 },
    }
    for _, o in ipairs(cfgs) do
      -- randn: ties have probability 0
      for _, shape in ipairs({ { 2, 3, 5, 6 }, { 3, 4, 5 } }) do
        assert(tgl.verify_grad(function(a) return tgl.max_pool2d(a, o) end, { tgl.randn(shape) }) < 1e-6)
        assert(tgl.verify_grad(function(a) return tgl.avg_pool2d(a, o) end, { tgl.randn(shape) }) < 1e-6)
        local oe = { count_include_pad = false }
        for k, v in pairs(o) do oe[k] = v end
        assert(tgl.verify_grad(function(a) return tgl.avg_pool2d(a, oe) end, { tgl.randn(shape) }) < 1e-6)
      end
    end
    -- a tall plane: the kernels walk 16 output rows at a time, and
    -- overlapping windows straddle those blocks
    for _, name in ipairs({ 'max_pool2d', 'avg_pool2d' }) do
      assert(tgl.verify_grad(function(a) return tgl[name](a, { kernel = 3, stride = 1, padding = 1 }) end,
                             { tgl.randn(1, 2, 40, 5) }) < 1e-6, name)
    end
    -- second derivatives: the gradient of sum(pool(x)^3) is 3 pool(x)^2
    -- routed back, whose own gradient goes through the grad ops' pullbacks
    for _, name in ipairs({ 'max_pool2d', 'avg_pool2d' }) do
      assert(tgl.verify_grad(function(a)
        local y = tgl[name](a, { kernel = 3, stride = 2, padding = 1, ceil_mode = true })
        return tgl.grad(tgl.sum(y * y * y), a)
      end, { tgl.randn(2, 2, 5, 6) }) < 1e-6, name)
    end
  end)

  it('has Rop: the tangent at the argmax (max) and the pooled tangent (avg)', function()
    tgl.manual_seed(11)
    local eps = 1e-6
    for _, name in ipairs({ 'max_pool2d', 'avg_pool2d' }) do
      for _, shape in ipairs({ { 2, 3, 5, 6 }, { 3, 5, 4 } }) do
        local o = { kernel = 3, stride = 2, padding = 1, ceil_mode = true }
        local x = tgl.tensor { dtype = 'float64', ndim = #shape }
        local v = tgl.tensor { dtype = 'float64', ndim = #shape }
        local y = tgl[name](x, o)
        local f = tgl.compile { inputs = { x, v }, outputs = { y, tgl.Rop(y, x, v) } }
        local xa, va = tgl.randn(shape, { dtype = 'float64' }), tgl.randn(shape, { dtype = 'float64' })
        local _, jv = f(xa, va)
        local yp = f(xa + va * eps, va)
        local ym = f(xa - va * eps, va)
        local fd = flat((yp - ym) / (2 * eps))
        assert_close(fd, flat(jv), 1e-6, name .. ' Rop')
      end
    end
  end)

  it('runs in float32', function()
    local x = tgl.array({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, 'float32'):reshape({ 1, 3, 3 })
    local y = tgl.avg_pool2d(x, { kernel = 2, stride = 1 })
    assert.equals('float32', y.dtype)
    assert.same({ 3, 4, 6, 7 }, flat(y))
    local v = tgl.tensor { dtype = 'float32', ndim = 3 }
    local g = tgl.compile { inputs = { v }, outputs = tgl.grad(tgl.sum(tgl.max_pool2d(v, { kernel = 2, stride = 1 })), v) }
    assert.same({ 0, 0, 0, 0, 1, 1, 0, 1, 1 }, flat(g(x)))
  end)

  it('gives clear errors', function()
    local x = tgl.zeros(1, 1, 4, 4, { dtype = 'float64' })
    local function err(f, ...)
      local ok, msg = pcall(f, ...)
      assert.is_false(ok)
      return tostring(msg)
    end
    assert.matches('max_pool2d: padding 2x2 must be at most half the kernel 2x2',
                   err(tgl.max_pool2d, x, { kernel = 2, padding = 2 }), 1, true)
    assert.matches('avg_pool2d: padding 0x2 must be at most half the kernel 3x3',
                   err(tgl.avg_pool2d, x, { kernel = 3, padding = { 0, 2 } }), 1, true)
    assert.matches('the 4x4 input (padded by 0x0) is smaller than the 5x5 kernel',
                   err(tgl.max_pool2d, x, { kernel = 5 }), 1, true)
    assert.matches('needs a 4-d (N, C, H, W) or 3-d (C, H, W) input, got 2-d',
                   err(tgl.max_pool2d, tgl.zeros(4, 4), { kernel = 2 }), 1, true)
    assert.matches("needs the option 'kernel'", err(tgl.max_pool2d, x, {}), 1, true)
    assert.matches("needs the option 'kernel'", err(tgl.max_pool2d, x), 1, true)
    assert.matches("unknown option 'strid' (did you mean 'stride'?)",
                   err(tgl.max_pool2d, x, { kernel = 2, strid = 2 }), 1, true)
    assert.matches("unknown option 'count_include_pad'",
                   err(tgl.max_pool2d, x, { kernel = 2, count_include_pad = false }), 1, true)
    assert.matches("option 'stride' must be an integer or {h, w}, got a table of 3 values",
                   err(tgl.max_pool2d, x, { kernel = 2, stride = { 1, 2, 3 } }), 1, true)
    assert.matches('stride must be positive, got 0x1',
                   err(tgl.max_pool2d, x, { kernel = 2, stride = { 0, 1 } }), 1, true)
    assert.matches('kernel must be positive', err(tgl.avg_pool2d, x, { kernel = 0 }), 1, true)
    -- integers are cast to floatX first, as softmax's
    local xi = tgl.array({ 1, 2, 3, 4 }, 'int64'):reshape({ 1, 2, 2 })
    assert.same({ 4 }, flat(tgl.max_pool2d(xi, { kernel = 2 })))
    -- symbolic: the parameters at build time, the shapes at run time
    -- (naming the line that built the node)
    local v = tgl.tensor { dtype = 'float64', ndim = 4 }
    local msg = err(function() return tgl.max_pool2d(v, { kernel = 2, padding = 3 }) end)
    assert.matches('tgl.max_pool2d: max_pool2d: padding 3x3 must be at most half the kernel 2x2', msg, 1, true)
    local f = tgl.compile { inputs = { v }, outputs = tgl.max_pool2d(v, { kernel = 3 }) }
    msg = err(f, tgl.zeros(1, 1, 2, 5, { dtype = 'float64' }))
    assert.matches('the 2x5 input (padded by 0x0) is smaller than the 3x3 kernel', msg, 1, true)
    assert.matches('built at [^ ]*pool_spec.lua:%d+', msg)
    -- the function still runs afterwards
    assert.same({ 1, 1, 1, 1 }, f(tgl.zeros(1, 1, 3, 3, { dtype = 'float64' })):shape())
  end)
end)
