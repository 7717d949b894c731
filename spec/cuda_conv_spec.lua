-- cuda_conv_spec.lua — the CUDA conv family (src/cuda/k_conv.c,
-- src/cuda/kernels/conv.cu): conv2d, its gradient ops, and max/avg
-- pooling with their pullbacks and max pool's gather, on device 'cuda'
-- against the CPU over random configurations (batch 0, 1 and several,
-- groups, kernel sizes, strides, padding, dilation, ceil mode,
-- count_include_pad, 3-d and 4-d pooling inputs, float32 and float64,
-- ties and NaNs for max pool, transposed / reversed / step-2 views as
-- inputs): eager ops, compiled gradients (tgl.grad) and tangents
-- (tgl.Rop, which builds the gather), and one training step of an
-- nn.SpatialConvolution + nn.SpatialMaxPooling model on the device
-- against the same step on the CPU.  float64 to 1e-12 and float32 to 1e-5
-- of the largest value; the pooling values and argmax routing exactly.
-- Without a device (tgl.cuda.is_available() false) it prints why and
-- runs nothing; TGL_CUDA_EMU=1 runs it on the emulated GPU.
tgl = tgl or require 'tgl'
local tgl = tgl

local available = tgl.cuda and tgl.cuda.is_available and tgl.cuda.is_available()
if not available then
  print('cuda_conv_spec: skipped: tgl.cuda.is_available() is false (no CUDA device or no CUDA '
        .. 'build; TGL_CUDA_EMU=1 runs it on the emulated GPU)')
  describe('the CUDA conv family', function()
    it('needs a CUDA device', function() pending('tgl.cuda.is_available() is false') end)
  end)
  return
end

-- ---------------------------------------------------------------------------
-- helpers

local on = dofile("spec/support.lua").on_device

local function numel(s)
  local n = 1
  for _, v in ipairs(s) do n = n * v end
  return n
end

local function flat(a)
  a = a:cpu():contiguous()
  local t, f = {}, a:reshape(a:nelement())
  for k = 1, f:nelement() do t[k] = f:get(k) end
  return t
end

-- Random values of shape: uniform in [-1, 1), or small integers (ties).
local function rnd(shape, dtype, ties)
  local t = {}
  for k = 1, numel(shape) do t[k] = ties and math.random(0, 3) or 2 * math.random() - 1 end
  -- on the host whatever tgl.config.device says (the emu: run sets cuda)
  return tgl.array(t, 'float64'):reshape(shape):astype(dtype):cpu()
end

-- The same values as a host array and as a device array, both laid out as
-- `mode` says: 1 contiguous, 2 the last two axes transposed, 3 the last
-- axis reversed (negative stride), 4 every other element of a wider array.
local function pair(shape, dtype, mode, ties)
  local nd = #shape
  if numel(shape) == 0 then mode = 1 end
  local function view(a)
    if mode == 2 then return a:transpose(nd - 1, nd) end
    local idx = {}
    for d = 1, nd - 1 do idx[d] = {} end
    idx[nd] = mode == 3 and { -1, 1, -1 } or { 1, -1, 2 }
    return a[idx]
  end
  if mode == 1 then
    local a = rnd(shape, dtype, ties)
    return a, a:cuda()
  end
  local base = {}
  for d = 1, nd do base[d] = shape[d] end
  if mode == 2 then base[nd - 1], base[nd] = shape[nd], shape[nd - 1] end
  if mode == 4 then base[nd] = 2 * shape[nd] - 1 end
  local b = rnd(base, dtype, ties)
  local h, d = view(b), view(b:cuda())
  assert.same(shape, h:shape())
  assert.same(shape, d:shape())
  assert.equal('cuda', d.device)
  return h, d
end

