-- examples/lstm_lm.lua — a word-level LSTM language model on the fortunes
-- corpus, written with Torch7's nn as tgl gives it:
--
--   words -> embedding (E[w], De) -> nn.LSTM(De, H) -> nn.View(-1, H)
--         -> nn.Linear(H, V) -> nn.LogSoftMax(), nn.ClassNLLCriterion
--
-- and trained the Torch7 way: model:forward, crit:forward/backward,
-- model:zeroGradParameters, model:backward, the gradient clipped by its
-- norm, model:updateParameters (plain SGD).  The training text is read as
-- `--batch` parallel streams cut into chunks of `--seqlen` words; the
-- LSTM remembers its state from one chunk to the next (lstm:remember()),
-- so backpropagation through time is truncated at the chunk boundary while
-- the state runs through the whole stream.  The embedding is a tgl shared
-- matrix outside nn (nn has no LookupTable yet): one compiled function
-- gathers the chunk's rows, another adds the rows' gradients (the LSTM's
-- gradInput) into them.
--
-- The corpus is the one examples/rnnlm.lua trains on, built by
-- scripts/corpus.lua from Debian's fortunes package and read with tgl.lm
-- (its vocabulary and word ids); `--vocab` smaller than the corpus's keeps
-- the most frequent words and maps the others to <unk>.
--
--   tgl examples/lstm_lm.lua [--epochs 5] [--words 150000] [--vocab 2000]
--       [--hidden 128] [--emb 64] [--batch 20] [--seqlen 20] [--lr 1]
--       [--clip 5] [--seed 1] [--threads T] [--data DIR]
--
-- Each epoch trains on the first `--words` training words (0: all 470k)
-- and prints the training and validation perplexity (the validation file
-- whole, in evaluate mode); about 10 s an epoch with the defaults on one
-- idle core (18k words/s), so the run takes about a minute.  Ends with one
-- machine-readable line:
--   RESULT train_ppl=... valid_ppl=... first_valid_ppl=... words_per_s=...
local ffi = require 'ffi'
local lm = require 'tgl.lm'
local nn = require 'nn'
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. package.path
local cli = require 'cli'
io.stdout:setvbuf('line')

local opts = { epochs = 5, words = 150000, vocab = 2000, hidden = 128, emb = 64, batch = 20, seqlen = 20,
               lr = 1, clip = 5, seed = 1, data = '' }
local usage = 'usage: tgl examples/lstm_lm.lua [--epochs N] [--words N] [--vocab V] [--hidden H] [--emb E] '
              .. '[--batch B] [--seqlen T] [--lr R] [--clip C] [--seed S] [--threads T] [--data DIR]\n'
cli.parse_args('lstm_lm', arg, opts, { data = true }, usage)
for _, k in ipairs({ 'epochs', 'vocab', 'hidden', 'emb', 'batch', 'seqlen' }) do
  if opts[k] < 1 or opts[k] % 1 ~= 0 then cli.die('lstm_lm', usage, '--%s must be a positive integer', k) end
end
if opts.words < 0 or opts.words % 1 ~= 0 then cli.die('lstm_lm', usage, '--words must be an integer >= 0') end
if opts.threads then tgl.config.threads = opts.threads end
tgl.manual_seed(opts.seed)

-- ---------------------------------------------------------------------------
-- the corpus: scripts/corpus.lua's fortunes files (built on first use, as
-- examples/rnnlm.lua does), read by tgl.lm

local root = script_dir == 'examples' and '.' or script_dir:match('^(.*)/examples$') or script_dir .. '/..'
local dir = opts.data
if dir == '' then
  dir = (root == '.' and '' or root .. '/') .. 'build/data/fortunes'
  local f = io.open(dir .. '/train.txt', 'rb')
  if f then
    f:close()
  else
    local cmd = ("'%s' '%s/scripts/corpus.lua' fortunes '%s'"):format(arg[-1] or 'tgl', root, dir)
    print('building the corpus: ' .. cmd)
    if os.execute(cmd) ~= 0 then cli.die('lstm_lm', nil, 'could not build the corpus (%s)', cmd) end
  end
end
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
    local x = tgl.zeros(T, B, { dtype = 'int64' })
    local y = tgl.zeros(T * B, { dtype = 'int64' })
    local px, py = ffi.cast('int64_t *', x:data()), ffi.cast('int64_t *', y:data())
    for t = 0, T - 1 do
      for s = 0, B - 1 do
        local at = s * L + k * T + t
        px[t * B + s] = p[at]
        py[t * B + s] = p[at + 1]      -- row t*B+s of the View(-1, H) output
      end
    end
    chunks[k + 1] = { x = x:reshape(T * B), y = y }
  end
  return chunks, nchunks * T * B
end
local train_chunks, ntrain_used = batchify(train_ids, ntrain)
local valid_chunks, nvalid_used = batchify(valid_ids, nvalid)
print(('%s: vocabulary %d, training on %d of %d words an epoch, validation %d words; '
       .. 'LSTM %d -> %d, batch %d, seqlen %d, SGD lr %g, clip %g')
      :format(dir, V, ntrain_used, train_ids:size(1), nvalid_used, De, H, B, T, opts.lr, opts.clip))

-- ---------------------------------------------------------------------------
-- the model

local lstm = nn.LSTM(De, H):remember('both')
local model = nn.Sequential():add(lstm):add(nn.View(-1, H)):add(nn.Linear(H, V)):add(nn.LogSoftMax())
local crit = nn.ClassNLLCriterion()
print(model)
local params, grads = model:getParameters()

-- the embedding: E[x] for a chunk's words (T*B ids -> T x B x De), and the
-- SGD step of the rows used (their gradient: the LSTM's gradInput)
local E = tgl.shared(tgl.randn(V, De) * 0.1, 'E')
local idx, gx, lr = tgl.lvector('idx'), tgl.tensor3('gx'), tgl.scalar('lr')
local embed = tgl.compile { inputs = { idx }, outputs = E[idx]:reshape(T, B, De), name = 'embed' }
local embed_step = tgl.compile { inputs = { idx, gx, lr },
  updates = { { E, tgl.inc_subtensor(E[idx], -lr * gx:reshape(T * B, De)) } }, name = 'embed_step' }

local function clip_grads(extra)
  -- the norm of every gradient, the embedding's rows included
  local sq = tgl.sum(tgl.sqr(grads)):get() + tgl.sum(tgl.sqr(extra)):get()
  local norm = math.sqrt(sq)
  if norm > opts.clip then
    local k = opts.clip / norm
    grads:copy(grads * k)
    return extra * k
  end
  return extra
end

-- one pass; train = true: SGD steps.  Returns the perplexity.
local function pass(chunks, train)
  if train then model:training() else model:evaluate() end
  lstm:forget()
  local nll = 0
  for _, c in ipairs(chunks) do
    local x = embed(c.x)
    local out = model:forward(x)
    local loss = crit:forward(out, c.y)          -- the chunk's mean NLL
    nll = nll + loss
    if train then
      model:zeroGradParameters()
      local gi = model:backward(x, crit:backward(out, c.y))
      gi = clip_grads(gi)
      model:updateParameters(opts.lr)
      embed_step(c.x, gi, opts.lr)
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
