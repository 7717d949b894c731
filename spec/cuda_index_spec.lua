-- cuda_index_spec.lua — the indexing family's CUDA kernels (src/cuda/k_index.c,
-- src/cuda/kernels/index.cu) against the CPU's: adv_subtensor (x[int
-- arrays]), adv_inc_subtensor (inc/set_subtensor with int arrays, repeated
-- and negative indices), inc_subtensor (basic regions: ints, slices with
-- negative steps, symbolic bounds), one_hot, and the gradient of x[idx]
-- (an adv_inc_subtensor), in float32, float64 and the integer dtypes the ops
-- take, on random shapes including 0-size ones and strided device views,
-- through eager ops on device arrays and through functions compiled with
-- device = 'cuda'.  Bad indices and labels give the CPU's message.
-- Without a CUDA device (tgl.cuda.is_available() false) it prints why and
-- runs nothing; TGL_CUDA_EMU=1 runs it on the emulated GPU.
local S = dofile('spec/support.lua')

if not (tgl.cuda.built() and tgl.cuda.is_available()) then
  local why = not tgl.cuda.built() and 'this tgl was built without CUDA'
      or 'no CUDA device (TGL_CUDA_EMU=1 runs these specs on the emulated GPU)'
  print('cuda_index_spec: skipped: ' .. why)
  describe('the CUDA indexing kernels', function()
    it('need a CUDA device', function() pending(why) end)
  end)
  return
end

math.randomseed(2222)
-- The cpu results are the reference: made on the cpu whatever TGL_DEVICE
-- says (the emu: and gpu: lists run this file with TGL_DEVICE=cuda); the
-- device runs ask for 'cuda' explicitly.
tgl.config.device = 'cpu'

local on = S.on_device

local function prod(shape)
  local n = 1
  for _, s in ipairs(shape) do n = n * s end
  return n
end

-- A random array of dtype and shape (floats with fractions, integers small
-- and signed where the dtype allows).
local function rand_array(dtype, shape)
  local t, n = {}, prod(shape)
  for i = 1, n do
    if dtype == 'float32' or dtype == 'float64' then t[i] = math.random() * 8 - 4
    elseif dtype == 'bool' then t[i] = math.random() < 0.5
    elseif dtype == 'uint8' then t[i] = math.random(0, 255)
    else t[i] = math.random(-1000, 1000) end
  end
  return tgl.array(t, dtype):reshape(shape)
end

-- Random 1-based indices into an axis of size len, positive and negative
-- (so with repeats when n > len), as an array of idtype and shape.
local function rand_index(len, shape, idtype)
  local t = {}
  for i = 1, prod(shape) do
    local k = math.random(1, len)
    t[i] = math.random() < 0.3 and k - len - 1 or k
  end
  return tgl.array(t, idtype or 'int64'):reshape(shape)
end

