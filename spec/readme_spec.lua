-- readme_spec.lua — the README tells the truth: the files and scripts it
-- names exist, its REPL transcript ("A taste") prints what it shows when
-- typed into `tgl -i`, every doc link resolves, and the measurement tables
-- quote figures under the labels the named scripts print (so a renamed or
-- removed row in a script fails here instead of leaving a stale table).
local BIN = os.getenv('TGL_BIN') or arg[-1]

local function read(path)
  local f = assert(io.open(path))
  local s = f:read('*a')
  f:close()
  return s
end

local function exists(path)
  local f = io.open(path)
  if f then f:close() end
  return f ~= nil
end

local README = read('README.md')

describe('the README', function()
  it('names only files that exist (scripts, examples, bench scripts, docs)', function()
    local missing = {}
    for path in README:gmatch('%f[%w/_.-]((%a[%w_-]*)/[%w_./-]*%.[%a]+)') do
      path = path:gsub('[.,;:]$', '')
      if (path:match('^scripts/') or path:match('^examples/') or path:match('^bench/') or
          path:match('^doc/') or path:match('^include/')) and not exists(path) then
        missing[#missing + 1] = path
      end
    end
    assert.same({}, missing)
    -- links of the form [text](target)
    for target in README:gmatch('%]%(([^)#]+)[)#]') do
      if not target:match('^https?:') then
        assert.is_true(exists(target), 'README links to a missing ' .. target)
      end
    end
  end)

  it('points at no file outside the project', function()
    assert.is_nil(README:find('../shared', 1, true))
  end)

  it("'A taste' prints what it shows when typed into the REPL", function()
    local block = README:match('## A taste\n\n(.-)\n\n[^ ]')
    assert.is_truthy(block, 'no A taste block')
    local input, want = {}, {}
    for line in block:gmatch('[^\n]+') do
      local typed = line:match('^    > (.*)$')
      if typed then input[#input + 1] = typed
      elseif not line:match('^    %$') then want[#want + 1] = line:gsub('^    ', '') end
    end
    local tmp = os.tmpname()
    local f = assert(io.open(tmp, 'w'))
    f:write(table.concat(input, '\n'), '\n')
    f:close()
    local p = io.popen(('%q -i < %q 2>&1'):format(BIN, tmp))
    local out = p:read('*a')
    p:close()
    os.remove(tmp)
    for _, w in ipairs(want) do
      assert.is_truthy(out:find(w, 1, true), ('expected %q in:\n%s'):format(w, out))
    end
  end)

  it('quotes measurement rows under labels the named scripts print', function()
    local overhead, fusion, compile = read('bench/overhead.lua'), read('bench/fusion.lua'),
                                      read('bench/compile.lua')
    for _, label in ipairs { 'call (', 'call, trust_input (', 'CVM cost per instruction' } do
      assert.is_truthy(overhead:find(label, 1, true), 'bench/overhead.lua prints no ' .. label)
    end
    for _, label in ipairs { 'fused kernel', 'kernel alone (fn)', 'compiled, unfused',
                             'eager, op by op' } do
      assert.is_truthy(fusion:find(label, 1, true), 'bench/fusion.lua prints no ' .. label)
    end
    for _, label in ipairs { 'graph', 'tgl.compile', 'first call', 'all kernels ready' } do
      assert.is_truthy(compile:find("'" .. label .. "'", 1, true),
                       'bench/compile.lua prints no column ' .. label)
      assert.is_truthy(README:find(label, 1, true), 'the README has no column ' .. label)
    end
    assert.is_truthy(README:find('kernel alone', 1, true))
  end)

  it('quotes the MLP table from bench/results/mlp.csv (and mlp_2t.csv)', function()
    -- mlp_2t.csv, where present, is a later two-thread run of the same
    -- script (the README says which build each row is from)
    local ok, csv2 = pcall(read, 'bench/results/mlp_2t.csv')
    local csv = read('bench/results/mlp.csv') .. (ok and csv2 or '')
    -- every tgl best-variant figure in the README's table is a median in the CSV
    local medians = {}
    for sys, variant, model, batch, threads, eps in
        csv:gmatch('\n([%w@]+),([%w_]+),(%w+),(%d+),(%d+),%d+,[%d.]+,([%d.]+)') do
      medians[#medians + 1] = { sys = sys, variant = variant, model = model, batch = batch,
                                threads = threads, eps = tonumber(eps) }
    end
    assert.is_true(#medians > 0)
    local rows = 0
    for threads, model, batch, fig, variant in
        README:gmatch('\n| (%d) | (%w+) | (%d+) | ([%d.]+[kM]?) %(([%w_]+), %d+%%%)') do
      rows = rows + 1
      local scale = fig:match('k$') and 1e3 or fig:match('M$') and 1e6 or 1
      local v = tonumber((fig:gsub('[kM]$', ''))) * scale
      local found = false
      for _, m in ipairs(medians) do
        if m.sys == 'tgl' and m.variant == variant and m.model == model and m.batch == batch and
           m.threads == threads and math.abs(m.eps - v) <= 0.051 * m.eps then
          found = true
        end
      end
      assert.is_true(found, ('README cell %s %s %s %s (%s) is not in mlp.csv'):format(
        threads, model, batch, fig, variant))
    end
    assert.equals(24, rows)
  end)
end)
