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

-- Raises 'tgl.lm.<fname>: ...' at the user's line (the first caller
-- outside tgl's Lua files).
local function err(fname, fmt, ...)
  error(('tgl.lm.%s: ' .. fmt):format(fname, ...), require('tgl.core').user_level())
end

local function open(fname, path)
  if type(path) ~= 'string' then err(fname, 'the path must be a string, got %s', type(path)) end
  local f, msg = io.open(path, 'rb')
  if not f then
    -- io.open's message starts with the path, which the text names already
    err(fname, 'cannot read the corpus file %s (%s)', path, tostring(msg):gsub('^.*: ', ''))
  end
  return f
end

-- Where s stops being UTF-8 text: the 1-based position of the first NUL
-- byte or byte that is not part of a well-formed UTF-8 sequence, and what
-- it is; nil for text.  ASCII lines cost one find.
local function not_text(s)
  local i = s:find('[%z\128-\255]')
  while i do
    local c = s:byte(i)
    if c == 0 then return i, 'a NUL byte' end
    if c < 128 then
      i = i + 1
    else
      -- a lead byte: how many continuation bytes, and the range of the
      -- first (which excludes overlong forms, surrogates, > U+10FFFF)
      local len, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then len = 1
      elseif c == 0xE0 then len, lo = 2, 0xA0
      elseif c == 0xED then len, hi = 2, 0x9F
      elseif c >= 0xE1 and c <= 0xEF then len = 2
      elseif c == 0xF0 then len, lo = 3, 0x90
      elseif c >= 0xF1 and c <= 0xF3 then len = 3
      elseif c == 0xF4 then len, hi = 3, 0x8F
      end
      if len == 0 then return i, ('the byte 0x%02X (not UTF-8)'):format(c) end
      for k = 1, len do
        local b = s:byte(i + k)
        if not b or b < (k == 1 and lo or 0x80) or b > (k == 1 and hi or 0xBF) then
          return i, ('an invalid UTF-8 sequence (0x%02X ...)'):format(c)
        end
      end
      i = i + len + 1
    end
    i = s:find('[%z\128-\255]', i)
  end
end

-- True when s has no NUL byte and no byte above 0x7F (most corpora): a
-- loop the JIT compiles (a pattern with a character class scans about ten
-- times slower).
local function plain_ascii(s)
  local p = ffi.cast('const uint8_t *', s)
  for i = 0, #s - 1 do
    local c = p[i]
    if c == 0 or c >= 128 then return false end
  end
  return true
end

-- Calls fn(word) for each word of the file and fn(EOS) at the end of each
-- line; an empty (or blank) line gives nothing, as RNNLM skips it.  A
-- file that is not UTF-8 text (a binary file given by mistake) is an
-- error naming the first bad byte's offset, before any word of its line.
local function each_word(fname, path, fn)
  local f = open(fname, path)
  local function words_of(line, offset, check)   -- offset: of its first byte, from 0
    if check then
      local at, what = not_text(line)
      if at then
        f:close()
        err(fname, '%s is not a text file: %s at byte offset %d (a corpus is UTF-8 text, one '
            .. 'sentence per line)', path, what, offset + at - 1)
      end
    end
    local any = false
    for w in line:gmatch('%S+') do fn(w); any = true end
    if any then fn(EOS) end
  end
  -- Lines are split here, not by f:lines(), which ends a line at a NUL
  -- byte (a binary file would pass for text).  A block without NUL or
  -- non-ASCII bytes needs no check of its lines; a line longer than a
  -- block is kept in pieces, joined once.
  local pieces, start, dirty = nil, 0, false   -- a line begun in an earlier block
  local base = 0                               -- offset of the block's first byte
  while true do
    local block = f:read(65536)
    if not block then break end
    local check = not plain_ascii(block)
    local pos = 1
    while true do
      local nl = block:find('\n', pos, true)
      if not nl then break end
      if pieces then
        pieces[#pieces + 1] = block:sub(pos, nl - 1)
        words_of(table.concat(pieces), start, dirty or check)
        pieces, dirty = nil, false
      else
        words_of(block:sub(pos, nl - 1), base + pos - 1, check)
      end
      pos = nl + 1
    end
    if pos <= #block then
      if not pieces then pieces, start = {}, base + pos - 1 end
      pieces[#pieces + 1] = block:sub(pos)
      dirty = dirty or check
    end
    base = base + #block
  end
  if pieces then words_of(table.concat(pieces), start, true) end
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

-- tgl.lm.class_xent_sgd(h, Wc, Ww, cls, tgt, owner, rows, lr, beta)
--   -> err, loss, dWc, dWs: RNNLM's output layer trained one word at a
-- time.  For t = 1..T in order, with the weights as the earlier words left
-- them: loss[t] as class_xent, err[t] = d loss[t] / d h[t] (before t's
-- update), then Wc and the rows of t's class take one SGD step of rate
-- lr with L2 decay beta[t] (w <- w (1 - lr beta[t]) - lr d h[t]).  Ww is the
-- whole word matrix, read in place (rows: the 1-based rows of Ww of the K
-- word rows that cls/tgt/owner index, as class_index gives them).  dWc is
-- the change of Wc and dWs (K, H) the change of Ww[rows] (on the first j
-- naming a row; 0 on repeats), so the updates are {Wc, Wc + dWc} and
-- {Ww, tgl.inc_subtensor(Ww[rows], dWs)}; err is the known gradient of h
-- for back-propagation through time (tgl.grad(nil, x, {known_grads=...})).
-- One engine op (class_xent_sgd); no gradient of its own.
function M.class_xent_sgd(h, Wc, Ww, cls, tgt, owner, rows, lr, beta)
  local P = G.apply('class_xent_sgd', 'class_xent_sgd',
                    { h, Wc, Ww, cls, tgt, owner, rows, lr, beta }, 9)
  local T, C = tgl.size(h, 1), tgl.size(Wc, 1)
  return P[{ { 1, T }, { 1, -2 } }], P[{ { 1, T }, -1 }], P[{ { T + 1, T + C }, { 1, -2 } }],
         P[{ { T + C + 1, -1 }, { 1, -2 } }]
end

-- tgl.lm.perplexity(nll, n) -> exp(nll / n): nll a sum of natural-log losses.
function M.perplexity(nll, n)
  return math.exp(nll / n)
end

return M
