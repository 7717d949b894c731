-- tune_spec.lua — the thresholds measured on the machine (doc/calibration.md):
-- `tgl --calibrate` measures and writes the record, `tgl -v` then reads it
-- back ("cached") for this CPU and BLAS; without a usable cache directory
-- the fallbacks apply and nothing is written; TGL_TUNE is checked like every
-- TGL_* variable; and what a compiled function computes does not depend on
-- the thresholds: products split over threads or not, thin kernels or
-- OpenBLAS, kernels on one thread or two give the same values (elementwise
-- bit for bit, sums and products to float tolerance).
local tgl = require 'tgl'
local support = dofile('spec/support.lua')

local bin = os.getenv('TGL_BIN') or arg[-1]

-- The table `tgl -v` / `tgl --calibrate` prints: name -> {value, source}.
local function rows(out)
  local t = {}
  for name, value, source in out:gmatch('\n  ([%w_.]+) +(%S+)  (%S+)') do
    t[name] = { value = value, source = source }
  end
  return t
end

local NAMES = { 'blas.split_gemm', 'blas.split_level2', 'blas.thin_gemv_cols',
  'kernel.parallel_min', 'pool.spin_ns', 'step.max_bytes' }

describe('tgl --calibrate and tgl -v', function()
  it('measures, writes the record for this cpu and BLAS, and -v reads it back', function()
    local dir = support.tmpdir('tune_calibrate')
    local out, code = support.sh(('TGL_CACHE_DIR=%q %q --calibrate'):format(dir, bin))
    assert.are.equal(0, code, out)
    local cal = rows(out)
    local file = out:match('record: ([^\n]+)')
    assert.truthy(file and file:find(dir, 1, true) == 1, out)
    assert.truthy(out:match('calibrated in [%d.]+ s'), out)
    local measured = 0
    for _, n in ipairs(NAMES) do
      assert.truthy(cal[n], n .. ' missing in\n' .. out)
      assert.truthy(({ measured = 1, derived = 1 })[cal[n].source], n .. ': ' .. cal[n].source)
      if cal[n].source == 'measured' then measured = measured + 1 end
    end
    -- the thin width is measured on every machine, the splits wherever
    -- there are two CPUs; step.max_bytes is a sysconf fact
    assert.are.equal('measured', cal['blas.thin_gemv_cols'].source)
    assert.is_true(measured >= 1)
    local rec = support.read_file(file)
    assert.truthy(rec:match('^tgl%-tune 1\n'), rec)
    assert.truthy(rec:match('\nend\n$'), rec)

    local v = support.sh(('TGL_CACHE_DIR=%q %q -v'):format(dir, bin))
    assert.truthy(v:match('^tgl '), v)
    assert.truthy(v:match('\ncpu: [^\n]+'), v)
    assert.truthy(v:match('\nblas: [^\n]+'), v)
    assert.are.equal(file, v:match('record: ([^\n]+)'))
    local got = rows(v)
    for _, n in ipairs(NAMES) do
      local want = cal[n].source == 'measured' and 'cached' or cal[n].source
      assert.are.equal(want, got[n].source, n)
      assert.are.equal(cal[n].value, got[n].value, n)
    end
    -- the Lua view says the same
    local lua = support.sh(('TGL_CACHE_DIR=%q %q -e %q'):format(dir, bin,
      "local t = tgl.tune(); io.write(t.record, ' ', t['blas.thin_gemv_cols'].source, ' ', " ..
      "tostring(t['blas.thin_gemv_cols'].value))"))
    assert.are.equal(file .. ' cached ' .. cal['blas.thin_gemv_cols'].value, lua)
  end)

  it('keeps the fallbacks, silently, when the cache directory is unusable', function()
    local dir = support.tmpdir('tune_nodisk')
    local plain = dir .. '/plain'
    support.write_file(plain, 'x')
    local out, code = support.sh(('TGL_CACHE_DIR=%q %q -v'):format(plain .. '/k', bin))
    assert.are.equal(0, code, out)
    assert.truthy(out:match('record: none'), out)
    assert.falsy(out:match('ignoring'), out)
    local got = rows(out)
    for _, n in ipairs(NAMES) do
      assert.truthy(({ fallback = 1, derived = 1 })[got[n].source], n .. ': ' .. got[n].source)
    end
    assert.are.equal('16', got['blas.thin_gemv_cols'].value)
    -- and a script runs on them
    local r, rc = support.sh(('TGL_CACHE_DIR=%q %q -e %q'):format(plain .. '/k', bin,
      "io.write(tostring((tgl.ones(3, 4):dot(tgl.ones(4)))[1]))"))
    assert.are.equal(0, rc, r)
    assert.are.equal('4', r)
  end)

  it('checks TGL_TUNE with the other TGL_* variables and shows the overrides', function()
    local out, code = support.sh(('TGL_TUNE=blas.nope=3 %q -e 1'):format(bin))
    assert.are.equal(1, code)
    assert.truthy(out:find("TGL_TUNE='blas.nope=3' is not valid", 1, true), out)
    out, code = support.sh(('TGL_TUNE=pool.spin_ns=never %q -e 1'):format(bin))
    assert.are.equal(1, code)
    out, code = support.sh(('TGL_TUNE=%q %q -v'):format(
      'blas.split_gemm=0, kernel.parallel_min=never', bin))
    assert.are.equal(0, code, out)
    local got = rows(out)
    assert.are.same({ value = '0', source = 'override' }, got['blas.split_gemm'])
    assert.are.same({ value = 'never', source = 'override' }, got['kernel.parallel_min'])
  end)

  it('tgl.config.tune refuses an unknown name or a bad value, naming it', function()
    local ok, err = pcall(function() tgl.config.tune = 'kernel.parallel_min=-4' end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find('kernel.parallel_min', 1, true), err)
    ok, err = pcall(function() tgl.config.tune = 'what=1' end)
    assert.is_false(ok)
    assert.truthy(tostring(err):find("unknown tunable 'what'", 1, true), err)
    assert.are.equal('', tgl.config.tune)
  end)
end)

