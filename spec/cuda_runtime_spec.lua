-- cuda_runtime_spec.lua — the CUDA runtime as Lua sees it (doc/devices.md,
-- "CUDA"): tgl.config.allow_tf32; without a usable device (a build without
-- CUDA, or no GPU): tgl.cuda.is_available() false, device = 'cuda' (and
-- TGL_DEVICE=cuda) a clear error that leaves the setting as it was,
-- memory_stats all zeros; with a device (the GPU, or the emulator under
-- TGL_CUDA_EMU=1): the caching allocator's figures follow the arrays made
-- and freed (each block rounded to its size class), freed blocks are
-- reused, empty_cache gives the cache back, a:cuda():cpu() returns the
-- same bytes for every dtype and layout, and an allocation larger than the
-- device is a clear out-of-memory error.
local S = dofile('spec/support.lua')
local ffi = require 'ffi'
local core = require 'tgl.core'
local C = core.C

local available = tgl.cuda.is_available()
local why = C.tgl_cuda_unavailable ~= nil and (function()
  local w = C.tgl_cuda_unavailable()
  return w ~= nil and ffi.string(w) or nil
end)() or nil

-- The bytes the allocator reserves for an array of nbytes: the engine
-- rounds a storage up to 64 bytes, the allocator to its size class
-- (multiples of 512 bytes up to 1 MiB, then 2^e * 5/4, 6/4, 7/4 or 2).
local function class_size(nbytes)
  local n = math.max(64, math.ceil(nbytes / 64) * 64)
  if n <= 2 ^ 20 then return math.ceil(n / 512) * 512 end
  local base = 2 ^ 20
  while base * 2 < n do base = base * 2 end
  local step = base / 4
  return base + math.ceil((n - base) / step) * step
end

local function stats() return tgl.cuda.memory_stats() end

-- Frees what Lua no longer holds (arrays are released by the collector).
local function collect()
  collectgarbage()
  collectgarbage()
end

describe('tgl.config.allow_tf32', function()
  it('is false by default, round-trips, and refuses anything but a boolean', function()
    local was = tgl.config.allow_tf32
    tgl.config.allow_tf32 = true
    assert.is_true(tgl.config.allow_tf32)
    assert.matches('allow_tf32 = true', tostring(tgl.config))
    for _, bad in ipairs({ 1, 'true', 'yes', {} }) do
      local ok, err = pcall(function() tgl.config.allow_tf32 = bad end)
      assert.is_false(ok)
      assert.matches('allow_tf32 must be true or false, got', err)
      assert.matches('cuda_runtime_spec.lua:%d+', err)  -- the user's line
      assert.is_true(tgl.config.allow_tf32)           -- unchanged
    end
    tgl.config.allow_tf32 = false
    assert.is_false(tgl.config.allow_tf32)
    tgl.config.allow_tf32 = was
  end)

  it('is false in a fresh process and in the C API', function()
    local out = S.run_process("io.write(tostring(tgl.config.allow_tf32))")
    assert.are.equal('false', out)
    local ctx = C.tgl_ctx_new()
    assert.are.equal('false', ffi.string(C.tgl_config_get(ctx, 'allow_tf32')))
    assert.are.equal(0, C.tgl_config_set(ctx, 'allow_tf32', 'true'))
    assert.are.equal('true', ffi.string(C.tgl_config_get(ctx, 'allow_tf32')))
    assert.are_not.equal(0, C.tgl_config_set(ctx, 'allow_tf32', 'on'))
    assert.matches("allow_tf32 must be true or false, got 'on'", ffi.string(C.tgl_ctx_error(ctx)))
    assert.are.equal('true', ffi.string(C.tgl_config_get(ctx, 'allow_tf32')))
    C.tgl_ctx_free(ctx)
  end)
end)

