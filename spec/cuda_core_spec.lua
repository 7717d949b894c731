-- cuda_core_spec.lua — the CUDA backend's core kernels (src/cuda/k_core.c,
-- k_copy.c, kernels/core.cu) against the CPU's: every elementwise op of the
-- catalog (walked by name) in every dtype its type rule takes, on
-- contiguous, transposed, negative-stride and broadcast inputs; sum, prod,
-- max, min over random axes masks (0-size axes, negative strides,
-- keepdims) in every dtype; argmax/argmin with ties and NaN; axes_size
-- (mean), shape, concatenate of views in mixed dtypes, fill_like (through
-- a gradient) and arange (compiled with scalar bounds); eager ops and
-- functions compiled with mode FAST_COMPILE (no fusion: the op kernels
-- themselves).  Values: float64 within 1e-12 relative, float32 within
-- 1e-5, integers, bools and positions exact, NaN where the CPU has NaN.
-- Without a device (tgl.cuda.is_available() false) it says why and runs
-- nothing; under the emulated GPU (TGL_CUDA_EMU=1) it runs for real.
local tgl = require 'tgl'
local ffi = require 'ffi'
local C = require('tgl.core').C
local G = require 'tgl.graph'
local S = dofile('spec/support.lua')

local available = tgl.cuda and tgl.cuda.built() and tgl.cuda.is_available()
if not available then
  local why = not (tgl.cuda and tgl.cuda.built()) and 'tgl was built without CUDA'
      or 'no CUDA device (tgl.cuda.is_available() is false; TGL_CUDA_EMU=1 emulates one)'
  print('cuda_core_spec: skipped: ' .. why)
  describe('the CUDA core kernels', function()
    pending('skipped: ' .. why)
  end)
  return
end

local DTYPES = { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }
local DTYPE_ID = { float32 = 0, float64 = 1, int32 = 2, int64 = 3, uint8 = 4, bool = 5 } -- tgl_dtype
local TOL = { float32 = { abs = 1e-6, rel = 1e-5 }, float64 = { abs = 1e-13, rel = 1e-12 } }

-- Each kernel compiles once per process (cached on disk after).  On the
-- emulated GPU a compile is the host C++ compiler's (~2 s), so there the
-- elementwise walks take a rotating fifth of the (op, dtypes) cases (every
-- op still, every dtype somewhere) unless TGL_CUDA_CORE_FULL=1; on a GPU
-- (NVRTC, ~0.15 s a kernel) they take every case.
local EMU = os.getenv('TGL_CUDA_EMU')
local SAMPLE = EMU ~= nil and EMU ~= '' and EMU ~= '0' and os.getenv('TGL_CUDA_CORE_FULL') ~= '1'
local function sampled(op_index, case_index)
  return not SAMPLE or (op_index + case_index) % 5 == 0
end

local on_device = S.on_device
local function on_cuda(fn) return on_device('cuda', fn) end
-- The references: compiled for the cpu even where TGL_DEVICE=cuda (the
-- emu: list) makes cuda the default.
local function on_cpu(fn) return on_device('cpu', fn) end

-- Device allocations so far: a compiled function's results come back to
-- the host, so a test that its work ran on the device counts these.
local function device_allocs() return tgl.cuda.memory_stats().n_allocs end

local function host(a)
  if a.device ~= 'cpu' then return a:cpu() end
  return a
end

-- want (cpu) and got (any device) agree as TOL says for got's dtype.
local function same(want, got, what)
  local g = host(got)
  local m = S.mismatch(want, g, TOL[want.dtype])
  if m then error(what .. ': ' .. m, 2) end
end