describe('results do not depend on the thresholds', function()
  -- two threads whatever the machine; 'sync' compiles: both runs use the
  -- same (optimized) kernel code, not one tcc's and the other cc's
  local saved_threads, saved_compile
  setup(function()
    saved_threads, saved_compile = tgl.config.threads, tgl.config.compile
    tgl.config.threads, tgl.config.compile = 2, 'sync'
  end)
  teardown(function()
    tgl.config.tune = ''
    tgl.config.threads, tgl.config.compile = saved_threads, saved_compile
  end)

  -- split everything / nothing: every product over two threads, every
  -- kernel over two, the thin kernels for every width; then none of it
  local SPLIT = 'blas.split_gemm=0,blas.split_level2=0,kernel.parallel_min=0,blas.thin_gemv_cols=128'
  local WHOLE = 'blas.split_gemm=never,blas.split_level2=never,kernel.parallel_min=never,' ..
    'blas.thin_gemv_cols=0'

  local function run_with(tune, dtype, inputs)
    tgl.config.tune = tune
    local A, B = tgl.matrix('A', dtype), tgl.matrix('B', dtype)
    local v, u = tgl.vector('v', dtype), tgl.vector('u', dtype)
    local X = tgl.matrix('X', dtype)
    local outs = {
      A:dot(B),                         -- gemm
      A:dot(v),                         -- gemv
      u:dot(A),                         -- transposed gemv (the thin kernel's)
      tgl.outer(u, v) + A,              -- ger
      (X * 1.5 + 0.25) * X - X / 3,     -- an arithmetic elementwise kernel
      tgl.tanh(X * 1.5 + 0.25) * X,     -- a transcendental one
      tgl.sum(X * X, 2),                -- a reduction
      tgl.sum(X, 1),
    }
    local f = tgl.compile{ inputs = { A, B, v, u, X }, outputs = outs }
    return { f(unpack(inputs)) }
  end

  for _, dtype in ipairs({ 'float32', 'float64' }) do
    it('split or whole, thin or not, ' .. dtype, function()
      tgl.manual_seed(23)
      local m, k, n = 67, 45, 53
      local inputs = { tgl.randn(m, k):astype(dtype), tgl.randn(k, n):astype(dtype),
        tgl.randn(k):astype(dtype), tgl.randn(m):astype(dtype),
        tgl.randn(300, 701):astype(dtype) }
      local a = run_with(SPLIT, dtype, inputs)
      local b = run_with(WHOLE, dtype, inputs)
      local rtol = dtype == 'float32' and 2e-5 or 1e-12
      -- the arithmetic kernel is the same bit for bit however it is split;
      -- the tanh one was measured an ulp apart in places (float32: 6e-8):
      -- a kernel's vector and scalar paths for tanh need not agree to the
      -- bit, and a split moves which elements take which
      local names = { 'gemm', 'gemv', 'gemv_t', 'ger', 'elementwise', 'tanh', 'sum rows',
        'sum cols' }
      for i = 1, #a do
        if names[i] == 'elementwise' or names[i] == 'ger' then
          assert.are.equal(0, support.maxdiff(a[i], b[i]), names[i])
        else
          support.assert_close(b[i]:astype('float64'), a[i]:astype('float64'), rtol, rtol, names[i])
        end
      end
    end)
  end
end)
