-- corpus.lua — builds the text corpora of the RNN language model
-- (examples/rnnlm.lua, bench/run rnnlm) in RNNLM's format: one sentence a
-- line, words separated by single spaces.  Deterministic: the same bytes on
-- every run.
--
--   build/tgl scripts/corpus.lua fortunes OUTDIR [--vocab 10000] [--src DIR]
--   build/tgl scripts/corpus.lua zipf OUTDIR --vocab V --words N [--seed S]
--
-- fortunes: the plain-text files of Debian's `fortunes` package
--   (/usr/share/games/fortunes/*, not the .dat/.u8 indexes nor the two
--   ASCII-art files), in name order; each fortune's lines joined,
--   lower-cased, split into words (letters, digits and inner apostrophes)
--   and punctuation marks (each its own token), then into sentences after
--   `.`, `!` or `?` (one with no word is dropped).  Sentence i (counted from 0 over the whole text) goes
--   to valid.txt when i % 20 == 10, to test.txt when i % 20 == 15, else to
--   train.txt.  The vocabulary is the (--vocab - 1) most frequent training
--   words (ties in byte order) plus <unk>, which replaces every other word
--   in all three files.
-- zipf: V words w1..wV drawn with P(w_k) proportional to 1/k (Zipf's law),
--   sentence lengths uniform in 4..24, from a Park-Miller generator seeded
--   with S (default 1): N training words, N/10 validation and N/10 test
--   words (sentence ends not counted).  For timing at a chosen vocabulary.

local function usage(msg)
  io.stderr:write('corpus.lua: ' .. msg .. '\n' ..
    'usage: corpus.lua fortunes OUTDIR [--vocab 10000] [--src DIR]\n' ..
    '       corpus.lua zipf OUTDIR --vocab V --words N [--seed S]\n')
  os.exit(2)
end

local args = arg or {}
local cmd, outdir = args[1], args[2]
if cmd ~= 'fortunes' and cmd ~= 'zipf' then usage('unknown corpus ' .. tostring(cmd)) end
if not outdir then usage('missing OUTDIR') end
local opt = { vocab = 10000, seed = 1, src = '/usr/share/games/fortunes' }
local i = 3
while i <= #args do
  local k, v = args[i], args[i + 1]
  local name = k:match('^%-%-(.+)$')
  if not name or v == nil then usage('bad option ' .. k) end
  if name == 'src' then
    opt.src = v
  elseif name == 'vocab' or name == 'words' or name == 'seed' then
    opt[name] = tonumber(v)
    if not opt[name] or opt[name] < 1 or opt[name] % 1 ~= 0 then
      usage('--' .. name .. ' needs a positive integer, got ' .. v)
    end
  else
    usage('unknown option ' .. k)
  end
  i = i + 2
end

assert(os.execute(("mkdir -p '%s'"):format(outdir:gsub("'", "'\\''"))) == 0 or true)

local function write_lines(path, lines)
  local f, err = io.open(path, 'wb')
  if not f then error('corpus.lua: cannot write ' .. path .. ': ' .. tostring(err), 0) end
  for _, l in ipairs(lines) do f:write(l, '\n') end
  f:close()
end

local function count_words(lines)
  local n = 0
  for _, l in ipairs(lines) do for _ in l:gmatch('%S+') do n = n + 1 end end
  return n
end

local function report(sets, vocab)
  for _, name in ipairs({ 'train', 'valid', 'test' }) do
    local lines = sets[name]
    write_lines(outdir .. '/' .. name .. '.txt', lines)
    print(('%s/%s.txt: %d sentences, %d words'):format(outdir, name, #lines, count_words(lines)))
  end
  print(('vocabulary: %d words'):format(vocab))
end

-- ---------------------------------------------------------------------------
if cmd == 'fortunes' then
  -- the plain-text files, in name order
  local p = io.popen(("ls -1 '%s' 2>/dev/null"):format(opt.src))
  local names = {}
  for name in p:lines() do
    if not name:find('%.') and name ~= 'art' and name ~= 'ascii-art' then names[#names + 1] = name end
  end
  p:close()
  table.sort(names)
  if #names == 0 then
    error('corpus.lua: no fortune files in ' .. opt.src ..
          " (install Debian's fortunes package: apt-get install fortunes)", 0)
  end
  -- tokenise each fortune, then cut into sentences
  local sentences, cur = {}, {}
  -- a sentence without a word (a lone "!" after "?!") is dropped
  local function flush()
    for _, w in ipairs(cur) do
      if w:match('[%a%d]') then sentences[#sentences + 1] = cur; break end
    end
    cur = {}
  end
  local function tokenise(text)
    text = text:lower()
    local pos = 1
    while pos <= #text do
      local s, e = text:find('^[%a%d]+', pos)
      if s then
        -- a word, with inner apostrophes (don't, o'clock)
        while text:sub(e + 1, e + 1) == "'" and text:sub(e + 2, e + 2):match('[%a%d]') do
          local _, e2 = text:find('^[%a%d]+', e + 2)
          e = e2
        end
        cur[#cur + 1] = text:sub(s, e)
        pos = e + 1
      else
        local c = text:sub(pos, pos)
        if c:match('%s') or c:byte() >= 128 or c:byte() < 32 then
          pos = pos + 1
        else
          -- runs of the same mark are one token (!!!, ...)
          local _, e2 = text:find('^' .. (c:match('%p') and '%' .. c or c) .. '+', pos)
          cur[#cur + 1] = c
          pos = e2 + 1
          if c == '.' or c == '!' or c == '?' then flush() end
        end
      end
    end
  end
  for _, name in ipairs(names) do
    local f = assert(io.open(opt.src .. '/' .. name, 'rb'))
    local buf = {}
    for line in f:lines() do
      if line == '%' then
        tokenise(table.concat(buf, ' ')); flush(); buf = {}
      else
        buf[#buf + 1] = line
      end
    end
    tokenise(table.concat(buf, ' ')); flush()
    f:close()
  end
  local sets = { train = {}, valid = {}, test = {} }
  local counts = {}
  local split = {}
  for k, s in ipairs(sentences) do
    local r = (k - 1) % 20
    local name = r == 10 and 'valid' or r == 15 and 'test' or 'train'
    split[k] = name
    if name == 'train' then for _, w in ipairs(s) do counts[w] = (counts[w] or 0) + 1 end end
  end
  local words = {}
  for w in pairs(counts) do words[#words + 1] = w end
  table.sort(words, function(a, b)
    if counts[a] ~= counts[b] then return counts[a] > counts[b] end
    return a < b
  end)
  local keep = {}
  for k = 1, math.min(#words, opt.vocab - 1) do keep[words[k]] = true end
  for k, s in ipairs(sentences) do
    local out = {}
    for j, w in ipairs(s) do out[j] = keep[w] and w or '<unk>' end
    local lines = sets[split[k]]
    lines[#lines + 1] = table.concat(out, ' ')
  end
  report(sets, math.min(#words, opt.vocab - 1) + 1)

-- ---------------------------------------------------------------------------
else
  if not opt.words then usage('zipf needs --words N') end
  local V = opt.vocab
  local state = opt.seed % 2147483646 + 1
  local function rand()   -- Park-Miller minimal standard, exact in doubles
    state = (16807 * state) % 2147483647
    return state / 2147483647
  end
  local cum, total = {}, 0
  for k = 1, V do total = total + 1 / k; cum[k] = total end
  local function word()
    local u = rand() * total
    local lo, hi = 1, V
    while lo < hi do
      local mid = math.floor((lo + hi) / 2)
      if cum[mid] < u then lo = mid + 1 else hi = mid end
    end
    return 'w' .. lo
  end
  local function make(n)
    local lines, done = {}, 0
    while done < n do
      local len = math.min(4 + math.floor(rand() * 21), n - done)
      local s = {}
      for j = 1, len do s[j] = word() end
      lines[#lines + 1] = table.concat(s, ' ')
      done = done + len
    end
    return lines
  end
  local sets = { train = make(opt.words) }
  sets.valid = make(math.max(1, math.floor(opt.words / 10)))
  sets.test = make(math.max(1, math.floor(opt.words / 10)))
  report(sets, V)
end
