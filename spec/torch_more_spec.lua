-- spec/torch_more_spec.lua — the rest of lua/torch that Torch7 scripts use:
-- mm/mv/addmm/addmv/addr in their function and method forms (against
-- products computed here element by element), t[i] = v and t[i][j] = v,
-- the random fills and randperm, torch.save/torch.load round trips
-- (tables, sharing, special numbers, nn modules with equal outputs) and
-- their errors (missing, corrupt, foreign files; values that cannot be
-- saved), and nn.StochasticGradient against a hand-written loop (values,
-- printed lines, hooks, learning-rate decay).  float64 throughout.
tgl = tgl or require 'tgl'
local tgl = tgl
local S = dofile('spec/support.lua')
local torch = require 'torch'
local nn = require 'nn'

local function next_line() return debug.getinfo(2, 'l').currentline + 1 end

-- Element-by-element references on Lua tables.
local function tbl(a) return a:totable() end
local function ref_mm(a, b)
  local r = {}
  for i = 1, #a do
    r[i] = {}
    for j = 1, #b[1] do
      local s = 0
      for k = 1, #b do s = s + a[i][k] * b[k][j] end
      r[i][j] = s
    end
  end
  return r
end
local function ref_mv(a, v)
  local r = {}
  for i = 1, #a do
    local s = 0
    for k = 1, #v do s = s + a[i][k] * v[k] end
    r[i] = s
  end
  return r
end
local function lin(v1, M, v2, P)       -- v1*M + v2*P on nested tables
  if type(M) == 'number' then return v1 * M + v2 * P end
  local r = {}
  for i = 1, #M do r[i] = lin(v1, M[i], v2, P[i]) end
  return r
end

local function raises(f, pattern)
  local ok, e = pcall(f)
  assert.is_false(ok, 'expected an error matching ' .. pattern)
  assert.matches(pattern, tostring(e), 1, true)
  return e
end

describe("require 'nn'", function()
  it('sets the globals nn and torch, as Torch7 does (scripts use them without locals)', function()
    local out, err, code = S.run_process("require 'nn'; io.write(type(nn), ' ', type(torch), ' ', "
      .. "torch.type(nn.Linear(2, 3)), ' ', torch.type(torch.Tensor(1)))\n")
    assert.equals(0, code, err)
    assert.equals('table table nn.Linear torch.DoubleTensor', out)
  end)
end)

