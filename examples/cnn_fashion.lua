-- examples/cnn_fashion.lua — a LeNet-style CNN on Fashion-MNIST, Torch7's
-- way: nn modules (conv 5x5x20, max pool 2, conv 5x5x50, max pool 2,
-- 800-500 ReLU, Dropout 0.5, 10, LogSoftMax), ClassNLLCriterion, trained by nn.Trainer
-- (each minibatch one compiled step from nn.compile) with Adam or SGD with
-- momentum.  5000 training images are held out for validation (per-epoch
-- val_loss/val_acc); the test set is scored at the end.  After each epoch
-- a checkpoint (parameters, optimiser state, counters, generator) is
-- written; --resume continues from it up to --epochs, taking exactly the
-- steps the uninterrupted run would have taken.
--
--   tgl examples/cnn_fashion.lua [--epochs N] [--batch B] [--lr R] [--lrdecay D]
--                                [--optim adam|sgd] [--seed S] [--threads T] [--data DIR]
--                                [--out DIR] [--resume]
--
-- Defaults: 10 epochs, batch 64, Adam with lr 1e-3 (sgd: lr 0.01, momentum
-- 0.9), the learning rate decaying as Torch7's optim does it, lr / (1 +
-- step * D) with D = 3e-4, float32.  The README quotes a run's figures.
--
-- Data: Debian's dataset-fashion-mnist (/usr/share/datasets/fashion-mnist).
-- Output: DIR/cnn_fashion.npz, the checkpoint (default DIR /tmp/tgl-cnn-fashion).
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. package.path
local cli = require 'cli'
local nn = require 'nn'

local prog = 'cnn_fashion'
local usage = 'usage: tgl examples/cnn_fashion.lua [--epochs N] [--batch B] [--lr R] [--lrdecay D] [--optim adam|sgd] '
              .. '[--seed S] [--threads T] [--data DIR] [--out DIR] [--resume]\n'
-- --resume is a flag: taken out before the --key value pairs are read
local args, resume = {}, false
for _, a in ipairs(arg or {}) do
  if a == '--resume' then resume = true else args[#args + 1] = a end
end
local opts = { epochs = 10, batch = 64, lr = 0, lrdecay = 3e-4, optim = 'adam', seed = 1, threads = nil,
               data = '/usr/share/datasets/fashion-mnist', out = '/tmp/tgl-cnn-fashion' }
cli.parse_args(prog, args, opts, { optim = true, data = true, out = true }, usage)
if opts.optim ~= 'adam' and opts.optim ~= 'sgd' then
  cli.die(prog, usage, '--optim must be adam or sgd, got %s', opts.optim)
end
if opts.threads then tgl.config.threads = opts.threads end
tgl.config.floatX = 'float32'
os.execute(('mkdir -p %q'):format(opts.out))
local checkpoint = opts.out .. '/cnn_fashion.npz'
if resume then
  local f = io.open(checkpoint, 'rb')
  if not f then cli.die(prog, nil, 'no checkpoint to resume: %s (run without --resume first)', checkpoint) end
  f:close()
end

-- ---------------------------------------------------------------------------
-- Data: images (N, 1, 28, 28), the pixels standardised with the training
-- set's mean and standard deviation (0.2860, 0.3530), labels 1..10.
local function load(images, labels)
  local x = tgl.io.read_idx(opts.data .. '/' .. images)
  local n = x:size(1)
  x = (x:reshape(n, 1, 28, 28):astype('float32') / 255 - 0.2860) / 0.3530
  local y = tgl.io.read_idx(opts.data .. '/' .. labels):astype('int64') + 1
  return { x = x, y = y }
end
local t0 = tgl.time()
local all = cli.try(prog, load, 'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz')
local test = cli.try(prog, load, 't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')
local NV = 5000
local NT = all.x:size(1) - NV
local train = { x = all.x[{ { 1, NT } }], y = all.y[{ { 1, NT } }] }
local valid = { x = all.x[{ { NT + 1, NT + NV } }], y = all.y[{ { NT + 1, NT + NV } }] }
print(('loaded %d training, %d validation and %d test images in %.1f s')
      :format(NT, NV, test.x:size(1), tgl.time() - t0))

-- ---------------------------------------------------------------------------
-- The model, Torch7's default initialisation from tgl's generator.
tgl.manual_seed(opts.seed)
local model = nn.Sequential()
  :add(nn.SpatialConvolution(1, 20, 5, 5)):add(nn.ReLU()):add(nn.SpatialMaxPooling(2, 2, 2, 2))   -- 20x12x12
  :add(nn.SpatialConvolution(20, 50, 5, 5)):add(nn.ReLU()):add(nn.SpatialMaxPooling(2, 2, 2, 2))  -- 50x4x4
  :add(nn.View(800))
  :add(nn.Linear(800, 500)):add(nn.ReLU()):add(nn.Dropout(0.5))
  :add(nn.Linear(500, 10)):add(nn.LogSoftMax())
print(model)

local optimizer
if opts.optim == 'adam' then
  optimizer = nn.optim.adam { lr = opts.lr > 0 and opts.lr or 1e-3, learningRateDecay = opts.lrdecay }
else
  optimizer = nn.optim.sgd { lr = opts.lr > 0 and opts.lr or 0.01, momentum = 0.9,
                             learningRateDecay = opts.lrdecay }
end
local trainer = nn.Trainer { model = model, criterion = nn.ClassNLLCriterion(), optimizer = optimizer }


local history = trainer:fit(train, { epochs = opts.epochs, batch_size = opts.batch, validation = valid,
                                     checkpoint = checkpoint, resume = resume })

-- ---------------------------------------------------------------------------
local loss, acc = trainer:evaluate(test)
local secs, n = 0, 0
for _, r in ipairs(history) do
  if r.seconds then secs, n = secs + r.seconds, n + 1 end
end
local threads = tgl.config.threads
print(('test loss %.4f  test accuracy %.2f%% after %d epochs (%.1f s per epoch of training, batch %d, %s, threads %s)')
      :format(loss, 100 * acc, trainer.epoch, n > 0 and secs / n or 0, opts.batch, tostring(optimizer),
              (threads == nil or threads == 0) and 'auto' or tostring(threads)))
print(('checkpoint: %s (tgl examples/cnn_fashion.lua --resume --epochs %d continues)')
      :format(checkpoint, trainer.epoch + 5))
return acc
