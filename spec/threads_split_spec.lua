-- threads_split_spec.lua — splitting generated kernels over the worker
-- threads never changes their results (doc/performance.md "Threads"):
-- elementwise kernels are bit-identical whatever the thread count;
-- reductions split into private accumulators are combined in task order,
-- so they are bit-identical call after call for a given thread count and
-- within the accumulator's rounding of the one-thread result.  Random
-- shapes (2 or 3 axes, sizes large enough that the work passes the split
-- threshold), random broadcast axes, transposed inputs, float32 and
-- float64.  TGL_PROP_SEED / TGL_PROP_CASES as in property_spec.lua.
-- Kernels are compiled with compile = 'sync': under 'tiered' a cold kernel
-- cache runs libtcc's code first and swaps in cc's (libmvec's vector tanh),
-- which may round differently in the last bit (doc/compile.md).
local tgl = require 'tgl'
local S = require 'spec.support'

local seed, cases = S.prop_seed_and_cases(2323, 12)

-- A random shape of `rank` axes with about `total` elements.
local function shape_of(r, rank, total)
  local s, left = {}, total
  for d = 1, rank - 1 do
    s[d] = r.int(2, math.max(2, math.floor(left ^ (1 / (rank - d + 1)) * 2)))
    left = math.max(1, math.floor(left / s[d]))
  end
  s[rank] = math.max(1, left)
  return s
end

-- The case's programs, each compiled at 1, 2 and 3 threads.
local function build(r, dtype)
  local rank = r.int(2, 3)
  local shape = shape_of(r, rank, r.pick({ 20000, 31000, 60000, 150000 }))
  local bshape, bc = {}, {}
  for d = 1, rank do
    local b = r.chance(0.4)
    bc[d], bshape[d] = b, b and 1 or shape[d]
  end
  local x = tgl.tensor { dtype = dtype, ndim = rank, name = 'x' }
  local y = tgl.tensor { dtype = dtype, ndim = rank, name = 'y' }
  local b = tgl.tensor { dtype = dtype, ndim = rank, broadcastable = bc, name = 'b' }
  local axis = r.int(1, rank)
  local outs = {
    tgl.tanh(x * y + b),                      -- a libm call per element: split at fewer elements
    x * (1 - y * y),                          -- a tanh's gradient
    x + b,                                    -- one op
    tgl.sum(tgl.tanh(x) * b, axis),           -- a fused reduction, random axis
    tgl.sum(x * y, 1),                        -- over the first axis (a bias gradient)
    tgl.exp(x - tgl.max(x, rank, { keepdims = true })),      -- a max reduction feeding a broadcast
  }
  local xv = tgl.randn(shape, { dtype = 'float64' }):astype(dtype)
  local yv = tgl.randn(shape, { dtype = 'float64' }):astype(dtype)
  local bv = tgl.randn(bshape, { dtype = 'float64' }):astype(dtype)
  if r.chance(0.5) then -- a transposed (non-contiguous) x of the same shape
    local t = tgl.randn({ shape[rank], unpack(shape, 1, rank - 1) }, { dtype = 'float64' }):astype(dtype)
    local perm = { }
    for d = 2, rank do perm[#perm + 1] = d end
    perm[#perm + 1] = 1
    xv = t:permute(unpack(perm))
  end
  return { x, y, b }, outs, { xv, yv, bv }, shape, bshape, axis
end

describe('splitting kernels over threads', function()
  local saved
  local saved_compile
  setup(function()
    saved, saved_compile = tgl.config.threads, tgl.config.compile
    tgl.config.compile = 'sync'
  end)
  teardown(function()
    tgl.config.threads, tgl.config.compile = saved, saved_compile
  end)

  it('gives the same bits as one thread (elementwise) and task-order sums (reductions)', function()
    for c = 0, cases - 1 do
      local r = S.new_rng(seed + c)
      tgl.manual_seed(seed + c)
      local dtype = r.pick({ 'float32', 'float64' })
      local ins, outs, vals, shape, bshape, axis = build(r, dtype)
      local what = ('case seed %d: %s x%s b%s sum axis %d'):format(seed + c, dtype, S.shape_str(shape),
        S.shape_str(bshape), axis)
      local got = {}
      for _, threads in ipairs({ 1, 2, 3 }) do
        tgl.config.threads = threads
        local f = tgl.compile { inputs = ins, outputs = outs }
        local first = { f(unpack(vals)) }
        for _ = 1, 2 do -- again: the bound step and the launch cache
          local again = { f(unpack(vals)) }
          for k = 1, #outs do
            local m = S.mismatch(first[k], again[k])
            assert(m == nil, ('%s, %d threads, output %d changed between calls: %s'):format(what, threads, k, m or ''))
          end
        end
        got[threads] = first
      end
      local tol = dtype == 'float32' and { abs = 1e-5, rel = 1e-5 } or { abs = 1e-12, rel = 1e-12 }
      for _, threads in ipairs({ 2, 3 }) do
        for k = 1, #outs do
          -- outputs 4 and 5 are sums (their split may reorder the adds, in a
          -- double accumulator); the others are elementwise per element
          local exact = k ~= 4 and k ~= 5
          local m = S.mismatch(got[1][k], got[threads][k], not exact and tol or nil)
          assert(m == nil, ('%s: output %d at %d threads vs 1: %s'):format(what, k, threads, m or ''))
        end
      end
    end
  end)
end)
