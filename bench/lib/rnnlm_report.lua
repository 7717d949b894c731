-- bench/lib/rnnlm_report.lua — `bench/run rnnlm`'s parser and report
-- (driver: bench/lib/rnnlm_run.sh).
--
--   tgl bench/lib/rnnlm_report.lua --header
--       the CSV's header line
--   tgl bench/lib/rnnlm_report.lua --row SYSTEM MODE HIDDEN CLASS TRAIN_WORDS WALL_S CPU_PCT RC TRAIN_LOG [VALID_LOG]
--       one CSV row from one run's output: SYSTEM rnnlm (RNNLM's training
--       output, and for MODE one_iter the output of `rnnlm -test valid`) or
--       tgl (examples/rnnlm.lua's `RESULT ...` line); a run that failed or
--       printed no figure gives a row whose note says why, never a number
--   tgl bench/lib/rnnlm_report.lua rnnlm.csv rnnlm_meta.csv rnnlm.md rnnlm.svg
--       the table (also printed) and the chart
package.path = (arg[0]:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path

local COLS = { 'system', 'mode', 'hidden', 'class', 'train_words', 'vocab', 'threads', 'words_per_s',
               'valid_ppl', 'epochs', 'precision', 'wall_s', 'cpu_pct', 'note' }
local HEADER = table.concat(COLS, ',')

local function slurp(path)
  local f, err = io.open(path, 'rb')
  if not f then error('rnnlm_report.lua: cannot read ' .. path .. ': ' .. tostring(err), 0) end
  local s = f:read('*a')
  f:close()
  return s
end

-- RNNLM's training output.  Progress lines are separated by carriage
-- returns; each is
--   Iter: <i>\tAlpha: <a>\t   TRAIN entropy: <e>    Progress: <p>%   Words/sec: <r>
-- and the epoch's last one has no Progress field; with validation (no
-- -one-iter) the epoch ends in `VALID entropy: <bits>`.  Returns a table:
-- words_per_s (one epoch: its last figure; several: the harmonic mean of
-- each epoch's last figure, i.e. all training words over all training
-- time), epochs, valid_entropy (list), vocab, train_words, or nil and why.
local function parse_rnnlm(text)
  text = text:gsub('\r', '\n')
  local r = { vocab = tonumber(text:match('Vocab size: (%d+)')),
              train_words = tonumber(text:match('Words in train file: (%d+)')), valid_entropy = {} }
  local last, order = {}, {}
  for line in text:gmatch('[^\n]+') do
    local it = tonumber(line:match('Iter:%s*(%d+)'))
    local rate = tonumber(line:match('Words/sec:%s*([%d.]+)'))
    if it and rate then
      if not last[it] then order[#order + 1] = it end
      last[it] = rate
    end
    local ve = tonumber(line:match('VALID entropy:%s*([%d.]+)'))
    if ve then r.valid_entropy[#r.valid_entropy + 1] = ve end
  end
  if #order == 0 then return nil, 'no Words/sec figure in RNNLM\'s output' end
  local inv = 0
  for _, it in ipairs(order) do inv = inv + 1 / last[it] end
  r.words_per_s = #order / inv
  r.epochs = #order
  return r
end

-- `rnnlm -rnnlm MODEL -test FILE`: `PPL net: <ppl>`
local function parse_rnnlm_test(text)
  local p = tonumber(text:match('PPL net:%s*([%d.eE+-]+)'))
  if not p then return nil, 'no "PPL net:" in the output of rnnlm -test' end
  return p
end

-- examples/rnnlm.lua: `RESULT key=value ...` (its last such line)
local function parse_tgl(text)
  local line
  for l in text:gmatch('[^\r\n]+') do if l:match('^RESULT ') then line = l end end
  if not line then return nil, 'no RESULT line in examples/rnnlm.lua\'s output' end
  local r = {}
  for k, v in line:gmatch('([%w_]+)=(%S+)') do r[k] = tonumber(v) or v end
  if type(r.words_per_s) ~= 'number' or type(r.valid_ppl) ~= 'number' then
    return nil, 'RESULT line without numeric words_per_s and valid_ppl'
  end
  return r
end

local function fmt(v)
  if v == nil then return '' end
  if type(v) == 'number' then
    if v == math.floor(v) and math.abs(v) < 1e15 then return ('%d'):format(v) end
    return ('%.6g'):format(v)
  end
  return (tostring(v):gsub('[,\n\r]', ' '))
end

local function row(args)
  local system, mode, hidden, class, twords, wall, cpu, rc, tlog, vlog =
    args[2], args[3], args[4], args[5], args[6], args[7], args[8], args[9], args[10], args[11]
  if not tlog then error('rnnlm_report.lua --row: needs SYSTEM MODE HIDDEN CLASS TRAIN_WORDS WALL_S CPU_PCT RC TRAIN_LOG [VALID_LOG]', 0) end
  if system ~= 'tgl' and system ~= 'rnnlm' then error('rnnlm_report.lua --row: unknown system ' .. system, 0) end
  local r = { system = system, mode = mode, hidden = tonumber(hidden), class = tonumber(class),
              train_words = tonumber(twords), wall_s = tonumber(wall), cpu_pct = tonumber(cpu), threads = 1 }
  local text, note = slurp(tlog), nil
  if system == 'rnnlm' then
    r.precision = 'float64'
    local p, why = parse_rnnlm(text)
    if not p then note = why else
      r.words_per_s, r.epochs, r.vocab = p.words_per_s, p.epochs, p.vocab
      r.train_words = p.train_words or r.train_words
      if #p.valid_entropy > 0 then         -- the lowest: the weights RNNLM keeps
        local best = math.huge
        for _, e in ipairs(p.valid_entropy) do best = math.min(best, e) end
        r.valid_ppl = 2 ^ best
      elseif vlog then
        local ppl, why2 = parse_rnnlm_test(slurp(vlog))
        if ppl then r.valid_ppl = ppl else note = why2 end
      else
        note = 'no validation perplexity'
      end
    end
  else
    local p, why = parse_tgl(text)
    if not p then note = why else
      r.words_per_s, r.valid_ppl, r.epochs = p.words_per_s, p.valid_ppl, p.epochs
      r.precision, r.threads = p.precision, p.threads or 1
      r.vocab = p.vocab
    end
  end
  if tonumber(rc) ~= 0 then
    note = ('exit status %s%s'):format(rc, tonumber(rc) == 124 and ' (timeout)' or '') .. (note and '; ' .. note or '')
    r.words_per_s, r.valid_ppl = nil, nil
  end
  r.note = note
  local out = {}
  for i, c in ipairs(COLS) do out[i] = fmt(r[c]) end
  print(table.concat(out, ','))
end

if arg[1] == '--header' then print(HEADER); return end
if arg[1] == '--row' then row(arg); return end

-- The report.
local peer = require 'peer_common'
local svg = require 'svg'
local csv_path, meta_path, md_path, svg_path = arg[1], arg[2], arg[3], arg[4]
assert(csv_path and meta_path and md_path and svg_path,
       'usage: tgl bench/lib/rnnlm_report.lua rnnlm.csv rnnlm_meta.csv rnnlm.md rnnlm.svg')
local rows = require('csv').read(csv_path)
local meta = peer.read_meta(meta_path)

local out = {}
local function w(...) out[#out + 1] = table.concat({ ... }) end
local function ok(r) return r and type(r.words_per_s) == 'number' and r.words_per_s > 0 end

-- cells in the order they ran: (mode, class, hidden) -> { tgl = row, rnnlm = row }
local cells, order = {}, {}
for _, r in ipairs(rows) do
  local k = r.mode .. '/' .. r.class .. '/' .. r.hidden
  if not cells[k] then
    cells[k] = { mode = r.mode, class = r.class, hidden = r.hidden }
    order[#order + 1] = k
  end
  cells[k][r.system] = r
end

local tprec = meta.tgl_precision or '?'
for _, r in ipairs(rows) do if r.system == 'tgl' and type(r.precision) == 'string' and r.precision ~= '' then tprec = r.precision end end

w('# RNN language model: tgl (examples/rnnlm.lua) and RNNLM')
w('')
w('Made by `bench/run rnnlm` (bench/lib/rnnlm_run.sh). Both systems train on the same corpus with the same ',
  'settings: hidden size and `-class` as in the table (class 1: full softmax), bptt 4, bptt-block 10, ',
  'rand-seed 1, one thread each, pinned to one core; the order of the two alternates from cell to cell. ',
  'One run each per cell: no repeats, so the load average below says how much to trust a ratio. ',
  '**RNNLM** ', meta['version.rnnlm'] and ('(banner v' .. meta['version.rnnlm'] .. ') ') or '',
  'computes in double precision with its own loops (no BLAS)',
  meta.rnnlm_cflags and (', built with `' .. meta.rnnlm_cflags .. '`') or '',
  '; its words/s is its own figure (training words over its CPU time). **tgl** computes in ', tprec,
  '; its words/s and validation perplexity are the ones examples/rnnlm.lua prints. ',
  'Validation perplexity after one epoch: RNNLM\'s from `rnnlm -test valid.txt` on the saved model.')
w('')
peer.write_meta(w, meta)
for _, k in ipairs({ 'corpus', 'max_words', 'max_words_full' }) do
  if meta[k] then w('- ', k, ': ', meta[k]) end
end
w('')

local function ratio(a, b) if ok(a) and ok(b) then return ('%.2f×'):format(a.words_per_s / b.words_per_s) end return '–' end
local function pratio(a, b)
  if ok(a) and ok(b) and type(a.valid_ppl) == 'number' and type(b.valid_ppl) == 'number' then
    return ('%.3f'):format(a.valid_ppl / b.valid_ppl)
  end
  return '–'
end
local function wps(r) if not r then return 'not run' end if ok(r) then return ('%.0f'):format(r.words_per_s) end return 'failed' end
local function ppl(r) if ok(r) and type(r.valid_ppl) == 'number' then return ('%.2f'):format(r.valid_ppl) end return '–' end

for _, mode in ipairs({ 'one_iter', 'converge' }) do
  local any = false
  for _, k in ipairs(order) do if cells[k].mode == mode then any = true end end
  if any then
    w(mode == 'one_iter' and '## One epoch' or '## To convergence (RNNLM\'s schedule)')
    w('')
    w('**tgl/RNNLM**: tgl\'s words/s over RNNLM\'s (above 1: tgl faster). **ppl tgl/RNNLM**: the ratio of the ',
      'validation perplexities (below 1: tgl\'s model is better). **CPU %**: CPU time over elapsed time of each ',
      'whole process (bash `time`): RNNLM times itself in CPU time, tgl in elapsed time, so on a busy machine ',
      '(CPU % well under 100 for tgl) the ratio is unfair to tgl.')
    w('')
    w('| class | hidden | train words | vocab | tgl words/s | RNNLM words/s | tgl/RNNLM | tgl valid ppl | RNNLM valid ppl | ppl tgl/RNNLM | epochs tgl, RNNLM | CPU % tgl, RNNLM | note |')
    w('|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|')
    for _, k in ipairs(order) do
      local c = cells[k]
      if c.mode == mode then
        local t, n = c.tgl, c.rnnlm
        local any_row = t or n
        local notes = {}
        if t and t.note and t.note ~= '' then notes[#notes + 1] = 'tgl: ' .. t.note end
        if n and n.note and n.note ~= '' then notes[#notes + 1] = 'RNNLM: ' .. n.note end
        local vocab = (n and type(n.vocab) == 'number' and n.vocab) or (t and type(t.vocab) == 'number' and t.vocab) or '–'
        local function cpu(r) return r and type(r.cpu_pct) == 'number' and ('%d'):format(r.cpu_pct) or '–' end
        w(('| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s, %s | %s, %s | %s |'):format(c.class, c.hidden,
          any_row.train_words or '–', vocab, wps(t), wps(n), ratio(t, n), ppl(t), ppl(n), pratio(t, n),
          t and t.epochs ~= '' and t.epochs or '–', n and n.epochs ~= '' and n.epochs or '–', cpu(t), cpu(n),
          table.concat(notes, '; ')))
      end
    end
    w('')
  end
end

local text = table.concat(out, '\n') .. '\n'
local f = assert(io.open(md_path, 'w'))
f:write(text)
f:close()
io.write(text)

-- The chart: words/s per hidden size, one panel per class count, log scale.
local COLOR = { tgl = '#1f77b4', rnnlm = '#d62728' }
local LABEL = { tgl = 'tgl (' .. tprec .. ')', rnnlm = 'RNNLM 0.3e (float64)' }
local classes, cseen = {}, {}
for _, k in ipairs(order) do
  local c = cells[k]
  if c.mode == 'one_iter' and not cseen[c.class] then cseen[c.class] = true; classes[#classes + 1] = c.class end
end
local lo, hi = math.huge, 0
for _, r in ipairs(rows) do
  if r.mode == 'one_iter' and ok(r) then lo = math.min(lo, r.words_per_s); hi = math.max(hi, r.words_per_s) end
end
local PW, PH, ML, MT = 380, 260, 70, 50
local W, H = ML + #classes * (PW + 30) + 20, MT + PH + 80
local doc = svg.new(math.max(W, 420), H)
doc:text(math.max(W, 420) / 2, 22, 'RNN LM training speed, one epoch, one thread: words/s (log scale; higher is better)',
  { size = 14, anchor = 'middle', weight = 'bold' })
if hi == 0 then
  doc:text(math.max(W, 420) / 2, H / 2, 'no figures (see rnnlm.md)', { anchor = 'middle' })
else
  local d0, d1 = math.floor(math.log10(lo)), math.ceil(math.log10(hi))
  if d1 == d0 then d1 = d0 + 1 end
  for ci, cl in ipairs(classes) do
    local px, py = ML + (ci - 1) * (PW + 30), MT
    local function Y(v) return py + PH - (math.log10(v) - d0) / (d1 - d0) * PH end
    doc:text(px + PW / 2, py - 8, cl == 1 and 'class 1 (full softmax)' or ('class ' .. cl), { size = 12, anchor = 'middle' })
    for d = d0, d1 do
      local yy = Y(10 ^ d)
      doc:line(px, yy, px + PW, yy, { stroke = '#ddd' })
      doc:text(px - 6, yy + 4, ('%g'):format(10 ^ d), { size = 10, anchor = 'end' })
    end
    doc:line(px, py + PH, px + PW, py + PH, { stroke = '#333' })
    doc:line(px, py, px, py + PH, { stroke = '#333' })
    local hs = {}
    for _, k in ipairs(order) do
      local c = cells[k]
      if c.mode == 'one_iter' and c.class == cl then hs[#hs + 1] = c end
    end
    local gw = PW / math.max(1, #hs)
    for hi_, c in ipairs(hs) do
      local gx = px + (hi_ - 1) * gw + 8
      local bw = (gw - 16) / 2
      for si, s in ipairs({ 'tgl', 'rnnlm' }) do
        local r = c[s]
        if ok(r) then
          local yy = Y(r.words_per_s)
          doc:rect(gx + (si - 1) * bw, yy, math.max(1, bw - 1), py + PH - yy,
            { fill = COLOR[s], title = ('%s hidden %d class %d: %.0f words/s'):format(LABEL[s], c.hidden, cl, r.words_per_s) })
        end
      end
      doc:text(gx + bw, py + PH + 14, 'hidden ' .. c.hidden, { size = 11, anchor = 'middle' })
    end
  end
end
local lx = ML
for _, s in ipairs({ 'tgl', 'rnnlm' }) do
  doc:rect(lx, H - 30, 12, 12, { fill = COLOR[s] })
  doc:text(lx + 17, H - 20, LABEL[s], { size = 12 })
  lx = lx + 220
end
doc:save(svg_path)
