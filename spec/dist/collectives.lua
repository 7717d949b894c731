-- spec/dist/collectives.lua — one process of the job spec/dist_spec.lua
-- starts with mpirun (-np 2 and -np 3): every collective of tgl.dist and
-- the allreduce op, checked against what the process computes locally
-- for every rank.  Any failure raises, which ends the whole job with a
-- non-zero status; the last line of a process that passed everything is
-- "collectives ok <rank> <size>".
--
--   mpirun -np N tgl spec/dist/collectives.lua [eager] [compiled] [large] [random]
--   (no argument: all four parts)
local tgl = require 'tgl'

local parts = {}
for _, a in ipairs(arg) do parts[a] = true end
if not next(parts) then parts = { eager = true, compiled = true, large = true, random = true } end

local rank, size = tgl.dist.init { timeout = 60 }
assert(rank == tgl.dist.rank() and size == tgl.dist.size(), 'init returns rank, size')
assert(tgl.dist.initialized(), 'initialized after init')
assert(size == tonumber(os.getenv('OMPI_COMM_WORLD_SIZE')), 'size is the launcher\'s')
assert(rank >= 1 and rank <= size, 'rank from 1')
assert(tgl.dist.is_root() == (rank == 1), 'is_root on rank 1')

local function fail(fmt, ...)
  error(('rank %d: ' .. fmt):format(rank, ...), 2)
end

-- Exact comparison of an array with a flat Lua table (or close, with tol).
local function expect(a, want, what, tol)
  local got = a:contiguous():reshape(a:nelement()):totable()
  if #got ~= #want then fail('%s: %d elements, want %d', what, #got, #want) end
  for i = 1, #want do
    local g, w = got[i], want[i]
    if type(g) == 'boolean' then g = g and 1 or 0 else g = tonumber(g) end
    local bad = tol and math.abs(g - w) > tol * math.max(1, math.abs(w)) or (not tol and g ~= w)
    if bad then fail('%s: element %d is %.17g, want %.17g', what, i, g, w) end
  end
end

-- The value of element i (1-based) on rank r: small integers, exact in
-- every dtype and in any sum or product here.
local function val(r, i, dtype)
  local v = ((i * 7 + r * 3) % 11) - 5
  if dtype == 'float32' or dtype == 'float64' then v = v + 0.5 * r end
  return v
end

local function rank_array(r, n, dtype, shape)
  local t = {}
  for i = 1, n do t[i] = val(r, i, dtype) end
  return tgl.array(t, dtype):reshape(shape or { n })
end

local REDUCE = {
  sum = function(a, b) return a + b end,
  prod = function(a, b) return a * b end,
  max = math.max,
  min = math.min,
}

local function expected(op, n, dtype)
  local out = {}
  for i = 1, n do
    local acc = val(1, i, dtype)
    for r = 2, size do acc = REDUCE[op == 'mean' and 'sum' or op](acc, val(r, i, dtype)) end
    if op == 'mean' then acc = acc / size end
    out[i] = acc
  end
  return out
end

