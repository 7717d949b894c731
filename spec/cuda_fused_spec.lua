-- cuda_fused_spec.lua — fused elementwise kernels on the CUDA device
-- (src/cuda/fused.c: programs rendered by cgen/render_cuda.c, compiled by
-- modules.c): random elementwise graphs compiled in FAST_RUN (so the
-- fusion pass makes fused programs) under tgl.config.device = 'cuda' give
-- the cpu's values, float32 (1e-5 relative) and float64 (1e-12), with
-- inputs that broadcast (rows, columns, scalars) and device inputs that
-- are non-contiguous views (transposed, strided slices); several outputs
-- per program; 0-size and 1-element inputs; eager elementwise ops on
-- device views.  Without a CUDA device (a real one, or the emulator:
-- TGL_CUDA_EMU=1) the spec says why and runs nothing.
local S = dofile('spec/support.lua')

local available = tgl.cuda and tgl.cuda.is_available()
if not available then
  print('cuda_fused_spec: skipped: ' .. (tgl.cuda and tgl.cuda.built()
    and 'no CUDA device (set TGL_CUDA_EMU=1 for the emulated GPU)'
    or 'tgl was built without CUDA'))
  describe('fused kernels on the cuda device', function()
    pending('no CUDA device')
  end)
  return
end

local on = S.on_device

-- A random elementwise expression over the leaves, depth at most d; every
-- op keeps values finite and away from cancellations that would make the
-- two devices' last-bit differences large.
local unary = {
  function(a) return tgl.tanh(a) end,
  function(a) return tgl.sigmoid(a) end,
  function(a) return tgl.exp(tgl.tanh(a)) end,
  function(a) return tgl.log(tgl.abs(a) + 1) end,
  function(a) return tgl.sqrt(tgl.abs(a) + 0.5) end,
  function(a) return -a end,
  function(a) return a * a end,
  function(a) return tgl.abs(a) end,
  function(a) return tgl.softplus(tgl.clip(a, -5, 5)) end,
  function(a) return tgl.sin(a) + tgl.cos(a) end,
  function(a) return tgl.log1p(tgl.abs(a)) end,
  function(a) return tgl.relu(a) end,
  function(a) return tgl.clip(a, -0.5, 0.75) end,
}
local binary = {
  function(a, b) return a + b end,
  function(a, b) return a - b * 0.5 end,
  function(a, b) return a * b end,
  function(a, b) return a / (tgl.abs(b) + 1) end,
  function(a, b) return tgl.maximum(a, b) end,
  function(a, b) return tgl.minimum(a, b) end,
  function(a, b) return tgl.switch(tgl.gt(a, b), a, b * 2) end,
  function(a, b) return tgl.switch(tgl.le(a, 0.1), tgl.tanh(b), a) end,
  function(a, b) return (a + 2) ^ 2 - b end,
}

