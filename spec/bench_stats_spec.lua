-- bench_stats_spec.lua — the benchmarks' timing rules (bench/lib/stats.lua,
-- bench/lib/mlp_common.lua) on a fake clock: medians and spreads, repeats
-- that last at least the minimum time, chunks that never cross the end of
-- a pass; and the report (bench/lib/mlp_report.lua) on a made-up CSV: the
-- spread in every cell, "!" above 10%, "≈" when ranges overlap, the
-- tgl/tgl@base column.  No real timing: nothing here depends on the load.
package.path = 'bench/lib/?.lua;' .. package.path
local stats = require 'stats'
local common = require 'mlp_common'

local tmpdir = dofile('spec/support.lua').tmpdir('bench_stats_spec')

describe('bench stats', function()
  it('takes the median of an odd and an even number of values, and the spread in % of it', function()
    local s = stats.summary({ 5, 1, 4, 2, 3 })
    assert.are.equal(3, s.median)
    assert.are.equal(1, s.min)
    assert.are.equal(5, s.max)
    assert.are.equal(400 / 3, s.spread_pct)
    assert.are.equal(2.5, stats.summary({ 4, 1, 3, 2 }).median)
  end)

  it('says whether two min–max ranges overlap', function()
    assert.is_true(stats.overlap(stats.summary({ 1, 3 }), stats.summary({ 2, 5 })))
    assert.is_false(stats.overlap(stats.summary({ 1, 2 }), stats.summary({ 3, 5 })))
  end)

  it('times R repeats of at least min_time each, per iteration', function()
    local now = 0
    local function clock() return now end
    local s = stats.measure(function(n) now = now + n * 1e-6 end, clock, { repeats = 7, min_time = 0.5 })
    assert.are.equal(7, #s.values)
    assert.is_true(s.shortest >= 0.5)
    assert.is_true(math.abs(s.median - 1e-6) < 1e-12)
  end)

  it('formats a summary with its range and flags a spread above 10%', function()
    assert.are.equal('2.00 ms (1.90–2.10, 10%)', stats.format(stats.summary({ 1.9e-3, 2e-3, 2.1e-3 }), '%.2f', 1e3, 'ms'))
    assert.are.equal('2.0 (1.0–3.0, 100%) !', stats.format(stats.summary({ 1, 2, 3 }), '%.1f'))
  end)

  it('takes --repeats and --min-time out of the arguments', function()
    local r0, m0 = stats.REPEATS, stats.MIN_TIME
    local rest = stats.parse_args({ '2', '--repeats', '9', '--min-time', '0.25', 'x' })
    assert.are.same({ '2', 'x' }, rest)
    assert.are.equal(9, stats.REPEATS)
    assert.are.equal(0.25, stats.MIN_TIME)
    stats.REPEATS, stats.MIN_TIME = r0, m0
  end)
end)

describe('bench mlp timing protocol', function()
  -- A fake system: each step takes `dt` seconds of fake time; it records the
  -- chunks it is asked to run.
  local function fake(dt)
    local f = { now = 0, chunks = {} }
    f.clock = function() return f.now end
    f.run = function(k0, n)
      f.chunks[#f.chunks + 1] = { k0, n }
      f.now = f.now + n * dt
    end
    f.sync = function() end
    return f
  end

  it('runs the check pass over the whole data unless the budget cuts it', function()
    local f = fake(0.001)
    local r = common.check_pass(100, 0, f.clock, f.run, f.sync)
    assert.are.equal(100, r.steps)
    local g = fake(0.001)
    local c = common.check_pass(100, 0.02, g.clock, g.run, g.sync)
    assert.is_true(c.steps < 100 and c.seconds > 0.02)
  end)

  it('makes every repeat last at least min_time, and reports examples/s per repeat', function()
    local f = fake(0.002)                        -- 500 steps/s, batch 10: 5000 examples/s
    local r = common.timed_repeats(100, 10, 0, 500, 5, 0.5, f.clock, f.run, f.sync)
    assert.are.equal(5, #r.rates)
    for _, v in ipairs(r.rates) do assert.is_true(math.abs(v - 5000) < 1e-6) end
    assert.is_true(r.seconds >= 5 * 0.5)
    assert.is_true(math.abs(r.examples - r.seconds * 5000) < 1e-6)
  end)

  it('goes on from where the check pass stopped, in order, never across the end of a pass', function()
    local f = fake(0.002)
    common.timed_repeats(30, 1, 25, 500, 3, 0.1, f.clock, f.run, f.sync)
    local k = 25
    for _, c in ipairs(f.chunks) do
      assert.are.equal(k, c[1])
      assert.is_true(c[1] + c[2] <= 30)
      k = (c[1] + c[2]) % 30
    end
    assert.is_true(#f.chunks > 3)
  end)

  it('writes CSV rows with the header\'s columns, the median and the spread', function()
    local row = common.csv_row { system = 'tgl', variant = 'n_calls', model = 'logreg', batch = 10, threads = 1,
      rates = { 100, 300, 200 }, examples = 600, seconds = 3, check_examples = 6000, loss0 = 2, loss1 = 1 }
    local fields = {}
    for v in (row .. ','):gmatch('([^,]*),') do fields[#fields + 1] = v end
    assert.are.equal(#common.CSV_COLUMNS, #fields)
    local r = {}
    for i, c in ipairs(common.CSV_COLUMNS) do r[c] = fields[i] end
    assert.are.equal('200.0', r.examples_per_s)
    assert.are.equal('100.0', r.eps_min)
    assert.are.equal('300.0', r.eps_max)
    assert.are.equal('100.00', r.spread_pct)
    assert.are.equal('100.0;300.0;200.0', r.rates)
    assert.are.equal('yes', r.loss_down)
  end)
end)

describe('bench mlp report', function()
  local function report(rows, meta)
    local csv, metaf = tmpdir .. '/mlp.csv', tmpdir .. '/mlp_meta.csv'
    local f = assert(io.open(csv, 'w'))
    f:write(common.CSV_HEADER, '\n')
    for _, r in ipairs(rows) do
      f:write(common.csv_row { system = r[1], variant = r[2], model = 'mlp1', batch = 60, threads = 1, rates = r[3],
        examples = 1, seconds = 1, check_examples = 6000, loss0 = 2, loss1 = 1 }, '\n')
    end
    f:close()
    f = assert(io.open(metaf, 'w'))
    f:write('key,value\nrepeats,5\nmin_time,0.5\nsgemm.1,100\n', meta or '')
    f:close()
    local p = assert(io.popen(("'%s' bench/lib/mlp_report.lua '%s' '%s' '%s/mlp.md' '%s/mlp.svg' 2>&1"):format(
      os.getenv('TGL_BIN') or 'build/tgl', csv, metaf, tmpdir, tmpdir)))
    local out = p:read('*a')
    assert(p:close(), out)
    local line = out:match('\n(| 1 | mlp1 | 60 |[^\n]*)')
    assert(line, out)
    return line, out
  end

  it('shows each cell\'s spread, flags spreads above 10% and ratios whose ranges overlap', function()
    local line, out = report {
      { 'tgl', 'n_calls', { 100, 101, 102, 101, 100 } },
      { 'torch', 'eager', { 50, 80, 60, 60, 60 } },
      { 'numpy', 'numpy', { 99, 100, 101, 100, 100 } },
    }
    assert.truthy(line:find('| **101 (2%)** |', 1, true), line)
    assert.truthy(line:find('| 60 (50%)! |', 1, true), line)
    assert.truthy(line:find('| numpy | 1.01× ≈ |', 1, true), line)
    assert.truthy(out:find('| 100–102 | 50–80 | 99–101 |', 1, true), out)
    assert.truthy(out:find('1 cell flagged', 1, true), out)
  end)

  it('flags a ratio one of whose cells is flagged', function()
    local line = report {
      { 'tgl', 'n_calls', { 200, 201, 202, 201, 200 } },
      { 'jax', 'loop', { 50, 80, 100, 100, 100 } },
    }
    assert.truthy(line:find('| jax/loop | 2.01×! |', 1, true), line)
  end)

  it('adds tgl/tgl@base with a baseline, and keeps tgl@base out of the peers', function()
    local line, out = report({
      { 'tgl', 'n_calls', { 200, 201, 202, 201, 200 } },
      { 'tgl@base', 'n_calls', { 100, 101, 102, 101, 100 } },
      { 'numpy', 'numpy', { 150, 150, 150, 150, 150 } },
    }, 'baseline_tgl,/x/tgl\nversion.tgl@base,0.1.0\n')
    assert.truthy(out:find('| tgl/best peer | tgl/tgl@base |', 1, true), out)
    assert.truthy(line:find('| numpy | 1.34× | 1.99× |', 1, true), line)
    assert.truthy(out:find('Baseline **tgl@base**: `/x/tgl`', 1, true), out)
  end)
end)
