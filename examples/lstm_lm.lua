-- examples/lstm_lm.lua — a word-level LSTM language model on the fortunes
-- corpus, written with Torch7's nn as tgl gives it:
--
--   model = nn.Sequential():add(nn.LookupTable(V, E)):add(nn.LSTM(E, H))
--             :add(nn.View(-1, H)):add(nn.Linear(H, V)):add(nn.LogSoftMax())
--   crit  = nn.ClassNLLCriterion()
--
-- and trained through nn.compile: each chunk is one compiled call
-- (forward, loss, backpropagation through time, the optimiser's update of
-- every parameter, the embedding's included, and the LSTM's last state
-- written back).  The training text is read as `--batch` parallel streams
-- cut into chunks of `--seqlen` words; the LSTM remembers its state from
-- one chunk to the next (lstm:remember()), so backpropagation through time
-- is truncated at the chunk boundary while the state runs through the
-- whole stream.  The validation pass is model:forward in evaluate mode
-- (it carries the state too; step:evaluate updates nothing, the state
-- included).
--
-- nn.compile and nn.optim have no gradient clipping (Torch7's optim has
-- none either: its users clip inside feval).  `--clip C` (C > 0) trains the
-- Torch7 way instead, where the gradient is on the host: model:forward,
-- crit:forward/backward, model:zeroGradParameters, model:backward, the
-- flat gradient (getParameters) scaled down to norm C when above it,
-- model:updateParameters(lr) (plain SGD; --optim is then ignored).
--
-- The corpus is the one examples/rnnlm.lua trains on, built by
-- scripts/corpus.lua from Debian's fortunes package and read with tgl.lm
-- (its vocabulary and word ids); `--vocab` smaller than the corpus's keeps
-- the most frequent words and maps the others to <unk>.
--
--   tgl examples/lstm_lm.lua [--epochs 5] [--words 150000] [--vocab 2000]
--       [--hidden 128] [--emb 64] [--batch 20] [--seqlen 20]
--       [--optim sgd|adam] [--lr 1 (sgd), 0.002 (adam)] [--clip 0]
--       [--seed 1] [--threads T] [--data DIR]
--
-- Each epoch trains on the first `--words` training words (0: all 470k)
-- and prints the training and validation perplexity (the validation file
-- whole, in evaluate mode).  Ends with one machine-readable line:
--   RESULT train_ppl=... valid_ppl=... first_valid_ppl=... words_per_s=...
local ffi = require 'ffi'
local lm = require 'tgl.lm'
local nn = require 'nn'
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. package.path
local cli = require 'cli'
io.stdout:setvbuf('line')

local opts = { epochs = 5, words = 150000, vocab = 2000, hidden = 128, emb = 64, batch = 20, seqlen = 20,
               optim = 'sgd', lr = 0, clip = 0, seed = 1, data = '' }
local usage = 'usage: tgl examples/lstm_lm.lua [--epochs N] [--words N] [--vocab V] [--hidden H] [--emb E] '
              .. '[--batch B] [--seqlen T] [--optim sgd|adam] [--lr R] [--clip C] [--seed S] [--threads T] [--data DIR]\n'
cli.parse_args('lstm_lm', arg, opts, { data = true, optim = true }, usage)
for _, k in ipairs({ 'epochs', 'vocab', 'hidden', 'emb', 'batch', 'seqlen' }) do
  if opts[k] < 1 or opts[k] % 1 ~= 0 then cli.die('lstm_lm', usage, '--%s must be a positive integer', k) end
end
if opts.words < 0 or opts.words % 1 ~= 0 then cli.die('lstm_lm', usage, '--words must be an integer >= 0') end
if opts.optim ~= 'sgd' and opts.optim ~= 'adam' then cli.die('lstm_lm', usage, "--optim must be 'sgd' or 'adam'") end
if opts.lr < 0 or opts.clip < 0 then cli.die('lstm_lm', usage, '--lr and --clip must be >= 0') end
-- 0: the optimiser's usual rate for this model
if opts.lr == 0 then opts.lr = (opts.optim == 'adam' and opts.clip == 0) and 0.002 or 1 end
if opts.clip > 0 then opts.optim = 'sgd' end
if opts.threads then tgl.config.threads = opts.threads end
tgl.manual_seed(opts.seed)

-- ---------------------------------------------------------------------------
-- the corpus: scripts/corpus.lua's fortunes files (built on first use, as
-- examples/rnnlm.lua does), read by tgl.lm

local dir = opts.data
if dir == '' then dir = cli.fortunes('lstm_lm', script_dir) end
local full = cli.try('lstm_lm', lm.vocab, dir .. '/train.txt')
-- the --vocab most frequent words (tgl.lm sorts by count; </s> is id 1),
-- <unk> for the rest
local words, counts = {}, {}
local UNK = '<unk>'
for i = 1, math.min(opts.vocab, full.size) do
  words[i], counts[i] = full.words[i], full.counts[i]
