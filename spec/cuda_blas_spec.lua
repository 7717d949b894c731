-- cuda_blas_spec.lua — the CUDA backend's products (src/cuda/blas.c,
-- drv_cublas.c, kernels/blas.cu) against the CPU's: dot (vector.vector,
-- matrix.vector, vector.matrix, matrix.matrix), batched_dot (3-d and the
-- row-wise 2-d form) and the BLAS ops the rewrites make of them (gemm,
-- gemv, ger, with alpha and beta folded in), in float32 and float64 and
-- the integer dtypes dot takes; operands contiguous, transposed, sliced
-- (a leading dimension above the extent), stepped (no unit stride: copied
-- first) and reversed (negative strides: copied first); extents of 0 and
-- 1; the gradient of products on the device; the shape errors.  Values:
-- float64 within 1e-12 and float32 within 1e-5 of the CPU's, relative to
-- the products' scale (max|a| max|b| k); integers exactly.
--
-- It runs on a CUDA device, and on the emulated GPU (TGL_CUDA_EMU=1: its
-- BLAS is the CPU's, so the layouts, transpose flags and leading
-- dimensions blas.c hands over are checked end to end); with no device it
-- says why and skips.
local S = dofile('spec/support.lua')

if not (tgl.cuda and tgl.cuda.is_available()) then
  local why = 'no CUDA device (tgl.cuda.is_available() is false' ..
      ((tgl.cuda and tgl.cuda.built()) and '' or '; this tgl is built without CUDA') ..
      '); TGL_CUDA_EMU=1 runs this spec on the emulated GPU'
  print('cuda_blas_spec: skipped: ' .. why)
  describe('cuda products', function()
    it('skipped: ' .. why, function() pending(why) end)
  end)
  return
end

local FLOATS = { 'float32', 'float64' }
local TOL = { float32 = 1e-5, float64 = 1e-12 }

-- Runs fn with tgl.config.device set to device.
local on = S.on_device

-- A random cpu array of shape shp: floats in [-2, 2), integers small
-- (uint8 up to 255 so that sums wrap), bools 0 or 1.
local function rand(shp, dt)
  local n = 1
  for _, d in ipairs(shp) do n = n * d end
  if n == 0 then return tgl.zeros(shp, { dtype = dt }) end
  local u = tgl.rand(n, { dtype = 'float64' })
  local x
  if dt == 'float32' or dt == 'float64' then
    x = (u * 4 - 2):astype(dt)
  elseif dt == 'uint8' then
    x = tgl.floor(u * 256):astype(dt)
  elseif dt == 'bool' then
    x = tgl.gt(u, 0.5)
  else
    x = tgl.floor(u * 19 - 9):astype(dt)
  end
  return x:reshape(shp)
end

-- Matrix views of a given shape {r, c} made from a base array (the same
-- recipe on a cpu base and on its device copy gives the same view):
--   contig  the base itself
--   T       a transposed base (the transpose flag)
--   slice   an inner block of a larger base (leading dimension > extent)
--   Tslice  the transpose of such a block
--   step    every second row and column (no unit stride: copied)
--   neg     rows reversed (a negative stride: copied)
local MAT_VIEWS = { 'contig', 'T', 'slice', 'Tslice', 'step', 'neg' }
local function mat_base(view, r, c)
  if view == 'T' then return { c, r } end
  if view == 'slice' then return { r + 2, c + 3 } end
  if view == 'Tslice' then return { c + 2, r + 2 } end
  if view == 'step' then return { 2 * r + 1, 2 * c + 1 } end
  return { r, c }
end
local function mat_view(view, base, r, c)
  if view == 'T' then return base:T() end
  if view == 'slice' then return base[{ { 2, r + 1 }, { 2, c + 1 } }] end
  if view == 'Tslice' then return base[{ { 2, c + 1 }, { 2, r + 1 } }]:T() end
  if view == 'step' then return base[{ { 2, 2 * r + 1, 2 }, { 2, 2 * c + 1, 2 } }] end
  if view == 'neg' then return base[{ { r, 1, -1 }, {} }] end
  return base
end
-- Vector views: contig, step (stride 2: in place), neg (stride -1: copied).
local VEC_VIEWS = { 'contig', 'step', 'neg' }
local function vec_base(view, n)
  return { view == 'step' and 2 * n + 1 or n }