describe('tgl.cuda without a usable device', function()
  if available then
    it('(skipped: a CUDA device is available)', function() end)
    return
  end

  it('says so: is_available false, no devices, and why', function()
    assert.is_false(tgl.cuda.is_available())
    assert.are.equal(0, tgl.cuda.device_count())
    assert.is_string(why)
    if not tgl.cuda.built() then
      assert.are.equal('tgl was built without CUDA', why)
    else
      assert.truthy(why:match('^cuda: '), why)
    end
  end)

  it("refuses device = 'cuda' with the reason, leaving the setting as it was", function()
    for _, was in ipairs({ 'cpu', 'sim' }) do
      tgl.config.device = was
      local ok, err = pcall(function() tgl.config.device = 'cuda' end)
      assert.is_false(ok)
      if tgl.cuda.built() then
        assert.matches("device 'cuda' cannot be used: cuda: ", err, 1, true)
      else
        assert.matches("device 'cuda': tgl was built without CUDA", err, 1, true)
      end
      assert.matches('cuda_runtime_spec.lua:%d+', err)
      assert.are.equal(was, tgl.config.device)
    end
    tgl.config.device = 'cpu'
  end)

  it('refuses TGL_DEVICE=cuda when the process starts, naming the variable and why', function()
    local out, code = S.sh(('TGL_DEVICE=cuda %q -e "print(1)"'):format(os.getenv('TGL_BIN') or arg[-1]))
    assert.are_not.equal(0, code)
    assert.matches("TGL_DEVICE='cuda' is not valid", out, 1, true)
    assert.matches(tgl.cuda.built() and 'cannot be used: cuda: ' or 'built without CUDA', out, 1, true)
  end)

  it('fails a:cuda(), device_name() and synchronize() with the reason', function()
    local a = tgl.array({ 1, 2, 3 })
    for _, f in ipairs({ function() return a:cuda() end, tgl.cuda.device_name,
                         tgl.cuda.synchronize }) do
      local ok, err = pcall(f)
      assert.is_false(ok)
      if tgl.cuda.built() then
        assert.matches(why, err, 1, true)
      else
        assert.truthy(err:match('without CUDA') or err:match('no backend for device cuda'), err)
      end
    end
  end)

  it('reports zeros from memory_stats, and empty_cache does nothing', function()
    local s = stats()
    for _, k in ipairs({ 'allocated', 'reserved', 'peak', 'n_allocs', 'n_frees', 'n_cache_hits',
                         'n_driver_allocs', 'n_ooms' }) do
      assert.are.equal(0, s[k], k)
    end
    tgl.cuda.empty_cache()
    assert.are.same(s, stats())
  end)
end)

