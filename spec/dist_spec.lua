-- dist_spec.lua — tgl.dist and the allreduce op (doc/distributed.md).
--
-- In this process: a job of one (what every script outside mpirun is),
-- the options and errors, the allreduce op's graph (its gradient, its
-- tangent, the bucket stage's program).  Then jobs of 2 and 3 processes
-- started with mpirun (spec/dist/launch.lua), whose scripts check every
-- collective against what each process computes locally
-- (spec/dist/collectives.lua: by hand, and random steps of up to 100
-- variables of random dtypes, shapes and views), and jobs that fail on purpose
-- (spec/dist/faults.lua): each must end the whole job with an error within
-- its timeout.  Without mpirun or MPI the jobs are pending here and fail
-- in CI (spec/support.lua, strict_deps).
tgl = tgl or require 'tgl'
local tgl = tgl
local support = dofile('spec/support.lua')
local launch = dofile('spec/dist/launch.lua')

local function raises(text, f, ...)
  local ok, err = pcall(f, ...)
  assert.is_false(ok, 'expected an error containing: ' .. text)
  assert.truthy(tostring(err):find(text, 1, true),
                ('expected "%s" in:\n%s'):format(text, tostring(err)))
  return tostring(err)
end

local function flat(a) return support.flat(a) end

describe('tgl.dist in a process started alone', function()
  it('is rank 1 of a job of one, with or without MPI', function()
    assert.is_boolean(tgl.dist.available())
    assert.equal(0, tgl.dist.launched_size())
    local r, n = tgl.dist.init()
    assert.equal(1, r)
    assert.equal(1, n)
    assert.is_true(tgl.dist.initialized())
    assert.is_true(tgl.dist.is_root())
    -- a second init changes nothing
    assert.same({ 1, 1 }, { tgl.dist.init() })
  end)

  it('takes a timeout and a bucket size, and names a wrong option', function()
    tgl.dist.init { timeout = 42, bucket_bytes = 4096 }
    assert.equal(42, tgl.dist.timeout())
    assert.equal(4096, tgl.dist.bucket_bytes())
    tgl.dist.init { timeout = 300, bucket_bytes = 1048576 }
    raises("unknown option 'timout'", tgl.dist.init, { timout = 5 })
    raises('timeout must be a number of seconds > 0', tgl.dist.init, { timeout = 0 })
    raises('bucket_bytes must be a whole number of bytes >= 1', tgl.dist.init, { bucket_bytes = 0.5 })
  end)

  it('names a bad environment variable instead of using the default', function()
    for _, case in ipairs { { 'TGL_DIST_TIMEOUT', 'abc', 'seconds > 0' },
                            { 'TGL_DIST_BUCKET_BYTES', '-5', 'a number of bytes > 0' },
                            { 'TGL_DIST_OVERLAP', 'maybe', 'on, off or auto' } } do
      local _, err, code = support.run_process(([[
        local ffi = require 'ffi'
        ffi.cdef 'int setenv(const char *, const char *, int);'
        ffi.C.setenv('%s', '%s', 1)
        require('tgl').dist.init()
      ]]):format(case[1], case[2]))
      assert.equal(1, code)
      local want = ("tgl.dist.init: environment variable %s='%s' is not valid: expected %s"):format(unpack(case))
      assert.truthy(err:find(want, 1, true), err)
    end
  end)

  it('runs every collective as the identity', function()
    local a = tgl.array({ { 1, 2 }, { 3, 4 } }, 'float32')
    for _, op in ipairs { 'sum', 'mean', 'max', 'min', 'prod' } do
      assert.equal(a, tgl.dist.allreduce(a, op))
      assert.same({ 1, 2, 3, 4 }, flat(a))
    end
    local b = tgl.array({ 5, 6 }, 'int64')
    assert.equal(b, tgl.dist.broadcast(b, 1))
    assert.same({ 5, 6 }, flat(b))
    local g = tgl.dist.allgather(a)
    assert.same({ 1, 2, 2 }, g:shape())
    assert.same({ 1, 2, 3, 4 }, flat(g))
    tgl.dist.barrier()
  end)

  it('names bad arguments', function()
    raises("tgl.dist.allreduce: op must be 'sum', 'mean', 'max', 'min' or 'prod', got 'avg'",
           tgl.dist.allreduce, tgl.ones({ 2 }), 'avg')
    raises("'mean' needs a float array (got int64)", tgl.dist.allreduce, tgl.arange(3), 'mean')
    raises('reduces float32, float64, int32 and int64 arrays, got bool',
           tgl.dist.allreduce, tgl.gt(tgl.ones({ 2 }), 0), 'max')
    raises('tgl.dist.broadcast: root must be a rank from 1 to 1, got 2', tgl.dist.broadcast,
           tgl.ones({ 2 }), 2)
    raises('tgl.dist.broadcast: root must be a rank (an integer from 1)', tgl.dist.broadcast,
           tgl.ones({ 2 }), 1.5)
    raises('tgl.dist.allgather: expected an array, got table', tgl.dist.allgather, { 1, 2 })
    raises('tgl.dist.allgather: the result has one more axis', tgl.dist.allgather,
           tgl.ones({ 1, 1, 1, 1, 1, 1, 1, 1 }))
  end)

  it('shards n items into contiguous parts that differ by at most one', function()
    local function parts(n, size)
      local out = {}
      for r = 1, size do out[r] = { tgl.dist.shard(n, r, size) } end
      return out
    end
    assert.same({ { 1, 4 }, { 5, 7 } }, parts(7, 2))
    assert.same({ { 1, 1 }, { 2, 2 }, { 3, 2 } }, parts(2, 3))
    assert.same({ { 1, 0 } }, parts(0, 1))
    assert.same({ 1, 10 }, { tgl.dist.shard(10) })
    raises('n must be a count', tgl.dist.shard, -1)
  end)
end)