describe('torch products', function()
  local A = torch.Tensor({ { 1, 2, 3 }, { 4, 5, 6 } })            -- 2x3
  local B = torch.Tensor({ { 1, -1 }, { 2, 0.5 }, { -3, 4 } })     -- 3x2
  local AB = { { -4, 12 }, { -4, 22.5 } }

  it('mm: torch.mm(a, b), torch.mm(res, a, b), res:mm(a, b) (res resized)', function()
    S.assert_close(AB, torch.mm(A, B))
    local r = torch.Tensor(5)
    assert.equals(r, torch.mm(r, A, B))
    assert.same({ 2, 2 }, r:size())
    S.assert_close(AB, r)
    local r2 = torch.Tensor(2, 2)
    assert.equals(r2, r2:mm(A, B))
    S.assert_close(AB, r2)
  end)

  it('addmm: every function and method form', function()
    local M = torch.Tensor({ { 1, 2 }, { 3, 4 } })
    local Mt = tbl(M)
    S.assert_close(lin(1, Mt, 1, AB), torch.addmm(M, A, B))
    S.assert_close(lin(2, Mt, 3, AB), torch.addmm(2, M, 3, A, B))
    S.assert_close(lin(2, Mt, 1, AB), torch.addmm(2, M, A, B))
    S.assert_close(lin(1, Mt, 3, AB), torch.addmm(M, 3, A, B))
    S.assert_close(Mt, M)                                  -- the function form leaves M alone
    local res = torch.Tensor(2, 2)
    assert.equals(res, torch.addmm(res, 0.5, M, -1, A, B))
    S.assert_close(lin(0.5, Mt, -1, AB), res)
    -- methods
    local m1 = M:clone()
    assert.equals(m1, m1:addmm(A, B))                      -- M = M + A B
    S.assert_close(lin(1, Mt, 1, AB), m1)
    local m2 = M:clone()
    m2:addmm(2, 3, A, B)                                   -- M = 2 M + 3 A B
    S.assert_close(lin(2, Mt, 3, AB), m2)
    local m3 = M:clone()
    m3:addmm(3, A, B)                                      -- one number: v2
    S.assert_close(lin(1, Mt, 3, AB), m3)
    local r = torch.Tensor(2, 2):fill(99)
    r:addmm(M, A, B)                                       -- r = M + A B
    S.assert_close(lin(1, Mt, 1, AB), r)
    r:addmm(0.5, M, 2, A, B)                               -- r = 0.5 M + 2 A B
    S.assert_close(lin(0.5, Mt, 2, AB), r)
    S.assert_close(Mt, M)
  end)

  it('addmm on random shapes equals the element-by-element product', function()
    local rng = S.new_rng(2101)
    for _ = 1, 20 do
      local n, k, m = rng.int(1, 7), rng.int(1, 7), rng.int(1, 7)
      local a, b, M = torch.randn(n, k), torch.randn(k, m), torch.randn(n, m)
      local v1, v2 = rng.float() * 4 - 2, rng.float() * 4 - 2
      local want = lin(v1, tbl(M), v2, ref_mm(tbl(a), tbl(b)))
      S.assert_close(want, torch.addmm(v1, M, v2, a, b), 1e-12, 1e-12)
      -- a transposed view as a factor
      local bt = torch.randn(m, k):t()
      S.assert_close(lin(v1, tbl(M), v2, ref_mm(tbl(a), tbl(bt))), M:clone():addmm(v1, v2, a, bt), 1e-12, 1e-12)
    end
  end)

  it('mv and addmv', function()
    local v = torch.Tensor({ 1, 0, -2 })
    local Av = ref_mv(tbl(A), tbl(v))                      -- {-5, -8}
    S.assert_close({ -5, -8 }, Av)
    S.assert_close(Av, torch.mv(A, v))
    local r = torch.Tensor(2)
    r:mv(A, v)
    S.assert_close(Av, r)
    -- Torch7's documented example: x:addmv(M, y) with M 3x2 of 3, y of 2
    local x = torch.Tensor(3):fill(0)
    x:addmv(torch.Tensor(3, 2):fill(3), torch.Tensor(2):fill(2))
    S.assert_close({ 12, 12, 12 }, x)
    local y = torch.Tensor({ 1, 1 })
    S.assert_close(lin(2, { 1, 1 }, -1, Av), torch.addmv(2, y, -1, A, v))
    y:addmv(0.5, 2, A, v)
    S.assert_close(lin(0.5, { 1, 1 }, 2, Av), y)
  end)

  it("addr: the outer product (Torch7's documented example)", function()
    local x, y = torch.range(1, 3), torch.range(1, 2)
    local M = torch.Tensor(3, 2):zero()
    M:addr(x, y)
    S.assert_close({ { 1, 2 }, { 2, 4 }, { 3, 6 } }, M)
    M:addr(2, 1, x, y)
    S.assert_close({ { 3, 6 }, { 6, 12 }, { 9, 18 } }, M)
    S.assert_close({ { 1, 2 }, { 2, 4 }, { 3, 6 } }, torch.addr(torch.zeros(3, 2), x, y))
  end)

  it('errors name the function, the sizes and the line', function()
    local line = next_line()
    local e = raises(function() torch.mm(A, A) end, 'torch.mm: size mismatch: 2x3 times 2x3')
    assert.matches(':' .. line .. ':', e, 1, true)
    raises(function() torch.addmm(torch.zeros(3, 3), A, B) end, 'torch.addmm: the added tensor is 3x3, the product 2x2')
    raises(function() torch.Tensor(2):addmv(A, A) end, ':addmv: expected mat (2-d), vec2 (1-d), got 2-d and 2-d tensors')
    raises(function() A:clone():addmm('x', A, B) end, ':addmm: argument 1 must be a number or a tensor, got string')
    raises(function() torch.addr(torch.zeros(2, 2), A, B) end, 'torch.addr: expected vec1, vec2 (1-d)')
  end)
end)

