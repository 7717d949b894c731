-- examples/rnnlm.lua — a word-level recurrent neural network language model
-- trained the way Mikolov's RNNLM trains one, with RNNLM's command line.
--
--   h_t = sigmoid(E[w_t] + h_{t-1} R)                 (Elman, sigmoid units)
--   P(w_{t+1}) = P(c | h_t) P(w_{t+1} | c, h_t)       (c the word's class)
--
-- The output is factored into RNNLM's frequency-binned classes (tgl.lm:
-- `-class N`) and computed by one fused op, tgl.lm.class_xent, that touches
-- only the rows of the predicted words' classes; `-class 1` is the full
-- softmax.  Training is truncated BPTT with RNNLM's two knobs: every
-- `-bptt-block` words one compiled call runs a tgl.scan over the block and
-- the `-bptt` words before it (replayed from the state carried there), and
-- back-propagates the block's losses through all of them.  The input
-- projection is a row lookup E[words] done once before the loop; the
-- updates of E and of the word matrix are inc_subtensor on the rows used;
-- R's gradient is one product after the loop (see make_train).
-- SGD with RNNLM's schedule: learning rate 0.1, halved every epoch once the
-- validation log-likelihood improves by less than 0.3%, stop when that
-- happens a second time (the weights of an epoch that made it worse are
-- discarded, as RNNLM does); L2 decay beta (RNNLM's default 1e-7) on the
-- weights an update touches.  The hidden state is carried across sentences
-- and reset to 1 at the start of each pass over a file, as RNNLM does.
--
-- Output weights (`-output-update`): `word` (the default with classes) updates the class
-- weights and the rows of the word's class after every word, exactly as
-- RNNLM's learnNet does (tgl.lm.class_xent_sgd: one op runs the block's
-- words in order, reading the word matrix in place; each word's hidden
-- error is taken before its update, and the L2 decay falls on every 10th
-- word of the epoch); the input and recurrent weights are updated once per
-- block, from the block's summed gradient, as RNNLM does.  `block` (the
-- default with -class 1) updates every weight once per block from the
-- summed gradient (class_xent and its pullback; a full softmax is then one
-- gemm into the matrix).
--
-- Where it differs from RNNLM 0.3e (see doc/lm.md):
--   * the `-bptt` replayed steps are recomputed with the current weights
--     (RNNLM keeps the activations it computed then);
--   * the window reaches bptt - 1 steps before the block's first word;
--     RNNLM's block BPTT (bptt + bptt-block - 2 steps back from the block's
--     last word) reaches one fewer (measured on 50k fortunes words, hidden
--     50: 178.58 with one fewer against 178.53, no visible effect);
--   * no gradient clipping (RNNLM clips the hidden error at 15), no direct
--     (maximum-entropy) connections, float32 by default (`-double`: float64,
--     RNNLM's precision).
--
-- Usage (RNNLM's flags):
--   build/tgl examples/rnnlm.lua -train F -valid F -rnnlm MODEL.npz -hidden H
--       -class C -bptt 4 -bptt-block 10 -rand-seed 1 [-one-iter] [-max-words N]
--       [-threads T] [-test F] [-double] [-debug 2] [-alpha 0.1] [-beta 1e-7]
--       [-old-classes] [-samples N] [-profile] [-output-update word|block]
--   With an existing MODEL.npz, training continues from it; `-test F`
--   without `-train` scores F with the saved model.  With no arguments it
--   builds the fortunes corpus into build/data/fortunes/ (scripts/corpus.lua)
--   and trains hidden 100, class 100 on it.
-- Prints one line per epoch and at the end one machine-readable line:
--   RESULT words_per_s=... valid_ppl=... epochs=... precision=... threads=... cpu_words_per_s=...
--   (cpu_words_per_s: over the epoch's CPU time, as RNNLM's Words/sec)
local ffi = require 'ffi'
local lm = require 'tgl.lm'
local script_dir = (arg and arg[0] or ''):match('^(.*)/[^/]*$') or '.'
package.path = script_dir .. '/lib/?.lua;' .. package.path
local cli = require 'cli'
io.stdout:setvbuf('line')   -- progress shows as it happens, also in a log

-- A usage error (a bad option, a file that cannot be read or is not text)
-- is one line on stderr and exit status 1, as RNNLM's own; never a Lua
-- traceback.
local USAGE = 'usage: tgl examples/rnnlm.lua -train F -valid F -rnnlm MODEL.npz [-hidden H] '
              .. '[-class C] [-bptt B] [-bptt-block K] [-test F] ... (options: the top of '
              .. 'examples/rnnlm.lua, doc/lm.md)'
local function die(fmt, ...) cli.die('rnnlm', nil, fmt, ...) end
local function usage_error(fmt, ...) cli.die('rnnlm', USAGE, fmt, ...) end
-- f(...) and its results; an error it raises ends the program: the
-- message without its position, and without tgl.lm's function name,
-- since the file it names is the user's.
local function try(f, ...)
  local res = { pcall(f, ...) }
  if not res[1] then die('%s', (cli.message(res[2]):gsub('^tgl%.lm%.[%w_]+: ', ''))) end
  return unpack(res, 2, table.maxn(res))
end

-- ---------------------------------------------------------------------------
-- options

local opt = {
  hidden = 30, class = 100, bptt = 0, ['bptt-block'] = 10, ['rand-seed'] = 1,
  alpha = 0.1, beta = 1e-7, debug = 1, threads = 1, samples = 5,
}
local FLAGS = { ['one-iter'] = true, double = true, ['old-classes'] = true, profile = true }
local NUM = { hidden = true, class = true, bptt = true, ['bptt-block'] = true, ['rand-seed'] = true,
              ['max-words'] = true, threads = true, debug = true, alpha = true, beta = true,
              samples = true }
local STR = { train = true, valid = true, test = true, rnnlm = true, ['output-update'] = true }
local argv = arg or {}
if #argv == 0 then
  -- the demo: the fortunes corpus, RNNLM's usual settings, in the build
  -- directory of the checkout this script is in (from any working directory)
  local dir = cli.fortunes('rnnlm', script_dir)
  argv = { '-train', dir .. '/train.txt', '-valid', dir .. '/valid.txt', '-rnnlm',
           dir .. '/rnnlm.npz', '-hidden', '100', '-class', '100', '-bptt', '4',
           '-bptt-block', '10', '-test', dir .. '/test.txt' }
  os.remove(dir .. '/rnnlm.npz')
  print('rnnlm ' .. table.concat(argv, ' '))
end
local given = {}
local i = 1
while i <= #argv do
  local name = argv[i]:match('^%-(.+)$')
  if not name then usage_error('unexpected argument %s', argv[i]) end
  if FLAGS[name] then
    opt[name] = true
    i = i + 1
  elseif NUM[name] or STR[name] then
    local v = argv[i + 1]
    if v == nil then usage_error('-%s needs a value', name) end
    given[name] = true
    if NUM[name] then
      opt[name] = tonumber(v)
      if not opt[name] then usage_error('-%s needs a number, got %s', name, v) end
    else
      opt[name] = v
    end
    i = i + 2
  else
    usage_error('unknown option -%s', name)
  end
end
if not opt.rnnlm then usage_error('-rnnlm MODEL.npz is required') end
if not opt.train and not opt.test then usage_error('give -train (and -valid) or -test') end
if opt.train and not opt.valid then usage_error('-train needs -valid') end
for _, k in ipairs({ 'hidden', 'class', 'bptt-block' }) do
  if opt[k] < 1 or opt[k] % 1 ~= 0 then
    usage_error('-%s must be a positive integer, got %s', k, tostring(opt[k]))
  end
end
if opt.bptt < 0 or opt.bptt % 1 ~= 0 then
  usage_error('-bptt must be an integer >= 0, got %s', tostring(opt.bptt))
end
for _, k in ipairs({ 'threads', 'samples' }) do
  if opt[k] < 0 or opt[k] % 1 ~= 0 then
    usage_error('-%s must be an integer >= 0, got %s', k, tostring(opt[k]))
  end
end
if opt['max-words'] and (opt['max-words'] < 1 or opt['max-words'] % 1 ~= 0) then
  usage_error('-max-words must be a positive integer, got %s', tostring(opt['max-words']))
end
-- the default: RNNLM's per-word steps with classes; with a full softmax
-- (-class 1) the block's products as gemm (a word's step there walks the
-- whole V x H matrix three times without BLAS: 7x slower than block, and
-- block's perplexity after an epoch is within 1% of RNNLM's, doc/lm.md)
if opt['output-update'] == nil then opt['output-update'] = opt.class == 1 and 'block' or 'word' end
if opt['output-update'] ~= 'word' and opt['output-update'] ~= 'block' then
  usage_error("-output-update must be 'word' or 'block', got %s", opt['output-update'])
end
local DT = opt.double and 'float64' or 'float32'
tgl.config.floatX = DT
tgl.config.threads = opt.threads
-- Collect as fast as garbage is made: every block makes a few small Lua
-- objects and arrays, and with LuaJIT's default pause (wait until the heap
-- doubles) they pile up epoch after epoch and are freed cold (measured on
-- 200k Zipf words: 53.7k -> 37.6k words/s over 4 epochs and 108 -> 187 MB;
-- with pause 100, 54.2k -> 51.4k and 105 MB).
collectgarbage('setpause', 100)
tgl.manual_seed(opt['rand-seed'])

