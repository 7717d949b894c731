-- engine_regress_spec.lua — regressions from issue 8, each named by the
-- behaviour it pins down: more than 64 updates (outputs still never share
-- memory with the new values), more than 16 outputs of one fused group,
-- compile time independent of how many unrelated nodes the context has
-- built, shared variables that keep their storage across updates and
-- set_value (DESIGN.md "Shared variables keep their storage", so a
-- borrowed array sees the new values), and a function with an ifelse that
-- still frees its intermediates early and updates in place.  Last, two
-- bugs the property tests found: fused groups that read each other's
-- results (a crash), and DEBUG mode rejecting float32 rounding in a
-- float64 result.
tgl = tgl or require 'tgl'
local tgl = tgl
local ffi = require 'ffi'

local MODES = { 'FAST_RUN', 'FAST_COMPILE', 'DEBUG' }
local LINKERS = { 'cvm', 'cvm_nogc', 'vm' }

dofile('spec/support.lua').with_config { floatX = 'float32', compile = 'tcc' }

local function flat(a)
  local v = a:contiguous():reshape(-1)
  local t = {}
  for i = 1, v:nelement() do t[i] = v:get(i) end
  return t
end

-- want and got: same shape, elements within abs + rel * |want|.
local function assert_close(want, got, what, abs, rel)
  abs, rel = abs or 1e-5, rel or 1e-5
  assert.is_true(tgl.is_array(got), what .. ': not an array: ' .. tostring(got))
  assert.same(want:shape(), got:shape(), what .. ': shape')
  local w, g = flat(want), flat(got)
  for i = 1, #w do
    if not (math.abs(w[i] - g[i]) <= abs + rel * math.abs(w[i])) then
      error(('%s: element %d is %.9g, expected %.9g'):format(what, i, g[i], w[i]), 2)
    end
  end
end

