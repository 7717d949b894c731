-- conv_spec.lua — tgl.conv2d (engine/ops/conv.c, src/cpu/kernels/conv.c):
-- values against a plain Lua loop over many stride/padding/dilation/group
-- combinations, eager and compiled, float64 (1e-12) and float32 (1e-5),
-- on both kernel paths (direct loops for small problems, im2col + gemm
-- for larger ones) and on strided views; hand-computed cases; gradients
-- (verify_grad), Rop against finite differences of J·v, second
-- derivatives; errors; and random configurations.  Also runs on the sim
-- device (spec/CMakeLists.txt, TGL_SIM_SPECS).
tgl = tgl or require 'tgl'
local tgl = tgl

-- ---------------------------------------------------------------------------
-- helpers

local function numel(s)
  local n = 1
  for _, v in ipairs(s) do n = n * v end
  return n
end

local function flat(a)
  local t, f = {}, a:reshape(-1)
  for k = 1, f:nelement() do t[k] = f:get(k) end
  return t
end

-- Random values (Lua's generator, seeded per case) as an array of shape.
local function rnd(shape, dtype)
  local t = {}
  for k = 1, numel(shape) do t[k] = 2 * math.random() - 1 end
  return tgl.array(t, dtype or 'float64'):reshape(shape), t
end

-- The plain loop: y[n][o][i][j] (1-based flat, C order) from flat x, w.
local function ref_conv(x, xs, w, ws, o)
  local N, C, H, W = xs[1], xs[2], xs[3], xs[4]
  local O, Cg, kH, kW = ws[1], ws[2], ws[3], ws[4]
  local sh, sw, ph, pw, dh, dw, G = o.sh, o.sw, o.ph, o.pw, o.dh, o.dw, o.G
  local Ho = math.floor((H + 2 * ph - dh * (kH - 1) - 1) / sh) + 1
  local Wo = math.floor((W + 2 * pw - dw * (kW - 1) - 1) / sw) + 1
  local Og = O / G
  local y = {}
  for n = 0, N - 1 do
    for oc = 0, O - 1 do
      local g = math.floor(oc / Og)
      for i = 0, Ho - 1 do
        for j = 0, Wo - 1 do
          local s = 0
          for c = 0, Cg - 1 do
            for a = 0, kH - 1 do
              for b = 0, kW - 1 do
                local ih, iw = i * sh - ph + a * dh, j * sw - pw + b * dw
                if ih >= 0 and ih < H and iw >= 0 and iw < W then
                  s = s + x[((n * C + g * Cg + c) * H + ih) * W + iw + 1]
                        * w[((oc * Cg + c) * kH + a) * kW + b + 1]
                end
              end
            end
          end
          y[#y + 1] = s
        end
      end
    end
  end
  return y, { N, O, Ho, Wo }
end

-- The gradients of sum(conv2d(x, w) * r) by the plain loop: gx (flat, x's
-- shape) and gw (flat, w's shape), from flat x, w and r (y's shape).
local function ref_grads(x, xs, w, ws, r, o)
  local N, C, H, W = xs[1], xs[2], xs[3], xs[4]
  local O, Cg, kH, kW = ws[1], ws[2], ws[3], ws[4]
  local sh, sw, ph, pw, dh, dw, G = o.sh, o.sw, o.ph, o.pw, o.dh, o.dw, o.G
  local Ho = math.floor((H + 2 * ph - dh * (kH - 1) - 1) / sh) + 1
  local Wo = math.floor((W + 2 * pw - dw * (kW - 1) - 1) / sw) + 1
  local Og = O / G
  local gx, gw = {}, {}
  for k = 1, numel(xs) do gx[k] = 0 end
  for k = 1, numel(ws) do gw[k] = 0 end
  for n = 0, N - 1 do
    for oc = 0, O - 1 do
      local g = math.floor(oc / Og)
      for i = 0, Ho - 1 do
        for j = 0, Wo - 1 do
          local rv = r[((n * O + oc) * Ho + i) * Wo + j + 1]
          for c = 0, Cg - 1 do
            for a = 0, kH - 1 do
              for b = 0, kW - 1 do
                local ih, iw = i * sh - ph + a * dh, j * sw - pw + b * dw
                if ih >= 0 and ih < H and iw >= 0 and iw < W then
                  local xk = ((n * C + g * Cg + c) * H + ih) * W + iw + 1
                  local wk = ((oc * Cg + c) * kH + a) * kW + b + 1
                  gx[xk] = gx[xk] + rv * w[wk]
                  gw[wk] = gw[wk] + rv * x[xk]
                end
              end
            end
          end
        end
      end
    end
  end
  return gx, gw
end

local function opts_of(o)
  return { stride = { o.sh, o.sw }, padding = { o.ph, o.pw }, dilation = { o.dh, o.dw }, groups = o.G }
end

local function assert_close(want, got, tol, what)
  assert(#want == #got, ('%s: %d elements, expected %d'):format(what, #got, #want))
  for k = 1, #want do
    local e = math.abs(want[k] - got[k]) / math.max(1, math.abs(want[k]))
    if not (e <= tol) then
      error(('%s: element %d is %.15g, expected %.15g (error %.3g > %.3g)')
              :format(what, k, got[k], want[k], e, tol), 2)
    end
  end
end

local function var4(dtype, name) return tgl.tensor { dtype = dtype, ndim = 4, name = name } end

-- Checks conv2d(x, w, o) eagerly and compiled against the Lua loop.
local function check_case(xs, ws, o, dtype, what)
  local tol = dtype == 'float64' and 1e-12 or 1e-5
  local xa, xt = rnd(xs, 'float64')
  local wa, wt = rnd(ws, 'float64')
  xa, wa = xa:astype(dtype), wa:astype(dtype)
  -- the reference reads the values the op reads (rounded to float32 there)
  xt, wt = flat(xa), flat(wa)
  local want, shape = ref_conv(xt, xs, wt, ws, o)
  local eager = tgl.conv2d(xa, wa, opts_of(o))
  assert.same(shape, eager:shape(), what)
  assert.equal(dtype, eager.dtype)
  assert_close(want, flat(eager), tol, what .. ' (eager)')
  local x, w = var4(dtype, 'x'), var4(dtype, 'w')
  local f = tgl.compile { inputs = { x, w }, outputs = tgl.conv2d(x, w, opts_of(o)) }
  local got = f(xa, wa)
  assert.same(shape, got:shape(), what)
  assert_close(want, flat(got), tol, what .. ' (compiled)')
end

-- Checks both gradients of sum(conv2d(x, w) * r), compiled, against the
-- plain loop with `threads` threads (the im2col path shares the batch out
-- over them).
local function check_grads(xs, ws, o, dtype, threads, what)
  -- float32: gw sums thousands of products (N Ho Wo) in float32
  local tol = dtype == 'float64' and 1e-12 or 1e-4
  local xa, wa = rnd(xs, dtype), rnd(ws, dtype)
  local x, w, r = var4(dtype, 'x'), var4(dtype, 'w'), var4(dtype, 'r')
  local y = tgl.conv2d(x, w, opts_of(o))
  local g = tgl.grad(tgl.sum(y * r), { x, w })
  local f = tgl.compile { inputs = { x, w, r }, outputs = g }
  local _, ys = ref_conv(flat(xa), xs, flat(wa), ws, o)
  local ra = rnd(ys, dtype)
  local wantx, wantw = ref_grads(flat(xa), xs, flat(wa), ws, flat(ra), o)
  local saved = tgl.config.threads
  tgl.config.threads = threads
  local ok, gx, gw = pcall(f, xa, wa, ra)
  tgl.config.threads = saved
  assert(ok, gx)
  assert_close(wantx, flat(gx), tol, what .. ' (gx)')
  assert_close(wantw, flat(gw), tol, what .. ' (gw)')
end

local function desc(xs, ws, o)
  return ('x (%s), w (%s), stride %dx%d, padding %dx%d, dilation %dx%d, %d group(s)'):format(
    table.concat(xs, ','), table.concat(ws, ','), o.sh, o.sw, o.ph, o.pw, o.dh, o.dw, o.G)
end

local function O(sh, sw, ph, pw, dh, dw, G)
  return { sh = sh, sw = sw, ph = ph, pw = pw, dh = dh, dw = dw, G = G }
end

-- Asserts f raises 'tgl.conv2d: ...' or the op's message naming this file's
-- line, with each needle.
local function raises(f, ...)
  local ok, err = pcall(f)
  assert(not ok, 'expected an error')
  err = tostring(err)
  assert.matches('conv2d', err)
  assert.matches('conv_spec%.lua:%d+', err)
  for _, needle in ipairs({ ... }) do assert.matches(needle:gsub('%p', '%%%0'), err) end
  return err
end

-- ---------------------------------------------------------------------------

describe('tgl.conv2d', function()
  it('computes hand-computed cases (a cross-correlation: the kernel is not flipped)', function()
    local x = tgl.array({ 1, 2, 3, 4, 5, 6, 7, 8, 9 }, 'float64'):reshape { 1, 1, 3, 3 }
    -- [[1, 0], [0, -1]]: x[i][j] - x[i+1][j+1] = -4 everywhere (flipped it would be +4)
    local w = tgl.array({ 1, 0, 0, -1 }, 'float64'):reshape { 1, 1, 2, 2 }
    assert.same({ -4, -4, -4, -4 }, flat(tgl.conv2d(x, w)))
    local w2 = tgl.array({ 1, 2, 3, 4 }, 'float64'):reshape { 1, 1, 2, 2 }
    -- top-left: 1*1 + 2*2 + 4*3 + 5*4 = 37
    assert.same({ 37, 47, 67, 77 }, flat(tgl.conv2d(x, w2)))
    local ones = tgl.ones(1, 1, 2, 2, { dtype = 'float64' })
    -- padding 1, stride 2: windows {1}, {2,3}, {4,7}, {5,6,8,9}
    local y = tgl.conv2d(x, ones, { padding = 1, stride = 2 })
    assert.same({ 1, 1, 2, 2 }, y:shape())
    assert.same({ 1, 5, 11, 28 }, flat(y))
    -- dilation 2: the four corners, 1 + 3 + 7 + 9
    assert.same({ 20 }, flat(tgl.conv2d(x, ones, { dilation = 2 })))
    -- stride {h, w}: every window, then only the first row of windows
    assert.same({ 12, 16, 24, 28 }, flat(tgl.conv2d(x, ones, { stride = { 1, 1 } })))
    assert.same({ 12, 16 }, flat(tgl.conv2d(x, ones, { stride = { 2, 1 } })))
    -- two groups of one channel: channel 1 times 2, channel 2 times 3
    local x2 = tgl.array({ 1, 2, 3, 4, 10, 20, 30, 40 }, 'float64'):reshape { 1, 2, 2, 2 }
    local wg = tgl.array({ 2, 3 }, 'float64'):reshape { 2, 1, 1, 1 }
    assert.same({ 2, 4, 6, 8, 30, 60, 90, 120 }, flat(tgl.conv2d(x2, wg, { groups = 2 })))
    -- one group: both output channels sum both input channels
    local w1 = tgl.array({ 1, 1, 1, -1 }, 'float64'):reshape { 2, 2, 1, 1 }
    assert.same({ 11, 22, 33, 44, -9, -18, -27, -36 }, flat(tgl.conv2d(x2, w1)))
    -- float32 with float64 computes in float64; integers become floatX
    local y64 = tgl.conv2d(x:astype('float32'), w)
    assert.equal('float64', y64.dtype)
    assert.same({ -4, -4, -4, -4 }, flat(y64))
    local yi = tgl.conv2d(x:astype('int32'), w:astype('int64'))
    assert.equal(tgl.config.floatX, yi.dtype)
    assert.same({ -4, -4, -4, -4 }, flat(yi))
  end)

  it('matches the plain loop on fixed configurations, float64 and float32, eager and compiled', function()
    math.randomseed(21)
    -- the kernel's path (src/cpu/kernels/conv.c, use_gemm): direct below
    -- 256 multiply-adds per image and group, im2col + gemm from there
    local cases = {
      { { 1, 1, 5, 5 }, { 1, 1, 3, 3 }, O(1, 1, 0, 0, 1, 1, 1) },     -- direct (81)
      { { 2, 3, 7, 6 }, { 4, 3, 3, 2 }, O(2, 1, 1, 0, 1, 1, 1) },     -- im2col (1440)
      { { 2, 4, 8, 8 }, { 6, 2, 3, 3 }, O(1, 2, 2, 1, 2, 1, 2) },     -- im2col (1728)
      { { 1, 6, 9, 7 }, { 6, 1, 3, 3 }, O(1, 1, 1, 1, 1, 1, 6) },     -- depthwise, im2col (567)
      { { 3, 2, 6, 6 }, { 5, 2, 1, 1 }, O(1, 1, 0, 0, 1, 1, 1) },     -- 1x1: x is the matrix (360)
      { { 2, 2, 6, 6 }, { 4, 2, 1, 1 }, O(2, 2, 1, 1, 1, 1, 1) },     -- 1x1 strided, padded, direct (128)
      { { 2, 3, 9, 9 }, { 6, 3, 1, 1 }, O(2, 2, 1, 1, 1, 1, 1) },     -- 1x1 strided, padded, im2col (450)
      { { 2, 8, 10, 9 }, { 8, 4, 3, 3 }, O(1, 1, 1, 1, 1, 1, 2) },    -- im2col
      { { 2, 4, 12, 11 }, { 16, 4, 5, 3 }, O(2, 3, 2, 1, 1, 2, 1) },  -- im2col, everything
      { { 1, 3, 4, 4 }, { 2, 3, 4, 4 }, O(1, 1, 0, 0, 1, 1, 1) },     -- kernel = image: 1x1 out, direct
      { { 2, 2, 3, 5 }, { 2, 1, 2, 2 }, O(3, 3, 2, 2, 3, 2, 2) },     -- padding beyond the kernel, direct
    }
    for _, c in ipairs(cases) do
      for _, dt in ipairs { 'float64', 'float32' } do
        check_case(c[1], c[2], c[3], dt, desc(c[1], c[2], c[3]) .. ' ' .. dt)
      end
    end
  end)

  it('reads strided views (a permuted input and weight)', function()
    math.randomseed(5)
    -- small: the direct loops (72 multiply-adds per group); big: im2col
    for _, big in ipairs { false, true } do
      local xs = big and { 2, 3, 6, 7 } or { 2, 1, 5, 4 }
      local ws = big and { 8, 3, 3, 2 } or { 1, 1, 2, 2 }
      local xp = rnd { xs[1], xs[2], xs[4], xs[3] }
      local wp = rnd { ws[1], ws[2], ws[4], ws[3] }
      local x, w = xp:transpose(3, 4), wp:transpose(3, 4)
      assert.is_false(x:is_contiguous())
      local o = O(1, 2, 1, 1, 1, 1, 1)
      local want = ref_conv(flat(x), xs, flat(w), ws, o)
      assert_close(want, flat(tgl.conv2d(x, w, opts_of(o))), 1e-12, 'views')
    end
  end)

  it('has the gradients of finite differences wrt x and w (verify_grad, float64)', function()
    math.randomseed(3)
    local cases = {
      { { 2, 2, 5, 5 }, { 3, 2, 3, 3 }, O(1, 1, 0, 0, 1, 1, 1) },   -- im2col
      { { 2, 4, 6, 7 }, { 4, 2, 3, 2 }, O(2, 1, 1, 2, 1, 2, 2) },   -- im2col
      { { 1, 4, 10, 9 }, { 8, 4, 3, 3 }, O(2, 2, 1, 1, 1, 1, 1) },  -- im2col
      { { 2, 3, 5, 5 }, { 6, 1, 2, 2 }, O(1, 1, 0, 0, 2, 2, 3) },   -- direct
      { { 2, 1, 4, 5 }, { 2, 1, 2, 3 }, O(2, 1, 1, 0, 1, 1, 1) },   -- direct, strided
    }
    for _, c in ipairs(cases) do
      local o = opts_of(c[3])
      local err = tgl.verify_grad(function(x, w) return tgl.tanh(tgl.conv2d(x, w, o)) end,
                                  { (rnd(c[1])), (rnd(c[2])) })
      assert.is_true(err < 1e-6, desc(c[1], c[2], c[3]) .. ': ' .. tostring(err))
    end
  end)

  it('has a Rop equal to finite differences of J·v', function()
    math.randomseed(4)
    local xs, ws, o = { 2, 4, 6, 7 }, { 4, 2, 3, 2 }, O(2, 1, 1, 0, 1, 2, 2)
    local xa, wa, vx, vw = rnd(xs), rnd(ws), rnd(xs), rnd(ws)
    local x, w, tx, tw = var4('float64'), var4('float64'), var4('float64'), var4('float64')
    local y = tgl.conv2d(x, w, opts_of(o))
    local f = tgl.compile { inputs = { x, w, tx, tw }, outputs = tgl.Rop(y, { x, w }, { tx, tw }) }
    local jv = flat(f(xa, wa, vx, vw))
    local eps = 1e-6
    local yp = flat(tgl.conv2d(xa + vx * eps, wa + vw * eps, opts_of(o)))
    local ym = flat(tgl.conv2d(xa - vx * eps, wa - vw * eps, opts_of(o)))
    local fd = {}
    for k = 1, #yp do fd[k] = (yp[k] - ym[k]) / (2 * eps) end
    assert_close(fd, jv, 1e-7, 'Rop')
  end)

  it('has second derivatives (the pullback ops differentiate too)', function()
    math.randomseed(6)
    local xs, ws = { 2, 4, 5, 6 }, { 4, 2, 3, 2 }
    local o = opts_of(O(2, 1, 1, 0, 1, 1, 2))
    local C = rnd(ws)
    -- d/dx and d/dw of <d cost/dw, C>: runs conv2d_grad_weight's pullback
    local err = tgl.verify_grad(function(x, w)
      local cost = tgl.sum(tgl.sqr(tgl.conv2d(x, w, o)))
      return tgl.sum(tgl.grad(cost, w) * C)
    end, { (rnd(xs)), (rnd(ws)) })
    assert.is_true(err < 1e-6, tostring(err))
    local D = rnd(xs)
    err = tgl.verify_grad(function(x, w)
      local cost = tgl.sum(tgl.sqr(tgl.conv2d(x, w, o)))
      return tgl.sum(tgl.grad(cost, x) * D)
    end, { (rnd(xs)), (rnd(ws)) })
    assert.is_true(err < 1e-6, tostring(err))
  end)

  it('raises clear errors naming conv2d and the line', function()
    local x = tgl.zeros(1, 4, 5, 5, { dtype = 'float64' })
    raises(function() tgl.conv2d(tgl.zeros(4, 5, 5), tgl.zeros(1, 4, 3, 3)) end, '4-d', 'got 3-d and 4-d')
    raises(function() tgl.conv2d(x, tgl.zeros(2, 4, 3)) end, 'got 4-d and 3-d')
    raises(function() tgl.conv2d(x, tgl.zeros(3, 2, 3, 3, { dtype = 'float64' }), { groups = 2 }) end,
           'groups 2 must divide')
    raises(function() tgl.conv2d(tgl.zeros(1, 3, 5, 5, { dtype = 'float64' }),
                                 tgl.zeros(2, 1, 3, 3, { dtype = 'float64' }), { groups = 2 }) end,
           'groups 2 must divide the input\'s channels 3')
    raises(function() tgl.conv2d(x, tgl.zeros(2, 3, 3, 3, { dtype = 'float64' })) end,
           'the input has 4 channels')
    raises(function() tgl.conv2d(x, tgl.zeros(2, 4, 6, 3, { dtype = 'float64' })) end,
           'the output would be empty')
    raises(function() tgl.conv2d(x, tgl.zeros(2, 4, 3, 3, { dtype = 'float64' }), { dilation = 3 }) end,
           'the output would be empty')
    raises(function() tgl.conv2d(x, x, { stride = 0 }) end, 'stride must be an integer >= 1')
    raises(function() tgl.conv2d(x, x, { padding = { 1, -1 } }) end, 'padding must be')
    raises(function() tgl.conv2d(x, x, { groups = 1.5 }) end, 'groups must be a positive integer')
    raises(function() tgl.conv2d(x, x, { strides = 2 }) end, "unknown option 'strides'")
    -- compiled: the shape error comes when the function runs, naming where conv2d was built
    local xv, wv = var4('float64'), var4('float64')
    local f = tgl.compile { inputs = { xv, wv }, outputs = tgl.conv2d(xv, wv, { groups = 2 }) }
    local err = raises(function() f(x, tgl.zeros(2, 3, 3, 3, { dtype = 'float64' })) end, 'the input has 4 channels')
    assert.matches('built at', err)
    -- and the state is as it was: the same function runs on good inputs
    assert.same({ 1, 2, 3, 3 }, f(x, tgl.zeros(2, 2, 3, 3, { dtype = 'float64' })):shape())
  end)

  it('has gradients equal to the plain loop over thread counts', function()
    math.randomseed(22)
    local cases = {
      -- im2col, 7 images shared over the threads (a batch of at least 2^20
      -- multiply-adds): 7; 3 | 4; 2 | 2 | 3; one image a task with 8
      -- threads (7 tasks); gw summed over the tasks
      { { 7, 4, 30, 30 }, { 3, 4, 5, 5 }, O(1, 1, 0, 0, 1, 1, 1) },
      { { 6, 4, 60, 60 }, { 8, 2, 3, 3 }, O(1, 2, 1, 2, 2, 1, 2) },  -- groups, strided, padded, dilated
      { { 3, 16, 32, 32 }, { 24, 16, 1, 1 }, O(1, 1, 0, 0, 1, 1, 1) }, -- 1x1: x is the matrix
      { { 5, 4, 9, 9 }, { 6, 2, 3, 3 }, O(2, 1, 1, 2, 1, 2, 2) },   -- small: on the calling thread
      { { 3, 2, 5, 5 }, { 2, 2, 2, 2 }, O(1, 1, 0, 0, 1, 1, 1) },   -- direct (128)
    }
    for _, c in ipairs(cases) do
      for _, th in ipairs { 1, 2, 3, 8 } do
        for _, dt in ipairs { 'float64', 'float32' } do
          check_grads(c[1], c[2], c[3], dt, th, ('%s %s, %d threads'):format(desc(c[1], c[2], c[3]), dt, th))
        end
      end
    end
  end)

  it('has gradients equal to the plain loop on random configurations and threads (property)', function()
    local cases = tonumber(os.getenv('TGL_PROP_CASES') or '') or 40
    for seed = 1, cases do
      math.randomseed(2000 + seed)
      local R = math.random
      local G = R(1, 3)
      local Cg, Og = R(1, 3), R(1, 4)
      local o = O(R(1, 3), R(1, 3), R(0, 2), R(0, 2), R(1, 2), R(1, 2), G)
      local kH, kW = R(1, 4), R(1, 4)
      local H = math.max(R(1, 9), o.dh * (kH - 1) + 1 - 2 * o.ph)
      local W = math.max(R(1, 9), o.dw * (kW - 1) + 1 - 2 * o.pw)
      local xs, ws = { R(1, 6), G * Cg, H, W }, { G * Og, Cg, kH, kW }
      local dt = seed % 3 == 0 and 'float32' or 'float64'
      local th = R(1, 4) -- (problems this small run on the calling thread whatever the count)
      check_grads(xs, ws, o, dt, th, ('seed %d: %s %s, %d threads'):format(seed, desc(xs, ws, o), dt, th))
    end
  end)

  it('matches the plain loop on random configurations (property)', function()
    local cases = tonumber(os.getenv('TGL_PROP_CASES') or '') or 40
    for seed = 1, cases do
      math.randomseed(1000 + seed)
      local R = math.random
      local G = R(1, 3)
      local Cg, Og = R(1, 3), R(1, 4)
      local o = O(R(1, 3), R(1, 3), R(0, 2), R(0, 2), R(1, 2), R(1, 2), G)
      local kH, kW = R(1, 4), R(1, 4)
      -- an image big enough for at least one output
      local H = math.max(R(1, 9), o.dh * (kH - 1) + 1 - 2 * o.ph)
      local W = math.max(R(1, 9), o.dw * (kW - 1) + 1 - 2 * o.pw)
      local xs, ws = { R(1, 3), G * Cg, H, W }, { G * Og, Cg, kH, kW }
      local dt = seed % 3 == 0 and 'float32' or 'float64'
      check_case(xs, ws, o, dt, ('seed %d: %s %s'):format(seed, desc(xs, ws, o), dt))
    end
  end)
end)
