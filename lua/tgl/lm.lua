-- tgl/lm.lua — the pieces of a word-level language model in RNNLM's way
-- (examples/rnnlm.lua; reusable by the nn package): the corpus reader, the
-- vocabulary, RNNLM's frequency-binned word classes, and the
-- class-factored output (tgl.lm.class_xent, one fused engine op, and the
-- index arrays it takes).  See doc/lm.md.
--
-- Conventions: word ids are 1-based; id 1 is '</s>', the end of a
-- sentence, which RNNLM counts as a word (it is predicted and ends every
-- line); '<unk>' is always in the vocabulary.  The other words are sorted
-- by training count (most frequent first; ties in order of first
-- appearance), so each class is a contiguous range of ids.
local ffi = require 'ffi'
local G = require 'tgl.graph'
local tgl = require 'tgl'

local M = {}

local EOS, UNK = '</s>', '<unk>'
M.EOS, M.UNK = EOS, UNK

local function err(fname, fmt, ...)
  error(('tgl.lm.%s: ' .. fmt):format(fname, ...), 3)
end

local function open(fname, path)
  if type(path) ~= 'string' then err(fname, 'the path must be a string, got %s', type(path)) end
  local f, msg = io.open(path, 'rb')
  if not f then err(fname, 'cannot read the corpus file %s (%s)', path, tostring(msg)) end
  return f
end

-- Calls fn(word) for each word of the file and fn(EOS) at the end of each
-- line; an empty (or blank) line gives nothing, as RNNLM skips it.
local function each_word(fname, path, fn)
  local f = open(fname, path)
  for line in f:lines() do
    local any = false
    for w in line:gmatch('%S+') do fn(w); any = true end
    if any then fn(EOS) end
  end
  f:close()
end

