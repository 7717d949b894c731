-- spec/nn_trainer_spec.lua — lua/nn/trainer.lua: nn.Trainer's fit.  An
-- epoch equals the same steps taken by hand through nn.compile, the
-- reported losses and accuracies equal the eager forward's, a shuffled
-- epoch visits every example once, resuming from a checkpoint (in this
-- process with a fresh model, or in a new process) gives bit-identical
-- parameters to the uninterrupted run (float64; Dropout, momentum, Adam
-- and a module with running statistics in the model), a failed
-- checkpoint write leaves the old file, early stopping, Torch7-style
-- datasets, progress lines, and errors at the user's line.
tgl = tgl or require 'tgl'
local tgl = tgl
local nn = require 'nn'
local support = dofile('spec/support.lua')

local SPEC = 'nn_trainer_spec.lua'

local function maxdiff(a, b)
  assert.same(a:shape(), b:shape())
  return tgl.max(tgl.abs(a - b)):get()
end

-- A module with running statistics of its own, updated in forward as
-- batch normalisation's are (nn._add_update): y = x - running_mean, the
-- running mean of the inputs' batch means (momentum 0.1), so the output
-- depends on the state a checkpoint must keep.
local Center = nn.class('SpecRunningCenter', nn.Module)
function Center:__init(n)
  nn.Module.__init(self)
  self.running_mean = tgl.zeros(n, { dtype = self._dtype })
end
function Center:graph(x)
  local rm = self:_var('running_mean')
  if self.train then nn._add_update(rm, rm * 0.9 + tgl.mean(x, 1) * 0.1) end
  return x - rm
end

-- A 3-class toy problem: the class is the largest of the first three
-- coordinates.
local function toy(n, seed)
  tgl.manual_seed(seed)
  local x = tgl.randn(n, 4)
  return { x = x, y = tgl.argmax(x[{ {}, { 1, 3 } }], 2):astype('int64') }
end

local function mlp(dropout, center)
  local m = nn.Sequential()
  if center then m:add(nn.SpecRunningCenter(4)) end
  m:add(nn.Linear(4, 8)):add(nn.Tanh())
  if dropout then m:add(nn.Dropout(0.25)) end
  m:add(nn.Linear(8, 3)):add(nn.LogSoftMax())
  return m
end

local function params_of(m)
  local w = m:parameters()
  local out = {}
  for i, a in ipairs(w) do out[i] = a:clone() end
  return out
end

