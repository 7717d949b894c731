-- cuda_nnet_spec.lua — the neural-network family's CUDA kernels
-- (src/cuda/k_nnet.c, src/cuda/kernels/nnet.cu) against the CPU's:
-- softmax and log_softmax along every axis, softmax_crossentropy and its
-- gradient (the rewrite of categorical_crossentropy(softmax(x), y)),
-- class_xent and its deltas (tgl.lm.class_xent and its gradients), and
-- batch normalisation (statistics, normalise, the training gradient), in
-- float32 and float64, over shapes with one row, many rows, rows longer
-- than a block (> 1024) and no rows, with contiguous, transposed,
-- reversed (negative stride) and stepped inputs; compiled functions on
-- device 'cuda' and eager calls on device arrays; the gradients through
-- tgl.grad; nn.LogSoftMax + ClassNLLCriterion and nn.BatchNormalization
-- training steps; bad labels and indices as the CPU's errors.
-- Tolerance: float64 1e-12, float32 1e-5, relative to the larger of the
-- element and the array's largest magnitude (sums of opposite signs leave
-- small elements whose own relative error means nothing).  NaN and
-- infinities must match exactly.
-- Without a device (tgl.cuda.is_available() false) it says why and runs
-- nothing; TGL_CUDA_EMU=1 runs it on the emulated GPU.
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'
local lm = require 'tgl.lm'

if not (tgl.cuda.built() and tgl.cuda.is_available()) then
  local why = not tgl.cuda.built() and 'tgl was built without CUDA (-DTGL_CUDA=ON)'
      or 'no CUDA device (tgl.cuda.is_available() is false; TGL_CUDA_EMU=1 runs the emulator)'
  print('cuda_nnet_spec: skipped: ' .. why)
  describe('the nnet family on cuda', function()
    it('is skipped: ' .. why, function() pending(why) end)
  end)
  return
end

local TOL = { float32 = 1e-5, float64 = 1e-12 }

-- The values of a host array as a Lua table of numbers (float64).
local function values(a)
  a = a:cpu():astype('float64'):reshape(-1)
  local p, t = ffi.cast('double *', a:data()), {}
  for i = 1, a:nelement() do t[i] = p[i - 1] end
  return t
end

local function close(want, got, dtype, what)
  assert.are.same(want:shape(), got:shape(), what .. ': shapes')
  local w, g = values(want), values(got)
  local scale, tol = 0, TOL[dtype] or dtype
  for i = 1, #w do
    if w[i] == w[i] and math.abs(w[i]) < math.huge then scale = math.max(scale, math.abs(w[i])) end
  end
  for i = 1, #w do
    local a, b = w[i], g[i]
    local ok
    if a ~= a or b ~= b then ok = (a ~= a) and (b ~= b)
    elseif math.abs(a) == math.huge or math.abs(b) == math.huge then ok = a == b
    else ok = math.abs(a - b) <= tol * math.max(math.abs(a), scale) end
    if not ok then
      error(('%s: element %d: cpu %.17g, cuda %.17g (tolerance %g)'):format(what, i, a, b, tol), 2)
    end
  end
end

-- Compiles outs(ins) on the cpu and on cuda, runs both on the host arrays
-- args, and compares every output.
local function both(ins, outs, args, dtype, what)
  local was = tgl.config.device
  local res = {}
  for _, dev in ipairs({ 'cpu', 'cuda' }) do
    tgl.config.device = dev
    local ok, err = pcall(function()
      local f = tgl.compile { inputs = ins, outputs = outs }
      res[dev] = { f(unpack(args)) }
    end)
    tgl.config.device = was
    if not ok then error(what .. ' on ' .. dev .. ': ' .. tostring(err), 0) end
  end
  for k = 1, #res.cpu do close(res.cpu[k], res.cuda[k], dtype, what .. ' output ' .. k) end
  return res
end

local function randn(shape, dtype, scale)
  local a = tgl.randn(unpack(shape))
  if scale then a = a * scale end
  return a:astype(dtype)
end

local function tensor(dtype, nd, name)
  return tgl.tensor { dtype = dtype, ndim = nd, name = name }
end

