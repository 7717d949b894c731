-- bench_rnn_spec.lua — bench/rnn.lua (the paper's Elman RNN grid) and its
-- report: the script's rows on a very small cell have the header's columns
-- and the loss falls; --make-data writes the files the peers read, and the
-- script gives the same rows from them as from memory; the report
-- (bench/lib/rnn_report.lua) on a made-up CSV: ratios to the best peer,
-- the loss check (down, agreement), the profile table, the chart.  No
-- timing is checked: nothing here depends on the load.
local BIN = os.getenv('TGL_BIN') or 'build/tgl'
local S = dofile('spec/support.lua')
local tmpdir = S.tmpdir('bench_rnn_spec')
local sh = S.sh
local function fields(line)
  local f = {}
  for v in (line .. ','):gmatch('([^,]*),') do f[#f + 1] = v end
  return f
end

local HEADER = 'system,variant,hidden,vocab,threads,unit,median,min,max,spread_pct,repeats,values,' ..
               'loss_before,loss_after,note'

describe('bench/rnn.lua', function()
  local function rows_of(out)
    local r = {}
    for l in out:gmatch('[^\n]+') do
      if not l:match('^#') and l ~= HEADER then r[#r + 1] = fields(l) end
    end
    return r
  end
  local RUN = "'%s' bench/rnn.lua --csv --header --hidden 8 --vocab 5 --repeats 1 --min-time 0.01 %s"

  it('prints CSV rows with the header\'s columns, and the loss falls', function()
    local out, code = sh(RUN:format(BIN, ''))
    assert.are.equal(0, code, out)
    assert.are.equal(HEADER, out:match('^[^\n]*'))
    local n = select(2, HEADER:gsub(',', ''))
    local rows = rows_of(out)
    assert.are.equal(2, #rows, out)
    local seen = {}
    for _, f in ipairs(rows) do
      assert.are.equal(n + 1, #f, table.concat(f, ','))
      seen[f[2]] = f
      assert.are.equal('8', f[3]); assert.are.equal('5', f[4]); assert.are.equal('steps/s', f[6])
      assert.is_true(tonumber(f[7]) > 0)
      -- the loss at the start is near log(5) (small initial weights), and falls
      local l0, l1 = tonumber(f[13]), tonumber(f[14])
      assert.is_true(math.abs(l0 - math.log(5)) < 0.3, f[13])
      assert.is_true(l1 < l0, out)
    end
    assert.is_truthy(seen.trust_input and seen.n_calls, out)
  end)

  it('writes the data files the peers read, and runs the same from them', function()
    local dir = tmpdir .. '/data'
    local out, code = sh(("'%s' bench/rnn.lua --make-data '%s' --hidden 8 --vocab 5"):format(BIN, dir))
    assert.are.equal(0, code, out)
    local d = tgl.load(dir .. '/rnn_V5.npz')
    assert.are.same({ 100, 100 }, d.x:shape())
    assert.are.equal('int32', d.x.dtype)
    -- 0-based ids in 0..V-1, both values at the ends present
    assert.are.equal(0, tgl.min(d.y):get()); assert.are.equal(4, tgl.max(d.x):get())
    local w = tgl.load(dir .. '/rnn_H8_V5.npz')
    assert.are.same({ 5, 8 }, w.Wx:shape()); assert.are.same({ 8, 8 }, w.Wh:shape())
    assert.are.same({ 8, 5 }, w.Wy:shape()); assert.are.equal('float32', w.Wy.dtype)
    local a = rows_of((sh(RUN:format(BIN, ''))))
    local b = rows_of((sh(RUN:format(BIN, "--data '" .. dir .. "'"))))
    assert.are.equal(a[1][13], b[1][13]); assert.are.equal(a[1][14], b[1][14])
  end)

  it('says what was wrong with a bad size', function()
    local out, code = sh(("'%s' bench/rnn.lua --hidden 8,x --vocab 5"):format(BIN))
    assert.are_not.equal(0, code)
    assert.is_truthy(out:find('--hidden: "x" is not a positive integer', 1, true), out)
  end)
end)

describe('bench rnn report', function()
  local ROWS = {
    'tgl,trust_input,50,10,1,steps/s,500000,490000,510000,4,5,x,2.39,2.36,',
    'tgl,n_calls,50,10,1,steps/s,600000,590000,610000,3,5,x,2.39,2.36,',
    'jax,jit,50,10,1,steps/s,300000,290000,310000,6,5,x,2.39,2.36,',
    'torch,eager,50,10,1,steps/s,30000,29000,31000,6,5,x,2.39,2.36,',
    'pytensor,trust_input,50,10,1,steps/s,200000,199000,201000,1,5,x,2.39,2.360001,',
    'tgl,trust_input,500,10,1,steps/s,20000,15000,25000,50,5,x,2.38,2.39,',
    'jax,jit,500,10,1,steps/s,22000,21000,23000,9,5,x,2.38,2.28,',
  }
  local function report(lines, profile)
    local csv, metaf = tmpdir .. '/rnn.csv', tmpdir .. '/rnn_meta.csv'
    local f = assert(io.open(csv, 'w'))
    f:write(HEADER, '\n', table.concat(lines, '\n'), '\n')
    f:close()
    f = assert(io.open(metaf, 'w'))
    f:write('key,value\nrepeats,5\nmin_time,0.5\nbudget,20\nload_before,0.1 0.2 0.3\n')
    f:close()
    os.remove(tmpdir .. '/rnn_profile.csv')
    if profile then
      f = assert(io.open(tmpdir .. '/rnn_profile.csv', 'w'))
      f:write('hidden,vocab,threads,op,share_pct,us_per_seq\n', profile)
      f:close()
    end
    local out, code = sh(("'%s' bench/lib/rnn_report.lua '%s' '%s' '%s/rnn.md'"):format(BIN, csv, metaf, tmpdir))
    assert.are.equal(0, code, out)
    return out
  end

  it('gives tgl\'s best variant over the best peer, and over PyTorch', function()
    local out = report(ROWS)
    local line = out:match('\n(| 50 | 10 | [^\n]*)')
    assert.is_truthy(line, out)
    assert.is_truthy(line:find('| 2.00× (jax) | 20.00× |', 1, true), line)
    -- a missing variant is a dash; tgl/trust_input's spread above 10% is flagged, ranges overlap
    line = out:match('\n(| 500 | 10 | [^\n]*)')
    assert.is_truthy(line:find('20000 (50%)!', 1, true), line)
    assert.is_truthy(line:find('| – |', 1, true), line)
    assert.is_truthy(line:find('0.91× ≈! (jax)', 1, true), line)
  end)

  it('checks that tgl\'s loss went down and the peers agree', function()
    local out = report(ROWS)
    assert.is_truthy(out:find('| 1 | 50 | 10 | 2.390000 | 2.360000 | yes | jax agrees', 1, true), out)
    assert.is_truthy(out:find('pytensor agrees (4e-07)', 1, true), out)
    assert.is_truthy(out:find('| 1 | 500 | 10 | 2.380000 | 2.390000 | **NO** | jax **DIFFERS**', 1, true), out)
    assert.is_truthy(out:find('**2 problem(s)**', 1, true), out)
  end)

  it('lists the profile\'s top ops and draws the chart', function()
    local out = report(ROWS, '50,10,1,scan,70.0,115\n50,10,1,gemm,7.0,11\n50,10,1,log_softmax,5.5,8\n')
    assert.is_truthy(out:find('| 1 | 50 | 10 | scan 70% (115), gemm 7% (11), log_softmax 6% (8) |', 1, true) or
                     out:find('| 1 | 50 | 10 | scan 70% (115), gemm 7% (11), log_softmax 5% (8) |', 1, true), out)
    local f = assert(io.open(tmpdir .. '/rnn.svg'))
    local s = f:read('*a')
    f:close()
    assert.is_truthy(s:find('<svg', 1, true))
    assert.is_truthy(s:find('tgl/n_calls H 50 V 10: 600000 steps/s', 1, true), s)
  end)
end)