describe('torch indexing and random fills', function()
  it('t[i][j] = v, t[i] = v (a row filled), t[i] = tensor (a row copied), 1-d t[i] = v', function()
    local t = torch.Tensor(3, 4)
    t[2][3] = 5
    assert.equals(5, t[2][3])
    t[1] = 7
    S.assert_close({ 7, 7, 7, 7 }, t[1])
    t[3] = torch.range(1, 4)
    S.assert_close({ { 7, 7, 7, 7 }, { 0, 0, 5, 0 }, { 1, 2, 3, 4 } }, t)
    local v = torch.LongTensor(3)
    v[2] = 4
    assert.equals(4, v[2])
    S.assert_close({ 0, 4, 0 }, v:double())
  end)

  it('uniform, normal, random fill in place within their ranges; manualSeed repeats them', function()
    torch.manualSeed(7)
    local u = torch.Tensor(1000):uniform(-2, 3)
    assert.is_true(torch.min(u) >= -2 and torch.max(u) < 3)
    assert.is_true(math.abs(torch.mean(u) - 0.5) < 0.2)
    local n = torch.Tensor(2000):normal(1, 2)
    assert.is_true(math.abs(torch.mean(n) - 1) < 0.2)
    local r = torch.LongTensor(1000):random(3, 5)
    local seen = {}
    for i = 1, 1000 do seen[r[i]] = true; assert.is_true(r[i] >= 3 and r[i] <= 5) end
    assert.same({ [3] = true, [4] = true, [5] = true }, seen)
    local r1 = torch.LongTensor(100):random(4)
    assert.is_true(torch.min(r1) >= 1 and torch.max(r1) <= 4)
    torch.manualSeed(7)
    S.assert_close(u, torch.Tensor(1000):uniform(-2, 3), 0, 0)
    raises(function() torch.Tensor(2):random(5, 1) end, ':random: expected integer bounds a <= b')
  end)

  it('randperm is a permutation of 1..n', function()
    for _, n in ipairs({ 1, 2, 10, 257 }) do
      local p = torch.randperm(n, 'torch.LongTensor')
      assert.equals('torch.LongTensor', torch.type(p))
      local seen = {}
      for i = 1, n do seen[p[i]] = (seen[p[i]] or 0) + 1 end
      for i = 1, n do assert.equals(1, seen[i]) end
    end
  end)
end)