-- ---------------------------------------------------------------------------
-- the model: vocabulary and weights (new, or from MODEL.npz)

local function exists(path)
  local f = io.open(path, 'rb')
  if f then f:close() end
  return f ~= nil
end

local vocab, W, meta
if exists(opt.rnnlm) then
  local z = try(tgl.load, opt.rnnlm)
  local text = ffi.string(z.vocab:data(), z.vocab:size(1))
  local words = {}
  for w in text:gmatch('[^\n]+') do words[#words + 1] = w end
  local counts = {}
  for k = 1, z.counts:size(1) do counts[k] = z.counts:get(k) end
  vocab = lm.vocab_from(words, counts)
  meta = z.meta
  opt.hidden, opt.class = meta:get(1), meta:get(2)
  opt.alpha = meta:get(3)
  if not given.bptt then opt.bptt = meta:get(4) end
  if not given['bptt-block'] then opt['bptt-block'] = meta:get(5) end
  W = { E = z.E:astype(DT), R = z.R:astype(DT), Wc = z.Wc:astype(DT), Ww = z.Ww:astype(DT) }
  print(('loaded %s: vocabulary %d, hidden %d, class %d, alpha %g'):format(
    opt.rnnlm, vocab.size, opt.hidden, opt.class, opt.alpha))
else
  if not opt.train then die('%s does not exist (train it first)', opt.rnnlm) end
  vocab = try(lm.vocab, opt.train)
  -- RNNLM's initialisation: each weight the sum of three uniforms in +-0.1
  local function init(r, c)
    return (tgl.rand(r, c) + tgl.rand(r, c) + tgl.rand(r, c) - 1.5) * 0.2
  end
  local V, H = vocab.size, opt.hidden
  W = { E = init(V, H), R = init(H, H), Ww = init(V, H) }
  W.Wc = init(math.min(opt.class, V), H)
end
-- Every corpus is read (and checked: it exists, is text, has words)
-- before anything is compiled or trained, so a bad -test file is an error
-- now rather than after the training.
local corpus = {}
for _, k in ipairs({ 'train', 'valid', 'test' }) do
  if opt[k] then
    local ids, n = try(lm.read, opt[k], vocab)
    if n == 0 then die('no words in %s (-%s)', opt[k], k) end
    corpus[k] = { ids = ids, n = n }
  end
end
-- RNNLM's -bptt counts the current step too: -bptt 1 is plain backprop,
-- -bptt 4 goes 3 steps further back.
local BACK = math.max(opt.bptt - 1, 0)
local BLOCK = opt['bptt-block']
local V, H = vocab.size, opt.hidden
local cl = lm.classes(vocab.counts, opt.class, { unigram = opt['old-classes'] })
local FULL = opt.class == 1
-- RNNLM's per-word output updates (the class-factored op, with one class
-- for the full softmax); else the block updates, the full softmax as one
-- gemm with the matrix kept transposed
local WORD = opt['output-update'] == 'word'
local SOFTMAX = FULL and not WORD
for k, v in pairs(W) do W[k] = v:astype(DT) end
if W.Wc:size(1) ~= cl.n then W.Wc = W.Wc[{ { 1, cl.n } }]:clone() end
if cl.n < opt.class then
  -- RNNLM clamps too; say so rather than train with fewer classes unseen
  io.stderr:write(('rnnlm: note: -class %d: %s, so %d classes are used\n'):format(opt.class,
    opt.class > V and ('the vocabulary has only %d words'):format(V)
    or "the frequency binning of the vocabulary's counts fills only that many", cl.n))