local function assert_identical(want, got)
  assert.equals(#want, #got)
  for i = 1, #want do assert.equals(0, maxdiff(want[i], got[i])) end
end

local quiet = { progress = false }
local function with(opts)
  local o = { progress = false }
  for k, v in pairs(opts) do o[k] = v end
  return o
end

describe('nn.Trainer', function()
  -- Runs compared bit for bit must run the same kernels: under the
  -- default compile = 'tiered' a kernel runs libtcc's code until the
  -- system compiler's is swapped in, whenever that is; 'tcc' keeps one.
  local saved_floatX, saved_compile
  before_each(function()
    saved_floatX, saved_compile = tgl.config.floatX, tgl.config.compile
    tgl.config.floatX, tgl.config.compile = 'float64', 'tcc'
  end)
  after_each(function() tgl.config.floatX, tgl.config.compile = saved_floatX, saved_compile end)

  it('takes the same steps as nn.compile by hand and reports their mean loss', function()
    local d = toy(50, 1)
    tgl.manual_seed(7)
    local m1 = mlp()
    tgl.manual_seed(7)
    local m2 = mlp()
    local crit = nn.ClassNLLCriterion()
    local t = nn.Trainer { model = m1, criterion = crit, optimizer = nn.optim.sgd { lr = 0.2, momentum = 0.5 } }
    local h = t:fit(d, with { epochs = 2, batch_size = 16, shuffle = false })
    local step = nn.compile { model = m2, criterion = nn.ClassNLLCriterion(),
                              optimizer = nn.optim.sgd { lr = 0.2, momentum = 0.5 } }
    local sums = {}
    for e = 1, 2 do
      local sum = 0
      for s = 1, 50, 16 do                       -- 16, 16, 16 and a last batch of 2
        local k = math.min(s + 15, 50)
        sum = sum + step:step(d.x[{ { s, k } }], d.y[{ { s, k } }]) * (k - s + 1)
      end
      sums[e] = sum / 50
    end
    assert_identical(params_of(m2), params_of(m1))
    assert.equals(2, #h)
    assert.equals(8, t.iteration)
    assert.equals(2, t.epoch)
    assert.is_true(math.abs(h[1].loss - sums[1]) <= 1e-12)
    assert.is_true(math.abs(h[2].loss - sums[2]) <= 1e-12)
    assert.is_true(h[2].loss < h[1].loss)
    assert.is_nil(h[1].val_loss)
    assert.is_true(h[1].seconds >= 0 and h[1].examples_per_second > 0)
  end)

  it('drop_last leaves out the last partial batch', function()
    local d = toy(50, 1)
    local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
    t:fit(d, with { epochs = 1, batch_size = 16, drop_last = true })
    assert.equals(3, t.iteration)
    t:fit(d, with { epochs = 2, batch_size = 16 })
    assert.equals(7, t.iteration)
  end)

  it('visits every example once per shuffled epoch (lr 0: the mean loss is the whole set\'s)', function()
    local d = toy(53, 2)
    local m = mlp()
    local crit = nn.ClassNLLCriterion()
    local whole = crit:forward(m:forward(d.x), d.y)
    local t = nn.Trainer { model = m, criterion = crit, optimizer = nn.optim.sgd { lr = 0 } }
    local h = t:fit(d, with { epochs = 3, batch_size = 7 })
    for e = 1, 3 do assert.is_true(math.abs(h[e].loss - whole) <= 1e-12, 'epoch ' .. e) end
    -- sizeAverage = false: the steps' losses are sums, still reported per example
    crit.sizeAverage = false
    local h2 = nn.Trainer { model = m, criterion = crit, optimizer = nn.optim.sgd { lr = 0 } }
                 :fit(d, with { epochs = 1, batch_size = 7 })
    assert.is_true(math.abs(h2[1].loss - whole) <= 1e-12)
  end)

  it('shuffles with tgl\'s generator: the same seed gives the same run, another order another', function()
    local d = toy(60, 3)
    local function run(seed, shuffle)
      tgl.manual_seed(5)
      local m = mlp()
      tgl.manual_seed(seed)
      nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.3 } }
        :fit(d, with { epochs = 2, batch_size = 8, shuffle = shuffle })
      return params_of(m)
    end
    local a, b, c, u = run(1, true), run(1, true), run(2, true), run(1, false)
    assert_identical(a, b)
    assert.is_true(maxdiff(a[1], c[1]) > 1e-6)
    assert.is_true(maxdiff(a[1], u[1]) > 1e-6)
  end)

  it('validates after each epoch: loss and accuracy as the eager forward gives them', function()
    local d, v = toy(80, 4), toy(37, 5)
    local m = mlp(true)
    local crit = nn.ClassNLLCriterion()
    local t = nn.Trainer { model = m, criterion = crit, optimizer = nn.optim.sgd { lr = 0.5 } }
    local h = t:fit(d, with { epochs = 3, batch_size = 10, validation = v })
    assert.is_true(m.modules[3].train)           -- Dropout back in training mode
    m:evaluate()
    local out = m:forward(v.x)
    local loss = crit:forward(out, v.y)
    local hits = tgl.sum(tgl.eq(tgl.argmax(out, 2), v.y)):get()
    m:training()
    assert.is_true(math.abs(h[3].val_loss - loss) <= 1e-12)
    assert.equals(hits / 37, h[3].val_accuracy)
    assert.is_true(h[3].val_accuracy > 0.6)
    local el, ea = t:evaluate(v, { batch_size = 5 })         -- trainer:evaluate: the same figures
    assert.is_true(math.abs(el - loss) <= 1e-12)
    assert.equals(hits / 37, ea)
    assert.is_true(m.modules[3].train)
    assert.is_true(h[3].val_loss < h[1].val_loss)
    -- MSE: a loss and no accuracy
    local r = { x = d.x, y = tgl.randn(80, 3) }
    local h2 = nn.Trainer { model = nn.Sequential():add(nn.Linear(4, 3)), criterion = nn.MSECriterion(),
                            optimizer = nn.optim.sgd { lr = 0.1 } }
                 :fit(r, with { epochs = 1, batch_size = 16, validation = r })
    assert.is_number(h2[1].val_loss)
    assert.is_nil(h2[1].val_accuracy)
  end)

  it('stops early when the validation loss has not improved for patience epochs', function()
    local d = toy(40, 6)
    -- lr 0: the validation loss never improves after the first epoch
    local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0 } }
    local h = t:fit(d, with { epochs = 10, batch_size = 10, validation = d, patience = 2 })
    assert.equals(3, #h)
    assert.is_true(h.stopped_early)
    assert.equals(1, h.best_epoch)
    assert.equals(h[1].val_loss, h.best_val_loss)
    -- a problem that keeps improving runs every epoch
    local t2 = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.2 } }
    local h2 = t2:fit(d, with { epochs = 4, batch_size = 10, validation = d, patience = 1, shuffle = false })
    assert.equals(4, #h2)
    assert.is_false(h2.stopped_early)
    assert.equals(4, h2.best_epoch)
  end)

  describe('checkpoints', function()
    local dir
    before_each(function() dir = support.tmpdir('nn_trainer') end)

    -- Two epochs straight, and one epoch, a checkpoint, a fresh model and
    -- optimiser (other initial weights, the generator elsewhere) resumed
    -- for the second: the parameters and running statistics are equal to
    -- the last bit.
    local function resume_case(make_opt)
      local d, v = toy(45, 8), toy(20, 9)
      local function build(seed)
        tgl.manual_seed(seed)
        local m = mlp(true, true)
        return m, nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = make_opt() }
      end
      local opts = with { batch_size = 8, validation = v, checkpoint = dir .. '/straight.npz' }
      local m1, t1 = build(1)
      tgl.manual_seed(100)
      opts.epochs = 2
      t1:fit(d, opts)
      local m2, t2 = build(1)
      tgl.manual_seed(100)
      opts.epochs, opts.checkpoint = 1, dir .. '/ck.npz'
      t2:fit(d, opts)
      assert.is_true(maxdiff(m1.modules[2].weight, m2.modules[2].weight) > 1e-6)   -- one epoch is not two
      local m3, t3 = build(2)
      tgl.manual_seed(999)
      opts.epochs, opts.resume = 2, true
      local h = t3:fit(d, opts)
      assert_identical(params_of(m1), params_of(m3))
      assert.equals(0, maxdiff(m1.modules[1].running_mean, m3.modules[1].running_mean))
      assert.is_true(maxdiff(m1.modules[1].running_mean, tgl.zeros(4)) > 0)
      assert.equals(t1.iteration, t3.iteration)
      assert.equals(2, #h)                           -- the history goes on from the checkpoint's
      assert.equals(t1.history[1].loss, h[1].loss)
      assert.equals(t1.history[2].val_loss, h[2].val_loss)
      return d, v
    end

    it('resuming gives exactly the uninterrupted run (sgd with momentum, Dropout, running statistics)', function()
      resume_case(function() return nn.optim.sgd { lr = 0.3, momentum = 0.9 } end)
    end)

    it('resuming gives exactly the uninterrupted run (adam: its step counter and moments)', function()
      resume_case(function() return nn.optim.adam { lr = 0.01 } end)
    end)

    it('resuming in a new process gives exactly the uninterrupted run', function()
      local d, v = toy(45, 8), toy(20, 9)
      tgl.save(dir .. '/data.npz', { x = d.x, y = d.y, vx = v.x, vy = v.y })
      local script = [[
        local tgl = require 'tgl'
        local nn = require 'nn'
        tgl.config.floatX = 'float64'
        tgl.config.compile = 'tcc'
        local D = tgl.load(']] .. dir .. [[/data.npz')
        local EPOCHS, SEED, RESUME = ...
        tgl.manual_seed(SEED)
        local m = nn.Sequential():add(nn.Linear(4, 8)):add(nn.Tanh()):add(nn.Dropout(0.25))
                                 :add(nn.Linear(8, 3)):add(nn.LogSoftMax())
        local t = nn.Trainer{model = m, criterion = nn.ClassNLLCriterion(),
                             optimizer = nn.optim.sgd{lr = 0.3, momentum = 0.9, nesterov = true, dampening = 0}}
        tgl.manual_seed(100)
        t:fit({x = D.x, y = D.y}, {epochs = EPOCHS, batch_size = 8, validation = {x = D.vx, y = D.vy},
                                   checkpoint = ']] .. dir .. [[/p.npz', resume = RESUME, progress = false})
        local w = m:parameters()
        tgl.save(']] .. dir .. [[/params' .. EPOCHS .. (RESUME and 'r' or '') .. '.npz',
                 {w1 = w[1], b1 = w[2], w2 = w[3], b2 = w[4]})
      ]]
      local function run(epochs, seed, resume)
        local out, err, code = support.run_process(('local function main(...) %s end main(%d, %d, %s)')
                                                   :format(script, epochs, seed, tostring(resume)))
        assert.equals(0, code, err)
      end
      run(2, 1, false)
      os.remove(dir .. '/p.npz')
      run(1, 1, false)
      run(2, 3, true)
      local a, b = tgl.load(dir .. '/params2.npz'), tgl.load(dir .. '/params2r.npz')
      for _, k in ipairs { 'w1', 'b1', 'w2', 'b2' } do assert.equals(0, maxdiff(a[k], b[k]), k) end
    end)

    it('holds the parameters, the optimiser state, the counters and the generator', function()
      local d = toy(30, 10)
      local m = mlp(false, true)
      local opt = nn.optim.sgd { lr = 0.1, momentum = 0.9 }
      local t = nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = opt }
      local path = dir .. '/c.npz'
      t:fit(d, with { epochs = 2, batch_size = 10, checkpoint = path })
      local ck = tgl.load(path)
      -- model.K: module K of listModules (1: the Sequential itself)
      assert.equals(0, maxdiff(ck['model.3.weight'], m.modules[2].weight))
      assert.equals(0, maxdiff(ck['model.5.bias'], m.modules[4].bias))
      assert.equals(0, maxdiff(ck['model.2.running_mean'], m.modules[1].running_mean))
      assert.is_nil(ck['model.3.gradWeight'])
      assert.is_nil(ck['model.3.output'])
      for k, a in pairs(opt.state) do assert.equals(0, maxdiff(ck['optim.' .. k], a), k) end
      assert.is_not_nil(ck['optim.dfdx.1'])
      assert.equals(0.1, ck['optim_config.learningRate']:get())
      assert.same({ 2, 6, 0, 0 }, ck['trainer.counters']:totable())
      assert.same({ 2 }, ck['history.loss']:shape())
      -- the generator's state is restored by load
      local ahead = tgl.rand(3):totable()
      tgl.manual_seed(12345)
      t:load(path)
      assert.same(ahead, tgl.rand(3):totable())
      -- no temporary files are left next to it
      local listing = support.sh("ls '" .. dir .. "'")
      assert.is_nil(listing:find('tmp'))
    end)

    it('a learning rate changed between fits is saved and restored', function()
      local d = toy(20, 11)
      local opt = nn.optim.sgd { lr = 0.1 }
      local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = opt }
      t:fit(d, with { epochs = 1, batch_size = 10 })
      opt.config.learningRate = 0.025
      t:fit(d, with { epochs = 2, batch_size = 10, checkpoint = dir .. '/lr.npz' })
      local opt2 = nn.optim.sgd { lr = 0.1 }
      nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = opt2 }:load(dir .. '/lr.npz')
      assert.equals(0.025, opt2.config.learningRate)
    end)

    it('resume = true without a checkpoint file starts afresh; at the last epoch it trains no more', function()
      local d = toy(20, 12)
      local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      local path = dir .. '/fresh.npz'
      t:fit(d, with { epochs = 1, batch_size = 10, checkpoint = path, resume = true })
      assert.equals(2, t.iteration)
      local m = mlp()
      local t2 = nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      local h = t2:fit(d, with { epochs = 1, batch_size = 10, checkpoint = path, resume = true })
      assert.equals(2, t2.iteration)
      assert.equals(1, #h)
    end)

    it('a checkpoint of another model or optimiser is refused and changes nothing', function()
      local d = toy(20, 13)
      local path = dir .. '/other.npz'
      nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
        :fit(d, with { epochs = 1, batch_size = 10, checkpoint = path })
      local m = nn.Sequential():add(nn.Linear(4, 5)):add(nn.Tanh()):add(nn.Linear(5, 3)):add(nn.LogSoftMax())
      local before = params_of(m)
      local t = nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      local ok, err = pcall(function() t:fit(d, with { epochs = 2, resume = path }) end)
      assert.is_false(ok)
      assert.matches(SPEC .. ':%d+: nn.Trainer: the checkpoint .*other.npz does not fit this model: '
                     .. 'model.2.bias is float64 8 there, float64 5 here', err)
      assert_identical(before, params_of(m))
      assert.equals(0, t.epoch)
      local t2 = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(),
                              optimizer = nn.optim.sgd { lr = 0.1, momentum = 0.9 } }
      ok, err = pcall(function() t2:load(path) end)
      assert.is_false(ok)
      assert.matches('does not fit this optimizer: it has no optim.dfdx.1', err, 1, true)
      ok, err = pcall(function() t2:load(dir .. '/missing.npz') end)
      assert.matches(SPEC .. ':%d+: nn.Trainer: cannot read the checkpoint .*missing.npz', err)
      tgl.save(dir .. '/plain.npz', { a = tgl.zeros(2) })
      ok, err = pcall(function() t2:load(dir .. '/plain.npz') end)
      assert.matches('plain.npz is not a checkpoint written by nn.Trainer', err, 1, true)
    end)

    it('a state array a fresh module makes only in its first forward is given to it', function()
      local Lazy = nn.class('SpecLazyCenter', nn.Module)
      function Lazy:graph(x)
        self.running_mean = self.running_mean or tgl.zeros(4, { dtype = x.dtype })
        return nn.SpecRunningCenter.graph(self, x)
      end
      local function model()
        tgl.manual_seed(4)
        return nn.Sequential():add(nn.SpecLazyCenter()):add(nn.Linear(4, 3)):add(nn.LogSoftMax())
      end
      local d = toy(24, 19)
      local function trainer(m) return nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(),
                                                    optimizer = nn.optim.sgd { lr = 0.5 } } end
      local m1 = model()
      trainer(m1):fit(d, with { epochs = 2, batch_size = 6 })
      trainer(model()):fit(d, with { epochs = 1, batch_size = 6, checkpoint = dir .. '/lazy.npz' })
      local m3 = model()
      assert.is_nil(m3.modules[1].running_mean)
      trainer(m3):fit(d, with { epochs = 2, batch_size = 6, resume = dir .. '/lazy.npz' })
      assert.equals(0, maxdiff(m1.modules[1].running_mean, m3.modules[1].running_mean))
      assert_identical(params_of(m1), params_of(m3))
    end)

    it('a failed write raises and leaves the previous checkpoint as it was', function()
      local d = toy(20, 14)
      -- a name whose temporary sibling (name .. '.tmp.XXXXXX') is too
      -- long for the file system: the write fails before the rename
      local name = dir .. '/' .. ('c'):rep(250) .. '.npz'
      local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      t:fit(d, with { epochs = 1, batch_size = 10, checkpoint = dir .. '/short.npz' })
      assert.is_true(os.rename(dir .. '/short.npz', name))
      local old = support.read_file(name)
      local ok, err = pcall(function() t:fit(d, with { epochs = 2, batch_size = 10, checkpoint = name }) end)
      assert.is_false(ok)
      assert.matches(SPEC .. ':%d+: nn.Trainer: cannot write the checkpoint ', err)
      assert.equals(old, support.read_file(name))
    end)
  end)

  it('takes a Torch7 dataset (dataset:size(), dataset[i] = {input, target})', function()
    local d = toy(30, 15)
    local t7 = {}
    function t7:size() return 30 end
    for i = 1, 30 do t7[i] = { d.x[{ i }], d.y:get(i) } end
    local function run(data)
      tgl.manual_seed(3)
      local m = mlp()
      nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.2 } }
        :fit(data, with { epochs = 2, batch_size = 8 })
      return params_of(m)
    end
    assert_identical(run(d), run(t7))
  end)

  it('prints one plain line per epoch when stdout is not a terminal; nothing with progress = false', function()
    local d = toy(20, 16)
    local lines = {}
    local saved = nn.Trainer._write
    nn.Trainer._write = function(s) lines[#lines + 1] = s end
    local ok, err = pcall(function()
      local t = nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
      t:fit(d, { epochs = 2, batch_size = 10, validation = d })
      t:fit(d, { epochs = 3, batch_size = 10, progress = false })
    end)
    nn.Trainer._write = saved
    assert.is_true(ok, err)
    assert.equals(2, #lines)
    assert.matches('^epoch 1/2  loss %d%.%d+  val_loss %d%.%d+  val_acc %d+%.%d%d%%  %d+ ex/s  %d+%.%d s\n$', lines[1])
    assert.matches('^epoch 2/2 ', lines[2])
  end)

  describe('errors at the user\'s line', function()
    local d = toy(20, 17)
    local function err_of(f)
      local ok, e = pcall(f)
      assert.is_false(ok)
      return e
    end
    local function trainer()
      return nn.Trainer { model = mlp(), criterion = nn.ClassNLLCriterion(), optimizer = nn.optim.sgd { lr = 0.1 } }
    end

    it('bad construction', function()
      assert.matches(SPEC .. ':%d+: nn.Trainer: model must be an nn module',
                     err_of(function() return nn.Trainer { criterion = nn.ClassNLLCriterion() } end))
      assert.matches(SPEC .. ':%d+: nn.Trainer: criterion must be an nn criterion',
                     err_of(function() return nn.Trainer { model = mlp() } end))
      assert.matches(SPEC .. ':%d+: nn.Trainer: optimizer is missing',
                     err_of(function() return nn.Trainer { model = mlp(), criterion = nn.MSECriterion() } end))
      assert.matches(SPEC .. ":%d+: nn.Trainer: unknown option 'optimiser' %(did you mean 'optimizer'%?%)",
                     err_of(function() return nn.Trainer { model = mlp(), criterion = nn.MSECriterion(), optimiser = 1 } end))
    end)

    it('bad datasets', function()
      local t = trainer()
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: dataset.y must be an array %(the targets, first axis = examples%), got nothing',
                     err_of(function() t:fit({ x = d.x }, quiet) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: dataset.x must be an array',
                     err_of(function() t:fit({ y = d.y }, quiet) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: dataset.x has 20 examples %(shape 20x4%) but dataset.y has 7 %(shape 7%)',
                     err_of(function() t:fit({ x = d.x, y = d.y[{ { 1, 7 } }] }, quiet) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: validation.x has 20 examples',
                     err_of(function() t:fit(d, with { validation = { x = d.x, y = d.y[{ { 1, 3 } }] } }) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: dataset must be a table',
                     err_of(function() t:fit(d.x, quiet) end))
      assert.equals(0, t.iteration)
    end)

    it('bad options', function()
      local t = trainer()
      assert.matches(SPEC .. ":%d+: nn.Trainer:fit: unknown option 'epoch' %(did you mean 'epochs'%?%)",
                     err_of(function() t:fit(d, { epoch = 2 }) end))
      assert.matches(SPEC .. ":%d+: nn.Trainer:fit: unknown option 'lr' %(known options: batch_size, checkpoint",
                     err_of(function() t:fit(d, { lr = 2 }) end))
      assert.matches(SPEC .. ":%d+: nn.Trainer:fit: option 'shuffle' must be a boolean, got a string",
                     err_of(function() t:fit(d, { shuffle = 'yes' }) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: option batch_size must be an integer >= 1, got 2.5',
                     err_of(function() t:fit(d, { batch_size = 2.5 }) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: patience %(early stopping%) needs a validation set',
                     err_of(function() t:fit(d, { patience = 2 }) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: resume = true needs the option checkpoint',
                     err_of(function() t:fit(d, { resume = true }) end))
      assert.matches(SPEC .. ':%d+: nn.Trainer:fit: batch_size 30 is larger than the dataset %(20 examples%)',
                     err_of(function() t:fit(d, { batch_size = 30, drop_last = true }) end))
      assert.equals(0, t.iteration)
    end)

    it('a target that does not fit the model is the step\'s error, at the user\'s line', function()
      local t = trainer()
      local e = err_of(function() t:fit({ x = d.x, y = d.y + 5 }, with { batch_size = 10 }) end)
      assert.matches(SPEC .. ':%d+: step:step: the target does not fit', e)
    end)
  end)
end)
