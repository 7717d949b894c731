-- spec/nn_dist_spec.lua — nn.compile and nn.Trainer with distributed =
-- true (lua/nn/compile.lua, lua/nn/trainer.lua): N ranks stepping their
-- shards of each global batch end with the parameters one process gets
-- on the whole batches (to float rounding: the gradients are summed in
-- another order), also when a batch does not split evenly or leaves a
-- rank without rows; every rank ends identical (batch normalisation's
-- running statistics too); a checkpoint written by 2 ranks resumes on
-- 1 and the other way round; only rank 1 prints; alone, distributed =
-- true is the plain step.  The jobs run spec/dist/nn_train.lua under
-- mpirun (spec/dist/launch.lua); without MPI those cases are pending.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local support = dofile('spec/support.lua')
local launch = dofile('spec/dist/launch.lua')

local WORKER = 'spec/dist/nn_train.lua'

local function maxdiff(a, b)
  assert.same(a:shape(), b:shape())
  return tgl.max(tgl.abs(a:astype('float64') - b:astype('float64'))):get()
end

-- Every array of want and got (two npz tables) within tol of each other.
local function assert_close(want, got, tol, what)
  local n = 0
  for k, a in pairs(want) do
    assert(got[k], (what or '') .. ': ' .. k .. ' missing')
    local d = maxdiff(a, got[k])
    assert(d <= tol, ('%s: %s differs by %g (tolerance %g)'):format(what or '', k, d, tol))
    n = n + 1
  end
  assert.is_true(n > 0)
end