end
print(('vocabulary %d words, %d classes, hidden %d, %s, bptt %d, bptt-block %d'):format(
  V, cl.n, H, DT, opt.bptt, BLOCK))

local E = tgl.shared(W.E, 'E')
local R = tgl.shared(W.R, 'R')
local Wc = tgl.shared(W.Wc, 'Wc')
-- The word matrix, (V, H): rows are gathered per class.  With the full
-- softmax it is kept transposed, (H, V), so its gradient h' dz is laid out
-- as the matrix and the SGD step is one gemm run in the matrix's buffer.
local Ww = tgl.shared(SOFTMAX and W.Ww:T():clone() or W.Ww, 'Ww')
local function ww_value()   -- (V, H) whatever the layout
  return SOFTMAX and Ww:get_value():T():clone() or Ww:get_value()
end
local hstate = tgl.shared(tgl.ones(H):astype(DT), 'h')   -- the carried state
local lr = tgl.shared(tgl.array(opt.alpha, DT), 'lr')

-- ---------------------------------------------------------------------------
-- the compiled step: a window of BACK + n words, losses on the last n

local win = tgl.lvector('win')          -- the window's input words
local y = tgl.lvector('y')              -- full softmax: the target ids
local cls, tgt, owner, rows = tgl.lvector('cls'), tgl.lvector('tgt'), tgl.lvector('owner'),
                              tgl.lvector('rows')

