-- bench_scan_spec.lua — bench/scan.lua and its report, and the tgl.scan
-- examples: the report (bench/lib/scan_report.lua) on a made-up CSV (speed
-- ratios whichever way the unit goes, "≈" and "!", the loss check, the
-- memory table, a missing variant); bench/scan.lua's rows have the header's
-- columns; every examples/*scan*/rnn/lstm script runs and passes its own
-- checks, and examples/hf_rnn_addition.lua runs on a short budget.  No timing is checked: nothing here depends on the load.
local BIN = os.getenv('TGL_BIN') or 'build/tgl'
local S = dofile('spec/support.lua')
local tmpdir = S.tmpdir('bench_scan_spec')
local sh = S.sh

local HEADER = 'system,variant,case,threads,unit,median,min,max,spread_pct,repeats,values,loss_before,loss_after,note'

describe('bench scan report', function()
  local function report(lines, meta)
    local csv, metaf = tmpdir .. '/scan.csv', tmpdir .. '/scan_meta.csv'
    local f = assert(io.open(csv, 'w'))
    f:write(HEADER, '\n', table.concat(lines, '\n'), '\n')
    f:close()
    f = assert(io.open(metaf, 'w'))
    f:write('key,value\nrepeats,5\nmin_time,0.5\nload_before,0.1 0.2 0.3\n', meta or '')
    f:close()
    local out, code = sh(("'%s' bench/lib/scan_report.lua '%s' '%s' '%s/scan.md'"):format(BIN, csv, metaf, tmpdir))
    assert.are.equal(0, code, out)
    return out
  end

  local ROWS = {
    'tgl,scan,overhead,1,ns/step,100,95,105,10,5,95;100;105;100;100,,,',
    'jax,scan,overhead,1,ns/step,2,1.9,2.1,10,5,1.9;2;2.1;2;2,,,',
    'torch,py_loop,overhead,1,ns/step,2000,1900,2100,10,5,1900;2000;2100;2000;2000,,,',
    'tgl,trust_input,rnn,1,steps/s,100000,99000,101000,2,5,x,0.9,0.78,',
    'tgl,n_calls,rnn,1,steps/s,110000,108000,130000,20,5,x,0.9,0.78,',
    'jax,jit,rnn,1,steps/s,200000,199000,201000,1,5,x,0.9,0.780001,',
    'torch,eager,rnn,1,steps/s,20000,19000,21000,10,5,x,0.9,0.7,',
    'tgl,baseline,memory,1,MiB,10,10,10,0,1,10,,,call 0.000 s',
    'tgl,default,memory,1,MiB,11,11,11,0,1,11,,,call 0.040 s',
    'tgl,no_save_mem,memory,1,MiB,774,774,774,0,1,774,,,call 0.500 s',
  }

  it('gives speed ratios: tgl scan over each overhead row (lower ns is faster)', function()
    local out = report(ROWS)
    assert.is_truthy(out:find('| jax | scan | 1 | 2 (10%) | 1.9–2.1 | 0.02× |', 1, true), out)
    assert.is_truthy(out:find('| torch | py_loop | 1 | 2000 (10%) | 1900–2100 | 20.00× |', 1, true), out)
  end)

  it('compares the best variants in the RNN table, with ! and ≈', function()
    local out = report(ROWS)
    local line = out:match('\n(| 1 | [^\n]*)')
    assert.is_truthy(line, out)
    -- tgl's best is n_calls (110000, spread 20%: flagged); jax 200000; torch 20000
    assert.is_truthy(line:find('110000 (20%)!', 1, true), line)
    assert.is_truthy(line:find('| 0.55×! |', 1, true), line)
    assert.is_truthy(line:find('| 5.50×! |', 1, true), line)
  end)

  it('checks the peers\' losses against tgl\'s', function()
    local out = report(ROWS)
    assert.is_truthy(out:find('| tgl | 1 | 0.900000 | 0.780000 | reference |', 1, true), out)
    assert.is_truthy(out:find('| jax | 1 | 0.900000 | 0.780001 | agrees', 1, true), out)
    assert.is_truthy(out:find('| torch | 1 | 0.900000 | 0.700000 | **DIFFERS**', 1, true), out)
  end)

  it('shows the memory table over the baseline, and variants that did not run', function()
    local out = report(ROWS, 'missing_variant.tgl/no_save_mem,no rule\n')
    assert.is_truthy(out:find('| no_save_mem | 774.0 | 764.0 | call 0.500 s |', 1, true), out)
    assert.is_truthy(out:find('tgl/no_save_mem: not run (no rule)', 1, true), out)
  end)
end)

describe('bench/scan.lua', function()
  it('prints CSV rows with the header\'s columns, and the RNN\'s loss goes down', function()
    local out, code = sh(("'%s' bench/scan.lua --csv --header --cases overhead,rnn --repeats 1 --min-time 0.01")
                         :format(BIN))
    assert.are.equal(0, code, out)
    local lines = {}
    for l in out:gmatch('[^\n]+') do lines[#lines + 1] = l end
    assert.are.equal(HEADER, lines[1])
    local n = select(2, HEADER:gsub(',', ''))
    local seen = {}
    for i = 2, #lines do
      assert.are.equal(n, select(2, lines[i]:gsub(',', '')), lines[i])
      local f = {}
      for v in (lines[i] .. ','):gmatch('([^,]*),') do f[#f + 1] = v end
      seen[f[2] .. '/' .. f[3]] = f
    end
    assert.is_truthy(seen['scan/overhead'] and seen['lua_loop/overhead'], out)
    local r = seen['trust_input/rnn']
    assert.is_truthy(r and seen['n_calls/rnn'], out)
    assert.is_true(tonumber(r[13]) < tonumber(r[12]), out)
  end)
end)

describe('the scan examples', function()
  for _, name in ipairs({ 'scan_polynomial', 'scan_power_iteration', 'rnn_elman', 'lstm_scan' }) do
    it('examples/' .. name .. '.lua runs and passes its checks', function()
      local out, code = sh(("'%s' examples/%s.lua"):format(BIN, name))
      assert.are.equal(0, code, out)
    end)
  end
  it('examples/hf_rnn_addition.lua runs on a short budget and writes its curve', function()
    -- HF vs SGD on the addition problem, 1 s each on 10-step sequences
    -- (the figures of doc/optim.md need --seconds 30 and more; not checked here)
    local dir = tmpdir .. '/hf_rnn'
    local out, code = sh(("'%s' examples/hf_rnn_addition.lua --seconds 1 --T 10 --train 2000 --out '%s'")
                         :format(BIN, dir))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find('HF:  %d+ steps'), out)
    assert.is_truthy(out:find('SGD: %d+ steps'), out)
    -- the table's last row and the summary quote one figure per method
    local hf_end, sgd_end = out:match('\n +end +([%d.]+) +([%d.]+)\n')
    assert.is_truthy(hf_end, out)
    assert.are.equal(hf_end, out:match('HF: [^\n]*validation MSE ([%d.]+)'))
    assert.are.equal(sgd_end, out:match('SGD: [^\n]*validation MSE ([%d.]+)'))
    local f = io.open(dir .. '/curve.svg')
    assert.is_truthy(f, 'no curve.svg')
    assert.is_truthy(f:read('*a'):find('Hessian%-free'))
    f:close()
  end)
end)