-- The "losses:" line of a worker's output (every rank prints one: all
-- must agree), as numbers.
local function losses(out)
  local lines = {}
  for l in out:gmatch('losses: ([^\n]*)') do lines[#lines + 1] = l end
  assert(#lines > 0, 'no losses line in:\n' .. out)
  for i = 2, #lines do assert.equals(lines[1], lines[i]) end
  local t = {}
  for v in lines[1]:gmatch('%S+') do t[#t + 1] = tonumber(v) end
  return t
end

local function assert_losses(want, got, tol)
  assert.equals(#want, #got)
  for i = 1, #want do assert(math.abs(want[i] - got[i]) <= tol, ('loss %d: %.17g vs %.17g'):format(i, want[i], got[i])) end
end

local function sh_quote(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The worker alone (no mpirun: a job of one).
local function run1(args)
  local parts = { sh_quote(os.getenv('TGL_BIN') or arg[-1]), WORKER }
  for _, a in ipairs(args) do parts[#parts + 1] = sh_quote(a) end
  local out, code = support.sh(table.concat(parts, ' '))
  assert(code == 0, out)
  return out
end

local function runN(np, args)
  local r = launch.run(np, WORKER, args, { timeout = 60 })
  assert(r.ok, ('mpirun -np %d %s failed (status %d):\n%s'):format(np, WORKER, r.status, r.output))
  return r.output
end

local function count(s, pat)
  local n = 0
  for _ in s:gmatch(pat) do n = n + 1 end
  return n
end

describe('nn distributed', function()
  local dir
  setup(function() dir = support.tmpdir('nn_dist') end)

  local saved
  before_each(function() saved = { tgl.config.floatX, tgl.config.compile } end)
  after_each(function() tgl.config.floatX, tgl.config.compile = saved[1], saved[2] end)

  it('refuses a distributed option that is not a boolean, naming it', function()
    local m = nn.Sequential():add(nn.Linear(3, 2))
    local ok, err = pcall(nn.Trainer, { model = m, criterion = nn.MSECriterion(),
                                        optimizer = nn.optim.sgd { lr = 0.1 }, distributed = 'yes' })
    assert.is_false(ok)
    assert.matches("nn.Trainer: option 'distributed' must be a boolean, got a string", tostring(err), 1, true)
    ok, err = pcall(nn.compile, { model = m, criterion = nn.MSECriterion(),
                                  optimizer = nn.optim.sgd { lr = 0.1 }, distributed = 1 })
    assert.is_false(ok)
    assert.matches("nn.compile: option 'distributed' must be a boolean, got a number", tostring(err), 1, true)
  end)

  it('alone, distributed = true takes exactly the plain steps (no allreduce in the graph)', function()
    tgl.config.floatX, tgl.config.compile = 'float64', 'tcc'
    local function run(distributed)
      tgl.manual_seed(3)
      local x = tgl.randn(13, 4)
      local y = tgl.argmax(x[{ {}, { 1, 3 } }], 2):astype('int64')
      local m = nn.Sequential():add(nn.Linear(4, 5)):add(nn.Tanh()):add(nn.Linear(5, 3)):add(nn.LogSoftMax())
      local t = nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(),
                             optimizer = nn.optim.sgd { lr = 0.3, momentum = 0.5 }, distributed = distributed }
      local h = t:fit({ x = x, y = y }, { epochs = 2, batch_size = 4, progress = false,
                                          validation = { x = x, y = y } })
      assert.equals(false, t.distributed)
      for _, e in pairs(t.step._graphs) do
        for _, f in pairs(e.fns) do assert.is_nil(tgl.debugprint(f.f):match('allreduce')) end
      end
      return m:parameters(), h
    end
    local p1, h1 = run(false)
    local p2, h2 = run(true)
    assert.equals(1, tgl.dist.size())
    for i = 1, #p1 do assert.equals(0, maxdiff(p1[i], p2[i])) end
    for e = 1, 2 do
      assert.equals(h1[e].loss, h2[e].loss)
      assert.equals(h1[e].val_loss, h2[e].val_loss)
    end
  end)

  describe('over mpirun', function()
    local ok, why = launch.available()

    it('2 ranks of nn.compile take the steps of one process on the global batch (7 rows, float64 and float32)',
       function()
      if not ok then return pending(why) end
      for _, c in ipairs { { 'float64', 1e-10 }, { 'float32', 2e-5 } } do
        local dtype, tol = c[1], c[2]
        local ref, d2 = dir .. '/compile1.' .. dtype, dir .. '/compile2.' .. dtype
        local want = losses(run1 { 'compile', ref, dtype, 'plain' })
        local out = runN(2, { 'compile', d2, dtype })
        local got = losses(out)
        -- a LookupTable's maxNorm is refused on both ranks
        assert.equals(2, count(out, "refused: [^\n]*step:step: distributed = true cannot train a module that "
                                    .. "updates its own parameter nn.LookupTable.weight from the rows it sees"))
        assert_losses(want, got, tol)
        local a, b1, b2 = tgl.load(ref .. '.r1.npz'), tgl.load(d2 .. '.r1.npz'), tgl.load(d2 .. '.r2.npz')
        -- without batch normalisation: the one-process parameters
        local plain = {}
        for k, v in pairs(a) do if not k:match('^bn%.') then plain[k] = v end end
        assert_close(plain, b1, tol, dtype .. ' rank 1 vs one process')
        -- every rank the same, batch normalisation's state included
        -- (each rank normalises with its own rows: not one process's)
        assert_close(b1, b2, 0, dtype .. ' rank 1 vs rank 2')
      end
    end)

    it('nn.Trainer: 2 and 3 ranks (a rank without rows in the last batch) fit as one process; '
       .. 'checkpoints resume across world sizes; rank 1 alone prints', function()
      if not ok then return pending(why) end
      local ref, ckA, ckB = dir .. '/fit1', dir .. '/A.npz', dir .. '/B.npz'
      -- one process, 4 epochs of 23 rows in global batches of 7 (7, 7, 7, 2)
      local want = losses(run1 { 'fit', ref, '4', 'plain' })
      local P = tgl.load(ref .. '.r1.npz')
      -- 2 ranks, epochs 1-2, then one process resumes to 4
      local out2 = runN(2, { 'fit', dir .. '/fit2', '2', 'checkpoint=' .. ckA })
      assert.equals(1, count(out2, 'epoch 1/2  loss'))
      assert.equals(1, count(out2, 'epoch 2/2  loss'))
      assert_losses({ unpack(want, 1, 4) }, losses(out2), 1e-10)
      local out = run1 { 'fit', dir .. '/fit2r', '4', 'resume=' .. ckA, 'plain' }
      assert.matches('resumed from .* after epoch 2 %(step 8%)', out)
      assert_losses(want, losses(out), 1e-10)
      assert_close(P, tgl.load(dir .. '/fit2r.r1.npz'), 1e-10, '2 ranks then 1')
      -- one process, epochs 1-2, then 2 ranks resume to 4
      run1 { 'fit', dir .. '/fit1b', '2', 'checkpoint=' .. ckB, 'plain' }
      out = runN(2, { 'fit', dir .. '/fit1r', '4', 'resume=' .. ckB })
      assert.equals(1, count(out, 'resumed from'))
      assert.equals(1, count(out, 'epoch 4/4  loss'))
      assert_losses(want, losses(out), 1e-10)
      local r1, r2 = tgl.load(dir .. '/fit1r.r1.npz'), tgl.load(dir .. '/fit1r.r2.npz')
      assert_close(P, r1, 1e-10, '1 then 2 ranks')
      assert_close(r1, r2, 0, 'rank 1 vs rank 2')
      -- 3 ranks: the last batch's 2 rows leave rank 3 none
      out = runN(3, { 'fit', dir .. '/fit3', '4' })
      assert.equals(1, count(out, 'epoch 4/4  loss'))
      assert_losses(want, losses(out), 1e-10)
      assert_close(P, tgl.load(dir .. '/fit3.r1.npz'), 1e-10, '3 ranks')
      assert_close(tgl.load(dir .. '/fit3.r1.npz'), tgl.load(dir .. '/fit3.r3.npz'), 0, 'rank 1 vs rank 3')
    end)
  end)
end)