-- tgl.lm.vocab(path) -> vocab: the vocabulary of a training file.
--   vocab.words[id], vocab.index[word] -> id, vocab.counts[id], vocab.size
function M.vocab(path)
  local counts, first, order = {}, {}, {}
  each_word('vocab', path, function(w)
    if not counts[w] then counts[w] = 0; order[#order + 1] = w; first[w] = #order end
    counts[w] = counts[w] + 1
  end)
  if counts[UNK] == nil then counts[UNK] = 0; order[#order + 1] = UNK; first[UNK] = #order end
  if counts[EOS] == nil then counts[EOS] = 0 end
  local rest = {}
  for _, w in ipairs(order) do if w ~= EOS then rest[#rest + 1] = w end end
  table.sort(rest, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return first[a] < first[b]
  end)
  local words = { EOS }
  for _, w in ipairs(rest) do words[#words + 1] = w end
  return M.vocab_from(words, (function()
    local c = {}
    for i, w in ipairs(words) do c[i] = counts[w] end
    return c
  end)())
end

-- tgl.lm.vocab_from(words, counts) -> vocab, from lists (a saved model's).
function M.vocab_from(words, counts)
  if type(words) ~= 'table' or type(counts) ~= 'table' or #words ~= #counts then
    err('vocab_from', 'needs two lists of the same length (words, counts)')
  end
  local index = {}
  for i, w in ipairs(words) do
    if index[w] then err('vocab_from', 'the word %q is listed twice', w) end
    index[w] = i
  end
  if index[EOS] ~= 1 then err('vocab_from', "the first word must be '%s'", EOS) end
  if not index[UNK] then err('vocab_from', "the vocabulary must contain '%s'", UNK) end
  return { words = words, index = index, counts = counts, size = #words }
end

-- tgl.lm.read(path, vocab) -> ids (an int64 tgl.array), n: the file as word
-- ids, each line ended by '</s>' (empty lines skipped), words not in the
-- vocabulary read as '<unk>'.
function M.read(path, vocab)
  if type(vocab) ~= 'table' or not vocab.index then err('read', 'needs a vocabulary (tgl.lm.vocab)') end
  local idx, unk = vocab.index, vocab.index[UNK]
  local buf, n = {}, 0
  each_word('read', path, function(w)
    n = n + 1
    buf[n] = idx[w] or unk
  end)
  local a = tgl.zeros(math.max(n, 1), { dtype = 'int64' })
  local p = ffi.cast('int64_t *', a:data())
  for i = 1, n do p[i - 1] = buf[i] end
  return a, n
end

-- tgl.lm.classes(counts, nclass [, {unigram=true}]) -> cl: RNNLM's
-- frequency-binned classes over ids in order (sorted by count).  Each id
-- takes a share of the mass: sqrt(count / total), normalised (RNNLM's
-- default), or count / total with unigram=true (RNNLM's -old-classes).
-- Walking the ids in order, an id joins the current class, and once the
-- mass so far passes (c / nclass) for the current class c, the next id
-- starts class c + 1 (never past nclass).  So classes hold equal shares of
-- the mass: frequent words sit in small classes, rare ones in big ones.
--   cl.of[id] -> class, cl.first[c], cl.last[c] (its ids), cl.n (classes used)
function M.classes(counts, nclass, opts)
  if type(counts) ~= 'table' or #counts == 0 then err('classes', 'needs a list of counts') end
  if type(nclass) ~= 'number' or nclass < 1 or nclass % 1 ~= 0 then
    err('classes', 'the number of classes must be a positive integer, got %s', tostring(nclass))
  end
  local unigram = opts and opts.unigram
  local total = 0
  for i, c in ipairs(counts) do
    if type(c) ~= 'number' or c < 0 then err('classes', 'count %d is not a count: %s', i, tostring(c)) end
    total = total + c
  end
  local share, norm = {}, 0
  for i, c in ipairs(counts) do
    share[i] = total > 0 and (unigram and c / total or math.sqrt(c / total)) or 1
    norm = norm + share[i]
  end
  local of, first, last = {}, {}, {}
  local cur, mass = 1, 0
  for i = 1, #counts do
    of[i] = cur
    first[cur] = first[cur] or i
    last[cur] = i
    mass = mass + share[i] / norm
    if mass > cur / nclass and cur < nclass and i < #counts then cur = cur + 1 end
  end
  return { of = of, first = first, last = last, n = #first }
end

-- tgl.lm.class_index(cl, targets [, n]) -> cls, tgt, owner, rows: the index
-- arrays of tgl.lm.class_xent for predicting the word ids targets[1..n]
-- (a Lua table or an int64 array): row t's class, the rows of the word
-- matrix its class spans (all rows listed together in rows, 1-based ids),
-- which of them is the target (tgt, a position in rows) and whose they
-- are (owner).  All int64 tgl.arrays.
function M.class_index(cl, targets, n)
  local get
  if type(targets) == 'table' and targets.data then
    local p = ffi.cast('int64_t *', targets:data())
    n = n or targets:size(1)
    get = function(i) return tonumber(p[i - 1]) end
  else
    n = n or #targets
    get = function(i) return targets[i] end
  end
  local K = 0
  for t = 1, n do
    local w = get(t)
    local c = cl.of[w]
    if not c then err('class_index', 'target %d is word id %s, which has no class', t, tostring(w)) end
    K = K + cl.last[c] - cl.first[c] + 1
  end
  local cls, tgt = tgl.zeros(n, { dtype = 'int64' }), tgl.zeros(n, { dtype = 'int64' })
  local owner, rows = tgl.zeros(K, { dtype = 'int64' }), tgl.zeros(K, { dtype = 'int64' })
  local pc, pt = ffi.cast('int64_t *', cls:data()), ffi.cast('int64_t *', tgt:data())
  local po, pr = ffi.cast('int64_t *', owner:data()), ffi.cast('int64_t *', rows:data())
  local k = 0
  for t = 1, n do
    local w = get(t)
    local c = cl.of[w]
    local a, b = cl.first[c], cl.last[c]
    pc[t - 1] = c
    pt[t - 1] = k + w - a + 1
    for id = a, b do po[k] = t; pr[k] = id; k = k + 1 end
  end
  return cls, tgt, owner, rows
end

-- tgl.lm.class_xent(h, Wc, Ws, cls, tgt, owner) -> loss: the class-factored
-- crossentropy, one value per row of h:
--   loss[t] = -log P(cls[t] | h[t]) - log P(word | cls[t], h[t])
-- with P(class) = softmax(Wc . h[t]) and P(word | class) the softmax of
-- Ws[j] . h[t] over the rows j of Ws that owner gives to t; tgt[t] is the
-- target's row in Ws.  Ws is the gathered rows Ww[rows] of the word matrix,
-- so the gradient (and an SGD update, via inc_subtensor) touches only them.
function M.class_xent(h, Wc, Ws, cls, tgt, owner)
  return G.apply('class_xent', 'class_xent', { h, Wc, Ws, cls, tgt, owner }, 6)
end

-- tgl.lm.perplexity(nll, n) -> exp(nll / n): nll a sum of natural-log losses.
function M.perplexity(nll, n)
  return math.exp(nll / n)
end

return M
