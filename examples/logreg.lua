-- examples/logreg.lua — logistic regression on Fashion-MNIST, the Theano
-- tutorial way: the data sits in shared variables, a symbolic minibatch
-- index selects the rows (givens), and one compiled function computes the
-- cost and applies the SGD updates.
--
--   tgl examples/logreg.lua [--epochs N] [--lr R] [--batch B] [--data DIR]
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. package.path
local cli = require 'cli'
local opts = { epochs = 5, lr = 0.1, batch = 60, data = '/usr/share/datasets/fashion-mnist' }
cli.parse_args('logreg', arg, opts, { data = true },
               'usage: tgl examples/logreg.lua [--epochs N] [--lr R] [--batch B] [--data DIR]', {})

-- Pixels scaled to [0, 1] as float32; labels 1..10 as int32 (tgl is 1-based).
local function load(images, labels)
  local x = tgl.io.read_idx(opts.data .. '/' .. images)
  local n = x:size(1)
  x = x:reshape(n, 28 * 28):astype('float32') / 255
  local y = tgl.io.read_idx(opts.data .. '/' .. labels):astype('int32') + 1
  return x, y
end

local t0 = tgl.time()
local Xtrain, Ytrain = cli.try('logreg', load, 'train-images-idx3-ubyte.gz', 'train-labels-idx1-ubyte.gz')
local Xtest, Ytest = cli.try('logreg', load, 't10k-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz')
print(('loaded %d training and %d test images in %.1f s'):format(Xtrain:size(1), Xtest:size(1),
                                                                  tgl.time() - t0))

-- The model: p(y | x) = softmax(x W + b).
local x, y = tgl.matrix('x'), tgl.ivector('y')
local W = tgl.shared(tgl.zeros(784, 10), 'W')
local b = tgl.shared(tgl.zeros(10), 'b')
local p = tgl.softmax(x:dot(W) + b)
local cost = tgl.mean(tgl.categorical_crossentropy(p, y))
local gW, gb = unpack(tgl.grad(cost, { W, b }))

-- Training: minibatch `index` (0-based) of the shared training set.
local Xs, Ys = tgl.shared(Xtrain, 'Xtrain', { borrow = true }), tgl.shared(Ytrain, 'Ytrain', { borrow = true })
local index = tgl.lscalar('index')
local B = opts.batch
local train = tgl.compile {
  inputs = { index }, outputs = cost,
  updates = { { W, W - opts.lr * gW }, { b, b - opts.lr * gb } },
  givens = { [x] = Xs[{ { index * B + 1, (index + 1) * B } }],
             [y] = Ys[{ { index * B + 1, (index + 1) * B } }] },
  name = 'train',
}
local predict = tgl.compile { inputs = { x }, outputs = tgl.argmax(p, 2), name = 'predict' }

local function accuracy(X, Y)
  local pred = predict(X)
  local hits = tgl.sum(tgl.eq(pred, Y:astype('int64')))
  return hits:get() / Y:size(1)
end

local nbatches = math.floor(Xtrain:size(1) / B)
local acc
for epoch = 1, opts.epochs do
  local start, total = tgl.time(), 0
  for k = 0, nbatches - 1 do
    total = total + train(k):get()
  end
  acc = accuracy(Xtest, Ytest)
  print(('epoch %d  loss %.4f  test accuracy %.2f%%  (%.1f s, %.0f examples/s)'):format(
    epoch, total / nbatches, 100 * acc, tgl.time() - start, nbatches * B / (tgl.time() - start)))
end
return acc