describe('tgl.allreduce, the graph op', function()
  it('is the identity in a job of one, and the compiler drops it', function()
    local x = tgl.vector('x', 'float64')
    local y = tgl.allreduce(x * 2, { op = 'mean' })
    local f = tgl.compile { inputs = { x }, outputs = { y } }
    assert.same({ 2, 4 }, flat(f(tgl.array({ 1, 2 }, 'float64'))))
    assert.falsy(f:program():find('allreduce'))
    local f2 = tgl.compile { inputs = { x }, outputs = { y }, mode = 'FAST_COMPILE' }
    assert.truthy(f2:program():find('allreduce'))
    assert.same({ 2, 4 }, flat(f2(tgl.array({ 1, 2 }, 'float64'))))
    -- on arrays it runs at once
    assert.same({ 3 }, flat(tgl.allreduce(tgl.array({ 3 }, 'float64'), 'sum')))
  end)

  it('has the allreduce of the incoming gradient as its gradient, and of the direction as its tangent', function()
    local x = tgl.vector('x', 'float64')
    local cost = tgl.sum(tgl.allreduce(x * x, 'sum') * tgl.array({ 1, 2, 3 }, 'float64'))
    local g = tgl.grad(cost, x)
    assert.truthy(tgl.debugprint(g):find('allreduce'))
    local f = tgl.compile { inputs = { x }, outputs = { g }, mode = 'FAST_COMPILE' }
    assert.same({ 2, 8, 18 }, flat(f(tgl.array({ 1, 2, 3 }, 'float64'))))
    local v = tgl.vector('v', 'float64')
    local jv = tgl.Rop(tgl.allreduce(x * x, 'mean'), x, v)
    local fr = tgl.compile { inputs = { x, v }, outputs = { jv }, mode = 'FAST_COMPILE' }
    assert.same({ 2, 0, 6 }, flat(fr(tgl.array({ 1, 2, 3 }, 'float64'), tgl.array({ 1, 0, 1 }, 'float64'))))
    raises("'max' has no gradient", tgl.grad, tgl.sum(tgl.allreduce(x, 'max')), x)
  end)

  it('names a bad reduction or dtype', function()
    local x = tgl.vector('x', 'float32')
    raises("tgl.allreduce: op must be 'sum', 'mean', 'max', 'min' or 'prod', got 'avg'",
           tgl.allreduce, x, 'avg')
    raises("unknown option 'opp'", tgl.allreduce, x, { opp = 'sum' })
    raises("'mean' needs a float array", tgl.allreduce, tgl.ivector('i'), 'mean')
    raises('reduces float32, float64, int32 and int64', tgl.allreduce, tgl.bvector('b'), 'sum')
  end)

  it('stays in the program of a process that has not joined, and is the identity there', function()
    local out, err, code = support.run_process([[
      local tgl = require 'tgl'
      local x = tgl.vector('x', 'float64')
      local f = tgl.compile { inputs = { x }, outputs = { tgl.allreduce(x, 'sum') + 1 } }
      io.write(tostring(f:program():find('allreduce') ~= nil), ' ', f(tgl.array({ 1, 2 }, 'float64')):get(2))
    ]])
    assert.equal(0, code, err)
    assert.equal('true 3', out)
  end)

  it('fails in a process a launcher started that did not join', function()
    local _, err, code = support.run_process([[
      local ffi = require 'ffi'
      ffi.cdef 'int setenv(const char *, const char *, int);'
      ffi.C.setenv('OMPI_COMM_WORLD_SIZE', '2', 1)
      local tgl = require 'tgl'
      local x = tgl.vector('x', 'float64')
      local f = tgl.compile { inputs = { x }, outputs = { tgl.allreduce(x, 'sum') } }
      f(tgl.array({ 1, 2 }, 'float64'))
    ]])
    assert.equal(1, code)
    assert.truthy(err:find('this process is one of 2 that a launcher (mpirun) started: call tgl.dist.init() first', 1, true), err)
  end)
end)

