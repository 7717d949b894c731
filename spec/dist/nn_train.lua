-- spec/dist/nn_train.lua — the worker of spec/nn_dist_spec.lua: trains a
-- small model with nn.compile or nn.Trainer, distributed = true, in
-- whatever job runs it (mpirun -np N, or alone: a job of one), and
-- writes what the spec compares.
--
--   tgl spec/dist/nn_train.lua compile OUT DTYPE [plain]
--       5 steps of nn.compile (Adam) on global batches of 7 rows, each
--       rank stepping its shard; `plain`: distributed = false on the
--       whole batch (the reference).  Also trains a model with batch
--       normalisation, whose running statistics every rank must share.
--   tgl spec/dist/nn_train.lua fit OUT EPOCHS [checkpoint=PATH] [resume=PATH] [plain]
--       nn.Trainer:fit on 23 rows, global batch 7 (the last one 2 rows),
--       sgd with momentum, validation, progress lines on stdout.
--
-- Each rank writes OUT.rR.npz (R its rank) and prints "losses: ..." (the
-- step or epoch losses it got).  Every rank starts from different
-- weights and generator state (seeded by rank): the spec's comparisons
-- with one process then show that rank 1's are broadcast.
tgl = tgl or require 'tgl'
local nn = require 'nn'

local mode, out = arg[1], arg[2]
local plain = false
local kv = {}
for i = 3, #arg do
  if arg[i] == 'plain' then plain = true end
  local k, v = arg[i]:match('^(%w+)=(.*)$')
  if k then kv[k] = v end
end

tgl.config.compile = 'tcc'        -- the same kernels in every run: exact resumes
tgl.dist.init()
local rank = tgl.dist.rank()

local function save(arrays, losses)
  tgl.save(('%s.r%d.npz'):format(out, rank), arrays)
  local s = {}
  for i, l in ipairs(losses) do s[i] = ('%.17g'):format(l) end
  print('losses: ' .. table.concat(s, ' '))
end

local function params(model, prefix, into)
  for i, p in ipairs(model:parameters()) do into[prefix .. i] = p:clone() end
  return into
end

-- The same data on every rank (one seed), then rank-dependent weights.
local function data(n, dtype)
  tgl.manual_seed(100)
  local x = tgl.randn(n, 5, { dtype = dtype })
  return x, tgl.argmax(x[{ {}, { 1, 3 } }], 2):astype('int64')
end

local function mlp(dtype, bn)
  tgl.config.floatX = dtype
  tgl.manual_seed(rank)
  local m = nn.Sequential():add(nn.Linear(5, 6))
  if bn then m:add(nn.BatchNormalization(6)) end
  m:add(nn.Tanh()):add(nn.Linear(6, 3)):add(nn.LogSoftMax())
  return m
end

if mode == 'compile' then
  local dtype = arg[3]
  local G, steps = 7, 5
  local X, Y = data(G * steps, dtype)
  local arrays, losses = {}, {}
  for _, bn in ipairs { false, true } do
    local m = mlp(dtype, bn)
    local step = nn.compile { model = m, criterion = nn.ClassNLLCriterion(),
                              optimizer = nn.optim.adam { lr = 0.05 }, distributed = not plain }
    for s = 1, steps do
      local first, last = (s - 1) * G + 1, s * G
      local loss
      if plain then
        loss = step:step(X[{ { first, last } }], Y[{ { first, last } }])
      else
        local a, b = tgl.dist.shard(G)
        -- the global count given, or found by the step (odd steps)
        loss = step:step(X[{ { first + a - 1, first + b - 1 } }], Y[{ { first + a - 1, first + b - 1 } }],
                         s % 2 == 0 and G or nil)
      end
      if not bn then losses[#losses + 1] = loss end
    end
    params(m, bn and 'bn.p' or 'p', arrays)
    if bn then
      arrays['bn.running_mean'] = m.modules[2].running_mean:clone()
      arrays['bn.running_var'] = m.modules[2].running_var:clone()
    end
  end
  save(arrays, losses)
  -- a module that renormalises its own rows (maxNorm) is refused, on
  -- every rank, before anything changes
  if not plain then
    local lt = nn.Sequential():add(nn.LookupTable(10, 3, nil, 1.0)):add(nn.View(-1, 6))
                              :add(nn.Linear(6, 2)):add(nn.LogSoftMax())
    local step = nn.compile { model = lt, criterion = nn.ClassNLLCriterion(),
                              optimizer = nn.optim.sgd { lr = 0.1 }, distributed = true }
    local ok, err = pcall(step.step, step, tgl.array({ { rank, 2 } }, 'int64'), tgl.array({ 1 }, 'int64'), 2)
    print('refused: ' .. (ok and 'no' or tostring(err):gsub('\n.*', '')))
  end
elseif mode == 'fit' then
  local epochs = tonumber(arg[3])
  local X, Y = data(23, 'float64')
  local Xv, Yv = data(11, 'float64')
  local m = mlp('float64')
  local t = nn.Trainer { model = m, criterion = nn.ClassNLLCriterion(),
                         optimizer = nn.optim.sgd { lr = 0.2, momentum = 0.9 }, distributed = not plain }
  tgl.manual_seed(7 + rank - 1)         -- the epochs' orders: rank 1's are taken
  local h = t:fit({ x = X, y = Y }, { epochs = epochs, batch_size = 7, validation = { x = Xv, y = Yv },
                                      checkpoint = kv.checkpoint, resume = kv.resume })
  local losses = {}
  for i, r in ipairs(h) do losses[#losses + 1] = r.loss; losses[#losses + 1] = r.val_loss end
  save(params(m, 'p', {}), losses)
else
  error('nn_train.lua: mode must be compile or fit, got ' .. tostring(mode))
end