end
if not (function() for _, w in ipairs(words) do if w == UNK then return true end end end)() then
  words[#words] = UNK
  counts[#counts] = 0
end
local vocab = lm.vocab_from(words, counts)
local V, H, De, B, T = vocab.size, opts.hidden, opts.emb, opts.batch, opts.seqlen
local train_ids, ntrain = cli.try('lstm_lm', lm.read, dir .. '/train.txt', vocab)
local valid_ids, nvalid = cli.try('lstm_lm', lm.read, dir .. '/valid.txt', vocab)
if opts.words > 0 then ntrain = math.min(ntrain, opts.words) end

-- ids[0 .. n-1] as B streams of L = floor((n-1) / B) words each: stream s
-- is words s*L .. s*L + L - 1; a chunk k holds, for each stream, its words
-- k*T+1 .. k*T+T (inputs) and the next word of each (targets).  The tail
-- that fills no whole chunk is left out.
local function batchify(ids, n)
  local L = math.floor((n - 1) / B)
  local nchunks = math.floor(L / T)
  if nchunks < 1 then cli.die('lstm_lm', nil, '%d words make no chunk of %d x %d', n, B, T) end
  local p = ffi.cast('int64_t *', ids:data())
  local chunks = {}
  for k = 0, nchunks - 1 do
    local x = tgl.zeros(T, B, { dtype = 'int64' })    -- LookupTable: T x B -> T x B x E
    local y = tgl.zeros(T * B, { dtype = 'int64' })
    local px, py = ffi.cast('int64_t *', x:data()), ffi.cast('int64_t *', y:data())
    for t = 0, T - 1 do
      for s = 0, B - 1 do
        local at = s * L + k * T + t
        px[t * B + s] = p[at]
        py[t * B + s] = p[at + 1]      -- row t*B+s of the View(-1, H) output
      end
    end
    chunks[k + 1] = { x = x, y = y }
  end
  return chunks, nchunks * T * B
end
local train_chunks, ntrain_used = batchify(train_ids, ntrain)
local valid_chunks, nvalid_used = batchify(valid_ids, nvalid)
print(('%s: vocabulary %d, training on %d of %d words an epoch, validation %d words; '
       .. 'LSTM %d -> %d, batch %d, seqlen %d, %s')
      :format(dir, V, ntrain_used, train_ids:size(1), nvalid_used, De, H, B, T,
              opts.clip > 0 and ('SGD lr %g with the gradient clipped to norm %g (eager)'):format(opts.lr, opts.clip)
              or ('nn.compile, nn.optim.%s lr %g'):format(opts.optim, opts.lr)))

-- ---------------------------------------------------------------------------
-- the model

local lstm = nn.LSTM(De, H):remember('both')
local model = nn.Sequential()
  :add(nn.LookupTable(V, De))
  :add(lstm)
  :add(nn.View(-1, H))
  :add(nn.Linear(H, V))
  :add(nn.LogSoftMax())
local crit = nn.ClassNLLCriterion()
print(model)

local step, params, grads
if opts.clip == 0 then
  local opt = opts.optim == 'adam' and nn.optim.adam { learningRate = opts.lr }
              or nn.optim.sgd { learningRate = opts.lr }
  step = nn.compile { model = model, criterion = crit, optimizer = opt }
else
  params, grads = model:getParameters()
end

-- one Torch7 step with the flat gradient clipped to norm opts.clip
local function clipped_step(x, y)
  local out = model:forward(x)
  local loss = crit:forward(out, y)
  model:zeroGradParameters()
  model:backward(x, crit:backward(out, y))
  local norm = math.sqrt(tgl.sum(tgl.sqr(grads)):get())
  if norm > opts.clip then grads:copy(grads * (opts.clip / norm)) end
  model:updateParameters(opts.lr)
  return loss
end

-- one pass; train = true: a training step per chunk.  Returns the
-- perplexity (the chunks' mean NLL, before each step's update).
local function pass(chunks, train)
  if train then model:training() else model:evaluate() end
  lstm:forget()
  local nll = 0
  for _, c in ipairs(chunks) do
    if not train then
      nll = nll + crit:forward(model:forward(c.x), c.y)
    elseif step then
      nll = nll + step:step(c.x, c.y)
    else
      nll = nll + clipped_step(c.x, c.y)
    end
  end
  return math.exp(nll / #chunks)
end

local first_valid, train_ppl, valid_ppl
local t0 = tgl.time()
local train_time = 0
for epoch = 1, opts.epochs do
  local te = tgl.time()
  train_ppl = pass(train_chunks, true)
  local dt = tgl.time() - te
  train_time = train_time + dt
  valid_ppl = pass(valid_chunks, false)
  first_valid = first_valid or valid_ppl
  print(('epoch %d  train ppl %8.2f  valid ppl %8.2f  %6.0f words/s  (%.1f s)')
        :format(epoch, train_ppl, valid_ppl, ntrain_used / dt, tgl.time() - t0))
end
print(('RESULT train_ppl=%.2f valid_ppl=%.2f first_valid_ppl=%.2f words_per_s=%.0f')
      :format(train_ppl, valid_ppl, first_valid, ntrain_used * opts.epochs / train_time))