local function numel(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- A random cpu array of shape and dtype: floats in [-3, 3) with some
-- whole and half values (ties for round, equal elements for argmax),
-- small integers, bools.
local function rand_array(r, shape, dt, opts)
  opts = opts or {}
  local n = numel(shape)
  if n == 0 then return tgl.zeros(shape, { dtype = dt }) end
  local t = {}
  for i = 1, n do
    local v
    if dt == 'bool' then v = r.chance(0.5) and 1 or 0
    elseif dt == 'uint8' then v = r.int(0, opts.small and 3 or 12)
    elseif dt == 'int32' or dt == 'int64' then v = r.int(opts.small and -2 or -9, opts.small and 2 or 9)
    else
      v = r.float() * 6 - 3
      if opts.small or r.chance(0.15) then v = math.floor(v * 2 + 0.5) / 2 end
      if opts.nan and r.chance(0.05) then v = 0 / 0 end
    end
    t[i] = v
  end
  local a = tgl.array(t, 'float64')
  if dt ~= 'float64' then a = a:astype(dt) end
  if #shape == 0 then return a:reshape() end
  return a:reshape(unpack(shape))
end

-- The views an input may be, each a function of a base array giving an
-- array of `shape`: the base is made for the view (its shape returned by
-- base_shape) on the cpu, copied to the device, and the same view taken on
-- both, so the device kernel sees the strides (0, negative, transposed).
local VIEWS = {
  contiguous = {
    base_shape = function(shape) return shape end,
    take = function(a) return a end,
  },
  transposed = {
    base_shape = function(shape)
      local s = {}
      for i = #shape, 1, -1 do s[#s + 1] = shape[i] end
      return s
    end,
    take = function(a)
      if a:dim() < 2 then return a end
      local p = {}
      for i = a:dim(), 1, -1 do p[#p + 1] = i end
      return tgl.dimshuffle(a, p)
    end,
  },
  reversed = { -- step -1 along the first axis
    base_shape = function(shape) return shape end,
    take = function(a)
      if a:dim() == 0 or a:size(1) < 1 then return a end
      return a[{ { a:size(1), 1, -1 } }]
    end,
  },
}
local VIEW_NAMES = { 'contiguous', 'transposed', 'reversed' }

local function make_input(r, shape, dt, view, opts)
  local v = VIEWS[view]
  local base = rand_array(r, v.base_shape(shape), dt, opts)
  local dev = base:cuda()
  return v.take(base), v.take(dev), dev
end

-- ---------------------------------------------------------------------------
-- The elementwise ops of the catalog.

local BINARY = { add = 1, sub = 1, mul = 1, div = 1, pow = 1, mod = 1, maximum = 1, minimum = 1,
                 eq = 1, neq = 1, lt = 1, le = 1, gt = 1, ge = 1, and_ = 1, or_ = 1 }
local TERNARY = { switch = 1, clip = 1 }

local function elemwise_ops()
  local ops = {}
  for op = 0, C.tgl_op_count() - 1 do
    local fam = C.tgl_op_property(op, 'family')
    if fam ~= nil and ffi.string(fam) == 'elemwise' then ops[#ops + 1] = ffi.string(C.tgl_op_name(op)) end
  end
  return ops
end

local function arity(name)
  return TERNARY[name] and 3 or BINARY[name] and 2 or 1
end

-- Applies op `name` to args (eager arrays or variables); cast takes a dtype.
local function apply(name, args, cast_to)
  if name == 'cast' then return tgl.cast(args[1], cast_to) end
  return G.apply(name, name, args, #args)
end

-- The dtype lists to try for an op of arity k: every dtype alike, then a
-- few mixed ones (promotion: the kernel's CAST instructions).
local function dtype_sets(k)
  local sets = {}
  for _, dt in ipairs(DTYPES) do
    local s = {}
    for i = 1, k do s[i] = dt end
    sets[#sets + 1] = s
  end
  if k == 2 then
    for _, s in ipairs({ { 'float32', 'int32' }, { 'int64', 'float64' }, { 'bool', 'uint8' },
                         { 'uint8', 'int32' }, { 'float32', 'float64' }, { 'int32', 'bool' } }) do
      sets[#sets + 1] = s
    end
  elseif k == 3 then
    for _, s in ipairs({ { 'bool', 'float32', 'float32' }, { 'float64', 'int32', 'float64' },
                         { 'bool', 'int32', 'float32' }, { 'int32', 'float32', 'float32' },
                         { 'float32', 'float64', 'int64' } }) do
      sets[#sets + 1] = s
    end
  end
  return sets
end

describe('the CUDA elementwise kernel (one-node programs)', function()
  local ops = elemwise_ops()

  it('walks the catalog: every elementwise op is known here', function()
    assert.is_true(#ops >= 30, 'only ' .. #ops .. ' elementwise ops')
    for _, name in ipairs(ops) do
      local ok = name == 'cast' or arity(name) == 1 or BINARY[name] or TERNARY[name]
      assert.is_truthy(ok, name)
    end
  end)

  it('gives the cpu values for every op x dtypes, on views and broadcast inputs (eager)', function()
    local r = S.new_rng(2201)
    local checked, refused = 0, 0
    local shapes = { {}, { 7 }, { 3, 5 }, { 2, 3, 4 }, { 0, 3 }, { 1, 1 } }
    for oi, name in ipairs(ops) do
      local k = arity(name)
      local ci = 0
      for _, dts in ipairs(dtype_sets(k)) do
        local casts = name == 'cast' and DTYPES or { false }
        for _, cast_to in ipairs(casts) do
          ci = ci + 1
          local shape = shapes[r.int(1, #shapes)]
          if not sampled(oi, ci) then goto next end
          local cpu_in, dev_in = {}, {}
          for i = 1, k do
            local s = shape
            -- broadcast: one input (not the first) with size-1 axes
            if i == k and k > 1 and #shape >= 2 and r.chance(0.5) then
              s = { 1 }
              for d = 2, #shape do s[d] = shape[d] end
            end
            local view = VIEW_NAMES[r.int(1, #VIEW_NAMES)]
            cpu_in[i], dev_in[i] = make_input(r, s, dts[i], view)
          end
          local ok, want = pcall(apply, name, cpu_in, cast_to)
          local what = ('%s(%s)%s %s'):format(name, table.concat(dts, ','),
            cast_to and (' to ' .. cast_to) or '', S.shape_str(shape))
          if ok then
            local got = apply(name, dev_in, cast_to)
            assert.are.equal('cuda', got.device, what)
            same(want, got, what)
            checked = checked + 1
          else
            -- the type rule refuses it on every device alike
            local ok2, err2 = pcall(apply, name, dev_in, cast_to)
            assert.is_false(ok2, what .. ' ran on cuda but not on the cpu: ' .. tostring(want))
            assert.are.equal(tostring(want):gsub('cuda', 'cpu'):match('[^:]*$'),
              tostring(err2):gsub('cuda', 'cpu'):match('[^:]*$'), what)
            refused = refused + 1
          end
          ::next::
        end
      end
    end
    print(('cuda_core_spec: %d elementwise cases checked, %d refused alike'):format(checked, refused))
    assert.is_true(checked > (SAMPLE and 40 or 200), 'only ' .. checked .. ' cases')
  end)

  it('gives the cpu values in functions compiled with FAST_COMPILE, broadcast patterns included', function()
    local r = S.new_rng(2202)
    local allocs = device_allocs()
    for oi, name in ipairs(ops) do
      local k = arity(name)
      for di, dt in ipairs({ 'float32', 'float64', 'int32' }) do
        if SAMPLE and (oi + di) % 3 ~= 0 then goto next end
        local dts = {}
        for i = 1, k do dts[i] = dt end
        if k >= 2 then dts[1] = (name == 'switch') and 'bool' or dt end
        if name == 'and_' or name == 'or_' or name == 'not_' then
          for i = 1, k do dts[i] = 'bool' end
        end
        local vars, cpu_in = {}, {}
        for i = 1, k do
          local bc = { false, i == k and k > 1 }
          vars[i] = tgl.tensor { dtype = dts[i], ndim = 2, broadcastable = bc, name = 'x' .. i }
          cpu_in[i] = rand_array(r, { 4, bc[2] and 1 or 6 }, dts[i])
        end
        local okw, want = pcall(apply, name, cpu_in, 'int64')
        if okw then
          local f = on_cuda(function()
            return tgl.compile { inputs = vars, outputs = apply(name, vars, 'int64'), mode = 'FAST_COMPILE' }
          end)
          local got = on_cuda(function() return f(unpack(cpu_in)) end)
          same(want, got, ('compiled %s(%s)'):format(name, table.concat(dts, ',')))
        end
        ::next::
      end
    end
    assert.is_true(device_allocs() > allocs, 'the compiled functions ran nothing on the device')
  end)
end)

-- ---------------------------------------------------------------------------
-- Reductions.

-- Random axes (1-based, increasing) of an ndim-axis array, or nil (all).
local function rand_axes(r, nd)
  if nd == 0 or r.chance(0.15) then return nil end
  local axes = {}
  for d = 1, nd do if r.chance(0.5) then axes[#axes + 1] = d end end
  if #axes == 0 then axes[1] = r.int(1, nd) end
  return axes
end

local REDUCE = { sum = tgl.sum, prod = tgl.prod, max = tgl.max, min = tgl.min }

describe('the CUDA reductions', function()
  it('sum, prod, max, min over random axes masks, views, 0-size axes and dtypes equal the cpu', function()
    local seed, cases = S.prop_seed_and_cases(2203, 400)
    local r = S.new_rng(seed)
    local n = 0
    for case = 1, cases do
      local nd = r.int(0, 4)
      local shape = {}
      for d = 1, nd do shape[d] = r.chance(0.08) and 0 or r.int(1, 5) end
      local dt = DTYPES[r.int(1, #DTYPES)]
      local opname = ({ 'sum', 'prod', 'max', 'min' })[r.int(1, 4)]
      local view = VIEW_NAMES[r.int(1, #VIEW_NAMES)]
      local x, xd = make_input(r, shape, dt, view, { nan = r.chance(0.2) })
      local axes = rand_axes(r, nd)
      local keep = r.chance(0.4)
      local what = ('case %d (seed %d): %s of %s %s %s over %s%s'):format(case, seed, opname, view, dt,
        S.shape_str(shape), axes and table.concat(axes, ',') or 'all', keep and ' keepdims' or '')
      local ok, want = pcall(REDUCE[opname], x, axes, { keepdims = keep })
      if ok then
        same(want, REDUCE[opname](xd, axes, { keepdims = keep }), what)
        n = n + 1
      else
        local ok2, err2 = pcall(REDUCE[opname], xd, axes, { keepdims = keep })
        assert.is_false(ok2, what)
        assert.matches('zero%-size reduction', tostring(err2), 1, false, what)
      end
    end
    assert.is_true(n > cases / 2)
  end)

  it('takes the fast layouts right: full sums, row and column sums of large matrices, long products', function()
    local r = S.new_rng(2204)
    for _, dt in ipairs({ 'float32', 'float64', 'int32' }) do
      for _, shape in ipairs({ { 300, 257 }, { 7, 9000 }, { 9000, 7 }, { 40000 } }) do
        local x, xd = make_input(r, shape, dt, 'contiguous')
        same(tgl.sum(x), tgl.sum(xd), dt .. ' full sum ' .. S.shape_str(shape))
        same(tgl.max(x), tgl.max(xd), dt .. ' full max ' .. S.shape_str(shape))
        if #shape == 2 then
          same(tgl.sum(x, 2), tgl.sum(xd, 2), dt .. ' row sums ' .. S.shape_str(shape))
          same(tgl.sum(x, 1), tgl.sum(xd, 1), dt .. ' column sums ' .. S.shape_str(shape))
          same(tgl.min(x, 1), tgl.min(xd, 1), dt .. ' column mins ' .. S.shape_str(shape))
          same(tgl.sum(x:T(), 2), tgl.sum(xd:T(), 2), dt .. ' transposed row sums ' .. S.shape_str(shape))
        end
      end
    end
    -- a float32 sum accumulated in double: 1 + 2^-30 * 2^20 ones
    local ones = tgl.full({ 1048576 }, 2 ^ -30, { dtype = 'float32' })
    local s = tgl.sum(ones:cuda())
    assert.are.equal(2 ^ -10, host(s):get())
    -- max/min keep NaN wherever it is
    local v = tgl.array({ 1, 2, 0 / 0, 4, -1 }, 'float32')
    for _, f in ipairs({ tgl.max, tgl.min }) do
      local m = host(f(v:cuda()))
      assert.is_true(m:get() ~= m:get())
    end
    -- empty reductions: the identities
    local e = tgl.zeros(0, 3, { dtype = 'float64' })
    same(tgl.array({ 0, 0, 0 }, 'float64'), tgl.sum(e:cuda(), 1), 'sum of no rows')
    same(tgl.array({ 1, 1, 1 }, 'float64'), tgl.prod(e:cuda(), 1), 'prod of no rows')
    same(tgl.array({ 1, 1, 1 }, 'int64'), tgl.prod(e:astype('int32'):cuda(), 1), 'int prod of no rows')
  end)

  it('long reductions over several axes of views (the block-per-output layout, chunked) equal the cpu', function()
    local seed, cases = S.prop_seed_and_cases(2209, 60)
    local r = S.new_rng(seed)
    for case = 1, cases do
      local shape = { r.int(1, 40), r.int(1, 6), r.int(20, 70) }
      local dt = ({ 'float32', 'float64', 'int64', 'bool' })[r.int(1, 4)]
      local opname = ({ 'sum', 'prod', 'max', 'min' })[r.int(1, 4)]
      if opname == 'prod' and dt ~= 'bool' then dt = 'float64' end
      local view = VIEW_NAMES[r.int(1, #VIEW_NAMES)]
      local x, xd = make_input(r, shape, dt, view, { small = opname == 'prod', nan = r.chance(0.2) })
      local axes = ({ { 1, 3 }, { 3 }, { 2, 3 }, { 1, 2, 3 }, { 1 } })[r.int(1, 5)]
      local what = ('case %d (seed %d): %s of %s %s %s over %s'):format(case, seed, opname, view, dt,
        S.shape_str(shape), table.concat(axes, ','))
      same(REDUCE[opname](x, axes), REDUCE[opname](xd, axes), what)
    end
  end)

  it('argmax and argmin: 1-based, the first of equal values, the first NaN', function()
    local seed, cases = S.prop_seed_and_cases(2205, 200)
    local r = S.new_rng(seed)
    for case = 1, cases do
      local nd = r.int(1, 4)
      local shape = {}
      for d = 1, nd do shape[d] = r.int(1, 5) end
      local axis = r.int(1, nd)
      if r.chance(0.3) then shape[axis] = r.int(100, 300) end -- the block-per-output path
      local dt = DTYPES[r.int(1, #DTYPES)]
      local view = VIEW_NAMES[r.int(1, #VIEW_NAMES)]
      local x, xd = make_input(r, shape, dt, view, { small = true, nan = r.chance(0.3) })
      local keep = r.chance(0.3)
      for _, f in ipairs({ 'argmax', 'argmin' }) do
        local want = tgl[f](x, axis, { keepdims = keep })
        local what = ('case %d (seed %d): %s of %s %s %s on axis %d'):format(case, seed, f, view, dt,
          S.shape_str(shape), axis)
        same(want, tgl[f](xd, axis, { keepdims = keep }), what)
      end
    end
    -- ties by hand
    local t = tgl.array({ { 3, 1, 3, 1 }, { 0 / 0, 5, 0 / 0, 5 } }, 'float64'):cuda()
    same(tgl.array({ 1, 1 }, 'int64'), tgl.argmax(t, 2), 'argmax ties and NaN')
    same(tgl.array({ 2, 1 }, 'int64'), tgl.argmin(t, 2), 'argmin ties and NaN')
    local ok, err = pcall(tgl.argmax, tgl.zeros(2, 0):cuda(), 2)
    assert.is_false(ok)
    assert.matches('zero%-size reduction', tostring(err))
  end)

  it('in compiled functions: sum/max over axes, mean (axes_size), argmax, on cuda', function()
    local r = S.new_rng(2206)
    local allocs = device_allocs()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      local x = tgl.tensor { dtype = dt, ndim = 3, name = 'x' }
      local outs = { tgl.sum(x, { 1, 3 }), tgl.max(x, 2, { keepdims = true }), tgl.mean(x, { 2, 3 }),
                     tgl.argmax(x, 3), tgl.prod(x, 1), tgl.min(x) }
      local f = on_cuda(function() return tgl.compile { inputs = { x }, outputs = outs, mode = 'FAST_COMPILE' } end)
      local fc = on_cpu(function() return tgl.compile { inputs = { x }, outputs = outs, mode = 'FAST_COMPILE' } end)
      for _, shape in ipairs({ { 3, 4, 5 }, { 1, 7, 2 }, { 2, 0, 3 } }) do
        local xa = rand_array(r, shape, dt)
        local ok, w = pcall(function() return { on_cpu(function() return fc(xa) end) } end)
        if ok then
          local g = { on_cuda(function() return f(xa) end) }
          for i = 1, #w do same(w[i], g[i], ('%s output %d %s'):format(dt, i, S.shape_str(shape))) end
        else
          local ok2 = pcall(function() return on_cuda(function() return f(xa) end) end)
          assert.is_false(ok2, 'the cpu failed, cuda did not: ' .. tostring(w))
        end
      end
    end
    assert.is_true(device_allocs() > allocs, 'the compiled functions ran nothing on the device')
  end)
end)

-- ---------------------------------------------------------------------------
-- Shape family.

describe('the CUDA shape kernels', function()
  it('concatenate views of mixed dtypes on any axis', function()
    local r = S.new_rng(2207)
    for case = 1, 60 do
      local nd = r.int(1, 3)
      local axis = r.int(1, nd)
      local parts, dparts = {}, {}
      local k = r.int(1, 4)
      local base = {}
      for d = 1, nd do base[d] = r.int(1, 4) end
      for i = 1, k do
        local shape = {}
        for d = 1, nd do shape[d] = base[d] end
        shape[axis] = r.int(0, 4)
        local dt = ({ 'float32', 'float64', 'int32', 'int64', 'bool' })[r.int(1, 5)]
        parts[i], dparts[i] = make_input(r, shape, dt, VIEW_NAMES[r.int(1, #VIEW_NAMES)])
      end
      local ok, want = pcall(tgl.concatenate, parts, axis)
      if ok then
        same(want, tgl.concatenate(dparts, axis), ('case %d: %d parts on axis %d'):format(case, k, axis))
      end
    end
  end)

  it('shape, size, fill_like (a gradient) and arange in compiled functions', function()
    local x = tgl.tensor { dtype = 'float32', ndim = 3, name = 'x' }
    local a, b, s = tgl.dscalar('a'), tgl.dscalar('b'), tgl.dscalar('s')
    local n = tgl.lscalar('n')
    local outs = { x:shape(), tgl.grad(tgl.sum(x), x), tgl.arange(a, b, s), tgl.arange(n),
                   tgl.cast(tgl.arange(a, b, s), 'int32') }
    local f = on_cuda(function()
      return tgl.compile { inputs = { x, a, b, s, n }, outputs = outs, mode = 'FAST_COMPILE' }
    end)
    local fc = on_cpu(function()
      return tgl.compile { inputs = { x, a, b, s, n }, outputs = outs, mode = 'FAST_COMPILE' }
    end)
    local xa = tgl.randn(2, 3, 4):astype('float32')
    local allocs = device_allocs()
    for _, args in ipairs({ { -1.5, 3, 0.25, 5 }, { 10, 0, -0.7, 0 }, { 0.1, 0.2, 0.3, 1 } }) do
      local w = { on_cpu(function() return fc(xa, unpack(args)) end) }
      local g = { on_cuda(function() return f(xa, unpack(args)) end) }
      for i = 1, #w do same(w[i], g[i], 'output ' .. i .. ' for ' .. table.concat(args, ',')) end
    end
    assert.is_true(device_allocs() > allocs, 'the compiled function ran nothing on the device')
  end)

  it('fill_like eagerly in every dtype, with zero and non-zero values', function()
    for _, dt in ipairs(DTYPES) do
      local x = tgl.zeros(3, 5, { dtype = dt })
      local p = { i = { DTYPE_ID[dt] } }
      for _, v in ipairs({ 0, 1, -2.5, 300 }) do
        p.f = { v }
        local want = G.apply('fill_like', 'fill_like', { x }, 1, p)
        local got = G.apply('fill_like', 'fill_like', { x:cuda() }, 1, p)
        same(want, got, ('fill_like %s %g'):format(dt, v))
      end
    end
  end)

  it('copies views to the host right (the strided copy kernel)', function()
    local r = S.new_rng(2208)
    for _, dt in ipairs(DTYPES) do
      for _, view in ipairs(VIEW_NAMES) do
        local x, xd = make_input(r, { 3, 4, 5 }, dt, view)
        same(x:contiguous(), xd:contiguous(), dt .. ' ' .. view .. ' contiguous')
        same(x:astype('float64'), xd:astype('float64'), dt .. ' ' .. view .. ' astype')
      end
    end
  end)
end)