-- got (a device array) equals want (a host array): shape, dtype, and values
-- to tol times the largest |want| (at least 1); NaN where want has NaN.
local function assert_near(want, got, what, exact)
  assert.equal('cuda', got.device, what .. ': the result is not on the device')
  assert.same(want:shape(), got:shape(), what)
  assert.equal(want.dtype, got.dtype, what)
  local w, g = flat(want), flat(got)
  local scale = 1
  for k = 1, #w do
    if w[k] == w[k] and math.abs(w[k]) > scale then scale = math.abs(w[k]) end
  end
  local tol = exact and 0 or (want.dtype == 'float64' and 1e-12 or 1e-5) * scale
  for k = 1, #w do
    local bad
    if w[k] ~= w[k] then bad = g[k] == g[k] else bad = not (math.abs(w[k] - g[k]) <= tol) end
    if bad then
      error(('%s: element %d is %.17g, the CPU gives %.17g (tolerance %.3g)')
              :format(what, k, g[k], w[k], tol), 2)
    end
  end
end

local DTYPES = { 'float32', 'float64' }

-- A random convolution whose output is not empty.
local function random_conv()
  local o = {
    N = ({ 0, 1, 1, 2, 3, 5 })[math.random(6)], G = math.random(2), Cg = math.random(3),
    Og = math.random(3), kh = math.random(3), kw = math.random(3), sh = math.random(3),
    sw = math.random(3), ph = math.random(0, 2), pw = math.random(0, 2), dh = math.random(2),
    dw = math.random(2), H = math.random(8), W = math.random(8),
  }
  if math.random(4) == 1 then -- the 1x1 path (no unrolling)
    o.kh, o.kw, o.sh, o.sw, o.ph, o.pw = 1, 1, 1, 1, 0, 0
  end
  o.H = math.max(o.H, o.dh * (o.kh - 1) + 1 - 2 * o.ph)
  o.W = math.max(o.W, o.dw * (o.kw - 1) + 1 - 2 * o.pw)
  o.opts = { stride = { o.sh, o.sw }, padding = { o.ph, o.pw }, dilation = { o.dh, o.dw },
             groups = o.G }
  o.xs = { o.N, o.G * o.Cg, o.H, o.W }
  o.ws = { o.G * o.Og, o.Cg, o.kh, o.kw }
  o.what = ('x(%s) w(%s) stride %dx%d pad %dx%d dil %dx%d groups %d'):format(
    table.concat(o.xs, ','), table.concat(o.ws, ','), o.sh, o.sw, o.ph, o.pw, o.dh, o.dw, o.G)
  return o
end