local function expr(rng, leaves, d)
  if d == 0 or rng(4) == 1 then return leaves[rng(#leaves)] end
  if rng(2) == 1 then
    return unary[rng(#unary)](expr(rng, leaves, d - 1))
  end
  return binary[rng(#binary)](expr(rng, leaves, d - 1), expr(rng, leaves, d - 1))
end

-- A deterministic generator (math.random's sequence differs between builds).
local function lcg(seed)
  local s = seed
  return function(n)
    s = (s * 1103515245 + 12345) % 2147483648
    return 1 + math.floor(s / 65536) % n
  end
end

local function tol(dtype)
  if dtype == 'float64' then return 1e-12, 1e-13 end
  return 1e-5, 1e-6
end

-- The inputs of a graph over x (m x n), r (1 x n, a row), c (m x 1, a
-- column) and s (a scalar), as cpu arrays; `how` picks their layout on
-- the device: contiguous copies, or non-contiguous views (x transposed,
-- r and c strided slices).
local function inputs(rng, dtype, m, n)
  return on('cpu', function()
    local x = tgl.randn(m, n):cpu():astype(dtype)
    local r = tgl.randn(1, n):cpu():astype(dtype)
    local c = tgl.randn(m, 1):cpu():astype(dtype)
    local s = tgl.array(0.5 + rng(10) / 10, dtype):cpu()
    return { x, r, c, s }
  end)
end

-- The same values as device arrays whose layouts are views.
local function device_views(vals)
  local x, r, c, s = unpack(vals)
  local m, n = x:size(1), x:size(2)
  -- x: the transpose of a device array holding x', so x's strides are (1, m)
  local xv = x:T():clone():cuda():T()
  -- r: every other element of a row twice as long; c likewise, down
  local r2 = tgl.zeros(1, 2 * n, { dtype = r.dtype })
  local c2 = tgl.zeros(2 * m, 1, { dtype = c.dtype })
  for j = 1, n do r2:set(r:get(1, j), 1, 2 * j - 1) end
  for i = 1, m do c2:set(c:get(i, 1), 2 * i - 1, 1) end
  local rv = n > 0 and r2:cuda()[{ {}, { 1, 2 * n, 2 } }] or r:cuda()
  local cv = m > 0 and c2:cuda()[{ { 1, 2 * m, 2 }, {} }] or c:cuda()
  return { xv, rv, cv, s:cuda() }
end

local function totable(a)
  return a:cpu():astype('float64'):totable()
end

describe('fused kernels on the cuda device', function()
  it('give the cpu\'s values on random elementwise graphs (float32, float64; broadcast rows, columns, scalars; several outputs)', function()
    local cases, fused_seen = 0, 0
    for seed = 1, 24 do
      local rng = lcg(seed * 7919)
      local dtype = seed % 2 == 0 and 'float64' or 'float32'
      local x = tgl.tensor { dtype = dtype, ndim = 2, name = 'x' }
      local r = tgl.tensor { dtype = dtype, ndim = 2, broadcastable = { true, false }, name = 'r' }
      local c = tgl.tensor { dtype = dtype, ndim = 2, broadcastable = { false, true }, name = 'c' }
      local s = tgl.tensor { dtype = dtype, ndim = 0, name = 's' }
      local leaves = { x, r, c, s, x * s }
      local outs = { expr(rng, leaves, 4) + x * 0, }
      if seed % 3 == 0 then outs[2] = expr(rng, leaves, 3) + c * 0 + r * 0 end
      local build = function()
        return tgl.compile { inputs = { x, r, c, s }, outputs = outs, mode = 'FAST_RUN' }
      end
      local fc, fg = on('cpu', build), on('cuda', build)
      if tgl.debugprint(fg):match('fused#') then fused_seen = fused_seen + 1 end
      local rtol, atol = tol(dtype)
      for _, mn in ipairs({ { 3, 5 }, { 17, 33 }, { 1, 1 }, { 0, 4 }, { 300, 7 } }) do
        tgl.manual_seed(seed * 100 + mn[1])
        local vals = inputs(rng, dtype, mn[1], mn[2])
        local want = { fc(unpack(vals)) }
        local got = { fg(unpack(vals)) }                    -- moved to the device
        local got_v = { fg(unpack(device_views(vals))) }    -- device views
        for k = 1, #want do
          local what = ('seed %d %s %dx%d output %d'):format(seed, dtype, mn[1], mn[2], k)
          S.assert_close(totable(want[k]), totable(got[k]), rtol, atol, what)
          S.assert_close(totable(want[k]), totable(got_v[k]), rtol, atol, what .. ' (views)')
          cases = cases + 1
        end
      end
    end
    assert.is_true(fused_seen >= 20, 'fused programs in only ' .. fused_seen .. ' of 24 functions')
    print(('cuda_fused_spec: %d outputs compared'):format(cases))
  end)

  it('runs eager elementwise ops on device views', function()
    for _, dtype in ipairs({ 'float32', 'float64' }) do
      tgl.manual_seed(5)
      local a, b, want = on('cpu', function()
        local a = tgl.randn(6, 4):cpu():astype(dtype)
        local b = tgl.randn(4, 6):cpu():astype(dtype)
        return a, b, tgl.tanh(a * b:T() + 1) / (tgl.abs(a) + 1)
      end)
      assert.are.equal('cpu', want.device)
      local da, db = a:cuda(), b:cuda()
      local got = tgl.tanh(da * db:T() + 1) / (tgl.abs(da) + 1)
      assert.are.equal('cuda', got.device)
      S.assert_close(totable(want), totable(got), tol(dtype))
    end
  end)

  it('keeps running the same kernels when the layouts change between calls', function()
    local x, y = tgl.matrix('x'), tgl.matrix('y')
    local f = on('cuda', function()
      return tgl.compile { inputs = { x, y }, outputs = tgl.exp(tgl.tanh(x)) * y + 1, mode = 'FAST_RUN' }
    end)
    tgl.manual_seed(9)
    for call = 1, 6 do
      local m, n = 2 + call, 3 + (call % 3)
      local a, b, want = on('cpu', function()
        local a, b = tgl.randn(m, n):cpu(), tgl.randn(m, n):cpu()
        return a, b, tgl.exp(tgl.tanh(a)) * b + 1
      end)
      local ia = call % 2 == 0 and a:T():clone():cuda():T() or a:cuda()
      S.assert_close(totable(want), totable(f(ia, b)), 1e-5, 1e-6, 'call ' .. call)
    end
  end)
end)