describe('torch.save / torch.load', function()
  local dir = S.tmpdir('torch_more')

  it('round-trips nested tables of tensors, numbers, strings and booleans, keeping sharing', function()
    local a = torch.randn(3, 4)
    local inner = { 1, 'two' }
    local obj = {
      x = a, again = a, long = torch.LongTensor({ 1, -2, 3 }), byte = torch.ByteTensor({ 0, 255 }),
      f = torch.FloatTensor({ 0.5, 1.5 }), n = 3.14159265358979, big = 2 ^ 60, tiny = 5e-324,
      inf = math.huge, ninf = -math.huge, nan = 0 / 0, s = 'line one\nline two \0 bytes',
      empty = '', yes = true, no = false, list = { 1, 2, { 3, { a } } }, [7] = 'seven', [true] = 'T',
      i1 = inner, i2 = inner, z = torch.zeros(0),
    }
    obj.self = obj                                   -- a cycle
    local path = dir .. '/obj.t7'
    torch.save(path, obj)
    local o = torch.load(path)
    S.assert_close(a, o.x, 0, 0)
    assert.equals(o.x, o.again)                      -- one array, loaded once
    assert.equals(o.x, o.list[3][2][1])
    assert.equals('torch.LongTensor', torch.type(o.long))
    assert.same({ 1, -2, 3 }, o.long:totable())
    assert.equals('torch.ByteTensor', torch.type(o.byte))
    assert.same({ 0, 255 }, o.byte:totable())
    assert.equals('torch.FloatTensor', torch.type(o.f))
    assert.equals(3.14159265358979, o.n)
    assert.equals(2 ^ 60, o.big)
    assert.equals(5e-324, o.tiny)
    assert.equals(math.huge, o.inf)
    assert.equals(-math.huge, o.ninf)
    assert.is_true(o.nan ~= o.nan)
    assert.equals(obj.s, o.s)
    assert.equals('', o.empty)
    assert.is_true(o.yes); assert.is_false(o.no)
    assert.equals('seven', o[7]); assert.equals('T', o[true])
    assert.equals(o.i1, o.i2)
    assert.same({ 1, 'two' }, o.i1)
    assert.equals(o, o.self)
    assert.equals(0, o.z:nelement())
    -- a single tensor and a plain number as the whole object
    torch.save(dir .. '/t.t7', a)
    S.assert_close(a, torch.load(dir .. '/t.t7'), 0, 0)
    torch.save(dir .. '/n.t7', 42)
    assert.equals(42, torch.load(dir .. '/n.t7'))
  end)

  it('views (a transpose, a narrow, getParameters\' flat tensors) save their values', function()
    local a = torch.randn(3, 4)
    local m = nn.Sequential():add(nn.Linear(3, 2)):double()
    local flat = m:getParameters()
    torch.save(dir .. '/views.t7', { t = a:t(), n = a:narrow(2, 2, 2), flat = flat, m = m })
    local o = torch.load(dir .. '/views.t7')
    S.assert_close(a:t():contiguous(), o.t, 0, 0)
    S.assert_close(a:narrow(2, 2, 2):contiguous(), o.n, 0, 0)
    S.assert_close(flat, o.flat, 0, 0)
    local x = torch.randn(2, 3)
    S.assert_close(m:forward(x), o.m:forward(x), 0, 0)
    -- the loaded flat tensor is its own array: the loaded model's weights do not follow it
    o.flat:fill(0)
    assert.is_true(o.m.modules[1].weight:abs():max():get() > 0)
    local flat2 = o.m:getParameters()                  -- and getParameters works on a loaded model
    S.assert_close(flat, flat2, 0, 0)
  end)

  it('the same object always gives the same file', function()
    local obj = { b = 2, a = 1, c = { z = 1, y = 2, [1] = 3 } }
    torch.save(dir .. '/d1.t7', obj)
    torch.save(dir .. '/d2.t7', obj)
    assert.equals(S.read_file(dir .. '/d1.t7'), S.read_file(dir .. '/d2.t7'))
  end)

  it('a saved nn model loads back with the same class, fields and outputs, and trains the same', function()
    torch.manualSeed(3)
    local function model()
      return nn.Sequential():add(nn.Linear(5, 4)):add(nn.Tanh()):add(nn.Linear(4, 3)):add(nn.LogSoftMax())
    end
    local m = model():double()
    local x = torch.randn(6, 5)
    local y = torch.LongTensor({ 1, 2, 3, 1, 2, 3 })
    local crit = nn.ClassNLLCriterion()
    m:forward(x)                                       -- compiled functions exist now
    local path = dir .. '/model.t7'
    torch.save(path, { model = m, crit = crit, epoch = 3 })
    local saved = torch.load(path)
    local m2 = saved.model
    assert.equals('nn.Sequential', torch.type(m2))
    assert.equals('nn.Linear', torch.type(m2.modules[1]))
    assert.equals(tostring(m), tostring(m2))
    assert.equals(3, saved.epoch)
    assert.equals('nn.ClassNLLCriterion', torch.type(saved.crit))
    S.assert_close(m:forward(x), m2:forward(x), 0, 0)
    -- one SGD step on each: the same parameters after it
    for _, net in ipairs({ { m, crit }, { m2, saved.crit } }) do
      local out = net[1]:forward(x)
      net[2]:forward(out, y)
      net[1]:zeroGradParameters()
      net[1]:backward(x, net[2]:backward(out, y))
      net[1]:updateParameters(0.1)
    end
    local p1, p2 = m:parameters(), m2:parameters()
    for i = 1, #p1 do S.assert_close(p1[i], p2[i], 0, 0) end
    -- a loaded model's weights are its own: changing them changes its output only
    m2.modules[1].weight:fill(0)
    assert.is_true(m.modules[1].weight:abs():max():get() > 0)
  end)

  it('spatial modules round-trip too', function()
    torch.manualSeed(4)
    local m = nn.Sequential():add(nn.SpatialConvolution(1, 2, 3, 3)):add(nn.ReLU())
      :add(nn.SpatialMaxPooling(2, 2)):add(nn.View(8):setNumInputDims(3)):add(nn.Linear(8, 2))
    m:double()
    local x = torch.randn(2, 1, 6, 6)
    local y = m:forward(x):clone()
    torch.save(dir .. '/cnn.t7', m)
    S.assert_close(y, torch.load(dir .. '/cnn.t7'):forward(x), 0, 0)
  end)

  it('errors: a missing file, a corrupt file, a foreign .npz, a damaged description, name the file', function()
    local line = next_line()
    local e = raises(function() torch.load(dir .. '/nope.t7') end, "torch.load: '" .. dir .. "/nope.t7': cannot open")
    assert.matches(':' .. line .. ':', e, 1, true)
    S.write_file(dir .. '/garbage.t7', 'this is not a torch file')
    raises(function() torch.load(dir .. '/garbage.t7') end, dir .. '/garbage.t7')
    -- a truncated file
    torch.save(dir .. '/full.t7', { a = torch.randn(50) })
    local bytes = S.read_file(dir .. '/full.t7')
    S.write_file(dir .. '/cut.t7', bytes:sub(1, math.floor(#bytes / 2)))
    raises(function() torch.load(dir .. '/cut.t7') end, dir .. '/cut.t7')
    -- tgl.save's own .npz (no description) and a .npy
    tgl.save(dir .. '/plain.npz', { w = torch.randn(2) })
    raises(function() torch.load(dir .. '/plain.npz') end,
           "torch.load: '" .. dir .. "/plain.npz' is not a torch.save file of tgl (no 'torch' entry)")
    -- a description that refers to a missing entry, or is damaged
    local function with_description(name, text)
      local d = tgl.zeros(#text, { dtype = 'uint8' })
      for i = 1, #text do d[i] = text:byte(i) end
      tgl.save(dir .. '/' .. name, { torch = d })
      return dir .. '/' .. name
    end
    local p1 = with_description('noentry.t7', 'tgl-torch 1\na 1\n')
    raises(function() torch.load(p1) end, "'" .. p1 .. "' is not a torch.save file of tgl (the entry 'a1' is missing)")
    local p2 = with_description('badver.t7', 'tgl-torch 9\nn 1\n')
    raises(function() torch.load(p2) end, 'unknown version line')
    local p3 = with_description('trunc.t7', 'tgl-torch 1\nT 1 2\nn 1\n')
    raises(function() torch.load(p3) end, 'truncated or damaged description')
    local p4 = with_description('class.t7', 'tgl-torch 1\nM 1 nn.NoSuchModule 0\n')
    raises(function() torch.load(p4) end, 'unknown class nn.NoSuchModule')
    local p5 = with_description('longstr.t7', 'tgl-torch 1\ns 99 abc\n')
    raises(function() torch.load(p5) end, 'a string runs past the end')
    local p6 = with_description('extra.t7', 'tgl-torch 1\nn 1\nn 2\n')
    raises(function() torch.load(p6) end, 'extra bytes after the object')
  end)

  it('errors: values that cannot be saved name where they are; the old file stays', function()
    local path = dir .. '/keep.t7'
    torch.save(path, { 1 })
    local line = next_line()
    local e = raises(function() torch.save(path, { a = { f = print } }) end,
                     'torch.save: the object.a.f is a function')
    assert.matches(':' .. line .. ':', e, 1, true)
    raises(function() torch.save(path, setmetatable({}, {})) end, 'a metatable that is not a torch or nn class')
    raises(function() torch.save(path, { [{}] = 1 }) end, 'a key of type table')
    raises(function() torch.save(42, {}) end, 'torch.save: path must be a string, got number')
    raises(function() torch.save(dir .. '/no/such/dir/x.t7', {}) end, dir .. '/no/such/dir/x.t7')
    assert.same({ 1 }, torch.load(path))
  end)
end)

describe('nn.StochasticGradient', function()
  -- a regression dataset in Torch7's protocol
  local function dataset(n)
    torch.manualSeed(11)
    local d = {}
    for i = 1, n do
      local x = torch.randn(3)
      d[i] = { x, torch.Tensor({ torch.sum(x) > 0 and 1 or -1 }) }
    end
    function d:size() return n end
    return d
  end
  local function net()
    torch.manualSeed(12)
    return nn.Sequential():add(nn.Linear(3, 4)):add(nn.Tanh()):add(nn.Linear(4, 1)):double()
  end
  local function capture(f)
    local lines, print0 = {}, print
    _G.print = function(...)
      local t = {}
      for i = 1, select('#', ...) do t[i] = tostring((select(i, ...))) end
      lines[#lines + 1] = table.concat(t, '\t')
    end
    local ok, e = pcall(f)
    _G.print = print0
    assert(ok, e)
    return lines
  end

  it("has Torch7's fields and defaults", function()
    local sg = nn.StochasticGradient(net(), nn.MSECriterion())
    assert.equals(0.01, sg.learningRate)
    assert.equals(0, sg.learningRateDecay)
    assert.equals(25, sg.maxIteration)
    assert.is_true(sg.shuffleIndices)
    assert.is_true(sg.verbose)
    assert.is_nil(sg.hookIteration)
    assert.is_nil(sg.hookExample)
    assert.equals('nn.StochasticGradient', torch.type(sg))
  end)

  it('trains as the hand-written loop (in order, decaying rate), prints as Torch7, calls the hooks', function()
    local d = dataset(8)
    local m1, m2 = net(), net()
    local c = nn.MSECriterion()
    -- the hand-written loop: per example, weight -= lr * gradient
    local lr0, decay, iters = 0.05, 0.5, 3
    local errors = {}
    local lr = lr0
    for it = 1, iters do
      local e = 0
      for i = 1, d:size() do
        local x, y = d[i][1], d[i][2]
        e = e + c:forward(m1:forward(x), y)
        m1:zeroGradParameters()
        m1:backward(x, c:backward(m1.output, y))
        m1:updateParameters(lr)
      end
      errors[it] = e / d:size()
      lr = lr0 / (1 + (it + 1) * decay)
    end
    local sg = nn.StochasticGradient(m2, nn.MSECriterion())
    sg.learningRate, sg.learningRateDecay, sg.maxIteration, sg.shuffleIndices = lr0, decay, iters, false
    local hooked, examples = {}, 0
    sg.hookIteration = function(self, it, err)
      assert.equals(sg, self)
      hooked[#hooked + 1] = { it, err }
    end
    sg.hookExample = function(self, ex)
      assert.equals(sg, self)
      examples = examples + 1
      assert.equals(d[(examples - 1) % d:size() + 1], ex)
    end
    local _, g0 = m2:parameters()
    for _, g in ipairs(g0) do g:fill(0.25) end           -- gradients are left as they were
    local lines = capture(function() sg:train(d) end)
    local p1, p2 = m1:parameters(), m2:parameters()
    for i = 1, #p1 do S.assert_close(p1[i], p2[i], 1e-12, 1e-14) end
    for _, g in ipairs(g0) do S.assert_close(torch.Tensor(g:nelement()):fill(0.25), g:reshape(-1), 0, 0) end
    assert.equals(iters * d:size(), examples)
    assert.equals(iters, #hooked)
    for it = 1, iters do
      assert.equals(it, hooked[it][1])
      assert.is_true(math.abs(hooked[it][2] - errors[it]) < 1e-12)
    end
    assert.equals('# StochasticGradient: training', lines[1])
    for it = 1, iters do assert.equals('# current error = ' .. hooked[it][2], lines[1 + it]) end
    assert.equals('# StochasticGradient: you have reached the maximum number of iterations', lines[iters + 2])
    assert.equals('# training error = ' .. hooked[iters][2], lines[iters + 3])
    assert.equals(iters + 3, #lines)
    assert.is_true(errors[iters] < errors[1])
  end)

  it('shuffles once: every example once per iteration; verbose = false prints only the frame', function()
    local d = dataset(10)
    local sg = nn.StochasticGradient(net(), nn.MSECriterion())
    sg.maxIteration, sg.verbose = 2, false
    local count, first = {}, {}
    sg.hookExample = function(_, ex)
      for i = 1, 10 do if d[i] == ex then count[i] = (count[i] or 0) + 1; first[#first + 1] = i end end
    end
    local lines = capture(function() sg:train(d) end)
    for i = 1, 10 do assert.equals(2, count[i]) end
    for k = 1, 10 do assert.equals(first[k], first[k + 10]) end   -- the same order both times
    assert.same({ '# StochasticGradient: training',
                  '# StochasticGradient: you have reached the maximum number of iterations',
                  '# training error = ' .. lines[3]:match('= (.*)$') }, lines)
  end)

  it('errors: a bad module, criterion or dataset', function()
    raises(function() nn.StochasticGradient(nil, nn.MSECriterion()) end, 'expected (module, criterion)')
    raises(function() nn.StochasticGradient(net(), 3) end, 'the criterion is a number')
    local sg = nn.StochasticGradient(net(), nn.MSECriterion())
    raises(function() sg:train({}) end, 'the dataset must be a table with a size() method')
    local bad = { { torch.randn(3) } }
    function bad:size() return 1 end
    raises(function() capture(function() sg:train(bad) end) end, 'dataset[1] must be {input, target}')
  end)
end)