local function fill(shape, v, dtype)
  local args = {}
  for i, s in ipairs(shape) do args[i] = s end
  args[#args + 1] = { dtype = dtype or 'float32' }
  return tgl.zeros(unpack(args)) + v
end

-- ---------------------------------------------------------------------------

describe('more than 64 updates', function()
  for _, mode in ipairs(MODES) do
    for _, linker in ipairs(LINKERS) do
      it(('70 updates apply, and the output shares no memory with any new value (%s, %s)'):format(mode, linker),
        function()
          local ws, ups = {}, {}
          for k = 1, 70 do
            ws[k] = tgl.shared(fill({ 200 }, k), 'w' .. k)
            ups[k] = { ws[k], ws[k] + 1 }
          end
          -- the output is the same expression as the last update's value
          local f = tgl.compile { inputs = {}, outputs = ws[70] + 1, updates = ups, mode = mode,
                                  linker = linker, name = 'upd70' }
          for call = 1, 2 do
            local out = f()
            assert_close(fill({ 200 }, 70 + call), out, ('call %d: the output'):format(call))
            for k = 1, 70 do
              assert_close(fill({ 200 }, k + call), ws[k]:get_value(), ('call %d: w%d'):format(call, k))
            end
            out:set(100, 1)
            assert.equals(70 + call, ws[70]:get_value():get(1),
              ('call %d: writing into the output changed w70'):format(call))
            for k = 1, 69 do
              assert.equals(k + call, ws[k]:get_value():get(1), ('call %d: writing into the output changed w%d')
                :format(call, k))
            end
          end
        end)
    end
  end

  it('70 outputs that equal 70 update values are 70 separate arrays', function()
    local ws, ups, outs = {}, {}, {}
    for k = 1, 70 do
      ws[k] = tgl.shared(fill({ 5 }, k), 'w' .. k)
      ups[k] = { ws[k], ws[k] * 2 }
      outs[k] = ws[k] * 2
    end
    local f = tgl.compile { inputs = {}, outputs = outs, updates = ups, name = 'out70' }
    local res = { f() }
    assert.equals(70, #res)
    for k = 1, 70 do res[k]:set(-1, 1) end
    for k = 1, 70 do
      assert.equals(2 * k, ws[k]:get_value():get(1), 'writing into output ' .. k .. ' changed w' .. k)
      assert.equals(-1, res[k]:get(1))
      assert.equals(2 * k, res[k]:get(2))
    end
  end)
end)

-- ---------------------------------------------------------------------------

describe('more than 16 outputs of one fused group', function()
  -- A chain z_k = tanh(z_k-1) * c_k + x whose 20 links are all outputs:
  -- one fused group (one pass) with 20 results.
  local function chain(x, y)
    local outs, z = {}, x * y
    for k = 1, 20 do
      z = tgl.tanh(z) * (1 + k / 10) + x
      outs[k] = z
    end
    return outs
  end

  for _, mode in ipairs(MODES) do
    for _, linker in ipairs(LINKERS) do
      it(('a chain with 20 outputs compiles and gives the eager values on every call (%s, %s)')
        :format(mode, linker), function()
        local x, y = tgl.vector('x'), tgl.vector('y')
        local f = tgl.compile { inputs = { x, y }, outputs = chain(x, y), mode = mode, linker = linker,
                                name = 'outs20' }
        for call = 1, 3 do
          local xa = tgl.array({ 0.5, -1, 2, 0 }) * call
          local ya = tgl.array({ 1, 0.25, -0.5, 3 })
          local want = chain(xa, ya)
          local res = { pcall(f, xa, ya) }
          assert.is_true(res[1], tostring(res[2]) .. '\n' .. f:program())
          assert.equals(20, #res - 1)
          for k = 1, 20 do assert_close(want[k], res[k + 1], ('call %d, output %d'):format(call, k)) end
        end
      end)
    end
  end

  it('20 outputs fed by one shared intermediate give the eager values on every call', function()
    local x, y = tgl.vector('x'), tgl.vector('y')
    local function fan(a, b)
      local h = tgl.tanh(a * b + 1)
      local outs = {}
      for k = 1, 20 do outs[k] = tgl.sigmoid(h * k + a) end
      return outs
    end
    for _, mode in ipairs(MODES) do
      local f = tgl.compile { inputs = { x, y }, outputs = fan(x, y), mode = mode, name = 'fan20' }
      for call = 1, 2 do
        local xa, ya = tgl.array({ 0.5, -1, 2 }) * call, tgl.array({ 1, 0.25, -0.5 })
        local want, res = fan(xa, ya), { f(xa, ya) }
        for k = 1, 20 do assert_close(want[k], res[k], ('%s call %d, output %d'):format(mode, call, k)) end
      end
    end
  end)

  it('a function with 20 outputs that are one fused group compiles to a fused instruction with 20 results',
    function()
      -- the point of the fix: one pass, not a split into groups of 16
      local x, y = tgl.vector('x'), tgl.vector('y')
      local f = tgl.compile { inputs = { x, y }, outputs = chain(x, y), name = 'outs20' }
      local best = 0
      for lhs in f:program():gmatch('\n%s*%d+%s+([%w_, ]+) = fused') do
        local _, commas = lhs:gsub(',', '')
        best = math.max(best, commas + 1)
      end
      assert.is_true(best >= 20, 'the largest fused instruction has ' .. best .. ' results:\n' .. f:program())
      local xa, ya = tgl.array({ 0.5, -1 }), tgl.array({ 1, 2 })
      local ok, err = pcall(f, xa, ya)
      assert.is_true(ok, tostring(err))
    end)
end)

-- ---------------------------------------------------------------------------

describe('compile time', function()
  -- The median time of k compiles of a tiny function.
  local function tiny_compile_time(x, e, mode, k)
    local t = {}
    for i = 1, k do
      local t0 = tgl.time()
      tgl.compile { inputs = { x }, outputs = e, mode = mode }
      t[i] = tgl.time() - t0
    end
    table.sort(t)
    return t[math.ceil(k / 2)]
  end

  it('stays flat after 300k unrelated nodes were built (and dropped)', function()
    local x = tgl.vector('x')
    local e = x * 2 + 1
    local modes = { 'FAST_COMPILE', 'FAST_RUN' }
    local before = {}
    for _, m in ipairs(modes) do
      tiny_compile_time(x, e, m, 3) -- warm: kernels built, code jitted
      before[m] = tiny_compile_time(x, e, m, 21)
    end
    do
      local q = tgl.vector('q')
      for i = 1, 150000 do local _ = q + i end -- a constant and an add each: 300k nodes
    end
    collectgarbage()
    collectgarbage()
    local report = {}
    local slow = false
    for _, m in ipairs(modes) do
      local after = tiny_compile_time(x, e, m, 21)
      report[#report + 1] = ('%s: %.1f us before, %.1f us after'):format(m, before[m] * 1e6, after * 1e6)
      -- a complexity check, not a speed claim: 3x plus 1 ms of slack for
      -- a loaded machine; a compile that walks every node of the context
      -- takes several ms here
      if after > 3 * before[m] + 1e-3 then slow = true end
    end
    assert.is_false(slow, 'compiling a tiny function got slower after 300k unrelated nodes: '
      .. table.concat(report, '; '))
  end)
end)

-- ---------------------------------------------------------------------------

describe('a borrowed array sees the updates', function()
  -- W:get_value{borrow=true} is W's own array: the variable keeps its
  -- storage across updates (DESIGN.md), whether the update ran in place
  -- (a gemm over W) or computed a new buffer.
  local function setup_data()
    local xa = tgl.array({ { 1, 0.5, -1 }, { 0, 2, 0.25 }, { -0.5, 1, 1 }, { 2, -1, 0 } })
    local ya = tgl.array({ { 1, 0 }, { 0, 1 }, { 0.5, 0.5 }, { -1, 2 } })
    local W0 = tgl.array({ { 0.1, -0.2 }, { 0.3, 0.4 }, { -0.5, 0.6 } })
    return xa, ya, W0
  end

  for _, mode in ipairs(MODES) do
    it(('after an SGD step W <- W - 0.1 * gW (a gemm over W in place, %s)'):format(mode), function()
      local xa, ya, W0 = setup_data()
      local x, y = tgl.matrix('x'), tgl.matrix('y')
      local W = tgl.shared(W0, 'W')
      local a = W:get_value { borrow = true }
      local cost = tgl.sum((x:dot(W) - y) ^ 2)
      local gW = tgl.grad(cost, W)
      local f = tgl.compile { inputs = { x, y }, outputs = cost, updates = { { W, W - 0.1 * gW } },
                              mode = mode, name = 'sgd' }
      local Wv = W0
      for call = 1, 3 do
        f(xa, ya)
        -- eager: gW = 2 x' (x W - y)
        Wv = Wv - (xa:T():dot(xa:dot(Wv) - ya) * 2) * 0.1
        assert_close(Wv, W:get_value(), ('call %d: W'):format(call))
        assert_close(Wv, a, ('call %d: the borrowed array'):format(call))
      end
    end)

    it(('after an update that is not in place, W <- tanh(W) * 2 (%s)'):format(mode), function()
      local _, _, W0 = setup_data()
      local W = tgl.shared(W0, 'W')
      local a = W:get_value { borrow = true }
      local f = tgl.compile { inputs = {}, updates = { { W, tgl.tanh(W) * 2 } }, mode = mode }
      local Wv = W0
      for call = 1, 2 do
        f()
        Wv = tgl.tanh(Wv) * 2
        assert_close(Wv, a, ('call %d: the borrowed array'):format(call))
      end
    end)

    it(('after an update computed from the inputs only, W <- x\'y (%s)'):format(mode), function()
      local xa, ya, W0 = setup_data()
      local x, y = tgl.matrix('x'), tgl.matrix('y')
      local W = tgl.shared(W0, 'W')
      local a = W:get_value { borrow = true }
      local f = tgl.compile { inputs = { x, y }, outputs = tgl.sum(x:dot(W)), updates = { { W, x:T():dot(y) } },
                              mode = mode }
      local out = f(xa, ya)
      assert_close(tgl.sum(xa:dot(W0)), out, 'the output (old W)')
      assert_close(xa:T():dot(ya), a, 'the borrowed array')
      f(xa * 2, ya)
      assert_close(xa:T():dot(ya) * 2, a, 'the borrowed array after call 2')
    end)
  end

  it('W:set_value of the same shape keeps the storage (the borrowed array sees it)', function()
    local _, _, W0 = setup_data()
    local W = tgl.shared(W0, 'W')
    local a = W:get_value { borrow = true }
    local new = tgl.array({ { 1, 2 }, { 3, 4 }, { 5, 6 } })
    W:set_value(new)
    assert_close(new, a, 'the borrowed array')
    new:set(100, 1, 1)
    assert.equals(1, W:get_value():get(1, 1), 'set_value copied: the argument stays the caller\'s')
  end)

  it('W:set_value of another shape replaces the storage (the borrowed array keeps the old values)', function()
    local _, _, W0 = setup_data()
    local W = tgl.shared(W0, 'W')
    local a = W:get_value { borrow = true }
    W:set_value(tgl.ones(4, 2))
    assert_close(W0, a, 'the borrowed array')
    assert_close(tgl.ones(4, 2), W:get_value(), 'W')
  end)

  it('a failed call leaves the borrowed array as it was', function()
    local _, _, W0 = setup_data()
    local x = tgl.matrix('x')
    local W = tgl.shared(W0, 'W')
    local a = W:get_value { borrow = true }
    local f = tgl.compile { inputs = { x }, outputs = tgl.sum(x:dot(W)), updates = { { W, W * 2 } } }
    assert.is_false((pcall(f, tgl.ones(2, 4))))
    assert_close(W0, a, 'the borrowed array after a failed call')
    f(tgl.ones(2, 3))
    assert_close(W0 * 2, a, 'the borrowed array after a good call')
  end)

  it('swapped updates {{a, b}, {b, a}} swap what the borrowed arrays show', function()
    local A = tgl.shared(tgl.array({ 1, 2, 3 }), 'A')
    local B = tgl.shared(tgl.array({ 4, 5, 6 }), 'B')
    local ba, bb = A:get_value { borrow = true }, B:get_value { borrow = true }
    local f = tgl.compile { inputs = {}, updates = { { A, B }, { B, A } } }
    f()
    assert.same({ 4, 5, 6 }, ba:totable())
    assert.same({ 1, 2, 3 }, bb:totable())
    f()
    assert.same({ 1, 2, 3 }, ba:totable())
    assert.same({ 4, 5, 6 }, bb:totable())
  end)

  it('an output of W\'s old value is a copy that keeps the old value after W is updated in place', function()
    local _, _, W0 = setup_data()
    local W = tgl.shared(W0, 'W')
    local V = tgl.shared(W0 * 0, 'V')
    local f = tgl.compile { inputs = {}, outputs = { W, W + 0 }, updates = { { W, W + 1 }, { V, W } } }
    local o1, o2 = f()
    assert_close(W0, o1, 'output W')
    assert_close(W0, o2, 'output W + 0')
    assert_close(W0 + 1, W:get_value(), 'W')
    assert_close(W0, V:get_value(), 'V (took W\'s old value)')
    -- V and W do not share storage
    V:get_value { borrow = true }:set(-7, 1, 1)
    assert_close(W0 + 1, W:get_value(), 'W after writing into V')
    o1:set(-9, 1, 1)
    assert_close(W0 + 1, W:get_value(), 'W after writing into the output')
  end)
end)

-- ---------------------------------------------------------------------------

-- Peak resident memory (VmHWM, in bytes) during fn(), measured from a
-- reset of the high-water mark (/proc/self/clear_refs, Linux 4.0 and
-- later); nil when this cannot be measured here.  Freed buffers go back
-- to malloc and are reused, so the peak follows the live set (the resident
-- free memory malloc keeps is handed back first: malloc_trim).
ffi.cdef [[
void __asan_init(void);
int malloc_trim(size_t pad);
]]
local under_asan = pcall(function() return ffi.C.__asan_init end)
-- glibc's malloc_trim hands the free pages back first, so that the peak
-- counts the pages the call needed, not what malloc kept from before
local trim = pcall(function() return ffi.C.malloc_trim end) and function() ffi.C.malloc_trim(0) end
  or function() end

local function peak_during(fn)
  if under_asan then return nil end -- ASan's quarantine keeps freed memory
  local function status(key)
    local f = io.open('/proc/self/status')
    if not f then return nil end
    local s = f:read('*a')
    f:close()
    local v = s:match(key .. ':%s*(%d+)')
    return v and tonumber(v) * 1024
  end
  local cr = io.open('/proc/self/clear_refs', 'w')
  if not cr then return nil end
  collectgarbage()
  collectgarbage()
  trim()
  local ok = cr:write('5')
  cr:close()
  if not ok then return nil end
  local base = status('VmRSS')
  if not base then return nil end
  fn()
  local hwm = status('VmHWM')
  return hwm and hwm - base
end

describe('a function with an ifelse', function()
  local x, c = tgl.matrix('x'), tgl.scalar('c')
  local xa = tgl.array({ { 1, 0.5, -1 }, { 0, 2, 0.25 }, { -0.5, 1, 1 }, { 2, -1, 0 } })
  local W0 = tgl.array({ { 0.1, -0.2 }, { 0.3, 0.4 }, { -0.5, 0.6 } })

  -- cost = sum(tanh(x W)); the output picks it or sum(exp(x)) by c; the
  -- update is an SGD step on the cost.
  local function build(with_ifelse)
    local W = tgl.shared(W0, 'W')
    local cost = tgl.sum(tgl.tanh(x:dot(W)))
    local gW = tgl.grad(cost, W)
    local out = with_ifelse and tgl.ifelse(tgl.gt(c, 0), cost, tgl.sum(tgl.exp(x))) or cost + c * 0
    local f = tgl.compile { inputs = { x, c }, outputs = out, updates = { { W, W - 0.1 * gW } },
                            name = with_ifelse and 'with_ifelse' or 'plain' }
    return f, W
  end

  local function update_in_place(text)
    for line in text:gmatch('[^\n]+') do
      if line:match('= gemm%(') and line:find('[in place of W]', 1, true) then return true end
    end
    return false
  end

  it('still updates W in place (the gemm runs over W), as without the ifelse', function()
    local plain = build(false)
    assert.is_true(update_in_place(tgl.debugprint(plain)), 'without ifelse:\n' .. tgl.debugprint(plain))
    local f = build(true)
    assert.is_true(update_in_place(tgl.debugprint(f)), 'with ifelse:\n' .. tgl.debugprint(f))
  end)

  -- Calls f on c = 1, -1, 1, 0 and checks the output and W after each
  -- call (and check(Wv, call) when given).
  local function both_branches(f, W, check)
    local Wv = W0
    for call, cv in ipairs({ 1, -1, 1, 0 }) do
      local want = cv > 0 and tgl.sum(tgl.tanh(xa:dot(Wv))) or tgl.sum(tgl.exp(xa))
      local out = f(xa, cv)
      assert_close(want, out, ('call %d (c = %g): output'):format(call, cv), 1e-4, 1e-5)
      -- eager gradient: x' (1 - tanh(x W)^2)
      local t = tgl.tanh(xa:dot(Wv))
      Wv = Wv - xa:T():dot(1 - t * t) * 0.1
      assert_close(Wv, W:get_value(), ('call %d (c = %g): W'):format(call, cv))
      if check then check(Wv, call) end
    end
  end

  it('gives the right output and update on both branches', function()
    both_branches(build(true))
  end)

  it('updates W\'s own storage on both branches (a borrowed array sees the new values)', function()
    local f, W = build(true)
    local a = W:get_value { borrow = true }
    both_branches(f, W, function(Wv, call)
      assert_close(Wv, a, ('call %d: the borrowed array of W'):format(call))
    end)
  end)

  it('frees each intermediate after its last reader (peak memory as without the ifelse)', function()
    -- sixteen products in a row over 4 MB matrices (1M floats): a program
    -- that frees each product after the next one is computed holds two or
    -- three at a time; one that frees them at the end of the call holds
    -- sixteen.  (The bound is loose: eight.)
    local N = 1024 * 1024
    local M = tgl.constant(tgl.array({ { 1, 0, 0, 0 }, { 0, 1, 0, 0 }, { 0, 0, 1, 0 }, { 0, 0, 0, 1 } }))
    local big = tgl.matrix('big')
    local z = big
    for _ = 1, 16 do z = z:dot(M) end
    local s = tgl.sum(z)
    local fi = tgl.compile { inputs = { big, c }, outputs = tgl.ifelse(tgl.gt(c, 0), s, tgl.sum(big)),
                             name = 'if_chain' }
    local fp = tgl.compile { inputs = { big, c }, outputs = s + c * 0, name = 'plain_chain' }
    local ba = tgl.ones(N / 4, 4)
    assert_close(tgl.array(N), fi(ba, 1), 'ifelse output', 0, 0)
    assert_close(tgl.array(N), fp(ba, 1), 'plain output', 0, 0)
    local peak_if = peak_during(function() fi(ba, 1) end)
    local peak_plain = peak_during(function() fp(ba, 1) end)
    if not peak_if or not peak_plain then
      pending('peak memory cannot be measured here (ASan, or no /proc/self/clear_refs); '
        .. 'the engine has no hook that reports a call\'s peak live bytes')
      return
    end
    local buf = N * 4
    assert.is_true(peak_if <= 8 * buf,
      ('peak during the call: %.1f MB with the ifelse, %.1f MB without (one intermediate is %.1f MB)')
        :format(peak_if / 2 ^ 20, peak_plain / 2 ^ 20, buf / 2 ^ 20))
  end)
end)

-- ---------------------------------------------------------------------------
-- found while writing the property tests (spec/property_spec.lua)

-- Runs a chunk in a new tgl process (spec/support.lua).
local run_process = dofile('spec/support.lua').run_process

describe('fusion', function()
  it('groups that read each other\'s results compile: exp(x) * exp(y) and sum(exp(x)) + exp(y)', function()
    -- (the fuse pass recursed without end here: a stack overflow)
    local out, err, code = run_process([[
tgl.config.compile = 'tcc'
local x, y = tgl.vector('x'), tgl.vector('y')
local a, c = tgl.exp(x), tgl.exp(y)
for _, mode in ipairs({ 'FAST_RUN', 'DEBUG' }) do
  local f = tgl.compile { inputs = { x, y }, outputs = { a * c, tgl.sum(a) + c }, mode = mode }
  local p, s = f({ 0, 1 }, { 1, 0 })
  local e = math.exp(1)
  assert(math.abs(p:get(1) - e) < 1e-5 and math.abs(p:get(2) - e) < 1e-5, tostring(p))
  assert(math.abs(s:get(1) - (1 + 2 * e)) < 1e-4 and math.abs(s:get(2) - (2 + e)) < 1e-4, tostring(s))
end
print('ok')
]])
    assert(code == 0 and out:match('ok'), ('exit status %s\nstdout:\n%s\nstderr:\n%s'):format(tostring(code), out,
      err:sub(1, 4000)))
  end)
end)

describe('DEBUG mode', function()
  it('accepts a float64 result computed through a float32 transcendental (system compiler kernels)', function()
    -- x + sin(y) with x float64 and y float32: the generated kernel's
    -- float32 sin (glibc's vector sinf) may differ from the reference's by
    -- an ulp of float32, which is rounding, not a wrong result; DEBUG
    -- raised, comparing with float64's tolerance
    local dir = os.tmpname()
    os.remove(dir)
    local saved_dir = tgl.config.cache_dir
    tgl.config.cache_dir = dir
    tgl.config.compile = 'sync'
    local x, y = tgl.dvector('x'), tgl.fvector('y')
    local n = 100000
    local ya = (tgl.arange(n, { dtype = 'float32' }) - n / 2) * 0.001
    local xa = tgl.zeros(n, { dtype = 'float64' })
    local ok, res = pcall(function()
      local f = tgl.compile { inputs = { x, y }, outputs = x + tgl.sin(y), mode = 'DEBUG' }
      return f(xa, ya)
    end)
    tgl.config.compile = 'tcc'
    tgl.config.cache_dir = saved_dir
    os.execute(('rm -rf %q'):format(dir))
    assert.is_true(ok, tostring(res))
    assert_close(xa + tgl.sin(ya), res, 'x + sin(y)', 1e-6, 1e-6)
  end)
end)