describe('jobs of several processes (mpirun)', function()
  local function need()
    local ok, why = launch.available()
    if not ok then support.missing_dep(why) return false end
    return true
  end

  local function passed(r, np)
    assert.is_true(r.ok, ('mpirun -np %d failed (status %d) after %.1f s:\n%s'):format(np, r.status, r.seconds, r.output))
    for rank = 1, np do
      assert.truthy(r.output:find(('collectives ok %d %d'):format(rank, np), 1, true), r.output)
    end
  end

  it('every collective and the compiled allreduce, 2 processes', function()
    if not need() then return end
    passed(launch.run(2, 'spec/dist/collectives.lua', {}, { timeout = 240 }), 2)
  end)

  it('every collective and the compiled allreduce, 3 processes', function()
    if not need() then return end
    passed(launch.run(3, 'spec/dist/collectives.lua', {}, { timeout = 240 }), 3)
  end)

  it('the compiled allreduce on a device whose memory the host may not read (sim)', function()
    if not need() then return end
    passed(launch.run(2, 'spec/dist/collectives.lua', { 'compiled', 'random' },
                      { timeout = 240, env = { TGL_DEVICE = 'sim' } }), 2)
  end)

  -- A job that fails must end with an error, never hang: within its own
  -- timeout plus the launcher's start and stop.
  local function fails(mode, text, within)
    local r = launch.run(2, 'spec/dist/faults.lua', { mode }, { timeout = 90 })
    assert.is_false(r.ok, 'the job passed:\n' .. r.output)
    assert.truthy(r.status ~= 124 and r.status ~= 137 or mode == 'kill',
                  ('the job hung until killed (status %d):\n%s'):format(r.status, r.output))
    assert.truthy(r.output:find(text, 1, true), ('expected "%s" in:\n%s'):format(text, r.output))
    assert.truthy(not r.output:find('finished 1', 1, true), r.output)
    assert.truthy(r.seconds < within, ('took %.1f s:\n%s'):format(r.seconds, r.output))
  end

  it('a process that raises ends the job, whose others wait in an allreduce', function()
    if not need() then return end
    fails('raise', 'rank 2 fails on purpose', 60)
  end)

  it('a process killed with SIGKILL ends the job', function()
    if not need() then return end
    fails('kill', 'exited on signal 9', 60)
  end)

  it('a process that stops calling collectives makes the others fail after the timeout', function()
    if not need() then return end
    fails('skip', 'rank 1 of 2 waited 1 s for the other processes', 60)
  end)

  it('a process that raises between compiled steps ends the job', function()
    if not need() then return end
    fails('step', 'rank 2 fails at step 5 on purpose', 60)
  end)
end)