-- Input layouts: the array to pass for a wanted shape and the view of the
-- symbolic input that has that shape.
local LAYOUTS = {
  contiguous = function(shape, dtype) return randn(shape, dtype, 3), function(v) return v end end,
  transposed = function(shape, dtype)
    if #shape ~= 2 then return nil end
    return randn({ shape[2], shape[1] }, dtype, 3), function(v) return v:T() end
  end,
  reversed = function(shape, dtype)
    if shape[1] == 0 then return nil end
    return randn(shape, dtype, 3), function(v) return v[{ { -1, 1, -1 } }] end
  end,
  stepped = function(shape, dtype)
    if #shape ~= 2 or shape[2] == 0 then return nil end
    return randn({ shape[1], 2 * shape[2] }, dtype, 3), function(v) return v[{ {}, { 1, -1, 2 } }] end
  end,
}
local LAYOUT_NAMES = { 'contiguous', 'transposed', 'reversed', 'stepped' }

local SHAPES = { { 1, 7 }, { 13, 5 }, { 3, 1500 }, { 0, 5 }, { 2000, 3 }, { 40, 300 }, { 4, 5, 6 } }

describe('softmax and log_softmax on cuda', function()
  tgl.manual_seed(11)
  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it(dtype .. ': every shape, axis and layout, values and gradients as the cpu', function()
      local n = 0
      for _, shape in ipairs(SHAPES) do
        for _, lay in ipairs(LAYOUT_NAMES) do
          local xa, view = LAYOUTS[lay](shape, dtype)
          if xa then
            for axis = 1, #shape do
              for _, op in ipairs({ 'softmax', 'log_softmax' }) do
                local x = tensor(dtype, #shape, 'x')
                local y = tgl[op](view(x), axis)
                local w = tgl.constant(randn(shape, dtype))
                local g = tgl.grad(tgl.sum(y * w), x)
                both({ x }, { y, g }, { xa }, dtype,
                     ('%s %s %s axis %d %s'):format(op, dtype, table.concat(shape, 'x'), axis, lay))
                n = n + 1
              end
            end
          end
        end
      end
      assert.is_true(n > 80, n .. ' cases')
    end)
  end

  it('keeps the cpu meaning of extreme rows: +-1000, +inf, -inf, all -inf, NaN', function()
    local inf, nan = math.huge, 0 / 0
    local rows = { { 1000, -1000, 999 }, { inf, 1, inf }, { -inf, 2, 3 }, { -inf, -inf, -inf }, { 1, nan, 2 } }
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local xa = tgl.array(rows, dtype)
      for _, op in ipairs({ 'softmax', 'log_softmax' }) do
        local x = tensor(dtype, 2, 'x')
        both({ x }, { tgl[op](x, 2) }, { xa }, dtype, op .. ' extremes ' .. dtype)
      end
    end
  end)

  it('runs eagerly on device arrays, leaving the result on the device', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      local xa = randn({ 6, 1100 }, dtype, 4)
      for _, op in ipairs({ 'softmax', 'log_softmax' }) do
        local r = tgl[op](xa:cuda(), 2)
        assert.are.equal('cuda', r.device)
        close(tgl[op](xa, 2), r:cpu(), dtype, op .. ' eager ' .. dtype)
        r = tgl[op](xa:T():cuda(), 1)
        close(tgl[op](xa:T(), 1), r:cpu(), dtype, op .. ' eager transposed ' .. dtype)
      end
    end
  end)
end)

describe('softmax_crossentropy and its gradient on cuda', function()
  tgl.manual_seed(12)
  local function xent_case(dtype, ltype, rows, cols, lay)
    local xa, view = LAYOUTS[lay]({ rows, cols }, dtype)
    if not xa then return false end
    local labels = {}
    for i = 1, rows do labels[i] = math.random(1, cols) end
    local ya = tgl.array(labels, ltype)
    local x, y = tensor(dtype, 2, 'x'), tgl.tensor { dtype = ltype, ndim = 1, name = 'y' }
    local loss = tgl.categorical_crossentropy(tgl.softmax(view(x)), y)
    local wts = tgl.constant(randn({ rows }, dtype))
    local gx = tgl.grad(tgl.sum(loss * wts), x)
    both({ x, y }, { loss, gx }, { xa, ya }, dtype,
         ('xent %s %s %dx%d %s'):format(dtype, ltype, rows, cols, lay))
    return true
  end

  it('is what the rewrite makes of categorical_crossentropy(softmax(x), y)', function()
    local x, y = tgl.dmatrix('x'), tgl.lvector('y')
    local loss = tgl.categorical_crossentropy(tgl.softmax(x), y)
    local was = tgl.config.device
    tgl.config.device = 'cuda'
    local ok, f = pcall(tgl.compile, { inputs = { x, y }, outputs = { loss, tgl.grad(tgl.sum(loss), x) } })
    tgl.config.device = was
    assert(ok, f)
    local text = tgl.debugprint(f)
    assert.truthy(text:find('softmax_crossentropy_dx', 1, true), text)
  end)

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it(dtype .. ': losses and gradients as the cpu over shapes, label dtypes and layouts', function()
      local n = 0
      for _, sh in ipairs({ { 1, 7 }, { 60, 10 }, { 5, 1500 }, { 0, 4 }, { 1500, 3 }, { 33, 257 } }) do
        for _, ltype in ipairs({ 'int32', 'int64' }) do
          for _, lay in ipairs(LAYOUT_NAMES) do
            if xent_case(dtype, ltype, sh[1], sh[2], lay) then n = n + 1 end
          end
        end
      end
      assert.is_true(n >= 40, n .. ' cases')
    end)
  end

  it('gives the cpu error for a bad label on the device, naming the first one', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      for _, ltype in ipairs({ 'int32', 'int64' }) do
        local x, y = tensor(dtype, 2, 'x'), tgl.tensor { dtype = ltype, ndim = 1, name = 'y' }
        local loss = tgl.categorical_crossentropy(tgl.softmax(x), y)
        local was = tgl.config.device
        tgl.config.device = 'cuda'
        local f = tgl.compile { inputs = { x, y }, outputs = { loss } }
        local g = tgl.compile { inputs = { x, y }, outputs = { tgl.grad(tgl.sum(loss), x) } }
        tgl.config.device = was
        local xa = randn({ 4, 3 }, dtype)
        for _, fn in ipairs({ f, g }) do
          local ok, err = pcall(fn, xa, tgl.array({ 1, 3, 0, 5 }, ltype))
          assert.is_false(ok)
          assert.matches('label 0 at position 3 is not in 1..3', tostring(err), 1, true)
          ok, err = pcall(fn, xa, tgl.array({ 1, 4, 2, 2 }, ltype))
          assert.is_false(ok)
          assert.matches('label 4 at position 2 is not in 1..3', tostring(err), 1, true)
          -- and it still runs right after
          assert.is_true(pcall(fn, xa, tgl.array({ 1, 3, 2, 2 }, ltype)))
        end
      end
    end
  end)
end)

describe('class_xent and its deltas on cuda', function()
  tgl.manual_seed(13)
  -- T rows of h, C classes, row t owning nr[t] word rows (the target one
  -- of them), the word rows' owners shuffled.
  local function problem(T, C)
    local owner, cls, tgt = {}, {}, {}
    for t = 1, T do
      for _ = 1, math.random(1, 6) do owner[#owner + 1] = t end
    end
    for i = #owner, 2, -1 do
      local j = math.random(1, i)
      owner[i], owner[j] = owner[j], owner[i]
    end
    for t = 1, T do
      cls[t] = math.random(1, C)
      local mine = {}
      for j, o in ipairs(owner) do if o == t then mine[#mine + 1] = j end end
      tgt[t] = mine[math.random(1, #mine)]
    end
    return cls, tgt, owner
  end

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it(dtype .. ': losses and the gradients in h, Wc and Ws as the cpu', function()
      for _, sz in ipairs({ { 1, 1, 5 }, { 7, 4, 16 }, { 40, 9, 70 }, { 3, 2, 1100 } }) do
        local T, C, H = sz[1], sz[2], sz[3]
        local cls, tgt, owner = problem(T, C)
        local K = #owner
        for _, itype in ipairs({ 'int32', 'int64' }) do
          for _, trans in ipairs({ false, true }) do
            local ha = trans and randn({ H, T }, dtype) or randn({ T, H }, dtype)
            local wca, wsa = randn({ C, H }, dtype), randn({ K, H }, dtype)
            local h, Wc, Ws = tensor(dtype, 2, 'h'), tensor(dtype, 2, 'Wc'), tensor(dtype, 2, 'Ws')
            local it_ = function(n) return tgl.tensor { dtype = itype, ndim = 1, name = n } end
            local c, t, o = it_('c'), it_('t'), it_('o')
            local hv = trans and h:T() or h
            local loss = lm.class_xent(hv, Wc, Ws, c, t, o)
            local wts = tgl.constant(randn({ T }, dtype))
            local gs = tgl.grad(tgl.sum(loss * wts), { h, Wc, Ws })
            both({ h, Wc, Ws, c, t, o }, { loss, gs[1], gs[2], gs[3] },
                 { ha, wca, wsa, tgl.array(cls, itype), tgl.array(tgt, itype), tgl.array(owner, itype) },
                 dtype, ('class_xent %s %s T%d C%d H%d%s'):format(dtype, itype, T, C, H,
                                                               trans and ' transposed h' or ''))
          end
        end
      end
    end)
  end

  it('reads strided index vectors and gives the cpu errors for bad ones', function()
    local dtype = 'float64'
    local h, Wc, Ws = tgl.dmatrix('h'), tgl.dmatrix('Wc'), tgl.dmatrix('Ws')
    local c, t, o = tgl.lvector('c'), tgl.lvector('t'), tgl.lvector('o')
    -- every other element of doubled index vectors
    local loss = lm.class_xent(h, Wc, Ws, c[{ { 1, -1, 2 } }], t[{ { 1, -1, 2 } }], o[{ { -1, 1, -1 } }])
    local ha, wca, wsa = randn({ 3, 4 }, dtype), randn({ 3, 4 }, dtype), randn({ 7, 4 }, dtype)
    local ca = tgl.array({ 2, 9, 1, 9, 3 }, 'int64')
    local ta = tgl.array({ 3, 9, 4, 9, 7 }, 'int64')
    local oa = tgl.array({ 3, 3, 3, 2, 1, 1, 1 }, 'int64')   -- reversed: 1 1 1 2 3 3 3
    both({ h, Wc, Ws, c, t, o }, { loss }, { ha, wca, wsa, ca, ta, oa }, dtype, 'class_xent strided indices')
    local was = tgl.config.device
    tgl.config.device = 'cuda'
    local f = tgl.compile { inputs = { h, Wc, Ws, c, t, o }, outputs = lm.class_xent(h, Wc, Ws, c, t, o) }
    tgl.config.device = was
    local cs, ts, os_ = tgl.array({ 2, 1, 3 }, 'int64'), tgl.array({ 3, 4, 7 }, 'int64'),
        tgl.array({ 1, 1, 1, 2, 3, 3, 3 }, 'int64')
    local ok, msg = pcall(f, ha, wca, wsa, tgl.array({ 2, 1, 4 }, 'int64'), ts, os_)
    assert(not ok and msg:find('class 4 of row 3 is not in 1..3', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, cs, tgl.array({ 3, 3, 7 }, 'int64'), os_)
    assert(not ok and msg:find('target 3 of row 2 is a word row owned by row 1', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, cs, tgl.array({ 3, 4, 8 }, 'int64'), os_)
    assert(not ok and msg:find('target 8 of row 3 is not in 1..7', 1, true), msg)
    ok, msg = pcall(f, ha, wca, wsa, cs, ts, tgl.array({ 1, 1, 1, 2, 3, 3, 4 }, 'int64'))
    assert(not ok and msg:find('owner 4 of word row 7 is not in 1..3', 1, true), msg)
    assert.is_true(pcall(f, ha, wca, wsa, cs, ts, os_))
  end)
end)

describe('batch normalisation on cuda', function()
  tgl.manual_seed(14)
  local SH = { { 1, 3 }, { 60, 10 }, { 7, 40 }, { 3, 2, 5, 4 }, { 4, 3, 7 }, { 2, 3, 2, 3, 2 }, { 2, 5, 33, 33 } }

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it(dtype .. ': statistics, training and evaluation forms and their gradients as the cpu', function()
      for _, shape in ipairs(SH) do
        local C = shape[2]
        for _, lay in ipairs({ 'contiguous', 'transposed', 'reversed' }) do
          local xa, view = LAYOUTS[lay](shape, dtype)
          if xa then
            xa = xa + 2
            local x = tensor(dtype, #shape, 'x')
            local w, b = tensor(dtype, 1, 'w'), tensor(dtype, 1, 'b')
            local wa, ba = randn({ C }, dtype), randn({ C }, dtype)
            local xv = view(x)
            local m, v = tgl.batch_norm_stats(xv)
            local y = tgl.batch_norm(xv, w, b, { eps = 1e-3 })
            local y0 = tgl.batch_norm(xv)
            local ye = tgl.batch_norm(xv, w, b, { mean = w * 0.5, var = b * b + 0.5, eps = 1e-4 })
            local wy = tgl.constant(randn(shape, dtype))
            local cost = tgl.sum(y * wy) + tgl.sum(y0 * wy * 0.5) + tgl.sum(ye * wy)
            local gs = tgl.grad(cost, { x, w, b })
            both({ x, w, b }, { m, v, y, y0, ye, gs[1], gs[2], gs[3] }, { xa, wa, ba }, dtype,
                 ('batch_norm %s %s %s'):format(dtype, table.concat(shape, 'x'), lay))
          end
        end
      end
    end)
  end

  it('keeps the statistics of a channel far from 0 (shifted sums), float32', function()
    local xa = (tgl.randn(500, 4) * 0.01 + 1e4):astype('float32')
    local x = tgl.fmatrix('x')
    local m, v = tgl.batch_norm_stats(x)
    local res = both({ x }, { m, v }, { xa }, 'float32', 'batch_norm_stats far from 0')
    -- the variance is 1e-4 to float32's relative precision, not noise
    for _, s in ipairs(values(res.cuda[2])) do assert.is_true(s > 0.5e-4 and s < 2e-4, s) end
  end)

  it('runs eagerly on device arrays', function()
    local xa = randn({ 8, 3, 4, 4 }, 'float64')
    local m, v = tgl.batch_norm_stats(xa:cuda())
    assert.are.equal('cuda', m.device)
    local mc, vc = tgl.batch_norm_stats(xa)
    close(mc, m:cpu(), 'float64', 'eager mean')
    close(vc, v:cpu(), 'float64', 'eager var')
  end)
end)

describe('nn training steps on cuda', function()
  local nn = require 'nn'

  local function step(device, build, x, y, crit)
    local was = tgl.config.device
    tgl.config.device = device
    local ok, res = pcall(function()
      tgl.manual_seed(5)
      local model = build()
      local out = model:forward(x)
      local loss = crit:forward(out, y)
      model:zeroGradParameters()
      model:backward(x, crit:backward(out, y))
      model:updateParameters(0.1)
      local p = model:parameters()
      local vals = { out:cpu(), tgl.array(loss) }
      for _, a in ipairs(p) do vals[#vals + 1] = a:cpu() end
      -- and the next forward with the updated parameters
      vals[#vals + 1] = model:forward(x):cpu()
      return vals
    end)
    tgl.config.device = was
    if not ok then error(device .. ': ' .. tostring(res), 0) end
    return res
  end

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it(dtype .. ': Linear + LogSoftMax + ClassNLLCriterion, one step as the cpu', function()
      tgl.manual_seed(6)
      local x = randn({ 32, 20 }, dtype)
      local labels = {}
      for i = 1, 32 do labels[i] = math.random(1, 10) end
      local y = tgl.array(labels, 'int64')
      local build = function()
        return nn.Sequential():add(nn.Linear(20, 10)):add(nn.LogSoftMax()):type(dtype)
      end
      local a = step('cpu', build, x, y, nn.ClassNLLCriterion())
      local b = step('cuda', build, x, y, nn.ClassNLLCriterion())
      for k = 1, #a do close(a[k], b[k], dtype, 'LogSoftMax step value ' .. k) end
    end)

    it(dtype .. ': BatchNormalization and SpatialBatchNormalization, one step as the cpu', function()
      tgl.manual_seed(7)
      for _, case in ipairs({ { 'BatchNormalization', { 16, 6 } }, { 'SpatialBatchNormalization', { 4, 3, 5, 5 } } }) do
        local x = randn(case[2], dtype) + 1
        local t = randn(case[2], dtype)
        local build = function()
          local m = nn[case[1]](case[2][2]):type(dtype)
          m.bias:copy(tgl.arange(1, case[2][2]):astype(dtype) * 0.1)
          return nn.Sequential():add(m)
        end
        local a = step('cpu', build, x, t, nn.MSECriterion())
        local b = step('cuda', build, x, t, nn.MSECriterion())
        for k = 1, #a do close(a[k], b[k], dtype, case[1] .. ' step value ' .. k) end
      end
    end)
  end
end)