end
local function vec_view(view, base, n)
  if view == 'step' then return base[{ { 2, 2 * n + 1, 2 } }] end
  if view == 'neg' then return base[{ { n, 1, -1 } }] end
  return base
end
-- step and neg need an extent of at least 1 in this recipe.
local function usable(view, ...)
  if view ~= 'step' and view ~= 'neg' then return true end
  for _, d in ipairs({ ... }) do if d == 0 then return false end end
  return true
end

-- An operand: the cpu view and the same view of the base's device copy.
local function operand(dt, view, shp)
  if #shp == 2 then
    local base = rand(mat_base(view, shp[1], shp[2]), dt)
    return mat_view(view, base, shp[1], shp[2]), mat_view(view, base:cuda(), shp[1], shp[2])
  end
  local base = rand(vec_base(view, shp[1]), dt)
  return vec_view(view, base, shp[1]), vec_view(view, base:cuda(), shp[1])
end

local function maxabs(a)
  if a:nelement() == 0 then return 0 end
  return tgl.max(tgl.abs(a:astype('float64'))):get()
end

-- got (any device) against want (the cpu's): dtype, shape, values (floats
-- within TOL relative to scale, integers exactly).
local function check(want, got, scale, what)
  assert.are.equal('cpu', want.device)
  got = got:cpu()
  local tol
  if want.dtype == 'float32' or want.dtype == 'float64' then
    local t = TOL[want.dtype]
    tol = { abs = t * math.max(scale or 1, 1e-300), rel = t }
  end
  local msg = S.mismatch(want, got, tol)
  if msg then error(what .. ': ' .. msg, 2) end
end