local function flat(t, out)
  out = out or {}
  if type(t) ~= 'table' then out[#out + 1] = t; return out end
  for _, v in ipairs(t) do flat(v, out) end
  return out
end

-- got (any device) equals want (a cpu array): shape, dtype, and values
-- (float64 to 1e-12, float32 to 1e-5 relative, the rest exactly).
local function same(want, got, what)
  assert.is_true(tgl.is_array(got), what .. ': not an array')
  got = got:cpu()
  assert.are.equal(want.dtype, got.dtype, what .. ': dtype')
  assert.are.same(want:shape(), got:shape(), what .. ': shape')
  local w, g = flat(want:totable()), flat(got:totable())
  assert.are.equal(#w, #g, what .. ': size')
  local tol = ({ float32 = 1e-5, float64 = 1e-12 })[want.dtype]
  for i = 1, #w do
    if tol then
      local ok = math.abs(w[i] - g[i]) <= tol * math.max(1, math.abs(w[i]))
      assert(ok, ('%s: element %d is %.17g, the cpu gives %.17g'):format(what, i, g[i], w[i]))
    else
      assert(w[i] == g[i], ('%s: element %d is %s, the cpu gives %s'):format(what, i, tostring(g[i]), tostring(w[i])))
    end
  end
end

local function sym_like(a)
  local bc = {}
  for d = 1, a:dim() do bc[d] = false end
  return tgl.tensor { dtype = a.dtype, ndim = a:dim(), broadcastable = bc }
end

-- fn over cpu arrays vs fn over their device copies (eager), and fn
-- compiled on the cpu vs compiled with device = 'cuda'.
local function check(what, fn, args)
  local want = fn(unpack(args))
  local dev = {}
  for i, a in ipairs(args) do dev[i] = tgl.is_array(a) and a:cuda() or a end
  local got = fn(unpack(dev))
  assert.are.equal('cuda', got.device, what .. ': an eager op on device arrays stays there')
  same(want, got, what .. ' (eager)')
  local vars, ins, vals = {}, {}, {}
  for i, a in ipairs(args) do
    if tgl.is_array(a) then
      vars[i] = sym_like(a); ins[#ins + 1] = vars[i]; vals[#vals + 1] = a
    else
      vars[i] = a
    end
  end
  local fc = tgl.compile { inputs = ins, outputs = fn(unpack(vars)) }
  local cw = fc(unpack(vals))
  same(want, cw, what .. ' (compiled, cpu)')
  local cg = on('cuda', function()
    local fg = tgl.compile { inputs = ins, outputs = fn(unpack(vars)) }
    return fg(unpack(vals))
  end)
  same(want, cg, what .. ' (compiled, cuda)')
end

-- The message of the error fn raises (a string), or fails.
local function message(fn, ...)
  local ok, err = pcall(fn, ...)
  assert.is_false(ok, 'expected an error')
  return tostring(err)
end

-- The op's own words in an error: from "op: " to the inputs' list.
local function words(err, op)
  return err:match(op .. ': (.-) %(inputs') or err
end

local DTYPES = { 'float32', 'float64', 'int64', 'int32', 'uint8', 'bool' }

describe('cuda adv_subtensor (x[int arrays])', function()
  it('gathers rows, columns, pairs and a 2-d index in every dtype, int32 and int64 indices, repeats and negatives', function()
    for _, dt in ipairs(DTYPES) do
      for _, idt in ipairs({ 'int64', 'int32' }) do
        local r, c = math.random(1, 6), math.random(1, 7)
        local x = rand_array(dt, { r, c })
        local n = math.random(1, 9)
        local ir, ic = rand_index(r, { n }, idt), rand_index(c, { n }, idt)
        check(dt .. ' rows', function(a, i) return a[{ i }] end, { x, ir })
        check(dt .. ' columns', function(a, i) return a[{ {}, i }] end, { x, ic })
        check(dt .. ' pairs', function(a, i, j) return a[{ i, j }] end, { x, ir, ic })
        check(dt .. ' 2-d index', function(a, i) return a[{ i }] end, { x, rand_index(r, { 2, 3 }, idt) })
        local x3 = rand_array(dt, { 2, r, 3 })
        check(dt .. ' middle axis', function(a, i) return a[{ {}, i, {} }] end, { x3, rand_index(r, { n }, idt) })
      end
    end
  end)

  it('gathers from strided device views (transposed, reversed) as from their cpu copies', function()
    for _, dt in ipairs({ 'float32', 'float64', 'int64' }) do
      local x = rand_array(dt, { 5, 4 })
      local i = rand_index(4, { 6 })
      same(x:T()[{ i }], x:cuda():T()[{ i:cuda() }], dt .. ' transposed')
      local rev = function(a) return a[{ {}, { -1, 1, -1 } }] end
      same(rev(x)[{ {}, i }], rev(x:cuda())[{ {}, i:cuda() }], dt .. ' reversed columns')
      -- the index array a strided view too
      local i2 = rand_index(5, { 3, 4 })
      same(x[{ i2:T() }], x:cuda()[{ i2:cuda():T() }], dt .. ' transposed index')
    end
  end)

  it('gives 0-size results for empty indices or empty axes', function()
    check('empty index', function(a, i) return a[{ i }] end, { rand_array('float32', { 3, 4 }), tgl.array({}, 'int64') })
    check('empty pre axis', function(a, i) return a[{ {}, i }] end, { rand_array('float64', { 0, 4 }), rand_index(4, { 5 }) })
    check('empty post axis', function(a, i) return a[{ i }] end, { rand_array('int64', { 3, 0 }), rand_index(3, { 5 }) })
  end)

  it('random shapes and index layouts agree with the cpu', function()
    for _ = 1, 12 do
      local dt = DTYPES[math.random(1, 3)]
      local nd = math.random(1, 4)
      local shape = {}
      for d = 1, nd do shape[d] = math.random(1, 5) end
      local first = math.random(1, nd)
      local k = math.random(1, nd - first + 1)
      local ishape = {}
      for d = 1, math.random(1, 2) do ishape[d] = math.random(1, 4) end
      local spec, args = {}, { rand_array(dt, shape) }
      for d = 1, nd do
        if d >= first and d < first + k then
          args[#args + 1] = rand_index(shape[d], ishape, math.random() < 0.5 and 'int32' or 'int64')
        end
      end
      local fn = function(a, ...)
        local idx, j = {}, 0
        for d = 1, first + k - 1 do
          if d < first then idx[d] = {} else j = j + 1; idx[d] = select(j, ...) end
        end
        return a[idx]
      end
      check(('%s %s first %d k %d'):format(dt, table.concat(shape, 'x'), first, k), fn, args)
    end
  end)

  it('reports a bad index as the cpu does, naming it and its axis', function()
    local x = rand_array('float32', { 3, 4 })
    for _, bad in ipairs({ { 1, 4, 2 }, { 2, 0 }, { -4, 1 }, { 1, 2, 3, 9, 10 } }) do
      local i = tgl.array(bad, 'int64')
      local f = function(a, b) return a[{ b }] end
      local ecpu, ecuda = message(f, x, i), message(f, x:cuda(), i:cuda())
      assert.are.equal(words(ecpu, 'adv_subtensor'), words(ecuda, 'adv_subtensor'))
      assert.matches('cuda_index_spec%.lua:%d+', ecuda)
    end
    -- the second index array's bad value, at a later position than the first's good ones
    local i, j = tgl.array({ 1, 2, 3 }, 'int32'), tgl.array({ 1, 1, 5 }, 'int32')
    local f = function(a, b, c) return a[{ b, c }] end
    local e = message(f, x:cuda(), i:cuda(), j:cuda())
    assert.matches('index 5 is out of range for axis 2 of size 4', e, 1, true)
    assert.are.equal(words(message(f, x, i, j), 'adv_subtensor'), words(e, 'adv_subtensor'))
    -- compiled
    local X, I = tgl.matrix('X'), tgl.lvector('I')
    local ec = on('cuda', function()
      local fg = tgl.compile { inputs = { X, I }, outputs = X[{ I }] }
      return message(fg, x, tgl.array({ 2, 0 }, 'int64'))
    end)
    assert.matches('index 0 on axis 1: indices count from 1 (-1 is the last)', ec, 1, true)
  end)
end)

describe('cuda adv_inc_subtensor (inc/set_subtensor with int arrays)', function()
  it('adds repeated indices up and sets with the last write winning, in every dtype', function()
    for _, dt in ipairs(DTYPES) do
      for _, set in ipairs({ false, true }) do
        local op = set and tgl.set_subtensor or tgl.inc_subtensor
        local tag = dt .. (set and ' set' or ' inc')
        local r, c = math.random(1, 5), math.random(1, 6)
        local x = rand_array(dt, { r, c })
        local n = math.random(1, 12) -- repeats when n > r
        local i = rand_index(r, { n })
        check(tag .. ' rows, full v', function(a, b, v) return op(a[{ b }], v) end, { x, i, rand_array(dt, { n, c }) })
        check(tag .. ' rows, v a row broadcast', function(a, b, v) return op(a[{ b }], v:dimshuffle({ 'x', 1 })) end,
              { x, i, rand_array(dt, { c }) })
        local j = rand_index(c, { n })
        check(tag .. ' pairs', function(a, b, d, v) return op(a[{ b, d }], v) end, { x, i, j, rand_array(dt, { n }) })
        check(tag .. ' columns', function(a, d, v) return op(a[{ {}, d }], v) end, { x, j, rand_array(dt, { r, n }) })
      end
    end
  end)

  it('sums many repeats of one position (atomics) and sets one of them', function()
    for _, dt in ipairs({ 'float32', 'float64', 'int64', 'int32', 'uint8' }) do
      local x = rand_array(dt, { 3, 2 })
      local t, q = {}, {}
      for k = 1, 700 do t[k] = (k % 7 == 0) and 3 or -3 end -- -3 is row 1: rows 1 and 3 only
      -- quarters: every float sum is exact, whatever order the atomics land in
      for k = 1, 1400 do q[k] = math.random(dt == 'uint8' and 0 or -8, 8) * ((dt == 'float32' or dt == 'float64') and 0.25 or 1) end
      local i = tgl.array(t, 'int64')
      local v = tgl.array(q, dt):reshape({ 700, 2 })
      check(dt .. ' 700 adds', function(a, b, w) return tgl.inc_subtensor(a[{ b }], w) end, { x, i, v })
      check(dt .. ' 700 sets', function(a, b, w) return tgl.set_subtensor(a[{ b }], w) end, { x, i, v })
    end
  end)

  it('converts v to x\'s dtype, and takes number values', function()
    local x = rand_array('float32', { 4, 3 })
    local i = rand_index(4, { 5 })
    check('int64 v into float32', function(a, b, v) return tgl.inc_subtensor(a[{ b }], tgl.cast(v, 'float32')) end,
          { x, i, rand_array('int64', { 5, 3 }) })
    same(tgl.inc_subtensor(x[{ i }], 2.5), tgl.inc_subtensor(x:cuda()[{ i:cuda() }], 2.5), 'number v')
    same(tgl.set_subtensor(x[{ i }], -1), tgl.set_subtensor(x:cuda()[{ i:cuda() }], -1), 'number v, set')
  end)

  it('updates strided device views and 0-size regions as the cpu', function()
    local x = rand_array('float64', { 4, 5 })
    local i = rand_index(5, { 7 })
    local v = rand_array('float64', { 7, 4 })
    same(tgl.inc_subtensor(x:T()[{ i }], v), tgl.inc_subtensor(x:cuda():T()[{ i:cuda() }], v:cuda()), 'transposed x')
    same(tgl.set_subtensor(x:T()[{ i }], v), tgl.set_subtensor(x:cuda():T()[{ i:cuda() }], v:cuda()), 'transposed x, set')
    local vT = rand_array('float64', { 4, 7 })
    same(tgl.inc_subtensor(x:T()[{ i }], vT:T()), tgl.inc_subtensor(x:cuda():T()[{ i:cuda() }], vT:cuda():T()), 'transposed v')
    check('empty index', function(a, b, w) return tgl.inc_subtensor(a[{ b }], w) end,
          { x, tgl.array({}, 'int64'), rand_array('float64', { 0, 5 }) })
    check('empty x', function(a, b, w) return tgl.inc_subtensor(a[{ {}, b }], w) end,
          { rand_array('float32', { 0, 5 }), rand_index(5, { 3 }), rand_array('float32', { 0, 3 }) })
  end)

  it('leaves x as it was and reports a bad index as the cpu does', function()
    local x = rand_array('float32', { 3, 4 })
    local xd = x:cuda()
    local i = tgl.array({ 1, -5 }, 'int64')
    local f = function(a, b) return tgl.inc_subtensor(a[{ b }], 1) end
    local ecpu, ecuda = message(f, x, i), message(f, xd, i:cuda())
    assert.matches('index -5 is out of range for axis 1 of size 3', ecuda, 1, true)
    assert.are.equal(words(ecpu, 'adv_inc_subtensor'), words(ecuda, 'adv_inc_subtensor'))
    same(x, xd, 'x after the failed update')
  end)
end)

describe('cuda inc_subtensor (basic regions)', function()
  it('adds into and sets ints, slices, negative steps and symbolic bounds in every dtype', function()
    for _, dt in ipairs(DTYPES) do
      local x = rand_array(dt, { 4, 5 })
      check(dt .. ' set row slice', function(a, v) return tgl.set_subtensor(a[{ 2, { 2, 4 } }], v) end,
            { x, rand_array(dt, { 3 }) })
      check(dt .. ' inc column', function(a, v) return tgl.inc_subtensor(a[{ {}, 1 }], v) end, { x, rand_array(dt, { 4 }) })
      check(dt .. ' inc negative step', function(a, v) return tgl.inc_subtensor(a[{ { -1, 1, -2 }, { 5, 1, -1 } }], v) end,
            { x, rand_array(dt, { 2, 5 }) })
      check(dt .. ' set rows', function(a, v) return tgl.set_subtensor(a[{ { 2, 3 } }], v) end,
            { x, rand_array(dt, { 2, 5 }) })
      check(dt .. ' inc broadcast row', function(a, v) return tgl.inc_subtensor(a[{ { 2, 3 } }], v:dimshuffle({ 'x', 1 })) end,
            { x, rand_array(dt, { 5 }) })
      check(dt .. ' inc on a transposed x', function(a, v) return tgl.inc_subtensor(a:T()[{ { 2, 4 }, 3 }], v) end,
            { x, rand_array(dt, { 3 }) })
    end
  end)

  it('reads symbolic bounds (1-based, negative) through the device', function()
    local x, v = tgl.matrix('x'), tgl.vector('v')
    local i, j = tgl.lscalar('i'), tgl.iscalar('j')
    local outs = function() return { tgl.set_subtensor(x[i], v), tgl.inc_subtensor(x[{ {}, { j, -1 } }], 2),
                                     tgl.inc_subtensor(x[{ { i, 1, -1 }, j }], 1) } end
    local xa, va = rand_array('float32', { 4, 3 }), rand_array('float32', { 3 })
    local fc = tgl.compile { inputs = { x, v, i, j }, outputs = outs() }
    for _, ij in ipairs({ { 2, 1 }, { -1, 3 }, { 4, -2 } }) do
      local want = { fc(xa, va, tgl.array(ij[1], 'int64'), tgl.array(ij[2], 'int32')) }
      local got = { on('cuda', function()
        local fg = tgl.compile { inputs = { x, v, i, j }, outputs = outs() }
        return { fg(xa, va, tgl.array(ij[1], 'int64'), tgl.array(ij[2], 'int32')) }
      end) }
      got = got[1]
      for k = 1, #want do same(want[k], got[k], 'bounds ' .. ij[1] .. ',' .. ij[2] .. ' output ' .. k) end
    end
    -- a bound out of range: the cpu's message
    local fg = on('cuda', function() return tgl.compile { inputs = { x, v, i, j }, outputs = outs() } end)
    local e = message(fg, xa, va, tgl.array(9, 'int64'), tgl.array(1, 'int32'))
    local ec = message(fc, xa, va, tgl.array(9, 'int64'), tgl.array(1, 'int32'))
    assert.matches('out of range for axis 1 of size 4', e, 1, true)
    assert.are.equal(words(ec, 'inc_subtensor'), words(e, 'inc_subtensor'))
  end)

  it('handles 0-size regions and 0-size x', function()
    check('empty slice', function(a, v) return tgl.inc_subtensor(a[{ { 3, 2 } }], v) end,
          { rand_array('float64', { 4, 3 }), rand_array('float64', { 0, 3 }) })
    check('empty x', function(a) return tgl.set_subtensor(a[{ {}, 2 }], 1) end, { rand_array('int64', { 0, 3 }) })
  end)
end)

describe('cuda one_hot', function()
  it('encodes int32, int64 and uint8 labels of any shape into every dtype', function()
    for _, ldt in ipairs({ 'int32', 'int64', 'uint8' }) do
      for _, odt in ipairs(DTYPES) do
        local n = math.random(1, 6)
        local shape = ({ { 7 }, { 3, 4 }, { 2, 1, 3 }, { 0 } })[math.random(1, 4)]
        local t = {}
        for k = 1, prod(shape) do t[k] = math.random(1, n) end
        local y = tgl.array(t, ldt):reshape(shape)
        check(ldt .. ' -> ' .. odt, function(a) return tgl.one_hot(a, n, odt) end, { y })
      end
    end
    local y = tgl.array({ { 1, 2, 3 }, { 3, 3, 1 } }, 'int64')
    same(tgl.one_hot(y:T(), 3), tgl.one_hot(y:cuda():T(), 3), 'transposed labels')
  end)

  it('reports a label outside 1..n and its position as the cpu does', function()
    for _, bad in ipairs({ { { 1, 2 }, { 5, 1 } }, { { 0, 1 }, { 1, 1 } }, { { 1, 1 }, { 1, -2 } } }) do
      local y = tgl.array(bad, 'int32')
      local f = function(a) return tgl.one_hot(a, 3) end
      local ecpu, ecuda = message(f, y), message(f, y:cuda())
      assert.matches('labels count from 1', ecuda, 1, true)
      assert.are.equal(words(ecpu, 'one_hot'), words(ecuda, 'one_hot'))
    end
  end)
end)

describe('cuda indexing gradients', function()
  it('the gradient of x[idx] (an adv_inc_subtensor) and of a basic region match the cpu', function()
    for _, dt in ipairs({ 'float32', 'float64' }) do
      local x = tgl.tensor { dtype = dt, ndim = 2 }
      local w = tgl.tensor { dtype = dt, ndim = 2 }
      local i = tgl.lvector('i')
      local cost = tgl.sum(x[{ i }] * w) + tgl.sum(x[{ { 2, 3 }, { -1, 1, -2 } }] ^ 2)
      local g = tgl.grad(cost, x)
      local xa, wa = rand_array(dt, { 4, 3 }), rand_array(dt, { 9, 3 })
      local ia = rand_index(4, { 9 })
      local fc = tgl.compile { inputs = { x, w, i }, outputs = g }
      local want = fc(xa, wa, ia)
      local got = on('cuda', function()
        local fg = tgl.compile { inputs = { x, w, i }, outputs = g }
        return fg(xa, wa, ia)
      end)
      same(want, got, dt .. ' gradient')
    end
  end)

  it('runs an embedding-style training step (lookup, one_hot, scatter of the gradient) as the cpu, across a bad index', function()
    local function run(device)
      return on(device, function()
        local E = tgl.shared(tgl.array({ { 0.1, 0.2 }, { 0.3, -0.4 }, { 0.5, 0.6 }, { -0.7, 0.8 } }), 'E')
        local i, y = tgl.lvector('i'), tgl.lvector('y')
        local h = E[{ i }]
        local cost = tgl.sum(h ^ 2) + tgl.sum(tgl.one_hot(y, 2) * h)
        local f = tgl.compile { inputs = { i, y }, outputs = cost, updates = { { E, E - tgl.grad(cost, E) * 0.1 } } }
        local out = {}
        for k = 1, 4 do
          out[k] = f(tgl.array({ 1, 3, 3, -1 }, 'int64'), tgl.array({ 1, 2, 2, 1 }, 'int64'))
        end
        out.err = words(message(f, tgl.array({ 1, 5 }, 'int64'), tgl.array({ 1, 2 }, 'int64')), 'adv_subtensor')
        out.after = E:get_value():cpu()  -- the failed call changed nothing
        for k = 5, 7 do
          out[k] = f(tgl.array({ 2, 2, 4, 1 }, 'int64'), tgl.array({ 2, 2, 1, 1 }, 'int64'))
        end
        out.E = E:get_value():cpu()
        return out
      end)
    end
    local want, got = run('cpu'), run('cuda')
    for k = 1, 7 do same(want[k], got[k], 'call ' .. k) end
    assert.are.equal(want.err, got.err)
    assert.matches('index 5 is out of range for axis 1 of size 4', got.err, 1, true)
    same(want.after, got.after, 'E after the failed call')
    same(want.E, got.E, 'E at the end')
  end)

  it('passes verify_grad on the device', function()
    -- repeated positions where they add (x[idx], inc); distinct ones where
    -- they set (a repeated set's v gradient is Theano's, not the finite
    -- difference: engine/ops/subtensor.c)
    local rep, dis = tgl.array({ 2, 2, -1, 1 }, 'int64'), tgl.array({ 3, 1 }, 'int64')
    on('cuda', function()
      tgl.verify_grad(function(a, v, w)
        return tgl.sum(tgl.set_subtensor(a[{ dis }], v) * 1.5) + tgl.sum(a[{ rep }] ^ 2)
            + tgl.sum(tgl.inc_subtensor(a[{ rep }], w) ^ 2)
      end, { rand_array('float64', { 3, 2 }), rand_array('float64', { 2, 2 }), rand_array('float64', { 4, 2 }) })
    end)
  end)
end)
