-- bench_nn_spec.lua — `bench/run nn`'s pieces: the Torch7 training script
-- bench/peers/nn_torch7.lua runs unchanged under tgl (CmdLine options,
-- torch.randn data, LongTensor labels, narrow minibatches, Timer, nn) and
-- prints a CSV row whose loss falls; bench/nn.lua's eager and compile
-- variants print rows from the same numbers (the Torch7 script on tgl and
-- tgl's eager loop start from the same loss); the report
-- (bench/lib/nn_report.lua) on a made-up CSV: columns, ratios, missing
-- systems, the chart.  No timing is checked: nothing here depends on the
-- load.
local BIN = os.getenv('TGL_BIN') or 'build/tgl'
local S = dofile('spec/support.lua')
local tmpdir = S.tmpdir('bench_nn_spec')
local sh = S.sh
local HEADER = 'system,variant,model,batch,threads,examples,seconds,examples_per_s,eps_min,eps_max,' ..
               'spread_pct,repeats,rates,check_examples,loss_before,loss_after,loss_down'
local NCOL = select(2, HEADER:gsub(',', '')) + 1

local function rows_of(out)
  local rows = {}
  for l in out:gmatch('[^\n]+') do
    if not l:match('^#') then
      local f = {}
      for v in (l .. ','):gmatch('([^,]*),') do f[#f + 1] = v end
      rows[#rows + 1] = f
    end
  end
  return rows
end

describe('bench/peers/nn_torch7.lua under tgl', function()
  it('runs unchanged and prints one row per batch size, the loss falling', function()
    local out, code = sh(("'%s' bench/peers/nn_torch7.lua -model logreg -batches 10,20 -repeats 2 "
      .. "-mintime 0.01 -system tgl -variant t7script"):format(BIN))
    assert.are.equal(0, code, out)
    local rows = rows_of(out)
    assert.are.equal(2, #rows, out)
    for i, f in ipairs(rows) do
      assert.are.equal(NCOL, #f, table.concat(f, ','))
      assert.are.same({ 'tgl', 't7script', 'logreg', i == 1 and '10' or '20', '1' }, { unpack(f, 1, 5) })
      assert.is_true(tonumber(f[8]) > 0)
      assert.are.equal('2', f[12])
      assert.are.equal('6000', f[14])                     -- a whole check pass
      assert.are.equal('yes', f[17], table.concat(f, ','))
      assert.is_true(math.abs(tonumber(f[15]) - math.log(10)) < 0.5, f[15])
    end
  end)

  it('trains the CNN (conv, pool, View with setNumInputDims) and takes -h', function()
    local out, code = sh(("'%s' bench/peers/nn_torch7.lua -model cnn -batches 20 -examples 400 -repeats 1 "
      .. "-mintime 0.01 -system tgl -variant t7script"):format(BIN))
    assert.are.equal(0, code, out)
    local f = rows_of(out)[1]
    assert.are.same({ 'tgl', 't7script', 'cnn', '20' }, { unpack(f, 1, 4) })
    assert.are.equal('400', f[14])
    assert.is_true(tonumber(f[16]) < tonumber(f[15]), out)
    out, code = sh(("'%s' bench/peers/nn_torch7.lua -h"):format(BIN))
    assert.are.equal(0, code, out)
    assert.matches('-model', out, 1, true)
    assert.matches('logreg | mlp1 | mlp3 | cnn', out, 1, true)
  end)
end)

describe('bench/nn.lua', function()
  it('prints eager and compile rows; eager starts from the Torch7 script\'s loss', function()
    local out, code = sh(("'%s' bench/nn.lua --header --models logreg --batches 10 --repeats 1 --min-time 0.01"):format(BIN))
    assert.are.equal(0, code, out)
    assert.are.equal(HEADER, out:match('^[^\n]*'))
    local rows = rows_of(out:gsub('^[^\n]*\n', ''))
    local by = {}
    for _, f in ipairs(rows) do
      assert.are.equal(NCOL, #f, table.concat(f, ','))
      by[f[2]] = f
      assert.are.equal('yes', f[17])
    end
    assert.is_truthy(by.eager and by.compile, out)
    -- both variants start from the same weights and data
    assert.are.equal(by.eager[15], by.compile[15])
    local t7, code2 = sh(("'%s' bench/peers/nn_torch7.lua -model logreg -batches 10 -repeats 1 -mintime 0.01"):format(BIN))
    assert.are.equal(0, code2, t7)
    assert.are.equal(by.eager[15], rows_of(t7)[1][15])
  end)
end)

describe('bench/lib/nn_report.lua', function()
  it('writes the table with every column, the ratios and the missing systems, and the chart', function()
    local csv = tmpdir .. '/nn.csv'
    local function row(sys, var, m, B, eps, lo, hi)
      return ('%s,%s,%s,%d,1,1000,1.0,%.1f,%.1f,%.1f,%.2f,5,1;2;3;4;5,6000,2.3,2.2,yes'):format(
        sys, var, m, B, eps, lo, hi, 100 * (hi - lo) / eps)
    end
    S.write_file(csv, table.concat({ HEADER,
      row('torch7', 'nn', 'mlp1', 60, 1000, 990, 1010),
      row('tgl', 't7script', 'mlp1', 60, 1500, 1490, 1510),
      row('tgl', 'eager', 'mlp1', 60, 1800, 1790, 1810),
      row('tgl', 'compile', 'mlp1', 60, 2000, 1990, 2010),
      row('torch', 'eager', 'mlp1', 60, 2000, 1950, 2050),
      row('tgl', 'eager', 'cnn', 60, 100, 80, 120),
    }, '\n') .. '\n')
    S.write_file(tmpdir .. '/nn_meta.csv', 'key,value\ndate,today\nrepeats,5\nmin_time,0.5\nbudget,2\n'
      .. 'version.tgl,0.1.0\nversion.torch,1.13\nmissing.torch7,no Torch7 here\n'
      .. 'load_before,1.0 1.0 1.0\nload_after,1.1 1.0 1.0\n')
    local out, code = sh(("'%s' bench/lib/nn_report.lua '%s' '%s' '%s'"):format(BIN, csv, tmpdir .. '/nn_meta.csv',
      tmpdir .. '/nn.md'))
    assert.are.equal(0, code, out)
    local md = S.read_file(tmpdir .. '/nn.md')
    assert.matches('| threads | model | batch | Torch7 nn | Torch7 script on tgl | tgl nn eager | tgl nn.compile | '
      .. 'PyTorch eager | script/T7 | compile/T7 | compile/PyTorch | eager/compile |', md, 1, true)
    -- mlp1: script/T7 1.50×, compile/T7 2.00×, compile/PyTorch 1.00× ≈ (ranges overlap), eager/compile 0.90×
    assert.matches('| 1 | mlp1 | 60 | 1000 (2%) | 1500 (1%) | 1800 (1%) | 2000 (1%) | 2000 (5%) | 1.50× | 2.00× | '
      .. '1.00× ≈ | 0.90× |', md, 1, true)
    -- the CNN row: one system, a flagged spread, no ratios
    assert.matches('| 1 | cnn | 60 | — | — | 100 (40%)! | — | — | — | — | — | — |', md, 1, true)
    assert.matches('Missing: **torch7** — no Torch7 here', md, 1, true)
    assert.matches('1 cell flagged', md, 1, true)
    assert.matches('largest difference of the losses before and after, 0 (mlp1 batch 60 threads 1)', md, 1, true)
    local svg = S.read_file(tmpdir .. '/nn.svg')
    assert.matches('<svg', svg, 1, true)
    assert.matches('Torch7 script on tgl, mlp1, batch 60, 1 thread(s): 1500 examples/s', svg, 1, true)
  end)
end)