describe('tgl.cuda with a device', function()
  if not available then
    print(('\ncuda_runtime_spec: no CUDA device (%s); the device cases run with a GPU or '
           .. 'under TGL_CUDA_EMU=1'):format(tostring(why)))
    it('(skipped: no CUDA device; run with TGL_CUDA_EMU=1 for the emulator)', function() end)
    return
  end

  it('names the device and synchronizes', function()
    local name = tgl.cuda.device_name()
    assert.is_string(name)
    assert.is_true(#name > 0)
    assert.is_nil(why)
    tgl.cuda.synchronize()
  end)

  it('counts every array made and freed, each block rounded to its size class', function()
    collect()
    -- sizes in bytes over the classes: tiny, at and around 512 B steps,
    -- around 1 MiB, and the large classes
    local sizes = { 4, 60, 64, 508, 512, 516, 4096, 100000, 2 ^ 20 - 4, 2 ^ 20, 2 ^ 20 + 4,
                    1.25 * 2 ^ 20 + 4, 3 * 2 ^ 20, 3 * 2 ^ 20 + 4, 5 * 2 ^ 20 + 8 }
    for _, nbytes in ipairs(sizes) do
      local before = stats()
      local a = tgl.zeros({ nbytes / 4 }, { dtype = 'float32' }):cuda()
      local s = stats()
      assert.are.equal('cuda', a.device)
      assert.are.equal(class_size(nbytes), s.allocated - before.allocated, 'size ' .. nbytes)
      assert.are.equal(before.n_allocs + 1, s.n_allocs)
      assert.is_true(s.reserved >= s.allocated)
      assert.is_true(s.peak >= s.allocated)
      a = nil
      collect()
      local after = stats()
      assert.are.equal(before.allocated, after.allocated, 'size ' .. nbytes)
      assert.are.equal(before.n_frees + 1, after.n_frees)
      assert.are.equal(s.reserved, after.reserved)      -- kept in the cache
    end
  end)

  it('serves a freed block again from the cache, and empty_cache gives the cache back', function()
    collect()
    local a = tgl.zeros({ 3000 }, { dtype = 'float64' }):cuda()   -- 24000 bytes: the 24064 class
    local s1 = stats()
    a = nil
    collect()
    local b = tgl.zeros({ 2990 }, { dtype = 'float64' }):cuda()   -- 23920 bytes: the same class
    local s2 = stats()
    assert.are.equal(s1.n_cache_hits + 1, s2.n_cache_hits)
    assert.are.equal(s1.n_driver_allocs, s2.n_driver_allocs)
    assert.are.equal(s1.reserved, s2.reserved)
    b = nil
    collect()
    local s3 = stats()
    assert.is_true(s3.reserved > s3.allocated)
    tgl.cuda.empty_cache()
    local s4 = stats()
    assert.are.equal(s4.allocated, s4.reserved)
    assert.is_true(s4.reserved < s3.reserved)
    assert.are.equal(s3.allocated, s4.allocated)
    -- the next array asks the driver again
    local c = tgl.zeros({ 3000 }, { dtype = 'float64' }):cuda()
    assert.are.equal(s4.n_driver_allocs + 1, stats().n_driver_allocs)
    assert.are.same(tgl.zeros({ 3000 }, { dtype = 'float64' }):totable(), c:cpu():totable())
  end)

  it('keeps peak as the highest allocated', function()
    collect()
    local s0 = stats()
    local xs = {}
    for i = 1, 5 do xs[i] = tgl.zeros({ 1000 * i }, { dtype = 'float32' }):cuda() end
    local s1 = stats()
    xs = nil
    collect()
    local s2 = stats()
    assert.is_true(s2.peak >= s1.allocated)
    assert.is_true(s2.peak >= s0.peak)
    assert.are.equal(s0.allocated, s2.allocated)
  end)

  it('round-trips a:cuda():cpu() for every dtype, empty, scalar and strided arrays', function()
    math.randomseed(22)
    for _, dt in ipairs({ 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' }) do
      for _, shape in ipairs({ { 0 }, { 1 }, { 7 }, { 3, 5 }, { 2, 0, 3 }, { 64, 33 }, { 1000 } }) do
        local n = 1
        for _, d in ipairs(shape) do n = n * d end
        local flat = {}
        for i = 1, n do
          flat[i] = dt == 'bool' and (math.random() < 0.5)
                    or dt == 'uint8' and math.random(0, 255)
                    or dt:match('int') and math.random(-100000, 100000)
                    or (math.random() - 0.5) * 1e3
        end
        local a = tgl.array(flat, dt):reshape(unpack(shape))
        local d = a:cuda()
        assert.are.equal('cuda', d.device)
        assert.are.equal(dt, d.dtype)
        assert.are.same(a:shape(), d:shape())
        local h = d:cpu()
        assert.are.equal('cpu', h.device)
        assert.are.same(a:totable(), h:totable(), dt .. ' ' .. table.concat(shape, 'x'))
        assert.are.same(a:totable(), d:totable())     -- printing/reading goes through the host
      end
    end
    -- a transposed and a reversed (negative stride) view arrive contiguous, same values
    local m = tgl.array({ { 1, 2, 3 }, { 4, 5, 6 } }, 'float64')
    assert.are.same(m:T():totable(), m:T():cuda():cpu():totable())
    local out = ffi.new('tgl_array *[1]')
    assert.are.equal(0, C.tgl_array_view(core.ctx, m.p, 1, ffi.new('int64_t[1]', 6),
                                         ffi.new('int64_t[1]', -1), 5, out))
    local r = core.wrap(out[0])
    assert.are.same({ 6, 5, 4, 3, 2, 1 }, r:totable())
    assert.are.same({ 6, 5, 4, 3, 2, 1 }, r:cuda():cpu():totable())
    -- a large array (over the pinned staging limit) too
    local big = tgl.arange(0, 3 * 2 ^ 20, 1, { dtype = 'float32' })
    local back = big:cuda():cpu()
    assert.are.equal(0, back:get(1))
    assert.are.equal(3 * 2 ^ 20 - 1, back:get(3 * 2 ^ 20))
    assert.are.equal(12345, back:get(12346))
  end)

  it('fails an allocation larger than the device clearly, as out of memory', function()
    collect()
    local before = stats()
    -- a stride-0 view of one element: 2^42 float32 elements (16 TiB) without host memory
    local one = tgl.array({ 1 }, 'float32')
    local shape, strides = ffi.new('int64_t[1]', 2 ^ 42), ffi.new('int64_t[1]', 0)
    local out = ffi.new('tgl_array *[1]')
    assert.are.equal(0, C.tgl_array_view(core.ctx, one.p, 1, shape, strides, 0, out))
    local huge = core.wrap(out[0])
    local ok, err = pcall(function() return huge:cuda() end)
    assert.is_false(ok)
    assert.matches('out of memory allocating 17592186044416 bytes on cuda', err, 1, true)
    local after = stats()
    assert.are.equal(before.n_ooms + 1, after.n_ooms)
    assert.are.equal(before.allocated, after.allocated)
    assert.are.equal(before.n_allocs, after.n_allocs)
    -- the device still works
    assert.are.same({ 1, 2 }, tgl.array({ 1, 2 }):cuda():cpu():totable())
  end)

  it("accepts device = 'cuda' and keeps it", function()
    local was = tgl.config.device
    tgl.config.device = 'cuda'
    assert.are.equal('cuda', tgl.config.device)
    tgl.config.device = was
    assert.are.equal(was, tgl.config.device)
  end)
end)