if parts.eager then
  -- allreduce: every reduction, every dtype it takes, in place
  for _, dtype in ipairs { 'float32', 'float64', 'int32', 'int64' } do
    for _, op in ipairs { 'sum', 'mean', 'max', 'min', 'prod' } do
      if op ~= 'mean' or dtype:match('^float') then
        local a = rank_array(rank, 12, dtype, { 3, 4 })
        local ret = tgl.dist.allreduce(a, op)
        assert(ret == a, 'allreduce returns its array')
        expect(a, expected(op, 12, dtype), ('allreduce %s %s'):format(op, dtype),
               dtype == 'float32' and op == 'mean' and 1e-7 or nil)
      else
        local ok, err = pcall(tgl.dist.allreduce, rank_array(rank, 3, dtype), op)
        if ok or not tostring(err):match("'mean' needs a float array") then
          fail('mean of %s: %s', dtype, tostring(err))
        end
      end
    end
  end
  -- a strided view (a transposed one): the result lands in its elements
  local base = rank_array(rank, 12, 'float64', { 3, 4 })
  local view = base:T()
  tgl.dist.allreduce(view, 'sum')
  expect(base, expected('sum', 12, 'float64'), 'allreduce of a transposed view')
  -- 0-d and 0-size arrays
  local s = tgl.array(rank + 0.25, 'float64')
  tgl.dist.allreduce(s, 'sum')
  expect(s, { size * (size + 1) / 2 + 0.25 * size }, 'allreduce of a scalar')
  local e = tgl.zeros({ 0, 3 }, { dtype = 'float32' })
  tgl.dist.allreduce(e, 'sum')
  assert(e:nelement() == 0, 'a 0-size allreduce')
  -- broadcast from every root, every dtype
  for root = 1, size do
    for _, dtype in ipairs { 'float32', 'float64', 'int32', 'int64', 'uint8', 'bool' } do
      local n = 5
      local t = {}
      for i = 1, n do t[i] = dtype == 'bool' and ((i + rank) % 2) or math.abs(val(rank, i, dtype)) end
      local a = tgl.array(t, dtype)
      assert(tgl.dist.broadcast(a, root) == a, 'broadcast returns its array')
      local want = {}
      for i = 1, n do want[i] = dtype == 'bool' and ((i + root) % 2) or math.abs(val(root, i, dtype)) end
      expect(a, want, ('broadcast %s from %d'):format(dtype, root))
    end
  end
  tgl.dist.broadcast(tgl.zeros({ 0 }), 1)
  -- allgather: a new (size, ...) array in rank order
  for _, dtype in ipairs { 'float32', 'int64', 'uint8' } do
    local g = tgl.dist.allgather(rank_array(rank, 6, dtype == 'uint8' and 'int32' or dtype, { 2, 3 })
                                 :astype(dtype))
    local sh = g:shape()
    assert(#sh == 3 and sh[1] == size and sh[2] == 2 and sh[3] == 3, 'allgather shape')
    local want = {}
    for r = 1, size do
      for i = 1, 6 do
        local v = val(r, i, dtype == 'uint8' and 'int32' or dtype)
        if dtype == 'uint8' then v = v % 256 end
        want[#want + 1] = v
      end
    end
    expect(g, want, 'allgather ' .. dtype)
  end
  local g0 = tgl.dist.allgather(tgl.zeros({ 0 }))
  assert(g0:shape()[1] == size and g0:shape()[2] == 0, 'allgather of a 0-size array')
  tgl.dist.barrier()
  -- a mismatch is named on every rank and the job goes on
  local ok, err = pcall(tgl.dist.allreduce, tgl.zeros({ 2, rank }), 'sum')
  if ok then fail('an allreduce of different shapes passed') end
  err = tostring(err)
  for r = 1, size do
    if not err:find(('rank %d: allreduce%%(sum%%) of float32 %%(2,%d%%)'):format(r, r)) then
      fail('the mismatch message does not name rank %d: %s', r, err)
    end
  end
  ok, err = pcall(tgl.dist.broadcast, tgl.zeros({ 2 }, { dtype = rank == 1 and 'float32' or 'int32' }))
  if ok or not tostring(err):find('broadcast of int32 %(2%)') then
    fail('a dtype mismatch: %s', tostring(err))
  end
  local after = tgl.ones({ 3 })
  tgl.dist.allreduce(after, 'sum')
  expect(after, { size, size, size }, 'allreduce after a mismatch')
  -- bad arguments
  ok, err = pcall(tgl.dist.allreduce, tgl.ones({ 2 }), 'avg')
  assert(not ok and tostring(err):find("op must be 'sum'"), tostring(err))
  ok, err = pcall(tgl.dist.broadcast, tgl.ones({ 2 }), size + 1)
  assert(not ok and tostring(err):find('root must be a rank from 1 to ' .. size), tostring(err))
  ok, err = pcall(tgl.dist.allreduce, tgl.ones({ 2 }, { dtype = 'uint8' }), 'sum')
  assert(not ok and tostring(err):find('reduces float32, float64, int32 and int64'), tostring(err))
end

if parts.large then
  -- 10^7 elements (several chunks' worth of work for the transport's
  -- polling; exact sums)
  local n = 10000000
  local a = tgl.ones({ n }, { dtype = 'float32' }) * rank
  tgl.dist.allreduce(a, 'sum')
  local tot = size * (size + 1) / 2
  assert(a:get(1) == tot and a:get(n) == tot and a:get(math.floor(n / 2)) == tot, 'large float32 sum')
  assert(tgl.sum(a:astype('float64')):get() == tot * n, 'large float32 sum, every element')
  local b = tgl.arange(1, n) * rank
  tgl.dist.allreduce(b, 'max')
  assert(b:get(n) == n * size and b:get(1) == size, 'large int64 max')
  local c = tgl.arange(1, n):astype('float64')
  if rank ~= 1 then c:fill(0) end
  tgl.dist.broadcast(c, 1)
  assert(c:get(n) == n and tgl.sum(c):get() == n * (n + 1) / 2, 'large broadcast')
end

if parts.compiled then
  -- The allreduce op equals the eager allreduce: in a FAST_RUN function
  -- (buckets started during the backward pass), FAST_COMPILE (one
  -- blocking allreduce per op) and with the bucket stage switched off.
  tgl.manual_seed(7) -- the same weights on every rank
  local x, y = tgl.matrix('x'), tgl.ivector('y')
  local function make()
    tgl.manual_seed(7) -- the same weights on every rank and in every config
    local ps = {}
    local sizes = { { 6, 5 }, { 5 }, { 5, 4 }, { 4 }, { 4, 3 }, { 3 } }
    for i, s in ipairs(sizes) do
      ps[i] = tgl.shared(tgl.randn(s, { dtype = 'float64' }) * 0.3, 'p' .. i)
    end
    return ps
  end
  local function net(ps)
    local h1 = tgl.tanh(tgl.dot(x, ps[1]) + ps[2])
    local h2 = tgl.tanh(tgl.dot(h1, ps[3]) + ps[4])
    return tgl.mean(tgl.categorical_crossentropy(tgl.softmax(tgl.dot(h2, ps[5]) + ps[6]), y))
  end
  -- this rank's rows of the global batch
  local X = tgl.arange(1, 8 * 6):astype('float64'):reshape { 8, 6 }
  X = tgl.sin(X * 0.37)
  local Y = tgl.array({ 1, 2, 3, 1, 2, 3, 3, 1 }, 'int32')
  local first, last = tgl.dist.shard(8)
  local Xr, Yr = X[{ { first, last } }], Y[{ { first, last } }]
  local ref = {} -- eager: gradients reduced by tgl.dist.allreduce
  do
    local ps = make()
    local gs = tgl.grad(net(ps), ps)
    local f = tgl.compile { inputs = { x, y }, outputs = gs }
    local out = { f(Xr, Yr) }
    for i = 1, #out do
      local w = (last - first + 1) * size / 8 -- rows here vs an even share
      ref[i] = tgl.dist.allreduce(out[i] * w, 'mean')
    end
  end
  -- One process on the whole global batch: the parameters after 3 steps
  -- that data-parallel training must reproduce (to rounding).
  local single = {}
  do
    local ps = make()
    local gs = tgl.grad(net(ps), ps)
    local upd = {}
    for i = 1, #ps do upd[i] = { ps[i], ps[i] - 0.5 * gs[i] } end
    local f = tgl.compile { inputs = { x, y }, outputs = {}, updates = upd }
    for _ = 1, 3 do f(X, Y) end
    for i = 1, #ps do single[i] = ps[i]:get_value() end
  end
  local configs = {
    { mode = 'FAST_RUN', bucket = 1 },      -- one bucket per gradient
    { mode = 'FAST_RUN', bucket = 200 },    -- a few buckets
    { mode = 'FAST_RUN', bucket = 1048576 }, -- one bucket
    { mode = 'FAST_COMPILE', bucket = 1 },
    { mode = 'FAST_RUN', bucket = 1, exclude = 'allreduce_buckets' },
    { mode = 'FAST_RUN', bucket = 1, overlap = false },
  }
  for _, cfg in ipairs(configs) do
    tgl.dist.init { bucket_bytes = cfg.bucket, overlap = cfg.overlap ~= false }
    assert(tgl.dist.overlap() == (cfg.overlap ~= false), 'tgl.dist.overlap() reads the setting')
    local saved = tgl.config.exclude
    if cfg.exclude then tgl.config.exclude = cfg.exclude end
    local ps = make()
    local cost = net(ps)
    local gs = tgl.grad(cost, ps)
    local w = tgl.scalar('w', 'float64')
    local upd, outs = {}, {}
    for i = 1, #ps do
      local g = tgl.allreduce(gs[i] * w, { op = 'mean' })
      outs[i] = g
      upd[i] = { ps[i], ps[i] - 0.5 * g }
    end
    local f = tgl.compile { inputs = { x, y, w }, outputs = outs, updates = upd, mode = cfg.mode }
    tgl.config.exclude = saved
    local prog = f:program()
    local nstart = select(2, prog:gsub('allreduce_start', ''))
    if cfg.mode == 'FAST_RUN' and not cfg.exclude and cfg.overlap ~= false then
      if nstart < 1 then fail('no bucket in the FAST_RUN program:\n%s', prog) end
      if cfg.bucket == 1 and nstart ~= #ps then fail('%d buckets with 1-byte buckets, want %d', nstart, #ps) end
      if cfg.bucket == 1048576 and nstart ~= 1 then fail('%d buckets, want 1', nstart) end
    elseif nstart ~= 0 then
      fail('buckets in a %s program%s', cfg.mode, cfg.exclude and ' with the stage excluded'
           or cfg.overlap == false and ' without overlap' or '')
    end
    local wr = (last - first + 1) * size / 8
    for call = 1, 3 do
      local before = {}
      for i = 1, #ps do before[i] = ps[i]:get_value() end
      local out = { f(Xr, Yr, wr) }
      for i = 1, #ps do
        if call == 1 then
          expect(out[i], ref[i]:reshape(ref[i]:nelement()):totable(),
                 ('compiled allreduce (%s, bucket %d), gradient %d'):format(cfg.mode, cfg.bucket, i), 1e-12)
        end
        expect(ps[i]:get_value(), (before[i] - 0.5 * out[i]):reshape(out[i]:nelement()):totable(),
               'update ' .. i, 1e-12)
      end
    end
    for i = 1, #ps do
      expect(ps[i]:get_value(), single[i]:reshape(single[i]:nelement()):totable(),
             ('%d ranks after 3 steps vs one process on the whole batch (%s, bucket %d), parameter %d')
               :format(size, cfg.mode, cfg.bucket, i), 1e-12)
    end
    -- the parameters stay identical on every rank
    for i = 1, #ps do
      local v = ps[i]:get_value()
      local m = tgl.dist.allreduce(v:clone(), 'max')
      expect(v, m:reshape(m:nelement()):totable(), 'parameters agree across ranks')
    end
  end
  tgl.dist.init { bucket_bytes = 1048576, overlap = 'auto' }
  -- The gradient of allreduce: d/dx of sum(c * allreduce(x, sum)) is
  -- allreduce(c, sum) on every rank.
  local xv = tgl.vector('xv', 'float64')
  local c = tgl.array({ rank, 2 * rank, -rank }, 'float64')
  local cost = tgl.sum(tgl.allreduce(xv, 'sum') * c)
  local gx = tgl.grad(cost, xv)
  local fg = tgl.compile { inputs = { xv }, outputs = { gx } }
  local s = size * (size + 1) / 2
  expect(fg(tgl.array({ 1, 2, 3 }, 'float64')), { s, 2 * s, -s }, 'gradient of allreduce')
  -- ... and its tangent (Rop): allreduce of the direction
  local v = tgl.vector('v', 'float64')
  local jv = tgl.Rop(tgl.allreduce(xv * xv, 'sum'), xv, v)
  local fr = tgl.compile { inputs = { xv, v }, outputs = { jv } }
  local xr = tgl.array({ rank, 1, 2 }, 'float64')
  local got = fr(xr, tgl.array({ 1, 1, 1 }, 'float64'))
  local want = { 0, 2 * size, 4 * size }
  for r = 1, size do want[1] = want[1] + 2 * r end
  expect(got, want, 'Rop of allreduce')
  -- eager tgl.allreduce on arrays runs at once
  expect(tgl.allreduce(tgl.array({ rank }, 'float64'), 'sum'), { s }, 'tgl.allreduce on an array')
end

if parts.random then
  -- Random steps no case above picked: 1 to 30 shared variables (100 in
  -- the last trial) of random dtypes and shapes (0-d, 0-size axes,
  -- transposed views as the allreduce's input: strided parts of a bucket),
  -- each updated with a random reduction of a value that depends on the
  -- rank, random bucket sizes, overlap on; the outputs and the updated
  -- values against the eager allreduce of the same values.
  local xv = tgl.array({ rank, 0.5 * rank, 1 }, 'float64')
  for trial = 1, 7 do
    math.randomseed(1000 + trial) -- the same graph on every rank
    local n = trial == 7 and 100 or math.random(1, 30)
    local bucket = ({ 1, 64, 4096, 1048576 })[math.random(4)]
    tgl.dist.init { bucket_bytes = bucket, overlap = true }
    local x = tgl.vector('x', 'float64')
    local outs, upd, want, want_var, vars = {}, {}, {}, {}, {}
    for i = 1, n do
      local dtype = math.random(2) == 1 and 'float32' or 'float64'
      local nd = math.random(0, 3)
      local shape = {}
      for d = 1, nd do shape[d] = math.random(0, 9) == 0 and 0 or math.random(1, 5) end
      local op = math.random(2) == 1 and 'sum' or 'mean'
      tgl.manual_seed(trial * 1000 + i)
      local init = tgl.randn(shape, { dtype = dtype })
      local v = tgl.shared(init:clone(), ('r%d_%d'):format(trial, i))
      local e = v * tgl.cast(tgl.sum(x), dtype)
      local ev = init * tgl.cast(tgl.sum(xv), dtype)
      local transposed = nd == 2 and math.random(2) == 1
      if transposed then e, ev = e:T(), ev:T() end
      local ar = tgl.allreduce(e, op)
      outs[i] = ar
      upd[i] = { v, v - 0.5 * (transposed and ar:T() or ar) }
      want[i] = tgl.dist.allreduce(ev:contiguous(), op)
      want_var[i] = init - 0.5 * (transposed and want[i]:T() or want[i])
      vars[i] = v
    end
    local f = tgl.compile { inputs = { x }, outputs = outs, updates = upd }
    local prog = f:program()
    if not prog:find('allreduce_start', 1, true) then fail('trial %d: no bucket:\n%s', trial, prog) end
    local got = { f(xv) }
    for i = 1, n do
      local tol = want[i].dtype == 'float32' and 1e-6 or 1e-13
      expect(got[i], want[i]:contiguous():reshape(want[i]:nelement()):totable(),
             ('random trial %d (%d variables, buckets of %d bytes), output %d'):format(trial, n, bucket, i), tol)
      local wv = want_var[i]:contiguous()
      expect(vars[i]:get_value(), wv:reshape(wv:nelement()):totable(),
             ('random trial %d, variable %d'):format(trial, i), tol)
    end
  end
  tgl.dist.init { bucket_bytes = 1048576, overlap = 'auto' }
end

io.write(('collectives ok %d %d\n'):format(rank, size))