-- A random pooling whose windows fit the input (Torch7's pad <= k/2).
local function random_pool()
  local o = { kh = math.random(4), kw = math.random(4), dh = math.random(3), dw = math.random(3),
              ceil = math.random(2) == 1, exclude = math.random(2) == 1,
              ties = math.random(2) == 1 }
  o.ph, o.pw = math.random(0, math.floor(o.kh / 2)), math.random(0, math.floor(o.kw / 2))
  local H = math.max(math.random(9), o.kh - 2 * o.ph)
  local W = math.max(math.random(9), o.kw - 2 * o.pw)
  if math.random(3) == 1 then
    o.xs = { math.random(3), H, W }
  else
    o.xs = { ({ 0, 1, 2, 3 })[math.random(4)], math.random(3), H, W }
  end
  o.max = { kernel = { o.kh, o.kw }, stride = { o.dh, o.dw }, padding = { o.ph, o.pw },
            ceil_mode = o.ceil }
  o.avg = { kernel = { o.kh, o.kw }, stride = { o.dh, o.dw }, padding = { o.ph, o.pw },
            ceil_mode = o.ceil, count_include_pad = not o.exclude }
  o.what = ('x(%s) kernel %dx%d stride %dx%d pad %dx%d%s%s%s'):format(
    table.concat(o.xs, ','), o.kh, o.kw, o.dh, o.dw, o.ph, o.pw, o.ceil and ' ceil' or '',
    o.exclude and ' exclude_pad' or '', o.ties and ' ties' or '')
  return o
end

local function var(dtype, ndim, name) return tgl.tensor { dtype = dtype, ndim = ndim, name = name } end

-- f compiled on device from build(vars) (a table of outputs).
local function compile_on(device, dtype, ndims, build)
  return on(device, function()
    local vs = {}
    for i, nd in ipairs(ndims) do vs[i] = var(dtype, nd, 'v' .. i) end
    return tgl.compile { inputs = vs, outputs = build(unpack(vs)) }
  end)
end

-- ---------------------------------------------------------------------------

describe('the CUDA conv family', function()
  it('conv2d: eager on the device equals the CPU over random configurations and layouts', function()
    math.randomseed(2201)
    local n = 0
    for _ = 1, 60 do
      local o = random_conv()
      for _, dt in ipairs(DTYPES) do
        local xh, xd = pair(o.xs, dt, math.random(4))
        local wh, wd = pair(o.ws, dt, math.random(4))
        local want = tgl.conv2d(xh, wh, o.opts)
        assert_near(want, tgl.conv2d(xd, wd, o.opts), 'conv2d ' .. dt .. ' ' .. o.what)
        n = n + 1
      end
    end
    assert.equal(120, n)
  end)

  it('conv2d: gradients (grad_input, grad_weight) and their own gradients compiled on the device equal the CPU', function()
    math.randomseed(2202)
    for case = 1, 16 do
      local o = random_conv()
      local dt = DTYPES[case % 2 + 1]
      local function build(x, w, r)
        local y = tgl.conv2d(x, w, o.opts)
        local gx, gw = unpack(tgl.grad(tgl.sum(y * r), { x, w }))
        -- second order: the pullback of grad_input and grad_weight
        local gg = tgl.grad(tgl.sum(gx * gx) + tgl.sum(gw * gw), { r })[1]
        return { y, gx, gw, gg }
      end
      local fc = compile_on('cpu', dt, { 4, 4, 4 }, build)
      local fd = compile_on('cuda', dt, { 4, 4, 4 }, build)
      local xh, xd = pair(o.xs, dt, math.random(4))
      local wh, wd = pair(o.ws, dt, math.random(4))
      local y = tgl.conv2d(xh, wh, o.opts)
      local rh, rd = pair(y:shape(), dt, math.random(4))
      local want = { fc(xh, wh, rh) }
      local got = on('cuda', function() return { fd(xd, wd, rd) } end)
      for i, name in ipairs { 'y', 'gx', 'gw', 'd(|gx|^2 + |gw|^2)/dr' } do
        local g = got[i]
        if g.device ~= 'cuda' then g = g:cuda() end -- outputs may come back to the host
        assert_near(want[i], g, ('%s %s %s'):format(name, dt, o.what))
      end
    end
  end)

  it('pooling: max and avg eager on the device equal the CPU (ties, NaNs, ceil, padding, layouts)', function()
    math.randomseed(2203)
    local n = 0
    for _ = 1, 80 do
      local o = random_pool()
      for _, dt in ipairs(DTYPES) do
        local xh, xd = pair(o.xs, dt, math.random(4), o.ties)
        if math.random(4) == 1 and numel(o.xs) > 0 then -- NaNs, set on both copies
          local t = flat(xh)
          for _ = 1, 3 do t[math.random(#t)] = 0 / 0 end
          xh = tgl.array(t, 'float64'):reshape(o.xs):astype(dt):cpu()
          xd = xh:cuda()
        end
        assert_near(tgl.max_pool2d(xh, o.max), tgl.max_pool2d(xd, o.max),
                    'max_pool2d ' .. dt .. ' ' .. o.what, true)
        assert_near(tgl.avg_pool2d(xh, o.avg), tgl.avg_pool2d(xd, o.avg),
                    'avg_pool2d ' .. dt .. ' ' .. o.what)
        n = n + 1
      end
    end
    assert.equal(160, n)
  end)

  it('pooling: gradients (max routing with ties, avg spread) and max pool tangents (the gather) compiled on the device equal the CPU', function()
    math.randomseed(2204)
    for case = 1, 24 do
      local o = random_pool()
      local dt = DTYPES[case % 2 + 1]
      local nd = #o.xs
      local function build(x, r, v)
        local ym, ya = tgl.max_pool2d(x, o.max), tgl.avg_pool2d(x, o.avg)
        local gm = tgl.grad(tgl.sum(ym * r), x)
        local ga = tgl.grad(tgl.sum(ya * r), x)
        local tm = tgl.Rop(ym, x, v) -- max_pool2d_gather
        return { gm, ga, tm }
      end
      local fc = compile_on('cpu', dt, { nd, nd, nd }, build)
      local fd = compile_on('cuda', dt, { nd, nd, nd }, build)
      local xh, xd = pair(o.xs, dt, math.random(4), o.ties)
      local ys = tgl.max_pool2d(xh, o.max):shape()
      local rh, rd = pair(ys, dt, math.random(4))
      local vh, vd = pair(o.xs, dt, math.random(4))
      local want = { fc(xh, rh, vh) }
      local got = on('cuda', function() return { fd(xd, rd, vd) } end)
      for i, name in ipairs { 'max_pool2d_grad', 'avg_pool2d_grad', 'max_pool2d_gather' } do
        local g = got[i]
        if g.device ~= 'cuda' then g = g:cuda() end
        assert_near(want[i], g, ('%s %s %s'):format(name, dt, o.what), i ~= 2)
      end
    end
  end)

  it('nn: one training step of SpatialConvolution + SpatialMaxPooling on the device equals the CPU', function()
    local nn = require 'nn'
    for _, dt in ipairs(DTYPES) do
      local function model()
        local m = nn.Sequential()
          :add(nn.SpatialConvolution(3, 6, 3, 3, 1, 1, 1, 1))
          :add(nn.ReLU())
          :add(nn.SpatialMaxPooling(2, 2, 2, 2):ceil())
          :add(nn.SpatialConvolution(6, 4, 3, 3, 2, 2))
          :add(nn.View(16):setNumInputDims(3))
          :add(nn.Linear(16, 5))
          :add(nn.LogSoftMax())
        return dt == 'float64' and m:double() or m:float()
      end
      math.randomseed(2205)
      local x = rnd({ 4, 3, 9, 9 }, dt)
      local y = tgl.array({ 1, 3, 5, 2 }, 'int64'):cpu()
      -- the same initial parameters in both models
      local mc, md = model(), model()
      local pc, pd = mc:getParameters(), md:getParameters()
      pd:copy(pc)
      local function step(device, m)
        return on(device, function()
          local crit = nn.ClassNLLCriterion()
          local xin = device == 'cuda' and x:cuda() or x
          local out = m:forward(xin)
          local loss = crit:forward(out, y)
          m:zeroGradParameters()
          m:backward(xin, crit:backward(out, y))
          m:updateParameters(0.1)
          return out:cpu(), loss, m:getParameters():cpu()
        end)
      end
      local out_c, loss_c, p_c = step('cpu', mc)
      local out_d, loss_d, p_d = step('cuda', md)
      local tol = dt == 'float64' and 1e-12 or 1e-5
      assert_near(out_c, out_d:cuda(), 'nn forward ' .. dt)
      assert.is_true(math.abs(loss_c - loss_d) <= tol * math.max(1, math.abs(loss_c)),
                     ('loss %s: %.17g, the CPU gives %.17g'):format(dt, loss_d, loss_c))
      assert_near(p_c, p_d:cuda(), 'nn parameters after one step ' .. dt)
    end
  end)

  it('keeps the CPU errors: a conv2d with mismatched channels is a clear error on the device', function()
    local x, w = rnd({ 1, 4, 5, 5 }, 'float32'):cuda(), rnd({ 2, 3, 3, 3 }, 'float32'):cuda()
    local ok, err = pcall(tgl.conv2d, x, w)
    assert.is_false(ok)
    assert.matches('conv2d', tostring(err))
    assert.matches('channels', tostring(err))
  end)
end)
