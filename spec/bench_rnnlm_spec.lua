-- bench_rnnlm_spec.lua — `bench/run rnnlm` (bench/lib/rnnlm_run.sh) and its
-- parser and report (bench/lib/rnnlm_report.lua): RNNLM's training and
-- test output (samples written here by hand in RNNLM's output format:
-- carriage-return-separated progress lines, `VALID entropy:`, `PPL net:`),
-- examples/rnnlm.lua's RESULT line, failed runs, the table's ratios, and
-- RNNLM missing (never faked).  RNNLM itself is not needed: nothing here
-- runs it, and no timing is checked.
local BIN = os.getenv('TGL_BIN') or 'build/tgl'
local S = dofile('spec/support.lua')
local tmpdir = S.tmpdir('bench_rnnlm_spec')
local sh = S.sh
local function write(name, text)
  local path = tmpdir .. '/' .. name
  local f = assert(io.open(path, 'wb'))
  f:write(text)
  f:close()
  return path
end
local HEADER = 'system,mode,hidden,class,train_words,vocab,threads,words_per_s,valid_ppl,epochs,precision,wall_s,cpu_pct,note'
local function row(...)
  local args = { ... }
  for i, a in ipairs(args) do args[i] = "'" .. tostring(a) .. "'" end
  local out, code = sh(("'%s' bench/lib/rnnlm_report.lua --row %s"):format(BIN, table.concat(args, ' ')))
  assert.are.equal(0, code, out)
  local cols, vals = {}, {}
  for c in (HEADER .. ','):gmatch('([^,]*),') do cols[#cols + 1] = c end
  local line = out:match('([^\n]*)\n?$')
  local i = 0
  for v in (line .. ','):gmatch('([^,]*),') do i = i + 1; vals[cols[i]] = v end
  assert.are.equal(#cols, i, out)
  return vals
end

-- one epoch with -one-iter: the progress lines, then the epoch's last line
local CR = '\r'
local ONE_ITER = table.concat({
  'debug mode: 2', 'train file: train.txt', 'Training for one iteration', 'class size: 100',
  'Hidden layer size: 50', 'Starting training using file train.txt', 'Vocab size: 812',
  'Words in train file: 30000',
  'Iter:   0\tAlpha: 0.100000\t   ' .. CR ..
  'Iter:   0\tAlpha: 0.100000\t   TRAIN entropy: 9.1000    Progress: 33.33%   Words/sec: 41000.0 ' .. CR ..
  'Iter:   0\tAlpha: 0.100000\t   TRAIN entropy: 8.7000    Progress: 66.67%   Words/sec: 43000.5 ' .. CR ..
  'Iter:   0\tAlpha: 0.100000\t   TRAIN entropy: 8.5000    Words/sec: 44125.5   ', '' }, '\n')
local TEST = 'rnnlm file: model\n\ntest log probability: -5000.000000\n\nPPL net: 123.456789\n'
-- three epochs with validation (RNNLM's own schedule)
local CONVERGE = table.concat({
  'Vocab size: 812', 'Words in train file: 30000',
  'Iter:   0\tAlpha: 0.100000\t   ' .. CR ..
  'Iter:   0\tAlpha: 0.100000\t   TRAIN entropy: 9.0000    Progress: 50.00%   Words/sec: 39000.0 ' .. CR ..
  'Iter:   0\tAlpha: 0.100000\t   TRAIN entropy: 8.5000    Words/sec: 40000.0   VALID entropy: 8.0000',
  'Iter:   1\tAlpha: 0.100000\t   ' .. CR ..
  'Iter:   1\tAlpha: 0.100000\t   TRAIN entropy: 8.0000    Words/sec: 20000.0   VALID entropy: 7.0000',
  'Iter:   2\tAlpha: 0.050000\t   ' .. CR ..
  'Iter:   2\tAlpha: 0.050000\t   TRAIN entropy: 7.9000    Words/sec: 40000.0   VALID entropy: 7.5000', '' }, '\n')

describe('bench rnnlm: parsing RNNLM\'s and tgl\'s output', function()
  it('reads a one-epoch RNNLM run: its last Words/sec and the -test perplexity', function()
    local r = row('rnnlm', 'one_iter', 50, 100, 29000, 3, 99, 0, write('one.log', ONE_ITER), write('test.log', TEST))
    assert.are.equal('44125.5', r.words_per_s)
    assert.are.equal('123.457', r.valid_ppl)
    assert.are.equal('1', r.epochs)
    assert.are.equal('812', r.vocab)
    assert.are.equal('30000', r.train_words)        -- RNNLM's own count wins over the driver's
    assert.are.equal('float64', r.precision)
    assert.are.equal('', r.note)
    assert.are.equal('99', r.cpu_pct)
  end)

  it('reads a run to convergence: all epochs\' speed together, the best validation entropy', function()
    local r = row('rnnlm', 'converge', 100, 100, 30000, 9, 99, 0, write('conv.log', CONVERGE))
    -- equal words per epoch: 3 / (1/40000 + 1/20000 + 1/40000) = 30000
    assert.are.equal('30000', r.words_per_s)
    assert.are.equal('128', r.valid_ppl)             -- 2^7, the kept model's
    assert.are.equal('3', r.epochs)
  end)

  it('says why when RNNLM printed no figure, or failed, and gives no number', function()
    local r = row('rnnlm', 'one_iter', 50, 1, 100, 1, 99, 0, write('empty.log', 'Vocab size: 3\n'))
    assert.are.equal('', r.words_per_s)
    assert.is_truthy(r.note:find('no Words/sec', 1, true), r.note)
    r = row('rnnlm', 'one_iter', 50, 1, 100, 1, 99, 0, write('one2.log', ONE_ITER), write('bad.log', 'oops\n'))
    assert.are.equal('', r.valid_ppl)
    assert.is_truthy(r.note:find('PPL net', 1, true), r.note)
    r = row('rnnlm', 'one_iter', 500, 1, 100, 3600, 99, 124, write('one3.log', ONE_ITER))
    assert.are.equal('', r.words_per_s)
    assert.is_truthy(r.note:find('exit status 124 (timeout)', 1, true), r.note)
  end)

  it('reads tgl\'s RESULT line', function()
    local log = write('tgl.log', 'epoch 1 valid ppl 300\n' ..
      'RESULT words_per_s=51234.5 valid_ppl=201.25 epochs=1 precision=float32 threads=1\n')
    local r = row('tgl', 'one_iter', 100, 100, 30000, 2, 99, 0, log)
    assert.are.equal('51234.5', r.words_per_s)
    assert.are.equal('201.25', r.valid_ppl)
    assert.are.equal('float32', r.precision)
    r = row('tgl', 'one_iter', 100, 100, 30000, 2, 99, 1, write('tgl2.log', 'lua error\n'))
    assert.are.equal('', r.words_per_s)
    assert.is_truthy(r.note:find('exit status 1; no RESULT line', 1, true), r.note)
  end)
end)

describe('bench rnnlm report', function()
  it('gives tgl/RNNLM speed and perplexity ratios per cell, and the precisions', function()
    local csv = write('rnnlm.csv', HEADER .. '\n' ..
      'tgl,one_iter,50,100,30000,,1,60000,210,1,float32,1,97,\n' ..
      'rnnlm,one_iter,50,100,30000,812,1,40000,200,1,float64,1,99,\n' ..
      'rnnlm,one_iter,500,1,30000,812,1,500,190,1,float64,60,100,\n' ..
      'tgl,one_iter,500,1,30000,,1,,,,,5,,exit status 1; no RESULT line\n')
    local meta = write('rnnlm_meta.csv', 'key,value\ndate,today\ntgl_precision,float32\n' ..
      'rnnlm_cflags,g++ -O2\nversion.rnnlm,0.3d\nload_before,0.1 0.2 0.3\n')
    local out, code = sh(("'%s' bench/lib/rnnlm_report.lua '%s' '%s' '%s/rnnlm.md' '%s/rnnlm.svg'"):format(
      BIN, csv, meta, tmpdir, tmpdir))
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find('| 100 | 50 | 30000 | 812 | 60000 | 40000 | 1.50× | 210.00 | 200.00 | 1.050 | 1, 1 | 97, 99 |  |',
      1, true), out)
    assert.is_truthy(out:find('| 1 | 500 | 30000 | 812 | failed | 500 | – | – | 190.00 | – |', 1, true), out)
    assert.is_truthy(out:find('double precision', 1, true), out)
    assert.is_truthy(out:find('computes in float32', 1, true), out)
    assert.is_truthy(out:find('`g++ -O2`', 1, true), out)
    local f = assert(io.open(tmpdir .. '/rnnlm.svg'))
    assert.is_truthy(f:read('*a'):find('<svg', 1, true))
    f:close()
  end)
end)

describe('bench/run rnnlm without RNNLM', function()
  local function run(env)
    return sh(("%s TGL='%s' bench/run rnnlm --systems rnnlm --out '%s/out'"):format(env, BIN, tmpdir))
  end

  it('reports RNNLM=PATH that is not there as missing, in the output and the report', function()
    local out, code = run("RNNLM='" .. tmpdir .. "/no-such-rnnlm'")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find('rnnlm: missing (RNNLM=' .. tmpdir .. '/no-such-rnnlm is not an executable file)', 1, true), out)
    local f = assert(io.open(tmpdir .. '/out/rnnlm.md'))
    local md = f:read('*a')
    f:close()
    assert.is_truthy(md:find('rnnlm: missing', 1, true), md)
    assert.is_falsy(md:find('| 100 |', 1, true), md)   -- no figure for it
  end)

  it('reports no rnnlm on PATH as missing', function()
    local out, code = run("env -u RNNLM PATH='" .. tmpdir .. "/empty:/usr/bin:/bin'")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find('rnnlm: missing (not found: set RNNLM=', 1, true), out)
  end)

  it('does not take another program for RNNLM', function()
    local out, code = run("RNNLM=/bin/true")
    assert.are.equal(0, code, out)
    assert.is_truthy(out:find("rnnlm: missing (/bin/true does not print RNNLM's banner", 1, true), out)
  end)
end)