local function model(back)
  local X = E[win]                      -- the input projection, hoisted: (n, H)
  local hs = tgl.scan {
    fn = function(x_t, h_prev, R_) return tgl.sigmoid(x_t + h_prev:dot(R_)) end,
    sequences = { X }, outputs_info = { hstate }, non_sequences = { R }, name = 'rnn',
  }
  local hl = back > 0 and hs[{ { back + 1, -1 } }] or hs
  local loss, Ws
  if SOFTMAX then
    Ws = hl:dot(Ww)                      -- (here: the logits)
    loss = tgl.categorical_crossentropy(tgl.softmax(Ws, 2), y)
  else
    Ws = Ww[rows]                        -- the rows of the targets' classes
    loss = lm.class_xent(hl, Wc, Ws, cls, tgt, owner)
  end
  return X, hs, tgl.sum(loss), Ws, hl
end

local function inputs()
  if SOFTMAX then return { win, y } end
  return { win, cls, tgt, owner, rows }
end
local decay = tgl.vector('decay')       -- per word: beta on RNNLM's decay steps, else 0

-- -output-update word: the forward loop over the window, then RNNLM's
-- per-word output step (one op over the block's words), whose hidden
-- errors are the known gradient of the predicted states for BPTT.
local function make_train_word()
  local X = E[win]
  local hs = tgl.scan {
    fn = function(x_t, h_prev, R_) return tgl.sigmoid(x_t + h_prev:dot(R_)) end,
    sequences = { X }, outputs_info = { hstate }, non_sequences = { R }, name = 'rnn',
  }
  local hl = BACK > 0 and hs[{ { BACK + 1, -1 } }] or hs
  local err, loss, dWc, dWs = lm.class_xent_sgd(hl, Wc, Ww, cls, tgt, owner, rows, lr, decay)
  local gX = tgl.grad(nil, X, { known_grads = { [hl] = err } })
  local hprev = tgl.concatenate({ tgl.dimshuffle(hstate, { 'x', 1 }), hs[{ { 1, -2 } }] }, 1)
  local gR = hprev:T():dot(gX)
  local beta = opt.beta
  local updates = {
    { E, tgl.inc_subtensor(E[win], -lr * (gX + beta * X)) },
    { R, R - lr * (gR + beta * R) },
    { hstate, hs[-(BACK + 1)] },
    { Wc, Wc + dWc },
    { Ww, tgl.inc_subtensor(Ww[rows], dWs) },
  }
  local f = tgl.compile { inputs = { win, cls, tgt, owner, rows, decay }, outputs = tgl.sum(loss),
                          updates = updates, linker = 'cvm_nogc', name = 'train',
                          profile = opt.profile }
  f.trust_input = true
  return f
end

local function make_train()
  if WORD then return make_train_word() end
  local X, hs, cost, Ws, hl = model(BACK)
  local beta = opt.beta
  -- the gradient wrt X is the one wrt each step's pre-activation x_t +
  -- h_{t-1} R, so R's is one product after the loop: [h0; h_1..h_{n-1}]' gX
  -- (cheaper than the per-step outer products inside the gradient loop)
  local wrt = SOFTMAX and { X, Ws } or { X, Wc, Ws }
  local g = tgl.grad(cost, wrt)
  local hprev = tgl.concatenate({ tgl.dimshuffle(hstate, { 'x', 1 }), hs[{ { 1, -2 } }] }, 1)
  table.insert(g, 2, hprev:T():dot(g[1]))
  local updates = {
    { E, tgl.inc_subtensor(E[win], -lr * (g[1] + beta * X)) },
    { R, R - lr * (g[2] + beta * R) },
    { hstate, hs[-(BACK + 1)] },
  }
  if SOFTMAX then
    -- g[3] is the logits' gradient: Ww - (lr h)' dz is one gemm in Ww's
    -- own buffer; the L2 decay of the whole matrix is applied every 10
    -- calls (decay_full)
    updates[#updates + 1] = { Ww, Ww - tgl.dot((hl * lr):T(), g[3]) }
  else
    updates[#updates + 1] = { Wc, Wc - lr * (g[3] + beta * Wc) }
    updates[#updates + 1] = { Ww, tgl.inc_subtensor(Ww[rows], -lr * (g[4] + beta * Ws)) }
  end
  local f = tgl.compile { inputs = inputs(), outputs = cost, updates = updates,
                          linker = 'cvm_nogc', name = 'train', profile = opt.profile }
  f.trust_input = true
  return f
end

-- Full softmax: every 10 training calls, Ww *= 1 - 10 lr beta (the decay
-- of those 10 steps at once, as RNNLM decays on its own schedule too).
local decay_full = SOFTMAX and tgl.compile { inputs = {}, outputs = {},
  updates = { { Ww, Ww * (1 - 10 * opt.beta * lr) } }, name = 'decay' }

local function make_eval()
  local _, hs, cost = model(0)
  local f = tgl.compile { inputs = inputs(), outputs = cost, updates = { { hstate, hs[-1] } },
                          linker = 'cvm_nogc', name = 'eval' }
  f.trust_input = true
  return f
end

-- ---------------------------------------------------------------------------
-- passes over a file

local calls, eval = 0, nil
-- Runs f over the words ids[0..n-1] (0-based pointer): each call predicts
-- up to `block` words from the `back` words before them.  Returns the
-- summed loss and the number of predicted words.
local function pass(f, ids, n, block, back, progress)
  local p = ffi.cast('int64_t *', ids:data())
  hstate:set_value(tgl.ones(H):astype(DT))
  local nll, pos = 0, 0
  -- the first word is predicted from '</s>', as RNNLM starts each file
  local prev = {}
  for k = 1, back + 1 do prev[k] = 1 end
  local winbuf = {}
  local last_report = tgl.time()
  local t0 = tgl.time()
  while pos < n do
    local m = math.min(block, n - pos)
    local wa = tgl.zeros(back + m, { dtype = 'int64' })
    local wp = ffi.cast('int64_t *', wa:data())
    -- the window's inputs: the back + m words before each target
    for k = 0, back + m - 1 do
      local at = pos - back - 1 + k
      wp[k] = at >= 0 and p[at] or 1
    end
    local tgts = tgl.zeros(m, { dtype = 'int64' })
    ffi.copy(tgts:data(), p + pos, m * 8)
    local cost
    if SOFTMAX then
      cost = f(wa, tgts)
    else
      local c, t, o, r = lm.class_index(cl, tgts, m)
      if WORD and f ~= eval then
        -- RNNLM decays the output weights on every 10th word of the epoch
        local d = tgl.zeros(m, { dtype = DT })
        local dp = ffi.cast(DT == 'float32' and 'float *' or 'double *', d:data())
        for k = 0, m - 1 do
          if (pos + k + 1) % 10 == 0 then dp[k] = opt.beta end
        end
        cost = f(wa, c, t, o, r, d)
      else
        cost = f(wa, c, t, o, r)
      end
    end
    nll = nll + cost:get()
    calls = calls + 1
    if decay_full and f ~= eval and calls % 10 == 0 then decay_full() end
    pos = pos + m
    if progress and opt.debug >= 2 and tgl.time() - last_report > 1 then
      last_report = tgl.time()
      io.write(('\rprogress: %.1f%%  words/s: %.0f'):format(100 * pos / n, pos / (last_report - t0)))
      io.flush()
    end
  end
  if progress and opt.debug >= 2 then io.write('\n') end
  return nll, n
end

local function save()
  local words = table.concat(vocab.words, '\n')
  local vb = tgl.zeros(#words, { dtype = 'uint8' })
  ffi.copy(vb:data(), words, #words)
  local counts = tgl.zeros(V, { dtype = 'int64' })
  for k = 1, V do counts:set(vocab.counts[k], k) end
  tgl.save(opt.rnnlm, {
    E = E:get_value(), R = R:get_value(), Wc = Wc:get_value(), Ww = ww_value(),
    vocab = vb, counts = counts,
    meta = tgl.array({ H, opt.class, lr:get_value():get(), opt.bptt, BLOCK }, 'float64'),
  })
end

eval = make_eval()
-- cpu_words_per_s: over the process's CPU time of the epoch (os.clock),
-- the measure RNNLM's own Words/sec uses, so a busy machine does not skew
-- the ratio (words_per_s stays over elapsed time)
local words_per_s, cpu_words_per_s, valid_ppl, epochs = 0, 0, nil, 0

if opt.train then
  local train_ids, ntrain = corpus.train.ids, corpus.train.n
  if opt['max-words'] then ntrain = math.min(ntrain, opt['max-words']) end
  local valid_ids, nvalid = corpus.valid.ids, corpus.valid.n
  local train = make_train()
  local best = -math.huge         -- validation log-likelihood (natural log)
  local halving = false
  local saved
  while true do
    local t0, c0 = tgl.time(), os.clock()
    local tnll = pass(train, train_ids, ntrain, BLOCK, BACK, true)
    local dt = tgl.time() - t0
    words_per_s = ntrain / dt
    cpu_words_per_s = ntrain / math.max(os.clock() - c0, 1e-9)
    local vnll = pass(eval, valid_ids, nvalid, BLOCK, 0)
    local ll = -vnll
    valid_ppl = lm.perplexity(vnll, nvalid)
    print(('iter %d  alpha %.6f  train ppl %.2f  words/s %.0f  valid ppl %.2f  valid entropy %.4f'):format(
      epochs, lr:get_value():get(), lm.perplexity(tnll, ntrain), words_per_s, valid_ppl,
      vnll / nvalid / math.log(2)))
    epochs = epochs + 1
    if opt['one-iter'] then break end
    -- RNNLM's schedule: keep the better weights; halve alpha from the first
    -- epoch that improves by less than 0.3%, stop at the second
    if ll < best then
      E:set_value(saved.E); R:set_value(saved.R); Wc:set_value(saved.Wc); Ww:set_value(saved.Ww)
    else
      saved = { E = E:get_value(), R = R:get_value(), Wc = Wc:get_value(), Ww = Ww:get_value() }
    end
    local small = ll * 1.003 < best
    if ll > best then best = ll end
    if small then
      if halving then break end
      halving = true
    end
    if halving then lr:set_value(tgl.array(lr:get_value():get() / 2, DT)) end
  end
  if not opt['one-iter'] then valid_ppl = lm.perplexity(-best, nvalid) end
  save()
  print('saved ' .. opt.rnnlm)
  if opt.profile then print(train:profile_summary()) end
end

if opt.test then
  local test_ids, ntest = corpus.test.ids, corpus.test.n
  local tnll = pass(eval, test_ids, ntest, BLOCK, 0)
  print(('test: %d words, ppl %.2f, entropy %.4f bits'):format(ntest, lm.perplexity(tnll, ntest),
                                                             tnll / ntest / math.log(2)))
end

-- ---------------------------------------------------------------------------
-- a few sentences sampled from the model (plain Lua over the weights)

if opt.samples > 0 then
  local Ea, Ra, Wca, Wwa = E:get_value():astype('float64'), R:get_value():astype('float64'),
                           Wc:get_value():astype('float64'), ww_value():astype('float64')
  local pE, pR = ffi.cast('double *', Ea:data()), ffi.cast('double *', Ra:data())
  local pC, pW = ffi.cast('double *', Wca:data()), ffi.cast('double *', Wwa:data())
  local h, hn = ffi.new('double[?]', H), ffi.new('double[?]', H)
  for k = 0, H - 1 do h[k] = 1 end
  local rng = tgl.rand(2000 * opt.samples):astype('float64')
  local pr, ri = ffi.cast('double *', rng:data()), 0
  local function pick(n, score)
    local z, m = {}, -math.huge
    for k = 1, n do z[k] = score(k); if z[k] > m then m = z[k] end end
    local s = 0
    for k = 1, n do z[k] = math.exp(z[k] - m); s = s + z[k] end
    local u = pr[ri % (2000 * opt.samples)] * s
    ri = ri + 1
    for k = 1, n do u = u - z[k]; if u <= 0 then return k end end
    return n
  end
  local function row_dot(p, r)
    local s = 0
    for k = 0, H - 1 do s = s + p[r * H + k] * h[k] end
    return s
  end
  print('samples:')
  local w = 1
  for _ = 1, opt.samples do
    local out = {}
    for _ = 1, 40 do
      for j = 0, H - 1 do
        local s = pE[(w - 1) * H + j]
        for k = 0, H - 1 do s = s + h[k] * pR[k * H + j] end
        hn[j] = 1 / (1 + math.exp(-s))
      end
      h, hn = hn, h
      if FULL then
        w = pick(V, function(k) return row_dot(pW, k - 1) end)
      else
        local c = pick(cl.n, function(k) return row_dot(pC, k - 1) end)
        local a = cl.first[c]
        w = a - 1 + pick(cl.last[c] - a + 1, function(k) return row_dot(pW, a + k - 2) end)
      end
      if w == 1 then break end
      out[#out + 1] = vocab.words[w]
    end
    print('  ' .. table.concat(out, ' '))
  end
end

if opt.train then
  print(('RESULT words_per_s=%.0f valid_ppl=%.2f epochs=%d precision=%s threads=%d cpu_words_per_s=%.0f'):format(
    words_per_s, valid_ppl, epochs, DT, opt.threads, cpu_words_per_s))
end