describe('cuda products', function()
  before_each(function() tgl.manual_seed(2202) end)

  describe('dot on device arrays (eager)', function()
    -- {m, k, n}: extents 0 and 1, a single row (gemv path), a single
    -- column, one inner index, a plain block
    local MM_SHAPES = { { 3, 4, 5 }, { 1, 4, 5 }, { 3, 4, 1 }, { 1, 1, 1 }, { 5, 1, 6 },
                        { 1, 7, 1 }, { 3, 0, 5 }, { 0, 4, 5 }, { 3, 4, 0 }, { 0, 0, 0 } }

    for _, dt in ipairs(FLOATS) do
      it(('matrix.matrix, %s: every pair of operand layouts, extents 0 and 1'):format(dt), function()
        local cases = 0
        for _, s in ipairs(MM_SHAPES) do
          local m, k, n = s[1], s[2], s[3]
          for _, va in ipairs(MAT_VIEWS) do
            for _, vb in ipairs(MAT_VIEWS) do
              if usable(va, m, k) and usable(vb, k, n) then
                local a, da = operand(dt, va, { m, k })
                local b, db = operand(dt, vb, { k, n })
                local got = tgl.dot(da, db)
                assert.are.equal('cuda', got.device)
                check(tgl.dot(a, b), got, maxabs(a) * maxabs(b) * k,
                      ('%s (%d,%d).(%d,%d) %s.%s'):format(dt, m, k, k, n, va, vb))
                cases = cases + 1
              end
            end
          end
        end
        assert.is_true(cases > 250)
      end)

      it(('matrix.vector, vector.matrix, vector.vector, %s: every layout'):format(dt), function()
        local cases = 0
        for _, s in ipairs({ { 3, 4 }, { 1, 5 }, { 4, 1 }, { 1, 1 }, { 0, 3 }, { 3, 0 }, { 6, 9 } }) do
          local m, k = s[1], s[2]
          for _, va in ipairs(MAT_VIEWS) do
            for _, vx in ipairs(VEC_VIEWS) do
              if usable(va, m, k) and usable(vx, k) then
                local a, da = operand(dt, va, { m, k })
                local x, dx = operand(dt, vx, { k })
                check(tgl.dot(a, x), tgl.dot(da, dx), maxabs(a) * maxabs(x) * k,
                      ('%s (%d,%d).(%d) %s.%s'):format(dt, m, k, k, va, vx))
                if usable(vx, m) then
                  local y, dy = operand(dt, vx, { m })
                  check(tgl.dot(y, a), tgl.dot(dy, da), maxabs(a) * maxabs(y) * m,
                        ('%s (%d).(%d,%d) %s.%s'):format(dt, m, m, k, vx, va))
                end
                cases = cases + 1
              end
            end
          end
        end
        for _, k in ipairs({ 0, 1, 2, 7, 300, 1025 }) do
          for _, vx in ipairs(VEC_VIEWS) do
            for _, vy in ipairs(VEC_VIEWS) do
              if usable(vx, k) and usable(vy, k) then
                local x, dx = operand(dt, vx, { k })
                local y, dy = operand(dt, vy, { k })
                local got = tgl.dot(dx, dy)
                assert.are.equal(0, got:dim())
                check(tgl.dot(x, y), got, maxabs(x) * maxabs(y) * k,
                      ('%s (%d).(%d) %s.%s'):format(dt, k, k, vx, vy))
                cases = cases + 1
              end
            end
          end
        end
        assert.is_true(cases > 150)
      end)
    end

    it('float32 dot products sum in double and round once: equal bit for bit to the float64 sum rounded', function()
      -- engine/backend.h: float32 dots accumulate in double.  A float32
      -- running sum differs from the double sum rounded once in the last
      -- bits on most of these.  (The reference is the float64 product of
      -- the same numbers rounded to float32; the cpu's float32 dot sums
      -- in double too, spec/ops_spec.lua.)  The cpu's row-wise
      -- batched_dot sums in double itself: equal bit for bit.
      local ffi = require 'ffi'
      local function f32(v) return tonumber(ffi.new('float[1]', v)[0]) end
      -- (70000: few outputs of many products, summed by several blocks each
      -- and then added in a second pass)
      for _, n in ipairs({ 1000, 4097, 10000, 70000 }) do
        for _ = 1, 3 do
          local x, y = rand({ n }, 'float32'), rand({ n }, 'float32')
          local exact = tgl.dot(x:astype('float64'), y:astype('float64')):get()
          local got = tgl.dot(x:cuda(), y:cuda()):cpu()
          assert.are.equal('float32', got.dtype)
          assert.are.equal(f32(exact), got:get())
        end
        local a, b = rand({ 3, n }, 'float32'), rand({ 3, n }, 'float32')
        assert.are.same(tgl.batched_dot(a, b):totable(), tgl.batched_dot(a:cuda(), b:cuda()):cpu():totable())
      end
      -- 1 + ten times 1e-8: float32 steps from 1 lose each term, the double sum does not
      local a = tgl.array({ 1, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8, 1e-8 }, 'float32')
      local ones = tgl.ones(11, { dtype = 'float32' })
      local got = tgl.dot(a:cuda(), ones:cuda()):cpu():get()
      assert.are.equal(f32(tgl.dot(a:astype('float64'), ones:astype('float64')):get()), got)
      assert.is_true(got > 1)
    end)

    it('integer dtypes: int32, int64, uint8 (wrapping), bool (counts as int64), exactly', function()
      local cases = 0
      for _, dt in ipairs({ 'int32', 'int64', 'uint8', 'bool' }) do
        for _, s in ipairs({ { 3, 4, 5 }, { 1, 6, 1 }, { 2, 0, 3 }, { 4, 300, 2 }, { 1, 1, 1 } }) do
          local m, k, n = s[1], s[2], s[3]
          for _, va in ipairs({ 'contig', 'T', 'step', 'neg' }) do
            if usable(va, m, k) then
              local a, da = operand(dt, va, { m, k })
              local b, db = operand(dt, 'slice', { k, n })
              local want = tgl.dot(a, b)
              assert.are.equal(dt == 'bool' and 'int64' or dt, want.dtype)
              check(want, tgl.dot(da, db), nil, ('%s (%d,%d,%d) %s'):format(dt, m, k, n, va))
              if k > 0 then
                local x, dx = operand(dt, 'neg', { k })
                local y, dy = operand(dt, 'step', { k })
                check(tgl.dot(a, x), tgl.dot(da, dx), nil, dt .. ' matrix.vector ' .. va)
                check(tgl.dot(y, b), tgl.dot(dy, db), nil, dt .. ' vector.matrix')
                check(tgl.dot(x, y), tgl.dot(dx, dy), nil, dt .. ' vector.vector')
              end
              cases = cases + 1
            end
          end
        end
      end
      assert.is_true(cases > 60)
      -- int32 wraps as the cpu's: 70000 * 70000 overflows 32 bits
      local big = tgl.array({ { 70000, 70000 } }, 'int32')
      check(tgl.dot(big, big:T()), tgl.dot(big:cuda(), big:cuda():T()), nil, 'int32 overflow')
    end)

    it('mixed dtypes promote and convert on the device', function()
      local pairs_ = { { 'int32', 'float32' }, { 'float32', 'float64' }, { 'int64', 'float64' },
                       { 'uint8', 'int32' }, { 'bool', 'float64' }, { 'int64', 'float32' } }
      for _, p in ipairs(pairs_) do
        local a, da = operand(p[1], 'T', { 3, 5 })
        local b, db = operand(p[2], 'neg', { 5, 4 })
        local want = tgl.dot(a, b)
        local got = tgl.dot(da, db)
        check(want, got, 2 * 255 * 5, p[1] .. '.' .. p[2])
        local x, dx = operand(p[1], 'step', { 5 })
        check(tgl.dot(x, b), tgl.dot(dx, db), 2 * 255 * 5, p[1] .. ' vector.' .. p[2] .. ' matrix')
      end
    end)

    it('long inner extents: 1000 (one block per output) and 70000 (split over blocks)', function()
      for _, dt in ipairs({ 'float64', 'float32', 'int64', 'int32' }) do
        local a, da = operand(dt, 'slice', { 3, 1000 })
        local b, db = operand(dt, 'T', { 1000, 2 })
        check(tgl.dot(a, b), tgl.dot(da, db), maxabs(a) * maxabs(b) * 1000, dt .. ' k=1000')
        local x, dx = operand(dt, 'step', { 70000 })
        local y, dy = operand(dt, 'neg', { 70000 })
        check(tgl.dot(x, y), tgl.dot(dx, dy), maxabs(x) * maxabs(y) * 70000, dt .. ' k=70000')
        local p, dp = operand(dt, 'T', { 2, 70000 })
        local q, dq = operand(dt, 'contig', { 2, 70000 })
        check(tgl.batched_dot(p, q), tgl.batched_dot(dp, dq), maxabs(p) * maxabs(q) * 70000,
              dt .. ' rows of 70000')
      end
    end)
  end)

  describe('batched_dot on device arrays (eager)', function()
    -- 3-d views of shape {B, r, c}: contig, T (last two axes swapped),
    -- rev (batch reversed: a negative batch stride, copied), slice, step
    local B_VIEWS = { 'contig', 'T', 'rev', 'slice', 'step' }
    local function b3(dt, view, B, r, c)
      local base, v
      if view == 'T' then
        base = rand({ B, c, r }, dt)
        v = function(x) return tgl.dimshuffle(x, { 1, 3, 2 }) end
      elseif view == 'rev' then
        base = rand({ B, r, c }, dt)
        v = function(x) return B > 0 and x[{ { B, 1, -1 } }] or x end
      elseif view == 'slice' then
        base = rand({ B, r + 1, c + 3 }, dt)
        v = function(x) return x[{ {}, { 2, r + 1 }, { 2, c + 1 } }] end
      elseif view == 'step' then
        base = rand({ B, r, 2 * c + 1 }, dt)
        v = function(x) return c > 0 and x[{ {}, {}, { 2, 2 * c + 1, 2 } }] or x[{ {}, {}, { 2, 1 } }] end
      else
        base = rand({ B, r, c }, dt)
        v = function(x) return x end
      end
      return v(base), v(base:cuda())
    end

    it('(B,m,k).(B,k,n) in float32, float64 and the integers, every layout pair', function()
      local cases = 0
      for _, dt in ipairs({ 'float32', 'float64', 'int32', 'uint8' }) do
        for _, s in ipairs({ { 3, 2, 4, 5 }, { 1, 3, 2, 1 }, { 4, 1, 3, 2 }, { 2, 3, 0, 2 },
                             { 0, 2, 3, 4 }, { 2, 0, 3, 4 } }) do
          local B, m, k, n = s[1], s[2], s[3], s[4]
          for _, va in ipairs(B_VIEWS) do
            for _, vb in ipairs(B_VIEWS) do
              local a, da = b3(dt, va, B, m, k)
              local b, db = b3(dt, vb, B, k, n)
              local got = tgl.batched_dot(da, db)
              assert.are.equal('cuda', got.device)
              check(tgl.batched_dot(a, b), got, maxabs(a) * maxabs(b) * k,
                    ('%s (%d,%d,%d).(%d,%d,%d) %s.%s'):format(dt, B, m, k, B, k, n, va, vb))
              cases = cases + 1
            end
          end
        end
      end
      assert.are.equal(4 * 6 * 25, cases)
    end)

    it('(B,k).(B,k) row-wise dots: floats sum in double, integers wrap; any strides', function()
      for _, dt in ipairs({ 'float32', 'float64', 'int32', 'int64', 'uint8' }) do
        for _, s in ipairs({ { 4, 3 }, { 1, 1 }, { 3, 0 }, { 0, 3 }, { 2, 700 }, { 50, 40 } }) do
          local B, k = s[1], s[2]
          for _, va in ipairs({ 'contig', 'T', 'slice', 'neg' }) do
            for _, vb in ipairs({ 'contig', 'step' }) do
              if usable(va, B, k) and usable(vb, B, k) then
                local a, da = operand(dt, va, { B, k })
                local b, db = operand(dt, vb, { B, k })
                check(tgl.batched_dot(a, b), tgl.batched_dot(da, db), maxabs(a) * maxabs(b) * k,
                      ('%s (%d,%d) %s.%s'):format(dt, B, k, va, vb))
              end
            end
          end
        end
      end
      -- mixed dtypes convert first
      local a, da = operand('int32', 'T', { 3, 4 })
      local b, db = operand('float64', 'contig', { 3, 4 })
      check(tgl.batched_dot(a, b), tgl.batched_dot(da, db), 40, 'int32.float64 rows')
    end)
  end)

  describe('gemm, gemv and ger (compiled functions on the device)', function()
    -- Compiles build(vars) on the cpu and on cuda, runs both on args (cpu
    -- arrays: the device function copies them over), compares, and checks
    -- that the device program has the op `expect` (the rewrite happened).
    local function both(vars, build, args, expect, scale, what)
      local fc = on('cpu', function() return tgl.compile { inputs = vars, outputs = { build(unpack(vars)) } } end)
      local fd = on('cuda', function() return tgl.compile { inputs = vars, outputs = { build(unpack(vars)) } } end)
      local prog = tgl.debugprint(fd)
      assert.is_truthy(prog:find(' = ' .. expect .. '%('), what .. ': no ' .. expect .. ' in\n' .. prog)
      local want = fc(unpack(args))
      local got = fd(unpack(args))
      check(want, got, scale, what)
      return want, got
    end

    for _, dt in ipairs(FLOATS) do
      local M = function(n) return tgl.tensor { dtype = dt, ndim = 2, name = n } end
      local V = function(n) return tgl.tensor { dtype = dt, ndim = 1, name = n } end

      it(('gemm, %s: alpha and beta, operand layouts inside the graph, extents 0 and 1'):format(dt), function()
        local A, Bm, Cm = M('A'), M('B'), M('C')
        -- {name, build, beta's role}
        local forms = {
          { 'C + 2 A.B', function(a, b, c) return c + 2 * tgl.dot(a, b) end },
          { 'A.B - C', function(a, b, c) return tgl.dot(a, b) - c end },
          { 'C - 0.1 A.B', function(a, b, c) return c - 0.1 * tgl.dot(a, b) end },
          { '-0.5 A.B + 0 C', function(a, b, c) return -0.5 * tgl.dot(a, b) + c * 0 end },
          { 'A.B 0.25 + C', function(a, b, c) return tgl.dot(a, b) * 0.25 + c end },
        }
        local cases = 0
        for _, s in ipairs({ { 3, 4, 5 }, { 1, 4, 5 }, { 4, 1, 3 }, { 1, 1, 1 }, { 3, 0, 2 },
                             { 0, 3, 2 }, { 2, 3, 0 }, { 6, 5, 1 } }) do
          local m, k, n = s[1], s[2], s[3]
          for _, f in ipairs(forms) do
            local args = { rand({ m, k }, dt), rand({ k, n }, dt), rand({ m, n }, dt) }
            local scale = maxabs(args[1]) * maxabs(args[2]) * k + maxabs(args[3])
            both({ A, Bm, Cm }, f[2], args, 'gemm', scale, ('%s %s (%d,%d,%d)'):format(dt, f[1], m, k, n))
            cases = cases + 1
          end
          -- transposed and strided operands: views made in the graph
          local args = { rand({ k, m }, dt), rand({ n + 1, 2 * k + 1 }, dt), rand({ m, n }, dt) }
          both({ A, Bm, Cm }, function(a, b, c)
            return c - 0.5 * tgl.dot(a:T(), b[{ { 2, n + 1 }, { 2, 2 * k + 1, 2 } }]:T())
          end, args, 'gemm', maxabs(args[1]) * maxabs(args[2]) * k + maxabs(args[3]),
          ('%s transposed, strided (%d,%d,%d)'):format(dt, m, k, n))
          if m > 0 then
            local rargs = { rand({ m, k }, dt), rand({ k, n }, dt), rand({ m, n }, dt) }
            both({ A, Bm, Cm }, function(a, b, c)
              return c + 3 * tgl.dot(a[{ { m, 1, -1 } }], b)
            end, rargs, 'gemm', maxabs(rargs[1]) * maxabs(rargs[2]) * k + maxabs(rargs[3]),
            ('%s reversed rows (%d,%d,%d)'):format(dt, m, k, n))
          end
          -- a broadcast accumulator (a bias row: stride 0) and a scalar one
          local bargs = { rand({ m, k }, dt), rand({ k, n }, dt), rand({ n }, dt) }
          both({ A, Bm, V('bias') }, function(a, b, bias) return tgl.dot(a, b) + bias end,
               bargs, 'gemm', maxabs(bargs[1]) * maxabs(bargs[2]) * k + maxabs(bargs[3]),
               ('%s bias row (%d,%d,%d)'):format(dt, m, k, n))
          cases = cases + 1
        end
        assert.is_true(cases >= 40)
      end)

      it(('gemm with a runtime scale and in place on a shared variable, %s'):format(dt), function()
        local X, D = M('X'), M('D')
        local lr = tgl.tensor { dtype = dt, ndim = 0, name = 'lr' }
        local W0 = rand({ 4, 3 }, dt)
        local steps = {}
        for i = 1, 3 do steps[i] = { rand({ 5, 3 }, dt), rand({ 5, 4 }, dt), tgl.array(0.125 * i, dt) } end
        local results = {}
        for _, device in ipairs({ 'cpu', 'cuda' }) do
          results[device] = on(device, function()
            local W = tgl.shared(W0:clone(), 'W')
            -- W - lr (X'.D)' : dot_transposed and the runtime-scalar fold: one gemm into W
            local f = tgl.compile { inputs = { X, D, lr }, outputs = { tgl.sum(W) },
                                    updates = { { W, W - lr * X:T():dot(D):T() } } }
            if device == 'cuda' then
              local prog = tgl.debugprint(f)
              assert.is_truthy(prog:find(' = gemm%('), prog)
            end
            for i = 1, 3 do f(unpack(steps[i])) end
            return W:get_value()
          end)
        end
        check(results.cpu, results.cuda, 40, dt .. ' in-place update')
      end)

      it(('gemv, %s: A.x and x.A with alpha and beta, transposed and strided operands, extents 0 and 1'):format(dt), function()
        local A, x, c = M('A'), V('x'), V('c')
        local cases = 0
        for _, s in ipairs({ { 3, 4 }, { 1, 5 }, { 5, 1 }, { 1, 1 }, { 0, 3 }, { 7, 6 } }) do
          local m, k = s[1], s[2]
          local forms = {
            { 'c + A.x', { m, k }, { k }, { m }, function(a, xx, cc) return cc + tgl.dot(a, xx) end },
            { 'c - 2 A\'.x', { k, m }, { k }, { m }, function(a, xx, cc) return cc - 2 * tgl.dot(a:T(), xx) end },
            { 'x.A + c', { k, m }, { k }, { m }, function(a, xx, cc) return tgl.dot(xx, a) + cc end },
            { 'A.x - c', { m, k }, { k }, { m }, function(a, xx, cc) return tgl.dot(a, xx) - cc end },
            { 'c + A.x[::2]', { m, k }, { 2 * k + 1 }, { m },
              function(a, xx, cc) return cc + tgl.dot(a, xx[{ { 2, 2 * k + 1, 2 } }]) end },
            { 'c + Aslice.x', { m + 1, k + 2 }, { k }, { m },
              function(a, xx, cc) return cc + 0.5 * tgl.dot(a[{ { 2, m + 1 }, { 1, k } }], xx) end },
          }
          if k > 0 then
            forms[#forms + 1] = { 'c + A.x reversed', { m, k }, { k }, { m },
              function(a, xx, cc) return cc + tgl.dot(a, xx[{ { k, 1, -1 } }]) end }
          end
          for _, f in ipairs(forms) do
            local args = { rand(f[2], dt), rand(f[3], dt), rand(f[4], dt) }
            local scale = 2 * maxabs(args[1]) * maxabs(args[2]) * k + maxabs(args[3])
            both({ A, x, c }, f[5], args, 'gemv', scale, ('%s %s (%d,%d)'):format(dt, f[1], m, k))
            cases = cases + 1
          end
        end
        assert.is_true(cases >= 36)
      end)

      it(('gemv with an empty inner extent is beta c, %s'):format(dt), function()
        -- A (3,0).x (0) - c = -c: nothing to multiply, c scaled by beta -1
        -- (BLAS's gemv returns at once on an empty inner extent; both
        -- backends scale c themselves)
        local A, x, c = M('A'), V('x'), V('c')
        local f = on('cuda', function() return tgl.compile { inputs = { A, x, c }, outputs = { tgl.dot(A, x) - c } } end)
        assert.is_truthy(tgl.debugprint(f):find(' = gemv%('))
        local cv = tgl.array({ 1, -2, 3 }, dt)
        local got = f(tgl.zeros(3, 0, { dtype = dt }), tgl.zeros(0, { dtype = dt }), cv)
        assert.are.same({ -1, 2, -3 }, got:totable())
        local g = on('cuda', function() return tgl.compile { inputs = { A, x, c }, outputs = { c - tgl.dot(A, x) } } end)
        assert.are.same({ 1, -2, 3 }, g(tgl.zeros(3, 0, { dtype = dt }), tgl.zeros(0, { dtype = dt }), cv):totable())
      end)

      it(('ger, %s: A + s x y\' with strided, reversed and broadcast operands, extents 0 and 1'):format(dt), function()
        local A, x, y = M('A'), V('x'), V('y')
        local cases = 0
        for _, s in ipairs({ { 3, 4 }, { 1, 5 }, { 4, 1 }, { 1, 1 }, { 0, 3 }, { 3, 0 }, { 17, 19 } }) do
          local m, n = s[1], s[2]
          local forms = {
            { 'A + 0.5 x y\'', { m, n }, { m }, { n }, function(a, xx, yy) return a + 0.5 * tgl.outer(xx, yy) end },
            { 'A - x y\'', { m, n }, { m }, { n }, function(a, xx, yy) return a - tgl.outer(xx, yy) end },
            { 'A + x[::2] y\'', { m, n }, { 2 * m + 1 }, { n },
              function(a, xx, yy) return a + tgl.outer(xx[{ { 2, 2 * m + 1, 2 } }], yy) end },
          }
          if m > 0 and n > 0 then
            forms[#forms + 1] = { 'A - 2 x y[::-1]\'', { m, n }, { m }, { n },
              function(a, xx, yy) return a - 2 * tgl.outer(xx, yy[{ { n, 1, -1 } }]) end }
            forms[#forms + 1] = { 'A\' + x y\'', { n, m }, { m }, { n },
              function(a, xx, yy) return a:T() + tgl.outer(xx, yy) end }
          end
          for _, f in ipairs(forms) do
            local args = { rand(f[2], dt), rand(f[3], dt), rand(f[4], dt) }
            local scale = 2 * maxabs(args[2]) * maxabs(args[3]) + maxabs(args[1])
            both({ A, x, y }, f[5], args, 'ger', scale, ('%s %s (%d,%d)'):format(dt, f[1], m, n))
            cases = cases + 1
          end
        end
        assert.is_true(cases >= 25)
      end)
    end
  end)

  describe('config.allow_tf32', function()
    it('float32 products stay within TF32 accuracy when allowed, exact to float32 when not', function()
      local a, da = operand('float32', 'T', { 40, 64 })
      local b, db = operand('float32', 'contig', { 64, 30 })
      local want = tgl.dot(a, b)
      local scale = maxabs(a) * maxabs(b) * 64
      local was = tgl.config.allow_tf32
      assert.is_false(was)                       -- exact by default (API.md)
      local ok, err = pcall(function()
        tgl.config.allow_tf32 = true
        -- TF32 keeps 10 bits of each operand: 2^-10 relative per product
        local got = tgl.dot(da, db):cpu()
        assert.is_nil(S.mismatch(want, got, { abs = scale * 2 ^ -9, rel = 0 }))
        tgl.config.allow_tf32 = false
        check(want, tgl.dot(da, db), scale, 'float32 without tf32')
        -- float64 never uses TF32
        tgl.config.allow_tf32 = true
        local a64, b64 = a:astype('float64'), b:astype('float64')
        check(tgl.dot(a64, b64), tgl.dot(a64:cuda(), b64:cuda()), scale, 'float64 with tf32 allowed')
      end)
      tgl.config.allow_tf32 = was
      if not ok then error(err, 0) end
    end)
  end)

  describe('gradients of products on the device', function()
    it('tgl.grad through dot (matrix.matrix, matrix.vector, vector.vector) and batched_dot matches the cpu', function()
      for _, dt in ipairs(FLOATS) do
        local X = tgl.tensor { dtype = dt, ndim = 2, name = 'X' }
        local v = tgl.tensor { dtype = dt, ndim = 1, name = 'v' }
        local T3 = tgl.tensor { dtype = dt, ndim = 3, name = 'T3' }
        local W0, U0 = rand({ 4, 3 }, dt), rand({ 2, 3, 5 }, dt)
        local args = { rand({ 6, 4 }, dt), rand({ 3 }, dt), rand({ 2, 4, 3 }, dt) }
        local res = {}
        for _, device in ipairs({ 'cpu', 'cuda' }) do
          res[device] = { on(device, function()
            local W = tgl.shared(W0:clone(), 'W')
            local U = tgl.shared(U0:clone(), 'U')
            local h = tgl.tanh(tgl.dot(X, W))                      -- (6,3)
            local cost = tgl.sum(tgl.dot(h, v) ^ 2)                -- matrix.vector
                + tgl.dot(v, v) * 0.5                              -- vector.vector
                + tgl.sum(tgl.batched_dot(T3, U) * 0.1)            -- (2,4,3).(2,3,5)
                + tgl.sum(tgl.dot(X:T(), h))                       -- a transposed operand
            local gW, gv, gU, gX = unpack(tgl.grad(cost, { W, v, U, X }))
            local f = tgl.compile { inputs = { X, v, T3 }, outputs = { cost, gW, gv, gU, gX } }
            return { f(unpack(args)) }
          end) }
        end
        local names = { 'cost', 'dW', 'dv', 'dU', 'dX' }
        for i = 1, 5 do
          check(res.cpu[1][i], res.cuda[1][i], 100, dt .. ' ' .. names[i])
        end
      end
    end)

    it('verify_grad of a product on device arrays', function()
      local a = rand({ 3, 4 }, 'float64'):cuda()
      local b = rand({ 4, 2 }, 'float64'):cuda()
      tgl.verify_grad(function(x, y) return tgl.sum(tgl.dot(x, y) ^ 2) end, { a, b }, { tol = 1e-6 })
    end)
  end)

  describe('errors', function()
    it('names the op and the shapes when inner or batch sizes differ', function()
      local a, b = tgl.ones(2, 3):cuda(), tgl.ones(4, 2):cuda()
      local ok, err = pcall(tgl.dot, a, b)
      assert.is_false(ok)
      assert.matches('inner sizes 3 and 4 differ', err)
      ok, err = pcall(tgl.batched_dot, tgl.ones(2, 3, 4):cuda(), tgl.ones(3, 4, 5):cuda())
      assert.is_false(ok)
      assert.matches('batch sizes 2 and 3 differ', err)
      local A, B = tgl.matrix('A'), tgl.matrix('B')
      local f = on('cuda', function() return tgl.compile { inputs = { A, B }, outputs = { A + 2 * tgl.dot(A, B) } } end)
      ok, err = pcall(f, tgl.ones(2, 3), tgl.ones(4, 3))
      assert.is_false(ok)
      assert.matches('inner sizes', err)
    end)
  end)
end)
